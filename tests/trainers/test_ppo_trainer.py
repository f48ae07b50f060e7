"""Critic PPO (`trl_ext.PPOTrainer`): the value model, GAE from its values, the clipped value loss and its optimizer.

On the toy model, with one SGD step where exact values are checked: the advantages equal the `ppo` estimator on the
batch's rewards and the critic's own values; the logged value loss equals the closed form 0.5·mean((V − R)²) (the
critic has not moved yet, so V = V_old and nothing is clipped); each model moves only under its own loss; the
warm-up trains the critic alone; bad settings are refused at construction, naming the setting.
"""

from __future__ import annotations

import os

import pytest
import torch
from trainer_helpers import CPU, changed, logged, snapshot

import trl_ext
from trl_ext.advantages import get_advantage_fn
from trl_ext.toy import build_tokenizer, toy_dataset, toy_reward

SETTINGS = {
    **CPU,
    "per_device_train_batch_size": 8,
    "num_generations": 1,
    "max_completion_length": 8,
    "max_steps": 2,
    "learning_rate": 1e-2,
    "optim": "sgd",
    "lr_scheduler_type": "constant",
    "max_grad_norm": 0.0,
}


def make_trainer(model, tmp_path, **overrides):
    args = trl_ext.PPOConfig(output_dir=str(tmp_path), **{**SETTINGS, **overrides})
    return trl_ext.PPOTrainer(
        model=model,
        reward_funcs=toy_reward,
        args=args,
        train_dataset=toy_dataset(64),
        processing_class=build_tokenizer(),
    )


def test_defaults_are_the_reference_row(tmp_path):
    config = trl_ext.PPOConfig(output_dir=str(tmp_path), **{**CPU})
    spec = trl_ext.get_algorithm("ppo")
    assert spec.use_critic and spec.trainer_class is trl_ext.PPOTrainer and spec.config_class is trl_ext.PPOConfig
    assert config.num_generations == 1  # the reference's repeat_times
    assert (config.gamma, config.lam, config.cliprange_value) == (1.0, 1.0, 0.5)
    assert (config.clip_range, config.clip_ratio_c, config.kl_loss_fn) == (0.2, 3.0, "k2")
    assert config.critic_lr == config.learning_rate and config.critic_warmup_steps == 0


def test_advantages_are_gae_on_the_critics_values(tiny_model, tmp_path):
    trainer = make_trainer(tiny_model, tmp_path)
    trainer.model.train()
    rows = [trainer.train_dataset[i] for i in range(8)]
    output = trainer._generate_and_score_completions(rows)
    mask = output["completion_mask"].bool()
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    with torch.no_grad():  # V_t: the critic's output before completion token t
        logits = trainer.value_model(input_ids=ids, attention_mask=attention).logits[..., 0]
    values = logits[:, -mask.size(1) - 1 : -1]
    torch.testing.assert_close(output["old_values"], values.float())
    completions = trainer.processing_class.batch_decode(output["completion_ids"], skip_special_tokens=True)
    rewards = torch.tensor(toy_reward(completions=completions, target=[r["target"] for r in rows]))
    result = get_advantage_fn("ppo").compute(rewards, None, response_mask=mask, values=values.float())
    torch.testing.assert_close(output["advantages"], result.advantages)
    torch.testing.assert_close(output["returns"], result.returns)


def test_one_step_trains_both_models_each_under_its_own_loss(tiny_model, tmp_path):
    trainer = make_trainer(tiny_model, tmp_path, max_steps=1)
    policy, critic = snapshot(trainer.model), snapshot(trainer.value_model)
    trainer.train()
    assert changed(policy, trainer.model) and changed(critic, trainer.value_model)
    # First step: the critic has not moved when the loss is taken, so V = V_old, no clipping, and with one
    # micro-batch the value loss is 0.5·mean((V_old − R)²) over the completion tokens.
    (vf_loss,) = logged(trainer, "vf_loss")
    assert logged(trainer, "vf_clipfrac") == [0.0]
    assert vf_loss > 0 and logged(trainer, "critic/explained_variance") and logged(trainer, "vpred_mean")


