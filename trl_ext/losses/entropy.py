"""Entropy bonus terms (Trinity-RFT `entropy_loss_fn`).

Each returns `(bonus, metrics)` with bonus = entropy_coef · agg(entropy); the trainer *subtracts*
the bonus from the loss (maximizing entropy for a positive coefficient), as the reference does.

* `default`: over all valid tokens.
* `mix`:     over the non-expert rows only (MIX / MIX-CHORD: expert demonstrations are not the
             policy's own samples), normalized over those rows.
* `none`:    0.

Metric: `entropy_loss` = agg(entropy) (unscaled).

Inputs follow the losses' rules (`trl_ext.losses.inputs`): `inputs()` lists what a term reads, the other
documented batch keys are ignored and any other keyword is a ValueError; a non-bool `action_mask` must hold
only 0 and 1 (one device sync: pass a bool mask to skip the check); NaN / ±inf in `entropy` at a valid
position make the bonus NaN, at masked positions they are ignored.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from .._validation import declared_inputs
from ..components import SHARE, Argument, Component, Registry
from .aggregation import check_loss_agg_mode, part_windows
from .inputs import WINDOW_INPUTS, Metrics, check_inputs, check_window_inputs
from .masked_batch import masked_batch


class EntropyFn(Component):
    """The `default` term, over all valid tokens; the base class of the others.

    Build one with `get_entropy_fn`. Call contract: `bonus, metrics = fn(entropy=..., action_mask=...,
    loss_agg_mode="token-mean", **window)`, with `entropy` and `action_mask` `[B, T]` and the optional window counts
    of `aggregate_loss` (`mix` also reads `expert_mask` and the expert rows' counts; `inputs()` lists what a term
    reads). `bonus` is entropy_coef · agg(entropy), 0-dim, which the trainer subtracts from the loss; `metrics` is
    `{"entropy_loss": agg(entropy)}`, detached (`{}` for `none`).
    """

    arguments = (
        Argument(
            "entropy_coef",
            0.0,
            "Coefficient of the entropy bonus entropy_coef·agg(entropy), which the trainer subtracts from the loss.",
        ),
    )
    metrics: ClassVar[dict[str, str]] = {"entropy_loss": SHARE}

    window_inputs: tuple[str, ...] = WINDOW_INPUTS

    @classmethod
    def inputs(cls) -> tuple[str, ...]:
        """The keywords `__call__` reads: its named parameters, then `window_inputs`."""
        return declared_inputs(cls.__call__, cls.window_inputs)

    @property
    def owner(self) -> str:
        return f"{self.name} entropy"

    def __call__(
        self,
        entropy: torch.Tensor,
        action_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        **kwargs: Any,
    ) -> tuple[torch.Tensor, Metrics]:
        check_loss_agg_mode(self.name, loss_agg_mode)
        b = masked_batch(self.owner, self.inputs(), entropy, action_mask, kwargs, value_name="entropy")
        entropy_loss = b.aggregate(b.select(entropy), loss_agg_mode)
        return entropy_loss * self.entropy_coef, {"entropy_loss": entropy_loss.detach()}


ENTROPY_FNS = Registry("entropy function", EntropyFn)
"""The entropy terms by name: `default`, `mix`, `none`."""
ENTROPY_FNS.register("default")(EntropyFn)


@ENTROPY_FNS.register("mix")
class MixEntropyFn(EntropyFn):
    """The bonus over the non-expert rows only. Window normalization: with the window's counts over all rows
    (`global_valid_toks` / `global_valid_seqs`) and over the expert rows (`expert_valid_toks` /
    `expert_valid_seqs`), the non-expert rows are normalized over their own part of the window."""

    window_inputs = ()  # named parameters of __call__

    def __call__(
        self,
        entropy: torch.Tensor,
        action_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        expert_mask: torch.Tensor | None = None,
        global_valid_toks: Any = None,
        global_valid_seqs: Any = None,
        expert_valid_toks: Any = None,
        expert_valid_seqs: Any = None,
        normalizer: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, Metrics]:
        if expert_mask is None:
            raise ValueError("mix entropy: expert_mask ([B] bool) is required")
        b = masked_batch(self.owner, self.inputs(), entropy, action_mask, kwargs, value_name="entropy")
        check_window_inputs(
            self.owner,
            global_valid_toks=global_valid_toks,
            global_valid_seqs=global_valid_seqs,
            expert_valid_toks=expert_valid_toks,
            expert_valid_seqs=expert_valid_seqs,
            normalizer=normalizer,
        )
        usual = ~b.row_flags(expert_mask, "expert_mask")
        tokens = b.mask & usual.unsqueeze(-1)
        if global_valid_toks is None:  # this batch is the window
            window = {"global_valid_toks": torch.count_nonzero(tokens), "global_valid_seqs": usual.sum()}
        else:
            window = part_windows(
                "mix entropy", global_valid_toks, global_valid_seqs, expert_valid_toks, expert_valid_seqs, normalizer
            )["usual"]
        return super().__call__(entropy, tokens, loss_agg_mode, **window)


@ENTROPY_FNS.register("none")
class NoEntropy(EntropyFn):
    """No entropy bonus: 0 and no metrics."""

    metrics: ClassVar[dict[str, str]] = {}

    def __call__(self, entropy: torch.Tensor, action_mask: torch.Tensor, loss_agg_mode: str = "token-mean", **kwargs):
        check_inputs(self.owner, self.inputs(), kwargs)
        return entropy.new_zeros(()), {}


def get_entropy_fn(name: str, entropy_coef: float = 0.0) -> EntropyFn:
    """The entropy term `name` (`default`, `mix`, `none`) with its coefficient.

    Args:
        name: One of `ENTROPY_FNS`: `default` (all valid tokens), `mix` (the non-expert rows only), `none`.
        entropy_coef: Coefficient of the bonus entropy_coef · agg(entropy), which the trainer subtracts from the loss.

    Returns:
        The term, called as `bonus, metrics = fn(entropy=..., action_mask=..., ...)` (see `EntropyFn`).

    Raises:
        ValueError: An unknown name (listing the valid ones) or an invalid coefficient.
    """
    return ENTROPY_FNS.build(name, entropy_coef=entropy_coef)
