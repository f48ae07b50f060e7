"""Trinity-RFT's trainer-side group estimators (`grpo_verl`, `opmd_verl`, `asymre_verl`): the group formulas of
`trl_ext.advantages.group` on a batch of token rewards, broadcast to every response token.

Ports Trinity-RFT 0.6.0 `GRPOAdvantageFn`, `OPMDAdvantageFn` and `ASYMREAdvantageFn` (deprecated there in
favour of the grouped variants, but registered): each sums the row's token rewards (`token_level_rewards.sum(-1)`,
every position of the row) into a score `R`, computes the per-sample advantage of its grouped twin on the scores
(a group of one included: mean 0 / std 1, baseline 0) and returns `A[i] * response_mask[i, t]`.
"""

from __future__ import annotations

from typing import Any

import torch

from .base import (
    AdvantageFn,
    AdvantageResult,
    GroupIds,
    check_response_mask,
    group_index,
    register_advantage,
    sequence_rewards,
)
from .group import AsymREAdvantage, GRPOAdvantage, OPMDAdvantage, _grpo


def broadcast(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`advantages[i] * mask[i, t]` `[N, T]` (exactly 0 outside `mask`)."""
    return torch.where(mask, advantages.unsqueeze(-1), advantages.new_zeros(()))


class _BroadcastAdvantageFn(AdvantageFn):
    """`compute(rewards [N] or [N, T], group_ids, *, response_mask)`: `_advantages` on the summed rewards,
    broadcast over `response_mask`."""

    token_level = True
    token_rewards = True

    @torch.no_grad()
    def compute(self, rewards: torch.Tensor, group_ids: GroupIds, *, response_mask: torch.Tensor) -> AdvantageResult:
        advantages, mask = self._token_advantages(rewards, group_ids, response_mask)
        return AdvantageResult(advantages, torch.ones(mask.shape[0], dtype=torch.bool, device=mask.device))

    def _token_advantages(
        self, rewards: Any, group_ids: GroupIds, response_mask: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(advantages [N, T], response_mask as bool)`: `_advantages` of the summed rewards, broadcast."""
        device = rewards.device if isinstance(rewards, torch.Tensor) else None
        mask = check_response_mask(self.name, response_mask, device)
        scores = sequence_rewards(self.name, rewards, mask)
        index, num_groups = group_index(self.name, group_ids, scores.numel(), scores.device)
        return broadcast(self._advantages(scores, index, num_groups), mask), mask

    def _advantages(self, rewards: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
        raise NotImplementedError


@register_advantage("grpo_verl")
class GRPOVerlAdvantage(_BroadcastAdvantageFn):
    """`grpo_verl` (Trinity-RFT `GRPOAdvantageFn`, verl's `compute_grpo_outcome_advantage`): `A = (R - mean) /
    (std + epsilon)` over the group (unbiased std; a group of one: mean 0, std 1) of the summed token rewards
    `R`, broadcast to the response tokens.  Shao et al. 2024, arXiv 2402.03300."""

    arguments = (GRPOAdvantage.argument("epsilon"),)

    def _advantages(self, rewards: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
        return _grpo(rewards, index, num_groups, self.epsilon)[0]


@register_advantage("opmd_verl")
class OPMDVerlAdvantage(_BroadcastAdvantageFn):
    """`opmd_verl` (Trinity-RFT `OPMDAdvantageFn`): `opmd`'s `A = R - baseline` (group `mean`, or `tau *
    logavgexp(R / tau)`; a group of one: 0) on the summed token rewards, broadcast to the response tokens."""

    arguments = OPMDAdvantage.arguments
    _advantages = OPMDAdvantage._advantages


@register_advantage("asymre_verl")
class AsymREVerlAdvantage(_BroadcastAdvantageFn):
    """`asymre_verl` (Trinity-RFT `ASYMREAdvantageFn`): `asymre`'s `A = R - (mean + baseline_shift)` (a group of
    one: `A = R`) on the summed token rewards, broadcast to the response tokens."""

    arguments = AsymREAdvantage.arguments
    _advantages = AsymREAdvantage._advantages
