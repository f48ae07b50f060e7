"""The rollout correction's function API: verl's names and signatures (`rollout_corr_helper`)."""

from __future__ import annotations

import torch

from .._validation import check_bool, check_choice
from .computation import Metrics, check_inputs, importance_weights, offpolicy_metrics, rejection_mask, valid_log_ratio
from .settings import (
    DEFAULT_IS_THRESHOLD,
    ROLLOUT_IS_LEVELS,
    RolloutCorrection,
    parse_rollout_is_threshold,
    parse_rollout_rs,
    parse_rollout_rs_thresholds,
)


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
    log_ratio, mask = check_inputs(owner, log_ratio=log_ratio, response_mask=response_mask)
    return importance_weights(
        valid_log_ratio(log_ratio, mask), mask, rollout_is, upper, lower, rollout_is_batch_normalize
    )


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
    log_ratio, mask = check_inputs(owner, log_ratio=log_ratio, response_mask=response_mask)
    return rejection_mask(valid_log_ratio(log_ratio, mask), mask, bounds)


def compute_offpolicy_metrics(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> Metrics:
    """verl's off-policy diagnostics (unprefixed: `kl`, `k3_kl`, `training_ppl`, `chi2_seq`, ...)."""
    old, rollout, mask = check_inputs(
        "compute_offpolicy_metrics",
        old_log_prob=old_log_prob,
        rollout_log_prob=rollout_log_prob,
        response_mask=response_mask,
    )
    return offpolicy_metrics(old, rollout, mask)


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
