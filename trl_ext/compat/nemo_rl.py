"""NeMo-RL's loss-function protocol over trl_ext's policy losses (pure torch: needs nothing but torch).

    from trl_ext.compat.nemo_rl import as_loss_function
    loss_fn = as_loss_function("sapo", tau_neg=1.1)          # any trl_ext policy-loss name and its arguments
    loss, metrics = loss_fn(data, global_valid_seqs, global_valid_toks, next_token_logprobs=lp)

`loss_fn` has NeMo-RL's `loss_type` and `input_type` (`LossInputType.LOGPROB`) and can be used where NeMo-RL
expects a `LossFunction` (`nemo_rl.algorithms.loss.interfaces`). The enums here mirror NeMo-RL's (same members
and values) so that this module never imports nemo_rl.

**No shift inside: every `[B, T]` tensor of `data` must already be aligned with `next_token_logprobs`.**
`next_token_logprobs[:, t]` is the log-probability of token t + 1, so it has one position fewer than NeMo-RL's
sequence-length tensors. NeMo-RL's own losses slice `token_mask` and `prev_logprobs` (and the reference and
per-token advantages) by `[:, 1:]` inside; this adapter does not. Pass them sliced:

    data = {"advantages": adv[:, 1:], "prev_logprobs": prev[:, 1:], "token_mask": tm[:, 1:], "sample_mask": sm}

A `[B]` `advantages` (one per sequence) needs no slicing. A `[B, T]` tensor of the wrong length is a ValueError
that says so.

`data` keys (NeMo-RL's names → trl_ext's inputs), read only when the loss reads the input:

* `advantages` ([B, T] or [B]) → `advantages`
* `prev_logprobs` ([B, T]) → `old_logprob`
* `reference_policy_logprobs` ([B, T]) → `ref_logprob`
* `token_mask` ([B, T]) and `sample_mask` ([B]) → `action_mask = token_mask & sample_mask[:, None]` (nonzero
  means valid; a sample with `sample_mask` 0 contributes nothing to the loss or the gradient).

Window normalization: `global_valid_toks` / `global_valid_seqs` (the counts of the whole global batch, all
micro-batches and ranks, as NeMo-RL computes them) are handed to the trl_ext loss as its window inputs, so the
micro-batch losses add up to the global batch's loss (`token-mean`: Σ/global_valid_toks; `seq-mean-*`: Σ over
rows/global_valid_seqs; a count left None falls back to the micro-batch's own). `seq-mean-token-sum-norm`
divides by a constant `normalizer` instead, which the NeMo-RL counts do not give: pass it to
`as_loss_function(..., normalizer=...)` (e.g. the maximum response length) and every call uses it; left at None,
each call uses trl_ext's default, the micro-batch's T, so micro-batches add up only when all are padded to the
same T.

Supported losses: every `trl_ext.losses.POLICY_LOSSES` entry except those in `REFUSED` (`mix`, `mix_chord`,
`dpo`, `tpo`), for which `as_loss_function` raises a ValueError saying why.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import torch

from .._validation import required_inputs
from ..losses import WINDOW_INPUTS, PolicyLoss, get_policy_loss
from ..losses.inputs import Metrics, check_window_input

__all__ = ["DATA_KEYS", "REFUSED", "LossInputType", "LossType", "NeMoRLLoss", "as_loss_function"]


class LossType(enum.Enum):
    """NeMo-RL's `LossType`: what `global_valid_toks` / `global_valid_seqs` normalize."""

    TOKEN_LEVEL = "token_level"
    SEQUENCE_LEVEL = "sequence_level"


class LossInputType(enum.Enum):
    """NeMo-RL's `LossInputType`: which model output a loss takes (trl_ext's losses take `LOGPROB`)."""

    LOGIT = "logit"
    LOGPROB = "logprob"
    DISTILLATION = "distillation"
    DRAFT = "draft"


DATA_KEYS = {
    "advantages": "advantages",
    "old_logprob": "prev_logprobs",
    "ref_logprob": "reference_policy_logprobs",
}
"""trl_ext input → NeMo-RL `data` key."""

