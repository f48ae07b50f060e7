"""The SDFT trainer: TRL's experimental `SDFTTrainer` whose loss is trl_ext's port of it.

Everything but the loss is TRL's: the prompts and their `privileged_context`, on-policy generation (transformers or
vLLM), the teacher's prompt (`teacher_prompt_template`), the teacher's weights (`teacher_model_kind`: the initial
model reloaded or the disabled PEFT adapter, the live model, or an EMA copy / adapter synchronized by TRL's callbacks),
the student's and the teacher's forward passes over the completion (`_compute_teacher_student_logits`, which also
drops the first `num_loss_tokens_to_skip` tokens from the loss mask), the division by the gradient accumulation steps,
logging and checkpointing. The loss of those logits, TRL's `_compute_self_distillation_loss`, is computed by
`trl_ext.losses.self_distillation.SelfDistillationLoss` (the formulas and the paper are in that module).

TRL's other loss path, the teacher's log-probs served by the vLLM generation server (`use_teacher_server=True`), is
ported too (`served_teacher_loss`): the same divergences on the served values.

Metrics: TRL's `self_distillation/distillation_loss` and `sdft/distillation_loss` (the per-token loss's mean over the
micro-batch's loss tokens; TRL derives the second name from its trainer's name, which trl_ext's trainer changes), the
completions' lengths and clipped ratio, and `self_distillation/server_logprob_abs_diff` with a served teacher.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import torch
from transformers import TrainingArguments

from ...losses.self_distillation import (
    SelfDistillationLoss,
    clipped_importance_weight,
    completion_mean,
    sampled_token_divergence,
    teacher_support_divergence,
    token_logprobs,
    token_mean,
)
from ..core.config_conversion import trainer_config
from ..core.trl_adapter import TrainerAdapter
from .config import SDFTConfig, TRLSDFTConfig

with warnings.catch_warnings():  # imported by .config already: no notice, but say so where it is imported
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.sdft import SDFTTrainer as TRLSDFTTrainer


def mode_of(model: Any) -> str:
    """TRL's metric mode of a forward pass: `train` while the model trains, else `eval`."""
    return "train" if model.training else "eval"


class SelfDistillationAdapter(TrainerAdapter):
    """What the SDFT and SDPO trainers share above TRL's (which ship the same loss code twice): the loss of the
    student's and the teacher's logits by the port (`distillation_loss_fn`), its metric under TRL's names, and the
    served teacher's loss. Before the TRL trainer in the bases; `algorithm` names the family."""

    distillation_loss_fn: SelfDistillationLoss

    def _log_self_distillation_metric(self, mode: str, value: float) -> None:
        log = self.metric_log(mode)
        log["self_distillation/distillation_loss"].append(value)
        log[f"{self.algorithm}/distillation_loss"].append(value)

    def log_distillation_token_mean(self, mode: str, token_mean_value: torch.Tensor) -> None:
        """TRL's distillation metrics: the token mean of the per-token loss, averaged over processes."""
        self._log_self_distillation_metric(mode, self.accelerator.gather(token_mean_value.detach()).mean().item())

    def _compute_self_distillation_loss(self, model, inputs: dict[str, Any], distillation_logits) -> torch.Tensor:
        """TRL's loss method, computed by the port: the loss of the aligned student / teacher logits over the loss
        mask, with the rollout importance weight where TRL keeps the rollout's log-probs."""
        result = self.distillation_loss_fn(
            distillation_logits.student_logits,
            distillation_logits.teacher_logits,
            distillation_logits.completion_ids,
            distillation_logits.loss_mask,
            inputs.get("old_per_token_logps"),
        )
        self.log_distillation_token_mean(mode_of(model), result.token_mean)
        return result.loss

    def _compute_server_distillation_loss(self, model, inputs: dict[str, Any]) -> torch.Tensor:
        """TRL's served-teacher loss (`use_teacher_server=True`, a `live` teacher): the student forwarded here, the
        teacher's log-probs from the vLLM server that generates (re-synced first when the weights moved), the loss by
        `served_teacher_loss`."""
        if self.state.global_step != self._last_loaded_step:
            self.vllm_generation.sync_weights()
            self.accelerator.wait_for_everyone()  # every rank scores against the pushed weights
            self._last_loaded_step = self.state.global_step
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        width = completion_ids.size(1)
        student_logits = self._forward_logits(
            model=model,
            input_ids=torch.cat([inputs["prompt_ids"], completion_ids], dim=1),
            attention_mask=torch.cat([inputs["prompt_mask"], completion_mask], dim=1),
            logits_to_keep=width,
        )
        served = self._get_teacher_token_logprobs_from_server(inputs, width)
        loss, mean, abs_diff = served_teacher_loss(
            self.distillation_loss_fn,
            student_logits,
            completion_ids,
            self.served_loss_mask(inputs),
            served,
            inputs.get("old_per_token_logps"),
        )
        mode = mode_of(model)
        self.metric_log(mode)["self_distillation/server_logprob_abs_diff"].append(
            self.accelerator.gather(abs_diff).mean().item()
        )
        self.log_distillation_token_mean(mode, mean)
        return loss

    def served_loss_mask(self, inputs: dict[str, Any]) -> torch.Tensor:
        """The positions the served teacher's loss averages over (the family's rule)."""
        raise NotImplementedError


