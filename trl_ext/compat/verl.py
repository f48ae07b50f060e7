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
* The same registry also holds `gpg` (metrics `{}`), `geo_mean` (GMPO: verl's three metrics; `loss_agg_mode` and
  `global_batch_info` are ignored, as in verl: the mean over the micro-batch's rows) and `dro` (metrics
  `{"actor/ppo_kl": float}`; reads `policy_loss.dro_beta`, which must be > 0).
* And `clip_cov` / `kl_cov` (arXiv 2505.22617; read `policy_loss.clip_cov_ratio`, `clip_cov_lb`, `clip_cov_ub` /
  `policy_loss.kl_cov_ratio`, `ppo_kl_coef`; metrics `{"actor/pg_clipfrac", "actor/ppo_kl"}` / `{"actor/ppo_kl"}`, the
  latter the mean |lp − old|; clip_cov's random draw uses torch's global CPU generator, as verl's) and `dppo_tv` /
  `dppo_kl` (arXiv 2602.04879; `clip_ratio*` are divergence thresholds, `clip_ratio_c` the importance-ratio
  truncation, default 20.0; verl's three metrics).
* `kl_penalty(logprob, ref_logprob, kl_penalty)`: `kl`/`k1`, `abs`, `mse`/`k2`, `low_var_kl`/`k3` and their
  straight-through `+` variants (value of the estimator, gradient of k2).
* `compute_gpg_outcome_advantage(token_level_rewards, response_mask, index, epsilon=1e-6, f_norm=1.0, alpha=1.0,
  config=None) -> (advantages, returns)`: verl's GPG advantage (trl_ext's `gpg` estimator; `epsilon` and `alpha` are
  unused, as in verl).
* `compute_gae_advantage_return(token_level_rewards, values, response_mask, gamma, lam) -> (advantages, returns)`:
  verl's GAE (`trl_ext.advantages.gae.gae_advantage_return` with verl's skipping of masked positions, then verl's
  `masked_whiten` at every position: the masked positions hold what verl's do).
* `compute_value_loss(vpreds, returns, values, response_mask, cliprange_value, loss_agg_mode="token-mean",
  dp_size=1, batch_num_tokens=None, global_batch_size=None, loss_scale_factor=None) -> (vf_loss, vf_clipfrac)`:
  0.5·`agg_loss` of `trl_ext.losses.value.clipped_value_terms`, clipfrac = masked mean of [L2 > L1].

How the policy losses reuse trl_ext's: every verl aggregation is a weighted token sum Σ w·L (`agg_weights`), and
the ppo / gspo / sapo / cispo per-token losses are positively homogeneous in the advantage (L(c·A) = c·L(A) for
c ≥ 0: the clip side and SAPO's τ depend only on the sign of A). So the trl_ext loss is called with advantages
A·w·rollout_is_weights and summed (`token-sum`), which is verl's aggregate of verl's rollout-weighted loss, gradient
included; the metrics are computed here with verl's formulas. The losses that are not homogeneous in the advantage
(dro's ½β·Δ² term, the covariance selection of clip_cov / kl_cov; gpg and dppo_tv / dppo_kl for symmetry) read an
`importance_sampling_ratio` and take the weights w·rollout_is_weights there instead: Σ w·rollout_is_weights·L again
(`_summed_loss` chooses by what the loss reads).
`geo_mean` aggregates per sequence (the rollout weights by their per-row geometric mean), as verl does.

Where the GAE and the value loss differ from verl: NaN / inf at masked positions propagate in verl (multiplied by 0)
and do not here; a negative `cliprange_value` is a ValueError (verl clips to an empty interval).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..advantages.gae import gae_advantage_return
from ..advantages.gpg import GPGAdvantage
from ..losses import EPS, get_kl_fn, get_policy_loss  # EPS = verl's masked_mean / seq-mean-token-mean ε
from ..losses.value import check_cliprange_value, clipped_value_terms

__all__ = [
    "AGG_LOSS_MODES",
    "KL_PENALTIES",
    "POLICY_LOSS_REGISTRY",
    "agg_loss",
    "agg_weights",
    "compute_gae_advantage_return",
    "compute_gpg_outcome_advantage",
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

    | `loss_agg_mode`           | w                                                                     |
    | ------------------------- | --------------------------------------------------------------------- |
    | `token-mean`              | m · D / N,   N = `batch_num_tokens` (default Σ m)                     |
    | `token-sum`               | m · D                                                                 |
    | `seq-mean-token-sum`      | m · D / G,   G = `global_batch_size` (default: rows with n_i > 0)     |
    | `seq-mean-token-mean`     | m / (n_i + 1e-8) · D / G                                              |
    | `seq-mean-token-sum-norm` | m · D / G / S,   S = `loss_scale_factor` (default T)                   |

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
    with no valid token and no global counts gives 0 (verl: 0/0 = NaN).

    Args:
        loss_mat: `[B, T]` per-token loss.
        loss_mask: `[B, T]` mask, 0/1 or bool.
        loss_agg_mode: One of `AGG_LOSS_MODES`.
        dp_size: The number of data-parallel ranks D.
        batch_num_tokens: The global batch's token count N (`token-mean`).
        global_batch_size: The global batch's sequence count G (the `seq-mean-*` modes).
        loss_scale_factor: S of `seq-mean-token-sum-norm` (default T).

    Returns:
        The 0-dim aggregate Σ w·`loss_mat`.

    Raises:
        ValueError: An unknown `loss_agg_mode`, or `dp_size > 1` without the global count the mode needs.
    """
    weights = agg_weights(loss_mask, loss_agg_mode, dp_size, batch_num_tokens, global_batch_size, loss_scale_factor)
    return torch.where(loss_mask.bool(), loss_mat * weights, 0).sum()


# --------------------------------------------------------------------------------------------------
# Policy losses
# --------------------------------------------------------------------------------------------------

PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, Any]]]

POLICY_LOSS_REGISTRY: dict[str, PolicyLossFn] = {}


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator registering a policy loss `fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
    config, rollout_is_weights) -> (loss, metrics)` under `name` (as verl's).

    Args:
        name: The name `get_policy_loss_fn` finds it by (a registered name is replaced).

    Returns:
        The decorator, which registers the function and returns it unchanged.
    """

    def decorator(func: PolicyLossFn) -> PolicyLossFn:
        POLICY_LOSS_REGISTRY[name] = func
        return func

    return decorator


def get_policy_loss_fn(name: str) -> PolicyLossFn:
    """The registered policy loss `name`.

    Args:
        name: A `POLICY_LOSS_REGISTRY` name: `vanilla`, `gspo`, `sapo`, `cispo`, `gpg`, `geo_mean`, `dro`,
            `clip_cov`, `kl_cov`, `dppo_tv`, `dppo_kl`, or one added with `register_policy_loss`.

    Returns:
        `fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights) ->
            (pg_loss, metrics)`, metrics a dict of Python floats (see the module docstring).

    Raises:
        ValueError: An unknown name (listing the registered ones).
    """
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
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """verl's `agg_loss(L · rollout_is_weights, response_mask, loss_agg_mode, **global_batch_info)` with L the
    per-token loss of the trl_ext loss `name`, and that loss's metrics: the loss summed (`token-sum`) with the weights
    w·rollout_is_weights as its `importance_sampling_ratio` where it reads one, else folded into the advantages (the
    losses positively homogeneous in A, so the weights must be >= 0; see the module docstring)."""
    weights = agg_weights(response_mask, loss_agg_mode, **global_batch_info)
    if rollout_is_weights is not None:
        weights = weights * rollout_is_weights
    with warnings.catch_warnings():  # gspo warns about any mode but seq-mean-token-mean
        warnings.simplefilter("ignore")
        loss_fn = get_policy_loss(name, loss_agg_mode="token-sum", **loss_args)
    batch = {"logprob": log_prob, "old_logprob": old_log_prob, "action_mask": response_mask.bool()}
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
    pg_loss, _ = _summed_loss(
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
    pg_loss, _ = _summed_loss(
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
    pg_loss, _ = _summed_loss(
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
        _get(config, "global_batch_info", {}), rollout_is_weights,
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
    low, high = _clip_ratios(config)
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
    policy_loss = _get(config, "policy_loss", None)
    beta = None if policy_loss is None else _get(policy_loss, "dro_beta", None)
    if beta is None or (isinstance(beta, (int, float)) and not isinstance(beta, bool) and beta <= 0):
        raise ValueError("policy_loss.dro_beta must be a positive value when using DRO")
    pg_loss, metrics = _summed_loss(
        "dro", {"dro_beta": beta}, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
        _get(config, "global_batch_info", {}), rollout_is_weights,
    )  # fmt: skip
    return pg_loss, {"actor/ppo_kl": metrics["ppo_kl"].item()}


def _policy_loss_options(config: Any, name: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The `config.policy_loss` keys of `defaults`, each falling back to its default when None (as verl reads them);
    `policy_loss` itself is required."""
    policy_loss = _get(config, "policy_loss", None)
    if policy_loss is None:
        raise ValueError(f"{name}: config.policy_loss is required (it holds {', '.join(defaults)})")
    options = {key: _get(policy_loss, key, None) for key in defaults}
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
    low, high = _clip_ratios(config)
    options = _policy_loss_options(
        config, "clip_cov", {"clip_cov_ratio": 0.0002, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0}
    )
    pg_loss, metrics = _summed_loss(
        "clip_cov", {"clip_range_low": low, "clip_range_high": high, **options}, old_log_prob, log_prob, advantages,
        response_mask, loss_agg_mode, _get(config, "global_batch_info", {}), rollout_is_weights,
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
        _get(config, "global_batch_info", {}), rollout_is_weights,
    )  # fmt: skip
    return pg_loss, {"actor/ppo_kl": metrics["ppo_kl_abs"].item()}


def _dppo(name, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights):
    """DPPO-Binary-TV / -KL: verl's `clip_ratio*` are the divergence thresholds, `clip_ratio_c` (default 20.0, as
    verl's `config.get`) the truncation of the importance ratio."""
    low, high = _clip_ratios(config)
    loss_args = {"clip_range_low": low, "clip_range_high": high, "clip_ratio_c": _get(config, "clip_ratio_c", 20.0)}
    pg_loss, metrics = _summed_loss(
        name, loss_args, old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
        _get(config, "global_batch_info", {}), rollout_is_weights,
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

    Args:
        logprob: `[B, T]` log-probs of the policy.
        ref_logprob: `[B, T]` log-probs of the reference model.
        kl_penalty: The estimator, one of `KL_PENALTIES`.

    Returns:
        The `[B, T]` per-token estimate.

    Raises:
        ValueError: An unknown estimator (listing `KL_PENALTIES`).
        NotImplementedError: `full`, which needs the full vocabulary distributions.
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


def compute_gpg_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    f_norm: float = 1.0,
    alpha: float = 1.0,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's GPG advantage: `(advantages, returns)`, the same `[B, T]` tensor twice, without gradients.

    R = the row's summed token rewards, α = B / max(#{R ≠ 0}, 1) over the batch, A = α·(R − group mean)/`f_norm` (a
    group of one: mean 0) times `response_mask` (trl_ext's `gpg` estimator). `index` holds the group ids (verl: a
    numpy array). As in verl, `epsilon`, `alpha` and `config` are accepted and unused. Deviations: non-finite rewards
    and `f_norm` <= 0 are ValueErrors."""
    with torch.no_grad():
        scores = GPGAdvantage(f_norm=f_norm).compute(token_level_rewards, index, response_mask=response_mask)
        advantages = scores.advantages
        if response_mask.is_floating_point():  # verl multiplies by the mask: its dtype takes part in the promotion
            advantages = advantages.to(torch.promote_types(advantages.dtype, response_mask.dtype))
        return advantages, advantages


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
