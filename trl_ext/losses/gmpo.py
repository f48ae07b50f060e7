"""GMPO: Geometric-Mean Policy Optimization (verl `geo_mean`).

Paper: Zhao et al. 2025, "Geometric-Mean Policy Optimization" (arXiv 2507.20673). GRPO maximizes the arithmetic
mean of the token-level ratio-weighted advantages; GMPO maximizes their geometric mean, which is far less
sensitive to tokens with outlier importance ratios. With a sequence-level advantage the geometric mean is the
advantage times the geometric mean of the token ratios, i.e. exp of the row's mean log-ratio, each token's
log-ratio clipped first (in log space, and only on the side the advantage's sign makes harmful).

Ports verl 0.9.1 `compute_policy_loss_geo_mean`. Per token, with Δ = lp − old (not clamped), m the mask and
n_i = Σ_t m_it:

    Δ'_t  = min(Δ_t, ε_high) where A_t > 0,   max(Δ_t, −ε_low) where A_t < 0,   0 where A_t = 0
    R_i   = exp(Σ_t m·Δ' / (n_i + ε)),   Ā_i = Σ_t m·A / (n_i + ε)        (ε = 1e-8)
    w_i   = exp(Σ_t m·log(w_t + 1e-10) / (n_i + ε))   (the geometric mean of the IS correction; 1 when not given)
    L_i   = −Ā_i · R_i · w_i,    loss = Σ_i L_i / B

Rows are all B rows, empty ones included (L_i = 0), as verl's `torch.mean`; under window normalization
(`global_valid_seqs` given) the micro-batch's share is Σ_i L_i / `global_valid_seqs`. verl ignores
`loss_agg_mode` for this loss, so there is no `loss_agg_mode` argument (the trainer's KL and entropy terms then
fall back to `token-mean`).

The clip bounds bound the *log*-ratio: ε_low = ε_high = 0.2 (verl's `clip_ratio` default) keeps the ratio in
[e^−0.2, e^0.2]; the GMPO paper clips much wider, at ±0.4. Metrics are verl's: `pg_clipfrac` / `pg_clipfrac_lower`
are the token fractions with Δ outside [−ε_low, ε_high] (either side) and A > 0 / A < 0, `ppo_kl` the token mean
of −Δ.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ..components import Argument
from .aggregation import EPS
from .base import ClippedRatioLoss, register_policy_loss
from .inputs import Metrics

LOG_WEIGHT_EPS = 1e-10
"""verl's ε in the log of the importance-sampling correction: log(w + 1e-10)."""


@register_policy_loss("geo_mean")
class GMPOPolicyLoss(ClippedRatioLoss):
    """GMPO (verl `geo_mean`). Metrics: `pg_loss`, `pg_clipfrac`, `pg_clipfrac_lower`, `ppo_kl`.

    `clip_range_low` / `clip_range_high` fall back to the symmetric `clip_range` (verl's `clip_ratio_low` /
    `clip_ratio_high` / `clip_ratio`); an instance holds the resolved bounds.

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages` (`[B]`, `[B, 1]` or `[B, T]`: the
    sign is taken per token, the advantage of a row is its token mean), `importance_sampling_ratio` (optional,
    `[B, T]` or `[B, 1]`; a row's weight is the geometric mean over its tokens) and the window count
    `global_valid_seqs`. NaN / ±inf in `logprob`, `old_logprob`, `advantages` or `importance_sampling_ratio` at a
    valid position make the loss NaN; at masked positions they are ignored.
    """

    window_inputs: ClassVar[tuple[str, ...]] = ("global_valid_seqs",)
    arguments = (
        Argument(
            "clip_range",
            0.2,
            "Clip ε of the token log-ratio (log π/π_old ∈ [−ε_low, ε_high]), used for both sides unless "
            "`clip_range_low`/`_high` are set (verl's `clip_ratio`; the GMPO paper uses 0.4).",
            optional=True,
            ge=0,
        ),
        Argument(
            "clip_range_low",
            None,
            "Lower clip ε_low of the log-ratio, applied where A < 0. Defaults to `clip_range`.",
            type=float,
            ge=0,
        ),
        Argument(
            "clip_range_high",
            None,
            "Upper clip ε_high of the log-ratio, applied where A > 0. Defaults to `clip_range`.",
            type=float,
            ge=0,
        ),
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
        adv = b.advantages(advantages)  # [B, 1] or [B, T], 0 at masked positions / empty rows
        weights = b.token_weights(importance_sampling_ratio)
        delta = b.select(logprob - b.check("old_logprob", old_logprob))
        positive, negative = adv > 0, adv < 0
        # sign(A)·min(sign(A)·Δ, sign(A)·clamp(Δ, −ε_low, ε_high)): one clamp per side, 0 where A = 0.
        clipped_delta = torch.where(
            positive,
            delta.clamp(max=self.clip_range_high),
            torch.where(negative, delta.clamp(min=-self.clip_range_low), 0.0),
        )
        ratio = torch.exp(b.row_mean(clipped_delta))  # [B]; masked Δ are 0 and stay 0
        row_adv = b.row_mean(b.select(adv.expand(b.shape)))
        rows = -row_adv * ratio
        if weights is not None:
            log_weights = b.select(torch.log(weights + LOG_WEIGHT_EPS))
            rows = rows * torch.exp(log_weights.sum(-1) / (b.row_tok + EPS))
        loss = b.seq_mean(rows)
        with torch.no_grad():
            d = delta.detach()
            outside = d != d.clamp(-self.clip_range_low, self.clip_range_high)  # masked: Δ = 0, inside
            metrics = {
                "pg_loss": loss.detach(),
                "pg_clipfrac": b.mean(outside & positive),
                "pg_clipfrac_lower": b.mean(outside & negative),
                "ppo_kl": -b.mean(d),
            }
        return loss, metrics
