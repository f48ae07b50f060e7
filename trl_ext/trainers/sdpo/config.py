"""Config of the SDPO trainer: TRL's experimental `SDPOConfig`, its settings checked when the config is built.

Every field of `trl.experimental.sdpo.SDPOConfig` keeps TRL's name, default and meaning. The objective's fields are
the arguments of `trl_ext.losses.self_distillation.SDPOLoss`: the distillation's (`distillation_mode`,
`distillation_alpha`, `distillation_topk`, `distillation_add_tail`, `distillation_is_clip`), the policy loss's
(`loss_type`, `importance_sampling_level`, `epsilon`, `epsilon_high`: `trl_ext.losses.trl_grpo.TRLGRPOLoss`) and the
mix, `distillation_weight`. The teacher's, the reprompting's and the advantage's (`scale_rewards`) are TRL's trainer's.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

from ..._validation import check_bool, check_choice, check_number
from ...losses.self_distillation import SDPOLoss, sdpo_policy_loss
from ..core.devices import check_hardware
from ..sdft.config import check_distillation_settings, check_teacher_settings, distillation_loss

with warnings.catch_warnings():  # TRL's notice on importing its experimental package (docs/algorithms/sdpo.md says it)
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.sdpo import SDPOConfig as TRLSDPOConfig

SCALE_REWARDS = ("group", "batch", "none", True, False)
"""TRL's `scale_rewards` values (True is `group`, False `none`)."""

TEMPLATES = {
    "reprompt_template": ("prompt", "solution", "feedback"),
    "solution_template": ("successful_previous_attempt",),
    "feedback_template": ("feedback_raw",),
}
"""The teacher's reprompt templates and the placeholders TRL fills in each (`str.format`)."""


def check_template(owner: str, name: str, template: object, placeholders: tuple[str, ...]) -> None:
    """`template` is a string that `str.format` fills with `placeholders` alone (TRL fails on another placeholder only
    when it first reprompts, mid-run)."""
    try:
        if not isinstance(template, str):
            raise TypeError
        template.format(**dict.fromkeys(placeholders, ""))
    except (KeyError, IndexError, ValueError, TypeError):
        allowed = ", ".join("{" + p + "}" for p in placeholders)
        raise ValueError(
            f"{owner}: {name}={template!r} is not valid; must be a format string whose only placeholders are {allowed}"
        ) from None


@dataclass
class SDPOConfig(TRLSDPOConfig):
    r"""
    Configuration of [`trl_ext.SDPOTrainer`]: TRL's experimental SDPO (self-distillation policy optimization,
    Hübotter et al. 2026, "Reinforcement Learning via Self-Distillation", arXiv 2601.20802), its objective computed by
    `trl_ext.losses.self_distillation.SDPOLoss`.

    Every field is `trl.experimental.sdpo.SDPOConfig`'s, with TRL's name, default and meaning: the policy samples
    `num_generations` completions of each prompt, the reward functions score them, and a completion whose group holds
    another successful one (reward ≥ `success_reward_threshold`) gets a teacher: the model itself (`teacher_model_kind`,
    an EMA of the policy by default) reprompted with that solution (`reprompt_template`, `solution_template`; and the
    row's `privileged_context` as feedback with `include_environment_feedback`). The loss is `(1 −
    distillation_weight)` × a GRPO-style clipped policy loss on the group-normalized advantages (`loss_type`,
    `epsilon`, `epsilon_high`, `importance_sampling_level`, `scale_rewards`) + `distillation_weight` × the
    self-distillation over the completions with a teacher (`distillation_mode`, sampled-token reverse KL by default).

    Checked when the config is built, besides TRL's checks: the distillation fields as `trl_ext.SDFTConfig` checks
    them (`distillation_topk` with `topk_logits` included); `loss_type` one of `grpo`, `bnpo`, `dr_grpo`, `dapo` and
    `max_completion_length` set for `dr_grpo`; `importance_sampling_level` `token` or `sequence`; `epsilon`,
    `epsilon_high` ≥ 0; `scale_rewards` one of `group`, `batch`, `none` (or True / False); the teacher's fields;
    `max_reprompt_len` ≥ 1; `diagnostics_warning_interval` ≥ 0; each template a format string of its placeholders
    only. Each error names the field and what it may be.
    """

    algorithm: ClassVar[str] = "sdpo"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_distillation_settings(owner, self)
        check_teacher_settings(owner, self)
        check_number(owner, "distillation_weight", self.distillation_weight, ge=0, le=1)
        sdpo_policy_loss(owner, self.loss_type, self.importance_sampling_level, self.epsilon, self.epsilon_high)
        if self.loss_type == "dr_grpo":
            check_number(owner, "max_completion_length", self.max_completion_length, ge=1, integer=True)
        check_choice(owner, "scale_rewards", self.scale_rewards, SCALE_REWARDS)
        check_number(owner, "success_reward_threshold", self.success_reward_threshold)
        check_number(owner, "max_reprompt_len", self.max_reprompt_len, ge=1, integer=True)
        check_number(owner, "diagnostics_warning_interval", self.diagnostics_warning_interval, ge=0, integer=True)
        for name in ("use_successful_as_teacher", "dont_reprompt_on_self_success", "include_environment_feedback"):
            check_bool(owner, name, getattr(self, name))
        for name, placeholders in TEMPLATES.items():
            check_template(owner, name, getattr(self, name), placeholders)
        super().__post_init__()
        check_hardware(self)

    def objective(self) -> SDPOLoss:
        """The trainer's objective, from the fields (`epsilon_high` resolved by TRL: ε when unset)."""
        owner = type(self).__name__
        return SDPOLoss(
            distillation=distillation_loss(self),
            policy=sdpo_policy_loss(
                owner, self.loss_type, self.importance_sampling_level, self.epsilon, self.epsilon_high
            ),
            distillation_weight=float(self.distillation_weight),
            max_completion_length=self.max_completion_length,
        )
