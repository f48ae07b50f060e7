"""On-policy distillation: a frozen teacher's log-probs of the student's own samples as per-token advantages.

Thinking Machines, "On-Policy Distillation" (2025, Tinker); Agarwal et al. 2024, "On-Policy Distillation of
Language Models" (arXiv 2306.13649); Trinity-RFT's `on_policy_distill` algorithm. For every generation batch:

* the student samples completions (TRL's generation: transformers or vLLM) and TRL scores them with the reward
  functions, if any;
* the teacher scores the sampled tokens through TRL's fused log-prob path (`add_fused_lm_head`: no `[B, T, V]`
  logits), in eval mode and without gradients, at the sampling `temperature`, on its own device and dtype; or a
  vLLM server scores them (`teacher_model_server_url`), or each row's teacher by its `teacher_id` (`teachers.py`);
* the per-token advantage is

      A_t = kl_coef · (log π_teacher(y_t) − log π_old(y_t))  +  reward_weight · Â_i

  where log π_old is the student's log-prob at sampling time (TRL's `old_per_token_logps` when it computed them,
  else one no-grad forward of the student), so the first term is minus the sampled token's reverse KL
  KL(π_student ‖ π_teacher) estimate, and Â_i is the `reward_advantage_fn` advantage (GRPO by default) of sample
  i's summed task reward, on each of its tokens (0 with the default `reward_weight=0`: pure distillation);
* the loss is the `ppo` (default) or `importance_sampling` policy loss on these advantages, normalized over the
  optimizer window like every GRPO-family trainer.

Logged: `kl/mean`, `kl/std` (the per-token estimate log π_old − log π_teacher over the generation batch's
completion tokens), `advantages/mean` (token mean), and the policy loss's metrics.

Dense modes (`teacher_top_k` ≠ 0, `trl_ext.losses.distillation`): the teacher's pass keeps its top-k ids, log-probs
and tail log-mass (k > 0) or its last hidden states (−1) per completion token instead of the sampled token's
log-prob, and the loss adds `kl_coef` × the generalized JSD (`jsd_beta`) between student and teacher, token mean
over the optimizer window (`distill/divergence`). The student's loss pass (`policy_log_probs`) runs its backbone
once and takes the divergence, the sampled tokens' log-probs and the entropies from one chunked projection. The
dense term replaces the algorithm's own sampled-token advantage; a composed `advantage_fn` (e.g. `jsd`) and the
reward term still enter the advantages.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from transformers import PreTrainedModel, TrainingArguments
from trl.models.utils import _ForwardRedirection

from ...advantages import AdvantageResult
from ...losses import SHARE, aggregate_loss
from ...losses.distillation import OutputLayer, TeacherTopK, dense_divergence
from ..grpo.scoring import _loss_mask
from ..grpo.trainer import GRPOFamilyTrainer
from .config import DistillFamilyConfig
from .model_parts import last_hidden_state, output_layer
from .teachers import TeacherBatch, build_router, check_teacher_column, teacher_argument, teacher_sources

__all__ = ["DistillFamilyTrainer", "no_task_reward", "teacher_argument"]  # `teacher_argument`: the async trainer's


def no_task_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """The reward source TRL requires when distilling without task rewards: 0 for every completion (with
    `reward_weight=0` rewards never reach the advantages)."""
    return [0.0] * len(completions)


class DistillFamilyTrainer(GRPOFamilyTrainer):
    """On-policy distillation from a teacher's log-probs (config: `OnPolicyDistillConfig`).

    Takes `trl.GRPOTrainer`'s arguments plus `teacher_model`: a path / Hub id (loaded with
    `teacher_model_init_kwargs`, by default in the student's dtype) or a `PreTrainedModel`; when omitted, the
    config's `teacher_model_name_or_path`. Or teachers served by vLLM (`teacher_model_server_url`,
    `teacher_server_urls`), and several teachers routed per row by the dataset's `teacher_id` column
    (`teachers.py`). Every teacher must use the student's tokenizer. `reward_funcs` is optional: without it the run
    is pure distillation; with it, the rewards are logged, and enter the advantages when `reward_weight` > 0.
    """

    config_class = DistillFamilyConfig
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "grpo", "on-policy-distillation"]
    trainer_metrics: ClassVar[dict[str, str]] = {**GRPOFamilyTrainer.trainer_metrics, "distill/divergence": SHARE}

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: DistillFamilyConfig | TrainingArguments | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        teacher_model: str | PreTrainedModel | Mapping[str, str | PreTrainedModel] | None = None,
        **kwargs: Any,
    ):
        """Check the teacher and the reward settings, build the GRPO-family trainer, then load the teacher.

        Args:
            model (str | PreTrainedModel): The student, as in `trl.GRPOTrainer`.
            reward_funcs (RewardFunc | list[RewardFunc] | None): Task reward sources, as in TRL; optional (pure
                distillation without them, where a reward of 0 stands in for TRL), required when `args.reward_weight` >
                0.
            args: The algorithm's config (`OnPolicyDistillConfig`), used as is; TRL's `trl.GRPOConfig` or a
                `transformers.TrainingArguments` is converted to one (its fields that differ from TRL's defaults carried
                over, the algorithm's defaults for the rest); None: the defaults.
            train_dataset (Dataset | IterableDataset | None): The prompts (a `prompt` column), as in
                `GRPOFamilyTrainer`.
            eval_dataset (Dataset | IterableDataset | dict[str, Dataset] | None): Evaluation prompts, as in
                `GRPOFamilyTrainer`.
            processing_class (PreTrainedTokenizerBase | ProcessorMixin | None): The student's tokenizer, as in TRL; the
                teacher's must tokenize the same way.
            teacher_model: The teacher: a path / Hub id (loaded with `args.teacher_model_init_kwargs`, by default in the
                student's dtype, after its tokenizer is checked) or a loaded model (not the student itself). Default:
                `args.teacher_model_name_or_path`, or the served teachers of `args.teacher_model_server_url` /
                `args.teacher_server_urls`. A dict `{teacher_id: path or model}` names local teachers, which route
                the rows by their `teacher_id` column (with the served ones, under other ids).
            **kwargs: The rest of `trl.GRPOTrainer`'s arguments (`peft_config`, `callbacks`, `tools`, ...), as in
                `GRPOFamilyTrainer`.

        Raises:
            TypeError: `args` is not one of the configs above (see `GRPOFamilyTrainer`), or `teacher_model` is not a
                path, a Hub id or a model.
            ValueError: No teacher, or two unnamed ones (`teacher_model`, `teacher_model_name_or_path`, a served
                one); with several teachers, a dataset without a `teacher_id` column or a row whose `teacher_id` names
                none of them; `reward_weight` > 0 without `reward_funcs`; a teacher whose tokenizer or vocabulary
                differs from the student's; a `teacher_top_k` the teacher cannot serve; a vision-language student; and
                `GRPOFamilyTrainer`'s errors.
            ConnectionError: A teacher server that does not answer within `vllm_server_timeout` seconds.
            ImportError: A served teacher without vLLM installed (TRL's `VLLMClient` needs it).
        """
        owner = type(self).__name__
        args = self._resolve_args(model, args)
        local, served = teacher_sources(owner, model, teacher_model, args)
        teacher_ids = [*local, *served]
        for split, dataset in (("train_dataset", train_dataset), ("eval_dataset", eval_dataset)):
            check_teacher_column(owner, teacher_ids, split, dataset)
        funcs = reward_funcs if isinstance(reward_funcs, list) else [] if reward_funcs is None else [reward_funcs]
        if not funcs:
            if args.reward_weight > 0:
                raise ValueError(
                    f"{owner}: reward_weight={args.reward_weight} blends task rewards into the advantages, but no "
                    "reward_funcs were given; pass reward functions or set reward_weight=0 (pure distillation)"
                )
            funcs = [no_task_reward]

        super().__init__(model, funcs, args, train_dataset, eval_dataset, processing_class, **kwargs)

        if self.is_vision_language_model:
            raise ValueError(f"{owner}: vision-language students are not supported (the teacher scores text only)")
        if args.dense_distillation and self.aux_loss_enabled:
            raise ValueError(
                f"{owner}: teacher_top_k={args.teacher_top_k} computes the student's log-probs from its hidden states, "
                "without the MoE router's load-balancing loss that output_router_logits asks for; set teacher_top_k=0 "
                "or turn output_router_logits off"
            )
        self.reward_advantage_fn = args.build_reward_advantage_fn()
        self._dense_divergence = self._teacher_head_copy = None
        self._forward_redirection = _ForwardRedirection()
        self.teachers = build_router(self, local, served)
        self.teacher_model = self.teachers.local_model  # the one local teacher's model (None otherwise)

    # ---- the teacher -------------------------------------------------------------------------------------------

    def _generate_round(self, inputs):
        """TRL's generation and reward pass, with each sample's teacher (`teacher_index`, its position in the
        router's `ids`) when rows are routed by `teacher_id`: a row-aligned column, so it follows the rows that
        dynamic sampling or `duplicate_experiences` reorder."""
        index = self.teachers.row_index(inputs) if self.teachers.routes else None  # before generating: fails fast
        output, rewards_per_func, overlong = super()._generate_round(inputs)
        if index is not None:
            output["teacher_index"] = index.to(output["completion_ids"].device)
        return output, rewards_per_func, overlong

    # ---- advantages --------------------------------------------------------------------------------------------

    def _compute_advantages(self, rewards, group_ids, output):
        """The reward term reward_weight·Â (per sample); the token-level distillation term is added once the
        teacher has scored the batch (`score_generation_batch`)."""
        weight = self.args.reward_weight
        keep = torch.ones_like(rewards, dtype=torch.bool)
        if weight == 0:
            return AdvantageResult(torch.zeros_like(rewards), keep), None
        result = self.reward_advantage_fn.compute(rewards, group_ids)
        return AdvantageResult(weight * result.advantages, keep), None

    def score_generation_batch(self, inputs):
        output = super().score_generation_batch(inputs)  # advantages: reward_weight·Â, [B]
        teacher_index = output.pop("teacher_index", None)
        mode = "train" if self.model.training else "eval"
        batch, width = output["completion_ids"].shape
        batch_size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        mask = _loss_mask(output).bool()

        scores = self.teachers.score(
            TeacherBatch.of(output, mask, batch_size), teacher_index, self.args.teacher_top_k,
            self.args.sampled_token_advantage, self.temperature,
        )  # fmt: skip
        output.update(scores.columns)  # the dense mode's teacher data, for the loss pass
        if scores.logprob is None:
            return output  # the advantages are the task term reward_weight·Â; the dense term is in the loss
        teacher, teacher_valid = scores.logprob, scores.valid
        old, _ = self._sampling_log_probs(output, entropy=False)  # TRL's, or one forward pass on-policy
        scored = mask if teacher_valid is None else mask & teacher_valid

        # The whole generation batch (every process's samples, padded to one width): a prompt's group may span
        # processes, and the metrics cover every sample.
        local = torch.stack([teacher, old.float(), mask.float(), scored.float()], dim=1)  # [B, 4, T]
        teacher_all, old_all, mask_all, scored_all = self.accelerator.gather(
            self.accelerator.pad_across_processes(local, dim=2)
        ).unbind(1)
        mask_all, scored_all = mask_all.bool(), scored_all.bool()
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        group_ids = torch.arange(mask_all.size(0), device=mask_all.device) // group_size
        available = {  # the distillation advantage (`on_policy_distill`, `jsd`) reads the ones it declares
            "teacher_logprob": teacher_all,
            "old_logprob": old_all,
            "response_mask": mask_all,
            "teacher_valid_mask": scored_all,
        }
        declared = self.advantage_fn.inputs()
        if "teacher_valid_mask" not in declared:  # tokens the teacher cannot score are left out of its mask
            available["response_mask"] = scored_all
        result = self.advantage_fn.compute(None, group_ids, **{k: v for k, v in available.items() if k in declared})
        distill = result.advantages
        for name, value in (getattr(result, "metrics", None) or {}).items():
            self.metric_log(mode)[f"advantage/{name}"].append(float(value))
        task = self.accelerator.gather(output["advantages"])  # reward_weight·Â per sample
        advantages = distill + task.unsqueeze(1) * mask_all
        rows = slice(self.accelerator.process_index * batch, (self.accelerator.process_index + 1) * batch)
        output["advantages"] = advantages[rows, :width].float()

        tokens = scored_all.sum().clamp(min=1)
        kl = torch.where(scored_all, old_all - teacher_all, 0.0)
        kl_mean = kl.sum() / tokens
        kl_var = torch.where(scored_all, kl - kl_mean, 0.0).square().sum() / (tokens - 1).clamp(min=1)
        metrics = torch.stack([kl_mean, kl_var.sqrt(), advantages.sum() / mask_all.sum().clamp(min=1)]).tolist()
        for name, value in zip(("kl/mean", "kl/std", "advantages/mean"), metrics, strict=True):
            self.metric_log(mode)[name].append(value)
        self._show_advantages(advantages.sum(1) / mask_all.sum(1).clamp(min=1))
        return output

    # ---- the dense modes (teacher_top_k ≠ 0) ---------------------------------------------------------------------

    def policy_log_probs(self, model, inputs):
        """In a dense mode, the student's pass of the loss: one backbone forward, then the divergence, the sampled
        tokens' log-probs and the entropies from the same chunked projection (`dense_divergence`); the divergence
        is kept for `_policy_loss`. Every other pass (reference, sampling log-probs, teacher) is TRL's."""
        self._dense_divergence = None
        if not self.args.dense_distillation:
            return super().policy_log_probs(model, inputs)
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        unwrapped = self.accelerator.unwrap_model(model)
        with self.accelerator.autocast():
            logps, entropies, self._dense_divergence = self._forward_redirection(
                model,
                unwrapped,
                self._dense_student_pass,
                unwrapped,
                input_ids,
                attention_mask,
                completion_ids.size(1),
                inputs,
            )
        return logps, entropies, None

    def _dense_student_pass(self, unwrapped, input_ids, attention_mask, logits_to_keep, batch):
        hidden = last_hidden_state(unwrapped, input_ids, attention_mask, logits_to_keep)
        mask = _loss_mask(batch).bool()
        if self.args.teacher_top_k > 0:
            teacher = {
                "teacher_top": TeacherTopK(
                    batch["teacher_top_k_ids"][mask],
                    batch["teacher_top_k_logprobs"][mask],
                    batch["teacher_tail_logprob"][mask],
                    None,
                )
            }
        else:
            teacher = {
                "teacher_hidden": batch["teacher_hidden_states"][mask],
                "teacher_layer": self._teacher_layer(hidden.device),
            }
        result = dense_divergence(
            hidden[mask],
            output_layer(unwrapped),
            batch["completion_ids"][mask],
            self.args.jsd_beta,
            temperature=self.temperature,
            **teacher,
        )

        def spread(values: torch.Tensor) -> torch.Tensor:  # [B, T], 0 off the mask, still connected to `values`
            return values.new_zeros(mask.shape).masked_scatter(mask, values)

        return spread(result.label_logprob), spread(result.entropy), spread(result.divergence)

    def _teacher_layer(self, device: torch.device) -> OutputLayer:
        """The teacher's output layer on the student's device (a copy, made once, when the teacher is elsewhere)."""
        layer = output_layer(self.accelerator.unwrap_model(self.teacher_model))
        if layer.weight.device != device:
            if self._teacher_head_copy is None:
                bias = None if layer.bias is None else layer.bias.to(device)
                self._teacher_head_copy = (layer.weight.to(device), bias)
            layer.weight, layer.bias = self._teacher_head_copy
            layer.gathered = contextlib.nullcontext
        return layer

    def _policy_loss(self, mode: str, **inputs: Any):
        """The policy loss, plus kl_coef × the dense divergence's token mean over the optimizer window."""
        loss, metrics = super()._policy_loss(mode, **inputs)
        divergence, self._dense_divergence = self._dense_divergence, None  # this micro-batch's, from its pass
        if divergence is None:
            return loss, metrics
        tokens = inputs.get("global_valid_toks")
        dense = aggregate_loss(divergence, inputs["action_mask"], "token-mean", global_valid_toks=tokens)
        return loss + self.args.kl_coef * dense, {**metrics, "distill/divergence": dense.detach()}
