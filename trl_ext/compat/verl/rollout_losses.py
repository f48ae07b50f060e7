"""verl 0.9.1's rollout-policy losses: REINFORCE with optional importance weights (`compute_policy_loss_reinforce`,
not registered, as in verl) and the registered `bypass_mode`, which trains on the sampler's log-probs as π_old.

REINFORCE: L = −A·log π·w per token (w = `rollout_is_weights`, default 1; a constant: no gradient flows through it),
aggregated with `agg_loss(L, response_mask, loss_agg_mode, **config.global_batch_info)`; metric `actor/ppo_kl` = the
masked mean of log π_rollout − log π.

`bypass_mode` (old_log_prob = the rollout's log-probs): the importance weights w = π/π_rollout and the rejection mask
of `config.policy_loss.rollout_correction` (`rollout_is`, `rollout_is_threshold` default 2.0,
`rollout_is_batch_normalize`, `rollout_rs`, `rollout_rs_threshold`; `trl_ext.rollout_correction`, the port of verl's
`rollout_corr_helper`), computed without gradients, then `loss_type` "reinforce" (REINFORCE above with w on the kept
tokens) or "ppo_clip" (default: `vanilla` PPO on the kept tokens, w not applied: the ratio already is π/π_rollout).
The metrics are the loss's plus the rollout correction's (`rollout_corr/...`, Python floats as verl's).
"""

from __future__ import annotations

from typing import Any

import torch

from ...rollout_correction import DEFAULT_IS_THRESHOLD, compute_rollout_correction_and_rejection_mask
from .aggregation import agg_loss, masked_mean
from .policy_losses import compute_policy_loss_vanilla
from .registry import config_value, register_policy_loss

__all__ = ["BYPASS_LOSS_TYPES", "compute_policy_loss_bypass_mode", "compute_policy_loss_reinforce"]

BYPASS_LOSS_TYPES = ("ppo_clip", "reinforce")


def compute_policy_loss_reinforce(
    rollout_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-sum",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """REINFORCE: `(agg_loss(−A·log π·w), {"actor/ppo_kl": float})`; `config` (required) gives
    `global_batch_info`."""
    if config is None:
        raise TypeError("compute_policy_loss_reinforce: config is required (its global_batch_info)")
    pg_losses = -advantages * log_prob
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, **config_value(config, "global_batch_info", {}))
    with torch.no_grad():
        ppo_kl = masked_mean(rollout_log_prob - log_prob, response_mask)
    return pg_loss, {"actor/ppo_kl": ppo_kl.item()}


@register_policy_loss("bypass_mode")
def compute_policy_loss_bypass_mode(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Bypass mode: `old_log_prob` is the rollout's; reads `config.policy_loss.rollout_correction` (required) and
    dispatches on its `loss_type` (see the module docstring). `rollout_is_weights` is ignored (computed here)."""
    owner = "compute_policy_loss_bypass_mode"
    if config is None:
        raise TypeError(f"{owner}: config is required (config.policy_loss.rollout_correction)")
    policy_loss = config_value(config, "policy_loss", None)
    settings = None if policy_loss is None else config_value(policy_loss, "rollout_correction", None)
    if settings is None:
        raise ValueError(
            "rollout_correction config not found in policy_loss. "
            "When using loss_mode='bypass_mode', ensure rollout_correction config is passed."
        )
    loss_type = config_value(settings, "loss_type", "ppo_clip")
    if loss_type not in BYPASS_LOSS_TYPES:
        raise ValueError(f"{owner}: Invalid loss_type: {loss_type}. Must be 'reinforce' or 'ppo_clip'.")
    with torch.no_grad():
        weights, kept, rollout_metrics = compute_rollout_correction_and_rejection_mask(
            old_log_prob=log_prob,  # π: the IS ratio is π / π_rollout
            rollout_log_prob=old_log_prob,
            response_mask=response_mask,
            rollout_is=config_value(settings, "rollout_is", None),
            rollout_is_threshold=config_value(settings, "rollout_is_threshold", DEFAULT_IS_THRESHOLD),
            rollout_is_batch_normalize=config_value(settings, "rollout_is_batch_normalize", False),
            rollout_rs=config_value(settings, "rollout_rs", None),
            rollout_rs_threshold=config_value(settings, "rollout_rs_threshold", None),
        )
    kept = kept.to(response_mask.dtype)
    if loss_type == "reinforce":
        pg_loss, metrics = compute_policy_loss_reinforce(
            old_log_prob, log_prob, advantages, kept, loss_agg_mode, config, weights
        )
    else:
        pg_loss, metrics = compute_policy_loss_vanilla(old_log_prob, log_prob, advantages, kept, loss_agg_mode, config)
    metrics.update({name: float(value) for name, value in rollout_metrics.items()})
    return pg_loss, metrics
