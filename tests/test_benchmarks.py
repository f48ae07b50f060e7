"""The benchmark scripts run (tiny settings) and print / write what the README quotes, so they do not rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(script: str, *args: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", script), *args],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_trainers_benchmark_prints_ratios(toy_cache):
    out = _run("trainers.py", "--algorithms", "grpo", "--rounds", "1", "--steps", "3", "--memory-steps", "1")
    row = next(line for line in out.splitlines() if line.startswith("grpo "))
    time_ratio = float(row.split()[3])
    assert 0.3 < time_ratio < 3.0  # a real ratio of two measured medians
    assert "memory ratio" in out


def test_learning_curves_write_the_plot_and_numbers(toy_cache, tiny_teacher, tmp_path):
    out_prefix = str(tmp_path / "curves")
    out = _run("learning_curves.py", "--algorithms", "sapo,on_policy_distill", "--steps", "3", "--out", out_prefix)
    assert "sapo " in out and "on_policy_distill " in out
    data = json.load(open(out_prefix + ".json"))
    assert set(data["curves"]) == {"sapo", "on_policy_distill"} and data["curves"]["sapo"]["steps"] == [1, 2, 3]
    assert os.path.getsize(out_prefix + ".png") > 10_000