_EXPERT_ROWS = (
    "it needs a per-sample expert_mask, the training step and the expert rows' window counts "
    "(expert_valid_toks / expert_valid_seqs), which NeMo-RL's loss protocol does not carry"
)
REFUSED = {
    "mix": _EXPERT_ROWS,
    "mix_chord": _EXPERT_ROWS,
    "dpo": "it is a pairwise loss over (chosen, rejected) rows with its own batch layout; use NeMo-RL's DPO loss, "
    "or trl_ext.losses.DPOLoss directly",
    "tpo": "it is a loss over (chosen, rejected, reference) triples whose reference rows an expert_mask marks, which "
    "NeMo-RL's loss protocol does not carry; use trl_ext.losses.TPOLoss directly",
}
"""Policy losses `as_loss_function` refuses, with the reason."""

_HANDLED = {"logprob", "action_mask", *DATA_KEYS, *WINDOW_INPUTS}


class NeMoRLLoss:
    """A trl_ext policy loss behind NeMo-RL's `LossFunction` protocol (build it with `as_loss_function`).

    `loss, metrics = loss_fn(data, global_valid_seqs, global_valid_toks, next_token_logprobs=lp)` gives this
    micro-batch's share of the global batch's loss and trl_ext's metrics (detached 0-dim tensors); the module
    docstring lists `data`'s keys and the `[:, 1:]` alignment.

    Args:
        policy_loss: The trl_ext loss.
        normalizer: The constant of `seq-mean-token-sum-norm`, passed on every call (None: each micro-batch's T).

    Attributes:
        loss_type: `LossType.TOKEN_LEVEL` for a `token-mean` loss, else `LossType.SEQUENCE_LEVEL`.
        input_type: `LossInputType.LOGPROB`.
        policy_loss: The trl_ext loss.
        loss_agg_mode: The loss's `loss_agg_mode` (`token-mean` for a loss without one).
        normalizer: As given.
    """

    input_type = LossInputType.LOGPROB

    def __init__(self, policy_loss: PolicyLoss, normalizer: torch.Tensor | float | None = None) -> None:
        self.policy_loss = policy_loss
        self.loss_agg_mode = getattr(policy_loss, "loss_agg_mode", "token-mean")  # REC: fixed by its clip_mode
        self.loss_type = LossType.TOKEN_LEVEL if self.loss_agg_mode == "token-mean" else LossType.SEQUENCE_LEVEL
        self.normalizer = normalizer
        self._inputs = policy_loss.inputs()

    def __repr__(self) -> str:
        return f"NeMoRLLoss({self.policy_loss!r}, loss_type={self.loss_type}, normalizer={self.normalizer!r})"

    def __call__(
        self,
        data: Mapping[str, Any],
        global_valid_seqs: torch.Tensor | float | None,
        global_valid_toks: torch.Tensor | float | None,
        *,
        next_token_logprobs: torch.Tensor,
    ) -> tuple[torch.Tensor, Metrics]:
        """`(loss, metrics)` of this micro-batch: its share of the global batch's loss, and trl_ext's metrics
        (detached 0-dim tensors). See the module docstring for `data`'s keys and the `[:, 1:]` alignment.

        Args:
            data: NeMo-RL's batch: `token_mask` `[B, T]`, `sample_mask` `[B]` and, where the loss reads them,
                `advantages`, `prev_logprobs`, `reference_policy_logprobs`, each aligned with `next_token_logprobs`.
            global_valid_seqs: The global batch's sequence count (the `seq-mean-*` modes); None: the micro-batch's.
            global_valid_toks: The global batch's token count (`token-mean`); None: the micro-batch's.
            next_token_logprobs: `[B, T]` log-probs of the policy; `[:, t]` is that of token t + 1.

        Returns:
            loss: This micro-batch's share of the global batch's loss, 0-dim.
            metrics: trl_ext's metrics of the loss, detached 0-dim tensors.

        Raises:
            ValueError: `next_token_logprobs` is not `[B, T]`, `data` lacks a key the loss reads, or a tensor of
                `data` has another shape (a `[B, T]` one not sliced `[:, 1:]`).
        """
        owner = f"nemo_rl[{self.policy_loss.name}]"
        if not isinstance(next_token_logprobs, torch.Tensor) or next_token_logprobs.dim() != 2:
            raise ValueError(f"{owner}: next_token_logprobs must be a [B, T] tensor")
        shape = tuple(next_token_logprobs.shape)

        def get(key: str) -> Any:
            if key not in data:
                raise ValueError(f"{owner}: data has no {key!r}, which this loss reads")
            value = data[key]
            if isinstance(value, torch.Tensor) and value.dim() == 2 and tuple(value.shape) != shape:
                raise ValueError(
                    f"{owner}: data[{key!r}] has shape {tuple(value.shape)} but next_token_logprobs has {shape}; "
                    "slice NeMo-RL's [B, T] tensors [:, 1:] to align them with next_token_logprobs"
                )
            return value

        token_mask, sample_mask = get("token_mask"), get("sample_mask")
        if not isinstance(sample_mask, torch.Tensor) or tuple(sample_mask.shape) != shape[:1]:
            got = tuple(sample_mask.shape) if isinstance(sample_mask, torch.Tensor) else type(sample_mask).__name__
            raise ValueError(f"{owner}: data['sample_mask'] must be a [B] tensor with B={shape[0]}, got {got}")
        if not isinstance(token_mask, torch.Tensor) or tuple(token_mask.shape) != shape:
            raise ValueError(f"{owner}: data['token_mask'] must be a [B, T] tensor of shape {shape}")

        inputs: dict[str, Any] = {
            "logprob": next_token_logprobs,
            "action_mask": (token_mask != 0) & (sample_mask != 0).unsqueeze(-1),
        }
        for name, key in DATA_KEYS.items():
            if name in self._inputs:
                inputs[name] = get(key)
        window = {
            "global_valid_toks": global_valid_toks,
            "global_valid_seqs": global_valid_seqs,
            "normalizer": self.normalizer,
        }
        inputs.update({k: v for k, v in window.items() if k in self._inputs and v is not None})
        return self.policy_loss(**inputs)


