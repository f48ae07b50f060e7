"""verl 0.9's `verl.trainer.ppo.core_algos` loss API over trl_ext's losses (pure torch; verl is not imported).

    from trl_ext.compat.verl import agg_loss, compute_policy_loss, get_policy_loss_fn, kl_penalty

Names, signatures, defaults and return shapes are verl 0.9.1's:

* `agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None, global_batch_size=None,
  loss_scale_factor=None)`: `token-mean`, `token-sum`, `seq-mean-token-sum`, `seq-mean-token-mean` and
  `seq-mean-token-sum-norm`, with verl's global-batch scaling (see `agg_weights`).
* `compute_policy_loss(...) -> (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)`: the (deprecated in verl)
  dual-clip PPO entry point.
* `get_policy_loss_fn(name)` / `register_policy_loss(name)` / `POLICY_LOSS_REGISTRY`: `vanilla`, `gspo`, `sapo`,
  `cispo`, each `fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
  rollout_is_weights) -> (pg_loss, {"actor/pg_clipfrac": float, "actor/ppo_kl": float,
  "actor/pg_clipfrac_lower": float})`. `config` is an object or a mapping (verl's `ActorConfig` / `DictConfig`);
  it is read as verl reads it: `clip_ratio`, `clip_ratio_low`, `clip_ratio_high`, `clip_ratio_c` (vanilla),
  `tau_pos` / `tau_neg` (sapo) and `global_batch_info` (the keyword arguments of `agg_loss`).
* `kl_penalty(logprob, ref_logprob, kl_penalty)`: `kl`/`k1`, `abs`, `mse`/`k2`, `low_var_kl`/`k3` and their
  straight-through `+` variants (value of the estimator, gradient of k2).
* `compute_gae_advantage_return(token_level_rewards, values, response_mask, gamma, lam) -> (advantages, returns)`:
  verl's GAE (`trl_ext.advantages.gae.gae_advantage_return` with verl's skipping of masked positions, then verl's
  `masked_whiten` at every position: the masked positions hold what verl's do).
* `compute_value_loss(vpreds, returns, values, response_mask, cliprange_value, loss_agg_mode="token-mean",
  dp_size=1, batch_num_tokens=None, global_batch_size=None, loss_scale_factor=None) -> (vf_loss, vf_clipfrac)`:
  0.5·`agg_loss` of `trl_ext.losses.value.clipped_value_terms`, clipfrac = masked mean of [L2 > L1].

How the policy losses reuse trl_ext's: every verl aggregation is a weighted token sum Σ w·L (`agg_weights`), and
the ppo / gspo / sapo / cispo per-token losses are positively homogeneous in the advantage (L(c·A) = c·L(A) for
c ≥ 0: the clip side and SAPO's τ depend only on the sign of A). So the trl_ext loss is called with advantages
A·w·rollout_is_weights and summed (`token-mean` over a window whose count + ε is 1), which is verl's aggregate of verl's
rollout-weighted loss, gradient included. The metrics are computed here with verl's formulas.

Where the GAE and the value loss differ from verl: NaN / inf at masked positions propagate in verl (multiplied by 0)
and do not here; a negative `cliprange_value` is a ValueError (verl clips to an empty interval).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..advantages.gae import gae_advantage_return
from ..losses import EPS, get_kl_fn, get_policy_loss  # EPS = verl's masked_mean / seq-mean-token-mean ε
from ..losses.value import check_cliprange_value, clipped_value_terms

__all__ = [
    "AGG_LOSS_MODES",
    "KL_PENALTIES",
    "POLICY_LOSS_REGISTRY",
    "agg_loss",
    "agg_weights",
    "compute_gae_advantage_return",
    "compute_policy_loss",
    "compute_policy_loss_cispo",
    "compute_policy_loss_gspo",
    "compute_policy_loss_sapo",
    "compute_policy_loss_vanilla",
    "compute_value_loss",
    "get_policy_loss_fn",
    "kl_penalty",
    "register_policy_loss",
]

AGG_LOSS_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


# --------------------------------------------------------------------------------------------------
# agg_loss
# --------------------------------------------------------------------------------------------------


def agg_weights(
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    dp_size: int = 1,
    batch_num_tokens: int | torch.Tensor | None = None,
    global_batch_size: int | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """The per-token weights w (`[B, T]`, 0 at masked positions) with `agg_loss(L, ...) = Σ w·L`, as in verl 0.9.

    With m the mask, n_i = Σ_t m_it the row's token count, D = `dp_size`:

    =========================== ======================================================================
    `token-mean`                m · D / N,   N = `batch_num_tokens` (default Σ m)
    `token-sum`                 m · D
    `seq-mean-token-sum`        m · D / G,   G = `global_batch_size` (default: rows with n_i > 0)
    `seq-mean-token-mean`       m / (n_i + 1e-8) · D / G
    `seq-mean-token-sum-norm`   m · D / G / S,   S = `loss_scale_factor` (default T)
    =========================== ======================================================================

    As in verl, the global counts are required when `dp_size > 1` (ValueError otherwise).
    """
    if loss_agg_mode not in AGG_LOSS_MODES:
        raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode!r}; expected one of {list(AGG_LOSS_MODES)}")
    dtype = loss_mask.dtype if loss_mask.dtype.is_floating_point else torch.float32
    mask = loss_mask.to(dtype)
    if loss_agg_mode == "token-sum":
        return mask * dp_size
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            if dp_size > 1:
                raise ValueError("(global) batch_num_tokens is required when dp_size > 1")
            batch_num_tokens = mask.sum()
        return mask / batch_num_tokens * dp_size
    row_tokens = mask.sum(-1, keepdim=True)
    if global_batch_size is None:
        if dp_size > 1:
            raise ValueError("global_batch_size is required when dp_size > 1")
        global_batch_size = (row_tokens > 0).sum()
    if loss_agg_mode == "seq-mean-token-mean":
        mask = mask / (row_tokens + EPS)
    weights = mask / global_batch_size * dp_size
    if loss_agg_mode == "seq-mean-token-sum-norm":
        weights = weights / (loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
    return weights


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    dp_size: int = 1,
    batch_num_tokens: int | torch.Tensor | None = None,
    global_batch_size: int | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """verl 0.9's `agg_loss`: Σ w·`loss_mat` over the valid positions, w from `agg_weights` (see there).

    Positions where `loss_mask` is 0 are selected away (NaN there does not propagate). One deviation: a micro-batch
    with no valid token and no global counts gives 0 (verl: 0/0 = NaN)."""
    weights = agg_weights(loss_mask, loss_agg_mode, dp_size, batch_num_tokens, global_batch_size, loss_scale_factor)
    return torch.where(loss_mask.bool(), loss_mat * weights, 0).sum()


# --------------------------------------------------------------------------------------------------
# Policy losses
# --------------------------------------------------------------------------------------------------

PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, Any]]]

POLICY_LOSS_REGISTRY: dict[str, PolicyLossFn] = {}


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator registering a policy loss `fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
    config, rollout_is_weights) -> (loss, metrics)` under `name` (as verl's)."""

    def decorator(func: PolicyLossFn) -> PolicyLossFn:
        POLICY_LOSS_REGISTRY[name] = func
        return func

    return decorator


