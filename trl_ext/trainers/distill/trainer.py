"""On-policy distillation: a frozen teacher's log-probs of the student's own samples as per-token advantages.

Thinking Machines, "On-Policy Distillation" (2025, Tinker); Agarwal et al. 2024, "On-Policy Distillation of
Language Models" (arXiv 2306.13649); Trinity-RFT's `on_policy_distill` algorithm. For every generation batch:

* the student samples completions (TRL's generation: transformers or vLLM) and TRL scores them with the reward
  functions, if any;
* the teacher scores the sampled tokens through TRL's fused log-prob path (`add_fused_lm_head`: no `[B, T, V]`
  logits), in eval mode and without gradients, at the sampling `temperature`, on its own device and dtype;
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
import logging
import os
from typing import Any, ClassVar

import torch
from accelerate.utils import is_peft_model
from transformers import AutoTokenizer, PreTrainedModel, TrainingArguments
from trl.models import prepare_deepspeed, prepare_fsdp
from trl.models.utils import _ForwardRedirection
from trl.trainer.utils import add_fused_lm_head, create_model_from_path, maybe_gather_lm_head_ctx

from ...advantages import AdvantageResult
from ...losses import SHARE, aggregate_loss
from ...losses.distillation import OutputLayer, TeacherTopK, dense_divergence, teacher_top_k
from ..grpo.scoring import _loss_mask
from ..grpo.trainer import GRPOFamilyTrainer
from .config import DistillFamilyConfig

logger = logging.getLogger(__name__)


def no_task_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """The reward source TRL requires when distilling without task rewards: 0 for every completion (with
    `reward_weight=0` rewards never reach the advantages)."""
    return [0.0] * len(completions)


class DistillFamilyTrainer(GRPOFamilyTrainer):
    """On-policy distillation from a teacher's log-probs (config: `OnPolicyDistillConfig`).

    Takes `trl.GRPOTrainer`'s arguments plus `teacher_model`: a path / Hub id (loaded with
    `teacher_model_init_kwargs`, by default in the student's dtype) or a `PreTrainedModel`; when omitted, the
    config's `teacher_model_name_or_path`. The teacher must use the student's tokenizer. `reward_funcs` is
    optional: without it the run is pure distillation; with it, the rewards are logged, and enter the advantages
    when `reward_weight` > 0.
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
        teacher_model: str | PreTrainedModel | None = None,
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
                `args.teacher_model_name_or_path`.
            **kwargs: The rest of `trl.GRPOTrainer`'s arguments (`peft_config`, `callbacks`, `tools`, ...), as in
                `GRPOFamilyTrainer`.

        Raises:
            TypeError: `args` is not one of the configs above (see `GRPOFamilyTrainer`), or `teacher_model` is not a
                path, a Hub id or a model.
            ValueError: No teacher, or two different ones (`teacher_model` and `teacher_model_name_or_path`);
                `reward_weight` > 0 without `reward_funcs`; a teacher whose tokenizer or vocabulary differs from the
                student's; a `teacher_top_k` the teacher cannot serve; a vision-language student; and
                `GRPOFamilyTrainer`'s errors.
        """
        owner = type(self).__name__
        args = self._resolve_args(model, args)
        teacher = teacher_argument(owner, model, teacher_model, args)
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
        self.reward_advantage_fn = args.build_reward_advantage_fn()
        self._dense_divergence = self._teacher_head_copy = None
        self._forward_redirection = _ForwardRedirection()
        self.teacher_model = self._load_teacher(teacher)

    # ---- the teacher -------------------------------------------------------------------------------------------

    def _load_teacher(self, teacher: str | PreTrainedModel) -> torch.nn.Module:
        """Load (from a path), check the vocabulary, freeze, add the fused log-prob head and place the teacher."""
        args = self.args
        self._check_teacher_tokenizer(teacher if isinstance(teacher, str) else teacher.config._name_or_path)
        if isinstance(teacher, str):  # after the tokenizer check: a wrong teacher fails before its weights load
            init = dict(args.teacher_model_init_kwargs or {})
            init.setdefault("dtype", self.model.dtype)
            init.setdefault("trust_remote_code", args.trust_remote_code)
            init.setdefault("device_map", None)
            teacher = create_model_from_path(teacher, **init)
        self._check_teacher_output_layer(teacher)
        if args.dense_distillation:
            self._check_dense_teacher(teacher)
        teacher.eval()
        teacher.requires_grad_(False)
        base = teacher.get_base_model() if hasattr(teacher, "get_base_model") else teacher
        add_fused_lm_head(base, temperature=self.temperature)

        spread = len(set((getattr(teacher, "hf_device_map", None) or {}).values())) > 1
        if args.teacher_device is not None:
            device = torch.device(args.teacher_device)
            if self.is_deepspeed_enabled or self.is_fsdp_enabled:
                raise ValueError(
                    f"{type(self).__name__}: teacher_device={args.teacher_device!r} cannot be combined with "
                    "DeepSpeed / FSDP, which place (and shard) the teacher like the reference model; unset it"
                )
            teacher = teacher.to(device)
        elif spread:
            pass  # placed by `device_map` over several devices: leave it there
        elif self.is_deepspeed_enabled:
            teacher = prepare_deepspeed(teacher, self.accelerator)
        elif self.is_fsdp_enabled:
            teacher = prepare_fsdp(teacher, self.accelerator)
        else:
            teacher = self.accelerator.prepare_model(teacher, evaluation_mode=True)
        self._teacher_input_device = (
            torch.device(args.teacher_device) if args.teacher_device is not None
            else base.get_input_embeddings().weight.device if spread else self.accelerator.device
        )  # fmt: skip
        return teacher

    def _check_teacher_tokenizer(self, source: str) -> None:
        """The teacher scores the student's token ids, so it must use the student's tokenizer: compared when the
        teacher's can be loaded from its path (or Hub id)."""
        owner = type(self).__name__
        teacher_tokenizer = None
        if source:
            try:
                teacher_tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=self.args.trust_remote_code)
            except (OSError, ValueError) as err:
                logger.warning("%s: cannot load the teacher's tokenizer from %r (%s)", owner, source, err)
        if teacher_tokenizer is None:
            logger.warning(
                "%s: the teacher's tokenizer is unknown, so only its vocabulary size is checked against the "
                "student's; the teacher must use the student's tokenizer (pass the teacher as a path to check it)",
                owner,
            )
            return
        compare_vocabularies(owner, self._student_tokenizer.get_vocab(), teacher_tokenizer.get_vocab(), source)

    def _check_teacher_output_layer(self, teacher: torch.nn.Module) -> None:
        """The teacher's output layer must cover the student's tokenizer. Ids the student can emit beyond it (padding
        rows of a larger student embedding, as between Qwen2.5 sizes) are masked out of the distillation term."""
        teacher_rows, student_rows = output_rows(teacher), output_rows(self.model)
        tokens = len(self._student_tokenizer)
        if teacher_rows < tokens:
            raise ValueError(
                f"{type(self).__name__}: the teacher's output layer has {teacher_rows} rows but the student's "
                f"tokenizer has {tokens} tokens, so the teacher cannot score every token the student emits; the "
                "teacher must use the student's tokenizer and vocabulary"
            )
        self._teacher_vocab_size = teacher_rows
        self._student_may_exceed_teacher = student_rows > teacher_rows

    def _check_dense_teacher(self, teacher: torch.nn.Module) -> None:
        """A dense mode (`teacher_top_k` ≠ 0) reads the teacher's hidden states and output layer, and compares the
        teacher's top-k with the student's vocabulary (the whole vocabulary with -1)."""
        owner, k = type(self).__name__, self.args.teacher_top_k
        base = _causal_lm(teacher)
        if getattr(base, "base_model", base) is base:
            raise ValueError(
                f"{owner}: teacher_top_k={k} needs the teacher's hidden states and output layer, but this teacher "
                f"({type(base).__name__}) exposes no backbone (`base_model`); only its sampled-token log-probs can be "
                "used: set teacher_top_k=0"
            )
        if k > self._teacher_vocab_size:
            raise ValueError(
                f"{owner}: teacher_top_k={k} is larger than the teacher's vocabulary ({self._teacher_vocab_size} "
                f"tokens); use at most {self._teacher_vocab_size}, or -1 for the whole vocabulary"
            )
        if k == -1 and output_rows(self.model) != self._teacher_vocab_size:
            raise ValueError(
                f"{owner}: teacher_top_k=-1 compares the whole vocabularies, but the student's output layer has "
                f"{output_rows(self.model)} rows and the teacher's {self._teacher_vocab_size}; use a teacher of the "
                "student's vocabulary size, or teacher_top_k > 0 (the rows beyond the teacher's fall in the tail)"
            )
        if self.aux_loss_enabled:
            raise ValueError(
                f"{owner}: teacher_top_k={k} computes the student's log-probs from its hidden states, without the "
                "MoE router's load-balancing loss that output_router_logits asks for; set teacher_top_k=0 or turn "
                "output_router_logits off"
            )

    @property
    def _student_tokenizer(self):
        return getattr(self.processing_class, "tokenizer", self.processing_class)

    @torch.no_grad()
    def _teacher_logps(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int, batch_size: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The teacher's log-probs of the completion tokens (float32, on the student's device), and the mask of
        the tokens it can score (None: all of them)."""
        device = self._teacher_input_device
        valid = None
        if self._student_may_exceed_teacher:
            valid = input_ids[:, -logits_to_keep:] < self._teacher_vocab_size
            input_ids = input_ids.clamp(max=self._teacher_vocab_size - 1)
        logps, _, _ = self.log_probs_and_entropies(
            self.teacher_model, input_ids.to(device), attention_mask.to(device), logits_to_keep, batch_size=batch_size
        )
        return logps.to(attention_mask.device, torch.float32), valid

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
        mode = "train" if self.model.training else "eval"
        completion_ids = output["completion_ids"]
        input_ids = torch.cat([output["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        batch, width = completion_ids.shape
        batch_size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        mask = _loss_mask(output).bool()

        if self.args.dense_distillation:
            teacher, teacher_valid = self._teacher_dense(output, input_ids, attention_mask, width, batch_size, mask)
            if not self.args.sampled_token_advantage:
                return output  # the advantages are the task term reward_weight·Â; the dense term is in the loss
        else:
            teacher, teacher_valid = self._teacher_logps(input_ids, attention_mask, width, batch_size)
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

    @torch.no_grad()
    def _teacher_dense(
        self,
        output: dict[str, Any],
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        width: int,
        batch_size: int,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """One teacher forward per micro-batch of the generation batch, at the sampling temperature: with top-k, the
        teacher's top-k ids / log-probs and tail log-mass at each completion position (`teacher_top_k_ids`,
        `teacher_top_k_logprobs`, `teacher_tail_logprob`); with the whole vocabulary, its last hidden states
        (`teacher_hidden_states`, projected chunk by chunk in the loss). Stored in `output` (split into micro-batches
        with the rest). Returns the teacher's log-probs of the sampled tokens and the mask of the tokens it can score
        when a sampled-token advantage is added (else None, None)."""
        args, k = self.args, self.args.teacher_top_k
        labels_needed = args.sampled_token_advantage
        completion_ids = output["completion_ids"]
        valid = completion_ids < self._teacher_vocab_size
        labels = completion_ids.clamp(max=self._teacher_vocab_size - 1)
        unwrapped = self.accelerator.unwrap_model(self.teacher_model)
        device = self._teacher_input_device
        columns: dict[str, list[torch.Tensor]] = {}
        for start in range(0, input_ids.size(0), batch_size):
            rows = slice(start, start + batch_size)
            hidden = self._forward_redirection(
                self.teacher_model,
                unwrapped,
                _last_hidden_state,
                unwrapped,
                input_ids[rows].to(device),
                attention_mask[rows].to(device),
                width,
            )
            at = mask[rows].to(hidden.device)
            scored = {}
            if k > 0 or labels_needed:
                top = teacher_top_k(
                    hidden[at], _output_layer(unwrapped), max(k, 1), labels[rows].to(hidden.device)[at],
                    self.temperature,
                )  # fmt: skip
                if k > 0:
                    scored["teacher_top_k_ids"], scored["teacher_top_k_logprobs"] = top.ids, top.logprobs
                    scored["teacher_tail_logprob"] = top.tail_logprob
                if labels_needed:
                    scored["teacher_logprob"] = top.label_logprob
            if k == -1:
                scored["teacher_hidden_states"] = hidden[at]
            for name, value in scored.items():
                full = value.new_zeros((*at.shape, *value.shape[1:]))
                full[at] = value
                columns.setdefault(name, []).append(full.to(mask.device))
        merged = {name: torch.cat(parts) for name, parts in columns.items()}
        teacher = merged.pop("teacher_logprob", None)
        output.update(merged)
        if teacher is None:
            return None, None
        return teacher.float(), (None if bool(valid.all()) else valid)

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
        hidden = _last_hidden_state(unwrapped, input_ids, attention_mask, logits_to_keep)
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
            _output_layer(unwrapped),
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
        layer = _output_layer(self.accelerator.unwrap_model(self.teacher_model))
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


def _causal_lm(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a PEFT wrapper (or the model itself)."""
    return model.base_model.model if is_peft_model(model) else model


