"""VESPO: a smooth, asymmetric Gamma weight of the sequence's importance ratio instead of a clip (TRL's
`loss_type="vespo"`).

Paper: "VESPO: Variational Sequence-Level Soft Policy Optimization" (arXiv 2602.10693), as TRL 1.16's
`GRPOTrainer.get_gamma_weights` computes it. Per sequence, with W the sequence's importance weight (the product of the
token ratios, times the sampler's correction ρ where vLLM sampled):

    log W = clamp(Σ_t m·clamp(lp − old, ±20) + Σ_t m·clamp(log ρ, log 1e-8, 20), log 1e-8, 20)
    φ(W)  = exp(λ + k·log W − λ·W)      (= e^λ·W^k·e^{−λW}: φ(1) = 1, largest at W = k/λ, vanishing as W → 0 or ∞)
    L_t   = −sg(φ)·A·lp_t

with (k, λ) = (`k_pos`, `lambda_pos`) where A ≥ 0, else (`k_neg`, `lambda_neg`) (λ at least 1e-4), and φ set to 0
where it overflows. φ carries no gradient: the gradient is φ·A·∇lp, a REINFORCE step whose weight decays smoothly as
the sequence drifts off-policy, faster for negative advantages. The token losses are aggregated with `loss_agg_mode`
(TRL: the token mean over the window, `token-mean`). The defaults are TRL's (2, 3, 3, 2). With per-token advantages,
k and λ follow each token's sign.

The sampler's correction ρ (`importance_sampling_ratio`, `[B, T]` or `[B, 1]`) enters W and multiplies nothing else,
as in TRL; the trainer therefore hands it to this loss instead of weighting the advantages with it.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from ..components import MEAN, SHARE, Argument
from .base import PolicyLoss, loss_agg_mode_argument, register_policy_loss
from .inputs import Metrics, check_float
from .masked_batch import MaskedBatch

LOG_W_MIN = math.log(1e-8)
"""The lower clamp of log W and of the sampler's log-correction (TRL's, from the paper's implementation)."""
LOG_RATIO_CLAMP = 20.0
"""The clamp of each token's log-ratio and the upper clamp of log W."""


@torch.no_grad()
def gamma_weights(
    b: MaskedBatch,
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    sampling_ratio: torch.Tensor | None,
    k: tuple[float, float],
    lam: tuple[float, float],
) -> torch.Tensor:
    """VESPO's φ(W) (see the module docstring): `[B, 1]` for per-sequence advantages, `[B, T]` for per-token ones.

    Args:
        b: The loss's masked batch.
        log_ratio: lp − old, `[B, T]` (selected by `b`).
        advantages: `[B, 1]` or `[B, T]` (selected by `b`).
        sampling_ratio: The sampler's correction ρ, `[B, T]` or `[B, 1]`, or None.
        k: (k for A ≥ 0, k for A < 0).
        lam: (λ for A ≥ 0, λ for A < 0).
    """
    log_w = b.select(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).sum(-1, keepdim=True)
    if sampling_ratio is not None:
        log_rho = torch.log(sampling_ratio).clamp(LOG_W_MIN, LOG_RATIO_CLAMP)
        log_w = log_w + (b.select(log_rho.expand(b.shape)) if log_rho.shape[-1] != 1 else log_rho).sum(-1, keepdim=True)
    log_w = log_w.clamp(LOG_W_MIN, LOG_RATIO_CLAMP)
    positive = advantages >= 0
    k_t = torch.where(positive, k[0], k[1]).to(log_w.dtype)
    lam_t = torch.where(positive, lam[0], lam[1]).clamp(min=1e-4).to(log_w.dtype)
    phi = torch.exp(lam_t + k_t * log_w - lam_t * torch.exp(log_w))
    return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


@register_policy_loss("vespo")
class VESPOPolicyLoss(PolicyLoss):
    """VESPO (the formula is the module's). Metrics: `vespo/phi_seq_mean` (TRL's: the mean φ, per sequence for
    per-sequence advantages), `pg_loss`.

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages`, the sampler's
    `importance_sampling_ratio` (optional) and the window counts. NaN / ±inf at a valid position make the loss NaN; at
    masked positions they are ignored.
    """

    arguments = (
        Argument("k_pos", 2.0, "Gamma shape k for A ≥ 0 (TRL's `vespo_k_pos`): φ peaks at W = k/λ.", ge=0),
        Argument("lambda_pos", 3.0, "Gamma rate λ for A ≥ 0 (TRL's `vespo_lambda_pos`).", ge=0),
        Argument("k_neg", 3.0, "Gamma shape k for A < 0 (TRL's `vespo_k_neg`).", ge=0),
        Argument("lambda_neg", 2.0, "Gamma rate λ for A < 0 (TRL's `vespo_lambda_neg`).", ge=0),
        loss_agg_mode_argument("token-mean"),
    )
    metrics: ClassVar[dict[str, str]] = {"vespo/phi_seq_mean": MEAN, "pg_loss": SHARE}

    def phi(
        self,
        b: MaskedBatch,
        log_ratio: torch.Tensor,
        advantages: torch.Tensor,
        sampling_ratio: torch.Tensor | None,
    ) -> torch.Tensor:
        """φ(W) with this loss's (k, λ) (`gamma_weights`)."""
        return gamma_weights(
            b, log_ratio, advantages, sampling_ratio, (self.k_pos, self.k_neg), (self.lambda_pos, self.lambda_neg)
        )

    def __call__(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        importance_sampling_ratio: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        sampling_ratio = read_sampling_ratio(self.name, b, importance_sampling_ratio)
        lp = b.select(logprob)
        adv = b.advantages(advantages)
        log_ratio = lp.detach() - b.select(b.check("old_logprob", old_logprob))
        phi = self.phi(b, log_ratio, adv, sampling_ratio)
        loss = b.aggregate(b.select((-phi * adv).expand(b.shape) * lp), self.loss_agg_mode)
        return loss, {"vespo/phi_seq_mean": row_or_token_mean(b, phi), "pg_loss": loss.detach()}


def read_sampling_ratio(name: str, b: MaskedBatch, ratio: torch.Tensor | None) -> torch.Tensor | None:
    """The sampler's correction ρ, checked (`[B, T]` or `[B, 1]`, floating point) and read by the batch's guard."""
    if ratio is None:
        return None
    b.broadcast_rows(ratio, "importance_sampling_ratio")
    if ratio.dim() != 2:
        raise ValueError(f"{name}: importance_sampling_ratio must be [B, T] or [B, 1], got shape {tuple(ratio.shape)}")
    b.read(check_float(name, "importance_sampling_ratio", ratio))
    return ratio


def row_or_token_mean(b: MaskedBatch, x: torch.Tensor) -> torch.Tensor:
    """TRL's metric mean: over the valid tokens of a `[B, T]` value, over the rows of a `[B, 1]` one (0 without
    positions, T = 0)."""
    if x.shape[-1] == 1 and b.shape[1] > 1:
        return b.mean_over_rows(x.float().squeeze(-1))
    return b.valid_mean(x.expand(b.shape))
