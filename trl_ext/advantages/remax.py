"""ReMax token-level advantages (Li et al. 2024, "ReMax: A Simple, Effective, and Efficient Reinforcement Learning
Method for Aligning Large Language Models", arXiv 2310.10505).

Ports Trinity-RFT `REMAXAdvantageFn` (`trinity/algorithm/advantage_fn/remax_advantage.py`, after verl's
`compute_remax_outcome_advantage`)::

    returns_t = sum_{s >= t} r_s * m_s            (undiscounted reverse cumulative sum over the row)
    A_t = returns_t - b * m_t

with `m` the loss mask `response_mask`, `r` the token rewards and `b` the sample's reward baseline (ReMax: the
reward of the greedy completion of the same prompt, computed by the caller).
"""

from __future__ import annotations

from typing import Any

import torch

from .base import AdvantageFn, AdvantageResult, check_per_sample, register_advantage
from .reinforce_plus_plus import place_token_rewards


@register_advantage("remax")
class REMAXAdvantage(AdvantageFn):
    """ReMax: `A_t = sum_{s >= t} r_s m_s - reward_baselines * m_t` on `response_mask` `m`, 0 elsewhere.

    `rewards` `[N]` or token-level `[N, T]`, placed exactly as `reinforceplusplus` places them (see
    `place_token_rewards`): a scalar reward on the row's last `completion_mask` token (else the last
    `response_mask` token).  As in the reference, the token rewards are multiplied by `response_mask` BEFORE the
    sum, so a reward that sits on a masked token (a completion that ends with a masked tool output, given
    `completion_mask`) does not count.  `reward_baselines` `[N]`: the baseline of each sample (finite).
    `group_ids` is unused; no arguments.

    The reference leaves the return at masked positions inside a response (between two turns) in its
    advantages; here every position outside `response_mask` is 0 (no loss reads them).
    """

    token_level = True
    token_rewards = True

    def optional_inputs_needed(self) -> tuple[str, ...]:
        return ("completion_mask",)  # where a scalar reward sits

    @torch.no_grad()
    def compute(
        self,
        rewards: torch.Tensor,
        group_ids: Any = None,
        *,
        response_mask: torch.Tensor,
        reward_baselines: torch.Tensor,
        completion_mask: torch.Tensor | None = None,
    ) -> AdvantageResult:
        token_rewards, mask = place_token_rewards(self.name, rewards, response_mask, completion_mask)
        n = mask.shape[0]
        baselines = torch.as_tensor(reward_baselines, device=mask.device)
        if baselines.dim() != 1:
            raise ValueError(f"{self.name}: reward_baselines must be 1-D [N], got shape {tuple(baselines.shape)}")
        baselines = check_per_sample(self.name, "reward_baselines", baselines, token_rewards.new_zeros(n))
        masked = torch.where(mask, token_rewards, torch.zeros_like(token_rewards))
        returns = masked.flip(-1).cumsum(-1).flip(-1)
        advantages = torch.where(mask, returns - baselines.to(returns.dtype).unsqueeze(-1), 0.0)
        return AdvantageResult(advantages, torch.ones(n, dtype=torch.bool, device=mask.device))
