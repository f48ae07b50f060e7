"""Configs of the GRPO-family trainers: `trl.GRPOConfig` plus the algorithm's loss and advantage arguments.

`GRPOFamilyConfig` is the base of every GRPO-family config (`MIXFamilyConfig` of MIX / MIX-CHORD,
`DistillFamilyConfig` of on-policy distillation). An algorithm's own config (`trl_ext.SAPOConfig`, ...) is built from
its record by `trl_ext.trainers.algorithm_classes`: the family's base plus the dataclasses that
`trl_ext.trainers.arguments.algorithm_arguments` generates from the record's loss and advantage `Argument` specs.
TRL's own fields keep TRL's meaning (`beta` is the KL coefficient, `entropy_coef` the entropy-bonus coefficient,
`num_generations` the group size), and TRL's options that do not select the loss (`scale_rewards`, GDPO's
`multi_objective_aggregation`, `top_entropy_quantile`, `off_policy_mask_threshold`, adaptive entropy, ...) work in
every algorithm (see `GRPOFamilyConfig`). A TRL field that selects or parameterizes TRL's *own* loss (`loss_type`,
`epsilon`, `sapo_temperature_neg`, ...) makes `trl_ext.GRPOConfig` train TRL's loss (`trl_ext.losses.trl_grpo`); an
algorithm's config rejects it whenever it is given, even at TRL's default, with the name of the field to use
instead. `use_liger_kernel=True` works everywhere as in TRL 1.16 (Liger's layer kernels; the loss stays the
trainer's). Every field is checked on its own at construction: a bad value is a ValueError naming the config class,
the field, the value and what it may be.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from trl import GRPOConfig as _TRLGRPOConfig

from .._validation import check_choice, check_number
from ..advantages import ADVANTAGE_FNS, get_advantage_fn
from ..algorithms import get_algorithm
from ..losses import POLICY_LOSSES, get_entropy_fn, get_kl_fn, get_policy_loss
from ..losses.kl import KL_FNS, KLFn
from ..losses.trl_grpo import TRLGRPOLoss
from ..losses.trl_grpo import aggregation as trl_loss_aggregation
from .arguments import (
    _REWARD_ADVANTAGE_FNS,
    GRPO_KL_ARGUMENTS,
    DistillPolicyLossArguments,
    DocumentedDefault,
    ExpertDataArguments,
    TeacherArguments,
    _help,
    config_arguments,
    config_renames,
    documented_default,
    is_documented_default,
    passed_arguments,
)
from .devices import check_device, check_hardware

try:  # how TrainingArguments converts the values of the JSON dicts it parses ("true" -> True, "1" -> 1)
    from transformers.training_args import _convert_str_dict
except ImportError:  # pragma: no cover - a private helper of transformers

    def _convert_str_dict(passed_value: dict) -> dict:
        return passed_value


def build_named(owner: str, what: str, build, renames: dict[str, str] | None = None):
    """`build()`, with a component's ValueError re-raised naming the config class (`owner`) and the config's field
    names (`renames`: config field -> component argument)."""
    try:
        return build()
    except ValueError as err:
        message = str(err)
        for config_name, argument in (renames or {}).items():
            message = message.replace(f" {argument}=", f" {config_name}=")
        raise ValueError(f"{owner} ({what}): {message}") from None


# ---------------------------------------------------------------------------------------------------------------
# The base config
# ---------------------------------------------------------------------------------------------------------------


def trl_defaults(config_class: type) -> dict[str, Any]:
    """The field defaults of a TRL config class (default factories called)."""
    return {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(config_class)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }


_GRPO_DEFAULTS = trl_defaults(_TRLGRPOConfig)

# TRL fields that select or parameterize TRL's own loss, with what an algorithm trainer uses instead (`{clip}`,
# `{dual_clip}` are filled per algorithm). `GRPOFamilyConfig` redeclares them with the default None: on an
# algorithm's config (SAPOConfig, ...) setting one is an error even at TRL's default value (`loss_type="dapo"` on a
# SAPOConfig would otherwise read as "DAPO" while the trainer trains SAPO); `trl_ext.GRPOConfig` accepts them and then
# trains TRL's loss (`trl_ext.losses.trl_grpo`). Once the config is built they hold TRL's defaults (marked by
# `documented_default`) where not given, which TRL's own config and trainer code read.
_TRL_LOSS_FIELDS: dict[str, str] = {
    "loss_type": "the trainer class selects the loss (`loss_agg_mode` its aggregation); {trl}",
    "importance_sampling_level": "use `GSPOTrainer` / `GSPOConfig` for the sequence-level ratio",
    "epsilon": "{clip}",
    "epsilon_high": "{clip}",
    "delta": "{dual_clip}",
    "sapo_temperature_pos": "use `SAPOConfig.tau_pos`",
    "sapo_temperature_neg": "use `SAPOConfig.tau_neg`",
    "vespo_k_pos": "{trl}",
    "vespo_lambda_pos": "{trl}",
    "vespo_k_neg": "{trl}",
    "vespo_lambda_neg": "{trl}",
}
_TRL_LOSS_HINT = "TRL's own losses are trained by `trl_ext.GRPOTrainer` / `trl_ext.GRPOConfig(loss_type=...)`"
_GENERIC_HINTS = {
    "clip": "clip with the algorithm's own arguments (e.g. `clip_range`)",
    "dual_clip": "the dual clip is `clip_ratio_c` where the loss has one",
    "trl": _TRL_LOSS_HINT,
}
# The advantage functions whose std normalization TRL's `scale_rewards` selects (their `std_cal_level`).
_SCALE_REWARDS = ("group", "batch", "none")


def _unused_trl_field(name: str) -> Any:
    """The redeclaration of TRL loss field `name`: default None, an error when set (see `_TRL_LOSS_FIELDS`)."""
    hint = _TRL_LOSS_FIELDS[name].format(**_GENERIC_HINTS)
    return field(
        default=None,
        metadata=_help(
            f"TRL's own loss (trl.GRPOConfig's default {_GRPO_DEFAULTS[name]!r}). `trl_ext.GRPOConfig`: setting it "
            f"trains TRL's loss, exactly. The algorithms' configs (SAPOConfig, ...): not used, and setting it, even "
            f"to that default, is an error ({hint})."
        ),
    )


TRL_ADVANTAGE_EPSILON = 1e-4
"""The ε of TRL's (R − mean)/(std + ε), the `grpo` advantage's default with TRL's own loss."""


