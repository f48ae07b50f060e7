"""verl's advantage estimators (GPG's outcome advantage, GAE with verl's `masked_whiten`) and the critic's clipped
value loss.

Where the GAE and the value loss differ from verl: NaN / inf at masked positions propagate in verl (multiplied by 0)
and do not here; a negative `cliprange_value` is a ValueError (verl clips to an empty interval).
"""

from __future__ import annotations

from typing import Any

import torch

from ...advantages.gae import gae_advantage_return
from ...advantages.gpg import GPGAdvantage
from ...losses.value import check_cliprange_value, clipped_value_terms
from .aggregation import agg_loss, masked_mean, masked_whiten
from .estimators import AdvantageEstimator, group_ids, register_adv_est, require_inputs

__all__ = ["compute_gae_advantage_return", "compute_gpg_outcome_advantage", "compute_value_loss"]


@register_adv_est(AdvantageEstimator.GPG)
def compute_gpg_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    f_norm: float = 1.0,
    alpha: float = 1.0,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's GPG advantage: `(advantages, returns)`, the same `[B, T]` tensor twice, without gradients.

    R = the row's summed token rewards, α = B / max(#{R ≠ 0}, 1) over the batch, A = α·(R − group mean)/`f_norm` (a
    group of one: mean 0) times `response_mask` (trl_ext's `gpg` estimator). `index` holds the group ids (verl: a
    numpy array). As in verl, `epsilon`, `alpha` and `config` are accepted and unused. Deviations: non-finite rewards
    and `f_norm` <= 0 are ValueErrors."""
    owner = "compute_gpg_outcome_advantage"
    require_inputs(owner, token_level_rewards=token_level_rewards, response_mask=response_mask)
    group, _ = group_ids(owner, index, token_level_rewards.shape[0], token_level_rewards.device)
    with torch.no_grad():
        scores = GPGAdvantage(f_norm=f_norm).compute(token_level_rewards, group, response_mask=response_mask)
        advantages = scores.advantages
        if response_mask.is_floating_point():  # verl multiplies by the mask: its dtype takes part in the promotion
            advantages = advantages.to(torch.promote_types(advantages.dtype, response_mask.dtype))
        return advantages, advantages


@register_adv_est(AdvantageEstimator.GAE)
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float | torch.Tensor,
    lam: float | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's GAE: `(advantages, returns)`, both `[B, T]`, without gradients.

    Backwards over the positions, δ_t = r_t + γ·V_next − V_t and A_t = δ_t + γλ·A_{t+1}; at a position where
    `response_mask` is 0 (an observation token) A and V_next carry through unchanged (verl since PR #2337;
    Trinity-RFT 0.6.0's `ppo` does not skip, see `trl_ext.advantages.gae`). returns = A + values, then A is
    whitened over `response_mask` (verl's `masked_whiten`, which also fills the masked positions)."""
    require_inputs(
        "compute_gae_advantage_return",
        token_level_rewards=token_level_rewards,
        values=values,
        response_mask=response_mask,
        gamma=gamma,
        lam=lam,
    )
    with torch.no_grad():
        mask = response_mask.bool()
        advantages, returns = gae_advantage_return(token_level_rewards, values, mask, gamma, lam, skip_masked=True)
        return masked_whiten(advantages, response_mask), returns


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    dp_size: int = 1,
    batch_num_tokens: int | torch.Tensor | None = None,
    global_batch_size: int | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl 0.9's clipped value loss: `(vf_loss, vf_clipfrac)` (tensors).

    vf_loss = 0.5·`agg_loss`(max((V − R)², (clip(V, V_old − c, V_old + c) − R)²), response_mask, loss_agg_mode,
    dp_size, batch_num_tokens, global_batch_size, loss_scale_factor); vf_clipfrac = Σ m·[clipped term > unclipped] /
    (Σ m + 1e-8). `cliprange_value` c must be >= 0."""
    c = check_cliprange_value("compute_value_loss", cliprange_value)
    mask = response_mask.bool()
    selected = [torch.where(mask, x, 0) for x in (vpreds, values, returns)]  # NaN-safe gradient
    per_token, clipped = clipped_value_terms(*selected, c)
    vf_loss = 0.5 * agg_loss(
        per_token, response_mask, loss_agg_mode, dp_size, batch_num_tokens, global_batch_size, loss_scale_factor
    )
    vf_clipfrac = masked_mean(clipped.float(), response_mask)
    return vf_loss, vf_clipfrac
