"""verl 0.9's rollout correction in the trainer: the config's fields (verl's names, checked against what cannot
train, from the command line), and on a faked vLLM rollout (a `rollout_func` returning the sampler's log-probs) the
weights applied exactly once (TRL's own vLLM correction is replaced, not stacked) and rejected tokens out of the loss
and the window's counts."""

from __future__ import annotations

import math
import types

import pytest
import torch
from test_rollout_correction_weights import approx
from trainer_helpers import CPU, length_reward

import trl_ext
from trl_ext.toy import build_tokenizer, toy_dataset

# ---------------------------------------------------------------------------------------------------------------
# 5. The config: verl's field names, vLLM's log-probs, TRL's own correction replaced
# ---------------------------------------------------------------------------------------------------------------


def vllm_config(tmp_path, config_class=None, **kwargs):
    settings = {**CPU, "output_dir": str(tmp_path), "per_device_train_batch_size": 8, "num_generations": 4}
    return (config_class or trl_ext.GRPOConfig)(**settings, use_vllm=True, **kwargs)


def test_config_fields_reach_the_correction(tmp_path):
    config = vllm_config(
        tmp_path,
        rollout_is="sequence",
        rollout_is_threshold="0.5_5.0",
        rollout_rs="seq_mean_k1",
        rollout_rs_threshold=2,
    )
    correction = config.build_rollout_correction()
    assert correction.is_bounds == (5.0, 0.5) and correction.rs_bounds == {"seq_mean_k1": (0.5, 2.0)}
    assert config.composition()["rollout correction"] == (
        "sequence-level IS weights, IcePop in [0.5, 5]; rejection seq_mean_k1 π_rollout/π_old in [0.5, 2]"
    )
    assert config.vllm_importance_sampling_correction is False  # replaced by rollout_is


def test_rejection_alone_keeps_trls_correction(tmp_path):
    config = vllm_config(tmp_path, config_class=trl_ext.SAPOConfig, rollout_rs="token_k3", rollout_rs_threshold=0.1)
    assert config.vllm_importance_sampling_correction is True


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"use_vllm": False, "rollout_is": "token"}, r"rollout_is='token' corrects .* TRL has only from vLLM "),
        (
            {"use_vllm": False, "rollout_rs": "token_k2", "rollout_rs_threshold": 1},
            r"rollout_rs='token_k2' corrects .*; set use_vllm=True or leave rollout_rs unset",
        ),
        (
            {"rollout_is": "token", "vllm_importance_sampling_mode": "token_truncate"},
            r"vllm_importance_sampling_mode='token_truncate' configures TRL's vLLM importance-sampling correction",
        ),
        ({"rollout_is": "token", "vllm_importance_sampling_clip_max": 5.0}, r"vllm_importance_sampling_clip_max=5.0"),
        ({"rollout_is": "sequence", "loss_type": "vespo"}, r"rollout_is='sequence' .* but loss_type='vespo'"),
        (
            {"rollout_rs": "token_k2", "rollout_rs_threshold": 1, "turns_as_samples": True},
            r"rollout_rs='token_k2' rejects single tokens, which would split the model turns",
        ),
        ({"rollout_rs": "seq_mean_k5", "rollout_rs_threshold": 1}, r"rollout_rs='seq_mean_k5' is not valid"),
    ],
)
def test_config_refuses_what_cannot_train(tmp_path, kwargs, message):
    settings = {"use_vllm": True, **kwargs}
    if settings.pop("turns_as_samples", False):
        settings.update(turns_as_samples=True, loss_agg_mode="seq-mean-token-mean")
    with pytest.raises(ValueError, match=f"^GRPOConfig: {message}"):
        trl_ext.GRPOConfig(
            **CPU, output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, **settings
        )


def test_config_from_the_command_line(tmp_path):
    from trl import TrlParser

    args = ["--output_dir", str(tmp_path), "--use_cpu", "--report_to", "none", "--use_vllm"]
    args += ["--rollout_is", "token", "--rollout_is_threshold", "0.5_3", "--rollout_is_batch_normalize", "true"]
    args += ["--rollout_rs", "token_k1,seq_max_k3", "--rollout_rs_threshold", "0.5_2,0.3"]
    (config,) = TrlParser(trl_ext.GRPOConfig).parse_args_and_config(args)
    correction = config.build_rollout_correction()
    assert correction.is_bounds == (3.0, 0.5) and correction.rollout_is_batch_normalize
    assert correction.rs_bounds == {"token_k1": (0.5, 2.0), "seq_max_k3": (None, 0.3)}


