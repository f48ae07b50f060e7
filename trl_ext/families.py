"""Trainer families: one record per family, the single place that says how a kind of trainer is put together.

    from trl_ext.families import get_family
    family = get_family("grpo")
    family.class_names   # ('GRPOFamilyConfig', 'GRPOFamilyTrainer')
    family.components    # ('policy_loss_fn', 'advantage_fn', 'kl_loss_fn', 'entropy_loss_fn')

A family is a TRL trainer adapted once (`trl.GRPOTrainer`, `trl.DPOTrainer`, `trl.SFTTrainer`) that trains every
algorithm whose record names it (`AlgorithmSpec.trainer`). Its record states: the names of its config and trainer
classes, the component kinds its configs take, the data it trains on (`schema`, Trinity-RFT's name: it also picks
the script of `trl-ext train`), and the family's parts of the run summary and the model card. Whether an algorithm
gets classes of its own (`SAPOConfig`, `SAPOTrainer`) or is the family's single algorithm with hand-written classes
(`DPOConfig`, `SFTConfig`) is `per_algorithm_classes`.

Adding a family is one `register_family(TrainerFamily(...))` and, beside its trainer, one
`register_family_classes(...)` (`trl_ext.trainers.core.family_classes`); adding an algorithm to a family is one
`register_algorithm(AlgorithmSpec(...))`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

COMPONENT_KINDS = ("policy_loss_fn", "advantage_fn", "kl_loss_fn", "entropy_loss_fn")
"""The component kinds a family's configs may take (Trinity-RFT's names)."""

SCHEMAS = ("experience", "dpo", "sft", "cpt")
"""The data a family trains on (Trinity-RFT's `schema`): `experience` (prompts; the trainer generates and scores
completions), `dpo` (preference pairs), `sft` (demonstrations), `cpt` (plain text, every token trained)."""


def _generation_geometry(args: Any) -> str:
    prompts = args.generation_batch_size // args.num_generations
    return (
        f"generation  {args.generation_batch_size} completions per generation batch = {prompts} prompts x "
        f"num_generations {args.num_generations}; max_completion_length {args.max_completion_length}, "
        f"temperature {args.temperature:g}"
    )


def _async_geometry(args: Any) -> str:
    return (
        f"rollouts    num_generations {args.num_generations} per prompt, max_completion_length "
        f"{args.max_completion_length}, temperature {args.temperature:g}; samples at most max_staleness "
        f"{args.max_staleness} versions old, weights synced every {args.weight_sync_steps} step(s)"
    )


def _sequence_length(args: Any) -> str:
    if getattr(args, "max_length", None) is None:
        return "length      no truncation (max_length None)"
    return f"length      max_length {args.max_length} tokens per sequence"


@dataclass(frozen=True)
class TrainerFamily:
    """One trainer family's record (frozen; `register_family` adds one).

    Attributes:
        name: The family's name, which `AlgorithmSpec.trainer` gives.
        description: One line on what the family trains on and how.
        class_names: The names of its config and trainer class, `("GRPOFamilyConfig", "GRPOFamilyTrainer")`: the
            bases of its algorithms' classes, or the classes of its single algorithm (`("DPOConfig",
            "DPOTrainer")`). The classes are registered under these names by the trainers' package
            (`trl_ext.trainers.core.family_classes`).
        components: The component kinds (`COMPONENT_KINDS`, `policy_loss_fn` included) an algorithm of the family
            chooses (its config gets their arguments as fields); a record naming an advantage for a family without
            one is refused. Empty for a family with an `objective`.
        schema: The data it trains on (`SCHEMAS`); `trl-ext train` runs the script of that data
            (`trl_ext.scripts.script_for`).
        per_algorithm_classes: Each algorithm gets its own config and trainer class, built from its record
            (`SAPOConfig`, ...); otherwise the family has one algorithm, whose classes are the family's hand-written
            ones (`register_algorithm` refuses a second).
        group_size_field: The config field whose default is the record's `repeat_times` (`num_generations`), if the
            family samples groups.
        uses_critic: Whether the trainer trains a value model (a record with `use_critic=True` needs one).
        kl_coef_field: The config field of the KL term's coefficient (`beta`, DPO's `kl_coef`).
        loss_fields_from_trl: TRL config fields that are the loss's own arguments (DPO's `beta`), which the model
            card and the run summary list among the algorithm's settings.
        batch_unit: The run summary's word for a row (`completions`, `pairs`, `sequences`).
        geometry: The run summary's family-specific line from the config (the generation batch, or the sequence
            length).
        sample_strategy: Trinity-RFT's name for how a batch is sampled (`mix`: expert rows mixed into the rollouts).
        loss_inputs: What the trainer hands a policy loss (a composed loss that needs anything else cannot train
            there: the config says which input and who provides it, `input_source`).
        advantage_inputs: What the trainer hands an advantage function, likewise.
        async_family: The family whose trainer trains this family's algorithms asynchronously (`trl-ext train
            --asynchronous true`): `async`, where each record's config has an asynchronous form (`Async<Config>`,
            trained by `AsyncGRPOTrainer`); None where they train synchronously only.
        synchronous_only: Why a family that generates has no asynchronous form yet (the end of the error that
            refuses `--asynchronous true`).
        objective: For a family whose loss is its TRL trainer's own objective, ported to `trl_ext.losses` and not
            composed from parts (a divergence over the whole vocabulary, such as GKD's): the ported loss's dotted
            name (`trl_ext.losses.gkd.gkd_loss`). Such a family has no `components` and its records no
            `policy_loss_fn`.
        script: The `trl_ext.scripts` module that trains the family (`trl-ext train`, the examples); empty: the
            script of its `schema` (`grpo` for `experience`, `dpo`, `sft`, `cpt`).

    Raises:
        ValueError: A missing part, `class_names` that are not two class names, `components` without
            `policy_loss_fn` (for a family without an `objective`; a family with one takes none) or naming another
            kind, or an unknown `schema`.
    """

    name: str
    description: str
    class_names: tuple[str, str]
    components: tuple[str, ...]
    schema: str
    per_algorithm_classes: bool = True
    group_size_field: str | None = None
    uses_critic: bool = False
    kl_coef_field: str | None = "beta"
    loss_fields_from_trl: tuple[str, ...] = ()
    batch_unit: str = "completions"
    geometry: Callable[[Any], str] = field(default=_generation_geometry, compare=False)
    sample_strategy: str = "default"
    loss_inputs: tuple[str, ...] = ()
    advantage_inputs: tuple[str, ...] = ()
    async_family: str | None = None
    synchronous_only: str = ""
    objective: str = ""
    script: str = ""

    def __post_init__(self) -> None:
        missing = [name for name in ("name", "description", "class_names") if not getattr(self, name)]
        if missing:
            raise ValueError(f"trainer family {self.name!r}: missing part(s) {', '.join(missing)}")
        names = self.class_names
        if not (isinstance(names, tuple) and len(names) == 2 and all(str(n).isidentifier() for n in names)):
            raise ValueError(
                f"trainer family {self.name!r}: class_names={names!r} must be (config class name, trainer class name)"
            )
        unknown = [kind for kind in self.components if kind not in COMPONENT_KINDS]
        if self.objective and self.components:
            raise ValueError(
                f"trainer family {self.name!r}: components={self.components!r} is not valid with objective="
                f"{self.objective!r}; a family whose loss is its trainer's own objective composes no parts: ()"
            )
        if unknown or not (self.objective or "policy_loss_fn" in self.components):
            raise ValueError(
                f"trainer family {self.name!r}: components={self.components!r} is not valid; must include "
                f"'policy_loss_fn' and name only {', '.join(map(repr, COMPONENT_KINDS))} (or be () with an objective)"
            )
        if self.schema not in SCHEMAS:
            raise ValueError(
                f"trainer family {self.name!r}: schema={self.schema!r} is not valid; must be one of "
                f"{', '.join(map(repr, SCHEMAS))}"
            )


FAMILIES: dict[str, TrainerFamily] = {}


def register_family(family: TrainerFamily) -> TrainerFamily:
    """Add a trainer family; a name registered twice is an error.

    Args:
        family: The record.

    Returns:
        `family` itself.

    Raises:
        TypeError: `family` is not a `TrainerFamily`.
        ValueError: Its name is registered already.
    """
    if not isinstance(family, TrainerFamily):
        raise TypeError(f"register_family takes a TrainerFamily, got {family!r}")
    if family.name in FAMILIES:
        raise ValueError(f"trainer family {family.name!r} is already registered")
    FAMILIES[family.name] = family
    return family


def get_family(name: str) -> TrainerFamily:
    """The record of trainer family `name`.

    Args:
        name: A registered family (`FAMILIES`: `grpo`, `mix`, `distill`, `critic`, `async`, `dpo`, `sft`, `cpt`).

    Returns:
        Its record.

    Raises:
        ValueError: An unknown name (listing the registered ones).
    """
    try:
        return FAMILIES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown trainer family {name!r}; registered: {', '.join(FAMILIES)}") from None


# What the GRPO-family trainers hand the parts: the loss's batch (window counts included) and, to the advantage
# function, the gathered masks, a seeded generator, the sampling policy's log-probs and entropies (one extra forward
# pass when TRL has not computed them) and ReMax's greedy baselines (one greedy completion per prompt).
_WINDOW = ("global_valid_toks", "global_valid_seqs", "normalizer")
_ROLLOUT_LOSS_INPUTS = ("logprob", "old_logprob", "action_mask", "advantages", "importance_sampling_ratio", "step")
_ROLLOUT_LOSS_INPUTS += _WINDOW
_ROLLOUT_ADVANTAGE_INPUTS = ("response_mask", "completion_mask", "generator", "logprobs", "entropy", "reward_baselines")
_TURN_INPUTS = ("run_ids", "state_ids")  # the model turns of TRL's multi-turn rollouts
# Each reward function's rewards and weights (GDPO) and Σπ² per token (one more forward pass; the optimal token
# baseline), from the reward scoring of the trainers that generate with `GRPOScoring`.
_SCORING_INPUTS = ("reward_components", "reward_weights", "sum_pi_squared")

INPUT_SOURCES: dict[str, str] = {
    "expert_mask": "which only the MIX family's trainer provides (expert rows mixed into the rollouts: MIXConfig, "
    "MIXCHORDConfig)",
    "expert_valid_toks": "which only the MIX family's trainer provides (MIXConfig, MIXCHORDConfig)",
    "teacher_logprob": "a teacher's per-token log-probs, which only the on-policy distillation trainer computes "
    "(OnPolicyDistillConfig)",
    "old_logprob": "the sampling policy's per-token log-probs at advantage time, which only the on-policy "
    "distillation trainer hands an advantage function (OnPolicyDistillConfig)",
    "ref_logprob": "per-token reference log-probs of paired rows (a preference loss: train it with DPOConfig)",
    "reward_baselines": "the rewards of greedy completions (ReMax), which only the grpo family's trainer and the "
    "asynchronous trainer's transformers worker generate (GRPOConfig, ..., AsyncGRPOConfig: the MIX trainer's "
    "batches also hold expert rows)",
    "reward_components": "each reward function's rewards, which the synchronous rollout trainers' scoring hands an "
    "advantage function (GRPOConfig, MIXConfig, PPOConfig, ...)",
    "reward_weights": "the reward functions' weights, which the synchronous rollout trainers' scoring hands an "
    "advantage function (GRPOConfig, MIXConfig, PPOConfig, ...)",
    "sum_pi_squared": "the sampling policy's Σπ² per token, which the synchronous rollout trainers compute "
    "(GRPOConfig, MIXConfig, PPOConfig, ...)",
    "values": "the critic's per-token values, which only the critic PPO trainers compute (PPOConfig, AsyncPPOConfig)",
    "run_ids": "the run each step of a multi-turn episode belongs to, which only the grpo family's trainer and the "
    "asynchronous trainer record (the model turns of multi-turn rollouts: GRPOConfig, MultiStepGRPOConfig, "
    "GiGPOConfig, AsyncGiGPOConfig, ...)",
    "state_ids": "the environment state each step of a multi-turn episode starts from, which only the grpo family's "
    "trainer and the asynchronous trainer record (GRPOConfig, GiGPOConfig, AsyncGiGPOConfig, ...)",
    "necs": "a per-token statistic of Clip-V (arXiv 2602.03392) that Trinity-RFT 0.6.0 takes as an input but "
    "computes nowhere, and whose definition trl_ext could not verify against the paper: use `clipb`, whose "
    "inputs (log-probs and entropies) the trainer computes",
}
"""Why a trainer cannot give a composed part an input it needs (the end of the config's error message)."""


def input_source(name: str) -> str:
    """The end of the message that refuses a part needing input `name` (`INPUT_SOURCES`)."""
    return INPUT_SOURCES.get(name, "which this trainer does not compute")


register_family(TrainerFamily(
    "grpo", "`trl.GRPOTrainer` on its own rollouts: TRL generates and scores, the algorithm's advantage and loss "
    "train.",
    class_names=("GRPOFamilyConfig", "GRPOFamilyTrainer"), components=COMPONENT_KINDS, schema="experience",
    group_size_field="num_generations", loss_inputs=_ROLLOUT_LOSS_INPUTS,
    advantage_inputs=(*_ROLLOUT_ADVANTAGE_INPUTS, *_SCORING_INPUTS, *_TURN_INPUTS), async_family="async",
))  # fmt: skip
register_family(TrainerFamily(
    "mix", "Rollouts and expert demonstrations in one batch (MIX, CHORD): RL on the rollouts, SFT on the experts.",
    class_names=("MIXFamilyConfig", "MIXFamilyTrainer"), components=COMPONENT_KINDS, schema="experience",
    group_size_field="num_generations", sample_strategy="mix",
    loss_inputs=(*_ROLLOUT_LOSS_INPUTS, "expert_mask", "expert_valid_toks", "expert_valid_seqs"),
    advantage_inputs=(*(key for key in _ROLLOUT_ADVANTAGE_INPUTS if key != "reward_baselines"), *_SCORING_INPUTS),
    async_family="async",
))  # fmt: skip
register_family(TrainerFamily(
    "distill", "Rollouts scored token by token by a frozen teacher (on-policy distillation).",
    class_names=("DistillFamilyConfig", "DistillFamilyTrainer"), components=COMPONENT_KINDS, schema="experience",
    group_size_field="num_generations", loss_inputs=_ROLLOUT_LOSS_INPUTS,
    advantage_inputs=(*_ROLLOUT_ADVANTAGE_INPUTS, "teacher_logprob", "old_logprob", "teacher_valid_mask"),
    async_family="async",
))  # fmt: skip
register_family(TrainerFamily(
    "critic", "Rollouts with a value model trained beside the policy (critic PPO): GAE advantages from its values.",
    class_names=("CriticFamilyConfig", "CriticFamilyTrainer"), components=COMPONENT_KINDS, schema="experience",
    group_size_field="num_generations", uses_critic=True, loss_inputs=_ROLLOUT_LOSS_INPUTS,
    advantage_inputs=(*_ROLLOUT_ADVANTAGE_INPUTS, *_SCORING_INPUTS, "values"), async_family="async",
))  # fmt: skip
register_family(TrainerFamily(
    "async", "`AsyncGRPOTrainer`: a rollout worker generates and scores groups while the trainer trains on them, "
    "up to `max_staleness` policy versions old (TRL's experimental async GRPO).",
    class_names=("AsyncGRPOConfig", "AsyncGRPOTrainer"), components=COMPONENT_KINDS, schema="experience",
    per_algorithm_classes=False, group_size_field="num_generations",
    loss_inputs=(*_ROLLOUT_LOSS_INPUTS, "prox_logprob", "window_selected", "expert_mask", "expert_valid_toks",
                 "expert_valid_seqs"),
    advantage_inputs=("response_mask", "completion_mask", "generator", "old_logprob", "teacher_logprob",
                      "teacher_valid_mask", "reward_baselines", "values", *_TURN_INPUTS),
    geometry=_async_geometry, async_family="async",
))  # fmt: skip
register_family(TrainerFamily(
    "dpo", "`trl.DPOTrainer` on (chosen, rejected) pairs.",
    class_names=("DPOConfig", "DPOTrainer"), components=("policy_loss_fn", "kl_loss_fn"), schema="dpo",
    per_algorithm_classes=False, kl_coef_field="kl_coef", loss_fields_from_trl=("label_smoothing", "beta"),
    batch_unit="pairs", geometry=_sequence_length,
))  # fmt: skip
register_family(TrainerFamily(
    "sft", "`trl.SFTTrainer` on demonstrations, with Trinity-RFT's SFT token weightings.",
    class_names=("SFTConfig", "SFTTrainer"), components=("policy_loss_fn",), schema="sft",
    per_algorithm_classes=False, kl_coef_field=None, batch_unit="sequences", geometry=_sequence_length,
))  # fmt: skip
register_family(TrainerFamily(
    "cpt", "`trl.SFTTrainer` on plain text (continued pretraining): the loss on every token of the text column.",
    class_names=("CPTConfig", "CPTTrainer"), components=("policy_loss_fn",), schema="cpt",
    per_algorithm_classes=False, kl_coef_field=None, batch_unit="sequences", geometry=_sequence_length,
))  # fmt: skip
register_family(TrainerFamily(
    "online_dpo",
    "TRL's experimental `OnlineDPOTrainer`: two sampled completions per prompt, ranked by reward, train DPO.",
    class_names=("OnlineDPOConfig", "OnlineDPOTrainer"), components=("policy_loss_fn",), schema="experience",
    per_algorithm_classes=False, kl_coef_field=None, loss_fields_from_trl=("beta", "loss_type", "missing_eos_penalty"),
    batch_unit="prompts", loss_inputs=("logprob", "ref_logprob", "action_mask"), script="online_dpo",
    geometry=lambda args: (
        f"generation  2 completions per prompt, ranked by reward; max_new_tokens {args.max_new_tokens}, temperature "
        f"{args.temperature:g}, max_length {args.max_length}"
    ),
    synchronous_only="Online DPO ranks the two completions of each prompt and trains on the pair in the same step; "
    "TRL's asynchronous trainer trains GRPO-family losses on scored groups, not on ranked pairs",
))  # fmt: skip
register_family(TrainerFamily(
    "sdft", "TRL's experimental `SDFTTrainer`: the model prompted with a demonstration teaches itself without it.",
    class_names=("SDFTConfig", "SDFTTrainer"), components=(), schema="experience", per_algorithm_classes=False,
    kl_coef_field=None, objective="trl_ext.losses.self_distillation.SelfDistillationLoss", script="sdft",
    loss_fields_from_trl=("distillation_mode", "distillation_alpha", "distillation_topk", "distillation_add_tail",
                          "distillation_is_clip", "teacher_model_kind"),
    synchronous_only="SDFT distills each completion against the teacher's logits in the step that samples it; "
    "TRL's asynchronous trainer trains GRPO-family losses on scored groups",
))  # fmt: skip
register_family(TrainerFamily(
    "a2po", "TRL's experimental `A2POTrainer`: V* from reference samples, then regression onto the optimal advantage.",
    class_names=("A2POConfig", "A2POTrainer"), components=("policy_loss_fn",), schema="experience",
    per_algorithm_classes=False, kl_coef_field=None,
    loss_fields_from_trl=("num_value_samples", "beta1", "beta2", "filter_all_incorrect"), batch_unit="prompts",
    loss_inputs=("logprob", "ref_logprob", "action_mask", "advantages", "global_valid_seqs"), script="a2po",
    geometry=lambda args: (
        f"generation  1 completion per prompt; stage 1: num_value_samples {args.num_value_samples} reference "
        f"completions per prompt for V*; max_completion_length {args.max_completion_length}, temperature "
        f"{args.temperature:g}"
    ),
    synchronous_only="A*-PO estimates V* over the whole dataset before training and regresses one completion per "
    "prompt onto it; TRL's asynchronous trainer trains GRPO-family losses on scored groups",
))  # fmt: skip
register_family(TrainerFamily(
    "tpo", "TRL's experimental `TPOTrainer` on (chosen, rejected, reference) triples: preference plus gold NLL.",
    class_names=("TPOConfig", "TPOTrainer"), components=("policy_loss_fn",), schema="dpo",
    per_algorithm_classes=False, kl_coef_field=None,
    loss_fields_from_trl=("loss_type", "beta", "label_smoothing", "tpo_alpha", "tpo_l_gamma"), batch_unit="triples",
    geometry=_sequence_length, script="tpo",
    loss_inputs=("logprob", "action_mask", "expert_mask", "global_valid_seqs", "expert_valid_seqs",
                 "expert_valid_toks"),
))  # fmt: skip
register_family(TrainerFamily(
    "gkd", "TRL's experimental `GKDTrainer`: generalized JSD to a teacher on dataset and student completions.",
    class_names=("GKDConfig", "GKDTrainer"), components=(), schema="sft", per_algorithm_classes=False,
    kl_coef_field=None, objective="trl_ext.losses.gkd.gkd_loss", script="gkd", batch_unit="sequences",
    loss_fields_from_trl=("lmbda", "beta", "temperature", "seq_kd", "max_new_tokens"),
    geometry=lambda args: (
        f"distill     teacher {args.teacher_model_name_or_path or '(the trainer argument)'}; lmbda {args.lmbda:g} of "
        f"the batches completed by the student (max_new_tokens {args.max_new_tokens}, temperature "
        f"{args.temperature:g}){', the others by the teacher (seq_kd)' if args.seq_kd else ''}; beta {args.beta:g}"
    ),
))  # fmt: skip
register_family(TrainerFamily(
    "iw_opd", "TRL's experimental `IWOPDTrainer`: a teacher's log-ratio on sampled tokens, importance-weighted.",
    class_names=("IWOPDConfig", "IWOPDTrainer"), components=(), schema="experience", per_algorithm_classes=False,
    kl_coef_field=None, objective="trl_ext.losses.iw_opd.IWOPDObjective", script="iw_opd",
    synchronous_only="IW-OPD is TRL's IWOPDTrainer objective, scored by its teacher on each generated batch; TRL's "
    "asynchronous trainer trains GRPO-family losses on scored groups",
    loss_fields_from_trl=("distillation_objective", "iw_opd_gamma", "iw_opd_epsilon", "beta", "temperature",
                          "loss_top_k", "loss_add_tail", "lmbda"),
    geometry=lambda args: (
        "distill     teacher "
        + (f"server {args.teacher_model_server_url}" if args.use_teacher_server
           else args.teacher_model_name_or_path or "(the trainer argument)")
        + f"; {args.generation_batch_size} prompts x num_generations {args.num_generations} per process and step, "
        f"lmbda {args.lmbda:g} of the steps on the student's completions (max_completion_length "
        f"{args.max_completion_length}, temperature {args.temperature:g}); objective {args.distillation_objective}"
    ),
))  # fmt: skip
register_family(TrainerFamily(
    "gold", "TRL's experimental `GOLDTrainer`: distillation from a teacher of any tokenizer (ULD) or by JSD.",
    class_names=("GOLDConfig", "GOLDTrainer"), components=(), schema="sft", per_algorithm_classes=False,
    kl_coef_field=None, objective="trl_ext.losses.gold.ULDLoss", script="gold", batch_unit="sequences",
    loss_fields_from_trl=("lmbda", "beta", "temperature", "use_uld_loss", "max_completion_length"),
    geometry=lambda args: (
        f"distill     teacher {args.teacher_model_name_or_path or '(the trainer argument)'}; lmbda {args.lmbda:g} of "
        f"the micro-batches completed by the student (max_completion_length {args.max_completion_length}, "
        f"temperature {args.temperature:g}); "
        + (f"ULD ({'hybrid, ' if args.uld_use_hybrid_loss else ''}{args.uld_token_merge_strategy} merge)"
           if args.use_uld_loss else f"generalized JSD, beta {args.beta:g}")
    ),
))  # fmt: skip
register_family(TrainerFamily(
    "sdpo", "TRL's experimental `SDPOTrainer`: GRPO plus self-distillation from the model shown a successful sibling.",
    class_names=("SDPOConfig", "SDPOTrainer"), components=(), schema="experience", per_algorithm_classes=False,
    kl_coef_field=None, objective="trl_ext.losses.self_distillation.SDPOLoss", script="sdpo",
    loss_fields_from_trl=("distillation_weight", "distillation_mode", "distillation_alpha", "distillation_topk",
                          "distillation_is_clip", "loss_type", "epsilon", "teacher_model_kind"),
    synchronous_only="SDPO builds each completion's teacher from its group's rewards and distills it in the step that "
    "samples it; TRL's asynchronous trainer trains GRPO-family losses on scored groups",
))  # fmt: skip
