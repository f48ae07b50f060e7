"""The masked batch view: one micro-batch as a loss sees it (`MaskedBatch`), and `aggregate_loss`.

Masked positions never reach the loss or the gradient: a loss first *selects* its inputs,
`where(mask, x, 0)` (`MaskedBatch.select`, computed as a bitwise AND), and only then computes. Selecting before any
arithmetic matters for the gradient too: `where(m, exp(x), 0)` still back-propagates `0 * exp(nan)`
into `x`, while `exp(where(m, x, 0))` does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

import torch

from .._validation import declared_inputs
from .aggregation import EPS, check_loss_agg_mode
from .inputs import (
    WINDOW_INPUTS,
    bool_mask,
    check_float,
    check_inputs,
    check_mask,
    check_window_inputs,
    scalar,
    shape_of,
)
from .number_masks import multiplying_batches

_PER_ROW_MODES = ("seq-mean-token-mean", "seq-mean-token-sum")
"""The aggregation modes computed from per-row sums; the others divide the sum over all tokens."""

_DOT_DTYPES = (torch.float32, torch.float64)
"""The dtypes whose masked sums are taken as dot products (a half-precision dot accumulates in half precision)."""

_SAME_WIDTH_INT = {torch.float64: torch.int64, torch.float32: torch.int32, torch.bfloat16: torch.int16}
_SAME_WIDTH_INT[torch.float16] = torch.int16


class _Select(torch.autograd.Function):
    """`where(mask, x, 0)` and its gradient `where(mask, grad, 0)`, each as one bitwise AND of x's bits with an integer
    mask of x's width (all ones at valid positions, 0 elsewhere): the same bits (a masked NaN / inf becomes +0), in one
    vectorized pass where `torch.where` runs a scalar loop on CPU (~3× slower at B·T = 2^19)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(bits)
        return _and_bits(x, bits)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (bits,) = ctx.saved_tensors
        return _and_bits(grad, bits), None


