"""The algorithms' own arguments: the argument dataclasses each trainer config is assembled from.

A config (`trl_ext.SAPOConfig`, ...) is TRL's config plus the dataclasses that `ALGORITHM_ARGUMENTS` names for its
algorithm: the policy loss's arguments (names and defaults of `trl_ext.losses`), the advantage function's (of
`trl_ext.advantages`) and, for some algorithms, more (MIX's expert data, the distillation teacher, DPO's KL term).
This module needs neither trl nor transformers, so that `trl-ext list` can show every algorithm's settings and
their defaults without importing the configs; `trl_ext.trainers.grpo_config` and `dpo_config` build the config
classes from `ALGORITHM_ARGUMENTS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..losses.base import LOSS_AGG_MODES
from ..losses.kl import KL_FNS

_AGG_HELP = (
    "How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on "
    "all processes): `token-mean` (Σ/number of tokens, DAPO), `seq-mean-token-mean` (mean over sequences of "
    "each sequence's token mean, GRPO), `seq-mean-token-sum` (mean over sequences of token sums), "
    "`seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences · max_completion_length)). The result does not depend "
    "on how the window is split into micro-batches and processes."
)


def _help(text: str, **extra: Any) -> dict[str, Any]:
    return {"help": text, **extra}


def _agg_field(default: str) -> Any:
    return field(default=default, metadata=_help(_AGG_HELP, choices=list(LOSS_AGG_MODES)))


class DocumentedDefault(float):
    """A float field's documented default, told apart from the same value set explicitly (`kl_coef=0.001`).

    A coefficient whose term can be switched off by another field (`kl_loss_fn="none"`) takes this as its dataclass
    default: the config resolves it to a plain float in `__post_init__`, and only an explicitly set non-zero value
    contradicts the switch. It compares, prints and computes as the float itself, so the help text, the docstring,
    `trl-ext list` and `dataclasses.fields(...)` show the real default.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return float.__repr__(self)

    __str__ = __repr__


