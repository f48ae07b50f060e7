"""The config fields of the algorithms and the trainer families, derived from what the components declare.

An algorithm's config (`trl_ext.SAPOConfig`, ...) is its family's config base plus the fields `algorithm_fields(name)`
derives from its record: the policy loss's arguments and the advantage function's, from their `Argument` specs
(`trl_ext.components`: names, types, defaults, allowed values and help are declared once, by the component). The
families' own fields are dataclasses here too (MIX's expert data, the distillation teacher, DPO's KL term), which
their config bases inherit. This module imports neither trl nor transformers.

A component argument keeps its name in the config unless its spec gives a `config_name` (where the name collides
with a TRL field or would be ambiguous: `sppo_epsilon`, `rec_*`, `advantage_epsilon`, `advantage_tau`).
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar

from ...advantages import ADVANTAGE_FNS
from ...algorithms import get_algorithm
from ...components import Argument, Component
from ...losses import POLICY_LOSSES
from ...losses.kl import KL_FNS, KLFn
from ...rollout_correction import RolloutCorrection
from .documented_defaults import DocumentedDefault, documented_default


def _help(text: str, **extra: Any) -> dict[str, Any]:
    return {"help": text, **extra}


class LossArguments:
    """Base of the generated policy-loss argument dataclasses (`component_arguments`)."""

    kind: ClassVar[str] = "loss"
    component: ClassVar[type[Component]]


class AdvantageArguments:
    """Base of the generated advantage argument dataclasses (`component_arguments`)."""

    kind: ClassVar[str] = "advantage"
    component: ClassVar[type[Component]]


class KLArguments:
    """Base of the generated KL-term argument dataclass (`GRPO_KL_ARGUMENTS`)."""

    kind: ClassVar[str] = "KL term"
    component: ClassVar[type[Component]]


def config_arguments(component: type[Component]) -> tuple[Argument, ...]:
    """The arguments of `component` that a training config exposes (`in_config`)."""
    return tuple(spec for spec in component.arguments if spec.in_config)


def argument_field(
    spec: Argument, component: type[Component], part: type, defaults: dict[str, Any] | None = None
) -> tuple[str, Any, Any]:
    """`(name, type, field)` of the config field of argument `spec`: named `field_name`, with the spec's type, default
    (`defaults[spec.name]` where an algorithm's record gives one; None for a `config_unset` argument; a
    `documented_default` for a `config_when_set` one) and help text (plus the allowed values as `choices`)."""
    kind = spec.type | None if spec.optional or spec.config_unset else spec.type
    value = (defaults or {}).get(spec.name, spec.default)
    if spec.config_unset:
        default = None
    elif spec.config_when_set:
        default = documented_default(value)
    else:
        default = value
    text = spec.help
    if spec.config_name:
        owner = f"the `{component.name}` {part.kind}'s" if component.name else f"the {part.kind}'s"
        text += f" ({owner} `{spec.name}`)"
    metadata = _help(text, choices=list(spec.choices)) if spec.choices else _help(text)
    return spec.field_name, kind, field(default=default, metadata=metadata)


def config_field(component: type[Component], name: str, part: type | None = None) -> Any:
    """The dataclass field of `component`'s argument `name` in a config class written by hand (`argument_field`:
    the spec's default and help text, stated once by the component)."""
    return argument_field(component.argument(name), component, part or LossArguments)[2]


@cache
def component_arguments(component: type[Component], part: type, leading: tuple[tuple[str, Any, Any], ...] = ()) -> type:
    """The config fields of `component`'s arguments (`argument_field`), after the `leading` ones, as a dataclass
    subclassing `part` (`LossArguments`, `AdvantageArguments` or `KLArguments`)."""
    fields = [*leading, *(argument_field(spec, component, part) for spec in config_arguments(component))]
    cls = dataclasses.make_dataclass(
        f"{component.__name__}Arguments",
        fields,
        bases=(part,),
        namespace={
            "component": component,
            "__doc__": f"The config fields of `{component.__name__}`'s arguments (generated from its `arguments`).",
        },
    )
    cls.__module__ = __name__
    return cls


