"""Configs of the GRPO-family trainers: `trl.GRPOConfig` plus the algorithm's loss and advantage arguments.

Each algorithm's config is a `trl.GRPOConfig` subclass assembled from small argument dataclasses (in
`trl_ext.trainers.arguments`, which names them per algorithm in `ALGORITHM_ARGUMENTS`): the policy loss's
`default_args()` (same names and defaults as `trl_ext.losses`), the advantage function's, and the KL / entropy
choices shared by every algorithm. TRL's own fields keep TRL's meaning (`beta` is the KL coefficient,
`entropy_coef` the entropy-bonus coefficient, `num_generations` the group size); a TRL field that selects or
parameterizes TRL's *own* loss (`loss_type`, `epsilon`, `sapo_temperature_neg`, ...) is rejected whenever it is
given, even at TRL's default, with the name of the field to use instead, and a TRL feature switch the trainers do not
implement (`use_liger_kernel`, `scale_rewards`, ...) when it is turned on. Every field is checked on its own at
construction: a bad value is a ValueError naming the config class, the field, the value and what it may be.

Naming rule: a loss argument keeps its `trl_ext.losses` name unless that name is already a `GRPOConfig` field,
in which case it takes the loss's name as prefix (`sppo_epsilon`; all of REC's arguments are `rec_*`, since its
`epsilon_high` collides and `weight` / `temp` are ambiguous in a training config); an advantage argument
keeps its `trl_ext.advantages` name unless it collides with a `GRPOConfig` field or a loss argument, in which
case it takes the prefix `advantage_` (`advantage_epsilon`, `advantage_tau`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from trl import GRPOConfig as _TRLGRPOConfig

from .._validation import check_bool, check_choice, check_number
from ..advantages import get_advantage_fn
from ..algorithms import get_algorithm
from ..losses import get_entropy_fn, get_kl_fn, get_policy_loss
from ..losses.kl import KL_FNS
from .arguments import (
    _REWARD_ADVANTAGE_FNS,
    ALGORITHM_ARGUMENTS,
    AdvantageArguments,
    DocumentedDefault,
    LossArguments,
    PPOLossArguments,
    _help,
    documented_default,
    is_documented_default,
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

# TRL fields that select or parameterize TRL's own loss (or its adaptive entropy), with what to use instead
# (`{clip}`, `{dual_clip}`, `{sequence_mask}`, `{adaptive_entropy}` are filled per algorithm). `GRPOFamilyConfig`
# redeclares them with the default None: setting one is an error even at TRL's default value (`loss_type="dapo"` on a
# SAPOConfig would otherwise read as "DAPO" while the trainer trains SAPO). Once the config is built they hold TRL's
# defaults (marked by `documented_default`), which TRL's own config and trainer code read.
_TRL_LOSS_FIELDS: dict[str, str] = {
    "loss_type": "the trainer class selects the loss; set `loss_agg_mode` for the aggregation",
    "importance_sampling_level": "use `GSPOTrainer` / `GSPOConfig` for the sequence-level ratio",
    "epsilon": "{clip}",
    "epsilon_high": "{clip}",
    "delta": "{dual_clip}",
    "sapo_temperature_pos": "use `SAPOConfig.tau_pos`",
    "sapo_temperature_neg": "use `SAPOConfig.tau_neg`",
    "vespo_k_pos": "VESPO is TRL's own loss: use `trl.GRPOTrainer(loss_type='vespo')`",
    "vespo_lambda_pos": "VESPO is TRL's own loss: use `trl.GRPOTrainer(loss_type='vespo')`",
    "vespo_k_neg": "VESPO is TRL's own loss: use `trl.GRPOTrainer(loss_type='vespo')`",
    "vespo_lambda_neg": "VESPO is TRL's own loss: use `trl.GRPOTrainer(loss_type='vespo')`",
    "entropy_coef_min": "{adaptive_entropy}",
    "entropy_coef_max": "{adaptive_entropy}",
    "entropy_coef_delta": "{adaptive_entropy}",
    "entropy_target": "{adaptive_entropy}",
}
# TRL feature switches whose default turns the feature off: only a non-default value is an error (so that
# `use_liger_kernel: false` in a recipe stays harmless).
_TRL_SWITCH_FIELDS: dict[str, str] = {
    "use_bias_correction_kl": "choose the KL estimator with `kl_loss_fn` (e.g. `'corrected_k3'`)",
    "scale_rewards": "the advantage function normalizes the rewards (see its arguments, e.g. `std_cal_level`)",
    "multi_objective_aggregation": "rewards are summed with `reward_weights`, then passed to the advantage function",
    "top_entropy_quantile": "not supported by trl_ext trainers",
    "use_adaptive_entropy": "use `entropy_loss_fn` with a fixed `entropy_coef`",
    "off_policy_mask_threshold": "{sequence_mask}",
    "use_liger_kernel": "Liger's fused GRPO loss would replace the algorithm's loss; trl_ext uses TRL's fused "
    "log-prob path instead",
}
_UNUSED_TRL_FIELDS: dict[str, str] = {**_TRL_LOSS_FIELDS, **_TRL_SWITCH_FIELDS}
_GENERIC_HINTS = {
    "clip": "clip with the algorithm's own arguments (e.g. `clip_range`)",
    "dual_clip": "the dual clip is `clip_ratio_c` where the loss has one",
    "sequence_mask": "use `enable_sequence_masking` / `delta_sequence_masking` where the loss has them",
    "adaptive_entropy": "TRL's adaptive entropy control is not supported; use a fixed `entropy_coef`",
}


def _unused_trl_field(name: str) -> Any:
    """The redeclaration of TRL loss field `name`: default None, an error when set (see `_TRL_LOSS_FIELDS`)."""
    hint = _TRL_LOSS_FIELDS[name].format(**_GENERIC_HINTS)
    return field(
        default=None,
        metadata=_help(
            f"Not used by trl_ext's GRPO-family trainers: {hint}. It configures TRL's own loss (trl.GRPOConfig's "
            f"default {_GRPO_DEFAULTS[name]!r}); setting it, even to that default, is an error."
        ),
    )


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
    (`_unused_field_error`); once checked, each holds TRL's default for TRL's own code, marked as not given
    (`documented_default`, so a copy made from the config's values is accepted), and `to_dict` leaves them out
    (the dict logged to trackers and written in model cards re-loads)."""

    unset_trl_fields: ClassVar[dict[str, Any]] = {}

    def _unused_field_error(self, name: str, value: Any, rule: str) -> ValueError:
        raise NotImplementedError

    def _take_trl_defaults(self) -> None:
        for name, default in self.unset_trl_fields.items():
            value = getattr(self, name)
            if value is not None and not is_documented_default(value):
                rule = f"it configures TRL's own loss: leave it unset, even at TRL's default {default!r}"
                raise self._unused_field_error(name, value, rule)
            setattr(self, name, documented_default(default))

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        for name in self.unset_trl_fields:
            d.pop(name, None)
        return d


