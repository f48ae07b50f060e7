"""The TPO trainer: TRL's experimental `TPOTrainer` with trl_ext's TPO loss, normalized over the optimizer window.

Everything but the loss step is TRL's: the triple-preference dataset (a `chosen`, a `rejected` and a `reference`
completion per row, the prompt explicit or their common beginning), its tokenization, the collator (rows [all
chosen; all rejected; all reference], the reference rows left out when `tpo_alpha` is 0), logging, checkpointing.
`_compute_loss` (TRL's hook for the loss) runs the policy, takes its per-token log-probs and entropies with TRL's
`selective_log_softmax_and_entropy`, lays each triple out as the loss reads it (rows chosen, rejected, reference, with
`expert_mask` marking the reference rows) and computes

    loss = mean over the window's pairs of ℓ(loss_type)  +  tpo_alpha · (NLL of the reference completions' tokens)

with `trl_ext.losses.tpo.TPOLoss` (the formulas and papers are there). Both terms are normalized over the optimizer
window: its rows, reference rows and reference tokens, summed over every accumulation step and process, are counted
when the window starts (HF's per-window hook, `_get_num_items_in_batch`), so the update does not depend on how the
window is split into micro-batches and processes. TRL averages each micro-batch instead; the two agree when every
micro-batch of a window holds the same number of triples and of reference tokens, e.g. with
gradient_accumulation_steps=1 on one process.

Metrics: the loss's `chosen_reward`, `rejected_reward`, `accuracy_mean` (TRL's `rewards/chosen`, `rewards/rejected`,
`rewards/accuracies`), `preference_loss`, `nll_loss`, `tpo_loss`, and TRL's `rewards/margins`, `logps/chosen`,
`logps/rejected`, `logits/chosen`, `logits/rejected`, `mean_token_accuracy`, `entropy`, `num_tokens`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from transformers import TrainingArguments
from trl.experimental.tpo import TPOTrainer as TRLTPOTrainer
from trl.trainer.utils import selective_log_softmax_and_entropy

from ...components import MEAN
from ..core.config_conversion import trainer_config
from ..core.trl_adapter import CountWindowInLoop
from .config import TPOConfig

TRIPLE_COLUMNS = ("chosen", "rejected", "reference")
"""The columns TRL's `TPOTrainer` reads from a row (besides the optional `prompt`)."""

REFERENCE_BRANCH = 2
"""The reference rows' block in TRL's collated batch, [chosen; rejected; reference]."""


