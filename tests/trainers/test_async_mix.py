"""MIX / MIX-CHORD asynchronously (`trl_ext.trainers.asynchronous.mix`): expert demonstrations joined to each
micro-batch's packed rows, flagged, and trained with the mixing loss beside the worker's rollouts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from async_helpers import StubTransfer, StubWorker, gradient, make_samples
from trainer_helpers import cpu_config
from transformers import AutoModelForCausalLM
from trl.experimental.async_grpo.packing import TreeRow

from trl_ext import AsyncGRPOTrainer
from trl_ext.losses import get_policy_loss
from trl_ext.toy import build_tokenizer, toy_dataset, toy_expert_dataset, toy_reward
from trl_ext.trainers.asynchronous.forms import async_config_class
from trl_ext.trainers.asynchronous.mix import ExpertRows
from trl_ext.trainers.asynchronous.packed_rows import PackedRow
from trl_ext.trainers.asynchronous.samples import EXPERT_GROUP, VERSION_KEY, VersionedCollator
from trl_ext.trainers.mix.expert_data import ExpertStream

DEMOS = [
    {"prompt": "Repeat the letter c:", "completion": " c c"},
    {"prompt": "Repeat the letter d:", "completion": " d"},
]


def _rollout_row(samples: list[dict], advantages) -> TreeRow:
    row = TreeRow()
    for sample, advantage in zip(samples, advantages, strict=True):
        row.add({
            "input_ids": np.asarray(sample["input_ids"]), "completion_mask": np.asarray(sample["completion_mask"]),
            "old_log_probs": np.asarray(sample["old_log_probs"]), "advantage": float(advantage),
            "group_id": sample["group_id"], "metrics": {VERSION_KEY: 1},
        })  # fmt: skip
    return row


def test_the_collator_joins_the_demonstrations_to_each_row_flagged(random_tiny_model):
    tokenizer = build_tokenizer()
    experts = ExpertRows("test", DEMOS, tokenizer, max_completion_length=8, seed=0, per_row=2, version=lambda: 3)
    prompt = tokenizer(text="Repeat the letter c:")["input_ids"]
    completion = tokenizer(" c c", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert experts.rows[0] == (prompt, completion)  # tokenized as the worker tokenizes prompts, ending with eos
    drawn = ExpertStream(len(DEMOS), seed=0).take(2)  # the stream's next two
    samples = make_samples(tokenizer, AutoModelForCausalLM.from_pretrained(random_tiny_model), groups=1, size=3)
    collator = VersionedCollator(pad_token_id=tokenizer.pad_token_id, num_processes=1)
    collator.expert_rows = experts
    batch = collator([[_rollout_row(samples, [0.5, -0.5, 1.0])]])
    assert batch["sample_expert"][0].tolist() == [False, False, False, True, True]
    assert batch["behave_version"][0].tolist() == [1, 1, 1, 3, 3]  # the trainer's version: never stale
    assert EXPERT_GROUP not in collator.groups_trained and collator.groups_trained == {0}
    row = PackedRow.from_inputs(batch)
    labels = row.forward_kwargs["shift_labels"][0]
    for sample, index in zip((3, 4), drawn, strict=True):  # each demonstration's completion is trained, advantage 0
        terms = row.segment_id == sample
        assert labels[row.token_index[terms]].tolist() == experts.rows[index][1]
        assert not row.advantages[terms].any()
    assert row.advantages[row.segment_id < 3].abs().sum() > 0
    assert experts.stream.position == 2


@pytest.mark.parametrize("algorithm", ["mix", "mix_chord"])
def test_the_mixing_loss_trains_rollouts_and_demonstrations_of_the_packed_row(algorithm, random_tiny_model, tmp_path):
    """The trainer's loss on a packed row of 4 rollouts and 4 demonstrations equals the mixing loss on the same rows
    from a plain forward (PPO on the rollouts against μ, SFT on the demonstrations, each part over its own rows)."""
    tokenizer = build_tokenizer()
    config = cpu_config(async_config_class(algorithm), str(tmp_path), token_budget=0, per_device_train_batch_size=4)
    assert config.expert_rows_per_device == 4
    trainer = AsyncGRPOTrainer(
        model=random_tiny_model, reward_funcs=toy_reward, args=config, train_dataset=toy_dataset(16),
        processing_class=tokenizer, rollout_worker=StubWorker(), weight_transfer=StubTransfer(),
        expert_dataset=toy_expert_dataset(16),
    )  # fmt: skip
    plain = AutoModelForCausalLM.from_pretrained(random_tiny_model)
    samples = make_samples(tokenizer, plain, groups=1, size=4, seed=3)
    collator = VersionedCollator(pad_token_id=tokenizer.pad_token_id, num_processes=1)
    collator.expert_rows = trainer.expert_rows
    advantages = [1.0, -1.0, 0.5, -0.5]
    batch = collator([[_rollout_row(samples, advantages)]])
    expert = batch["sample_expert"][0]
    assert expert.tolist() == [False] * 4 + [True] * 4

    trainer.model_version = 1
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    trainer._get_num_items_in_batch([batch], trainer.accelerator.device)
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    assert gradient(trainer.model).norm() > 0

    # the same rows, unpacked, through a plain forward of the same weights
    demos = [trainer.expert_rows.rows[i] for i in ExpertStream(len(trainer.expert_rows.rows), seed=config.seed).take(4)]
    rows = [np.asarray(s["input_ids"]) for s in samples] + [np.asarray(p + c) for p, c in demos]
    masks = [np.asarray(s["completion_mask"]) for s in samples] + [
        np.asarray([0] * len(p) + [1] * len(c)) for p, c in demos
    ]
    olds = [np.asarray(s["old_log_probs"]) for s in samples] + [np.zeros(len(p) + len(c)) for p, c in demos]
    width = max(int(m.sum()) for m in masks)
    logprob, old, action = torch.zeros(8, width), torch.zeros(8, width), torch.zeros(8, width, dtype=torch.bool)
    with torch.no_grad():
        for b, (ids, mask, mu) in enumerate(zip(rows, masks, olds, strict=True)):
            logps = torch.log_softmax(plain(torch.tensor(ids)[None]).logits[0].float(), -1)
            targets = np.flatnonzero(mask)
            logprob[b, : targets.size] = logps[targets - 1].gather(1, torch.tensor(ids[targets])[:, None])[:, 0]
            old[b, : targets.size] = torch.tensor(mu[targets])
            action[b, : targets.size] = True
    expected, _ = get_policy_loss(algorithm, **config.policy_loss_kwargs())(
        logprob=logprob, old_logprob=old, action_mask=action, advantages=torch.tensor(advantages + [0.0] * 4),
        expert_mask=expert, step=torch.zeros(8, dtype=torch.long), global_valid_toks=action.sum(),
        global_valid_seqs=torch.tensor(8), expert_valid_toks=action[4:].sum(), expert_valid_seqs=torch.tensor(4),
    )  # fmt: skip
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-4, abs=1e-6)


def test_a_mix_config_refuses_what_an_asynchronous_run_cannot_do():
    form = async_config_class("mix")
    with pytest.raises(ValueError, match=r"expert_data_ratio=1 .* \[0, 1\)"):
        form(output_dir="out", use_cpu=True, token_budget=0, expert_data_ratio=1)
    with pytest.raises(ValueError, match="ppo_mini_batch_size=4 asks for the reference's per-micro-batch weighting"):
        form(output_dir="out", use_cpu=True, token_budget=0, ppo_mini_batch_size=4)


def test_a_checkpoint_saves_the_demonstration_streams_position_at_the_last_micro_batch_trained(
    random_tiny_model, tmp_path
):
    """The collator draws a micro-batch ahead: the saved position leaves out what the untrained one drew, and a
    resume sets the stream there."""
    import json

    from trl_ext.trainers.asynchronous.resume import ROLLOUT_STATE_FILE, RolloutStateSaver

    class ResumableWorker(StubWorker):  # a worker that can start at a group: the offline worker's protocol
        def start_at(self, group_id: int) -> None:
            self.start = group_id

    config = cpu_config(async_config_class("mix"), str(tmp_path), token_budget=0, per_device_train_batch_size=2)
    trainer = AsyncGRPOTrainer(
        model=random_tiny_model, reward_funcs=toy_reward, args=config, train_dataset=toy_dataset(16),
        processing_class=build_tokenizer(), rollout_worker=ResumableWorker(), weight_transfer=StubTransfer(),
        expert_dataset=toy_expert_dataset(16),
    )  # fmt: skip
    collate = trainer.rollout_position.recording(lambda examples: None)
    for _ in range(3):  # three micro-batches collated, each drawing 2 demonstrations, two of them trained
        collate([[_rollout_row([], [])]])
        trainer.expert_rows.stream.take(2)
    trainer.rollout_position.trained()
    trainer.rollout_position.trained()
    assert trainer._expert_position() == {"expert_rows_drawn": 4}
    saver = next(c for c in trainer.callback_handler.callbacks if isinstance(c, RolloutStateSaver))
    folder = tmp_path / "checkpoint-2"
    folder.mkdir()
    state = type("State", (), {"is_world_process_zero": True, "global_step": 2})()
    saver.on_save(config, state, None)
    assert json.loads((folder / ROLLOUT_STATE_FILE).read_text())["expert_rows_drawn"] == 4
