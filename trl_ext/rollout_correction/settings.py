"""The rollout correction's settings (verl's `RolloutCorrectionConfig` names), checked when given, each error
naming its setting: the parsers of the thresholds and `RolloutCorrection`, which applies them to a batch."""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch

from .._validation import check_bool, check_choice
from .computation import Metrics, check_inputs, importance_weights, offpolicy_metrics, rejection_mask, valid_log_ratio

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

_IS_RULE = (
    "a number > 0 (TIS: the weights' upper bound) or a string 'lower_upper' with 0 < lower <= upper (IcePop: "
    "weights outside [lower, upper] become 0)"
)


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
        old, rollout, mask = check_inputs(
            self.owner, old_log_prob=old_log_prob, rollout_log_prob=rollout_log_prob, response_mask=response_mask
        )
        log_ratio = valid_log_ratio(old - rollout, mask)
        metrics: Metrics = {}
        weights = None
        if self.rollout_is is not None:
            upper, lower = self.is_bounds
            weights, is_metrics = importance_weights(
                log_ratio, mask, self.rollout_is, upper, lower, self.rollout_is_batch_normalize
            )
            metrics.update(is_metrics)
        kept = mask
        if self.rs_bounds:
            kept, rs_metrics = rejection_mask(log_ratio, mask, self.rs_bounds)
            metrics.update(rs_metrics)
        metrics.update(offpolicy_metrics(old, rollout, mask))
        return weights, kept, {f"{METRIC_PREFIX}{name}": value for name, value in metrics.items()}
