"""verl 0.9.1's `compute_entropy_loss`: the categorical entropy of the logits, aggregated with `agg_loss`.

Per token, H = logsumexp(z) − Σ softmax(z)·z (verl's `entropy_from_logits`: the entropy −Σ p·log p of the next-token
distribution, computed from the logits z without forming log p). The aggregate is `agg_loss(H, response_mask,
loss_agg_mode)` (no global batch information, as in verl).
"""

from __future__ import annotations

import torch

from .aggregation import agg_loss

__all__ = ["compute_entropy_loss", "entropy_from_logits"]


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """The entropy of softmax(`logits`) over the last dimension: `[..., V] -> [...]`."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def compute_entropy_loss(
    logits: torch.Tensor, response_mask: torch.Tensor, loss_agg_mode: str = "token-mean"
) -> torch.Tensor:
    """`agg_loss(entropy_from_logits(logits), response_mask, loss_agg_mode)`, 0-dim.

    Args:
        logits: `[B, T, V]` logits.
        response_mask: `[B, T]` loss mask.
        loss_agg_mode: One of `AGG_LOSS_MODES`.

    Raises:
        ValueError: `logits` is not `[B, T, V]` matching `response_mask`, or an unknown `loss_agg_mode`.
    """
    if logits.dim() != 3 or logits.shape[:2] != response_mask.shape:
        raise ValueError(
            "compute_entropy_loss: logits must be [B, T, V] with [B, T] = response_mask's "
            f"{tuple(response_mask.shape)}, got {tuple(logits.shape)}"
        )
    return agg_loss(entropy_from_logits(logits), response_mask, loss_agg_mode)
