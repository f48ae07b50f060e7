"""PPO's clipped value-function loss (verl `compute_value_loss`, the critic loss of Trinity-RFT's `ppo`).

Paper: Schulman et al. 2017, "Proximal Policy Optimization Algorithms" (arXiv 1707.06347); the value clipping is
OpenAI baselines' PPO2, as in TRL's old PPO trainer, which verl's function copies.  Per token, with V the critic's
new values (`vpreds`), V_old the values the returns were computed with (`values`), R the returns (GAE's A + V_old)
and c = `cliprange_value`::

    L1 = (V − R)²,   L2 = (clip(V, V_old − c, V_old + c) − R)²,   L = max(L1, L2)
    loss = 0.5 · agg(L)

with agg = `aggregate_loss` over `response_mask` (any `loss_agg_mode`, and the optimizer-window counts
`global_valid_toks` / `global_valid_seqs` / `normalizer`, so that micro-batch losses add up to the window's).
Metrics, verl's definitions (detached 0-dim tensors, no host sync): `vf_loss` (the returned loss),
`vf_clipfrac` = Σ m·[L2 > L1] / (Σ m + 1e-8) (the clipped term strictly larger) and `vpred_mean` = Σ m·V /
(Σ m + 1e-8).  The per-token loss and the clip flags are `clipped_value_terms`.

`explained_variance(values, returns, mask)` is verl's `critic/vf_explained_var` metric.

Inputs follow the loss rules of `trl_ext.losses.inputs`: `[B, T]` floating-point tensors, a bool or 0/1 mask,
masked positions selected away before any arithmetic (NaN / inf there reach neither the loss nor the gradient),
NaN / inf at a valid position make the loss NaN, an empty batch gives 0.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch

from ..components import MEAN, SHARE
from .aggregation import check_loss_agg_mode
from .inputs import WINDOW_INPUTS, Metrics, bool_mask, check_inputs
from .masked_batch import MaskedBatch

OWNER = "clipped_value_loss"

VALUE_LOSS_METRICS = {"vf_loss": SHARE, "vf_clipfrac": MEAN, "vpred_mean": MEAN}
"""The metrics of `clipped_value_loss`: `vf_loss` is the micro-batch's share of the window's loss when called with
the window's counts (a trainer sums it over the window), the others are means over the micro-batch's valid tokens."""


def check_cliprange_value(owner: str, cliprange_value: Any) -> float:
    """`cliprange_value` must be a finite number >= 0 (a 0-dim real tensor is read as its value)."""
    value = cliprange_value
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.dtype.is_complex:
        value = value.item()
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    if not ok:
        raise ValueError(f"{owner}: cliprange_value={cliprange_value!r} is not valid; must be a finite number >= 0")
    return float(value)


def clipped_value_terms(
    vpreds: torch.Tensor, values: torch.Tensor, returns: torch.Tensor, cliprange_value: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(max(L1, L2), L2 > L1)` per token (see the module docstring), computed with verl's operations (its
    `clip_by_value` is `max(min(V, V_old + c), V_old − c)`); no masking, no checks."""
    vpredclipped = torch.max(torch.min(vpreds, values + cliprange_value), values - cliprange_value)
    losses1 = (vpreds - returns) ** 2
    losses2 = (vpredclipped - returns) ** 2
    return torch.max(losses1, losses2), losses2 > losses1


def clipped_value_loss(
    vpreds: torch.Tensor,
    values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    **window: Any,
) -> tuple[torch.Tensor, Metrics]:
    """PPO's clipped value loss 0.5·agg(max((V − R)², (clip(V, V_old ± c) − R)²)) and its metrics.

    Args:
        vpreds: `[B, T]` the critic's values now (with gradient).
        values: `[B, T]` the critic's values when the batch was generated (V_old, the returns' baseline).
        returns: `[B, T]` the value targets (`AdvantageResult.returns` of `ppo`).
        response_mask: `[B, T]` bool or 0/1, the tokens that count.
        cliprange_value: c >= 0 (verl's `critic.cliprange_value`, Trinity-RFT's default 0.5); a negative value is a
            ValueError.
        loss_agg_mode: one of `trl_ext.losses.LOSS_AGG_MODES` (verl's default `token-mean`).
        **window: the optimizer window's counts `global_valid_toks`, `global_valid_seqs`, `normalizer` (see
            `aggregate_loss`); any other keyword is a ValueError.

    Returns `(loss, {"vf_loss", "vf_clipfrac", "vpred_mean"})`.
    """
    check_inputs(OWNER, WINDOW_INPUTS, window, ignored=())
    check_loss_agg_mode(OWNER, loss_agg_mode)
    c = check_cliprange_value(OWNER, cliprange_value)
    batch = MaskedBatch(OWNER, vpreds, response_mask, value_name="vpreds", mask_name="response_mask", **window)
    v = batch.select(vpreds, "vpreds")
    v_old = batch.select(batch.check("values", values), "values")
    ret = batch.select(batch.check("returns", returns), "returns")
    per_token, clipped = clipped_value_terms(v, v_old, ret, c)
    loss = 0.5 * batch.aggregate(torch.where(batch.mask, per_token, 0), loss_agg_mode)
    with torch.no_grad():
        metrics = {
            "vf_loss": loss.detach(),
            "vf_clipfrac": batch.mean(clipped & batch.mask),
            "vpred_mean": batch.mean(v.detach()),
        }
    return loss, metrics


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's `critic/vf_explained_var`: 1 − Var(R − V) / (Var(R) + 1e-5) over the valid tokens of `mask`, both
    variances unbiased (`torch.var`); NaN with fewer than two valid tokens (verl: NaN without a valid token, and
    `torch.var` of one element).  A 0-dim tensor (detached) in the values' dtype (at least float32)."""
    owner = "explained_variance"
    if not isinstance(values, torch.Tensor) or not isinstance(returns, torch.Tensor):
        raise ValueError(f"{owner}: values and returns must be tensors")
    if values.shape != returns.shape or values.shape != getattr(mask, "shape", None):
        raise ValueError(
            f"{owner}: values {tuple(values.shape)}, returns {tuple(returns.shape)} and mask "
            f"{tuple(getattr(mask, 'shape', ()))} must have one shape"
        )
    m = bool_mask(owner, "mask", mask)
    dtype = torch.promote_types(torch.promote_types(values.dtype, returns.dtype), torch.float32)
    r = returns.detach().to(dtype)[m]
    v = values.detach().to(dtype)[m]
    n = r.numel()
    if n < 2:
        return torch.full((), float("nan"), dtype=dtype, device=r.device)

    def var(x: torch.Tensor) -> torch.Tensor:
        return ((x - x.mean()) ** 2).sum() / (n - 1)

    return 1.0 - var(r - v) / (var(r) + 1e-5)


__all__ = [
    "VALUE_LOSS_METRICS",
    "check_cliprange_value",
    "clipped_value_loss",
    "clipped_value_terms",
    "explained_variance",
]
