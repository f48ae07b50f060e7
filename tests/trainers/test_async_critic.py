"""Critic PPO in the asynchronous trainer (`trl_ext/trainers/asynchronous/critic.py`): the critic's values on TRL's
packed rows, GAE over the optimizer window, the value loss and the critic's optimizer step.

Run by hand, `python tests/trainers/test_async_critic.py` trains the toy task with `AsyncPPOConfig` (the settings of
test_async_forms.py's learning test) and prints the generated reward's first-5 / last-5 means.
"""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest
import torch
from async_helpers import StubTransfer, StubWorker, make_samples, packed_batch
from trainer_helpers import cpu_config
from transformers import AutoModelForCausalLM

from trl_ext.advantages import get_advantage_fn
from trl_ext.async_rollout.scoring import WINDOW_REWARD_KEY
from trl_ext.trainers.asynchronous.critic import CRITIC_DIR, CRITIC_STATE_FILE, AsyncCriticConfig
from trl_ext.trainers.asynchronous.forms import async_config_class
from trl_ext.trainers.asynchronous.packed_rows import PackedRow

REWARDS = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0, float("nan"), 1.0, 0.25])
"""The eight samples' rewards as the worker stamps them (sample 5: no reward function scored it)."""


def _trainer(model_path: str, output_dir: str, worker=None, **overrides):
    from trl_ext import AsyncGRPOTrainer
    from trl_ext.toy import build_tokenizer, toy_dataset, toy_reward

    config = cpu_config(async_config_class("ppo"), output_dir, token_budget=0, **overrides)
    return AsyncGRPOTrainer(
        model=model_path, reward_funcs=toy_reward, args=config, train_dataset=toy_dataset(16),
        processing_class=build_tokenizer(), rollout_worker=worker or StubWorker(), weight_transfer=StubTransfer(),
    )  # fmt: skip


def _plain_critic(trainer) -> torch.nn.Module:
    """The trainer's critic with plain attention (the same weights), for unpacked per-sample forwards."""
    plain = copy.deepcopy(trainer.critic.model)
    plain.set_attn_implementation("sdpa")
    return plain


def _plain_values(critic, samples) -> tuple[torch.Tensor, torch.Tensor]:
    """`(values [8, T], completion mask [8, T])`: each completion token's V, the critic's output at the position
    before it, from one plain forward per sample."""
    width = max(len(s["input_ids"]) - s["prompt_len"] for s in samples)
    values, mask = torch.zeros(len(samples), width), torch.zeros(len(samples), width, dtype=torch.bool)
    for i, sample in enumerate(samples):
        ids, start = torch.tensor(sample["input_ids"]), sample["prompt_len"]
        out = critic(ids[None]).logits[0, start - 1 : -1, 0].float()
        values[i, : out.numel()], mask[i, : out.numel()] = out, True
    return values, mask


def _grid(batch, name: str) -> torch.Tensor:
    return PackedRow.from_inputs(batch).grid().scatter(batch[name][batch["token_index"] >= 0])


def test_gae_runs_over_the_window_on_the_critics_values_of_the_packed_rows(random_tiny_model, tmp_path):
    """Two micro-batches of four samples: the critic forwarded on the packed rows gives each trained token the value
    of a plain forward of its sample, and GAE over the window equals `ppo`'s `compute` on those values and the
    stamped rewards (advantages whitened over the window's tokens, returns A + V); the unscorable sample gets
    advantage 0 and its own value as its return (no value-loss gradient)."""
    from trl_ext.toy import build_tokenizer

    trainer = _trainer(random_tiny_model, str(tmp_path))
    assert trainer.window_estimator is not None and trainer.group_scorer.estimates_in_window
    tokenizer = build_tokenizer()
    samples = make_samples(tokenizer, AutoModelForCausalLM.from_pretrained(random_tiny_model), seed=3)
    with torch.no_grad():
        values, mask = _plain_values(_plain_critic(trainer), samples)
    scored = torch.isfinite(REWARDS)
    estimator = get_advantage_fn("ppo", **trainer.args.advantage_kwargs())
    result = estimator.compute(
        REWARDS[scored], None, response_mask=mask[scored], values=values[scored], completion_mask=mask[scored]
    )
    advantages, returns = torch.zeros(mask.shape), values.clone()
    advantages[scored], returns[scored] = result.advantages.float(), result.returns.float()
    assert advantages.abs().sum() > 0 and (returns[scored] - values[scored]).abs().sum() > 0

    halves = [packed_batch(samples[i : i + 4], [0.0] * 4, tokenizer.pad_token_id, rewards=REWARDS[i : i + 4].tolist())
              for i in (0, 4)]  # fmt: skip
    trainer.model_version = 1
    trainer._get_num_items_in_batch(halves, trainer.accelerator.device)
    for half, rows in zip(halves, (slice(0, 4), slice(4, 8)), strict=True):
        width = _grid(half, "window_values").size(1)
        expected_grids = {"window_values": values, "window_advantages": advantages, "window_returns": returns}
        for name, expected in expected_grids.items():
            got = _grid(half, name) * mask[rows, :width]
            torch.testing.assert_close(got, expected[rows, :width] * mask[rows, :width], rtol=1e-4, atol=1e-4)
    assert not _grid(halves[1], "window_advantages")[1].any()  # sample 5: unscorable
    logged = trainer.metric_log("train")
    assert logged["critic/returns"][-1] == pytest.approx(float(returns[scored][mask[scored]].mean()), rel=1e-4)


