"""The SDPO trainer: TRL's experimental `SDPOTrainer` whose objective is trl_ext's port of it.

Everything but the objective is TRL's: on-policy generation, the reward functions and the group-normalized
advantages (`scale_rewards`), the teacher's context (a successful sibling rollout as the solution, the row's
`privileged_context` as feedback: `SuccessfulRolloutTeacherContextBuilder`) and the mask of the completions that have
one, the teacher's weights (`teacher_model_kind`: EMA by default, synchronized by TRL's callbacks), the student's and
the teacher's forward passes (`_compute_teacher_student_logits`; the student's alone when `distillation_weight=0`),
the division by the gradient accumulation steps, the diagnostics, logging and checkpointing. `compute_loss` hands the
logits to `trl_ext.losses.self_distillation.SDPOLoss`: `(1 − w)·L_policy + w·L_distill`, the policy loss through
`trl_ext.losses.trl_grpo.TRLGRPOLoss` (TRL's GRPO clip loss and aggregations) and the distillation through
`SelfDistillationLoss`. The served teacher (`use_teacher_server=True`, pure distillation) is ported as SDFT's.

Metrics: TRL's (`self_distillation/policy_loss`, `self_distillation/distillation_loss`, `sdpo/distillation_loss`, the
reward and reprompting diagnostics), and `reward`: TRL's `self_distillation/reward_mean` under the name
`trl.GRPOTrainer` logs it by, which trl_ext's run summary and curves follow.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import torch
from transformers import TrainingArguments

from ..core.config_conversion import trainer_config
from ..sdft.trainer import SelfDistillationAdapter, mode_of
from .config import SDPOConfig, TRLSDPOConfig

with warnings.catch_warnings():  # imported by .config already: no notice, but say so where it is imported
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.sdpo import SDPOTrainer as TRLSDPOTrainer


class SDPOTrainer(SelfDistillationAdapter, TRLSDPOTrainer):
    """TRL's experimental `SDPOTrainer` (self-distillation policy optimization) whose objective is trl_ext's port,
    `trl_ext.losses.self_distillation.SDPOLoss` (config: `trl_ext.SDPOConfig`).

    The constructor takes TRL's arguments; `args` may also be TRL's `trl.experimental.sdpo.SDPOConfig` (converted).
    """

    algorithm = "sdpo"
    config_class: ClassVar[type[SDPOConfig]] = SDPOConfig
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "sdpo"]

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: SDPOConfig | TRLSDPOConfig | TrainingArguments | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        reward_processing_classes=None,
        callbacks=None,
        optimizers=(None, None),
        peft_config=None,
    ):
        """Build TRL's `SDPOTrainer` with trl_ext's config, and the objective from it.

        Args:
            model (str | PreTrainedModel): The policy, as in TRL: a path / Hub id or a model.
            reward_funcs: TRL's reward functions (required: SDPO scores its rollouts); their verdict picks the
                successful rollouts that teach the others.
            args: A `trl_ext.SDPOConfig`, used as is; TRL's `SDPOConfig` or a `transformers.TrainingArguments` is
                converted to one (its fields that differ from TRL's defaults carried over). None: the defaults, with
                `output_dir="<model name>-SDPO"`.
            train_dataset: The rows, as TRL reads them: `prompt`, and optionally `privileged_context` (environment
                feedback, used with `include_environment_feedback=True`); the other columns go to the reward functions.

        The other arguments (`eval_dataset`, `processing_class`, `reward_processing_classes`, `callbacks`,
        `optimizers`, `peft_config`) are TRL's.

        Raises:
            TypeError: `args` is another trainer's config.
            ValueError: A field `trl_ext.SDPOConfig` refuses (the message names it), and TRL's own errors.
        """
        args = trainer_config(type(self).__name__, model, args, self.config_class, "SDPO")
        self.objective = args.objective()
        self.distillation_loss_fn = self.objective.distillation
        super().__init__(
            model,
            reward_funcs=reward_funcs,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            reward_processing_classes=reward_processing_classes,
            callbacks=callbacks,
            optimizers=optimizers,
            peft_config=peft_config,
        )

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The objective of one micro-batch (`SDPOLoss`), divided by the gradient accumulation steps in training, as
        TRL's. The teacher runs only when `distillation_weight` > 0, the policy term only when it is < 1."""
        if return_outputs:
            raise ValueError("The SDPOTrainer does not support returning outputs")
        if self.use_teacher_server:  # TRL allows it with distillation_weight=1 only
            loss = self._compute_server_distillation_loss(model, inputs)
        else:
            loss = self.objective_loss(model, inputs)
        return loss / (self.current_gradient_accumulation_steps if self.model.training else 1.0)

    def objective_loss(self, model, inputs: dict[str, Any]) -> torch.Tensor:
        """`SDPOLoss` of the micro-batch's logits (the teacher's only when its term is on), and TRL's metrics."""
        teacher_logits = None
        if self.objective.needs_teacher:
            logits = self._compute_teacher_student_logits(model, self.teacher_model, inputs)
            student_logits, teacher_logits = logits.student_logits, logits.teacher_logits
        else:
            student_logits = self._forward_logits(
                model=model,
                input_ids=torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1),
                attention_mask=torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1),
                logits_to_keep=inputs["completion_ids"].size(1),
            )
        result = self.objective(
            student_logits,
            inputs["completion_ids"],
            inputs["completion_mask"],
            inputs["advantages"],
            teacher_logits=teacher_logits,
            self_distillation_mask=inputs.get("self_distillation_mask"),
            old_logprobs=inputs.get("old_per_token_logps"),
        )
        mode = mode_of(model)
        if result.policy_loss is not None:
            policy = self.accelerator.gather(result.policy_loss.detach()).mean().item()
            self.metric_log(mode)["self_distillation/policy_loss"].append(policy)
        if result.distillation_token_mean is not None:
            self.log_distillation_token_mean(mode, result.distillation_token_mean)
        return result.loss

    def served_loss_mask(self, inputs: dict[str, Any]) -> torch.Tensor:
        """The tokens of the completions that have a teacher context (TRL's SDPO rule)."""
        mask = inputs["completion_mask"]
        reprompted = inputs.get("self_distillation_mask")
        return mask if reprompted is None else mask * reprompted.unsqueeze(1)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL's log, with the rollouts' mean reward also as `reward` (`trl.GRPOTrainer`'s name)."""
        metrics = self.metric_log(mode_of(self.model))
        if metrics.get("self_distillation/reward_mean"):
            metrics["reward"] = list(metrics["self_distillation/reward_mean"])
        super().log(logs, start_time)
