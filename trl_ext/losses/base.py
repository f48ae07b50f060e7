"""Shared machinery of the policy losses: the registry, argument checks and the masked batch view.

Every loss in this package follows one calling convention (Trinity-RFT's `policy_loss_fn`):

    loss, metrics = fn(logprob=lp, old_logprob=olp, action_mask=m, advantages=adv, **other_batch_keys)

Per-token tensors are `[B, T]`. `metrics` holds detached 0-dim tensors: nothing here calls `.item()` or
otherwise waits for the device (except the one check of a non-bool mask, below).

Rules every loss (and `aggregate_loss`, the KL and entropy terms) follows:

1. **Inputs are declared.** A loss reads the named parameters of its `__call__` plus the window inputs of
   its class attribute `window_inputs`; `PolicyLoss.inputs()` lists them, so a trainer can hand a loss
   exactly what it reads: `fn(**{k: batch[k] for k in fn.inputs() if k in batch})`. A key the loss does
   not read but that is one of the documented batch keys (`BATCH_INPUTS`) is ignored, so one batch dict
   fits every loss; any other key is a ValueError naming it (a typo such as `global_valid_tok` would
   otherwise silently fall back to micro-batch normalization).
2. **Types, shapes and dtypes are checked.** Values (`logprob`, `old_logprob`, `ref_logprob`,
   `advantages`, `entropy`, `values`) are floating-point tensors of the documented shapes; window counts
   are numbers >= 0 or 0-dim real tensors. Anything else is a ValueError naming the input.
3. **Masks are masks.** A mask is bool, or a number tensor holding only 0 and 1; any other value (0.5,
   2, NaN) is a ValueError naming the mask and the first offending position. That check costs one device
   sync, so it only runs for non-bool masks (and once per mask tensor until it changes in place: `check_mask`);
   a number mask then selects by multiplying, and the loss checks its result is finite (one more sync,
   `multiplying_number_masks`). Pass a bool mask (as the trl_ext trainers do) for no sync at all.
4. **An empty batch (B = 0 or T = 0) gives a finite 0 loss** with a zero (or empty) gradient and finite
   (0) metrics, under every aggregation mode.
5. **Non-finite values propagate, masked ones never do.** NaN or ±inf in an input the loss reads, at a
   *valid* position, makes the loss NaN — even where a clamp (the ±20 log-ratio clamp of ppo, sapo,
   importance_sampling, ...) would otherwise turn it into a finite number. The guard is
   0 · Σ_valid x over every input read (`MaskedBatch.guard`, summed in at least float32 over the selection the
   loss makes anyway), detached: exactly 0 for finite inputs (the loss and its gradient are unchanged) and NaN
   otherwise, with no device sync (and as NaN if the finite values' sum overflows float32, |Σ| > 3e38). At
   *masked* positions NaN / ±inf reach neither the loss, nor the gradient, nor the metrics.

Masked positions never reach the loss or the gradient: a loss first *selects* its inputs,
`where(mask, x, 0)` (`MaskedBatch.select`, computed as a bitwise AND), and only then computes. Selecting before any
arithmetic matters for the gradient too: `where(m, exp(x), 0)` still back-propagates `0 * exp(nan)`
into `x`, while `exp(where(m, x, 0))` does not.
"""

from __future__ import annotations

import contextvars
import difflib
import functools
import inspect
import math
import numbers
import weakref
from collections.abc import Callable, Iterable, Mapping
from functools import cached_property
from typing import Any, ClassVar

import torch

from .._validation import check_choice, declared_inputs
from ..components import SHARE, Argument, Component, Registry

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

Metrics = dict[str, torch.Tensor]

WINDOW_INPUTS = ("global_valid_toks", "global_valid_seqs", "normalizer")
"""The optimizer window's counts that a loss may take (`MaskedBatch`, `aggregate_loss`)."""

EXPERT_WINDOW_INPUTS = ("expert_valid_toks", "expert_valid_seqs")
"""The window's counts over the expert rows (MIX / MIX-CHORD and the `mix` entropy term)."""

BATCH_INPUTS = (
    "logprob",
    "old_logprob",
    "ref_logprob",
    "action_mask",
    "advantages",
    "expert_mask",
    "step",
    *WINDOW_INPUTS,
    *EXPERT_WINDOW_INPUTS,
)
"""The documented batch keys (Trinity-RFT's names plus the window counts). A loss ignores those of them it does
not read, so that a trainer can hand one batch dict to any loss; any other unknown key is an error."""


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


