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
    "LUSPOConfig",
    "LUSPOTrainer",
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
    "VESPOConfig",
    "VESPOTrainer",
]


@dataclass
class PPOConfig(CriticFamilyConfig):
    """
    Configuration of [`PPOTrainer`]: PPO with a critic and GAE advantages. Paper: Proximal Policy Optimization
    Algorithms (arXiv 1707.06347). A value model (`value_model`, default: the policy's checkpoint with a new scalar
    head) is trained beside the policy with verl's clipped value loss (`cliprange_value`) and its own optimizer
    (`critic_learning_rate`); GAE (`gamma`, `lam`) turns its values and the token rewards into whitened advantages. One
    sample per prompt by default (`num_generations=1`).

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'k2'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'default'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `1`):
            Completions sampled per prompt (the group of the group-relative advantages): the ppo algorithm's group size,
            Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'ppo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `ppo`, the ppo algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `ppo`'s arguments configure `ppo`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'ppo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `ppo`, the ppo
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `ppo`'s arguments configure `ppo`; with another function, one that is set is passed on to it if it
            takes the argument (else an error).
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            PPO clip ε, used for both sides unless `clip_range_low`/`_high` are set.
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            Lower clip ε_low: the ratio is clipped at 1 − ε_low. Defaults to `clip_range`.
        clip_range_high (`float | None`, *optional*, defaults to `None`):
            Upper clip ε_high: the ratio is clipped at 1 + ε_high (DAPO recommends 0.28). Defaults to `clip_range`.
        clip_ratio_c (`float | None`, *optional*, defaults to `3.0`):
            Dual-clip constant c > 1 (Ye et al. 2020, arXiv 1912.09729): for negative advantages the loss is bounded by
            −A·c, so a very large ratio cannot blow up the update. None: no dual clip (c = ∞, TRL's PPO clip).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        enable_sequence_masking (`bool`, *optional*, defaults to `False`):
            Drop the negative-advantage tokens of sequences whose mean log-ratio log(π_old/π) exceeds
            `delta_sequence_masking` (off-policy sequence masking, DeepSeek-V3.2).
        delta_sequence_masking (`float`, *optional*, defaults to `0.1`):
            Threshold δ of `enable_sequence_masking`.
        fallback_to_policy_gradient (`bool`, *optional*, defaults to `False`):
            Use the on-policy ratio exp(lp − sg(lp)) ≡ 1 (plain policy gradient) instead of π/π_old.
        gamma (`float`, *optional*, defaults to `1.0`):
            GAE discount γ of the token-level TD errors δ_t = r_t + γ·V_{t+1} − V_t (Trinity-RFT's PPO default 1.0).
        lam (`float`, *optional*, defaults to `1.0`):
            GAE λ: A_t = δ_t + γλ·A_{t+1}; 1 gives the Monte-Carlo return minus V_t, 0 the one-step TD error
            (Trinity-RFT's PPO default 1.0).
        value_model_name_or_path (`str | None`, *optional*, defaults to `None`):
            The value model (Hub id or local path), used when the trainer gets no `value_model`: loaded as a token
            classifier with one output (its backbone plus a scalar head). Default: the policy's own checkpoint, with a
            new head. It must share the policy's tokenizer.
        value_model_init_kwargs (`dict[str, Any] | str | None`, *optional*, defaults to `None`):
            Keyword arguments of the value model's `from_pretrained`, e.g. `{"dtype": "bfloat16"}` (default: the
            policy's dtype).
        cliprange_value (`float`, *optional*, defaults to `0.5`):
            c of the clipped value loss 0.5·agg(max((V − R)², (clip(V, V_old − c, V_old + c) − R)²)) (verl's
            `compute_value_loss`); 0.5 is the value Trinity-RFT's trainer backend uses (verl's critic default).
        critic_learning_rate (`float | None`, *optional*, defaults to `None`):
            Learning rate of the critic's optimizer (AdamW with the policy's betas, epsilon, weight decay and
            scheduler), stepped at every optimizer step of the policy. Default: `learning_rate`.
        critic_warmup_steps (`int`, *optional*, defaults to `0`):
            Optimizer steps that train only the critic before the policy starts to learn (verl's `critic_warmup`): the
            policy's loss is 0 for those steps.
        shared_backbone (`bool`, *optional*, defaults to `False`):
            Put the value head on the policy's own backbone instead of training a separate value model: a linear head on
            the policy's last hidden state, one model and one optimizer, and the loss is the policy's terms + vf_coef ·
            the value loss (the backbone gets the gradient of both; the head only the value loss's, the LM head only the
            policy's). Saved beside the policy as value_head.safetensors.
        vf_coef (`float | None`, *optional*, defaults to `None`):
            Weight of the value loss in the summed loss of `shared_backbone` (default 0.1, TRL's former PPOTrainer's). A
            separate value model has its own optimizer instead (`critic_learning_rate`).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    clip_ratio_c: float | None = algorithm_field("ppo", "clip_ratio_c")
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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'k2'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'default'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the grpo algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'ppo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `ppo`, the grpo algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `ppo`'s arguments configure `ppo`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the grpo
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `grpo`'s arguments configure `grpo`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            PPO clip ε, used for both sides unless `clip_range_low`/`_high` are set.
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            Lower clip ε_low: the ratio is clipped at 1 − ε_low. Defaults to `clip_range`.
        clip_range_high (`float | None`, *optional*, defaults to `None`):
            Upper clip ε_high: the ratio is clipped at 1 + ε_high (DAPO recommends 0.28). Defaults to `clip_range`.
        clip_ratio_c (`float | None`, *optional*, defaults to `3.0`):
            Dual-clip constant c > 1 (Ye et al. 2020, arXiv 1912.09729): for negative advantages the loss is bounded by
            −A·c, so a very large ratio cannot blow up the update. None: no dual clip (c = ∞, TRL's PPO clip).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        enable_sequence_masking (`bool`, *optional*, defaults to `False`):
            Drop the negative-advantage tokens of sequences whose mean log-ratio log(π_old/π) exceeds
            `delta_sequence_masking` (off-policy sequence masking, DeepSeek-V3.2).
        delta_sequence_masking (`float`, *optional*, defaults to `0.1`):
            Threshold δ of `enable_sequence_masking`.
        fallback_to_policy_gradient (`bool`, *optional*, defaults to `False`):
            Use the on-policy ratio exp(lp − sg(lp)) ≡ 1 (plain policy gradient) instead of π/π_old.
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    clip_ratio_c: float | None = algorithm_field("grpo", "clip_ratio_c")
    loss_agg_mode: str = algorithm_field("grpo", "loss_agg_mode")
    enable_sequence_masking: bool = algorithm_field("grpo", "enable_sequence_masking")
    delta_sequence_masking: float = algorithm_field("grpo", "delta_sequence_masking")
    fallback_to_policy_gradient: bool = algorithm_field("grpo", "fallback_to_policy_gradient")
    advantage_epsilon: float = algorithm_field("grpo", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("grpo", "std_threshold")
    duplicate_experiences: bool = algorithm_field("grpo", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("grpo", "rank_penalty")
    std_cal_level: str = algorithm_field("grpo", "std_cal_level")
    std_unbiased: bool = algorithm_field("grpo", "std_unbiased")
    group_of_one: str = algorithm_field("grpo", "group_of_one")


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
    and the PPO loss with DAPO's four techniques, all on by default as in the paper: the decoupled clip
    (`clip_range_low` 0.2, `clip_range_high` 0.28: clip-higher; no dual clip), the token-level loss
    (`loss_agg_mode='token-mean'`), dynamic sampling (`dynamic_sampling=True`: groups whose rewards are all equal, which
    give no gradient, are dropped and more prompts sampled, up to `dynamic_sampling_max_rounds` generation rounds) and
    overlong reward shaping (a completion longer than `max_completion_length` − `overlong_buffer` tokens loses up to
    `overlong_penalty_factor`, linearly in its length; the default buffer is a fifth of `max_completion_length`, the
    paper's 4096 of 20480). No KL term and no reference model. Trinity-RFT's record sets only the components (the `ppo`
    loss's symmetric clip, dynamic sampling and the overlong penalty off): its flags are this record's, and the paper's
    settings beside them are the config's defaults. The recipe configs/dapo.yaml adds the paper's scale (Trinity-RFT's
    `examples/dapo_math`). TRL's near-equivalent is `loss_type='dapo', epsilon=0.2, epsilon_high=0.28, beta=0` with the
    `get_soft_overlong_punishment` reward; TRL has no dynamic sampling.

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'default'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `16`):
            Completions sampled per prompt (the group of the group-relative advantages): the dapo algorithm's group
            size, Trinity-RFT's `repeat_times`.
        per_device_train_batch_size (`int`, *optional*, defaults to `16`):
            Rows per device and micro-batch: 16 (TRL: 8), one group of the dapo algorithm's `num_generations=16`, so
            that the default generation batch holds whole groups.
        policy_loss_fn (`str`, *optional*, defaults to `'ppo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `ppo`, the dapo algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `ppo`'s arguments configure `ppo`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the dapo
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `grpo`'s arguments configure `grpo`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            PPO clip ε, used for both sides unless `clip_range_low`/`_high` are set.
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            Lower clip ε_low: the ratio is clipped at 1 − ε_low. Defaults to `clip_range`.
        clip_range_high (`float | None`, *optional*, defaults to `0.28`):
            Upper clip ε_high: the ratio is clipped at 1 + ε_high (DAPO recommends 0.28). Defaults to `clip_range`.
        clip_ratio_c (`float | None`, *optional*, defaults to `None`):
            Dual-clip constant c > 1 (Ye et al. 2020, arXiv 1912.09729): for negative advantages the loss is bounded by
            −A·c, so a very large ratio cannot blow up the update. None: no dual clip (c = ∞, TRL's PPO clip).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        enable_sequence_masking (`bool`, *optional*, defaults to `False`):
            Drop the negative-advantage tokens of sequences whose mean log-ratio log(π_old/π) exceeds
            `delta_sequence_masking` (off-policy sequence masking, DeepSeek-V3.2).
        delta_sequence_masking (`float`, *optional*, defaults to `0.1`):
            Threshold δ of `enable_sequence_masking`.
        fallback_to_policy_gradient (`bool`, *optional*, defaults to `False`):
            Use the on-policy ratio exp(lp − sg(lp)) ≡ 1 (plain policy gradient) instead of π/π_old.
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).
        dynamic_sampling (`bool`, *optional*, defaults to `True`):
            DAPO's dynamic sampling (arXiv 2503.14476 §3.2): drop the prompt groups whose task rewards all agree and
            generate for more prompts until the generation batch is full again (logged under `dynamic_sampling/`). Needs
            num_generations >= 2. Default here: the DAPO paper's, True.
        overlong_buffer (`int | None`, *optional*, defaults to `None`):
            DAPO's overlong reward shaping: the last `overlong_buffer` tokens before `max_completion_length` over which
            a completion's reward falls linearly, by up to `overlong_penalty_factor` at the maximum length (arXiv
            2503.14476 §3.4; the paper's 4096 of 20480). Logged as `rewards/overlong_penalty/mean`. 0: off; None: a
            fifth of `max_completion_length`, the paper's ratio. Default here: the DAPO paper's, None.

    Every other parameter is `GRPOFamilyConfig`'s.
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
    clip_ratio_c: float | None = algorithm_field("dapo", "clip_ratio_c")
    loss_agg_mode: str = algorithm_field("dapo", "loss_agg_mode")
    enable_sequence_masking: bool = algorithm_field("dapo", "enable_sequence_masking")
    delta_sequence_masking: float = algorithm_field("dapo", "delta_sequence_masking")
    fallback_to_policy_gradient: bool = algorithm_field("dapo", "fallback_to_policy_gradient")
    advantage_epsilon: float = algorithm_field("dapo", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("dapo", "std_threshold")
    duplicate_experiences: bool = algorithm_field("dapo", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("dapo", "rank_penalty")
    std_cal_level: str = algorithm_field("dapo", "std_cal_level")
    std_unbiased: bool = algorithm_field("dapo", "std_unbiased")
    group_of_one: str = algorithm_field("dapo", "group_of_one")
    dynamic_sampling: bool = algorithm_field("dapo", "dynamic_sampling", GRPOFamilyConfig)
    overlong_buffer: int | None = algorithm_field("dapo", "overlong_buffer", GRPOFamilyConfig)


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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'k2'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'default'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `2`):
            Completions sampled per prompt (the group of the group-relative advantages): the grpo_verl algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'ppo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `ppo`, the grpo_verl
            algorithm's. Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `ppo`'s arguments configure `ppo`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo_verl'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo_verl`, the
            grpo_verl algorithm's. Another one composes with the algorithm's loss: its arguments go in
            `advantage_fn_args`. The fields of `grpo_verl`'s arguments configure `grpo_verl`; with another function, one
            that is set is passed on to it if it takes the argument (else an error).
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            PPO clip ε, used for both sides unless `clip_range_low`/`_high` are set.
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            Lower clip ε_low: the ratio is clipped at 1 − ε_low. Defaults to `clip_range`.
        clip_range_high (`float | None`, *optional*, defaults to `None`):
            Upper clip ε_high: the ratio is clipped at 1 + ε_high (DAPO recommends 0.28). Defaults to `clip_range`.
        clip_ratio_c (`float | None`, *optional*, defaults to `3.0`):
            Dual-clip constant c > 1 (Ye et al. 2020, arXiv 1912.09729): for negative advantages the loss is bounded by
            −A·c, so a very large ratio cannot blow up the update. None: no dual clip (c = ∞, TRL's PPO clip).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        enable_sequence_masking (`bool`, *optional*, defaults to `False`):
            Drop the negative-advantage tokens of sequences whose mean log-ratio log(π_old/π) exceeds
            `delta_sequence_masking` (off-policy sequence masking, DeepSeek-V3.2).
        delta_sequence_masking (`float`, *optional*, defaults to `0.1`):
            Threshold δ of `enable_sequence_masking`.
        fallback_to_policy_gradient (`bool`, *optional*, defaults to `False`):
            Use the on-policy ratio exp(lp − sg(lp)) ≡ 1 (plain policy gradient) instead of π/π_old.
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo_verl` advantage's `epsilon`)

    Every other parameter is `GRPOFamilyConfig`'s.
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
    clip_ratio_c: float | None = algorithm_field("grpo_verl", "clip_ratio_c")
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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'k2'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'default'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the reinforceplusplus
            algorithm's group size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'ppo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `ppo`, the reinforceplusplus
            algorithm's. Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `ppo`'s arguments configure `ppo`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'reinforceplusplus'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default
            `reinforceplusplus`, the reinforceplusplus algorithm's. Another one composes with the algorithm's loss: its
            arguments go in `advantage_fn_args`. The fields of `reinforceplusplus`'s arguments configure
            `reinforceplusplus`; with another function, one that is set is passed on to it if it takes the argument
            (else an error).
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            PPO clip ε, used for both sides unless `clip_range_low`/`_high` are set.
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            Lower clip ε_low: the ratio is clipped at 1 − ε_low. Defaults to `clip_range`.
        clip_range_high (`float | None`, *optional*, defaults to `None`):
            Upper clip ε_high: the ratio is clipped at 1 + ε_high (DAPO recommends 0.28). Defaults to `clip_range`.
        clip_ratio_c (`float | None`, *optional*, defaults to `3.0`):
            Dual-clip constant c > 1 (Ye et al. 2020, arXiv 1912.09729): for negative advantages the loss is bounded by
            −A·c, so a very large ratio cannot blow up the update. None: no dual clip (c = ∞, TRL's PPO clip).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        enable_sequence_masking (`bool`, *optional*, defaults to `False`):
            Drop the negative-advantage tokens of sequences whose mean log-ratio log(π_old/π) exceeds
            `delta_sequence_masking` (off-policy sequence masking, DeepSeek-V3.2).
        delta_sequence_masking (`float`, *optional*, defaults to `0.1`):
            Threshold δ of `enable_sequence_masking`.
        fallback_to_policy_gradient (`bool`, *optional*, defaults to `False`):
            Use the on-policy ratio exp(lp − sg(lp)) ≡ 1 (plain policy gradient) instead of π/π_old.
        gamma (`float`, *optional*, defaults to `1.0`):
            Discount of the token-level returns (the outcome reward sits on the last token); the returns are whitened
            over all valid tokens of the generation batch.

    Every other parameter is `GRPOFamilyConfig`'s.
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
    clip_ratio_c: float | None = algorithm_field("reinforceplusplus", "clip_ratio_c")
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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'k2'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'default'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the rloo algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'ppo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `ppo`, the rloo algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `ppo`'s arguments configure `ppo`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'rloo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `rloo`, the rloo
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `rloo`'s arguments configure `rloo`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            PPO clip ε, used for both sides unless `clip_range_low`/`_high` are set.
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            Lower clip ε_low: the ratio is clipped at 1 − ε_low. Defaults to `clip_range`.
        clip_range_high (`float | None`, *optional*, defaults to `None`):
            Upper clip ε_high: the ratio is clipped at 1 + ε_high (DAPO recommends 0.28). Defaults to `clip_range`.
        clip_ratio_c (`float | None`, *optional*, defaults to `3.0`):
            Dual-clip constant c > 1 (Ye et al. 2020, arXiv 1912.09729): for negative advantages the loss is bounded by
            −A·c, so a very large ratio cannot blow up the update. None: no dual clip (c = ∞, TRL's PPO clip).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        enable_sequence_masking (`bool`, *optional*, defaults to `False`):
            Drop the negative-advantage tokens of sequences whose mean log-ratio log(π_old/π) exceeds
            `delta_sequence_masking` (off-policy sequence masking, DeepSeek-V3.2).
        delta_sequence_masking (`float`, *optional*, defaults to `0.1`):
            Threshold δ of `enable_sequence_masking`.
        fallback_to_policy_gradient (`bool`, *optional*, defaults to `False`):
            Use the on-policy ratio exp(lp − sg(lp)) ≡ 1 (plain policy gradient) instead of π/π_old.

    Every other parameter is `GRPOFamilyConfig`'s.
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
    clip_ratio_c: float | None = algorithm_field("rloo", "clip_ratio_c")
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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'k2'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'default'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the opmd algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'opmd'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `opmd`, the opmd algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `opmd`'s arguments configure `opmd`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'opmd'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `opmd`, the opmd
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `opmd`'s arguments configure `opmd`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        tau (`float`, *optional*, defaults to `1.0`):
            Mirror-descent regularization τ: the loss −A·lp is divided by (1 + τ).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        opmd_baseline (`str`, *optional*, defaults to `'mean'`):
            Group baseline: `mean`, or `logavgexp` = τ·(logsumexp(R/τ) − log n).
        advantage_tau (`float`, *optional*, defaults to `1.0`):
            τ of the `logavgexp` baseline. (the `opmd` advantage's `tau`)

    Every other parameter is `GRPOFamilyConfig`'s.
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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'default'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the asymre algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'opmd'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `opmd`, the asymre
            algorithm's. Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `opmd`'s arguments configure `opmd`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'asymre'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `asymre`, the
            asymre algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`.
            The fields of `asymre`'s arguments configure `asymre`; with another function, one that is set is passed on
            to it if it takes the argument (else an error).
        tau (`float`, *optional*, defaults to `1.0`):
            Mirror-descent regularization τ: the loss −A·lp is divided by (1 + τ).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        baseline_shift (`float`, *optional*, defaults to `-0.1`):
            The baseline is the group mean plus this shift; a negative shift favours positive updates (AsymRE paper §3).

    Every other parameter is `GRPOFamilyConfig`'s.
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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the topr algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'topr'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `topr`, the topr algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `topr`'s arguments configure `topr`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'reinforce'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `reinforce`, the
            topr algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`.
            The fields of `reinforce`'s arguments configure `reinforce`; with another function, one that is set is
            passed on to it if it takes the argument (else an error).
        advantage_threshold (`float`, *optional*, defaults to `0.0`):
            Tokens with A > threshold get the full (untruncated) policy gradient; the others are weighted by the
            truncated ratio clamp(r, 0, 1).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.

    Every other parameter is `GRPOFamilyConfig`'s.
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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the cispo algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'cispo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `cispo`, the cispo
            algorithm's. Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `cispo`'s arguments configure `cispo`; with another loss, one that is
            set is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the cispo
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `grpo`'s arguments configure `grpo`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        clip_range_low (`float`, *optional*, defaults to `1.0`):
            The stop-gradient IS weight is clamped to [1 − clip_range_low, 1 + clip_range_high]; 1.0 means no lower
            bound (MiniMax-M1).
        clip_range_high (`float`, *optional*, defaults to `0.28`):
            Upper bound ε_high of the IS weight (1 + ε_high). TRL's `loss_type='cispo'` caps the ratio at `epsilon_high`
            itself, so TRL's `epsilon_high=5.0` is `clip_range_high=4.0` here.
        enable_mask_clip (`bool`, *optional*, defaults to `False`):
            Also zero the tokens whose ratio left the trust region in the advantage's direction (r > 1 +
            mask_clip_range_high with A > 0, or r < 1 − mask_clip_range_low with A < 0).
        mask_clip_range_low (`float`, *optional*, defaults to `1.0`):
            Lower bound of `enable_mask_clip`.
        mask_clip_range_high (`float`, *optional*, defaults to `0.28`):
            Upper bound of `enable_mask_clip`.
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    std_unbiased: bool = algorithm_field("cispo", "std_unbiased")
    group_of_one: str = algorithm_field("cispo", "group_of_one")


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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the gspo algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'gspo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `gspo`, the gspo algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `gspo`'s arguments configure `gspo`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the gspo
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `grpo`'s arguments configure `grpo`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        clip_range (`float | None`, *optional*, defaults to `None`):
            Symmetric clip ε (exclusive with `clip_range_low`/`_high`).
        clip_range_low (`float | None`, *optional*, defaults to `0.0003`):
            Lower clip of the sequence ratio; GSPO paper (v2) §5.1 uses 3e-4. Left unset, `clip_range` (if set) applies
            to both sides, as in the reference.
        clip_range_high (`float | None`, *optional*, defaults to `0.0004`):
            Upper clip of the sequence ratio; GSPO paper (v2) §5.1 uses 4e-4. Left unset, `clip_range` (if set) applies
            to both sides, as in the reference.
        loss_agg_mode (`str`, *optional*, defaults to `'seq-mean-token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    std_unbiased: bool = algorithm_field("gspo", "std_unbiased")
    group_of_one: str = algorithm_field("gspo", "group_of_one")


class GSPOTrainer(GRPOFamilyTrainer):
    """GSPO: sequence-level (length-normalized) importance ratio. (config: `GSPOConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `GSPOConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = GSPOConfig


@dataclass
class VESPOConfig(GRPOFamilyConfig):
    """
    Configuration of [`VESPOTrainer`]: VESPO: a smooth Gamma weight of the sequence's importance ratio instead of a
    clip. Paper: VESPO: Variational Sequence-Level Soft Policy Optimization (arXiv 2602.10693). TRL 1.16's
    `loss_type='vespo'` as a registered loss: −sg(φ(W))·A·lp with φ the paper's Gamma weight of the sequence ratio W
    (sampler's correction included), token-mean. The advantage is TRL's group normalization (std + 1e-4), so the
    defaults train TRL's objective; any estimator composes with it, asynchronously too.

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the vespo algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'vespo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `vespo`, the vespo
            algorithm's. Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `vespo`'s arguments configure `vespo`; with another loss, one that is
            set is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the vespo
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `grpo`'s arguments configure `grpo`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        k_pos (`float`, *optional*, defaults to `2.0`):
            Gamma shape k for A ≥ 0 (TRL's `vespo_k_pos`): φ peaks at W = k/λ.
        lambda_pos (`float`, *optional*, defaults to `3.0`):
            Gamma rate λ for A ≥ 0 (TRL's `vespo_lambda_pos`).
        k_neg (`float`, *optional*, defaults to `3.0`):
            Gamma shape k for A < 0 (TRL's `vespo_k_neg`).
        lambda_neg (`float`, *optional*, defaults to `2.0`):
            Gamma rate λ for A < 0 (TRL's `vespo_lambda_neg`).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        advantage_epsilon (`float`, *optional*, defaults to `0.0001`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).

    Every other parameter is `GRPOFamilyConfig`'s.
    """

    algorithm: ClassVar[str] = "vespo"

    kl_loss_fn: str = algorithm_field("vespo", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("vespo", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("vespo", "kl_penalty_fn")
    num_generations: int = algorithm_field("vespo", "num_generations")
    policy_loss_fn: str = algorithm_field("vespo", "policy_loss_fn")
    advantage_fn: str = algorithm_field("vespo", "advantage_fn")
    k_pos: float = algorithm_field("vespo", "k_pos")
    lambda_pos: float = algorithm_field("vespo", "lambda_pos")
    k_neg: float = algorithm_field("vespo", "k_neg")
    lambda_neg: float = algorithm_field("vespo", "lambda_neg")
    loss_agg_mode: str = algorithm_field("vespo", "loss_agg_mode")
    advantage_epsilon: float = algorithm_field("vespo", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("vespo", "std_threshold")
    duplicate_experiences: bool = algorithm_field("vespo", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("vespo", "rank_penalty")
    std_cal_level: str = algorithm_field("vespo", "std_cal_level")
    std_unbiased: bool = algorithm_field("vespo", "std_unbiased")
    group_of_one: str = algorithm_field("vespo", "group_of_one")


class VESPOTrainer(GRPOFamilyTrainer):
    """VESPO: a smooth Gamma weight of the sequence's importance ratio instead of a clip. (config: `VESPOConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `VESPOConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = VESPOConfig


@dataclass
class LUSPOConfig(GRPOFamilyConfig):
    """
    Configuration of [`LUSPOTrainer`]: LUSPO: GSPO's sequence-level clipped objective scaled by each sequence's length.
    Paper: Length-Unbiased Sequence Policy Optimization: Revealing and Controlling Response Length Variation in RLVR
    (arXiv 2602.05261). TRL 1.16's `loss_type='luspo', importance_sampling_level='sequence'` as a registered loss: the
    clipped surrogate of the sequence ratio exp(mean_t log r_t), summed over each sequence's tokens and averaged over
    sequences (a sequence's loss × its length), with GSPO's clip bounds 3e-4 / 4e-4. The advantage is TRL's group
    normalization (std + 1e-4); any estimator composes with it, asynchronously too.

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the luspo algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'luspo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `luspo`, the luspo
            algorithm's. Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `luspo`'s arguments configure `luspo`; with another loss, one that is
            set is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the luspo
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `grpo`'s arguments configure `grpo`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        clip_range_low (`float`, *optional*, defaults to `0.0003`):
            Lower clip ε_low (TRL's `epsilon`); GSPO's 3e-4.
        clip_range_high (`float`, *optional*, defaults to `0.0004`):
            Upper clip ε_high (TRL's `epsilon_high`); GSPO's 4e-4.
        ratio_level (`str`, *optional*, defaults to `'sequence'`):
            `sequence`: the row's mean log-ratio (GSPO's ratio, the paper's); `token`: one ratio per token (TRL's
            `importance_sampling_level`).
        ratio_cap (`float | None`, *optional*, defaults to `None`):
            Upper bound δ of the unclipped ratio (two-sided clipping, TRL's `delta`), > 1.
        loss_agg_mode (`str`, *optional*, defaults to `'seq-mean-token-sum'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        advantage_epsilon (`float`, *optional*, defaults to `0.0001`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).

    Every other parameter is `GRPOFamilyConfig`'s.
    """

    algorithm: ClassVar[str] = "luspo"

    kl_loss_fn: str = algorithm_field("luspo", "kl_loss_fn")
    entropy_loss_fn: str = algorithm_field("luspo", "entropy_loss_fn")
    kl_penalty_fn: str = algorithm_field("luspo", "kl_penalty_fn")
    num_generations: int = algorithm_field("luspo", "num_generations")
    policy_loss_fn: str = algorithm_field("luspo", "policy_loss_fn")
    advantage_fn: str = algorithm_field("luspo", "advantage_fn")
    clip_range_low: float = algorithm_field("luspo", "clip_range_low")
    clip_range_high: float = algorithm_field("luspo", "clip_range_high")
    ratio_level: str = algorithm_field("luspo", "ratio_level")
    ratio_cap: float | None = algorithm_field("luspo", "ratio_cap")
    loss_agg_mode: str = algorithm_field("luspo", "loss_agg_mode")
    advantage_epsilon: float = algorithm_field("luspo", "advantage_epsilon")
    std_threshold: float | None = algorithm_field("luspo", "std_threshold")
    duplicate_experiences: bool = algorithm_field("luspo", "duplicate_experiences")
    rank_penalty: float | None = algorithm_field("luspo", "rank_penalty")
    std_cal_level: str = algorithm_field("luspo", "std_cal_level")
    std_unbiased: bool = algorithm_field("luspo", "std_unbiased")
    group_of_one: str = algorithm_field("luspo", "group_of_one")


class LUSPOTrainer(GRPOFamilyTrainer):
    """LUSPO: GSPO's sequence-level clipped objective scaled by each sequence's length. (config: `LUSPOConfig`).

    The `GRPOFamilyTrainer` of this algorithm: its constructor is `GRPOFamilyTrainer`'s, which documents every argument;
    `args` is a `LUSPOConfig`, or TRL's `trl.GRPOConfig` / a `transformers.TrainingArguments`, converted to one.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = LUSPOConfig


@dataclass
class SAPOConfig(GRPOFamilyConfig):
    """
    Configuration of [`SAPOTrainer`]: SAPO: soft, temperature-controlled gate instead of hard clipping. Paper: Soft
    Adaptive Policy Optimization (arXiv 2511.20347). The gate σ(τ(r − 1))·4/τ decays faster for negative advantages.
    TRL's equivalent is `loss_type='sapo'` with `loss_agg_mode='seq-mean-token-mean'`.

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the sapo algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'sapo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `sapo`, the sapo algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `sapo`'s arguments configure `sapo`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the sapo
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `grpo`'s arguments configure `grpo`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        tau_pos (`float`, *optional*, defaults to `1.0`):
            Gate temperature τ for tokens with A > 0. The loss is −A·σ(τ(r − 1))·4/τ; the gradient weight is 1 at r = 1
            and decays smoothly off-policy, faster for larger τ.
        tau_neg (`float`, *optional*, defaults to `1.05`):
            Gate temperature for tokens with A ≤ 0; must be ≥ `tau_pos` (the paper decays negative updates faster, §3).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        detach_gate (`bool`, *optional*, defaults to `False`):
            Reproduce Trinity-RFT ≤ 0.6: −A·sg(gate)·lp, whose gradient weight is 2/τ at r = 1 and grows with r (not the
            paper's objective).
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    std_unbiased: bool = algorithm_field("sapo", "std_unbiased")
    group_of_one: str = algorithm_field("sapo", "group_of_one")


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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the gpg algorithm's group size,
            Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'gpg'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `gpg`, the gpg algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `gpg`'s arguments configure `gpg`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'gpg'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `gpg`, the gpg
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `gpg`'s arguments configure `gpg`; with another function, one that is set is passed on to it if it
            takes the argument (else an error).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        f_norm (`float`, *optional*, defaults to `1.0`):
            Divisor F_norm of the centred scores, A = α·(R − mean)/F_norm (verl's `f_norm`, default 1.0).

    Every other parameter is `GRPOFamilyConfig`'s.
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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the geo_mean algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'geo_mean'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `geo_mean`, the geo_mean
            algorithm's. Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `geo_mean`'s arguments configure `geo_mean`; with another loss, one
            that is set is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the
            geo_mean algorithm's. Another one composes with the algorithm's loss: its arguments go in
            `advantage_fn_args`. The fields of `grpo`'s arguments configure `grpo`; with another function, one that is
            set is passed on to it if it takes the argument (else an error).
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            Clip ε of the token log-ratio (log π/π_old ∈ [−ε_low, ε_high]), used for both sides unless
            `clip_range_low`/`_high` are set (verl's `clip_ratio`; the GMPO paper uses 0.4).
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            Lower clip ε_low of the log-ratio, applied where A < 0. Defaults to `clip_range`.
        clip_range_high (`float | None`, *optional*, defaults to `None`):
            Upper clip ε_high of the log-ratio, applied where A > 0. Defaults to `clip_range`.
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    std_unbiased: bool = algorithm_field("geo_mean", "std_unbiased")
    group_of_one: str = algorithm_field("geo_mean", "group_of_one")


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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the dro algorithm's group size,
            Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'dro'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `dro`, the dro algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `dro`'s arguments configure `dro`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the dro
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `grpo`'s arguments configure `grpo`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        dro_beta (`float`, *optional*, defaults to `0.05`):
            Weight β > 0 of the quadratic log-ratio penalty ½β·(log π/π_old)² (verl's `policy_loss.dro_beta`, which has
            no default; 0.05 is verl's usage example and Tinker's).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    std_unbiased: bool = algorithm_field("dro", "std_unbiased")
    group_of_one: str = algorithm_field("dro", "group_of_one")


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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the clip_cov algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'clip_cov'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `clip_cov`, the clip_cov
            algorithm's. Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `clip_cov`'s arguments configure `clip_cov`; with another loss, one
            that is set is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the
            clip_cov algorithm's. Another one composes with the algorithm's loss: its arguments go in
            `advantage_fn_args`. The fields of `grpo`'s arguments configure `grpo`; with another function, one that is
            set is passed on to it if it takes the argument (else an error).
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            PPO clip ε, used for both sides unless `clip_range_low`/`_high` are set (verl's `clip_ratio`).
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            Lower clip ε_low: the ratio is clipped at 1 − ε_low (verl's `clip_ratio_low`). Defaults to `clip_range`.
        clip_range_high (`float | None`, *optional*, defaults to `None`):
            Upper clip ε_high: the ratio is clipped at 1 + ε_high (verl's `clip_ratio_high`). Defaults to `clip_range`.
        clip_cov_ratio (`float`, *optional*, defaults to `0.0002`):
            Share ρ of the micro-batch's valid tokens whose gradient is dropped: max(⌊ρ·n⌋, 1) tokens, drawn at random
            among the candidates (covariance in (clip_cov_lb, clip_cov_ub), not clipped by PPO).
        clip_cov_lb (`float`, *optional*, defaults to `1.0`):
            Lower bound (exclusive) of a candidate's covariance.
        clip_cov_ub (`float`, *optional*, defaults to `5.0`):
            Upper bound (exclusive) of a candidate's covariance.
        selection_seed (`int | None`, *optional*, defaults to `None`):
            Seed of the loss's own CPU generator for the random draw (seeded once, advanced by each call; its draws are
            verl's after `torch.manual_seed(selection_seed)`). None: torch's global CPU generator, as verl.
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    std_unbiased: bool = algorithm_field("clip_cov", "std_unbiased")
    group_of_one: str = algorithm_field("clip_cov", "group_of_one")


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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the kl_cov algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'kl_cov'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `kl_cov`, the kl_cov
            algorithm's. Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `kl_cov`'s arguments configure `kl_cov`; with another loss, one that is
            set is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the kl_cov
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `grpo`'s arguments configure `grpo`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        kl_cov_ratio (`float`, *optional*, defaults to `0.0002`):
            Share κ of the micro-batch's valid tokens that get the |log-ratio| penalty: the max(⌊κ·n⌋, 1) with the
            largest covariance.
        ppo_kl_coef (`float`, *optional*, defaults to `0.1`):
            Coefficient β of the |lp − old| penalty on the selected tokens (verl's PolicyLossConfig default; verl's loss
            itself falls back to 1.0 when the config holds None).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    std_unbiased: bool = algorithm_field("kl_cov", "std_unbiased")
    group_of_one: str = algorithm_field("kl_cov", "group_of_one")


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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the dppo_tv algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'dppo_tv'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `dppo_tv`, the dppo_tv
            algorithm's. Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `dppo_tv`'s arguments configure `dppo_tv`; with another loss, one that
            is set is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the dppo_tv
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `grpo`'s arguments configure `grpo`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            The TV divergence threshold δ (not a ratio bound: verl's `clip_ratio` reused), for both sides unless
            `clip_range_low`/`_high` are set.
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            The TV divergence threshold δ_low for A ≤ 0 (verl's `clip_ratio_low`). Defaults to `clip_range`.
        clip_range_high (`float | None`, *optional*, defaults to `None`):
            The TV divergence threshold δ_high for A > 0 (verl's `clip_ratio_high`). Defaults to `clip_range`.
        clip_ratio_c (`float`, *optional*, defaults to `3.0`):
            Truncation c > 1 of the importance ratio (TIS: sg(min(r, c)) weights the gradient; no dual clip). It caps
            the outlying large ratios; a c <= 1 would cap every ratio above 1 (and below 1 the on-policy r = 1 too), so
            it is refused, as PPO's dual-clip c. 3.0 is verl's ActorConfig value (verl's loss falls back to 20.0 when
            its config has no `clip_ratio_c`; the paper recommends a large c, §5.4).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    std_unbiased: bool = algorithm_field("dppo_tv", "std_unbiased")
    group_of_one: str = algorithm_field("dppo_tv", "group_of_one")


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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the dppo_kl algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'dppo_kl'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `dppo_kl`, the dppo_kl
            algorithm's. Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `dppo_kl`'s arguments configure `dppo_kl`; with another loss, one that
            is set is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the dppo_kl
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `grpo`'s arguments configure `grpo`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            The binary KL divergence threshold δ (not a ratio bound: verl's `clip_ratio` reused), for both sides unless
            `clip_range_low`/`_high` are set.
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            The binary KL divergence threshold δ_low for A ≤ 0 (verl's `clip_ratio_low`). Defaults to `clip_range`.
        clip_range_high (`float | None`, *optional*, defaults to `None`):
            The binary KL divergence threshold δ_high for A > 0 (verl's `clip_ratio_high`). Defaults to `clip_range`.
        clip_ratio_c (`float`, *optional*, defaults to `3.0`):
            Truncation c > 1 of the importance ratio (TIS: sg(min(r, c)) weights the gradient; no dual clip). It caps
            the outlying large ratios; a c <= 1 would cap every ratio above 1 (and below 1 the on-policy r = 1 too), so
            it is refused, as PPO's dual-clip c. 3.0 is verl's ActorConfig value (verl's loss falls back to 20.0 when
            its config has no `clip_ratio_c`; the paper recommends a large c, §5.4).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    std_unbiased: bool = algorithm_field("dppo_kl", "std_unbiased")
    group_of_one: str = algorithm_field("dppo_kl", "group_of_one")


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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'k2'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'mix'`):
            Entropy bonus `entropy_coef`·agg(entropy): `mix` over the rollouts only (expert demonstrations are not the
            policy's samples), `default` over every row, `none` disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the mix algorithm's group size,
            Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'mix'`):
            The policy loss; default `mix`, the mix algorithm's mix of RL on the rollouts and SFT on the expert rows.
            Another mixing loss (`mix`, `mix_chord`) replaces the mix; any other `trl_ext.losses` name replaces the PPO
            part on the rollout rows (CHORD with SAPO: `sapo`), each part still normalized over its own rows: its
            arguments go in `policy_loss_fn_args`. The fields of `mix`'s arguments configure `mix`; with another loss,
            one that is set is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the mix
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `grpo`'s arguments configure `grpo`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        mu (`float`, *optional*, defaults to `0.1`):
            Weight μ ∈ [0, 1] of the SFT part on the expert rows.
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            PPO clip ε of the rollout part. (Of the default PPO part: with a `rollout_loss`, set that loss's own
            arguments instead.)
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            Lower clip ε_low; defaults to `clip_range`. (Of the default PPO part: with a `rollout_loss`, set that loss's
            own arguments instead.)
        clip_range_high (`float | None`, *optional*, defaults to `None`):
            Upper clip ε_high; defaults to `clip_range`. (Of the default PPO part: with a `rollout_loss`, set that
            loss's own arguments instead.)
        use_dynamic_bsz (`bool | None`, *optional*, defaults to `None`):
            The reference's batch geometry (Trinity-RFT fills it from its config). Leave all six unset (None) for window
            normalization: each part is averaged over its own rows of the optimizer window. Setting any of them switches
            to the reference's per-micro-batch weighting n·w (see `trl_ext.losses.mix`), with the reference's defaults
            (1, False) for the ones left unset.
        ppo_mini_batch_size (`int | None`, *optional*, defaults to `None`):
            Reference geometry: see `use_dynamic_bsz`.
        ppo_micro_batch_size_per_gpu (`int | None`, *optional*, defaults to `None`):
            Reference geometry: see `use_dynamic_bsz`.
        ngpus_trainer (`int | None`, *optional*, defaults to `None`):
            Reference geometry: see `use_dynamic_bsz`.
        train_batch_size_usual (`int | None`, *optional*, defaults to `None`):
            Reference geometry: see `use_dynamic_bsz`.
        train_batch_size_expert (`int | None`, *optional*, defaults to `None`):
            Reference geometry: see `use_dynamic_bsz`.
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        sft_loss_agg_mode (`str | None`, *optional*, defaults to `None`):
            Aggregation of the SFT part (expert rows); defaults to `loss_agg_mode`.
        grpo_loss_agg_mode (`str | None`, *optional*, defaults to `None`):
            Aggregation of the PPO part (rollouts); defaults to `loss_agg_mode`. (With a `rollout_loss`, that loss's own
            `loss_agg_mode` applies instead.)
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).
        expert_data_ratio (`float`, *optional*, defaults to `0.5`):
            Share of each generation batch's rows that are expert demonstrations (from the trainer's `expert_dataset`),
            the rest being rollouts: ceil(ratio × generation_batch_size) expert rows, which must be a multiple of
            `num_generations` (and of the number of processes) so that the rollouts form whole prompt groups. 0 trains
            on rollouts only, 1 on expert rows only (no generation).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    std_unbiased: bool = algorithm_field("mix", "std_unbiased")
    group_of_one: str = algorithm_field("mix", "group_of_one")


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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'k2'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'mix'`):
            Entropy bonus `entropy_coef`·agg(entropy): `mix` over the rollouts only (expert demonstrations are not the
            policy's samples), `default` over every row, `none` disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the mix_chord algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'mix_chord'`):
            The policy loss; default `mix_chord`, the mix_chord algorithm's mix of RL on the rollouts and SFT on the
            expert rows. Another mixing loss (`mix`, `mix_chord`) replaces the mix; any other `trl_ext.losses` name
            replaces the PPO part on the rollout rows (CHORD with SAPO: `sapo`), each part still normalized over its own
            rows: its arguments go in `policy_loss_fn_args`. The fields of `mix_chord`'s arguments configure
            `mix_chord`; with another loss, one that is set is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the
            mix_chord algorithm's. Another one composes with the algorithm's loss: its arguments go in
            `advantage_fn_args`. The fields of `grpo`'s arguments configure `grpo`; with another function, one that is
            set is passed on to it if it takes the argument (else an error).
        mu_warmup_steps (`int`, *optional*, defaults to `0`):
            μ rises linearly from 0 to `mu_peak` over this many optimizer steps.
        mu_decay_steps (`int`, *optional*, defaults to `0`):
            Then μ decays from `mu_peak` to `mu_valley` over this many steps (cosine), and stays there.
        mu_peak (`float`, *optional*, defaults to `0.1`):
            μ at the end of the warm-up.
        mu_valley (`float`, *optional*, defaults to `0.1`):
            μ after the decay (CHORD's floor).
        enable_phi_function (`bool`, *optional*, defaults to `True`):
            CHORD-φ: weight each expert token's NLL by sg(p(1 − p)), p the policy's probability of the token; False uses
            plain SFT.
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            PPO clip ε of the rollout part. (Of the default PPO part: with a `rollout_loss`, set that loss's own
            arguments instead.)
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            Lower clip ε_low; defaults to `clip_range`. (Of the default PPO part: with a `rollout_loss`, set that loss's
            own arguments instead.)
        clip_range_high (`float | None`, *optional*, defaults to `None`):
            Upper clip ε_high; defaults to `clip_range`. (Of the default PPO part: with a `rollout_loss`, set that
            loss's own arguments instead.)
        use_dynamic_bsz (`bool | None`, *optional*, defaults to `None`):
            The reference's batch geometry (Trinity-RFT fills it from its config). Leave all six unset (None) for window
            normalization: each part is averaged over its own rows of the optimizer window. Setting any of them switches
            to the reference's per-micro-batch weighting n·w (see `trl_ext.losses.mix`), with the reference's defaults
            (1, False) for the ones left unset.
        ppo_mini_batch_size (`int | None`, *optional*, defaults to `None`):
            Reference geometry: see `use_dynamic_bsz`.
        ppo_micro_batch_size_per_gpu (`int | None`, *optional*, defaults to `None`):
            Reference geometry: see `use_dynamic_bsz`.
        ngpus_trainer (`int | None`, *optional*, defaults to `None`):
            Reference geometry: see `use_dynamic_bsz`.
        train_batch_size_usual (`int | None`, *optional*, defaults to `None`):
            Reference geometry: see `use_dynamic_bsz`.
        train_batch_size_expert (`int | None`, *optional*, defaults to `None`):
            Reference geometry: see `use_dynamic_bsz`.
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        sft_loss_agg_mode (`str | None`, *optional*, defaults to `None`):
            Aggregation of the SFT part (expert rows); defaults to `loss_agg_mode`.
        grpo_loss_agg_mode (`str | None`, *optional*, defaults to `None`):
            Aggregation of the PPO part (rollouts); defaults to `loss_agg_mode`. (With a `rollout_loss`, that loss's own
            `loss_agg_mode` applies instead.)
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).
        expert_data_ratio (`float`, *optional*, defaults to `0.5`):
            Share of each generation batch's rows that are expert demonstrations (from the trainer's `expert_dataset`),
            the rest being rollouts: ceil(ratio × generation_batch_size) expert rows, which must be a multiple of
            `num_generations` (and of the number of processes) so that the rollouts form whole prompt groups. 0 trains
            on rollouts only, 1 on expert rows only (no generation).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    std_unbiased: bool = algorithm_field("mix_chord", "std_unbiased")
    group_of_one: str = algorithm_field("mix_chord", "group_of_one")


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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the raft algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'sft'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `sft`, the raft algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `sft`'s arguments configure `sft`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'raft'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `raft`, the raft
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `raft`'s arguments configure `raft`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        min_reward (`float | None`, *optional*, defaults to `None`):
            Keep a group's best completion only if its reward is at least this value (default: always keep the best).

    Every other parameter is `GRPOFamilyConfig`'s.
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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the sppo algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'sppo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `sppo`, the sppo algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `sppo`'s arguments configure `sppo`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the sppo
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `grpo`'s arguments configure `grpo`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        sppo_epsilon (`float`, *optional*, defaults to `0.3`):
            Trust region of sPPO: a token contributes only while 1/(1+ε) ≤ r ≤ 1+ε. (the `sppo` loss's `epsilon`)
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    std_unbiased: bool = algorithm_field("sppo", "std_unbiased")
    group_of_one: str = algorithm_field("sppo", "group_of_one")


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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the rec algorithm's group size,
            Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'rec'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `rec`, the rec algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `rec`'s arguments configure `rec`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'rec'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `rec`, the rec
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `rec`'s arguments configure `rec`; with another function, one that is set is passed on to it if it
            takes the argument (else an error).
        rec_epsilon_low (`float`, *optional*, defaults to `0.2`):
            Lower clip ε_l (ratio ≥ 1 − ε_l), in (0, 1]. (the `rec` loss's `epsilon_low`)
        rec_epsilon_high (`float`, *optional*, defaults to `0.2`):
            Upper clip ε_h (ratio ≤ 1 + ε_h), > 0. (the `rec` loss's `epsilon_high`)
        rec_epsilon_low_prime (`float`, *optional*, defaults to `0.6`):
            `ring` mode: negative-side outer bound ε'_l, in (0, 1]. (the `rec` loss's `epsilon_low_prime`)
        rec_epsilon_high_prime (`float`, *optional*, defaults to `2.0`):
            `ring` mode: outer bound ε'_h, > 0. (the `rec` loss's `epsilon_high_prime`)
        rec_clip_mode (`str`, *optional*, defaults to `'none'`):
            Which tokens are kept: `none`, `two-side`, `one-side`, `gspo-one-side` (on the sequence ratio), `ring`. (the
            `rec` loss's `clip_mode`)
        rec_weight (`str`, *optional*, defaults to `'none'`):
            Advantage reweighting: `none`, `importance_sampling` (A·r), `gspo_importance_sampling` (A·sequence ratio;
            needs `rec_clip_mode='gspo-one-side'`), `advantage` (A·exp(A/temp)). (the `rec` loss's `weight`)
        rec_regularizer (`str`, *optional*, defaults to `'none'`):
            Regularizer: `none`, `forward-kl` (−coef·lp), `k2` (coef·(lp − old)²). (the `rec` loss's `regularizer`)
        rec_regularizer_coef (`float`, *optional*, defaults to `0.0`):
            Coefficient of `rec_regularizer`, ≥ 0. (the `rec` loss's `regularizer_coef`)
        rec_temp (`float`, *optional*, defaults to `1.0`):
            Temperature of `rec_weight='advantage'`, > 0. (the `rec` loss's `temp`)
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of the std normalization. (the `rec` advantage's `epsilon`)
        std_normalize (`bool`, *optional*, defaults to `False`):
            Divide the centred rewards by the group std.
        drop (`str | None`, *optional*, defaults to `None`):
            `balance`: in each group, randomly drop negative-advantage samples until there are no more of them than
            positive ones (seeded by `seed` and the step).

    Every other parameter is `GRPOFamilyConfig`'s.
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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the m2po algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'m2po'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `m2po`, the m2po algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `m2po`'s arguments configure `m2po`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `grpo`, the m2po
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `grpo`'s arguments configure `grpo`; with another function, one that is set is passed on to it if
            it takes the argument (else an error).
        m2_threshold (`float`, *optional*, defaults to `0.04`):
            M2PO's τ: the largest (log r)² of the trust-region tokens (A > 0 with r > 1, A < 0 with r < 1) are masked
            until their mean (log r)² is at most τ; 0.04 is the paper's.
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        log_ratio_clip (`float`, *optional*, defaults to `20.0`):
            The loss's value uses exp(clamp(log r, ±log_ratio_clip)), with the gradient of the unclamped log-ratio (a
            straight-through clamp that only keeps the value finite).
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R − mean)/(std + ε) (TRL's own GRPO uses 1e-4). The std is the unbiased group std; a group whose
            rewards are all equal gets advantage 0. (the `grpo` advantage's `epsilon`)
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups whose reward std is at or below this value.
        duplicate_experiences (`bool`, *optional*, defaults to `False`):
            With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so every
            step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the reference's
            `duplicate_experiences`.
        rank_penalty (`float | None`, *optional*, defaults to `None`):
            Rank penalty (arXiv 2506.02355, as Trinity-RFT): the group mean and std are taken over the rewards R·(1 −
            rank/n·rank_penalty), rank 0 being the least likely sample by mean token log-prob; the numerator keeps R.
            Needs `logprobs` and `response_mask` (in a trainer: the sampling policy's, one extra forward pass without
            gradients unless TRL computed them); None: off.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean), or `none`: R −
            group mean (Dr. GRPO, arXiv 2503.20783). TRL's `scale_rewards` sets it in a training config.
        std_unbiased (`bool`, *optional*, defaults to `True`):
            The group std with Bessel's correction (Trinity-RFT, verl); False: the population std (TRL's asynchronous
            GRPO worker).
        group_of_one (`str`, *optional*, defaults to `'reward'`):
            A group of one sample (or one scored sample): `reward` centres it on 0 with std 1, A = R/(1 + ε) (verl,
            Trinity-RFT); `zero` centres it on its own reward, A = 0 (TRL's asynchronous GRPO worker).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    std_unbiased: bool = algorithm_field("m2po", "std_unbiased")
    group_of_one: str = algorithm_field("m2po", "group_of_one")


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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'k2'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'default'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the multi_step_grpo algorithm's
            group size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'ppo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `ppo`, the multi_step_grpo
            algorithm's. Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `ppo`'s arguments configure `ppo`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'step_wise_grpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `step_wise_grpo`,
            the multi_step_grpo algorithm's. Another one composes with the algorithm's loss: its arguments go in
            `advantage_fn_args`. The fields of `step_wise_grpo`'s arguments configure `step_wise_grpo`; with another
            function, one that is set is passed on to it if it takes the argument (else an error).
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            PPO clip ε, used for both sides unless `clip_range_low`/`_high` are set.
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            Lower clip ε_low: the ratio is clipped at 1 − ε_low. Defaults to `clip_range`.
        clip_range_high (`float | None`, *optional*, defaults to `None`):
            Upper clip ε_high: the ratio is clipped at 1 + ε_high (DAPO recommends 0.28). Defaults to `clip_range`.
        clip_ratio_c (`float | None`, *optional*, defaults to `3.0`):
            Dual-clip constant c > 1 (Ye et al. 2020, arXiv 1912.09729): for negative advantages the loss is bounded by
            −A·c, so a very large ratio cannot blow up the update. None: no dual clip (c = ∞, TRL's PPO clip).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        enable_sequence_masking (`bool`, *optional*, defaults to `False`):
            Drop the negative-advantage tokens of sequences whose mean log-ratio log(π_old/π) exceeds
            `delta_sequence_masking` (off-policy sequence masking, DeepSeek-V3.2).
        delta_sequence_masking (`float`, *optional*, defaults to `0.1`):
            Threshold δ of `enable_sequence_masking`.
        fallback_to_policy_gradient (`bool`, *optional*, defaults to `False`):
            Use the on-policy ratio exp(lp − sg(lp)) ≡ 1 (plain policy gradient) instead of π/π_old.
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (R_run − mean)/(std + ε), the statistics taken over the group's runs. (the `step_wise_grpo` advantage's
            `epsilon`)
        enable_step_norm (`bool`, *optional*, defaults to `False`):
            Divide each step's advantage by its run's number of steps.
        std_cal_level (`str`, *optional*, defaults to `'group'`):
            Divide by the std over the runs of the `group` or of the whole `batch` (the mean stays the group mean).
        std_threshold (`float | None`, *optional*, defaults to `None`):
            Drop (mask out) the groups of a single run or whose std over runs is at or below this value.

    Every other parameter is `GRPOFamilyConfig`'s.
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
    clip_ratio_c: float | None = algorithm_field("multi_step_grpo", "clip_ratio_c")
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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'k2'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'default'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the gigpo algorithm's group
            size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'ppo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `ppo`, the gigpo algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `ppo`'s arguments configure `ppo`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'gigpo'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `gigpo`, the gigpo
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `gigpo`'s arguments configure `gigpo`; with another function, one that is set is passed on to it
            if it takes the argument (else an error).
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            PPO clip ε, used for both sides unless `clip_range_low`/`_high` are set.
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            Lower clip ε_low: the ratio is clipped at 1 − ε_low. Defaults to `clip_range`.
        clip_range_high (`float | None`, *optional*, defaults to `None`):
            Upper clip ε_high: the ratio is clipped at 1 + ε_high (DAPO recommends 0.28). Defaults to `clip_range`.
        clip_ratio_c (`float | None`, *optional*, defaults to `3.0`):
            Dual-clip constant c > 1 (Ye et al. 2020, arXiv 1912.09729): for negative advantages the loss is bounded by
            −A·c, so a very large ratio cannot blow up the update. None: no dual clip (c = ∞, TRL's PPO clip).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        enable_sequence_masking (`bool`, *optional*, defaults to `False`):
            Drop the negative-advantage tokens of sequences whose mean log-ratio log(π_old/π) exceeds
            `delta_sequence_masking` (off-policy sequence masking, DeepSeek-V3.2).
        delta_sequence_masking (`float`, *optional*, defaults to `0.1`):
            Threshold δ of `enable_sequence_masking`.
        fallback_to_policy_gradient (`bool`, *optional*, defaults to `False`):
            Use the on-policy ratio exp(lp − sg(lp)) ≡ 1 (plain policy gradient) instead of π/π_old.
        omega (`float`, *optional*, defaults to `1.0`):
            Weight ω of the step-level (anchor-state) advantage in A_E + ω·A_S.
        gamma (`float`, *optional*, defaults to `1.0`):
            Discount γ of the step-level returns R_t = Σ_{k≥t} γ^(k−t) r_k.
        fnorm (`str`, *optional*, defaults to `'none'`):
            Normalization of both levels: `none` (F = 1, the paper's default for agents: mean-centred only) or `std`
            (the unbiased std of the group, as GRPO).
        advantage_epsilon (`float`, *optional*, defaults to `1e-06`):
            ε of (x − mean)/(F + ε). (the `gigpo` advantage's `epsilon`)

    Every other parameter is `GRPOFamilyConfig`'s.
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
    clip_ratio_c: float | None = algorithm_field("gigpo", "clip_ratio_c")
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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the on_policy_distill
            algorithm's group size, Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'ppo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `ppo`, the on_policy_distill
            algorithm's. Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `ppo`'s arguments configure `ppo`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'on_policy_distill'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default
            `on_policy_distill`, the on_policy_distill algorithm's. Another one composes with the algorithm's loss: its
            arguments go in `advantage_fn_args`. The fields of `on_policy_distill`'s arguments configure
            `on_policy_distill`; with another function, one that is set is passed on to it if it takes the argument
            (else an error).
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            PPO clip ε, used for both sides unless `clip_range_low`/`_high` are set.
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            Lower clip ε_low: the ratio is clipped at 1 − ε_low. Defaults to `clip_range`.
        clip_range_high (`float | None`, *optional*, defaults to `None`):
            Upper clip ε_high: the ratio is clipped at 1 + ε_high (DAPO recommends 0.28). Defaults to `clip_range`.
        clip_ratio_c (`float | None`, *optional*, defaults to `3.0`):
            Dual-clip constant c > 1 (Ye et al. 2020, arXiv 1912.09729): for negative advantages the loss is bounded by
            −A·c, so a very large ratio cannot blow up the update. None: no dual clip (c = ∞, TRL's PPO clip).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        enable_sequence_masking (`bool`, *optional*, defaults to `False`):
            Drop the negative-advantage tokens of sequences whose mean log-ratio log(π_old/π) exceeds
            `delta_sequence_masking` (off-policy sequence masking, DeepSeek-V3.2).
        delta_sequence_masking (`float`, *optional*, defaults to `0.1`):
            Threshold δ of `enable_sequence_masking`.
        fallback_to_policy_gradient (`bool`, *optional*, defaults to `False`):
            Use the on-policy ratio exp(lp − sg(lp)) ≡ 1 (plain policy gradient) instead of π/π_old.
        kl_coef (`float`, *optional*, defaults to `1.0`):
            Scale λ of the per-token advantage λ·(log π_teacher − log π_old): minus the sampled token's reverse KL to
            the teacher (Trinity-RFT's `kl_coef`, Tinker's `kl_penalty_coef`). Not the KL-to-reference coefficient,
            which is `beta`.
        distill_baseline (`str`, *optional*, defaults to `'none'`):
            Baseline subtracted from the distillation advantages (beyond the reference, which has none): `batch` the
            mean over the generation batch's completion tokens, `group` the mean over the prompt group's tokens at the
            same position. A variance reduction for small batches, where a teacher that rejects most samples can push
            the student towards noise (measured on the toy task with 64 samples per step).
        teacher_model_name_or_path (`str | None`, *optional*, defaults to `None`):
            The teacher (Hub id or local path), used when the trainer gets no `teacher_model`. It must share the
            student's tokenizer.
        teacher_model_init_kwargs (`dict[str, Any] | str | None`, *optional*, defaults to `None`):
            Keyword arguments of the teacher's `from_pretrained` when it is given as a path, e.g. `{"dtype":
            "bfloat16"}` (default: the student's dtype) or `{"device_map": "auto"}` to spread a large teacher over the
            visible GPUs (single process).
        teacher_device (`str | None`, *optional*, defaults to `None`):
            Device of the teacher, e.g. `cuda:1` or `cpu` (default: the student's device on each process, sharded like
            TRL's reference model under DeepSpeed ZeRO-3 / FSDP).
        teacher_top_k (`int`, *optional*, defaults to `0`):
            The distillation signal. 0: the sampled-token estimator (the per-token advantage of `advantage_fn`, the
            reference's). k > 0: a dense loss, the generalized JSD (`jsd_beta`) between student and teacher over the
            teacher's k most likely tokens at each completion position plus one tail category for the rest of the
            vocabulary. -1: the same over the whole vocabulary (TRL's `DistillationTrainer` loss). Dense modes compute
            the logits a chunk of positions at a time (no [B, T, V] tensor); the teacher's top-k is taken once per
            generation batch, without gradients, at the sampling temperature.
        jsd_beta (`float`, *optional*, defaults to `1.0`):
            Interpolation β of the dense divergence (teacher_top_k ≠ 0), as TRL's `DistillationConfig.beta`: 0 forward
            KL(teacher ‖ student), 1 reverse KL(student ‖ teacher), between: the generalized JSD with mixture (1 −
            β)·student + β·teacher.
        reward_weight (`float`, *optional*, defaults to `0.0`):
            Weight w of the task reward in the advantage: A_t = kl_coef·(log π_teacher − log π_old) + w·Â, with Â the
            `reward_advantage_fn` advantage of the completion's summed reward (from `reward_funcs`, weighted by
            `reward_weights`), on each of its tokens. 0 (default) is pure distillation: reward functions, if given, are
            only logged.
        reward_advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            Advantage of the reward term: `grpo` ((R − group mean)/(group std + 1e-6)), `rloo` (R − mean of the group's
            other rewards) or `reinforce` (R itself).
        teacher_model_server_url (`str | None`, *optional*, defaults to `None`):
            Base URL of a vLLM server serving the teacher (e.g. `http://localhost:8001`), as TRL's
            `ServerDistillationConfig`: it scores every completion instead of a local teacher, in both the sampled-token
            and the top-k mode (not `teacher_top_k=-1`). Start it with `vllm serve <teacher> --logprobs-mode
            processed_logprobs` (and `--max-logprobs -1` for `teacher_top_k` > 20); the trainer asks it through TRL's
            `VLLMClient` (vLLM installed) and waits `vllm_server_timeout` seconds for it.
        teacher_server_urls (`dict[str, str] | str | None`, *optional*, defaults to `None`):
            vLLM servers serving teachers, by `teacher_id`, as TRL's `AsyncDistillationConfig` (a JSON object on the
            command line, e.g. `{"math": "http://localhost:8002", "code": "http://localhost:8003"}`), each served as for
            `teacher_model_server_url`. One entry scores every completion; with several, each dataset row's `teacher_id`
            column names the teacher of its completions (multi-teacher on-policy distillation). The trainer's
            `teacher_model` may add local teachers by `teacher_id` (`{teacher_id: path or model}`).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    clip_ratio_c: float | None = algorithm_field("on_policy_distill", "clip_ratio_c")
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

    Parameters specific to this algorithm:

        kl_loss_fn (`str`, *optional*, defaults to `'none'`):
            KL estimator of the KL term `beta`·agg(KL(π‖π_ref)), aggregated with `loss_agg_mode` (used when `beta` > 0):
            `abs`, `corrected_k3`, `k1`, `k2`, `k3`, `kl`, `low_var_kl`, `mse` (formulas in `trl_ext.losses.kl`; `k2` =
            ½(log r)², `k3` is TRL's), or `none` (no KL term: its coefficient becomes 0).
        entropy_loss_fn (`str`, *optional*, defaults to `'none'`):
            Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with `loss_agg_mode`; `none`
            disables it.
        kl_penalty_fn (`str`, *optional*, defaults to `'none'`):
            KL in the reward (Trinity-RFT's `kl_penalty_fn`): token reward = score − coef·KL(π_old ‖ π_ref) on every
            completion token, the outcome score on the last one, before the advantage is computed. The KL estimator
            (`k1`, `k2`, `k3`, `low_var_kl`, `abs`, `corrected_k3`) or `none` (default). Needs a reference model (loaded
            even with `beta=0`). Estimators that take token rewards (`reinforceplusplus`, `remax`, the `*_verl` ones)
            see them per token; the per-sample estimators see each completion's sum, score − coef·Σ_t KL_t, as the
            reference's trainer-side (`*_verl`) estimators compute it.
        num_generations (`int`, *optional*, defaults to `8`):
            Completions sampled per prompt (the group of the group-relative advantages): the jsd algorithm's group size,
            Trinity-RFT's `repeat_times`.
        policy_loss_fn (`str`, *optional*, defaults to `'ppo'`):
            The policy loss, a `trl_ext.losses` name (`trl-ext list` shows them); default `ppo`, the jsd algorithm's.
            Another loss composes with the algorithm's advantage, KL and entropy terms: its arguments go in
            `policy_loss_fn_args`. The fields of `ppo`'s arguments configure `ppo`; with another loss, one that is set
            is passed on to it if it takes the argument (else an error).
        advantage_fn (`str`, *optional*, defaults to `'jsd'`):
            The advantage function, a `trl_ext.advantages` name (`trl-ext list` shows them); default `jsd`, the jsd
            algorithm's. Another one composes with the algorithm's loss: its arguments go in `advantage_fn_args`. The
            fields of `jsd`'s arguments configure `jsd`; with another function, one that is set is passed on to it if it
            takes the argument (else an error).
        clip_range (`float | None`, *optional*, defaults to `0.2`):
            PPO clip ε, used for both sides unless `clip_range_low`/`_high` are set.
        clip_range_low (`float | None`, *optional*, defaults to `None`):
            Lower clip ε_low: the ratio is clipped at 1 − ε_low. Defaults to `clip_range`.
        clip_range_high (`float | None`, *optional*, defaults to `None`):
            Upper clip ε_high: the ratio is clipped at 1 + ε_high (DAPO recommends 0.28). Defaults to `clip_range`.
        clip_ratio_c (`float | None`, *optional*, defaults to `3.0`):
            Dual-clip constant c > 1 (Ye et al. 2020, arXiv 1912.09729): for negative advantages the loss is bounded by
            −A·c, so a very large ratio cannot blow up the update. None: no dual clip (c = ∞, TRL's PPO clip).
        loss_agg_mode (`str`, *optional*, defaults to `'token-mean'`):
            How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on all
            processes): `token-mean` (Σ/number of tokens, DAPO), `token-sum` (Σ, unnormalized: verl's),
            `seq-mean-token-mean` (mean over sequences of each sequence's token mean, GRPO), `seq-mean-token-sum` (mean
            over sequences of token sums), `seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences ·
            max_completion_length)). The result does not depend on how the window is split into micro-batches and
            processes.
        enable_sequence_masking (`bool`, *optional*, defaults to `False`):
            Drop the negative-advantage tokens of sequences whose mean log-ratio log(π_old/π) exceeds
            `delta_sequence_masking` (off-policy sequence masking, DeepSeek-V3.2).
        delta_sequence_masking (`float`, *optional*, defaults to `0.1`):
            Threshold δ of `enable_sequence_masking`.
        fallback_to_policy_gradient (`bool`, *optional*, defaults to `False`):
            Use the on-policy ratio exp(lp − sg(lp)) ≡ 1 (plain policy gradient) instead of π/π_old.
        lambda_coef (`float`, *optional*, defaults to `0.5`):
            JSD mixture weight β: β·KL(teacher‖M) + (1 − β)·KL(student‖M), M = β·teacher + (1 − β)·student; 0 gives
            KL(student‖teacher), 1 KL(teacher‖student), 0.5 the symmetric JSD.
        kl_coef (`float`, *optional*, defaults to `1.0`):
            Scale of the per-token advantage −kl_coef·JSD (0 gives zero advantages; a negative scale would reward moving
            away from the teacher and is refused).
        jsd_temperature (`float`, *optional*, defaults to `1.0`):
            Both log-probs are divided by this before the JSD (the reference's log_probs / T). (the `jsd` advantage's
            `temperature`)
        jsd_form (`str`, *optional*, defaults to `'gradient'`):
            `gradient`: the advantage is the per-token policy-gradient weight of −kl_coef·JSD_β, which moves the student
            towards the teacher; `reference`: Trinity-RFT 0.6.0's −kl_coef·(per-token JSD value), which for 0 < β < 1 is
            never negative and moves the student away (see the module docstring). (the `jsd` advantage's `form`)
        chunk_size (`int | None`, *optional*, defaults to `None`):
            Compute the JSD of the valid tokens this many at a time (peak memory only); None: all at once.
        teacher_model_name_or_path (`str | None`, *optional*, defaults to `None`):
            The teacher (Hub id or local path), used when the trainer gets no `teacher_model`. It must share the
            student's tokenizer.
        teacher_model_init_kwargs (`dict[str, Any] | str | None`, *optional*, defaults to `None`):
            Keyword arguments of the teacher's `from_pretrained` when it is given as a path, e.g. `{"dtype":
            "bfloat16"}` (default: the student's dtype) or `{"device_map": "auto"}` to spread a large teacher over the
            visible GPUs (single process).
        teacher_device (`str | None`, *optional*, defaults to `None`):
            Device of the teacher, e.g. `cuda:1` or `cpu` (default: the student's device on each process, sharded like
            TRL's reference model under DeepSpeed ZeRO-3 / FSDP).
        teacher_top_k (`int`, *optional*, defaults to `0`):
            The distillation signal. 0: the sampled-token estimator (the per-token advantage of `advantage_fn`, the
            reference's). k > 0: a dense loss, the generalized JSD (`jsd_beta`) between student and teacher over the
            teacher's k most likely tokens at each completion position plus one tail category for the rest of the
            vocabulary. -1: the same over the whole vocabulary (TRL's `DistillationTrainer` loss). Dense modes compute
            the logits a chunk of positions at a time (no [B, T, V] tensor); the teacher's top-k is taken once per
            generation batch, without gradients, at the sampling temperature.
        jsd_beta (`float`, *optional*, defaults to `1.0`):
            Interpolation β of the dense divergence (teacher_top_k ≠ 0), as TRL's `DistillationConfig.beta`: 0 forward
            KL(teacher ‖ student), 1 reverse KL(student ‖ teacher), between: the generalized JSD with mixture (1 −
            β)·student + β·teacher.
        reward_weight (`float`, *optional*, defaults to `0.0`):
            Weight w of the task reward in the advantage: A_t = kl_coef·(log π_teacher − log π_old) + w·Â, with Â the
            `reward_advantage_fn` advantage of the completion's summed reward (from `reward_funcs`, weighted by
            `reward_weights`), on each of its tokens. 0 (default) is pure distillation: reward functions, if given, are
            only logged.
        reward_advantage_fn (`str`, *optional*, defaults to `'grpo'`):
            Advantage of the reward term: `grpo` ((R − group mean)/(group std + 1e-6)), `rloo` (R − mean of the group's
            other rewards) or `reinforce` (R itself).
        teacher_model_server_url (`str | None`, *optional*, defaults to `None`):
            Base URL of a vLLM server serving the teacher (e.g. `http://localhost:8001`), as TRL's
            `ServerDistillationConfig`: it scores every completion instead of a local teacher, in both the sampled-token
            and the top-k mode (not `teacher_top_k=-1`). Start it with `vllm serve <teacher> --logprobs-mode
            processed_logprobs` (and `--max-logprobs -1` for `teacher_top_k` > 20); the trainer asks it through TRL's
            `VLLMClient` (vLLM installed) and waits `vllm_server_timeout` seconds for it.
        teacher_server_urls (`dict[str, str] | str | None`, *optional*, defaults to `None`):
            vLLM servers serving teachers, by `teacher_id`, as TRL's `AsyncDistillationConfig` (a JSON object on the
            command line, e.g. `{"math": "http://localhost:8002", "code": "http://localhost:8003"}`), each served as for
            `teacher_model_server_url`. One entry scores every completion; with several, each dataset row's `teacher_id`
            column names the teacher of its completions (multi-teacher on-policy distillation). The trainer's
            `teacher_model` may add local teachers by `teacher_id` (`{teacher_id: path or model}`).

    Every other parameter is `GRPOFamilyConfig`'s.
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
    clip_ratio_c: float | None = algorithm_field("jsd", "clip_ratio_c")
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
