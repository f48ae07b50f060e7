"""verl 0.9's policy losses over trl_ext's: `compute_policy_loss` (dual-clip PPO) and the registered `vanilla`,
`gspo`, `sapo`, `cispo`, `gpg`, `geo_mean`, `dro`, `clip_cov`, `kl_cov`, `dppo_tv` and `dppo_kl`.

How the policy losses reuse trl_ext's: every verl aggregation is a weighted token sum Σ w·L (`agg_weights`), and
the ppo / gspo / sapo / cispo per-token losses are positively homogeneous in the advantage (L(c·A) = c·L(A) for
c ≥ 0: the clip side and SAPO's τ depend only on the sign of A). So the trl_ext loss is called with advantages
A·w·rollout_is_weights and summed (`token-sum`), which is verl's aggregate of verl's rollout-weighted loss, gradient
included; the metrics are computed here with verl's formulas. The losses that are not homogeneous in the advantage
(dro's ½β·Δ² term, the covariance selection of clip_cov / kl_cov; gpg and dppo_tv / dppo_kl for symmetry) read an
`importance_sampling_ratio` and take the weights w·rollout_is_weights there instead: Σ w·rollout_is_weights·L again
(`_summed_loss` chooses by what the loss reads).
`geo_mean` aggregates per sequence (the rollout weights by their per-row geometric mean), as verl does.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch

from ...losses import get_policy_loss
from .aggregation import agg_weights, masked_mean
from .registry import clip_ratios, config_value, register_policy_loss

__all__ = [
    "compute_policy_loss",
    "compute_policy_loss_cispo",
    "compute_policy_loss_clip_cov",
    "compute_policy_loss_dppo_kl",
    "compute_policy_loss_dppo_tv",
    "compute_policy_loss_dro",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_gpg",
    "compute_policy_loss_gspo",
    "compute_policy_loss_kl_cov",
    "compute_policy_loss_sapo",
    "compute_policy_loss_vanilla",
]


def _summed_loss(
    name: str,
    loss_args: dict[str, Any],
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    global_batch_info: Mapping[str, Any],
    rollout_is_weights: torch.Tensor | None,
    keep_mask_dtype: bool = False,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """verl's `agg_loss(L · rollout_is_weights, response_mask, loss_agg_mode, **global_batch_info)` with L the
    per-token loss of the trl_ext loss `name`, and that loss's metrics: the loss summed (`token-sum`) with the weights
    w·rollout_is_weights as its `importance_sampling_ratio` where it reads one, else folded into the advantages (the
    losses positively homogeneous in A, so the weights must be >= 0; see the module docstring). The loss gets the
    mask as bool, or with `keep_mask_dtype` as 0/1 in `response_mask`'s dtype (clip_cov: verl's `masked_mean`
    divides in the mask's dtype)."""
    weights = agg_weights(response_mask, loss_agg_mode, **global_batch_info)
    if rollout_is_weights is not None:
        weights = weights * rollout_is_weights
    with warnings.catch_warnings():  # gspo warns about any mode but seq-mean-token-mean
        warnings.simplefilter("ignore")
        loss_fn = get_policy_loss(name, loss_agg_mode="token-sum", **loss_args)
    action_mask = response_mask.bool()
    batch = {
        "logprob": log_prob,
        "old_logprob": old_log_prob,
        "action_mask": action_mask.to(response_mask.dtype) if keep_mask_dtype else action_mask,
    }
    if "importance_sampling_ratio" in loss_fn.inputs():
        return loss_fn(**batch, advantages=advantages, importance_sampling_ratio=weights.to(log_prob.dtype))
    if rollout_is_weights is not None and bool((rollout_is_weights < 0).any()):
        raise ValueError(f"{name}: rollout_is_weights must be >= 0")
    return loss_fn(**batch, advantages=advantages * weights.to(advantages.dtype))


def _metrics(pg_clipfrac: torch.Tensor, ppo_kl: torch.Tensor, pg_clipfrac_lower: torch.Tensor) -> dict[str, float]:
    return {
        "actor/pg_clipfrac": pg_clipfrac.detach().item(),
        "actor/ppo_kl": ppo_kl.detach().item(),
        "actor/pg_clipfrac_lower": pg_clipfrac_lower.detach().item(),
    }