# --------------------------------------------------------------------------------------------------
# Argument checks (the generic ones live in trl_ext._validation)
# --------------------------------------------------------------------------------------------------


def check_loss_agg_mode(owner: str, value: Any, name: str = "loss_agg_mode") -> None:
    check_choice(owner, name, value, LOSS_AGG_MODES)


def loss_agg_mode_argument(default: str) -> Argument:
    """The `loss_agg_mode` argument of a loss, one of `LOSS_AGG_MODES`, defaulting to `default`."""
    return Argument("loss_agg_mode", default, LOSS_AGG_HELP, choices=LOSS_AGG_MODES)


def resolve_clip_range(
    owner: str, clip_range: float | None, clip_range_low: float | None, clip_range_high: float | None
) -> tuple[float, float]:
    """PPO-style ε (each value already checked by its spec): `clip_range_low` / `clip_range_high` fall back to the
    symmetric `clip_range`."""
    low = clip_range if clip_range_low is None else clip_range_low
    high = clip_range if clip_range_high is None else clip_range_high
    if low is None or high is None:
        raise ValueError(f"{owner}: no clip range given; set clip_range, or both clip_range_low and clip_range_high")
    return float(low), float(high)


# --------------------------------------------------------------------------------------------------
# Input checks (rules 1-3 of the module docstring)
# --------------------------------------------------------------------------------------------------


def check_inputs(
    owner: str, accepted: tuple[str, ...], given: Iterable[str], ignored: Iterable[str] = BATCH_INPUTS
) -> None:
    """Raise ValueError for the keys of `given` that are neither `accepted` (what `owner` reads) nor `ignored`
    (by default the documented batch keys, `BATCH_INPUTS`), naming them, what `owner` reads and the closest
    valid names."""
    ignored = tuple(ignored)
    unknown = [key for key in given if key not in accepted and key not in ignored]
    if not unknown:
        return
    known = [*accepted, *(key for key in ignored if key not in accepted)]
    hints: list[str] = []
    for key in unknown:
        hints += [repr(c) for c in difflib.get_close_matches(str(key), known, n=1) if repr(c) not in hints]
    plural = "s" if len(unknown) > 1 else ""
    message = f"{owner}: unknown input{plural} {', '.join(map(repr, unknown))}; {owner} reads {', '.join(accepted)}"
    if hints:
        message += f" (did you mean {' or '.join(hints)}?)"
    raise ValueError(message)


def _shape(x: Any) -> tuple | str:
    return tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__


