"""The loss step's options for a config that `trl.GRPOConfig` does not give them (the asynchronous trainer's), with
TRL's defaults and help, each checked on its own (`check_loss_step_fields`; the rules between them:
`config_rules`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import trl

from ..._validation import check_bool, check_number

_TRL_FIELDS = {f.name: f for f in dataclasses.fields(trl.GRPOConfig)}


def trl_grpo_field(name: str, **changes: Any) -> Any:
    """`trl.GRPOConfig`'s field `name`: its default and help (a changed default says so in `changes`)."""
    source = _TRL_FIELDS[name]
    metadata = dict(source.metadata)
    if "help" in changes:
        metadata["help"] = changes.pop("help")
    return dataclasses.field(default=changes.pop("default", source.default), metadata=metadata)


@dataclass
class LossStepArguments:
    """TRL's options around the loss, as `trl.GRPOConfig` has them (see `trl_ext.trainers.core.loss_step`)."""

    top_entropy_quantile: float = trl_grpo_field("top_entropy_quantile")
    off_policy_mask_threshold: float | None = trl_grpo_field("off_policy_mask_threshold")
    use_bias_correction_kl: bool = trl_grpo_field(
        "use_bias_correction_kl",
        default=False,
        help="Multiply each token's KL by the importance ratio π/π_old (differentiable; DeepSeek-V3.2's unbiased "
        "reverse-KL gradient). Default False: `kl_loss_fn` chooses the estimator.",
    )
    use_adaptive_entropy: bool = trl_grpo_field("use_adaptive_entropy")
    entropy_target: float = trl_grpo_field("entropy_target")
    entropy_coef_delta: float = trl_grpo_field("entropy_coef_delta")
    entropy_coef_min: float = trl_grpo_field("entropy_coef_min")
    entropy_coef_max: float = trl_grpo_field("entropy_coef_max")
    turns_as_samples: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "Multi-turn rollouts: each model turn counts as one sample of the `seq-mean-*` loss aggregations "
            "(its tokens' mean, then the mean over the window's turns), as the reference's one experience per model "
            "call; default False: each completion is one sample. Needs a `seq-mean-*` `loss_agg_mode`."
        },
    )


def check_loss_step_fields(config: Any) -> None:
    """The loss step's fields of `config`, each on its own (a ValueError names the field); the rules between them and
    the other fields are `config_rules`'."""
    owner = type(config).__name__
    check_number(owner, "top_entropy_quantile", config.top_entropy_quantile, gt=0, le=1)
    if config.off_policy_mask_threshold is not None:
        check_number(owner, "off_policy_mask_threshold", config.off_policy_mask_threshold, ge=0)
    check_bool(owner, "use_bias_correction_kl", config.use_bias_correction_kl)
    check_bool(owner, "use_adaptive_entropy", config.use_adaptive_entropy)
    check_bool(owner, "turns_as_samples", config.turns_as_samples)
    if config.use_adaptive_entropy:
        check_number(owner, "entropy_coef_delta", config.entropy_coef_delta, ge=0)
        check_number(owner, "entropy_coef_min", config.entropy_coef_min, ge=0)