def _vanilla(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, cliprange_low, cliprange_high, clip_ratio_c,
    global_batch_info, rollout_is_weights,
):  # fmt: skip
    """Dual-clip PPO: the loss and verl's three metrics as tensors."""
    if not clip_ratio_c > 1.0:
        raise ValueError(f"clip_ratio_c must be > 1.0 for dual-clip PPO, got {clip_ratio_c}")
    loss_args = {"clip_range_low": cliprange_low, "clip_range_high": cliprange_high, "clip_ratio_c": clip_ratio_c}
    pg_loss, _ = _summed_loss(
        "ppo", loss_args, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, global_batch_info,
        rollout_is_weights,
    )  # fmt: skip
    with torch.no_grad():
        log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0)
        ratio = torch.exp(log_ratio)
        negative = advantages < 0
        clipped = torch.where(negative, ratio < 1 - cliprange_low, ratio > 1 + cliprange_high) & (advantages != 0)
        pg_clipfrac = masked_mean(clipped.float(), response_mask)
        pg_clipfrac_lower = masked_mean((negative & (ratio > clip_ratio_c)).float(), response_mask)
        ppo_kl = masked_mean(-log_ratio, response_mask)
    return pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower


def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange: float | None = None,
    cliprange_low: float | None = None,
    cliprange_high: float | None = None,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """verl's dual-clip PPO: `(pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)` (tensors; no global batch info).

    Per token, r = exp(clamp(lp − old, ±20)): L = max(−A·r, −A·clip(r, 1 − ε_low, 1 + ε_high)), and for A < 0
    additionally min(L, −A·c) with c = `clip_ratio_c`.

    Args:
        old_log_prob: `[B, T]` log-probs of the sampling policy.
        log_prob: `[B, T]` log-probs of the policy.
        advantages: `[B, T]` advantages.
        response_mask: `[B, T]` loss mask, 0/1 or bool.
        cliprange: The symmetric clip ε.
        cliprange_low: ε_low (default: `cliprange`).
        cliprange_high: ε_high (default: `cliprange`).
        clip_ratio_c: The dual-clip constant c (> 1).
        loss_agg_mode: One of `AGG_LOSS_MODES` (see `agg_loss`).

    Returns:
        pg_loss: The aggregated loss, 0-dim.
        pg_clipfrac: The fraction of valid tokens whose ε clip is active: A > 0 with r > 1 + ε_high, or A < 0
            with r < 1 − ε_low.
        ppo_kl: The mean over valid tokens of −clamp(lp − old, ±20).
        pg_clipfrac_lower: The fraction of valid tokens with A < 0 and r > c (the dual clip is active).

    Raises:
        ValueError: `clip_ratio_c` <= 1, no clip range, a negative one, or an unknown `loss_agg_mode`.
    """
    low = cliprange if cliprange_low is None else cliprange_low
    high = cliprange if cliprange_high is None else cliprange_high
    return _vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, low, high, clip_ratio_c, {}, None)


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Dual-clip PPO (trl_ext `ppo`); reads `clip_ratio`, `clip_ratio_low`, `clip_ratio_high`, `clip_ratio_c`
    (default 3.0) and `global_batch_info`."""
    low, high = clip_ratios(config)
    pg_loss, *metrics = _vanilla(
        old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, low, high,
        config_value(config, "clip_ratio_c", 3.0), config_value(config, "global_batch_info", {}), rollout_is_weights,
    )  # fmt: skip
    return pg_loss, _metrics(*metrics)


@register_policy_loss("gspo")
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO-token (trl_ext `gspo`); reads `clip_ratio`, `clip_ratio_low`, `clip_ratio_high`, `global_batch_info`.
    `pg_clipfrac_lower` is 0, as in verl."""
    low, high = clip_ratios(config)
    pg_loss, _ = _summed_loss(
        "gspo", {"clip_range_low": low, "clip_range_high": high}, old_log_prob, log_prob, advantages, response_mask,
        loss_agg_mode, config_value(config, "global_batch_info", {}), rollout_is_weights,
    )  # fmt: skip
    with torch.no_grad():
        log_ratio = log_prob - old_log_prob
        seq_log_ratio = (log_ratio * response_mask).sum(-1) / response_mask.sum(-1).clamp(min=1)
        ratio = torch.exp(seq_log_ratio.unsqueeze(-1).clamp(max=10.0))
        clipped = torch.where(advantages < 0, ratio < 1 - low, ratio > 1 + high) & (advantages != 0)
        metrics = _metrics(
            masked_mean(clipped.float(), response_mask), masked_mean(-log_ratio, response_mask), pg_loss.new_zeros(())
        )
    return pg_loss, metrics