def get_policy_loss_fn(name: str) -> PolicyLossFn:
    """The registered policy loss `name`; ValueError listing the registered names otherwise."""
    if name not in POLICY_LOSS_REGISTRY:
        raise ValueError(f"Unsupported loss mode: {name}. Supported modes are: {list(POLICY_LOSS_REGISTRY)}")
    return POLICY_LOSS_REGISTRY[name]


_REQUIRED = object()


def _get(config: Any, key: str, default: Any = _REQUIRED) -> Any:
    """`config.key` of an object or `config[key]` of a mapping (verl's ActorConfig and DictConfig are both)."""
    if config is None:
        raise ValueError("config is required (verl's ActorConfig, a DictConfig or a dict)")
    value = config.get(key, default) if isinstance(config, Mapping) else getattr(config, key, default)
    if value is _REQUIRED:
        raise ValueError(f"config has no {key!r}")
    return value


def _clip_ratios(config: Any) -> tuple[float, float]:
    clip_ratio = _get(config, "clip_ratio", None)
    low = _get(config, "clip_ratio_low", None)
    high = _get(config, "clip_ratio_high", None)
    return (clip_ratio if low is None else low), (clip_ratio if high is None else high)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's `masked_mean`: Σ m·x / (Σ m + 1e-8)."""
    return (torch.where(mask.bool(), values, 0) * mask).sum() / (mask.sum() + EPS)


