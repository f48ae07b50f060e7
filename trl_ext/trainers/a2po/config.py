"""Config of the A*-PO trainer: TRL's `trl.experimental.a2po.A2POConfig`, its fields checked when it is built.

Every field keeps TRL's meaning and default: the first stage's `num_value_samples` (N reference completions per
prompt), `beta1` (β₁ of V*) and `filter_all_incorrect`, the second stage's `beta2` (β₂ of the regression) and
`reward_weights`, and the generation settings of both stages. `beta2` is the argument of the trainer's loss,
`trl_ext.losses.a2po` (same name).
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

from ..._validation import check_number
from ...losses import get_kl_fn, get_policy_loss
from ..core.config_fields import build_named
from ..core.devices import check_hardware
from ..core.resolved import Components, ResolvedComponents

with warnings.catch_warnings():
    # TRL's notice on importing its experimental package would reach every user of any trl_ext trainer;
    # docs/algorithms/a2po.md says it instead.
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.a2po import A2POConfig as TRLA2POConfig


@dataclass
class A2POConfig(ResolvedComponents, TRLA2POConfig):
    r"""
    Configuration of [`trl_ext.A2POTrainer`]: A*-PO (Brantley et al. 2025, "Accelerating RL for LLM Reasoning with
    Optimal Advantage Regression", arXiv 2505.20686) on TRL's experimental `A2POTrainer`, its loss computed by
    `trl_ext.losses.a2po` and normalized over the optimizer window (every micro-batch of one optimizer step, on every
    process), see [`trl_ext.A2POTrainer`].

    Stage 1 (before training): `num_value_samples` completions of the reference policy per prompt estimate
    V*(x) = β₁·log mean_i exp(r(x, y_i)/β₁) (`beta1`; `trl_ext.advantages.a2po.optimal_value`), and with
    `filter_all_incorrect` the training prompts whose samples all score 0 are dropped. Stage 2 (training): one
    completion per prompt, loss = mean over the completions of (β₂·log π(y|x)/π_ref(y|x) − (r − V*(x)))² (`beta2`).
    The reward is the `reward_weights`-weighted sum of the reward functions, assumed binary (0 or 1) by the method.

    Every field is `trl.experimental.a2po.A2POConfig`'s, with TRL's default (the paper's β₁ = 0.5, β₂ = 1e-3, N = 8;
    configs/a2po.yaml has the paper's recipe). Checked when the config is built (TRL checks none of them): `beta1` and
    `beta2` finite numbers > 0, `num_value_samples` an integer >= 1, `reward_weights` None or a list of finite
    numbers, `temperature` > 0 (both stages sample), and the hardware settings every trl_ext config checks.
    """

    algorithm: ClassVar[str] = "a2po"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_number(owner, "beta1", self.beta1, gt=0)
        check_number(owner, "num_value_samples", self.num_value_samples, ge=1, integer=True)
        check_number(owner, "temperature", self.temperature, gt=0)
        if isinstance(self.reward_weights, tuple):
            self.reward_weights = list(self.reward_weights)
        if self.reward_weights is not None and not (
            isinstance(self.reward_weights, list)
            and self.reward_weights
            and all(
                isinstance(w, numbers.Real) and not isinstance(w, bool) and math.isfinite(w)
                for w in self.reward_weights
            )
        ):
            raise ValueError(
                f"{owner}: reward_weights={self.reward_weights!r} is not valid; must be None (weight 1 each) or a "
                "non-empty list of finite numbers, one per reward function"
            )
        _ = self.components  # the loss built now: a bad beta2 fails here, naming the field
        super().__post_init__()
        check_hardware(self)

    def resolve_components(self) -> Components:
        """The trainer's loss, `a2po` with this config's `beta2`; A*-PO has no KL term beside it (β₂ is its KL
        temperature)."""
        build = partial(get_policy_loss, "a2po", beta2=self.beta2)
        return Components(policy_loss=build_named(type(self).__name__, "policy loss", build), kl_fn=get_kl_fn("none"))