class _DocumentedDefaultStr(str):
    """`DocumentedDefault` for a string value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str.__repr__(self)


def documented_default(value: Any) -> Any:
    """`value` marked as a default the user did not set (None stays None)."""
    if isinstance(value, str):
        return _DocumentedDefaultStr(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return DocumentedDefault(value)
    if value is None:
        return None
    raise TypeError(f"no documented-default marker for {value!r}")


def is_documented_default(value: Any) -> bool:
    """True when a field holds a default the user did not set (`documented_default`)."""
    return isinstance(value, (DocumentedDefault, _DocumentedDefaultStr))


# ---------------------------------------------------------------------------------------------------------------
# Policy-loss arguments (one dataclass per loss family; names and defaults of `trl_ext.losses`)
# ---------------------------------------------------------------------------------------------------------------


class LossArguments:
    """Base of the policy-loss argument dataclasses: `loss_renames` maps config fields to loss arguments where
    the names differ."""

    loss_renames: ClassVar[dict[str, str]] = {}


class AdvantageArguments:
    """Base of the advantage argument dataclasses: the estimator's name (`trl_ext.advantages`) and the
    config-field -> estimator-argument renames."""

    advantage_fn: ClassVar[str]
    advantage_renames: ClassVar[dict[str, str]] = {}


@dataclass
class PPOLossArguments(LossArguments):
    """Arguments of the dual-clip PPO loss (`get_policy_loss("ppo")`)."""

    clip_range: float | None = field(
        default=0.2, metadata=_help("PPO clip ε, used for both sides unless `clip_range_low`/`_high` are set.")
    )
    clip_range_low: float | None = field(
        default=None, metadata=_help("Lower clip ε_low: the ratio is clipped at 1 − ε_low. Defaults to `clip_range`.")
    )
    clip_range_high: float | None = field(
        default=None,
        metadata=_help(
            "Upper clip ε_high: the ratio is clipped at 1 + ε_high (DAPO recommends 0.28). Defaults to `clip_range`."
        ),
    )
    clip_ratio_c: float = field(
        default=3.0,
        metadata=_help(
            "Dual-clip constant c > 1 (Ye et al. 2020, arXiv 1912.09729): for negative advantages the "
            "loss is bounded by −A·c, so a very large ratio cannot blow up the update."
        ),
    )
    loss_agg_mode: str = _agg_field("token-mean")
    enable_sequence_masking: bool = field(
        default=False,
        metadata=_help(
            "Drop the negative-advantage tokens of sequences whose mean log-ratio log(π_old/π) exceeds "
            "`delta_sequence_masking` (off-policy sequence masking, DeepSeek-V3.2)."
        ),
    )
    delta_sequence_masking: float = field(default=0.1, metadata=_help("Threshold δ of `enable_sequence_masking`."))
    fallback_to_policy_gradient: bool = field(
        default=False,
        metadata=_help("Use the on-policy ratio exp(lp − sg(lp)) ≡ 1 (plain policy gradient) instead of π/π_old."),
    )


@dataclass
class GSPOLossArguments(LossArguments):
    """Arguments of the GSPO-token loss (`get_policy_loss("gspo")`)."""

    clip_range: float | None = field(
        default=None, metadata=_help("Symmetric clip ε (exclusive with `clip_range_low`/`_high`).")
    )
    clip_range_low: float | None = field(
        default=DocumentedDefault(3e-4),
        metadata=_help(
            "Lower clip of the sequence ratio; GSPO paper (v2) §5.1 uses 3e-4. Left unset, `clip_range` (if set) "
            "applies to both sides, as in the reference."
        ),
    )
    clip_range_high: float | None = field(
        default=DocumentedDefault(4e-4),
        metadata=_help(
            "Upper clip of the sequence ratio; GSPO paper (v2) §5.1 uses 4e-4. Left unset, `clip_range` (if set) "
            "applies to both sides, as in the reference."
        ),
    )
    loss_agg_mode: str = _agg_field("seq-mean-token-mean")

    def policy_loss_kwargs(self) -> dict[str, Any]:
        """The paper's bounds apply only where no clip value is given: a bound left unset passes None, so that the
        loss takes `clip_range` for it when that is set (and 3e-4 / 4e-4 otherwise)."""
        kwargs = super().policy_loss_kwargs()
        return {k: None if is_documented_default(v) and k.startswith("clip_range_") else v for k, v in kwargs.items()}


@dataclass
class CISPOLossArguments(LossArguments):
    """Arguments of the CISPO loss (`get_policy_loss("cispo")`)."""

    clip_range_low: float = field(
        default=1.0,
        metadata=_help(
            "The stop-gradient IS weight is clamped to [1 − clip_range_low, 1 + clip_range_high]; "
            "1.0 means no lower bound (MiniMax-M1)."
        ),
    )
    clip_range_high: float = field(
        default=0.28,
        metadata=_help(
            "Upper bound ε_high of the IS weight (1 + ε_high). TRL's `loss_type='cispo'` caps the ratio "
            "at `epsilon_high` itself, so TRL's `epsilon_high=5.0` is `clip_range_high=4.0` here."
        ),
    )
    enable_mask_clip: bool = field(
        default=False,
        metadata=_help(
            "Also zero the tokens whose ratio left the trust region in the advantage's direction "
            "(r > 1 + mask_clip_range_high with A > 0, or r < 1 − mask_clip_range_low with A < 0)."
        ),
    )
    mask_clip_range_low: float = field(default=1.0, metadata=_help("Lower bound of `enable_mask_clip`."))
    mask_clip_range_high: float = field(default=0.28, metadata=_help("Upper bound of `enable_mask_clip`."))
    loss_agg_mode: str = _agg_field("token-mean")


@dataclass
class SAPOLossArguments(LossArguments):
    """Arguments of the SAPO loss (`get_policy_loss("sapo")`)."""

    tau_pos: float = field(
        default=1.0,
        metadata=_help(
            "Gate temperature τ for tokens with A > 0. The loss is −A·σ(τ(r − 1))·4/τ; the gradient "
            "weight is 1 at r = 1 and decays smoothly off-policy, faster for larger τ."
        ),
    )
    tau_neg: float = field(
        default=1.05,
        metadata=_help(
            "Gate temperature for tokens with A ≤ 0; must be ≥ `tau_pos` (the paper decays negative "
            "updates faster, §3)."
        ),
    )
    loss_agg_mode: str = _agg_field("token-mean")
    detach_gate: bool = field(
        default=False,
        metadata=_help(
            "Reproduce Trinity-RFT ≤ 0.6: −A·sg(gate)·lp, whose gradient weight is 2/τ at r = 1 and "
            "grows with r (not the paper's objective)."
        ),
    )


@dataclass
class TOPRLossArguments(LossArguments):
    """Arguments of the TOPR loss (`get_policy_loss("topr")`)."""

    advantage_threshold: float = field(
        default=0.0,
        metadata=_help(
            "Tokens with A > threshold get the full (untruncated) policy gradient; the others are "
            "weighted by the truncated ratio clamp(r, 0, 1)."
        ),
    )
    loss_agg_mode: str = _agg_field("token-mean")


@dataclass
class SPPOLossArguments(LossArguments):
    """Arguments of the sPPO loss (`get_policy_loss("sppo")`)."""

    loss_renames: ClassVar[dict[str, str]] = {"sppo_epsilon": "epsilon"}

    sppo_epsilon: float = field(
        default=0.3,
        metadata=_help(
            "Trust region of sPPO: a token contributes only while 1/(1+ε) ≤ r ≤ 1+ε (the loss's "
            "`epsilon`; renamed because `epsilon` is TRL's clip)."
        ),
    )
    loss_agg_mode: str = _agg_field("token-mean")


@dataclass
class RECLossArguments(LossArguments):
    """Arguments of the REC loss (`get_policy_loss("rec")`); the loss aggregates by token mean (sequence mean of
    token means with `rec_clip_mode="gspo-one-side"`). Every argument carries the prefix `rec_`."""

    loss_renames: ClassVar[dict[str, str]] = {
        f"rec_{name}": name
        for name in (
            "epsilon_low", "epsilon_high", "epsilon_low_prime", "epsilon_high_prime",
            "clip_mode", "weight", "regularizer", "regularizer_coef", "temp",
        )
    }  # fmt: skip

    rec_epsilon_low: float = field(default=0.2, metadata=_help("Lower clip ε_l (ratio ≥ 1 − ε_l), in (0, 1]."))
    rec_epsilon_high: float = field(default=0.2, metadata=_help("Upper clip ε_h (ratio ≤ 1 + ε_h), > 0."))
    rec_epsilon_low_prime: float = field(
        default=0.6, metadata=_help("`ring` mode: negative-side outer bound ε'_l, in (0, 1].")
    )
    rec_epsilon_high_prime: float = field(default=2.0, metadata=_help("`ring` mode: outer bound ε'_h, > 0."))
    rec_clip_mode: str = field(
        default="none",
        metadata=_help(
            "Which tokens are kept: `none`, `two-side`, `one-side`, `gspo-one-side` (on the sequence ratio), `ring`.",
            choices=["none", "two-side", "one-side", "gspo-one-side", "ring"],
        ),
    )
    rec_weight: str = field(
        default="none",
        metadata=_help(
            "Advantage reweighting: `none`, `importance_sampling` (A·r), `gspo_importance_sampling` "
            "(A·sequence ratio; needs `rec_clip_mode='gspo-one-side'`), `advantage` (A·exp(A/temp)).",
            choices=["none", "importance_sampling", "gspo_importance_sampling", "advantage"],
        ),
    )
    rec_regularizer: str = field(
        default="none",
        metadata=_help(
            "Regularizer: `none`, `forward-kl` (−coef·lp), `k2` (coef·(lp − old)²).",
            choices=["none", "forward-kl", "k2"],
        ),
    )
    rec_regularizer_coef: float = field(default=0.0, metadata=_help("Coefficient of `rec_regularizer`, ≥ 0."))
    rec_temp: float = field(default=1.0, metadata=_help("Temperature of `rec_weight='advantage'`, > 0."))


@dataclass
class OPMDLossArguments(LossArguments):
    """Arguments of the OPMD loss (`get_policy_loss("opmd")`)."""

    tau: float = field(
        default=1.0, metadata=_help("Mirror-descent regularization τ: the loss −A·lp is divided by (1 + τ).")
    )
    loss_agg_mode: str = _agg_field("token-mean")


@dataclass
class SFTLossArguments(LossArguments):
    """Arguments of the SFT loss (`get_policy_loss("sft")`)."""

    loss_agg_mode: str = _agg_field("token-mean")


_GEOMETRY_HELP = (
    "The reference's batch geometry (Trinity-RFT fills it from its config). Leave all six unset (None) for "
    "window normalization: each part is averaged over its own rows of the optimizer window. Setting any of them "
    "switches to the reference's per-micro-batch weighting n·w (see `trl_ext.losses.mix`), with the reference's "
    "defaults (1, False) for the ones left unset."
)


@dataclass
class _MixingArguments(LossArguments):
    """What MIX and MIX-CHORD share: the PPO part's clip, the aggregation of each part, the reference geometry."""

    clip_range: float | None = field(default=0.2, metadata=_help("PPO clip ε of the rollout part."))
    clip_range_low: float | None = field(default=None, metadata=_help("Lower clip ε_low; defaults to `clip_range`."))
    clip_range_high: float | None = field(default=None, metadata=_help("Upper clip ε_high; defaults to `clip_range`."))
    loss_agg_mode: str = _agg_field("token-mean")
    sft_loss_agg_mode: str | None = field(
        default=None,
        metadata=_help(
            "Aggregation of the SFT part (expert rows); defaults to `loss_agg_mode`.", choices=list(LOSS_AGG_MODES)
        ),
    )
    grpo_loss_agg_mode: str | None = field(
        default=None,
        metadata=_help(
            "Aggregation of the PPO part (rollouts); defaults to `loss_agg_mode`.", choices=list(LOSS_AGG_MODES)
        ),
    )
    use_dynamic_bsz: bool | None = field(default=None, metadata=_help(_GEOMETRY_HELP))
    ppo_mini_batch_size: int | None = field(default=None, metadata=_help("Reference geometry: see `use_dynamic_bsz`."))
    ppo_micro_batch_size_per_gpu: int | None = field(
        default=None, metadata=_help("Reference geometry: see `use_dynamic_bsz`.")
    )
    ngpus_trainer: int | None = field(default=None, metadata=_help("Reference geometry: see `use_dynamic_bsz`."))
    train_batch_size_usual: int | None = field(
        default=None, metadata=_help("Reference geometry: see `use_dynamic_bsz`.")
    )
    train_batch_size_expert: int | None = field(
        default=None, metadata=_help("Reference geometry: see `use_dynamic_bsz`.")
    )

    geometry_fields: ClassVar[tuple[str, ...]] = (
        "use_dynamic_bsz",
        "ppo_mini_batch_size",
        "ppo_micro_batch_size_per_gpu",
        "ngpus_trainer",
        "train_batch_size_usual",
        "train_batch_size_expert",
    )