@dataclass
class GRPOFamilyConfig(UnsetTRLFields, _TRLGRPOConfig):
    r"""
    Base configuration of the trl_ext GRPO-family trainers: every `trl.GRPOConfig` field, plus the KL and entropy
    choices shared by all algorithms. Use an algorithm's subclass (`SAPOConfig`, `GSPOConfig`, ...), which adds
    its loss and advantage arguments.

    TRL fields keep TRL's meaning: `beta` is the KL coefficient (Trinity-RFT's `kl_coef`; 0 creates no
    reference model), `entropy_coef` the entropy-bonus coefficient, `num_generations` the group size. The TRL
    fields that configure TRL's own loss (`loss_type`, `epsilon`, `sapo_temperature_neg`, ...) default to None
    here and are errors when set: the algorithm's own fields replace them.
    """

    #: the algorithm's name; a subclass gets its loss and advantage arguments by also subclassing one
    #: `LossArguments` and one `AdvantageArguments` dataclass
    algorithm: ClassVar[str] = ""
    unset_trl_fields: ClassVar[dict[str, Any]] = {name: _GRPO_DEFAULTS[name] for name in _TRL_LOSS_FIELDS}
    loss_renames: ClassVar[dict[str, str]] = {}
    advantage_fn: ClassVar[str | None] = None
    advantage_renames: ClassVar[dict[str, str]] = {}

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
    entropy_coef_min: float | None = _unused_trl_field("entropy_coef_min")
    entropy_coef_max: float | None = _unused_trl_field("entropy_coef_max")
    entropy_coef_delta: float | None = _unused_trl_field("entropy_coef_delta")
    entropy_target: float | None = _unused_trl_field("entropy_target")

    kl_loss_fn: str = field(
        default="k2",
        metadata=_help(
            "KL estimator of the KL loss term `beta`·agg(KL(π‖π_ref)), aggregated with "
            "`loss_agg_mode`: `k1`, `k2` (½(log r)², Trinity's GRPO default), `k3` (TRL's), "
            "`low_var_kl`, `abs`, `corrected_k3`, or `none` (no KL term: `beta` becomes 0). Only used when "
            "`beta` > 0.",
            choices=sorted(KL_FNS),
        ),
    )
    adaptive_kl: bool = field(
        default=False,
        metadata=_help(
            "Adapt `beta` (> 0) after every optimizer step with the adaptive KL controller (Ziegler et al. "
            "2019): β ← β·(1 + clip(KL/target_kl − 1, ±0.2)·sequences/kl_horizon). Needs `target_kl` and "
            "`kl_horizon`."
        ),
    )
    target_kl: float | None = field(default=None, metadata=_help("Target KL (> 0) of `adaptive_kl`."))
    kl_horizon: int | None = field(
        default=None, metadata=_help("Horizon (in sequences, an integer > 0) of `adaptive_kl`.")
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
        self._check_fields()
        owner = type(self).__name__
        self.beta = resolve_kl_coefficient(owner, self.kl_loss_fn, "beta", self.beta)
        if self.adaptive_kl and self.beta == 0:
            raise ValueError(
                f"{owner}: adaptive_kl=True adapts beta, but beta=0 (kl_loss_fn={self.kl_loss_fn!r}): there is no "
                "KL term to adapt; set beta > 0 with a KL estimator, or adaptive_kl=False"
            )
        if self.entropy_coef != 0 and self.entropy_loss_fn == "none":
            raise ValueError(
                f"{owner}: entropy_coef={self.entropy_coef} is set but entropy_loss_fn='none'; set "
                "entropy_loss_fn='default' to add the entropy bonus, or entropy_coef=0"
            )
        if self.algorithm:
            # Build every component once so that a bad argument fails here, naming the config field.
            self.build_policy_loss()
            self.build_advantage_fn()
            self.build_kl_fn()
            self.build_entropy_fn()
        super().__post_init__()
        check_hardware(self)
        self._check_trl_switch_fields()
        if self.steps_per_generation % self.gradient_accumulation_steps:
            raise ValueError(
                f"{owner}: steps_per_generation={self.steps_per_generation} must be a multiple of "
                f"gradient_accumulation_steps={self.gradient_accumulation_steps}, so that every optimizer window "
                "lies within one generation batch and its token count is known when the window starts "
                "(set steps_per_generation or generation_batch_size accordingly)"
            )

    # ---- validation ---------------------------------------------------------------------------------------

    def _check_fields(self) -> None:
        """Check each trl_ext field of the base config on its own (subclasses extend this); the loss and advantage
        arguments are checked by building the loss and the advantage function."""
        owner = type(self).__name__
        check_choice(owner, "kl_loss_fn", self.kl_loss_fn, sorted(KL_FNS))
        check_number(owner, "beta", self.beta, ge=0)
        check_bool(owner, "adaptive_kl", self.adaptive_kl)
        check_number(owner, "target_kl", self.target_kl, gt=0, allow_none=True)
        check_number(owner, "kl_horizon", self.kl_horizon, gt=0, integer=True, allow_none=True)
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
        seq = (
            "use `enable_sequence_masking` / `delta_sequence_masking`"
            if "enable_sequence_masking" in names
            else f"not supported by the {self.algorithm} loss"
        )
        entropy = "TRL's adaptive entropy control is not supported; use `entropy_loss_fn` with a fixed `entropy_coef`"
        return {"clip": clip, "dual_clip": dual, "sequence_mask": seq, "adaptive_entropy": entropy}

    def _unused_field_error(self, name: str, value: Any, rule: str) -> ValueError:
        hint = _UNUSED_TRL_FIELDS[name].format(**self._clip_hint())
        return ValueError(
            f"{type(self).__name__}: {name}={value!r} is a trl.GRPOConfig field that trl_ext's "
            f"{self.algorithm or 'GRPO-family'} trainer does not use ({rule}); {hint}"
        )

    def _check_trl_switch_fields(self) -> None:
        for name in _TRL_SWITCH_FIELDS:
            value, default = getattr(self, name), _GRPO_DEFAULTS[name]
            # compared after GRPOConfig.__post_init__, which maps scale_rewards=True to "group"
            if not (value == default and isinstance(value, bool) == isinstance(default, bool)):
                raise self._unused_field_error(name, value, f"allowed: only TRL's default {default!r}")

    # ---- components ---------------------------------------------------------------------------------------

    @classmethod
    def arguments_of(cls, part: type) -> type | None:
        """The `LossArguments` or `AdvantageArguments` dataclass (`part`) this config is assembled from."""
        bases = (b for b in cls.__mro__ if issubclass(b, part) and not issubclass(b, GRPOFamilyConfig))
        return next((b for b in bases if b is not part), None)

    @classmethod
    def loss_argument_names(cls) -> list[str]:
        part = cls.arguments_of(LossArguments)
        return [f.name for f in dataclasses.fields(part)] if part else []

    @classmethod
    def advantage_argument_names(cls) -> list[str]:
        part = cls.arguments_of(AdvantageArguments)
        return [f.name for f in dataclasses.fields(part)] if part else []

    def _kwargs(self, names: list[str], renames: dict[str, str]) -> dict[str, Any]:
        return {renames.get(name, name): getattr(self, name) for name in names}

    def _named(self, build, what: str, renames: dict[str, str] | None = None):
        return build_named(type(self).__name__, what, build, renames)

    def policy_loss_kwargs(self) -> dict[str, Any]:
        return self._kwargs(self.loss_argument_names(), self.loss_renames)

    @property
    def policy_loss_name(self) -> str:
        """The `trl_ext.losses` name of the policy loss: the algorithm's."""
        return get_algorithm(self.algorithm).policy_loss_fn

    def build_policy_loss(self):
        name = self.policy_loss_name
        return self._named(lambda: get_policy_loss(name, **self.policy_loss_kwargs()), "policy loss", self.loss_renames)

    def build_advantage_fn(self):
        if self.advantage_fn is None:
            return None
        kwargs = self._kwargs(self.advantage_argument_names(), self.advantage_renames)
        return self._named(
            lambda: get_advantage_fn(self.advantage_fn, **kwargs), "advantage function", self.advantage_renames
        )

    def build_kl_fn(self):
        return self._named(
            lambda: get_kl_fn(
                self.kl_loss_fn if self.beta != 0 else "none",
                kl_coef=self.beta,
                adaptive=self.adaptive_kl,
                target_kl=self.target_kl,
                horizon=self.kl_horizon,
            ),
            "KL",
            {"beta": "kl_coef", "adaptive_kl": "adaptive", "kl_horizon": "horizon"},
        )

    def build_entropy_fn(self):
        return self._named(lambda: get_entropy_fn(self.entropy_loss_fn, entropy_coef=self.entropy_coef), "entropy")

    @property
    def aggregation(self) -> str:
        """The `loss_agg_mode` of the KL and entropy terms: the policy loss's."""
        return getattr(self, "loss_agg_mode", "token-mean")


class MIXFamilyConfig(GRPOFamilyConfig):
    """Base of the MIX / MIX-CHORD configs: the share of expert demonstrations in each generation batch.

    (A plain class on purpose: the dataclass fields come from `_ExpertDataArguments`, which the concrete configs
    list before `GRPOFamilyConfig` so that the field overrides take effect.)
    """

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
        window normalization of each part."""
        return any(getattr(self, name) is not None for name in self.geometry_fields)

    def policy_loss_kwargs(self) -> dict[str, Any]:
        kwargs = super().policy_loss_kwargs()
        return {k: v for k, v in kwargs.items() if not (k in self.geometry_fields and v is None)}


# ---------------------------------------------------------------------------------------------------------------
# Per-algorithm configs
# ---------------------------------------------------------------------------------------------------------------


def _document(cls: type[GRPOFamilyConfig]) -> type[GRPOFamilyConfig]:
    """Append a TRL-style parameter list of the algorithm's own fields to the class docstring."""
    shared = {f.name for f in dataclasses.fields(GRPOFamilyConfig)}
    own = [f for f in dataclasses.fields(cls) if f.name not in shared]
    lines = ["", "    Parameters specific to this algorithm:", ""]
    for f in own:
        default = getattr(cls, f.name, f.default)
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        lines.append(f"        {f.name} (`{kind}`, *optional*, defaults to `{default!r}`):")
        lines.append(f"            {f.metadata['help']}")
    lines += ["", "    Every other parameter is `trl.GRPOConfig`'s, plus `GRPOFamilyConfig`'s KL / entropy fields."]
    cls.__doc__ = (cls.__doc__ or "").rstrip() + "\n" + "\n".join(lines) + "\n"
    return cls


@_document
@dataclass
class GRPOConfig(*ALGORITHM_ARGUMENTS["grpo"], GRPOFamilyConfig):
    r"""
    Configuration of [`GRPOTrainer`]: GRPO (Shao et al. 2024, "DeepSeekMath", arXiv 2402.03300) with Trinity-RFT's
    dual-clip PPO loss and group-normalized advantages. `loss_agg_mode="token-mean"` is TRL's default `dapo`
    aggregation; `"seq-mean-token-mean"` is the paper's (TRL's `loss_type="grpo"`).
    """

    algorithm: ClassVar[str] = "grpo"


@_document
@dataclass
class RLOOConfig(*ALGORITHM_ARGUMENTS["rloo"], GRPOFamilyConfig):
    r"""
    Configuration of [`RLOOTrainer`]: REINFORCE Leave-One-Out (Ahmadian et al. 2024, "Back to Basics", arXiv
    2402.14740): the baseline of a completion is the mean reward of the other completions of its prompt; the
    update uses the dual-clip PPO loss.
    """

    algorithm: ClassVar[str] = "rloo"


@_document
@dataclass
class ReinforcePlusPlusConfig(*ALGORITHM_ARGUMENTS["reinforceplusplus"], GRPOFamilyConfig):
    r"""
    Configuration of [`ReinforcePlusPlusTrainer`]: REINFORCE++ (Hu 2025, arXiv 2501.03262): discounted token-level
    returns of the outcome reward, whitened over the batch's tokens (no group baseline), with the dual-clip PPO
    loss.
    """

    algorithm: ClassVar[str] = "reinforceplusplus"


@_document
@dataclass
class GSPOConfig(*ALGORITHM_ARGUMENTS["gspo"], GRPOFamilyConfig):
    r"""
    Configuration of [`GSPOTrainer`]: Group Sequence Policy Optimization (Zheng et al. 2025, arXiv 2507.18071),
    GSPO-token form: the importance ratio is the length-normalized sequence ratio exp(mean_t log r_t), with a
    per-token gradient path so token-level advantages work. TRL's equivalent is `loss_type="grpo",
    importance_sampling_level="sequence"`.
    """

    algorithm: ClassVar[str] = "gspo"


@_document
@dataclass
class CISPOConfig(*ALGORITHM_ARGUMENTS["cispo"], GRPOFamilyConfig):
    r"""
    Configuration of [`CISPOTrainer`]: CISPO (MiniMax-M1, arXiv 2506.13585): REINFORCE with a clipped,
    stop-gradient importance weight, so clipped tokens still get a gradient. TRL's equivalent is
    `loss_type="cispo", epsilon_high=1 + clip_range_high`.
    """

    algorithm: ClassVar[str] = "cispo"


@_document
@dataclass
class SAPOConfig(*ALGORITHM_ARGUMENTS["sapo"], GRPOFamilyConfig):
    r"""
    Configuration of [`SAPOTrainer`]: Soft Adaptive Policy Optimization (Gao et al. 2025, arXiv 2511.20347): a
    smooth, temperature-controlled gate σ(τ(r − 1))·4/τ replaces the hard clip, with a faster decay for negative
    advantages. TRL's equivalent is `loss_type="sapo"` with `loss_agg_mode="seq-mean-token-mean"`.
    """

    algorithm: ClassVar[str] = "sapo"


@_document
@dataclass
class TOPRConfig(*ALGORITHM_ARGUMENTS["topr"], GRPOFamilyConfig):
    r"""
    Configuration of [`TOPRTrainer`]: Tapered Off-Policy REINFORCE (Le Roux et al. 2025, arXiv 2503.14286): full
    REINFORCE gradient on positive samples, ratio-truncated gradient on negative ones; the advantage is the raw
    reward (no baseline), as in the paper.
    """

    algorithm: ClassVar[str] = "topr"


@_document
@dataclass
class SPPOConfig(*ALGORITHM_ARGUMENTS["sppo"], GRPOFamilyConfig):
    r"""
    Configuration of [`SPPOTrainer`]: sPPO (arXiv 2108.05828): the policy gradient −A·log r restricted to the
    tokens inside the trust region 1/(1+ε) ≤ r ≤ 1+ε, with group-normalized advantages.
    """

    algorithm: ClassVar[str] = "sppo"


@_document
@dataclass
class RECConfig(*ALGORITHM_ARGUMENTS["rec"], GRPOFamilyConfig):
    r"""
    Configuration of [`RECTrainer`]: REC (Yao et al. 2025, "Group-Relative REINFORCE Is Secretly an Off-Policy
    Algorithm", arXiv 2509.24203): REINFORCE with group-centred rewards and a choice of off-policy clipping
    (`rec_clip_mode`), reweighting (`rec_weight`) and regularization (`rec_regularizer`).
    """

    algorithm: ClassVar[str] = "rec"


@_document
@dataclass
class OPMDConfig(*ALGORITHM_ARGUMENTS["opmd"], GRPOFamilyConfig):
    r"""
    Configuration of [`OPMDTrainer`]: online policy mirror descent (Trinity-RFT; Kimi k1.5, arXiv 2501.12599):
    the group baseline is the mean reward or a soft-max (`logavgexp`) of it, and the loss −A·lp is scaled by
    1/(1 + τ).
    """

    algorithm: ClassVar[str] = "opmd"


@_document
@dataclass
class AsymREConfig(*ALGORITHM_ARGUMENTS["asymre"], GRPOFamilyConfig):
    r"""
    Configuration of [`AsymRETrainer`]: Asymmetric REINFORCE (Arnal et al. 2025, arXiv 2506.20520): REINFORCE
    with the group mean shifted by `baseline_shift` as baseline (Trinity-RFT trains it with the OPMD loss).
    """

    algorithm: ClassVar[str] = "asymre"


@_document
@dataclass
class RAFTConfig(*ALGORITHM_ARGUMENTS["raft"], GRPOFamilyConfig):
    r"""
    Configuration of [`RAFTTrainer`]: Reward rAnked FineTuning (Dong et al. 2023, arXiv 2304.06767): generate
    `num_generations` completions per prompt, keep the best-rewarded one of each group, and train the SFT loss
    on the kept completions only.
    """

    algorithm: ClassVar[str] = "raft"


@_document
@dataclass
class MIXConfig(*ALGORITHM_ARGUMENTS["mix"], MIXFamilyConfig):
    r"""
    Configuration of [`MIXTrainer`]: RL on rollouts mixed with SFT on expert demonstrations in the same batch
    (Trinity-RFT's MIX, the fixed-μ form of CHORD, arXiv 2508.11408). A share `expert_data_ratio` of each
    generation batch is expert rows from the trainer's `expert_dataset`; the loss is (1 − μ)·PPO on the rollouts
    (group-normalized advantages) + μ·SFT on the expert rows, each part normalized over its own rows.
    """

    algorithm: ClassVar[str] = "mix"


@_document
@dataclass
class MIXCHORDConfig(*ALGORITHM_ARGUMENTS["mix_chord"], MIXFamilyConfig):
    r"""
    Configuration of [`MIXCHORDTrainer`]: CHORD (Zhang et al. 2025, "On-Policy RL Meets Off-Policy Experts", arXiv
    2508.11408): as MIX, with μ following the global step (linear warm-up to `mu_peak`, cosine decay to
    `mu_valley`) and CHORD-φ token weights on the expert NLL. The paper's recipe (Trinity-RFT's
    `examples/mix_chord`): `mu_warmup_steps=200, mu_decay_steps=400, mu_peak=0.5, mu_valley=0.02`.
    """

    algorithm: ClassVar[str] = "mix_chord"


@_document
@dataclass
class OnPolicyDistillConfig(*ALGORITHM_ARGUMENTS["on_policy_distill"], GRPOFamilyConfig):
    r"""
    Configuration of [`OnPolicyDistillTrainer`]: on-policy distillation (Agarwal et al. 2024, arXiv 2306.13649;
    Thinking Machines, "On-Policy Distillation", 2025; Trinity-RFT's `on_policy_distill`). The student samples, a
    frozen teacher scores the sampled tokens, and the per-token advantage is `kl_coef`·(log π_teacher − log π_old)
    (+ `reward_weight`·Â with task rewards), trained with the `ppo` (default) or `importance_sampling` loss.
    """

    algorithm: ClassVar[str] = "on_policy_distill"
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
            for f in dataclasses.fields(PPOLossArguments):
                if f.name != "loss_agg_mode" and getattr(self, f.name) != f.default:
                    raise ValueError(
                        f"{owner}: {f.name}={getattr(self, f.name)!r} is an argument of the ppo loss, but "
                        "policy_loss_fn='importance_sampling' (unclipped) does not use it; leave it at its default "
                        f"({f.default!r}) or use policy_loss_fn='ppo'"
                    )

    @property
    def policy_loss_name(self) -> str:
        return self.policy_loss_fn

    def policy_loss_kwargs(self) -> dict[str, Any]:
        kwargs = super().policy_loss_kwargs()
        del kwargs["policy_loss_fn"]
        return kwargs if self.policy_loss_fn == "ppo" else {"loss_agg_mode": kwargs["loss_agg_mode"]}

    def build_reward_advantage_fn(self):
        """The advantage of the task-reward term (scaled by `reward_weight` in the trainer)."""
        return get_advantage_fn(self.reward_advantage_fn)


GRPO_FAMILY_CONFIGS: dict[str, type[GRPOFamilyConfig]] = {
    c.algorithm: c
    for c in (
        GRPOConfig, GSPOConfig, CISPOConfig, SAPOConfig, TOPRConfig, SPPOConfig, RECConfig, OPMDConfig,
        AsymREConfig, ReinforcePlusPlusConfig, RLOOConfig, RAFTConfig,
    )
}  # fmt: skip
MIX_CONFIGS: dict[str, type[MIXFamilyConfig]] = {c.algorithm: c for c in (MIXConfig, MIXCHORDConfig)}
TRAINER_CONFIGS: dict[str, type[GRPOFamilyConfig]] = {
    **GRPO_FAMILY_CONFIGS,
    **MIX_CONFIGS,
    OnPolicyDistillConfig.algorithm: OnPolicyDistillConfig,
}
"""Every GRPO-family config by algorithm name (the plain ones, MIX / MIX-CHORD, on-policy distillation)."""
