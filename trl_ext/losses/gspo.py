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
    MaskedBatch,
    Metrics,
    PolicyLoss,
    check_loss_agg_mode,
    register_policy_loss,
    resolve_clip_range,
)


@register_policy_loss("gspo")
class GSPOPolicyLoss(PolicyLoss):
    """GSPO-token. Metrics: `pg_clipfrac`, `ppo_kl` (token mean of −(lp − old)), `ppo_kl_seq`
    (mean over rows of −s), `pg_loss`.

    `clip_range` (symmetric) only applies where `clip_range_low` / `clip_range_high` is None: passing
    it while both are set is an error rather than a silently ignored value.
    """

    def __init__(
        self,
        backend: str = "verl",
        clip_range: float | None = None,
        clip_range_low: float | None = 3e-4,
        clip_range_high: float | None = 4e-4,
        loss_agg_mode: str = "seq-mean-token-mean",
    ) -> None:
        super().__init__(backend)
        if clip_range is not None and clip_range_low is not None and clip_range_high is not None:
            raise ValueError(
                f"gspo: clip_range={clip_range!r} would be ignored because clip_range_low and clip_range_high "
                "are set (defaults 3e-4 / 4e-4); set clip_range_low and clip_range_high instead"
            )
        self.clip_range = clip_range
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

    def __call__(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        b = MaskedBatch(self.name, logprob, action_mask, **kwargs)
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
                "ppo_kl_seq": -seq_log_ratio.mean(),
                "pg_loss": loss.detach(),
            }
        return loss, metrics
