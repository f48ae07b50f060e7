"""The estimators with extra inputs, in the trainers: ReMax's greedy baseline, Clip-B's token filter, JSD as the
distillation advantage, and Clip-V's refusal."""

from __future__ import annotations

import pytest
import torch
import transformers
from trainer_helpers import CPU, cpu_config, length_reward, logged, toy_trainer, train_update

import trl_ext
from trl_ext.toy import tiny_teacher_path


class _RecordingGRPOTrainer(trl_ext.GRPOTrainer):
    """Records each generation call (greedy or sampled, how many prompts) and each ReMax baseline."""

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        self.calls.append((self.generation_config.do_sample, len(prompt_ids), num_generations))
        return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)

    def _greedy_baselines(self, group_ids):
        baselines = super()._greedy_baselines(group_ids)
        self.baselines.append(baselines)
        return baselines


def test_remax_baseline_is_a_greedy_completions_reward(tiny_model, tmp_path):
    config = cpu_config(trl_ext.GRPOConfig, str(tmp_path), advantage_fn="remax", max_steps=1)
    trainer = toy_trainer(_RecordingGRPOTrainer, config, tiny_model)
    trainer.calls, trainer.baselines = [], []
    update = train_update(trainer)
    # 8 sampled rows (2 prompts × 4), then one greedy completion per prompt; sampling is restored afterwards
    assert trainer.calls == [(True, 8, 4), (False, 2, 1)]
    assert trainer.generation_config.do_sample
    (baselines,) = trainer.baselines
    assert baselines.shape == (8,) and torch.equal(baselines[:4], baselines[:1].expand(4))
    # every token of a completion gets R − b (returns of an outcome reward, γ = 1): the table's per-row mean
    rewards = torch.tensor(list(trainer._logs["rewards"]["length_reward"])[-8:])
    advantages = torch.tensor(list(trainer._logs["advantages"])[-8:])
    torch.testing.assert_close(advantages, rewards - baselines, rtol=1e-6, atol=1e-6)
    assert logged(trainer, "advantage/greedy_reward") == [pytest.approx(baselines.mean().item())]
    assert max(u.abs().max().item() for u in update.values()) > 0


def test_remax_refuses_what_cannot_make_a_greedy_completion(tiny_model, tmp_path, monkeypatch):
    # 12 rows per generation, whole groups of 4 on one process: accepted (TRL sets steps_per_generation = 2)
    config = cpu_config(trl_ext.GRPOConfig, str(tmp_path), advantage_fn="remax", per_device_train_batch_size=6,
                        num_generations=4, generation_batch_size=12)  # fmt: skip
    assert config.steps_per_generation == 2
    # the same 12 rows over 2 processes: 6 rows each, a group split across them
    monkeypatch.setattr(transformers.TrainingArguments, "world_size", property(lambda self: 2))
    with pytest.raises(ValueError, match=r"each process's 6 rows .* must be whole groups of num_generations=4"):
        cpu_config(trl_ext.GRPOConfig, str(tmp_path), advantage_fn="remax", per_device_train_batch_size=6,
                   num_generations=4, generation_batch_size=12)  # fmt: skip
    monkeypatch.undo()
    config = cpu_config(trl_ext.GRPOConfig, str(tmp_path), advantage_fn="remax")
    with pytest.raises(ValueError, match=r"advantage_fn='remax' .* cannot be made with rollout_func"):
        trl_ext.GRPOTrainer(model=tiny_model, reward_funcs=lambda completions, **_: [0.0] * len(completions),
                            args=config, rollout_func=lambda prompts, trainer: {})  # fmt: skip