BASE_KL_ESTIMATOR = "k2"
"""The KL estimator of the family config bases (`GRPOFamilyConfig`); an algorithm's config takes its record's."""


def kl_estimator_field(default: str, term: str) -> tuple[str, type, Any]:
    """`(name, type, field)` of a config's `kl_loss_fn`: which `KL_FNS` estimator the KL term `term` uses."""
    names = ", ".join(f"`{name}`" for name in sorted(KL_FNS) if name != "none")
    text = (
        f"KL estimator of {term}: {names} (formulas in `trl_ext.losses.kl`; `k2` = ½(log r)², `k3` is TRL's), or "
        "`none` (no KL term: its coefficient becomes 0)."
    )
    return "kl_loss_fn", str, field(default=default, metadata=_help(text, choices=sorted(KL_FNS)))


GRPO_KL_ARGUMENTS = component_arguments(
    KLFn,
    KLArguments,
    leading=(
        kl_estimator_field(
            BASE_KL_ESTIMATOR,
            "the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0)",
        ),
    ),
)
"""The KL fields of every GRPO-family config: the estimator `kl_loss_fn` and the KL term's arguments (`adaptive_kl`,
`target_kl`, `kl_horizon`); its coefficient is TRL's `beta`."""


def entropy_field(default: str, expert_rows: bool = False) -> Any:
    """The `entropy_loss_fn` field of a family's configs, `default` its default; with `expert_rows` (a family that
    mixes expert demonstrations into the batch) it may also be `mix`, the bonus over the rollouts only."""
    if expert_rows:
        text = (
            "Entropy bonus `entropy_coef`·agg(entropy): `mix` over the rollouts only (expert demonstrations are "
            "not the policy's samples), `default` over every row, `none` disables it."
        )
        return field(default=default, metadata=_help(text, choices=["mix", "default", "none"]))
    text = (
        "Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none` "
        "disables it."
    )
    return field(default=default, metadata=_help(text, choices=["default", "none"]))


@dataclass
class ExpertDataArguments:
    """The expert-data fields of MIX / MIX-CHORD (and the entropy bonus on rollouts only)."""

    expert_data_ratio: float = field(
        default=0.5,
        metadata=_help(
            "Share of each generation batch's rows that are expert demonstrations (from the trainer's "
            "`expert_dataset`), the rest being rollouts: ceil(ratio × generation_batch_size) expert rows, which "
            "must be a multiple of `num_generations` (and of the number of processes) so that the rollouts form "
            "whole prompt groups. 0 trains on rollouts only, 1 on expert rows only (no generation)."
        ),
    )
    per_device_train_batch_size: int = field(
        default=16,
        metadata=_help(
            "Rows per device and micro-batch, rollouts and expert demonstrations together. 16 (TRL: 8) so that the "
            "default batch holds one group of `num_generations=8` rollouts and 8 demonstrations."
        ),
    )
    entropy_loss_fn: str = entropy_field("mix", expert_rows=True)


_REWARD_ADVANTAGE_FNS = ("grpo", "rloo", "reinforce")