def test_each_model_gets_the_gradient_of_its_own_loss(tiny_model, tmp_path):
    trainer = make_trainer(tiny_model, tmp_path)
    assert not {id(p) for p in trainer.model.parameters()} & {id(p) for p in trainer.value_model.parameters()}
    trainer.model.train()
    batch = trainer._generate_and_score_completions([trainer.train_dataset[i] for i in range(8)])
    batch.update(trainer.count_window([batch]))  # the window of this one micro-batch

    def gradients(with_value_loss: bool):
        for model in (trainer.model, trainer.value_model):
            model.zero_grad(set_to_none=True)
        if with_value_loss:
            trainer._compute_loss(trainer.model, batch).backward()
        else:  # the policy's terms alone
            plain = trl_ext.trainers.grpo.trainer.GRPOFamilyTrainer._add_trainer_terms
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(type(trainer), "_add_trainer_terms", plain)
                trainer._compute_loss(trainer.model, batch).backward()
        policy = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
        critic = {n: p.grad.clone() for n, p in trainer.value_model.named_parameters() if p.grad is not None}
        return policy, critic

    policy_with, critic_with = gradients(True)
    policy_alone, critic_alone = gradients(False)
    assert policy_with.keys() == policy_alone.keys() and policy_with
    for name in policy_with:
        torch.testing.assert_close(policy_with[name], policy_alone[name])
    assert critic_with and not critic_alone  # the critic's gradient comes from the value loss only

    # The value loss itself: the critic has not moved, so V = V_old (nothing clipped) and, the window being this
    # micro-batch, it is 0.5·mean((V − R)²) over the completion tokens.
    metrics = {}
    window = trainer._window_kwargs(batch, "train")
    with torch.no_grad():
        value_loss = trainer._value_loss(batch, window, metrics)
    mask = batch["completion_mask"].bool()
    expected = 0.5 * ((batch["old_values"] - batch["returns"])[mask] ** 2).mean()
    torch.testing.assert_close(value_loss, expected)
    assert metrics["vf_clipfrac"] == 0


def test_critic_warmup_trains_only_the_critic(tiny_model, tmp_path):
    trainer = make_trainer(tiny_model, tmp_path, max_steps=1, critic_warmup_steps=1)
    policy, critic = snapshot(trainer.model), snapshot(trainer.value_model)
    trainer.train()
    assert not changed(policy, trainer.model) and changed(critic, trainer.value_model)


def test_critic_learning_rate_is_its_own(tiny_model, tmp_path):
    trainer = make_trainer(tiny_model, tmp_path, max_steps=1, critic_learning_rate=0.0)
    policy, critic = snapshot(trainer.model), snapshot(trainer.value_model)
    trainer.train()
    assert changed(policy, trainer.model) and not changed(critic, trainer.value_model)
    assert trainer.critic_optimizer.param_groups[0]["lr"] == 0.0


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"gamma": 1.5}, r"gamma=1.5 is not valid"),
        ({"lam": -0.1}, r"lam=-0.1 is not valid"),
        ({"cliprange_value": -0.2}, r"cliprange_value=-0.2 is not valid"),
        ({"critic_warmup_steps": 1.5}, r"critic_warmup_steps=1.5 is not valid"),
        ({"advantage_fn": "grpo"}, r"num_generations=1 gives every prompt a group of one, but advantage_fn='grpo'"),
    ],
)
def test_bad_settings_are_refused_at_construction(overrides, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        trl_ext.PPOConfig(output_dir=str(tmp_path), **{**CPU, **overrides})


def test_groups_are_allowed_with_a_group_relative_advantage(tmp_path):
    config = trl_ext.PPOConfig(output_dir=str(tmp_path), **{**CPU, "num_generations": 4, "advantage_fn": "grpo"})
    assert config.num_generations == 4


def test_a_critic_with_another_vocabulary_is_refused(tiny_model, tmp_path):
    from transformers import AutoModelForTokenClassification, Qwen2Config

    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, num_labels=1)  # fmt: skip
    critic = AutoModelForTokenClassification.from_config(config)
    args = trl_ext.PPOConfig(output_dir=str(tmp_path), **SETTINGS)
    with pytest.raises(ValueError, match=r"the value model's vocabulary has 64 tokens but the policy's"):
        trl_ext.PPOTrainer(
            model=tiny_model, reward_funcs=toy_reward, args=args, train_dataset=toy_dataset(8), value_model=critic
        )