def test_clipb_drops_negative_advantage_tokens_from_the_loss(tiny_model, tmp_path):
    """μ = 0 clips every negative-advantage token whose S = p·(H + log p) is below the batch mean: some are
    dropped, no positive one is; the update differs from GRPO's."""
    updates, trainers = [], []
    for overrides in ({"advantage_fn": "clipb", "advantage_fn_args": {"mu": 0.0}}, {}):
        torch.manual_seed(0)
        config = cpu_config(trl_ext.GRPOConfig, str(tmp_path / str(len(updates))), **overrides)
        trainers.append(toy_trainer(trl_ext.GRPOTrainer, config, tiny_model))
        updates.append(train_update(trainers[-1]))
    clipped = trainers[0]
    assert max(logged(clipped, "advantage/frac_clipped_neg")) > 0
    assert logged(clipped, "advantage/frac_clipped_pos") == [0.0, 0.0]
    assert any(not torch.allclose(updates[0][n], updates[1][n]) for n in updates[0])


def test_clipv_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"advantage_fn='clipv' cannot train .* it needs `necs`.* computes nowhere"):
        trl_ext.GRPOConfig(output_dir="unused", **CPU, advantage_fn="clipv")


def test_jsd_is_the_distillation_advantage(tiny_model, tmp_path):
    """JSD with β = 0 is KL(student ‖ teacher) per token: exactly on-policy distillation's advantage, so the same
    update; with β = 0.5 it trains and logs the reference's metrics."""
    updates = []
    for overrides in ({"advantage_fn": "jsd", "advantage_fn_args": {"lambda_coef": 0.0}}, {}, {"advantage_fn": "jsd"}):
        torch.manual_seed(0)
        config = cpu_config(
            trl_ext.OnPolicyDistillConfig,
            str(tmp_path / str(len(updates))),
            teacher_model_name_or_path=tiny_teacher_path(),
            **overrides,
        )
        trainer = toy_trainer(trl_ext.OnPolicyDistillTrainer, config, tiny_model)
        updates.append(train_update(trainer))
    for name in updates[0]:
        assert torch.equal(updates[0][name], updates[1][name]), name
    assert any(not torch.allclose(updates[2][n], updates[1][n]) for n in updates[1])
    assert len(logged(trainer, "advantage/jsd/mean")) == 2 and logged(trainer, "advantage/jsd/mean")[0] != 0


