"""DPPO: Divergence Proximal Policy Optimization, binary approximations (verl `dppo_tv`, `dppo_kl`).

Paper: Qi et al. 2026, "Rethinking the Trust Region in LLM Reinforcement Learning" (arXiv 2602.04879). PPO's
ratio clip over-penalizes low-probability tokens and under-constrains high-probability ones; DPPO instead masks the
tokens whose update left a trust region measured by a divergence between the old and the new policy, here its
"binary" approximation over {sampled token, everything else}: with p = e^lp, p_old = e^old,

    TV (`dppo_tv`):   D = p − p_old                              kept where D ≤ δ_high (A > 0) / D ≥ −δ_low (A ≤ 0)
    KL (`dppo_kl`):   D = p_old·(old − lp) + (1 − p_old)·log((1 − p_old + 1e-8) / (1 − p + 1e-8))
                      kept where D ≤ δ_high or p ≤ p_old (A > 0) / D ≤ δ_low or p ≥ p_old (A ≤ 0)

The region bounds only moves in the advantage's direction (the sign tests above): a token whose probability already
went too far the way its advantage pushes gets no gradient (M = 0); every other token gets a REINFORCE gradient
weighted by the truncated importance ratio (TIS, no dual clip):

    r = exp(clamp(lp − old, ±20)),   M = sg([kept]),   L = −A · sg(min(r, c)) · M · lp

δ_low / δ_high are verl's `clip_ratio_low` / `clip_ratio_high` reused as *divergence thresholds* (here
`clip_range_low` / `clip_range_high`, falling back to `clip_range`), and c > 1 is `clip_ratio_c` (a c ≤ 1 would
truncate every ratio above 1, not the outliers: refused, as PPO's dual-clip c ≤ 1). A per-token
`importance_sampling_ratio` (a rollout correction, `[B, T]` or `[B, 1]`) multiplies L, as verl's
`rollout_is_weights`.

Metrics (verl's): `pg_clipfrac` = share of valid tokens outside the region (1 − M), `pg_clipfrac_lower` = share with
r > c inside the region (the truncated ones), `ppo_kl` = token mean of −clamp(lp − old, ±20); `pg_loss`.
"""

from __future__ import annotations

import torch

from ..components import Argument
from .base import (
    ClippedRatioLoss,
    loss_agg_mode_argument,
    register_policy_loss,
)
from .inputs import Metrics

BINARY_KL_EPS = 1e-8
"""The ε inside the log of the binary KL (verl's)."""


def _dppo_arguments(divergence: str) -> tuple[Argument, ...]:
    threshold = f"{divergence} divergence threshold δ"
    return (
        Argument(
            "clip_range",
            0.2,
            f"The {threshold} (not a ratio bound: verl's `clip_ratio` reused), for both sides unless "
            "`clip_range_low`/`_high` are set.",
            optional=True,
            ge=0,
        ),
        Argument(
            "clip_range_low",
            None,
            f"The {threshold}_low for A ≤ 0 (verl's `clip_ratio_low`). Defaults to `clip_range`.",
            type=float,
            ge=0,
        ),
        Argument(
            "clip_range_high",
            None,
            f"The {threshold}_high for A > 0 (verl's `clip_ratio_high`). Defaults to `clip_range`.",
            type=float,
            ge=0,
        ),
        Argument(
            "clip_ratio_c",
            3.0,
            "Truncation c > 1 of the importance ratio (TIS: sg(min(r, c)) weights the gradient; no dual clip). It "
            "caps the outlying large ratios; a c <= 1 would cap every ratio above 1 (and below 1 the on-policy r = 1 "
            "too), so it is refused, as PPO's dual-clip c. 3.0 is verl's ActorConfig value (verl's loss falls back "
            "to 20.0 when its config has no `clip_ratio_c`; the paper recommends a large c, §5.4).",
            gt=1,
        ),
        loss_agg_mode_argument("token-mean"),
    )


class _DPPOPolicyLoss(ClippedRatioLoss):
    """The DPPO losses: the trust-region test (`kept`) is the subclass's."""

    def kept(self, lp: torch.Tensor, old: torch.Tensor, positive: torch.Tensor) -> torch.Tensor:
        """Bool `[B, T]`: the tokens inside the trust region (`positive`: A > 0)."""
        raise NotImplementedError

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
        adv = b.advantages(advantages)
        weights = b.token_weights(importance_sampling_ratio)
        lp = b.select(logprob)
        with torch.no_grad():
            old = b.select(b.check("old_logprob", old_logprob))
            delta = (lp - old).clamp(-20.0, 20.0)
            ratio = torch.exp(delta)
            kept = self.kept(lp, old, adv > 0)
            coef = torch.where(kept, -adv * ratio.clamp(max=self.clip_ratio_c), 0.0)
        per_token = coef * lp
        if weights is not None:
            per_token = per_token * weights
        loss = b.aggregate(b.select(per_token), self.loss_agg_mode)
        with torch.no_grad():
            metrics = {
                "pg_clipfrac": b.valid_mean(~kept),
                "pg_clipfrac_lower": b.valid_mean(kept & (ratio > self.clip_ratio_c)),
                "ppo_kl": -b.mean(delta),
                "pg_loss": loss.detach(),
            }
        return loss, metrics


@register_policy_loss("dppo_tv")
class DPPOTVPolicyLoss(_DPPOPolicyLoss):
    """DPPO-Binary-TV (see the module docstring): a token leaves the trust region when p − p_old > δ_high (A > 0) or
    p − p_old < −δ_low (A ≤ 0). Metrics: `pg_clipfrac`, `pg_clipfrac_lower`, `ppo_kl`, `pg_loss`.

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages`, `importance_sampling_ratio`
    (optional, multiplies the per-token loss) and the window counts. NaN / ±inf in any of them at a valid position
    make the loss NaN; at masked positions they are ignored.
    """

    arguments = _dppo_arguments("TV")

    def kept(self, lp: torch.Tensor, old: torch.Tensor, positive: torch.Tensor) -> torch.Tensor:
        step = torch.exp(lp) - torch.exp(old)
        return torch.where(positive, step <= self.clip_range_high, step >= -self.clip_range_low)


@register_policy_loss("dppo_kl")
class DPPOKLPolicyLoss(_DPPOPolicyLoss):
    """DPPO-Binary-KL (see the module docstring): a token leaves the trust region when the binary KL exceeds δ_high
    while p grows (A > 0), or exceeds δ_low while p shrinks (A ≤ 0). Metrics: `pg_clipfrac`, `pg_clipfrac_lower`,
    `ppo_kl`, `pg_loss`.

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages`, `importance_sampling_ratio`
    (optional, multiplies the per-token loss) and the window counts. NaN / ±inf in any of them at a valid position
    make the loss NaN; at masked positions they are ignored.
    """

    arguments = _dppo_arguments("binary KL")

    def kept(self, lp: torch.Tensor, old: torch.Tensor, positive: torch.Tensor) -> torch.Tensor:
        prob, old_prob = torch.exp(lp), torch.exp(old)
        rest = torch.log((1.0 - old_prob + BINARY_KL_EPS) / (1.0 - prob + BINARY_KL_EPS))
        binary_kl = old_prob * (old - lp) + (1.0 - old_prob) * rest
        return torch.where(
            positive,
            (binary_kl <= self.clip_range_high) | (prob <= old_prob),
            (binary_kl <= self.clip_range_low) | (prob >= old_prob),
        )
