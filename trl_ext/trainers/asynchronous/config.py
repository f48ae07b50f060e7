"""Config of the asynchronous trainer: TRL's experimental `AsyncGRPOConfig` plus any trl_ext loss and estimator.

`AsyncGRPOConfig` keeps every field of `trl.experimental.async_grpo.AsyncGRPOConfig` (the vLLM server, the token
budget, `max_staleness`, `weight_sync_steps`, `max_inflight_tasks`, the worker's heartbeat, ...) and adds what the
synchronous GRPO-family configs have: the policy loss (`policy_loss_fn`, `policy_loss_fn_args` and the `ppo` loss's
fields), the group advantage (`advantage_fn`, `advantage_fn_args` and the `grpo` advantage's fields), the KL term
(`beta`, `kl_loss_fn`), the entropy bonus (`entropy_coef`), verl's rollout correction against the sampler
(`rollout_is`, `rollout_rs`) and the proximal policy of AReaL's decoupled PPO (`prox_logp_method`). The parts are
resolved once, by the same code as the synchronous configs (`composition.ComposedComponents`), from the
`async_grpo` record.

What an asynchronous run cannot do is refused here, each naming its field: TRL's own loss fields (`epsilon`,
`epsilon_high`: use `clip_range_low` / `clip_range_high`), a KL penalty in the reward (the worker has no reference
model), an advantage that needs what neither the worker (group estimators) nor the trainer's optimizer window
(token-level ones) computes (multi-turn, values: `trl_ext.async_rollout.check_async_estimator`), `max_staleness` < 0.
ReMax's greedy baselines are made by trl_ext's transformers worker; with TRL's vLLM worker the trainer refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from trl.experimental.async_grpo import AsyncGRPOConfig as _TRLAsyncGRPOConfig

from ..._validation import check_bool, check_choice, check_number
from ...algorithms import get_algorithm
from ...async_rollout.scoring import check_async_estimator
from ...losses.kl import KL_FNS
from ..core.arguments import (
    GRPO_KL_ARGUMENTS,
    CompositionArguments,
    RolloutCorrectionArguments,
    _help,
    algorithm_field,
    composition_field_help,
)
from ..core.composition import ComposedComponents
from ..core.config_fields import resolve_kl_coefficient
from ..core.config_rules import COMPONENTS, FIELDS, GIVEN, check_rules, rules_for
from ..core.documented_defaults import DocumentedDefault
from ..core.step_arguments import LossStepArguments, check_loss_step_fields
from ..grpo.overlong_reward import OverlongRewardArguments
from .trl_field_checks import check_trl_async_fields

ALGORITHM = "async_grpo"
ROLLOUT_BACKENDS = ("vllm", "transformers")
"""Who generates: TRL's vLLM worker (`trl vllm-serve`), or trl_ext's transformers worker in its own process."""
PROX_LOGP_METHODS = ("recompute", "loglinear")
"""How the decoupled loss gets π_prox: the weights at the start of the optimizer step, or AReaL's approximation."""


