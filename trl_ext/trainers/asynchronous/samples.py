"""What the asynchronous trainer adds to the samples on their way from the worker's queue to the loss.

* `checked_rollout_queue`: the worker's queue, each sample checked as the trainer takes it (shapes, dtypes, a 0/1
  completion mask with something to train, finite log-probs ≤ 0 on the trained tokens, a finite advantage, a policy
  version the trainer has published). A malformed sample is a ValueError naming the worker, the sample's group and
  version and what is wrong: never trained on. Each sample's version rides along in its `metrics`.
* `VersionedCollator`: TRL's `DataCollatorForRollout`, which also packs each sample's version (`behave_version`,
  `[S]` per row, `-1` padding: the loss reads it for the staleness metric and AReaL's log-linear proximal policy), its
  group (`sample_group`, `-1` padding) and, when the worker stamped it for an estimator that runs over the optimizer
  window, its reward (`sample_reward`, float64, NaN for an unscorable sample and for padding) and, for ReMax, its
  greedy baseline (`sample_baseline`, float64, NaN padding); with MIX's `expert_rows` it first adds the micro-batch's
  expert demonstrations to each row, flagged in `sample_expert`; with `turn_layout` each sample's model turns
  (`turn_window.pack_turns`).
* `sample_values`, `expert_flags`: what the collator packed per sample, read back for one row.
* `HEALTH_POLL_S`: how often the trainer asks the worker's health while the queue is empty (TRL: every 5 s), so that
  a worker that died is reported within a second.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from trl.experimental.async_grpo.async_grpo_trainer import DataCollatorForRollout

from ...async_rollout.episodes import TURN_REWARDS_KEY, TURN_STATES_KEY
from ...async_rollout.scoring import WINDOW_BASELINE_KEY, WINDOW_REWARD_KEY
from .turn_window import pack_turns

VERSION_KEY = "__model_version__"
"""Where a sample's policy version rides in its `metrics` dict, from the queue to the collator (which removes it)."""
EXPERT_KEY = "__expert__"
"""Where an expert demonstration's flag rides in its `metrics` (MIX, `asynchronous/mix.py`), into the collator."""
EXPERT_GROUP = -1
"""The group id of every expert demonstration (no prompt group of the worker's)."""


def check_sample(sample: Any, worker: str, current_version: int) -> None:
    """Raise ValueError naming `worker` and the sample when `sample` (a TRL `RolloutSample`) is malformed."""
    group, version = getattr(sample, "group_id", None), getattr(sample, "model_version", None)
    where = f"{worker}: malformed rollout sample (group_id={group!r}, model_version={version!r})"
    ids = np.asarray(sample.input_ids)
    if ids.ndim != 1 or ids.size < 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"{where}: input_ids must be a 1-D integer array of at least 2 tokens (prompt and completion); got "
            f"shape {ids.shape}, dtype {ids.dtype}"
        )
    mask = np.asarray(sample.completion_mask)
    if mask.shape != ids.shape:
        raise ValueError(f"{where}: completion_mask has shape {mask.shape}, input_ids {ids.shape}; they must match")
    if not np.isin(mask, (0, 1)).all():
        raise ValueError(f"{where}: completion_mask must hold only 0 and 1; got values {np.unique(mask)[:8]}")
    if mask[0] or not mask.any():
        raise ValueError(
            f"{where}: completion_mask must mark at least one completion token after the first token (a token is "
            "trained on its predecessor's prediction)"
        )
    logps = np.asarray(sample.old_log_probs)
    if logps.shape != ids.shape or not np.issubdtype(logps.dtype, np.floating):
        raise ValueError(
            f"{where}: old_log_probs must be a float array shaped like input_ids {ids.shape}; got shape "
            f"{logps.shape}, dtype {logps.dtype}"
        )
    trained = logps[mask.astype(bool)]
    if not np.isfinite(trained).all() or (trained > 1e-4).any():
        bad = trained[~np.isfinite(trained) | (trained > 1e-4)][:4]
        raise ValueError(
            f"{where}: old_log_probs must be finite log-probabilities (<= 0) on the trained tokens; got {bad}"
        )
    advantage = sample.advantage
    if isinstance(advantage, bool) or not isinstance(advantage, numbers.Real) or not np.isfinite(advantage):
        raise ValueError(f"{where}: advantage must be a finite number; got {advantage!r}")
    if isinstance(version, bool) or not isinstance(version, numbers.Integral) or not 0 <= version <= current_version:
        raise ValueError(
            f"{where}: model_version must be an integer between 0 and the trainer's current version {current_version}"
        )
    if not isinstance(sample.metrics, dict):
        raise ValueError(f"{where}: metrics must be a dict of floats; got {type(sample.metrics).__name__}")


