"""The built-in algorithms' config and trainer classes (GRPO, MIX and distillation families).

Generated from the algorithm records by `python -m trl_ext.trainers.core.generate`: do not edit by hand.
Each field is derived from the record and its components' `Argument` specs
(`trl_ext.trainers.core.arguments.algorithm_field`); `tests/trainers/test_generated_classes.py` fails when
this file is out of date.
"""

from dataclasses import dataclass
from typing import ClassVar

from ..core.arguments import algorithm_field
from ..critic.config import CriticFamilyConfig
from ..critic.trainer import CriticFamilyTrainer
from ..distill.config import DistillFamilyConfig
from ..distill.trainer import DistillFamilyTrainer
from ..mix.config import MIXFamilyConfig
from ..mix.trainer import MIXFamilyTrainer
from .config import GRPOFamilyConfig
from .trainer import GRPOFamilyTrainer

__all__ = [
    "AsymREConfig",
    "AsymRETrainer",
    "CISPOConfig",
    "CISPOTrainer",
    "ClipCovConfig",
    "ClipCovTrainer",
    "DAPOConfig",
    "DAPOTrainer",
    "DPPOKLConfig",
    "DPPOKLTrainer",
    "DPPOTVConfig",
    "DPPOTVTrainer",
    "DROConfig",
    "DROTrainer",
    "GMPOConfig",
    "GMPOTrainer",
    "GPGConfig",
    "GPGTrainer",
    "GRPOConfig",
    "GRPOTrainer",
    "GRPOVerlConfig",
    "GRPOVerlTrainer",
    "GSPOConfig",
    "GSPOTrainer",
    "GiGPOConfig",
    "GiGPOTrainer",
    "JSDConfig",
    "JSDTrainer",
    "KLCovConfig",
    "KLCovTrainer",
    "M2POConfig",
    "M2POTrainer",
    "MIXCHORDConfig",
    "MIXCHORDTrainer",
    "MIXConfig",
    "MIXTrainer",
    "MultiStepGRPOConfig",
    "MultiStepGRPOTrainer",
    "OPMDConfig",
    "OPMDTrainer",
    "OnPolicyDistillConfig",
    "OnPolicyDistillTrainer",
    "PPOConfig",
    "PPOTrainer",
    "RAFTConfig",
    "RAFTTrainer",
    "RECConfig",
    "RECTrainer",
    "RLOOConfig",
    "RLOOTrainer",
    "ReinforcePlusPlusConfig",
    "ReinforcePlusPlusTrainer",
    "SAPOConfig",
    "SAPOTrainer",
    "SPPOConfig",
    "SPPOTrainer",
    "TOPRConfig",
    "TOPRTrainer",
]


