"""Continued pretraining (Trinity-RFT's CPT, schema `cpt`): the SFT trainer on plain text, the loss on every token.

    from trl_ext import CPTConfig, CPTTrainer
    trainer = CPTTrainer(model, args=CPTConfig(output_dir="out"), train_dataset=Dataset.from_dict({"text": texts}))

With x_1 … x_n the tokens of one row of the `dataset_text_field` column (default `text`), the loss is the negative
log-likelihood of every token that has a context,

    L = −Σ_{t=2..n} log π(x_t | x_<t),

normalized over the optimizer window as `trl_ext.SFTTrainer` normalizes it (`loss_agg_mode`, default `token-mean`:
divided by the window's trained tokens, on every process). Trinity-RFT 0.6.0's `CPTFormatter` tokenizes the
plain-text column and marks `prompt_length=1`, so its SFT loss trains the same tokens. TRL's `trl.SFTTrainer` trains
such rows as a "language modeling" dataset (`dataset_text_field`), appending the tokenizer's EOS to each text, which
is then trained too (Trinity-RFT does not append one).

A family of its own (`trl_ext.families`: `cpt`, schema `cpt`), not a second algorithm of the `sft` family: a family's
record states the data it trains on, which picks the script of `trl-ext train` and its dataset check, and a family
with hand-written classes trains one algorithm (its classes say which algorithm trained, in the model card and the
run summary). The classes here are thin subclasses of SFT's: the loss, the window normalization and the metrics are
`SFTTrainer`'s; what CPT adds is the dataset check, narrowed to plain text and made before the model loads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from transformers import TrainingArguments
from trl.data_utils import get_dataset_column_names

from ..core.config_conversion import trainer_config
from .config import SFTConfig
from .trainer import SFTTrainer

NOT_PLAIN_TEXT = ("prompt", "completion", "messages", "conversations")
"""Columns that make `trl.SFTTrainer` read a row as a prompt-completion pair or as chat messages (the loss then on
the completion or the assistant turns only, or on a chat-template rendering): refused in a CPT dataset."""


@dataclass
class CPTConfig(SFTConfig):
    """Configuration of [`trl_ext.CPTTrainer`]: continued pretraining, the SFT loss on every token of plain text.

    Every field is `trl_ext.SFTConfig`'s (so `trl.SFTConfig`'s, plus `sft_loss_fn`, `cutoff_prob` and
    `loss_agg_mode`); `dataset_text_field` (default `text`) names the column of plain text. Checked when the config
    is built, besides `SFTConfig`'s checks: `assistant_only_loss` and `completion_only_loss` are not True (plain
    text has no assistant turns and no completion: CPT trains every token).
    """

    algorithm: ClassVar[str] = "cpt"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for name in ("assistant_only_loss", "completion_only_loss"):
            if getattr(self, name):
                raise ValueError(
                    f"{owner}: {name}=True restricts the loss to part of each row, but continued pretraining trains "
                    f"every token of the plain text in dataset_text_field ({self.dataset_text_field!r}); leave {name} "
                    "unset, or train prompt-completion / chat data with trl_ext.SFTConfig"
                )
        super().__post_init__()


class CPTTrainer(SFTTrainer):
    """`trl_ext.SFTTrainer` on plain text (config: `trl_ext.CPTConfig`): the loss on every token of the
    `dataset_text_field` column.

    The constructor takes `trl_ext.SFTTrainer`'s arguments (a `trl.SFTConfig` or a `TrainingArguments` is converted
    to a `CPTConfig`). Before the model loads, each dataset (`train_dataset`, every `eval_dataset`) must have the
    `dataset_text_field` column and none of the columns that make TRL read a row as a prompt-completion pair or as
    chat messages (`prompt`, `completion`, `messages`, `conversations`); else a ValueError naming
    `dataset_text_field`, the dataset and its columns. With a `formatting_func` (which makes the text of each row)
    any columns go, and with `dataset_kwargs={'skip_prepare_dataset': True}` SFT's check of tokenized rows applies.
    """

    config_class: ClassVar[type[SFTConfig]] = CPTConfig
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "cpt"]

    def __init__(
        self,
        model,
        args: SFTConfig | TrainingArguments | None = None,
        data_collator=None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        compute_loss_func: Callable | None = None,
        compute_metrics: Callable | None = None,
        callbacks=None,
        optimizers=(None, None),
        optimizer_cls_and_kwargs=None,
        preprocess_logits_for_metrics: Callable | None = None,
        quantization_config=None,
        peft_config=None,
        formatting_func: Callable[[dict], str] | None = None,
    ):
        """As `trl_ext.SFTTrainer.__init__` (the same arguments, each passed on), with the plain-text check first.
        `args=None` names the default `output_dir` `<model name>-CPT`.

        Raises:
            ValueError: A dataset without the `dataset_text_field` column or with a prompt-completion / chat column
                (before the model loads); every error of `trl_ext.SFTTrainer`.
            TypeError: As `trl_ext.SFTTrainer` (a config of another trainer, `trl_ext.SFTConfig` included).
        """
        owner = type(self).__name__
        args = trainer_config(owner, model, args, self.config_class, "CPT")
        datasets = {"train_dataset": train_dataset}
        if isinstance(eval_dataset, dict):
            datasets.update({f"eval_dataset[{key!r}]": value for key, value in eval_dataset.items()})
        elif eval_dataset is not None:
            datasets["eval_dataset"] = eval_dataset
        skip = bool((args.dataset_kwargs or {}).get("skip_prepare_dataset", False))
        if formatting_func is None and not skip:
            for name, dataset in datasets.items():
                if dataset is not None:
                    check_plain_text(owner, name, get_dataset_column_names(dataset), args.dataset_text_field)
        super().__init__(
            model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            compute_loss_func=compute_loss_func,
            compute_metrics=compute_metrics,
            callbacks=callbacks,
            optimizers=optimizers,
            optimizer_cls_and_kwargs=optimizer_cls_and_kwargs,
            preprocess_logits_for_metrics=preprocess_logits_for_metrics,
            quantization_config=quantization_config,
            peft_config=peft_config,
            formatting_func=formatting_func,
        )
        self.algorithm = "cpt"


def check_plain_text(owner: str, name: str, columns: list[str] | None, text_field: str) -> None:
    """`columns` (a dataset's; None: a streamed dataset of unknown columns, which passes) hold the plain-text column
    `text_field` and no prompt-completion or chat column; else a ValueError naming `dataset_text_field`, the dataset
    `name` and its columns."""
    if columns is None:
        return
    found = ", ".join(map(repr, columns)) or "(none)"
    if text_field not in columns:
        raise ValueError(
            f"{owner}: the {name} has no {text_field!r} column (dataset_text_field={text_field!r}; its columns: "
            f"{found}); continued pretraining trains every token of a plain-text column: set dataset_text_field to "
            "the dataset's text column, or rename that column"
        )
    other = [c for c in NOT_PLAIN_TEXT if c in columns]
    if other:
        raise ValueError(
            f"{owner}: the {name} has column(s) {', '.join(map(repr, other))} besides dataset_text_field="
            f"{text_field!r} (its columns: {found}), with which TRL reads a row as a prompt-completion pair or as "
            "chat messages, not as plain text; remove them for continued pretraining, or train that data with "
            "trl_ext.SFTConfig / SFTTrainer"
        )
