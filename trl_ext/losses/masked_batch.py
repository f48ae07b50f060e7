"""The masked batch view: one micro-batch as a loss sees it (`MaskedBatch`), and `aggregate_loss`.

A loss checks its inputs through the view where it enters, selects them (`where(mask, x, 0)`, before any arithmetic:
`exp(where(m, x, 0))` back-propagates nothing into a masked NaN, `where(m, exp(x), 0)` does), and reduces with the
plain functions of `trl_ext.losses.aggregation`. `guard` makes the loss NaN when an input it read is NaN or ±inf at a
valid position, also where a clamp would have made the loss finite.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

import torch

from .._validation import declared_inputs
from .aggregation import EPS, aggregate, check_loss_agg_mode, count_dtype, mean_over_rows, seq_mean
from .inputs import WINDOW_INPUTS, bool_mask, check_float, check_inputs, check_window_inputs, scalar, shape_of


class MaskedBatch:
    """One micro-batch as a loss sees it: the bool mask, its counts, the window's counts and the inputs read.

    `check`, `advantages`, `token_weights` and `row_values` validate an input (a ValueError naming it) and remember it
    for `guard`; `select` zeroes the masked positions; `mean` / `valid_mean` / `row_mean` average over the mask (the
    metrics); `aggregate` reduces the per-token loss by a `loss_agg_mode` (the window's share when the window counts
    are given), guarded. Build it with `masked_batch` (or `PolicyLoss.masked_batch`), which first checks the unknown
    keywords.

    Args:
        owner: Name used in error messages.
        logprob: `[B, T]` floating-point values; fixes the batch shape that every other per-token input must match.
        action_mask: `[B, T]`, bool or 0/1 of any real dtype. A non-bool mask is checked to hold only 0 and 1 (one
            device sync) and then read as bool; a bool mask costs nothing.
        global_valid_toks: The optimizer window's token count (NeMo-RL's name), a number or a 0-dim tensor. When
            given, the aggregate of this micro-batch is its share of the window's aggregate, so summing the shares of
            all micro-batches of a window gives the window's loss whatever the split.
        global_valid_seqs: The optimizer window's sequence (row) count, likewise.
        normalizer: The constant of `seq-mean-token-sum-norm` (default: T).
        value_name: `logprob`'s name in error messages (`entropy` for the entropy terms, `values` for
            `aggregate_loss`).
        mask_name: `action_mask`'s name in error messages.

    Raises:
        ValueError: `logprob` is not a floating-point `[B, T]` tensor, the mask has another shape or a value other
            than 0 and 1, or a window count is not a finite number >= 0 or a 0-dim real tensor.
    """

    def __init__(
        self,
        owner: str,
        logprob: torch.Tensor,
        action_mask: torch.Tensor,
        *,
        global_valid_toks: torch.Tensor | float | None = None,
        global_valid_seqs: torch.Tensor | float | None = None,
        normalizer: torch.Tensor | float | None = None,
        value_name: str = "logprob",
        mask_name: str = "action_mask",
    ) -> None:
        self.owner = owner
        self.value_name = value_name
        if not isinstance(logprob, torch.Tensor) or logprob.dim() != 2:
            raise ValueError(f"{owner}: {value_name} must be a [B, T] tensor, got shape {shape_of(logprob)}")
        check_float(owner, value_name, logprob)
        self.shape = tuple(logprob.shape)
        self.mask = bool_mask(owner, mask_name, self._check_shape(mask_name, action_mask))
        self.count_dtype = count_dtype(logprob.dtype)
        check_window_inputs(
            owner, global_valid_toks=global_valid_toks, global_valid_seqs=global_valid_seqs, normalizer=normalizer
        )
        self.window = {
            "global_valid_toks": global_valid_toks,
            "global_valid_seqs": global_valid_seqs,
            "normalizer": normalizer,
        }
        self.global_valid_toks, self.global_valid_seqs, self.normalizer = self.window.values()
        self.watched: list[torch.Tensor] = [logprob]  # the inputs read, `[B, T]` or `[B, 1]`: `guard` sums them

    # ---- inputs --------------------------------------------------------------------------------------------

    def _check_shape(self, name: str, x: Any) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != self.shape:
            raise ValueError(
                f"{self.owner}: {name} has shape {shape_of(x)} but {self.value_name} has shape {self.shape}; "
                "all per-token inputs must be [B, T]"
            )
        return x

    def read(self, x: torch.Tensor) -> torch.Tensor:
        """Remember `x` (an input, `[B, T]` or `[B, 1]`) for `guard`; return it."""
        self.watched.append(x)
        return x

    def check(self, name: str, x: Any) -> torch.Tensor:
        """A per-token input `[B, T]` of floating-point values that the loss reads (remembered for `guard`)."""
        return self.read(check_float(self.owner, name, self._check_shape(name, x)))

    def advantages(self, adv: Any, name: str = "advantages") -> torch.Tensor:
        """Advantages, selected: a per-token `[B, T]` input is 0 at masked positions; a per-sequence `[B]` / `[B, 1]`
        input stays a `[B, 1]` column (no `[B, T]` copy), 0 in rows without a valid token. A per-token loss built from
        the column is not 0 at padding: select it before aggregating."""
        self.broadcast_rows(adv, name)
        check_float(self.owner, name, adv)
        if adv.dim() == 2 and adv.shape[1] == self.shape[1] != 1:
            return self.select(self.read(adv))
        return self._valid(self.read(adv.reshape(-1, 1)))

    def token_weights(self, x: Any, name: str = "importance_sampling_ratio") -> torch.Tensor | None:
        """An optional per-token weight of the loss (the rollout importance-sampling correction), `[B, T]` or `[B, 1]`
        (one weight per sequence), as a selected `[B, T]` view (remembered for `guard`). None when not given."""
        if x is None:
            return None
        rows, cols = self.shape
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[0] != rows or x.shape[1] not in (1, cols):
            raise ValueError(
                f"{self.owner}: {name} has shape {shape_of(x)}; expected [B, T] or [B, 1] with B={rows}, T={cols}"
            )
        return self.select(self.read(check_float(self.owner, name, x)).expand(self.shape), name)

    def row_values(self, x: Any, name: str) -> torch.Tensor:
        """A per-sequence `[B]` floating-point input (e.g. DPO's precomputed reference sums), remembered for `guard`
        (a row without valid tokens is masked)."""
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != (self.shape[0],):
            raise ValueError(f"{self.owner}: {name} must be [B, T] or [B] with B={self.shape[0]}, got {shape_of(x)}")
        self.read(check_float(self.owner, name, x).unsqueeze(-1))
        return x

    def row_flags(self, x: Any, name: str) -> torch.Tensor:
        """A per-sequence boolean `[B]` mask (e.g. `expert_mask`): bool, or 0/1 (checked, one sync)."""
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != (self.shape[0],):
            raise ValueError(f"{self.owner}: {name} must be a [B] tensor with B={self.shape[0]}, got {shape_of(x)}")
        return bool_mask(self.owner, name, x)

    def broadcast_rows(self, x: Any, name: str) -> torch.Tensor:
        """A per-sequence `[B]` / `[B, 1]` or per-token `[B, T]` tensor, viewed as `[B, T]` (no copy)."""
        batch = self.shape[0]
        if isinstance(x, torch.Tensor):
            if x.dim() == 1 and x.shape[0] == batch:
                return x.unsqueeze(-1).expand(self.shape)
            if x.dim() == 2 and x.shape[0] == batch and x.shape[1] in (1, self.shape[1]):
                return x.expand(self.shape)
        raise ValueError(
            f"{self.owner}: {name} has shape {shape_of(x)}; expected [B], [B, 1] or [B, T] "
            f"with B={batch}, T={self.shape[1]}"
        )

    # ---- selection -----------------------------------------------------------------------------------------

    def select(self, x: torch.Tensor, name: str = "input", covers: tuple[torch.Tensor, ...] = ()) -> torch.Tensor:
        """`where(mask, x, 0)` for a `[B, T]` x: NaN / inf at masked positions reach neither the value nor the
        gradient. (`covers` is accepted and ignored.)"""
        return torch.where(self.mask, self._check_shape(name, x), 0)

    def _valid(self, x: torch.Tensor) -> torch.Tensor:
        """A `[B, T]` x selected over the mask, a `[B, 1]` column over the rows with a valid token."""
        if tuple(x.shape) == self.shape:
            return torch.where(self.mask, x, 0)
        return torch.where(self.row_tok.unsqueeze(-1) > 0, x, 0)

    def bound(self, like: torch.Tensor, condition: torch.Tensor, if_true: float, if_false: float) -> torch.Tensor:
        """`where(condition, if_true, if_false)` in `like`'s dtype (python scalars would give float32)."""
        return torch.where(condition, scalar(if_true, like), scalar(if_false, like))

    def guard(self, loss: torch.Tensor) -> torch.Tensor:
        """`loss + 0 · Σ_valid x` over every input read: exactly `loss` (value and gradient) when they are finite at
        the valid positions, NaN when one of them is NaN or ±inf there. Detached, no sync; summed in at least float32
        (and NaN if the finite values' sum overflows it, |Σ| > 3e38)."""
        with torch.no_grad():
            poison = sum(self._valid(x).sum(dtype=count_dtype(x.dtype)) for x in self.watched)
        return loss + (poison * 0).to(loss.dtype)

    # ---- counts and means ----------------------------------------------------------------------------------

    @cached_property
    def n_tok(self) -> torch.Tensor:
        return self.mask.sum(dtype=self.count_dtype)

    @cached_property
    def row_tok(self) -> torch.Tensor:
        return self.mask.sum(-1, dtype=self.count_dtype)

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """Token mean over the mask of an `x` that is already 0 (or False) at masked positions."""
        total = torch.count_nonzero(x) if x.dtype == torch.bool else x.sum()
        return total / (self.n_tok + EPS)

    def valid_mean(self, x: torch.Tensor) -> torch.Tensor:
        """Token mean over the mask of any `x` (selected first); of per-row `[B, 1]` flags, from the rows' counts."""
        if x.dtype == torch.bool:
            if x.shape == (self.shape[0], 1) and self.shape[1] != 1:
                return (self.row_tok * x.squeeze(-1)).sum() / (self.n_tok + EPS)
            return self.mean(x & self.mask)
        return self.mean(self.select(x))

    def row_mean(self, x: torch.Tensor) -> torch.Tensor:
        """Per-row (`[B]`) mean over the mask of an `x` that is already 0 at masked positions."""
        return x.sum(-1) / (self.row_tok + EPS)

    mean_over_rows = staticmethod(mean_over_rows)

    # ---- aggregation ---------------------------------------------------------------------------------------

    def aggregate(self, x: torch.Tensor, loss_agg_mode: str) -> torch.Tensor:
        """`aggregation.aggregate` of an `x` already 0 at masked positions, with this batch's window counts, guarded
        (`guard`)."""
        return self.guard(aggregate(x, self.mask, loss_agg_mode, **self.window))

    def seq_mean(self, rows: torch.Tensor) -> torch.Tensor:
        """The mean over rows of a per-row `[B]` loss (the window's share with `global_valid_seqs`), guarded."""
        return self.guard(seq_mean(rows, self.global_valid_seqs))


def masked_batch(
    owner: str,
    inputs: tuple[str, ...],
    logprob: torch.Tensor,
    action_mask: torch.Tensor,
    extra: Mapping[str, Any],
    *,
    value_name: str = "logprob",
    mask_name: str = "action_mask",
) -> MaskedBatch:
    """The `MaskedBatch` of a loss (or term) that reads `inputs`, given the keywords its signature did not bind
    (`extra`): unknown ones are an error (`check_inputs`), documented batch keys it does not read are ignored,
    and the window inputs it reads are passed on."""
    check_inputs(owner, inputs, extra)
    window = {key: extra[key] for key in WINDOW_INPUTS if key in extra and key in inputs}
    return MaskedBatch(owner, logprob, action_mask, value_name=value_name, mask_name=mask_name, **window)


def aggregate_loss(
    values: torch.Tensor,
    mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    normalizer: torch.Tensor | float | None = None,
    *,
    global_valid_toks: torch.Tensor | float | None = None,
    global_valid_seqs: torch.Tensor | float | None = None,
    **unknown: Any,
) -> torch.Tensor:
    """Reduce a `[B, T]` loss matrix to a scalar over the valid positions of `mask`.

    With m the mask, x the values and ε = 1e-8:

    | `loss_agg_mode`           | result                                                                  |
    | ------------------------- | ----------------------------------------------------------------------- |
    | `token-mean`              | Σ m·x / (Σ m + ε)                                                       |
    | `token-sum`               | Σ m·x (verl's, unnormalized: the loss grows with the number of tokens) |
    | `seq-mean-token-sum`      | mean over rows of Σ_t m·x                                               |
    | `seq-mean-token-mean`     | mean over rows of Σ_t m·x / (Σ_t m + ε)                                 |
    | `seq-mean-token-sum-norm` | Σ m·x / (normalizer + ε), normalizer defaulting to T                    |

    `seq-mean-token-sum-norm` is Trinity-RFT's form, without a division by the number of rows (pass
    `normalizer = T·B` for Dr. GRPO's Σ/(B·T)). "Rows" are all B rows, empty ones included, as in the reference.

    Window normalization (docs/design.md §2.6): pass the optimizer window's counts and the result is this
    micro-batch's *share* of the window aggregate: Σ m·x / (`global_valid_toks` + ε) for `token-mean`, Σ over rows /
    `global_valid_seqs` for the `seq-mean-*` modes (count every row, as the local mean does), and the unchanged
    Σ m·x (/ normalizer) for `token-sum` (`seq-mean-token-sum-norm`). The shares of all micro-batches of a window
    add up to the window's aggregate.

    Args:
        values: The `[B, T]` per-token loss, floating-point.
        mask: `[B, T]`, bool or 0/1 (a non-bool mask is checked, one device sync: pass a bool mask to skip it).
        loss_agg_mode: One of `LOSS_AGG_MODES` (the table above).
        normalizer: The constant of `seq-mean-token-sum-norm` (default: T), a number >= 0 or a 0-dim tensor.
        global_valid_toks: The window's token count (`token-mean`), a number >= 0 or a 0-dim tensor.
        global_valid_seqs: The window's sequence count (the `seq-mean-*` modes), likewise.

    Returns:
        The 0-dim aggregate (0 when there are no rows, B = 0). Masked positions are selected away before the sum,
            so NaN / inf there reach neither the value nor the gradient; NaN / ±inf at a valid position make it NaN.

    Raises:
        ValueError: An unknown `loss_agg_mode` (listing the valid ones) or keyword, non-floating `values`, a mask of
            another shape or holding values other than 0 and 1, or an invalid window count.
    """
    check_inputs("aggregate_loss", declared_inputs(aggregate_loss), unknown, ignored=())
    check_loss_agg_mode("aggregate_loss", loss_agg_mode)
    batch = MaskedBatch(
        "aggregate_loss",
        values,
        mask,
        global_valid_toks=global_valid_toks,
        global_valid_seqs=global_valid_seqs,
        normalizer=normalizer,
        value_name="values",
        mask_name="mask",
    )
    return batch.aggregate(batch.select(values), loss_agg_mode)
