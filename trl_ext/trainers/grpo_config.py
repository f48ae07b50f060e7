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

from .._validation import check_bool, check_choice, check_number, required_inputs
from ..advantages import ADVANTAGE_FNS, get_advantage_fn
from ..algorithms import get_algorithm
from ..families import input_source
from ..losses import POLICY_LOSSES, get_entropy_fn, get_kl_fn, get_policy_loss
from ..losses.kl import KL_FNS, KLFn
from ..losses.mix import MIXPolicyLoss
from ..losses.trl_grpo import TRLGRPOLoss
from ..losses.trl_grpo import aggregation as trl_loss_aggregation
from ..losses.value import check_cliprange_value
from ..rollout_correction import RolloutCorrection
from .arguments import (
    _REWARD_ADVANTAGE_FNS,
    GRPO_KL_ARGUMENTS,
    CompositionArguments,
    CriticArguments,
    DocumentedDefault,
    ExpertDataArguments,
    TeacherArguments,
    _help,
    config_arguments,
    config_renames,
    documented_default,
    is_documented_default,
    passed_arguments,
    set_arguments,
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
# TRL's own vLLM importance-sampling correction, which `rollout_is` replaces (`_check_rollout_correction`).
_TRL_IS_FIELDS = (
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_max",
    "vllm_importance_sampling_clip_min",
    "vllm_importance_sampling_cap",
)
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


_REGISTRIES = {"policy_loss_fn": POLICY_LOSSES, "advantage_fn": ADVANTAGE_FNS}
KL_PENALTY_DEFAULTS: dict[str, Any] = {"adaptive": False, "kl_coef": 0.001}
"""The reference's `kl_penalty_fn_args` when none are given (Trinity-RFT's `KLFn.default_args()`)."""

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
class GRPOFamilyConfig(UnsetTRLFields, CompositionArguments, GRPO_KL_ARGUMENTS, _TRLGRPOConfig):
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
    _VALID_DICT_FIELDS: ClassVar[list[str]] = [  # JSON objects on the command line
        *_TRLGRPOConfig._VALID_DICT_FIELDS,
        "policy_loss_fn_args",
        "advantage_fn_args",
        "kl_penalty_fn_args",
    ]
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

    turns_as_samples: bool = field(
        default=False,
        metadata=_help(
            "Multi-turn rollouts (tools, environment_factory): each model turn counts as one sample of the "
            "`seq-mean-*` loss aggregations (its tokens' mean, then the mean over the window's turns), as the "
            "reference's one experience per model call; default False: each completion is one sample. A "
            "`token-mean` aggregation weighs every token once either way, so the option needs a `seq-mean-*` "
            "`loss_agg_mode`."
        ),
    )

    # verl 0.9's rollout correction (`trl_ext.rollout_correction`): the same names and values as verl's
    # `algorithm.rollout_correction`; π_old is the trained policy at generation time, π_rollout the sampler (vLLM).
    rollout_is: str | None = field(
        default=None,
        metadata=_help(
            "verl's rollout correction, importance sampling: multiply each token's policy loss by w = π_old/π_rollout "
            "(the trained policy's probability over the sampler's), per `token` or per `sequence` (the product over "
            "the row), bounded by `rollout_is_threshold`; None (default): no weights. Needs `use_vllm=True` (the "
            "sampler's log-probs). It replaces TRL's vLLM correction: `vllm_importance_sampling_correction` is turned "
            "off (setting TRL's mode or clip bounds as well is an error), so no token is weighted twice."
        ),
    )
    rollout_is_threshold: float | str | None = field(
        default=2.0,
        metadata=_help(
            "Bound of the `rollout_is` weights: a number U truncates them at U (TIS; verl's default 2.0); a string "
            "'L_U' (e.g. '0.5_5.0') sets the weights outside [L, U] to 0 (IcePop)."
        ),
    )
    rollout_is_batch_normalize: bool = field(
        default=False,
        metadata=_help(
            "Divide the `rollout_is` weights by their mean over the generation batch (all processes): over the valid "
            "tokens for `token`, over the sequences for `sequence`."
        ),
    )
    rollout_rs: str | None = field(
        default=None,
        metadata=_help(
            "verl's rollout correction, rejection: leave out of the loss (and of the window's token count) the tokens "
            "or whole sequences whose divergence between π_old and π_rollout passes `rollout_rs_threshold`. One of "
            "token_k1, token_k2, token_k3, seq_sum_k1, seq_sum_k2, seq_sum_k3, seq_mean_k1, seq_mean_k2, seq_mean_k3, "
            "seq_max_k2, seq_max_k3, or a comma-separated list (all must pass); per token, with ℓ = "
            "log(π_old/π_rollout), k1 = −ℓ, k2 = ½ℓ², k3 = e^ℓ − 1 − ℓ, judged per token (`token_*`) or by the row's "
            "sum / mean / max (`seq_*`, rejecting the row). None (default): no rejection. Needs `use_vllm=True`; "
            "composes with either importance-sampling correction (`rollout_is` or TRL's)."
        ),
    )
    rollout_rs_threshold: float | str | None = field(
        default=None,
        metadata=_help(
            "Thresholds of `rollout_rs`, one per criterion (comma-separated) or one for all: for k1 'L_U' keeps "
            "π_rollout/π_old in [L, U] (a single U means [1/U, U]); for k2 / k3 an upper bound U > 0. Required with "
            "`rollout_rs`."
        ),
    )

    def __post_init__(self) -> None:
        # trl_ext's checks first, each field on its own, so that a bad value is reported by its field's name
        # before TRL's own processing of the other fields.
        self._take_trl_defaults()
        if self.algorithm:
            self._check_composition_fields()
        if self.uses_trl_loss:
            self._enter_trl_loss_mode()
        if self.use_bias_correction_kl is None:
            self.use_bias_correction_kl = self.uses_trl_loss
        self._check_fields()
        self._check_rollout_correction()
        owner = type(self).__name__
        self.beta = resolve_kl_coefficient(owner, self.kl_loss_fn, "beta", self.beta)
        if self.algorithm and not get_algorithm(self.algorithm).use_reference:
            for name, value, off in (("beta", self.beta, 0), ("kl_penalty_fn", self.kl_penalty_fn, "none")):
                if value != off:
                    raise ValueError(
                        f"{owner}: {name}={value!r} adds a KL term to a reference model, but the {self.algorithm} "
                        "algorithm trains without one (its record's use_reference=False, as in Trinity-RFT: no "
                        f"reference model is loaded); leave {name}={off!r}"
                        + (
                            f", or compose its parts on a config with a reference model (e.g. GRPOConfig("
                            f"policy_loss_fn={self.policy_loss_name!r}, advantage_fn={self.advantage_fn_name!r}))"
                            if get_algorithm(self.algorithm).trainer == "grpo"
                            else ""
                        )
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
            self.build_kl_penalty_fn()
            self._check_pairing()
            if self.turns_as_samples and not self.aggregation.startswith("seq-mean"):
                raise ValueError(
                    f"{owner}: turns_as_samples=True changes only the seq-mean-* aggregations, but loss_agg_mode is "
                    f"{self.aggregation!r} (every token weighs the same, turn or completion); choose a seq-mean-* "
                    "loss_agg_mode or leave turns_as_samples=False"
                )
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
        check_bool(owner, "turns_as_samples", self.turns_as_samples)
        if self.turns_as_samples and self.algorithm:
            family = get_algorithm(self.algorithm).trainer
            if family != "grpo":
                raise ValueError(
                    f"{owner}: turns_as_samples=True trains each model turn as a sample of its own, which the {family} "
                    "family's trainer does not do (its batches hold expert or teacher-scored rows); use a grpo-family "
                    "config (GRPOConfig, MultiStepGRPOConfig, GiGPOConfig, ...)"
                )

    def build_rollout_correction(self) -> RolloutCorrection:
        """verl's rollout correction from the `rollout_*` fields (each checked: an error names its field)."""
        return RolloutCorrection(
            self.rollout_is,
            self.rollout_is_threshold,
            self.rollout_is_batch_normalize,
            self.rollout_rs,
            self.rollout_rs_threshold,
            owner=type(self).__name__,
        )

    def _check_rollout_correction(self) -> None:
        """The rollout correction reads the sampler's log-probs (vLLM's), and `rollout_is` replaces TRL's own vLLM
        correction: `vllm_importance_sampling_correction` is turned off, so that no token is weighted twice."""
        owner = type(self).__name__
        correction = self.build_rollout_correction()
        if not correction.enabled:
            return
        name = "rollout_is" if self.rollout_is is not None else "rollout_rs"
        if not self.use_vllm:
            raise ValueError(
                f"{owner}: {name}={getattr(self, name)!r} corrects for the difference between the policy that sampled "
                "the completions and the trained one, measured with the sampler's per-token log-probs, which TRL has "
                f"only from vLLM generation; set use_vllm=True or leave {name} unset"
            )
        if self.turns_as_samples and any(option.startswith("token_") for option in correction.rs_bounds):
            raise ValueError(
                f"{owner}: rollout_rs={self.rollout_rs!r} rejects single tokens, which would split the model turns "
                "that turns_as_samples=True trains as samples; use sequence criteria (seq_*) or turns_as_samples=False"
            )
        if self.rollout_is is None:
            return  # rejection composes with TRL's weights
        if self.rollout_is == "sequence" and self.uses_trl_loss and self.loss_type == "vespo":
            raise ValueError(
                f"{owner}: rollout_is='sequence' gives one weight per sequence, but loss_type='vespo' folds a "
                "per-token correction into its sequence weight (TRL allows it only token-level modes); use "
                "rollout_is='token'"
            )
        for field_name in _TRL_IS_FIELDS:
            value = getattr(self, field_name)
            if value != _GRPO_DEFAULTS[field_name]:
                raise ValueError(
                    f"{owner}: {field_name}={value!r} configures TRL's vLLM importance-sampling correction, which "
                    f"rollout_is={self.rollout_is!r} replaces by verl's (a token would otherwise be weighted twice); "
                    f"configure one of them: verl's with rollout_is / rollout_is_threshold, or TRL's without rollout_is"
                )
        self.vllm_importance_sampling_correction = False

    def _check_composition_fields(self) -> None:
        """`policy_loss_fn` / `advantage_fn` name registered components, the `*_args` fields are dicts (parsed from
        JSON on the command line), `kl_penalty_fn` is an estimator: each field on its own."""
        owner = type(self).__name__
        for kind, registry in _REGISTRIES.items():
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
        family = get_algorithm(self.algorithm).family
        loss = self.build_policy_loss()
        needed = required_inputs(loss)
        if getattr(loss, "rollout_loss", None) is not None:  # MIX with another rollout loss: what that one needs too
            needed += required_inputs(loss.rollout_loss)
        parts = [("policy_loss_fn", self.policy_loss_name, needed, family.loss_inputs)]
        advantage = self.build_advantage_fn()
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
        name = self.advantage_fn_name
        if name is None or scale == "group":
            return
        if "std_cal_level" not in {a.name for a in ADVANTAGE_FNS[name].arguments}:
            raise ValueError(
                f"{owner}: scale_rewards={self.scale_rewards!r} chooses the reward std that GRPO's advantage divides "
                f"by, but the advantage function `{name}` does not divide by a reward std; leave "
                "scale_rewards='group' (its default)"
            )
        std_cal_level = self.composed_kwargs("advantage_fn").get("std_cal_level", "group")
        if std_cal_level != "group" and std_cal_level != scale:
            raise ValueError(
                f"{owner}: scale_rewards={self.scale_rewards!r} and std_cal_level={std_cal_level!r} contradict "
                "each other (both choose the std of the advantage); set one of them"
            )

    def _unused_field_error(self, name: str, value: Any, rule: str) -> ValueError:
        hint = _TRL_LOSS_FIELDS[name].format(**self._clip_hint())
        return ValueError(
            f"{type(self).__name__}: {name}={value!r} is a trl.GRPOConfig field that trl_ext's "
            f"{self.algorithm or 'GRPO-family'} trainer does not use ({rule}); {hint}"
        )

    # ---- components: the algorithm's, or composed (`policy_loss_fn` / `advantage_fn` + their `*_args`) ---------

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
        owner, registry = type(self).__name__, _REGISTRIES[kind]
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
            return {name: _plain(getattr(self, name)) for name in _TRL_LOSS_FIELDS}
        return self.composed_kwargs("policy_loss_fn")

    def build_policy_loss(self):
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

    def build_advantage_fn(self):
        name = self.advantage_fn_name
        if name is None:
            return None
        renames = config_renames(ADVANTAGE_FNS[name]) if name == self.advantage_name() else {}
        kwargs = self.advantage_kwargs()
        return self._named(lambda: get_advantage_fn(name, **kwargs), "advantage function", renames)

    def build_kl_fn(self):
        name = self.kl_loss_fn if self.beta != 0 else "none"
        kwargs = {"kl_coef": self.beta, **passed_arguments(self, KLFn)}
        return self._named(lambda: get_kl_fn(name, **kwargs), "KL", {"beta": "kl_coef", **config_renames(KLFn)})

    def build_kl_penalty_fn(self):
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

    def build_entropy_fn(self):
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

    @property
    def aggregation(self) -> str:
        """The `loss_agg_mode` of the KL term: the policy loss's."""
        if self.uses_trl_loss:
            return trl_loss_aggregation(self.loss_type)
        return getattr(self.build_policy_loss(), "loss_agg_mode", "token-mean")

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
class DistillFamilyConfig(TeacherArguments, GRPOFamilyConfig):
    """Base of the on-policy distillation config: the teacher and the optional task-reward term (its policy loss is
    `ppo` by default, `importance_sampling` is Tinker's; any loss composes)."""

    _VALID_DICT_FIELDS: ClassVar[list[str]] = [*GRPOFamilyConfig._VALID_DICT_FIELDS, "teacher_model_init_kwargs"]

    def _check_fields(self) -> None:
        super()._check_fields()
        owner = type(self).__name__
        check_choice(owner, "reward_advantage_fn", self.reward_advantage_fn, _REWARD_ADVANTAGE_FNS)
        check_number(owner, "reward_weight", self.reward_weight, ge=0)
        check_text(owner, "teacher_model_name_or_path", self.teacher_model_name_or_path)
        # parsed here (not by TrainingArguments) so that bad JSON is reported with the field's name
        self.teacher_model_init_kwargs = check_kwargs(
            owner, "teacher_model_init_kwargs", self.teacher_model_init_kwargs
        )
        if self.teacher_device is not None:
            check_device(owner, "teacher_device", self.teacher_device)
        check_number(owner, "teacher_top_k", self.teacher_top_k, ge=-1, integer=True)
        check_number(owner, "jsd_beta", self.jsd_beta, ge=0, le=1)
        if self.teacher_top_k == 0 and self.jsd_beta != 1.0:
            raise ValueError(
                f"{owner}: jsd_beta={self.jsd_beta!r} sets the dense divergence, but teacher_top_k=0 distills with "
                "the sampled-token advantage (advantage_fn), which has no β; set teacher_top_k (k > 0: the teacher's "
                "top-k, -1: the whole vocabulary) or leave jsd_beta unset (for the sampled-token JSD use "
                "advantage_fn='jsd' with its lambda_coef)"
            )

    @property
    def dense_distillation(self) -> bool:
        """True when the distillation term is the dense divergence (`teacher_top_k` ≠ 0)."""
        return self.teacher_top_k != 0

    @property
    def sampled_token_advantage(self) -> bool:
        """True when the advantage function's sampled-token distillation advantage is trained on: always with
        `teacher_top_k=0`; in a dense mode only when `advantage_fn` composes another one (e.g. `jsd`), which is then
        added to the dense term (the algorithm's own estimator is what the dense term replaces)."""
        return not self.dense_distillation or self.advantage_fn != get_algorithm(self.algorithm).advantage_fn

    def _check_pairing(self) -> None:
        super()._check_pairing()
        if self.dense_distillation and not self.sampled_token_advantage:
            own = ADVANTAGE_FNS[self.advantage_fn]
            unused = {**set_arguments(self, own), **(self.advantage_fn_args or {})}
            unused.pop("kl_coef", None)  # scales the dense term
            if unused:
                name, value = next(iter(unused.items()))
                raise ValueError(
                    f"{type(self).__name__}: {name}={value!r} configures the sampled-token advantage "
                    f"{self.advantage_fn!r}, which teacher_top_k={self.teacher_top_k} replaces by the dense "
                    "divergence; leave it unset, or set teacher_top_k=0"
                )
        if self.kl_penalty_fn != "none":  # reached only by a record with a reference model
            raise ValueError(
                f"{type(self).__name__}: kl_penalty_fn={self.kl_penalty_fn!r} subtracts a KL from the rewards, but the "
                "distillation advantage is computed from teacher log-probs, not rewards; use beta with kl_loss_fn "
                "(the KL in the loss) instead"
            )

    def composition(self) -> dict[str, str]:
        parts = super().composition()
        if self.dense_distillation:
            support = "the whole vocabulary" if self.teacher_top_k == -1 else f"the teacher's top-{self.teacher_top_k}"
            parts["distillation"] = f"dense, jsd_beta {self.jsd_beta:g} over {support}, kl_coef {self.kl_coef:g}"
            if not self.sampled_token_advantage:
                parts["advantage"] = f"- (the dense divergence replaces {self.advantage_fn})"
            else:
                parts["advantage"] += ", added to the dense divergence"
        else:
            parts["distillation"] = "sampled-token, the advantage"
        return parts

    def use_toy_task(self) -> None:
        if self.teacher_model_name_or_path is None:
            from ..toy import tiny_teacher_path

            self.teacher_model_name_or_path = tiny_teacher_path()  # the toy student's teacher

    def build_reward_advantage_fn(self):
        """The advantage of the task-reward term (scaled by `reward_weight` in the trainer)."""
        return get_advantage_fn(self.reward_advantage_fn)


SHARED_BACKBONE_VF_COEF = 0.1  # vf_coef of TRL's former PPOTrainer, whose value head sat on the policy's backbone


@dataclass
class CriticFamilyConfig(CriticArguments, GRPOFamilyConfig):
    """Base of the critic PPO config: a value model trained beside the policy, whose values make the GAE advantages
    (`advantage_fn="ppo"`). Groups of one are allowed (`num_generations=1`, the reference's `repeat_times`), for an
    advantage function that does not compare the samples of a group."""

    def __post_init__(self) -> None:
        # TRL's GRPOConfig requires two generations per prompt (its advantage is group-relative); critic PPO's is not.
        # TRL's checks run with a stand-in group of 2; whether the advantage takes groups of one is checked after.
        given = (self.num_generations, self.num_generations_eval)
        stand_in = self.num_generations == 1
        if stand_in:
            self.num_generations = 2
            self.num_generations_eval = 2 if self.num_generations_eval in (None, 1) else self.num_generations_eval
        try:
            super().__post_init__()
        finally:
            if stand_in:
                self.num_generations, self.num_generations_eval = given
        self._check_group_size()

    def _check_fields(self) -> None:
        super()._check_fields()
        owner = type(self).__name__
        check_cliprange_value(owner, self.cliprange_value)
        check_number(owner, "critic_learning_rate", self.critic_learning_rate, ge=0, allow_none=True)
        check_number(owner, "critic_warmup_steps", self.critic_warmup_steps, ge=0, integer=True)
        check_text(owner, "value_model_name_or_path", self.value_model_name_or_path)
        self.value_model_init_kwargs = check_kwargs(owner, "value_model_init_kwargs", self.value_model_init_kwargs)
        check_bool(owner, "shared_backbone", self.shared_backbone)
        check_number(owner, "vf_coef", self.vf_coef, ge=0, allow_none=True)
        if self.shared_backbone:
            separate = ("value_model_name_or_path", "value_model_init_kwargs", "critic_learning_rate")
            given = [name for name in separate if getattr(self, name) is not None]
            if given:
                raise ValueError(
                    f"{owner}: {', '.join(given)} configure a separate value model, but shared_backbone=True puts "
                    "the value head on the policy (one optimizer: weigh the value loss with vf_coef)"
                )
            if self.vf_coef is None:
                self.vf_coef = SHARED_BACKBONE_VF_COEF
        elif self.vf_coef is not None:
            raise ValueError(
                f"{owner}: vf_coef={self.vf_coef} weighs the value loss in the summed loss of shared_backbone=True; "
                "a separate value model has its own optimizer (set critic_learning_rate instead)"
            )

    def _check_group_size(self) -> None:
        advantage = self.build_advantage_fn()
        if self.num_generations == 1 and getattr(advantage, "uses_groups", True):
            raise ValueError(
                f"{type(self).__name__}: num_generations=1 gives every prompt a group of one, but advantage_fn="
                f"{self.advantage_fn_name!r} compares the samples of a group; use num_generations >= 2 or an "
                "advantage that does not need groups (ppo, reinforce, reinforceplusplus)"
            )

    @property
    def critic_lr(self) -> float:
        """The critic optimizer's learning rate (`critic_learning_rate`, else `learning_rate`)."""
        return self.learning_rate if self.critic_learning_rate is None else self.critic_learning_rate

    def composition(self) -> dict[str, str]:
        parts = super().composition()
        if self.shared_backbone:
            critic = f"a value head on the policy's backbone, vf_coef {self.vf_coef:g}"
        else:
            critic = (
                f"value model {self.value_model_name_or_path or 'initialized from the policy'}, learning rate "
                f"{self.critic_lr:g}"
            )
        parts["critic"] = (
            f"{critic}, cliprange_value {self.cliprange_value:g}, warm-up {self.critic_warmup_steps} steps"
        )
        return parts
