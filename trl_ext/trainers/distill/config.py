"""The on-policy distillation family's config (`DistillFamilyConfig`): the teacher, the dense or sampled-token
distillation term and the optional task-reward term."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..._validation import check_choice, check_number
from ...advantages import ADVANTAGE_FNS, get_advantage_fn
from ...algorithms import get_algorithm
from ..core.arguments import _REWARD_ADVANTAGE_FNS, TeacherArguments
from ..core.composition import set_arguments
from ..core.config_fields import check_kwargs, check_text
from ..core.devices import check_device
from ..grpo.config import GRPOFamilyConfig


@dataclass
class DistillFamilyConfig(TeacherArguments, GRPOFamilyConfig):
    """Base of the on-policy distillation config: the teacher and the optional task-reward term (its policy loss is
    `ppo` by default, `importance_sampling` is Tinker's; any loss composes)."""

    _VALID_DICT_FIELDS: ClassVar[list[str]] = [*GRPOFamilyConfig._VALID_DICT_FIELDS, "teacher_model_init_kwargs"]

    def _check_fields(self) -> None:
        super()._check_fields()
        check_teacher_fields(self)

    @property
    def dense_distillation(self) -> bool:
        """True when the distillation term is the dense divergence (`teacher_top_k` ≠ 0)."""
        return self.teacher_top_k != 0

    @property
    def sampled_token_advantage(self) -> bool:
        """True when the advantage function's sampled-token distillation advantage is trained on: always with
        `teacher_top_k=0`; in a dense mode only when `advantage_fn` composes another one (e.g. `jsd`), which is then
        added to the dense term (the algorithm's own estimator is what the dense term replaces)."""
        return not self.dense_distillation or self.advantage_fn != get_algorithm(self.algorithm).advantage_fn

    def _check_pairing(self) -> None:
        super()._check_pairing()
        if self.dense_distillation and not self.sampled_token_advantage:
            own = ADVANTAGE_FNS[self.advantage_fn]
            unused = {**set_arguments(self, own), **(self.advantage_fn_args or {})}
            unused.pop("kl_coef", None)  # scales the dense term
            if unused:
                name, value = next(iter(unused.items()))
                raise ValueError(
                    f"{type(self).__name__}: {name}={value!r} configures the sampled-token advantage "
                    f"{self.advantage_fn!r}, which teacher_top_k={self.teacher_top_k} replaces by the dense "
                    "divergence; leave it unset, or set teacher_top_k=0"
                )
        if self.kl_penalty_fn != "none":  # reached only by a record with a reference model
            raise ValueError(
                f"{type(self).__name__}: kl_penalty_fn={self.kl_penalty_fn!r} subtracts a KL from the rewards, but the "
                "distillation advantage is computed from teacher log-probs, not rewards; use beta with kl_loss_fn "
                "(the KL in the loss) instead"
            )

    def composition(self) -> dict[str, str]:
        parts = super().composition()
        if self.dense_distillation:
            support = "the whole vocabulary" if self.teacher_top_k == -1 else f"the teacher's top-{self.teacher_top_k}"
            parts["distillation"] = f"dense, jsd_beta {self.jsd_beta:g} over {support}, kl_coef {self.kl_coef:g}"
            if not self.sampled_token_advantage:
                parts["advantage"] = f"- (the dense divergence replaces {self.advantage_fn})"
            else:
                parts["advantage"] += ", added to the dense divergence"
        else:
            parts["distillation"] = "sampled-token, the advantage"
        return parts

    def use_toy_task(self) -> None:
        if self.teacher_model_name_or_path is None:
            from ...toy import tiny_teacher_path

            self.teacher_model_name_or_path = tiny_teacher_path()  # the toy student's teacher

    def build_reward_advantage_fn(self):
        """The advantage of the task-reward term (scaled by `reward_weight` in the trainer)."""
        return get_advantage_fn(self.reward_advantage_fn)


def check_teacher_fields(config: TeacherArguments) -> None:
    """The teacher's and the task-reward term's fields (`TeacherArguments`), each against its rule, naming it: shared
    by the synchronous and the asynchronous distillation configs."""
    owner = type(config).__name__
    check_choice(owner, "reward_advantage_fn", config.reward_advantage_fn, _REWARD_ADVANTAGE_FNS)
    check_number(owner, "reward_weight", config.reward_weight, ge=0)
    check_text(owner, "teacher_model_name_or_path", config.teacher_model_name_or_path)
    # parsed here (not by TrainingArguments) so that bad JSON is reported with the field's name
    config.teacher_model_init_kwargs = check_kwargs(
        owner, "teacher_model_init_kwargs", config.teacher_model_init_kwargs
    )
    if config.teacher_device is not None:
        check_device(owner, "teacher_device", config.teacher_device)
    check_number(owner, "teacher_top_k", config.teacher_top_k, ge=-1, integer=True)
    check_number(owner, "jsd_beta", config.jsd_beta, ge=0, le=1)
