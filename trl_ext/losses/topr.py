"""TOPR: Tapered Off-Policy REINFORCE (Trinity-RFT `topr`).

Paper: Le Roux, Bellemare et al. 2025, "Tapered Off-Policy REINFORCE: Stable and efficient
reinforcement learning for LLMs" (arXiv 2503.14286). Positive samples get an SFT-like REINFORCE
gradient; negative ones a truncated importance weight, which keeps the objective bounded:

    r = exp(lp − old),   α = clamp(r, 0, 1) where A ≤ threshold, else 1
    L = −sg(α) · A · lp

As in the reference, the truncation is per token (the paper truncates the sequence ratio) and the
advantage plays the role of the reward (use the `reinforce` advantage for the paper's setting).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ..components import MEAN, SHARE, Argument
from .base import PolicyLoss, loss_agg_mode_argument, register_policy_loss
from .inputs import Metrics, scalar


@register_policy_loss("topr")
class TOPRPolicyLoss(PolicyLoss):
    """TOPR. Metrics: `topr_loss`, `avg_alpha`, `avg_ratio`.

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages` and the window counts. NaN / ±inf
    in `logprob`, `old_logprob` or `advantages` at a valid position make the loss NaN; at masked positions they
    are ignored.
    """

    arguments = (
        Argument(
            "advantage_threshold",
            0.0,
            "Tokens with A > threshold get the full (untruncated) policy gradient; the others are "
            "weighted by the truncated ratio clamp(r, 0, 1).",
        ),
        loss_agg_mode_argument("token-mean"),
    )
    metrics: ClassVar[dict[str, str]] = {"topr_loss": SHARE, "avg_alpha": MEAN, "avg_ratio": MEAN}

    def __call__(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        with torch.no_grad():
            adv = b.advantages(advantages)
            ratio = torch.exp(b.select(logprob.detach() - b.check("old_logprob", old_logprob)))
            # α = clip(r, 0, 1) where A <= threshold, else 1: one clamp with per-row bounds [0, 1] or [1, 1]
            alpha = ratio.clamp(b.bound(ratio, adv <= self.advantage_threshold, 0.0, 1.0), scalar(1.0, ratio))
            metrics = {"avg_alpha": b.valid_mean(alpha), "avg_ratio": b.valid_mean(ratio)}
            coef = alpha.mul_(-adv)  # −α·A
        loss = b.aggregate(coef * b.select(logprob), self.loss_agg_mode)
        metrics["topr_loss"] = loss.detach()
        return loss, metrics