def _weighted_loss(
    name: str,
    loss_args: dict[str, Any],
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    global_batch_info: Mapping[str, Any],
    rollout_is_weights: torch.Tensor | None,
) -> torch.Tensor:
    """verl's `agg_loss(L · rollout_is_weights, response_mask, loss_agg_mode, **global_batch_info)` with L the
    per-token loss of the trl_ext loss `name`: that loss summed over advantages A·w·rollout_is_weights (see the
    module docstring)."""
    weights = agg_weights(response_mask, loss_agg_mode, **global_batch_info)
    if rollout_is_weights is not None:
        if bool((rollout_is_weights < 0).any()):
            raise ValueError(f"{name}: rollout_is_weights must be >= 0")
        weights = weights * rollout_is_weights
    with warnings.catch_warnings():  # gspo warns about any mode but seq-mean-token-mean
        warnings.simplefilter("ignore")
        loss_fn = get_policy_loss(name, loss_agg_mode="token-mean", **loss_args)
    loss, _ = loss_fn(
        logprob=log_prob,
        old_logprob=old_log_prob,
        action_mask=response_mask.bool(),
        advantages=advantages * weights.to(advantages.dtype),
        global_valid_toks=1.0 - EPS,  # token-mean divides by (count + ε) = 1: the plain weighted sum
    )
    return loss


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
    pg_loss = _weighted_loss(
        "ppo", loss_args, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, global_batch_info,
        rollout_is_weights,
    )  # fmt: skip
    with torch.no_grad():
        log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0)
        ratio = torch.exp(log_ratio)
        negative = advantages < 0
        clipped = torch.where(negative, ratio < 1 - cliprange_low, ratio > 1 + cliprange_high) & (advantages != 0)
        pg_clipfrac = _masked_mean(clipped.float(), response_mask)
        pg_clipfrac_lower = _masked_mean((negative & (ratio > clip_ratio_c)).float(), response_mask)
        ppo_kl = _masked_mean(-log_ratio, response_mask)
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
    additionally min(L, −A·c) with c = `clip_ratio_c`. `cliprange_low` / `cliprange_high` default to
    `cliprange`."""
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
    low, high = _clip_ratios(config)
    pg_loss, *metrics = _vanilla(
        old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, low, high,
        _get(config, "clip_ratio_c", 3.0), _get(config, "global_batch_info", {}), rollout_is_weights,
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
    low, high = _clip_ratios(config)
    pg_loss = _weighted_loss(
        "gspo", {"clip_range_low": low, "clip_range_high": high}, old_log_prob, log_prob, advantages, response_mask,
        loss_agg_mode, _get(config, "global_batch_info", {}), rollout_is_weights,
    )  # fmt: skip
    with torch.no_grad():
        log_ratio = log_prob - old_log_prob
        seq_log_ratio = (log_ratio * response_mask).sum(-1) / response_mask.sum(-1).clamp(min=1)
        ratio = torch.exp(seq_log_ratio.unsqueeze(-1).clamp(max=10.0))
        clipped = torch.where(advantages < 0, ratio < 1 - low, ratio > 1 + high) & (advantages != 0)
        metrics = _metrics(
            _masked_mean(clipped.float(), response_mask), _masked_mean(-log_ratio, response_mask), pg_loss.new_zeros(())
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
    loss_args = {"tau_pos": _get(config, "tau_pos"), "tau_neg": _get(config, "tau_neg")}
    pg_loss = _weighted_loss(
        "sapo", loss_args, old_log_prob, log_prob, advantages, response_mask, "seq-mean-token-mean",
        _get(config, "global_batch_info", {}), rollout_is_weights,
    )  # fmt: skip
    with torch.no_grad():
        ppo_kl = _masked_mean(-(log_prob - old_log_prob).clamp(-20.0, 20.0), response_mask)
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
    low, high = _clip_ratios(config)
    pg_loss = _weighted_loss(
        "cispo", {"clip_range_low": low, "clip_range_high": high}, old_log_prob, log_prob, advantages, response_mask,
        loss_agg_mode, _get(config, "global_batch_info", {}), rollout_is_weights,
    )  # fmt: skip
    with torch.no_grad():
        log_ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0)
        ratio = torch.exp(log_ratio)
        clipped = (ratio < 1 - low) | (ratio > 1 + high)
        metrics = _metrics(
            _masked_mean(clipped.float(), response_mask), _masked_mean(-log_ratio, response_mask), pg_loss.new_zeros(())
        )
    return pg_loss, metrics


# --------------------------------------------------------------------------------------------------
# KL penalty
# --------------------------------------------------------------------------------------------------

_KL_ESTIMATORS = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "low_var_kl"}
_KL_ESTIMATORS["k3"] = "low_var_kl"  # verl's k3 is the clamped low_var_kl (trl_ext's k3 is unclamped)

KL_PENALTIES = (*_KL_ESTIMATORS, *(f"{name}+" for name in _KL_ESTIMATORS))


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """verl's per-token KL estimate of KL(π ‖ π_ref) (unmasked, `[B, T]`).

    `kl`/`k1`: lp − ref; `abs`: |lp − ref|; `mse`/`k2`: ½(lp − ref)²; `low_var_kl`/`k3`: clamp(eᵈ − d − 1, ±10)
    with d = clamp(ref − lp, ±20). A trailing `+` (e.g. `k3+`) keeps the estimator's value but takes the gradient
    of k2 (straight-through), whose expected gradient is the KL's.
    """
    base = kl_penalty[:-1] if kl_penalty.endswith("+") else kl_penalty
    if base == "full":
        raise NotImplementedError("kl_penalty='full' needs the full vocabulary distributions (not implemented)")
    if base not in _KL_ESTIMATORS:
        raise ValueError(f"Unknown kl_penalty {kl_penalty!r}; expected one of {list(KL_PENALTIES)}")
    forward = get_kl_fn(_KL_ESTIMATORS[base]).calculate_kl(logprob, ref_logprob)
    if not kl_penalty.endswith("+"):
        return forward
    backward = 0.5 * (logprob - ref_logprob).square()
    return backward - backward.detach() + forward.detach()


# --------------------------------------------------------------------------------------------------
# GAE and the value loss
# --------------------------------------------------------------------------------------------------


def _masked_whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's `masked_whiten(values, mask)` (shift_mean=True) at EVERY position: (x − mean)·rsqrt(var + 1e-8), mean
    and unbiased variance over `mask` (ε 1e-8 in the means); fewer than two valid positions is a ValueError."""
    count = mask.sum()
    if count == 0:
        raise ValueError("At least one element in the mask has to be 1.")
    if count == 1:
        raise ValueError("The sum of the mask is one, which can cause a division by zero.")
    mean = _masked_mean(values, mask)
    var = _masked_mean((values - mean) ** 2, mask) * (count / (count - 1))
    return (values - mean) * torch.rsqrt(var + 1e-8)


