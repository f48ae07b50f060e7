"""A config's trained parts, resolved once: `Components` and the `ResolvedComponents` mixin of every config.

A config builds its policy loss, advantage function, KL and entropy terms from its fields the first time they are
asked for (its own checks, at construction, ask first), keeps them in one `Components` object, and hands that same
object to its trainer and to everything that describes the run. The parts are built again only after a field of
the config changed (a fingerprint of the field values says so), so a config changed after construction never trains
stale parts.

The trainer takes a deep copy (`Components.for_trainer`): parts with state (the adaptive KL coefficient,
`clip_cov`'s random generator) then belong to one trainer, as they would had it built them, and two trainers made
from one config do not share them. A copy is not a construction: a config, its trainer and a training step build
the policy loss once.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Components:
    """The parts one trainer trains, built from a config's fields.

    Attributes:
        policy_loss: The policy loss (`trl_ext.losses`), the algorithm's or the one composed in its place.
        advantage_fn: The advantage function (`trl_ext.advantages`), or None (a family without one: DPO, SFT).
        kl_fn: The KL term in the loss (`trl_ext.losses.kl`; named `none` when it is off), or None (SFT).
        kl_penalty_fn: The KL penalty on the rewards, or None when it is off.
        entropy_fn: The entropy bonus (`trl_ext.losses.entropy`), or None.
        loss_agg_mode: The aggregation of the KL term: the policy loss's.
        entropy_loss_agg_mode: The aggregation of the entropy bonus.
    """

    policy_loss: Any
    advantage_fn: Any = None
    kl_fn: Any = None
    kl_penalty_fn: Any = None
    entropy_fn: Any = None
    loss_agg_mode: str = "token-mean"
    entropy_loss_agg_mode: str = "token-mean"

    def for_trainer(self) -> Components:
        """A deep copy for one trainer: the state of a stateful part is the trainer's own."""
        return copy.deepcopy(self)


class ResolvedComponents:
    """Mixin of the trl_ext configs: `components`, built by the config's `resolve_components()` on first use and
    again only after one of its fields changed."""

    def resolve_components(self) -> Components:
        """Build the parts from the current fields (a bad argument is a ValueError naming the config's field)."""
        raise NotImplementedError

    @property
    def components(self) -> Components:
        """The trained parts, built once per state of the config's fields."""
        fingerprint = self._fields_fingerprint()
        cached = self.__dict__.get("_components")
        if cached is None or cached[0] != fingerprint:
            cached = (fingerprint, self.resolve_components())
            self.__dict__["_components"] = cached
        return cached[1]

    def _fields_fingerprint(self) -> str:
        return repr([(f.name, getattr(self, f.name, None)) for f in dataclasses.fields(self)])

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (the Trainer saves its arguments) without the built parts: they are rebuilt on first use."""
        state = dict(self.__dict__)
        state.pop("_components", None)
        return state
