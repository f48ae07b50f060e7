"""Group-relative outcome advantage estimators (one scalar advantage per sample).

All estimators here take `rewards` `[N]` and `group_ids` (`[N]` int tensor or sequence of hashables)
and return `AdvantageResult(advantages [N], keep [N], source)`.  Notation: `R` the sample's reward,
`mean` / `std` the mean / unbiased (Bessel-corrected, `torch.std`) standard deviation of the rewards of
its group (of size `n`); a group of one uses `mean = 0` and `std = 1` (verl / Trinity-RFT convention).
REC is the exception: it uses the population std (see `RECAdvantage`).

Each estimator follows Trinity-RFT 0.6.0 (`trinity/algorithm/advantage_fn`) exactly, groups of one
included, except where a docstring says otherwise (REC's group of one, on which the reference crashes).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

import torch

from ..components import Argument
from .base import (
    AdvantageFn,
    AdvantageResult,
    GroupIds,
    check_response_mask,
    check_rewards,
    check_token_values,
    group_index,
    group_positions,
    group_stats,
    group_sum,
    rank_within_groups,
    register_advantage,
    run_groups,
)

STD_CAL_LEVELS = ("group", "batch", "none")
GROUP_OF_ONE = ("reward", "zero")
"""How GRPO normalizes a group of one sample: on 0 with std 1 (verl, Trinity-RFT), or on its own reward."""


def _all_kept(rewards: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(rewards, dtype=torch.bool)


def _grpo(
    rewards: torch.Tensor,
    index: torch.Tensor,
    num_groups: int,
    epsilon: float,
    std_cal_level: str = "group",
    std_threshold: float | None = None,
    stat_rewards: torch.Tensor | None = None,
    std_unbiased: bool = True,
    group_of_one: str = "reward",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GRPO advantages `(R - mean) / (std + epsilon)` `[N]`, the per-group sizes `[G]` and which groups
    pass `std_threshold` `[G]` (all when it is None; else more than one sample and group std > threshold).

    `mean` / `std` (and the threshold's std) are those of `stat_rewards` (default `rewards`; GRPO's
    `rank_penalty` passes its rescaled rewards) while the numerator is `R`.  `std_cal_level="batch"`: `std` is
    the unbiased std of all `rewards` (1 when there are at most one); `"none"`: `R - mean`, no division
    (Dr. GRPO; TRL's `scale_rewards="none"`). `std_unbiased=False`: the population std; `group_of_one="zero"`: a
    group of one is centred on its own reward (advantage 0) instead of on 0.
    """
    stats = rewards if stat_rewards is None else stat_rewards
    counts, mean, std = group_stats(stats, index, num_groups, unbiased=std_unbiased)
    if group_of_one == "zero":
        mean = torch.where(counts == 1, group_sum(stats, index, num_groups), mean)
    valid = torch.ones_like(counts, dtype=torch.bool)
    if std_threshold is not None:
        valid = (counts > 1) & (std > std_threshold)
    if std_cal_level == "none":
        return rewards - mean[index], counts, valid
    if std_cal_level == "batch":
        scale = rewards.std() if rewards.numel() > 1 else rewards.new_ones(())
    else:
        scale = std[index]
    return (rewards - mean[index]) / (scale + epsilon), counts, valid


def _random_device(generator: torch.Generator | None, like: torch.Tensor) -> torch.device:
    return generator.device if generator is not None else like.device