def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float | torch.Tensor,
    lam: float | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's GAE: `(advantages, returns)`, both `[B, T]`, without gradients.

    Backwards over the positions, δ_t = r_t + γ·V_next − V_t and A_t = δ_t + γλ·A_{t+1}; at a position where
    `response_mask` is 0 (an observation token) A and V_next carry through unchanged (verl since PR #2337;
    Trinity-RFT 0.6.0's `ppo` does not skip, see `trl_ext.advantages.gae`). returns = A + values, then A is
    whitened over `response_mask` (verl's `masked_whiten`, which also fills the masked positions)."""
    with torch.no_grad():
        mask = response_mask.bool()
        advantages, returns = gae_advantage_return(token_level_rewards, values, mask, gamma, lam, skip_masked=True)
        return _masked_whiten(advantages, response_mask), returns


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    dp_size: int = 1,
    batch_num_tokens: int | torch.Tensor | None = None,
    global_batch_size: int | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl 0.9's clipped value loss: `(vf_loss, vf_clipfrac)` (tensors).

    vf_loss = 0.5·`agg_loss`(max((V − R)², (clip(V, V_old − c, V_old + c) − R)²), response_mask, loss_agg_mode,
    dp_size, batch_num_tokens, global_batch_size, loss_scale_factor); vf_clipfrac = Σ m·[clipped term > unclipped] /
    (Σ m + 1e-8). `cliprange_value` c must be >= 0."""
    c = check_cliprange_value("compute_value_loss", cliprange_value)
    mask = response_mask.bool()
    selected = [torch.where(mask, x, 0) for x in (vpreds, values, returns)]  # NaN-safe gradient
    per_token, clipped = clipped_value_terms(*selected, c)
    vf_loss = 0.5 * agg_loss(
        per_token, response_mask, loss_agg_mode, dp_size, batch_num_tokens, global_batch_size, loss_scale_factor
    )
    vf_clipfrac = _masked_mean(clipped.float(), response_mask)
    return vf_loss, vf_clipfrac
