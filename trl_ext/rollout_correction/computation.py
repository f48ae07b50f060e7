"""The rollout correction's computation on checked `[B, T]` tensors: the importance-sampling weights, the rejection
mask, their metrics and the off-policy diagnostics (the formulas and verl's metric names: `trl_ext.rollout_correction`).
"""

from __future__ import annotations

import math

import torch

from ..losses.inputs import bool_mask, check_float

SAFETY_BOUND = 20.0
"""verl's bound on a log ratio before it is exponentiated (exp(20) ≈ 4.9e8)."""

EPS = 1e-8
"""The ε of verl's `masked_mean`: Σ m·x / (Σ m + ε)."""
Metrics = dict[str, torch.Tensor]


def check_inputs(owner: str, **inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The `[B, T]` floating-point inputs (as at least float32, detached) and the response mask (last, as bool)."""
    *values, (mask_name, mask) = inputs.items()
    shape = None
    checked = []
    for name, x in values:
        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{owner}: {name} must be a [B, T] tensor, got {got}")
        check_float(owner, name, x)
        if shape is not None and tuple(x.shape) != shape:
            raise ValueError(f"{owner}: {name} has shape {tuple(x.shape)} but {values[0][0]} has shape {shape}")
        shape = tuple(x.shape)
        checked.append(x.detach().to(torch.promote_types(x.dtype, torch.float32)))
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != shape:
        got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"{owner}: {mask_name} has shape {got} but {values[0][0]} has shape {shape}")
    return (*checked, bool_mask(owner, mask_name, mask))


def valid_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """ℓ at valid positions, 0 elsewhere; NaN at every valid position when any valid one is NaN or ±inf."""
    selected = torch.where(mask, log_ratio, 0)
    return torch.where(mask, selected + (selected - selected).sum(), 0)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """verl's `masked_mean`: Σ m·x / (Σ m + 1e-8), selecting first (over all, or along `dim`)."""
    x = x.float() if x.dtype == torch.bool else x
    total = torch.where(mask, x, 0).sum() if dim is None else torch.where(mask, x, 0).sum(dim)
    count = mask.sum() if dim is None else mask.sum(dim)
    return total / (count + EPS)


def _unless_nan(flags: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Bool `flags` (comparisons of `values`) as 0/1, NaN where `values` is NaN (compared, it would count as 0)."""
    return torch.where(values.isnan(), values, flags.to(values.dtype))


def _rows_mean(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The mean of a per-row `[B]` value over `rows` (bool `[B]`); 0 when there is none."""
    x = x.float() if x.dtype == torch.bool else x
    return torch.where(rows, x, 0).sum() / rows.sum().clamp(min=1)


def _extreme(x: torch.Tensor, mask: torch.Tensor, largest: bool) -> torch.Tensor:
    """The max (`largest`) or min of `x` over `mask`; 0 when the mask is empty."""
    if x.numel() == 0:
        return x.new_zeros(())
    fill = -math.inf if largest else math.inf
    selected = torch.where(mask, x, fill)
    value = selected.amax() if largest else selected.amin()
    return torch.where(mask.any(), value, 0)


def _rows_std(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The sample standard deviation (n − 1) of a per-row value over `rows`; 0 for fewer than two rows."""
    n = rows.sum()
    centered = torch.where(rows, x - _rows_mean(x, rows), 0)
    return torch.where(n > 1, (centered.square().sum() / (n - 1).clamp(min=1)).sqrt(), 0)


def _token_std(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's clamped token std: sqrt(max(E[x²] − E[x]², 0)) over the mask; 0 for fewer than two tokens."""
    variance = _masked_mean(x.square(), mask) - _masked_mean(x, mask).square()
    return torch.where(mask.sum() > 1, variance.clamp(min=0).sqrt(), 0)


def _row_summary(prefix: str, values: torch.Tensor, rows: torch.Tensor) -> Metrics:
    """`<prefix>seq_mean`, `_seq_std`, `_seq_max`, `_seq_min` of a per-row value over `rows`."""
    return {
        f"{prefix}seq_mean": _rows_mean(values, rows),
        f"{prefix}seq_std": _rows_std(values, rows),
        f"{prefix}seq_max": _extreme(values, rows, largest=True),
        f"{prefix}seq_min": _extreme(values, rows, largest=False),
    }


def importance_weights(
    log_ratio: torch.Tensor, mask: torch.Tensor, level: str, upper: float, lower: float | None, normalize: bool
) -> tuple[torch.Tensor, Metrics]:
    """The `level` ("token" / "sequence") weights from ℓ (`valid_log_ratio`), truncated at `upper` (TIS, `lower`
    None) or zeroed outside [`lower`, `upper`] (IcePop), batch-normalized when `normalize`; detached, with the
    `rollout_is_*` metrics."""
    rows = mask.any(-1)
    if level == "token":
        raw = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    else:
        raw = torch.exp(log_ratio.sum(-1, keepdim=True).clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(log_ratio)
    raw = torch.where(mask, raw, 0)  # NaN at every valid position when a log-prob there is NaN or ±inf
    outside = None if lower is None else (raw < lower) | (raw > upper)  # IcePop's window; NaN is not outside it
    weights = raw.clamp(max=upper) if outside is None else torch.where(outside, 0, raw)  # TIS / IcePop: NaN stays

    low = 1.0 / upper if lower is None else lower
    metrics: Metrics = {"rollout_is_mean": _masked_mean(weights, mask)}
    if level == "sequence":  # from the unclamped log-space sums
        sums, any_row = log_ratio.sum(-1), rows.any()
        largest = torch.exp(_extreme(sums, rows, largest=True).clamp(max=SAFETY_BOUND))
        metrics["rollout_is_max"] = torch.where(any_row, largest, 0)
        metrics["rollout_is_min"] = torch.where(any_row, torch.exp(_extreme(sums, rows, largest=False)), 0)
        metrics["rollout_is_ratio_fraction_high"] = _rows_mean(_unless_nan(sums > math.log(upper), sums), rows)
        metrics["rollout_is_ratio_fraction_low"] = _rows_mean(_unless_nan(sums < math.log(low), sums), rows)
    else:
        metrics["rollout_is_max"] = _extreme(weights, mask, largest=True)
        metrics["rollout_is_min"] = _extreme(weights, mask, largest=False)
        metrics["rollout_is_ratio_fraction_high"] = _masked_mean(_unless_nan(raw > upper, raw), mask)
        metrics["rollout_is_ratio_fraction_low"] = _masked_mean(_unless_nan(raw < low, raw), mask)
    clamped = weights.clamp(0, upper)
    metrics["rollout_is_std"] = _token_std(clamped, mask)
    second_moment = _masked_mean((clamped / (_masked_mean(clamped, mask) + EPS)).square(), mask)
    metrics["rollout_is_eff_sample_size"] = torch.where(second_moment == 0, 0, 1 / second_moment)
    per_row = _masked_mean(weights, mask, dim=-1)
    metrics.update(_row_summary("rollout_is_", per_row, rows))
    metrics["rollout_is_seq_max_deviation"] = _extreme((per_row - 1).abs(), rows, largest=True)
    raw_per_row = _masked_mean(raw, mask, dim=-1)  # before truncation: a truncated mean never exceeds U
    metrics["rollout_is_seq_fraction_high"] = _rows_mean(_unless_nan(raw_per_row > upper, raw_per_row), rows)
    metrics["rollout_is_seq_fraction_low"] = _rows_mean(_unless_nan(raw_per_row < low, raw_per_row), rows)
    if outside is not None:
        metrics["rollout_is_oob_ratio"] = _masked_mean(_unless_nan(outside, raw), mask)

    if normalize:
        mean = _masked_mean(weights, mask) if level == "token" else _rows_mean(per_row, rows)
        scale = ~(mean <= 1e-8)  # a NaN mean divides (the factor is NaN, not 1), at valid positions only
        weights = torch.where(scale & mask, weights / torch.where(scale, mean, 1), weights)
        metrics["rollout_is_batch_norm_factor"] = torch.where(scale, mean, 1)
    return weights.detach(), metrics


def rejection_mask(
    log_ratio: torch.Tensor, mask: torch.Tensor, bounds: dict[str, tuple[float | None, float]]
) -> tuple[torch.Tensor, Metrics]:
    """`mask` with the tokens / rows that fail any criterion of `bounds` (`{criterion: (lower, upper)}`, from
    `parse_rollout_rs_thresholds`) set False, and the `rollout_rs_*` metrics."""
    rows = mask.any(-1)
    safe = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    divergence = {"k1": -safe, "k2": 0.5 * safe.square(), "k3": torch.exp(safe) - 1 - safe}
    passed = torch.ones_like(mask)
    metrics: Metrics = {}
    for option, (lower, upper) in bounds.items():
        token_value = divergence[option[-2:]]
        k1 = lower is not None
        high, low = (math.log(upper), math.log(lower)) if k1 else (upper, 0.0)
        if option.startswith("token_"):
            per_token, per_row = token_value, None
        else:
            how = option.split("_")[1]
            if how == "sum":
                per_row = torch.where(mask, token_value, 0).sum(-1)
            elif how == "mean":
                per_row = _masked_mean(token_value, mask, dim=-1)
            elif mask.size(-1) == 0:
                per_row = token_value.new_zeros(mask.size(0))
            else:
                per_row = torch.where(mask, token_value, -math.inf).amax(-1)
                per_row = torch.where(rows, per_row, 0)
            per_token = per_row.unsqueeze(-1).expand_as(token_value)
        keep = (per_token <= high) & (per_token >= low) if k1 else per_token <= high
        passed = passed & keep
        metrics.update(_rejection_metrics(option, per_token, per_row, mask, rows, high, low, k1))
        metrics[f"rollout_rs_{option}_masked_fraction"] = _masked_mean(~keep, mask)
        metrics[f"rollout_rs_{option}_seq_masked_fraction"] = _rows_mean((mask & ~keep).any(-1), rows)
    metrics["rollout_rs_masked_fraction"] = _masked_mean(~passed, mask)
    metrics["rollout_rs_seq_masked_fraction"] = _rows_mean((mask & ~passed).any(-1), rows)
    return mask & passed, metrics


def _rejection_metrics(
    option: str,
    per_token: torch.Tensor,
    per_row: torch.Tensor | None,
    mask: torch.Tensor,
    rows: torch.Tensor,
    high: float,
    low: float,
    k1: bool,
) -> Metrics:
    """verl's `compute_rs_metrics` for one criterion: its value per token (a sequence criterion's row value on every
    token) and per row (the token values' row mean for a token criterion)."""
    prefix = f"rollout_rs_{option}_"
    row_values = _masked_mean(per_token, mask, dim=-1) if per_row is None else per_row
    zero = per_token.new_zeros(())  # the lower fractions of a criterion without a lower bound
    metrics: Metrics = {f"{prefix}mean": _masked_mean(per_token, mask)}
    if per_row is not None:  # a sequence criterion: over the rows
        metrics[f"{prefix}max"] = _extreme(per_row, rows, largest=True)
        metrics[f"{prefix}min"] = _extreme(per_row, rows, largest=False)
        metrics[f"{prefix}fraction_high"] = _rows_mean(per_row > high, rows)
        metrics[f"{prefix}fraction_low"] = _rows_mean(per_row < low, rows) if k1 else zero
    else:
        metrics[f"{prefix}max"] = _extreme(per_token, mask, largest=True)
        metrics[f"{prefix}min"] = _extreme(per_token, mask, largest=False)
        metrics[f"{prefix}fraction_high"] = _masked_mean(per_token > high, mask)
        metrics[f"{prefix}fraction_low"] = _masked_mean(per_token < low, mask) if k1 else zero
    metrics[f"{prefix}std"] = _token_std(per_token.clamp(low, high), mask)
    metrics.update(_row_summary(prefix, row_values, rows))
    metrics[f"{prefix}seq_max_deviation"] = _extreme(row_values.abs(), rows, largest=True)
    metrics[f"{prefix}seq_fraction_high"] = _rows_mean(row_values > high, rows)
    if k1:
        metrics[f"{prefix}seq_fraction_low"] = _rows_mean(row_values < low, rows)
    return metrics


def offpolicy_metrics(old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor) -> Metrics:
    """verl's off-policy diagnostics of π_old (`old`) against π_rollout (`rollout`) over `mask`."""
    rows = mask.any(-1)
    log_ratio = torch.where(mask, old - rollout, 0)
    mean_old = _masked_mean(old, mask, dim=-1)
    mean_rollout = _masked_mean(rollout, mask, dim=-1)
    diff = mean_rollout - mean_old  # log(training PPL / rollout PPL) per row
    safe = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
    sums = log_ratio.sum(-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    return {
        "training_ppl": _rows_mean(torch.exp(-mean_old), rows),
        "training_log_ppl": _rows_mean(-mean_old, rows),
        "kl": _masked_mean(rollout - old, mask),
        "k3_kl": _masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask),
        "rollout_ppl": _rows_mean(torch.exp(-mean_rollout), rows),
        "rollout_log_ppl": _rows_mean(-mean_rollout, rows),
        "log_ppl_diff": _rows_mean(diff, rows),
        "log_ppl_abs_diff": _rows_mean(diff.abs(), rows),
        "log_ppl_diff_max": _extreme(diff, rows, largest=True),
        "log_ppl_diff_min": _extreme(diff, rows, largest=False),
        "ppl_ratio": _rows_mean(torch.exp(diff), rows),
        "chi2_token": torch.where(mask.any(), _masked_mean(torch.exp(safe).square(), mask) - 1, 0),
        "chi2_seq": torch.where(rows.any(), _rows_mean(torch.exp(2 * sums), rows) - 1, 0),
    }
