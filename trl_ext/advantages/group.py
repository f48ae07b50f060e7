"""Group-relative outcome advantage estimators (one scalar advantage per sample).

All estimators here take ``rewards`` ``[N]`` and ``group_ids`` (``[N]`` int tensor or sequence of hashables)
and return ``AdvantageResult(advantages [N], keep [N])``.  Notation: ``R`` the sample's reward, ``mean`` /
``std`` the mean / unbiased standard deviation of the rewards of its group (of size ``n``); a group of one
uses ``mean = 0`` and ``std = 1`` (verl / Trinity-RFT convention).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import torch

from .base import (
    AdvantageFn,
    AdvantageResult,
    GroupIds,
    check_bool,
    check_choice,
    check_number,
    check_per_sample,
    check_rewards,
    group_index,
    group_stats,
    group_sum,
    rank_within_groups,
    register_advantage,
)


def _all_kept(rewards: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(rewards, dtype=torch.bool)


def _grpo(
    rewards: torch.Tensor, index: torch.Tensor, num_groups: int, epsilon: float, std_cal_level: str = "group"
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages ``(R - mean) / (std + epsilon)`` and each sample's group std (both ``[N]``)."""
    _, mean, std = group_stats(rewards, index, num_groups)
    group_std = std[index]
    if std_cal_level == "batch":
        scale = rewards.std() if rewards.numel() > 1 else rewards.new_ones(())
    else:
        scale = group_std
    return (rewards - mean[index]) / (scale + epsilon), group_std


def unlikeliness_rewards(
    rewards: torch.Tensor, seq_logprobs: torch.Tensor, index: torch.Tensor, num_groups: int, penalty: float
) -> torch.Tensor:
    """Unlikeliness reward (He et al. 2025, arXiv 2506.02355).

    Within each group of size ``G``, the samples with ``R > 0`` are ranked by ``seq_logprobs`` in descending
    order (rank 0 = most likely; ties by index) and get ``R * (1 - penalty * (G - rank) / G)``; samples with
    ``R <= 0`` are unchanged.
    """
    positive = rewards > 0
    rank = rank_within_groups(index, num_groups, seq_logprobs, positive).to(rewards.dtype)
    size = group_sum(torch.ones_like(rewards), index, num_groups)[index]
    return torch.where(positive, rewards * (1 - penalty * (size - rank) / size), rewards)


