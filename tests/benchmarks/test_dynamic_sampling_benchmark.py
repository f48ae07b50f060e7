"""The helpers of `benchmarks/dynamic_sampling.py`: seeds, generated completions, median curves, summaries, configs."""

from __future__ import annotations

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def bench():
    path = os.path.join(ROOT, "benchmarks", "dynamic_sampling.py")
    spec = importlib.util.spec_from_file_location("dynamic_sampling_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parse_seeds_keeps_the_order_and_names_what_is_wrong(bench):
    assert bench.parse_seeds("2, 0,1") == [2, 0, 1]
    with pytest.raises(ValueError, match="--seeds is empty"):
        bench.parse_seeds(" , ")
    with pytest.raises(ValueError, match="--seeds must be comma-separated integers >= 0, got '0,a'"):
        bench.parse_seeds("0,a")
    with pytest.raises(ValueError, match="--seeds must be distinct integers >= 0"):
        bench.parse_seeds("0,0")
    with pytest.raises(ValueError, match="--seeds must be distinct integers >= 0"):
        bench.parse_seeds("-1")


def test_generated_completions_per_step_and_so_far(bench):
    logs = [
        {"reward": 0.1},  # plain GRPO: one generation batch
        {"reward": 0.2, "dynamic_sampling/prompts_drawn": 8.0},  # one round of 8 prompts
        {"reward": 0.3, "dynamic_sampling/prompts_drawn": 24.0},  # three rounds
    ]
    per_step = bench.generated_per_step(logs, num_generations=16, generation_batch=128)
    assert per_step == [128, 128, 384]
    so_far = bench.cumulative(per_step)
    assert so_far == [128.0, 256.0, 640.0]
    assert bench.generated_at([1, 2, 3], so_far, [0, 2, 3]) == [0.0, 256.0, 640.0]  # nothing generated at step 0
    with pytest.raises(ValueError, match=r"no running total for step\(s\) \[5\]"):
        bench.generated_at([1, 2, 3], so_far, [0, 5])


def _seed(rewards, generated, dropped=(2.0, 0.0, 4.0), seconds=(0.5, 1.0, 1.5)):
    return {
        "eval": {"steps": [0, 2, 3], "reward": list(rewards), "generated": list(generated)},
        "generated": [128, 256, 384],
        "groups_dropped": list(dropped),
        "seconds": list(seconds),
    }


def test_median_curve_takes_each_evaluation_step_median_over_seeds(bench):
    seeds = [
        _seed([0.1, 0.5, 0.9], [0, 256, 640]),
        _seed([0.2, 0.3, 0.7], [0, 384, 512]),
        _seed([0.0, 0.8, 0.6], [0, 128, 896]),
    ]
    assert bench.median_curve(seeds, "steps") == ([0, 2, 3], [0.1, 0.5, 0.7])
    assert bench.median_curve(seeds, "generated") == ([0, 256, 640], [0.1, 0.5, 0.7])
    other = {"eval": {"steps": [0, 1, 3], "reward": [0, 0, 0], "generated": [0, 0, 0]}}
    with pytest.raises(ValueError, match="evaluated at different steps"):
        bench.median_curve([seeds[0], other], "steps")
    with pytest.raises(ValueError, match="no seeds"):
        bench.median_curve([], "steps")


def test_summaries_by_hand_and_the_table(bench):
    seeds = [
        _seed([0.1, 0.85, 0.9], [0, 256, 640], seconds=(1, 2, 3)),  # reaches 0.8 at step 2, 256 completions
        _seed([0.1, 0.5, 0.95], [0, 384, 512], dropped=(1.0, 1.0, 1.0), seconds=(1, 2, 5)),  # at step 3, 512
        _seed([0.1, 0.9, 0.7], [0, 128, 896], dropped=(3.0, 3.0, 3.0), seconds=(1, 2, 4)),  # at step 2, 128
    ]
    one = bench.summarize_seed(seeds[0])
    assert one["final_held_out_reward"] == 0.9 and (one["steps_to_threshold"], one["generated_to_threshold"]) == (
        2,
        256,
    )
    assert one["generated_per_step"] == pytest.approx(256.0) and one["groups_dropped_per_step"] == pytest.approx(2.0)
    summary = bench.summarize(seeds)
    assert summary["final_held_out_reward"] == 0.9  # median of 0.9, 0.95, 0.7
    assert (summary["steps_to_threshold"], summary["generated_to_threshold"]) == (2, 256)
    assert summary["groups_dropped_per_step"] == pytest.approx(2.0)  # median of 2, 1, 3
    assert summary["train_seconds"] == 4 and summary["seeds"] == 3
    plain = bench.summarize([_seed([0.1, 0.2, 0.3], [0, 256, 384], dropped=(None, None, None))])
    assert plain["groups_dropped_per_step"] is None and plain["steps_to_threshold"] is None  # never reached 0.8
    with pytest.raises(ValueError, match="summarize: no seeds"):
        bench.summarize([])
    lines = bench.markdown_table({"grpo": plain, "grpo+dynamic_sampling": summary}).splitlines()
    assert len(lines) == 4 and all(line.count("|") == 7 for line in lines)
    assert lines[2] == "| grpo | 0.300 | — | — | 256.0 | — |"
    assert lines[3] == "| grpo+dynamic_sampling | 0.900 | 2 | 256 | 256.0 | 2.00 |"


def test_the_two_runs_differ_only_in_dynamic_sampling(bench, tmp_path):
    from trl_ext.toy import DEFAULT_TRAINING

    plain = bench.make_config("grpo", 7, 3, str(tmp_path))
    dynamic = bench.make_config("grpo+dynamic_sampling", 7, 3, str(tmp_path), max_rounds=5)
    assert (plain.dynamic_sampling, dynamic.dynamic_sampling) == (False, True)
    assert dynamic.dynamic_sampling_max_rounds == 5 and plain.dynamic_sampling_max_rounds == 10  # untouched
    assert bench.make_config("grpo+dynamic_sampling", 7, 3, str(tmp_path)).dynamic_sampling_max_rounds == 30
    for config in (plain, dynamic):
        assert (config.max_steps, config.seed, config.logging_steps) == (7, 3, 1)
        assert config.generation_batch_size == 128 and config.num_generations == DEFAULT_TRAINING["num_generations"]
        assert (config.learning_rate, config.warmup_steps, config.max_grad_norm) == (1e-3, 20, 0.2)
        assert config.policy_loss_fn == "ppo" and config.activation_checkpointing is False
    with pytest.raises(ValueError, match="unknown run 'dapo'; choose among grpo, grpo\\+dynamic_sampling"):
        bench.make_config("dapo", 7, 3, str(tmp_path))