def test_checkpoints_hold_the_critic_and_resume_exactly(tiny_model, tmp_path, float_tolerance):
    """Stopped at step 2 (its checkpoint: the policy, the critic, both optimizers and schedulers) and resumed: the
    same policy and critic as the uninterrupted 4-step run (Adam, so the optimizers' moments must come back too)."""

    def run(out, resume=None):
        trainer = make_trainer(
            tiny_model, out, max_steps=4, save_strategy="steps", save_steps=2, optim="adamw_torch",
            learning_rate=1e-3, critic_learning_rate=1e-2, seed=3,
        )  # fmt: skip
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    full = run(tmp_path / "full")
    checkpoint = tmp_path / "full" / "checkpoint-2"
    assert {"value_model", "critic_optimizer.pt", "critic_scheduler.pt"} <= set(os.listdir(checkpoint))
    resumed = run(tmp_path / "resumed", resume=str(checkpoint))
    for model in ("model", "value_model"):
        pairs = zip(getattr(full, model).named_parameters(), getattr(resumed, model).parameters(), strict=True)
        for (name, a), b in pairs:
            torch.testing.assert_close(a, b, **float_tolerance(torch.float32, magnitude=a.abs().max()), msg=name)
    full.save_model(str(tmp_path / "final"))  # the final model, and the critic beside it
    assert os.path.isfile(tmp_path / "final" / "model.safetensors")
    assert os.path.isfile(tmp_path / "final" / "value_model" / "model.safetensors")
    # A checkpoint without the critic's optimizer is an error, not a silent fresh start.
    os.remove(checkpoint / "critic_optimizer.pt")
    with pytest.raises(FileNotFoundError):
        run(tmp_path / "lost", resume=str(checkpoint))


@pytest.mark.parametrize("where", ["policy", "critic", "both"])
def test_lora_on_the_policy_the_critic_or_both(where, tiny_model, tmp_path):
    from peft import LoraConfig

    lora = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    extra = {}
    if where in ("policy", "both"):
        extra["peft_config"] = LoraConfig(task_type="CAUSAL_LM", **lora)
    if where in ("critic", "both"):
        extra["value_peft_config"] = LoraConfig(task_type="TOKEN_CLS", **lora)
    args = trl_ext.PPOConfig(output_dir=str(tmp_path), **{**SETTINGS, "max_steps": 1})
    trainer = trl_ext.PPOTrainer(
        model=tiny_model, reward_funcs=toy_reward, args=args, train_dataset=toy_dataset(16), **extra
    )
    policy, critic = snapshot(trainer.model), snapshot(trainer.value_model)
    trainer.train()
    moved_policy, moved_critic = changed(policy, trainer.model), changed(critic, trainer.value_model)
    assert moved_policy and moved_critic
    if where in ("policy", "both"):
        assert all("lora_" in name for name in moved_policy)
    if where in ("critic", "both"):  # the adapter and the scalar head, never the critic's base weights
        assert all("lora_" in name or "score" in name for name in moved_critic)
        assert any("score" in name for name in moved_critic)


def test_a_value_model_that_cannot_be_a_one_output_token_classifier_is_refused(tiny_model, tmp_path):
    from transformers import BartConfig

    path = str(tmp_path / "bart")
    BartConfig(vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1).save_pretrained(path)
    args = trl_ext.PPOConfig(output_dir=str(tmp_path), value_model_name_or_path=path, **SETTINGS)
    with pytest.raises(ValueError, match=r"cannot build a value model from '.*bart' \(a token classifier with one"):
        trl_ext.PPOTrainer(model=tiny_model, reward_funcs=toy_reward, args=args, train_dataset=toy_dataset(8))


@pytest.mark.parametrize("checkpointing", [True, False])
def test_the_critic_recomputes_activations_when_the_policy_does(checkpointing, tiny_model, tmp_path):
    trainer = make_trainer(tiny_model, tmp_path, max_steps=1, activation_checkpointing=checkpointing)
    assert trainer.value_model.is_gradient_checkpointing is checkpointing
    trainer.train()  # trains either way
    assert logged(trainer, "vf_loss")