class _GroupAdvantageFn(AdvantageFn):
    """Shared ``compute`` plumbing: validate the inputs, map group ids, call ``_advantages``."""

    @torch.no_grad()
    def compute(self, rewards: torch.Tensor, group_ids: GroupIds) -> AdvantageResult:
        rewards = check_rewards(self.name, rewards)
        index, num_groups = group_index(self.name, group_ids, rewards.numel(), rewards.device)
        return AdvantageResult(self._advantages(rewards, index, num_groups), _all_kept(rewards))

    def _advantages(self, rewards: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
        raise NotImplementedError


@register_advantage("grpo")
class GRPOAdvantage(AdvantageFn):
    """GRPO: ``A = (R - mean) / (std + epsilon)`` (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300).

    Ports verl ``compute_grpo_outcome_advantage`` and Trinity-RFT ``GRPOGroupedAdvantage``:

    * ``std_cal_level="batch"``: ``std`` is the unbiased std of all rewards of the batch (1 if N == 1);
      the mean stays per group.
    * ``std_threshold``: groups whose (group) std is ``<= std_threshold`` are dropped (``keep=False``);
      a group of one has std 1.
    * ``rank_penalty``: the unlikeliness reward of He et al. 2025, "Rewarding the Unlikely: Lifting GRPO
      Beyond Distribution Sharpening" (arXiv 2506.02355); needs ``seq_logprobs`` [N] (summed token log-probs
      under the sampling policy).  Positive rewards are rescaled by ``1 - rank_penalty * (G - rank) / G``
      (see ``unlikeliness_rewards``) before the group statistics are computed.
    """

    def __init__(
        self,
        *,
        epsilon: float = 1e-6,
        std_threshold: float | None = None,
        rank_penalty: float | None = None,
        std_cal_level: str = "group",
    ) -> None:
        self.epsilon = check_number(self.name, "epsilon", epsilon, gt=0)
        self.std_threshold = check_number(self.name, "std_threshold", std_threshold, ge=0, allow_none=True)
        self.rank_penalty = check_number(self.name, "rank_penalty", rank_penalty, ge=0, le=1, allow_none=True)
        self.std_cal_level = check_choice(self.name, "std_cal_level", std_cal_level, ("group", "batch"))

    @torch.no_grad()
    def compute(
        self, rewards: torch.Tensor, group_ids: GroupIds, *, seq_logprobs: torch.Tensor | None = None
    ) -> AdvantageResult:
        """``seq_logprobs`` is required when ``rank_penalty`` is set (and ignored otherwise)."""
        rewards = check_rewards(self.name, rewards)
        index, num_groups = group_index(self.name, group_ids, rewards.numel(), rewards.device)
        if self.rank_penalty is not None:
            if seq_logprobs is None:
                raise ValueError(f"{self.name}: rank_penalty is set, so compute() needs seq_logprobs [N]")
            seq_logprobs = check_per_sample(self.name, "seq_logprobs", seq_logprobs, rewards)
            rewards = unlikeliness_rewards(rewards, seq_logprobs, index, num_groups, self.rank_penalty)
        advantages, group_std = _grpo(rewards, index, num_groups, self.epsilon, self.std_cal_level)
        keep = _all_kept(rewards) if self.std_threshold is None else group_std > self.std_threshold
        return AdvantageResult(advantages, keep)


@register_advantage("rloo")
class RLOOAdvantage(_GroupAdvantageFn):
    """RLOO: leave-one-out baseline ``A_i = R_i - mean_{j != i} R_j = n (R_i - mean) / (n - 1)``.

    Kool et al. 2019 "Buy 4 REINFORCE Samples, Get a Baseline for Free!"; Ahmadian et al. 2024
    (arXiv 2402.14740).  Ports verl ``compute_rloo_outcome_advantage``; a group of one gets ``A = R``.
    """

    def __init__(self) -> None:
        pass

    def _advantages(self, rewards: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
        counts, mean, _ = group_stats(rewards, index, num_groups)
        n = counts[index]
        loo = n * (rewards - mean[index]) / (n - 1).clamp(min=1)
        return torch.where(n > 1, loo, rewards)


@register_advantage("reinforce")
class ReinforceAdvantage(_GroupAdvantageFn):
    """Plain REINFORCE: ``A = R`` (no baseline; used by TOPR, Le Roux et al. 2025, arXiv 2503.14286)."""

    def __init__(self) -> None:
        pass

    def _advantages(self, rewards: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
        return rewards.clone()


@register_advantage("opmd")
class OPMDAdvantage(_GroupAdvantageFn):
    """OPMD (online policy mirror descent) baseline: ``A = R - b``.

    ``b = mean`` (``opmd_baseline="mean"``) or ``b = tau * (logsumexp(R / tau) - log n)`` over the group
    (``"logavgexp"``); a group of one uses ``b = 0``.  Ports Trinity-RFT ``OPMDGroupAdvantage``
    (``trinity/algorithm/advantage_fn/opmd_advantage.py``); see Yao et al. 2025 (arXiv 2509.24203).
    """

    def __init__(self, *, opmd_baseline: str = "mean", tau: float = 1.0) -> None:
        self.opmd_baseline = check_choice(self.name, "opmd_baseline", opmd_baseline, ("mean", "logavgexp"))
        self.tau = check_number(self.name, "tau", tau, gt=0)

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
    """AsymRE: ``A = R - (mean + baseline_shift)``; a group of one uses ``mean = 0``.

    Arnal et al. 2025, "Asymmetric REINFORCE for off-Policy Reinforcement Learning" (arXiv 2506.20520);
    ports Trinity-RFT ``ASYMREGroupAdvantage``.  A negative shift favours positive samples.
    """

    def __init__(self, *, baseline_shift: float = -0.1) -> None:
        self.baseline_shift = check_number(self.name, "baseline_shift", baseline_shift)

    def _advantages(self, rewards: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
        _, mean, _ = group_stats(rewards, index, num_groups)
        return rewards - (mean[index] + self.baseline_shift)


@register_advantage("rec")
class RECAdvantage(AdvantageFn):
    """REC: ``A = R - mean``, or ``(R - mean) / (std + epsilon)`` with ``std_normalize``.

    Yao, Chen et al. 2025, "Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm" (arXiv 2509.24203);
    ports Trinity-RFT ``RECGroupedAdvantage``.  ``drop="balance"`` (RED-Drop): in each group with more
    negative-advantage than positive-advantage samples, only as many randomly chosen negatives as there are
    positives are kept (``keep=False`` for the others); positive and zero-advantage samples are always kept.
    """

    def __init__(self, *, epsilon: float = 1e-6, std_normalize: bool = False, drop: str | None = None) -> None:
        self.epsilon = check_number(self.name, "epsilon", epsilon, gt=0)
        self.std_normalize = check_bool(self.name, "std_normalize", std_normalize)
        self.drop = check_choice(self.name, "drop", drop, (None, "balance"))

    @torch.no_grad()
    def compute(
        self, rewards: torch.Tensor, group_ids: GroupIds, *, generator: torch.Generator | None = None
    ) -> AdvantageResult:
        """``generator`` seeds the random choice of ``drop="balance"``."""
        rewards = check_rewards(self.name, rewards)
        index, num_groups = group_index(self.name, group_ids, rewards.numel(), rewards.device)
        _, mean, std = group_stats(rewards, index, num_groups)
        advantages = rewards - mean[index]
        if self.std_normalize:
            advantages = advantages / (std[index] + self.epsilon)
        keep = _all_kept(rewards)
        if self.drop == "balance":
            negative = advantages < 0
            num_positive = group_sum((advantages > 0).to(rewards.dtype), index, num_groups)
            device = generator.device if generator is not None else rewards.device
            noise = torch.rand(rewards.numel(), generator=generator, device=device).to(rewards.device)
            # Keep the num_positive negatives with the largest noise: a uniformly random subset.
            rank = rank_within_groups(index, num_groups, noise, negative)
            keep = ~negative | (rank < num_positive[index])
        return AdvantageResult(advantages, keep)


@register_advantage("step_wise_grpo")
class StepWiseGRPOAdvantage(AdvantageFn):
    """Step-wise GRPO for multi-turn runs (Trinity-RFT ``StepWiseGRPOAdvantage``).

    Each sample is one step of a run (``run_ids``); the run's reward is the reward of its last step (highest
    index).  GRPO advantages ``(R_run - mean) / (std + epsilon)`` are computed over the runs of each group
    (mean / unbiased std over runs; a group of one run uses mean 0, std 1) and broadcast to every step.
    """

    def __init__(self, *, epsilon: float = 1e-6) -> None:
        self.epsilon = check_number(self.name, "epsilon", epsilon, gt=0)

    @torch.no_grad()
    def compute(
        self, rewards: torch.Tensor, group_ids: GroupIds, *, run_ids: torch.Tensor | Sequence[Hashable]
    ) -> AdvantageResult:
        rewards = check_rewards(self.name, rewards)
        n = rewards.numel()
        index, num_groups = group_index(self.name, group_ids, n, rewards.device)
        run, num_runs = group_index(self.name, run_ids, n, rewards.device, name="run_ids")
        positions = torch.arange(n, device=rewards.device)
        last = positions.new_full((num_runs,), -1).scatter_reduce_(0, run, positions, "amax")
        run_group = index[last]
        mismatch = (run_group[run] != index).nonzero().flatten()
        if mismatch.numel():
            i = int(mismatch[0])
            raise ValueError(
                f"{self.name}: sample {i} has a different group id than the last step ({int(last[run[i]])}) "
                "of its run; every run must belong to a single group"
            )
        run_advantages, _ = _grpo(rewards[last], run_group, num_groups, self.epsilon)
        return AdvantageResult(run_advantages[run], _all_kept(rewards))


@register_advantage("raft")
class RAFTSelection(AdvantageFn):
    """RAFT's reward-ranked selection (Dong et al. 2023, "RAFT: Reward rAnked FineTuning", arXiv 2304.06767).

    Not an advantage estimate but the rejection step of RAFT: each group keeps its best-rewarded sample (the
    first one on ties), and only if ``R >= min_reward`` when ``min_reward`` is set; every other sample is
    dropped (``keep = False``).  Kept samples get advantage 1, so any advantage-weighted loss reduces to SFT on
    the selected completions (RAFT trains the ``sft`` loss on them).
    """

    def __init__(self, *, min_reward: float | None = None) -> None:
        self.min_reward = check_number(self.name, "min_reward", min_reward, allow_none=True)

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
