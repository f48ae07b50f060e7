"""verl 0.9's loss aggregation: `agg_loss` and the per-token weights behind it (`agg_weights`), and verl's
`masked_mean` / `masked_whiten`, which the metrics, the whitened advantages and the value loss's clip fraction
share."""

from __future__ import annotations

import torch

from ...losses import EPS  # EPS = verl's masked_mean / seq-mean-token-mean ε

__all__ = ["AGG_LOSS_MODES", "agg_loss", "agg_weights", "masked_mean", "masked_whiten"]

AGG_LOSS_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def agg_weights(
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    dp_size: int = 1,
    batch_num_tokens: int | torch.Tensor | None = None,
    global_batch_size: int | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """The per-token weights w (`[B, T]`, 0 at masked positions) with `agg_loss(L, ...) = Σ w·L`, as in verl 0.9.

    With m the mask, n_i = Σ_t m_it the row's token count, D = `dp_size`:

    | `loss_agg_mode`           | w                                                                     |
    | ------------------------- | --------------------------------------------------------------------- |
    | `token-mean`              | m · D / N,   N = `batch_num_tokens` (default Σ m)                     |
    | `token-sum`               | m · D                                                                 |
    | `seq-mean-token-sum`      | m · D / G,   G = `global_batch_size` (default: rows with n_i > 0)     |
    | `seq-mean-token-mean`     | m / (n_i + 1e-8) · D / G                                              |
    | `seq-mean-token-sum-norm` | m · D / G / S,   S = `loss_scale_factor` (default T)                   |

    As in verl, the global counts are required when `dp_size > 1` (ValueError otherwise).
    """
    if loss_agg_mode not in AGG_LOSS_MODES:
        raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode!r}; expected one of {list(AGG_LOSS_MODES)}")
    dtype = loss_mask.dtype if loss_mask.dtype.is_floating_point else torch.float32
    mask = loss_mask.to(dtype)
    if loss_agg_mode == "token-sum":
        return mask * dp_size
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            if dp_size > 1:
                raise ValueError("(global) batch_num_tokens is required when dp_size > 1")
            batch_num_tokens = mask.sum()
        return mask / batch_num_tokens * dp_size
    row_tokens = mask.sum(-1, keepdim=True)
    if global_batch_size is None:
        if dp_size > 1:
            raise ValueError("global_batch_size is required when dp_size > 1")
        global_batch_size = (row_tokens > 0).sum()
    if loss_agg_mode == "seq-mean-token-mean":
        mask = mask / (row_tokens + EPS)
    weights = mask / global_batch_size * dp_size
    if loss_agg_mode == "seq-mean-token-sum-norm":
        weights = weights / (loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
    return weights


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    dp_size: int = 1,
    batch_num_tokens: int | torch.Tensor | None = None,
    global_batch_size: int | torch.Tensor | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """verl 0.9's `agg_loss`: Σ w·`loss_mat` over the valid positions, w from `agg_weights` (see there).

    Positions where `loss_mask` is 0 are selected away (NaN there does not propagate). One deviation: a micro-batch
    with no valid token and no global counts gives 0 (verl: 0/0 = NaN).

    Args:
        loss_mat: `[B, T]` per-token loss.
        loss_mask: `[B, T]` mask, 0/1 or bool.
        loss_agg_mode: One of `AGG_LOSS_MODES`.
        dp_size: The number of data-parallel ranks D.
        batch_num_tokens: The global batch's token count N (`token-mean`).
        global_batch_size: The global batch's sequence count G (the `seq-mean-*` modes).
        loss_scale_factor: S of `seq-mean-token-sum-norm` (default T).

    Returns:
        The 0-dim aggregate Σ w·`loss_mat`.

    Raises:
        ValueError: An unknown `loss_agg_mode`, or `dp_size > 1` without the global count the mode needs.
    """
    weights = agg_weights(loss_mask, loss_agg_mode, dp_size, batch_num_tokens, global_batch_size, loss_scale_factor)
    return torch.where(loss_mask.bool(), loss_mat * weights, 0).sum()


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's `masked_mean`: Σ m·x / (Σ m + 1e-8)."""
    return (torch.where(mask.bool(), values, 0) * mask).sum() / (mask.sum() + EPS)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's `masked_whiten(values, mask)` (shift_mean=True) at EVERY position: (x − mean)·rsqrt(var + 1e-8), mean
    and unbiased variance over `mask` (ε 1e-8 in the means); fewer than two valid positions is a ValueError."""
    count = mask.sum()
    if count == 0:
        raise ValueError("At least one element in the mask has to be 1.")
    if count == 1:
        raise ValueError("The sum of the mask is one, which can cause a division by zero.")
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask) * (count / (count - 1))
    return (values - mean) * torch.rsqrt(var + 1e-8)