def duplicate_groups(
    index: torch.Tensor,
    num_groups: int,
    counts: torch.Tensor,
    valid: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`(keep [M], source [M] or None)` for Trinity-RFT's `duplicate_experiences`.

    The reference keeps the valid groups and appends, for each skipped (not `valid`) group, a copy of a valid
    group drawn uniformly with replacement (`torch.randint(0, #valid, (#skipped,))`, valid and skipped groups
    in group order).  Here the `k`-th row (in index order) of a skipped group becomes a copy of the chosen
    group's `k`-th sample; when the chosen group is larger, its remaining samples' copies are appended as new
    rows `N, N + 1, ...` (in skipped-group order, then position), and when it is smaller, the skipped group's
    leftover rows get `keep=False`.  The kept rows are then exactly the reference's experiences (up to order);
    with groups of equal size `M = N` and every row is kept.  With no skipped group, or no valid one, nothing is
    copied (`source` None) and `keep` marks the valid groups' samples.
    """
    skipped = (~valid).nonzero().flatten()
    kept_groups = valid.nonzero().flatten()
    if skipped.numel() == 0 or kept_groups.numel() == 0:
        return valid[index], None
    pick = torch.randint(
        0, kept_groups.numel(), (skipped.numel(),), generator=generator, device=_random_device(generator, index)
    ).to(index.device)
    chosen = kept_groups[pick]  # the valid group copied for each skipped group
    sizes = counts.long()
    replacement = torch.arange(num_groups, device=index.device)
    replacement[skipped] = chosen
    position, order, starts = group_positions(index, num_groups)
    rows = torch.arange(index.numel(), device=index.device)
    target = replacement[index]
    copied = position < sizes[target]  # rows of valid groups: their own group, always
    source = torch.where(copied, order[starts[target] + position.clamp(max=sizes[target] - 1)], rows)
    extra = (sizes[chosen] - sizes[skipped]).clamp(min=0)  # copies that do not fit in the skipped group's rows
    total = int(extra.sum())
    if total:
        group = chosen.repeat_interleave(extra)
        offsets = (torch.cumsum(extra, 0) - extra).repeat_interleave(extra)
        k = sizes[skipped].repeat_interleave(extra) + torch.arange(total, device=index.device) - offsets
        source = torch.cat([source, order[starts[group] + k]])
        copied = torch.cat([copied, torch.ones(total, dtype=torch.bool, device=index.device)])
    return copied, source


def reference_rank_rewards(
    rewards: torch.Tensor,
    mean_logprobs: torch.Tensor,
    index: torch.Tensor,
    num_groups: int,
    counts: torch.Tensor,
    penalty: float,
) -> torch.Tensor:
    """Trinity-RFT's rank penalty: `R * (1 - rank / n * penalty)`, `rank` the ascending rank (0 = the least
    likely) of the sample's mean token log-prob within its group of size `n`, ties by index.  GRPO uses the
    result for the group mean and std only (see `GRPOAdvantage`)."""
    rank = rank_within_groups(index, num_groups, -mean_logprobs, torch.ones_like(index, dtype=torch.bool))
    n = counts[index].to(rewards.dtype)
    return rewards * (1 - rank.to(rewards.dtype) / n * penalty)


class _GroupAdvantageFn(AdvantageFn):
    """Shared `compute` plumbing: validate the inputs, map group ids, call `_advantages`."""

    @torch.no_grad()
    def compute(self, rewards: torch.Tensor, group_ids: GroupIds) -> AdvantageResult:
        rewards = check_rewards(self.name, rewards)
        index, num_groups = group_index(self.name, group_ids, rewards.numel(), rewards.device)
        return AdvantageResult(self._advantages(rewards, index, num_groups), _all_kept(rewards))

    def _advantages(self, rewards: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
        raise NotImplementedError


@register_advantage("grpo")
class GRPOAdvantage(AdvantageFn):
    """GRPO: `A = (R - mean) / (std + epsilon)` (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300).

    Ports Trinity-RFT `GRPOGroupedAdvantage` (and verl `compute_grpo_outcome_advantage`): `mean` / `std`
    are the group's mean and unbiased std; a group of one gets mean 0 and std 1 (`A = R / (1 + epsilon)`).

    * `std_cal_level="batch"`: `std` is the unbiased std of ALL rewards of the batch (1 if N <= 1); the
      mean stays per group (0 for a group of one). `"none"`: no division, `A = R - mean` (Dr. GRPO,
      Liu et al. 2025, arXiv 2503.20783; a trl_ext extension, TRL's `scale_rewards="none"`).
    * `std_threshold`: a group is skipped (`keep=False` for its samples) when it has a single sample —
      whatever the threshold — or its group std (unbiased, also with `std_cal_level="batch"`) is
      `<= std_threshold`.
    * `duplicate_experiences` (only with `std_threshold`; POLARIS, hkunlp.github.io/blog/2025/Polaris):
      instead of shrinking the batch, every skipped group is replaced by a copy of a valid group drawn
      uniformly with replacement (`compute(..., generator=)` seeds the draw): `AdvantageResult.source`
      maps each row of a skipped group to the same-position sample of the chosen group (`keep=True`, that
      sample's advantage).  Groups of unequal size give the reference's experiences too: a larger copy
      appends rows, a smaller one leaves rows with `keep=False` (see `duplicate_groups`).  When every group
      is skipped nothing is kept.
    * `rank_penalty` (Trinity-RFT's, after He et al. 2025, "Rewarding the Unlikely: Lifting GRPO Beyond
      Distribution Sharpening", arXiv 2506.02355): in a group of `n > 1`, each reward is rescaled to
      `R' = R * (1 - rank / n * rank_penalty)`, `rank` the ascending rank (0 = the least likely; ties by
      index) of the sample's mean token log-prob, and the group `mean` / `std` (and the `std_threshold` test)
      are those of `R'` while the numerator stays `R`: `A = (R - mean(R')) / (std(R') + epsilon)`.  The
      batch std of `std_cal_level="batch"` stays that of the unscaled rewards, as in the reference.  Needs
      `logprobs` `[N, T]` (the sampling policy's token log-probs) and `response_mask` `[N, T]`; the mean runs
      over `response_mask` (the reference averages every response token: the same for single-turn
      completions).  A row without a token ranks last (the reference's mean of no token is NaN, which sorts
      last).
    """

    arguments = (
        Argument(
            "epsilon",
            1e-6,
            "ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased "
            "group std; a group whose rewards are all equal gets advantage 0.",
            gt=0,
            config_name="advantage_epsilon",
        ),
        Argument(
            "std_threshold",
            None,
            "Drop (mask out) the groups whose reward std is at or below this value.",
            type=float,
            ge=0,
        ),
        Argument(
            "duplicate_experiences",
            False,
            "With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so "
            "every step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the "
            "reference's `duplicate_experiences`.",
        ),
        Argument(
            "rank_penalty",
            None,
            "Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards "
            "R·(1 − rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the "
            "numerator keeps R. Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one "
            "extra forward pass without gradients unless TRL computed them); None: off.",
            type=float,
            ge=0,
            le=1,
        ),
        Argument(
            "std_cal_level",
            "group",
            "Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: "
            "R − group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.",
            choices=STD_CAL_LEVELS,
        ),
        Argument(
            "std_unbiased",
            True,
            "The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's "
            "asynchronous GRPO worker).",
        ),
        Argument(
            "group_of_one",
            "reward",
            "A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) "
            "(verl, Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).",
            choices=GROUP_OF_ONE,
        ),
    )

    def check_arguments(self) -> None:
        if self.duplicate_experiences and self.std_threshold is None:
            raise ValueError(
                f"{self.name}: duplicate_experiences=True has no effect without std_threshold (only groups skipped "
                "by std_threshold are duplicated); set std_threshold or duplicate_experiences=False"
            )

    def optional_inputs_needed(self) -> tuple[str, ...]:
        needed = ("logprobs", "response_mask") if self.rank_penalty is not None else ()
        return needed + (("generator",) if self.duplicate_experiences else ())

    @torch.no_grad()
    def compute(
        self,
        rewards: torch.Tensor,
        group_ids: GroupIds,
        *,
        logprobs: torch.Tensor | None = None,
        response_mask: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> AdvantageResult:
        """`logprobs` / `response_mask` (`[N, T]`) are required when `rank_penalty` is set (and ignored
        otherwise); `generator` seeds the random choice of `duplicate_experiences`."""
        rewards = check_rewards(self.name, rewards)
        index, num_groups = group_index(self.name, group_ids, rewards.numel(), rewards.device)
        stat_rewards = None
        if self.rank_penalty is not None:
            stat_rewards = self._rank_penalized(rewards, index, num_groups, logprobs, response_mask)
        advantages, counts, valid = _grpo(
            rewards,
            index,
            num_groups,
            self.epsilon,
            self.std_cal_level,
            self.std_threshold,
            stat_rewards,
            self.std_unbiased,
            self.group_of_one,
        )
        if self.duplicate_experiences:
            keep, source = duplicate_groups(index, num_groups, counts, valid, generator)
            return AdvantageResult(advantages, keep, source)
        return AdvantageResult(advantages, valid[index])

    def _rank_penalized(
        self, rewards: torch.Tensor, index: torch.Tensor, num_groups: int, logprobs: Any, response_mask: Any
    ) -> torch.Tensor:
        """The rescaled rewards `R'` of `rank_penalty` (see the class docstring)."""
        missing = [name for name, value in (("logprobs", logprobs), ("response_mask", response_mask)) if value is None]
        if missing:
            raise ValueError(f"{self.name}: rank_penalty is set, so compute() needs {' and '.join(missing)} [N, T]")
        mask = check_response_mask(self.name, response_mask, rewards.device)
        if mask.shape[0] != rewards.numel():
            raise ValueError(
                f"{self.name}: response_mask has {mask.shape[0]} rows but rewards has {rewards.numel()} entries"
            )
        logprobs = check_token_values(self.name, "logprobs", logprobs, mask)
        count = mask.sum(-1)
        total = torch.where(mask, logprobs, torch.zeros_like(logprobs)).sum(-1)
        mean_logprobs = torch.where(count > 0, total / count.clamp(min=1), math.inf)
        counts = group_sum(torch.ones_like(rewards), index, num_groups)
        return reference_rank_rewards(rewards, mean_logprobs, index, num_groups, counts, self.rank_penalty)


@register_advantage("rloo")
class RLOOAdvantage(_GroupAdvantageFn):
    """RLOO: leave-one-out baseline `A_i = R_i - mean_{j != i} R_j = n (R_i - mean) / (n - 1)`.

    Kool et al. 2019 "Buy 4 REINFORCE Samples, Get a Baseline for Free!"; Ahmadian et al. 2024
    (arXiv 2402.14740).  Ports verl `compute_rloo_outcome_advantage`; a group of one gets `A = R`.
    """

    def _advantages(self, rewards: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
        counts, mean, _ = group_stats(rewards, index, num_groups)
        n = counts[index]
        loo = n * (rewards - mean[index]) / (n - 1).clamp(min=1)
        return torch.where(n > 1, loo, rewards)


@register_advantage("reinforce")
class ReinforceAdvantage(_GroupAdvantageFn):
    """Plain REINFORCE: `A = R` (no baseline; used by TOPR, Le Roux et al. 2025, arXiv 2503.14286)."""

    def _advantages(self, rewards: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
        return rewards.clone()


@register_advantage("opmd")
class OPMDAdvantage(_GroupAdvantageFn):
    """OPMD (online policy mirror descent) baseline: `A = R - b`.

    `b = mean` (`opmd_baseline="mean"`) or `b = tau * (logsumexp(R / tau) - log n)` over the group
    (`"logavgexp"`); a group of one uses `b = 0`.  Ports Trinity-RFT `OPMDGroupAdvantage`
    (`trinity/algorithm/advantage_fn/opmd_advantage.py`); see Yao et al. 2025 (arXiv 2509.24203).
    """

    arguments = (
        Argument(
            "opmd_baseline",
            "mean",
            "Group baseline: `mean`, or `logavgexp` = τ·(logsumexp(R/τ) − log n).",
            choices=("mean", "logavgexp"),
        ),
        Argument("tau", 1.0, "τ of the `logavgexp` baseline.", gt=0, config_name="advantage_tau"),
    )

    def _advantages(self, rewards: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
        counts, mean, _ = group_stats(rewards, index, num_groups)
        if self.opmd_baseline == "mean":
            baseline = mean
        else:
            scaled = rewards / self.tau
            gmax = scaled.new_full((num_groups,), -math.inf).scatter_reduce_(0, index, scaled, "amax")
            lse = gmax + torch.log(group_sum(torch.exp(scaled - gmax[index]), index, num_groups))
            baseline = torch.where(counts > 1, self.tau * (lse - torch.log(counts)), torch.zeros_like(lse))
        return rewards - baseline[index]


@register_advantage("asymre")
class AsymREAdvantage(_GroupAdvantageFn):
    """AsymRE: `A = R - (mean + baseline_shift)`; a group of one has baseline 0 (no shift): `A = R`.

    Arnal et al. 2025, "Asymmetric REINFORCE for off-Policy Reinforcement Learning" (arXiv 2506.20520);
    ports Trinity-RFT `ASYMREGroupAdvantage`.  A negative shift favours positive samples.
    """

    arguments = (
        Argument(
            "baseline_shift",
            -0.1,
            "The baseline is the group mean plus this shift; a negative shift favours positive updates (AsymRE "
            "paper §3).",
        ),
    )

    def _advantages(self, rewards: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
        counts, mean, _ = group_stats(rewards, index, num_groups)
        baseline = torch.where(counts > 1, mean + self.baseline_shift, torch.zeros_like(mean))
        return rewards - baseline[index]


@register_advantage("rec")
class RECAdvantage(AdvantageFn):
    """REC: `A = R - mean`, or `(R - mean) / (std + epsilon)` with `std_normalize`.

    Yao, Chen et al. 2025, "Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm" (arXiv 2509.24203);
    ports Trinity-RFT `RECGroupedAdvantage`:

    1. A sample is *positive* when `R >= mean` of its FULL group (ties count as positive), else negative.
    2. `drop="balance"` (RED-Drop): in a group with more negatives than positives, `neg - pos` randomly
       chosen negatives (a uniform subset; `compute(..., generator=)` seeds it) are dropped: `keep=False`
       and `A = 0`.  Positives, ties included, are never dropped.
    3. `mean` and `std` are then computed over the KEPT samples of the group, `std` being the
       POPULATION std (`unbiased=False`) — also without `drop`, where every sample is kept.  A group with
       at most one kept sample uses mean 0 and std 1.

    A group of one is kept and gets `A = R` (`R / (1 + epsilon)` with `std_normalize`), with or without
    `drop`: it is its own mean, so it is positive and never dropped.  Trinity-RFT 0.6.0 crashes on it
    with or without `drop` (`UnboundLocalError`: its rewards tensor is only built for groups of two or more;
    README, "Deliberate differences").  Had it been built, the reference would test a lone sample against
    its group-of-one mean 0 and, under `drop="balance"`, drop a lone negative reward; without `drop` it
    would give `A = R` as here.
    """

    arguments = (
        Argument("epsilon", 1e-6, "ε of the std normalization.", gt=0, config_name="advantage_epsilon"),
        Argument("std_normalize", False, "Divide the centred rewards by the group std."),
        Argument(
            "drop",
            None,
            "`balance`: in each group, randomly drop negative-advantage samples until there are no more of them "
            "than positive ones (seeded by `seed` and the step).",
            type=str,
            choices=("balance",),
        ),
    )

    def optional_inputs_needed(self) -> tuple[str, ...]:
        return ("generator",) if self.drop == "balance" else ()

    @torch.no_grad()
    def compute(
        self, rewards: torch.Tensor, group_ids: GroupIds, *, generator: torch.Generator | None = None
    ) -> AdvantageResult:
        """`generator` seeds the random choice of `drop="balance"`."""
        rewards = check_rewards(self.name, rewards)
        index, num_groups = group_index(self.name, group_ids, rewards.numel(), rewards.device)
        keep = _all_kept(rewards)
        if self.drop == "balance":
            counts = group_sum(torch.ones_like(rewards), index, num_groups)
            full_mean = group_sum(rewards, index, num_groups) / counts.clamp(min=1)  # a group of one: R itself
            positive = rewards >= full_mean[index]
            num_positive = group_sum(positive.to(rewards.dtype), index, num_groups)
            noise = torch.rand(rewards.numel(), generator=generator, device=_random_device(generator, rewards))
            # Keep the num_positive negatives with the largest noise (a uniformly random subset), i.e. drop
            # neg - pos of them when neg > pos; keep every negative otherwise.
            rank = rank_within_groups(index, num_groups, noise.to(rewards.device), ~positive)
            keep = positive | (rank < num_positive[index])
        _, mean, std = group_stats(rewards, index, num_groups, member=keep, unbiased=False)
        advantages = rewards - mean[index]
        if self.std_normalize:
            advantages = advantages / (std[index] + self.epsilon)
        return AdvantageResult(advantages.masked_fill(~keep, 0.0), keep)


@register_advantage("step_wise_grpo")
class StepWiseGRPOAdvantage(AdvantageFn):
    """Step-wise GRPO for multi-turn runs (Trinity-RFT `StepWiseGRPOAdvantageFn`, after rLLM).

    Each sample is one step of a run (`run_ids`); the run's reward is the reward of its last step (highest
    index).  GRPO advantages `(R_run - mean) / (std + epsilon)` are computed over the runs of each group
    (the task) and broadcast to every step of the run:

    * `mean` / `std`: mean / unbiased std over the group's runs; a group of a single run uses mean 0 and
      std 1.
    * `std_cal_level="batch"`: `std` is the unbiased std of the last-step rewards of ALL runs of the batch
      (1 when there is at most one run); the mean stays per group.
    * `enable_step_norm`: each step's advantage is divided by its run's number of steps.
    * `std_threshold`: a group is skipped (`keep=False` for all its steps) when it has a single run or its
      std over runs (the group std, also with `std_cal_level="batch"`) is `<= std_threshold`.
    """

    arguments = (
        Argument(
            "epsilon",
            1e-6,
            "ε of (R_run − mean)/(std + ε), the statistics taken over the group's runs.",
            gt=0,
            config_name="advantage_epsilon",
        ),
        Argument("enable_step_norm", False, "Divide each step's advantage by its run's number of steps."),
        Argument(
            "std_cal_level",
            "group",
            "Divide by the std over the runs of the `group` or of the whole `batch` (the mean stays the group mean).",
            choices=STD_CAL_LEVELS,
        ),
        Argument(
            "std_threshold",
            None,
            "Drop (mask out) the groups of a single run or whose std over runs is at or below this value.",
            type=float,
            ge=0,
        ),
    )

    @torch.no_grad()
    def compute(
        self, rewards: torch.Tensor, group_ids: GroupIds, *, run_ids: torch.Tensor | Sequence[Hashable]
    ) -> AdvantageResult:
        rewards = check_rewards(self.name, rewards)
        n = rewards.numel()
        index, num_groups = group_index(self.name, group_ids, n, rewards.device)
        run, num_runs = group_index(self.name, run_ids, n, rewards.device, name="run_ids")
        last, run_group = run_groups(self.name, index, run, num_runs)
        run_advantages, _, valid = _grpo(
            rewards[last], run_group, num_groups, self.epsilon, self.std_cal_level, self.std_threshold
        )
        if self.enable_step_norm:
            run_advantages = run_advantages / torch.bincount(run, minlength=num_runs).to(rewards.dtype)
        return AdvantageResult(run_advantages[run], valid[index])


@register_advantage("raft")
class RAFTSelection(AdvantageFn):
    """RAFT's reward-ranked selection (Dong et al. 2023, "RAFT: Reward rAnked FineTuning", arXiv 2304.06767).

    Not an advantage estimate but the rejection step of RAFT: each group keeps its best-rewarded sample (the
    first one on ties), and only if `R >= min_reward` when `min_reward` is set; every other sample is
    dropped (`keep = False`).  Kept samples get advantage 1, so any advantage-weighted loss reduces to SFT on
    the selected completions (RAFT trains the `sft` loss on them).
    """

    arguments = (
        Argument(
            "min_reward",
            None,
            "Keep a group's best completion only if its reward is at least this value (default: always keep the best).",
            type=float,
        ),
    )

    @torch.no_grad()
    def compute(self, rewards: torch.Tensor, group_ids: GroupIds) -> AdvantageResult:
        rewards = check_rewards(self.name, rewards)
        n = rewards.numel()
        index, num_groups = group_index(self.name, group_ids, n, rewards.device)
        best = rewards.new_full((num_groups,), -math.inf).scatter_reduce_(0, index, rewards, "amax")
        positions = torch.arange(n, device=rewards.device)
        candidates = torch.where(rewards == best[index], positions, n)
        first = positions.new_full((num_groups,), n).scatter_reduce_(0, index, candidates, "amin")
        keep = positions == first[index]
        if self.min_reward is not None:
            keep &= rewards >= self.min_reward
        return AdvantageResult(torch.ones_like(rewards), keep)
