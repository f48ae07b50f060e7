"""The MIX family's config (`MIXFamilyConfig`, the base of the MIX / MIX-CHORD configs): the share of expert
demonstrations in each generation batch, and the mixing loss with an optional rollout loss composed in."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...algorithms import get_algorithm
from ...losses import POLICY_LOSSES, get_policy_loss
from ...losses.mix import MIXPolicyLoss
from ..core.arguments import ExpertDataArguments
from ..core.composition import passed_arguments
from ..core.config_fields import build_named
from ..grpo.config import GRPOFamilyConfig


class MIXComposition:
    """The mixing loss's composition, shared by the synchronous MIX configs and their asynchronous forms: a
    `policy_loss_fn` that is not a mixing loss is the loss of the rollout rows inside the algorithm's mixing loss."""

    @property
    def rollout_loss_name(self) -> str | None:
        """The loss of the rollout rows when `policy_loss_fn` names one in place of the mix's PPO part (CHORD with
        SAPO: `sapo`); None when it names a mixing loss (`mix`, `mix_chord`: PPO on the rollouts)."""
        name = self.policy_loss_fn
        return None if issubclass(POLICY_LOSSES[name], MIXPolicyLoss) else name

    @property
    def policy_loss_name(self) -> str:
        """The mixing loss: `policy_loss_fn` when it is one, else the algorithm's (whose rollout part it replaces)."""
        if self.rollout_loss_name is None:
            return super().policy_loss_name
        return get_algorithm(self.algorithm).policy_loss_fn

    def policy_loss_kwargs(self) -> dict[str, Any]:
        """The mixing loss's arguments (its fields); with a rollout loss, that loss built from `policy_loss_fn_args`
        as its `rollout_loss`."""
        rollout = self.rollout_loss_name
        if rollout is None:
            return super().policy_loss_kwargs()
        given = self.given_args("policy_loss_fn", POLICY_LOSSES[rollout])
        mixing = passed_arguments(self, POLICY_LOSSES[self.policy_loss_name])
        loss = build_named(type(self).__name__, "rollout loss", lambda: get_policy_loss(rollout, **given))
        return {**mixing, "rollout_loss": loss}

    def composition(self) -> dict[str, str]:
        parts = super().composition()
        rollout = self.rollout_loss_name
        if rollout is not None:
            own = get_algorithm(self.algorithm).policy_loss_fn
            rows = self._part_text("policy_loss_fn", rollout, "ppo").split(", composed")[0]
            parts["policy loss"] = f"{own} with {rows} on the rollout rows, composed (the algorithm's: ppo)"
        return parts

    @property
    def reference_weighting(self) -> bool:
        """True when a batch-geometry argument is set: the reference's per-micro-batch weighting instead of the
        window normalization of each part (the loss arguments a config leaves unset by default, `config_unset`)."""
        loss = POLICY_LOSSES[self.policy_loss_name]
        return any(getattr(self, spec.field_name) is not None for spec in loss.arguments if spec.config_unset)


@dataclass
class MIXFamilyConfig(ExpertDataArguments, MIXComposition, GRPOFamilyConfig):
    """Base of the MIX / MIX-CHORD configs: the share of expert demonstrations in each generation batch (and the
    batch and entropy defaults that go with it, `ExpertDataArguments`)."""

    def _check_fields(self) -> None:
        super()._check_fields()
        ratio = self.expert_data_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
            raise ValueError(
                f"{type(self).__name__}: expert_data_ratio={ratio!r} is not valid; must be a number in [0, 1] (the "
                "share of each generation batch's rows that are expert demonstrations; 0 = only rollouts, 1 = only "
                "expert rows)"
            )

    @property
    def expert_rows_per_generation(self) -> int:
        """Expert rows in each generation batch, over all processes: ceil(ratio × generation_batch_size), as the
        reference's mix sampler takes ceil(ratio × train_batch_size)."""
        return math.ceil(self.expert_data_ratio * self.generation_batch_size - 1e-9)
