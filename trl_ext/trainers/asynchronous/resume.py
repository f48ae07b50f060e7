"""Resuming an asynchronous run from a checkpoint: the rollout's state besides the weights, optimizer and step.

A checkpoint of HF's `Trainer` holds the weights, the optimizer, the scheduler, the RNG states and the step; TRL's
asynchronous trainer forces `ignore_data_skip` (HF's replay of the first batches would consume the live queue) and
saves the rollout's state only for its own vLLM worker. For trl_ext's offline worker (`TransformersRolloutWorker`,
or any worker with its `start_at`), this module saves and restores the rest, in `ROLLOUT_STATE_FILE` beside the
checkpoint:

* `next_group_id`, the worker's dataset position: one past the last group id trained (gone through `training_step`).
  The worker generates groups in order and the queue is FIFO, so every group before it was trained or dropped (stale,
  or by the estimator), and none after it was trained: the resumed worker starts there (`start_at`) and trains no
  group twice. Collated is not trained: accelerate collates a micro-batch ahead, and what was collated, queued or
  generated but not trained when the checkpoint was written is lost with the process, so the resumed worker
  generates those groups again, with the checkpoint's weights;
* `model_version`, the policy version the checkpoint's weights were last published as: the resumed trainer counts on
  from it (its first sync, at train begin, sends version `model_version + 1`), so the samples' versions and the
  staleness metrics continue;
* `groups_trained`, distinct groups trained so far (TRL's epoch-driven stop counts on from it);
* `seed` and `dataset_size`, which fix what a group id means (the per-epoch orders): a resume with other values is
  refused;
* with MIX's demonstrations, `expert_rows_drawn`: the position of their stream at the last micro-batch trained (the
  ones drawn for micro-batches collated but not trained are drawn again).

`RolloutPosition` follows the trained groups on the main process: the dataloader's collator records each
micro-batch's group ids (`recording`), `training_step` marks the oldest one trained (`trained`). `RolloutStateSaver`
writes the file when the trainer saves a checkpoint; `read_rollout_state` reads it back for `AsyncGRPOTrainer.train`.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import deque
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

ROLLOUT_STATE_FILE = "trl_ext_rollout_state.json"
"""The rollout state's file in a checkpoint folder (TRL's own `rollout_state.json` is its vLLM worker's)."""

STATE_KEYS = ("next_group_id", "groups_trained", "model_version", "seed", "dataset_size", "global_step")


class RolloutPosition:
    """The groups trained so far, followed on the main process (see the module docstring)."""

    def __init__(self) -> None:
        self.next_group_id = 0  # one past the last group id trained (or where the worker started)
        self.groups_trained = 0  # distinct groups trained, those before a resume included
        self.last_trained: tuple[int, ...] = ()  # the group ids of the last micro-batch trained
        self._collated: deque[tuple[int, ...]] = deque()

    def restart(self, next_group_id: int, groups_trained: int) -> None:
        """Continue from a checkpoint's position."""
        self.next_group_id, self.groups_trained = int(next_group_id), int(groups_trained)
        self._collated.clear()

    def recording(self, collate: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
        """`collate` (TRL's collator, on one micro-batch of planned rows), recording the micro-batch's group ids in
        the order the dataloader collates them. A new dataloader (a new `train()`) forgets the old one's."""
        self._collated.clear()

        def collate_and_record(examples: list[Any]) -> Any:
            (rows,) = examples
            self._collated.append(tuple(sorted({sample["group_id"] for row in rows for sample in row.samples})))
            return collate(examples)

        return collate_and_record

    @property
    def pending(self) -> int:
        """Micro-batches collated and not yet trained (accelerate collates one ahead)."""
        return len(self._collated)

    def trained(self) -> None:
        """The oldest micro-batch collated and not yet trained has been trained (nothing on the other processes,
        which collate nothing)."""
        if not self._collated:
            return
        groups = self._collated.popleft()
        self.last_trained = groups
        if groups:  # group ids grow in training order; one split across micro-batches is counted once
            self.groups_trained += sum(1 for g in groups if g >= self.next_group_id)
            self.next_group_id = max(self.next_group_id, max(groups) + 1)


class RolloutStateSaver(TrainerCallback):
    """Writes `ROLLOUT_STATE_FILE` into each checkpoint, on the main process (`on_save`: after HF wrote the
    checkpoint's folder)."""

    def __init__(
        self,
        position: RolloutPosition,
        model_version: Callable[[], int],
        seed: int,
        dataset_size: int,
        extra: Callable[[], dict[str, int]] | None = None,
    ):
        self.position, self.model_version = position, model_version
        self.seed, self.dataset_size = seed, dataset_size
        self.extra = extra  # further integer positions (MIX's `expert_rows_drawn`)

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if not os.path.isdir(folder):
            warnings.warn(
                f"AsyncGRPOTrainer: no checkpoint folder {folder} to write {ROLLOUT_STATE_FILE} into; a resume from "
                "this checkpoint restarts the rollout worker at group 0",
                stacklevel=2,
            )
            return
        rollout_state = {
            "next_group_id": self.position.next_group_id,
            "groups_trained": self.position.groups_trained,
            "model_version": int(self.model_version()),
            "seed": self.seed,
            "dataset_size": self.dataset_size,
            "global_step": state.global_step,
            **(self.extra() if self.extra is not None else {}),
        }
        with open(os.path.join(folder, ROLLOUT_STATE_FILE), "w") as f:
            json.dump(rollout_state, f, indent=1)


def read_rollout_state(
    checkpoint: str | bool | None, output_dir: str, seed: int, dataset_size: int
) -> dict[str, int] | None:
    """The rollout state saved in `checkpoint` (`True`: the last checkpoint of `output_dir`, as HF resolves it), or
    None when there is no checkpoint to resume (HF reports a missing one) or it has no state file (a warning: the
    worker then starts at group 0, the versions at 1, as TRL's trainer does).

    Raises:
        ValueError: The file lacks a field, or was written with another seed or dataset size (its group ids would
            name other prompts).
    """
    if checkpoint is True:
        checkpoint = get_last_checkpoint(output_dir)
    if not checkpoint:
        return None
    path = os.path.join(checkpoint, ROLLOUT_STATE_FILE)
    if not os.path.isfile(path):
        if os.path.isdir(checkpoint):
            warnings.warn(
                f"AsyncGRPOTrainer: resuming from {checkpoint}, which has no {ROLLOUT_STATE_FILE} (written by trl_ext "
                "for its offline worker): the rollout worker starts at group 0 and the policy versions at 1",
                stacklevel=3,
            )
        return None
    with open(path) as f:
        state = json.load(f)
    missing = [key for key in STATE_KEYS if not isinstance(state.get(key), int)]
    if missing:
        raise ValueError(f"AsyncGRPOTrainer: {path} lacks the integer field(s) {', '.join(missing)}")
    for name, value in (("seed", seed), ("dataset_size", dataset_size)):
        if state[name] != value:
            raise ValueError(
                f"AsyncGRPOTrainer: {path} was written with {name}={state[name]}, this run has {name}={value}: its "
                f"position next_group_id={state['next_group_id']} would name other prompts; resume with the same "
                f"seed and train_dataset, or delete the file to restart the rollout worker at group 0"
            )
    return state


__all__ = ["ROLLOUT_STATE_FILE", "RolloutPosition", "RolloutStateSaver", "read_rollout_state"]