@dataclass
class MIXLossArguments(_MixingArguments):
    """Arguments of the MIX loss (`get_policy_loss("mix")`): (1 − μ)·PPO on rollouts + μ·SFT on expert rows."""

    mu: float = field(default=0.1, metadata=_help("Weight μ ∈ [0, 1] of the SFT part on the expert rows."))


@dataclass
class MIXCHORDLossArguments(_MixingArguments):
    """Arguments of the MIX-CHORD loss (`get_policy_loss("mix_chord")`): μ scheduled by the global step and the
    φ-weighted SFT part."""

    mu_warmup_steps: int = field(
        default=0, metadata=_help("μ rises linearly from 0 to `mu_peak` over this many optimizer steps.")
    )
    mu_decay_steps: int = field(
        default=0,
        metadata=_help("Then μ decays from `mu_peak` to `mu_valley` over this many steps (cosine), and stays there."),
    )
    mu_peak: float = field(default=0.1, metadata=_help("μ at the end of the warm-up."))
    mu_valley: float = field(default=0.1, metadata=_help("μ after the decay (CHORD's floor)."))
    enable_phi_function: bool = field(
        default=True,
        metadata=_help(
            "CHORD-φ: weight each expert token's NLL by sg(p(1 − p)), p the policy's probability of the token; "
            "False uses plain SFT."
        ),
    )


