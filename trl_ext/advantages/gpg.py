"""GPG's group-relative advantages (verl `gpg`), broadcast to the response tokens.

Paper: Chu et al. 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning" (AMAP,
arXiv 2504.02546). Ports verl 0.9.1 `compute_gpg_outcome_advantage`: each row's token rewards are summed (every
position of the row) into a score R, then

    α = N / max(M, 1),   M = the number of samples of the batch with R ≠ 0
    A = α · (R − mean) / f_norm,   broadcast over `response_mask` (0 elsewhere)

with `mean` the mean score of the sample's group (0 for a group of one, as in verl). α rescales the batch's
gradient by the share of samples that carry a reward signal (GPG's gradient-estimation correction); verl computes
it from the whole batch and ignores the `alpha` and `epsilon` arguments of its signature, so they are not arguments
here (`trl_ext.compat.verl.compute_gpg_outcome_advantage` keeps verl's signature).
"""

from __future__ import annotations

import torch

from ..components import Argument
from .base import group_stats, register_advantage
from .broadcast import _BroadcastAdvantageFn


@register_advantage("gpg")
class GPGAdvantage(_BroadcastAdvantageFn):
    """`gpg` (verl `compute_gpg_outcome_advantage`): `A = α·(R − mean)/f_norm` on the summed token rewards `R`,
    `α = N / max(#{R ≠ 0}, 1)` over the batch, `mean` the group mean (0 for a group of one), broadcast to the
    response tokens.

    `compute(rewards [N] or [N, T], group_ids, *, response_mask [N, T])`; non-finite rewards are a ValueError (verl
    would propagate them)."""

    arguments = (
        Argument(
            "f_norm",
            1.0,
            "Divisor F_norm of the centred scores, A = α·(R − mean)/F_norm (verl's `f_norm`, default 1.0).",
            gt=0,
        ),
    )

    def _advantages(self, rewards: torch.Tensor, index: torch.Tensor, num_groups: int) -> torch.Tensor:
        _, mean, _ = group_stats(rewards, index, num_groups)
        alpha = rewards.numel() / torch.count_nonzero(rewards).clamp(min=1).to(rewards.dtype)
        return alpha * (rewards - mean[index]) / self.f_norm
