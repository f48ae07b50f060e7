"""Refusing TRL's loss fields: the `trl.GRPOConfig` fields that select or parameterize TRL's *own* loss (`loss_type`,
`epsilon`, `sapo_temperature_neg`, ...; `TRL_LOSS_FIELDS`).

A trl_ext GRPO-family config redeclares them with the default None (`unused_trl_field`). An algorithm's config
(`SAPOConfig`, ...) rejects one whenever it is given, even at TRL's default, with the name of the field to use
instead (`loss_type="dapo"` on a SAPOConfig would otherwise read as "DAPO" while the trainer trains SAPO);
`trl_ext.GRPOConfig` accepts them and then trains TRL's loss (`trl_ext.losses.trl_grpo`, `TRLLossFields`). Once the
config is built, the fields not given hold TRL's defaults (marked by `documented_default`), which TRL's own config
and trainer code read, and `to_dict` leaves them out (`UnsetTRLFields`).
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, ClassVar

from trl import GRPOConfig as _TRLGRPOConfig

from ...advantages import ADVANTAGE_FNS
from ...algorithms import get_algorithm
from ...losses import POLICY_LOSSES
from .arguments import _help, config_arguments
from .config_fields import trl_defaults
from .documented_defaults import DocumentedDefault, documented_default, is_documented_default

TRL_GRPO_DEFAULTS = trl_defaults(_TRLGRPOConfig)

# TRL fields that select or parameterize TRL's own loss, with what an algorithm trainer uses instead (`{clip}`,
# `{dual_clip}` are filled per algorithm). `GRPOFamilyConfig` redeclares them with the default None: on an
# algorithm's config (SAPOConfig, ...) setting one is an error even at TRL's default value (`loss_type="dapo"` on a
# SAPOConfig would otherwise read as "DAPO" while the trainer trains SAPO); `trl_ext.GRPOConfig` accepts them and then
# trains TRL's loss (`trl_ext.losses.trl_grpo`). Once the config is built they hold TRL's defaults (marked by
# `documented_default`) where not given, which TRL's own config and trainer code read.
TRL_LOSS_FIELDS: dict[str, str] = {
    "loss_type": "the trainer class selects the loss (`loss_agg_mode` its aggregation); {trl}",
    "importance_sampling_level": "use `GSPOTrainer` / `GSPOConfig` for the sequence-level ratio",
    "epsilon": "{clip}",
    "epsilon_high": "{clip}",
    "delta": "{dual_clip}",
    "sapo_temperature_pos": "use `SAPOConfig.tau_pos`",
    "sapo_temperature_neg": "use `SAPOConfig.tau_neg`",
    "vespo_k_pos": "use `VESPOConfig.k_pos`",
    "vespo_lambda_pos": "use `VESPOConfig.lambda_pos`",
    "vespo_k_neg": "use `VESPOConfig.k_neg`",
    "vespo_lambda_neg": "use `VESPOConfig.lambda_neg`",
}
TRL_LOSS_HINT = "TRL's own losses are trained by `trl_ext.GRPOTrainer` / `trl_ext.GRPOConfig(loss_type=...)`"
_GENERIC_HINTS = {
    "clip": "clip with the algorithm's own arguments (e.g. `clip_range`)",
    "dual_clip": "the dual clip is `clip_ratio_c` where the loss has one",
    "trl": TRL_LOSS_HINT,
}


def unused_trl_field(name: str) -> Any:
    """The redeclaration of TRL loss field `name`: default None, an error when set (see `TRL_LOSS_FIELDS`)."""
    hint = TRL_LOSS_FIELDS[name].format(**_GENERIC_HINTS)
    return field(
        default=None,
        metadata=_help(
            f"TRL's own loss (trl.GRPOConfig's default {TRL_GRPO_DEFAULTS[name]!r}). `trl_ext.GRPOConfig`: setting it "
            f"trains TRL's loss, exactly. The algorithms' configs (SAPOConfig, ...): not used, and setting it, even "
            f"to that default, is an error ({hint})."
        ),
    )


TRL_ADVANTAGE_EPSILON = 1e-4
"""The ε of TRL's (R − mean)/(std + ε), the `grpo` advantage's default with TRL's own loss."""


def plain_value(value: Any) -> Any:
    """A documented default as the plain value TRL's own code would hold."""
    if isinstance(value, DocumentedDefault):
        return float(value)
    return str(value) if is_documented_default(value) else value


