"""The policy losses' base class and registry: `PolicyLoss`, `POLICY_LOSSES`, `register_policy_loss`,
`get_policy_loss`, and the arguments most losses share (`loss_agg_mode`, the PPO clip range).

What a loss is called with, and the rules its inputs follow, is `trl_ext.losses.inputs`; how it selects, averages
and aggregates them is `trl_ext.losses.masked_batch`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from .._validation import declared_inputs
from ..components import MEAN, SHARE, Argument, Component, Registry
from .aggregation import LOSS_AGG_HELP, LOSS_AGG_MODES
from .inputs import WINDOW_INPUTS, Metrics
from .masked_batch import MaskedBatch, masked_batch


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
    """False for a loss whose call draws random numbers (clip_cov)."""

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


PPO_METRICS = {"pg_clipfrac": MEAN, "pg_clipfrac_lower": MEAN, "ppo_kl": MEAN, "pg_loss": SHARE}
"""The metrics of the losses with PPO's clipped ratio (verl's names)."""


class ClippedRatioLoss(PolicyLoss):
    """Base of the losses with PPO's clip range (`clip_range`, `clip_range_low`, `clip_range_high`, among their
    `arguments`): the asymmetric bounds fall back to the symmetric one at construction, and the loss logs
    `PPO_METRICS` (a subclass adds its own)."""

    metrics: ClassVar[dict[str, str]] = PPO_METRICS

    def check_arguments(self) -> None:
        self.clip_range_low, self.clip_range_high = resolve_clip_range(
            self.name, self.clip_range, self.clip_range_low, self.clip_range_high
        )


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
