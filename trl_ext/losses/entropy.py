"""Entropy bonus terms (Trinity-RFT `entropy_loss_fn`).

Each returns `(bonus, metrics)` with bonus = entropy_coef · agg(entropy); the trainer *subtracts*
the bonus from the loss (maximizing entropy for a positive coefficient), as the reference does.

* `default`: over all valid tokens.
* `mix`:     over the non-expert rows only (MIX / MIX-CHORD: expert demonstrations are not the
             policy's own samples), normalized over those rows.
* `none`:    0.

Metric: `entropy_loss` = agg(entropy) (unscaled).

Inputs follow the losses' rules (`trl_ext.losses.base`): `inputs()` lists what a term reads, the other
documented batch keys are ignored and any other keyword is a ValueError; a non-bool `action_mask` must hold
only 0 and 1 (one device sync: pass a bool mask to skip the check); NaN / ±inf in `entropy` at a valid
position make the bonus NaN, at masked positions they are ignored.
"""

from __future__ import annotations

from typing import Any

import torch

from .base import (
    WINDOW_INPUTS,
    Metrics,
    build_from_registry,
    check_inputs,
    check_loss_agg_mode,
    check_number,
    check_window_inputs,
    declared_inputs,
    masked_batch,
    part_windows,
)


class EntropyFn:
    name = "default"
    window_inputs: tuple[str, ...] = WINDOW_INPUTS

    def __init__(self, entropy_coef: float = 0.0) -> None:
        check_number(self.name, "entropy_coef", entropy_coef)
        self.entropy_coef = entropy_coef

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {"entropy_coef": 0.0}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(entropy_coef={self.entropy_coef!r})"

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


class MixEntropyFn(EntropyFn):
    """The bonus over the non-expert rows only. Window normalization: with the window's counts over all rows
    (`global_valid_toks` / `global_valid_seqs`) and over the expert rows (`expert_valid_toks` /
    `expert_valid_seqs`), the non-expert rows are normalized over their own part of the window."""

    name = "mix"
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


class NoEntropy(EntropyFn):
    name = "none"

    def __call__(self, entropy: torch.Tensor, action_mask: torch.Tensor, loss_agg_mode: str = "token-mean", **kwargs):
        check_inputs(self.owner, self.inputs(), kwargs)
        return entropy.new_zeros(()), {}


ENTROPY_FNS: dict[str, type[EntropyFn]] = {"default": EntropyFn, "mix": MixEntropyFn, "none": NoEntropy}


def get_entropy_fn(name: str, entropy_coef: float = 0.0) -> EntropyFn:
    """The entropy term `name` (`default`, `mix`, `none`) with its coefficient."""
    return build_from_registry("entropy function", ENTROPY_FNS, name, {"entropy_coef": entropy_coef})