def _and_bits(x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    return torch.bitwise_and(x.view(bits.dtype), bits).view(x.dtype)


class MaskedBatch:
    """One micro-batch as a loss sees it: the boolean mask, its counts and the window's counts.

    Every loss (and `aggregate_loss`, the KL and entropy terms) computes through it, so that the module's input rules
    hold in one place: `check`, `advantages`, `token_weights` and `row_values` validate an input and remember it (as
    `logprob` is); `select` zeroes the masked positions before any arithmetic; `mean` / `valid_mean` / `row_mean`
    average over the mask (the metrics); `aggregate` reduces the per-token loss by a `loss_agg_mode` (the window's
    share when the window counts are given) and, through `guard`, makes it NaN when an input it remembered is NaN or
    ±inf at a valid position. Build it with `masked_batch` (or `PolicyLoss.masked_batch`), which first checks the
    unknown keywords.

    Args:
        owner: Name used in error messages.
        logprob: `[B, T]` floating-point values; fixes the batch shape that every other per-token input must match.
        action_mask: `[B, T]`, bool or 0/1 of any real dtype. A non-bool mask is checked to hold only 0 and 1, at
            the cost of one device sync; a bool mask is not.
        global_valid_toks: The optimizer window's token count (NeMo-RL's name), a number or a 0-dim tensor. When
            given, the aggregate of this micro-batch is its share of the window's aggregate (see `aggregate`), so
            summing the shares of all micro-batches of a window gives the window's loss whatever the split.
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
        self._check_shape(mask_name, action_mask)
        self._mask_input = check_mask(owner, mask_name, action_mask)
        multiplying = multiplying_batches()
        self._multiply = multiplying is not None and action_mask.dtype != torch.bool  # see number_masks
        if self._multiply:
            multiplying.append(self)
        self._as_dtype: dict[torch.dtype, torch.Tensor] = {}  # the number mask in the values' dtypes
        # Counts in the values' precision (at least float32), so that "+ ε" is not rounded away.
        self.count_dtype = torch.promote_types(logprob.dtype, torch.float32)
        check_window_inputs(
            owner, global_valid_toks=global_valid_toks, global_valid_seqs=global_valid_seqs, normalizer=normalizer
        )
        self.global_valid_toks = global_valid_toks
        self.global_valid_seqs = global_valid_seqs
        self.normalizer = normalizer
        self._reads: dict[int, torch.Tensor] = {id(logprob): logprob}  # id -> an input `guard` watches (`read`)
        self._covers: dict[int, torch.Tensor] = {}  # id of a watched input -> a tensor covering it (`cover`)
        self._own_selection: dict[int, torch.Tensor] = {}  # id of a watched input -> its own selection
        self._bits: dict[torch.dtype, torch.Tensor] = {}  # integer masks of `_select`, by width

    # ---- input checks and selection ----------------------------------------------------------------

    def _check_shape(self, name: str, x: Any) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != self.shape:
            raise ValueError(
                f"{self.owner}: {name} has shape {shape_of(x)} but {self.value_name} has shape {self.shape}; "
                "all per-token inputs must be [B, T]"
            )
        return x

    def read(self, x: torch.Tensor) -> torch.Tensor:
        """Remember `x` (an input, `[B, T]` or `[B, 1]`) for `guard`; return it."""
        self._reads.setdefault(id(x), x)
        return x

    def _watched(self, x: torch.Tensor) -> bool:
        return self._reads.get(id(x)) is x

    def check(self, name: str, x: Any) -> torch.Tensor:
        """A per-token input `[B, T]` of floating-point values that the loss reads (remembered for `guard`)."""
        return self.read(check_float(self.owner, name, self._check_shape(name, x)))

    def select(self, x: torch.Tensor, name: str = "input", covers: tuple[torch.Tensor, ...] = ()) -> torch.Tensor:
        """`x` at valid positions, 0 elsewhere (NaN / inf at masked positions are dropped). A watched input is selected
        once (a second call returns the same tensor) and its selection is kept for `guard`, which then needs no pass of
        its own over that input; so is the selection of an `x` computed from watched inputs `covers` such that a NaN /
        ±inf in any of them makes `x` NaN / ±inf there (their difference `logprob − old_logprob`: inf − inf is NaN)."""
        watched = self._watched(x)
        earlier = self._own_selection.get(id(x)) if watched else None
        if earlier is not None and (earlier.requires_grad or not (x.requires_grad and torch.is_grad_enabled())):
            return earlier  # (not one made under no_grad where a gradient is wanted now)
        selected = self._select(self._check_shape(name, x))
        if watched:
            self._own_selection[id(x)] = selected
        self.cover(selected, x, *covers)
        return selected

    def cover(self, x: torch.Tensor, *inputs: torch.Tensor) -> None:
        """Record that `x` covers the watched `inputs`: a NaN / ±inf in any of them at a valid position makes x (any
        shape) NaN / ±inf somewhere, and x is finite where they are, so that `guard` sums x instead of each input."""
        for source in inputs:
            if self._watched(source):
                self._covers[id(source)] = x

    def row_sums(self, x: torch.Tensor, name: str = "input") -> torch.Tensor:
        """The per-row sums `[B]` of a watched input x over the valid positions, which then cover x (`guard` sums
        these instead of a `[B, T]` selection). The selection is a temporary: not kept, as `select` keeps it."""
        rows = self._select(self._check_shape(name, x)).sum(-1)
        self.cover(rows, x)
        return rows

    def advantages(self, adv: Any, name: str = "advantages") -> torch.Tensor:
        """Advantages, NaN-safe: a per-token `[B, T]` input is selected (0 at masked positions); a
        per-sequence `[B]` / `[B, 1]` input stays a `[B, 1]` column (no `[B, T]` copy) with rows that have
        no valid token set to 0. Per-token losses built from the column are not 0 at padding, so a loss
        using it selects its per-token loss before aggregating."""
        full = self.broadcast_rows(adv, name)
        check_float(self.owner, name, adv)
        if adv.dim() == 2 and adv.shape[1] == self.shape[1] != 1:
            self.read(adv)
            return self._select(full)
        column = adv.reshape(-1, 1)
        self.read(column)
        return self._row_select(column)

    def token_weights(self, x: Any, name: str = "importance_sampling_ratio") -> torch.Tensor | None:
        """An optional per-token weight of the loss (the vLLM / rollout importance-sampling correction), `[B, T]` or
        `[B, 1]` (one weight per sequence), as a `[B, T]` view selected over the mask (0 at masked positions, so NaN /
        ±inf there never reach the loss); remembered for `guard` (NaN / ±inf at a valid position make the loss NaN).
        None when not given."""
        if x is None:
            return None
        rows, cols = self.shape
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[0] != rows or x.shape[1] not in (1, cols):
            raise ValueError(
                f"{self.owner}: {name} has shape {shape_of(x)}; expected [B, T] or [B, 1] with B={rows}, T={cols}"
            )
        self.read(check_float(self.owner, name, x))
        return self.select(x.expand(self.shape), name)

    def bound(self, like: torch.Tensor, condition: torch.Tensor, if_true: float, if_false: float) -> torch.Tensor:
        """`where(condition, if_true, if_false)` in `like`'s dtype (python scalars would give float32)."""
        return torch.where(condition, scalar(if_true, like), scalar(if_false, like))

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

    def row_values(self, x: Any, name: str) -> torch.Tensor:
        """A per-sequence `[B]` floating-point input (e.g. DPO's precomputed reference sums), remembered for
        `guard` (a row without valid tokens is masked)."""
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != (self.shape[0],):
            raise ValueError(f"{self.owner}: {name} must be [B, T] or [B] with B={self.shape[0]}, got {shape_of(x)}")
        self.read(check_float(self.owner, name, x).unsqueeze(-1))
        return x

    def row_flags(self, x: Any, name: str) -> torch.Tensor:
        """A per-sequence boolean `[B]` mask (e.g. `expert_mask`): bool, or 0/1 (checked, one sync)."""
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != (self.shape[0],):
            raise ValueError(f"{self.owner}: {name} must be a [B] tensor with B={self.shape[0]}, got {shape_of(x)}")
        return bool_mask(self.owner, name, x)

    def guard(self, loss: torch.Tensor) -> torch.Tensor:
        """`loss` + 0 · (Σ over valid positions of every input read): exactly `loss` (value and gradient) when they are
        finite there, NaN when any of them is NaN or ±inf at a valid position. Detached, no sync. The sums run in at
        least float32 (a float16 input's sum would overflow), over a tensor that covers the input where there is one
        (its selection, its row sums, or what `cover` recorded: no extra pass over the input)."""
        poison, summed = None, set()
        for key, x in self._reads.items():
            covering = self._covers.get(key)
            if covering is None:
                covering = self._select(x) if x.shape == self.shape else self._row_select(x)
            elif id(covering) in summed:  # one tensor covering several inputs (`cover`)
                continue
            summed.add(id(covering))
            total = covering.detach().sum(dtype=torch.promote_types(covering.dtype, torch.float32))
            poison = total if poison is None else poison + total
        return loss + (poison * 0).to(loss.dtype)

    def _select(self, x: torch.Tensor) -> torch.Tensor:
        """`where(mask, x, 0)` (gradient included) for a floating-point `[B, T]` x, as a bitwise AND (`_Select`), or
        x·m for a number mask inside a `multiplying_number_masks` call."""
        if self._multiply:
            return x * self._mask_in(x.dtype)
        int_dtype = _SAME_WIDTH_INT.get(x.dtype)
        if int_dtype is None:  # a float dtype without an integer twin (float8): the plain select
            return torch.where(self.mask, x, 0)
        bits = self._bits.get(int_dtype)
        if bits is None:  # all ones (-1) at valid positions, 0 elsewhere; once per width
            # (a copy even when the mask already has that dtype: neg_ must never write to the caller's mask)
            bits = self._bits[int_dtype] = self._mask_numbers.to(int_dtype, copy=True).neg_()
        return _Select.apply(x, bits)

    def _mask_in(self, dtype: torch.dtype) -> torch.Tensor:
        """The mask as 0/1 numbers of `dtype` (the input itself when it has that dtype; made once per dtype)."""
        mask = self._as_dtype.get(dtype)
        if mask is None:
            mask = self._as_dtype[dtype] = self._mask_numbers.to(dtype)
        return mask

    def _row_select(self, column: torch.Tensor) -> torch.Tensor:
        """A per-row `[B, 1]` input at the rows with a valid token (0 elsewhere). With a multiplied number mask, the
        column as it is: a NaN / inf in a row without tokens makes the loss non-finite there (0·NaN, or the guard's
        sum), and the call is recomputed with this select (`multiplying_number_masks`)."""
        if self._multiply:
            return column
        return torch.where(self.row_tok.unsqueeze(-1) > 0, column, 0)

    # ---- counts and means ----------------------------------------------------------------------------

    @cached_property
    def mask(self) -> torch.Tensor:
        """The mask as bool."""
        return self._mask_input.bool()

    @property
    def _mask_numbers(self) -> torch.Tensor:
        """The mask as 0/1 numbers without a copy: a bool mask read as uint8, a number mask as it is."""
        given = self._mask_input
        return given.view(torch.uint8) if given.dtype == torch.bool else given

    # Counted as sums of the 0/1 numbers in the counts' dtype (exact up to 2^24 tokens in float32): a vectorized pass
    # with no [B, T] copy, ~1.5x faster on CPU than count_nonzero of a bool tensor.
    @cached_property
    def n_tok(self) -> torch.Tensor:
        return self._mask_numbers.sum(dtype=self.count_dtype)

    @cached_property
    def row_tok(self) -> torch.Tensor:
        return self._mask_numbers.sum(-1, dtype=self.count_dtype)

    def _window_count(self, count: torch.Tensor | float) -> torch.Tensor | float:
        return count.to(self.count_dtype) if isinstance(count, torch.Tensor) else float(count)

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """Token mean over the mask of an `x` that is already 0 (or False) at masked positions."""
        total = torch.count_nonzero(x) if x.dtype == torch.bool else x.sum()
        return total / (self.n_tok + EPS)

    def valid_mean(self, x: torch.Tensor) -> torch.Tensor:
        """Token mean over the mask of any `x` (selects first); of per-row `[B, 1]` flags, from the rows' counts."""
        if x.dtype == torch.bool:
            if x.shape == (self.shape[0], 1) and self.shape[1] != 1:
                return (self.row_tok * x.squeeze(-1)).sum() / (self.n_tok + EPS)
            return self.mean(x & self.mask)
        return self.mean(self._select(x))

    def derived_mean(self, x: torch.Tensor) -> torch.Tensor:
        """Token mean over the mask of a `[B, T]` x computed from selected inputs, hence finite at masked positions (a
        ratio, a gate: their value at 0): one dot product with the 0/1 mask, no `[B, T]` selection. (Any other x: use
        `valid_mean`, whose select drops what a masked position holds.)"""
        if x.dtype not in _DOT_DTYPES or x.shape != self.shape:
            return self.valid_mean(x)
        return self._dot_with_mask(x) / (self.n_tok + EPS)

    def _dot_with_mask(self, x: torch.Tensor) -> torch.Tensor:
        """Σ x·m over all positions, one pass without a `[B, T]` product (NaN / inf at a masked position leak)."""
        return torch.dot(x.reshape(-1), self._mask_in(x.dtype).reshape(-1))

    def row_mean(self, x: torch.Tensor) -> torch.Tensor:
        """Per-row (`[B]`) mean over the mask of an `x` that is already 0 at masked positions."""
        return x.sum(-1) / (self.row_tok + EPS)

    @staticmethod
    def mean_over_rows(rows: torch.Tensor) -> torch.Tensor:
        """The mean of a per-row tensor, 0 (not NaN) when there are no rows."""
        return rows.mean() if rows.shape[0] else rows.sum()

    # ---- aggregation ---------------------------------------------------------------------------------

    def aggregate(self, x: torch.Tensor, loss_agg_mode: str, guarded: bool = True) -> torch.Tensor:
        """Aggregate an `x` that is already 0 at masked positions (see `aggregate_loss`), guarded (`guard`). A loss
        whose per-token value is a plain product of its selected inputs passes `guarded=False`: a NaN / ±inf among
        them at a valid position makes the sum itself NaN or ±inf (0·inf is NaN), which `loss + 0·loss` turns into
        NaN without a pass over the inputs."""
        if loss_agg_mode in _PER_ROW_MODES:
            return self._finish(loss_agg_mode, guarded, rows=x.sum(-1))
        return self._finish(loss_agg_mode, guarded, total=x.sum())

    def aggregate_input(self, x: torch.Tensor, loss_agg_mode: str, guarded: bool = True) -> torch.Tensor:
        """`aggregate(select(x), loss_agg_mode, guarded)` of a watched input x: with a multiplied number mask in the
        token modes, one dot product of x with the mask (no `[B, T]` selection; a masked NaN / inf makes it non-finite,
        and the call is then recomputed with the select: `multiplying_number_masks`)."""
        if not self._multiply or loss_agg_mode in _PER_ROW_MODES or x.dtype not in _DOT_DTYPES:
            return self.aggregate(self.select(x), loss_agg_mode, guarded)
        return self._finish(loss_agg_mode, guarded, total=self._dot_with_mask(x))

    def aggregate_product(
        self, coef: torch.Tensor, x: torch.Tensor, loss_agg_mode: str, guarded: bool = True
    ) -> torch.Tensor:
        """`aggregate(coef · x, loss_agg_mode, guarded)` for an x already 0 at masked positions, without the `[B, T]`
        product where it can: a per-row `[B, 1]` coef scales x's row sums (every mode is a function of the rows'
        Σ_t coef·x = coef · Σ_t x); a `[B, T]` coef in the token modes is one dot product."""
        if coef.shape[-1] == 1 and self.shape[1] != 1:
            return self._finish(loss_agg_mode, guarded, rows=coef.squeeze(-1) * x.sum(-1))
        if loss_agg_mode in _PER_ROW_MODES or coef.shape != x.shape or x.dtype not in _DOT_DTYPES:
            return self.aggregate(coef * x, loss_agg_mode, guarded)
        return self._finish(loss_agg_mode, guarded, total=torch.dot(coef.reshape(-1), x.reshape(-1)))

    def _finish(
        self, loss_agg_mode: str, guarded: bool, rows: torch.Tensor | None = None, total: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The aggregate from the per-row sums Σ_t x (`rows`, any mode) or the sum over all tokens (`total`, the token
        modes), guarded (`guard`) or not (`_as_nan`). ValueError for an unknown mode."""
        guard = self.guard if guarded else self._as_nan
        if loss_agg_mode == "seq-mean-token-mean":
            return guard(self._seq_mean(rows / (self.row_tok + EPS)))
        if loss_agg_mode == "seq-mean-token-sum":
            return guard(self._seq_mean(rows))
        if total is None:
            total = rows.sum()
        if loss_agg_mode == "token-mean":
            count = self.n_tok if self.global_valid_toks is None else self._window_count(self.global_valid_toks)
            return guard(total / (count + EPS))
        if loss_agg_mode == "token-sum":
            return guard(total)
        if loss_agg_mode == "seq-mean-token-sum-norm":
            normalizer = self.shape[1] if self.normalizer is None else self.normalizer
            return guard(total / (normalizer + EPS))
        check_loss_agg_mode(self.owner, loss_agg_mode)
        raise AssertionError  # unreachable

    def _as_nan(self, loss: torch.Tensor) -> torch.Tensor:
        """`loss`, NaN if it is ±inf (an unguarded loss is NaN or ±inf wherever an input is). With a multiplied number
        mask a non-finite result is recomputed anyway (`multiplying_number_masks`): `loss` as it is."""
        return loss if self._multiply else loss + loss.detach() * 0

    def _seq_mean(self, rows: torch.Tensor) -> torch.Tensor:
        if self.global_valid_seqs is None:
            return self.mean_over_rows(rows)
        count = self._window_count(self.global_valid_seqs)
        count = count.clamp(min=1) if isinstance(count, torch.Tensor) else max(count, 1.0)
        return rows.sum() / count


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
