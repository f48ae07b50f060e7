"""The SFT trainer: `trl.SFTTrainer` with Trinity-RFT's supervised losses (`sft`, `sft_is`, `sft_phi`), normalized
over the optimizer window.

Everything but the loss step is TRL's: dataset preparation and tokenization (language modeling, conversational,
prompt-completion, pre-tokenized), `completion_only_loss` and `assistant_only_loss` (folded into the labels as -100),
packing and padding-free batches, PEFT, the chat template options, logging and checkpointing. `compute_loss` runs
the model once through TRL's fused LM head (per-token log-probs, entropies and top-1 flags, never the `[B, T, V]`
logits) and computes the config's `sft_loss_fn` on the trained tokens, the positions whose next-token label is not
-100 (`outputs.label_mask`).

Window normalization. When the HF training loop starts an optimizer window it hands the window's micro-batches to
`_get_num_items_in_batch` (`CountWindowInLoop`), which counts, per micro-batch, the trained tokens (labels after the
causal shift that are not -100: exactly the positions of `outputs.label_mask`, which the collator's labels already
restrict to the completion / assistant tokens and cut at packed-sequence boundaries) and the rows, sums them over
the micro-batches and processes (one all-reduce), and every micro-batch's loss is its share of the window's loss:
`token-mean` divides by the window's tokens, the `seq-mean-*` modes by its rows, `seq-mean-token-sum-norm` by rows ×
`max_length`. So the update does not depend on how the window is split into micro-batches and processes. TRL's own
`nll` / `dft` losses divide by HF's `num_items_in_batch`, the same token count, so `sft` and `sft_is` make TRL's
update (with `average_tokens_across_devices=True`, TRL's default; trl_ext always normalizes over every process).

Metrics, once per optimizer step: the loss's own (`sft_loss`, `sft_is_loss` or `sft_phi_loss`: the window's loss),
`entropy` and `mean_token_accuracy` (means over the window's trained tokens; TRL logs the mean of its micro-batches'
means, the same value with one micro-batch per step), `num_tokens` (input tokens seen, as TRL counts them) and the
MoE router's `aux_loss`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import trl
from transformers import TrainingArguments
from trl.data_utils import get_dataset_column_names

from ...components import MEAN, SHARE
from ...losses import aggregate_loss
from ..core.config_conversion import trainer_config
from ..core.trl_adapter import CountWindowInLoop
from .config import SFTConfig

_IGNORE_INDEX = -100


class SFTTrainer(CountWindowInLoop, trl.SFTTrainer):
    """A `trl.SFTTrainer` whose loss is the config's `sft_loss_fn` (`sft`, `sft_is` or `sft_phi`, with `cutoff_prob`
    and `loss_agg_mode`), normalized over the optimizer window (config: `trl_ext.SFTConfig`).

    The constructor takes `trl.SFTTrainer`'s arguments (TRL's `trl.SFTConfig`, or a `TrainingArguments`, is converted
    to a `trl_ext.SFTConfig`). Refused at construction, each with its reason: a config of another trainer (TypeError),
    `compute_loss_func` (the loss is `sft_loss_fn`), a dataset without the columns TRL prepares (checked before the
    model loads), and context / sequence parallelism (the window counts are taken on whole sequences, before those
    shard them).
    """

    config_class: ClassVar[type[SFTConfig]] = SFTConfig
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "sft"]
    #: the metrics the trainer adds: TRL's entropy and token accuracy (shares of the window's token means) and the
    #: router's aux_loss (a mean over micro-batches, as TRL logs it)
    trainer_metrics: ClassVar[dict[str, str]] = {"entropy": SHARE, "mean_token_accuracy": SHARE, "aux_loss": MEAN}

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
        """Check the arguments before the model loads, then build the `trl.SFTTrainer` and the loss.

        The arguments are `trl.SFTTrainer`'s (TRL's documentation describes each); below is what trl_ext adds.

        Args:
            model (str | PreTrainedModel): The model, as in TRL: a path / Hub id or a model.
            args: A `trl_ext.SFTConfig`, used as is. TRL's `trl.SFTConfig` or a `transformers.TrainingArguments` is
                converted to one (as `trl.SFTTrainer` converts a `TrainingArguments`; see
                `trl_ext.trainers.core.config_conversion`): its fields that differ from TRL's defaults are carried over
                (TRL's `loss_type="dft"` selects `sft_loss_fn="sft_is"`), the others take `trl_ext.SFTConfig`'s
                defaults. None: the defaults, with `output_dir="<model name>-SFT"`.
            data_collator (DataCollator | None): As in TRL.
            train_dataset (Dataset | IterableDataset | None): As in TRL (language modeling, prompt-completion,
                conversational or tokenized rows); its columns are checked before the model loads.
            eval_dataset (Dataset | IterableDataset | dict[str, Dataset] | None): As in TRL (a dataset or a dict of
                them), checked like `train_dataset`.
            processing_class (PreTrainedTokenizerBase | ProcessorMixin | None): The tokenizer or processor, as in TRL.
            compute_loss_func: Not supported: the loss is `args.sft_loss_fn` (None only).
            compute_metrics: As in TRL.
            callbacks (list[TrainerCallback] | None): As in TRL.
            optimizers (tuple[Optimizer | None, LambdaLR | None]): As in TRL.
            optimizer_cls_and_kwargs (tuple[type[Optimizer], dict] | None): As in TRL.
            preprocess_logits_for_metrics: As in TRL.
            quantization_config (BitsAndBytesConfig | None): As in TRL.
            peft_config (PeftConfig | None): As in TRL (LoRA, ...).
            formatting_func: As in TRL.

        Raises:
            TypeError: `args` is a config of another trainer (another trl_ext or TRL trainer's) or not a
                `TrainingArguments`.
            ValueError: A converted field `trl_ext.SFTConfig` refuses (the message names it); `compute_loss_func`; a
                dataset without the columns TRL prepares; context or sequence parallelism.
        """
        owner = type(self).__name__
        args = trainer_config(owner, model, args, self.config_class, "SFT")
        if compute_loss_func is not None:
            raise ValueError(
                f"{owner}: compute_loss_func is not supported: the loss is the config's sft_loss_fn "
                f"({args.sft_loss_fn!r}, normalized over the optimizer window); choose it there, or subclass "
                f"{owner} and override compute_loss"
            )
        # before the model loads: a dataset TRL cannot prepare would otherwise fail after it
        datasets = {"train_dataset": train_dataset}
        if isinstance(eval_dataset, dict):
            datasets.update({f"eval_dataset[{key!r}]": value for key, value in eval_dataset.items()})
        elif eval_dataset is not None:
            datasets["eval_dataset"] = eval_dataset
        for name, dataset in datasets.items():
            if dataset is not None:
                check_sft_columns(owner, name, dataset, args, formatting_func, data_collator)

        super().__init__(
            model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            compute_metrics=compute_metrics,
            callbacks=callbacks,
            optimizers=optimizers,
            optimizer_cls_and_kwargs=optimizer_cls_and_kwargs,
            preprocess_logits_for_metrics=preprocess_logits_for_metrics,
            quantization_config=quantization_config,
            peft_config=peft_config,
            formatting_func=formatting_func,
        )
        parallelism = getattr(self.accelerator, "parallelism_config", None)
        for kind in ("cp", "sp"):
            if parallelism is not None and getattr(parallelism, f"{kind}_enabled", False):
                what = "context" if kind == "cp" else "sequence"
                raise ValueError(
                    f"{owner}: {what} parallelism ({kind}_size={getattr(parallelism, f'{kind}_size', '?')}) is not "
                    f"supported: {what} parallelism shards each sequence over processes after the optimizer window's "
                    "token counts are taken on the whole sequences, so the window normalization would be off by the "
                    f"shard count; train with {kind}_size=1 (or use trl.SFTTrainer)"
                )
        self.algorithm = "sft"
        components = args.components.for_trainer()
        self.policy_loss_fn, self.kl_fn = components.policy_loss, components.kl_fn

    # ---- optimizer-window normalization ----------------------------------------------------------------------

    def micro_batch_counts(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The trained tokens (the labels after the causal shift, or the collator's `shift_labels`, that are not
        -100: the positions of the fused head's `label_mask`), the rows, and the input tokens (TRL's `num_tokens`:
        the attention mask's ones, or the padding-free row's length) of a micro-batch. No host sync."""
        labels = _shifted_labels(type(self).__name__, batch)
        rows = torch.full((), float(labels.size(0)), device=labels.device)  # filled on the device: no host sync
        if "attention_mask" in batch:
            inputs = batch["attention_mask"].sum().float()
        else:  # padding-free: one row of concatenated sequences, whose length TRL counts
            ids = batch["position_ids"] if "position_ids" in batch else batch["input_ids"]
            inputs = torch.full((), float(ids.size(1)), device=ids.device)
        return {
            "global_valid_toks": (labels != _IGNORE_INDEX).sum().float(),
            "global_valid_seqs": rows,
            "input_tokens": inputs,
        }

    def _window_counts(self, inputs: dict[str, Any], mode: str) -> dict[str, torch.Tensor]:
        """The counts the micro-batch's loss is normalized by (`loss_counts`: the window's in training, its own in
        evaluation, or outside the training loop), with `seq-mean-token-sum-norm`'s normalizer rows × max_length."""
        window = self.loss_counts(inputs, mode) if mode != "train" or self._window else {}
        window = window or self.micro_batch_counts(inputs)
        window.pop("input_tokens", None)
        if self.policy_loss_fn.loss_agg_mode == "seq-mean-token-sum-norm":
            window["normalizer"] = window["global_valid_seqs"] * self.args.max_length
        return window

    # ---- the loss --------------------------------------------------------------------------------------------

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The micro-batch's share of the window's `sft_loss_fn` loss, from one forward through the fused LM head.
        `num_items_in_batch` (HF's token count) is not used: the window's counts are (`_get_num_items_in_batch`)."""
        mode = "train" if self.model.training else "eval"
        inputs["use_cache"] = False
        if self.aux_loss_enabled:
            inputs["output_router_logits"] = True
        outputs = model(**inputs, fused_lm_head=True)
        # prompt-learning PEFT prepends virtual tokens to every row: keep the real tokens' positions, as without it
        width = _shifted_labels(type(self).__name__, inputs).size(1)
        logprob = outputs.log_probs[:, -width:]
        mask = outputs.label_mask[:, -width:].bool()
        window = self._window_counts(inputs, mode)
        loss, metrics = self.policy_loss_fn(logprob=logprob, action_mask=mask, **window)
        with torch.no_grad():  # TRL's metrics, as shares of the window's token means
            tokens = {"global_valid_toks": window["global_valid_toks"]}
            metrics["entropy"] = aggregate_loss(outputs.entropy[:, -width:].detach(), mask, **tokens)
            correct = outputs.is_top1[:, -width:].detach().to(logprob.dtype)
            metrics["mean_token_accuracy"] = aggregate_loss(correct, mask, **tokens)
        loss, _ = self.window_loss(loss, metrics, mode, outputs.aux_loss if self.aux_loss_enabled else None)
        self.log_trained_tokens(mode)

        if return_outputs:
            warnings.warn(
                "`return_outputs=True`, and the logits it passes to `compute_metrics` and "
                "`preprocess_logits_for_metrics`, recompute the logits with an extra forward pass (the fused LM head "
                "does not build them), as trl.SFTTrainer does",
                FutureWarning,
                stacklevel=2,
            )
            with torch.no_grad():
                outputs = model(**{k: v for k, v in inputs.items() if k != "labels"})
        return (loss, outputs) if return_outputs else loss


def _shifted_labels(owner: str, batch: dict[str, Any]) -> torch.Tensor:
    """The next-token labels of a batch: the collator's `shift_labels`, or `labels` without their first position."""
    if batch.get("shift_labels") is not None:
        return batch["shift_labels"]
    if batch.get("labels") is None:
        raise ValueError(
            f"{owner}: the batch has no `labels` (keys: {', '.join(sorted(batch))}); the SFT loss is computed on the "
            "labels that are not -100, which TRL's collators build. A custom data_collator must return them"
        )
    return batch["labels"][..., 1:]


def check_sft_columns(owner: str, name: str, dataset: Any, args: SFTConfig, formatting_func, data_collator) -> None:
    """`dataset` has the columns `trl.SFTTrainer` prepares: the `dataset_text_field` (default `text`), `messages`
    (or TRL's from/value `conversations`), `prompt` + `completion`, or pre-tokenized `input_ids`. With a
    `formatting_func` (which makes the text) anything goes; with `skip_prepare_dataset` the dataset goes to the
    collator as is, so TRL's collator needs `input_ids` (a custom collator decides for itself)."""
    columns = get_dataset_column_names(dataset)
    skip = bool((args.dataset_kwargs or {}).get("skip_prepare_dataset", False))
    vision = "image" in columns or "images" in columns  # TRL prepares these on the fly, from the same columns
    if skip and not vision:
        if data_collator is not None or "input_ids" in columns:
            return
        raise ValueError(
            f"{owner}: the {name} has columns {', '.join(map(repr, columns)) or '(none)'}, but "
            "dataset_kwargs={'skip_prepare_dataset': True} hands it to the collator untokenized, and TRL's collator "
            "needs 'input_ids' (and optionally 'labels'); tokenize it first, or drop skip_prepare_dataset"
        )
    if formatting_func is not None and not skip:
        return
    found = set(columns)
    if found & {args.dataset_text_field, "messages", "conversations", "input_ids"} or {"prompt", "completion"} <= found:
        return
    raise ValueError(
        f"{owner}: the {name} has columns {', '.join(map(repr, columns)) or '(none)'}, but SFT needs one of: "
        f"{args.dataset_text_field!r} (language modeling text, the dataset_text_field), 'messages' (conversational), "
        "'prompt' and 'completion' (prompt-completion), or pre-tokenized 'input_ids'; rename a column, set "
        "dataset_text_field, or pass a formatting_func"
    )
