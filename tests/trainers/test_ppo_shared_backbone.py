"""Critic PPO with the value head on the policy's own backbone (`PPOConfig(shared_backbone=True)`).

One model and one optimizer: the loss is the policy's terms + vf_coef · the clipped value loss. Checked on the toy
model: V_old is the head on the backbone's last hidden state; the gradient is exactly that sum (the head gets only
the value loss's, the LM head only the policy's, the backbone both); it trains, with LoRA too; checkpoints keep the
head out of the policy's weights (a plain causal LM) and resume exactly; misplaced settings are refused.
"""

from __future__ import annotations

import os

import pytest
import torch
from safetensors.torch import load_file
from test_ppo_trainer import SETTINGS, make_trainer
from trainer_helpers import CPU, changed, logged, snapshot

import trl_ext
from trl_ext.advantages import get_advantage_fn
from trl_ext.toy import toy_dataset, toy_reward
from trl_ext.trainers.grpo.trainer import GRPOFamilyTrainer


def shared(model, tmp_path, **overrides):
    return make_trainer(model, tmp_path, shared_backbone=True, **overrides)


def test_defaults(tmp_path):
    config = trl_ext.PPOConfig(output_dir=str(tmp_path), shared_backbone=True, **CPU)
    assert config.vf_coef == 0.1  # TRL's former PPOTrainer's
    assert "a value head on the policy's backbone, vf_coef 0.1" in config.composition()["critic"]
    assert trl_ext.PPOConfig(output_dir=str(tmp_path), **CPU).vf_coef is None  # a separate critic: its own optimizer


def test_old_values_are_the_head_on_the_backbone_and_make_the_gae(tiny_model, tmp_path):
    trainer = shared(tiny_model, tmp_path)
    assert trainer.value_model is None and trainer.critic_optimizer is None
    head = trainer.model.value_head
    assert head is trainer.value_head and head.weight.shape == (1, trainer.model.config.hidden_size)
    trainer.model.train()
    rows = [trainer.train_dataset[i] for i in range(8)]
    output = trainer._generate_and_score_completions(rows)
    mask = output["completion_mask"].bool()
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    with torch.no_grad():
        hidden = trainer.model(input_ids=ids, attention_mask=attention, output_hidden_states=True).hidden_states[-1]
        values = (hidden @ head.weight[0] + head.bias[0])[:, -mask.size(1) - 1 : -1]
    torch.testing.assert_close(output["old_values"], values.float())
    completions = trainer.processing_class.batch_decode(output["completion_ids"], skip_special_tokens=True)
    rewards = torch.tensor(toy_reward(completions=completions, target=[r["target"] for r in rows]))
    result = get_advantage_fn("ppo").compute(rewards, None, response_mask=mask, values=values.float())
    torch.testing.assert_close(output["advantages"], result.advantages)
    torch.testing.assert_close(output["returns"], result.returns)


def test_the_gradient_is_the_policy_terms_plus_vf_coef_times_the_value_loss(tiny_model, tmp_path):
    trainer = shared(tiny_model, tmp_path, vf_coef=0.25)
    model = trainer.model
    model.train()
    batch = trainer._generate_and_score_completions([trainer.train_dataset[i] for i in range(8)])
    batch.update(trainer.count_window([batch]))
    window = trainer._window_kwargs(batch, "train")

    def gradients(loss_fn) -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        loss_fn().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    def value_loss_alone() -> torch.Tensor:  # the head on the hidden state of the scoring forward pass
        trainer._hidden = torch.empty(0)
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        trainer._get_per_token_logps_and_entropies(model, ids, attention, batch["completion_ids"].size(1))
        loss = trainer._value_loss(batch, window, {})
        trainer._hidden = None
        return loss

    full = gradients(lambda: trainer._compute_loss(model, batch))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(trainer), "_add_trainer_terms", GRPOFamilyTrainer._add_trainer_terms)
        policy = gradients(lambda: trainer._compute_loss(model, batch))
    value = gradients(value_loss_alone)

    head = {"value_head.weight", "value_head.bias"}
    assert head <= value.keys() and not head & policy.keys()  # the head: the value loss's gradient only
    assert "lm_head.weight" in policy and "lm_head.weight" not in value  # the LM head: the policy's only
    backbone = [n for n in value if n.startswith("model.")]
    assert backbone and all(value[n].abs().sum() > 0 for n in backbone[-3:])  # the backbone: both
    for name, grad in full.items():
        expected = policy.get(name, torch.zeros_like(grad)) + 0.25 * value.get(name, torch.zeros_like(grad))
        torch.testing.assert_close(grad, expected, msg=name)