def _plain(value: Any) -> Any:
    """A documented default as the plain value TRL's own code would hold."""
    if isinstance(value, DocumentedDefault):
        return float(value)
    return str(value) if is_documented_default(value) else value


def resolve_kl_coefficient(owner: str, kl_loss_fn: str, name: str, value: Any) -> float:
    """The effective KL coefficient of field `name`: 0 with `kl_loss_fn="none"` (an explicit non-zero value is then
    an error), else the value (a plain float in place of the documented default)."""
    if kl_loss_fn == "none":
        if not is_documented_default(value) and value != 0:
            raise ValueError(
                f"{owner}: {name}={value!r} adds a KL term but kl_loss_fn='none' turns it off; choose an estimator "
                f"with kl_loss_fn (one of {', '.join(repr(k) for k in sorted(KL_FNS) if k != 'none')}) or set "
                f"{name}=0 (or leave it unset)"
            )
        return 0.0
    return float(value) if is_documented_default(value) else value


def check_text(owner: str, name: str, value: Any, *, allow_none: bool = True) -> Any:
    """A non-empty string (or None)."""
    if value is None and allow_none:
        return value
    if not isinstance(value, str) or not value.strip():
        rule = "a non-empty string" + (" or None" if allow_none else "")
        raise ValueError(f"{owner}: {name}={value!r} is not valid; must be {rule}")
    return value


def check_kwargs(owner: str, name: str, value: Any) -> dict[str, Any] | None:
    """None, a dict with string keys, or (from the command line) a JSON object string, returned parsed."""
    rule = """must be a dict (a JSON object on the command line, e.g. '{"dtype": "bfloat16"}') or None"""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"{owner}: {name}={value!r} {rule}; it is not valid JSON ({err})") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"{owner}: {name}={value!r} {rule}")
        value = _convert_str_dict(parsed)  # as TrainingArguments converts its own JSON dict fields
    if value is not None and not (isinstance(value, dict) and all(isinstance(k, str) for k in value)):
        raise ValueError(f"{owner}: {name}={value!r} {rule}, with string keys")
    return value


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


