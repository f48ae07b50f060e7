"""One loss step for every RL trainer (`trl_ext.trainers.core.loss_step.LossStep`): the GRPO family's trainers (GRPO,
MIX, distillation, critic PPO) and the asynchronous trainer each compute their loss by calling it; the DPO and SFT
trainers share its end (`window_loss`: process scaling, router aux loss, window metrics)."""

from __future__ import annotations

import inspect

import pytest
import torch
from async_helpers import async_config, make_samples, packed_batch, padded_grpo_inputs, stub_trainer
from trainer_helpers import CPU, ROLLOUT_FAMILIES, algorithm_classes, cpu_config, toy_trainer

import trl_ext
from trl_ext.toy import build_tokenizer, toy_expert_dataset, toy_preference_dataset
from trl_ext.trainers.core.loss_step import LossStep
from trl_ext.trainers.core.window import WindowNormalization
from trl_ext.trainers.grpo.trainer import GRPOFamilyTrainer
from trl_ext.trainers.grpo.trl_adapter import GRPOAdapter


@pytest.fixture
def step_calls(monkeypatch):
    calls = []
    original = LossStep.__call__

    def spy(self, batch, window, mode):
        calls.append((type(self.host).__name__, mode))
        return original(self, batch, window, mode)

    monkeypatch.setattr(LossStep, "__call__", spy)
    return calls


def test_the_grpo_and_async_trainers_call_the_loss_step(step_calls, random_tiny_model, tmp_path):
    sync = toy_trainer(trl_ext.GRPOTrainer, cpu_config(trl_ext.GRPOConfig, str(tmp_path / "s")), random_tiny_model)
    asynchronous = stub_trainer(random_tiny_model, async_config(str(tmp_path / "a")))
    tokenizer = build_tokenizer()
    samples = make_samples(tokenizer, sync.model, seed=3)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, -1.0, 0.5, -0.5])
    inputs = padded_grpo_inputs(samples, advantages, tokenizer.pad_token_id)
    inputs.update(sync.count_window([inputs]))
    sync.model.train()
    sync._compute_loss(sync.model, inputs)
    batch = packed_batch(samples, advantages, tokenizer.pad_token_id)
    asynchronous.model.train()
    asynchronous._get_num_items_in_batch([batch], asynchronous.accelerator.device)
    asynchronous.compute_loss(asynchronous.model, batch)
    assert step_calls == [("GRPOTrainer", "train"), ("AsyncGRPOTrainer", "train")]


@pytest.mark.parametrize("family", ROLLOUT_FAMILIES)
def test_every_rollout_family_computes_its_loss_through_the_grpo_step(family):
    """MIX, distillation and critic PPO are `GRPOFamilyTrainer`s whose `micro_batch_loss` is the family's, or wraps
    it (`super().micro_batch_loss`): none computes a loss of its own, and none overrides TRL's `_compute_loss`
    (the adapter's alone does)."""
    for name, trainer_class in algorithm_classes(family, trainers=True).items():
        assert issubclass(trainer_class, GRPOFamilyTrainer), name
        for klass in trainer_class.__mro__[: trainer_class.__mro__.index(GRPOAdapter)]:
            assert "_compute_loss" not in vars(klass), (name, klass)
            if "micro_batch_loss" in vars(klass) and klass is not GRPOFamilyTrainer:
                assert "super().micro_batch_loss(" in inspect.getsource(klass.micro_batch_loss), (name, klass)


def test_dpo_and_sft_end_their_loss_in_the_shared_window_step(monkeypatch, random_tiny_model, tmp_path):
    calls = []
    original = WindowNormalization.window_loss

    def spy(self, loss, metrics, mode, aux_loss=None):
        calls.append(type(self).__name__)
        return original(self, loss, metrics, mode, aux_loss)

    monkeypatch.setattr(WindowNormalization, "window_loss", spy)
    settings = {**CPU, "per_device_train_batch_size": 4, "max_steps": 1}
    for trainer_class, config_class, dataset in (
        (trl_ext.DPOTrainer, trl_ext.DPOConfig, toy_preference_dataset(8)),
        (trl_ext.SFTTrainer, trl_ext.SFTConfig, toy_expert_dataset(8)),
    ):
        args = config_class(output_dir=str(tmp_path / trainer_class.__name__), **settings)
        trainer = trainer_class(
            model=random_tiny_model, args=args, train_dataset=dataset, processing_class=build_tokenizer()
        )
        trainer.train()
    assert calls == ["DPOTrainer", "SFTTrainer"]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("top_entropy_quantile", 0.0, r"top_entropy_quantile=0.0 is not valid"),
        ("top_entropy_quantile", 1.5, r"top_entropy_quantile=1.5 is not valid"),
        ("off_policy_mask_threshold", -0.1, r"off_policy_mask_threshold=-0.1 is not valid"),
        ("use_adaptive_entropy", "yes", r"use_adaptive_entropy"),
    ],
)
def test_the_async_config_checks_the_step_options_by_name(field, value, message, tmp_path):
    """The loss step's options on `AsyncGRPOConfig` (`core/step_arguments.py`) are checked at construction."""
    with pytest.raises(ValueError, match=message):
        async_config(str(tmp_path), **{field: value})