def _last_hidden_state(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int
) -> torch.Tensor:
    """The backbone's last hidden states that predict the last `logits_to_keep` tokens, `[B, logits_to_keep, H]`
    (the position before each token: the output layer is not run)."""
    backbone = _causal_lm(model).base_model
    hidden = backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    return hidden[:, :-1][:, -logits_to_keep:]


def _output_layer(model: torch.nn.Module) -> OutputLayer:
    """The model's output layer with its logit post-processing, read as TRL reads it (`logit_scale`, Muse Glimmer's
    `output_multiplier`, Falcon-H1's `lm_head_multiplier`, Granite's / HyperCLOVA X's `logits_scaling`, Gemma's
    `final_logit_softcapping`); a ZeRO-3 partitioned weight is gathered around each use, an FSDP2 one once."""
    head = _causal_lm(model).get_output_embeddings()
    config = _causal_lm(model).config.get_text_config()
    scale = getattr(config, "logit_scale", None)
    for name in ("output_multiplier", "lm_head_multiplier"):
        scale = getattr(config, name, None) if scale is None else scale
    if scale is None and getattr(config, "logits_scaling", None) is not None:
        scale = config.logits_scaling if config.model_type == "hyperclovax" else 1 / config.logits_scaling
    weight, bias = head.weight, head.bias
    if isinstance(weight, torch.distributed.tensor.DTensor):
        weight = weight.full_tensor()
        bias = bias.full_tensor() if bias is not None else None
    return OutputLayer(
        weight,
        bias,
        1.0 if scale is None else float(scale),
        getattr(config, "final_logit_softcapping", None),
        gathered=lambda: maybe_gather_lm_head_ctx(head.weight, head.bias),
        rows=output_rows(_causal_lm(model)),
    )