class UnsetTRLFields:
    """Mixin of a trl_ext config that redeclares the fields of TRL's own losses with the default None
    (`unset_trl_fields`: name -> TRL's default). Giving one is an error even at TRL's default
    (`_unused_field_error`) unless the config `accepts_trl_losses()`, which records the given ones
    (`_trl_loss_fields`); every field not given then holds TRL's default for TRL's own code, marked as not given
    (`documented_default`, so a copy made from the config's values is accepted), and `to_dict` leaves them out
    (the dict logged to trackers and written in model cards re-loads)."""

    unset_trl_fields: ClassVar[dict[str, Any]] = {}
    _trl_loss_fields: tuple[str, ...] = ()  # the TRL loss fields given (only where `accepts_trl_losses()`)

    def _unused_field_error(self, name: str, value: Any, rule: str) -> ValueError:
        raise NotImplementedError

    @classmethod
    def accepts_trl_losses(cls) -> bool:
        return False

    def _take_trl_defaults(self) -> None:
        given = []
        for name, default in self.unset_trl_fields.items():
            value = getattr(self, name)
            if value is None or is_documented_default(value):
                setattr(self, name, documented_default(default))
            elif self.accepts_trl_losses():
                given.append(name)
            else:
                rule = f"it configures TRL's own loss: leave it unset, even at TRL's default {default!r}"
                raise self._unused_field_error(name, value, rule)
        self._trl_loss_fields = tuple(given)

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        for name in self.unset_trl_fields:
            value = getattr(self, name, None)
            if value is None or is_documented_default(value):
                d.pop(name, None)
        return d


class TRLLossFields(UnsetTRLFields):
    """The GRPO family's TRL loss fields: refused by an algorithm's config, with a hint naming the algorithm's own
    arguments (`_clip_hint`); accepted by a config whose record has `trl_losses` (`trl_ext.GRPOConfig`), which then
    trains TRL's own loss (`uses_trl_loss`, `_enter_trl_loss_mode`). Reads the composed parts' names from
    `trl_ext.trainers.core.composition.ComposedComponents`."""

    unset_trl_fields: ClassVar[dict[str, Any]] = {name: TRL_GRPO_DEFAULTS[name] for name in TRL_LOSS_FIELDS}

    def _clip_hint(self) -> dict[str, str]:
        names = self.loss_argument_names()
        if "clip_range_low" in names:
            clip = "use `clip_range` / `clip_range_low` / `clip_range_high`"
        else:
            clip = f"the {self.algorithm} loss does not clip with TRL's epsilon; its arguments are: {', '.join(names)}"
        dual = "use `clip_ratio_c` (dual clip)" if "clip_ratio_c" in names else clip
        return {"clip": f"{clip}; {TRL_LOSS_HINT}", "dual_clip": f"{dual}; {TRL_LOSS_HINT}", "trl": TRL_LOSS_HINT}

    # ---- TRL's own loss (`trl_ext.GRPOConfig` with a TRL loss field set) -----------------------------------------

    @classmethod
    def accepts_trl_losses(cls) -> bool:
        """Whether the config trains TRL's own loss when a TRL loss field is set (the record's `trl_losses`)."""
        return bool(cls.algorithm) and get_algorithm(cls.algorithm).trl_losses

    @property
    def uses_trl_loss(self) -> bool:
        """True when TRL's own loss is trained: a TRL loss field (`loss_type`, `epsilon`, ...) was set on a config
        that accepts them (`trl_ext.GRPOConfig`)."""
        return bool(self._trl_loss_fields)

    def _enter_trl_loss_mode(self) -> None:
        """TRL's loss replaces the record's: its own fields must not be set too, and the KL estimator and the
        advantage's ε default to TRL's (`k3`, 1e-4)."""
        owner = type(self).__name__
        given = ", ".join(self._trl_loss_fields)
        own = get_algorithm(self.algorithm).policy_loss_fn
        if self.policy_loss_fn != own or self.policy_loss_fn_args:
            what = f"policy_loss_fn={self.policy_loss_fn!r}"
            what = what if self.policy_loss_fn != own else f"policy_loss_fn_args={self.policy_loss_fn_args}"
            raise ValueError(f"{owner}: {given} selects TRL's own loss and {what} selects trl_ext's; set one of them")
        for spec in config_arguments(POLICY_LOSSES[own]):
            value = getattr(self, spec.field_name)
            if value != spec.default:
                raise ValueError(
                    f"{owner}: {spec.field_name}={value!r} configures trl_ext's {self.algorithm} loss, but {given} "
                    f"selects TRL's own loss, which does not read it; use TRL's fields (loss_type, epsilon, "
                    f"epsilon_high, delta, ...), or drop {given} to train trl_ext's {self.algorithm} loss"
                )
        if is_documented_default(self.kl_loss_fn):
            self.kl_loss_fn = documented_default("k3")
        if self.advantage_fn_name != self.advantage_name() or "epsilon" in (self.advantage_fn_args or {}):
            return  # TRL's ε is the default of its own advantage only
        for spec in config_arguments(ADVANTAGE_FNS[self.advantage_name()]):
            if spec.name == "epsilon" and getattr(self, spec.field_name) == spec.default:  # TRL's ε, in the config
                setattr(self, spec.field_name, TRL_ADVANTAGE_EPSILON)

    def _unused_field_error(self, name: str, value: Any, rule: str) -> ValueError:
        hint = TRL_LOSS_FIELDS[name].format(**self._clip_hint())
        return ValueError(
            f"{type(self).__name__}: {name}={value!r} is a trl.GRPOConfig field that trl_ext's "
            f"{self.algorithm or 'GRPO-family'} trainer does not use ({rule}); {hint}"
        )