@register_policy_loss("sapo")
def compute_policy_loss_sapo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """SAPO (trl_ext `sapo`); reads `tau_pos`, `tau_neg`, `global_batch_info`. As in verl, the loss is always
    aggregated `seq-mean-token-mean` (`loss_agg_mode` is ignored) and `pg_clipfrac*` are 0."""
    loss_args = {"tau_pos": config_value(config, "tau_pos"), "tau_neg": config_value(config, "tau_neg")}
    pg_loss, _ = _summed_loss(
        "sapo", loss_args, old_log_prob, log_prob, advantages, response_mask, "seq-mean-token-mean",
        config_value(config, "global_batch_info", {}), rollout_is_weights,
    )  # fmt: skip
    with torch.no_grad():
        ppo_kl = masked_mean(-(log_prob - old_log_prob).clamp(-20.0, 20.0), response_mask)
        zero = pg_loss.new_zeros(())
    return pg_loss, _metrics(zero, ppo_kl, zero)


@register_policy_loss("cispo")
def compute_policy_loss_cispo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """CISPO (trl_ext `cispo`): L = −sg(clip(r, 1 − ε_low, 1 + ε_high))·A·lp; reads `clip_ratio`,
    `clip_ratio_low`, `clip_ratio_high`, `global_batch_info`. `pg_clipfrac_lower` is 0, as in verl."""
    low, high = clip_ratios(config)
    pg_loss, _ = _summed_loss(
        "cispo", {"clip_range_low": low, "clip_range_high": high}, old_log_prob, log_prob, advantages, response_mask,
        loss_agg_mode, config_value(config, "global_batch_info", {}), rollout_is_weights,
    )  # fmt: skip
    with torch.no_grad():
        log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0)
        ratio = torch.exp(log_ratio)
        clipped = (ratio < 1 - low) | (ratio > 1 + high)
        metrics = _metrics(
            masked_mean(clipped.float(), response_mask), masked_mean(-log_ratio, response_mask), pg_loss.new_zeros(())
        )
    return pg_loss, metrics


