"""The asynchronous trainer end to end (the offline worker, the reward rising on stale samples) and its bad input:
each refused early, naming what is wrong."""

from __future__ import annotations

import numpy as np
import pytest
from async_helpers import StubTransfer, StubWorker, async_config, stub_trainer
from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

from trl_ext import AsyncGRPOTrainer
from trl_ext.toy import build_tokenizer, toy_dataset, toy_reward
from trl_ext.trainers.asynchronous.samples import check_sample

# ---- the config --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_staleness": -1}, r"max_staleness=-1"),
        ({"weight_sync_steps": 0}, r"weight_sync_steps=0"),
        ({"epsilon": 0.3}, r"epsilon=0.3 is TRL's PPO clip; trl_ext's loss takes it as clip_range_low"),
        ({"epsilon_high": 0.3}, r"epsilon_high=0.3 .* clip_range_high"),
        ({"kl_penalty_fn": "k1"}, r"kl_penalty_fn='k1' .* the rollout worker, which has no reference model"),
        ({"advantage_fn": "clipb"}, r"advantage_fn='clipb'.*logprobs"),
        ({"advantage_fn": "ppo"}, r"advantage_fn='ppo'.*values"),  # GAE: the critic's values (AsyncPPOConfig)
        (
            {"policy_loss_fn": "mix"},
            r"policy_loss_fn='mix' mixes expert demonstrations into the batch, which AsyncGRPOConfig has none of",
        ),
        (
            {"policy_loss_fn": "dpo"},
            r"policy_loss_fn='dpo' cannot train in the async family's trainer: it needs `ref_log",
        ),
        ({"prox_logp_method": "loglinear"}, r"prox_logp_method='loglinear' .* policy_loss_fn='ppo' reads none"),
        ({"prox_logp_method": "rollout"}, r"prox_logp_method='rollout' is not valid; must be one of 'recompute'"),
        (
            {"rollout_backend": "sglang"},
            r"rollout_backend='sglang' is not valid; must be one of 'vllm', 'transformers'",
        ),
        ({"rollout_batch_size": 6}, r"rollout_batch_size=6 must be a multiple of num_generations=4"),
        ({"rollout_is": "seq"}, r"rollout_is"),
        ({"policy_loss_fn_args": {"tau": 1.0}}, r"policy_loss_fn_args has 'tau', which 'ppo' does not take"),
        ({"entropy_loss_fn": "none", "entropy_coef": 0.1}, r"entropy_coef=0.1 is set but entropy_loss_fn='none'"),
    ],
)
def test_a_bad_setting_is_refused_when_the_config_is_made(overrides, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        async_config(str(tmp_path), **overrides)


def test_the_defaults_train_trls_objective(tmp_path):
    config = async_config(str(tmp_path))
    parts = config.components
    assert (config.policy_loss_name, config.advantage_fn_name) == ("ppo", "grpo")
    assert (parts.policy_loss.clip_range_low, parts.policy_loss.clip_range_high) == (0.2, 0.2)  # TRL's epsilon
    assert parts.loss_agg_mode == "token-mean" and config.beta == 0 and config.max_staleness == 4


# ---- the trainer -------------------------------------------------------------------------------------------------


def _closure_reward():
    offset = 1.0

    def reward(completions, **kwargs):
        return [offset] * len(completions)

    return reward


def test_a_reward_that_cannot_reach_the_worker_is_refused_before_the_model_loads(tmp_path):
    with pytest.raises(TypeError, match="reward"):  # "unused/path" is never loaded
        AsyncGRPOTrainer(
            model="unused/path",
            reward_funcs=_closure_reward(),
            args=async_config(str(tmp_path), rollout_backend="transformers"),
            train_dataset=toy_dataset(8),
        )


def test_remax_with_trls_vllm_worker_is_refused_before_the_model_loads(tmp_path):
    """ReMax's config is valid (trl_ext's worker makes the greedy baselines); TRL's vLLM worker makes none."""
    config = async_config(str(tmp_path), advantage_fn="remax")
    assert config.rollout_backend == "vllm"
    with pytest.raises(ValueError, match=r"AsyncGRPOTrainer: advantage_fn='remax' .* rollout_backend='transformers'"):
        AsyncGRPOTrainer(model="unused/path", reward_funcs=toy_reward, args=config, train_dataset=toy_dataset(8))


def test_the_model_is_a_path(random_tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    with pytest.raises(TypeError, match="model must be a path or Hub id"):
        AsyncGRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(random_tiny_model),
            reward_funcs=toy_reward,
            args=async_config(str(tmp_path)),
            train_dataset=toy_dataset(8),
        )


def test_an_eval_dataset_is_refused(random_tiny_model, tmp_path):
    with pytest.raises(ValueError, match="does not evaluate"):
        AsyncGRPOTrainer(
            model=random_tiny_model,
            reward_funcs=toy_reward,
            args=async_config(str(tmp_path)),
            train_dataset=toy_dataset(8),
            eval_dataset=toy_dataset(8),
        )


def _sample(**changes) -> RolloutSample:
    fields = dict(
        prompt="p",
        completion="c",
        input_ids=np.array([5, 6, 7, 8]),
        completion_mask=np.array([0, 0, 1, 1]),
        old_log_probs=np.array([0.0, 0.0, -1.0, -0.5], dtype=np.float32),
        advantage=0.5,
        model_version=1,
        group_id=3,
        metrics={"reward": 1.0},
    )
    return RolloutSample(**{**fields, **changes})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"input_ids": np.array([[5, 6, 7, 8]])}, "input_ids must be a 1-D integer array"),
        ({"input_ids": np.array([5.0, 6.0, 7.0, 8.0])}, "input_ids must be a 1-D integer array"),
        ({"completion_mask": np.array([0, 1, 1])}, "completion_mask has shape"),
        ({"completion_mask": np.array([0, 0, 1, 2])}, "completion_mask must hold only 0 and 1"),
        ({"completion_mask": np.array([0, 0, 0, 0])}, "at least one completion token"),
        ({"completion_mask": np.array([1, 0, 1, 1])}, "at least one completion token after the first"),
        ({"old_log_probs": np.array([0.0, 0.0, np.nan, -0.5])}, "old_log_probs must be finite log-probabilities"),
        ({"old_log_probs": np.array([0.0, 0.0, 0.5, -0.5])}, "old_log_probs must be finite log-probabilities"),
        ({"old_log_probs": np.array([0, 0, -1, 0])}, "old_log_probs must be a float array"),
        ({"advantage": float("inf")}, "advantage must be a finite number"),
        ({"advantage": "high"}, "advantage must be a finite number"),
        ({"model_version": 9}, "model_version must be an integer between 0 and the trainer's current version 2"),
        ({"metrics": None}, "metrics must be a dict"),
    ],
)
def test_a_malformed_sample_is_named(changes, message):
    with pytest.raises(
        ValueError, match=r"MyWorker: malformed rollout sample \(group_id=3, model_version=.*" + message
    ):
        check_sample(_sample(**changes), "MyWorker", current_version=2)
    check_sample(_sample(), "MyWorker", current_version=2)  # the well-formed one passes


