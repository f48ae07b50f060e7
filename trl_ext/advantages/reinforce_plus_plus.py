"""REINFORCE++ token-level advantages (Hu 2025, "REINFORCE++", arXiv 2501.03262).

Ports verl ``compute_reinforce_plus_plus_outcome_advantage`` (``verl/trainer/ppo/core_algos.py``)::

    returns_t = r_t + gamma * returns_{t+1}     (the running return is reset to 0 after masked-out tokens)
    A = masked_whiten(returns, response_mask) * response_mask

where ``masked_whiten(x, m) = (x - mean) / sqrt(var + 1e-8)`` with the masked mean / unbiased masked variance
over ALL valid tokens of the batch (no grouping).
"""

from __future__ import annotations

from typing import Any

import torch

from .base import (
    AdvantageFn,
    AdvantageResult,
    as_float_tensor,
    check_mask,
    check_number,
    nonfinite_message,
    register_advantage,
)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) * rsqrt(var + eps)`` with masked mean and unbiased (Bessel-corrected) masked variance."""
    n = mask.sum()
    if n <= 1:
        raise ValueError(f"masked_whiten needs at least 2 valid tokens, got {int(n)}")
    m = mask.to(values.dtype)
    values = torch.where(mask, values, torch.zeros_like(values))
    mean = (values * m).sum() / n
    var = ((values - mean) ** 2 * m).sum() / n
    var = var * n / (n - 1)
    return (values - mean) * torch.rsqrt(var + eps)


@register_advantage("reinforceplusplus")
class ReinforcePlusPlusAdvantage(AdvantageFn):
    """REINFORCE++: discounted token returns whitened over the batch's valid tokens (see module docstring).

    ``rewards`` is either ``[N]`` (each placed on the row's last valid token of ``response_mask``) or
    token-level ``[N, T]``; returns ``[N, T]`` advantages, 0 at masked positions.  ``group_ids`` is unused.
    """

    token_level = True

    def __init__(self, *, gamma: float = 1.0) -> None:
        self.gamma = check_number(self.name, "gamma", gamma, ge=0, le=1)

    @torch.no_grad()
    def compute(self, rewards: torch.Tensor, group_ids: Any = None, *, response_mask: torch.Tensor) -> AdvantageResult:
        rewards = as_float_tensor(self.name, "rewards", rewards)
        if not isinstance(response_mask, torch.Tensor) or response_mask.dim() != 2:
            shape = tuple(response_mask.shape) if isinstance(response_mask, torch.Tensor) else None
            raise ValueError(f"{self.name}: response_mask must be a 2-D [N, T] tensor, got shape {shape}")
        n, t = response_mask.shape
        if rewards.shape not in ((n,), (n, t)):
            raise ValueError(
                f"{self.name}: rewards must have shape [N] or [N, T] = {(n, t)} matching response_mask "
                f"{(n, t)}, got {tuple(rewards.shape)}"
            )
        mask = check_mask(self.name, "response_mask", response_mask, response_mask.shape, rewards.device)
        keep = torch.ones(n, dtype=torch.bool, device=rewards.device)
        if n == 0:
            return AdvantageResult(rewards.new_zeros((0, t)), keep)

        if rewards.dim() == 1:
            msg = nonfinite_message("rewards", rewards)
            if msg:
                raise ValueError(f"{self.name}: {msg}; all rewards must be finite")
            positions = torch.arange(t, device=rewards.device).expand(n, t)
            last = torch.where(mask, positions, -1).amax(dim=1)  # -1 for rows without a valid token
            rows = (last >= 0).nonzero().flatten()
            token_rewards = rewards.new_zeros((n, t))
            token_rewards[rows, last[rows]] = rewards[rows]
        else:
            msg = nonfinite_message("rewards", rewards, where=mask)
            if msg:
                raise ValueError(f"{self.name}: {msg}; rewards must be finite where response_mask is 1")
            token_rewards = torch.where(mask, rewards, torch.zeros_like(rewards))

        m = mask.to(rewards.dtype)
        returns = torch.zeros_like(token_rewards)
        running = token_rewards.new_zeros(n)
        for i in reversed(range(t)):  # loop over time only, vectorized over the batch
            running = token_rewards[:, i] + self.gamma * running
            returns[:, i] = running
            running = running * m[:, i]
        try:
            advantages = masked_whiten(returns, mask) * m
        except ValueError as e:
            raise ValueError(f"{self.name}: {e} in response_mask") from None
        return AdvantageResult(advantages, keep)
