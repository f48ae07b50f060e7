"""DAPO's overlong reward shaping: a soft length penalty added to every completion's reward (pure torch).

Paper: Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (arXiv 2503.14476), §3.4
"Overlong Reward Shaping". With L the completion's length in tokens, L_max = `max_completion_length` and
L_cache = `overlong_buffer`, the reward gets

    R_length(L) = min(((L_max − L_cache) − L) / L_cache, 0)

times `overlong_penalty_factor`: 0 up to L_max − L_cache tokens, then falling linearly, to −1 at L_max. This is
verl's DAPO reward manager (`reward += min(−(L − expected) / buffer · factor, 0)`, expected = L_max − L_cache), whose
line goes on falling beyond L_max (−3·factor at L = 30 with L_max = 20, L_cache = 5). The paper and Trinity-RFT
0.6.0's `dapo_reward` instead clamp it at −factor beyond L_max; the two agree up to L_max, and a completion is never
longer than `max_completion_length` in TRL, so in training the penalty lies in [−factor, 0] either way. L counts every
completion token the rollout produced (tool outputs of a multi-turn rollout included, as the reference counts its
response).
"""

from __future__ import annotations

import torch

__all__ = ["overlong_penalty"]


def overlong_penalty(lengths: torch.Tensor, max_length: int, buffer: int, factor: float) -> torch.Tensor:
    """DAPO's soft overlong punishment `min(−(L − (max_length − buffer)) / buffer · factor, 0)` per completion.

    Args:
        lengths: `[N]` completion lengths in tokens.
        max_length: The longest completion allowed (`max_completion_length`).
        buffer: The number of tokens before `max_length` over which the penalty grows linearly to `−factor`
            (`overlong_buffer`, > 0 and <= `max_length`).
        factor: The penalty at `max_length` (`overlong_penalty_factor`).

    Returns:
        `[N]` float penalties (<= 0): 0 up to `max_length − buffer` tokens, then falling linearly, by `factor` per
        `buffer` tokens, also beyond `max_length` (verl's formula; Trinity-RFT clamps at −`factor` there).
    """
    expected = max_length - buffer
    excess = lengths.to(torch.float64) - expected
    return torch.clamp(-excess / buffer * factor, max=0.0).to(torch.float32)