class CheckedRolloutQueue:
    """The worker's queue as `RolloutQueueDataset` reads it (`get(timeout=...)`, `qsize()`), each sample checked."""

    def __init__(self, queue: Any, worker: str, version: Callable[[], int]):
        self.queue, self.worker, self.version = queue, worker, version

    def get(self, *args: Any, **kwargs: Any) -> Any:
        sample = self.queue.get(*args, **kwargs)
        check_sample(sample, self.worker, self.version())
        sample.metrics[VERSION_KEY] = int(sample.model_version)
        return sample

    def qsize(self) -> int:
        return self.queue.qsize()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.queue, name)


def checked_rollout_queue(queue: Any, worker: Any, version: Callable[[], int]) -> CheckedRolloutQueue:
    """`queue` checked, its errors naming `worker` (its class, and its process id when it has one)."""
    process = getattr(worker, "_process", None)
    pid = getattr(process, "pid", None)
    name = type(worker).__name__ + (f" (pid {pid})" if pid else "")
    return CheckedRolloutQueue(queue, name, version)


class VersionedCollator(DataCollatorForRollout):
    """TRL's collator; also packs each sample's policy version as `behave_version` and its group as `sample_group`
    (`[S]` per row, `-1` padding), and its reward for the window estimator as `sample_reward` (ReMax's greedy
    baseline as `sample_baseline`) when it has one."""

    expert_rows: Any = None  # MIX's `ExpertRows`, joined to each micro-batch (set by the trainer)
    turn_layout: bool = False  # pack each sample's model turns (`turn_window.pack_turns`; set by the trainer)

    @classmethod
    def from_trl(cls, collator: DataCollatorForRollout) -> VersionedCollator:
        """The same collator as TRL's `collator`, with the versions."""
        return cls(**{f.name: getattr(collator, f.name) for f in dataclasses.fields(collator)})

    def torch_call(self, examples: list[Any]) -> dict[str, Any]:
        (rows,) = examples
        if self.expert_rows is not None:
            self.expert_rows.add_to(rows)
        experts = [[bool(sample["metrics"].pop(EXPERT_KEY, 0.0)) for sample in row.samples] for row in rows]
        versions = [[sample["metrics"].pop(VERSION_KEY, -1) for sample in row.samples] for row in rows]
        stamped = {  # what the worker stamped for the window estimator: each sample's reward, ReMax's baseline
            name: [[sample["metrics"].pop(key, None) for sample in row.samples] for row in rows]
            for name, key in (("sample_reward", WINDOW_REWARD_KEY), ("sample_baseline", WINDOW_BASELINE_KEY))
        }
        groups = [[int(sample["group_id"]) for sample in row.samples] for row in rows]
        turns = pack_turns(rows) if self.turn_layout else None
        for row in rows:  # a per-turn stamp never reaches TRL's metrics
            for sample in row.samples:
                sample["metrics"].pop(TURN_STATES_KEY, None)
                sample["metrics"].pop(TURN_REWARDS_KEY, None)
        batch = super().torch_call(examples)
        batch.update(turns or {})
        width = max(len(v) for v in versions)

        def padded(values: list[list[Any]], fill: Any, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor([v + [fill] * (width - len(v)) for v in values], dtype=dtype)

        batch["behave_version"] = padded(versions, -1, torch.long)
        batch["sample_group"] = padded(groups, -1, torch.long)
        if self.expert_rows is not None:
            batch["sample_expert"] = padded(experts, False, torch.bool)
            self.groups_trained.discard(EXPERT_GROUP)  # TRL's count of the prompt groups trained
        nan = float("nan")
        for name, values in stamped.items():
            if any(v is not None for row in values for v in row):
                batch[name] = padded([[nan if v is None else v for v in row] for row in values], nan, torch.float64)
        return batch


def expert_flags(batch: dict[str, Any], num_samples: int) -> torch.Tensor:
    """`[S]` bool: which of the row's `num_samples` samples are MIX's expert demonstrations (`sample_expert`)."""
    flags = batch.get("sample_expert")
    if flags is None:
        return torch.zeros(num_samples, dtype=torch.bool, device=batch["token_index"].device)
    return flags.reshape(-1)[:num_samples].bool()


def sample_values(batch: dict[str, Any], name: str, grid) -> torch.Tensor:
    """The row's per-sample `name` (`sample_reward`, `sample_group`, `sample_baseline`: `[S]` with padding) for its
    `grid.num_samples` samples, as float64."""
    if name not in batch:
        raise RuntimeError(
            f"AsyncGRPOTrainer: the collated micro-batch has no {name!r}: the advantage estimator runs over the "
            "optimizer window and needs each sample's reward (and ReMax its greedy baseline), which trl_ext's rollout "
            "workers stamp (GroupScorer.sample_metrics); a custom rollout worker must score with trl_ext's "
            "GroupScorer"
        )
    return batch[name].reshape(-1)[: grid.num_samples].to(torch.float64)


HEALTH_POLL_S = 1.0
"""How long the trainer waits on an empty queue before it asks the worker's health again (TRL's default is 5 s)."""