def check_float(owner: str, name: str, x: torch.Tensor) -> torch.Tensor:
    """`x` (a tensor) must hold floating-point values."""
    if not x.dtype.is_floating_point:
        raise ValueError(f"{owner}: {name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def check_window_input(owner: str, name: str, value: Any) -> None:
    """A window count (`global_valid_toks`, ..., `normalizer`): None, a finite number >= 0 or a 0-dim real tensor."""
    if value is None:
        return
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or value.dtype == torch.bool or value.dtype.is_complex:
            raise ValueError(
                f"{owner}: {name} must be a number or a 0-dim real tensor, got shape {tuple(value.shape)} "
                f"and dtype {value.dtype}"
            )
        return
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return
    raise ValueError(f"{owner}: {name}={value!r} is not valid; must be a finite number >= 0 or a 0-dim tensor")


def check_window_inputs(owner: str, **values: Any) -> None:
    """`check_window_input` for each keyword."""
    for name, value in values.items():
        check_window_input(owner, name, value)


def scalar(value: float, like: torch.Tensor) -> torch.Tensor:
    """A 0-dim tensor holding `value` in `like`'s dtype and device. Filled on the device: `torch.tensor(value,
    device=...)` / `new_tensor` copy from host memory, which waits for the GPU (a host sync per call)."""
    return torch.full((), value, dtype=like.dtype, device=like.device)


_CHECKED_NUMBER_MASKS: dict[int, tuple[weakref.ref, int]] = {}
"""id of a number mask found to hold only 0 and 1 -> (a weak reference to it, its version counter then)."""


def check_mask(owner: str, name: str, mask: torch.Tensor) -> torch.Tensor:
    """`mask` itself, checked: bool (no check, no sync), or numbers that are all 0 or 1, which costs one device sync
    (pass a bool mask to skip it).

    A number mask that passed is remembered (weakly) with its version counter, the counter autograd reads to detect a
    tensor changed in place: the same tensor, unchanged since, is not checked again (a Trinity-style step hands one
    mask to the policy loss, the KL term and the entropy term). Any in-place change made through torch (its views
    included) bumps the counter and brings the check back; a change made behind torch's back (through `.data`, a NumPy
    view or DLPack) is not seen."""
    if mask.dtype == torch.bool:
        return mask
    if mask.dtype.is_complex:
        raise ValueError(f"{owner}: {name} must be a bool tensor or hold only 0 and 1, got dtype {mask.dtype}")
    version = None if mask.is_inference() else mask._version  # inference tensors have no version counter
    seen = _CHECKED_NUMBER_MASKS.get(id(mask))
    if version is not None and seen is not None and seen[0]() is mask and seen[1] == version:
        return mask
    # m − m² is 0 exactly at 0 and 1 and nowhere else: for floats it is nonzero (or NaN / inf) at any other value and
    # a sum of absolute values is 0 only if every term is; for integers m(m − 1) ≡ 0 mod 2^bits only at 0 and 1
    # (m and m − 1 are coprime), counted rather than summed (a sum could wrap).
    off = torch.addcmul(mask, mask, mask, value=-1)
    bad = off.abs_().sum() if mask.dtype.is_floating_point else torch.count_nonzero(off)
    if bool(bad != 0):  # the one sync of a non-bool mask
        offending = (mask != 0) & (mask != 1)  # NaN included
        position = [int(i) for i in offending.nonzero()[0]]
        value = mask[tuple(position)].item()
        raise ValueError(f"{owner}: {name} must be boolean or contain only 0 and 1; found {value!r} at {position}")
    if version is not None:
        key = id(mask)
        forget = lambda _, key=key: _CHECKED_NUMBER_MASKS.pop(key, None)  # noqa: E731 (when the mask is freed)
        _CHECKED_NUMBER_MASKS[key] = (weakref.ref(mask, forget), version)
    return mask


def bool_mask(owner: str, name: str, mask: torch.Tensor) -> torch.Tensor:
    """A mask as bool: a bool mask as is (no check, no sync), a number mask checked (`check_mask`, one sync)."""
    return check_mask(owner, name, mask).bool()


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


# --------------------------------------------------------------------------------------------------
# Number masks: the reference's multiplication, checked once at the end
# --------------------------------------------------------------------------------------------------

_SAFE = "safe"
_NUMBER_MASKS: contextvars.ContextVar[list | str | None] = contextvars.ContextVar("trl_ext_number_masks", default=None)
"""Inside a `multiplying_number_masks` call: the list of the `MaskedBatch`es that multiply by a number mask (or
`_SAFE` while that call recomputes with the bitwise select); outside one: None (every batch selects)."""


def multiplying_number_masks(call: Callable) -> Callable:
    """Wrap a loss's `__call__` (returning `(loss, metrics)`) so that a number (0/1) mask selects by multiplying, x·m,
    as the reference does — one vectorized pass, no integer mask to build — instead of the bitwise select.

    x·m equals the select wherever x is finite, but a NaN / ±inf at a masked position would leak through it (0·inf is
    NaN). So, if any `MaskedBatch` of the call multiplied, the loss is checked to be finite (one device sync, besides
    the mask check's): a finite loss proves every input the loss read was finite at every position (each input's x·m
    enters the loss, as a factor or through `guard`'s sum), so multiplying changed nothing; otherwise the call runs
    again with the select, which drops masked NaN / inf and keeps the NaN of a valid position. Bool masks
    (the trainers') never multiply: no sync, no second run. A call nested in another (MIX's parts) follows the outer
    one's mode and is checked with it. A loss whose call draws random numbers (`deterministic = False`: clip_cov)
    selects from the start, so that it draws once."""

    @functools.wraps(call)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _NUMBER_MASKS.get() is not None:  # nested: the outer call checks
            return call(self, *args, **kwargs)
        if getattr(self, "deterministic", True):  # (a second run of a random draw would draw again: select at once)
            multiplied: list = []
            with _NumberMaskMode(multiplied):
                loss, metrics = call(self, *args, **kwargs)
            if not multiplied or _is_finite(loss):
                return loss, metrics
        with _NumberMaskMode(_SAFE):
            return call(self, *args, **kwargs)

    return checked


class _NumberMaskMode:
    """`with _NumberMaskMode(mode)`: `_NUMBER_MASKS` is `mode` inside the block, what it was after it."""

    def __init__(self, mode: list | str) -> None:
        self.mode = mode

    def __enter__(self) -> None:
        self.token = _NUMBER_MASKS.set(self.mode)

    def __exit__(self, *exc: Any) -> None:
        _NUMBER_MASKS.reset(self.token)


def _is_finite(loss: torch.Tensor) -> bool:
    """Whether the loss is finite. Its metrics need no check of their own: every input a loss reads enters its value
    (a product, or the guard's sum of its selection), so a finite loss means every input was finite everywhere and the
    metrics, computed from the same selections, are what the select would give."""
    return math.isfinite(loss.detach().item())  # one read (torch.isfinite is four operations more)


# --------------------------------------------------------------------------------------------------
# The masked batch view
# --------------------------------------------------------------------------------------------------


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
            raise ValueError(f"{owner}: {value_name} must be a [B, T] tensor, got shape {_shape(logprob)}")
        check_float(owner, value_name, logprob)
        self.shape = tuple(logprob.shape)
        self._check_shape(mask_name, action_mask)
        self._mask_input = check_mask(owner, mask_name, action_mask)
        mode = _NUMBER_MASKS.get()
        self._multiply = isinstance(mode, list) and action_mask.dtype != torch.bool  # see multiplying_number_masks
        if self._multiply:
            mode.append(self)
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
                f"{self.owner}: {name} has shape {_shape(x)} but {self.value_name} has shape {self.shape}; "
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
                f"{self.owner}: {name} has shape {_shape(x)}; expected [B, T] or [B, 1] with B={rows}, T={cols}"
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
            f"{self.owner}: {name} has shape {_shape(x)}; expected [B], [B, 1] or [B, T] "
            f"with B={batch}, T={self.shape[1]}"
        )

    def row_values(self, x: Any, name: str) -> torch.Tensor:
        """A per-sequence `[B]` floating-point input (e.g. DPO's precomputed reference sums), remembered for
        `guard` (a row without valid tokens is masked)."""
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != (self.shape[0],):
            raise ValueError(f"{self.owner}: {name} must be [B, T] or [B] with B={self.shape[0]}, got {_shape(x)}")
        self.read(check_float(self.owner, name, x).unsqueeze(-1))
        return x

    def row_flags(self, x: Any, name: str) -> torch.Tensor:
        """A per-sequence boolean `[B]` mask (e.g. `expert_mask`): bool, or 0/1 (checked, one sync)."""
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != (self.shape[0],):
            raise ValueError(f"{self.owner}: {name} must be a [B] tensor with B={self.shape[0]}, got {_shape(x)}")
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


