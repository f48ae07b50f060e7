"""verl's `kl_penalty`: the per-token KL estimators under verl's names, with the straight-through `+` variants."""

from __future__ import annotations

import torch

from ...losses import get_kl_fn

__all__ = ["KL_PENALTIES", "kl_penalty"]

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
