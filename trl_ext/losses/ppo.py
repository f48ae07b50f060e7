"""PPO clipped surrogate with dual clip and optional sequence masking (Trinity-RFT `ppo`, verl `vanilla`).

Papers: Schulman et al. 2017, "Proximal Policy Optimization Algorithms" (arXiv 1707.06347); dual clip:
Ye et al. 2020 (AAAI), "Mastering Complex Control in MOBA Games with Deep RL" (arXiv 1912.09729); sequence
masking: DeepSeek-AI 2025, DeepSeek-V3.2 (off-policy sequence masking).

Per token, with Δ = clamp(lp − old, ±20) and r = e^Δ:

    L1 = −A·r,   L2 = −A·clamp(r, 1 − ε_low, 1 + ε_high),   C = max(L1, L2),   L3 = −A·c
    L  = min(L3, C) where A < 0, else C
       = −A·clamp(r, 1 − ε_low, c) where A < 0, else −A·min(r, 1 + ε_high)      (computed this way)

`clip_ratio_c=None` drops the dual clip (c = ∞): TRL's PPO clip, the default of asynchronous GRPO.

`fallback_to_policy_gradient` uses Δ = lp − sg(lp) (r ≡ 1 with the policy-gradient gradient) and
ignores `old_logprob`. `enable_sequence_masking` zeroes the A < 0 tokens of rows whose mean of −Δ over
the mask exceeds δ (`delta_sequence_masking`): off-policy rows may not push probability down.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from ..components import MEAN, Argument
from .base import (
    PPO_METRICS,
    ClippedRatioLoss,
    loss_agg_mode_argument,
    register_policy_loss,
)
from .inputs import Metrics

SEQUENCE_MASKING_METRICS = {"seq_mask/masked_tokens": MEAN, "seq_mask/mean_sequence_kl": MEAN}
"""The metrics PPO adds with `enable_sequence_masking`."""


@register_policy_loss("ppo")
class PPOPolicyLoss(ClippedRatioLoss):
    """Dual-clip PPO. Metrics: `pg_clipfrac`, `pg_clipfrac_lower`, `ppo_kl`, `pg_loss` and, with
    sequence masking, `seq_mask/masked_tokens` and `seq_mask/mean_sequence_kl`.

    `clip_range_low` / `clip_range_high` fall back to the symmetric `clip_range`; an instance holds the resolved
    bounds.

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages` and the window counts. NaN / ±inf
    in `logprob`, `old_logprob` or `advantages` (`old_logprob` only where read: not with
    `fallback_to_policy_gradient`) at a valid position make the loss NaN, also where the ±20 log-ratio clamp
    would make it finite; at masked positions they are ignored.
    """

    arguments = (
        Argument(
            "clip_range",
            0.2,
            "PPO clip ε, used for both sides unless `clip_range_low`/`_high` are set.",
            optional=True,
            ge=0,
        ),
        Argument(
            "clip_range_low",
            None,
            "Lower clip ε_low: the ratio is clipped at 1 − ε_low. Defaults to `clip_range`.",
            type=float,
            ge=0,
        ),
        Argument(
            "clip_range_high",
            None,
            "Upper clip ε_high: the ratio is clipped at 1 + ε_high (DAPO recommends 0.28). Defaults to `clip_range`.",
            type=float,
            ge=0,
        ),
        Argument(
            "clip_ratio_c",
            3.0,
            "Dual-clip constant c > 1 (Ye et al. 2020, arXiv 1912.09729): for negative advantages the loss is "
            "bounded by −A·c, so a very large ratio cannot blow up the update. None: no dual clip (c = ∞, TRL's "
            "PPO clip).",
            type=float,
            optional=True,
            gt=1,
        ),
        loss_agg_mode_argument("token-mean"),
        Argument(
            "enable_sequence_masking",
            False,
            "Drop the negative-advantage tokens of sequences whose mean log-ratio log(π_old/π) exceeds "
            "`delta_sequence_masking` (off-policy sequence masking, DeepSeek-V3.2).",
        ),
        Argument("delta_sequence_masking", 0.1, "Threshold δ of `enable_sequence_masking`."),
        Argument(
            "fallback_to_policy_gradient",
            False,
            "Use the on-policy ratio exp(lp − sg(lp)) ≡ 1 (plain policy gradient) instead of π/π_old.",
        ),
    )
    metrics: ClassVar[dict[str, str]] = {**PPO_METRICS, **SEQUENCE_MASKING_METRICS}

    def __call__(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor | None,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        adv = b.advantages(advantages)
        if self.fallback_to_policy_gradient:
            lp = b.select(logprob)
            delta = lp - lp.detach()
        else:
            delta = b.select(logprob - b.check("old_logprob", old_logprob)).clamp(-20.0, 20.0)
        ratio = torch.exp(delta)
        # Dual-clip PPO in one clamp: for A ≥ 0, max(−A·r, −A·clip(r)) = −A·min(r, 1 + ε_high); for A < 0,
        # min(−A·c, max(−A·r, −A·clip(r))) = −A·clamp(r, 1 − ε_low, c).
        negative = adv < 0
        low = b.bound(ratio, negative, 1.0 - self.clip_range_low, -math.inf)
        c = math.inf if self.clip_ratio_c is None else self.clip_ratio_c
        high = b.bound(ratio, negative, c, 1.0 + self.clip_range_high)
        pg_losses = b.select(-adv * ratio.clamp(low, high))

        metrics: Metrics = {}
        if self.enable_sequence_masking:
            with torch.no_grad():
                seq_kl = -b.row_mean(delta.detach())
                masked_rows = (seq_kl > self.delta_sequence_masking).unsqueeze(-1)
                # The reference counts the A < 0 positions of masked rows over the whole row, padding
                # included (a per-sequence advantage is negative at padding too).
                raw_negative = b.broadcast_rows(advantages, "advantages") < 0
                metrics["seq_mask/masked_tokens"] = b.mean(masked_rows & raw_negative)
                metrics["seq_mask/mean_sequence_kl"] = b.mean_over_rows(seq_kl)
            pg_losses = torch.where(masked_rows & negative, 0.0, pg_losses)

        loss = b.aggregate(pg_losses, self.loss_agg_mode)
        with torch.no_grad():
            # L2 > L1 (the ε clip is active) and C > L3 (the dual clip is active); r = 1 at masked positions.
            r = ratio.detach()
            clipped = torch.where(negative, r < 1.0 - self.clip_range_low, r > 1.0 + self.clip_range_high)
            metrics["pg_clipfrac"] = b.mean(clipped & (adv != 0))
            metrics["pg_clipfrac_lower"] = b.mean((r > c) & negative)
            metrics["ppo_kl"] = -b.mean(delta.detach())
            metrics["pg_loss"] = loss.detach()
        return loss, metrics