@dataclass
class CriticArguments:
    """The value model of critic PPO and how it trains (its own optimizer, stepped with the policy's)."""

    value_model_name_or_path: str | None = field(
        default=None,
        metadata=_help(
            "The value model (Hub id or local path), used when the trainer gets no `value_model`: loaded as a token "
            "classifier with one output (its backbone plus a scalar head). Default: the policy's own checkpoint, "
            "with a new head. It must share the policy's tokenizer."
        ),
    )
    value_model_init_kwargs: dict[str, Any] | str | None = field(
        default=None,
        metadata=_help(
            'Keyword arguments of the value model\'s `from_pretrained`, e.g. `{"dtype": "bfloat16"}` (default: the '
            "policy's dtype)."
        ),
    )
    cliprange_value: float = field(
        default=0.5,
        metadata=_help(
            "c of the clipped value loss 0.5·agg(max((V − R)², (clip(V, V_old − c, V_old + c) − R)²)) (verl's "
            "`compute_value_loss`); 0.5 is the value Trinity-RFT's trainer backend uses (verl's critic default)."
        ),
    )
    critic_learning_rate: float | None = field(
        default=None,
        metadata=_help(
            "Learning rate of the critic's optimizer (AdamW with the policy's betas, epsilon, weight decay and "
            "scheduler), stepped at every optimizer step of the policy. Default: `learning_rate`."
        ),
    )
    critic_warmup_steps: int = field(
        default=0,
        metadata=_help(
            "Optimizer steps that train only the critic before the policy starts to learn (verl's `critic_warmup`): "
            "the policy's loss is 0 for those steps."
        ),
    )
    shared_backbone: bool = field(
        default=False,
        metadata=_help(
            "Put the value head on the policy's own backbone instead of training a separate value model: a linear "
            "head on the policy's last hidden state, one model and one optimizer, and the loss is the policy's terms "
            "+ vf_coef · the value loss (the backbone gets the gradient of both; the head only the value loss's, the "
            "LM head only the policy's). Saved beside the policy as value_head.safetensors."
        ),
    )
    vf_coef: float | None = field(
        default=None,
        metadata=_help(
            "Weight of the value loss in the summed loss of `shared_backbone` (default 0.1, TRL's former "
            "PPOTrainer's). A separate value model has its own optimizer instead (`critic_learning_rate`)."
        ),
    )


@dataclass
class TeacherArguments:
    """The teacher of on-policy distillation, and the optional blend with task rewards."""

    teacher_model_name_or_path: str | None = field(
        default=None,
        metadata=_help(
            "The teacher (Hub id or local path), used when the trainer gets no `teacher_model`. It must share the "
            "student's tokenizer."
        ),
    )
    teacher_model_init_kwargs: dict[str, Any] | str | None = field(
        default=None,
        metadata=_help(
            "Keyword arguments of the teacher's `from_pretrained` when it is given as a path, e.g. "
            '`{"dtype": "bfloat16"}` (default: the student\'s dtype) or `{"device_map": "auto"}` to spread a '
            "large teacher over the visible GPUs (single process)."
        ),
    )
    teacher_device: str | None = field(
        default=None,
        metadata=_help(
            "Device of the teacher, e.g. `cuda:1` or `cpu` (default: the student's device on each process, "
            "sharded like TRL's reference model under DeepSpeed ZeRO-3 / FSDP)."
        ),
    )
    teacher_top_k: int = field(
        default=0,
        metadata=_help(
            "The distillation signal. 0: the sampled-token estimator (the per-token advantage of `advantage_fn`, the "
            "reference's). k > 0: a dense loss, the generalized JSD (`jsd_beta`) between student and teacher over "
            "the teacher's k most likely tokens at each completion position plus one tail category for the rest "
            "of the vocabulary. -1: the same over the whole vocabulary (TRL's `DistillationTrainer` loss). Dense "
            "modes compute the logits a chunk of positions at a time (no [B, T, V] tensor); the teacher's top-k is "
            "taken once per generation batch, without gradients, at the sampling temperature."
        ),
    )
    jsd_beta: float = field(
        default=1.0,
        metadata=_help(
            "Interpolation β of the dense divergence (teacher_top_k ≠ 0), as TRL's `DistillationConfig.beta`: 0 "
            "forward KL(teacher ‖ student), 1 reverse KL(student ‖ teacher), between: the generalized JSD with "
            "mixture (1 − β)·student + β·teacher."
        ),
    )
    reward_weight: float = field(
        default=0.0,
        metadata=_help(
            "Weight w of the task reward in the advantage: A_t = kl_coef·(log π_teacher − log π_old) + w·Â, with Â "
            "the `reward_advantage_fn` advantage of the completion's summed reward (from `reward_funcs`, weighted "
            "by `reward_weights`), on each of its tokens. 0 (default) is pure distillation: reward functions, if "
            "given, are only logged."
        ),
    )
    reward_advantage_fn: str = field(
        default="grpo",
        metadata=_help(
            "Advantage of the reward term: `grpo` ((R − group mean)/(group std + 1e-6)), `rloo` (R − mean of the "
            "group's other rewards) or `reinforce` (R itself).",
            choices=list(_REWARD_ADVANTAGE_FNS),
        ),
    )


