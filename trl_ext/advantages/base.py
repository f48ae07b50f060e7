"""Shared machinery for advantage estimators: base class and registry, input validation, group statistics.

An advantage estimator turns per-sample rewards `R` (one per generated completion) into advantages `A`.
Group estimators (GRPO, RLOO, OPMD, ...) compare each sample with the other samples of its *group* — the
completions generated for the same prompt, identified by a shared group id.  Token-level estimators
(PPO's GAE, REINFORCE++, ReMax, on-policy distillation, JSD, Clip_B / Clip_V, the `*_verl` variants) return one
advantage per response token.

Per-token inputs have fixed names, which a trainer passes as they are: `response_mask` `[N, T]` (the loss mask,
may have gaps), `completion_mask` (the completion's tokens, tool outputs included), `logprobs` (the sampling
policy's log-prob of each sampled token), `entropy` (the per-token entropy from the same pass), `necs`,
`teacher_logprob`, `old_logprob`; per-sample: `reward_baselines` `[N]`.

Following verl (`verl/trainer/ppo/core_algos.py`) and Trinity-RFT (`trinity/algorithm/advantage_fn`), a group
with a single sample uses mean 0 and standard deviation 1.

Trinity-RFT drops or duplicates experiences by editing its list of experiences, and filters tokens by editing
its response mask; here the rows stay fixed (row `i` of every output is sample `i` of the input unless
`AdvantageResult.source` says otherwise) and `AdvantageResult.keep` / `.source` / `.token_keep` describe the
edit.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, ClassVar, NamedTuple

import torch

from .._validation import declared_inputs, required_inputs
from ..components import Component, Registry

GroupIds = torch.Tensor | Sequence[Hashable]


class AdvantageResult(NamedTuple):
    """Output of `AdvantageFn.compute`.

    Attributes:
        advantages: `[N]` (group estimators) or `[N, T]` (token-level estimators), in the rewards' float dtype, one
            per INPUT sample. It holds the raw values even for samples an estimator drops (except REC, whose dropped
            samples get 0 as in the reference); `AdvantageFn.__call__` zeroes them.
        keep: bool `[M]`, one per OUTPUT row; `False` marks rows that must not contribute to the loss. `M = N`
            except for GRPO's `duplicate_experiences` with groups of unequal size (see `source`).
        source: `None` (the identity, `M = N`) or long `[M]`: output row `i` is a copy of input sample `source[i]`,
            its data (completion, masks, log-probs) AND its advantage `advantages[source[i]]`. Only GRPO's
            `duplicate_experiences` sets it (a skipped group's rows become copies of a valid group's); rows that are
            not copies have `source[i] = i`. When a copied group is larger than the group it replaces, its extra
            copies are appended as rows `N, N + 1, ...` (`M > N`), as the reference's batch grows; when it is
            smaller, the replaced group's leftover rows get `keep=False`. A consumer must gather its per-row tensors
            with `source` (across processes when the batch was gathered), then apply `keep` to the gathered rows.
        token_keep: `None` (every token) or bool `[N, T]` (per INPUT sample, like `advantages`): the response tokens
            the estimator keeps, `False` where a token filter (`clipb`, `clipv`) removes a token from the loss. The
            reference removes them from its `response_mask`, so a consumer must drop them from the loss mask too
            (which changes token-mean denominators), not only zero their advantages (`AdvantageFn.__call__` does
            that).
        metrics: `None` or the estimator's metrics by the reference's names (`frac_clipped`, `jsd/mean`, ...), as
            Python floats.
        returns: `None`, or for the estimators that compute value targets (`ppo`'s GAE) `[N, T]` in the
            advantages' dtype, one row per INPUT sample like `advantages`: the critic's regression targets
            R = A + V, A being the advantages BEFORE whitening (the reference's `returns`), 0 outside
            `response_mask`. `AdvantageFn.__call__` does not return them; read them off `compute`'s result.
    """

    advantages: torch.Tensor
    keep: torch.Tensor
    source: torch.Tensor | None = None
    token_keep: torch.Tensor | None = None
    metrics: dict[str, float] | None = None
    returns: torch.Tensor | None = None


class AdvantageFn(Component):
    """Base class of all advantage estimators (build one with `get_advantage_fn`).

    Call shape: `advantages = fn(rewards, group_ids, **inputs)`, or `result = fn.compute(rewards, group_ids,
    **inputs)` for the full `AdvantageResult`. `rewards` is one reward per sample `[N]` (token-level `[N, T]` where
    `token_rewards`); `group_ids` (`[N]`: an integer tensor or a sequence of hashables) marks the samples generated
    for the same prompt (unused, may be None, where `uses_groups` is False); `inputs` are the keyword-only inputs of
    `compute` (`inputs()` lists them, `needed_inputs()` those this instance reads: `response_mask`, `logprobs`,
    `generator`, ...; see the module docstring for their names and shapes). `fn(...)` returns one advantage per
    output row, `[M]` or `[M, T]` (`token_level`), in the rewards' float dtype, 0 on the rows and tokens the
    estimator drops; `compute` returns them raw, with the `keep` / `source` / `token_keep` that describe the drops.

    Subclasses declare their hyperparameters as `arguments` (`Argument` specs: the constructor's keywords,
    validated at construction; `check_arguments` adds the rules that relate several of them) and implement
    `compute` (under `torch.no_grad`).
    """

    #: True for estimators returning `[N, T]` token-level advantages.
    token_level: ClassVar[bool] = False
    #: True for estimators whose `compute` accepts token-level rewards `[N, T]` as `rewards` (as well as `[N]`).
    token_rewards: ClassVar[bool] = False
    #: True for multi-turn estimators (one row per step of a run, `run_ids`) that read every step's reward; the others
    #: read the reward of a run's last step (its outcome).
    step_rewards: ClassVar[bool] = False
    #: False for estimators that never compare the samples of a group (`group_ids` unused, may be None), so that a
    #: group of one sample (`num_generations=1`) is fine.
    uses_groups: ClassVar[bool] = True

    @classmethod
    def inputs(cls) -> tuple[str, ...]:
        """The keyword-only inputs `compute` reads besides the rewards and group ids (e.g. `generator`,
        `response_mask`): a trainer hands the estimator exactly those it declares."""
        positional = ("rewards", "group_ids")
        return tuple(name for name in declared_inputs(cls.compute) if name not in positional)

    def needed_inputs(self) -> tuple[str, ...]:
        """The subset of `inputs()` this instance reads given its arguments: every input `compute` requires (no
        default value) and the optional ones `optional_inputs_needed` names (GRPO's `logprobs` only with
        `rank_penalty`).  A trainer computes an expensive input (an extra forward pass) only when it is here."""
        wanted = {*required_inputs(self), *self.optional_inputs_needed()}
        return tuple(name for name in self.inputs() if name in wanted)

    def optional_inputs_needed(self) -> tuple[str, ...]:
        """The optional inputs of `compute` (those with a default value) that this instance reads given its
        arguments; see `needed_inputs`.  None by default."""
        return ()

    def compute(self, *args: Any, **kwargs: Any) -> AdvantageResult:
        raise NotImplementedError

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """The advantages of `compute(*args, **kwargs)`, with its drops applied.

        Args:
            *args: `rewards` and `group_ids`, as `compute` takes them.
            **kwargs: The keyword-only inputs of `compute` (`inputs()`).

        Returns:
            One advantage per output row, `[M]` or `[M, T]`: `advantages[source]` (when `source` is set), with the
                rows `keep` drops and the tokens `token_keep` drops set to 0.
        """
        res = self.compute(*args, **kwargs)
        advantages = res.advantages
        if res.token_keep is not None:
            advantages = advantages.masked_fill(~res.token_keep, 0.0)
        if res.source is not None:
            advantages = advantages[res.source]
        keep = res.keep.reshape(res.keep.shape + (1,) * (advantages.dim() - 1))
        return advantages.masked_fill(~keep, 0.0)


ADVANTAGE_FNS = Registry("advantage function", AdvantageFn)
"""The advantage estimators by name."""

register_advantage = ADVANTAGE_FNS.register
"""Class decorator: `@register_advantage(name)` registers an `AdvantageFn` subclass in `ADVANTAGE_FNS`.

Args:
    name (str): The estimator's registry name (for `get_advantage_fn`); also set as the class's `name`.

Returns:
    (Callable[[type], type]): The decorator, which returns the class itself.

Raises:
    TypeError: The class is not an `AdvantageFn` subclass.
    ValueError: `name` is already registered.
"""


def get_advantage_fn(name: str, **kwargs: Any) -> AdvantageFn:
    """The advantage estimator registered as `name`, built with `kwargs` (its arguments).

    Args:
        name: A registered estimator name (`list(ADVANTAGE_FNS)`; the module docstring lists them).
        **kwargs: The estimator's arguments (`ADVANTAGE_FNS[name].default_args()` lists them with their defaults).

    Returns:
        The estimator, called as `advantages = fn(rewards, group_ids, **inputs)` (see `AdvantageFn`).

    Raises:
        ValueError: An unknown name (listing the valid ones), an unknown argument (listing the valid ones) or an
            invalid value (naming the argument and its allowed values).
    """
    return ADVANTAGE_FNS.build(name, **kwargs)


# ----------------------------------------------------------------------------------------------------------
# Input validation
# ----------------------------------------------------------------------------------------------------------


def nonfinite_message(name: str, values: torch.Tensor, where: torch.Tensor | None = None) -> str | None:
    """Describe the non-finite entries of `values` (within `where`), e.g. `"rewards[3] is nan"`."""
    bad = ~torch.isfinite(values)
    if where is not None:
        bad &= where
    if not bool(bad.any()):
        return None
    positions = bad.nonzero().tolist()
    parts = [f"{name}[{', '.join(map(str, pos))}] is {values[tuple(pos)].item()}" for pos in positions[:5]]
    more = f" (and {len(positions) - 5} more)" if len(positions) > 5 else ""
    return ", ".join(parts) + more


def as_float_tensor(owner: str, name: str, value: Any, device: torch.device | None = None) -> torch.Tensor:
    """Convert to a float tensor (bool / integer -> float32); complex or non-numeric input is rejected."""
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.as_tensor(value, device=device)
        except (TypeError, ValueError, RuntimeError) as e:
            raise ValueError(f"{owner}: {name} must be a numeric tensor ({e})") from None
    if value.is_complex():
        raise ValueError(f"{owner}: {name} must be real, got dtype {value.dtype}")
    if not value.is_floating_point():
        value = value.to(torch.float32)
    return value


def check_rewards(owner: str, rewards: Any) -> torch.Tensor:
    """Validate sequence-level rewards: 1-D `[N]`, numeric (ints -> float32), all finite."""
    rewards = as_float_tensor(owner, "rewards", rewards)
    if rewards.dim() != 1:
        raise ValueError(f"{owner}: rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    msg = nonfinite_message("rewards", rewards)
    if msg:
        raise ValueError(f"{owner}: {msg}; all rewards must be finite")
    return rewards


def check_per_sample(owner: str, name: str, value: Any, like: torch.Tensor) -> torch.Tensor:
    """Validate an extra finite per-sample tensor `[N]` matching `like` (the rewards)."""
    value = as_float_tensor(owner, name, value, device=like.device).to(like.device)
    if value.shape != like.shape:
        raise ValueError(f"{owner}: {name} must have shape {tuple(like.shape)} like rewards, got {tuple(value.shape)}")
    msg = nonfinite_message(name, value)
    if msg:
        raise ValueError(f"{owner}: {msg}; {name} must be finite")
    return value


def check_mask(owner: str, name: str, mask: Any, shape: torch.Size, device: torch.device) -> torch.Tensor:
    """Validate a 0/1 (or bool) mask of the given shape; return it as a bool tensor on `device`."""
    mask = torch.as_tensor(mask, device=device)
    if mask.shape != shape:
        raise ValueError(f"{owner}: {name} must have shape {tuple(shape)}, got {tuple(mask.shape)}")
    if mask.dtype != torch.bool:
        if mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError(f"{owner}: {name} must be boolean or contain only 0 and 1")
        mask = mask != 0
    return mask.to(device)


def check_response_mask(owner: str, response_mask: Any, device: torch.device | None = None) -> torch.Tensor:
    """Validate the loss mask `response_mask`: 2-D `[N, T]`, 0/1 or bool; return it as a bool tensor."""
    shape = tuple(response_mask.shape) if isinstance(response_mask, torch.Tensor) else None
    if shape is None:
        try:
            shape = tuple(torch.as_tensor(response_mask).shape)
        except (TypeError, ValueError, RuntimeError):
            shape = None
    if shape is None or len(shape) != 2:
        raise ValueError(f"{owner}: response_mask must be a 2-D [N, T] tensor, got shape {shape}")
    mask = torch.as_tensor(response_mask)
    return check_mask(owner, "response_mask", mask, mask.shape, mask.device if device is None else device)


def check_token_values(owner: str, name: str, value: Any, mask: torch.Tensor) -> torch.Tensor:
    """Validate a per-token float tensor `[N, T]` of `mask`'s shape, finite where `mask` is True (values outside
    it, even NaN / inf, are ignored by every estimator)."""
    value = as_float_tensor(owner, name, value, device=mask.device).to(mask.device)
    if value.shape != mask.shape:
        raise ValueError(
            f"{owner}: {name} must have the shape {tuple(mask.shape)} of response_mask, got {tuple(value.shape)}"
        )
    msg = nonfinite_message(name, value, where=mask)
    if msg:
        raise ValueError(f"{owner}: {msg}; {name} must be finite where response_mask is 1")
    return value


def sequence_rewards(owner: str, rewards: Any, mask: torch.Tensor) -> torch.Tensor:
    """One reward per sample `[N]`: `rewards` `[N]`, or token-level `[N, T]` summed over the whole row (as the
    reference's trainer-side estimators do: `token_level_rewards.sum(-1)`, the positions outside `mask` included,
    so every entry must be finite)."""
    rewards = as_float_tensor(owner, "rewards", rewards, device=mask.device)
    n, t = mask.shape
    if rewards.shape not in ((n,), (n, t)):
        raise ValueError(
            f"{owner}: rewards must have shape [N] or [N, T] = {(n, t)} matching response_mask, got "
            f"{tuple(rewards.shape)}"
        )
    msg = nonfinite_message("rewards", rewards)
    if msg:
        what = "all rewards" if rewards.dim() == 1 else "token rewards are summed over the whole row, so all"
        raise ValueError(f"{owner}: {msg}; {what} must be finite")
    return rewards.sum(-1) if rewards.dim() == 2 else rewards


def group_index(
    owner: str, ids: GroupIds, n: int, device: torch.device, name: str = "group_ids"
) -> tuple[torch.Tensor, int]:
    """Map `n` ids (int tensor or sequence of hashables) to a long tensor of `0..G-1`; return it and G."""
    if isinstance(ids, torch.Tensor):
        if ids.dim() != 1:
            raise ValueError(f"{owner}: {name} must be 1-D [N], got shape {tuple(ids.shape)}")
        if ids.is_floating_point() or ids.is_complex():
            raise ValueError(f"{owner}: a {name} tensor must have an integer dtype, got {ids.dtype}")
        if ids.numel() != n:
            raise ValueError(f"{owner}: rewards has {n} entries but {name} has {ids.numel()}")
        uniques, inverse = torch.unique(ids, return_inverse=True)
        return inverse.to(device=device, dtype=torch.long), uniques.numel()
    if isinstance(ids, (str, bytes)):
        raise ValueError(f"{owner}: {name} must be a sequence of ids, not a single string")
    try:
        ids = list(ids)
    except TypeError:
        raise ValueError(
            f"{owner}: {name} must be an int tensor or a sequence of hashables, got {type(ids).__name__}"
        ) from None
    if len(ids) != n:
        raise ValueError(f"{owner}: rewards has {n} entries but {name} has {len(ids)}")
    codes: dict[Hashable, int] = {}
    try:
        index = [codes.setdefault(g, len(codes)) for g in ids]
    except TypeError:
        bad = next(i for i, g in enumerate(ids) if not isinstance(g, Hashable))
        raise ValueError(f"{owner}: {name}[{bad}] is not hashable ({type(ids[bad]).__name__})") from None
    return torch.tensor(index, dtype=torch.long, device=device), len(codes)


def run_groups(owner: str, index: torch.Tensor, run: torch.Tensor, num_runs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-turn rows (one per step): each run's last row `[R]` and the group of each run `[R]`, checking that every
    step of a run has its run's group (`index`, `run`: the rows' group and run, 0..G−1 and 0..R−1)."""
    positions = torch.arange(index.numel(), device=index.device)
    last = positions.new_full((num_runs,), -1).scatter_reduce_(0, run, positions, "amax")
    group = index[last]
    mismatch = (group[run] != index).nonzero().flatten()
    if mismatch.numel():
        i = int(mismatch[0])
        raise ValueError(
            f"{owner}: step {i} has another task (group_ids) than the other steps of its run (its last step is "
            f"{int(last[run[i]])}); every run must belong to a single group"
        )
    return last, group


# ----------------------------------------------------------------------------------------------------------
# Group statistics
# ----------------------------------------------------------------------------------------------------------


def group_sum(values: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Per-group sum of `values` `[N]` -> `[G]`."""
    return values.new_zeros(num_groups).index_add_(0, index, values)


def group_stats(
    values: torch.Tensor,
    index: torch.Tensor,
    num_groups: int,
    member: torch.Tensor | None = None,
    unbiased: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group `(count, mean, std)` over the `member` samples (default all), each `[G]`.

    `std` is the unbiased (`unbiased=True`, Bessel-corrected) or population standard deviation; a group
    with at most one member gets mean 0 and std 1 (verl / Trinity-RFT).
    """
    weight = torch.ones_like(values) if member is None else member.to(values.dtype)
    values = values if member is None else torch.where(member, values, torch.zeros_like(values))
    counts = group_sum(weight, index, num_groups)
    mean = group_sum(values, index, num_groups) / counts.clamp(min=1)
    squares = group_sum((values - mean[index]) ** 2 * weight, index, num_groups)
    var = squares / ((counts - 1) if unbiased else counts).clamp(min=1)
    single = counts <= 1
    return counts, mean.masked_fill(single, 0.0), var.sqrt().masked_fill(single, 1.0)


def group_positions(index: torch.Tensor, num_groups: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(position, order, starts)`: each sample's position within its group (0-based, in index order),
    the samples sorted by group (stable), and where each group starts in `order`; the `k`-th sample of
    group `g` is `order[starts[g] + k]`."""
    n = index.numel()
    order = torch.argsort(index, stable=True)
    counts = torch.bincount(index, minlength=num_groups)
    starts = torch.cumsum(counts, 0) - counts
    position = torch.empty_like(order)
    position[order] = torch.arange(n, device=index.device) - starts[index[order]]
    return position, order, starts


def rank_within_groups(index: torch.Tensor, num_groups: int, score: torch.Tensor, member: torch.Tensor) -> torch.Tensor:
    """Rank of each `member` sample among the members of its group by DESCENDING `score` (0 = largest).

    Ties keep index order (stable sorts).  Non-members get rank -1.
    """
    n = index.numel()
    key = index * 2 + (~member).long()  # members and non-members of a group are ranked separately
    order = torch.argsort(score, descending=True, stable=True)
    order = order[torch.argsort(key[order], stable=True)]  # now sorted by key, then by descending score
    counts = torch.bincount(key, minlength=2 * num_groups)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(order)
    rank[order] = torch.arange(n, device=index.device) - starts[key[order]]
    return torch.where(member, rank, torch.full_like(rank, -1))