@dataclass
class AsyncGRPOConfig(
    ComposedComponents,
    CompositionArguments,
    OverlongRewardArguments,
    RolloutCorrectionArguments,
    GRPO_KL_ARGUMENTS,
    LossStepArguments,
    _TRLAsyncGRPOConfig,
):
    r"""
    Configuration of [`trl_ext.AsyncGRPOTrainer`]: TRL's `AsyncGRPOConfig` (generation decoupled from training,
    samples up to `max_staleness` policy versions old) with any trl_ext policy loss and group advantage.

    The defaults train TRL's objective: the `ppo` loss (PPO's clip against the sampler's log-probs μ without
    Trinity-RFT's dual clip, token-mean, TRL's global token normalization) on `grpo` advantages computed in the
    rollout worker as TRL's worker computes them (population std + 1e-8; 0 for a group with one scored sample).
    Trinity-RFT's objective is four settings away: `clip_ratio_c=3.0`, `std_unbiased=True`,
    `advantage_epsilon=1e-6`, `group_of_one="reward"`. Set `policy_loss_fn`
    (any loss of `trl_ext.losses`, its arguments in `policy_loss_fn_args`) and `advantage_fn` (a group estimator,
    `advantage_fn_args`) to compose others; for stale samples `decoupled_ppo` (AReaL), `m2po` or `rollout_is` /
    `rollout_rs`. `beta` > 0 adds the KL term to a frozen reference model (loaded for it), `entropy_coef` the
    entropy bonus. Every loss is normalized over the optimizer window, all micro-batches and processes.

    `rollout_backend="transformers"` generates with trl_ext's `TransformersRolloutWorker` in a process of its own
    (offline, CPU or one GPU); `"vllm"` (default) is TRL's worker against `trl vllm-serve`.
    """

    algorithm: ClassVar[str] = ALGORITHM
    trainer_family: ClassVar[str] = "async"
    has_teacher: ClassVar[bool] = False  # `AsyncDistillConfig`'s: a teacher scores the samples in the trainer
    has_critic: ClassVar[bool] = False  # `AsyncCriticConfig`'s: a value model trains beside the policy
    has_experts: ClassVar[bool] = False  # `AsyncMIXFamilyConfig`'s: expert demonstrations join the micro-batches
    entropy_choices: ClassVar[tuple[str, ...]] = ("default", "none")
    uses_trl_loss: ClassVar[bool] = False  # TRL's own loss fields are refused (`epsilon`, `epsilon_high`)
    _VALID_DICT_FIELDS: ClassVar[list[str]] = [
        *_TRLAsyncGRPOConfig._VALID_DICT_FIELDS,
        "policy_loss_fn_args",
        "advantage_fn_args",
    ]

    kl_loss_fn: str = algorithm_field(ALGORITHM, "kl_loss_fn")
    num_generations: int = algorithm_field(ALGORITHM, "num_generations")
    policy_loss_fn: str = field(
        default=get_algorithm(ALGORITHM).policy_loss_fn,
        metadata=_help(composition_field_help("policy_loss_fn", get_algorithm(ALGORITHM))),
    )
    advantage_fn: str = field(
        default=get_algorithm(ALGORITHM).advantage_fn,
        metadata=_help(composition_field_help("advantage_fn", get_algorithm(ALGORITHM))),
    )
    clip_range: float | None = algorithm_field(ALGORITHM, "clip_range")
    clip_range_low: float | None = algorithm_field(ALGORITHM, "clip_range_low")
    clip_range_high: float | None = algorithm_field(ALGORITHM, "clip_range_high")
    clip_ratio_c: float | None = algorithm_field(ALGORITHM, "clip_ratio_c")
    loss_agg_mode: str = algorithm_field(ALGORITHM, "loss_agg_mode")
    enable_sequence_masking: bool = algorithm_field(ALGORITHM, "enable_sequence_masking")
    delta_sequence_masking: float = algorithm_field(ALGORITHM, "delta_sequence_masking")
    fallback_to_policy_gradient: bool = algorithm_field(ALGORITHM, "fallback_to_policy_gradient")
    advantage_epsilon: float = algorithm_field(ALGORITHM, "advantage_epsilon")
    std_threshold: float | None = algorithm_field(ALGORITHM, "std_threshold")
    duplicate_experiences: bool = algorithm_field(ALGORITHM, "duplicate_experiences")
    rank_penalty: float | None = algorithm_field(ALGORITHM, "rank_penalty")
    std_cal_level: str = algorithm_field(ALGORITHM, "std_cal_level")
    std_unbiased: bool = algorithm_field(ALGORITHM, "std_unbiased")
    group_of_one: str = algorithm_field(ALGORITHM, "group_of_one")

    epsilon: float | None = field(
        default=None,
        metadata=_help("TRL's PPO clip; refused here: set `clip_range_low` (and `clip_range_high`)."),
    )
    epsilon_high: float | None = field(
        default=None,
        metadata=_help("TRL's upper PPO clip; refused here: set `clip_range_high`."),
    )
    beta: float = field(
        default=DocumentedDefault(0.0),
        metadata=_help(
            "KL coefficient β of the term β·agg(KL(π‖π_ref)) (estimator `kl_loss_fn`). Default 0.0: no KL term and "
            "no reference model; > 0 loads a frozen copy of the initial model and forwards it on the same packed rows."
        ),
    )
    entropy_loss_fn: str = field(
        default="default",
        metadata=_help(
            "Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; "
            "`none` disables it.",
            choices=["default", "none"],
        ),
    )
    entropy_coef: float = field(default=0.0, metadata=_help("Coefficient of the entropy bonus (0: off)."))
    prox_logp_method: str = field(
        default="recompute",
        metadata=_help(
            "π_prox of a loss that reads it (`decoupled_ppo`): `recompute` (default), the weights at the start of the "
            "optimizer step, i.e. the trained policy's own log-probs, detached (exact: this trainer takes one "
            "optimizer step per batch, so it costs no forward pass); `loglinear`, AReaL's approximation "
            "log π_prox ≈ log μ + α(log π − log μ), α = (v_prox − v_μ)/(v_π − v_μ) from the policy versions.",
            choices=list(PROX_LOGP_METHODS),
        ),
    )
    rollout_backend: str = field(
        default="vllm",
        metadata=_help(
            "Who generates: `vllm` (default), TRL's rollout worker against a `trl vllm-serve` server, weights over "
            "NCCL; `transformers`, trl_ext's `TransformersRolloutWorker` in a process of its own (offline; weights "
            "through shared memory every `weight_sync_steps`). Ignored when a `rollout_worker` is passed.",
            choices=list(ROLLOUT_BACKENDS),
        ),
    )
    rollout_batch_size: int | None = field(
        default=None,
        metadata=_help(
            "Completions per `generate` call of the transformers worker (a multiple of `num_generations`); default: "
            "one optimizer step's samples."
        ),
    )
    rollout_num_threads: int = field(
        default=1, metadata=_help("Torch threads of the transformers worker's process (its cores).")
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata=_help(
            "DAPO's dynamic sampling (arXiv 2503.14476 §3.2) in the rollout worker: a prompt group whose task rewards "
            "all agree (judged before the overlong penalty) is dropped before it reaches the queue, and the worker "
            "goes on generating; counted in `rollout/uniform_groups_total`. Needs num_generations >= 2."
        ),
    )

    # The composition machinery reads these; an asynchronous run has one meaning for each (no KL in the reward: the
    # worker has no reference model; the group's own std)
    scale_rewards: ClassVar[str] = "group"
    multi_objective_aggregation: ClassVar[str] = "sum_then_normalize"
    kl_penalty_fn_args: ClassVar[None] = None

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for name, use in (("epsilon", "clip_range_low"), ("epsilon_high", "clip_range_high")):
            if getattr(self, name) is not None:
                raise ValueError(
                    f"{owner}: {name}={getattr(self, name)!r} is TRL's PPO clip; trl_ext's loss takes it as {use} "
                    f"(the `ppo` loss's argument, or the chosen loss's in policy_loss_fn_args)"
                )
        check_number(owner, "max_staleness", self.max_staleness, ge=0, integer=True)
        check_number(owner, "weight_sync_steps", self.weight_sync_steps, ge=1, integer=True)
        check_trl_async_fields(self)  # the fields TRL adds to TrainingArguments, each against its rule
        check_choice(owner, "rollout_backend", self.rollout_backend, ROLLOUT_BACKENDS)
        check_choice(owner, "prox_logp_method", self.prox_logp_method, PROX_LOGP_METHODS)
        check_number(owner, "rollout_num_threads", self.rollout_num_threads, ge=1, integer=True)
        check_bool(owner, "dynamic_sampling", self.dynamic_sampling)
        self._check_overlong_reward()
        if self.rollout_batch_size is not None:
            check_number(owner, "rollout_batch_size", self.rollout_batch_size, ge=1, integer=True)
        check_choice(owner, "kl_loss_fn", self.kl_loss_fn, sorted(KL_FNS))  # read only with beta > 0, checked always
        check_choice(owner, "entropy_loss_fn", self.entropy_loss_fn, self.entropy_choices)
        check_number(owner, "entropy_coef", self.entropy_coef)
        self._check_composition_fields()
        if self.kl_penalty_fn != "none":
            raise ValueError(
                f"{owner}: kl_penalty_fn={self.kl_penalty_fn!r} puts a KL to a reference model into the rewards, but "
                "the rewards are scored in the rollout worker, which has no reference model; use the KL term in the "
                "loss (beta > 0, kl_loss_fn) or leave kl_penalty_fn='none'"
            )
        self.build_rollout_correction()  # each rollout_* field checked, naming it
        check_loss_step_fields(self)
        # the rules between fields (`config_rules`; those the synchronous configs have too are the same objects)
        check_rules(self, rules_for(self, GIVEN))
        self.beta = resolve_kl_coefficient(owner, self.kl_loss_fn, "beta", self.beta)
        check_number(owner, "beta", self.beta, ge=0)
        check_rules(self, rules_for(self, FIELDS))
        super().__post_init__()
        self._check_pairing()
        try:
            check_async_estimator(self.components.advantage_fn, teacher=self.has_teacher, critic=self.has_critic)
        except ValueError as error:
            raise ValueError(f"{owner}: advantage_fn={self.advantage_fn_name!r}: {error}") from None
        if not self.has_experts and "expert_mask" in self.components.policy_loss.inputs():
            raise ValueError(
                f"{owner}: policy_loss_fn={self.policy_loss_fn!r} mixes expert demonstrations into the batch, which "
                f"{owner} has none of; use a MIX algorithm's asynchronous config (AsyncMIXConfig, "
                "AsyncMIXCHORDConfig), whose trainer joins them to each micro-batch"
            )
        check_rules(self, rules_for(self, COMPONENTS))

    def _check_greedy_baselines(self) -> None:
        """ReMax: the rollout worker makes each group's greedy baseline itself (`GroupScorer.needs_greedy_baseline`),
        so the synchronous trainers' batch layout rule does not apply, and the rewards are always summed first."""

    def advantage_kwargs(self) -> dict[str, Any]:
        """The advantage function's arguments (`scale_rewards` is a synchronous option: the group std always)."""
        return self.composed_kwargs("advantage_fn")

    def use_toy_task(self) -> None:
        """Called by the training script on the toy model: it trains offline, so with the transformers worker, and
        with TRL's fixed-count micro-batches (the token budget would ask a vLLM server for its length)."""
        self.rollout_backend = "transformers"
        if self.token_budget is None:
            self.token_budget = 0
