"""The GKD trainer: TRL's experimental `GKDTrainer` whose loss is trl_ext's port (`trl_ext.losses.gkd.gkd_loss`).

Everything but the loss function is TRL's: the chat-messages collator (`DataCollatorForChatML`: the prompt and the
completion of each row's `messages`, the completion's tokens labelled), the batch mix of `training_step` (with
probability `lmbda` the student samples the batch's completions, else the dataset's are kept, or with `seq_kd` the
teacher samples them), the student's and the teacher's forward passes and the causal shift in `compute_loss`, the
normalization by HF's `num_items_in_batch` (the optimizer window's completion tokens, counted on the collated
batches), logging and checkpointing. `compute_loss` calls the trainer's `generalized_jsd_loss`, which here is the
port, with TRL's arguments (`beta`, temperature 1, the labels' mask, `num_items_in_batch`).

What trl_ext adds around TRL's constructor, before any model loads: the teacher defaults to
`args.teacher_model_name_or_path` (TRL's own script passes it; TRL's trainer needs `teacher_model`), a missing teacher
is an error naming the field, a dataset the collator cannot read (no `messages` nor `input_ids` column) is an error
naming its columns, the tokenizer is loaded from the student when `processing_class` is None (TRL's collator needs
it before TRL loads one), and `quantization_config` (which `trl.SFTTrainer` takes and TRL's `GKDTrainer` does not)
reaches the student's `from_pretrained` through `model_init_kwargs`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, ClassVar

from transformers import AutoTokenizer, TrainingArguments
from trl.data_utils import get_dataset_column_names
from trl.trainer.utils import get_config_model_id

from ...losses.gkd import gkd_loss
from ..core.config_conversion import trainer_config
from ..core.trl_adapter import TrainerAdapter
from .config import GKDConfig

with warnings.catch_warnings():  # TRL's experimental notice is the docs' to give (docs/algorithms/gkd.md)
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.gkd import GKDTrainer as TRLGKDTrainer

CHAT_COLUMNS = ("messages", "input_ids")
"""The columns TRL's GKD collator (`DataCollatorForChatML`) reads a row from: chat `messages` (the last message is the
completion), or pre-tokenized `input_ids` (with a `completion_mask` or a text `prompt` marking the prompt)."""


class GKDTrainer(TrainerAdapter, TRLGKDTrainer):
    """TRL's experimental `GKDTrainer` whose generalized JSD loss is `trl_ext.losses.gkd.gkd_loss` (config:
    `trl_ext.GKDConfig`).

    The constructor takes TRL's arguments, in TRL's order, and `quantization_config` last; `args` may also be TRL's
    `trl.experimental.gkd.GKDConfig` or a `TrainingArguments` (converted).
    """

    config_class: ClassVar[type[GKDConfig]] = GKDConfig
    algorithm: ClassVar[str] = "gkd"
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "gkd"]

    def __init__(
        self,
        model=None,
        teacher_model=None,
        args: GKDConfig | TrainingArguments | None = None,
        data_collator=None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        compute_metrics: Callable | None = None,
        callbacks=None,
        optimizers=(None, None),
        preprocess_logits_for_metrics: Callable | None = None,
        peft_config=None,
        formatting_func: Callable | None = None,
        quantization_config=None,
    ):
        """Build TRL's `GKDTrainer` with a `trl_ext.GKDConfig`; its loss is then the port.

        Args:
            model: The student, a path / Hub id or a model, as in TRL.
            teacher_model: The teacher, a path / Hub id or a model with the student's vocabulary size. None: the
                path `args.teacher_model_name_or_path` (loaded with `args.teacher_model_init_kwargs`).
            args: A `trl_ext.GKDConfig`, used as is. TRL's `GKDConfig` or a `TrainingArguments` is converted to one
                (`trl_ext.trainers.core.config_conversion`); None: the defaults, `output_dir="<model name>-GKD"`.
            data_collator: As in TRL; None: TRL's `DataCollatorForChatML` on `processing_class`.
            train_dataset: Rows of chat `messages` (the last message the completion) or pre-tokenized `input_ids`,
                as TRL's collator reads them (another collator reads what it reads).
            eval_dataset: Likewise; a dataset or a dict of them.
            processing_class: The student's tokenizer; None: loaded from the student (its path or its config's).
            compute_metrics: As in TRL.
            callbacks: As in TRL.
            optimizers: As in TRL.
            preprocess_logits_for_metrics: As in TRL.
            peft_config: As in TRL: the student is trained through the adapter.
            formatting_func: As in TRL.
            quantization_config: The student's quantization (e.g. `BitsAndBytesConfig`), when `model` is a path:
                passed to its `from_pretrained` as `trl.SFTTrainer` passes it.

        Raises:
            ValueError: No teacher (`teacher_model` and `args.teacher_model_name_or_path` both None); a dataset
                without a `messages` or `input_ids` column for TRL's collator; `quantization_config` given in both
                places; a field `trl_ext.GKDConfig` refuses; TRL's own errors (a teacher with another vocabulary
                size, ...).
            TypeError: `args` is another trainer's config.
        """
        owner = type(self).__name__
        args = trainer_config(owner, model, args, self.config_class, "GKD")
        if teacher_model is None:
            teacher_model = args.teacher_model_name_or_path
        if teacher_model is None:
            raise ValueError(
                f"{owner}: no teacher: pass teacher_model (a path, a Hub id or a model with the student's vocabulary) "
                "or set teacher_model_name_or_path in the config (--teacher_model_name_or_path)"
            )
        if data_collator is None:
            check_chat_datasets(owner, train_dataset, eval_dataset)
        if quantization_config is not None and isinstance(model, str):
            init_kwargs = dict(args.model_init_kwargs or {})
            if "quantization_config" in init_kwargs:
                raise ValueError(
                    f"{owner}: quantization_config is given both as an argument and in args.model_init_kwargs; give "
                    "it once"
                )
            args.model_init_kwargs = {**init_kwargs, "quantization_config": quantization_config}
        if processing_class is None and data_collator is None:
            processing_class = student_tokenizer(model, args)
        super().__init__(
            model,
            teacher_model,
            args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            compute_metrics=compute_metrics,
            callbacks=callbacks,
            optimizers=optimizers,
            preprocess_logits_for_metrics=preprocess_logits_for_metrics,
            peft_config=peft_config,
            formatting_func=formatting_func,
        )

    # TRL's `compute_loss` calls it with the shifted logits, the labels, `beta` and HF's `num_items_in_batch`.
    generalized_jsd_loss = staticmethod(gkd_loss)


def check_chat_datasets(owner: str, train_dataset: Any, eval_dataset: Any) -> None:
    """Each dataset (the train one, the eval one or each of a dict of them) has a column TRL's GKD collator reads a
    row from (`CHAT_COLUMNS`); a dataset of unknown columns (streamed) passes. Else a ValueError naming the dataset,
    its columns and what to do."""
    datasets = {"train_dataset": train_dataset}
    if isinstance(eval_dataset, dict):
        datasets.update({f"eval_dataset[{key!r}]": value for key, value in eval_dataset.items()})
    elif eval_dataset is not None:
        datasets["eval_dataset"] = eval_dataset
    for name, dataset in datasets.items():
        if dataset is None:
            continue
        columns = get_dataset_column_names(dataset)
        if columns is None or any(column in columns for column in CHAT_COLUMNS):
            continue
        found = ", ".join(map(repr, columns)) or "(none)"
        raise ValueError(
            f"{owner}: the {name} has no 'messages' or 'input_ids' column (its columns: {found}); TRL's GKD collator "
            "(DataCollatorForChatML) reads chat messages whose last message is the completion, or tokenized "
            "input_ids: make a 'messages' column (for conversational prompt / completion rows, prompt + completion), "
            "or pass a data_collator"
        )


def student_tokenizer(model: Any, args: GKDConfig):
    """The student's tokenizer, from its path (`model` a string) or from its config's model id, at the revision
    of `args.model_init_kwargs` if any."""
    source = model if isinstance(model, str) else get_config_model_id(model.config)
    revision = (args.model_init_kwargs or {}).get("revision")
    return AutoTokenizer.from_pretrained(source, revision=revision, trust_remote_code=args.trust_remote_code)