@dataclass
class PPOConfig(CriticFamilyConfig):
    """
    Configuration of [`PPOTrainer`]: PPO with a critic and GAE advantages. Paper: Proximal Policy Optimization
    Algorithms (arXiv 1707.06347). A value model (`value_model`, default: the policy's checkpoint with a new scalar
    head) is trained beside the policy with verl's clipped value loss (`cliprange_value`) and its own optimizer
    (`critic_learning_rate`); GAE (`gamma`, `lam`) turns its values and the token rewards into whitened advantages. One
    sample per prompt by default (`num_generations=1`).

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "ppo"

    kl_loss_fn: str = algorithm_field("ppo", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("ppo", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("ppo", "kl_penalty_fn")
    num_generations: int = algorithm_field("ppo", "num_generations")
    policy_loss_fn: str = algorithm_field("ppo", "policy_loss_fn")
    advantage_fn: str = algorithm_field("ppo", "advantage_fn")
    clip_range: float | None = algorithm_field("ppo", "clip_range")
    clip_range_low: float | None = algorithm_field("ppo", "clip_range_low")
    clip_range_high: float | None = algorithm_field("ppo", "clip_range_high")
    clip_ratio_c: float = algorithm_field("ppo", "clip_ratio_c")
    loss_agg_mode: str = algorithm_field("ppo", "loss_agg_mode")
    enable_sequence_masking: bool = algorithm_field("ppo", "enable_sequence_masking")
    delta_sequence_masking: float = algorithm_field("ppo", "delta_sequence_masking")
    fallback_to_policy_gradient: bool = algorithm_field("ppo", "fallback_to_policy_gradient")
    gamma: float = algorithm_field("ppo", "gamma")
    lam: float = algorithm_field("ppo", "lam")


class PPOTrainer(CriticFamilyTrainer):
    """PPO: PPO with a critic and GAE advantages. (config: `PPOConfig`).

    The `CriticFamilyTrainer` of this algorithm: its constructor is `CriticFamilyTrainer`'s, which documents every
    argument; `args` is a `PPOConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[CriticFamilyConfig]] = PPOConfig


@dataclass
class GRPOConfig(GRPOFamilyConfig):
    """
    Configuration of [`GRPOTrainer`]: GRPO: group-normalized advantages, dual-clip PPO loss. Paper: DeepSeekMath:
    Pushing the Limits of Mathematical Reasoning in Open Language Models (arXiv 2402.03300).
    `loss_agg_mode='token-mean'` is TRL's default `dapo` aggregation; `'seq-mean-token-mean'` is the paper's. Setting
    any of TRL's loss fields (`loss_type`, `importance_sampling_level`, `epsilon`, `epsilon_high`, `delta`,
    `sapo_temperature_*`, `vespo_*`) trains TRL's own loss instead, exactly (its advantages, KL estimator `k3` and
    token-mean entropy bonus included); trl_ext's KL estimators, advantage arguments and window normalization still
    apply. TRL's equivalent is `loss_type='dapo'` with `loss_agg_mode='token-mean'`.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "grpo"

    kl_loss_fn: str = algorithm_field("grpo", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("grpo", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("grpo", "kl_penalty_fn")
    num_generations: int = algorithm_field("grpo", "num_generations")
    policy_loss_fn: str = algorithm_field("grpo", "policy_loss_fn")
    advantage_fn: str = algorithm_field("grpo", "advantage_fn")
    clip_range: float | None = algorithm_field("grpo", "clip_range")
    clip_range_low: float | None = algorithm_field("grpo", "clip_range_low")
    clip_range_high: float | None = algorithm_field("grpo", "clip_range_high")
    clip_ratio_c: float = algorithm_field("grpo", "clip_ratio_c")
    loss_agg_mode: str = algorithm_field("grpo", "loss_agg_mode")
    enable_sequence_masking: bool = algorithm_field("grpo", "enable_sequence_masking")
    delta_sequence_masking: float = algorithm_field("grpo", "delta_sequence_masking")
    fallback_to_policy_gradient: bool = algorithm_field("grpo", "fallback_to_policy_gradient")
    advantage_epsilon: float = algorithm_field("grpo", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("grpo", "std_threshold")
    duplicate_experiences: bool = algorithm_field("grpo", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("grpo", "rank_penalty")
    std_cal_level: str = algorithm_field("grpo", "std_cal_level")


class GRPOTrainer(GRPOFamilyTrainer):
    """GRPO: group-normalized advantages, dual-clip PPO loss. (config: `GRPOConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `GRPOConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = GRPOConfig


@dataclass
class DAPOConfig(GRPOFamilyConfig):
    """
    Configuration of [`DAPOTrainer`]: DAPO: decoupled clip, token-level loss, dynamic sampling, overlong reward shaping.
    Paper: DAPO: An Open-Source LLM Reinforcement Learning System at Scale (arXiv 2503.14476). GRPO's group advantage
    and the PPO loss with DAPO's four techniques: the decoupled clip (`clip_range_low` 0.2, `clip_range_high` 0.28:
    clip-higher), the token-level loss (`loss_agg_mode='token-mean'`), dynamic sampling (`dynamic_sampling=True`: groups
    whose rewards are all equal, which give no gradient, are dropped and more prompts sampled, up to
    `dynamic_sampling_max_rounds` generation rounds) and overlong reward shaping (`overlong_buffer`,
    `overlong_penalty_factor`: a completion longer than `max_completion_length` − `overlong_buffer` tokens loses up to
    `overlong_penalty_factor`, linearly in its length). No KL term and no reference model. As in Trinity-RFT, the record
    sets only the components: DAPOConfig's defaults are the `ppo` loss's (symmetric clip 0.2) with dynamic sampling and
    the overlong penalty off; the paper's settings, all four techniques on, are the recipe configs/dapo.yaml
    (Trinity-RFT's `examples/dapo_math`). TRL's near-equivalent is `loss_type='dapo', epsilon=0.2, epsilon_high=0.28,
    beta=0` with the `get_soft_overlong_punishment` reward; TRL has no dynamic sampling.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "dapo"

    kl_loss_fn: str = algorithm_field("dapo", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("dapo", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("dapo", "kl_penalty_fn")
    num_generations: int = algorithm_field("dapo", "num_generations")
    per_device_train_batch_size: int = algorithm_field("dapo", "per_device_train_batch_size")
    policy_loss_fn: str = algorithm_field("dapo", "policy_loss_fn")
    advantage_fn: str = algorithm_field("dapo", "advantage_fn")
    clip_range: float | None = algorithm_field("dapo", "clip_range")
    clip_range_low: float | None = algorithm_field("dapo", "clip_range_low")
    clip_range_high: float | None = algorithm_field("dapo", "clip_range_high")
    clip_ratio_c: float = algorithm_field("dapo", "clip_ratio_c")
    loss_agg_mode: str = algorithm_field("dapo", "loss_agg_mode")
    enable_sequence_masking: bool = algorithm_field("dapo", "enable_sequence_masking")
    delta_sequence_masking: float = algorithm_field("dapo", "delta_sequence_masking")
    fallback_to_policy_gradient: bool = algorithm_field("dapo", "fallback_to_policy_gradient")
    advantage_epsilon: float = algorithm_field("dapo", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("dapo", "std_threshold")
    duplicate_experiences: bool = algorithm_field("dapo", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("dapo", "rank_penalty")
    std_cal_level: str = algorithm_field("dapo", "std_cal_level")


class DAPOTrainer(GRPOFamilyTrainer):
    """DAPO: decoupled clip, token-level loss, dynamic sampling, overlong reward shaping. (config: `DAPOConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `DAPOConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = DAPOConfig


@dataclass
class GRPOVerlConfig(GRPOFamilyConfig):
    """
    Configuration of [`GRPOVerlTrainer`]: GRPO with verl's trainer-side advantage: the group-normalized summed token
    rewards. Paper: DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models (arXiv
    2402.03300). Trinity-RFT's `grpo_verl` (GRPOverlAlgorithm, whose advantage is computed in the trainer, verl's
    `compute_grpo_outcome_advantage`): each completion's token rewards are summed into R, A = (R − mean) / (std +
    `advantage_epsilon`) over its group (unbiased std; a group of one: mean 0, std 1), broadcast to every completion
    token; trained with the dual-clip PPO loss. Group size 2 by default (Trinity-RFT's `repeat_times`).

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "grpo_verl"

    kl_loss_fn: str = algorithm_field("grpo_verl", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("grpo_verl", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("grpo_verl", "kl_penalty_fn")
    num_generations: int = algorithm_field("grpo_verl", "num_generations")
    policy_loss_fn: str = algorithm_field("grpo_verl", "policy_loss_fn")
    advantage_fn: str = algorithm_field("grpo_verl", "advantage_fn")
    clip_range: float | None = algorithm_field("grpo_verl", "clip_range")
    clip_range_low: float | None = algorithm_field("grpo_verl", "clip_range_low")
    clip_range_high: float | None = algorithm_field("grpo_verl", "clip_range_high")
    clip_ratio_c: float = algorithm_field("grpo_verl", "clip_ratio_c")
    loss_agg_mode: str = algorithm_field("grpo_verl", "loss_agg_mode")
    enable_sequence_masking: bool = algorithm_field("grpo_verl", "enable_sequence_masking")
    delta_sequence_masking: float = algorithm_field("grpo_verl", "delta_sequence_masking")
    fallback_to_policy_gradient: bool = algorithm_field("grpo_verl", "fallback_to_policy_gradient")
    advantage_epsilon: float = algorithm_field("grpo_verl", "advantage_epsilon")


class GRPOVerlTrainer(GRPOFamilyTrainer):
    """GRPO (verl): GRPO with verl's trainer-side advantage: the group-normalized summed token rewards. (config:
    `GRPOVerlConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `GRPOVerlConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = GRPOVerlConfig


@dataclass
class ReinforcePlusPlusConfig(GRPOFamilyConfig):
    """
    Configuration of [`ReinforcePlusPlusTrainer`]: REINFORCE++: batch-whitened discounted returns, PPO loss. Paper:
    REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models (arXiv 2501.03262). The discounted
    token-level returns of the outcome reward are whitened over the batch's tokens (no group baseline).

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "reinforceplusplus"

    kl_loss_fn: str = algorithm_field("reinforceplusplus", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("reinforceplusplus", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("reinforceplusplus", "kl_penalty_fn")
    num_generations: int = algorithm_field("reinforceplusplus", "num_generations")
    policy_loss_fn: str = algorithm_field("reinforceplusplus", "policy_loss_fn")
    advantage_fn: str = algorithm_field("reinforceplusplus", "advantage_fn")
    clip_range: float | None = algorithm_field("reinforceplusplus", "clip_range")
    clip_range_low: float | None = algorithm_field("reinforceplusplus", "clip_range_low")
    clip_range_high: float | None = algorithm_field("reinforceplusplus", "clip_range_high")
    clip_ratio_c: float = algorithm_field("reinforceplusplus", "clip_ratio_c")
    loss_agg_mode: str = algorithm_field("reinforceplusplus", "loss_agg_mode")
    enable_sequence_masking: bool = algorithm_field("reinforceplusplus", "enable_sequence_masking")
    delta_sequence_masking: float = algorithm_field("reinforceplusplus", "delta_sequence_masking")
    fallback_to_policy_gradient: bool = algorithm_field("reinforceplusplus", "fallback_to_policy_gradient")
    gamma: float = algorithm_field("reinforceplusplus", "gamma")


class ReinforcePlusPlusTrainer(GRPOFamilyTrainer):
    """REINFORCE++: batch-whitened discounted returns, PPO loss. (config: `ReinforcePlusPlusConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `ReinforcePlusPlusConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to
    one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = ReinforcePlusPlusConfig


@dataclass
class RLOOConfig(GRPOFamilyConfig):
    """
    Configuration of [`RLOOTrainer`]: RLOO: leave-one-out baseline, PPO loss. Paper: Back to Basics: Revisiting
    REINFORCE Style Optimization for Learning from Human Feedback in LLMs (arXiv 2402.14740). The baseline of a
    completion is the mean reward of the other completions of its prompt.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "rloo"

    kl_loss_fn: str = algorithm_field("rloo", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("rloo", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("rloo", "kl_penalty_fn")
    num_generations: int = algorithm_field("rloo", "num_generations")
    policy_loss_fn: str = algorithm_field("rloo", "policy_loss_fn")
    advantage_fn: str = algorithm_field("rloo", "advantage_fn")
    clip_range: float | None = algorithm_field("rloo", "clip_range")
    clip_range_low: float | None = algorithm_field("rloo", "clip_range_low")
    clip_range_high: float | None = algorithm_field("rloo", "clip_range_high")
    clip_ratio_c: float = algorithm_field("rloo", "clip_ratio_c")
    loss_agg_mode: str = algorithm_field("rloo", "loss_agg_mode")
    enable_sequence_masking: bool = algorithm_field("rloo", "enable_sequence_masking")
    delta_sequence_masking: float = algorithm_field("rloo", "delta_sequence_masking")
    fallback_to_policy_gradient: bool = algorithm_field("rloo", "fallback_to_policy_gradient")


class RLOOTrainer(GRPOFamilyTrainer):
    """RLOO: leave-one-out baseline, PPO loss. (config: `RLOOConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `RLOOConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = RLOOConfig


@dataclass
class OPMDConfig(GRPOFamilyConfig):
    """
    Configuration of [`OPMDTrainer`]: Online policy mirror descent. Paper: Kimi k1.5: Scaling Reinforcement Learning
    with LLMs (arXiv 2501.12599). Trinity-RFT's OPMD: the group baseline is the mean reward or a soft-max (`logavgexp`)
    of it, and the loss −A·lp is scaled by 1/(1 + τ).

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "opmd"

    kl_loss_fn: str = algorithm_field("opmd", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("opmd", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("opmd", "kl_penalty_fn")
    num_generations: int = algorithm_field("opmd", "num_generations")
    policy_loss_fn: str = algorithm_field("opmd", "policy_loss_fn")
    advantage_fn: str = algorithm_field("opmd", "advantage_fn")
    tau: float = algorithm_field("opmd", "tau")
    loss_agg_mode: str = algorithm_field("opmd", "loss_agg_mode")
    opmd_baseline: str = algorithm_field("opmd", "opmd_baseline")
    advantage_tau: float = algorithm_field("opmd", "advantage_tau")


class OPMDTrainer(GRPOFamilyTrainer):
    """OPMD: Online policy mirror descent. (config: `OPMDConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `OPMDConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = OPMDConfig


@dataclass
class AsymREConfig(GRPOFamilyConfig):
    """
    Configuration of [`AsymRETrainer`]: AsymRE: REINFORCE with a shifted (asymmetric) group baseline. Paper: Asymmetric
    REINFORCE for off-Policy Reinforcement Learning (arXiv 2506.20520). The baseline is the group mean shifted by
    `baseline_shift`; Trinity-RFT trains it with the OPMD loss.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "asymre"

    kl_loss_fn: str = algorithm_field("asymre", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("asymre", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("asymre", "kl_penalty_fn")
    num_generations: int = algorithm_field("asymre", "num_generations")
    policy_loss_fn: str = algorithm_field("asymre", "policy_loss_fn")
    advantage_fn: str = algorithm_field("asymre", "advantage_fn")
    tau: float = algorithm_field("asymre", "tau")
    loss_agg_mode: str = algorithm_field("asymre", "loss_agg_mode")
    baseline_shift: float = algorithm_field("asymre", "baseline_shift")


class AsymRETrainer(GRPOFamilyTrainer):
    """AsymRE: REINFORCE with a shifted (asymmetric) group baseline. (config: `AsymREConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `AsymREConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = AsymREConfig


@dataclass
class TOPRConfig(GRPOFamilyConfig):
    """
    Configuration of [`TOPRTrainer`]: Tapered Off-Policy REINFORCE. Paper: Tapered Off-Policy REINFORCE: Stable and
    efficient reinforcement learning for LLMs (arXiv 2503.14286). Full REINFORCE gradient on positive samples,
    ratio-truncated gradient on negative ones; the advantage is the raw reward (no baseline), as in the paper.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "topr"

    kl_loss_fn: str = algorithm_field("topr", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("topr", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("topr", "kl_penalty_fn")
    num_generations: int = algorithm_field("topr", "num_generations")
    policy_loss_fn: str = algorithm_field("topr", "policy_loss_fn")
    advantage_fn: str = algorithm_field("topr", "advantage_fn")
    advantage_threshold: float = algorithm_field("topr", "advantage_threshold")
    loss_agg_mode: str = algorithm_field("topr", "loss_agg_mode")


class TOPRTrainer(GRPOFamilyTrainer):
    """TOPR: Tapered Off-Policy REINFORCE. (config: `TOPRConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `TOPRConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = TOPRConfig


@dataclass
class CISPOConfig(GRPOFamilyConfig):
    """
    Configuration of [`CISPOTrainer`]: CISPO: clipped, stop-gradient IS weight on a REINFORCE loss. Paper: MiniMax-M1:
    Scaling Test-Time Compute Efficiently with Lightning Attention (arXiv 2506.13585). Clipped tokens still get a
    gradient. TRL's equivalent is `loss_type='cispo', epsilon_high=1 + clip_range_high`.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "cispo"

    kl_loss_fn: str = algorithm_field("cispo", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("cispo", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("cispo", "kl_penalty_fn")
    num_generations: int = algorithm_field("cispo", "num_generations")
    policy_loss_fn: str = algorithm_field("cispo", "policy_loss_fn")
    advantage_fn: str = algorithm_field("cispo", "advantage_fn")
    clip_range_low: float = algorithm_field("cispo", "clip_range_low")
    clip_range_high: float = algorithm_field("cispo", "clip_range_high")
    enable_mask_clip: bool = algorithm_field("cispo", "enable_mask_clip")
    mask_clip_range_low: float = algorithm_field("cispo", "mask_clip_range_low")
    mask_clip_range_high: float = algorithm_field("cispo", "mask_clip_range_high")
    loss_agg_mode: str = algorithm_field("cispo", "loss_agg_mode")
    advantage_epsilon: float = algorithm_field("cispo", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("cispo", "std_threshold")
    duplicate_experiences: bool = algorithm_field("cispo", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("cispo", "rank_penalty")
    std_cal_level: str = algorithm_field("cispo", "std_cal_level")


class CISPOTrainer(GRPOFamilyTrainer):
    """CISPO: clipped, stop-gradient IS weight on a REINFORCE loss. (config: `CISPOConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `CISPOConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = CISPOConfig


@dataclass
class GSPOConfig(GRPOFamilyConfig):
    """
    Configuration of [`GSPOTrainer`]: GSPO: sequence-level (length-normalized) importance ratio. Paper: Group Sequence
    Policy Optimization (arXiv 2507.18071). GSPO-token form: the ratio exp(mean_t log r_t) keeps a per-token gradient
    path, so token-level advantages work. TRL's equivalent is `loss_type='grpo', importance_sampling_level='sequence',
    epsilon=3e-4, epsilon_high=4e-4`.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "gspo"

    kl_loss_fn: str = algorithm_field("gspo", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("gspo", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("gspo", "kl_penalty_fn")
    num_generations: int = algorithm_field("gspo", "num_generations")
    policy_loss_fn: str = algorithm_field("gspo", "policy_loss_fn")
    advantage_fn: str = algorithm_field("gspo", "advantage_fn")
    clip_range: float | None = algorithm_field("gspo", "clip_range")
    clip_range_low: float | None = algorithm_field("gspo", "clip_range_low")
    clip_range_high: float | None = algorithm_field("gspo", "clip_range_high")
    loss_agg_mode: str = algorithm_field("gspo", "loss_agg_mode")
    advantage_epsilon: float = algorithm_field("gspo", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("gspo", "std_threshold")
    duplicate_experiences: bool = algorithm_field("gspo", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("gspo", "rank_penalty")
    std_cal_level: str = algorithm_field("gspo", "std_cal_level")


class GSPOTrainer(GRPOFamilyTrainer):
    """GSPO: sequence-level (length-normalized) importance ratio. (config: `GSPOConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `GSPOConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = GSPOConfig


@dataclass
class SAPOConfig(GRPOFamilyConfig):
    """
    Configuration of [`SAPOTrainer`]: SAPO: soft, temperature-controlled gate instead of hard clipping. Paper: Soft
    Adaptive Policy Optimization (arXiv 2511.20347). The gate σ(τ(r − 1))·4/τ decays faster for negative advantages.
    TRL's equivalent is `loss_type='sapo'` with `loss_agg_mode='seq-mean-token-mean'`.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "sapo"

    kl_loss_fn: str = algorithm_field("sapo", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("sapo", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("sapo", "kl_penalty_fn")
    num_generations: int = algorithm_field("sapo", "num_generations")
    policy_loss_fn: str = algorithm_field("sapo", "policy_loss_fn")
    advantage_fn: str = algorithm_field("sapo", "advantage_fn")
    tau_pos: float = algorithm_field("sapo", "tau_pos")
    tau_neg: float = algorithm_field("sapo", "tau_neg")
    loss_agg_mode: str = algorithm_field("sapo", "loss_agg_mode")
    detach_gate: bool = algorithm_field("sapo", "detach_gate")
    advantage_epsilon: float = algorithm_field("sapo", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("sapo", "std_threshold")
    duplicate_experiences: bool = algorithm_field("sapo", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("sapo", "rank_penalty")
    std_cal_level: str = algorithm_field("sapo", "std_cal_level")


class SAPOTrainer(GRPOFamilyTrainer):
    """SAPO: soft, temperature-controlled gate instead of hard clipping. (config: `SAPOConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `SAPOConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = SAPOConfig


@dataclass
class GPGConfig(GRPOFamilyConfig):
    """
    Configuration of [`GPGTrainer`]: GPG: group policy gradient, plain −A·lp with a batch-corrected group advantage.
    Paper: GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning (arXiv 2504.02546). No ratio, no
    clip, no KL: the loss is −A·lp (verl's `gpg`), and the advantage is the reward minus its group mean scaled by α = N
    / (number of non-zero rewards), verl's `gpg` estimator.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "gpg"

    kl_loss_fn: str = algorithm_field("gpg", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("gpg", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("gpg", "kl_penalty_fn")
    num_generations: int = algorithm_field("gpg", "num_generations")
    policy_loss_fn: str = algorithm_field("gpg", "policy_loss_fn")
    advantage_fn: str = algorithm_field("gpg", "advantage_fn")
    loss_agg_mode: str = algorithm_field("gpg", "loss_agg_mode")
    f_norm: float = algorithm_field("gpg", "f_norm")


class GPGTrainer(GRPOFamilyTrainer):
    """GPG: group policy gradient, plain −A·lp with a batch-corrected group advantage. (config: `GPGConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `GPGConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = GPGConfig


@dataclass
class GMPOConfig(GRPOFamilyConfig):
    """
    Configuration of [`GMPOTrainer`]: GMPO: the geometric mean of the token ratios, clipped in log space. Paper:
    Geometric-Mean Policy Optimization (arXiv 2507.20673). verl's `geo_mean`: per sequence, −Ā·exp(mean_t clip(log
    r_t)), averaged over sequences; the paper clips the log-ratio at ±0.4 (configs/geo_mean.yaml), verl's default is
    0.2.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "geo_mean"

    kl_loss_fn: str = algorithm_field("geo_mean", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("geo_mean", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("geo_mean", "kl_penalty_fn")
    num_generations: int = algorithm_field("geo_mean", "num_generations")
    policy_loss_fn: str = algorithm_field("geo_mean", "policy_loss_fn")
    advantage_fn: str = algorithm_field("geo_mean", "advantage_fn")
    clip_range: float | None = algorithm_field("geo_mean", "clip_range")
    clip_range_low: float | None = algorithm_field("geo_mean", "clip_range_low")
    clip_range_high: float | None = algorithm_field("geo_mean", "clip_range_high")
    advantage_epsilon: float = algorithm_field("geo_mean", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("geo_mean", "std_threshold")
    duplicate_experiences: bool = algorithm_field("geo_mean", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("geo_mean", "rank_penalty")
    std_cal_level: str = algorithm_field("geo_mean", "std_cal_level")


class GMPOTrainer(GRPOFamilyTrainer):
    """GMPO: the geometric mean of the token ratios, clipped in log space. (config: `GMPOConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `GMPOConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = GMPOConfig


@dataclass
class DROConfig(GRPOFamilyConfig):
    """
    Configuration of [`DROTrainer`]: DRO: policy gradient with a quadratic log-ratio penalty instead of a clip. Paper:
    Offline Regularised Reinforcement Learning for Large Language Models Alignment (arXiv 2405.19107). verl's `dro`: L =
    −(A·lp − ½β·(lp − old)²), `dro_beta` 0.05.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "dro"

    kl_loss_fn: str = algorithm_field("dro", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("dro", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("dro", "kl_penalty_fn")
    num_generations: int = algorithm_field("dro", "num_generations")
    policy_loss_fn: str = algorithm_field("dro", "policy_loss_fn")
    advantage_fn: str = algorithm_field("dro", "advantage_fn")
    dro_beta: float = algorithm_field("dro", "dro_beta")
    loss_agg_mode: str = algorithm_field("dro", "loss_agg_mode")
    advantage_epsilon: float = algorithm_field("dro", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("dro", "std_threshold")
    duplicate_experiences: bool = algorithm_field("dro", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("dro", "rank_penalty")
    std_cal_level: str = algorithm_field("dro", "std_cal_level")


class DROTrainer(GRPOFamilyTrainer):
    """DRO: policy gradient with a quadratic log-ratio penalty instead of a clip. (config: `DROConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `DROConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = DROConfig


@dataclass
class ClipCovConfig(GRPOFamilyConfig):
    """
    Configuration of [`ClipCovTrainer`]: Clip-Cov: PPO with a few high-covariance tokens detached (entropy control).
    Paper: The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models (arXiv 2505.22617). verl's
    `clip_cov`: among the tokens PPO does not clip, a random `clip_cov_ratio` share of those whose advantage × log-prob
    covariance lies in (`clip_cov_lb`, `clip_cov_ub`) gets no gradient.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "clip_cov"

    kl_loss_fn: str = algorithm_field("clip_cov", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("clip_cov", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("clip_cov", "kl_penalty_fn")
    num_generations: int = algorithm_field("clip_cov", "num_generations")
    policy_loss_fn: str = algorithm_field("clip_cov", "policy_loss_fn")
    advantage_fn: str = algorithm_field("clip_cov", "advantage_fn")
    clip_range: float | None = algorithm_field("clip_cov", "clip_range")
    clip_range_low: float | None = algorithm_field("clip_cov", "clip_range_low")
    clip_range_high: float | None = algorithm_field("clip_cov", "clip_range_high")
    clip_cov_ratio: float = algorithm_field("clip_cov", "clip_cov_ratio")
    clip_cov_lb: float = algorithm_field("clip_cov", "clip_cov_lb")
    clip_cov_ub: float = algorithm_field("clip_cov", "clip_cov_ub")
    selection_seed: int | None = algorithm_field("clip_cov", "selection_seed")
    loss_agg_mode: str = algorithm_field("clip_cov", "loss_agg_mode")
    advantage_epsilon: float = algorithm_field("clip_cov", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("clip_cov", "std_threshold")
    duplicate_experiences: bool = algorithm_field("clip_cov", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("clip_cov", "rank_penalty")
    std_cal_level: str = algorithm_field("clip_cov", "std_cal_level")


class ClipCovTrainer(GRPOFamilyTrainer):
    """Clip-Cov: PPO with a few high-covariance tokens detached (entropy control). (config: `ClipCovConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `ClipCovConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = ClipCovConfig


@dataclass
class KLCovConfig(GRPOFamilyConfig):
    """
    Configuration of [`KLCovTrainer`]: KL-Cov: a |log-ratio| penalty on the highest-covariance tokens (entropy control).
    Paper: The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models (arXiv 2505.22617). verl's
    `kl_cov`: −A·r plus `ppo_kl_coef`·|log r| on the top `kl_cov_ratio` share of tokens by advantage × log-prob
    covariance.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "kl_cov"

    kl_loss_fn: str = algorithm_field("kl_cov", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("kl_cov", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("kl_cov", "kl_penalty_fn")
    num_generations: int = algorithm_field("kl_cov", "num_generations")
    policy_loss_fn: str = algorithm_field("kl_cov", "policy_loss_fn")
    advantage_fn: str = algorithm_field("kl_cov", "advantage_fn")
    kl_cov_ratio: float = algorithm_field("kl_cov", "kl_cov_ratio")
    ppo_kl_coef: float = algorithm_field("kl_cov", "ppo_kl_coef")
    loss_agg_mode: str = algorithm_field("kl_cov", "loss_agg_mode")
    advantage_epsilon: float = algorithm_field("kl_cov", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("kl_cov", "std_threshold")
    duplicate_experiences: bool = algorithm_field("kl_cov", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("kl_cov", "rank_penalty")
    std_cal_level: str = algorithm_field("kl_cov", "std_cal_level")


class KLCovTrainer(GRPOFamilyTrainer):
    """KL-Cov: a |log-ratio| penalty on the highest-covariance tokens (entropy control). (config: `KLCovConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `KLCovConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = KLCovConfig


@dataclass
class DPPOTVConfig(GRPOFamilyConfig):
    """
    Configuration of [`DPPOTVTrainer`]: DPPO-Binary-TV: a trust region on the token probability's total variation.
    Paper: Rethinking the Trust Region in LLM Reinforcement Learning (arXiv 2602.04879). verl's `dppo_tv`: a token whose
    probability moved more than δ (`clip_range`, the paper's 0.15 in configs/dppo_tv.yaml) in the advantage's direction
    is masked; the rest get −A·sg(min(r, c))·lp.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "dppo_tv"

    kl_loss_fn: str = algorithm_field("dppo_tv", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("dppo_tv", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("dppo_tv", "kl_penalty_fn")
    num_generations: int = algorithm_field("dppo_tv", "num_generations")
    policy_loss_fn: str = algorithm_field("dppo_tv", "policy_loss_fn")
    advantage_fn: str = algorithm_field("dppo_tv", "advantage_fn")
    clip_range: float | None = algorithm_field("dppo_tv", "clip_range")
    clip_range_low: float | None = algorithm_field("dppo_tv", "clip_range_low")
    clip_range_high: float | None = algorithm_field("dppo_tv", "clip_range_high")
    clip_ratio_c: float = algorithm_field("dppo_tv", "clip_ratio_c")
    loss_agg_mode: str = algorithm_field("dppo_tv", "loss_agg_mode")
    advantage_epsilon: float = algorithm_field("dppo_tv", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("dppo_tv", "std_threshold")
    duplicate_experiences: bool = algorithm_field("dppo_tv", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("dppo_tv", "rank_penalty")
    std_cal_level: str = algorithm_field("dppo_tv", "std_cal_level")


class DPPOTVTrainer(GRPOFamilyTrainer):
    """DPPO-Binary-TV: a trust region on the token probability's total variation. (config: `DPPOTVConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `DPPOTVConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = DPPOTVConfig


@dataclass
class DPPOKLConfig(GRPOFamilyConfig):
    """
    Configuration of [`DPPOKLTrainer`]: DPPO-Binary-KL: a trust region on the token's binary KL divergence. Paper:
    Rethinking the Trust Region in LLM Reinforcement Learning (arXiv 2602.04879). verl's `dppo_kl`: as DPPO-Binary-TV
    with the binary KL of the token's probability (δ `clip_range`, the paper's 0.05 in configs/dppo_kl.yaml).

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "dppo_kl"

    kl_loss_fn: str = algorithm_field("dppo_kl", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("dppo_kl", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("dppo_kl", "kl_penalty_fn")
    num_generations: int = algorithm_field("dppo_kl", "num_generations")
    policy_loss_fn: str = algorithm_field("dppo_kl", "policy_loss_fn")
    advantage_fn: str = algorithm_field("dppo_kl", "advantage_fn")
    clip_range: float | None = algorithm_field("dppo_kl", "clip_range")
    clip_range_low: float | None = algorithm_field("dppo_kl", "clip_range_low")
    clip_range_high: float | None = algorithm_field("dppo_kl", "clip_range_high")
    clip_ratio_c: float = algorithm_field("dppo_kl", "clip_ratio_c")
    loss_agg_mode: str = algorithm_field("dppo_kl", "loss_agg_mode")
    advantage_epsilon: float = algorithm_field("dppo_kl", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("dppo_kl", "std_threshold")
    duplicate_experiences: bool = algorithm_field("dppo_kl", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("dppo_kl", "rank_penalty")
    std_cal_level: str = algorithm_field("dppo_kl", "std_cal_level")


class DPPOKLTrainer(GRPOFamilyTrainer):
    """DPPO-Binary-KL: a trust region on the token's binary KL divergence. (config: `DPPOKLConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `DPPOKLConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = DPPOKLConfig


@dataclass
class MIXConfig(MIXFamilyConfig):
    """
    Configuration of [`MIXTrainer`]: RL on rollouts plus a fixed share of SFT on expert demonstrations. Paper: On-Policy
    RL Meets Off-Policy Experts: Harmonizing Supervised Fine-Tuning and Reinforcement Learning via Dynamic Weighting
    (arXiv 2508.11408). Trinity-RFT's MIX, the fixed-μ form of CHORD. A share `expert_data_ratio` of each generation
    batch is expert rows from the trainer's `expert_dataset`; the loss is (1 − μ)·PPO on the rollouts (group-normalized
    advantages) + μ·SFT on the expert rows, each part normalized over its own rows.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "mix"

    kl_loss_fn: str = algorithm_field("mix", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("mix", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("mix", "kl_penalty_fn")
    num_generations: int = algorithm_field("mix", "num_generations")
    policy_loss_fn: str = algorithm_field("mix", "policy_loss_fn")
    advantage_fn: str = algorithm_field("mix", "advantage_fn")
    mu: float = algorithm_field("mix", "mu")
    clip_range: float | None = algorithm_field("mix", "clip_range")
    clip_range_low: float | None = algorithm_field("mix", "clip_range_low")
    clip_range_high: float | None = algorithm_field("mix", "clip_range_high")
    use_dynamic_bsz: bool | None = algorithm_field("mix", "use_dynamic_bsz")
    ppo_mini_batch_size: int | None = algorithm_field("mix", "ppo_mini_batch_size")
    ppo_micro_batch_size_per_gpu: int | None = algorithm_field("mix", "ppo_micro_batch_size_per_gpu")
    ngpus_trainer: int | None = algorithm_field("mix", "ngpus_trainer")
    train_batch_size_usual: int | None = algorithm_field("mix", "train_batch_size_usual")
    train_batch_size_expert: int | None = algorithm_field("mix", "train_batch_size_expert")
    loss_agg_mode: str = algorithm_field("mix", "loss_agg_mode")
    sft_loss_agg_mode: str | None = algorithm_field("mix", "sft_loss_agg_mode")
    grpo_loss_agg_mode: str | None = algorithm_field("mix", "grpo_loss_agg_mode")
    advantage_epsilon: float = algorithm_field("mix", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("mix", "std_threshold")
    duplicate_experiences: bool = algorithm_field("mix", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("mix", "rank_penalty")
    std_cal_level: str = algorithm_field("mix", "std_cal_level")


class MIXTrainer(MIXFamilyTrainer):
    """MIX: RL on rollouts plus a fixed share of SFT on expert demonstrations. (config: `MIXConfig`).

    The `MIXFamilyTrainer` of this algorithm: its constructor is `MIXFamilyTrainer`'s, which documents every argument;
    `args` is a `MIXConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[MIXFamilyConfig]] = MIXConfig


