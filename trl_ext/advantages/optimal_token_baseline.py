"""Optimal Token Baseline (OTB): a per-token, variance-weighted group baseline (verl `optimal_token_baseline` and
`tir_optimal_token_baseline`).

Source: verl's `docs/algo/otb.md`, after R. Li's "Optimal Token Baseline" (https://richardli.xyz/optimal-token-baseline);
the weighted form is the classical variance-minimising baseline b* = E[‖∇log π‖²·R] / E[‖∇log π‖²] (Greensmith,
Bartlett & Baxter 2004, "Variance Reduction Techniques for Gradient Estimates in Reinforcement Learning", JMLR 5).
Ports verl 0.9.1 `compute_optimal_token_baseline_advantage` and `compute_multi_turn_optimal_token_baseline_advantage`.

The squared norm of a token's logit-gradient, ‖e_y − π‖² = 1 − 2π_t + Σ_v π(v)², is known from the forward pass
(π_t = exp(log-prob of the sampled token), Σπ² the `sum_pi_squared` input), so with m the response mask:

    G_t = Σ_{s ≥ t} r_s m_s                        (reward-to-go, the returns)
    w_t = (1 − 2π_t + Σπ²_t) · ρ_t²                (ρ: the optional rollout importance weights)
    W_t = Σ_{s ≤ t} w_s m_s                        (realized energy up to t)
    B_t = Σ_{i ∈ g} G_t W_t m_t / (Σ_{i ∈ g} W_t m_t + ε)     (per position t, over the group g)
    A_t = (G_t − B_t) · m_t

A group of one gets B = 0 (A = G). `handle_zero_tail`: when a group's longest row (by loss tokens) is strictly
longer than every other, its baseline is 0 from position L_2 on (L_2 the second-longest length), where it would
only be estimated from itself.

The multi-turn (TIR) variant counts positions over the loss tokens only: each row's W and G at its loss tokens are
compacted to positions 0..L_i − 1 before the per-position baseline (so the k-th model token of every row shares a
baseline, whatever tool output precedes it), rows without a loss token are left out of the groups, and the
advantages are put back at the loss tokens. Both variants return the uncompacted reward-to-go as the returns.

Non-finite inputs outside the mask are ignored here (verl multiplies them by the mask, which keeps a NaN).
"""

from __future__ import annotations

from typing import Any

import torch

from ..components import Argument
from .base import (
    AdvantageFn,
    AdvantageResult,
    GroupIds,
    check_token_values,
    group_index,
    rank_within_groups,
    register_advantage,
)
from .reinforce_plus_plus import place_token_rewards