_ARGS_RULE = "a dict (a JSON object on the command line, e.g. '{\"clip_range\": 0.3}')"


@dataclass
class RolloutCorrectionArguments:
    """verl 0.9's rollout correction (`trl_ext.rollout_correction`), the same names and values as verl's
    `algorithm.rollout_correction`: π_old is the trained policy's log-probs (at generation time in the synchronous
    trainers, at the optimizer step in the asynchronous one), π_rollout the sampler's (vLLM's, or the rollout
    worker's)."""

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


@dataclass
class CompositionArguments:
    """The composition fields of every GRPO-family config (Trinity-RFT's `*_args` dicts and `kl_penalty_fn`): the
    arguments of a policy loss / advantage function chosen in place of the algorithm's, and the KL penalty on the
    rewards. The choices themselves (`policy_loss_fn`, `advantage_fn`) are the algorithm's own fields, whose
    defaults are its record's (`algorithm_fields`)."""

    policy_loss_fn_args: dict[str, Any] | str | None = field(
        default=None,
        metadata=_help(
            f"Arguments of the policy loss `policy_loss_fn`, by the loss's argument names: {_ARGS_RULE}. Validated "
            "against the loss's arguments; an argument also set through its own field must agree with it."
        ),
    )
    advantage_fn_args: dict[str, Any] | str | None = field(
        default=None,
        metadata=_help(
            f"Arguments of the advantage function `advantage_fn`, by its argument names: {_ARGS_RULE}. Validated "
            "against the function's arguments; an argument also set through its own field must agree with it."
        ),
    )
    kl_penalty_fn: str = field(
        default="none",
        metadata=_help(
            "KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every "
            "completion token, the outcome score on the last one, before the advantage is computed. The KL "
            "estimator (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a "
            "reference model (loaded even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, "
            "`remax`, the `*_verl` ones) see them per token; the per-sample estimators see each completion's sum, "
            "score − coef·Σ_t KL_t, as the reference's trainer-side (`*_verl`) estimators compute it.",
            choices=sorted(KL_FNS),
        ),
    )
    kl_penalty_fn_args: dict[str, Any] | str | None = field(
        default=None,
        metadata=_help(
            "Arguments of the KL penalty: `kl_coef` (default 0.001, ≥ 0), `adaptive` (default false: the adaptive "
            "controller of Ziegler et al. 2019, coef ← coef·(1 + clip(KL/target_kl − 1, ±0.2)·sequences/horizon) "
            "after every generation batch), `target_kl` and `horizon` (both needed when adaptive), as "
            f"{_ARGS_RULE}."
        ),
    )


def composition_field_help(kind: str, spec: Any) -> str:
    """The help text of an algorithm config's `policy_loss_fn` / `advantage_fn` field (default: the record's)."""
    default = getattr(spec, kind)
    if kind == "policy_loss_fn":
        text = (
            f"The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `{default}`, the "
            f"{spec.name} algorithm's. Another loss composes with the algorithm's advantage, KL and entropy terms"
        )
        if spec.trainer == "mix":
            text = (
                f"The policy loss; default `{default}`, the {spec.name} algorithm's mix of RL on the rollouts and SFT "
                "on the expert rows. Another mixing loss (`mix`, `mix_chord`) replaces the mix; any other "
                "`trl_ext.losses` name replaces the PPO part on the rollout rows (CHORD with SAPO: `sapo`), each "
                "part still normalized over its own rows"
            )
        what = "loss"
    else:
        text = (
            f"The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default "
            f"`{default}`, the {spec.name} algorithm's. Another one composes with the algorithm's loss"
        )
        what = "function"
    return (
        f"{text}: its arguments go in `{kind}_args`. The fields of `{default}`'s arguments configure `{default}`; "
        f"with another {what}, one that is set is passed on to it if it takes the argument (else an error)."
    )


