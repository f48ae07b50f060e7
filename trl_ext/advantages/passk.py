"""Pass@k training advantages (verl `grpo_passk`): only each group's best sample gets a signal.

Paper: Chen et al. 2025, "Pass@k Training for Adaptively Balancing Exploration and Exploitation of Large Reasoning
Models" (arXiv 2503.19595). Ports verl 0.9.1 `compute_grpo_passk_outcome_advantage`: in each group,

    A_best = (r_max − r_second) / (std + ε)     (r_max − r_second when not norm_adv_by_std)
    A_i    = 0 for every other sample

with `r_max` / `r_second` the group's two largest rewards, `std` the group's unbiased std (`torch.std`) and
`best` the sample holding `r_max`. verl picks it with `torch.topk(rewards, 2)` over the group's rewards in batch
order; here it is the first sample (in batch order) holding the maximum. The two can differ only when several
samples tie for the maximum, and then `r_max − r_second = 0`, so every sample of the group gets 0 either way.
A group needs at least 2 samples (verl raises too). verl broadcasts the advantage over the response mask; this is
a group estimator returning one advantage per sample (`trl_ext.compat.verl` broadcasts).
"""

from __future__ import annotations

import torch

from ..components import Argument
from .base import (
    AdvantageFn,
    AdvantageResult,
    GroupIds,
    check_rewards,
    group_index,
    group_stats,
    rank_within_groups,
    register_advantage,
)


def _check_pairs(owner: str, index: torch.Tensor, num_groups: int, name_group) -> None:
    """Raise a ValueError naming the first group (in batch order) with fewer than 2 samples."""
    counts = torch.bincount(index, minlength=num_groups)
    single = (counts[index] < 2).nonzero().flatten()
    if single.numel():
        i = int(single[0])
        raise ValueError(
            f"{owner}: Pass@k needs at least 2 samples per group, but group {name_group(i)} (sample {i}) has 1"
        )


def grpo_passk_advantages(
    scores: torch.Tensor,
    index: torch.Tensor,
    num_groups: int,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
) -> torch.Tensor:
    """Pass@k advantages `[N]` (see the module docstring).

    Args:
        scores: `[N]` one reward per sample (verl: the row's summed token rewards).
        index: `[N]` long, each sample's group in `0..num_groups − 1`.
        num_groups: The number of groups G.
        epsilon: ε of `(r_max − r_second) / (std + ε)`.
        norm_adv_by_std: Divide by `std + ε` (verl's `norm_adv_by_std_in_grpo`).

    Returns:
        `r_max − r_second` (over `std + ε`) on each group's best sample, 0 elsewhere.

    Raises:
        ValueError: a group has a single sample (naming its index and a sample).
    """
    _check_pairs("grpo_passk_advantages", index, num_groups, lambda i: int(index[i]))
    rank = rank_within_groups(index, num_groups, scores, torch.ones_like(index, dtype=torch.bool))
    best, second = rank == 0, rank == 1
    top = scores.new_zeros(num_groups).index_put_((index[best],), scores[best])
    runner_up = scores.new_zeros(num_groups).index_put_((index[second],), scores[second])
    gap = top - runner_up
    if norm_adv_by_std:
        _, _, std = group_stats(scores, index, num_groups)
        gap = gap / (std + epsilon)
    return torch.where(best, gap[index], 0.0)


@register_advantage("grpo_passk")
class GRPOPassKAdvantage(AdvantageFn):
    """Pass@k (verl `grpo_passk`, arXiv 2503.19595): each group's best sample gets `(r_max − r_second)/(std + ε)`
    (or `r_max − r_second`), the others 0 (see the module docstring).

    `compute(rewards [N], group_ids)`; a group of a single sample is a ValueError naming it.
    """

    arguments = (
        Argument(
            "epsilon",
            1e-6,
            "ε of (r_max − r_second)/(std + ε), std the unbiased group std.",
            gt=0,
            config_name="advantage_epsilon",
        ),
        Argument(
            "norm_adv_by_std",
            True,
            "Divide the best sample's margin r_max − r_second by the group std + ε (verl's `norm_adv_by_std_in_grpo`).",
        ),
    )

    @torch.no_grad()
    def compute(self, rewards: torch.Tensor, group_ids: GroupIds) -> AdvantageResult:
        rewards = check_rewards(self.name, rewards)
        index, num_groups = group_index(self.name, group_ids, rewards.numel(), rewards.device)
        _check_pairs(self.name, index, num_groups, lambda i: repr(_group_id(group_ids, i)))
        advantages = grpo_passk_advantages(rewards, index, num_groups, self.epsilon, self.norm_adv_by_std)
        return AdvantageResult(advantages, torch.ones_like(rewards, dtype=torch.bool))


def _group_id(group_ids: GroupIds, i: int):
    """Sample `i`'s group id as the caller gave it."""
    value = group_ids[i]
    return value.item() if isinstance(value, torch.Tensor) else value
