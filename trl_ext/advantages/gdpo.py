"""GDPO's reward-decoupled group normalization (verl `gdpo`), whitened over the batch's response tokens.

Paper: "GDPO: Group reward-Decoupled Normalization Policy Optimization" (arXiv 2601.05242). Ports verl 0.9.1
`compute_gdpo_outcome_advantage`. With several reward functions, GRPO sums them before normalizing, so the reward
with the largest spread drowns the others; GDPO normalizes each reward component k within the group first:

    A_k = (r_k − mean_g(r_k)) / (std_g(r_k) + ε)     (or r_k − mean_g(r_k) when not norm_adv_by_std)
    A   = Σ_k w_k · A_k · m                           (broadcast over the response mask m)
    A   = verl_masked_whiten(A, m) · m                (over all valid tokens of the batch)

`mean_g` / `std_g` are the group mean and unbiased std (verl's `compute_grpo_outcome_advantage`; a group of one:
mean 0, std 1), `w_k` the reward weights (1 by default). The components are the per-reward-function rewards,
unweighted (TRL's `rewards_per_func`), and the weights TRL's `reward_weights`.

A reward function may return None for a sample (NaN in TRL's `rewards_per_func`, which TRL then `nansum`s). verl
has no such case; here a NaN component of a sample leaves the sample out of that component's group statistics
(mean / std over the group's non-NaN values, a group with at most one of them: mean 0, std 1) and contributes 0
to its weighted sum — the `nansum` rule. A sample whose components are all NaN is unscorable: its advantage is 0 and
it is left out of the whitening statistics (as TRL's `normalize_then_sum` excludes unscorable rows).
"""

from __future__ import annotations

from typing import Any

import torch

from ..components import Argument
from .base import (
    AdvantageFn,
    AdvantageResult,
    GroupIds,
    as_float_tensor,
    check_response_mask,
    group_index,
    group_stats,
    nonfinite_message,
    register_advantage,
    sequence_rewards,
)
from .reinforce_plus_plus import verl_masked_whiten


def gdpo_advantages(
    component_rewards: torch.Tensor,
    index: torch.Tensor,
    num_groups: int,
    response_mask: torch.Tensor,
    weights: torch.Tensor | None = None,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
) -> torch.Tensor:
    """GDPO advantages `[N, T]` (see the module docstring).

    Args:
        component_rewards: `[N, K]` float, one reward per sample and reward component; NaN marks a component a
            sample has no reward for (the module docstring's rule); ±inf is not allowed.
        index: `[N]` long, each sample's group in `0..num_groups − 1`.
        num_groups: The number of groups G.
        response_mask: `[N, T]` 0/1 (bool or numeric; used in its dtype in the whitening, as verl uses it).
        weights: `[K]` weights `w_k` (cast to the rewards' dtype), or None for all 1.
        epsilon: ε of `(r − mean) / (std + ε)`.
        norm_adv_by_std: Divide by `std + ε` (verl's `norm_adv_by_std_in_grpo`); False: `r − mean` (Dr. GRPO).

    Returns:
        The whitened advantages, 0 outside `response_mask` and on unscorable rows.

    Raises:
        ValueError: bad shapes, non-finite weights or ±inf rewards, or fewer than 2 valid tokens on scorable rows.
    """
    owner = "gdpo_advantages"
    if component_rewards.dim() != 2 or component_rewards.shape[1] == 0:
        raise ValueError(f"{owner}: component_rewards must be [N, K] with K >= 1, got {tuple(component_rewards.shape)}")
    n, k = component_rewards.shape
    if response_mask.dim() != 2 or response_mask.shape[0] != n:
        raise ValueError(f"{owner}: response_mask must be [N, T] with N = {n}, got {tuple(response_mask.shape)}")
    if bool(torch.isinf(component_rewards).any()):
        raise ValueError(f"{owner}: component_rewards must be finite or NaN (no reward), got ±inf")
    if n == 0:
        return component_rewards.new_zeros(response_mask.shape)
    if weights is None:
        weights = component_rewards.new_ones(k)
    weights = weights.to(device=component_rewards.device, dtype=component_rewards.dtype)
    if weights.shape != (k,) or not bool(torch.isfinite(weights).all()):
        raise ValueError(f"{owner}: weights must be {k} finite numbers (one per component), got {weights.tolist()}")

    scored = ~torch.isnan(component_rewards)
    total = None
    for j in range(k):
        values, member = component_rewards[:, j], scored[:, j]
        _, mean, std = group_stats(values, index, num_groups, member=member)
        centered = values - mean[index]
        if norm_adv_by_std:
            centered = centered / (std[index] + epsilon)
        per_token = torch.where(member, centered, 0.0).unsqueeze(-1) * response_mask
        total = weights[j] * per_token if total is None else total + weights[j] * per_token
    scorable = scored.any(dim=1)
    whiten_mask = response_mask if bool(scorable.all()) else response_mask * scorable.unsqueeze(-1)
    return verl_masked_whiten(total, whiten_mask) * whiten_mask