# ---------------------------------------------------------------------------------------------------------------
# DPO's own arguments (beyond trl.DPOConfig's)
# ---------------------------------------------------------------------------------------------------------------


_DPO_KL_ESTIMATOR = kl_estimator_field(
    get_algorithm("dpo").kl_loss_fn, "the KL term `kl_coef`·token-mean(KL(π‖π_ref)) over the completion tokens"
)


@dataclass
class DPOKLArguments:
    """The KL term of Trinity-RFT's DPO algorithm: `kl_coef`·token-mean(KL(π‖π_ref)) over the completion tokens."""

    kl_loss_fn: str = _DPO_KL_ESTIMATOR[2]
    kl_coef: float = field(
        default=DocumentedDefault(KLFn.argument("kl_coef").default),
        metadata={
            "help": f"Coefficient of the KL term (Trinity-RFT's default {KLFn.argument('kl_coef').default}); 0 or "
            "`kl_loss_fn='none'` turns it off. Needs per-token reference log-probs: with "
            "`precompute_ref_log_probs=True` the term is off unless set (then an error)."
        },
    )


# ---------------------------------------------------------------------------------------------------------------
# The fields an algorithm's own config declares over its family's config base
# ---------------------------------------------------------------------------------------------------------------


_TRL_BATCH_SIZE = 8
"""`transformers.TrainingArguments`' default `per_device_train_batch_size`: a record whose group size
(`repeat_times`) is larger gets a config whose default batch is one group (`algorithm_fields`)."""