@dataclass
class GRPOFamilyConfig(UnsetTRLFields, GRPO_KL_ARGUMENTS, _TRLGRPOConfig):
    r"""
    Base configuration of the trl_ext GRPO-family trainers: every `trl.GRPOConfig` field, plus the KL and entropy
    choices shared by all algorithms. Use an algorithm's subclass (`SAPOConfig`, `GSPOConfig`, ...), which adds
    its loss and advantage arguments.

    TRL fields keep TRL's meaning: `beta` is the KL coefficient (Trinity-RFT's `kl_coef`; 0 creates no
    reference model), `entropy_coef` the entropy-bonus coefficient, `num_generations` the group size. TRL's options
    that do not select the loss work in every algorithm, composed with its loss and advantage:

    * `scale_rewards` (`group` / `batch` / `none`) chooses the reward std of the `grpo` advantage (its
      `std_cal_level`); with another advantage function only `group` (the default) is allowed.
    * `multi_objective_aggregation="normalize_then_sum"` (GDPO) normalizes each reward function's rewards within
      the prompt group before the weighted sum, and the `grpo` advantage then divides by the batch std.
    * `top_entropy_quantile` < 1 trains the policy gradient on the highest-entropy tokens only (their advantages;
      the window's token count is unchanged, as in TRL), and the entropy bonus on the same tokens.
    * `off_policy_mask_threshold` drops the negative-advantage sequences whose mean KL to the sampling policy
      exceeds it (DeepSeek-V3.2's off-policy sequence mask).
    * `use_adaptive_entropy` adapts `entropy_coef` once per optimizer step towards `entropy_target`.
    * `use_bias_correction_kl` multiplies the per-token KL by the importance ratio π/π_old.
    * `mask_truncated_completions`, `steps_per_generation` (any value), `num_iterations`, environments and tools
      are TRL's own.

    The TRL fields that configure TRL's own loss (`loss_type`, `epsilon`, `sapo_temperature_neg`, ...) default to
    None here: `trl_ext.GRPOConfig` trains TRL's loss when one is set; the algorithms' configs refuse them.
    """

    #: the algorithm's name (its record): set on the algorithm's config class, which also has the fields of its
    #: loss's and advantage's arguments
    algorithm: ClassVar[str] = ""
    unset_trl_fields: ClassVar[dict[str, Any]] = {name: _GRPO_DEFAULTS[name] for name in _TRL_LOSS_FIELDS}

    beta: float = field(
        default=DocumentedDefault(0.0),
        metadata=_help(
            "KL coefficient β of the KL-to-reference term β·agg(KL(π‖π_ref)) (Trinity-RFT's `kl_coef`; estimator "
            "`kl_loss_fn`). Default 0.0: no KL term and no reference model. With `kl_loss_fn='none'` the term is "
            "off and β is 0; an explicit non-zero β is then an error."
        ),
    )
    loss_type: str | None = _unused_trl_field("loss_type")
    importance_sampling_level: str | None = _unused_trl_field("importance_sampling_level")
    epsilon: float | None = _unused_trl_field("epsilon")
    epsilon_high: float | None = _unused_trl_field("epsilon_high")
    delta: float | None = _unused_trl_field("delta")
    sapo_temperature_pos: float | None = _unused_trl_field("sapo_temperature_pos")
    sapo_temperature_neg: float | None = _unused_trl_field("sapo_temperature_neg")
    vespo_k_pos: float | None = _unused_trl_field("vespo_k_pos")
    vespo_lambda_pos: float | None = _unused_trl_field("vespo_lambda_pos")
    vespo_k_neg: float | None = _unused_trl_field("vespo_k_neg")
    vespo_lambda_neg: float | None = _unused_trl_field("vespo_lambda_neg")
    use_bias_correction_kl: bool | None = field(
        default=None,
        metadata=_help(
            "Multiply each token's KL by the importance ratio π/π_old (differentiable; DeepSeek-V3.2's unbiased "
            "reverse-KL gradient). Default: on with TRL's own loss (TRL's default), off for the algorithms, whose "
            "`kl_loss_fn` chooses the estimator (`corrected_k3` is Trinity-RFT's bias-corrected k3, its weight "
            "clamped at 2)."
        ),
    )

    entropy_loss_fn: str = field(
        default="default",
        metadata=_help(
            "Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with "
            "`loss_agg_mode`; `none` disables it.",
            choices=["default", "none"],
        ),
    )

    def __post_init__(self) -> None:
        # trl_ext's checks first, each field on its own, so that a bad value is reported by its field's name
        # before TRL's own processing of the other fields.
        self._take_trl_defaults()
        if self.uses_trl_loss:
            self._enter_trl_loss_mode()
        if self.use_bias_correction_kl is None:
            self.use_bias_correction_kl = self.uses_trl_loss
        self._check_fields()
        owner = type(self).__name__
        self.beta = resolve_kl_coefficient(owner, self.kl_loss_fn, "beta", self.beta)
        if self.algorithm and self.beta != 0 and not get_algorithm(self.algorithm).use_reference:
            raise ValueError(
                f"{owner}: beta={self.beta!r} adds a KL term to a reference model, but the {self.algorithm} algorithm "
                "trains without one (its record's use_reference=False, as in Trinity-RFT: no reference model is "
                "loaded); leave beta=0, or compose its parts on a config with a reference model (e.g. GRPOConfig)"
            )
        if self.adaptive_kl and self.beta == 0:
            raise ValueError(
                f"{owner}: adaptive_kl=True adapts beta, but beta=0 (kl_loss_fn={self.kl_loss_fn!r}): there is no "
                "KL term to adapt; set beta > 0 with a KL estimator, or adaptive_kl=False"
            )
        if (self.entropy_coef != 0 or self.use_adaptive_entropy) and self.entropy_loss_fn == "none":
            what = f"entropy_coef={self.entropy_coef}" if self.entropy_coef != 0 else "use_adaptive_entropy=True"
            raise ValueError(
                f"{owner}: {what} is set but entropy_loss_fn='none'; set entropy_loss_fn='default' to add the "
                "entropy bonus, or leave the entropy bonus off"
            )
        self._check_scale_rewards()
        if self.algorithm:
            # Build every component once so that a bad argument fails here, naming the config field.
            self.build_policy_loss()
            self.build_advantage_fn()
            self.build_kl_fn()
            self.build_entropy_fn()
        super().__post_init__()
        check_hardware(self)

    def use_toy_task(self) -> None:
        """Called by the training script when it trains the toy model: fill in what the toy task provides for the
        family (nothing here; the distillation family's teacher)."""

    # ---- validation ---------------------------------------------------------------------------------------

    def _check_fields(self) -> None:
        """Check each trl_ext field of the base config on its own (subclasses extend this); the loss and advantage
        arguments are checked by building the loss and the advantage function."""
        owner = type(self).__name__
        check_choice(owner, "kl_loss_fn", self.kl_loss_fn, sorted(KL_FNS))
        check_number(owner, "beta", self.beta, ge=0)
        for spec in config_arguments(KLFn):
            spec.check(owner, getattr(self, spec.field_name), spec.field_name)
        if self.adaptive_kl and (self.target_kl is None or self.kl_horizon is None):
            raise ValueError(
                f"{owner}: adaptive_kl=True needs target_kl and kl_horizon (both > 0); got "
                f"target_kl={self.target_kl!r}, kl_horizon={self.kl_horizon!r}"
            )
        choices = type(self).__dataclass_fields__["entropy_loss_fn"].metadata["choices"]
        check_choice(owner, "entropy_loss_fn", self.entropy_loss_fn, choices)
        check_number(owner, "entropy_coef", self.entropy_coef)

    def _clip_hint(self) -> dict[str, str]:
        names = self.loss_argument_names()
        if "clip_range_low" in names:
            clip = "use `clip_range` / `clip_range_low` / `clip_range_high`"
        else:
            clip = f"the {self.algorithm} loss does not clip with TRL's epsilon; its arguments are: {', '.join(names)}"
        dual = "use `clip_ratio_c` (dual clip)" if "clip_ratio_c" in names else clip
        return {"clip": f"{clip}; {_TRL_LOSS_HINT}", "dual_clip": f"{dual}; {_TRL_LOSS_HINT}", "trl": _TRL_LOSS_HINT}

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
        for spec in config_arguments(POLICY_LOSSES[get_algorithm(self.algorithm).policy_loss_fn]):
            value = getattr(self, spec.field_name)
            if value != spec.default:
                raise ValueError(
                    f"{owner}: {spec.field_name}={value!r} configures trl_ext's {self.algorithm} loss, but {given} "
                    f"selects TRL's own loss, which does not read it; use TRL's fields (loss_type, epsilon, "
                    f"epsilon_high, delta, ...), or drop {given} to train trl_ext's {self.algorithm} loss"
                )
        if is_documented_default(self.kl_loss_fn):
            self.kl_loss_fn = documented_default("k3")
        for spec in config_arguments(ADVANTAGE_FNS[self.advantage_name()]):
            if spec.name == "epsilon" and getattr(self, spec.field_name) == spec.default:  # TRL's ε, in the config
                setattr(self, spec.field_name, TRL_ADVANTAGE_EPSILON)

    def _check_scale_rewards(self) -> None:
        """`scale_rewards` (and GDPO's aggregation) choose the std of an advantage function that has
        `std_cal_level`; with another advantage function only TRL's default is allowed."""
        owner = type(self).__name__
        if isinstance(self.scale_rewards, bool):  # as TRL's config reads True / False
            self.scale_rewards = "group" if self.scale_rewards else "none"
        scale = self.scale_rewards
        check_choice(owner, "scale_rewards", scale, _SCALE_REWARDS)
        check_choice(
            owner,
            "multi_objective_aggregation",
            self.multi_objective_aggregation,
            ("sum_then_normalize", "normalize_then_sum"),
        )
        name = self.advantage_name()
        if name is None or scale == "group":
            return
        if "std_cal_level" not in self.advantage_argument_names():
            raise ValueError(
                f"{owner}: scale_rewards={self.scale_rewards!r} chooses the reward std that GRPO's advantage divides "
                f"by, but the {self.algorithm} algorithm's advantage function `{name}` does not divide by a reward "
                "std; leave scale_rewards='group' (its default)"
            )
        if self.std_cal_level != "group" and self.std_cal_level != scale:
            raise ValueError(
                f"{owner}: scale_rewards={self.scale_rewards!r} and std_cal_level={self.std_cal_level!r} contradict "
                "each other (both choose the std of the advantage); set one of them"
            )

    def _unused_field_error(self, name: str, value: Any, rule: str) -> ValueError:
        hint = _TRL_LOSS_FIELDS[name].format(**self._clip_hint())
        return ValueError(
            f"{type(self).__name__}: {name}={value!r} is a trl.GRPOConfig field that trl_ext's "
            f"{self.algorithm or 'GRPO-family'} trainer does not use ({rule}); {hint}"
        )

    # ---- components ---------------------------------------------------------------------------------------

    @property
    def policy_loss_name(self) -> str:
        """The `trl_ext.losses` name of the policy loss: the algorithm's, or `trl_grpo` (TRL's own losses)."""
        return "trl_grpo" if self.uses_trl_loss else get_algorithm(self.algorithm).policy_loss_fn

    @classmethod
    def advantage_name(cls) -> str | None:
        """The `trl_ext.advantages` name of the advantage function: the algorithm's."""
        return get_algorithm(cls.algorithm).advantage_fn if cls.algorithm else None

    @classmethod
    def loss_argument_names(cls) -> list[str]:
        """The config fields of the policy loss's arguments."""
        if not cls.algorithm:
            return []
        return [
            spec.field_name for spec in config_arguments(POLICY_LOSSES[get_algorithm(cls.algorithm).policy_loss_fn])
        ]

    @classmethod
    def advantage_argument_names(cls) -> list[str]:
        """The config fields of the advantage function's arguments."""
        name = cls.advantage_name()
        return [spec.field_name for spec in config_arguments(ADVANTAGE_FNS[name])] if name else []

    def _named(self, build, what: str, renames: dict[str, str] | None = None):
        return build_named(type(self).__name__, what, build, renames)

    def policy_loss_kwargs(self) -> dict[str, Any]:
        """The policy loss's arguments, from this config's fields (TRL's own fields for TRL's loss)."""
        if self.uses_trl_loss:
            return {name: _plain(getattr(self, name)) for name in _TRL_LOSS_FIELDS}
        return passed_arguments(self, POLICY_LOSSES[self.policy_loss_name])

    def build_policy_loss(self):
        if self.uses_trl_loss:
            return self._named(lambda: TRLGRPOLoss(**self.policy_loss_kwargs()), "TRL's loss")
        name = self.policy_loss_name
        renames = config_renames(POLICY_LOSSES[name])
        return self._named(lambda: get_policy_loss(name, **self.policy_loss_kwargs()), "policy loss", renames)

    def build_advantage_fn(self):
        name = self.advantage_name()
        if name is None:
            return None
        kwargs = passed_arguments(self, ADVANTAGE_FNS[name])
        if "std_cal_level" in kwargs:  # TRL's reward scaling (GDPO's sum of normalized rewards: the batch std)
            scale = "batch" if self.multi_objective_aggregation == "normalize_then_sum" else self.scale_rewards
            kwargs["std_cal_level"] = kwargs["std_cal_level"] if scale == "group" else scale
        renames = config_renames(ADVANTAGE_FNS[name])
        return self._named(lambda: get_advantage_fn(name, **kwargs), "advantage function", renames)

    def build_kl_fn(self):
        name = self.kl_loss_fn if self.beta != 0 else "none"
        kwargs = {"kl_coef": self.beta, **passed_arguments(self, KLFn)}
        return self._named(lambda: get_kl_fn(name, **kwargs), "KL", {"beta": "kl_coef", **config_renames(KLFn)})

    def build_entropy_fn(self):
        return self._named(lambda: get_entropy_fn(self.entropy_loss_fn, entropy_coef=self.entropy_coef), "entropy")

    @property
    def aggregation(self) -> str:
        """The `loss_agg_mode` of the KL term: the policy loss's."""
        if self.uses_trl_loss:
            return trl_loss_aggregation(self.loss_type)
        return getattr(self, "loss_agg_mode", "token-mean")

    @property
    def entropy_aggregation(self) -> str:
        """The `loss_agg_mode` of the entropy bonus: the policy loss's (Trinity-RFT), or TRL's token mean with
        TRL's own loss."""
        return "token-mean" if self.uses_trl_loss else self.aggregation


