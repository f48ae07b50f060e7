"""Shared machinery of the policy losses: the registry, argument checks and the masked batch view.

Every loss in this package follows one calling convention (Trinity-RFT's `policy_loss_fn`):

    loss, metrics = fn(logprob=lp, old_logprob=olp, action_mask=m, advantages=adv, **other_batch_keys)

Per-token tensors are `[B, T]`; unused keys are ignored so that a trainer can hand one batch dict to
any loss. `metrics` holds detached 0-dim tensors: nothing here calls `.item()` or otherwise waits for
the device.

Masked positions never reach the loss or the gradient: a loss first *selects* its inputs with
`torch.where(mask, x, 0)` (`MaskedBatch.select`) and only then computes. Selecting before any
arithmetic matters for the gradient too: `where(m, exp(x), 0)` still back-propagates `0 * exp(nan)`
into `x`, while `exp(where(m, x, 0))` does not.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar

import torch

from .._validation import (
    build_from_registry,
    check_bool,
    check_choice,
    check_number,
    make_register,
    signature_defaults,
)

__all__ = ["build_from_registry", "check_bool", "check_choice", "check_number"]  # re-exported for the losses

EPS = 1e-8
"""The ε of every masked mean, as in Trinity-RFT / verl (`masked_mean`)."""

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")

Metrics = dict[str, torch.Tensor]


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


def is_window_share(metric: str) -> bool:
    """Whether a loss metric is, under window normalization, this micro-batch's *share* of the window's value
    (summed over the window's micro-batches and processes) rather than a micro-batch mean (averaged).

    Loss values are shares (`loss`, `pg_loss`, `sft_loss`, `kl_loss`, `entropy_loss`, every `*_loss`), and so
    are the per-part metrics of MIX (`usual/*`, `expert/*`), which that loss weights by each micro-batch's
    share of the part's window."""
    return metric == "loss" or metric.endswith("_loss") or metric.startswith(("usual/", "expert/"))


# --------------------------------------------------------------------------------------------------
# Argument checks (the generic ones live in trl_ext._validation)
# --------------------------------------------------------------------------------------------------


def check_loss_agg_mode(owner: str, value: Any, name: str = "loss_agg_mode") -> None:
    check_choice(owner, name, value, LOSS_AGG_MODES)


def resolve_clip_range(
    owner: str, clip_range: float | None, clip_range_low: float | None, clip_range_high: float | None
) -> tuple[float, float]:
    """PPO-style ε: `clip_range_low` / `clip_range_high` fall back to the symmetric `clip_range`."""
    low = clip_range_low if clip_range_low is not None else clip_range
    high = clip_range_high if clip_range_high is not None else clip_range
    if low is None or high is None:
        raise ValueError(f"{owner}: no clip range given; set clip_range, or both clip_range_low and clip_range_high")
    check_number(owner, "clip_range_low" if clip_range_low is not None else "clip_range", low, ge=0)
    check_number(owner, "clip_range_high" if clip_range_high is not None else "clip_range", high, ge=0)
    return float(low), float(high)


# --------------------------------------------------------------------------------------------------
# The masked batch view
# --------------------------------------------------------------------------------------------------


def _shape(x: Any) -> tuple:
    return tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__


class MaskedBatch:
    """One micro-batch as a loss sees it: the boolean mask, its counts and the window's counts.

    Args:
        owner: name used in error messages.
        logprob: `[B, T]`, fixes the batch shape that every other per-token input must match.
        action_mask: `[B, T]`, bool or 0/1 of any dtype.
        global_valid_toks / global_valid_seqs: the optimizer window's token count and sequence
            (row) count (NeMo-RL's names). When given, the aggregate of this micro-batch is its share
            of the window's aggregate (see `aggregate`), so summing the shares of all micro-batches of
            a window gives the window's loss whatever the split. Tensors or numbers.
        normalizer: the constant of `seq-mean-token-sum-norm` (default: T).
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
        **_: Any,
    ) -> None:
        self.owner = owner
        if not isinstance(logprob, torch.Tensor) or logprob.dim() != 2:
            raise ValueError(f"{owner}: logprob must be a [B, T] tensor, got shape {_shape(logprob)}")
        self.shape = tuple(logprob.shape)
        self.check("action_mask", action_mask)
        self.mask = action_mask if action_mask.dtype == torch.bool else action_mask != 0
        # Counts in the values' precision (at least float32), so that "+ ε" is not rounded away.
        self.count_dtype = torch.promote_types(logprob.dtype, torch.float32)
        self.global_valid_toks = global_valid_toks
        self.global_valid_seqs = global_valid_seqs
        self.normalizer = normalizer

    # ---- input checks and selection ----------------------------------------------------------------

    def check(self, name: str, x: Any) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != self.shape:
            raise ValueError(
                f"{self.owner}: {name} has shape {_shape(x)} but logprob has shape {self.shape}; "
                "all per-token inputs must be [B, T]"
            )
        return x

    def select(self, x: torch.Tensor, name: str = "input") -> torch.Tensor:
        """`x` at valid positions, 0 elsewhere (NaN / inf at masked positions are dropped)."""
        return torch.where(self.mask, self.check(name, x), 0)

    def advantages(self, adv: Any, name: str = "advantages") -> torch.Tensor:
        """Advantages, NaN-safe: a per-token `[B, T]` input is selected (0 at masked positions); a
        per-sequence `[B]` / `[B, 1]` input stays a `[B, 1]` column (no `[B, T]` copy) with rows that have
        no valid token set to 0. Per-token losses built from the column are not 0 at padding, so a loss
        using it selects its per-token loss before aggregating."""
        full = self.broadcast_rows(adv, name)
        if adv.dim() == 2 and adv.shape[1] == self.shape[1] != 1:
            return torch.where(self.mask, full, 0)
        return torch.where(self.row_tok.unsqueeze(-1) > 0, adv.reshape(-1, 1), 0)

    def bound(self, like: torch.Tensor, condition: torch.Tensor, if_true: float, if_false: float) -> torch.Tensor:
        """`where(condition, if_true, if_false)` in `like`'s dtype (python scalars would give float32)."""
        return torch.where(condition, like.new_tensor(if_true), like.new_tensor(if_false))

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
        """A per-sequence `[B]` tensor of finite values (e.g. DPO's precomputed reference sums)."""
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != (self.shape[0],):
            raise ValueError(f"{self.owner}: {name} must be [B, T] or [B] with B={self.shape[0]}, got {_shape(x)}")
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{self.owner}: {name} has non-finite values")
        return x

    def row_flags(self, x: Any, name: str) -> torch.Tensor:
        """A per-sequence boolean `[B]` tensor (e.g. `expert_mask`)."""
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != (self.shape[0],):
            raise ValueError(f"{self.owner}: {name} must be a [B] tensor with B={self.shape[0]}, got {_shape(x)}")
        return x if x.dtype == torch.bool else x != 0

    # ---- counts and means ----------------------------------------------------------------------------

    # count_nonzero counts a bool tensor in place; .sum() would first copy it to int64 / float.
    @cached_property
    def n_tok(self) -> torch.Tensor:
        return torch.count_nonzero(self.mask).to(self.count_dtype)

    @cached_property
    def row_tok(self) -> torch.Tensor:
        return torch.count_nonzero(self.mask, dim=-1).to(self.count_dtype)

    def _window_count(self, count: torch.Tensor | float) -> torch.Tensor | float:
        return count.to(self.count_dtype) if isinstance(count, torch.Tensor) else float(count)

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """Token mean over the mask of an `x` that is already 0 (or False) at masked positions."""
        total = torch.count_nonzero(x) if x.dtype == torch.bool else x.sum()
        return total / (self.n_tok + EPS)

    def valid_mean(self, x: torch.Tensor) -> torch.Tensor:
        """Token mean over the mask of any `x` (selects first)."""
        if x.dtype == torch.bool:
            return self.mean(x & self.mask)
        return self.mean(torch.where(self.mask, x, 0))

    def row_mean(self, x: torch.Tensor) -> torch.Tensor:
        """Per-row (`[B]`) mean over the mask of an `x` that is already 0 at masked positions."""
        return x.sum(-1) / (self.row_tok + EPS)

    # ---- aggregation ---------------------------------------------------------------------------------

    def aggregate(self, x: torch.Tensor, loss_agg_mode: str) -> torch.Tensor:
        """Aggregate an `x` that is already 0 at masked positions (see `aggregate_loss`)."""
        if loss_agg_mode == "token-mean":
            count = self.n_tok if self.global_valid_toks is None else self._window_count(self.global_valid_toks)
            return x.sum() / (count + EPS)
        if loss_agg_mode == "seq-mean-token-mean":
            return self._seq_mean(self.row_mean(x))
        if loss_agg_mode == "seq-mean-token-sum":
            return self._seq_mean(x.sum(-1))
        if loss_agg_mode == "seq-mean-token-sum-norm":
            normalizer = self.shape[1] if self.normalizer is None else self.normalizer
            return x.sum() / (normalizer + EPS)
        check_loss_agg_mode(self.owner, loss_agg_mode)
        raise AssertionError  # unreachable

    def _seq_mean(self, rows: torch.Tensor) -> torch.Tensor:
        if self.global_valid_seqs is None:
            return rows.mean()
        count = self._window_count(self.global_valid_seqs)
        count = count.clamp(min=1) if isinstance(count, torch.Tensor) else max(count, 1.0)
        return rows.sum() / count


def aggregate_loss(
    values: torch.Tensor,
    mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    normalizer: torch.Tensor | float | None = None,
    *,
    global_valid_toks: torch.Tensor | float | None = None,
    global_valid_seqs: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """Reduce a `[B, T]` loss matrix to a scalar over the valid positions of `mask`.

    With m the mask, x the values and ε = 1e-8:

    =========================== ==================================================================
    `token-mean`                Σ m·x / (Σ m + ε)
    `seq-mean-token-sum`        mean over rows of Σ_t m·x
    `seq-mean-token-mean`       mean over rows of Σ_t m·x / (Σ_t m + ε)
    `seq-mean-token-sum-norm`   Σ m·x / (normalizer + ε), normalizer defaulting to T (Trinity-RFT's
                                form, without a division by the number of rows; pass
                                `normalizer = T·B` for Dr. GRPO's Σ/(B·T))
    =========================== ==================================================================

    "Rows" are all B rows, empty ones included, as in the reference. Masked positions are selected
    away before the sum, so NaN / inf there reach neither the value nor the gradient.

    Window normalization (DESIGN §2.6): pass the optimizer window's counts and the result is this
    micro-batch's *share* of the window aggregate: Σ m·x / (`global_valid_toks` + ε) for
    `token-mean`, Σ over rows / `global_valid_seqs` for the `seq-mean-*` modes (count every row, as
    the local mean does), and the unchanged Σ m·x / normalizer for `seq-mean-token-sum-norm`. The
    shares of all micro-batches of a window add up to the window's aggregate.
    """
    batch = MaskedBatch(
        "aggregate_loss",
        values,
        mask,
        global_valid_toks=global_valid_toks,
        global_valid_seqs=global_valid_seqs,
        normalizer=normalizer,
    )
    check_loss_agg_mode("aggregate_loss", loss_agg_mode)
    return batch.aggregate(batch.select(values, "values"), loss_agg_mode)


# --------------------------------------------------------------------------------------------------
# Policy loss base class and registry
# --------------------------------------------------------------------------------------------------


class PolicyLoss:
    """Base class of every policy loss.

    Subclasses declare their hyperparameters as keyword arguments of `__init__` (with Trinity-RFT's
    names and defaults) and implement `__call__(logprob, ..., **kwargs) -> (loss, metrics)`.
    `default_args()` is read off the `__init__` signature, so the documented defaults and the
    constructor's cannot drift apart; the tests pin both against the reference's values.
    """

    name: ClassVar[str] = ""

    def __init__(self, backend: str = "verl") -> None:
        # Trinity-RFT maps batch keys per training backend; here every key has Trinity's name, so
        # `backend` is accepted for signature compatibility and ignored.
        self.backend = backend

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return signature_defaults(cls.__init__)

    @property
    def args(self) -> dict[str, Any]:
        """The hyperparameters this instance was built with (constructor argument names)."""
        return {name: getattr(self, name) for name in self.default_args()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"{type(self).__name__}({args})"

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Metrics]:
        raise NotImplementedError


POLICY_LOSSES: dict[str, type[PolicyLoss]] = {}
"""Every policy loss by name: `ppo, gspo, cispo, sapo, topr, sppo, rec, opmd, importance_sampling,
sft, sft_is, sft_phi, mix, mix_chord, dpo`."""


register_policy_loss = make_register(POLICY_LOSSES, "policy loss")
"""Class decorator: `@register_policy_loss(name)` makes a `PolicyLoss` subclass available to `get_policy_loss`."""


def get_policy_loss(name: str, **kwargs: Any) -> PolicyLoss:
    """The policy loss `name` built with `kwargs` over its `default_args()`.

    Raises ValueError for an unknown name (listing the valid ones), an unknown argument (listing the
    loss's arguments) or an invalid value (naming the argument and its allowed values).
    """
    return build_from_registry("policy loss", POLICY_LOSSES, name, kwargs)