def served_teacher_loss(
    loss_fn: SelfDistillationLoss,
    student_logits: torch.Tensor,
    completion_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    served: dict[str, torch.Tensor],
    old_logprobs: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The loss with a served teacher, TRL's: `sampled_token` from the served log-probs of the sampled tokens,
    `topk_logits` on the teacher's own top-k (the server returns only those); then the importance weight and the mean
    of the completions' token means. Returns the loss, the per-token loss's token mean and the mean |log p_s − log
    p_t| of the sampled tokens (TRL's `server_logprob_abs_diff`), the last two detached.

    Raises:
        ValueError: A loss position without a served log-prob (TRL's check), or `full_logits` (not servable).
    """
    valid = loss_mask.bool()
    student_logprobs = token_logprobs(student_logits, completion_ids)
    teacher_logprobs = served["actual_logprobs"]
    if (valid & ~torch.isfinite(teacher_logprobs)).any():
        raise ValueError("Teacher server returned no logprob for a required completion token.")
    teacher_logprobs = torch.where(valid, teacher_logprobs, torch.zeros_like(teacher_logprobs))
    with torch.no_grad():
        abs_diff = token_mean((student_logprobs - teacher_logprobs).abs(), valid)
    if loss_fn.distillation_mode == "sampled_token":
        per_token = sampled_token_divergence(student_logprobs, teacher_logprobs)
    elif loss_fn.distillation_mode == "topk_logits":
        per_token = teacher_support_divergence(
            student_logits,
            served["topk_logprobs"],
            served["topk_token_ids"],
            valid,
            loss_fn.distillation_alpha,
            loss_fn.distillation_add_tail,
        )
    else:
        raise ValueError(
            f"distillation_mode={loss_fn.distillation_mode!r} is not valid with a served teacher; must be one of "
            "'sampled_token', 'topk_logits' (the server returns top-k log-probs, not the whole vocabulary)"
        )
    if loss_fn.distillation_is_clip is not None and old_logprobs is not None:
        per_token = per_token * clipped_importance_weight(student_logprobs, old_logprobs, loss_fn.distillation_is_clip)
    with torch.no_grad():
        mean = token_mean(per_token, valid)
    return completion_mean(per_token, valid), mean, abs_diff


class SDFTTrainer(SelfDistillationAdapter, TRLSDFTTrainer):
    """TRL's experimental `SDFTTrainer` (self-distillation fine-tuning) whose loss is trl_ext's port,
    `trl_ext.losses.self_distillation.SelfDistillationLoss` (config: `trl_ext.SDFTConfig`).

    The constructor takes TRL's arguments; `args` may also be TRL's `trl.experimental.sdft.SDFTConfig` (converted).
    """

    algorithm = "sdft"
    config_class: ClassVar[type[SDFTConfig]] = SDFTConfig
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "sdft"]

    def __init__(
        self,
        model,
        args: SDFTConfig | TRLSDFTConfig | TrainingArguments | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        callbacks=None,
        optimizers=(None, None),
        peft_config=None,
    ):
        """Build TRL's `SDFTTrainer` with trl_ext's config, and the loss from it.

        Args:
            model (str | PreTrainedModel): The student, as in TRL: a path / Hub id or a model.
            args: A `trl_ext.SDFTConfig`, used as is; TRL's `SDFTConfig` or a `transformers.TrainingArguments` is
                converted to one (its fields that differ from TRL's defaults carried over). None: the defaults, with
                `output_dir="<model name>-SDFT"`.
            train_dataset: The rows, as TRL reads them: `prompt` (text or chat messages) and `privileged_context` (the
                demonstration the teacher sees: text, or chat messages whose contents are joined).

        The other arguments (`eval_dataset`, `processing_class`, `callbacks`, `optimizers`, `peft_config`) are TRL's,
        passed on.

        Raises:
            TypeError: `args` is another trainer's config.
            ValueError: A field `trl_ext.SDFTConfig` refuses (the message names it), and TRL's own errors.
        """
        args = trainer_config(type(self).__name__, model, args, self.config_class, "SDFT")
        self.distillation_loss_fn = args.distillation_loss()
        super().__init__(
            model,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
            optimizers=optimizers,
            peft_config=peft_config,
        )

    def served_loss_mask(self, inputs: dict[str, Any]) -> torch.Tensor:
        """The completion's tokens from the `num_loss_tokens_to_skip`-th on (TRL's SDFT rule)."""
        mask = inputs["completion_mask"]
        if self.num_loss_tokens_to_skip > 0:
            positions = torch.arange(mask.size(1), device=mask.device).unsqueeze(0)
            mask = mask * (positions >= self.num_loss_tokens_to_skip).long()
        return mask
