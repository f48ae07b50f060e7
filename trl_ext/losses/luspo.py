"""LUSPO: GSPO's sequence-level clipped objective, each sequence's loss scaled by its length (TRL's
`loss_type="luspo"`).

Paper: Liu et al. 2026, "Length-Unbiased Sequence Policy Optimization: Revealing and Controlling Response Length
Variation in RLVR" (Meituan, arXiv 2602.05261). GSPO (arXiv 2507.18071) averages a sequence-level objective over
sequences, which favours short responses once the ratio is clipped; LUSPO multiplies each sequence's loss by its
length |y_i|. As TRL 1.16 computes it, with w the log importance weight:

    `ratio_level="sequence"` (the paper's):              w_i = mean_t (lp − old) over the row (one value per sequence,
                                                          differentiable through every token of the row)
    `ratio_level="token"`:                               w_t = lp_t − old_t
    r = exp(w),   r' = min(r, δ) with `ratio_cap` δ (two-sided clipping, INTELLECT-2, arXiv 2505.07291), else r' = r
    L_t = −min(r'·A, clamp(r, 1 − ε_low, 1 + ε_high)·A)
    L   = mean over sequences of Σ_t m·L_t                   (`seq-mean-token-sum`: a sequence's loss × its length)

At the sequence level Σ_t m·L_t = |y_i|·L_i, the paper's objective. The clip bounds default to the GSPO paper's
(ε_low 3e-4, ε_high 4e-4, v2 §5.1), which LUSPO keeps; TRL's `epsilon` / `epsilon_high`, `importance_sampling_level` and
`delta` are `clip_range_low` / `clip_range_high`, `ratio_level` and `ratio_cap` here.
"""

from __future__ import annotations

import warnings
from typing import ClassVar

import torch

from ..components import MEAN, SHARE, Argument
from .base import PolicyLoss, loss_agg_mode_argument, register_policy_loss
from .gspo import PAPER_CLIP_RANGE_HIGH, PAPER_CLIP_RANGE_LOW
from .inputs import Metrics
from .masked_batch import MaskedBatch
from .vespo import row_or_token_mean


def log_importance_weight(b: MaskedBatch, log_ratio: torch.Tensor, level: str) -> torch.Tensor:
    """TRL's log importance weight: `log_ratio` itself (`"token"`, `[B, T]`) or its row mean (`"sequence"`, `[B, 1]`,
    the GSPO ratio); `log_ratio` is selected by `b`."""
    if level == "sequence":
        return (log_ratio.sum(-1) / b.row_tok.clamp(min=1.0)).unsqueeze(-1)
    return log_ratio


def clipped_objective(
    ratio: torch.Tensor, advantages: torch.Tensor, low: float, high: float, delta: float | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """TRL's clipped surrogate −min(r'·A, clamp(r, 1 − low, 1 + high)·A) (r' = min(r, δ) with `delta`), and the
    flags of the low / high clipped positions (r' < 1 − low with A < 0; r' > 1 + high with A > 0)."""
    unclipped = ratio if delta is None else ratio.clamp(max=delta)
    loss = -torch.min(unclipped * advantages, ratio.clamp(1.0 - low, 1.0 + high) * advantages)
    with torch.no_grad():
        low_clipped = (unclipped < 1.0 - low) & (advantages < 0)
        high_clipped = (unclipped > 1.0 + high) & (advantages > 0)
    return loss, low_clipped, high_clipped


@register_policy_loss("luspo")
class LUSPOPolicyLoss(PolicyLoss):
    """LUSPO (the formula is the module's). Metrics: TRL's `clip_ratio/low_mean`, `clip_ratio/high_mean`,
    `clip_ratio/region_mean` (token means, or sequence means at the sequence level), and `pg_loss`.

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages` and the window counts. NaN / ±inf at a
    valid position make the loss NaN; at masked positions they are ignored.
    """

    arguments = (
        Argument("clip_range_low", PAPER_CLIP_RANGE_LOW, "Lower clip ε_low (TRL's `epsilon`); GSPO's 3e-4.", ge=0),
        Argument(
            "clip_range_high", PAPER_CLIP_RANGE_HIGH, "Upper clip ε_high (TRL's `epsilon_high`); GSPO's 4e-4.", ge=0
        ),
        Argument(
            "ratio_level",
            "sequence",
            "`sequence`: the row's mean log-ratio (GSPO's ratio, the paper's); `token`: one ratio per token (TRL's "
            "`importance_sampling_level`).",
            choices=("sequence", "token"),
        ),
        Argument(
            "ratio_cap",
            None,
            "Upper bound δ of the unclipped ratio (two-sided clipping, TRL's `delta`), > 1.",
            type=float,
            gt=1,
        ),
        loss_agg_mode_argument("seq-mean-token-sum"),
    )
    metrics: ClassVar[dict[str, str]] = {
        "clip_ratio/low_mean": MEAN,
        "clip_ratio/high_mean": MEAN,
        "clip_ratio/region_mean": MEAN,
        "pg_loss": SHARE,
    }

    def check_arguments(self) -> None:
        if self.loss_agg_mode != "seq-mean-token-sum":
            warnings.warn(
                f"luspo: loss_agg_mode={self.loss_agg_mode!r}; the LUSPO objective is 'seq-mean-token-sum' (each "
                "sequence's loss times its length)",
                stacklevel=4,  # the caller of the constructor (check_arguments <- Component <- PolicyLoss)
            )

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
        log_ratio = b.select(logprob) - b.select(b.check("old_logprob", old_logprob))
        ratio = torch.exp(log_importance_weight(b, log_ratio, self.ratio_level))
        per_token, low, high = clipped_objective(ratio, adv, self.clip_range_low, self.clip_range_high, self.ratio_cap)
        loss = b.aggregate(b.select(per_token.expand(b.shape)), self.loss_agg_mode)
        metrics = {
            "clip_ratio/low_mean": row_or_token_mean(b, low),
            "clip_ratio/high_mean": row_or_token_mean(b, high),
            "clip_ratio/region_mean": row_or_token_mean(b, low | high),
            "pg_loss": loss.detach(),
        }
        return loss, metrics
