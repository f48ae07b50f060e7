"""verl 0.9.1's token-level advantages (REINFORCE++, ReMax, the optimal token baseline), each
`-> (advantages, returns)` `[B, T]`, over trl_ext's estimators.

* REINFORCE++ (arXiv 2501.03262): G_t = r_t + γ·G_{t+1}, where a position outside `response_mask` (an observation
  span of a multi-turn rollout) is skipped: G carries through it unchanged and its return is 0 (verl 0.9). That is
  GAE's advantage with V = 0 and λ = 1 with masked positions skipped (`trl_ext.advantages.gae`); A = verl's
  `masked_whiten`(G) · mask. (trl_ext's `reinforceplusplus` follows Trinity-RFT, which does not skip: the same for
  γ = 1.)
* ReMax (arXiv 2310.10505): G_t = Σ_{s ≥ t} r_s·m_s, A = G − b·m (trl_ext's `remax` on the mask, verl's G on
  the positions outside it).
* The optimal token baseline (OTB) and its multi-turn (`tir_`) variant: B_t = Σ G_t·W_t / Σ W_t over the group,
  W_t = Σ_{j ≤ t} (1 − 2π_j + Σπ²)·ρ̄_j², A = G − B (trl_ext's `optimal_token_baseline`).
"""

from __future__ import annotations

from typing import Any

import torch

from ...advantages.gae import gae_advantage_return
from ...advantages.optimal_token_baseline import multi_turn_optimal_token_baseline, optimal_token_baseline
from ...advantages.remax import REMAXAdvantage
from .aggregation import masked_whiten
from .estimators import AdvantageEstimator, group_ids, register_adv_est, require_inputs
from .registry import config_value

__all__ = [
    "compute_multi_turn_optimal_token_baseline_advantage",
    "compute_optimal_token_baseline_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_remax_outcome_advantage",
]


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS)
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config: Any = None, **kwargs: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: `(masked_whiten(G)·mask, G)`, G the discounted return with masked positions skipped (0 there);
    reads `config.gamma` (config required, an object or a mapping)."""
    owner = "compute_reinforce_plus_plus_outcome_advantage"
    require_inputs(owner, token_level_rewards=token_level_rewards, response_mask=response_mask, config=config)
    gamma = config_value(config, "gamma")
    with torch.no_grad():
        mask = response_mask.bool()
        zeros = torch.zeros_like(token_level_rewards)
        running, _ = gae_advantage_return(token_level_rewards, zeros, mask, gamma, 1.0, skip_masked=True)
        returns = torch.where(mask, running, zeros)
        advantages = masked_whiten(returns, response_mask) * response_mask
    return advantages, returns


@register_adv_est(AdvantageEstimator.REMAX)
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor,
    reward_baselines: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax: `(G − b·mask, G)` with G_t = Σ_{s ≥ t} r_s·m_s and b = `reward_baselines` `[B]` (the greedy
    completion's reward). As in verl, a masked position inside a response keeps G as its advantage."""
    owner = "compute_remax_outcome_advantage"
    require_inputs(
        owner, token_level_rewards=token_level_rewards, reward_baselines=reward_baselines, response_mask=response_mask
    )
    with torch.no_grad():
        result = REMAXAdvantage().compute(
            token_level_rewards, None, response_mask=response_mask, reward_baselines=reward_baselines
        )
        returns = (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
        advantages = torch.where(response_mask.bool(), result.advantages.to(returns.dtype), returns)
    return advantages, returns


def _otb(owner, fn, token_level_rewards, response_mask, index, old_log_probs, sum_pi_squared, *options):
    require_inputs(
        owner,
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        old_log_probs=old_log_probs,
        sum_pi_squared=sum_pi_squared,
    )
    group, _ = group_ids(owner, index, token_level_rewards.shape[0], token_level_rewards.device)
    with torch.no_grad():
        return fn(token_level_rewards, response_mask, group, old_log_probs, sum_pi_squared, *options)


@register_adv_est(AdvantageEstimator.OPTIMAL_TOKEN_BASELINE)
def compute_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OTB: `((G − B)·mask, G)`, G the reward-to-go over the mask, B_t = Σ G_t·W_t / (Σ W_t + ε) over the group at
    each position t, W_t = Σ_{j ≤ t} m_j·(1 − 2π_j + Σπ²_j)·ρ_j² (ρ = `rollout_is_weights`, default 1; π =
    exp(`old_log_probs`)); a group of one has B = 0; `handle_zero_tail`: B = 0 on a group's strictly longest row past
    the second-longest length (trl_ext's `optimal_token_baseline`)."""
    return _otb(
        "compute_optimal_token_baseline_advantage", optimal_token_baseline, token_level_rewards, response_mask,
        index, old_log_probs, sum_pi_squared, rollout_is_weights, handle_zero_tail, epsilon,
    )  # fmt: skip


@register_adv_est(AdvantageEstimator.TIR_OPTIMAL_TOKEN_BASELINE)
def compute_multi_turn_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-turn OTB (`tir_optimal_token_baseline`): as `compute_optimal_token_baseline_advantage` with the
    positions t counted over each row's loss tokens only (the observation spans removed), rows without a loss token
    left out (trl_ext's `multi_turn_optimal_token_baseline`)."""
    return _otb(
        "compute_multi_turn_optimal_token_baseline_advantage", multi_turn_optimal_token_baseline, token_level_rewards,
        response_mask, index, old_log_probs, sum_pi_squared, rollout_is_weights, handle_zero_tail, epsilon,
    )  # fmt: skip
