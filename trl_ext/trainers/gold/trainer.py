"""The GOLD trainer: TRL's experimental `GOLDTrainer` whose losses are trl_ext's ports (`trl_ext.losses.gold`).

Everything but the two losses is TRL's: the dataset preparation that keeps each row's prompt and completion text and
the completion's byte offsets (`_prepare_dataset`), the collator (`DataCollatorForChatML`), the optimizer window's
buffer (`_fill_buffer`: with probability `lmbda` a micro-batch's completions are the student's samples, else the
dataset's), the teacher's re-tokenization of the text for cross-tokenizer ULD (`build_teacher_inputs_from_texts`),
the student's and the teacher's forward passes and the causal shift in `compute_loss`, the normalization by HF's
`num_items_in_batch`, vLLM generation, logging (`on_policy_loss`, `off_policy_loss`, the hybrid's `matched_loss` /
`unmatched_loss`) and checkpointing. TRL's `compute_loss` reaches the loss through two names, both replaced here:

* `generalized_jsd_loss` (a static method, the loss with one tokenizer): `trl_ext.losses.gold.generalized_jsd_loss`;
* `uld_loss_fn` (the attribute holding the ULD loss, with `use_uld_loss=True`): a `trl_ext.losses.gold.ULDLoss` built
  from the config's ULD fields and the two tokenizers' vocabularies, in place of TRL's `ULDLoss`.

What trl_ext adds around TRL's constructor, before any model loads: the teacher defaults to
`args.teacher_model_name_or_path` (TRL's own script passes it; TRL's trainer needs `teacher_model`), a missing teacher
is an error naming the field, a dataset TRL's preparation cannot read (no `prompt` and `completion`, `messages`,
`input_ids` nor `dataset_text_field` column: TRL would train on empty text) is an error naming its columns, and
`quantization_config` (which `trl.SFTTrainer` takes and TRL's `GOLDTrainer` does not) reaches the student's
`from_pretrained` through `model_init_kwargs`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, ClassVar

from transformers import TrainingArguments
from trl.data_utils import get_dataset_column_names

from ...losses.gold import ULD_SETTINGS, ULDLoss, generalized_jsd_loss
from ..core.config_conversion import trainer_config
from ..core.trl_adapter import TrainerAdapter
from .config import GOLDConfig

with warnings.catch_warnings():  # TRL's experimental notice is the docs' to give (docs/algorithms/gold.md)
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.gold import GOLDTrainer as TRLGOLDTrainer


class GOLDTrainer(TrainerAdapter, TRLGOLDTrainer):
    """TRL's experimental `GOLDTrainer` whose generalized JSD and ULD losses are trl_ext's ports
    (`trl_ext.losses.gold`; config: `trl_ext.GOLDConfig`).

    The constructor takes TRL's arguments, in TRL's order, and `quantization_config` last; `args` may also be TRL's
    `trl.experimental.gold.GOLDConfig` or a `TrainingArguments` (converted).
    """

    config_class: ClassVar[type[GOLDConfig]] = GOLDConfig
    algorithm: ClassVar[str] = "gold"
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "gold"]

    def __init__(
        self,
        model=None,
        teacher_model=None,
        args: GOLDConfig | TrainingArguments | None = None,
        data_collator=None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        compute_metrics: Callable | None = None,
        callbacks=None,
        optimizers=(None, None),
        preprocess_logits_for_metrics: Callable | None = None,
        peft_config=None,
        quantization_config=None,
    ):
        """Build TRL's `GOLDTrainer` with a `trl_ext.GOLDConfig`; its losses are then the ports.

        Args:
            model: The student, a path / Hub id or a model, as in TRL.
            teacher_model: The teacher, a path / Hub id or a model. None: the path `args.teacher_model_name_or_path`
                (loaded with `args.teacher_model_init_kwargs`). With `args.use_uld_loss=False` it must share the
                student's tokenizer (TRL resizes its embeddings to the student's vocabulary).
            args: A `trl_ext.GOLDConfig`, used as is. TRL's `GOLDConfig` or a `TrainingArguments` is converted to
                one (`trl_ext.trainers.core.config_conversion`); None: the defaults, `output_dir="<model name>-GOLD"`.
            data_collator: As in TRL; None: TRL's `DataCollatorForChatML` on the student's tokenizer.
            train_dataset: Prompt-completion rows (plain or conversational), chat `messages` (the last assistant
                turn the completion), plain text (`dataset_text_field`, all of it the completion) or pre-tokenized
                `input_ids`, as TRL prepares them.
            eval_dataset: Likewise; a dataset or a dict of them (evaluated off-policy, on its completions).
            processing_class: The student's tokenizer (or processor); None: loaded from the student, as in TRL.
            compute_metrics: As in TRL.
            callbacks: As in TRL.
            optimizers: As in TRL.
            preprocess_logits_for_metrics: As in TRL.
            peft_config: As in TRL: the student is trained through the adapter.
            quantization_config: The student's quantization (e.g. `BitsAndBytesConfig`), when `model` is a path:
                passed to its `from_pretrained` as `trl.SFTTrainer` passes it.

        Raises:
            ValueError: No teacher (`teacher_model` and `args.teacher_model_name_or_path` both None); a dataset
                without a column TRL's preparation reads; `quantization_config` given in both places; a field
                `trl_ext.GOLDConfig` refuses; TRL's own errors.
            TypeError: `args` is another trainer's config.
        """
        owner = type(self).__name__
        args = trainer_config(owner, model, args, self.config_class, "GOLD")
        if teacher_model is None:
            teacher_model = args.teacher_model_name_or_path
        if teacher_model is None:
            raise ValueError(
                f"{owner}: no teacher: pass teacher_model (a path, a Hub id or a model) or set "
                "teacher_model_name_or_path in the config (--teacher_model_name_or_path)"
            )
        if data_collator is None:
            check_text_datasets(owner, train_dataset, eval_dataset, args.dataset_text_field)
        if quantization_config is not None and isinstance(model, str):
            init_kwargs = dict(args.model_init_kwargs or {})
            if "quantization_config" in init_kwargs:
                raise ValueError(
                    f"{owner}: quantization_config is given both as an argument and in args.model_init_kwargs; give "
                    "it once"
                )
            args.model_init_kwargs = {**init_kwargs, "quantization_config": quantization_config}
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
        )
        if self.uld_loss_fn is not None:
            self.uld_loss_fn = self.build_uld_loss(args)

    # TRL's `compute_loss` calls it with the shifted logits, the labels, `beta`, `temperature` and HF's
    # `num_items_in_batch` (one tokenizer); TRL's own ULD loss calls TRL's, which the port replaces as a whole.
    generalized_jsd_loss = staticmethod(generalized_jsd_loss)

    def build_uld_loss(self, args: GOLDConfig) -> ULDLoss:
        """The port of TRL's `ULDLoss` from the config's ULD fields, with the two tokenizers' vocabularies for the
        hybrid form (the student's tokenizer, or its processor's; the teacher's, which TRL loaded)."""
        vocabularies = {}
        if args.uld_use_hybrid_loss:
            student_tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
            vocabularies = {
                "student_vocab": student_tokenizer.get_vocab(),
                "teacher_vocab": self.teacher_tokenizer.get_vocab(),
            }
        return ULDLoss(**{name: getattr(args, name) for name in ULD_SETTINGS}, **vocabularies)


def check_text_datasets(owner: str, train_dataset: Any, eval_dataset: Any, text_field: str) -> None:
    """Each dataset (the train one, the eval one or each of a dict of them) has columns TRL's GOLD preparation reads a
    row from: `prompt` and `completion`, `messages`, `input_ids`, `text_field` or `images` (a vision dataset); a
    dataset of unknown columns (streamed) passes. Else a ValueError naming the dataset, its columns and what to do
    (TRL reads a missing text column as empty text and trains on nothing)."""
    datasets = {"train_dataset": train_dataset}
    if isinstance(eval_dataset, dict):
        datasets.update({f"eval_dataset[{key!r}]": value for key, value in eval_dataset.items()})
    elif eval_dataset is not None:
        datasets["eval_dataset"] = eval_dataset
    for name, dataset in datasets.items():
        if dataset is None:
            continue
        columns = get_dataset_column_names(dataset)
        if columns is None:
            continue
        readable = {"prompt", "completion"} <= set(columns) or any(
            column in columns for column in ("messages", "conversations", "input_ids", text_field, "image", "images")
        )
        if readable:
            continue
        found = ", ".join(map(repr, columns)) or "(none)"
        raise ValueError(
            f"{owner}: the {name} has no column TRL's GOLD preparation reads (its columns: {found}); it needs "
            f"'prompt' and 'completion', chat 'messages', tokenized 'input_ids', or plain text in "
            f"dataset_text_field={text_field!r}"
        )
