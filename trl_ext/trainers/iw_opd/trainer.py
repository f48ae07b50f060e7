"""The IW-OPD trainer: TRL's experimental `IWOPDTrainer` with trl_ext's port of its loss, normalized over the window.

Everything but the loss is TRL's: the collator of `messages` rows, the on-policy generation (the student's own
completions for a share `lmbda` of the accumulation steps, with `model.generate` or vLLM), the local teacher or the
teacher server, the logging, checkpointing and the model card's frame. `compute_loss` runs the student, takes the
teacher's logits (`_get_teacher_logits`) or its server's log-probs (`_get_teacher_token_logprobs_from_server`), as
TRL's does, and hands them to `trl_ext.losses.iw_opd.IWOPDObjective` (the IW-OPD policy gradient or the generalized
JSD, with every option of TRL's config).

One deliberate difference, the normalization. The loss is the sum over the trained completion tokens divided by
those of the whole optimizer window, counted once the window's completions exist (when TRL fills its buffer of
generated slices: `_fill_buffer`) and summed over processes, then scaled back by the number of processes (whose
gradients DDP averages). TRL divides by HF's `num_items_in_batch`, which HF counts on the dataloader's batches,
before the generation: the dataset's completion tokens, none for prompt-only rows (TRL's loss is then ±inf, its
gradients NaN), and each repeat of the generation batch again (TRL's dataloader yields it once per accumulation
step), so its update shrinks with the accumulation steps; its server JSD paths average each micro-batch instead.
The two agree on one process with one accumulation step when the batch's labels are the tokens trained (off-policy
rows, `lmbda=0`). Evaluation divides by each batch's own trained tokens. And one addition: without a `teacher_model`
argument the teacher is the config's `teacher_model_name_or_path`, which TRL's trainer does not read (it then fails at
the first loss); a trainer without any teacher is an error when it is built.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import torch
from transformers import TrainingArguments

from ...losses.iw_opd import ServedTeacher
from ..core.config_conversion import trainer_config
from ..core.trl_adapter import TrainerAdapter
from ..core.window import WindowNormalization
from .config import IWOPDConfig

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.iw_opd import IWOPDTrainer as TRLIWOPDTrainer


class IWOPDTrainer(TrainerAdapter, WindowNormalization, TRLIWOPDTrainer):
    """A `trl.experimental.iw_opd.IWOPDTrainer` whose loss is trl_ext's port (`IWOPDObjective`: IW-OPD or the
    generalized JSD, every option of the config), normalized over the optimizer window (config:
    `trl_ext.IWOPDConfig`).

    The constructor takes TRL's `IWOPDTrainer`'s arguments (`model`, `teacher_model`, `args`, `data_collator`,
    `train_dataset` of `messages` rows, `eval_dataset`, `processing_class`, ..., `peft_config`); `args` may also be
    TRL's `IWOPDConfig` or a `transformers.TrainingArguments` (converted).
    """

    algorithm: ClassVar[str] = "iw_opd"
    config_class: ClassVar[type[IWOPDConfig]] = IWOPDConfig
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "iw-opd"]
    loss_is_scaled_for_ga = True  # each micro-batch's loss is its share of the window's: HF must not divide it

    def __init__(
        self,
        model=None,
        teacher_model=None,
        args: IWOPDConfig | TrainingArguments | None = None,
        *posargs: Any,
        **kwargs: Any,
    ):
        """Build TRL's `IWOPDTrainer` with trl_ext's config, and the loss from it.

        Args:
            model (str | PreTrainedModel): The student, as in TRL: a path / Hub id or a model.
            teacher_model (str | PreTrainedModel | None): The local teacher, as in TRL (sharing the student's
                tokenizer). None: `args.teacher_model_name_or_path` (which TRL's trainer does not read), or the
                teacher server with `args.use_teacher_server=True`.
            args: A `trl_ext.IWOPDConfig`, used as is. TRL's `IWOPDConfig` or a `transformers.TrainingArguments` is
                converted to one (`trl_ext.trainers.core.config_conversion`: the fields that differ from TRL's defaults
                carried over). None: the defaults, with `output_dir="<model name>-iw_opd"`.
            *posargs: The rest of TRL's arguments in its order (`data_collator`, `train_dataset`, ...).
            **kwargs: The same by name, passed on.

        Raises:
            TypeError: `args` is the config of another trainer.
            ValueError: No teacher at all (TRL fails at the first loss instead), a converted field
                `trl_ext.IWOPDConfig` refuses (the message names it), and TRL's own errors.
        """
        owner = type(self).__name__
        args = trainer_config(owner, model, args, self.config_class, "iw_opd")
        if teacher_model is None and not args.use_teacher_server:
            teacher_model = args.teacher_model_name_or_path
            if teacher_model is None:
                raise ValueError(
                    f"{owner}: no teacher: pass teacher_model, set args.teacher_model_name_or_path, or serve one with "
                    "args.use_teacher_server=True and args.teacher_model_server_url"
                )
        super().__init__(model, teacher_model, args, *posargs, **kwargs)
        self.loss_objective = args.objective()

    # ---- optimizer-window normalization ----------------------------------------------------------------------

    def micro_batch_counts(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The completion tokens a micro-batch trains (its labels that are not -100)."""
        return {"global_valid_toks": (batch["labels"] != -100).sum().float()}

    def _fill_buffer(self, generation_batch: dict[str, Any], buffer_steps: int) -> None:
        """TRL's buffer of the window's slices (the student's completions generated where on-policy), then the
        window's counts over them and over the processes."""
        super()._fill_buffer(generation_batch, buffer_steps)
        self.count_window(self._buffered_inputs)

    # ---- the loss --------------------------------------------------------------------------------------------

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The micro-batch's share of the window's loss (`IWOPDObjective`), as TRL's `compute_loss` dispatches it
        (local teacher or server). `num_items_in_batch` (HF's count before the generation) is not used: see the
        module docstring."""
        self._raise_if_local_teacher_tokenizer_mismatch()
        mode = "train" if self.model.training else "eval"
        outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        start = self._compute_prompt_length(inputs)
        mask = inputs["labels"][:, start:] != -100
        completion_ids = inputs["input_ids"][:, start:]
        rollout = inputs.get("rollout_logprobs")  # vLLM's log-probs of the sampled tokens, at the full width
        rollout = None if rollout is None else rollout[:, start:]
        student_logits = outputs.logits[:, start - 1 : -1, :]
        counts = self.loss_counts(inputs, mode) or self.micro_batch_counts(inputs)  # a window not yet counted
        tokens = counts["global_valid_toks"].clamp_min(1)  # a window without trained tokens trains nothing
        if self.use_teacher_server:
            teacher = ServedTeacher(**self._get_teacher_token_logprobs_from_server(inputs, start))
            result = self.loss_objective.served(student_logits, completion_ids, mask, teacher, rollout, tokens)
        else:
            teacher_logits = self._get_teacher_logits(inputs)[:, start - 1 : -1, :]
            result = self.loss_objective.local(student_logits, teacher_logits, completion_ids, mask, rollout, tokens)
        for name, value in result.metrics.items():
            self.metric_log(mode)[name].append(value.item())
        loss = self.scale_for_processes(result.loss, mode)
        return (loss, outputs) if return_outputs else loss