@dataclass
class OnPolicyDistillLossArguments(PPOLossArguments):
    """The policy loss of on-policy distillation: the dual-clip PPO loss (default, with its arguments) or the
    unclipped `importance_sampling` loss."""

    policy_loss_fn: str = field(
        default="ppo",
        metadata=_help(
            "`ppo`: the dual-clip PPO loss on the distillation advantages (Trinity-RFT's default); "
            "`importance_sampling`: −A·exp(lp − lp_old), unclipped (Tinker's loss). Both are −A·∇lp on the first "
            "update of a generation batch; they differ only when a batch is reused (`num_iterations` > 1 or "
            "`steps_per_generation` > `gradient_accumulation_steps`). Only `loss_agg_mode` applies to "
            "`importance_sampling`.",
            choices=["ppo", "importance_sampling"],
        ),
    )


# ---------------------------------------------------------------------------------------------------------------
# Advantage arguments (names and defaults of `trl_ext.advantages`)
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class GRPOAdvantageArguments(AdvantageArguments):
    """Arguments of the GRPO advantage `(R − group mean) / (group std + ε)` (`get_advantage_fn("grpo")`)."""

    advantage_fn: ClassVar[str] = "grpo"
    advantage_renames: ClassVar[dict[str, str]] = {"advantage_epsilon": "epsilon"}

    advantage_epsilon: float = field(
        default=1e-6,
        metadata=_help(
            "ε of (R − mean)/(std + ε) (the estimator's `epsilon`; TRL's own GRPO uses 1e-4). The std "
            "is the unbiased group std; a group whose rewards are all equal gets advantage 0."
        ),
    )
    std_threshold: float | None = field(
        default=None, metadata=_help("Drop (mask out) the groups whose reward std is at or below this value.")
    )
    duplicate_experiences: bool = field(
        default=False,
        metadata=_help(
            "With `std_threshold`: replace the rows of dropped groups by copies of randomly chosen kept groups, so "
            "every step trains on a full batch (Polaris, https://hkunlp.github.io/blog/2025/Polaris); the "
            "reference's `duplicate_experiences`."
        ),
    )
    std_cal_level: str = field(
        default="group",
        metadata=_help(
            "Divide by the std of the `group` or of the whole `batch` (the mean stays the group mean).",
            choices=["group", "batch"],
        ),
    )


