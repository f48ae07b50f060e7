"""Score one complete group of completions in the rollout worker: rewards, then a trl_ext advantage estimator.

TRL's asynchronous GRPO (`trl.experimental.async_grpo`) scores in its rollout worker, one group at a time (all the
`num_generations` completions of one prompt), and stamps ONE advantage per sequence on each `RolloutSample`.
`GroupScorer` does the same as TRL's `_AsyncRolloutLoop._score_group`, with any trl_ext group estimator in place of
TRL's fixed `(R - mean) / (std + 1e-8)`:

1. every reward function is called with `prompts=`, `completions=`, `completion_ids=` and the dataset's other
   columns as keyword arguments (sync ones in turn, async ones awaited together); a `None` (or NaN) reward is
   NaN: not scored by that function;
2. the reward of sample `i` is the weighted NaN-sum `R_i = Σ_f w_f r_{f,i}` over the functions that scored it; a
   sample that no function scored (every reward None) is *unscorable*: `R_i = NaN`, advantage 0 (still enqueued,
   as TRL does);
3. the estimator (`trl_ext.advantages.get_advantage_fn(name, **args)`) runs on the scorable samples, all with the
   group's id, e.g. GRPO (Shao et al. 2024, arXiv 2402.03300) `A_i = (R_i - mean) / (std + ε)`; a seeded
   `generator` (seed from the scorer's base seed and the group id) and the completion masks built from the
   completion lengths are passed when the estimator declares them;
4. the estimator's `keep` tells which samples enter the loss: the worker does not enqueue the others.

DAPO (arXiv 2503.14476) in the worker, before the estimator: with `drop_uniform_groups` a group whose task rewards all
agree (NaN as 0, the synchronous NaN-sum; before the length penalty) is dropped whole and the worker generates on
(§3.2's dynamic sampling, no cap on the rounds); with `overlong_buffer` > 0 each reward gets the soft overlong penalty
of its length (`trl_ext.advantages.overlong`, §3.4). Both are logged per group (`uniform_group`, `overlong_penalty`).

Where the estimator runs (`check_async_estimator`): a group estimator (one advantage per sequence, from the group's
rewards) runs here, per group (`IN_GROUP`). A token-level estimator that needs only the completion masks (REINFORCE++,
`grpo_verl`, GPG, ...) runs in the trainer over each optimizer window (`IN_WINDOW`: its batch statistics, e.g.
REINFORCE++'s whitening, are the window's, as the synchronous trainers' are the generation batch's): the scorer then
stamps each sample's advantage 0 and its reward, shaped, under `WINDOW_REWARD_KEY` in the sample's metrics, and the
trainer computes the advantages (`trl_ext.trainers.asynchronous.window_pass`). ReMax (Li et al. 2023, arXiv
2310.10505) also runs there; its baseline, the reward of the prompt's greedy completion (`reward_baselines`), is made
in the worker (`needs_greedy_baseline`: the transformers worker generates one greedy completion per prompt with the
batch's weights, `baseline_rewards` scores it like the samples, overlong penalty included, and `score(baseline=...)`
stamps it on every sample of the group under `WINDOW_BASELINE_KEY`); a greedy completion that no reward function
scores gets baseline 0, as in the synchronous trainer (its NaN-sum). So do the per-turn estimators (`gigpo`,
`step_wise_grpo`: `TURN_INPUTS`), on the model turns of the worker's episodes (`episodes.py`). Refused: those needing
inputs neither has (log-probs, entropy, values, teacher log-probs) and GRPO's
`duplicate_experiences` (it copies rows between groups: a result with `source`). The worker is a spawned process, so
the scorer must pickle: `check_picklable`, at construction, names a reward function that does not (a lambda)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
import numbers
import pickle
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .._validation import check_bool, check_number
from ..advantages import AdvantageFn, get_advantage_fn
from ..advantages.overlong import overlong_penalty

__all__ = [
    "CRITIC_INPUTS",
    "IN_GROUP",
    "IN_WINDOW",
    "TEACHER_INPUTS",
    "TURN_INPUTS",
    "WINDOW_BASELINE_KEY",
    "WINDOW_INPUTS",
    "WINDOW_REWARD_KEY",
    "WORKER_BASELINE_INPUTS",
    "WORKER_INPUTS",
    "GroupScore",
    "GroupScorer",
    "check_async_estimator",
    "reward_func_name",
]

WORKER_INPUTS = ("response_mask", "completion_mask", "generator")
"""The estimator inputs the rollout worker can provide per group (besides the rewards and the group ids)."""
WINDOW_INPUTS = ("response_mask", "completion_mask", "old_logprob")
"""The inputs of a token-level estimator the trainer provides over an optimizer window (the trained tokens, the
sampler's log-probs μ)."""
WORKER_BASELINE_INPUTS = ("reward_baselines",)
"""What the rollout worker makes for a token-level estimator besides the rewards: ReMax's baseline, the reward of one
greedy completion per prompt (trl_ext's transformers worker; TRL's vLLM worker makes none: the trainer refuses it)."""
TEACHER_INPUTS = ("teacher_logprob", "teacher_valid_mask")
"""What the window adds when the trainer has a teacher (on-policy distillation): its log-probs of the sampled tokens
and the tokens it can score."""
TURN_INPUTS = ("run_ids", "state_ids")
"""What the window gives a per-turn estimator (it declares `run_ids`): each turn's episode and starting state."""
CRITIC_INPUTS = ("values",)
"""What the window adds when the trainer has a critic (critic PPO): its values of the states tokens are chosen in."""
IN_GROUP, IN_WINDOW = "group", "window"
"""Where an estimator runs: per group in the rollout worker, or over the optimizer window in the trainer."""
WINDOW_REWARD_KEY = "__estimator_reward__"
"""Where a sample's (shaped) reward rides in its `metrics`, from the worker to the trainer's window estimator."""
WINDOW_BASELINE_KEY = "__estimator_baseline__"
"""Where a sample's greedy baseline (ReMax's `reward_baselines`, shaped) rides in its `metrics`, likewise."""

_RESERVED_KWARGS = ("prompts", "completions", "completion_ids")


def reward_func_name(func: Callable) -> str:
    """A reward function's display name (TRL's `get_callable_name`): a function's `__name__`, the wrapped function's
    for a `functools.partial`, the class name for a callable instance."""
    while isinstance(func, functools.partial):
        func = func.func
    return getattr(func, "__name__", type(func).__name__)


def _is_async(func: Callable) -> bool:
    while isinstance(func, functools.partial):
        func = func.func
    call = type(func).__call__ if not inspect.isroutine(func) else None
    return inspect.iscoroutinefunction(func) or (call is not None and inspect.iscoroutinefunction(call))


def check_async_estimator(fn: AdvantageFn, teacher: bool = False, critic: bool = False) -> str:
    """Where the advantage estimator `fn` runs in an asynchronous run: `IN_GROUP` (a group estimator, in the rollout
    worker) or `IN_WINDOW` (a token-level one, in the trainer over the optimizer window; see the module docstring).
    `teacher`: whether the trainer has a teacher (the window then also provides `TEACHER_INPUTS`); `critic`: whether
    it has a critic (`CRITIC_INPUTS`).

    Raises:
        ValueError: `fn` cannot run in either place, with every reason: it is multi-turn (`step_rewards`), it needs
            inputs neither provides (the worker provides `WORKER_INPUTS`, the window `WINDOW_INPUTS` and the worker's
            `WORKER_BASELINE_INPUTS`; e.g. `logprobs`, `entropy`, `values`, `teacher_logprob`), or it copies rows
            between groups (GRPO's `duplicate_experiences`, a result with `source`).
    """
    if not isinstance(fn, AdvantageFn):
        raise TypeError(f"check_async_estimator: expected an AdvantageFn, got {type(fn).__name__}")
    per_turn = "run_ids" in fn.inputs()
    token_level = type(fn).token_level or per_turn
    window = (*WINDOW_INPUTS, *WORKER_BASELINE_INPUTS, *(TEACHER_INPUTS if teacher else ()))
    window += (CRITIC_INPUTS if critic else ()) + (TURN_INPUTS if per_turn else ())
    provided = window if token_level else WORKER_INPUTS
    where = "the trainer's optimizer window" if token_level else "the rollout worker"
    reasons = []
    if per_turn and (teacher or critic):
        reasons.append("a per-turn estimator (one row per model turn) takes no teacher or critic")
    missing = [name for name in fn.needed_inputs() if name not in provided]
    if missing:
        hint = (
            "; a teacher's log-probs come with the on-policy distillation forms (AsyncOnPolicyDistillConfig, ...)"
            if token_level and not teacher and any(name in TEACHER_INPUTS for name in missing)
            else ""
        )
        reasons.append(
            f"it needs inputs {where} does not provide: {', '.join(missing)} (it provides {', '.join(provided)}{hint})"
        )
    if getattr(fn, "duplicate_experiences", False):
        reasons.append(
            "duplicate_experiences copies rows between groups (a result with `source`), which scoring one group "
            "at a time cannot do"
        )
    if reasons:
        kind = (
            "per turn, over the optimizer window" if per_turn
            else "token-level, over the optimizer window" if token_level
            else "per group in the rollout worker"
        )  # fmt: skip
        raise ValueError(
            f"check_async_estimator: advantage estimator {fn.name!r} cannot run asynchronously ({kind}): "
            + "; ".join(reasons)
        )
    return IN_WINDOW if token_level else IN_GROUP


@dataclass(frozen=True)
class GroupScore:
    """The scores of one group of `n` completions (index `i` is completion `i` of the group).

    Attributes:
        rewards: `[n]` float64, the weighted reward sums; NaN for an unscorable sample.
        advantages: `[n]` float64; 0 for unscorable samples and for those the estimator drops.
        keep: `[n]` bool; False for the samples the estimator drops (not enqueued). Unscorable samples are kept.
        rewards_per_func: `[F, n]` float64, each function's (unweighted) reward, NaN where it returned None.
        func_names: the `F` reward functions' names.
        metrics: group metrics: `reward_mean`, `reward_std` (population std of the task rewards over the scorable
            samples, NaN when none), `unscorable`, `dropped` (counts), `uniform_group` (1 when dynamic sampling
            dropped the group), `overlong_penalty` (the mean penalty, with overlong shaping) and the estimator's
            metrics as `advantage/<name>` (the synchronous trainers' names).
        window_rewards: `[n]` float64 with an estimator that runs over the trainer's optimizer window (`IN_WINDOW`):
            the rewards it receives (shaped: with DAPO's overlong penalty; NaN for an unscorable sample); else None.
        window_baseline: The group's greedy baseline with an estimator that reads one (ReMax); else None.
    """

    rewards: np.ndarray
    advantages: np.ndarray
    keep: np.ndarray
    rewards_per_func: np.ndarray
    func_names: tuple[str, ...]
    metrics: dict[str, float] = field(default_factory=dict)
    window_rewards: np.ndarray | None = None
    window_baseline: float | None = None

    def sample_metrics(self, i: int) -> dict[str, float]:
        """The per-sample metrics TRL stamps on `RolloutSample.metrics`: `reward`, `reward_std`, `rewards/<func>`;
        with a window estimator also the reward it receives (`WINDOW_REWARD_KEY`) and, with ReMax, the group's greedy
        baseline (`WINDOW_BASELINE_KEY`), both removed by the trainer's collator."""
        metrics = {
            "reward": float(self.rewards[i]),
            "reward_std": float(self.metrics["reward_std"]),
            **{f"rewards/{name}": float(self.rewards_per_func[f, i]) for f, name in enumerate(self.func_names)},
        }
        if self.window_rewards is not None:
            metrics[WINDOW_REWARD_KEY] = float(self.window_rewards[i])
        if self.window_baseline is not None:
            metrics[WINDOW_BASELINE_KEY] = self.window_baseline
        return metrics


class GroupScorer:
    """Scores complete groups: reward functions, weighted NaN-sum, then a trl_ext advantage estimator (see the module
    docstring). Picklable (for the spawned rollout worker); built once, `score` called once per group.

    Args:
        reward_funcs: A callable or a list of callables (TRL's reward signature: `(prompts, completions,
            completion_ids, **columns) -> list[float | None]`; `async def` ones are awaited). Model ids / paths
            (str) are not accepted: load a reward model inside a picklable callable. May be empty for a loop that
            computes the rewards itself and calls `group_advantages` (`score` then raises).
        reward_weights: One finite weight per function (default all 1).
        advantage_fn: A registered trl_ext estimator name (`trl_ext.advantages.ADVANTAGE_FNS`) that
            `check_async_estimator` accepts; one that runs over the trainer's window (`IN_WINDOW`) is not run here:
            the samples get advantage 0 and their reward for it (`GroupScore.window_rewards`).
        advantage_fn_args: The estimator's arguments.
        seed: Base seed of the per-group `generator` (estimators with random choices, e.g. REC's `drop`).
        drop_uniform_groups: DAPO's dynamic sampling: drop a group whose task rewards all agree (module docstring).
        overlong_buffer: DAPO's overlong shaping: the last tokens before `max_completion_length` over which the
            reward falls, by up to `overlong_penalty_factor` (0: off).
        overlong_penalty_factor: The penalty at `max_completion_length` tokens.
        max_completion_length: The longest completion (needed with `overlong_buffer` > 0).
        teacher: Whether the trainer has a teacher, whose log-probs a window estimator may read (distillation).
        reward_weight: With a window estimator, the weight w of a task-reward term computed here: each sample's
            advantage is w·Â, Â the group estimator `reward_advantage_fn` of the group's rewards, which the trainer
            adds to the window estimator's on each token (on-policy distillation's reward term); 0: advantage 0.
        reward_advantage_fn: That group estimator (default `grpo`).
        critic: Whether the trainer has a critic, whose values a window estimator may read (critic PPO's GAE).
    """

    def __init__(
        self,
        reward_funcs: Callable | Sequence[Callable],
        *,
        reward_weights: Sequence[float] | None = None,
        advantage_fn: str = "grpo",
        advantage_fn_args: dict[str, Any] | None = None,
        seed: int = 0,
        drop_uniform_groups: bool = False,
        overlong_buffer: int = 0,
        overlong_penalty_factor: float = 1.0,
        max_completion_length: int | None = None,
        teacher: bool = False,
        reward_weight: float = 0.0,
        critic: bool = False,
        reward_advantage_fn: str = "grpo",
    ):
        funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        for i, func in enumerate(funcs):
            if isinstance(func, str) or not callable(func):
                raise ValueError(
                    f"GroupScorer: reward_funcs[{i}]={func!r} is not valid; must be a callable (model ids / paths "
                    "are not loaded by the rollout worker: wrap a reward model in a picklable callable)"
                )
        self.reward_funcs = funcs
        self.func_names = tuple(reward_func_name(f) for f in funcs)
        if reward_weights is None:
            weights = [1.0] * len(funcs)
        else:
            weights = list(reward_weights)
            if len(weights) != len(funcs):
                raise ValueError(
                    f"GroupScorer: reward_weights has {len(weights)} entries but there are {len(funcs)} reward "
                    "functions; must be one weight per function"
                )
            for i, w in enumerate(weights):
                if not isinstance(w, numbers.Real) or isinstance(w, bool) or not math.isfinite(w):
                    raise ValueError(f"GroupScorer: reward_weights[{i}]={w!r} is not valid; must be a finite number")
        self.reward_weights = np.asarray(weights, dtype=np.float64)
        if not isinstance(advantage_fn, str):
            raise TypeError(
                f"GroupScorer: advantage_fn must be an estimator name (str), got {type(advantage_fn).__name__}"
            )
        if advantage_fn_args is not None and not isinstance(advantage_fn_args, dict):
            raise TypeError(
                f"GroupScorer: advantage_fn_args must be a dict or None, got {type(advantage_fn_args).__name__}"
            )
        self.advantage_fn_name = advantage_fn
        self.advantage_fn_args = dict(advantage_fn_args or {})
        self.estimator = get_advantage_fn(advantage_fn, **self.advantage_fn_args)
        self.placement = check_async_estimator(self.estimator, teacher=teacher, critic=critic)
        check_number("GroupScorer", "reward_weight", reward_weight, ge=0)
        self.reward_weight = float(reward_weight)
        self.reward_estimator = None
        if reward_weight > 0:
            if self.placement != IN_WINDOW:
                raise ValueError(
                    f"GroupScorer: reward_weight={reward_weight} adds a task-reward term to an estimator that runs "
                    f"over the trainer's window; {advantage_fn!r} runs here on the rewards already: leave it 0"
                )
            self.reward_estimator = get_advantage_fn(reward_advantage_fn)
            if check_async_estimator(self.reward_estimator) != IN_GROUP or self.reward_estimator.needed_inputs():
                raise ValueError(
                    f"GroupScorer: reward_advantage_fn={reward_advantage_fn!r} must be a group estimator of the "
                    "rewards alone (e.g. grpo, rloo, reinforce)"
                )
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"GroupScorer: seed={seed!r} is not valid; must be an integer")
        self.seed = seed
        check_bool("GroupScorer", "drop_uniform_groups", drop_uniform_groups)
        check_number("GroupScorer", "overlong_buffer", overlong_buffer, ge=0, integer=True)
        check_number("GroupScorer", "overlong_penalty_factor", overlong_penalty_factor, ge=0)
        if overlong_buffer and (max_completion_length is None or overlong_buffer > max_completion_length):
            raise ValueError(
                f"GroupScorer: overlong_buffer={overlong_buffer} needs max_completion_length >= it (got "
                f"{max_completion_length!r})"
            )
        self.drop_uniform_groups = drop_uniform_groups
        self.overlong = (max_completion_length, overlong_buffer, overlong_penalty_factor) if overlong_buffer else None
        self._inputs = tuple(name for name in self.estimator.inputs() if name in WORKER_INPUTS)
        self.check_picklable()

    @property
    def estimates_in_window(self) -> bool:
        """Whether the estimator runs over the trainer's optimizer window rather than here (module docstring)."""
        return self.placement == IN_WINDOW

    @property
    def per_turn(self) -> bool:
        """Whether the estimator works on the model turns of multi-turn episodes (it declares `run_ids`): the worker
        stamps each episode's turn states and rewards, and the trainer lays the window out one row per turn."""
        return "run_ids" in self.estimator.inputs()

    @property
    def needs_greedy_baseline(self) -> bool:
        """Whether the estimator reads ReMax's `reward_baselines`: the worker then generates one greedy completion per
        prompt, scores it (`baseline_rewards`) and passes it to `score` (module docstring)."""
        return "reward_baselines" in self.estimator.needed_inputs()

    def check_picklable(self) -> None:
        """Raise `TypeError` naming the reward function (or the estimator) that cannot be pickled: the rollout worker
        runs in a spawned process (TRL's rule: module-level functions, `functools.partial` or callable instances,
        never lambdas or closures)."""
        for i, func in enumerate(self.reward_funcs):
            try:
                pickle.dumps(func)
            except Exception as e:
                raise TypeError(
                    f"GroupScorer: reward function reward_funcs[{i}] ({self.func_names[i]!r}) cannot be pickled "
                    f"({type(e).__name__}: {e}); the rollout worker runs in a spawned process, so use a module-level "
                    "function, functools.partial or a callable class instance, not a lambda or a closure"
                ) from e
        try:
            pickle.dumps(self.estimator)
        except Exception as e:
            raise TypeError(
                f"GroupScorer: advantage estimator {self.advantage_fn_name!r} cannot be pickled ({e})"
            ) from e

    def generator(self, group_id: int) -> torch.Generator:
        """The group's random generator, seeded from the base seed and the group id (reproducible per group)."""
        state = np.random.SeedSequence([self.seed & 0xFFFFFFFF, int(group_id) & 0xFFFFFFFFFFFFFFFF]).generate_state(2)
        return torch.Generator().manual_seed(int(state[0]) << 31 ^ int(state[1]))

    def _call_reward_funcs(self, kwargs: dict[str, Any]) -> list[Any]:
        results: list[Any] = [None] * len(self.reward_funcs)
        coroutines = {}
        for f, func in enumerate(self.reward_funcs):
            if _is_async(func):
                coroutines[f] = func(**kwargs)
            else:
                results[f] = func(**kwargs)
        if coroutines:
            for f, value in zip(coroutines, _run_coroutines(list(coroutines.values())), strict=True):
                results[f] = value
        return results

    def _check_rewards(self, f: int, values: Any, n: int) -> list[float]:
        name = self.func_names[f]
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence | np.ndarray | torch.Tensor):
            raise ValueError(
                f"GroupScorer: reward function {name!r} returned {type(values).__name__}; must return a list of "
                f"{n} floats (or None)"
            )
        values = values.tolist() if isinstance(values, np.ndarray | torch.Tensor) else list(values)
        if len(values) != n:
            raise ValueError(
                f"GroupScorer: reward function {name!r} returned {len(values)} rewards for {n} completions"
            )
        out = []
        for i, value in enumerate(values):
            if value is None:
                out.append(math.nan)
                continue
            if not isinstance(value, numbers.Real):  # bools count as 0 / 1, as in TRL
                raise ValueError(
                    f"GroupScorer: reward function {name!r} returned {value!r} for completion {i}; must be a float "
                    "or None"
                )
            if math.isinf(value):
                raise ValueError(f"GroupScorer: reward function {name!r} returned {value} for completion {i}")
            out.append(float(value))
        return out

    def score(
        self,
        *,
        prompts: list[Any],
        completions: list[Any],
        completion_ids: list[list[int]],
        group_id: int,
        reward_kwargs: dict[str, list[Any]] | None = None,
        baseline: float | None = None,
    ) -> GroupScore:
        """Score one complete group of `n = len(completions)` samples (all generated for the same prompt).

        Args:
            prompts / completions / completion_ids: The `n` prompts (repeated), completions (text, or assistant
                messages for conversational prompts) and completion token ids, as the reward functions receive them.
            group_id: The group's id (the estimator's group id; seeds the group's `generator`).
            reward_kwargs: The dataset's other columns, one list of `n` values each, passed to the reward functions.
            baseline: The group's greedy baseline (`baseline_rewards`), required when `needs_greedy_baseline` and
                refused otherwise; stamped on every sample (`GroupScore.window_baseline`).
        """
        n = len(completions)
        if len(prompts) != n or len(completion_ids) != n:
            raise ValueError(
                f"GroupScorer.score: prompts ({len(prompts)}), completions ({n}) and completion_ids "
                f"({len(completion_ids)}) must have the same length"
            )
        if n == 0:
            raise ValueError("GroupScorer.score: the group is empty")
        if (baseline is None) == self.needs_greedy_baseline:
            raise ValueError(
                f"GroupScorer.score: advantage estimator {self.advantage_fn_name!r} "
                + ("needs the group's greedy baseline (baseline=...)" if baseline is None else "reads no baseline")
            )
        if baseline is not None and not math.isfinite(baseline):
            raise ValueError(f"GroupScorer.score: baseline={baseline!r} is not valid; must be finite")
        per_func, rewards = self._rewards("score", prompts, completions, completion_ids, reward_kwargs)
        advantages, keep, metrics, shaped = self._group_advantages(rewards, completion_ids, group_id)
        window_rewards = shaped if self.estimates_in_window else None
        baseline = None if baseline is None else float(baseline)
        return GroupScore(rewards, advantages, keep, per_func, self.func_names, metrics, window_rewards, baseline)

    def baseline_rewards(
        self,
        *,
        prompts: list[Any],
        completions: list[Any],
        completion_ids: list[list[int]],
        reward_kwargs: dict[str, list[Any]] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """ReMax's baselines: the rewards of `m` greedy completions, one per prompt (different prompts: one call of
        each reward function, with each prompt's own dataset columns), weighted and NaN-summed as in `score`, then
        shaped as the samples' rewards are (DAPO's overlong penalty from their lengths). Returns `(baselines [m],
        unscorable [m])`: a greedy completion that no reward function scored gets baseline 0 (the synchronous
        trainer's NaN-sum gives it 0 too), never NaN."""
        n = len(completions)
        if len(prompts) != n or len(completion_ids) != n or n == 0:
            raise ValueError(
                f"GroupScorer.baseline_rewards: prompts ({len(prompts)}), completions ({n}) and completion_ids "
                f"({len(completion_ids)}) must have the same length, at least 1"
            )
        _, rewards = self._rewards("baseline_rewards", prompts, completions, completion_ids, reward_kwargs)
        unscorable = np.isnan(rewards)
        shaped = self.shaped_rewards(rewards, completion_ids)[0]
        return np.where(unscorable, 0.0, shaped), unscorable

    def _rewards(
        self, owner: str, prompts: list[Any], completions: list[Any], completion_ids: list[list[int]], reward_kwargs
    ) -> tuple[np.ndarray, np.ndarray]:
        """`(per_func [F, n], rewards [n])`: every reward function's rewards, and their weighted NaN-sum (NaN where no
        function scored)."""
        if not self.reward_funcs:
            raise ValueError(f"GroupScorer.{owner}: the scorer has no reward functions (reward_funcs is empty)")
        extra = dict(reward_kwargs or {})
        clash = [k for k in extra if k in _RESERVED_KWARGS]
        if clash:
            raise ValueError(f"GroupScorer.{owner}: reward_kwargs may not contain {', '.join(clash)}")
        kwargs = dict(prompts=prompts, completions=completions, completion_ids=completion_ids, **extra)
        raw = self._call_reward_funcs(kwargs)
        n = len(completions)
        per_func = np.array([self._check_rewards(f, values, n) for f, values in enumerate(raw)], dtype=np.float64)
        unscorable = np.all(np.isnan(per_func), axis=0)
        rewards = np.nansum(per_func * self.reward_weights[:, None], axis=0)
        rewards[unscorable] = np.nan
        return per_func, rewards

    def group_advantages(
        self, rewards: Any, completion_ids: list[list[int]], group_id: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The estimator's `(advantages [n], keep [n])` for one group's rewards `[n]` (NaN: unscorable, advantage 0,
        kept), the step after the reward functions in `score` (for a loop that computes the rewards itself, e.g.
        TRL's `_score_group`). `completion_ids` gives the completion lengths (the masks some estimators read). With
        an estimator that runs over the trainer's window the advantages are 0: see `shaped_rewards`."""
        rewards = np.asarray(rewards, dtype=np.float64)
        if rewards.ndim != 1 or rewards.size != len(completion_ids) or rewards.size == 0:
            raise ValueError(
                f"GroupScorer.group_advantages: rewards must be 1-D [n] with one entry per completion_ids row (n >= "
                f"1), got shape {rewards.shape} for {len(completion_ids)} completions"
            )
        advantages, keep, _, _ = self._group_advantages(rewards, completion_ids, group_id)
        return advantages, keep

    def shaped_rewards(self, rewards: Any, completion_ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray | None]:
        """`(shaped [n], penalty [n] or None)`: one group's rewards as the estimator receives them, with DAPO's
        overlong penalty from the completion lengths when `overlong_buffer` > 0 (NaN stays NaN: unscorable)."""
        rewards = np.asarray(rewards, dtype=np.float64)
        if self.overlong is None:
            return rewards, None
        penalty = overlong_penalty(torch.tensor([len(ids) for ids in completion_ids]), *self.overlong).double()
        return rewards + penalty.numpy(), penalty.numpy()

    def _group_advantages(
        self, rewards: np.ndarray, completion_ids: list[list[int]], group_id: int
    ) -> tuple[np.ndarray, np.ndarray, dict[str, float], np.ndarray]:
        n = rewards.size
        unscorable = np.isnan(rewards)
        advantages = np.zeros(n, dtype=np.float64)
        keep = np.ones(n, dtype=bool)
        metrics: dict[str, float] = {}
        task = np.nan_to_num(rewards, nan=0.0)  # the task rewards, as the reward functions gave them
        uniform = self.drop_uniform_groups and n >= 2 and task.max() == task.min()
        metrics["uniform_group"] = float(uniform)
        shaped, penalty = self.shaped_rewards(rewards, completion_ids)
        if penalty is not None:
            metrics["overlong_penalty"] = float(penalty.mean())
        scorable = np.flatnonzero(~unscorable)
        if scorable.size:
            metrics["reward_mean"] = float(rewards[scorable].mean())
            metrics["reward_std"] = float(rewards[scorable].std())
        if uniform:  # dropped whole: no advantage, never enqueued
            keep[:] = False
        elif scorable.size and self.reward_estimator is not None:  # the task term beside the window's estimator
            task_rewards = torch.from_numpy(shaped[scorable].copy())
            result = self.reward_estimator.compute(task_rewards, [group_id] * scorable.size)
            advantages[scorable] = self.reward_weight * result.advantages.double().cpu().numpy()
        elif scorable.size and not self.estimates_in_window:
            result = self._advantages(shaped[scorable], [completion_ids[i] for i in scorable], group_id)
            kept = result.keep.cpu().numpy().astype(bool)
            advantages[scorable] = np.where(kept, result.advantages.double().cpu().numpy(), 0.0)
            keep[scorable] = kept
            metrics.update({f"advantage/{k}": float(v) for k, v in (result.metrics or {}).items()})
        if not scorable.size:
            metrics["reward_mean"] = metrics["reward_std"] = math.nan
        metrics["unscorable"] = float(unscorable.sum())
        metrics["dropped"] = float((~keep).sum())
        return advantages, keep, metrics, shaped

    def _advantages(self, rewards: np.ndarray, completion_ids: list[list[int]], group_id: int):
        inputs: dict[str, Any] = {}
        if "generator" in self._inputs:
            inputs["generator"] = self.generator(group_id)
        if "response_mask" in self._inputs or "completion_mask" in self._inputs:
            lengths = torch.tensor([len(ids) for ids in completion_ids])
            mask = torch.arange(max(1, int(lengths.max()))) < lengths[:, None]
            for name in ("response_mask", "completion_mask"):
                if name in self._inputs:
                    inputs[name] = mask
        m = rewards.size
        result = self.estimator.compute(torch.from_numpy(rewards.copy()), [group_id] * m, **inputs)
        if result.source is not None:
            raise RuntimeError(
                f"GroupScorer: advantage estimator {self.advantage_fn_name!r} returned a `source` (rows copied "
                "between groups), which per-group scoring cannot honour"
            )
        if result.advantages.shape != (m,) or result.keep.shape != (m,):
            raise RuntimeError(
                f"GroupScorer: advantage estimator {self.advantage_fn_name!r} returned advantages of shape "
                f"{tuple(result.advantages.shape)} and keep of shape {tuple(result.keep.shape)}; expected ({m},)"
            )
        return result


def _run_coroutines(coroutines: list[Any]) -> list[Any]:
    """Await the async reward functions' coroutines together (in a thread when an event loop already runs here)."""

    async def gather() -> list[Any]:
        return list(await asyncio.gather(*coroutines))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(gather())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(gather())
        except BaseException as e:
            box["error"] = e

    thread = threading.Thread(target=target, name="group-scorer-async-rewards")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
