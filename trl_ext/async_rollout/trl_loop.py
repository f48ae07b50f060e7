"""trl_ext's estimators in TRL's own rollout worker (the vLLM path of `AsyncGRPOTrainer`).

TRL's `AsyncRolloutWorker` runs `_AsyncRolloutLoop` in a spawned process and scores each complete group in
`_AsyncRolloutLoop._score_group`: the reward functions, then GRPO's advantage (r − mean)/(std + 1e-8), one per
conversation, stamped on each of the conversation's training rows (a long multi-turn conversation forks into
several). `TRLExtRolloutLoop` keeps TRL's scoring of the rewards and replaces the advantage by the trainer's
estimator on the same group (`GroupScorer.group_advantages`); a conversation the estimator drops (`keep` False) leaves
the queue with its rows. The worker class itself stays TRL's: `use_trl_ext_scoring` points its `_loop_cls` hook at
this loop and hands it the scorer.

ReMax and the per-turn estimators are refused on this path (`refuse_worker_made_inputs`, at the trainer's
construction): ReMax's baseline is the reward of a greedy completion of each prompt, which TRL's loop never generates
(it samples each completion, through its tool loop, at the worker's temperature), and `gigpo` / `step_wise_grpo` need
each episode's turns as one run with the environment's states, while TRL's loop may fork a conversation into several
rows and records no state; trl_ext's transformers worker makes both.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker, _AsyncRolloutLoop

from .scoring import WINDOW_REWARD_KEY, GroupScorer


def rescore_samples(
    samples: list[Any], rows_per_conversation: list[int], completion_ids: list[list[int]], group_id: int, scorer
) -> list[Any]:
    """TRL's scored rows of one group with the advantages of `scorer`'s estimator: conversation i owns the next
    `rows_per_conversation[i]` rows (TRL's order) and its reward is their `metrics["reward"]` (NaN: unscorable,
    advantage 0, as TRL's). Rows of a conversation the estimator drops are left out. With an estimator that runs over
    the trainer's window, each row carries its conversation's reward for it (`WINDOW_REWARD_KEY`) and advantage 0."""
    if sum(rows_per_conversation) != len(samples):
        raise ValueError(
            f"rescore_samples: {len(samples)} rows for conversations of {rows_per_conversation} rows; they must match"
        )
    offsets = np.cumsum([0, *rows_per_conversation[:-1]])
    rewards = np.array([samples[o].metrics["reward"] for o in offsets], dtype=np.float64)
    advantages, keep = scorer.group_advantages(rewards, completion_ids, group_id)
    window_rewards = scorer.shaped_rewards(rewards, completion_ids)[0] if scorer.estimates_in_window else None
    rescored = []
    for i, (start, rows) in enumerate(zip(offsets, rows_per_conversation, strict=True)):
        if not keep[i]:
            continue
        for sample in samples[start : start + rows]:
            sample.advantage = float(advantages[i])
            if window_rewards is not None:  # the trainer's window estimator reads it (`WINDOW_REWARD_KEY`)
                sample.metrics[WINDOW_REWARD_KEY] = float(window_rewards[i])
            rescored.append(sample)
    return rescored


class TRLExtRolloutLoop(_AsyncRolloutLoop):
    """TRL's rollout loop, its advantages from a trl_ext estimator (see the module docstring)."""

    def __init__(self, *args: Any, group_scorer: GroupScorer, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.group_scorer = group_scorer

    async def _score_group(self, group) -> list[Any]:
        samples = await super()._score_group(group)
        rows = [len(sequences) for sequences in group.completions_sequences]
        return rescore_samples(samples, rows, group.completions_ids, group.group_id, self.group_scorer)


def refuse_worker_made_inputs(owner: str, scorer: GroupScorer, worker: Any, backend: str) -> None:
    """Raise ValueError when `scorer`'s estimator reads what only trl_ext's transformers worker makes and the samples
    would come from TRL's vLLM worker (`worker` None with `backend` 'vllm', or TRL's `AsyncRolloutWorker`): a greedy
    baseline (ReMax) or the per-turn records of multi-turn episodes (`gigpo`, `step_wise_grpo`)."""
    trl_worker = isinstance(worker, AsyncRolloutWorker) or (worker is None and backend == "vllm")
    if not trl_worker:
        return
    if scorer.needs_greedy_baseline:
        raise ValueError(
            f"{owner}: advantage_fn={scorer.advantage_fn_name!r} compares each reward with the reward of a greedy "
            "completion of the prompt, which TRL's vLLM rollout worker does not generate; use "
            "rollout_backend='transformers' (trl_ext's worker makes it) or another advantage function"
        )
    if scorer.per_turn:
        raise ValueError(
            f"{owner}: advantage_fn={scorer.advantage_fn_name!r} works on the model turns of each episode, which "
            "TRL's vLLM rollout worker does not record (it may split a conversation into several rows and reads no "
            "environment state); use rollout_backend='transformers' (trl_ext's worker runs the episodes) or a group "
            "advantage function"
        )


def use_trl_ext_scoring(worker: Any, scorer: GroupScorer) -> None:
    """Make TRL's `AsyncRolloutWorker` score with `scorer`'s estimator (nothing for any other worker, which scores
    as it is built to: trl_ext's `TransformersRolloutWorker` already takes the scorer)."""
    if isinstance(worker, AsyncRolloutWorker):
        worker._loop_cls = TRLExtRolloutLoop
        worker._loop_kwargs["group_scorer"] = scorer