@dataclass
class OPMDAdvantageArguments(AdvantageArguments):
    """Arguments of the OPMD advantage (`get_advantage_fn("opmd")`)."""

    advantage_fn: ClassVar[str] = "opmd"
    advantage_renames: ClassVar[dict[str, str]] = {"advantage_tau": "tau"}

    opmd_baseline: str = field(
        default="mean",
        metadata=_help(
            "Group baseline: `mean`, or `logavgexp` = τ·(logsumexp(R/τ) − log n).", choices=["mean", "logavgexp"]
        ),
    )
    advantage_tau: float = field(default=1.0, metadata=_help("τ of the `logavgexp` baseline (the estimator's `tau`)."))


@dataclass
class AsymREAdvantageArguments(AdvantageArguments):
    """Arguments of the AsymRE advantage (`get_advantage_fn("asymre")`)."""

    advantage_fn: ClassVar[str] = "asymre"

    baseline_shift: float = field(
        default=-0.1,
        metadata=_help(
            "The baseline is the group mean plus this shift; a negative shift favours positive "
            "updates (AsymRE paper §3)."
        ),
    )


@dataclass
class RECAdvantageArguments(AdvantageArguments):
    """Arguments of the REC advantage (`get_advantage_fn("rec")`)."""

    advantage_fn: ClassVar[str] = "rec"
    advantage_renames: ClassVar[dict[str, str]] = {"advantage_epsilon": "epsilon"}

    advantage_epsilon: float = field(default=1e-6, metadata=_help("ε of the std normalization."))
    std_normalize: bool = field(default=False, metadata=_help("Divide the centred rewards by the group std."))
    drop: str | None = field(
        default=None,
        metadata=_help(
            "`balance`: in each group, randomly drop negative-advantage samples until there are no more "
            "of them than positive ones (seeded by `seed` and the step)."
        ),
    )