class TPOTrainer(CountWindowInLoop, TRLTPOTrainer):
    """A `trl.experimental.tpo.TPOTrainer` whose loss is trl_ext's TPO loss (`TPOLoss`: every loss option of TRL's
    `TPOConfig`), normalized over the optimizer window (config: `trl_ext.TPOConfig`).

    The constructor takes TRL's `TPOTrainer` arguments, plus `quantization_config` (as `trl.DPOTrainer`); `args` may
    also be TRL's `TPOConfig` (converted).
    """

    algorithm: ClassVar[str] = "tpo"
    config_class: ClassVar[type[TPOConfig]] = TPOConfig
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "tpo"]
    #: TRL's TPO metrics that the trainer adds (means over the micro-batch)
    trainer_metrics: ClassVar[dict[str, str]] = dict.fromkeys(
        (
            "rewards/margins",
            "logps/chosen",
            "logps/rejected",
            "logits/chosen",
            "logits/rejected",
            "mean_token_accuracy",
            "entropy",
        ),
        MEAN,
    )

    def __init__(
        self,
        model,
        args: TPOConfig | TrainingArguments | None = None,
        data_collator=None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        compute_metrics=None,
        callbacks=None,
        optimizers=(None, None),
        peft_config=None,
        quantization_config=None,
    ):
        """Build TRL's `TPOTrainer` with trl_ext's TPO config, and the loss from it.

        The arguments are TRL's `TPOTrainer`'s (TRL's documentation describes each); below is what trl_ext adds.

        Args:
            model (str | PreTrainedModel | PeftModel): The policy, as in TRL: a path / Hub id or a model.
            args: A `trl_ext.TPOConfig`, used as is. TRL's `TPOConfig` or a `transformers.TrainingArguments` is
                converted to one (`trl_ext.trainers.core.config_conversion`): its fields that differ from TRL's
                defaults are carried over. None: the defaults, with `output_dir="<model name>-TPO"`.
            train_dataset: Triple-preference rows: `chosen`, `rejected` and `reference` (the gold completion), and
                an optional `prompt` (without it, the common beginning of the three). Checked before the model loads.
            eval_dataset: The same, or a dict of such datasets.
            quantization_config (BitsAndBytesConfig | None): Quantization of a model loaded from `model` (a path /
                Hub id), set into `args.model_init_kwargs` (QLoRA with `peft_config`), as `trl.DPOTrainer` takes it.

        The other arguments (`data_collator`, `processing_class`, `compute_metrics`, `callbacks`, `optimizers`,
        `peft_config`) are TRL's.

        Raises:
            TypeError: `args` is a config of another trainer (another trl_ext or TRL trainer's) or not a
                `TrainingArguments`.
            ValueError: A dataset without the `chosen`, `rejected` and `reference` columns (before the model loads),
                `quantization_config` with an instantiated model or also in `args.model_init_kwargs`, a converted
                field `trl_ext.TPOConfig` refuses (the message names it), and TRL's own errors.
        """
        owner = type(self).__name__
        args = trainer_config(owner, model, args, self.config_class, "TPO")
        datasets = {"train_dataset": train_dataset}
        if isinstance(eval_dataset, dict):
            datasets.update({f"eval_dataset[{key!r}]": value for key, value in eval_dataset.items()})
        elif eval_dataset is not None:
            datasets["eval_dataset"] = eval_dataset
        for name, dataset in datasets.items():
            check_triple_columns(owner, name, getattr(dataset, "column_names", None))
        if quantization_config is not None:
            args.model_init_kwargs = _with_quantization(owner, model, args.model_init_kwargs, quantization_config)
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
            peft_config=peft_config,
        )
        self.policy_loss_fn = args.components.for_trainer().policy_loss

    @property
    def branches(self) -> int:
        """The row blocks of TRL's collated batch: chosen, rejected and reference, or without the reference when
        `tpo_alpha` is 0 (TRL's collator then leaves it out)."""
        return 3 if self.tpo_alpha != 0.0 else 2

    # ---- optimizer-window normalization ----------------------------------------------------------------------

    def micro_batch_counts(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Rows, reference rows and reference completion tokens (the loss's window counts), and input tokens (TRL's
        `num_tokens`) of a micro-batch of TRL's collator."""
        mask = batch["completion_mask"][..., 1:]
        rows = mask.size(0)
        reference = mask[REFERENCE_BRANCH * rows // 3 :] if self.branches == 3 else mask[:0]
        return {  # filled on the device: no host sync
            "global_valid_seqs": torch.full((), float(rows), device=mask.device),
            "expert_valid_seqs": torch.full((), float(reference.size(0)), device=mask.device),
            "expert_valid_toks": reference.sum().float(),
            "input_tokens": batch["attention_mask"].sum().float(),
        }

    def metric_kinds(self) -> dict[str, str]:
        """How each logged metric combines over the window: the loss's, and TRL's that the trainer adds."""
        return {**self.policy_loss_fn.metrics, **self.trainer_metrics}

    # ---- the loss --------------------------------------------------------------------------------------------

    def _compute_loss(self, model, inputs, return_outputs):
        mode = "train" if self.model.training else "eval"
        model_kwargs = {k: v for k, v in inputs.items() if k != "completion_mask"}
        model_kwargs["use_cache"] = False
        outputs = model(**model_kwargs)
        logits = outputs.logits[..., :-1, :]
        labels = inputs["input_ids"][..., 1:]
        mask = inputs["completion_mask"][..., 1:]
        logps, entropy = selective_log_softmax_and_entropy(logits, labels, entropy_requires_grad=False, row_mask=mask)
        mask = mask.bool()

        branches = self.branches
        rows = logps.size(0) // branches
        # TRL's blocks [chosen; rejected; reference] as triples of consecutive rows, the reference rows flagged
        order = torch.arange(branches * rows, device=logps.device).view(branches, rows).t().reshape(-1)
        reference = (torch.arange(branches, device=logps.device) == REFERENCE_BRANCH).repeat(rows)
        window = self.loss_counts(inputs, mode)
        window.pop("input_tokens", None)
        loss, metrics = self.policy_loss_fn(
            logprob=logps[order], action_mask=mask[order], expert_mask=reference, **window
        )
        metrics.update(self._trl_metrics(logps, logits, labels, mask, entropy, rows))
        loss, _ = self.window_loss(loss, metrics, mode)
        self.log_trained_tokens(mode)
        return (loss, outputs) if return_outputs else loss

    def _trl_metrics(self, logps, logits, labels, mask, entropy, rows: int) -> dict[str, torch.Tensor]:
        """TRL's metrics that the loss does not report, over this micro-batch (0 where they average nothing)."""
        with torch.no_grad():
            scores = self.policy_loss_fn.sequence_logps(logps.detach(), mask)  # S, or S / n for ipo and tpo-l
            chosen, rejected = slice(0, rows), slice(rows, 2 * rows)
            chosen_logps, rejected_logps = scores[chosen], scores[rejected]
            mean_logits = logits.detach().mean(-1)  # each token's mean logit over the vocabulary

            def token_mean(values: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
                count = where.sum()
                return torch.where(where, values, 0).sum() / count.clamp(min=1)

            correct = logits[chosen].detach().argmax(-1) == labels[chosen]
            return {
                "rewards/margins": self.beta * (chosen_logps - rejected_logps).mean() if rows else scores.sum(),
                "logps/chosen": chosen_logps.mean() if rows else scores.sum(),
                "logps/rejected": rejected_logps.mean() if rows else scores.sum(),
                "logits/chosen": token_mean(mean_logits[chosen], mask[chosen]),
                "logits/rejected": token_mean(mean_logits[rejected], mask[rejected]),
                "mean_token_accuracy": token_mean(correct.float(), mask[chosen]),
                "entropy": token_mean(entropy.detach(), mask),
            }


def check_triple_columns(owner: str, name: str, columns: list[str] | None) -> None:
    """`columns` (a dataset's; None: a streamed dataset of unknown columns, which passes) hold `chosen`, `rejected`
    and `reference`; else a ValueError naming the dataset `name`, its columns and what TPO needs."""
    if columns is None:
        return
    missing = [column for column in TRIPLE_COLUMNS if column not in columns]
    if missing:
        found = ", ".join(map(repr, columns)) or "(none)"
        raise ValueError(
            f"{owner}: the {name} has no {' or '.join(map(repr, missing))} column (its columns: {found}); TPO trains "
            "on triples: 'chosen' and 'rejected' (the preferred and the dispreferred completion) and 'reference' (the "
            "gold completion), as text or chat messages, with an optional 'prompt' (else their common beginning)"
        )


def _with_quantization(owner: str, model: Any, model_init_kwargs: Any, quantization_config: Any) -> dict[str, Any]:
    """`model_init_kwargs` with `quantization_config` added, for a model loaded from a path / Hub id."""
    if not isinstance(model, str):
        raise ValueError(
            f"{owner}: quantization_config applies when the model is loaded from a path or Hub id, but model is "
            f"already instantiated ({type(model).__name__}); pass the model's path, or omit quantization_config"
        )
    kwargs = dict(model_init_kwargs or {})
    if "quantization_config" in kwargs:
        raise ValueError(
            f"{owner}: quantization_config is given both as a trainer argument and in args.model_init_kwargs; set it "
            "in one place"
        )
    kwargs["quantization_config"] = quantization_config
    return kwargs
