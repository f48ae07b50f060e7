"""verl's advantage-estimator registry (`AdvantageEstimator`, `ADV_ESTIMATOR_REGISTRY`, `register_adv_est`,
`get_adv_estimator_fn`) and the input checks and group mapping the estimators share.

`trl_ext.compat.verl` stands in for `verl.trainer.ppo.core_algos`, so the registry an assignment
`core_algos.ADV_ESTIMATOR_REGISTRY = {...}` installs (verl's own tests do that) is the one `register_adv_est` and
`get_adv_estimator_fn` use: both read `ADV_ESTIMATOR_REGISTRY` off the `trl_ext.compat.verl` package (this module's
dict until the package is imported, or when the package's attribute is deleted).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from enum import Enum
from typing import Any

import torch

from ...advantages.base import group_index

__all__ = [
    "ADV_ESTIMATOR_REGISTRY",
    "AdvantageEstimator",
    "get_adv_estimator_fn",
    "group_ids",
    "register_adv_est",
    "require_inputs",
]


class AdvantageEstimator(str, Enum):
    """verl 0.9.1's estimator names (a `str` Enum: `AdvantageEstimator.GRPO == "grpo"`)."""

    GAE = "gae"
    GRPO = "grpo"
    REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    REMAX = "remax"
    RLOO = "rloo"
    OPO = "opo"
    GRPO_PASSK = "grpo_passk"
    GPG = "gpg"
    RLOO_VECTORIZED = "rloo_vectorized"
    GRPO_VECTORIZED = "grpo_vectorized"
    OPTIMAL_TOKEN_BASELINE = "optimal_token_baseline"
    TIR_OPTIMAL_TOKEN_BASELINE = "tir_optimal_token_baseline"
    GDPO = "gdpo"


ADV_ESTIMATOR_REGISTRY: dict[str, Any] = {}


def _registry() -> dict[str, Any]:
    """The registry in force: the package's `ADV_ESTIMATOR_REGISTRY` (which an assignment may have replaced)."""
    package = sys.modules.get(__package__)
    return getattr(package, "ADV_ESTIMATOR_REGISTRY", ADV_ESTIMATOR_REGISTRY)


def _name(name_or_enum: str | Enum) -> Any:
    return name_or_enum.value if isinstance(name_or_enum, Enum) else name_or_enum


def register_adv_est(name_or_enum: str | AdvantageEstimator) -> Callable[[Callable], Callable]:
    """Decorator registering an advantage estimator under a name or an Enum member's value (verl's).

    Args:
        name_or_enum: The name, or an Enum member (its `value` is the name).

    Returns:
        The decorator, which registers the function and returns it unchanged.

    Raises:
        ValueError: (when decorating) another function is already registered under the name; registering the same
            function again is fine.
    """

    def decorator(fn: Callable) -> Callable:
        name = _name(name_or_enum)
        registry = _registry()
        if name in registry and registry[name] != fn:
            raise ValueError(f"Adv estimator {name} has already been registered: {registry[name]} vs {fn}")
        registry[name] = fn
        return fn

    return decorator


def get_adv_estimator_fn(name_or_enum: str | AdvantageEstimator) -> Callable:
    """The estimator registered under a name or an Enum member's value (case-sensitive).

    Raises:
        ValueError: `Unknown advantage estimator simply: {name}` (verl's message).
    """
    name = _name(name_or_enum)
    registry = _registry()
    if name not in registry:
        raise ValueError(f"Unknown advantage estimator simply: {name}")
    return registry[name]


def require_inputs(owner: str, **inputs: Any) -> None:
    """A TypeError naming `owner` and every input that is None (an estimator called without what it needs)."""
    missing = [name for name, value in inputs.items() if value is None]
    if missing:
        raise TypeError(f"{owner}: missing required input{'s' if len(missing) > 1 else ''} {', '.join(missing)}")


def group_ids(owner: str, index: Any, n: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """`(group [N] in 0..G-1, G)` from verl's `index`: a numpy array of uids / ints, a list, or an integer tensor
    (its values, not its elements' identities, define the groups). A ValueError names `owner` and `index`."""
    if index is None:
        raise TypeError(f"{owner}: missing required input index (the group id of each row, verl's uid)")
    if not isinstance(index, torch.Tensor) and hasattr(index, "ndim") and hasattr(index, "tolist"):  # numpy
        if index.ndim != 1:
            raise ValueError(f"{owner}: index must be 1-D [N], got shape {index.shape}")
        index = index.tolist()  # numpy scalars -> Python values (equal ids hash equal)
    return group_index(owner, index, n, device, name="index")
