"""Number (0/1) masks select by multiplying, as the reference does, with the loss checked finite once at the end.

A bool mask (what the trl_ext trainers pass) never takes this path. A number mask is checked to hold only 0 and 1
(`trl_ext.losses.inputs.check_mask`), then each `MaskedBatch` of a loss call multiplies by it instead of the
bitwise select; `multiplying_number_masks` (applied to every `PolicyLoss.__call__`) recomputes the call with the
select when its loss is not finite.

Why the path exists, measured (`benchmarks/losses.py`, CPU, float32, B=64, T=8192, float masks, 2026-11-27): with
every number mask checked once and then selecting as a bool mask does, nine rows took more than 1.15x the reference's
time (entropy 1.89x, opmd 1.52x, dpo 1.42x, sft 1.30x, gpg 1.29x, ...); multiplying keeps every row within 1.15x.
"""

from __future__ import annotations

import contextvars
import functools
import math
from collections.abc import Callable
from typing import Any

import torch

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


def multiplying_batches() -> list | None:
    """Inside a `multiplying_number_masks` call that may multiply: the list its `MaskedBatch`es that multiply join;
    otherwise None (select)."""
    mode = _NUMBER_MASKS.get()
    return mode if isinstance(mode, list) else None