# --------------------------------------------------------------------------------------------------
# Policy loss base class and registry
# --------------------------------------------------------------------------------------------------


class PolicyLoss(Component):
    """Base class of every policy loss.

    Call contract: `loss, metrics = fn(**inputs)`, keywords only, with Trinity-RFT's names: `logprob` (the policy's,
    with gradient), `old_logprob` (the sampling policy's), `ref_logprob` (the reference model's: DPO), all `[B, T]`;
    `action_mask` `[B, T]` (bool, or 0/1); `advantages` (`[B, T]`, or `[B]` / `[B, 1]` per sequence); a loss's own
    inputs (`expert_mask`, `step`, `importance_sampling_ratio`, ...) and the window counts `global_valid_toks`,
    `global_valid_seqs`, `normalizer`. `inputs()` lists those a loss reads (its `__call__`'s named parameters, then
    `window_inputs`); any other keyword that is not one of the documented `BATCH_INPUTS` is a ValueError naming it.
    `loss` is 0-dim (this micro-batch's share of the window's loss when the window counts are given); `metrics` holds
    detached 0-dim tensors named in the class's `metrics`.

    Subclasses declare their hyperparameters as `arguments` (`Argument` specs, with Trinity-RFT's names and
    defaults: the constructor's keywords after `backend`, validated at construction; `check_arguments` adds the
    rules that relate several of them), every metric they return in `metrics` (`SHARE` for a loss term, `MEAN` for
    a ratio or a fraction; see `trl_ext.components`), and implement `__call__`, building their `MaskedBatch` with
    `self.masked_batch(logprob, action_mask, kwargs)`. `default_args()` (every argument's default, by name) is read
    off the specs; the tests pin it against the reference's values.

    Args:
        backend: Trinity-RFT's training backend; accepted for signature compatibility and ignored.
        **kwargs: The loss's arguments (`arguments`), each defaulting to its `default_args()` value.

    Raises:
        ValueError: An unknown argument (listing the valid ones) or an invalid value (naming the argument and its
            allowed values).
    """

    window_inputs: ClassVar[tuple[str, ...]] = WINDOW_INPUTS
    """The keyword-only window inputs the loss reads through `**kwargs` (beyond its named parameters)."""

    deterministic: ClassVar[bool] = True
    """False for a loss whose call draws random numbers: a number mask then never takes the multiply-and-recompute path
    (`multiplying_number_masks`), which would draw twice."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__call__" in cls.__dict__:
            cls.__call__ = multiplying_number_masks(cls.__dict__["__call__"])

    def __init__(self, backend: str = "verl", **kwargs: Any) -> None:
        # Trinity-RFT maps batch keys per training backend; here every key has Trinity's name, so
        # `backend` is accepted for signature compatibility and ignored.
        self.backend = backend
        super().__init__(**kwargs)

    @classmethod
    def _leading_parameters(cls) -> list[inspect.Parameter]:
        return [inspect.Parameter("backend", inspect.Parameter.POSITIONAL_OR_KEYWORD, default="verl", annotation="str")]

    @classmethod
    def inputs(cls) -> tuple[str, ...]:
        """The keywords this loss reads: its `__call__`'s named parameters, then its `window_inputs`. A trainer
        hands it exactly these: `fn(**{k: batch[k] for k in fn.inputs() if k in batch})`."""
        return declared_inputs(cls.__call__, cls.window_inputs)

    def masked_batch(self, logprob: Any, action_mask: Any, kwargs: Mapping[str, Any]) -> MaskedBatch:
        """The loss's `MaskedBatch`; `kwargs` are the keywords `__call__` did not bind (checked: rule 1)."""
        return masked_batch(self.name, self.inputs(), logprob, action_mask, kwargs)

    def is_window_share(self, metric: str) -> bool:
        """Whether `metric` (a key of the metrics this loss returns) is this micro-batch's *share* of the window's
        value (`SHARE` in `metrics`: a trainer sums it over the window's micro-batches and processes) rather than
        a value of the micro-batch (`MEAN`: a ratio, a clip fraction, which a trainer averages)."""
        return self.metrics.get(metric) == SHARE

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Metrics]:
        raise NotImplementedError


