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

import torch

from .base import Metrics, PolicyLoss, check_loss_agg_mode, check_number, register_policy_loss


class _SFTBase(PolicyLoss):
    """The SFT family.

    Inputs (`inputs()`): `logprob`, `action_mask` and the window counts. NaN / ±inf in `logprob` at a valid
    position make the loss NaN; at masked positions they are ignored.
    """

    metric = ""

    def __init__(self, backend: str = "verl", loss_agg_mode: str = "token-mean") -> None:
        super().__init__(backend)
        check_loss_agg_mode(self.name, loss_agg_mode)
        self.loss_agg_mode = loss_agg_mode

    def token_losses(self, lp: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def is_window_share(self, metric: str) -> bool:
        return metric == self.metric  # the loss value, its only metric

    def __call__(self, logprob: torch.Tensor, action_mask: torch.Tensor, **kwargs) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        loss = b.aggregate(self.token_losses(b.select(logprob)), self.loss_agg_mode)
        return loss, {self.metric: loss.detach()}


@register_policy_loss("sft")
class SFTLoss(_SFTBase):
    """Negative log-likelihood. Metric: `sft_loss`."""

    metric = "sft_loss"

    def token_losses(self, lp: torch.Tensor) -> torch.Tensor:
        return -lp


@register_policy_loss("sft_is")
class SFTISLoss(_SFTBase):
    """SFT with an importance weight sg(p). Metric: `sft_is_loss`."""

    metric = "sft_is_loss"

    def token_losses(self, lp: torch.Tensor) -> torch.Tensor:
        return lp * torch.exp(lp.detach()).neg_()


@register_policy_loss("sft_phi")
class SFTPhiLoss(_SFTBase):
    """CHORD-φ weighted SFT. Metric: `sft_phi_loss`.

    `cutoff_prob` must lie in (0, 1]: the reference's range includes 0, but log(0) = −inf would turn
    every token loss into inf, so 0 is rejected.
    """

    metric = "sft_phi_loss"

    def __init__(self, backend: str = "verl", loss_agg_mode: str = "token-mean", cutoff_prob: float = 1.0) -> None:
        super().__init__(backend, loss_agg_mode)
        check_number(self.name, "cutoff_prob", cutoff_prob, gt=0, le=1)
        self.cutoff_prob = cutoff_prob

    def token_losses(self, lp: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            prob = torch.exp(lp)
            phi = prob * (1.0 - prob)
        if self.cutoff_prob < 1.0:
            lp = lp.clamp(max=math.log(self.cutoff_prob))
        return lp * phi.neg_()
