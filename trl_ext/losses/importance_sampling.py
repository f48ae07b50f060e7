"""Unclipped importance-sampled policy gradient (Trinity-RFT `importance_sampling`).

The loss of on-policy distillation as in Thinking Machines' Tinker ("On-Policy Distillation", 2025)
and Trinity-RFT's `on_policy_distill` algorithm, where the advantage is the per-token
kl_coef·(teacher log-prob − sampling log-prob):

    Δ = clamp(lp − old, ±20),   L = −A · e^Δ

Tinker sums over tokens; the reference (and the default here) takes the token mean.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ..components import MEAN, SHARE
from .base import PolicyLoss, loss_agg_mode_argument, register_policy_loss
from .inputs import Metrics


@register_policy_loss("importance_sampling")
class ImportanceSamplingLoss(PolicyLoss):
    """IS-REINFORCE. Metrics: `pg_loss`, `ratio/mean`, `approx_kl` (token mean of −Δ).

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages` and the window counts. NaN / ±inf
    in `logprob`, `old_logprob` or `advantages` at a valid position make the loss NaN, also where the ±20 log-
    ratio clamp would make it finite; at masked positions they are ignored.
    """

    arguments = (loss_agg_mode_argument("token-mean"),)
    metrics: ClassVar[dict[str, str]] = {"pg_loss": SHARE, "ratio/mean": MEAN, "approx_kl": MEAN}

    def __call__(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        delta = b.select(logprob - b.check("old_logprob", old_logprob)).clamp(-20.0, 20.0)
        ratio = b.select(torch.exp(delta))  # 1 at masked positions before the select
        # −A·ratio, guarded: the ±20 clamp can make an infinite log-ratio finite.
        loss = b.aggregate(-b.advantages(advantages) * ratio, self.loss_agg_mode)
        with torch.no_grad():
            metrics = {
                "pg_loss": loss.detach(),
                "ratio/mean": b.mean(ratio),
                "approx_kl": -b.mean(delta),
            }
        return loss, metrics