def output_rows(model: torch.nn.Module) -> int:
    """Rows of the model's output layer (its vocabulary), also when DeepSpeed ZeRO-3 has partitioned the weight (its
    local shape is then empty and `ds_shape` holds the full one)."""
    weight = model.get_output_embeddings().weight
    return int(getattr(weight, "ds_shape", weight.shape)[0])


def teacher_argument(owner: str, model: Any, teacher_model: Any, args: DistillFamilyConfig) -> Any:
    """The teacher to load: the trainer's `teacher_model`, else the config's `teacher_model_name_or_path`."""
    configured = args.teacher_model_name_or_path
    if teacher_model is None and configured is None:
        raise ValueError(
            f"{owner}: a teacher is required: pass teacher_model= (a path, Hub id or PreTrainedModel) or set "
            f"{type(args).__name__}.teacher_model_name_or_path"
        )
    if teacher_model is not None and configured is not None and teacher_model != configured:
        raise ValueError(
            f"{owner}: two teachers given: teacher_model={teacher_model!r} and "
            f"teacher_model_name_or_path={configured!r}; pass one"
        )
    teacher = teacher_model if teacher_model is not None else configured
    if not isinstance(teacher, (str, os.PathLike, torch.nn.Module)):
        raise TypeError(f"{owner}: teacher_model must be a path, a Hub id or a PreTrainedModel, got {type(teacher)}")
    if isinstance(teacher, torch.nn.Module):
        if teacher is model:
            raise ValueError(
                f"{owner}: teacher_model is the student itself; load a separate copy (the teacher must stay frozen)"
            )
        if args.teacher_model_init_kwargs:
            raise ValueError(
                f"{owner}: teacher_model_init_kwargs={args.teacher_model_init_kwargs!r} only applies to a teacher "
                "given as a path; the teacher_model passed is already loaded"
            )
    return os.fspath(teacher) if isinstance(teacher, os.PathLike) else teacher


def compare_vocabularies(owner: str, student: dict[str, int], teacher: dict[str, int], source: str) -> None:
    if student == teacher:
        return
    differing = sorted(token for token in student.keys() | teacher.keys() if student.get(token) != teacher.get(token))
    examples = ", ".join(f"{t!r}: student {student.get(t)} / teacher {teacher.get(t)}" for t in differing[:3])
    raise ValueError(
        f"{owner}: the teacher's tokenizer ({source}) differs from the student's ({len(teacher)} vs {len(student)} "
        f"tokens, {len(differing)} tokens with different ids, e.g. {examples}); on-policy distillation scores the "
        "student's token ids with the teacher, so both must share one tokenizer"
    )
