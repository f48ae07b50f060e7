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
from typing import ClassVar

import torch

from ..components import MEAN, SHARE, Argument
from .base import PolicyLoss, loss_agg_mode_argument, register_policy_loss, resolve_clip_range
from .inputs import Metrics

PAPER_CLIP_RANGE_LOW = 3e-4
PAPER_CLIP_RANGE_HIGH = 4e-4
"""The GSPO paper's ε (v2, §5.1), used where no clip value is given (the reference's `default_args()`)."""


@register_policy_loss("gspo")
class GSPOPolicyLoss(PolicyLoss):
    """GSPO-token. Metrics: `pg_clipfrac`, `ppo_kl` (token mean of −(lp − old)), `ppo_kl_seq`
    (mean over rows of −s), `pg_loss`.

    ε as in the reference constructor: a bound not given (or None) falls back to the symmetric `clip_range`
    (`clip_range=0.2` clips both sides at 0.2), and to the paper's 3e-4 / 4e-4 when that is None too (the specs'
    defaults: `default_args()` reports these, as the reference's does). Passing `clip_range` while both bounds
    are set is an error rather than a silently ignored value. An instance holds the resolved bounds.

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages` and the window counts. NaN / ±inf
    in `logprob`, `old_logprob` or `advantages` at a valid position make the loss NaN; at masked positions they
    are ignored.
    """

    arguments = (
        Argument("clip_range", None, "Symmetric clip ε (exclusive with `clip_range_low`/`_high`).", type=float, ge=0),
        Argument(
            "clip_range_low",
            PAPER_CLIP_RANGE_LOW,
            "Lower clip of the sequence ratio; GSPO paper (v2) §5.1 uses 3e-4. Left unset, `clip_range` (if set) "
            "applies to both sides, as in the reference.",
            optional=True,
            ge=0,
            config_when_set=True,
        ),
        Argument(
            "clip_range_high",
            PAPER_CLIP_RANGE_HIGH,
            "Upper clip of the sequence ratio; GSPO paper (v2) §5.1 uses 4e-4. Left unset, `clip_range` (if set) "
            "applies to both sides, as in the reference.",
            optional=True,
            ge=0,
            config_when_set=True,
        ),
        loss_agg_mode_argument("seq-mean-token-mean"),
    )
    metrics: ClassVar[dict[str, str]] = {"pg_clipfrac": MEAN, "ppo_kl": MEAN, "ppo_kl_seq": MEAN, "pg_loss": SHARE}

    def check_arguments(self) -> None:
        low, high = (
            getattr(self, name) if name in self.given else None for name in ("clip_range_low", "clip_range_high")
        )
        if self.clip_range is not None and low is not None and high is not None:
            raise ValueError(
                f"gspo: clip_range={self.clip_range!r} would be ignored because clip_range_low and clip_range_high "
                "are both set; set either clip_range (both sides) or clip_range_low and clip_range_high"
            )
        if self.clip_range is None:  # the paper's ε for the bounds not given
            low = PAPER_CLIP_RANGE_LOW if low is None else low
            high = PAPER_CLIP_RANGE_HIGH if high is None else high
        self.clip_range_low, self.clip_range_high = resolve_clip_range(self.name, self.clip_range, low, high)
        if self.loss_agg_mode != "seq-mean-token-mean":
            warnings.warn(
                f"gspo: loss_agg_mode={self.loss_agg_mode!r}; the GSPO objective is 'seq-mean-token-mean'",
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
