"""A*-PO's optimal value V*(x): the first, offline stage of the `a2po` algorithm (TRL 1.16's `trl.experimental.a2po`).

Paper: Brantley et al. 2025, "Accelerating RL for LLM Reasoning with Optimal Advantage Regression" (arXiv
2505.20686). The optimal value of the KL-regularized objective with temperature β₁ is V*(x) = β₁·log E_{y∼π_ref}[
exp(r(x, y)/β₁)]. A*-PO estimates it once per prompt from N completions y_1 … y_N of the reference policy:

    V*(x) = β₁·log( (1/N)·Σ_i exp(r(x, y_i)/β₁) ) = β₁·(logsumexp_i(r_i/β₁) − log N)

computed with `logsumexp` (no overflow for any β₁ > 0), exactly as TRL's `A2POTrainer._estimate_optimal_values`
does. It is a soft maximum of the sampled rewards: the mean reward as β₁ → ∞, the largest as β₁ → 0, and between
the two for every β₁ (for binary rewards with a share p of successes, β₁·log(1 + p·(e^{1/β₁} − 1))). The advantage
the second stage regresses on is A(x, y) = r(x, y) − V*(x) (`trl_ext.losses.a2po`).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch

from .base import as_float_tensor, nonfinite_message


def optimal_value(rewards: Any, beta1: float) -> torch.Tensor:
    """A*-PO's estimate of V*(x) per prompt from the rewards of N reference completions each (module docstring).

    Args:
        rewards: `[P, N]`, row p the rewards of prompt p's N completions (integers and bools become float32).
        beta1: β₁ > 0, the KL temperature of the first stage (TRL's `beta1`, the paper's 0.5).

    Returns:
        `[P]`: β₁·(logsumexp_i(r_pi/β₁) − log N), in the rewards' floating dtype.

    Raises:
        ValueError: `beta1` not a finite number > 0; `rewards` not a real `[P, N]` tensor with N >= 1, or holding a
            NaN / ±inf (named by position).
    """
    owner = "optimal_value"
    if not (isinstance(beta1, numbers.Real) and not isinstance(beta1, bool) and math.isfinite(beta1) and beta1 > 0):
        raise ValueError(f"{owner}: beta1={beta1!r} is not valid; must be a finite number > 0")
    rewards = as_float_tensor(owner, "rewards", rewards)
    if rewards.dim() != 2 or rewards.shape[1] == 0:
        raise ValueError(
            f"{owner}: rewards must be [P, N] (N >= 1 completions of each of P prompts), got shape "
            f"{tuple(rewards.shape)}"
        )
    message = nonfinite_message("rewards", rewards)
    if message:
        raise ValueError(f"{owner}: {message}; all rewards must be finite")
    samples = rewards.shape[1]
    return beta1 * (torch.logsumexp(rewards / beta1, dim=1) - math.log(samples))
