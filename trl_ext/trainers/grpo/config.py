"""Configs of the GRPO-family trainers: `trl.GRPOConfig` plus the algorithm's loss and advantage arguments.

`GRPOFamilyConfig` is the base of every GRPO-family config; the other families' bases live beside their trainers
(`mix_config.MIXFamilyConfig` of MIX / MIX-CHORD, `distill_config.DistillFamilyConfig` of on-policy distillation,
`critic_config.CriticFamilyConfig` of critic PPO). It resolves the trained parts with `composition.ComposedComponents`
and refuses or takes TRL's loss fields with `trl_loss_fields.TRLLossFields`. An algorithm's own config
(`trl_ext.SAPOConfig`, ...) is built from its record by `trl_ext.trainers.algorithm_classes`: the family's base plus
the dataclasses that `trl_ext.trainers.core.arguments.algorithm_arguments` generates from the record's loss and
advantage `Argument` specs.
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

from dataclasses import dataclass, field
from typing import ClassVar

from trl import GRPOConfig as _TRLGRPOConfig

from ..._validation import check_bool, check_choice, check_number
from ...losses.kl import KL_FNS, KLFn
from ..core.arguments import (
    GRPO_KL_ARGUMENTS,
    CompositionArguments,
    RolloutCorrectionArguments,
    _help,
    config_arguments,
    entropy_field,
)
from ..core.composition import ComposedComponents
from ..core.config_fields import resolve_kl_coefficient
from ..core.config_rules import COMPONENTS, FIELDS, GIVEN, check_rules, rules_for
from ..core.devices import check_hardware
from ..core.documented_defaults import DocumentedDefault
from ..core.trl_loss_fields import TRLLossFields, unused_trl_field
from .dynamic_sampling import DynamicSamplingArguments
from .overlong_reward import OverlongRewardArguments

# The advantage functions whose std normalization TRL's `scale_rewards` selects (their `std_cal_level`).
_SCALE_REWARDS = ("group", "batch", "none")


@dataclass
class GRPOFamilyConfig(
    TRLLossFields,
    ComposedComponents,
    CompositionArguments,
    RolloutCorrectionArguments,
    DynamicSamplingArguments,
    OverlongRewardArguments,
    GRPO_KL_ARGUMENTS,
    _TRLGRPOConfig,
):
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

    DAPO's two batch-level techniques work with every algorithm too: `dynamic_sampling` (drop the prompt groups
    whose rewards all agree and generate more until the batch is full) and `overlong_buffer` (a soft length penalty
    on the rewards).

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

    beta: float = field(
        default=DocumentedDefault(0.0),
        metadata=_help(
            "KL coefficient β of the KL-to-reference term β·agg(KL(π‖π_ref)) (Trinity-RFT's `kl_coef`; estimator "
            "`kl_loss_fn`). Default 0.0: no KL term and no reference model. With `kl_loss_fn='none'` the term is "
            "off and β is 0; an explicit non-zero β is then an error."
        ),
    )
    loss_type: str | None = unused_trl_field("loss_type")
    importance_sampling_level: str | None = unused_trl_field("importance_sampling_level")
    epsilon: float | None = unused_trl_field("epsilon")
    epsilon_high: float | None = unused_trl_field("epsilon_high")
    delta: float | None = unused_trl_field("delta")
    sapo_temperature_pos: float | None = unused_trl_field("sapo_temperature_pos")
    sapo_temperature_neg: float | None = unused_trl_field("sapo_temperature_neg")
    vespo_k_pos: float | None = unused_trl_field("vespo_k_pos")
    vespo_lambda_pos: float | None = unused_trl_field("vespo_lambda_pos")
    vespo_k_neg: float | None = unused_trl_field("vespo_k_neg")
    vespo_lambda_neg: float | None = unused_trl_field("vespo_lambda_neg")
    use_bias_correction_kl: bool | None = field(
        default=None,
        metadata=_help(
            "Multiply each token's KL by the importance ratio π/π_old (differentiable; DeepSeek-V3.2's unbiased "
            "reverse-KL gradient). Default: on with TRL's own loss (TRL's default), off for the algorithms, whose "
            "`kl_loss_fn` chooses the estimator (`corrected_k3` is Trinity-RFT's bias-corrected k3, its weight "
            "clamped at 2)."
        ),
    )

    entropy_loss_fn: str = entropy_field("default")

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

    def __post_init__(self) -> None:
        # trl_ext's checks first, each field on its own, so that a bad value is reported by its field's name
        # before TRL's own processing of the other fields; then the rules between fields (`config_rules`).
        self._take_trl_defaults()
        if self.algorithm:
            self._check_composition_fields()
        if self.uses_trl_loss:
            self._enter_trl_loss_mode()
        if self.use_bias_correction_kl is None:
            self.use_bias_correction_kl = self.uses_trl_loss
        self._check_fields()
        correction = self.build_rollout_correction()  # each rollout_* field checked, naming it
        self._check_scale_rewards()
        self._check_overlong_reward()
        self._check_dynamic_sampling()
        check_rules(self, rules_for(self, GIVEN))
        self.beta = resolve_kl_coefficient(type(self).__name__, self.kl_loss_fn, "beta", self.beta)
        check_rules(self, rules_for(self, FIELDS))
        if correction.enabled and self.rollout_is is not None:
            # verl's rollout_is replaces TRL's own vLLM correction, so that no token is weighted twice
            self.vllm_importance_sampling_correction = False
        super().__post_init__()
        if self.algorithm:
            # The parts are built here, once, from the final fields: a bad argument fails now, naming its field.
            self._check_pairing()
            check_rules(self, rules_for(self, COMPONENTS))
        check_hardware(self)

    def use_toy_task(self) -> None:
        """Called by the training script when it trains the toy model: fill in what the toy task provides for the
        family (nothing here; the distillation family's teacher)."""

    # ---- validation ---------------------------------------------------------------------------------------

    def _check_fields(self) -> None:
        """Check each trl_ext field of the base config on its own (subclasses extend this); the loss and advantage
        arguments are checked by building the loss and the advantage function."""
        owner = type(self).__name__
        check_number(owner, "num_generations", self.num_generations, ge=1, integer=True)  # before TRL divides by it
        check_choice(owner, "kl_loss_fn", self.kl_loss_fn, sorted(KL_FNS))
        check_number(owner, "beta", self.beta, ge=0)
        for spec in config_arguments(KLFn):
            spec.check(owner, getattr(self, spec.field_name), spec.field_name)
        choices = type(self).__dataclass_fields__["entropy_loss_fn"].metadata["choices"]
        check_choice(owner, "entropy_loss_fn", self.entropy_loss_fn, choices)
        check_number(owner, "entropy_coef", self.entropy_coef)
        check_bool(owner, "turns_as_samples", self.turns_as_samples)

    def _check_scale_rewards(self) -> None:
        """`scale_rewards` (TRL's True / False read as `group` / `none`) and GDPO's aggregation, each on its own; the
        advantage function they need is `config_rules`'."""
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
