"""verl's policy-loss registry (`register_policy_loss`, `get_policy_loss_fn`, `POLICY_LOSS_REGISTRY`) and the
reading of verl's actor config (an object or a mapping, as verl's `ActorConfig` and `DictConfig` are)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = [
    "POLICY_LOSS_REGISTRY",
    "PolicyLossFn",
    "clip_ratios",
    "config_value",
    "get_policy_loss_fn",
    "register_policy_loss",
]

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
            (pg_loss, metrics)`, metrics a dict of Python floats (see `trl_ext.compat.verl`).

    Raises:
        ValueError: An unknown name (listing the registered ones).
    """
    if name not in POLICY_LOSS_REGISTRY:
        raise ValueError(f"Unsupported loss mode: {name}. Supported modes are: {list(POLICY_LOSS_REGISTRY)}")
    return POLICY_LOSS_REGISTRY[name]


_REQUIRED = object()


def config_value(config: Any, key: str, default: Any = _REQUIRED) -> Any:
    """`config.key` of an object or `config[key]` of a mapping (verl's ActorConfig and DictConfig are both)."""
    if config is None:
        raise ValueError("config is required (verl's ActorConfig, a DictConfig or a dict)")
    value = config.get(key, default) if isinstance(config, Mapping) else getattr(config, key, default)
    if value is _REQUIRED:
        raise ValueError(f"config has no {key!r}")
    return value


def clip_ratios(config: Any) -> tuple[float, float]:
    clip_ratio = config_value(config, "clip_ratio", None)
    low = config_value(config, "clip_ratio_low", None)
    high = config_value(config, "clip_ratio_high", None)
    return (clip_ratio if low is None else low), (clip_ratio if high is None else high)
