"""The GPU check's parts that run without a GPU: `benchmarks/gpu_report.py` at its tiny shape on CPU writes its figures
as JSON (every requested row, its ratios and targets, the same numbers as its Markdown table; the distillation rows
share TRL's runs, the ppo row breaks its step down), refuses unknown rows naming the allowed ones, says which rows
`--time-limit` cut; `benchmarks/gpu_check.sh` refuses unknown options."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCHMARKS = os.path.join(ROOT, "benchmarks")


@pytest.fixture
def gpu_report(monkeypatch):
    """The `gpu_report` module, imported from benchmarks/ (its sibling modules found there too)."""
    monkeypatch.syspath_prepend(BENCHMARKS)
    import gpu_report

    return gpu_report


ROWS = ["distillation", "ppo", "multi_turn", "sapo", "dpo"]
"""The rows of the tiny run: every kind of row (a group of four trainers sharing TRL's runs, critic PPO against
trl_ext's GRPO with its step broken down, the toy agent's episodes, a TRL-equivalent algorithm, DPO)."""


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory, tiny_model, tiny_agent) -> tuple[dict, str]:
    """One real run of the report at the tiny shape (CPU), as gpu_check.sh runs it but without warm-up steps: its JSON
    and its Markdown."""
    out = tmp_path_factory.mktemp("gpu_report")
    md, js = out / "report.md", out / "report.json"
    command = [sys.executable, os.path.join(BENCHMARKS, "gpu_report.py"), "--shape", "tiny", "--rows", ",".join(ROWS)]
    command += ["--rounds", "2", "--steps", "1", "--warmup", "0", "--output", str(md), "--json", str(js)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXT_CACHE": os.path.dirname(tiny_model)}  # the built toys
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(js.read_text()), md.read_text()


SUB_ROWS = ["distillation[k=0]", "distillation[k=64]", "distillation[k=-1]"]


@pytest.mark.slow  # the report's run: ~80 s on 2 cores
def test_report_json_holds_every_requested_row_with_its_ratios(tiny_report):
    """The JSON has the requested rows in order (a group's sub-rows expanded), each side's runs and step times,
    ratios of the measured medians inside their interval, and the Markdown table shows the same numbers."""
    data, md = tiny_report
    rows = [*SUB_ROWS, *ROWS[1:]]
    assert list(data["rows"]) == rows and data["not_measured"] == [] and data["left_out"] == []
    assert data["settings"]["rounds"] == 2 and data["device"] == "CPU"
    not_rows = ("| row", "| part", "| generation", "| critic", "| policy")  # the headers, the ppo step's parts
    table = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in md.splitlines()
             if line.startswith("| ") and not line.startswith(not_rows)}  # fmt: skip
    assert list(table) == rows
    for row, figures in data["rows"].items():
        ours, theirs = figures["trl_ext"], figures["trl"]
        for side in (ours, theirs):
            assert side["runs"] == 2 and len(side["step_times_s"]) == 2 and side["peak_gib"] is None  # no CUDA
            assert side["step_s"] > 0 and side["tokens_per_s"] > 0
        low, high = figures["time_ratio_interval"]
        assert figures["time_ratio"] == pytest.approx(ours["step_s"] / theirs["step_s"])
        assert low <= figures["time_ratio"] <= high
        assert figures["tokens_per_s_ratio"] == pytest.approx(ours["tokens_per_s"] / theirs["tokens_per_s"])
        assert figures["memory_ratio"] is None
        ratio, interval = (cell.strip() for cell in table[row][2:4])
        assert ratio == f"{figures['time_ratio']:.3f}" and interval == f"{low:.2f}-{high:.2f}"


@pytest.mark.slow  # the report's run: ~80 s on 2 cores
def test_distillation_rows_share_trls_runs(tiny_report):
    """trl.DistillationTrainer and OnPolicyDistillTrainer at teacher_top_k 0, 64 and -1: each sub-row against the same
    TRL runs, with k=64's targets (step time <= 0.80, memory <= 0.50) and none for the others."""
    data, md = tiny_report
    rows = data["rows"]
    assert rows["distillation[k=0]"]["trl"] == rows["distillation[k=64]"]["trl"] == rows["distillation[k=-1]"]["trl"]
    assert rows["distillation[k=0]"]["target"] is None and rows["distillation[k=-1]"]["target"] is None
    target = rows["distillation[k=64]"]["target"]
    assert (target["time_ratio"], target["memory_ratio"], target["memory"]) == (0.8, 0.5, "not measured")
    assert target["time"] in ("met", "missed", "not told apart")
    targets = {line.split(":")[0][2:]: line for line in md.splitlines() if line.startswith("- distillation")}
    assert set(targets) == set(SUB_ROWS) and targets["distillation[k=0]"].endswith("no target")


@pytest.mark.slow  # the report's run: ~80 s on 2 cores
def test_ppo_row_breaks_the_critic_out_against_grpo(tiny_report):
    """Critic PPO against trl_ext's GRPO on the same completions: only PPO spends time in a critic, and both sides
    generate and train a policy."""
    data, md = tiny_report
    assert "ppo (critic PPO) runs against trl_ext's GRPO" in md
    assert data["rows"]["ppo"]["parts"] is not None
    parts = {line.split("|")[1].strip(): [float(x) for x in line.split("|")[2:4]] for line in md.splitlines()
             if line.startswith(("| generation", "| critic", "| policy"))}  # fmt: skip
    assert set(parts) == {"generation", "critic", "policy"}
    assert parts["critic"][0] > 0.0 and parts["critic"][1] < 0.1 * parts["critic"][0]
    assert all(side > 0 for part in ("generation", "policy") for side in parts[part])
    assert all(data["rows"][row]["parts"] is None for row in data["rows"] if row != "ppo")


def test_ratio_interval_brackets_the_ratio(gpu_report):
    ratio_interval = gpu_report.ratio_interval
    theirs = [1.0 + 0.01 * i for i in range(20)]
    assert ratio_interval([2 * t for t in theirs], theirs)[0] > 1.8  # twice as slow: the interval excludes 1
    low, high = ratio_interval(theirs, theirs)
    assert low < 1.0 < high and high - low < 0.3
    assert ratio_interval([3.0] * 5, [1.5] * 5) == (2.0, 2.0)


def test_unknown_row_is_refused_naming_the_allowed_rows(gpu_report, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["gpu_report.py", "--rows", "sapo,agent"])
    with pytest.raises(SystemExit) as exit_info:
        gpu_report.parse_args()
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "--rows: unknown agent; choose from " in error
    allowed = error.split("choose from ")[1].strip().split(", ")
    assert allowed == [*gpu_report.ROWS, *gpu_report.DISTILL_TOP_K] and "multi_turn" in allowed


def test_rows_cut_by_the_time_limit_are_named(gpu_report, tmp_path):
    """A row measured in fewer rounds than asked and a row not measured at all: the Markdown says which, and the
    JSON lists the row without figures."""
    run = {"times": [1.0, 1.1], "tokens": 100, "peak": 0.0, "parts": []}
    results = {(row, kind): [run] * runs for row, runs in (("sapo", 1), ("grpo", 2)) for kind in ("trl_ext", "trl")}
    args = argparse.Namespace(rounds=2, output=str(tmp_path / "r.md"), json=str(tmp_path / "r.json"))
    rows = ["sapo", "grpo", "dpo"]
    figures = gpu_report.measured_figures(results, rows)
    gpu_report.write_report(args, {"device": "CPU", "description": "test"}, figures, rows)
    text = (tmp_path / "r.md").read_text()
    assert "Fewer rounds than 2 (--time-limit): sapo 1." in text and "Not measured (--time-limit): dpo." in text
    assert "| dpo" not in text and "- dpo" not in text
    data = json.loads((tmp_path / "r.json").read_text())
    assert list(data["rows"]) == ["sapo", "grpo"] and data["not_measured"] == ["dpo"]


def test_gpu_check_refuses_unknown_options(tmp_path):
    result = subprocess.run(
        ["bash", os.path.join(BENCHMARKS, "gpu_check.sh"), "--rounds", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2
    assert "unknown option --rounds; allowed: --tiny, --help" in result.stderr
    assert not (tmp_path / "out").exists()  # refused before anything is written
