"""PPO's generalized advantage estimation (GAE) from a critic's values, and the value targets (returns).

Papers: Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage Estimation" (arXiv
1506.02438); Schulman et al. 2017, "Proximal Policy Optimization Algorithms" (arXiv 1707.06347).

Ports Trinity-RFT 0.6.0 `PPOAdvantageFn` (`trinity/algorithm/advantage_fn/ppo_advantage.py`, registered as `ppo`,
default_args gamma 1.0, lam 1.0).  Per row, with
`r` the token rewards, `V` the critic's values and t running backwards over EVERY position of the row::

    δ_t = r_t + γ·V_{t+1} − V_t                 (V_T = 0 past the last position)
    A_t = δ_t + γλ·A_{t+1}                      (A_T = 0)
    returns = A + V                             (before whitening: the critic's targets)
    advantages = masked_whiten(A, response_mask)

**Masked positions inside a response** (the tool outputs of a multi-turn rollout, `response_mask` 0 between 1s)
take part in the recursion like any other position, as in Trinity-RFT 0.6.0.  verl (0.5 and later) skips them: at a
masked position it carries `nextvalues` and `lastgaelam` through unchanged, so the TD errors of observation tokens
never count; `gae_advantage_return(..., skip_masked=True)` computes verl's form, the `ppo` estimator Trinity-RFT's.
With γ = λ = 1 (the defaults) the two agree whenever no reward sits on a masked position: the sum telescopes to
A_t = Σ_{s≥t} r_s − V_t either way.

Values are read where the reference's critic has them: on the completion's tokens (`completion_mask`, the tool
outputs included — Trinity-RFT 0.6.0 on verl ≥ 0.8 slices the critic's output over the response's attended tokens
and pads with 0), or on `response_mask` without `completion_mask` (verl's legacy critic, `values * response_mask`);
they are 0 elsewhere, so the critic's output on padding never bootstraps the last token.  Rewards are placed as
`reinforceplusplus` places them (`place_token_rewards`).

`masked_whiten(x, m) = (x − mean)·rsqrt(var + 1e-8)` over ALL valid tokens of the batch (no grouping, shift_mean
as the reference's default: the result has mean 0), mean = Σ x·m / (Σ m + 1e-8), var the unbiased masked variance
(× Σm / (Σm − 1)); fewer than two valid tokens is an error (as the reference's `masked_var`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ..components import Argument
from .base import AdvantageFn, AdvantageResult, check_token_values, register_advantage
from .reinforce_plus_plus import masked_whiten, place_token_rewards


def gae_advantage_return(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float | torch.Tensor,
    lam: float | torch.Tensor,
    *,
    skip_masked: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(A, A + values)`: GAE's raw (not whitened) advantages `[N, T]` at every position, and the returns.

    `skip_masked=False`: Trinity-RFT 0.6.0 (every position is a step of the recursion, `mask` unused);
    `skip_masked=True`: verl ≥ 0.5 (at a position where `mask` is False, `A` and the next value are carried through
    unchanged, so `A_t` there is the advantage of the next valid token).  The loop runs over time and is vectorized
    over rows, with the reference's order of operations.
    """
    n, t_len = token_rewards.shape
    gamma_lam = gamma * lam
    nextvalues = token_rewards.new_zeros(n)
    lastgaelam = token_rewards.new_zeros(n)
    reversed_advantages = []
    for t in reversed(range(t_len)):
        if not skip_masked:
            nextvalues = values[:, t + 1] if t < t_len - 1 else token_rewards.new_zeros(n)
        delta = token_rewards[:, t] + gamma * nextvalues - values[:, t]
        gae = delta + gamma_lam * lastgaelam
        if skip_masked:
            nextvalues = torch.where(mask[:, t], values[:, t], nextvalues)
            lastgaelam = torch.where(mask[:, t], gae, lastgaelam)
        else:
            lastgaelam = gae
        reversed_advantages.append(lastgaelam)
    if not reversed_advantages:
        advantages = token_rewards.new_zeros((n, 0))
    else:
        advantages = torch.stack(reversed_advantages[::-1], dim=1)
    return advantages, advantages + values


@register_advantage("ppo")
class GAEAdvantage(AdvantageFn):
    """PPO's GAE (see the module docstring): `[N, T]` advantages whitened over the batch's valid tokens, 0 where
    `response_mask` is 0, and `AdvantageResult.returns` = A + V before whitening (0 where `response_mask` is 0).

    `compute(rewards, group_ids, *, response_mask, values, completion_mask=None)`:

    * `rewards`: token-level `[N, T]` (the reference's `token_level_rewards`), or `[N]` outcome rewards put on each
      row's last `completion_mask` token (else its last `response_mask` token), as `reinforceplusplus` does.
    * `group_ids`: unused (GAE compares no samples), may be None.
    * `response_mask` `[N, T]`: the loss mask (may have gaps: tool outputs); the whitening statistics run over it.
    * `values` `[N, T]`: the critic's values V_t of the state each token is chosen in; read on `completion_mask`
      (else `response_mask`), where they must be finite, 0 elsewhere.  Cast to the rewards' float dtype.
    * `completion_mask` (optional, `[N, T]`, must contain `response_mask`): the completion's tokens, tool outputs
      included (TRL's `completion_mask`; the reference's attention mask over the response).

    Every row is kept; no metrics (the reference reports none).
    """

    token_level = True
    token_rewards = True
    uses_groups: ClassVar[bool] = False

    arguments = (
        Argument(
            "gamma",
            1.0,
            "GAE discount γ of the token-level TD errors δ_t = r_t + γ·V_{t+1} − V_t (Trinity-RFT's PPO default 1.0).",
            ge=0,
            le=1,
        ),
        Argument(
            "lam",
            1.0,
            "GAE λ: A_t = δ_t + γλ·A_{t+1}; 1 gives the Monte-Carlo return minus V_t, 0 the one-step TD error "
            "(Trinity-RFT's PPO default 1.0).",
            ge=0,
            le=1,
        ),
    )

    def optional_inputs_needed(self) -> tuple[str, ...]:
        return ("completion_mask",)  # where a scalar reward sits and where the values are read

    @torch.no_grad()
    def compute(
        self,
        rewards: torch.Tensor,
        group_ids: Any = None,
        *,
        response_mask: torch.Tensor,
        values: torch.Tensor,
        completion_mask: torch.Tensor | None = None,
    ) -> AdvantageResult:
        token_rewards, mask = place_token_rewards(self.name, rewards, response_mask, completion_mask)
        value_mask = mask if completion_mask is None else torch.as_tensor(completion_mask, device=mask.device) != 0
        values = check_token_values(self.name, "values", values, value_mask)
        values = torch.where(value_mask, values.to(token_rewards.dtype), 0.0)
        n = mask.shape[0]
        keep = torch.ones(n, dtype=torch.bool, device=mask.device)
        if n == 0:
            return AdvantageResult(token_rewards, keep, returns=token_rewards.clone())
        advantages, returns = gae_advantage_return(token_rewards, values, mask, self.gamma, self.lam, skip_masked=False)
        try:
            advantages = masked_whiten(advantages, mask)
        except ValueError as e:
            raise ValueError(f"{self.name}: {e} in response_mask") from None
        zero = torch.zeros((), dtype=advantages.dtype, device=advantages.device)
        return AdvantageResult(torch.where(mask, advantages, zero), keep, returns=torch.where(mask, returns, zero))