# ---------------------------------------------------------------------------------------------------------------
# 6. The trainer, on a faked vLLM rollout
# ---------------------------------------------------------------------------------------------------------------

LENGTHS = [6, 3, 8, 5, 7, 2, 8, 4]  # completion lengths (the batch's rows), with padding


def fake_vllm_trainer(model_path, tmp_path, config_class=None, **kwargs):
    """A GRPO-family trainer whose config asks for vLLM and whose generation is a `rollout_func` returning fixed
    completions with the sampler's log-probs, as vLLM would (TRL's vLLM code path runs; only the weight sync is a
    stub): this machine has no vLLM. The trainer is built with `use_vllm=False`, then switched on."""
    config = vllm_config(tmp_path, config_class, max_completion_length=8, max_steps=1, learning_rate=1e-3, **kwargs)
    tokenizer = build_tokenizer()
    generator = torch.Generator().manual_seed(0)

    def rollout_func(prompts, trainer):  # the sampler: the model's log-probs, off by N(0, 0.8²) per token
        ids = tokenizer(prompts)["input_ids"]
        completions = [torch.randint(10, 200, (LENGTHS[i % 8],), generator=generator).tolist() for i in range(len(ids))]
        logprobs = []
        with torch.no_grad():
            for prompt, completion in zip(ids, completions, strict=True):
                logits = trainer.model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
                exact = logits.log_softmax(-1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)
                logprobs.append((exact + 0.8 * torch.randn(len(completion), generator=generator)).tolist())
        return {"prompt_ids": ids, "completion_ids": completions, "logprobs": logprobs}

    config.use_vllm = False  # so that TRL does not start a vLLM engine
    trainer = (config_class or trl_ext.GRPOConfig).__name__.replace("Config", "Trainer")
    trainer = getattr(trl_ext, trainer)(
        model=model_path,
        reward_funcs=length_reward,
        args=config,
        train_dataset=toy_dataset(16),
        processing_class=tokenizer,
        rollout_func=rollout_func,
    )
    trainer.use_vllm = True
    trainer.vllm_generation = types.SimpleNamespace(sync_weights=lambda: None)
    trainer._last_loaded_step = -1
    return trainer


