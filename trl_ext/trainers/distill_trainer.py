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
"""

from __future__ import annotations

import logging
import os
from typing import Any, ClassVar

import torch
from transformers import AutoTokenizer, PreTrainedModel
from trl.models import prepare_deepspeed, prepare_fsdp
from trl.trainer.utils import add_fused_lm_head, create_model_from_path

from ..advantages import AdvantageResult
from . import grpo_config as configs
from .grpo_trainer import GRPOFamilyTrainer, _loss_mask

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

    config_class = configs.DistillFamilyConfig
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "grpo", "on-policy-distillation"]

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: configs.DistillFamilyConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        teacher_model: str | PreTrainedModel | None = None,
        **kwargs: Any,
    ):
        owner = type(self).__name__
        args = self._resolve_args(model, args)
        teacher = _teacher_argument(owner, model, teacher_model, args)
        funcs = reward_funcs if isinstance(reward_funcs, list) else [] if reward_funcs is None else [reward_funcs]
        if not funcs:
            if args.reward_weight > 0:
                raise ValueError(
                    f"{owner}: reward_weight={args.reward_weight} blends task rewards into the advantages, but no "
                    "reward_funcs were given; pass reward functions or set reward_weight=0 (pure distillation)"
                )
            funcs = [no_task_reward]

        super().__init__(model, funcs, args, train_dataset, eval_dataset, processing_class, **kwargs)

        if self._is_vlm:
            raise ValueError(f"{owner}: vision-language students are not supported (the teacher scores text only)")
        self.reward_advantage_fn = args.build_reward_advantage_fn()
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
        _compare_vocabularies(owner, self._student_tokenizer.get_vocab(), teacher_tokenizer.get_vocab(), source)

    def _check_teacher_output_layer(self, teacher: torch.nn.Module) -> None:
        """The teacher's output layer must cover the student's tokenizer. Ids the student can emit beyond it (padding
        rows of a larger student embedding, as between Qwen2.5 sizes) are masked out of the distillation term."""
        teacher_rows, student_rows = _output_rows(teacher), _output_rows(self.model)
        tokens = len(self._student_tokenizer)
        if teacher_rows < tokens:
            raise ValueError(
                f"{type(self).__name__}: the teacher's output layer has {teacher_rows} rows but the student's "
                f"tokenizer has {tokens} tokens, so the teacher cannot score every token the student emits; the "
                "teacher must use the student's tokenizer and vocabulary"
            )
        self._teacher_vocab_size = teacher_rows
        self._student_may_exceed_teacher = student_rows > teacher_rows

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
        logps, _, _ = self._get_per_token_logps_and_entropies(
            self.teacher_model, input_ids.to(device), attention_mask.to(device), logits_to_keep, batch_size=batch_size
        )
        return logps.to(attention_mask.device, torch.float32), valid

    # ---- advantages --------------------------------------------------------------------------------------------

    def _compute_advantages(self, rewards, group_ids, output):
        """The reward term reward_weight·Â (per sample); the token-level distillation term is added once the
        teacher has scored the batch (`_generate_and_score_completions`)."""
        weight = self.args.reward_weight
        keep = torch.ones_like(rewards, dtype=torch.bool)
        if weight == 0:
            return AdvantageResult(torch.zeros_like(rewards), keep), None
        result = self.reward_advantage_fn.compute(rewards, group_ids)
        return AdvantageResult(weight * result.advantages, keep), None

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)  # advantages: reward_weight·Â, [B]
        mode = "train" if self.model.training else "eval"
        completion_ids = output["completion_ids"]
        input_ids = torch.cat([output["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        batch, width = completion_ids.shape
        batch_size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        mask = _loss_mask(output).bool()

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
            self._metrics[mode][f"advantage/{name}"].append(float(value))
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
            self._metrics[mode][name].append(value)
        self._show_advantages(advantages.sum(1) / mask_all.sum(1).clamp(min=1))
        return output


def _output_rows(model: torch.nn.Module) -> int:
    """Rows of the model's output layer (its vocabulary), also when DeepSpeed ZeRO-3 has partitioned the weight (its
    local shape is then empty and `ds_shape` holds the full one)."""
    weight = model.get_output_embeddings().weight
    return int(getattr(weight, "ds_shape", weight.shape)[0])


def _teacher_argument(owner: str, model: Any, teacher_model: Any, args: configs.DistillFamilyConfig) -> Any:
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


def _compare_vocabularies(owner: str, student: dict[str, int], teacher: dict[str, int], source: str) -> None:
    if student == teacher:
        return
    differing = sorted(token for token in student.keys() | teacher.keys() if student.get(token) != teacher.get(token))
    examples = ", ".join(f"{t!r}: student {student.get(t)} / teacher {teacher.get(t)}" for t in differing[:3])
    raise ValueError(
        f"{owner}: the teacher's tokenizer ({source}) differs from the student's ({len(teacher)} vs {len(student)} "
        f"tokens, {len(differing)} tokens with different ids, e.g. {examples}); on-policy distillation scores the "
        "student's token ids with the teacher, so both must share one tokenizer"
    )
