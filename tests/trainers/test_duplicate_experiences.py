"""`duplicate_experiences` in the trainer: the rows of a group that `std_threshold` drops become copies of a kept
group's rows (completion, masks, advantages), so the step trains on a full batch, as Trinity-RFT's GRPO does."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from trainer_helpers import cpu_config

import trl_ext


def _reward(prompts, completions, **kwargs) -> list[float]:
    """Constant on the letter-a prompt (its group has std 0 and is dropped), graded elsewhere."""
    return [1.0 if "letter a" in p else float(sum(map(ord, c)) % 7) for p, c in zip(prompts, completions, strict=True)]


def _run(random_tiny_model, tmp_path, duplicate: bool):
    dataset = Dataset.from_dict({"prompt": ["Repeat the letter a:", "Repeat the letter b:"]})
    args = cpu_config(
        trl_ext.GRPOConfig, str(tmp_path), std_threshold=0.0, duplicate_experiences=duplicate, max_steps=1
    )
    trainer = trl_ext.GRPOTrainer(model=random_tiny_model, reward_funcs=_reward, args=args, train_dataset=dataset)
    batches = []
    inner = trainer._generate_and_score_completions

    def recording(inputs):
        prompts = [row["prompt"] for row in inputs]
        output = inner(inputs)
        batches.append((prompts, output))
        return output

    trainer._generate_and_score_completions = recording
    trainer.train()
    return trainer, batches[0]


def test_dropped_group_rows_are_copies_of_a_kept_group(random_tiny_model, tmp_path):
    trainer, (prompts, output) = _run(random_tiny_model, tmp_path, duplicate=True)
    dropped = torch.tensor(["letter a" in p for p in prompts])
    assert dropped.sum() == 4  # one group of num_generations=4 rows
    for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages"):
        assert torch.equal(output[key][dropped], output[key][~dropped]), key
    assert output["completion_mask"][dropped].sum() > 0  # the copies train
    advantages = output["advantages"][~dropped]  # the kept group's GRPO advantages: mean 0, std 1 (std > 0)
    assert advantages.mean().item() == pytest.approx(0.0, abs=1e-6)
    assert advantages.std().item() == pytest.approx(1.0, abs=1e-4)
    logs = trainer.state.log_history[0]
    assert logs["advantages/duplicated_frac"] == pytest.approx(0.5)
    assert logs["advantages/dropped_frac"] == pytest.approx(0.0)


def test_without_duplication_the_dropped_group_is_masked_out(random_tiny_model, tmp_path):
    trainer, (prompts, output) = _run(random_tiny_model, tmp_path, duplicate=False)
    dropped = torch.tensor(["letter a" in p for p in prompts])
    assert output["completion_mask"][dropped].sum() == 0
    assert trainer.state.log_history[0]["advantages/dropped_frac"] == pytest.approx(0.5)


def test_duplicate_experiences_needs_std_threshold(tmp_path):
    with pytest.raises(ValueError, match="duplicate_experiences"):
        cpu_config(trl_ext.GRPOConfig, str(tmp_path), duplicate_experiences=True)


def test_mix_duplicates_rollouts_and_keeps_its_expert_rows(random_tiny_model, tmp_path):
    """MIX: the rollouts are duplicated before the expert demonstrations are appended, which stay as they are."""
    from trl_ext.toy import toy_expert_dataset

    dataset = Dataset.from_dict({"prompt": ["Repeat the letter a:", "Repeat the letter b:"]})
    args = cpu_config(
        trl_ext.MIXConfig,
        str(tmp_path),
        per_device_train_batch_size=16,
        std_threshold=0.0,
        duplicate_experiences=True,
        max_steps=1,
    )
    trainer = trl_ext.MIXTrainer(
        model=random_tiny_model,
        reward_funcs=_reward,
        args=args,
        train_dataset=dataset,
        expert_dataset=toy_expert_dataset(16),
    )
    trainer.train()
    logs = trainer.state.log_history[0]
    assert logs["advantages/duplicated_frac"] == pytest.approx(0.5)  # one of the two rollout groups
    assert logs["expert/sft_loss"] > 0  # the expert rows still train