def test_trains_one_model_and_logs_the_value_loss(tiny_model, tmp_path):
    trainer = shared(tiny_model, tmp_path, max_steps=1)
    before = snapshot(trainer.model)
    trainer.train()
    moved = changed(before, trainer.model)
    assert {"value_head.weight", "value_head.bias", "lm_head.weight"} <= moved
    (vf_loss,) = logged(trainer, "vf_loss")
    assert vf_loss > 0 and logged(trainer, "vf_clipfrac") == [0.0] and logged(trainer, "critic/explained_variance")


def test_lora_policy_trains_its_adapter_and_the_head(tiny_model, tmp_path):
    from peft import LoraConfig

    args = trl_ext.PPOConfig(output_dir=str(tmp_path), shared_backbone=True, **{**SETTINGS, "max_steps": 1})
    trainer = trl_ext.PPOTrainer(
        model=tiny_model,
        reward_funcs=toy_reward,
        args=args,
        train_dataset=toy_dataset(16),
        peft_config=LoraConfig(task_type="CAUSAL_LM", r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    before = snapshot(trainer.model)
    trainer.train()
    moved = changed(before, trainer.model)
    assert any("value_head" in name for name in moved) and any("lora_" in name for name in moved)
    assert all("lora_" in name or "value_head" in name for name in moved)
    trainer.save_model(str(tmp_path / "final"))
    assert os.path.isfile(tmp_path / "final" / "adapter_model.safetensors")
    assert os.path.isfile(tmp_path / "final" / "value_head.safetensors")


def test_checkpoints_keep_the_head_beside_the_policy_and_resume_exactly(tiny_model, tmp_path, float_tolerance):
    def run(out, resume=None):
        trainer = shared(
            tiny_model, out, max_steps=4, save_strategy="steps", save_steps=2, optim="adamw_torch",
            learning_rate=1e-3, seed=3,
        )  # fmt: skip
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    full = run(tmp_path / "full")
    checkpoint = tmp_path / "full" / "checkpoint-2"
    head = load_file(checkpoint / "value_head.safetensors")
    assert set(head) == {"weight", "bias"}
    assert not any("value_head" in key for key in load_file(checkpoint / "model.safetensors"))  # a plain causal LM
    resumed = run(tmp_path / "resumed", resume=str(checkpoint))
    pairs = zip(full.model.named_parameters(), resumed.model.parameters(), strict=True)
    for (name, a), b in pairs:
        torch.testing.assert_close(a, b, **float_tolerance(torch.float32, magnitude=a.abs().max()), msg=name)
    os.remove(checkpoint / "value_head.safetensors")  # lost: an error, not a fresh head
    with pytest.raises(ValueError, match=r"has no value_head.safetensors"):
        run(tmp_path / "lost", resume=str(checkpoint))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"vf_coef": 0.5}, r"vf_coef=0.5 weighs the value loss in the summed loss of shared_backbone=True"),
        ({"shared_backbone": True, "vf_coef": -1.0}, r"vf_coef=-1.0 is not valid"),
        ({"shared_backbone": True, "critic_learning_rate": 1e-5}, r"critic_learning_rate configure a separate"),
        ({"shared_backbone": True, "value_model_name_or_path": "x"}, r"value_model_name_or_path configure a sep"),
        ({"shared_backbone": "yes"}, r"shared_backbone"),
    ],
)
def test_misplaced_settings_are_refused_at_construction(overrides, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        trl_ext.PPOConfig(output_dir=str(tmp_path), **{**CPU, **overrides})


def test_a_separate_value_model_is_refused_with_a_shared_backbone(tiny_model, tmp_path):
    args = trl_ext.PPOConfig(output_dir=str(tmp_path), shared_backbone=True, **SETTINGS)
    with pytest.raises(ValueError, match=r"value_model / value_peft_config configure a separate value model"):
        trl_ext.PPOTrainer(
            model=tiny_model, reward_funcs=toy_reward, args=args, train_dataset=toy_dataset(8), value_model=tiny_model
        )


def test_a_policy_whose_hidden_size_cannot_be_read_is_refused(tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(tiny_model)
    object.__setattr__(policy.config, "hidden_size", "unknown")  # as a custom config might (validation bypassed)
    args = trl_ext.PPOConfig(output_dir=str(tmp_path), shared_backbone=True, **SETTINGS)
    with pytest.raises(ValueError, match=r"shared_backbone=True needs the policy's hidden size \(config.hidden_size\)"):
        trl_ext.PPOTrainer(model=policy, reward_funcs=toy_reward, args=args, train_dataset=toy_dataset(8))
