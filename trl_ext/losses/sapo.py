"""SAPO: Soft Adaptive Policy Optimization (Trinity-RFT `sapo`).

Paper: Gao et al. 2025 (Qwen), "Soft Adaptive Policy Optimization" (arXiv 2511.20347). A smooth, temperature-
controlled gate replaces the hard clip:

    r = exp(clamp(lp − old, ±20)),   τ = τ_pos where A > 0 else τ_neg
    f(r) = σ(τ·(r − 1)) · 4/τ

* default (the paper, verl, TRL 1.16):  L = −A · f(r), differentiable through r. The gradient weight
  on ∇lp is 4σ(1 − σ)·r: exactly 1 at r = 1 (the plain policy gradient on-policy) and decaying
  smoothly as r leaves 1 — a soft trust region.
* `detach_gate=True` (Trinity-RFT ≤ 0.6, bit for bit):  L = −A · sg(f(r)) · lp. Its gradient weight is
  f(r) itself: 2/τ at r = 1, growing monotonically towards 4/τ as r grows.

τ_neg ≥ τ_pos damps negative-advantage updates faster. The ±20 clamp only guards exp() against
overflow (the gate is saturated long before); it changes nothing for |lp − old| ≤ 20.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ..components import MEAN, SHARE, Argument
from .base import PolicyLoss, loss_agg_mode_argument, register_policy_loss
from .inputs import Metrics, scalar


@register_policy_loss("sapo")
class SAPOPolicyLoss(PolicyLoss):
    """SAPO. Metrics: `sapo_loss`, `ppo_kl`, `avg_soft_gate`, `avg_ratio`, `pos_adv_frac`.

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages` and the window counts. NaN / ±inf
    in `logprob`, `old_logprob` or `advantages` at a valid position make the loss NaN, also where the ±20 log-
    ratio clamp would make it finite; at masked positions they are ignored.
    """

    arguments = (
        Argument(
            "tau_pos",
            1.0,
            "Gate temperature τ for tokens with A > 0. The loss is −A·σ(τ(r − 1))·4/τ; the gradient "
            "weight is 1 at r = 1 and decays smoothly off-policy, faster for larger τ.",
            gt=0,
        ),
        Argument(
            "tau_neg",
            1.05,
            "Gate temperature for tokens with A ≤ 0; must be ≥ `tau_pos` (the paper decays negative "
            "updates faster, §3).",
            gt=0,
        ),
        loss_agg_mode_argument("token-mean"),
        Argument(
            "detach_gate",
            False,
            "Reproduce Trinity-RFT ≤ 0.6: −A·sg(gate)·lp, whose gradient weight is 2/τ at r = 1 and "
            "grows with r (not the paper's objective).",
        ),
    )
    metrics: ClassVar[dict[str, str]] = {
        "sapo_loss": SHARE,
        "ppo_kl": MEAN,
        "avg_soft_gate": MEAN,
        "avg_ratio": MEAN,
        "pos_adv_frac": MEAN,
    }

    def check_arguments(self) -> None:
        if self.tau_neg < self.tau_pos:
            raise ValueError(f"sapo: tau_neg={self.tau_neg!r} is not valid; must be >= tau_pos ({self.tau_pos!r})")

    def soft_gate_function(self, ratio: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
        """f(r) = σ(τ·(r − 1))·4/τ with τ = τ_pos where A > 0 else τ_neg."""
        positive = advantages > 0
        tau = torch.where(positive, scalar(self.tau_pos, ratio), scalar(self.tau_neg, ratio))
        scale = torch.where(positive, scalar(4.0 / self.tau_pos, ratio), scalar(4.0 / self.tau_neg, ratio))
        return torch.sigmoid(tau * (ratio - 1.0)) * scale  # tau, scale: [B, 1] for per-sequence advantages

    def __call__(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        adv = b.advantages(advantages)
        old = b.check("old_logprob", old_logprob)
        if self.detach_gate:
            with torch.no_grad():
                delta = b.select(logprob.detach() - old).clamp(-20.0, 20.0)
                ratio = torch.exp(delta)
                gate = self.soft_gate_function(ratio, adv)
            loss = b.aggregate(-adv * gate * b.select(logprob), self.loss_agg_mode)  # −A·sg(gate)·lp
        else:
            delta = b.select(logprob - old).clamp(-20.0, 20.0)
            ratio = torch.exp(delta)
            gate = self.soft_gate_function(ratio, adv)
            # −A·gate, from the selected gate's row sums when A is per sequence (no [B, T] product)
            loss = b.aggregate(-adv * b.select(gate), self.loss_agg_mode)
        with torch.no_grad():
            metrics = {
                "sapo_loss": loss.detach(),
                "ppo_kl": -b.mean(delta.detach()),
                "avg_soft_gate": b.valid_mean(gate.detach()),
                "avg_ratio": b.valid_mean(ratio.detach()),
                "pos_adv_frac": b.valid_mean(adv > 0),
            }
        return loss, metrics