@dataclass
class MIXCHORDConfig(MIXFamilyConfig):
    """
    Configuration of [`MIXCHORDTrainer`]: CHORD: scheduled mix of RL and phi-weighted SFT on expert data. Paper:
    On-Policy RL Meets Off-Policy Experts: Harmonizing Supervised Fine-Tuning and Reinforcement Learning via Dynamic
    Weighting (arXiv 2508.11408). As MIX, with μ following the global step (linear warm-up to `mu_peak`, cosine decay to
    `mu_valley`) and CHORD-φ token weights on the expert NLL. The paper's recipe (Trinity-RFT's `examples/mix_chord`):
    `mu_warmup_steps=200, mu_decay_steps=400, mu_peak=0.5, mu_valley=0.02`.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "mix_chord"

    kl_loss_fn: str = algorithm_field("mix_chord", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("mix_chord", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("mix_chord", "kl_penalty_fn")
    num_generations: int = algorithm_field("mix_chord", "num_generations")
    policy_loss_fn: str = algorithm_field("mix_chord", "policy_loss_fn")
    advantage_fn: str = algorithm_field("mix_chord", "advantage_fn")
    mu_warmup_steps: int = algorithm_field("mix_chord", "mu_warmup_steps")
    mu_decay_steps: int = algorithm_field("mix_chord", "mu_decay_steps")
    mu_peak: float = algorithm_field("mix_chord", "mu_peak")
    mu_valley: float = algorithm_field("mix_chord", "mu_valley")
    enable_phi_function: bool = algorithm_field("mix_chord", "enable_phi_function")
    clip_range: float | None = algorithm_field("mix_chord", "clip_range")
    clip_range_low: float | None = algorithm_field("mix_chord", "clip_range_low")
    clip_range_high: float | None = algorithm_field("mix_chord", "clip_range_high")
    use_dynamic_bsz: bool | None = algorithm_field("mix_chord", "use_dynamic_bsz")
    ppo_mini_batch_size: int | None = algorithm_field("mix_chord", "ppo_mini_batch_size")
    ppo_micro_batch_size_per_gpu: int | None = algorithm_field("mix_chord", "ppo_micro_batch_size_per_gpu")
    ngpus_trainer: int | None = algorithm_field("mix_chord", "ngpus_trainer")
    train_batch_size_usual: int | None = algorithm_field("mix_chord", "train_batch_size_usual")
    train_batch_size_expert: int | None = algorithm_field("mix_chord", "train_batch_size_expert")
    loss_agg_mode: str = algorithm_field("mix_chord", "loss_agg_mode")
    sft_loss_agg_mode: str | None = algorithm_field("mix_chord", "sft_loss_agg_mode")
    grpo_loss_agg_mode: str | None = algorithm_field("mix_chord", "grpo_loss_agg_mode")
    advantage_epsilon: float = algorithm_field("mix_chord", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("mix_chord", "std_threshold")
    duplicate_experiences: bool = algorithm_field("mix_chord", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("mix_chord", "rank_penalty")
    std_cal_level: str = algorithm_field("mix_chord", "std_cal_level")


class MIXCHORDTrainer(MIXFamilyTrainer):
    """MIX-CHORD: CHORD: scheduled mix of RL and phi-weighted SFT on expert data. (config: `MIXCHORDConfig`).

    The `MIXFamilyTrainer` of this algorithm: its constructor is `MIXFamilyTrainer`'s, which documents every argument;
    `args` is a `MIXCHORDConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[MIXFamilyConfig]] = MIXCHORDConfig


@dataclass
class RAFTConfig(GRPOFamilyConfig):
    """
    Configuration of [`RAFTTrainer`]: RAFT: SFT on the rewarded rollouts (rejection sampling fine-tuning). Paper: RAFT:
    Reward rAnked FineTuning for Generative Foundation Model Alignment (arXiv 2304.06767). Generate `num_generations`
    completions per prompt, keep the best-rewarded one of each group (the `raft` selection), and train the SFT loss on
    the kept completions only.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "raft"

    kl_loss_fn: str = algorithm_field("raft", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("raft", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("raft", "kl_penalty_fn")
    num_generations: int = algorithm_field("raft", "num_generations")
    policy_loss_fn: str = algorithm_field("raft", "policy_loss_fn")
    advantage_fn: str = algorithm_field("raft", "advantage_fn")
    loss_agg_mode: str = algorithm_field("raft", "loss_agg_mode")
    min_reward: float | None = algorithm_field("raft", "min_reward")


class RAFTTrainer(GRPOFamilyTrainer):
    """RAFT: SFT on the rewarded rollouts (rejection sampling fine-tuning). (config: `RAFTConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `RAFTConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = RAFTConfig


@dataclass
class SPPOConfig(GRPOFamilyConfig):
    """
    Configuration of [`SPPOTrainer`]: sPPO: policy gradient inside a log-space trust region. Paper: A general class of
    surrogate functions for stable and efficient reinforcement learning (arXiv 2108.05828). The policy gradient −A·log r
    is restricted to the tokens inside the trust region 1/(1+ε) ≤ r ≤ 1+ε, with group-normalized advantages.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "sppo"

    kl_loss_fn: str = algorithm_field("sppo", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("sppo", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("sppo", "kl_penalty_fn")
    num_generations: int = algorithm_field("sppo", "num_generations")
    policy_loss_fn: str = algorithm_field("sppo", "policy_loss_fn")
    advantage_fn: str = algorithm_field("sppo", "advantage_fn")
    sppo_epsilon: float = algorithm_field("sppo", "sppo_epsilon")
    loss_agg_mode: str = algorithm_field("sppo", "loss_agg_mode")
    advantage_epsilon: float = algorithm_field("sppo", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("sppo", "std_threshold")
    duplicate_experiences: bool = algorithm_field("sppo", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("sppo", "rank_penalty")
    std_cal_level: str = algorithm_field("sppo", "std_cal_level")


class SPPOTrainer(GRPOFamilyTrainer):
    """sPPO: policy gradient inside a log-space trust region. (config: `SPPOConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `SPPOConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = SPPOConfig


@dataclass
class RECConfig(GRPOFamilyConfig):
    """
    Configuration of [`RECTrainer`]: REC: REINFORCE with off-policy clipping / weighting / regularization. Paper:
    Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm (arXiv 2509.24203). Group-centred rewards with a choice
    of off-policy clipping (`rec_clip_mode`), reweighting (`rec_weight`) and regularization (`rec_regularizer`).

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "rec"

    kl_loss_fn: str = algorithm_field("rec", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("rec", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("rec", "kl_penalty_fn")
    num_generations: int = algorithm_field("rec", "num_generations")
    policy_loss_fn: str = algorithm_field("rec", "policy_loss_fn")
    advantage_fn: str = algorithm_field("rec", "advantage_fn")
    rec_epsilon_low: float = algorithm_field("rec", "rec_epsilon_low")
    rec_epsilon_high: float = algorithm_field("rec", "rec_epsilon_high")
    rec_epsilon_low_prime: float = algorithm_field("rec", "rec_epsilon_low_prime")
    rec_epsilon_high_prime: float = algorithm_field("rec", "rec_epsilon_high_prime")
    rec_clip_mode: str = algorithm_field("rec", "rec_clip_mode")
    rec_weight: str = algorithm_field("rec", "rec_weight")
    rec_regularizer: str = algorithm_field("rec", "rec_regularizer")
    rec_regularizer_coef: float = algorithm_field("rec", "rec_regularizer_coef")
    rec_temp: float = algorithm_field("rec", "rec_temp")
    advantage_epsilon: float = algorithm_field("rec", "advantage_epsilon")
    std_normalize: bool = algorithm_field("rec", "std_normalize")
    drop: str | None = algorithm_field("rec", "drop")


class RECTrainer(GRPOFamilyTrainer):
    """REC: REINFORCE with off-policy clipping / weighting / regularization. (config: `RECConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `RECConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = RECConfig


@dataclass
class M2POConfig(GRPOFamilyConfig):
    """
    Configuration of [`M2POTrainer`]: M2PO: masks the largest log-ratio outliers of stale rollouts (second-moment trust
    region). Paper: Prosperity before Collapse: How Far Can Off-Policy RL Reach with Stale Data on LLMs? (arXiv
    2510.01161). For stale rollouts: train with `steps_per_generation > gradient_accumulation_steps`, so that each
    generation batch feeds several optimizer steps and π_old lags behind π. Among the trust-region tokens (A > 0 with r
    > 1, A < 0 with r < 1) the largest (log r)² are masked until their mean is at most `m2_threshold`; the kept tokens
    get the unclipped −A·r (Trinity-RFT main's `m2po`). The selection runs per micro-batch: with
    `gradient_accumulation_steps=1` on one process it is the paper's selection over the optimizer batch. Its natural
    home is asynchronous training, where the samples really are stale: `AsyncGRPOConfig(policy_loss_fn='m2po')` selects
    over the whole optimizer window (every micro-batch and process) against the sampler's log-probs.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "m2po"

    kl_loss_fn: str = algorithm_field("m2po", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("m2po", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("m2po", "kl_penalty_fn")
    num_generations: int = algorithm_field("m2po", "num_generations")
    policy_loss_fn: str = algorithm_field("m2po", "policy_loss_fn")
    advantage_fn: str = algorithm_field("m2po", "advantage_fn")
    m2_threshold: float = algorithm_field("m2po", "m2_threshold")
    loss_agg_mode: str = algorithm_field("m2po", "loss_agg_mode")
    log_ratio_clip: float = algorithm_field("m2po", "log_ratio_clip")
    advantage_epsilon: float = algorithm_field("m2po", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("m2po", "std_threshold")
    duplicate_experiences: bool = algorithm_field("m2po", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("m2po", "rank_penalty")
    std_cal_level: str = algorithm_field("m2po", "std_cal_level")


class M2POTrainer(GRPOFamilyTrainer):
    """M2PO: masks the largest log-ratio outliers of stale rollouts (second-moment trust region). (config:
    `M2POConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `M2POConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = M2POConfig


@dataclass
class MultiStepGRPOConfig(GRPOFamilyConfig):
    """
    Configuration of [`MultiStepGRPOTrainer`]: GRPO over multi-turn runs: run-level advantages on every step. Paper:
    DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models (arXiv 2402.03300). For TRL's
    multi-turn rollouts (`tools`, `environment_factory`): each completion is segmented into the model's turns, and every
    turn of an episode gets the episode's group-normalized advantage (÷ its number of turns with `enable_step_norm`);
    tool outputs get none. `turns_as_samples=True` makes each turn a sample of the `seq-mean-*` aggregations, as the
    reference's per-turn experiences.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "multi_step_grpo"

    kl_loss_fn: str = algorithm_field("multi_step_grpo", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("multi_step_grpo", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("multi_step_grpo", "kl_penalty_fn")
    num_generations: int = algorithm_field("multi_step_grpo", "num_generations")
    policy_loss_fn: str = algorithm_field("multi_step_grpo", "policy_loss_fn")
    advantage_fn: str = algorithm_field("multi_step_grpo", "advantage_fn")
    clip_range: float | None = algorithm_field("multi_step_grpo", "clip_range")
    clip_range_low: float | None = algorithm_field("multi_step_grpo", "clip_range_low")
    clip_range_high: float | None = algorithm_field("multi_step_grpo", "clip_range_high")
    clip_ratio_c: float = algorithm_field("multi_step_grpo", "clip_ratio_c")
    loss_agg_mode: str = algorithm_field("multi_step_grpo", "loss_agg_mode")
    enable_sequence_masking: bool = algorithm_field("multi_step_grpo", "enable_sequence_masking")
    delta_sequence_masking: float = algorithm_field("multi_step_grpo", "delta_sequence_masking")
    fallback_to_policy_gradient: bool = algorithm_field("multi_step_grpo", "fallback_to_policy_gradient")
    advantage_epsilon: float = algorithm_field("multi_step_grpo", "advantage_epsilon")
    enable_step_norm: bool = algorithm_field("multi_step_grpo", "enable_step_norm")
    std_cal_level: str = algorithm_field("multi_step_grpo", "std_cal_level")
    std_threshold: float | None = algorithm_field("multi_step_grpo", "std_threshold")


class MultiStepGRPOTrainer(GRPOFamilyTrainer):
    """Multi-step GRPO: GRPO over multi-turn runs: run-level advantages on every step. (config: `MultiStepGRPOConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `MultiStepGRPOConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = MultiStepGRPOConfig


@dataclass
class GiGPOConfig(GRPOFamilyConfig):
    """
    Configuration of [`GiGPOTrainer`]: Group-in-group advantages for agents: episode-level plus anchor-state step-level.
    Paper: Group-in-Group Policy Optimization for LLM Agent Training (arXiv 2505.10978). For TRL's multi-turn rollouts:
    each model turn gets A_E + ω·A_S, A_S normalized over the turns of the batch that start from the same state: the
    environment's `state_key` when it has one, else the text the model saw before the turn (the prompt and the tool
    outputs so far). Turn rewards the environment records (`turn_rewards`) add to the episode's reward on the last turn.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "gigpo"

    kl_loss_fn: str = algorithm_field("gigpo", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("gigpo", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("gigpo", "kl_penalty_fn")
    num_generations: int = algorithm_field("gigpo", "num_generations")
    policy_loss_fn: str = algorithm_field("gigpo", "policy_loss_fn")
    advantage_fn: str = algorithm_field("gigpo", "advantage_fn")
    clip_range: float | None = algorithm_field("gigpo", "clip_range")
    clip_range_low: float | None = algorithm_field("gigpo", "clip_range_low")
    clip_range_high: float | None = algorithm_field("gigpo", "clip_range_high")
    clip_ratio_c: float = algorithm_field("gigpo", "clip_ratio_c")
    loss_agg_mode: str = algorithm_field("gigpo", "loss_agg_mode")
    enable_sequence_masking: bool = algorithm_field("gigpo", "enable_sequence_masking")
    delta_sequence_masking: float = algorithm_field("gigpo", "delta_sequence_masking")
    fallback_to_policy_gradient: bool = algorithm_field("gigpo", "fallback_to_policy_gradient")
    omega: float = algorithm_field("gigpo", "omega")
    gamma: float = algorithm_field("gigpo", "gamma")
    fnorm: str = algorithm_field("gigpo", "fnorm")
    advantage_epsilon: float = algorithm_field("gigpo", "advantage_epsilon")


class GiGPOTrainer(GRPOFamilyTrainer):
    """GiGPO: Group-in-group advantages for agents: episode-level plus anchor-state step-level. (config: `GiGPOConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `GiGPOConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = GiGPOConfig


@dataclass
class OnPolicyDistillConfig(DistillFamilyConfig):
    """
    Configuration of [`OnPolicyDistillTrainer`]: On-policy distillation: teacher log-probs as per-token advantages.
    Paper: On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes (arXiv 2306.13649). The
    student samples, a frozen teacher scores the sampled tokens, and the per-token advantage is `kl_coef`·(log π_teacher
    − log π_old) (+ `reward_weight`·Â with task rewards), trained with the `ppo` (default) or `importance_sampling` loss
    (Thinking Machines, "On-Policy Distillation", 2025; Trinity-RFT's `on_policy_distill`).

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "on_policy_distill"

    kl_loss_fn: str = algorithm_field("on_policy_distill", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("on_policy_distill", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("on_policy_distill", "kl_penalty_fn")
    num_generations: int = algorithm_field("on_policy_distill", "num_generations")
    policy_loss_fn: str = algorithm_field("on_policy_distill", "policy_loss_fn")
    advantage_fn: str = algorithm_field("on_policy_distill", "advantage_fn")
    clip_range: float | None = algorithm_field("on_policy_distill", "clip_range")
    clip_range_low: float | None = algorithm_field("on_policy_distill", "clip_range_low")
    clip_range_high: float | None = algorithm_field("on_policy_distill", "clip_range_high")
    clip_ratio_c: float = algorithm_field("on_policy_distill", "clip_ratio_c")
    loss_agg_mode: str = algorithm_field("on_policy_distill", "loss_agg_mode")
    enable_sequence_masking: bool = algorithm_field("on_policy_distill", "enable_sequence_masking")
    delta_sequence_masking: float = algorithm_field("on_policy_distill", "delta_sequence_masking")
    fallback_to_policy_gradient: bool = algorithm_field("on_policy_distill", "fallback_to_policy_gradient")
    kl_coef: float = algorithm_field("on_policy_distill", "kl_coef")
    distill_baseline: str = algorithm_field("on_policy_distill", "distill_baseline")


class OnPolicyDistillTrainer(DistillFamilyTrainer):
    """On-policy distillation: teacher log-probs as per-token advantages. (config: `OnPolicyDistillConfig`).

    The `DistillFamilyTrainer` of this algorithm: its constructor is `DistillFamilyTrainer`'s, which documents every
    argument; `args` is a `OnPolicyDistillConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`,
    converted to one.
    """

    config_class: ClassVar[type[DistillFamilyConfig]] = OnPolicyDistillConfig


@dataclass
class JSDConfig(DistillFamilyConfig):
    """
    Configuration of [`JSDTrainer`]: On-policy distillation with a Jensen-Shannon advantage: −JSD of student and
    teacher. Paper: On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes (arXiv 2306.13649).
    Trinity-RFT's `jsd`: the student samples, a frozen teacher scores the sampled tokens, and the per-token advantage is
    −`kl_coef`·JSD_β of the two log-probs (β = `lambda_coef`, 0.5 the symmetric JSD, 0 KL(student‖teacher), 1
    KL(teacher‖student); GKD's generalized JSD), trained with the `ppo` loss. Trinity-RFT's defaults: `kl_coef` 1.0,
    `lambda_coef` 0.5. The advantage is the divergence's per-token policy-gradient weight, −(1 − β)·(log π_student − log
    M) for 0 < β < 1; Trinity-RFT's −JSD value, which for 0 < β < 1 is never negative and moves the student away from
    the teacher, is `jsd_form='reference'`.

    Its parameters and their help come from their `Argument` specs when `trl_ext` loads (`help()` shows them; the
    documentation renders them as a table).
    """

    algorithm: ClassVar[str] = "jsd"

    kl_loss_fn: str = algorithm_field("jsd", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("jsd", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("jsd", "kl_penalty_fn")
    num_generations: int = algorithm_field("jsd", "num_generations")
    policy_loss_fn: str = algorithm_field("jsd", "policy_loss_fn")
    advantage_fn: str = algorithm_field("jsd", "advantage_fn")
    clip_range: float | None = algorithm_field("jsd", "clip_range")
    clip_range_low: float | None = algorithm_field("jsd", "clip_range_low")
    clip_range_high: float | None = algorithm_field("jsd", "clip_range_high")
    clip_ratio_c: float = algorithm_field("jsd", "clip_ratio_c")
    loss_agg_mode: str = algorithm_field("jsd", "loss_agg_mode")
    enable_sequence_masking: bool = algorithm_field("jsd", "enable_sequence_masking")
    delta_sequence_masking: float = algorithm_field("jsd", "delta_sequence_masking")
    fallback_to_policy_gradient: bool = algorithm_field("jsd", "fallback_to_policy_gradient")
    lambda_coef: float = algorithm_field("jsd", "lambda_coef")
    kl_coef: float = algorithm_field("jsd", "kl_coef")
    jsd_temperature: float = algorithm_field("jsd", "jsd_temperature")
    jsd_form: str = algorithm_field("jsd", "jsd_form")
    chunk_size: int | None = algorithm_field("jsd", "chunk_size")


class JSDTrainer(DistillFamilyTrainer):
    """JSD distillation: On-policy distillation with a Jensen-Shannon advantage: −JSD of student and teacher. (config:
    `JSDConfig`).

    The `DistillFamilyTrainer` of this algorithm: its constructor is `DistillFamilyTrainer`'s, which documents every
    argument; `args` is a `JSDConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[DistillFamilyConfig]] = JSDConfig