@dataclass
class ReinforcePlusPlusAdvantageArguments(AdvantageArguments):
    """Arguments of the REINFORCE++ advantage (`get_advantage_fn("reinforceplusplus")`)."""

    advantage_fn: ClassVar[str] = "reinforceplusplus"

    gamma: float = field(
        default=1.0,
        metadata=_help(
            "Discount of the token-level returns (the outcome reward sits on the last token); the "
            "returns are whitened over all valid tokens of the generation batch."
        ),
    )


@dataclass
class RAFTSelectionArguments(AdvantageArguments):
    """Arguments of RAFT's best-of-group selection (`get_advantage_fn("raft")`)."""

    advantage_fn: ClassVar[str] = "raft"

    min_reward: float | None = field(
        default=None,
        metadata=_help(
            "Keep a group's best completion only if its reward is at least this value (default: always keep the best)."
        ),
    )


@dataclass
class RLOOAdvantageArguments(AdvantageArguments):
    """The RLOO advantage (`get_advantage_fn("rloo")`): R − the mean reward of the group's other samples."""

    advantage_fn: ClassVar[str] = "rloo"


@dataclass
class ReinforceAdvantageArguments(AdvantageArguments):
    """The REINFORCE advantage (`get_advantage_fn("reinforce")`): the raw reward."""

    advantage_fn: ClassVar[str] = "reinforce"


@dataclass
class OnPolicyDistillAdvantageArguments(AdvantageArguments):
    """Arguments of the distillation advantage (`get_advantage_fn("on_policy_distill")`)."""

    advantage_fn: ClassVar[str] = "on_policy_distill"

    kl_coef: float = field(
        default=1.0,
        metadata=_help(
            "Scale λ of the per-token advantage λ·(log π_teacher − log π_old): minus the sampled token's reverse KL "
            "to the teacher (Trinity-RFT's `kl_coef`, Tinker's `kl_penalty_coef`). Not the KL-to-reference "
            "coefficient, which is `beta`."
        ),
    )
    distill_baseline: str = field(
        default="none",
        metadata=_help(
            "Baseline subtracted from the distillation advantages (beyond the reference, which has none): `batch` "
            "the mean over the generation batch's completion tokens, `group` the mean over the prompt group's "
            "tokens at the same position. A variance reduction for small batches, where a teacher that rejects "
            "most samples can push the student towards noise (measured on the toy task with 64 samples per step).",
            choices=["none", "batch", "group"],
        ),
    )