def algorithm_fields(name: str, base: type | None = None) -> list[tuple[str, Any, Any]]:
    """`(name, type, field)` of each field that algorithm `name`'s config declares over its family's config base,
    read from its record: the KL estimator, the entropy bonus and the KL penalty with the record's defaults, the group
    size (`repeat_times`, where the family samples groups; a group larger than TRL's default batch of 8 rows also sets
    the batch: one group), the fields of its policy loss's and its advantage's arguments (`argument_field`, with the
    record's `argument_defaults` and `paper_settings`), then the fields of the config `base` whose default the
    record's `paper_settings` change (`paper_setting_field`; none without a `base`).
    The built-in configs' class statements (`trl_ext.trainers.grpo.algorithms`) and the classes built for a record
    registered later (`trl_ext.trainers.core.classes`) both take their fields from here."""
    spec = get_algorithm(name)
    family = spec.family
    fields: list[tuple[str, Any, Any]] = []
    if "kl_loss_fn" in family.components:
        # the record's estimator as the default, marked as not given, so that TRL's own loss can default to TRL's
        # estimator (`GRPOFamilyConfig.uses_trl_loss`)
        metadata = GRPO_KL_ARGUMENTS.__dataclass_fields__["kl_loss_fn"].metadata
        fields.append(("kl_loss_fn", str, field(default=documented_default(spec.kl_loss_fn), metadata=metadata)))
    if "entropy_loss_fn" in family.components:
        fields.append(("entropy_loss_fn", str, entropy_field(spec.entropy_loss_fn, family.sample_strategy == "mix")))
    if family.per_algorithm_classes:  # the configs built on the records compose a KL penalty (`CompositionArguments`)
        metadata = CompositionArguments.__dataclass_fields__["kl_penalty_fn"].metadata
        fields.append(("kl_penalty_fn", str, field(default=spec.kl_penalty_fn, metadata=metadata)))
    if family.group_size_field:
        text = (
            f"Completions sampled per prompt (the group of the group-relative advantages): the {spec.name} "
            f"algorithm's group size, Trinity-RFT's `repeat_times`."
        )
        fields.append((family.group_size_field, int, field(default=spec.repeat_times, metadata=_help(text))))
        if spec.repeat_times > _TRL_BATCH_SIZE:  # TRL's default batch would hold no whole group: one group per batch
            text = (
                f"Rows per device and micro-batch: {spec.repeat_times} (TRL: {_TRL_BATCH_SIZE}), one group of the "
                f"{spec.name} algorithm's `num_generations={spec.repeat_times}`, so that the default generation batch "
                "holds whole groups."
            )
            fields.append(("per_device_train_batch_size", int, field(default=spec.repeat_times, metadata=_help(text))))
    for kind in ("policy_loss_fn", "advantage_fn"):  # the composition: the algorithm's choice as the default
        if kind in family.components and getattr(spec, kind) is not None and family.per_algorithm_classes:
            text = composition_field_help(kind, spec)
            fields.append((kind, str, field(default=getattr(spec, kind), metadata=_help(text))))
    defaults = {**dict(spec.argument_defaults), **dict(spec.paper_settings)}
    taken: set[str] = set()
    if "policy_loss_fn" in family.components:
        loss = POLICY_LOSSES[spec.policy_loss_fn]
        fields += [argument_field(arg, loss, LossArguments, defaults) for arg in config_arguments(loss)]
        taken |= {arg.name for arg in config_arguments(loss)}
    if "advantage_fn" in family.components and spec.advantage_fn is not None:
        advantage = ADVANTAGE_FNS[spec.advantage_fn]
        fields += [argument_field(arg, advantage, AdvantageArguments, defaults) for arg in config_arguments(advantage)]
        taken |= {arg.name for arg in config_arguments(advantage)}
    unknown = sorted(set(dict(spec.argument_defaults)) - taken)
    if unknown:
        raise ValueError(
            f"algorithm {name!r}: argument_defaults names {', '.join(map(repr, unknown))}, which neither its policy "
            f"loss {spec.policy_loss_fn!r} nor its advantage {spec.advantage_fn!r} takes; name one of their arguments"
        )
    if base is not None:
        papers = [(key, value) for key, value in spec.paper_settings if key not in taken]
        fields += [paper_setting_field(spec, base, key, value) for key, value in papers]
    return fields


def paper_setting_field(spec: Any, base: type, name: str, value: Any) -> tuple[str, Any, Any]:
    """`(name, type, field)`: field `name` of the config `base` with the default `value` of the paper of `spec`'s
    algorithm (its record's `paper_settings`), its help saying so."""
    declared = getattr(base, "__dataclass_fields__", {}).get(name)
    if declared is None:
        raise ValueError(
            f"algorithm {spec.name!r}: paper_settings names {name!r}, which is neither an argument of its policy loss "
            f"{spec.policy_loss_fn!r} or advantage {spec.advantage_fn!r} nor a field of {base.__name__}"
        )
    kind = next(inspect.get_annotations(c, eval_str=True)[name] for c in base.__mro__ if name in c.__annotations__)
    text = f"{declared.metadata.get('help', '')} Default here: the {spec.display_name} paper's, {value!r}."
    return name, kind, field(default=value, metadata={**declared.metadata, "help": text})


def algorithm_field(name: str, field_name: str, base: type | None = None) -> Any:
    """The dataclass field `field_name` of algorithm `name`'s config (a fresh `dataclasses.Field` each call), as
    `algorithm_fields` derives it: what a generated class statement assigns, `tau_pos: float =
    algorithm_field("sapo", "tau_pos")`."""
    for candidate, _, value in algorithm_fields(name, base):
        if candidate == field_name:
            return value
    raise ValueError(f"algorithm {name!r}: its config declares no field {field_name!r}")