def test_the_value_loss_trains_the_critic_only_and_steps_with_the_policy(random_tiny_model, tmp_path):
    """One micro-batch: the loss's gradient on the critic is that of 0.5·token-mean((V − R)²) on plain forwards
    (V = V_old at the window's start: the clip does not act), and the policy's gradient is the same as without the
    value loss; at the optimizer step the critic's AdamW steps once (its parameters move, its gradient cleared)."""
    from trl_ext.toy import build_tokenizer

    trainer = _trainer(random_tiny_model, str(tmp_path))
    tokenizer = build_tokenizer()
    samples = make_samples(tokenizer, AutoModelForCausalLM.from_pretrained(random_tiny_model), seed=3)
    rewards = torch.nan_to_num(REWARDS, nan=0.0)
    whole = packed_batch(samples, [0.0] * 8, tokenizer.pad_token_id, rewards=rewards.tolist())
    trainer.model_version, trainer.current_gradient_accumulation_steps = 1, 1
    trainer.model.train()
    trainer._get_num_items_in_batch([whole], trainer.accelerator.device)
    returns = _grid(whole, "window_returns")
    loss = trainer.compute_loss(trainer.model, whole)
    loss.backward()
    critic_grad = torch.cat([p.grad.flatten() for p in trainer.critic.model.parameters()])
    policy_grad = torch.cat([p.grad.flatten().clone() for p in trainer.model.parameters() if p.grad is not None])

    plain = _plain_critic(trainer)
    values, mask = _plain_values(plain, samples)
    expected = 0.5 * ((values - returns) ** 2)[mask].mean()
    expected.backward()
    hand = torch.cat([p.grad.flatten() for p in plain.parameters()])
    assert hand.norm() > 0
    assert torch.nn.functional.cosine_similarity(critic_grad, hand, dim=0) >= 0.9999
    torch.testing.assert_close(critic_grad.norm(), hand.norm(), rtol=1e-3, atol=0)

    trainer.model.zero_grad()  # the policy's gradient without the value loss: the same
    trainer.critic.value_term = lambda mode, batch, window, loss, metrics: loss
    trainer._get_num_items_in_batch([whole], trainer.accelerator.device)
    trainer.compute_loss(trainer.model, whole).backward()
    alone = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
    torch.testing.assert_close(policy_grad, alone, rtol=1e-5, atol=1e-7)

    before = [p.detach().clone() for p in trainer.critic.model.parameters()]
    trainer.critic.step()
    assert trainer.critic.steps == 1 and trainer.critic.scheduler.last_epoch == 1
    assert all(p.grad is None for p in trainer.critic.model.parameters())
    assert any(not torch.equal(a, p) for a, p in zip(before, trainer.critic.model.parameters(), strict=True))


def _sample(rng, group_id: int):
    from trl.experimental.async_grpo.async_grpo_trainer import RolloutSample

    length = int(rng.integers(2, 5))
    ids = np.concatenate([[5, 6, 7], rng.integers(10, 60, size=length)])
    reward = float(rng.random())
    return RolloutSample(
        prompt="p", completion="c", input_ids=ids, completion_mask=np.array([0, 0, 0] + [1] * length),
        old_log_probs=np.array([0.0] * 3 + [-2.0] * length, dtype=np.float32), advantage=0.0, model_version=1,
        group_id=group_id, metrics={"reward": reward, WINDOW_REWARD_KEY: reward},
    )  # fmt: skip


