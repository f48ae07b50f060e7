"""GSPO: Group Sequence Policy Optimization, token form (Trinity-RFT `gspo`).

Paper: Zheng et al. 2025, "Group Sequence Policy Optimization" (Qwen, arXiv 2507.18071). The sequence
ratio is the length-normalized likelihood ratio s_i = exp(mean_t (lp − old)); GSPO-token keeps its
value on every token while routing the gradient through the token's own log-prob, so per-token
advantages work:

    s        = per-row mean over the mask of (lp − old)
    log r_t  = lp_t − sg(lp_t) + sg(s)
    L        = max(−A·r, −A·clamp(r, 1 − ε_low, 1 + ε_high))        (no dual clip)

The paper's ε are tiny (3e-4 / 4e-4) because they bound a *sequence* ratio, and its objective is the
mean over sequences of token means (`seq-mean-token-mean`); other modes are allowed with a warning.
"""

from __future__ import annotations

import math
import warnings

import torch

from .base import (
    Metrics,
    PolicyLoss,
    check_loss_agg_mode,
    register_policy_loss,
    resolve_clip_range,
)

PAPER_CLIP_RANGE_LOW = 3e-4
PAPER_CLIP_RANGE_HIGH = 4e-4
"""The GSPO paper's ε (v2, §5.1), used where no clip value is given (the reference's `default_args()`)."""


@register_policy_loss("gspo")
class GSPOPolicyLoss(PolicyLoss):
    """GSPO-token. Metrics: `pg_clipfrac`, `ppo_kl` (token mean of −(lp − old)), `ppo_kl_seq`
    (mean over rows of −s), `pg_loss`.

    ε as in the reference constructor: `clip_range_low` / `clip_range_high` fall back to the symmetric
    `clip_range` (`clip_range=0.2` clips both sides at 0.2), and to the paper's 3e-4 / 4e-4 when that is None
    too (`default_args()` reports these, as the reference's does). Passing `clip_range` while both bounds are
    set is an error rather than a silently ignored value.

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages` and the window counts. NaN / ±inf
    in `logprob`, `old_logprob` or `advantages` at a valid position make the loss NaN; at masked positions they
    are ignored.
    """

    window_shares = ("pg_loss",)

    def __init__(
        self,
        backend: str = "verl",
        clip_range: float | None = None,
        clip_range_low: float | None = None,
        clip_range_high: float | None = None,
        loss_agg_mode: str = "seq-mean-token-mean",
    ) -> None:
        super().__init__(backend)
        if clip_range is not None and clip_range_low is not None and clip_range_high is not None:
            raise ValueError(
                f"gspo: clip_range={clip_range!r} would be ignored because clip_range_low and clip_range_high "
                "are both set; set either clip_range (both sides) or clip_range_low and clip_range_high"
            )
        self.clip_range = clip_range
        if clip_range is None:  # the paper's ε for the bounds not given
            clip_range_low = PAPER_CLIP_RANGE_LOW if clip_range_low is None else clip_range_low
            clip_range_high = PAPER_CLIP_RANGE_HIGH if clip_range_high is None else clip_range_high
        self.clip_range_low, self.clip_range_high = resolve_clip_range(
            self.name, clip_range, clip_range_low, clip_range_high
        )
        check_loss_agg_mode(self.name, loss_agg_mode)
        if loss_agg_mode != "seq-mean-token-mean":
            warnings.warn(
                f"gspo: loss_agg_mode={loss_agg_mode!r}; the GSPO objective is 'seq-mean-token-mean'",
                stacklevel=2,
            )
        self.loss_agg_mode = loss_agg_mode

    @classmethod
    def default_args(cls) -> dict:
        # The signature's None bounds resolve to the paper's ε; report those, as the reference's default_args().
        return {
            **super().default_args(),
            "clip_range_low": PAPER_CLIP_RANGE_LOW,
            "clip_range_high": PAPER_CLIP_RANGE_HIGH,
        }

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
        lp = b.select(logprob)
        delta = b.select(logprob.detach() - b.check("old_logprob", old_logprob))
        seq_log_ratio = b.row_mean(delta)
        ratio = torch.exp(lp - lp.detach() + seq_log_ratio.unsqueeze(-1))
        # max(−A·r, −A·clip(r)) = −A·min(r, 1 + ε_high) for A ≥ 0 and −A·max(r, 1 − ε_low) for A < 0.
        negative = adv < 0
        low = b.bound(ratio, negative, 1.0 - self.clip_range_low, -math.inf)
        high = b.bound(ratio, negative, math.inf, 1.0 + self.clip_range_high)
        loss = b.aggregate(b.select(-adv * ratio.clamp(low, high)), self.loss_agg_mode)
        with torch.no_grad():
            r = ratio.detach()
            clipped = torch.where(negative, r < 1.0 - self.clip_range_low, r > 1.0 + self.clip_range_high)
            metrics = {
                "pg_clipfrac": b.valid_mean(clipped & (adv != 0)),
                "ppo_kl": -b.mean(delta),
                "ppo_kl_seq": -b.mean_over_rows(seq_log_ratio),
                "pg_loss": loss.detach(),
            }
        return loss, metrics