def test_the_trainer_stops_on_a_malformed_sample_from_its_worker(random_tiny_model, tmp_path):
    worker = StubWorker()
    for _ in range(8):
        worker.rollout_buffer.put(_sample(advantage=float("nan")))
    trainer = stub_trainer(random_tiny_model, async_config(str(tmp_path)), worker=worker)
    with pytest.raises(ValueError, match=r"StubWorker: malformed rollout sample \(group_id=3.*advantage must be"):
        trainer.train()


def test_a_failed_weight_sync_names_the_transfer_and_the_version(random_tiny_model, tmp_path):
    trainer = stub_trainer(random_tiny_model, async_config(str(tmp_path)), transfer=StubTransfer(fail=True))
    with pytest.raises(RuntimeError, match="weight sync to version 1 failed in StubTransfer: ConnectionError"):
        trainer.train()


def _failing_reward(completions, **kwargs):
    raise ZeroDivisionError("the judge is down")


def test_a_worker_that_dies_stops_training_with_its_error(tiny_model, tmp_path):
    """The offline worker's reward function raises in its process: training stops with the worker's error (TRL's
    health check: the worker, its process, the stage, the exception and the child's traceback), never hangs."""
    config = async_config(str(tmp_path), rollout_backend="transformers", heartbeat_stale_after_s=60, max_steps=3)
    trainer = AsyncGRPOTrainer(
        model=tiny_model, reward_funcs=_failing_reward, args=config, train_dataset=toy_dataset(16)
    )
    with pytest.raises(RuntimeError) as info:
        trainer.train()
    text = f"{info.value} {info.value.__cause__}"
    assert f"TransformersRolloutWorker(pid={trainer.rollout_worker.pid})" in text
    assert "failed while scoring group" in text and "ZeroDivisionError: the judge is down" in text
    assert "_failing_reward" in text  # the child's traceback
    with pytest.raises(RuntimeError, match="the judge is down"):  # reported again on the next check
        trainer.rollout_worker.check_health(300)


# ---- end to end --------------------------------------------------------------------------------------------------


def test_offline_training_on_stale_samples_raises_the_reward(tiny_model, tmp_path):
    """The transformers worker on one core, the trainer on the other: 40 steps of the toy task on samples up to two
    versions old when trained; the reward rises from the toy model's ~0.1."""
    config = async_config(
        str(tmp_path),
        rollout_backend="transformers",
        per_device_train_batch_size=64,
        num_generations=16,
        max_steps=40,
        warmup_steps=2,
        max_grad_norm=0.2,
        max_staleness=1,
    )
    trainer = AsyncGRPOTrainer(
        model=tiny_model,
        reward_funcs=toy_reward,
        args=config,
        train_dataset=toy_dataset(256),
        processing_class=build_tokenizer(),
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 40
    first, last = np.mean([h["reward"] for h in logs[:5]]), np.mean([h["reward"] for h in logs[-5:]])
    assert first < 0.3 and last > first + 0.2, (first, last)  # the criterion of the synchronous learning tests
    trained = [h["trained_staleness_max"] for h in logs]
    assert max(trained) >= 1 and max(trained) <= 2  # stale samples trained, none beyond max_staleness + 1
    assert all(0 <= h["pg_clipfrac"] <= 1 and "policy_loss" in h for h in logs)
