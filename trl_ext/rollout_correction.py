"""verl 0.9's rollout correction: importance-sampling weights and rejection masks for the sampler–trainer gap.

A port of `verl/trainer/ppo/rollout_corr_helper.py` (verl 0.9.1; its config is `algorithm.rollout_correction`,
`RolloutCorrectionConfig`), pure torch. The completions are sampled by one policy (vLLM, in its precision and with
its kernels: π_rollout) and trained as if sampled by another (the trained model's log-probs at generation time:
π_old). The correction reweights or drops the tokens where the two disagree (Liu, Li, Fu, Wang, Liu, Shen 2025, "When
Speed Kills Stability: Demystifying RL Collapse from the Training-Inference Mismatch", https://richardli.xyz/rl-collapse).

Per token, ℓ = log π_old − log π_rollout (verl's `log_ratio`, log r); m is the response mask.

**Importance sampling** (`rollout_is`; the weight multiplies the token's policy loss, verl's `rollout_is_weights`):

    token      w_t = exp(clamp(ℓ_t, ±20))
    sequence   w_t = exp(clamp(Σ_valid ℓ, ±20)) on every token of the row

then `rollout_is_threshold`: a number U (or a number-like string, e.g. "2.0") truncates, w ← min(w, U) (TIS); a string
"L_U" masks, w ← w where L ≤ w ≤ U, else 0 (IcePop). `rollout_is_batch_normalize` divides by the weights' mean over the
batch (the valid tokens' mean for `token`, the mean over sequences of each sequence's weight for `sequence`; no change
when that mean is ≤ 1e-8). The weights are detached and 0 at masked positions.

**Rejection** (`rollout_rs`: one criterion or a comma-separated list, all of which must pass; a rejected token leaves
the response mask). From ℓ clamped to ±20, per token k1 = −ℓ, k2 = ½ℓ², k3 = e^ℓ − 1 − ℓ, and the criteria

    token_k1, token_k2, token_k3            the token's own value: rejects the token
    seq_sum_k1, seq_sum_k2, seq_sum_k3      the sum over the row's valid tokens: rejects the whole row
    seq_mean_k1, seq_mean_k2, seq_mean_k3   the mean over the row's valid tokens: rejects the whole row
    seq_max_k2, seq_max_k3                  the max over the row's valid tokens: rejects the whole row

`rollout_rs_threshold` gives one threshold per criterion (comma-separated, or one for all): for a k1 criterion a
string "L_U" keeps log L ≤ value ≤ log U (a single number U means L = 1/U); k1 = −ℓ = log(π_rollout / π_old), as verl
defines it, so the bounds are on π_rollout / π_old (the single-number form is symmetric, the same either way). For k2 /
k3 a single number U > 0 keeps value ≤ U.

**Metrics** (verl's names; `compute_rollout_correction_and_rejection_mask` prefixes them with `rollout_corr/`):

* IS: `rollout_is_mean`, `rollout_is_max`, `rollout_is_min`, `rollout_is_std`, `rollout_is_eff_sample_size`,
  `rollout_is_ratio_fraction_high` / `_low` (raw weights beyond U / below L, L = 1/U with TIS), `rollout_is_seq_mean`,
  `_seq_std`, `_seq_max`, `_seq_min`, `_seq_max_deviation` (of each sequence's mean weight, from 1),
  `rollout_is_seq_fraction_high` / `_low`, and `rollout_is_oob_ratio` (IcePop), `rollout_is_batch_norm_factor`
  (batch normalization). Computed before batch normalization; std and ESS on the weights clamped to [0, U].
* Rejection, per criterion C: `rollout_rs_C_mean`, `_max`, `_min`, `_std`, `_fraction_high`, `_fraction_low`,
  `_seq_mean`, `_seq_std`, `_seq_max`, `_seq_min`, `_seq_max_deviation`, `_seq_fraction_high`, `_seq_fraction_low`
  (k1), `_masked_fraction`, `_seq_masked_fraction`; overall `rollout_rs_masked_fraction`,
  `rollout_rs_seq_masked_fraction`.
* Off-policy diagnostics (always): `training_ppl`, `training_log_ppl`, `rollout_ppl`, `rollout_log_ppl`, `kl`
  (mean of log π_rollout − log π_old), `k3_kl`, `log_ppl_diff`, `log_ppl_abs_diff`, `log_ppl_diff_max`,
  `log_ppl_diff_min`, `ppl_ratio`, `chi2_token`, `chi2_seq`.

Where this port differs from verl, deliberately:

* Metrics are detached 0-dim tensors and nothing waits for the device with a bool mask (verl calls `.item()` per
  metric); a number mask holding only 0 and 1 is accepted at the cost of one check.
* Sequence statistics (the `_seq_*` metrics, the sequence-level fractions, max / min, perplexities and `chi2_seq`) are
  over the rows with at least one valid token; verl's include rows without any in some of them.
* An empty batch, or one without a valid token, gives weights 0, an all-False mask and metrics 0 (verl raises), and
  the effective sample size is 0 when every weight is 0 (verl divides by zero).
* NaN or ±inf in a log-prob at a valid position makes every weight (TIS or IcePop), every statistic of the weights
  and divergences and every share of ratios beyond a bound NaN and rejects every token (the rule of `trl_ext.losses`:
  a broken input is never silently turned into a finite correction); at masked positions it never reaches anything.
* Settings are checked when given (`RolloutCorrection`), each error naming its setting: thresholds must be finite,
  booleans are errors, and a setting that would do nothing (`rollout_rs_threshold` without `rollout_rs`, ...) too.
* verl's `bypass_mode` / `loss_type` (π_rollout used as π_old) are not ported: the trainer's π_old is the trained
  policy's own log-probs.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch

from ._validation import check_bool, check_choice
from .losses.base import bool_mask, check_float

SAFETY_BOUND = 20.0
"""verl's bound on a log ratio before it is exponentiated (exp(20) ≈ 4.9e8)."""