def _returns_and_energy(
    token_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(G, W)`, both `[N, T]`: the reward-to-go and the cumulative logit-gradient energy (module docstring)."""
    returns = (token_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
    w = 1 - 2 * torch.exp(old_log_probs) + sum_pi_squared
    if rollout_is_weights is not None:
        w = w * (rollout_is_weights**2)
    return returns, (w * response_mask).cumsum(dim=-1)


def _dense_index(index: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Group codes `0..G − 1` for any integer group index."""
    if index.numel() == 0:
        return index.long(), 0
    uniques, inverse = torch.unique(index, return_inverse=True)
    return inverse.long(), uniques.numel()


def _group_baseline(
    returns: torch.Tensor,
    weights: torch.Tensor,
    index: torch.Tensor,
    num_groups: int,
    member: torch.Tensor,
    lengths: torch.Tensor,
    handle_zero_tail: bool,
    epsilon: float,
) -> torch.Tensor:
    """Per-row baselines `[N, T']`: `Σ_g G·W / (Σ_g W + ε)` per position over the `member` rows of each group
    (`weights` already masked), 0 for groups of fewer than 2 members and for non-members, with the zero tail."""
    rows = member.nonzero().flatten()
    counts = torch.bincount(index[rows], minlength=num_groups)
    numerator = (returns * weights).new_zeros((num_groups, returns.shape[1]))
    numerator.index_add_(0, index[rows], (returns * weights)[rows])
    denominator = weights.new_zeros((num_groups, returns.shape[1])).index_add_(0, index[rows], weights[rows])
    per_group = (numerator / (denominator + epsilon)).to(returns.dtype)
    shared = (counts[index] > 1) & member
    baselines = torch.where(shared.unsqueeze(-1), per_group[index], returns.new_zeros(()))
    if handle_zero_tail and baselines.shape[1]:
        rank = rank_within_groups(index, num_groups, lengths, member)
        longest = lengths.new_zeros(num_groups).index_put_((index[rank == 0],), lengths[rank == 0])
        second = lengths.new_zeros(num_groups).index_put_((index[rank == 1],), lengths[rank == 1])
        alone = shared & (rank == 0) & (longest[index] > second[index])
        positions = torch.arange(baselines.shape[1], device=baselines.device)
        tail = alone.unsqueeze(-1) & (positions >= second[index].unsqueeze(-1))
        baselines = baselines.masked_fill(tail, 0.0)
    return baselines


def optimal_token_baseline(
    token_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: torch.Tensor,
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OTB advantages and returns (verl `compute_optimal_token_baseline_advantage`; module docstring).

    Args:
        token_rewards: `[N, T]` rewards per token.
        response_mask: `[N, T]` 0/1 loss mask (bool or numeric).
        index: `[N]` integer group ids (any values; rows with equal ids form a group).
        old_log_probs: `[N, T]` the sampling policy's log-prob of each sampled token.
        sum_pi_squared: `[N, T]` Σ_v π(v)² of each position's sampling distribution.
        rollout_is_weights: `[N, T]` rollout importance weights ρ (W uses ρ²), or None.
        handle_zero_tail: Zero the baseline of a group's strictly longest row past the second-longest length.
        epsilon: ε of the baseline's denominator.

    Returns:
        `(advantages, returns)`, both `[N, T]`: `(G − B)·m` and the reward-to-go `G`.
    """
    returns, energy = _returns_and_energy(
        token_rewards, response_mask, old_log_probs, sum_pi_squared, rollout_is_weights
    )
    index, num_groups = _dense_index(index)
    member = torch.ones(returns.shape[0], dtype=torch.bool, device=returns.device)
    baselines = _group_baseline(
        returns,
        energy * response_mask,
        index,
        num_groups,
        member,
        response_mask.sum(dim=-1),
        handle_zero_tail,
        epsilon,
    )
    return (returns - baselines) * response_mask, returns


def multi_turn_optimal_token_baseline(
    token_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: torch.Tensor,
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OTB with positions counted over the loss tokens (verl `compute_multi_turn_optimal_token_baseline_advantage`,
    `tir_optimal_token_baseline`; module docstring). Arguments and returns as `optimal_token_baseline`."""
    returns, energy = _returns_and_energy(
        token_rewards, response_mask, old_log_probs, sum_pi_squared, rollout_is_weights
    )
    selected = response_mask.bool()
    lengths = response_mask.sum(dim=-1).to(dtype=torch.long)
    width = int(lengths.max()) if lengths.numel() else 0
    rows, cols = selected.nonzero(as_tuple=True)
    slot = (selected.long().cumsum(dim=-1) - 1)[rows, cols]  # each loss token's position among its row's
    compact_energy = energy.new_zeros((lengths.numel(), width))
    compact_energy[rows, slot] = energy[rows, cols]
    compact_returns = torch.zeros_like(compact_energy)
    compact_returns[rows, slot] = returns[rows, cols]
    index, num_groups = _dense_index(index)
    baselines = _group_baseline(
        compact_returns,
        compact_energy,
        index,
        num_groups,
        lengths > 0,
        lengths,
        handle_zero_tail,
        epsilon,
    )
    advantages = torch.zeros_like(returns)
    advantages[rows, cols] = (compact_returns - baselines)[rows, slot].to(advantages.dtype)
    return advantages * response_mask, returns


@register_advantage("optimal_token_baseline")
class OptimalTokenBaselineAdvantage(AdvantageFn):
    """Optimal Token Baseline (verl `optimal_token_baseline`; `multi_turn=True`: `tir_optimal_token_baseline`):
    `A_t = (G_t − B_t)·m_t` with a per-position group baseline weighted by each row's cumulative logit-gradient
    energy (see the module docstring).

    `compute(rewards [N] or [N, T], group_ids, *, response_mask, logprobs, sum_pi_squared)`: `logprobs` `[N, T]` is
    the sampling policy's log-prob of each sampled token, `sum_pi_squared` `[N, T]` the Σ_v π(v)² of its distribution
    at each position (both finite where `response_mask` is 1). A scalar reward sits on the row's last
    `response_mask` token (`place_token_rewards` without a completion mask), so a multi-turn completion that ends
    with a tool output keeps its reward (verl puts it on the last attended token, where `response_mask` — which
    multiplies the token rewards — may drop it). Token rewards count where `response_mask` is 1. The reward-to-go is
    verl's `returns`; it is not put in `AdvantageResult.returns` (no critic reads it).
    """

    token_level = True
    token_rewards = True

    arguments = (
        Argument(
            "handle_zero_tail",
            True,
            "Zero the baseline of a group's strictly longest completion past the second-longest length, where it "
            "would be estimated from that completion alone.",
        ),
        Argument(
            "epsilon",
            1e-8,
            "ε of the baseline's denominator Σ W + ε.",
            gt=0,
            config_name="advantage_epsilon",
        ),
        Argument(
            "multi_turn",
            False,
            "Count positions over the loss tokens only (verl's `tir_optimal_token_baseline`, for tool-using "
            "rollouts whose tool outputs are masked out).",
        ),
    )

    @torch.no_grad()
    def compute(
        self,
        rewards: torch.Tensor,
        group_ids: GroupIds,
        *,
        response_mask: torch.Tensor,
        logprobs: torch.Tensor,
        sum_pi_squared: torch.Tensor,
    ) -> AdvantageResult:
        token_rewards, mask = place_token_rewards(self.name, rewards, response_mask)
        logprobs = self._token_input("logprobs", logprobs, mask, token_rewards.dtype)
        sum_pi_squared = self._token_input("sum_pi_squared", sum_pi_squared, mask, token_rewards.dtype)
        index, _ = group_index(self.name, group_ids, mask.shape[0], mask.device)
        otb = multi_turn_optimal_token_baseline if self.multi_turn else optimal_token_baseline
        advantages, _ = otb(
            token_rewards,
            mask,
            index,
            logprobs,
            sum_pi_squared,
            handle_zero_tail=self.handle_zero_tail,
            epsilon=self.epsilon,
        )
        return AdvantageResult(advantages, torch.ones(mask.shape[0], dtype=torch.bool, device=mask.device))

    def _token_input(self, name: str, value: Any, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if value is None:
            raise ValueError(f"{self.name}: compute() needs {name} [N, T], got None")
        value = check_token_values(self.name, name, value, mask).to(dtype)
        return torch.where(mask, value, 0.0)
