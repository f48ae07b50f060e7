"""Decoupled PPO (AReaL): the PPO clip around a *proximal* policy, reweighted from the *behaviour* policy.

Paper: Fu et al. 2025, "AReaL: A Large-Scale Asynchronous Reinforcement Learning System for Language Reasoning"
(arXiv 2505.24298), §5 (the decoupled PPO objective). In asynchronous RL the tokens come from a sampler μ (the
*behaviour* policy) that can be several versions behind the trainer. Decoupled PPO separates the policy that *sampled*
the tokens from the one that anchors the trust region, the *proximal* policy π_prox (the weights at the start of the
optimizer step), and corrects the difference with an importance weight. Per valid token, with sg = stop-gradient:

    Δ = clamp(lp − sg(log π_prox), ±20),   r = e^Δ                        (the PPO ratio π_θ / π_prox)
    C = max(−A·r, −A·clamp(r, 1 − ε_low, 1 + ε_high)),   with dual clip c: min(C, −A·c) where A < 0
      = −A·clamp(r, 1 − ε_low, c) where A < 0, else −A·min(r, 1 + ε_high)   (c = +inf without dual clip)
    w = sg(exp(log π_prox − log μ))                                          (the behaviour weight π_prox / μ)
    w ← 0 where w > cap   ("mask", AReaL's default)    or    w ← min(w, cap)   ("truncate", TIS-style);  no cap: w
    L = agg(w · C)   over all valid tokens: a masked token counts in the denominator (AReaL divides by the number
                     of valid tokens before its cap)

With π_prox = μ (w = 1) this is trl_ext's `ppo` loss (same clip, same dual clip).

Where π_prox comes from: `prox_logprob` when given. When it is None, the loss uses sg(`logprob`): exactly the proximal
policy when the optimizer step's weights are the ones that computed `logprob`, i.e. a trainer that makes *one*
optimizer step per batch (then r ≡ 1 with the policy-gradient gradient, and w = π_θ/μ at the step's start). A trainer
that makes several optimizer steps on one batch must pass the log-probabilities recomputed at the start of each step
(AReaL's `recompute`), or their approximation `loglinear_proximal_logprob` (AReaL's `prox_logp_method="loglinear"`,
docs/en/algorithms/prox_approx.md): with v the policy versions (μ = v_behave, π_prox = v_prox, π_θ = v_θ),

    α = (v_prox − v_behave) / (v_θ − v_behave)   where v_θ > v_behave and v_behave ≥ 0, else 0;   α ← clamp(α, 0, 1)
    log π_prox ≈ log μ + α · (log π_θ − log μ)                       (detached)

Ported from inclusionAI/AReaL's `ppo_actor_loss_fn` and `compute_behave_imp_weight` (`behave_imp_weight_cap` /
`_mode`; today's `RejectionSamplingConfig` `{level: token, action: mask | clamp, metric: ratio, upper: X}`, the same
arithmetic) and `compute_prox_logp_approximations`; defaults as AReaL's: eps_clip 0.2, eps_clip_higher None, c_clip
None, cap 5.0 (> 1), mode `token_mask`. AReaL's names map to trl_ext's as eps_clip → `clip_range`
(`clip_range_low`), eps_clip_higher → `clip_range_high`, c_clip → `clip_ratio_c`, `proximal_logprobs` →
`prox_logprob`, `old_logprobs` → `old_logprob`.

What differs: the log-ratio Δ is clamped to ±20 as in trl_ext's `ppo` (AReaL exponentiates it as is; beyond +20 the clip
already zeroes the gradient, below −20 r < 3e-9); every `loss_agg_mode` is offered (AReaL: token-mean over the batch),
each counting the tokens masked by the cap as valid; NaN / ±inf at a valid position make the loss NaN (AReaL today
replaces a non-finite log π_prox − log μ by 0); AReaL's sequence-level variants (GSPO ratio, `sequence_mask` /
`_truncate`) and today's KL metrics / lower bound are not ported; `loglinear_proximal_logprob` takes v_prox explicitly
(AReaL fixes v_prox = v_θ − 1) and per-row versions (AReaL's are per token: both shapes are accepted).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, ClassVar

import torch

from ..components import MEAN, Argument
from .aggregation import EPS
from .base import (
    PPO_METRICS,
    ClippedRatioLoss,
    loss_agg_mode_argument,
    register_policy_loss,
)
from .inputs import Metrics, check_float, shape_of

BEHAVE_IMP_WEIGHT_MODES = ("mask", "truncate")
"""How `behave_imp_weight_cap` bounds the behaviour weight: `mask` (AReaL's `token_mask`: w ← 0 where w > cap) or
`truncate` (AReaL's `token_truncate`, TIS-style: w ← min(w, cap))."""

DECOUPLED_METRICS = {
    "decoupled/behave_weight_mean": MEAN,
    "decoupled/behave_weight_max": MEAN,
    "decoupled/behave_masked_fraction": MEAN,
    "decoupled/behave_approx_kl": MEAN,
}
"""The behaviour weight's statistics. `behave_weight_mean` / `behave_approx_kl` are AReaL's `behave_imp_weight` /
`behave_approx_kl` (means of the applied w and of log π_prox − log μ over the tokens whose applied w is > 0);
`behave_weight_max` is the largest w before the cap over the valid tokens of the micro-batch (declared MEAN, as every
policy loss's non-loss metric: a trainer averages it over the window's micro-batches); `behave_masked_fraction` the
share of the valid tokens whose w exceeds the cap (masked, or truncated: AReaL's `rs_filtered_fraction`)."""


@register_policy_loss("decoupled_ppo")
class DecoupledPPOPolicyLoss(ClippedRatioLoss):
    """AReaL's decoupled PPO. Metrics: `pg_clipfrac`, `pg_clipfrac_lower`, `ppo_kl` (as `ppo`'s, with the ratio taken
    against π_prox), `pg_loss`, and `decoupled/behave_weight_mean`, `decoupled/behave_weight_max`,
    `decoupled/behave_masked_fraction`, `decoupled/behave_approx_kl` (`DECOUPLED_METRICS`).

    Inputs (`inputs()`): `logprob` (π_θ), `old_logprob` (μ, the sampling policy: its meaning everywhere in trl_ext),
    `action_mask`, `advantages`, `prox_logprob` (π_prox, optional: None uses sg(`logprob`), exact for one optimizer
    step per batch; see the module doc) and the window counts. `old_logprob` and `prox_logprob` are not
    differentiated. NaN / ±inf in `logprob`, `old_logprob`, `prox_logprob` or `advantages` at a valid position make
    the loss NaN; at masked positions they are ignored.
    """

    arguments = (
        Argument(
            "clip_range",
            0.2,
            "PPO clip ε of the ratio π_θ/π_prox (AReaL's eps_clip), used for both sides unless "
            "`clip_range_low`/`_high` are set.",
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
            "Upper clip ε_high (AReaL's eps_clip_higher): the ratio is clipped at 1 + ε_high. Defaults to "
            "`clip_range`.",
            type=float,
            ge=0,
        ),
        Argument(
            "clip_ratio_c",
            None,
            "Dual-clip constant c > 1 (AReaL's c_clip): for negative advantages the loss is bounded by −A·c. None "
            "(AReaL's default) disables the dual clip.",
            type=float,
            gt=1,
        ),
        loss_agg_mode_argument("token-mean"),
        Argument(
            "behave_imp_weight_cap",
            5.0,
            "Cap of the behaviour weight w = π_prox/μ (AReaL's default 5.0; must be > 1): tokens with w > cap are "
            "masked or truncated (`behave_imp_weight_mode`). None: w is applied uncapped.",
            optional=True,
            gt=1,
        ),
        Argument(
            "behave_imp_weight_mode",
            "mask",
            "`mask` (AReaL's token_mask): w ← 0 where w > cap, the token staying in the denominator; `truncate` "
            "(AReaL's token_truncate, TIS-style): w ← min(w, cap).",
            choices=BEHAVE_IMP_WEIGHT_MODES,
        ),
    )
    metrics: ClassVar[dict[str, str]] = {**PPO_METRICS, **DECOUPLED_METRICS}

    def __call__(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        prox_logprob: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        adv = b.advantages(advantages)
        old = b.check("old_logprob", old_logprob)
        if prox_logprob is None:
            prox_input, prox = logprob, logprob.detach()
        else:
            prox_input = b.check("prox_logprob", prox_logprob)
            prox = prox_input.detach()
        delta = b.select(logprob - prox).clamp(-20.0, 20.0)
        ratio = torch.exp(delta)
        with torch.no_grad():
            log_weight = b.select(prox - old.detach())
            raw_weight = torch.exp(log_weight)  # 1 at masked positions
            cap = self.behave_imp_weight_cap
            if cap is None:
                over, weight = torch.zeros_like(b.mask), raw_weight
            elif self.behave_imp_weight_mode == "mask":
                over = raw_weight > cap
                weight = torch.where(over, 0.0, raw_weight)
            else:
                over = raw_weight > cap
                weight = raw_weight.clamp(max=cap)
            applied = b.select(weight)  # the weight each valid token gets, 0 at masked positions

        # Dual-clip PPO in one clamp, as `ppo`: −A·min(r, 1 + ε_high) for A ≥ 0, −A·clamp(r, 1 − ε_low, c) for A < 0.
        c = math.inf if self.clip_ratio_c is None else self.clip_ratio_c
        negative = adv < 0
        low = b.bound(ratio, negative, 1.0 - self.clip_range_low, -math.inf)
        high = b.bound(ratio, negative, c, 1.0 + self.clip_range_high)
        # −A·clamp(r) is finite at masked positions (selected inputs there): weighting it by `applied` selects it.
        loss = b.aggregate(applied * (-adv * ratio.clamp(low, high)), self.loss_agg_mode)

        with torch.no_grad():
            r = ratio.detach()
            clipped = torch.where(negative, r < 1.0 - self.clip_range_low, r > 1.0 + self.clip_range_high)
            kept = applied > 0  # AReaL's behave_mask: valid tokens whose applied weight is > 0
            n_kept = kept.view(torch.uint8).sum(dtype=b.count_dtype)
            metrics: Metrics = {
                "pg_clipfrac": b.mean(clipped & (adv != 0)),
                "pg_clipfrac_lower": b.mean((r > c) & negative),
                "ppo_kl": -b.mean(delta.detach()),
                "pg_loss": loss.detach(),
                "decoupled/behave_weight_mean": applied.sum().to(b.count_dtype) / (n_kept + EPS),
                "decoupled/behave_weight_max": _max_or_zero(b.select(raw_weight)).to(b.count_dtype),
                "decoupled/behave_masked_fraction": b.mean(over),  # False at masked positions: w = 1 there, cap > 1
                "decoupled/behave_approx_kl": torch.where(kept, log_weight, 0).sum().to(b.count_dtype) / (n_kept + EPS),
            }
        return loss, metrics


def _max_or_zero(x: torch.Tensor) -> torch.Tensor:
    """The largest value of `x`, 0 for an empty tensor (no sync: the emptiness is the shape's)."""
    return x.amax() if x.numel() else x.sum()


def loglinear_proximal_logprob(
    behave_logprob: torch.Tensor,
    logprob: torch.Tensor,
    behave_version: torch.Tensor | int,
    proximal_version: torch.Tensor | int,
    current_version: torch.Tensor | int,
) -> torch.Tensor:
    """AReaL's log-linear approximation of the proximal policy's log-probabilities (`prox_logp_method="loglinear"`),
    which saves the forward pass that recomputes them:

        α = (v_prox − v_behave) / (v_θ − v_behave)   where v_θ − v_behave > 0 and v_behave ≥ 0, else 0
        α ← clamp(α, 0, 1)
        log π_prox ≈ log μ + α · (log π_θ − log μ)

    As AReaL (`compute_prox_logp_approximations`): α = 0, i.e. log μ itself, where v_θ ≤ v_behave (v_θ == v_behave
    included: μ is then π_θ's own version) and where v_behave < 0 (AReaL's marker of prompt tokens, which no policy
    version generated). The result is detached. α is computed in at least float32 (AReaL: float32).

    Args:
        behave_logprob: `[B, T]` log μ (the sampler's, `old_logprob` in trl_ext), floating-point.
        logprob: `[B, T]` log π_θ (the policy being trained), floating-point.
        behave_version: The version of the policy that sampled each row: a number, a `[B]` / `[B, 1]` tensor (one
            version per row, broadcast over the tokens) or a `[B, T]` tensor (per token, AReaL's form).
        proximal_version: v_prox, the version of the proximal policy (AReaL: `current_version − 1`): a number or a
            0-dim tensor.
        current_version: v_θ, the version being trained: a number or a 0-dim tensor.

    Returns:
        `[B, T]` approximate log π_prox, detached, in `logprob`'s dtype.

    Raises:
        ValueError: The log-probabilities are not floating-point `[B, T]` tensors of one shape, or a version has a
            shape other than the above.
        TypeError: A version is neither a real number nor a tensor.
    """
    owner = "loglinear_proximal_logprob"
    if not isinstance(logprob, torch.Tensor) or logprob.dim() != 2:
        raise ValueError(f"{owner}: logprob must be a [B, T] tensor, got shape {shape_of(logprob)}")
    check_float(owner, "logprob", logprob)
    if not isinstance(behave_logprob, torch.Tensor) or behave_logprob.shape != logprob.shape:
        raise ValueError(
            f"{owner}: behave_logprob has shape {shape_of(behave_logprob)} but logprob has shape "
            f"{tuple(logprob.shape)}; both must be [B, T]"
        )
    check_float(owner, "behave_logprob", behave_logprob)
    dtype = torch.promote_types(logprob.dtype, torch.float32)
    v_behave = _version(owner, "behave_version", behave_version, logprob, dtype, per_row=True)
    v_prox = _version(owner, "proximal_version", proximal_version, logprob, dtype, per_row=False)
    v_theta = _version(owner, "current_version", current_version, logprob, dtype, per_row=False)
    with torch.no_grad():
        diff = v_theta - v_behave
        alpha = torch.where((diff > 0) & (v_behave >= 0), (v_prox - v_behave) / diff, 0).clamp(0.0, 1.0)
        behave = behave_logprob.detach()
        return (behave + alpha.to(logprob.dtype) * (logprob.detach() - behave)).to(logprob.dtype)


def _version(
    owner: str, name: str, value: Any, like: torch.Tensor, dtype: torch.dtype, *, per_row: bool
) -> torch.Tensor:
    """A policy version as a tensor of `dtype` on `like`'s device that broadcasts against `[B, T]`: a number or a 0-dim
    tensor, and with `per_row` also `[B]` / `[B, 1]` (viewed as `[B, 1]`) or `[B, T]`."""
    rows, cols = like.shape
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool or value.dtype.is_complex:
            raise ValueError(f"{owner}: {name} must hold real numbers, got dtype {value.dtype}")
        if value.dim() == 0:
            return value.to(device=like.device, dtype=dtype)
        if per_row and value.dim() == 1 and value.shape[0] == rows:
            return value.to(device=like.device, dtype=dtype).unsqueeze(-1)
        if per_row and value.dim() == 2 and value.shape[0] == rows and value.shape[1] in (1, cols):
            return value.to(device=like.device, dtype=dtype)
        allowed = (
            f"a number, a 0-dim tensor, [B], [B, 1] or [B, T] with B={rows}, T={cols}"
            if per_row
            else ("a number or a 0-dim tensor")
        )
        raise ValueError(f"{owner}: {name} has shape {tuple(value.shape)}; expected {allowed}")
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return torch.full((), float(value), dtype=dtype, device=like.device)
    raise TypeError(f"{owner}: {name} must be a real number or a tensor, got {type(value).__name__}")
