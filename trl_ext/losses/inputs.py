"""The inputs of the losses: one calling convention, five rules, and the checks that enforce them.

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
   a number mask is then read as bool. Pass a bool mask (as the trl_ext trainers do) for no sync at all.
4. **An empty batch (B = 0 or T = 0) gives a finite 0 loss** with a zero (or empty) gradient and finite
   (0) metrics, under every aggregation mode.
5. **Non-finite values propagate, masked ones never do.** NaN or ±inf in an input the loss reads, at a
   *valid* position, makes the loss NaN — even where a clamp (the ±20 log-ratio clamp of ppo, sapo,
   importance_sampling, ...) would otherwise turn it into a finite number. The guard is 0 · Σ_valid x over
   every input read (`MaskedBatch.guard`, summed in at least float32), detached: exactly 0 for finite inputs
   (the loss and its gradient are unchanged) and NaN otherwise, with no device sync (and NaN if the finite
   values' sum overflows float32, |Σ| > 3e38). At *masked* positions NaN / ±inf reach neither the loss, nor
   the gradient, nor the metrics: every input is selected, `where(mask, x, 0)`, before any arithmetic.

How a loss applies them is `trl_ext.losses.masked_batch.MaskedBatch`.
"""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable
from typing import Any

import torch

Metrics = dict[str, torch.Tensor]

WINDOW_INPUTS = ("global_valid_toks", "global_valid_seqs", "normalizer")
"""The optimizer window's counts that a loss may take (`MaskedBatch`, `aggregate_loss`)."""

EXPERT_WINDOW_INPUTS = ("expert_valid_toks", "expert_valid_seqs")
"""The window's counts over the expert rows (MIX / MIX-CHORD and the `mix` entropy term)."""

BATCH_INPUTS = (
    "logprob",
    "old_logprob",
    "prox_logprob",
    "window_selected",
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


def shape_of(x: Any) -> tuple | str:
    """A tensor's shape, or the type name of anything else (for error messages)."""
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


def check_mask(owner: str, name: str, mask: torch.Tensor) -> torch.Tensor:
    """`mask` itself, checked: bool (no check, no sync), or numbers that are all 0 or 1, which costs one device sync
    per call (the trainers pass bool masks)."""
    if mask.dtype == torch.bool:
        return mask
    if mask.dtype.is_complex:
        raise ValueError(f"{owner}: {name} must be a bool tensor or hold only 0 and 1, got dtype {mask.dtype}")
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
    return mask


def bool_mask(owner: str, name: str, mask: torch.Tensor) -> torch.Tensor:
    """A mask as bool: a bool mask as is (no check, no sync), a number mask checked (`check_mask`, one sync)."""
    return check_mask(owner, name, mask).bool()
