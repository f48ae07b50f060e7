"""CISPO: Clipped IS-weight Policy Optimization (Trinity-RFT `cispo`).

Paper: MiniMax 2025, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention"
(arXiv 2506.13585). Instead of clipping the token's update away, CISPO clips (and stops the gradient
of) the importance weight, so every token keeps a REINFORCE gradient:

    r = exp(lp − old),   w = clamp(r, 1 − ε_low, 1 + ε_high)
    M = 0 where (r > 1 + ε'_high and A > 0) or (r < 1 − ε'_low and A < 0), else 1   [enable_mask_clip]
    L = −A · sg(w) · sg(M) · lp

ε are *relative* (1 + ε), as in verl / NeMo-RL / Trinity; TRL's `loss_type="cispo"` instead caps r at
the absolute `epsilon_high`. The paper sets no lower bound (ε_low = 1.0) and tunes ε_high only.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ..components import MEAN, SHARE, Argument
from .base import PolicyLoss, loss_agg_mode_argument, register_policy_loss
from .inputs import Metrics


@register_policy_loss("cispo")
class CISPOPolicyLoss(PolicyLoss):
    """CISPO. Metrics: `cispo_loss`, `ppo_kl`, `unmasked_frac` (share of valid tokens with M = 1).

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages` and the window counts. NaN / ±inf
    in `logprob`, `old_logprob` or `advantages` at a valid position make the loss NaN; at masked positions they
    are ignored.
    """

    arguments = (
        Argument(
            "clip_range_low",
            1.0,
            "The stop-gradient IS weight is clamped to [1 − clip_range_low, 1 + clip_range_high]; "
            "1.0 means no lower bound (MiniMax-M1).",
            ge=0,
        ),
        Argument(
            "clip_range_high",
            0.28,
            "Upper bound ε_high of the IS weight (1 + ε_high). TRL's `loss_type='cispo'` caps the ratio "
            "at `epsilon_high` itself, so TRL's `epsilon_high=5.0` is `clip_range_high=4.0` here.",
            ge=0,
        ),
        Argument(
            "enable_mask_clip",
            False,
            "Also zero the tokens whose ratio left the trust region in the advantage's direction "
            "(r > 1 + mask_clip_range_high with A > 0, or r < 1 − mask_clip_range_low with A < 0).",
        ),
        Argument("mask_clip_range_low", 1.0, "Lower bound of `enable_mask_clip`.", ge=0),
        Argument("mask_clip_range_high", 0.28, "Upper bound of `enable_mask_clip`.", ge=0),
        loss_agg_mode_argument("token-mean"),
    )
    metrics: ClassVar[dict[str, str]] = {"cispo_loss": SHARE, "ppo_kl": MEAN, "unmasked_frac": MEAN}

    def __call__(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        lp = b.select(logprob)
        with torch.no_grad():
            adv = b.advantages(advantages)
            delta = lp - b.select(b.check("old_logprob", old_logprob))
            ratio = torch.exp(delta)
            coef = -adv * ratio.clamp(1.0 - self.clip_range_low, 1.0 + self.clip_range_high)
            if self.enable_mask_clip:
                clipped = ((ratio > 1.0 + self.mask_clip_range_high) & (adv > 0)) | (
                    (ratio < 1.0 - self.mask_clip_range_low) & (adv < 0)
                )
                coef = torch.where(clipped, 0.0, coef)
        loss = b.aggregate(coef * lp, self.loss_agg_mode)
        with torch.no_grad():
            metrics = {
                "cispo_loss": loss.detach(),
                "ppo_kl": -b.mean(delta),
                "unmasked_frac": b.valid_mean(~clipped) if self.enable_mask_clip else b.mean(b.mask),
            }
        return loss, metrics
