"""The MoE router's auxiliary loss is logged as TRL logs it: the mean over the optimizer window's micro-batches
(not summed like the loss's window shares), in the GRPO-family and the DPO trainers."""

from __future__ import annotations

import pytest
import torch
from trainer_helpers import CPU, cpu_config, length_reward, logged

import trl_ext
from trl_ext.toy import toy_dataset, toy_preference_dataset


def test_grpo_family_logs_the_window_mean_of_aux_loss(tiny_moe, tmp_path):
    args = cpu_config(
        trl_ext.SAPOConfig,
        str(tmp_path),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        steps_per_generation=2,
        max_steps=1,
    )
    trainer = trl_ext.SAPOTrainer(
        model=tiny_moe, reward_funcs=length_reward, args=args, train_dataset=toy_dataset(num_prompts=16)
    )
    assert trainer.aux_loss_enabled
    seen: list[float] = []
    inner = trainer._get_per_token_logps_and_entropies

    def recording(*args, **kwargs):
        logps, entropies, aux_loss = inner(*args, **kwargs)
        if kwargs.get("compute_aux_loss") and torch.is_grad_enabled():
            seen.append(aux_loss.item())
        return logps, entropies, aux_loss

    trainer._get_per_token_logps_and_entropies = recording
    trainer.train()
    assert len(seen) == 2  # the window's two micro-batches
    (value,) = logged(trainer, "aux_loss")
    assert value == pytest.approx(sum(seen) / 2, rel=1e-5)
    assert value != pytest.approx(sum(seen), rel=1e-3)  # the window sum would be the old, wrong value
    (loss,) = logged(trainer, "policy_loss")  # the loss's window share metrics still add up over the window
    assert torch.isfinite(torch.tensor(loss))


def test_dpo_logs_the_window_mean_of_aux_loss(tiny_moe, tmp_path):
    args = trl_ext.DPOConfig(
        **CPU,
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=1,
        max_length=32,
        learning_rate=1e-3,
    )
    trainer = trl_ext.DPOTrainer(model=tiny_moe, args=args, train_dataset=toy_preference_dataset(num_pairs=8))
    assert trainer.aux_loss_enabled
    seen: list[float] = []

    def record(module, inputs, output):
        if torch.is_grad_enabled() and getattr(output, "aux_loss", None) is not None:
            seen.append(output.aux_loss.item())

    trainer.model.register_forward_hook(record)
    trainer.train()
    assert len(seen) == 2
    (value,) = logged(trainer, "aux_loss")
    assert value == pytest.approx(sum(seen) / 2, rel=1e-5)
    assert value != pytest.approx(sum(seen), rel=1e-3)
