"""verl 0.9.1's group-relative outcome advantages, each `-> (advantages, returns)` (the same `[B, T]` tensor twice),
over trl_ext's estimators.

Every row's token rewards are summed (every position of the row) into a score R; with `index` the group (prompt) of
each row and mean / std the group's mean and unbiased std of R (a group of one: 0 and 1):

    grpo / grpo_vectorized          (R − mean)/(std + ε), or R − mean (`norm_adv_by_std_in_grpo=False`, Dr. GRPO)
    rloo                            n/(n − 1)·(R − mean) (RLOO, arXiv 2402.14740); a group of one keeps R
    rloo_vectorized                 the same, but a group of one gets 0 (as verl's vectorized version)
    opo                             R − Σ l·R / Σ l over the group, l the rows' token counts (arXiv 2505.23585)
    grpo_passk                      r_max − r_second on the group's best row, 0 elsewhere (/(std + ε) when
                                    `config.norm_adv_by_std_in_grpo`, default True; arXiv 2503.19595)
    reinforce_plus_plus_baseline    R − mean on every token, whitened over the batch's valid tokens (arXiv 2501.03262)
    gdpo                            GRPO per reward component, weighted sum, whitened (arXiv 2601.05242)

broadcast to the response tokens by multiplying with `response_mask` (as verl does: its dtype takes part in the
promotion). `index` is verl's uid array (numpy, object or int), a list, or an integer tensor; verl's loop versions
hash a tensor's elements by identity (every row its own group), here a tensor's values are the groups. Non-finite
rewards are ValueErrors (verl propagates them); a missing required input is a TypeError naming it.
"""

from __future__ import annotations

from typing import Any

import torch

from ...advantages.base import group_stats
from ...advantages.gdpo import gdpo_advantages
from ...advantages.group import RLOOAdvantage
from ...advantages.opo import opo_advantages
from ...advantages.passk import grpo_passk_advantages
from ...advantages.reinforce_plus_plus import reinforce_plus_plus_baseline_advantages
from .estimators import AdvantageEstimator, group_ids, register_adv_est, require_inputs
from .registry import config_value

__all__ = [
    "compute_gdpo_outcome_advantage",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_grpo_vectorized_outcome_advantage",
    "compute_opo_outcome_advantage",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
]