def test_grpo_rank_penalty_gets_the_sampling_log_probs(tiny_model, tmp_path):
    """`rank_penalty` is a config field: the trainer hands the advantage function the sampling policy's per-token
    log-probs and the loss mask of the whole generation batch, and trains on what it returns."""
    config = cpu_config(trl_ext.GRPOConfig, str(tmp_path), rank_penalty=0.5, max_steps=1)
    trainer = toy_trainer(trl_ext.GRPOTrainer, config, tiny_model)
    calls, compute = [], trainer.advantage_fn.compute

    def recording(*args, **kwargs):
        calls.append((args, kwargs, compute(*args, **kwargs)))
        return calls[-1][2]

    trainer.advantage_fn.compute = recording
    trainer.train()
    (((rewards, _), kwargs, result),) = calls
    assert kwargs["logprobs"].shape == kwargs["response_mask"].shape and kwargs["logprobs"].shape[0] == 8
    assert (kwargs["logprobs"][kwargs["response_mask"]] < 0).all()
    unpenalized = trl_ext.advantages.get_advantage_fn("grpo").compute(rewards, torch.arange(8) // 4).advantages
    assert not torch.allclose(result.advantages, unpenalized)  # the penalty changed the group statistics
    torch.testing.assert_close(torch.tensor(list(trainer._logs["advantages"])[-8:]), result.advantages.float())


def _recording(trainer):
    """Record the keyword inputs the trainer hands its advantage function (and the call's result)."""
    calls, compute = [], trainer.advantage_fn.compute

    def record(rewards, group_ids, **inputs):
        result = compute(rewards, group_ids, **inputs)
        calls.append(({"rewards": rewards, **inputs}, result))
        return result

    trainer.advantage_fn.compute = record
    return calls


def test_gdpo_gets_each_reward_functions_rewards_and_weights(tiny_model, tmp_path):
    def parity_reward(completions, **kwargs):
        return [float(len(c) % 2) for c in completions]

    config = cpu_config(trl_ext.GRPOConfig, str(tmp_path), advantage_fn="gdpo", max_steps=1, reward_weights=[1.0, 0.5])
    trainer = toy_trainer(trl_ext.GRPOTrainer, config, tiny_model, reward_funcs=[length_reward, parity_reward])
    calls = _recording(trainer)
    trainer.train()
    ((inputs, result),) = calls
    # the same per-function rewards as TRL's completions table, and the config's weights
    logged_rewards = [list(trainer._logs["rewards"][name])[-8:] for name in ("length_reward", "parity_reward")]
    torch.testing.assert_close(inputs["reward_components"], torch.tensor(logged_rewards).T)
    torch.testing.assert_close(inputs["reward_weights"], torch.tensor([1.0, 0.5]))
    torch.testing.assert_close(inputs["rewards"], torch.tensor(logged_rewards).T @ torch.tensor([1.0, 0.5]))
    assert result.advantages.shape == inputs["response_mask"].shape


def test_optimal_token_baseline_gets_the_sampling_policys_sum_of_squared_probabilities(tiny_model, tmp_path):
    config = cpu_config(trl_ext.GRPOConfig, str(tmp_path), advantage_fn="optimal_token_baseline", max_steps=1)
    trainer = toy_trainer(trl_ext.GRPOTrainer, config, tiny_model)
    calls = _recording(trainer)
    expected = []
    generate = trainer._generate_round

    def independently(inputs):  # Σ_v softmax(logits / T)² at each completion position, before the update
        output, *rest = generate(inputs)
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        with torch.no_grad():
            logits = trainer.model(input_ids=ids, attention_mask=mask).logits.float()
        width = output["completion_ids"].size(1)
        probs = torch.softmax(logits[:, -width - 1 : -1] / config.temperature, dim=-1)
        expected.append(probs.square().sum(-1) * output["completion_mask"])
        return output, *rest

    trainer._generate_round = independently
    trainer.train()
    ((inputs, result),) = calls
    got = inputs["sum_pi_squared"] * inputs["response_mask"]
    torch.testing.assert_close(got, expected[0], rtol=1e-5, atol=1e-6)
    assert (got[inputs["response_mask"]] > 0).all() and (got <= 1).all()
    assert result.advantages.shape == inputs["response_mask"].shape


def test_remax_baseline_gets_the_overlong_penalty_as_the_samples_rewards_do(tiny_model, tmp_path):
    """With DAPO's overlong shaping the greedy completion's reward is shaped like the samples' (as verl's reward
    manager and the asynchronous worker shape it): baseline = its reward + min(−(L − (max − buffer))/buffer, 0)·f."""
    from trl_ext.advantages.overlong import overlong_penalty

    config = cpu_config(trl_ext.GRPOConfig, str(tmp_path), advantage_fn="remax", max_steps=1, overlong_buffer=6,
                        overlong_penalty_factor=1.0)  # fmt: skip
    trainer = toy_trainer(_RecordingGRPOTrainer, config, tiny_model)
    trainer.calls, trainer.baselines = [], []
    seen = []
    original = trainer.calculate_rewards

    def recording(inputs, prompts, completions, completion_ids):  # each call's rewards and completion lengths
        rewards = original(inputs, prompts, completions, completion_ids)
        seen.append((rewards.clone(), [len(ids) for ids in completion_ids]))
        return rewards

    trainer.calculate_rewards = recording
    train_update(trainer)
    (baselines,) = trainer.baselines
    rewards, lengths = seen[-1]  # the last call is the greedy one: 2 prompts
    assert len(lengths) == 2
    penalty = overlong_penalty(torch.tensor(lengths), config.max_completion_length, 6, 1.0)
    expected = (rewards.nansum(dim=1) + penalty).repeat_interleave(4)
    torch.testing.assert_close(baselines, expected.to(baselines), rtol=1e-6, atol=1e-6)
    assert penalty.abs().sum() > 0  # the greedy answers reach the buffer: the penalty acts