# ---------------------------------------------------------------------------------------------------------------
# Further arguments of MIX / MIX-CHORD and of on-policy distillation
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class _ExpertDataArguments:
    """The expert-data fields of MIX / MIX-CHORD (and the entropy bonus on rollouts only)."""

    #: the fields that change the default of a base config field (`trl.GRPOConfig`'s, `GRPOFamilyConfig`'s), in the
    #: base's field order: in the config they keep their base position (`trl-ext list` needs this without trl)
    base_fields: ClassVar[tuple[str, ...]] = ("per_device_train_batch_size", "entropy_loss_fn")

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
    entropy_loss_fn: str = field(
        default="mix",
        metadata=_help(
            "Entropy bonus `entropy_coef`·agg(entropy): `mix` over the rollouts only (expert demonstrations are "
            "not the policy's samples), `default` over every row, `none` disables it.",
            choices=["mix", "default", "none"],
        ),
    )


_REWARD_ADVANTAGE_FNS = ("grpo", "rloo", "reinforce")


@dataclass
class _TeacherArguments:
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


# ---------------------------------------------------------------------------------------------------------------
# DPO's own arguments (beyond trl.DPOConfig's)
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class DPOKLArguments:
    """The KL term of Trinity-RFT's DPO algorithm: `kl_coef`·token-mean(KL(π‖π_ref)) over the completion tokens."""

    kl_loss_fn: str = field(
        default="k2",
        metadata={
            "help": "KL estimator of the KL term kl_coef·token-mean(KL(π‖π_ref)) over the chosen and rejected "
            "completion tokens: `k1`, `k2` (Trinity-RFT's DPO default), `k3`, `low_var_kl`, `abs`, `corrected_k3`, "
            "or `none` (no KL term, whatever `kl_coef`'s default).",
            "choices": sorted(KL_FNS),
        },
    )
    kl_coef: float = field(
        default=DocumentedDefault(0.001),
        metadata={
            "help": "Coefficient of the KL term (Trinity-RFT's default 0.001); 0 or `kl_loss_fn='none'` turns it "
            "off. Needs per-token reference log-probs, so not with `precompute_ref_log_probs=True`."
        },
    )


# ---------------------------------------------------------------------------------------------------------------
# Which arguments each algorithm's config is assembled from
# ---------------------------------------------------------------------------------------------------------------

ALGORITHM_ARGUMENTS: dict[str, tuple[type, ...]] = {
    "grpo": (PPOLossArguments, GRPOAdvantageArguments),
    "rloo": (PPOLossArguments, RLOOAdvantageArguments),
    "reinforceplusplus": (PPOLossArguments, ReinforcePlusPlusAdvantageArguments),
    "gspo": (GSPOLossArguments, GRPOAdvantageArguments),
    "cispo": (CISPOLossArguments, GRPOAdvantageArguments),
    "sapo": (SAPOLossArguments, GRPOAdvantageArguments),
    "topr": (TOPRLossArguments, ReinforceAdvantageArguments),
    "sppo": (SPPOLossArguments, GRPOAdvantageArguments),
    "rec": (RECLossArguments, RECAdvantageArguments),
    "opmd": (OPMDLossArguments, OPMDAdvantageArguments),
    "asymre": (OPMDLossArguments, AsymREAdvantageArguments),
    "raft": (SFTLossArguments, RAFTSelectionArguments),
    "mix": (MIXLossArguments, GRPOAdvantageArguments, _ExpertDataArguments),
    "mix_chord": (MIXCHORDLossArguments, GRPOAdvantageArguments, _ExpertDataArguments),
    "on_policy_distill": (OnPolicyDistillLossArguments, OnPolicyDistillAdvantageArguments, _TeacherArguments),
    "dpo": (DPOKLArguments,),
}
"""Algorithm name -> the argument dataclasses its config is assembled from, in the config's base order (first
base first; the TRL config comes after them). The config classes take their bases from here."""
