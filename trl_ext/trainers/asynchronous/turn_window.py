"""The model turns of multi-turn episodes in the asynchronous trainer: from the worker's samples to per-turn advantages
over the optimizer window, and to each turn as a sample of the loss (`turns_as_samples`).

An episode of trl_ext's transformers worker (`trl_ext.async_rollout.episodes`) is one sample: its model turns with
the tool outputs between them, `completion_mask` 1 on the model's tokens only. TRL packs the trained tokens of a
sample back to back, so the turns are read where the mask still shows them:

* `pack_turns` (in the collator): each sample's turn lengths (the runs of 1s of its completion mask), the state
  each turn starts from (the environment's `state_key` the worker stamped, as `trl_ext.turn_records.state_id`s; else a
  key of the text the model saw before the turn, the prompt and the tool outputs so far: `core.turns.text_state_keys`,
  as the synchronous trainer keys it) and each turn's reward (the environment's `turn_rewards`, 0 without);
* `window_turn_estimate`: a per-turn estimator (`gigpo`, `step_wise_grpo`) once over the window, one row per turn,
  the rows of an episode in order (`core.turns.turn_advantages`, as the synchronous trainer runs it over its
  generation batch), its advantages put back on the turns' tokens; an episode the estimator drops (`std_threshold`)
  and an unscorable one get advantage 0;
* `row_turns`, `turn_count`: a micro-batch's turns on its `[B, T]` grid and their number, for `turns_as_samples`
  (each turn a sample of the `seq-mean-*` aggregations, counted so in the window).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ...advantages import AdvantageFn
from ...async_rollout.episodes import TURN_REWARDS_KEY, TURN_STATES_KEY
from ...turn_records import NO_STATE, state_id
from ..core.turns import Turns, segment_turns, text_state_keys, turn_advantages, turns_from_lengths

TURN_KEYS = ("turn_lengths", "turn_states", "turn_rewards")
"""The collated per-turn tensors, `[rows, S, K]`: lengths (long, 0 padding), states (int64 `state_id`s, `NO_STATE`
padding) and rewards (float64, 0 padding)."""


def _sample_turns(sample: dict[str, Any]) -> tuple[list[int], list[int], list[float]]:
    """One sample's turn lengths, states and rewards (module docstring); pops the worker's stamps."""
    ids = np.asarray(sample["input_ids"])
    mask = np.asarray(sample["completion_mask"]).astype(bool)
    starts = np.flatnonzero(mask & ~np.concatenate([[False], mask[:-1]]))
    ends = np.flatnonzero(mask & ~np.concatenate([mask[1:], [False]])) + 1
    lengths = (ends - starts).tolist()
    states = sample["metrics"].pop(TURN_STATES_KEY, None)
    rewards = sample["metrics"].pop(TURN_REWARDS_KEY, None) or [0.0] * len(lengths)
    if states is None:  # the text the model saw before each turn
        first = int(starts[0])
        completion = torch.as_tensor(ids[first:]).unsqueeze(0)
        prompt = torch.as_tensor(ids[:first]).unsqueeze(0)
        tool = torch.as_tensor(mask[first:], dtype=torch.long).unsqueeze(0)
        turns = segment_turns(torch.ones_like(completion), tool)
        keys = text_state_keys(prompt, torch.ones_like(prompt), completion, torch.ones_like(completion), tool, turns)
        states = [state_id(key) for key in keys[0]]
    if len(states) != len(lengths) or len(rewards) != len(lengths):
        raise ValueError(
            f"AsyncGRPOTrainer: a sample of group {sample.get('group_id')} has {len(lengths)} model turn(s) in its "
            f"completion mask but {len(states)} turn state(s) and {len(rewards)} turn reward(s) from the worker; "
            "each model turn needs one"
        )
    return lengths, states, [float(r) for r in rewards]


def pack_turns(rows: list[Any]) -> dict[str, torch.Tensor]:
    """`TURN_KEYS` for the collated rows (TRL's packed rows, each holding its `samples`), `[rows, S, K]`."""
    per_row = [[_sample_turns(sample) for sample in row.samples] for row in rows]
    width = max((len(samples) for samples in per_row), default=0)
    depth = max((len(turns[0]) for samples in per_row for turns in samples), default=0)
    packed = {
        "turn_lengths": torch.zeros((len(rows), width, depth), dtype=torch.long),
        "turn_states": torch.full((len(rows), width, depth), NO_STATE, dtype=torch.long),
        "turn_rewards": torch.zeros((len(rows), width, depth), dtype=torch.float64),
    }
    for r, samples in enumerate(per_row):
        for s, values in enumerate(samples):
            for name, value in zip(TURN_KEYS, values, strict=True):
                packed[name][r, s, : len(value)] = torch.tensor(value, dtype=packed[name].dtype)
    return packed


def _local(batch: dict[str, Any], name: str, num_samples: int) -> torch.Tensor:
    """The row's `[S, K]` of per-turn tensor `name` for its `num_samples` samples."""
    if name not in batch:
        raise RuntimeError(
            f"AsyncGRPOTrainer: the collated micro-batch has no {name!r}: the per-turn layout is packed by the "
            "trainer's collator (VersionedCollator.turn_layout)"
        )
    values = batch[name]
    return values.reshape(-1, values.size(-1))[:num_samples]


def row_turns(batch: dict[str, Any], num_samples: int, width: int) -> Turns:
    """The turns of a micro-batch's `[num_samples, width]` grid of trained tokens."""
    return turns_from_lengths(_local(batch, "turn_lengths", num_samples).to(torch.long), width)


def turn_count(batch: dict[str, Any], num_samples: int) -> torch.Tensor:
    """The number of model turns of a micro-batch's `num_samples` samples (the rows of `turns_as_samples`)."""
    return (_local(batch, "turn_lengths", num_samples) > 0).sum()


def window_turn_estimate(
    estimator: AdvantageFn,
    window: Any,
    batches: list[dict[str, Any]],
    rewards: torch.Tensor,
    groups: torch.Tensor,
    mask: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The per-turn estimator's advantages `[N, T]` over the window (module docstring) and its metrics.

    Args:
        estimator: The config's per-turn estimator.
        window: The window's `WindowGather` (its samples gathered already).
        batches: This process's micro-batches (their `TURN_KEYS`).
        rewards: `[N]` each episode's reward (NaN: unscorable).
        groups: `[N]` each episode's group.
        mask: `[N, T]` the trained tokens.
    """
    grids = window.grids
    local_depth = torch.tensor(max([b["turn_lengths"].size(-1) for b in batches] + [1]), device=mask.device)
    depth = int(window.accelerator.reduce(local_depth, "max"))

    def gathered(name: str, fill: int) -> torch.Tensor:
        per_batch = [
            torch.nn.functional.pad(_local(b, name, g.num_samples), (0, depth - b[name].size(-1)), value=fill)
            for b, g in zip(batches, grids, strict=True)
        ]
        return window.samples([values.to(mask.device) for values in per_batch])

    lengths, states = gathered("turn_lengths", 0), gathered("turn_states", NO_STATE)
    turn_rewards = gathered("turn_rewards", 0)
    turns = turns_from_lengths(lengths, mask.size(1))
    real = mask.any(dim=1)
    if not torch.equal(lengths.sum(1)[real], mask.sum(1)[real]):
        raise RuntimeError(
            "AsyncGRPOTrainer: the turn lengths of a sample do not add up to its trained tokens; the packed row "
            "and the collated turns disagree"
        )
    used = real & torch.isfinite(rewards)
    advantages = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    if not bool(used.any()):
        return advantages, {}
    count = turns.count[used].tolist()
    state_rows = [
        [None if v == NO_STATE else v for v in row[:c]] for row, c in zip(states[used].tolist(), count, strict=True)
    ]
    reward_rows = [row[:c] for row, c in zip(turn_rewards[used].tolist(), count, strict=True)]
    values, keep, metrics = turn_advantages(
        estimator,
        rewards[used].to(torch.float64),
        groups[used].long(),
        Turns(turns.index[used], turns.count[used]),
        state_rows,
        reward_rows,
        owner="AsyncGRPOTrainer",
    )
    advantages[used] = torch.where(keep.unsqueeze(1), values.to(torch.float32), 0.0)
    stats = {f"advantage/{k}": float(v) for k, v in metrics.items()}
    stats["turns/per_completion"] = float(turns.count[used].float().mean())
    return advantages, stats


__all__ = ["TURN_KEYS", "pack_turns", "row_turns", "turn_count", "window_turn_estimate"]
