"""OPO's length-weighted group baseline (verl `opo`).

Paper: Hao et al. 2025, "On-Policy RL with Optimal Reward Baseline" (arXiv 2505.23585). Ports verl 0.9.1
`compute_opo_outcome_advantage`: with exact on-policy training and a sequence-level reward, the baseline that
minimises the gradient variance weights each sample's reward by its length (the squared norm of its score
function grows with the number of tokens), so

    b = Σ_{i ∈ g} L_i · R_i / Σ_{i ∈ g} L_i,     A_i = R_i − b

with `L_i` the sample's number of loss tokens (`response_mask.sum(-1)`) and `R_i` its reward (verl: the row's
summed token rewards). A group of one gets `b = 0` (as in verl). Deviation: a group whose lengths sum to 0 (every
row fully masked) gets `b = 0`, where verl divides 0 by 0 and returns NaN. verl broadcasts the advantage over the
response mask; this is a group estimator returning one advantage per sample (`trl_ext.compat.verl` broadcasts).
"""

from __future__ import annotations

import torch

from .base import (
    AdvantageFn,
    AdvantageResult,
    GroupIds,
    check_response_mask,
    check_rewards,
    group_index,
    group_sum,
    register_advantage,
)


def opo_advantages(scores: torch.Tensor, lengths: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
    """OPO advantages `[N]`: `R − Σ_g L·R / Σ_g L` (see the module docstring).

    Args:
        scores: `[N]` one reward per sample.
        lengths: `[N]` each sample's number of loss tokens (any real dtype; cast to the scores' dtype).
        index: `[N]` long, each sample's group in `0..num_groups − 1`.
        num_groups: The number of groups G.

    Returns:
        `R − b`, `b` 0 for a group of one and for a group whose lengths sum to 0.
    """
    lengths = lengths.to(scores.dtype)
    counts = torch.bincount(index, minlength=num_groups)
    weighted = group_sum(lengths * scores, index, num_groups)
    total = group_sum(lengths, index, num_groups)
    usable = (counts > 1) & (total != 0)
    baseline = torch.where(usable, weighted / torch.where(usable, total, 1.0), 0.0)
    return scores - baseline[index]


@register_advantage("opo")
class OPOAdvantage(AdvantageFn):
    """OPO (verl `opo`, arXiv 2505.23585): `A = R − Σ_g L·R / Σ_g L`, `L` the samples' loss-token counts (see the
    module docstring; a group of one, or of total length 0: `A = R`).

    `compute(rewards [N], group_ids, *, response_mask [N, T])`: one reward per sample (verl sums the row's token
    rewards; `trl_ext.compat.verl` does), `response_mask` for the lengths only.
    """

    @torch.no_grad()
    def compute(self, rewards: torch.Tensor, group_ids: GroupIds, *, response_mask: torch.Tensor) -> AdvantageResult:
        scores = check_rewards(self.name, rewards)
        mask = check_response_mask(self.name, response_mask, scores.device)
        if mask.shape[0] != scores.numel():
            raise ValueError(
                f"{self.name}: response_mask has {mask.shape[0]} rows but rewards has {scores.numel()} entries"
            )
        index, num_groups = group_index(self.name, group_ids, scores.numel(), scores.device)
        advantages = opo_advantages(scores, mask.sum(-1), index, num_groups)
        return AdvantageResult(advantages, torch.ones_like(scores, dtype=torch.bool))