@register_policy_loss("gpg")
def compute_policy_loss_gpg(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GPG (trl_ext `gpg`): L = −A·lp (`old_log_prob` is not read); reads `global_batch_info`. No metrics, as in
    verl."""
    pg_loss, _ = _summed_loss(
        "gpg", {}, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
        config_value(config, "global_batch_info", {}), rollout_is_weights,
    )  # fmt: skip
    return pg_loss, {}


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GMPO (trl_ext `geo_mean`): the mean over the micro-batch's rows (empty ones included) of −Ā·exp(row mean of
    the sign-clipped log-ratio)·(row geometric mean of `rollout_is_weights`); reads `clip_ratio`, `clip_ratio_low`,
    `clip_ratio_high` (bounds of the log-ratio). As in verl, `loss_agg_mode` and `global_batch_info` are ignored."""
    low, high = clip_ratios(config)
    loss_fn = get_policy_loss("geo_mean", clip_range_low=low, clip_range_high=high)
    pg_loss, metrics = loss_fn(
        logprob=log_prob,
        old_logprob=old_log_prob,
        action_mask=response_mask.bool(),
        advantages=advantages,
        importance_sampling_ratio=rollout_is_weights,
    )
    return pg_loss, _metrics(metrics["pg_clipfrac"], metrics["ppo_kl"], metrics["pg_clipfrac_lower"])


@register_policy_loss("dro")
def compute_policy_loss_dro(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DRO (trl_ext `dro`): L = −(A·lp − ½β·(lp − old)²); reads `policy_loss.dro_beta` (β, required > 0, as in
    verl) and `global_batch_info`. Metric: `actor/ppo_kl`."""
    policy_loss = config_value(config, "policy_loss", None)
    beta = None if policy_loss is None else config_value(policy_loss, "dro_beta", None)
    if beta is None or (isinstance(beta, (int, float)) and not isinstance(beta, bool) and beta <= 0):
        raise ValueError("policy_loss.dro_beta must be a positive value when using DRO")
    pg_loss, metrics = _summed_loss(
        "dro", {"dro_beta": beta}, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
        config_value(config, "global_batch_info", {}), rollout_is_weights,
    )  # fmt: skip
    return pg_loss, {"actor/ppo_kl": metrics["ppo_kl"].item()}


def _policy_loss_options(config: Any, name: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The `config.policy_loss` keys of `defaults`, each falling back to its default when None (as verl reads them);
    `policy_loss` itself is required."""
    policy_loss = config_value(config, "policy_loss", None)
    if policy_loss is None:
        raise ValueError(f"{name}: config.policy_loss is required (it holds {', '.join(defaults)})")
    options = {key: config_value(policy_loss, key, None) for key in defaults}
    return {key: defaults[key] if value is None else value for key, value in options.items()}


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clip-Cov (trl_ext `clip_cov`): max(−A·r, −A·clip(r)) with a random few high-covariance tokens dropped; reads
    `clip_ratio`, `clip_ratio_low`, `clip_ratio_high`, `policy_loss.clip_cov_ratio` / `clip_cov_lb` / `clip_cov_ub`
    (None: 0.0002 / 1.0 / 5.0, as verl) and `global_batch_info`. The draw uses torch's global CPU generator, as
    verl's: the same tokens under the same `torch.manual_seed`. Metrics: `actor/pg_clipfrac`, `actor/ppo_kl`."""
    low, high = clip_ratios(config)
    options = _policy_loss_options(
        config, "clip_cov", {"clip_cov_ratio": 0.0002, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0}
    )
    pg_loss, metrics = _summed_loss(
        "clip_cov", {"clip_range_low": low, "clip_range_high": high, **options}, old_log_prob, log_prob, advantages,
        response_mask, loss_agg_mode, config_value(config, "global_batch_info", {}), rollout_is_weights,
        keep_mask_dtype=True,
    )  # fmt: skip
    return pg_loss, {"actor/pg_clipfrac": metrics["pg_clipfrac"].item(), "actor/ppo_kl": metrics["ppo_kl"].item()}


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL-Cov (trl_ext `kl_cov`): −A·r, plus β·|lp − old| on the top tokens by covariance; reads
    `policy_loss.kl_cov_ratio` / `ppo_kl_coef` (None: 0.0002 / 1.0, as verl's loss) and `global_batch_info`.
    Metric: `actor/ppo_kl`, the token mean of |lp − old| (verl's)."""
    options = _policy_loss_options(config, "kl_cov", {"kl_cov_ratio": 0.0002, "ppo_kl_coef": 1.0})
    pg_loss, metrics = _summed_loss(
        "kl_cov", options, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
        config_value(config, "global_batch_info", {}), rollout_is_weights,
    )  # fmt: skip
    return pg_loss, {"actor/ppo_kl": metrics["ppo_kl_abs"].item()}


def _dppo(name, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights):
    """DPPO-Binary-TV / -KL: verl's `clip_ratio*` are the divergence thresholds, `clip_ratio_c` (default 20.0, as
    verl's `config.get`) the truncation of the importance ratio."""
    low, high = clip_ratios(config)
    loss_args = {
        "clip_range_low": low,
        "clip_range_high": high,
        "clip_ratio_c": config_value(config, "clip_ratio_c", 20.0),
    }
    pg_loss, metrics = _summed_loss(
        name, loss_args, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
        config_value(config, "global_batch_info", {}), rollout_is_weights,
    )  # fmt: skip
    return pg_loss, _metrics(metrics["pg_clipfrac"], metrics["ppo_kl"], metrics["pg_clipfrac_lower"])


@register_policy_loss("dppo_tv")
def compute_policy_loss_dppo_tv(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPPO-Binary-TV (trl_ext `dppo_tv`): −A·sg(min(r, c))·lp on the tokens whose p − p_old stays within the TV
    thresholds; reads `clip_ratio`, `clip_ratio_low`, `clip_ratio_high` (the thresholds), `clip_ratio_c` (default
    20.0) and `global_batch_info`. verl's three metrics."""
    return _dppo(
        "dppo_tv", old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights
    )


@register_policy_loss("dppo_kl")
def compute_policy_loss_dppo_kl(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPPO-Binary-KL (trl_ext `dppo_kl`): as `dppo_tv` with the binary KL as the divergence (thresholds
    `clip_ratio_low` / `clip_ratio_high`). verl's three metrics."""
    return _dppo(
        "dppo_kl", old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights
    )
