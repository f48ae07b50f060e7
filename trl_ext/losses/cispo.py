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

import torch

from .base import (
    Metrics,
    PolicyLoss,
    check_bool,
    check_loss_agg_mode,
    check_number,
    register_policy_loss,
)


@register_policy_loss("cispo")
class CISPOPolicyLoss(PolicyLoss):
    """CISPO. Metrics: `cispo_loss`, `ppo_kl`, `unmasked_frac` (share of valid tokens with M = 1).

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages` and the window counts. NaN / ±inf
    in `logprob`, `old_logprob` or `advantages` at a valid position make the loss NaN; at masked positions they
    are ignored.
    """

    window_shares = ("cispo_loss",)

    def __init__(
        self,
        backend: str = "verl",
        clip_range_low: float = 1.0,
        clip_range_high: float = 0.28,
        enable_mask_clip: bool = False,
        mask_clip_range_low: float = 1.0,
        mask_clip_range_high: float = 0.28,
        loss_agg_mode: str = "token-mean",
    ) -> None:
        super().__init__(backend)
        for name, value in [
            ("clip_range_low", clip_range_low),
            ("clip_range_high", clip_range_high),
            ("mask_clip_range_low", mask_clip_range_low),
            ("mask_clip_range_high", mask_clip_range_high),
        ]:
            check_number(self.name, name, value, ge=0)
        check_bool(self.name, "enable_mask_clip", enable_mask_clip)
        check_loss_agg_mode(self.name, loss_agg_mode)
        self.clip_range_low = clip_range_low
        self.clip_range_high = clip_range_high
        self.enable_mask_clip = enable_mask_clip
        self.mask_clip_range_low = mask_clip_range_low
        self.mask_clip_range_high = mask_clip_range_high
        self.loss_agg_mode = loss_agg_mode

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
