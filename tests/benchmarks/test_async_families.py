"""`benchmarks/async_families.py` and the docs table rendered from its JSON (`<!-- registry: async-families -->`).

The renderer and the runs' configs are checked in the default tier; one tiny end-to-end run of the script is slow."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "docs", "_hooks"))

import registry_tables  # noqa: E402  (docs/_hooks: the site's MkDocs hook)


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location(
        "async_families_benchmark", os.path.join(ROOT, "benchmarks", "async_families.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _summary(reward, step, seconds, rate, staleness, generate=None, fwd_bwd=None):
    return {
        "final_held_out_reward": reward, "steps_to_threshold": step, "seconds_to_threshold": seconds,
        "samples_per_s": rate, "mean_staleness": staleness, "median_generate_s": generate, "median_fwd_bwd_s": fwd_bwd,
    }  # fmt: skip


def _data() -> dict:
    return {
        "settings": {
            "commit": "0123456789abcdef",
            "torch": "2.13.0",
            "cpu_count": 2,
            "steps": 150,
            "seed": 0,
            "max_staleness": 1,
            "threshold": 0.8,
            "scenarios": {"toy": {"max_completion_length": 8}},
        },
        "algorithms": {"grpo": {"family": "grpo", "refused": None}, "ppo": {"family": "critic", "refused": "a critic"}},
        "failed": {},
        "summary": {
            "toy": {
                "grpo": {
                    "sync": _summary(0.99, 50, 3.5, 2000.0, None),
                    "async": _summary(0.975, None, None, 2500.0, 1.96, 0.031, 0.0425),
                }
            }
        },
        "runs": {"toy": {"grpo": {"sync": {"other_processes_cores": 0.1}, "async": {"other_processes_cores": 0.25}}}},
    }


def test_the_docs_table_is_rendered_from_the_json(tmp_path, monkeypatch):
    lines = registry_tables.async_families_table(_data()).splitlines()
    assert lines[0].startswith("Measured at commit `0123456789` (torch 2.13.0, 2 CPUs): 150 optimizer steps")
    assert "at most 0.25 cores meanwhile" in lines[0]
    rows = [line for line in lines if line.startswith("| toy")]
    assert rows == [
        "| toy (8 tokens) | `grpo` | sync | 0.990 | 50 | 3.5 | 2000 | — | — | — |",
        "| toy (8 tokens) | `grpo` | async | 0.975 | — | — | 2500 | 1.25 | 1.96 | 0.03 / 0.04 |",
    ]
    assert lines[-1] == "Not run (no asynchronous form): `ppo`: a critic."
    failed = {**_data(), "failed": {"toy grpo async": "RuntimeError: the worker | died"}}
    assert registry_tables.async_families_table(failed).endswith(
        "Failed runs: toy grpo async: RuntimeError: the worker \\| died."
    )

    # The directive: absent JSON said plainly; present, the table with its plot linked from the page.
    monkeypatch.setattr(registry_tables, "ROOT", str(tmp_path))
    absent = registry_tables.render("async-families", base="../")
    assert absent.startswith("*No measurements yet: `docs/async_families.json` is absent.")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "async_families.json").write_text(json.dumps(_data()))
    assert "![" not in registry_tables.render("async-families", base="../")  # no plot beside it
    (tmp_path / "docs" / "async_families.png").write_bytes(b"png")
    rendered = registry_tables.refresh_blocks("<!-- registry: async-families -->", base="../")
    assert "](../async_families.png)\n\n| scenario | algorithm | run |" in rendered
    other = tmp_path / "elsewhere.json"
    other.write_text(json.dumps(_data()))
    assert "| toy (8 tokens) | `grpo` | async |" in registry_tables.render("async-families", f"path={other}")


def test_each_run_is_the_algorithms_own_config_with_the_toy_training(bench):
    from trl_ext import get_algorithm
    from trl_ext.trainers.asynchronous.trainer import AsyncGRPOTrainer

    config, trainer = bench.make_config("dapo", "sync", "toy", 3, 0, "/tmp/unused", 1)
    assert (type(config), trainer) == (get_algorithm("dapo").config_class, get_algorithm("dapo").trainer_class)
    assert config.dynamic_sampling and config.overlong_buffer == 4 and config.dynamic_sampling_max_rounds == 30
    assert (config.max_steps, config.per_device_train_batch_size, config.max_completion_length) == (3, 128, 8)
    config, trainer = bench.make_config("dapo", "async", "long", 3, 0, "/tmp/unused", 1)
    assert type(config).__name__ == "AsyncDAPOConfig" and trainer is AsyncGRPOTrainer
    assert (config.max_staleness, config.rollout_num_threads, config.lr_scheduler_type) == (1, 1, "linear")
    assert (config.per_device_train_batch_size, config.max_completion_length, config.overlong_buffer) == (32, 48, 24)
    assert config.activation_checkpointing is False and config.clip_range_high == 0.28
    config, trainer = bench.make_config("gigpo", "async", "agent", 3, 0, "/tmp/unused", 1)
    assert type(config).__name__ == "AsyncGiGPOConfig" and trainer is AsyncGRPOTrainer
    assert (config.per_device_train_batch_size, config.max_completion_length, config.learning_rate) == (64, 48, 5e-4)
    assert config.max_tool_calling_iterations == 2 and config.num_generations == 8
    assert bench.scenario_algorithms("agent", bench.default_algorithms()) == ["multi_step_grpo", "gigpo"]
    assert "gigpo" not in bench.scenario_algorithms("toy", bench.default_algorithms())
    assert bench.refusal("dpo") is not None and bench.refusal("no_such_algorithm").startswith("not a registered")
    assert bench.refusal("sapo") is None and bench.default_algorithms()[:2] == ["grpo", "sapo"]
    with pytest.raises(ValueError, match="--scenarios: unknown short"):
        bench.parse_list("toy,short", "--scenarios", bench.SCENARIOS)


@pytest.mark.slow
def test_a_tiny_run_writes_the_json_the_docs_render(toy_cache, tmp_path):
    out = str(tmp_path / "families")
    args = ["--algorithms", "grpo,gigpo,dpo", "--scenarios", "toy,agent", "--steps", "4", "--eval_every", "2"]
    args += ["--out", out]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "async_families.py"), *args],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    data = json.load(open(out + ".json"))
    assert data["algorithms"]["grpo"]["refused"] is None and data["algorithms"]["gigpo"]["refused"] is None
    assert "fixed dataset" in data["algorithms"]["dpo"]["refused"]
    assert data["failed"] == {} and set(data["runs"]) == {"toy", "agent"} and set(data["runs"]["toy"]) == {"grpo"}
    assert set(data["runs"]["agent"]) == {"gigpo"}  # the agents train the tool task only
    for mode, run in data["runs"]["agent"]["gigpo"].items():
        assert run["eval"]["steps"] == [0, 2, 4] and all(0.0 <= r <= 1.0 for r in run["eval"]["reward"]), mode
    assert len({data["runs"]["agent"]["gigpo"][mode]["eval"]["reward"][0] for mode in ("sync", "async")}) == 1
    for mode, run in data["runs"]["toy"]["grpo"].items():
        assert run["steps"] == [1, 2, 3, 4] and run["eval"]["steps"] == [0, 2, 4], mode
        assert all(0.0 <= reward <= 1.0 for reward in run["eval"]["reward"])
        assert 0 < run["seconds"][0] < run["seconds"][-1] == run["train_seconds"]
        assert run["trained_samples"] == 4 * 128 and run["other_processes_cores"] >= 0
    sync, stale = data["summary"]["toy"]["grpo"]["sync"], data["summary"]["toy"]["grpo"]["async"]
    assert sync["samples_per_s"] > 0 and stale["samples_per_s"] > 0
    # max_staleness 1, and a sample is trained one version after TRL checks it (accelerate collates one ahead)
    assert sync["mean_staleness"] is None and 0 <= stale["mean_staleness"] <= 2
    assert stale["median_generate_s"] > 0 and stale["median_fwd_bwd_s"] > 0
    first = [data["runs"]["toy"]["grpo"][mode]["eval"]["reward"][0] for mode in ("sync", "async")]
    assert first[0] == first[1]  # the same initial policy, the same seeded held-out samples
    assert data["settings"]["max_staleness"] == 1 and data["settings"]["threshold"] == 0.8
    assert os.path.getsize(out + ".png") > 10_000
    assert registry_tables.async_families_table(data) in result.stdout  # the printed table is the docs'
