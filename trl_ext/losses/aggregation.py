"""The aggregation modes (`loss_agg_mode`) as plain functions over a selected `[B, T]` loss, with the window counts.

`aggregate` reduces a per-token loss that is already 0 at masked positions (`select` first: `where(mask, x, 0)`
before any arithmetic, so that NaN / inf at a masked position reach neither the value nor the gradient). The table
of the modes is `aggregate_loss`'s docstring (`trl_ext.losses.masked_batch`); the window counts, docs/design.md §2.6.
"""

from __future__ import annotations

from typing import Any

import torch

from .._validation import check_choice

EPS = 1e-8
"""The ε of every masked mean, as in Trinity-RFT / verl (`masked_mean`)."""

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")

LOSS_AGG_HELP = (
    "How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on "
    "all processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's), "
    "`seq-mean-token-mean` (mean over sequences of "
    "each sequence's token mean, GRPO), `seq-mean-token-sum` (mean over sequences of token sums), "
    "`seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences · max_completion_length)). The result does not depend "
    "on how the window is split into micro-batches and processes."
)
"""The help text of every `loss_agg_mode` argument."""

Count = torch.Tensor | float


def check_loss_agg_mode(owner: str, value: Any, name: str = "loss_agg_mode") -> None:
    check_choice(owner, name, value, LOSS_AGG_MODES)


def select(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`where(mask, x, 0)` for a bool `mask` (broadcast): x at valid positions, 0 elsewhere, in value and gradient."""
    return torch.where(mask, x, 0)


def count_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the counts of values of `dtype`: at least float32, so that `count + ε` is not rounded away."""
    return torch.promote_types(dtype, torch.float32)


def window_count(count: Count, dtype: torch.dtype) -> Count:
    """A window count (a number or a 0-dim tensor) as a float or a tensor of `dtype`."""
    return count.to(dtype) if isinstance(count, torch.Tensor) else float(count)


def mean_over_rows(rows: torch.Tensor) -> torch.Tensor:
    """The mean of a per-row `[B]` tensor, 0 (not NaN) when there are no rows."""
    return rows.mean() if rows.shape[0] else rows.sum()


def seq_mean(rows: torch.Tensor, global_valid_seqs: Count | None = None) -> torch.Tensor:
    """The mean over rows of a per-row `[B]` value, or with the window's sequence count this batch's share of the
    window's mean: Σ rows / max(`global_valid_seqs`, 1)."""
    if global_valid_seqs is None:
        return mean_over_rows(rows)
    count = window_count(global_valid_seqs, count_dtype(rows.dtype))
    count = count.clamp(min=1) if isinstance(count, torch.Tensor) else max(count, 1.0)
    return rows.sum() / count


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    loss_agg_mode: str,
    *,
    global_valid_toks: Count | None = None,
    global_valid_seqs: Count | None = None,
    normalizer: Count | None = None,
) -> torch.Tensor:
    """Reduce a `[B, T]` loss `values`, already 0 at the masked positions of the bool `mask`, by `loss_agg_mode`
    (with m the mask: Σ m·x / (Σ m + ε), Σ m·x, mean over rows of Σ_t m·x or of Σ_t m·x / (Σ_t m + ε), and
    Σ m·x / (normalizer + ε)); with the window's counts, this batch's share of the window's aggregate."""
    dtype = count_dtype(values.dtype)
    if loss_agg_mode == "seq-mean-token-mean":
        return seq_mean(values.sum(-1) / (mask.sum(-1, dtype=dtype) + EPS), global_valid_seqs)
    if loss_agg_mode == "seq-mean-token-sum":
        return seq_mean(values.sum(-1), global_valid_seqs)
    if loss_agg_mode == "token-mean":
        count = mask.sum(dtype=dtype) if global_valid_toks is None else window_count(global_valid_toks, dtype)
        return values.sum() / (count + EPS)
    if loss_agg_mode == "token-sum":
        return values.sum()
    if loss_agg_mode == "seq-mean-token-sum-norm":
        return values.sum() / ((values.shape[-1] if normalizer is None else normalizer) + EPS)
    check_loss_agg_mode("aggregate", loss_agg_mode)
    raise AssertionError  # unreachable


def part_windows(
    owner: str,
    global_valid_toks: Any,
    global_valid_seqs: Any,
    expert_valid_toks: Any,
    expert_valid_seqs: Any,
    normalizer: Any = None,
) -> dict[str, dict[str, Any]]:
    """The window counts of MIX's two parts, from the window's counts over all rows and over the expert rows:
    `{"usual": {...}, "expert": {...}}`, each with `global_valid_toks` / `global_valid_seqs` and its share of
    `seq-mean-token-sum-norm`'s normalizer (sequences × max length, split by sequences). No host sync."""
    if None in (global_valid_seqs, expert_valid_toks, expert_valid_seqs):
        raise ValueError(
            f"{owner}: window normalization needs global_valid_toks, global_valid_seqs, expert_valid_toks and "
            "expert_valid_seqs together"
        )
    seqs = {"usual": global_valid_seqs - expert_valid_seqs, "expert": expert_valid_seqs}
    toks = {"usual": global_valid_toks - expert_valid_toks, "expert": expert_valid_toks}
    if isinstance(global_valid_seqs, torch.Tensor):
        all_seqs = global_valid_seqs.clamp(min=1)
    else:
        all_seqs = max(global_valid_seqs, 1)
    return {
        part: {
            "global_valid_toks": toks[part],
            "global_valid_seqs": seqs[part],
            "normalizer": None if normalizer is None else normalizer * seqs[part] / all_seqs,
        }
        for part in ("usual", "expert")
    }
