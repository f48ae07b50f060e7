"""Config of the SDFT trainer: TRL's experimental `SDFTConfig`, its settings checked when the config is built.

Every field of `trl.experimental.sdft.SDFTConfig` keeps TRL's name, default and meaning. The loss's fields
(`distillation_mode`, `distillation_alpha`, `distillation_topk`, `distillation_add_tail`, `distillation_is_clip`) are
the arguments of the ported loss, `trl_ext.losses.self_distillation.SelfDistillationLoss`; the teacher's
(`teacher_model_kind`, `teacher_update_rate`, `teacher_sync_steps`) and the others are TRL's trainer's.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

from ..._validation import check_choice, check_number
from ...losses.self_distillation import SelfDistillationLoss, check_self_distillation_settings
from ..core.devices import check_hardware

with warnings.catch_warnings():  # TRL's notice on importing its experimental package (docs/algorithms/sdft.md says it)
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.sdft import SDFTConfig as TRLSDFTConfig

TEACHER_MODEL_KINDS = ("base", "live", "ema")
"""The teacher's weights (`teacher_model_kind`): the initial student's, the current student's, or their exponential
moving average."""


def check_teacher_settings(owner: str, config: Any) -> None:
    """The teacher's fields: `teacher_model_kind` one of `TEACHER_MODEL_KINDS` (TRL treats any other value as
    `base`), `teacher_update_rate` in (0, 1], `teacher_sync_steps` an integer >= 1."""
    check_choice(owner, "teacher_model_kind", config.teacher_model_kind, TEACHER_MODEL_KINDS)
    check_number(owner, "teacher_update_rate", config.teacher_update_rate, gt=0, le=1)
    check_number(owner, "teacher_sync_steps", config.teacher_sync_steps, ge=1, integer=True)


def check_distillation_settings(owner: str, config: Any) -> None:
    """The loss's fields, by the rules of `trl_ext.losses.self_distillation.check_self_distillation_settings`."""
    check_self_distillation_settings(
        owner,
        config.distillation_mode,
        config.distillation_alpha,
        config.distillation_topk,
        config.distillation_add_tail,
        config.distillation_is_clip,
    )


def distillation_loss(config: Any) -> SelfDistillationLoss:
    """The ported loss of a config's distillation fields."""
    return SelfDistillationLoss(
        distillation_mode=config.distillation_mode,
        distillation_alpha=float(config.distillation_alpha),
        distillation_topk=config.distillation_topk,
        distillation_add_tail=config.distillation_add_tail,
        distillation_is_clip=None if config.distillation_is_clip is None else float(config.distillation_is_clip),
    )


@dataclass
class SDFTConfig(TRLSDFTConfig):
    r"""
    Configuration of [`trl_ext.SDFTTrainer`]: TRL's experimental SDFT (self-distillation fine-tuning, Shenfeld et al.
    2026, "Self-Distillation Enables Continual Learning", arXiv 2601.19897), its loss computed by
    `trl_ext.losses.self_distillation.SelfDistillationLoss`.

    Every field is `trl.experimental.sdft.SDFTConfig`'s, with TRL's name, default and meaning: the student samples
    completions of each `prompt`; the teacher is the model itself (`teacher_model_kind`: `base` the initial weights,
    `live` the current ones, `ema` their moving average at `teacher_update_rate` every `teacher_sync_steps` steps)
    prompted with `teacher_prompt_template`, which joins the prompt and the row's `privileged_context` (a
    demonstration); the loss pulls the student's next-token distributions toward the teacher's along the student's
    completions (`distillation_mode`, `distillation_alpha`, `distillation_topk`, `distillation_add_tail`,
    `distillation_is_clip`, `num_loss_tokens_to_skip`).

    Checked when the config is built (TRL checks some only when the loss first runs, others not at all):
    `distillation_mode` one of `sampled_token`, `full_logits`, `topk_logits`; `distillation_alpha` in [0, 1] (and 1
    with `sampled_token`, TRL's rule); `distillation_topk` an integer >= 1 with `topk_logits`; `distillation_is_clip`
    > 0 or None; `teacher_model_kind` one of `base`, `live`, `ema`; `teacher_update_rate` in (0, 1];
    `teacher_sync_steps` >= 1; `num_loss_tokens_to_skip` >= 0. Each error names the field and what it may be.
    """

    algorithm: ClassVar[str] = "sdft"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_distillation_settings(owner, self)
        check_teacher_settings(owner, self)
        check_number(owner, "num_loss_tokens_to_skip", self.num_loss_tokens_to_skip, ge=0, integer=True)
        super().__post_init__()
        check_hardware(self)

    def distillation_loss(self) -> SelfDistillationLoss:
        """The trainer's loss, from the distillation fields."""
        return distillation_loss(self)