def test_the_critic_steps_once_per_optimizer_step_and_is_saved(random_tiny_model, tmp_path):
    """Three optimizer steps of two micro-batches: the critic's optimizer steps three times (`CriticStep`), its
    weights, optimizer and scheduler go into each checkpoint and its weights beside the final model; resuming
    restores them, and a checkpoint without them is refused by name."""
    worker, rng = StubWorker(), np.random.default_rng(0)
    for group in range(32):
        worker.rollout_buffer.put(_sample(rng, group))
    trainer = _trainer(
        random_tiny_model, str(tmp_path), worker=worker, max_steps=3, per_device_train_batch_size=2,
        gradient_accumulation_steps=2, save_steps=3, save_strategy="steps", max_staleness=8,
    )  # fmt: skip
    trainer.train()
    adam_steps = {int(state["step"]) for state in trainer.critic.optimizer.state.values()}
    assert trainer.state.global_step == 3 and adam_steps == {3} and trainer.critic.steps == 3
    assert any("vf_loss" in entry for entry in trainer.state.log_history)
    checkpoint = os.path.join(str(tmp_path), "checkpoint-3")
    assert os.path.isdir(os.path.join(checkpoint, CRITIC_DIR))
    assert os.path.isfile(os.path.join(checkpoint, CRITIC_STATE_FILE))
    assert os.path.isdir(os.path.join(str(tmp_path), CRITIC_DIR))

    weights = {k: v.clone() for k, v in trainer.critic.model.state_dict().items()}
    fresh = _trainer(random_tiny_model, str(tmp_path / "fresh"))
    fresh.critic.resume(checkpoint, str(tmp_path))
    assert fresh.critic.steps == 3 and fresh.critic.scheduler.last_epoch == 3
    for name, value in fresh.critic.model.state_dict().items():
        torch.testing.assert_close(value, weights[name])
    with pytest.raises(ValueError, match=r"has no value_model/ and critic_state\.pt"):
        fresh.critic.resume(str(tmp_path / "fresh"), str(tmp_path))


def test_what_the_asynchronous_critic_cannot_do_is_refused_by_name(random_tiny_model, tmp_path):
    form = async_config_class("ppo")
    assert issubclass(form, AsyncCriticConfig)
    options = {"output_dir": str(tmp_path), "use_cpu": True, "token_budget": 0}
    with pytest.raises(ValueError, match="shared_backbone=True puts a value head"):
        form(**options, shared_backbone=True)
    with pytest.raises(ValueError, match="does not read the critic's values"):
        form(**options, advantage_fn="reinforceplusplus")
    from trl_ext import AsyncGRPOConfig, AsyncGRPOTrainer
    from trl_ext.toy import toy_dataset, toy_reward

    with pytest.raises(ValueError, match=r"needs inputs .* does not provide: values"):
        AsyncGRPOConfig(**options, advantage_fn="ppo")
    with pytest.raises(ValueError, match="value_model is given, but AsyncGRPOConfig trains no critic"):
        AsyncGRPOTrainer(
            model=random_tiny_model, reward_funcs=toy_reward, args=AsyncGRPOConfig(**options),
            train_dataset=toy_dataset(8), rollout_worker=StubWorker(), weight_transfer=StubTransfer(),
            value_model=random_tiny_model,
        )  # fmt: skip


if __name__ == "__main__":  # the learning check by hand (the worker's process is spawned: it re-imports this file)
    import statistics
    import sys
    import tempfile

    from test_async_forms import ASYNC_RUN

    import trl_ext
    from trl_ext.toy import build_tokenizer, tiny_model_path, toy_dataset, toy_reward

    with tempfile.TemporaryDirectory() as out:
        config = async_config_class("ppo")(
            output_dir=out, **ASYNC_RUN, rollout_backend="transformers", token_budget=0, max_staleness=1,
        )  # fmt: skip
        trainer = trl_ext.AsyncGRPOTrainer(
            model=tiny_model_path(), reward_funcs=toy_reward, args=config, train_dataset=toy_dataset(256),
            processing_class=build_tokenizer(),
        )  # fmt: skip
        trainer.train()
        history = trainer.state.log_history
        rewards = [entry["rollout/reward_mean"] for entry in history if "rollout/reward_mean" in entry]
        explained = [entry["critic/explained_variance"] for entry in history if "critic/explained_variance" in entry]
        first, last = statistics.mean(rewards[:5]), statistics.mean(rewards[-5:])
        print(f"AsyncPPOConfig, {trainer.state.global_step} steps: rollout reward first-5 {first:.3f}, last-5 "
              f"{last:.3f}; explained variance first {explained[0]:.3f}, last {explained[-1]:.3f}")  # fmt: skip
        sys.exit(0 if last > first + 0.2 else 1)