def _scores(owner: str, token_level_rewards: Any, response_mask: Any, index: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """`(R [B], group [B])` after checking that the rewards, the mask and the index are given."""
    scores, group, _ = _grouped_scores(owner, token_level_rewards, response_mask, index)
    return scores, group


def _grouped_scores(owner: str, token_level_rewards: Any, response_mask: Any, index: Any):
    """`(R [B], group [B] in 0..G−1, G)`, the rewards, the mask and the index checked to be given."""
    require_inputs(owner, token_level_rewards=token_level_rewards, response_mask=response_mask)
    scores = token_level_rewards.sum(dim=-1)
    group, num_groups = group_ids(owner, index, scores.numel(), scores.device)
    return scores, group, num_groups


def _broadcast(scores: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    advantages = scores.unsqueeze(-1) * response_mask
    return advantages, advantages


def _grpo(owner, token_level_rewards, response_mask, index, epsilon, norm_adv_by_std_in_grpo):
    # trl_ext's group statistics, not its `grpo` estimator: that one refuses ε <= 0, verl takes any ε
    scores, group, num_groups = _grouped_scores(owner, token_level_rewards, response_mask, index)
    with torch.no_grad():
        _, mean, std = group_stats(scores, group, num_groups)
        advantages = scores - mean[group]
        if norm_adv_by_std_in_grpo:
            advantages = advantages / (std[group] + epsilon)
        return _broadcast(advantages, response_mask)


@register_adv_est(AdvantageEstimator.GRPO)
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (arXiv 2402.03300): (R − mean)/(std + ε) per group, or R − mean without `norm_adv_by_std_in_grpo`
    (trl_ext's `grpo`, `std_cal_level` "group" / "none", whose config refuses ε = 0: here any ε, as verl, ε = 0 making a
    group of equal scores NaN); `config` is unused, as in verl."""
    return _grpo(
        "compute_grpo_outcome_advantage", token_level_rewards, response_mask, index, epsilon, norm_adv_by_std_in_grpo
    )


@register_adv_est(AdvantageEstimator.GRPO_VECTORIZED)
def compute_grpo_vectorized_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`compute_grpo_outcome_advantage` (verl's vectorized version; verl computes its group statistics in float32,
    here in the rewards' dtype)."""
    return _grpo(
        "compute_grpo_vectorized_outcome_advantage",
        token_level_rewards,
        response_mask,
        index,
        epsilon,
        norm_adv_by_std_in_grpo,
    )


def _rloo(owner: str, token_level_rewards, response_mask, index, single_keeps_reward: bool):
    scores, group = _scores(owner, token_level_rewards, response_mask, index)
    with torch.no_grad():
        advantages = RLOOAdvantage().compute(scores, group).advantages
        if not single_keeps_reward:
            single = torch.bincount(group)[group] == 1
            advantages = advantages.masked_fill(single, 0.0)
        return _broadcast(advantages, response_mask)


@register_adv_est(AdvantageEstimator.RLOO)
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: R − the mean of the group's other rows = n/(n − 1)·(R − mean) (trl_ext's `rloo`); a group of one keeps
    R. `epsilon` and `config` are unused, as in verl."""
    return _rloo("compute_rloo_outcome_advantage", token_level_rewards, response_mask, index, True)


@register_adv_est(AdvantageEstimator.RLOO_VECTORIZED)
def compute_rloo_vectorized_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO as `compute_rloo_outcome_advantage`, except that a group of one gets 0 (verl's vectorized version)."""
    return _rloo("compute_rloo_vectorized_outcome_advantage", token_level_rewards, response_mask, index, False)


@register_adv_est(AdvantageEstimator.OPO)
def compute_opo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO: R − Σ l·R / Σ l over the group, l = the rows' `response_mask` token counts (trl_ext's `opo`); a group
    of one keeps R. `epsilon` and `config` are unused, as in verl."""
    owner = "compute_opo_outcome_advantage"
    scores, group, num_groups = _grouped_scores(owner, token_level_rewards, response_mask, index)
    with torch.no_grad():
        return _broadcast(opo_advantages(scores, response_mask.sum(dim=-1), group, num_groups), response_mask)


@register_adv_est(AdvantageEstimator.GRPO_PASSK)
def compute_grpo_passk_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k: r_max − r_second on each group's best row (ties: the first), 0 elsewhere, divided by std + ε when
    `config.norm_adv_by_std_in_grpo` (default True; as in verl, `config` is required and the argument
    `norm_adv_by_std_in_grpo` is ignored). Every group needs two rows or more (ValueError)."""
    owner = "compute_grpo_passk_outcome_advantage"
    require_inputs(owner, config=config)
    scores, group, num_groups = _grouped_scores(owner, token_level_rewards, response_mask, index)
    norm = config_value(config, "norm_adv_by_std_in_grpo", True)
    with torch.no_grad():
        return _broadcast(grpo_passk_advantages(scores, group, num_groups, epsilon, norm), response_mask)


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS_BASELINE)
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline: (R − group mean) on every valid token, whitened over the batch's valid tokens (verl's
    `masked_whiten`), times the mask (trl_ext's `reinforce_plus_plus_baseline_advantages`)."""
    owner = "compute_reinforce_plus_plus_baseline_outcome_advantage"
    scores, group, num_groups = _grouped_scores(owner, token_level_rewards, response_mask, index)
    with torch.no_grad():
        advantages = reinforce_plus_plus_baseline_advantages(scores, group, num_groups, response_mask)
    return advantages, advantages


def _gdpo_components(owner: str, response_mask: torch.Tensor, config: Any, non_tensor_batch: Any, batch: Any):
    """`(component_rewards [B, K] float32, weights [K] float32 or None)` from `config.gdpo_reward_keys` (required)
    and `config.gdpo_reward_weights`: the `non_tensor_batch[key]` columns (verl places each on the row's last
    response token and sums the row: the value itself)."""
    keys = config_value(config, "gdpo_reward_keys", None)
    if not keys:
        raise ValueError(
            f"{owner}: GDPO requires 'algorithm.gdpo_reward_keys' listing the individual reward component keys "
            "returned by compute_score (e.g. ['format_reward', 'accuracy_reward'])."
        )
    import numpy as np  # verl's non_tensor_batch holds numpy arrays (numpy is not needed to import this package)

    device = response_mask.device
    columns = []
    for key in keys:
        if key not in non_tensor_batch:
            raise ValueError(
                f"{owner}: GDPO reward key '{key}' not found in non_tensor_batch. Available keys: "
                f"{list(non_tensor_batch.keys())}. Make sure your compute_score returns a dict containing '{key}'."
            )
        columns.append(torch.tensor(np.asarray(non_tensor_batch[key], dtype=np.float32), device=device))
    weights = config_value(config, "gdpo_reward_weights", None)
    if weights is not None:
        weights = torch.tensor(list(weights), dtype=torch.float32, device=device)
    return torch.stack(columns, dim=-1), weights


@register_adv_est(AdvantageEstimator.GDPO)
def compute_gdpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    non_tensor_batch: dict | None = None,
    batch: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GDPO: GRPO of each reward component within its group, Σ_k w_k·A_k, whitened over the batch's valid tokens,
    times the mask (trl_ext's `gdpo_advantages`).

    With `config`, `non_tensor_batch` and `batch` all given (verl's trainer path), the components are the
    `non_tensor_batch[key]` columns of `config.gdpo_reward_keys` (float32, as verl reads them; a None entry is NaN:
    that row has no reward for the component) and the weights `config.gdpo_reward_weights` (default all 1); otherwise
    the single component is the summed `token_level_rewards`, which makes it whitened GRPO."""
    owner = "compute_gdpo_outcome_advantage"
    scores, group, num_groups = _grouped_scores(owner, token_level_rewards, response_mask, index)
    weights = None
    if config is not None and non_tensor_batch is not None and batch is not None:
        components, weights = _gdpo_components(owner, response_mask, config, non_tensor_batch, batch)
    else:
        components = scores.unsqueeze(-1)
    with torch.no_grad():
        advantages = gdpo_advantages(
            components, group, num_groups, response_mask, weights, epsilon, norm_adv_by_std_in_grpo
        )
    return advantages, advantages
