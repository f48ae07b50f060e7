"""REINFORCE++ token-level advantages (Hu 2025, "REINFORCE++", arXiv 2501.03262).

Ports Trinity-RFT `REINFORCEPLUSPLUSAdvantageFn` / verl `compute_reinforce_plus_plus_outcome_advantage`::

    returns_t = r_t + gamma * returns_{t+1}     over ALL positions t of the row (never reset)
    A = masked_whiten(returns, response_mask) * response_mask

`r_t` is the outcome reward on the row's last token (see `ReinforcePlusPlusAdvantage`) or the given token
rewards, and 0 elsewhere.  The running return is carried across masked positions inside a response — the tool
outputs spliced between model turns of a multi-turn rollout (TRL's loss mask `completion_mask * tool_mask`)
— so earlier turns get the discounted return of the whole rollout; with `gamma < 1` the masked positions
count in the discount too, as in the reference.

`masked_whiten(x, m) = (x - mean) * rsqrt(var + 1e-8)` with Trinity-RFT's masked statistics over ALL valid
tokens of the batch (no grouping): `mean = sum(x m) / (sum(m) + 1e-8)`, `var = sum((x - mean)^2 m) /
(sum(m) + 1e-8) * sum(m) / (sum(m) - 1)` (unbiased); fewer than two valid tokens is an error.

REINFORCE++-baseline (`reinforce_plus_plus_baseline`, ports verl 0.9.1
`compute_reinforce_plus_plus_baseline_outcome_advantage`) replaces the discounted return by the group-centred
outcome: with `R` the row's summed token rewards and `mean` its group's mean (0 for a group of one),

    A = verl_masked_whiten((R − mean) · m, m) · m

`verl_masked_whiten` is verl's `masked_whiten` op for op. It is not bit-identical to `masked_whiten` above: verl
computes the Bessel factor `sum(m) / (sum(m) − 1)` as its own tensor, which for a bool / integer mask is a float32
division (and `sum(m) + 1e-8` is float32 too), so on float64 values the two differ by up to ~1e-7 relative; with a
float64 mask they differ by rounding only (`var · (n / (n − 1))` vs `var · n / (n − 1)`).
"""

from __future__ import annotations

from typing import Any

import torch

from ..components import Argument
from .base import (
    AdvantageFn,
    AdvantageResult,
    as_float_tensor,
    check_mask,
    check_response_mask,
    group_index,
    group_stats,
    nonfinite_message,
    register_advantage,
    sequence_rewards,
)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """`(x - mean) * rsqrt(var + eps)`: Trinity-RFT's `masked_whiten` (masked mean, unbiased masked variance,
    both dividing by `sum(mask) + 1e-8`); values outside `mask` are ignored."""
    n = mask.sum()
    if n <= 1:
        raise ValueError(f"masked_whiten needs at least 2 valid tokens, got {int(n)}")
    m = mask.to(values.dtype)
    values = torch.where(mask, values, torch.zeros_like(values))
    count = n.to(values.dtype)
    mean = (values * m).sum() / (count + 1e-8)
    var = ((values - mean) ** 2 * m).sum() / (count + 1e-8)
    var = var * count / (count - 1)
    return (values - mean) * torch.rsqrt(var + eps)


