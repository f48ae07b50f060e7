"""What an environment tells about the model turns of a multi-turn rollout: the state each turn starts from and the
rewards its tools hand out. Read by the synchronous multi-turn trainers (`trl_ext.trainers.grpo.multi_turn`, on TRL's
tool loop) and by the asynchronous transformers worker (`trl_ext.async_rollout.episodes`, its own loop).

The environment protocol (optional, duck-typed; attributes, not methods, so TRL does not offer them as tools):

* `state_key`: a hashable (and picklable, to be gathered across processes) key of the environment's current state;
  read after `reset` for the first turn and after each round of tool calls for the next one. `None` means "no
  state" (the turn joins no anchor group). GiGPO groups the turns that start from the same key across the batch.
* `turn_rewards`: a list the environment's tools append rewards to (cleared by `reset`); the rewards appended by
  the tool calls of turn t are turn t's reward (several calls add up; a turn whose tools append nothing gets 0).

A loop tells `TurnRecorder` when a round of generation starts and after each tool call; a rollout with no
environment has text states and no turn rewards.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import itertools
import math
from collections.abc import Hashable
from typing import Any

STATE_KEY = "state_key"
TURN_REWARDS = "turn_rewards"


class TurnRecorder:
    """What each rollout's environment says when its model turns start: its `state_key` and how many
    `turn_rewards` it holds, read when generation starts (the first turn, after `reset`) and after each tool call
    (the last call of a round of tool calls gives the state the next turn starts from)."""

    def __init__(self, owner: str, environments: list[Any]):
        self.owner = owner
        self.environments = environments
        self.round = 0  # the generation rounds so far: the tools called after generation r are in round r
        self.first: list[tuple[Any, int]] | None = None
        self.after_round: list[dict[int, tuple[Any, int]]] = [{} for _ in environments]

    def generation_starts(self) -> None:
        if self.first is None:
            self.first = [self._read(i) for i in range(len(self.environments))]
        self.round += 1

    def tool_called(self, i: int) -> None:
        self.after_round[i][self.round] = self._read(i)

    def turns(self, i: int, count: int) -> tuple[list[Any], list[float]]:
        """Rollout i's state and reward per row: one per model turn (`count`, from the masks), or a single row
        (no state, every reward) for a completion without a turn.

        A rollout takes part in generation rounds 1, 2, ... for as long as it calls tools, so its turn t starts after
        the tool calls of round t; a round in which none of its tools ran (the model named an unknown tool: TRL answers
        with an error message) left the environment as it was, and the turn after it starts from the same state. A
        round of tool calls with no turn after it (TRL dropped its results past `max_completion_length`, or the next
        turn was cut to nothing) keeps its rewards with the turn that called the tools."""
        first = self.first[i] if self.first is not None else self._read(i)
        rewards = self._rewards(i)
        if count == 0:
            return [None], [sum(rewards[first[1] :])]
        recorded = self.after_round[i]
        if recorded and max(recorded) > count:
            raise ValueError(
                f"{self.owner}: sample {i} has {count} model turn(s) in its completion and tool masks, but its "
                f"environment ({type(self.environments[i]).__name__}) was called after generation round "
                f"{max(recorded)}; a rollout's tools run after its own turns only"
            )
        starts = [first]
        for turn in range(1, count):
            starts.append(recorded.get(turn, starts[-1]))
        positions = [position for _, position in starts] + [len(rewards)]
        return [state for state, _ in starts], [sum(rewards[a:b]) for a, b in itertools.pairwise(positions)]

    def _read(self, i: int) -> tuple[Any, int]:
        environment = self.environments[i]
        name = type(environment).__name__
        state = None
        try:
            state = getattr(environment, STATE_KEY, None)
            rewards = getattr(environment, TURN_REWARDS, None)
        except Exception as error:
            raise ValueError(
                f"{self.owner}: reading the environment of sample {i} ({name}) raised {error!r}"
            ) from error
        if not isinstance(state, Hashable) or _unhashable(state):
            raise ValueError(
                f"{self.owner}: the environment of sample {i} ({name}) has {STATE_KEY}={state!r} of type "
                f"{type(state).__name__}, which is not hashable; use a str, a number or a tuple of them (None: no "
                "state)"
            )
        if rewards is not None and not isinstance(rewards, list):
            raise ValueError(
                f"{self.owner}: the environment of sample {i} ({name}) has {TURN_REWARDS} of type "
                f"{type(rewards).__name__}; it must be a list of numbers its tools append to (cleared by reset)"
            )
        return state, 0 if rewards is None else len(rewards)

    def _rewards(self, i: int) -> list[float]:
        environment = self.environments[i]
        values = list(getattr(environment, TURN_REWARDS, None) or [])
        name = type(environment).__name__
        lengths = [self.first[i][1] if self.first else 0, *(p for _, p in self.after_round[i].values())]
        if len(values) < max(lengths, default=0):
            raise ValueError(
                f"{self.owner}: the environment of sample {i} ({name}) lost entries of {TURN_REWARDS} during the "
                "rollout; tools may only append to it (reset clears it)"
            )
        for k, value in enumerate(values):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(
                    f"{self.owner}: the environment of sample {i} ({name}) has {TURN_REWARDS}[{k}]={value!r}; turn "
                    "rewards must be finite numbers"
                )
        return [float(value) for value in values]


NO_STATE = -(2**63)
"""`state_id` of "no state" (None)."""


def state_id(key: Hashable | None) -> int:
    """A state key as an int64 that crosses processes and tensors: the first 8 bytes of the SHA-256 of the key's
    bytes (a text key's digest) or of its `repr` (an environment's `state_key`: equal keys of the same types have equal
    reprs); None is `NO_STATE`."""
    if key is None:
        return NO_STATE
    data = key if isinstance(key, bytes) else repr(key).encode("utf-8")
    value = int.from_bytes(hashlib.sha256(data).digest()[:8], "little", signed=True)
    return value if value != NO_STATE else NO_STATE + 1


def _unhashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return True
    return False


def recording(tool: Any, recorder: TurnRecorder, i: int) -> Any:
    """`tool`, which tells `recorder` after each call (also a failed one) that rollout i's environment may have
    changed."""
    if inspect.iscoroutinefunction(tool):

        @functools.wraps(tool)
        async def recorded_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await tool(*args, **kwargs)
            finally:
                recorder.tool_called(i)

        return recorded_async

    @functools.wraps(tool)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        try:
            return tool(*args, **kwargs)
        finally:
            recorder.tool_called(i)

    return recorded


__all__ = ["NO_STATE", "STATE_KEY", "TURN_REWARDS", "TurnRecorder", "recording", "state_id"]