POLICY_LOSSES = Registry("policy loss", PolicyLoss)
"""Every policy loss by name (`list(POLICY_LOSSES)`): each module of this package registers its family's."""


register_policy_loss = POLICY_LOSSES.register
"""Class decorator: `@register_policy_loss(name)` makes a `PolicyLoss` subclass available to `get_policy_loss`.

Args:
    name (str): The loss's registry name; also set as the class's `name`.

Returns:
    (Callable[[type], type]): The decorator, which returns the class itself.

Raises:
    TypeError: The class is not a `PolicyLoss` subclass.
    ValueError: `name` is already registered.
"""


def get_policy_loss(name: str, **kwargs: Any) -> PolicyLoss:
    """The policy loss `name` built with `kwargs` over its `default_args()`.

    Args:
        name: A registered loss name (`list(POLICY_LOSSES)`).
        **kwargs: The loss's arguments (`POLICY_LOSSES[name].default_args()` lists them with their defaults).

    Returns:
        The loss, called as `loss, metrics = fn(logprob=..., action_mask=..., ...)` (see `PolicyLoss`).

    Raises:
        ValueError: An unknown name (listing the valid ones), an unknown argument (listing the loss's arguments) or
            an invalid value (naming the argument and its allowed values).
    """
    return POLICY_LOSSES.build(name, **kwargs)