@dataclass
class MIXFamilyConfig(ExpertDataArguments, GRPOFamilyConfig):
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

    def __post_init__(self) -> None:
        super().__post_init__()
        ratio = self.expert_data_ratio
        rows, group, processes = self.generation_batch_size, self.num_generations, self.world_size
        experts = self.expert_rows_per_generation
        step = math.lcm(group, processes)
        if experts % step == 0 and (experts < rows or ratio == 1):
            return
        why = f"a multiple of num_generations={group}" + (f" and of the {processes} processes" if processes > 1 else "")
        what = (
            f"{type(self).__name__}: expert_data_ratio={ratio} puts ceil({ratio} × {rows}) = {experts} expert "
            f"demonstrations in each generation batch of {rows} rows (generation_batch_size), leaving {rows - experts} "
            f"rollouts"
        )
        fits = list(range(step, rows, step))  # expert counts that leave both kinds of rows
        if not fits:
            raise ValueError(
                f"{what}; a generation batch of {rows} rows cannot hold both kinds: the expert rows must be {why} "
                f"(the rollouts form whole prompt groups, split evenly over processes) and leave room for at least "
                f"one group of rollouts. Raise per_device_train_batch_size or steps_per_generation, or use "
                f"expert_data_ratio=0 or 1"
            )
        below = max((e for e in fits if e <= experts), default=None)
        above = min((e for e in fits if e > experts), default=None)
        options = " or ".join(f"{e / rows:g} ({e} rows)" for e in (below, above) if e is not None)
        if experts % step:
            why = (
                f"the expert rows must be {why}, so that the rollouts form whole prompt groups (split evenly over "
                "processes)"
            )
        else:
            why = "with expert_data_ratio < 1 at least one group of rollouts must remain"
        raise ValueError(f"{what}; {why}. The nearest ratios that fit: {options}")

    @property
    def expert_rows_per_generation(self) -> int:
        """Expert rows in each generation batch, over all processes: ceil(ratio × generation_batch_size), as the
        reference's mix sampler takes ceil(ratio × train_batch_size)."""
        return math.ceil(self.expert_data_ratio * self.generation_batch_size - 1e-9)

    @property
    def reference_weighting(self) -> bool:
        """True when a batch-geometry argument is set: the reference's per-micro-batch weighting instead of the
        window normalization of each part (the loss arguments a config leaves unset by default, `config_unset`)."""
        loss = POLICY_LOSSES[self.policy_loss_name]
        return any(getattr(self, spec.field_name) is not None for spec in loss.arguments if spec.config_unset)