def verl_masked_whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl 0.9.1's `verl.utils.torch_functional.masked_whiten(values, mask)`, op for op (see the module docstring):
    `(x − mean) · rsqrt(var + 1e-8)`, `mean = Σ x·m / (Σ m + 1e-8)`, `var = Σ (x − mean)²·m / (Σ m + 1e-8) ·
    (Σ m / (Σ m − 1))`, each sum over the positions where `mask` is nonzero.  `mask` is used in its own dtype, as
    verl uses it (a bool / integer mask makes the token count's arithmetic float32).

    Raises:
        ValueError: `mask` selects fewer than 2 values (verl raises too).
    """
    selected = mask.bool()
    mask_sum = mask.sum()
    if mask_sum <= 1:
        raise ValueError(f"verl_masked_whiten needs at least 2 valid tokens in the mask, got {int(mask_sum)}")

    def masked_mean(x: torch.Tensor) -> torch.Tensor:
        return (torch.where(selected, x, 0.0) * mask).sum() / (mask.sum() + 1e-8)

    mean = masked_mean(values)
    variance = masked_mean((values - mean) ** 2) * (mask_sum / (mask_sum - 1))
    return (values - mean) * torch.rsqrt(variance + 1e-8)


def reinforce_plus_plus_baseline_advantages(
    scores: torch.Tensor, index: torch.Tensor, num_groups: int, response_mask: torch.Tensor
) -> torch.Tensor:
    """REINFORCE++-baseline advantages `[N, T]` (verl `compute_reinforce_plus_plus_baseline_outcome_advantage`).

    Args:
        scores: `[N]` one outcome per row (verl: the row's summed token rewards).
        index: `[N]` long, each row's group in `0..num_groups − 1`.
        num_groups: The number of groups G.
        response_mask: `[N, T]` 0/1 (bool or numeric, used in its dtype as verl does) loss mask.

    Returns:
        `verl_masked_whiten((R − mean)·m, m)·m`, `mean` the group mean (0 for a group of one).

    Raises:
        ValueError: the mask has fewer than 2 valid tokens (from `verl_masked_whiten`).
    """
    _, mean, _ = group_stats(scores, index, num_groups)
    tiled = (scores - mean[index]).unsqueeze(-1).expand(-1, response_mask.shape[-1]) * response_mask
    return verl_masked_whiten(tiled, response_mask) * response_mask


def place_token_rewards(
    owner: str, rewards: Any, response_mask: Any, completion_mask: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(token_rewards [N, T], response_mask as bool)` for the token-level estimators (REINFORCE++, ReMax).

    `rewards` `[N]` puts each sample's reward on the row's last `completion_mask` token (where Trinity-RFT puts
    it: the last attended token), or the last `response_mask` token without `completion_mask`; a row without
    such a token gets none.  Token rewards `[N, T]` count where `completion_mask` (else `response_mask`) is 1 and
    are 0 elsewhere (values there, even NaN, are ignored).  `completion_mask` must contain `response_mask`.
    """
    rewards = as_float_tensor(owner, "rewards", rewards)
    mask = check_response_mask(owner, response_mask, rewards.device)
    n, t = mask.shape
    if rewards.shape not in ((n,), (n, t)):
        raise ValueError(
            f"{owner}: rewards must have shape [N] or [N, T] = {(n, t)} matching response_mask "
            f"{(n, t)}, got {tuple(rewards.shape)}"
        )
    reward_mask = mask
    if completion_mask is not None:
        reward_mask = check_mask(owner, "completion_mask", completion_mask, mask.shape, rewards.device)
        outside = mask & ~reward_mask
        if bool(outside.any()):
            row, col = (int(i) for i in outside.nonzero()[0])
            raise ValueError(
                f"{owner}: response_mask is 1 where completion_mask is 0 (at [{row}, {col}]); the loss mask "
                "must lie inside the completion"
            )
    if rewards.dim() == 1:
        msg = nonfinite_message("rewards", rewards)
        if msg:
            raise ValueError(f"{owner}: {msg}; all rewards must be finite")
        positions = torch.arange(t, device=rewards.device).expand(n, t)
        last = torch.where(reward_mask, positions, -1).amax(dim=1) if t else positions.new_full((n,), -1)
        rows = (last >= 0).nonzero().flatten()
        token_rewards = rewards.new_zeros((n, t))
        token_rewards[rows, last[rows]] = rewards[rows]
    else:
        where = "completion_mask" if completion_mask is not None else "response_mask"
        msg = nonfinite_message("rewards", rewards, where=reward_mask)
        if msg:
            raise ValueError(f"{owner}: {msg}; rewards must be finite where {where} is 1")
        token_rewards = torch.where(reward_mask, rewards, torch.zeros_like(rewards))
    return token_rewards, mask


@register_advantage("reinforceplusplus")
class ReinforcePlusPlusAdvantage(AdvantageFn):
    """REINFORCE++: discounted token returns whitened over the batch's valid tokens (see module docstring).

    `rewards` is either `[N]` or token-level `[N, T]`; returns `[N, T]` advantages, 0 where
    `response_mask` (the loss mask, may have gaps) is 0.  `group_ids` is unused.

    `completion_mask` (optional, `[N, T]`, must contain `response_mask`): the tokens of the completion,
    masked tool outputs included (TRL's `completion_mask`; Trinity-RFT's attention mask over the response).
    A scalar reward sits on the row's last `completion_mask` token — where Trinity-RFT puts it — and token
    rewards count wherever `completion_mask` is 1.  Without it, `response_mask` plays that role: the reward
    sits on the last loss token.  The two differ only with `gamma < 1` for a completion that ends with masked
    tokens (a rollout stopped after a tool output).
    """

    token_level = True
    token_rewards = True

    arguments = (
        Argument(
            "gamma",
            1.0,
            "Discount of the token-level returns (the outcome reward sits on the last token); the returns are "
            "whitened over all valid tokens of the generation batch.",
            ge=0,
            le=1,
        ),
    )

    def optional_inputs_needed(self) -> tuple[str, ...]:
        return ("completion_mask",)  # where a scalar reward sits

    @torch.no_grad()
    def compute(
        self,
        rewards: torch.Tensor,
        group_ids: Any = None,
        *,
        response_mask: torch.Tensor,
        completion_mask: torch.Tensor | None = None,
    ) -> AdvantageResult:
        token_rewards, mask = place_token_rewards(self.name, rewards, response_mask, completion_mask)
        n, t = mask.shape
        keep = torch.ones(n, dtype=torch.bool, device=mask.device)
        if n == 0:
            return AdvantageResult(token_rewards, keep)

        returns = torch.zeros_like(token_rewards)
        running = token_rewards.new_zeros(n)
        for i in reversed(range(t)):  # loop over time only, vectorized over the batch
            running = token_rewards[:, i] + self.gamma * running
            returns[:, i] = running
        try:
            advantages = masked_whiten(returns, mask) * mask.to(returns.dtype)
        except ValueError as e:
            raise ValueError(f"{self.name}: {e} in response_mask") from None
        return AdvantageResult(advantages, keep)


@register_advantage("reinforce_plus_plus_baseline")
class ReinforcePlusPlusBaselineAdvantage(AdvantageFn):
    """REINFORCE++-baseline (Hu 2025, arXiv 2501.03262; verl `reinforce_plus_plus_baseline`): `A = whiten((R −
    mean)·m, m)·m` with `R` the summed token rewards, `mean` its group's mean (0 for a group of one), whitened with
    verl's `masked_whiten` over all valid tokens of the batch (see the module docstring).

    `compute(rewards [N] or [N, T], group_ids, *, response_mask [N, T])`; token rewards are summed over the whole
    row as in verl (every entry must be finite).  Fewer than 2 valid tokens in the batch is a ValueError (verl
    raises); an empty batch gives an empty `[0, T]` result.
    """

    token_level = True
    token_rewards = True

    @torch.no_grad()
    def compute(self, rewards: torch.Tensor, group_ids: Any, *, response_mask: torch.Tensor) -> AdvantageResult:
        device = rewards.device if isinstance(rewards, torch.Tensor) else None
        mask = check_response_mask(self.name, response_mask, device)
        scores = sequence_rewards(self.name, rewards, mask)
        index, num_groups = group_index(self.name, group_ids, scores.numel(), scores.device)
        keep = torch.ones(mask.shape[0], dtype=torch.bool, device=mask.device)
        if mask.shape[0] == 0:
            return AdvantageResult(scores.new_zeros(mask.shape), keep)
        try:
            advantages = reinforce_plus_plus_baseline_advantages(scores, index, num_groups, mask)
        except ValueError as e:
            raise ValueError(f"{self.name}: {e} (response_mask)") from None
        return AdvantageResult(advantages, keep)