@register_advantage("gdpo")
class GDPOAdvantage(AdvantageFn):
    """GDPO (verl `gdpo`): GRPO on each reward component within its group, weighted sum, broadcast to the response
    tokens and whitened over all valid tokens of the batch (see the module docstring).

    `compute(rewards [N] or [N, T], group_ids, *, response_mask [N, T], reward_components=None,
    reward_weights=None)`: `reward_components` `[N, K]` are the unweighted per-reward-function rewards (NaN: no
    reward, see the module docstring), `reward_weights` `[K]` their weights (default 1). Without
    `reward_components` the single component is `rewards` (summed over the row when `[N, T]`, which must be finite)
    and `reward_weights` must be None or one weight; with them `rewards` is not read (only its row count checked).
    Fewer than 2 valid tokens on the scorable rows is a ValueError (verl raises); an empty batch gives `[0, T]`.
    """

    token_level = True
    token_rewards = True

    arguments = (
        Argument(
            "epsilon",
            1e-6,
            "ε of each component's (r − mean)/(std + ε), std the unbiased group std (verl's GRPO epsilon).",
            gt=0,
            config_name="advantage_epsilon",
        ),
        Argument(
            "norm_adv_by_std",
            True,
            "Divide each component's centred reward by its group std + ε (verl's `norm_adv_by_std_in_grpo`); "
            "False: r − mean (Dr. GRPO).",
        ),
    )

    def optional_inputs_needed(self) -> tuple[str, ...]:
        return ("reward_components", "reward_weights")

    @torch.no_grad()
    def compute(
        self,
        rewards: torch.Tensor,
        group_ids: GroupIds,
        *,
        response_mask: torch.Tensor,
        reward_components: torch.Tensor | None = None,
        reward_weights: torch.Tensor | None = None,
    ) -> AdvantageResult:
        device = rewards.device if isinstance(rewards, torch.Tensor) else None
        mask = check_response_mask(self.name, response_mask, device)
        n = mask.shape[0]
        components = self._components(rewards, mask, reward_components)
        weights = self._weights(reward_weights, components)
        index, num_groups = group_index(self.name, group_ids, n, mask.device)
        keep = torch.ones(n, dtype=torch.bool, device=mask.device)
        if n == 0:
            return AdvantageResult(components.new_zeros(mask.shape), keep)
        try:
            advantages = gdpo_advantages(
                components, index, num_groups, mask, weights, self.epsilon, self.norm_adv_by_std
            )
        except ValueError as e:
            raise ValueError(f"{self.name}: {e} (response_mask on the scorable rows)") from None
        return AdvantageResult(advantages, keep)

    def _components(self, rewards: Any, mask: torch.Tensor, reward_components: Any) -> torch.Tensor:
        """`[N, K]` components: `reward_components` validated, or the summed `rewards` as the single one."""
        n = mask.shape[0]
        if reward_components is None:
            return sequence_rewards(self.name, rewards, mask).unsqueeze(-1)
        components = as_float_tensor(self.name, "reward_components", reward_components, mask.device).to(mask.device)
        if components.dim() != 2 or components.shape[0] != n or components.shape[1] == 0:
            raise ValueError(
                f"{self.name}: reward_components must have shape [N, K] with N = {n} (response_mask's rows) and "
                f"K >= 1, got {tuple(components.shape)}"
            )
        msg = nonfinite_message("reward_components", components, where=~torch.isnan(components))
        if msg:
            raise ValueError(f"{self.name}: {msg}; reward_components must be finite or NaN (no reward)")
        rows = rewards.shape[0] if isinstance(rewards, torch.Tensor) and rewards.dim() > 0 else None
        if rows is not None and rows != n:
            raise ValueError(f"{self.name}: rewards has {rows} rows but response_mask has {n}")
        return components

    def _weights(self, reward_weights: Any, components: torch.Tensor) -> torch.Tensor | None:
        if reward_weights is None:
            return None
        weights = as_float_tensor(self.name, "reward_weights", reward_weights, components.device)
        k = components.shape[1]
        if weights.shape != (k,):
            raise ValueError(
                f"{self.name}: reward_weights must have shape ({k},), one per reward component, got "
                f"{tuple(weights.shape)}"
            )
        msg = nonfinite_message("reward_weights", weights)
        if msg:
            raise ValueError(f"{self.name}: {msg}; reward_weights must be finite")
        return weights.to(device=components.device, dtype=components.dtype)
