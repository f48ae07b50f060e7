"""Configs of the GRPO-family trainers: `trl.GRPOConfig` plus the algorithm's loss and advantage arguments.

Each algorithm's config is a `trl.GRPOConfig` subclass assembled from small argument dataclasses: the policy
loss's `default_args()` (same names and defaults as `trl_ext.losses`), the advantage function's, and the KL /
entropy choices shared by every algorithm. TRL's own fields keep TRL's meaning (`beta` is the KL coefficient,
`entropy_coef` the entropy-bonus coefficient, `num_generations` the group size); a TRL field that selects or
parameterizes TRL's *own* loss (`loss_type`, `epsilon`, `sapo_temperature_neg`, ...) is rejected when set to a
non-default value, with the name of the field to use instead.

Naming rule: a loss argument keeps its `trl_ext.losses` name unless that name is already a `GRPOConfig` field,
in which case it takes the loss's name as prefix (`sppo_epsilon`; all of REC's arguments are `rec_*`, since its
`epsilon_high` collides and `weight` / `temp` are ambiguous in a training config); an advantage argument
keeps its `trl_ext.advantages` name unless it collides with a `GRPOConfig` field or a loss argument, in which
case it takes the prefix `advantage_` (`advantage_epsilon`, `advantage_tau`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from trl import GRPOConfig

from .._validation import check_choice, check_number
from ..advantages import get_advantage_fn
from ..algorithms import get_algorithm
from ..losses import get_entropy_fn, get_kl_fn, get_policy_loss
from ..losses.base import LOSS_AGG_MODES
from ..losses.kl import KL_FNS

_AGG_HELP = (
    "How the per-token loss is reduced over the optimizer window (all micro-batches of one optimizer step, on "
    "all processes): `token-mean` (Σ/number of tokens, DAPO), `seq-mean-token-mean` (mean over sequences of "
    "each sequence's token mean, GRPO), `seq-mean-token-sum` (mean over sequences of token sums), "
    "`seq-mean-token-sum-norm` (Dr. GRPO: Σ / (sequences · max_completion_length)). The result does not depend "
    "on how the window is split into micro-batches and processes."
)


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


def _help(text: str, **extra: Any) -> dict[str, Any]:
    return {"help": text, **extra}


def _agg_field(default: str) -> Any:
    return field(default=default, metadata=_help(_AGG_HELP, choices=list(LOSS_AGG_MODES)))


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
        default=3e-4, metadata=_help("Lower clip of the sequence ratio; GSPO paper (v2) §5.1 uses 3e-4.")
    )
    clip_range_high: float | None = field(
        default=4e-4, metadata=_help("Upper clip of the sequence ratio; GSPO paper (v2) §5.1 uses 4e-4.")
    )
    loss_agg_mode: str = _agg_field("seq-mean-token-mean")


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
# The base config
# ---------------------------------------------------------------------------------------------------------------

_GRPO_DEFAULTS = {f.name: f.default for f in dataclasses.fields(GRPOConfig) if f.default is not dataclasses.MISSING}

# TRL fields that parameterize TRL's own loss, with what to use instead. `{clip}` is filled per algorithm.
_UNUSED_TRL_FIELDS: dict[str, str] = {
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
    "use_bias_correction_kl": "choose the KL estimator with `kl_loss_fn` (e.g. `'corrected_k3'`)",
    "scale_rewards": "the advantage function normalizes the rewards (see its arguments, e.g. `std_cal_level`)",
    "multi_objective_aggregation": "rewards are summed with `reward_weights`, then passed to the advantage function",
    "top_entropy_quantile": "not supported by trl_ext trainers",
    "use_adaptive_entropy": "use `entropy_loss_fn` with a fixed `entropy_coef`",
    "off_policy_mask_threshold": "{sequence_mask}",
    "use_liger_kernel": "Liger's fused GRPO loss would replace the algorithm's loss; trl_ext uses TRL's fused "
    "log-prob path instead",
}


@dataclass
class GRPOFamilyConfig(GRPOConfig):
    r"""
    Base configuration of the trl_ext GRPO-family trainers: every `trl.GRPOConfig` field, plus the KL and entropy
    choices shared by all algorithms. Use an algorithm's subclass (`SAPOConfig`, `GSPOConfig`, ...), which adds
    its loss and advantage arguments.

    TRL fields keep TRL's meaning: `beta` is the KL coefficient (Trinity-RFT's `kl_coef`; 0 creates no
    reference model), `entropy_coef` the entropy-bonus coefficient, `num_generations` the group size.
    """

    #: the algorithm's name; a subclass gets its loss and advantage arguments by also subclassing one
    #: `LossArguments` and one `AdvantageArguments` dataclass
    algorithm: ClassVar[str] = ""
    loss_renames: ClassVar[dict[str, str]] = {}
    advantage_fn: ClassVar[str | None] = None
    advantage_renames: ClassVar[dict[str, str]] = {}

    kl_loss_fn: str = field(
        default="k2",
        metadata=_help(
            "KL estimator of the KL loss term `beta`·agg(KL(π‖π_ref)), aggregated with "
            "`loss_agg_mode`: `k1`, `k2` (½(log r)², Trinity's GRPO default), `k3` (TRL's), "
            "`low_var_kl`, `abs`, `corrected_k3`, or `none`. Only used when `beta` > 0.",
            choices=sorted(KL_FNS),
        ),
    )
    adaptive_kl: bool = field(
        default=False,
        metadata=_help(
            "Adapt `beta` after every optimizer step with the adaptive KL controller (Ziegler et al. "
            "2019): β ← β·(1 + clip(KL/target_kl − 1, ±0.2)·sequences/kl_horizon)."
        ),
    )
    target_kl: float | None = field(default=None, metadata=_help("Target KL of `adaptive_kl`."))
    kl_horizon: int | None = field(default=None, metadata=_help("Horizon (in sequences) of `adaptive_kl`."))
    entropy_loss_fn: str = field(
        default="default",
        metadata=_help(
            "Entropy bonus: `default` subtracts `entropy_coef`·agg(entropy), aggregated with "
            "`loss_agg_mode`; `none` disables it.",
            choices=["default", "none"],
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_unused_trl_fields()
        if self.steps_per_generation % self.gradient_accumulation_steps:
            raise ValueError(
                f"{type(self).__name__}: steps_per_generation={self.steps_per_generation} must be a multiple of "
                f"gradient_accumulation_steps={self.gradient_accumulation_steps}, so that every optimizer window "
                "lies within one generation batch and its token count is known when the window starts "
                "(set steps_per_generation or generation_batch_size accordingly)"
            )
        if self.beta != 0 and self.kl_loss_fn == "none":
            raise ValueError(
                f"{type(self).__name__}: beta={self.beta} adds a KL term but kl_loss_fn='none'; choose an "
                f"estimator with kl_loss_fn (one of {', '.join(repr(k) for k in sorted(KL_FNS) if k != 'none')}) "
                "or set beta=0"
            )
        if self.entropy_coef != 0 and self.entropy_loss_fn == "none":
            raise ValueError(
                f"{type(self).__name__}: entropy_coef={self.entropy_coef} is set but entropy_loss_fn='none'; set "
                "entropy_loss_fn='default' to add the entropy bonus, or entropy_coef=0"
            )
        if self.algorithm:
            # Build every component once so that a bad argument fails here, naming the config field.
            self.build_policy_loss()
            self.build_advantage_fn()
            self.build_kl_fn()
            self.build_entropy_fn()

    # ---- validation ---------------------------------------------------------------------------------------

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
        return {"clip": clip, "dual_clip": dual, "sequence_mask": seq}

    def _check_unused_trl_fields(self) -> None:
        hints = None
        for name, instead in _UNUSED_TRL_FIELDS.items():
            value, default = getattr(self, name), _GRPO_DEFAULTS[name]
            if value == default:  # compared after GRPOConfig.__post_init__, which maps scale_rewards=True to "group"
                continue
            hints = hints or self._clip_hint()
            raise ValueError(
                f"{type(self).__name__}: {name}={value!r} is a trl.GRPOConfig field that trl_ext's "
                f"{self.algorithm or 'GRPO-family'} trainer does not use (default {default!r}); "
                f"{instead.format(**hints)}"
            )

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

    def __post_init__(self) -> None:
        super().__post_init__()
        ratio = self.expert_data_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
            raise ValueError(
                f"{type(self).__name__}: expert_data_ratio={ratio!r} must be a number in [0, 1] (the share of each "
                "generation batch's rows that are expert demonstrations; 0 = only rollouts, 1 = only expert rows)"
            )
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


@dataclass
class _ExpertDataArguments:
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

    _VALID_DICT_FIELDS: ClassVar[list[str]] = [*GRPOConfig._VALID_DICT_FIELDS, "teacher_model_init_kwargs"]  # JSON

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
class GRPOConfig(PPOLossArguments, GRPOAdvantageArguments, GRPOFamilyConfig):
    r"""
    Configuration of [`GRPOTrainer`]: GRPO (Shao et al. 2024, "DeepSeekMath", arXiv 2402.03300) with Trinity-RFT's
    dual-clip PPO loss and group-normalized advantages. `loss_agg_mode="token-mean"` is TRL's default `dapo`
    aggregation; `"seq-mean-token-mean"` is the paper's (TRL's `loss_type="grpo"`).
    """

    algorithm: ClassVar[str] = "grpo"


@_document
@dataclass
class RLOOConfig(PPOLossArguments, RLOOAdvantageArguments, GRPOFamilyConfig):
    r"""
    Configuration of [`RLOOTrainer`]: REINFORCE Leave-One-Out (Ahmadian et al. 2024, "Back to Basics", arXiv
    2402.14740): the baseline of a completion is the mean reward of the other completions of its prompt; the
    update uses the dual-clip PPO loss.
    """

    algorithm: ClassVar[str] = "rloo"


@_document
@dataclass
class ReinforcePlusPlusConfig(PPOLossArguments, ReinforcePlusPlusAdvantageArguments, GRPOFamilyConfig):
    r"""
    Configuration of [`ReinforcePlusPlusTrainer`]: REINFORCE++ (Hu 2025, arXiv 2501.03262): discounted token-level
    returns of the outcome reward, whitened over the batch's tokens (no group baseline), with the dual-clip PPO
    loss.
    """

    algorithm: ClassVar[str] = "reinforceplusplus"


@_document
@dataclass
class GSPOConfig(GSPOLossArguments, GRPOAdvantageArguments, GRPOFamilyConfig):
    r"""
    Configuration of [`GSPOTrainer`]: Group Sequence Policy Optimization (Zheng et al. 2025, arXiv 2507.18071),
    GSPO-token form: the importance ratio is the length-normalized sequence ratio exp(mean_t log r_t), with a
    per-token gradient path so token-level advantages work. TRL's equivalent is `loss_type="grpo",
    importance_sampling_level="sequence"`.
    """

    algorithm: ClassVar[str] = "gspo"


@_document
@dataclass
class CISPOConfig(CISPOLossArguments, GRPOAdvantageArguments, GRPOFamilyConfig):
    r"""
    Configuration of [`CISPOTrainer`]: CISPO (MiniMax-M1, arXiv 2506.13585): REINFORCE with a clipped,
    stop-gradient importance weight, so clipped tokens still get a gradient. TRL's equivalent is
    `loss_type="cispo", epsilon_high=1 + clip_range_high`.
    """

    algorithm: ClassVar[str] = "cispo"


@_document
@dataclass
class SAPOConfig(SAPOLossArguments, GRPOAdvantageArguments, GRPOFamilyConfig):
    r"""
    Configuration of [`SAPOTrainer`]: Soft Adaptive Policy Optimization (Gao et al. 2025, arXiv 2511.20347): a
    smooth, temperature-controlled gate σ(τ(r − 1))·4/τ replaces the hard clip, with a faster decay for negative
    advantages. TRL's equivalent is `loss_type="sapo"` with `loss_agg_mode="seq-mean-token-mean"`.
    """

    algorithm: ClassVar[str] = "sapo"


@_document
@dataclass
class TOPRConfig(TOPRLossArguments, ReinforceAdvantageArguments, GRPOFamilyConfig):
    r"""
    Configuration of [`TOPRTrainer`]: Tapered Off-Policy REINFORCE (Le Roux et al. 2025, arXiv 2503.14286): full
    REINFORCE gradient on positive samples, ratio-truncated gradient on negative ones; the advantage is the raw
    reward (no baseline), as in the paper.
    """

    algorithm: ClassVar[str] = "topr"


@_document
@dataclass
class SPPOConfig(SPPOLossArguments, GRPOAdvantageArguments, GRPOFamilyConfig):
    r"""
    Configuration of [`SPPOTrainer`]: sPPO (arXiv 2108.05828): the policy gradient −A·log r restricted to the
    tokens inside the trust region 1/(1+ε) ≤ r ≤ 1+ε, with group-normalized advantages.
    """

    algorithm: ClassVar[str] = "sppo"


@_document
@dataclass
class RECConfig(RECLossArguments, RECAdvantageArguments, GRPOFamilyConfig):
    r"""
    Configuration of [`RECTrainer`]: REC (Yao et al. 2025, "Group-Relative REINFORCE Is Secretly an Off-Policy
    Algorithm", arXiv 2509.24203): REINFORCE with group-centred rewards and a choice of off-policy clipping
    (`rec_clip_mode`), reweighting (`rec_weight`) and regularization (`rec_regularizer`).
    """

    algorithm: ClassVar[str] = "rec"


@_document
@dataclass
class OPMDConfig(OPMDLossArguments, OPMDAdvantageArguments, GRPOFamilyConfig):
    r"""
    Configuration of [`OPMDTrainer`]: online policy mirror descent (Trinity-RFT; Kimi k1.5, arXiv 2501.12599):
    the group baseline is the mean reward or a soft-max (`logavgexp`) of it, and the loss −A·lp is scaled by
    1/(1 + τ).
    """

    algorithm: ClassVar[str] = "opmd"


@_document
@dataclass
class AsymREConfig(OPMDLossArguments, AsymREAdvantageArguments, GRPOFamilyConfig):
    r"""
    Configuration of [`AsymRETrainer`]: Asymmetric REINFORCE (Arnal et al. 2025, arXiv 2506.20520): REINFORCE
    with the group mean shifted by `baseline_shift` as baseline (Trinity-RFT trains it with the OPMD loss).
    """

    algorithm: ClassVar[str] = "asymre"


@_document
@dataclass
class RAFTConfig(SFTLossArguments, RAFTSelectionArguments, GRPOFamilyConfig):
    r"""
    Configuration of [`RAFTTrainer`]: Reward rAnked FineTuning (Dong et al. 2023, arXiv 2304.06767): generate
    `num_generations` completions per prompt, keep the best-rewarded one of each group, and train the SFT loss
    on the kept completions only.
    """

    algorithm: ClassVar[str] = "raft"


@_document
@dataclass
class MIXConfig(MIXLossArguments, GRPOAdvantageArguments, _ExpertDataArguments, MIXFamilyConfig):
    r"""
    Configuration of [`MIXTrainer`]: RL on rollouts mixed with SFT on expert demonstrations in the same batch
    (Trinity-RFT's MIX, the fixed-μ form of CHORD, arXiv 2508.11408). A share `expert_data_ratio` of each
    generation batch is expert rows from the trainer's `expert_dataset`; the loss is (1 − μ)·PPO on the rollouts
    (group-normalized advantages) + μ·SFT on the expert rows, each part normalized over its own rows.
    """

    algorithm: ClassVar[str] = "mix"


@_document
@dataclass
class MIXCHORDConfig(MIXCHORDLossArguments, GRPOAdvantageArguments, _ExpertDataArguments, MIXFamilyConfig):
    r"""
    Configuration of [`MIXCHORDTrainer`]: CHORD (Zhang et al. 2025, "On-Policy RL Meets Off-Policy Experts", arXiv
    2508.11408): as MIX, with μ following the global step (linear warm-up to `mu_peak`, cosine decay to
    `mu_valley`) and CHORD-φ token weights on the expert NLL. The paper's recipe (Trinity-RFT's
    `examples/mix_chord`): `mu_warmup_steps=200, mu_decay_steps=400, mu_peak=0.5, mu_valley=0.02`.
    """

    algorithm: ClassVar[str] = "mix_chord"


@_document
@dataclass
class OnPolicyDistillConfig(
    OnPolicyDistillLossArguments, OnPolicyDistillAdvantageArguments, _TeacherArguments, GRPOFamilyConfig
):
    r"""
    Configuration of [`OnPolicyDistillTrainer`]: on-policy distillation (Agarwal et al. 2024, arXiv 2306.13649;
    Thinking Machines, "On-Policy Distillation", 2025; Trinity-RFT's `on_policy_distill`). The student samples, a
    frozen teacher scores the sampled tokens, and the per-token advantage is `kl_coef`·(log π_teacher − log π_old)
    (+ `reward_weight`·Â with task rewards), trained with the `ppo` (default) or `importance_sampling` loss.
    """

    algorithm: ClassVar[str] = "on_policy_distill"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_choice(owner, "policy_loss_fn", self.policy_loss_fn, ("ppo", "importance_sampling"))
        check_choice(owner, "reward_advantage_fn", self.reward_advantage_fn, _REWARD_ADVANTAGE_FNS)
        check_number(owner, "reward_weight", self.reward_weight, ge=0)
        if self.teacher_device is not None:
            try:
                torch.device(self.teacher_device)
            except (RuntimeError, TypeError):
                raise ValueError(
                    f"{owner}: teacher_device={self.teacher_device!r} is not a device; use e.g. 'cuda:1', 'cpu' or "
                    "None (the student's device)"
                ) from None
        if self.policy_loss_fn == "importance_sampling":
            for f in dataclasses.fields(PPOLossArguments):
                if f.name != "loss_agg_mode" and getattr(self, f.name) != f.default:
                    raise ValueError(
                        f"{owner}: {f.name}={getattr(self, f.name)!r} is an argument of the ppo loss, but "
                        "policy_loss_fn='importance_sampling' (unclipped) does not use it; leave it at its default "
                        f"({f.default!r}) or use policy_loss_fn='ppo'"
                    )
        super().__post_init__()
        if isinstance(self.teacher_model_init_kwargs, str):
            raise ValueError(
                f"{owner}: teacher_model_init_kwargs={self.teacher_model_init_kwargs!r} must be a dict (or a JSON "
                'object on the command line, e.g. \'{"dtype": "bfloat16"}\')'
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
