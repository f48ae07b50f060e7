"""The cross-field rules of the RL configs: one table (`RULES`) of small named rules, each relating several fields (or
a field and the algorithm's record), shared by the synchronous GRPO-family configs and `AsyncGRPOConfig` where both
have them, the same `Rule` objects.

A rule names the configs it applies to (`applies_to`: a class name in the config's MRO) and when it runs (`stage`):

* `GIVEN`: on the fields as given, after each was checked on its own and before the config resolves any (with
  `kl_loss_fn='none'` an explicit KL coefficient is refused, else it becomes 0);
* `FIELDS`: after the KL coefficient is resolved, before TRL's own `__post_init__`;
* `COMPONENTS`: after TRL's `__post_init__`, on the built parts (`config.components`, paired with the trainer).

A config runs `check_rules(self, rules_for(self, stage))` at each stage; a broken rule is a ValueError naming the
config class, the fields, their values and the fix. Single-field checks (`check_number`, ...) stay in the configs.
Each rule carries an example that breaks it and its fix (`tests/trainers/test_config_rules.py` builds both).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...advantages import ADVANTAGE_FNS
from ...algorithms import get_algorithm
from .trl_loss_fields import TRL_GRPO_DEFAULTS

GIVEN, FIELDS, COMPONENTS = "given", "fields", "components"
STAGES = (GIVEN, FIELDS, COMPONENTS)

SYNC = "GRPOFamilyConfig"  # every synchronous GRPO-family config (MIX, distillation and critic PPO included)
ASYNC = "AsyncGRPOConfig"

# TRL's own vLLM importance-sampling correction, which `rollout_is` replaces.
TRL_IS_FIELDS = (
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_max",
    "vllm_importance_sampling_clip_min",
    "vllm_importance_sampling_cap",
)


@dataclass(frozen=True)
class Rule:
    """A rule between `fields` of the configs `applies_to`, checked at `stage` by `check(config)` (a ValueError when
    broken). `example` breaks it on each class of `tested_on` (public names), matching `message`; with `fix`, builds."""

    name: str
    fields: tuple[str, ...]
    check: Callable[[Any], None]
    applies_to: tuple[str, ...]
    stage: str
    example: dict[str, Any]
    fix: dict[str, Any]
    message: str
    tested_on: tuple[str, ...] = field(default=("GRPOConfig",))

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"Rule {self.name}: stage={self.stage!r} is not one of {', '.join(STAGES)}")

    def applies(self, config: Any) -> bool:
        """True when `config` is one of the configs the rule applies to."""
        return any(cls.__name__ in self.applies_to for cls in type(config).__mro__)


RULES: list[Rule] = []
"""Every cross-field rule, in the order a config checks them within a stage (the order of the functions below)."""


def rule(
    fields: tuple[str, ...],
    applies_to: tuple[str, ...],
    stage: str,
    *,
    example: dict[str, Any],
    fix: dict[str, Any],
    message: str,
    tested_on: tuple[str, ...] = ("GRPOConfig",),
) -> Callable[[Callable[[Any], None]], Callable[[Any], None]]:
    """Register the decorated check as a `Rule` named after it (see `Rule` for the arguments)."""

    def register(check: Callable[[Any], None]) -> Callable[[Any], None]:
        RULES.append(Rule(check.__name__, fields, check, applies_to, stage, example, fix, message, tested_on))
        return check

    return register


_BOTH = (SYNC, ASYNC)
_ON_BOTH = ("GRPOConfig", "AsyncGRPOConfig")
_VLLM = {"use_vllm": True}


def _owner(config: Any) -> str:
    return type(config).__name__


# ---- KL ----------------------------------------------------------------------------------------------------------


@rule(
    fields=("beta", "kl_penalty_fn"),
    applies_to=(SYNC,),
    stage=GIVEN,
    example={"beta": 0.05},
    fix={"beta": 0.0},
    message=r"beta=0.05 adds a KL term to a reference model, but the asymre algorithm trains without one",
    tested_on=("AsymREConfig",),
)
def no_kl_without_reference(config: Any) -> None:
    if not config.algorithm:
        return
    spec = get_algorithm(config.algorithm)
    if spec.use_reference:
        return
    for name, value, off in (("beta", config.beta, 0), ("kl_penalty_fn", config.kl_penalty_fn, "none")):
        if value != off:
            composed = (
                f", or compose its parts on a config with a reference model (e.g. GRPOConfig("
                f"policy_loss_fn={config.policy_loss_name!r}, advantage_fn={config.advantage_fn_name!r}))"
                if spec.trainer == "grpo"
                else ""
            )
            raise ValueError(
                f"{_owner(config)}: {name}={value!r} adds a KL term to a reference model, but the {config.algorithm} "
                "algorithm trains without one (its record's use_reference=False, as in Trinity-RFT: no reference "
                f"model is loaded); leave {name}={off!r}{composed}"
            )


@rule(
    fields=("adaptive_kl", "target_kl", "kl_horizon"),
    applies_to=_BOTH,
    stage=FIELDS,
    example={"beta": 0.1, "adaptive_kl": True},
    fix={"target_kl": 0.05, "kl_horizon": 300},
    message=r"adaptive_kl=True needs target_kl and kl_horizon \(both > 0\); got target_kl=None",
    tested_on=_ON_BOTH,
)
def adaptive_kl_needs_target(config: Any) -> None:
    if config.adaptive_kl and (config.target_kl is None or config.kl_horizon is None):
        raise ValueError(
            f"{_owner(config)}: adaptive_kl=True needs target_kl and kl_horizon (both > 0); got "
            f"target_kl={config.target_kl!r}, kl_horizon={config.kl_horizon!r}"
        )


@rule(
    fields=("adaptive_kl", "beta"),
    applies_to=_BOTH,
    stage=FIELDS,
    example={"adaptive_kl": True, "target_kl": 0.05, "kl_horizon": 300, "beta": 0.0},
    fix={"beta": 0.1},
    message=r"adaptive_kl=True adapts beta, but beta=0 .*there is no KL term to adapt",
    tested_on=_ON_BOTH,
)
def adaptive_kl_needs_kl_term(config: Any) -> None:
    if config.adaptive_kl and config.beta == 0:
        raise ValueError(
            f"{_owner(config)}: adaptive_kl=True adapts beta, but beta=0 (kl_loss_fn={config.kl_loss_fn!r}): there "
            "is no KL term to adapt; set beta > 0 with a KL estimator, or adaptive_kl=False"
        )


# ---- entropy -----------------------------------------------------------------------------------------------------


@rule(
    fields=("use_adaptive_entropy", "entropy_coef_min", "entropy_coef_max"),
    applies_to=(ASYNC,),
    stage=FIELDS,
    example={"use_adaptive_entropy": True, "entropy_coef_min": 1.0, "entropy_coef_max": 0.5},
    fix={"entropy_coef_max": 2.0},
    message=r"entropy_coef_max=0.5 is below entropy_coef_min=1.0",
    tested_on=("AsyncGRPOConfig",),
)
def adaptive_entropy_range(config: Any) -> None:
    if config.use_adaptive_entropy and config.entropy_coef_max < config.entropy_coef_min:
        raise ValueError(
            f"{_owner(config)}: entropy_coef_max={config.entropy_coef_max} is below entropy_coef_min="
            f"{config.entropy_coef_min}; the adaptive coefficient moves between them: set max ≥ min"
        )


@rule(
    fields=("entropy_coef", "use_adaptive_entropy", "entropy_loss_fn"),
    applies_to=_BOTH,
    stage=FIELDS,
    example={"entropy_coef": 0.1, "entropy_loss_fn": "none"},
    fix={"entropy_loss_fn": "default"},
    message=r"entropy_coef=0.1 is set but entropy_loss_fn='none'",
    tested_on=_ON_BOTH,
)
def entropy_bonus_needs_entropy_term(config: Any) -> None:
    if (config.entropy_coef != 0 or config.use_adaptive_entropy) and config.entropy_loss_fn == "none":
        what = f"entropy_coef={config.entropy_coef}" if config.entropy_coef != 0 else "use_adaptive_entropy=True"
        raise ValueError(
            f"{_owner(config)}: {what} is set but entropy_loss_fn='none'; set entropy_loss_fn='default' to add the "
            "entropy bonus, or leave the entropy bonus off"
        )


# ---- model turns as samples --------------------------------------------------------------------------------------


@rule(
    fields=("turns_as_samples", "algorithm"),
    applies_to=(SYNC,),
    stage=FIELDS,
    example={"turns_as_samples": True, "loss_agg_mode": "seq-mean-token-mean"},
    fix={"turns_as_samples": False},
    message=r"turns_as_samples=True trains each model turn as a sample of its own, which the mix family",
    tested_on=("MIXConfig",),
)
def turns_as_samples_needs_grpo_family(config: Any) -> None:
    if not (config.turns_as_samples and config.algorithm):
        return
    family = get_algorithm(config.algorithm).trainer
    if family != "grpo":
        raise ValueError(
            f"{_owner(config)}: turns_as_samples=True trains each model turn as a sample of its own, which the "
            f"{family} family's trainer does not do (its batches hold expert or teacher-scored rows); use a "
            "grpo-family config (GRPOConfig, MultiStepGRPOConfig, GiGPOConfig, ...)"
        )


@rule(
    fields=("turns_as_samples", "loss_agg_mode"),
    applies_to=_BOTH,
    stage=COMPONENTS,
    example={"turns_as_samples": True, "loss_agg_mode": "token-mean"},
    fix={"loss_agg_mode": "seq-mean-token-mean"},
    message=r"turns_as_samples=True changes only the seq-mean-\* aggregations, but loss_agg_mode is 'token-mean'",
    tested_on=_ON_BOTH,
)
def turns_as_samples_needs_seq_mean(config: Any) -> None:
    aggregation = config.components.loss_agg_mode
    if config.turns_as_samples and not aggregation.startswith("seq-mean"):
        raise ValueError(
            f"{_owner(config)}: turns_as_samples=True changes only the seq-mean-* aggregations, but loss_agg_mode is "
            f"{aggregation!r} (every token weighs the same, turn or completion); choose a seq-mean-* "
            "loss_agg_mode or leave turns_as_samples=False"
        )


# ---- verl's rollout correction -----------------------------------------------------------------------------------


@rule(
    fields=("rollout_is", "rollout_rs", "use_vllm"),
    applies_to=(SYNC,),
    stage=FIELDS,
    example={"rollout_is": "token"},
    fix=_VLLM,
    message=r"rollout_is='token' corrects .* TRL has only from vLLM generation; set use_vllm=True",
)
def rollout_correction_needs_vllm(config: Any) -> None:
    if not config.build_rollout_correction().enabled or config.use_vllm:
        return
    name = "rollout_is" if config.rollout_is is not None else "rollout_rs"
    raise ValueError(
        f"{_owner(config)}: {name}={getattr(config, name)!r} corrects for the difference between the policy that "
        "sampled the completions and the trained one, measured with the sampler's per-token log-probs, which TRL has "
        f"only from vLLM generation; set use_vllm=True or leave {name} unset"
    )


@rule(
    fields=("rollout_rs", "turns_as_samples"),
    applies_to=(SYNC,),
    stage=FIELDS,
    example={
        **_VLLM,
        "rollout_rs": "token_k2",
        "rollout_rs_threshold": 1,
        "turns_as_samples": True,
        "loss_agg_mode": "seq-mean-token-mean",
    },
    fix={"rollout_rs": "seq_mean_k2"},
    message=r"rollout_rs='token_k2' rejects single tokens, which would split the model turns",
)
def token_rejection_keeps_turns_whole(config: Any) -> None:
    correction = config.build_rollout_correction()
    if not (correction.enabled and config.turns_as_samples):
        return
    if any(option.startswith("token_") for option in correction.rs_bounds):
        raise ValueError(
            f"{_owner(config)}: rollout_rs={config.rollout_rs!r} rejects single tokens, which would split the model "
            "turns that turns_as_samples=True trains as samples; use sequence criteria (seq_*) or "
            "turns_as_samples=False"
        )


@rule(
    fields=("rollout_is", "loss_type"),
    applies_to=(SYNC,),
    stage=FIELDS,
    example={**_VLLM, "rollout_is": "sequence", "loss_type": "vespo"},
    fix={"rollout_is": "token"},
    message=r"rollout_is='sequence' gives one weight per sequence, but loss_type='vespo'",
)
def sequence_rollout_is_not_with_vespo(config: Any) -> None:
    if config.rollout_is == "sequence" and config.uses_trl_loss and config.loss_type == "vespo":
        raise ValueError(
            f"{_owner(config)}: rollout_is='sequence' gives one weight per sequence, but loss_type='vespo' folds a "
            "per-token correction into its sequence weight (TRL allows it only token-level modes); use "
            "rollout_is='token'"
        )


@rule(
    fields=("rollout_is", *TRL_IS_FIELDS),
    applies_to=(SYNC,),
    stage=FIELDS,
    example={**_VLLM, "rollout_is": "token", "vllm_importance_sampling_mode": "token_truncate"},
    fix={"rollout_is": None},
    message=r"vllm_importance_sampling_mode='token_truncate' configures TRL's vLLM importance-sampling correction",
)
def one_importance_sampling_correction(config: Any) -> None:
    if config.rollout_is is None:
        return  # rejection composes with TRL's weights
    for name in TRL_IS_FIELDS:
        value = getattr(config, name)
        if value != TRL_GRPO_DEFAULTS[name]:
            raise ValueError(
                f"{_owner(config)}: {name}={value!r} configures TRL's vLLM importance-sampling correction, which "
                f"rollout_is={config.rollout_is!r} replaces by verl's (a token would otherwise be weighted twice); "
                "configure one of them: verl's with rollout_is / rollout_is_threshold, or TRL's without rollout_is"
            )


# ---- the reward std, the overlong penalty, dynamic sampling ------------------------------------------------------


@rule(
    fields=("scale_rewards", "advantage_fn"),
    applies_to=(SYNC,),
    stage=FIELDS,
    example={"scale_rewards": "batch", "advantage_fn": "rloo"},
    fix={"scale_rewards": "group"},
    message=r"scale_rewards='batch' .* advantage function `rloo` does not divide by a reward std",
)
def scale_rewards_needs_reward_std(config: Any) -> None:
    name = config.advantage_fn_name
    if name is None or config.scale_rewards == "group":
        return
    if "std_cal_level" not in {a.name for a in ADVANTAGE_FNS[name].arguments}:
        raise ValueError(
            f"{_owner(config)}: scale_rewards={config.scale_rewards!r} chooses the reward std that GRPO's advantage "
            f"divides by, but the advantage function `{name}` does not divide by a reward std; leave "
            "scale_rewards='group' (its default)"
        )


@rule(
    fields=("scale_rewards", "std_cal_level"),
    applies_to=(SYNC,),
    stage=FIELDS,
    example={"scale_rewards": "none", "std_cal_level": "batch"},
    fix={"scale_rewards": "batch"},
    message=r"scale_rewards='none' and std_cal_level='batch' contradict each other",
)
def scale_rewards_agrees_with_std_cal_level(config: Any) -> None:
    name = config.advantage_fn_name
    if name is None or config.scale_rewards == "group":
        return
    if "std_cal_level" not in {a.name for a in ADVANTAGE_FNS[name].arguments}:
        return  # scale_rewards_needs_reward_std
    std_cal_level = config.composed_kwargs("advantage_fn").get("std_cal_level", "group")
    if std_cal_level != "group" and std_cal_level != config.scale_rewards:
        raise ValueError(
            f"{_owner(config)}: scale_rewards={config.scale_rewards!r} and std_cal_level={std_cal_level!r} "
            "contradict each other (both choose the std of the advantage); set one of them"
        )


@rule(
    fields=("overlong_buffer", "max_completion_length"),
    applies_to=_BOTH,
    stage=FIELDS,
    example={"overlong_buffer": 12, "max_completion_length": 8},
    fix={"overlong_buffer": 4},
    message=r"overlong_buffer=12 is longer than max_completion_length=8",
    tested_on=_ON_BOTH,
)
def overlong_buffer_fits(config: Any) -> None:
    if config.overlong_buffer > config.max_completion_length:
        raise ValueError(
            f"{_owner(config)}: overlong_buffer={config.overlong_buffer} is longer than max_completion_length="
            f"{config.max_completion_length}: the penalty would start before a completion has any token; choose "
            "overlong_buffer <= max_completion_length (the paper: 4096 of 20480), or 0 to switch it off"
        )


@rule(
    fields=("dynamic_sampling", "num_generations"),
    applies_to=_BOTH,
    stage=FIELDS,
    example={"dynamic_sampling": True, "num_generations": 1},
    fix={"num_generations": 2},
    message=r"dynamic_sampling=True drops the prompt groups .* num_generations=1",
    tested_on=_ON_BOTH,
)
def dynamic_sampling_needs_groups(config: Any) -> None:
    if config.dynamic_sampling and config.num_generations < 2:
        raise ValueError(
            f"{_owner(config)}: dynamic_sampling=True drops the prompt groups whose rewards all agree, but "
            f"num_generations={config.num_generations} makes every group a single completion; set "
            "num_generations >= 2 or dynamic_sampling=False"
        )


@rule(
    fields=("dynamic_sampling", "algorithm"),
    applies_to=(SYNC,),
    stage=FIELDS,
    example={"dynamic_sampling": True},
    fix={"dynamic_sampling": False},
    message=r"dynamic_sampling=True .* distillation's advantages come from the teacher",
    tested_on=("OnPolicyDistillConfig",),
)
def dynamic_sampling_needs_task_rewards(config: Any) -> None:
    if config.dynamic_sampling and config.algorithm and get_algorithm(config.algorithm).trainer == "distill":
        raise ValueError(
            f"{_owner(config)}: dynamic_sampling=True selects prompt groups by their task rewards, but on-policy "
            "distillation's advantages come from the teacher; leave dynamic_sampling=False"
        )


@rule(
    fields=("dynamic_sampling", "advantage_fn"),
    applies_to=(SYNC,),
    stage=FIELDS,
    example={"dynamic_sampling": True},
    fix={"advantage_fn": "grpo"},
    message=r"dynamic_sampling=True is not available with advantage_fn='gigpo'",
    tested_on=("GiGPOConfig",),
)
def dynamic_sampling_needs_group_estimator(config: Any) -> None:
    if not config.dynamic_sampling or config.advantage_fn_name is None:
        return
    advantage = ADVANTAGE_FNS.get(config.advantage_fn_name)
    inputs = advantage.inputs() if advantage is not None else ()
    if "run_ids" in inputs or "reward_baselines" in inputs:
        raise ValueError(
            f"{_owner(config)}: dynamic_sampling=True is not available with advantage_fn="
            f"{config.advantage_fn_name!r}, which reads per-generation state (multi-turn turn records or ReMax's "
            "greedy baselines) that does not follow rows across generation rounds; use a group estimator (grpo, "
            "rloo, ...) or dynamic_sampling=False"
        )


# ---- the families' own -------------------------------------------------------------------------------------------


@rule(
    fields=("jsd_beta", "teacher_top_k"),
    applies_to=("DistillFamilyConfig",),
    stage=FIELDS,
    example={"jsd_beta": 0.5},
    fix={"teacher_top_k": -1},
    message=r"jsd_beta=0.5 sets the dense divergence, but teacher_top_k=0",
    tested_on=("OnPolicyDistillConfig",),
)
def jsd_beta_needs_dense_distillation(config: Any) -> None:
    if config.teacher_top_k == 0 and config.jsd_beta != 1.0:
        raise ValueError(
            f"{_owner(config)}: jsd_beta={config.jsd_beta!r} sets the dense divergence, but teacher_top_k=0 distills "
            "with the sampled-token advantage (advantage_fn), which has no β; set teacher_top_k (k > 0: the "
            "teacher's top-k, -1: the whole vocabulary) or leave jsd_beta unset (for the sampled-token JSD use "
            "advantage_fn='jsd' with its lambda_coef)"
        )


@rule(
    fields=("shared_backbone", "value_model_name_or_path", "value_model_init_kwargs", "critic_learning_rate"),
    applies_to=("CriticFamilyConfig",),
    stage=FIELDS,
    example={"shared_backbone": True, "critic_learning_rate": 1e-5},
    fix={"shared_backbone": False},
    message=r"critic_learning_rate configure a separate value model, but shared_backbone=True",
    tested_on=("PPOConfig",),
)
def shared_backbone_has_no_value_model(config: Any) -> None:
    if not config.shared_backbone:
        return
    separate = ("value_model_name_or_path", "value_model_init_kwargs", "critic_learning_rate")
    given = [name for name in separate if getattr(config, name) is not None]
    if given:
        raise ValueError(
            f"{_owner(config)}: {', '.join(given)} configure a separate value model, but shared_backbone=True puts "
            "the value head on the policy (one optimizer: weigh the value loss with vf_coef)"
        )


@rule(
    fields=("vf_coef", "shared_backbone"),
    applies_to=("CriticFamilyConfig",),
    stage=FIELDS,
    example={"vf_coef": 0.5},
    fix={"shared_backbone": True},
    message=r"vf_coef=0.5 weighs the value loss in the summed loss of shared_backbone=True",
    tested_on=("PPOConfig",),
)
def vf_coef_needs_shared_backbone(config: Any) -> None:
    if not config.shared_backbone and config.vf_coef is not None:
        raise ValueError(
            f"{_owner(config)}: vf_coef={config.vf_coef} weighs the value loss in the summed loss of "
            "shared_backbone=True; a separate value model has its own optimizer (set critic_learning_rate instead)"
        )


@rule(
    fields=("expert_data_ratio", "generation_batch_size", "num_generations"),
    applies_to=("MIXFamilyConfig",),
    stage=COMPONENTS,
    example={"expert_data_ratio": 0.3},
    fix={"expert_data_ratio": 0.5},
    message=r"ceil\(0\.3 × 8\) = 3 expert .*multiple of num_generations=4.*nearest ratios that fit: 0\.5",
    tested_on=("MIXConfig",),
)
def expert_rows_fit_the_batch(config: Any) -> None:
    ratio = config.expert_data_ratio
    rows, group, processes = config.generation_batch_size, config.num_generations, config.world_size
    experts = config.expert_rows_per_generation
    step = math.lcm(group, processes)
    if experts % step == 0 and (experts < rows or ratio == 1):
        return
    why = f"a multiple of num_generations={group}" + (f" and of the {processes} processes" if processes > 1 else "")
    what = (
        f"{_owner(config)}: expert_data_ratio={ratio} puts ceil({ratio} × {rows}) = {experts} expert "
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


@rule(
    fields=("rollout_batch_size", "num_generations"),
    applies_to=(ASYNC,),
    stage=FIELDS,
    example={"rollout_batch_size": 6},
    fix={"rollout_batch_size": 8},
    message=r"rollout_batch_size=6 must be a multiple of num_generations=4",
    tested_on=("AsyncGRPOConfig",),
)
def rollout_batch_is_whole_groups(config: Any) -> None:
    if config.rollout_batch_size is not None and config.rollout_batch_size % config.num_generations:
        raise ValueError(
            f"{_owner(config)}: rollout_batch_size={config.rollout_batch_size} must be a multiple of "
            f"num_generations={config.num_generations} (the worker generates whole groups)"
        )


@rule(
    fields=("prox_logp_method", "policy_loss_fn"),
    applies_to=(ASYNC,),
    stage=COMPONENTS,
    example={"prox_logp_method": "loglinear"},
    fix={"policy_loss_fn": "decoupled_ppo"},
    message=r"prox_logp_method='loglinear' .* policy_loss_fn='ppo' reads none",
    tested_on=("AsyncGRPOConfig",),
)
def prox_logp_method_needs_decoupled_loss(config: Any) -> None:
    if config.prox_logp_method != "recompute" and "prox_logprob" not in config.components.policy_loss.inputs():
        raise ValueError(
            f"{_owner(config)}: prox_logp_method={config.prox_logp_method!r} chooses the proximal policy of a "
            f"decoupled loss, but policy_loss_fn={config.policy_loss_name!r} reads none (use "
            "policy_loss_fn='decoupled_ppo')"
        )


def rules_for(config: Any, stage: str, rules: list[Rule] = RULES) -> tuple[Rule, ...]:
    """The rules of `rules` that apply to `config` at `stage`, in their order."""
    return tuple(rule for rule in rules if rule.stage == stage and rule.applies(config))


def check_rules(config: Any, rules: tuple[Rule, ...]) -> None:
    """Check `rules` on `config` in order: the first broken one raises its ValueError."""
    for rule in rules:
        rule.check(config)