# ---------------------------------------------------------------------------------------------------------------
# Docstrings of the algorithms' configs, and the distillation family
# ---------------------------------------------------------------------------------------------------------------


def document_parameters(cls: type, base: type, closing: str) -> type:
    """Append a TRL-style parameter list of `cls`'s fields that `base` does not have to its docstring, then
    `closing` (where the other parameters come from)."""
    shared = {f.name for f in dataclasses.fields(base)}
    own = [f for f in dataclasses.fields(cls) if f.name not in shared]
    lines = ["", "    Parameters specific to this algorithm:", ""]
    for f in own:
        default = getattr(cls, f.name, f.default)
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        lines.append(f"        {f.name} (`{kind}`, *optional*, defaults to `{default!r}`):")
        lines.append(f"            {f.metadata['help']}")
    lines += ["", f"    {closing}"]
    cls.__doc__ = (cls.__doc__ or "").rstrip() + "\n" + "\n".join(lines) + "\n"
    return cls


@dataclass
class DistillFamilyConfig(TeacherArguments, DistillPolicyLossArguments, GRPOFamilyConfig):
    """Base of the on-policy distillation config: the teacher, the choice of policy loss (`ppo` or
    `importance_sampling`) and the optional task-reward term."""

    _VALID_DICT_FIELDS: ClassVar[list[str]] = [*_TRLGRPOConfig._VALID_DICT_FIELDS, "teacher_model_init_kwargs"]  # JSON

    def _check_fields(self) -> None:
        super()._check_fields()
        owner = type(self).__name__
        check_choice(owner, "policy_loss_fn", self.policy_loss_fn, ("ppo", "importance_sampling"))
        check_choice(owner, "reward_advantage_fn", self.reward_advantage_fn, _REWARD_ADVANTAGE_FNS)
        check_number(owner, "reward_weight", self.reward_weight, ge=0)
        check_text(owner, "teacher_model_name_or_path", self.teacher_model_name_or_path)
        # parsed here (not by TrainingArguments) so that bad JSON is reported with the field's name
        self.teacher_model_init_kwargs = check_kwargs(
            owner, "teacher_model_init_kwargs", self.teacher_model_init_kwargs
        )
        if self.teacher_device is not None:
            check_device(owner, "teacher_device", self.teacher_device)
        if self.policy_loss_fn == "importance_sampling":
            for spec in POLICY_LOSSES["ppo"].arguments:
                value = getattr(self, spec.field_name)
                if spec.name != "loss_agg_mode" and value != spec.default:
                    raise ValueError(
                        f"{owner}: {spec.field_name}={value!r} is an argument of the ppo loss, but "
                        "policy_loss_fn='importance_sampling' (unclipped) does not use it; leave it at its default "
                        f"({spec.default!r}) or use policy_loss_fn='ppo'"
                    )

    @property
    def policy_loss_name(self) -> str:
        return self.policy_loss_fn

    def policy_loss_kwargs(self) -> dict[str, Any]:
        kwargs = passed_arguments(self, POLICY_LOSSES["ppo"])  # the config's loss fields are the ppo loss's
        return kwargs if self.policy_loss_fn == "ppo" else {"loss_agg_mode": self.loss_agg_mode}

    def use_toy_task(self) -> None:
        if self.teacher_model_name_or_path is None:
            from ..toy import tiny_teacher_path

            self.teacher_model_name_or_path = tiny_teacher_path()  # the toy student's teacher

    def build_reward_advantage_fn(self):
        """The advantage of the task-reward term (scaled by `reward_weight` in the trainer)."""
        return get_advantage_fn(self.reward_advantage_fn)