def hand_logps(trainer, batch):
    """log π(completion token) by a plain forward pass of the model."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    logits = trainer.model(input_ids=ids, attention_mask=attention).logits[:, :-1] / trainer.temperature
    width = batch["completion_ids"].size(1)
    logps = logits[:, -width:].log_softmax(-1)
    return logps.gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)


def gradient(trainer, loss):
    trainer.model.zero_grad()
    loss.backward()
    return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])


@pytest.mark.parametrize("loss_type", [None, "dapo"])  # trl_ext's ppo (folded into A), TRL's loss (declared input)
def test_trainer_applies_the_weights_exactly_once(random_tiny_model, tmp_path, loss_type):
    extra = {} if loss_type is None else {"loss_type": loss_type}
    trainer = fake_vllm_trainer(random_tiny_model, tmp_path, rollout_is="token", rollout_is_threshold=1.5, **extra)
    assert trainer.vllm_importance_sampling_correction is False  # TRL's own correction is off
    rows = [row for row in trainer.train_dataset.select(range(2)) for _ in range(4)]
    batch = trainer._generate_and_score_completions(rows)
    assert "sampling/importance_sampling_ratio/mean" not in trainer._metrics["eval"]  # TRL computed none

    mask = batch["completion_mask"].bool()
    assert mask.sum(1).tolist() == LENGTHS
    old, sampling = batch["old_per_token_logps"], batch["sampling_per_token_logps"]
    weights = torch.where(mask, torch.exp(old - sampling).clamp(max=1.5), 1.0)  # verl's token TIS
    torch.testing.assert_close(batch["importance_sampling_ratio"], weights)
    assert (weights[mask] < 1.5).any() and (weights[mask] == 1.5).any()
    metrics = trainer._metrics["eval"]
    assert metrics["rollout_corr/rollout_is_mean"][-1] == approx(weights[mask].mean().item())
    assert metrics["rollout_corr/kl"][-1] == approx((sampling - old)[mask].mean().item())

    # GRPO's advantages by hand, from the rewards: the correction leaves them alone
    rewards = torch.tensor(length_reward(trainer.processing_class.batch_decode(batch["completion_ids"], True)))
    rewards = rewards.view(2, 4)
    epsilon = 1e-6 if loss_type is None else 1e-4  # trl_ext's grpo advantage / TRL's
    advantages = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + epsilon)
    advantages = advantages.view(-1, 1)
    torch.testing.assert_close(batch["advantages"], advantages.squeeze(1))
    assert advantages.abs().sum() > 0

    # d/dθ of the loss = d/dθ of Σ_valid −A·w·π/π_old / tokens (the PPO clip is inactive on-policy): w once
    trained = gradient(trainer, trainer._compute_loss(trainer.model, batch))

    def by_hand(w):
        ratio = torch.exp(hand_logps(trainer, batch) - old)
        return torch.where(mask, -advantages * w * ratio, 0).sum() / mask.sum()

    torch.testing.assert_close(trained, gradient(trainer, by_hand(weights)), rtol=1e-4, atol=1e-6)
    twice = gradient(trainer, by_hand(weights * weights))
    assert not torch.allclose(trained, twice, rtol=1e-3, atol=1e-6)


def test_trainer_rejects_tokens_out_of_the_loss_and_the_window(random_tiny_model, tmp_path):
    trainer = fake_vllm_trainer(random_tiny_model, tmp_path, rollout_rs="token_k1", rollout_rs_threshold="0.3_3")
    assert trainer.vllm_importance_sampling_correction is True  # rejection composes with TRL's weights
    rows = [row for row in trainer.train_dataset.select(range(2)) for _ in range(4)]
    batch = trainer._generate_and_score_completions(rows)

    mask = batch["completion_mask"].bool()
    assert mask.sum(1).tolist() == LENGTHS  # the attention mask is untouched
    old, sampling = batch["old_per_token_logps"], batch["sampling_per_token_logps"]
    inverse = torch.exp(sampling - old)  # k1 bounds π_rollout / π_old
    kept = mask & (inverse >= 0.3) & (inverse <= 3)
    assert (mask & ~kept).any() and kept.any()
    assert torch.equal(batch["tool_mask"].bool() | ~mask, kept | ~mask)
    assert trainer.micro_batch_counts(batch)["global_valid_toks"].item() == kept.sum().item()
    metrics = trainer._metrics["eval"]
    fraction = metrics["rollout_corr/rollout_rs_token_k1_masked_fraction"][-1]
    assert fraction == approx((mask & ~kept).sum().item() / mask.sum().item())
    assert "sampling/importance_sampling_ratio/mean" in metrics  # TRL's own correction ran

    ratio = batch["importance_sampling_ratio"]  # TRL's sequence-masked ratio [B, 1], applied once
    trained = gradient(trainer, trainer._compute_loss(trainer.model, batch))
    pi_ratio = torch.exp(hand_logps(trainer, batch) - old)
    by_hand = torch.where(kept, -batch["advantages"].unsqueeze(1) * ratio * pi_ratio, 0).sum() / kept.sum()
    torch.testing.assert_close(trained, gradient(trainer, by_hand), rtol=1e-4, atol=1e-6)


def test_training_logs_the_correction_metrics(random_tiny_model, tmp_path):
    trainer = fake_vllm_trainer(
        random_tiny_model,
        tmp_path,
        config_class=trl_ext.SAPOConfig,
        rollout_is="sequence",
        rollout_is_batch_normalize=True,
        rollout_rs="seq_mean_k3",
        rollout_rs_threshold=5.0,
    )
    trainer.train()
    last = [entry for entry in trainer.state.log_history if "rollout_corr/rollout_is_mean" in entry][-1]
    for name in ("rollout_is_batch_norm_factor", "rollout_rs_seq_mean_k3_masked_fraction", "k3_kl", "chi2_seq"):
        assert math.isfinite(last[f"rollout_corr/{name}"]), name


def test_trainer_without_the_samplers_log_probs_names_the_setting(random_tiny_model, tmp_path):
    trainer = fake_vllm_trainer(random_tiny_model, tmp_path, rollout_is="token")
    trainer.use_vllm = False
    trainer.rollout_func = None  # TRL's own generation: no sampler log-probs
    rows = [row for row in trainer.train_dataset.select(range(2)) for _ in range(4)]
    with pytest.raises(ValueError, match=r"GRPOTrainer: rollout_is='token' / rollout_rs=None need the sampler's"):
        trainer._generate_and_score_completions(rows)
