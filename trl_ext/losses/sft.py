"""Supervised losses on (expert) completions: `sft`, `sft_is`, `sft_phi` (Trinity-RFT).

* `sft`:      L = −lp (negative log-likelihood).
* `sft_is`:   L = −lp · sg(p), p = e^lp — the gradient of −p, so confident tokens dominate.
* `sft_phi`:  CHORD-φ, Zhang et al. 2025, "On-Policy RL Meets Off-Policy Experts: Harmonizing
  Supervised Fine-Tuning and Reinforcement Learning via Dynamic Weighting" (arXiv 2508.11408):
  L = −lp' · sg(φ(p)), φ(p) = p(1 − p), with lp' = min(lp, log cutoff_prob) when cutoff_prob < 1,
  so tokens the policy already predicts with probability above the cutoff get no gradient. φ
  down-weights both tokens the model is sure of and tokens it finds implausible, which keeps the
  expert signal from overwriting the policy.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from ..components import SHARE, Argument
from .base import PolicyLoss, loss_agg_mode_argument, register_policy_loss
from .inputs import Metrics


class _SFTBase(PolicyLoss):
    """The SFT family: `metrics` is the loss value, its only metric.

    Inputs (`inputs()`): `logprob`, `action_mask` and the window counts. NaN / ±inf in `logprob` at a valid
    position make the loss NaN; at masked positions they are ignored.
    """

    arguments = (loss_agg_mode_argument("token-mean"),)

    def weighted_logprob(self, lp: torch.Tensor) -> torch.Tensor:
        """The per-token log-likelihood term w·lp of the loss L = −w·lp (lp selected: 0 at masked positions)."""
        raise NotImplementedError

    def __call__(self, logprob: torch.Tensor, action_mask: torch.Tensor, **kwargs) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        # The aggregation is linear: −agg(w·lp) = agg(−w·lp), without a [B, T] negation and its backward.
        loss = -b.aggregate(self.weighted_logprob(b.select(logprob)), self.loss_agg_mode)
        return loss, dict.fromkeys(self.metrics, loss.detach())


@register_policy_loss("sft")
class SFTLoss(_SFTBase):
    """Negative log-likelihood. Metric: `sft_loss`."""

    metrics: ClassVar[dict[str, str]] = {"sft_loss": SHARE}

    def weighted_logprob(self, lp: torch.Tensor) -> torch.Tensor:
        return lp


@register_policy_loss("sft_is")
class SFTISLoss(_SFTBase):
    """SFT with an importance weight sg(p). Metric: `sft_is_loss`."""

    metrics: ClassVar[dict[str, str]] = {"sft_is_loss": SHARE}

    def weighted_logprob(self, lp: torch.Tensor) -> torch.Tensor:
        return lp * torch.exp(lp.detach())


@register_policy_loss("sft_phi")
class SFTPhiLoss(_SFTBase):
    """CHORD-φ weighted SFT. Metric: `sft_phi_loss`.

    `cutoff_prob` must lie in (0, 1]: the reference's range includes 0, but log(0) = −inf would turn
    every token loss into inf, so 0 is rejected.
    """

    arguments = (
        *_SFTBase.arguments,
        Argument(
            "cutoff_prob",
            1.0,
            "Tokens the policy predicts with probability above this cutoff get no gradient (1 disables the cutoff).",
            gt=0,
            le=1,
        ),
    )
    metrics: ClassVar[dict[str, str]] = {"sft_phi_loss": SHARE}

    def weighted_logprob(self, lp: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            prob = torch.exp(lp)
            phi = torch.addcmul(prob, prob, prob, value=-1)  # p − p² = p(1 − p), one pass
        if self.cutoff_prob < 1.0:
            lp = lp.clamp(max=math.log(self.cutoff_prob))
        return lp * phi