EPS = 1e-8
"""The ε of verl's `masked_mean`: Σ m·x / (Σ m + ε)."""

ROLLOUT_IS_LEVELS = ("token", "sequence")
"""The values of `rollout_is` (besides None)."""

ROLLOUT_RS_OPTIONS = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)
"""The rejection criteria of `rollout_rs` (verl's `SUPPORTED_ROLLOUT_RS_OPTIONS`)."""

DEFAULT_IS_THRESHOLD = 2.0
"""verl's default `rollout_is_threshold`."""

METRIC_PREFIX = "rollout_corr/"

Metrics = dict[str, torch.Tensor]

_IS_RULE = (
    "a number > 0 (TIS: the weights' upper bound) or a string 'lower_upper' with 0 < lower <= upper (IcePop: "
    "weights outside [lower, upper] become 0)"
)


# --------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------


def _positive(text: Any) -> float | None:
    """`text` (a number or a number-like string) as a finite float > 0, or None."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def parse_rollout_is_threshold(threshold: Any, owner: str = "rollout_correction") -> tuple[float, float | None]:
    """`rollout_is_threshold` as `(upper, lower)`: a number U or a number-like string → `(U, None)` (TIS); a string
    "L_U" → `(U, L)` (IcePop). Each bound finite and > 0, L ≤ U; anything else is a ValueError naming the setting."""
    bad = ValueError(f"{owner}: rollout_is_threshold={threshold!r} is not valid; must be {_IS_RULE}")
    if isinstance(threshold, bool) or not isinstance(threshold, (numbers.Real, str)):
        raise bad
    parts = threshold.strip().split("_") if isinstance(threshold, str) else [threshold]
    values = [_positive(part) for part in parts]
    if len(values) > 2 or None in values:
        raise bad
    if len(values) == 1:
        return values[0], None
    lower, upper = values
    if lower > upper:
        raise ValueError(
            f"{owner}: rollout_is_threshold={threshold!r} is not valid: its lower bound {lower:g} is above its upper "
            f"bound {upper:g}; write 'lower_upper' with lower <= upper"
        )
    return upper, lower


def parse_rollout_rs(rollout_rs: Any, owner: str = "rollout_correction") -> tuple[str, ...]:
    """`rollout_rs` (one criterion or a comma-separated list) as its criteria, duplicates dropped (verl's order)."""
    rule = f"one of {', '.join(map(repr, ROLLOUT_RS_OPTIONS))}, or a comma-separated list of them"
    if not isinstance(rollout_rs, str) or not rollout_rs.strip(","):
        raise ValueError(f"{owner}: rollout_rs={rollout_rs!r} is not valid; must be {rule}")
    options = [option.strip() for option in rollout_rs.split(",") if option.strip()]
    unknown = [option for option in options if option not in ROLLOUT_RS_OPTIONS]
    if unknown or not options:
        what = f"{unknown[0]!r} is not a rejection criterion" if unknown else "it names no criterion"
        raise ValueError(f"{owner}: rollout_rs={rollout_rs!r} is not valid ({what}); must be {rule}")
    return tuple(dict.fromkeys(options))


def parse_rollout_rs_thresholds(
    options: tuple[str, ...], threshold: Any, owner: str = "rollout_correction"
) -> dict[str, tuple[float | None, float]]:
    """`rollout_rs_threshold` for the criteria `options`: `{criterion: (lower, upper)}`, lower None except for k1.

    One threshold per criterion (a comma-separated string) or one for all. k1: "L_U" with 0 < L ≤ U, or a single U
    (then L = 1/U, so U ≥ 1); k2 / k3: a single U > 0. Numbers may be given as numbers or number-like strings."""
    head = f"{owner}: rollout_rs_threshold={threshold!r}"
    if threshold is None:
        raise ValueError(
            f"{head} is not valid: rollout_rs={','.join(options)!r} rejects by a threshold, which must be given "
            "(k1: 'lower_upper' on π_rollout/π_old or a single upper bound U, meaning 1/U_U; k2 / k3: an upper bound)"
        )
    if isinstance(threshold, bool) or not isinstance(threshold, (numbers.Real, str)):
        raise ValueError(f"{head} is not valid; must be a number > 0 or a string (comma-separated, one per criterion)")
    specs = [threshold] if not isinstance(threshold, str) else [s.strip() for s in threshold.split(",") if s.strip()]
    if len(specs) not in (1, len(options)):
        raise ValueError(
            f"{head} is not valid: it gives {len(specs)} thresholds for the {len(options)} criteria of rollout_rs="
            f"{','.join(options)!r}; give one shared by all or one per criterion, comma-separated"
        )
    specs = specs * len(options) if len(specs) == 1 else specs
    bounds: dict[str, tuple[float | None, float]] = {}
    for option, spec in zip(options, specs, strict=True):
        parts = spec.split("_") if isinstance(spec, str) else [spec]
        values = [_positive(part) for part in parts]
        if option.endswith("k1"):
            if len(values) > 2 or None in values:
                raise ValueError(
                    f"{head} is not valid for {option!r}: {spec!r} must be 'lower_upper' with 0 < lower <= upper "
                    "(bounds on π_rollout/π_old) or a single number U >= 1 (meaning 1/U_U)"
                )
            lower, upper = (1.0 / values[0], values[0]) if len(values) == 1 else values
            if lower > upper:
                raise ValueError(
                    f"{head} is not valid for {option!r}: its lower bound {lower:g} is above its upper bound "
                    f"{upper:g} (a single number U means 1/U_U, so U must be >= 1)"
                )
            bounds[option] = (lower, upper)
        else:
            if len(values) != 1 or values[0] is None:
                raise ValueError(
                    f"{head} is not valid for {option!r}: {spec!r} must be a single number > 0 (an upper bound on "
                    "the divergence; only k1 criteria take 'lower_upper')"
                )
            bounds[option] = (None, values[0])
    return bounds


class RolloutCorrection:
    """verl's rollout-correction settings (`RolloutCorrectionConfig` without `bypass_mode` / `loss_type`), checked at
    construction, each error naming its setting; calling it on a batch runs
    `compute_rollout_correction_and_rejection_mask` with them.

    Args:
        rollout_is: None (no weights: metrics and rejection only), `"token"` or `"sequence"`.
        rollout_is_threshold: a number U > 0 (TIS) or a string `"L_U"` (IcePop); verl's default 2.0.
        rollout_is_batch_normalize: normalize the weights to mean 1 over the batch.
        rollout_rs: None, one of `ROLLOUT_RS_OPTIONS`, or a comma-separated list of them.
        rollout_rs_threshold: the rejection thresholds (see `parse_rollout_rs_thresholds`); required with
            `rollout_rs`.
        owner: the name errors start with (a config class).

    A setting that would do nothing is an error: `rollout_is_batch_normalize=True` or a threshold other than the
    default with `rollout_is=None`, and `rollout_rs_threshold` with `rollout_rs=None`.
    """

    def __init__(
        self,
        rollout_is: str | None = None,
        rollout_is_threshold: float | str | None = DEFAULT_IS_THRESHOLD,
        rollout_is_batch_normalize: bool = False,
        rollout_rs: str | None = None,
        rollout_rs_threshold: float | str | None = None,
        *,
        owner: str = "RolloutCorrection",
    ) -> None:
        self.owner = owner
        check_choice(owner, "rollout_is", rollout_is, (None, *ROLLOUT_IS_LEVELS))
        check_bool(owner, "rollout_is_batch_normalize", rollout_is_batch_normalize)
        self.rollout_is = rollout_is
        self.rollout_is_threshold = rollout_is_threshold
        self.rollout_is_batch_normalize = rollout_is_batch_normalize
        self.rollout_rs = rollout_rs
        self.rollout_rs_threshold = rollout_rs_threshold
        self.is_bounds: tuple[float, float | None] | None = None
        if rollout_is is not None:
            self.is_bounds = parse_rollout_is_threshold(rollout_is_threshold, owner)
        else:
            for name, value, unset in (
                ("rollout_is_threshold", rollout_is_threshold, (None, DEFAULT_IS_THRESHOLD)),
                ("rollout_is_batch_normalize", rollout_is_batch_normalize, (False,)),
            ):
                if value not in unset:
                    raise ValueError(
                        f"{owner}: {name}={value!r} configures the importance-sampling weights, but rollout_is=None "
                        "computes none; set rollout_is ('token' or 'sequence') or leave it unset"
                    )
        self.rs_bounds: dict[str, tuple[float | None, float]] = {}
        if rollout_rs is not None:
            self.rs_bounds = parse_rollout_rs_thresholds(
                parse_rollout_rs(rollout_rs, owner), rollout_rs_threshold, owner
            )
        elif rollout_rs_threshold is not None:
            raise ValueError(
                f"{owner}: rollout_rs_threshold={rollout_rs_threshold!r} sets the rejection thresholds, but "
                "rollout_rs=None rejects nothing; set rollout_rs (e.g. 'seq_mean_k1') or leave it unset"
            )

    @property
    def enabled(self) -> bool:
        """Whether it weights (`rollout_is`) or rejects (`rollout_rs`)."""
        return self.rollout_is is not None or self.rollout_rs is not None

    def describe(self) -> str:
        """The settings in words (run summary, model card)."""
        parts = []
        if self.rollout_is is not None:
            upper, lower = self.is_bounds
            kind = f"TIS at {upper:g}" if lower is None else f"IcePop in [{lower:g}, {upper:g}]"
            normalized = ", batch-normalized" if self.rollout_is_batch_normalize else ""
            parts.append(f"{self.rollout_is}-level IS weights, {kind}{normalized}")
        for option, (lower, upper) in self.rs_bounds.items():
            bound = f"≤ {upper:g}" if lower is None else f"π_rollout/π_old in [{lower:g}, {upper:g}]"
            parts.append(f"rejection {option} {bound}")
        return "; ".join(parts) or "off"

    def __call__(
        self, old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor | None, response_mask: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor, Metrics]:
        """`(weights, kept, metrics)` for a batch: see `compute_rollout_correction_and_rejection_mask`."""
        if rollout_log_prob is None:
            settings = [
                f"{name}={getattr(self, name)!r}" for name in ("rollout_is", "rollout_rs") if getattr(self, name)
            ]
            raise ValueError(
                f"{self.owner}: {' and '.join(settings) or 'the rollout correction'} needs the sampling policy's "
                "per-token log-probs (rollout_log_prob, vLLM's), got None"
            )
        old, rollout, mask = _check_inputs(
            self.owner, old_log_prob=old_log_prob, rollout_log_prob=rollout_log_prob, response_mask=response_mask
        )
        log_ratio = _log_ratio(old - rollout, mask)
        metrics: Metrics = {}
        weights = None
        if self.rollout_is is not None:
            upper, lower = self.is_bounds
            weights, is_metrics = _is_weights(
                log_ratio, mask, self.rollout_is, upper, lower, self.rollout_is_batch_normalize
            )
            metrics.update(is_metrics)
        kept = mask
        if self.rs_bounds:
            kept, rs_metrics = _rejection(log_ratio, mask, self.rs_bounds)
            metrics.update(rs_metrics)
        metrics.update(_offpolicy_metrics(old, rollout, mask))
        return weights, kept, {f"{METRIC_PREFIX}{name}": value for name, value in metrics.items()}


# --------------------------------------------------------------------------------------------------
# The function API (verl's names and signatures)
# --------------------------------------------------------------------------------------------------


def compute_rollout_correction_weights(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str = "token",
    rollout_is_threshold: float | str = DEFAULT_IS_THRESHOLD,
    rollout_is_batch_normalize: bool = False,
) -> tuple[torch.Tensor, Metrics]:
    """verl's truncated (TIS) or masked (IcePop) importance-sampling weights `[B, T]` from `log_ratio` = log π_old −
    log π_rollout `[B, T]`, and their metrics (unprefixed: `rollout_is_mean`, ...)."""
    owner = "compute_rollout_correction_weights"
    check_choice(owner, "rollout_is", rollout_is, ROLLOUT_IS_LEVELS)
    upper, lower = parse_rollout_is_threshold(rollout_is_threshold, owner)
    check_bool(owner, "rollout_is_batch_normalize", rollout_is_batch_normalize)
    log_ratio, mask = _check_inputs(owner, log_ratio=log_ratio, response_mask=response_mask)
    return _is_weights(_log_ratio(log_ratio, mask), mask, rollout_is, upper, lower, rollout_is_batch_normalize)


def compute_rollout_rejection_mask(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_rs: str = "token_k1",
    rollout_rs_threshold: float | str | None = None,
) -> tuple[torch.Tensor, Metrics]:
    """verl's rejection: the response mask `[B, T]` (bool) with the tokens / rows that fail any criterion of
    `rollout_rs` set False, and the metrics (unprefixed: `rollout_rs_<criterion>_mean`, ...)."""
    owner = "compute_rollout_rejection_mask"
    bounds = parse_rollout_rs_thresholds(parse_rollout_rs(rollout_rs, owner), rollout_rs_threshold, owner)
    log_ratio, mask = _check_inputs(owner, log_ratio=log_ratio, response_mask=response_mask)
    return _rejection(_log_ratio(log_ratio, mask), mask, bounds)


def compute_offpolicy_metrics(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> Metrics:
    """verl's off-policy diagnostics (unprefixed: `kl`, `k3_kl`, `training_ppl`, `chi2_seq`, ...)."""
    old, rollout, mask = _check_inputs(
        "compute_offpolicy_metrics",
        old_log_prob=old_log_prob,
        rollout_log_prob=rollout_log_prob,
        response_mask=response_mask,
    )
    return _offpolicy_metrics(old, rollout, mask)


def compute_rollout_correction_and_rejection_mask(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor | None,
    response_mask: torch.Tensor,
    rollout_is: str | None = None,
    rollout_is_threshold: float | str | None = DEFAULT_IS_THRESHOLD,
    rollout_is_batch_normalize: bool = False,
    rollout_rs: str | None = None,
    rollout_rs_threshold: float | str | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor, Metrics]:
    """verl's one call: `(weights, kept, metrics)`.

    `weights` `[B, T]` (None without `rollout_is`; verl wraps them in a DataProto), `kept` the response mask `[B, T]`
    after rejection (bool; verl keeps the mask's dtype), `metrics` every metric above prefixed `rollout_corr/`.
    `old_log_prob` is the trained policy's log-probs of the completions at generation time, `rollout_log_prob` the
    sampler's."""
    correction = RolloutCorrection(
        rollout_is,
        rollout_is_threshold,
        rollout_is_batch_normalize,
        rollout_rs,
        rollout_rs_threshold,
        owner="compute_rollout_correction_and_rejection_mask",
    )
    return correction(old_log_prob, rollout_log_prob, response_mask)


# --------------------------------------------------------------------------------------------------
# The computation
# --------------------------------------------------------------------------------------------------


def _check_inputs(owner: str, **inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
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


def _log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
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


def _is_weights(
    log_ratio: torch.Tensor, mask: torch.Tensor, level: str, upper: float, lower: float | None, normalize: bool
) -> tuple[torch.Tensor, Metrics]:
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


def _rejection(
    log_ratio: torch.Tensor, mask: torch.Tensor, bounds: dict[str, tuple[float | None, float]]
) -> tuple[torch.Tensor, Metrics]:
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


def _offpolicy_metrics(old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor) -> Metrics:
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
