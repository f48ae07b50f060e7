"""verl's KL machinery: the per-token estimators (`kl_penalty_forward`, `kl_penalty` with the straight-through `+`
variants), the in-reward penalty (`compute_rewards`) and its coefficient controllers (`AdaptiveKLController`,
`FixedKLController`, `get_kl_controller`), over trl_ext's `get_kl_fn` estimators and adaptive controller.

The adaptive controller (Ziegler et al. 2019, arXiv 1909.08593) steps, once per batch of n sequences,

    β ← β · (1 + clip(KL/target − 1, −0.2, 0.2) · n/horizon)

(`trl_ext.losses.kl.KLFn.update_kl_coef`). Deviations: an unknown controller type or a `horizon` <= 0 is a ValueError
(verl: NotImplementedError / AssertionError), and `target_kl` must be > 0 (verl divides by it).
"""

from __future__ import annotations

from typing import Any

import torch

from ...losses import get_kl_fn
from .registry import config_value

__all__ = [
    "KL_CONTROLLER_TYPES",
    "KL_PENALTIES",
    "AdaptiveKLController",
    "FixedKLController",
    "compute_rewards",
    "get_kl_controller",
    "kl_penalty",
    "kl_penalty_forward",
]

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
    forward = kl_penalty_forward(logprob, ref_logprob, kl_penalty.removesuffix("+"))
    if not kl_penalty.endswith("+"):
        return forward
    backward = 0.5 * (logprob - ref_logprob).square()
    return backward - backward.detach() + forward.detach()


def kl_penalty_forward(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """verl's estimator without the `+` handling: `kl`/`k1`, `abs`, `mse`/`k2`, `low_var_kl`/`k3` (formulas as in
    `kl_penalty`; trl_ext's `get_kl_fn(...).calculate_kl`), `[B, T]`, unmasked.

    Raises:
        ValueError: An unknown estimator, a `+` one included (listing the valid names).
        NotImplementedError: `full`, which needs the full vocabulary distributions.
    """
    if kl_penalty == "full":
        raise NotImplementedError("kl_penalty='full' needs the full vocabulary distributions (not implemented)")
    if kl_penalty not in _KL_ESTIMATORS:
        raise ValueError(f"Unknown kl_penalty {kl_penalty!r}; expected one of {list(KL_PENALTIES)}")
    return get_kl_fn(_KL_ESTIMATORS[kl_penalty]).calculate_kl(logprob, ref_logprob)


def compute_rewards(
    token_level_scores: torch.Tensor, old_log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_ratio: float
) -> torch.Tensor:
    """verl's in-reward KL penalty: scores − β·(old − ref), the k1 estimate of the sampling policy's KL to the
    reference (β = `kl_ratio`), `[B, T]`, unmasked."""
    return token_level_scores - kl_penalty_forward(old_log_prob, ref_log_prob, "k1") * kl_ratio


class AdaptiveKLController:
    """verl's adaptive KL coefficient (Ziegler et al. 2019): `value` starts at `init_kl_coef`; `update(current_kl,
    n_steps)` multiplies it by 1 + clip(current_kl/target_kl − 1, ±0.2)·n_steps/horizon (trl_ext's controller).

    Raises:
        ValueError: `init_kl_coef` < 0, `target_kl` <= 0 or `horizon` not an integer > 0.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int) -> None:
        self._kl = get_kl_fn("k1", kl_coef=init_kl_coef, adaptive=True, target_kl=target_kl, horizon=horizon)
        self.target = target_kl
        self.horizon = horizon

    @property
    def value(self) -> float:
        """The current coefficient β."""
        return self._kl.kl_coef

    @value.setter
    def value(self, value: float) -> None:
        self._kl.kl_coef = value

    def update(self, current_kl: float | torch.Tensor, n_steps: int) -> None:
        """One controller step from the batch's mean KL and its number of sequences."""
        self._kl.update_kl_coef(current_kl, n_steps)


class FixedKLController:
    """verl's fixed KL coefficient: `value` = `kl_coef`; `update` does nothing."""

    def __init__(self, kl_coef: float) -> None:
        self.value = kl_coef

    def update(self, current_kl: float | torch.Tensor, n_steps: int) -> None:
        """No-op."""


KL_CONTROLLER_TYPES = ("fixed", "adaptive")


def get_kl_controller(kl_ctrl: Any) -> FixedKLController | AdaptiveKLController:
    """The controller of verl's `KLControlConfig` (an object or a mapping): `type` "fixed" (reads `kl_coef`) or
    "adaptive" (reads `kl_coef`, `target_kl`, `horizon`).

    Raises:
        ValueError: Another `type`, or an adaptive `horizon` <= 0.
    """
    kind = config_value(kl_ctrl, "type")
    if kind == "fixed":
        return FixedKLController(kl_coef=config_value(kl_ctrl, "kl_coef"))
    if kind == "adaptive":
        horizon = config_value(kl_ctrl, "horizon")
        if not horizon > 0:
            raise ValueError(f"get_kl_controller: kl_ctrl.horizon must be larger than 0. Got {horizon}")
        return AdaptiveKLController(
            init_kl_coef=config_value(kl_ctrl, "kl_coef"),
            target_kl=config_value(kl_ctrl, "target_kl"),
            horizon=horizon,
        )
    raise ValueError(f"get_kl_controller: kl_ctrl.type must be one of {list(KL_CONTROLLER_TYPES)}, got {kind!r}")
