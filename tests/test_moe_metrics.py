"""The MoE router's auxiliary loss is logged as TRL logs it: the mean over the optimizer window's micro-batches
(not summed like the loss's window shares), in the GRPO-family and the DPO trainers."""

from __future__ import annotations

import pytest
import torch
from trainer_helpers import CPU, cpu_config, length_reward, logged
from transformers import GenerationConfig, Qwen2MoeConfig, Qwen2MoeForCausalLM

import trl_ext
from trl_ext.toy import build_tokenizer, toy_dataset, toy_preference_dataset


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory) -> str:
    """An untrained tiny Qwen2-MoE (4 experts, top-2, router aux loss coefficient 0.01) with the toy tokenizer."""
    tokenizer = build_tokenizer()
    config = Qwen2MoeConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        router_aux_loss_coef=0.01,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    model = Qwen2MoeForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True, max_new_tokens=8
    )
    path = str(tmp_path_factory.mktemp("tiny_moe"))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


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