def as_loss_function(name: str, *, normalizer: torch.Tensor | float | None = None, **loss_kwargs: Any) -> NeMoRLLoss:
    """The trl_ext policy loss `name` (built with `get_policy_loss(name, **loss_kwargs)`) as a NeMo-RL
    `LossFunction` taking `next_token_logprobs`.

    Args:
        name: A `trl_ext.losses.POLICY_LOSSES` name, except those in `REFUSED`.
        normalizer: The constant of `loss_agg_mode="seq-mean-token-sum-norm"`, passed on every call (default: each
            micro-batch's T); an error with any other aggregation.
        **loss_kwargs: The loss's arguments, as `get_policy_loss` takes them.

    Returns:
        The loss function: `loss, metrics = loss_fn(data, global_valid_seqs, global_valid_toks,
            next_token_logprobs=lp)` (see `NeMoRLLoss`).

    Raises:
        ValueError: A refused loss (`REFUSED`, or one reading inputs NeMo-RL's data does not carry), an unknown
            name, argument or value, or a `normalizer` with another aggregation.
    """
    if name in REFUSED:
        raise ValueError(f"policy loss {name!r} is not available through NeMo-RL's loss protocol: {REFUSED[name]}")
    fn = get_policy_loss(name, **loss_kwargs)
    # an optional input NeMo-RL does not carry (`importance_sampling_ratio`) is simply not given
    missing = [key for key in required_inputs(fn) if key not in _HANDLED]
    if missing:
        raise ValueError(
            f"policy loss {name!r} is not available through NeMo-RL's loss protocol: it reads "
            f"{', '.join(missing)}, which NeMo-RL's data does not carry"
        )
    loss = NeMoRLLoss(fn, normalizer)
    if normalizer is not None:
        check_window_input(name, "normalizer", normalizer)
        if loss.loss_agg_mode != "seq-mean-token-sum-norm" or "normalizer" not in fn.inputs():
            raise ValueError(
                f"{name}: normalizer={normalizer!r} only applies to loss_agg_mode='seq-mean-token-sum-norm' "
                f"(this loss aggregates by {loss.loss_agg_mode!r})"
            )
    return loss
