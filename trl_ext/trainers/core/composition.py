"""Resolving the parts of a composition: the policy loss (`policy_loss_fn`), the advantage function (`advantage_fn`),
the KL term (`kl_loss_fn`, `beta`), the KL penalty on the rewards (`kl_penalty_fn`) and the entropy bonus
(`entropy_loss_fn`), each built from the config's fields and its `*_args` dict (`ComposedComponents`), all together
into the config's one `Components` object (`trl_ext.trainers.core.resolved`).

A part left to the algorithm takes every field of its arguments; a part composed in its place (`policy_loss_fn="sapo"`
on a PPOConfig, ...) takes only the fields the user set that it has, and its `*_args`. The parts are built once, when
the config is made (`resolve_components`), so that a bad argument is a ValueError naming the config class and its
field; they are checked to get every input the family's trainer provides (`_check_pairing`), and the trainer trains
a copy of the same object.

The path from a field to its loss: `SAPOConfig(tau_pos=1.5)` → `resolve_components` → `_build_policy_loss` →
`composed_kwargs("policy_loss_fn")` (the fields of the loss's `Argument` specs, `policy_loss_fn_args`) →
`get_policy_loss("sapo", tau_pos=1.5, ...)`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ..._validation import check_choice, required_inputs
from ...advantages import ADVANTAGE_FNS, get_advantage_fn
from ...algorithms import get_algorithm
from ...components import Component
from ...families import get_family, input_source
from ...losses import POLICY_LOSSES, get_entropy_fn, get_kl_fn, get_policy_loss
from ...losses.kl import KL_FNS, KLFn
from ...losses.trl_grpo import TRLGRPOLoss
from ...losses.trl_grpo import aggregation as trl_loss_aggregation
from .arguments import config_arguments
from .config_fields import build_named, check_kwargs
from .documented_defaults import is_documented_default
from .resolved import Components, ResolvedComponents
from .trl_loss_fields import TRL_LOSS_FIELDS, plain_value

COMPONENT_REGISTRIES = {"policy_loss_fn": POLICY_LOSSES, "advantage_fn": ADVANTAGE_FNS}
"""The registry of each part a config names by a field (`policy_loss_fn`, `advantage_fn`)."""
KL_PENALTY_DEFAULTS: dict[str, Any] = {"adaptive": False, "kl_coef": 0.001}
"""The reference's `kl_penalty_fn_args` when none are given (Trinity-RFT's `KLFn.default_args()`)."""


def passed_arguments(config: Any, component: type[Component]) -> dict[str, Any]:
    """The arguments a config passes to `component`: each field's value by the argument's name, leaving out a
    `config_unset` field that is None and a `config_when_set` field that still holds its documented default (the
    component then sees the argument as not given)."""
    kwargs = {}
    for spec in config_arguments(component):
        value = getattr(config, spec.field_name)
        if (spec.config_unset and value is None) or (spec.config_when_set and is_documented_default(value)):
            continue
        kwargs[spec.name] = value
    return kwargs


def set_arguments(config: Any, component: type[Component]) -> dict[str, Any]:
    """The arguments of `component` that the user set through the config's fields: `passed_arguments` without the
    fields that hold their default (the config's: an algorithm's record may set its own; a value equal to the default
    counts as not set)."""
    passed = passed_arguments(config, component)
    specs = {spec.name: spec for spec in config_arguments(component)}
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    return {
        name: value
        for name, value in passed.items()
        if specs[name].config_unset or value != defaults.get(specs[name].field_name, specs[name].default)
    }


def config_renames(component: type[Component]) -> dict[str, str]:
    """Config field -> argument name, where they differ (for error messages that name the config's fields)."""
    return {spec.config_name: spec.name for spec in component.arguments if spec.config_name}


class ComposedComponents(ResolvedComponents):
    """Mixin of `GRPOFamilyConfig`: the trained parts, the algorithm's or composed in their place, checked and built
    from the config's fields (`CompositionArguments`, the KL and entropy fields, the algorithm's own arguments) into
    `components`. The family configs override what their trainers train differently (MIX's rollout loss,
    distillation's dense term)."""

    #: the family whose trainer trains this config when it is not its record's (an algorithm's asynchronous form,
    #: `AsyncSAPOConfig`: the `async` family's trainer feeds its parts)
    trainer_family: ClassVar[str | None] = None

    def resolve_components(self) -> Components:
        """The parts from the current fields. The KL term is aggregated as the policy loss is, and so is the entropy
        bonus (Trinity-RFT), except with TRL's own loss: TRL's token mean."""
        policy_loss = self._build_policy_loss()
        if self.uses_trl_loss:
            loss_agg_mode, entropy_loss_agg_mode = trl_loss_aggregation(self.loss_type), "token-mean"
        else:
            loss_agg_mode = entropy_loss_agg_mode = getattr(policy_loss, "loss_agg_mode", "token-mean")
        return Components(
            policy_loss=policy_loss,
            advantage_fn=self._build_advantage_fn(),
            kl_fn=self._build_kl_fn(),
            kl_penalty_fn=self._build_kl_penalty_fn(),
            entropy_fn=self._build_entropy_fn(),
            loss_agg_mode=loss_agg_mode,
            entropy_loss_agg_mode=entropy_loss_agg_mode,
        )

    def _check_composition_fields(self) -> None:
        """`policy_loss_fn` / `advantage_fn` name registered components, the `*_args` fields are dicts (parsed from
        JSON on the command line), `kl_penalty_fn` is an estimator: each field on its own."""
        owner = type(self).__name__
        for kind, registry in COMPONENT_REGISTRIES.items():
            if hasattr(self, kind):
                check_choice(owner, kind, getattr(self, kind), sorted(registry))
            setattr(self, f"{kind}_args", check_kwargs(owner, f"{kind}_args", getattr(self, f"{kind}_args")))
            if getattr(self, f"{kind}_args") and not hasattr(self, kind):
                raise ValueError(f"{owner}: {kind}_args is set, but the {self.algorithm} algorithm has no {kind}")
        check_choice(owner, "kl_penalty_fn", self.kl_penalty_fn, sorted(KL_FNS))
        self.kl_penalty_fn_args = check_kwargs(owner, "kl_penalty_fn_args", self.kl_penalty_fn_args)
        if self.kl_penalty_fn_args and self.kl_penalty_fn == "none":
            raise ValueError(
                f"{owner}: kl_penalty_fn_args={self.kl_penalty_fn_args} is set but kl_penalty_fn='none' applies no KL "
                f"penalty; choose an estimator (kl_penalty_fn one of "
                f"{', '.join(repr(k) for k in sorted(KL_FNS) if k != 'none')}) or drop kl_penalty_fn_args"
            )

    def _check_pairing(self) -> None:
        """The composed parts can train together in this family's trainer: each gets every input it needs (a
        `ValueError` names the part, the input and who provides it)."""
        family = get_family(self.trainer_family) if self.trainer_family else get_algorithm(self.algorithm).family
        loss, advantage = self.components.policy_loss, self.components.advantage_fn
        needed = required_inputs(loss)
        if getattr(loss, "rollout_loss", None) is not None:  # MIX with another rollout loss: what that one needs too
            needed += required_inputs(loss.rollout_loss)
        parts = [("policy_loss_fn", self.policy_loss_name, needed, family.loss_inputs)]
        if advantage is not None:
            parts.append(("advantage_fn", self.advantage_fn_name, advantage.needed_inputs(), family.advantage_inputs))
        for kind, name, needed, provided in parts:
            missing = [key for key in needed if key not in provided]
            if missing:
                raise ValueError(
                    f"{type(self).__name__}: {kind}={name!r} cannot train in the {family.name} family's trainer: it "
                    f"needs `{missing[0]}`, {input_source(missing[0])}"
                )
        if advantage is not None and "reward_baselines" in advantage.needed_inputs():  # ReMax
            self._check_greedy_baselines()

    def _check_greedy_baselines(self) -> None:
        """ReMax's greedy baselines can be made for this config's batches (the synchronous trainers generate one per
        prompt group on the process that holds it, and compare it with the summed rewards)."""
        rows = self.per_device_train_batch_size * (self.steps_per_generation or self.gradient_accumulation_steps)
        if rows % self.num_generations:
            raise ValueError(
                f"{type(self).__name__}: advantage_fn={self.advantage_fn_name!r} generates one greedy completion "
                f"per prompt group on the process that holds the group, so each process's {rows} rows "
                f"(per_device_train_batch_size × steps_per_generation) must be whole groups of "
                f"num_generations={self.num_generations}; make it a multiple"
            )
        if self.multi_objective_aggregation == "normalize_then_sum":
            raise ValueError(
                f"{type(self).__name__}: advantage_fn={self.advantage_fn_name!r} compares each reward with a "
                "greedy completion's, which multi_objective_aggregation='normalize_then_sum' (rewards normalized "
                "within their group) gives no value; use 'sum_then_normalize'"
            )

    @property
    def policy_loss_name(self) -> str:
        """The `trl_ext.losses` name of the policy loss: `policy_loss_fn` (the algorithm's by default), or
        `trl_grpo` (TRL's own losses)."""
        if self.uses_trl_loss:
            return "trl_grpo"
        return getattr(self, "policy_loss_fn", None) or get_algorithm(self.algorithm).policy_loss_fn

    @property
    def advantage_fn_name(self) -> str | None:
        """The `trl_ext.advantages` name of the advantage function: `advantage_fn` (the algorithm's by default)."""
        return getattr(self, "advantage_fn", None) or self.advantage_name()

    @classmethod
    def advantage_name(cls) -> str | None:
        """The algorithm's own advantage function (the record's), whose arguments are this config's fields."""
        return get_algorithm(cls.algorithm).advantage_fn if cls.algorithm else None

    @classmethod
    def loss_argument_names(cls) -> list[str]:
        """The config fields of the algorithm's own policy loss's arguments."""
        if not cls.algorithm:
            return []
        return [
            spec.field_name for spec in config_arguments(POLICY_LOSSES[get_algorithm(cls.algorithm).policy_loss_fn])
        ]

    @classmethod
    def advantage_argument_names(cls) -> list[str]:
        """The config fields of the algorithm's own advantage function's arguments."""
        name = cls.advantage_name()
        return [spec.field_name for spec in config_arguments(ADVANTAGE_FNS[name])] if name else []

    def _named(self, build, what: str, renames: dict[str, str] | None = None):
        return build_named(type(self).__name__, what, build, renames)

    def composed_kwargs(self, kind: str, chosen: str | None = None) -> dict[str, Any]:
        """The arguments of component `kind` (`policy_loss_fn` / `advantage_fn`): the config's fields of the
        algorithm's own component and the `<kind>_args` dict.

        With the algorithm's own component (`chosen` = `getattr(self, kind)` by default), every field is passed and
        `<kind>_args` overrides the fields it names. With another one, only the fields the user set (a value other
        than the default) are passed, each only if the chosen component takes that argument (else an error: the
        field configures the algorithm's component). A field and an `<kind>_args` entry that set the same argument
        differently are an error either way."""
        owner, registry = type(self).__name__, COMPONENT_REGISTRIES[kind]
        own = registry[getattr(get_algorithm(self.algorithm), kind)]
        chosen_cls = registry[chosen or getattr(self, kind)]
        given = self.given_args(kind, chosen_cls)
        valid = [a.name for a in chosen_cls.arguments]
        fields = {spec.name: spec.field_name for spec in config_arguments(own)}
        set_by_field = set_arguments(self, own)
        for name, value in given.items():
            if name in set_by_field and set_by_field[name] != value:
                raise ValueError(
                    f"{owner}: {fields[name]}={set_by_field[name]!r} and {kind}_args[{name!r}]={value!r} set the same "
                    f"argument of {chosen_cls.name!r} differently; set it once"
                )
        if chosen_cls is own:
            return {**passed_arguments(self, own), **given}
        foreign = [name for name in set_by_field if name not in valid]
        if foreign:
            name = foreign[0]
            raise ValueError(
                f"{owner}: {fields[name]}={set_by_field[name]!r} is an argument of the {self.algorithm} algorithm's "
                f"{own.name!r}, but {kind}={chosen_cls.name!r} replaces it and does not take it (its arguments: "
                f"{', '.join(valid) or 'none'}); leave {fields[name]} unset and give {chosen_cls.name}'s arguments in "
                f"{kind}_args"
            )
        return {**set_by_field, **given}

    def given_args(self, kind: str, component: type) -> dict[str, Any]:
        """The `<kind>_args` dict, checked to name only arguments of `component`."""
        given = dict(getattr(self, f"{kind}_args") or {})
        valid = [a.name for a in component.arguments]
        unknown = [key for key in given if key not in valid]
        if unknown:
            raise ValueError(
                f"{type(self).__name__}: {kind}_args has {', '.join(map(repr, unknown))}, which {component.name!r} "
                f"does not take; its arguments: {', '.join(valid) or 'none'}"
            )
        return given

    def policy_loss_kwargs(self) -> dict[str, Any]:
        """The policy loss's arguments (TRL's own fields for TRL's loss)."""
        if self.uses_trl_loss:
            return {name: plain_value(getattr(self, name)) for name in TRL_LOSS_FIELDS}
        return self.composed_kwargs("policy_loss_fn")

    def _build_policy_loss(self):
        if self.uses_trl_loss:
            return self._named(lambda: TRLGRPOLoss(**self.policy_loss_kwargs()), "TRL's loss")
        name, kwargs = self.policy_loss_name, self.policy_loss_kwargs()
        renames = config_renames(POLICY_LOSSES[name])
        return self._named(lambda: get_policy_loss(name, **kwargs), "policy loss", renames)

    def advantage_kwargs(self) -> dict[str, Any]:
        """The advantage function's arguments, with TRL's `scale_rewards` (GDPO's sum of normalized rewards: the
        batch std) as the `std_cal_level` of a function that has one."""
        kwargs = self.composed_kwargs("advantage_fn")
        if "std_cal_level" in {a.name for a in ADVANTAGE_FNS[self.advantage_fn_name].arguments}:
            scale = "batch" if self.multi_objective_aggregation == "normalize_then_sum" else self.scale_rewards
            if scale != "group":
                kwargs["std_cal_level"] = scale
        return kwargs

    def _build_advantage_fn(self):
        name = self.advantage_fn_name
        if name is None:
            return None
        renames = config_renames(ADVANTAGE_FNS[name]) if name == self.advantage_name() else {}
        kwargs = self.advantage_kwargs()
        return self._named(lambda: get_advantage_fn(name, **kwargs), "advantage function", renames)

    def _build_kl_fn(self):
        name = self.kl_loss_fn if self.beta != 0 else "none"
        kwargs = {"kl_coef": self.beta, **passed_arguments(self, KLFn)}
        return self._named(lambda: get_kl_fn(name, **kwargs), "KL", {"beta": "kl_coef", **config_renames(KLFn)})

    def _build_kl_penalty_fn(self):
        """The KL penalty on the rewards (`kl_penalty_fn`, its arguments `kl_penalty_fn_args`), or None."""
        if self.kl_penalty_fn == "none":
            return None
        kwargs = {**KL_PENALTY_DEFAULTS, **(self.kl_penalty_fn_args or {})}
        unknown = [key for key in kwargs if key not in KLFn.default_args()]
        if unknown:
            raise ValueError(
                f"{type(self).__name__}: kl_penalty_fn_args has {', '.join(map(repr, unknown))}; its keys: "
                f"{', '.join(KLFn.default_args())}"
            )
        return build_named(
            type(self).__name__,
            "kl_penalty_fn_args",
            lambda: get_kl_fn(self.kl_penalty_fn, **kwargs),
            {f"kl_penalty_fn_args[{k!r}]": k for k in KLFn.default_args()},
        )

    def _build_entropy_fn(self):
        return self._named(lambda: get_entropy_fn(self.entropy_loss_fn, entropy_coef=self.entropy_coef), "entropy")

    def composition(self) -> dict[str, str]:
        """The trained parts in words, for the run summary and the model card: `{"policy loss": "sapo", ...}`; a
        part other than the algorithm's says so, with its `*_args`."""
        spec = get_algorithm(self.algorithm)
        parts = {
            "policy loss": self._part_text("policy_loss_fn", self.policy_loss_name, spec.policy_loss_fn),
            "advantage": self._part_text("advantage_fn", self.advantage_fn_name, spec.advantage_fn),
            "KL in the loss": f"{self.kl_loss_fn}, beta {self.beta:g}" if self.beta else "off",
        }
        if self.kl_penalty_fn != "none":
            args = {**KL_PENALTY_DEFAULTS, **(self.kl_penalty_fn_args or {})}
            adaptive = f", adaptive towards {args['target_kl']:g}" if args.get("adaptive") else ""
            parts["KL in the reward"] = f"{self.kl_penalty_fn}, coefficient {args['kl_coef']:g}{adaptive}"
        correction = self.build_rollout_correction()
        if correction.enabled:
            parts["rollout correction"] = correction.describe()
        return parts

    def _part_text(self, kind: str, name: str | None, own: str | None) -> str:
        if name is None:
            return "-"
        given = getattr(self, f"{kind}_args", None) or {}
        text = name + (" (" + ", ".join(f"{k}={v!r}" for k, v in given.items()) + ")" if given else "")
        return text if name == own or self.uses_trl_loss else f"{text}, composed (the algorithm's: {own})"
