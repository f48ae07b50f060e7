"""The helpers of `benchmarks/async_staleness.py`: run names, evaluation steps, summaries, weight copies, scoring."""

from __future__ import annotations

import importlib.util
import os
import types

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def bench():
    path = os.path.join(ROOT, "benchmarks", "async_staleness.py")
    spec = importlib.util.spec_from_file_location("async_staleness_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parse_runs_keeps_the_order_and_names_what_is_wrong(bench):
    assert bench.parse_runs("async4-m2po, sync,async0") == ["async4-m2po", "sync", "async0"]
    with pytest.raises(ValueError, match=r"--runs: unknown run\(s\) async3; choose among sync, async0"):
        bench.parse_runs("sync,async3")
    with pytest.raises(ValueError, match="--runs names a run twice"):
        bench.parse_runs("sync,sync")
    with pytest.raises(ValueError, match="--runs is empty"):
        bench.parse_runs(" , ")


def test_every_run_is_a_known_trainer_kind_with_valid_overrides(bench):
    for name, (kind, overrides) in bench.RUNS.items():
        config = bench._config(kind, 3, 0, "/tmp/unused", overrides)
        assert config.policy_loss_fn == overrides.get("policy_loss_fn", "ppo"), name
        assert config.loss_agg_mode == "token-mean" and config.max_steps == 3 and config.logging_steps == 1
        assert (config.per_device_train_batch_size, config.num_generations, config.max_completion_length) == (
            128,
            16,
            8,
        )
        assert (config.learning_rate, config.warmup_steps, config.max_grad_norm) == (1e-3, 20, 0.2)
        assert config.lr_scheduler_type == "linear"  # the same schedule: TRL's async config defaults to constant
        assert config.activation_checkpointing is False  # the same forward cost in both trainers
        if kind == "async":
            assert config.max_staleness == overrides["max_staleness"] and config.rollout_num_threads == 1


def test_eval_steps(bench):
    assert bench.eval_steps(150, 10) == list(range(0, 151, 10))
    assert bench.eval_steps(25, 10) == [0, 10, 20, 25]
    assert bench.eval_steps(3, 10) == [0, 3]
    with pytest.raises(ValueError, match=r"every \(--eval_every\) must be an int >= 1"):
        bench.eval_steps(10, 0)
    with pytest.raises(ValueError, match="max_steps must be an int >= 1"):
        bench.eval_steps(0, 5)


def test_first_reaching(bench):
    steps, seconds, rewards = [0, 10, 20, 30], [0.0, 1.5, 3.0, 4.5], [0.1, 0.79, 0.8, 0.95]
    assert bench.first_reaching(steps, seconds, rewards, 0.8) == (20, 3.0)  # >=: reaching it counts
    assert bench.first_reaching(steps, seconds, rewards, 0.9) == (30, 4.5)
    assert bench.first_reaching(steps, seconds, rewards, 0.99) == (None, None)
    with pytest.raises(ValueError, match="one entry per evaluation"):
        bench.first_reaching(steps, seconds[:-1], rewards, 0.8)


def _run(**changes):
    run = {
        "eval": {"steps": [0, 2, 4], "seconds": [0.0, 1.0, 2.5], "reward": [0.1, 0.85, 0.75]},
        "trained_staleness_mean": [0.0, 1.0, 2.0, None],
        "trained_staleness_max": [0.0, 2.0, 3.0, None],
        "dropped_stale": [None, 128.0, None, 256.0],
        "seconds": [0.5, 1.0, 2.0, 2.5],
        "weight_sync_s": [0.1, 0.3, None, 0.2],
        "trained_samples": 512.0,
        "train_seconds": 2.0,
    }
    run.update(changes)
    return run


def test_summarize_by_hand(bench):
    summary = bench.summarize(_run())
    assert summary["final_held_out_reward"] == pytest.approx((0.85 + 0.75) / 2)  # the last two evaluations
    assert (summary["steps_to_threshold"], summary["seconds_to_threshold"]) == (2, 1.0)
    assert summary["samples_per_s"] == pytest.approx(256.0)
    assert summary["mean_staleness"] == pytest.approx(1.0)  # steps without the metric are left out
    assert summary["max_staleness_seen"] == 3.0 and summary["dropped_samples"] == 384.0
    assert summary["median_step_s"] == pytest.approx(0.5)  # step times 0.5, 0.5, 1.0, 0.5
    assert summary["median_weight_sync_s"] == pytest.approx(0.2) and summary["median_rollout_wait_s"] is None
    synchronous = bench.summarize(
        _run(trained_staleness_mean=[None] * 4, trained_staleness_max=[None] * 4, dropped_stale=[None] * 4)
    )
    assert synchronous["mean_staleness"] is None and synchronous["dropped_samples"] == 0
    with pytest.raises(ValueError, match="at least two held-out evaluations"):
        bench.summarize(_run(eval={"steps": [0], "seconds": [0.0], "reward": [0.1]}))


def test_markdown_table(bench):
    sync = bench.summarize(
        _run(trained_staleness_mean=[None] * 4, trained_staleness_max=[None] * 4, dropped_stale=[None] * 4)
    )
    stale = bench.summarize(_run(eval={"steps": [0, 2, 4], "seconds": [0.0, 1.0, 2.5], "reward": [0.1, 0.2, 0.3]}))
    lines = bench.markdown_table({"sync": sync, "async4": stale}).splitlines()
    assert len(lines) == 4 and lines[0].count("|") == lines[1].count("|") == lines[2].count("|") == 8
    assert lines[2] == "| sync | 0.800 | 2 | 1.0 | 256 | — | 0 |"
    assert lines[3] == "| async4 | 0.250 | — | — | 256 | 1.00 | 384 |"


def _tiny(seed: int):
    from trl_ext.toy import build_model, build_tokenizer

    return build_model(build_tokenizer(), seed=seed)


def test_copy_weights_makes_the_models_equal_and_refuses_other_architectures(bench):
    source, target = _tiny(1), _tiny(2)
    state = {name: tensor.clone() for name, tensor in source.state_dict().items()}
    assert any(not torch.equal(state[n], t) for n, t in target.state_dict().items())
    bench.copy_weights(state, target)
    assert all(torch.equal(state[name], tensor) for name, tensor in target.state_dict().items())
    ids = torch.tensor([[5, 6, 7, 8]])
    torch.testing.assert_close(target(ids).logits, source(ids).logits, rtol=0, atol=0)
    missing = {name: t for name, t in state.items() if name != "lm_head.weight"}
    with pytest.raises(ValueError, match=r"missing \['lm_head.weight'\]"):
        bench.copy_weights(missing, target)
    with pytest.raises(ValueError, match=r"unexpected \['extra'\]"):
        bench.copy_weights({**state, "extra": torch.zeros(1)}, target)
    wrong = {**state, "lm_head.weight": torch.zeros(3, 64)}
    with pytest.raises(ValueError, match=r"lm_head.weight has shape \(3, 64\)"):
        bench.copy_weights(wrong, target)


def test_policy_snapshots_copy_the_weights_at_the_evaluation_steps_only(bench):
    model = torch.nn.Linear(2, 2)
    callback = bench.PolicySnapshots({0, 2})
    callback.on_train_begin(None, types.SimpleNamespace(global_step=0), None, model=model)
    for step in (1, 2, 3):
        with torch.no_grad():
            model.weight.add_(1.0)
        callback.on_step_end(None, types.SimpleNamespace(global_step=step), None, model=model)
    assert set(callback.snapshots) == {0, 2} and sorted(callback.seconds) == [1, 2, 3]
    assert callback.seconds[1] <= callback.seconds[2] <= callback.seconds[3]
    # a copy, not a view: the weights at step 2 are the initial ones + 2, not the final ones (+ 3)
    torch.testing.assert_close(callback.snapshots[2]["weight"], callback.snapshots[0]["weight"] + 2.0)


def test_held_out_reward_scores_the_teacher_high_and_pairs_each_sample_with_its_prompt(bench, tiny_model, tiny_teacher):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ext.toy import toy_splits

    test = toy_splits()["test"]
    prompts, targets = list(test["prompt"]), list(test["target"])
    tokenizer = AutoTokenizer.from_pretrained(tiny_teacher)
    teacher = AutoModelForCausalLM.from_pretrained(tiny_teacher)
    student = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert bench.held_out_reward(teacher, tokenizer, prompts, targets) > 0.9
    # Each prompt's samples are scored against its own letter: against the next prompt's (another letter in most
    # rows), the teacher's right answers score only where the two letters agree.
    shifted = targets[1:] + targets[:1]
    agree = sum(a == b for a, b in zip(targets, shifted, strict=True)) / len(targets)
    assert bench.held_out_reward(teacher, tokenizer, prompts, shifted) < agree + 0.1
    student_reward = bench.held_out_reward(student, tokenizer, prompts, targets)
    assert student_reward < 0.4  # the untrained model: about 1/8
    assert bench.held_out_reward(student, tokenizer, prompts, targets) == student_reward  # seeded
