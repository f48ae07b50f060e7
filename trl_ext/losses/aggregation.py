"""The aggregation modes of the losses (`loss_agg_mode`) and the window counts of MIX's two parts.

How a `[B, T]` per-token loss becomes a scalar is `aggregate_loss` (`trl_ext.losses.masked_batch`, the table of the
modes is its docstring); normalizing over the optimizer window is docs/design.md §2.6.
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


def check_loss_agg_mode(owner: str, value: Any, name: str = "loss_agg_mode") -> None:
    check_choice(owner, name, value, LOSS_AGG_MODES)


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
