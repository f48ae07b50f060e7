"""The A*-PO trainer: TRL's experimental `A2POTrainer` with trl_ext's `a2po` loss, normalized over the optimizer window.

Everything but the loss step is TRL's: the frozen reference model (a copy of the initial policy), the first stage
(`_estimate_optimal_values`: `num_value_samples` reference completions per prompt of the train and eval datasets,
scored, V* per prompt text, the all-incorrect prompts filtered out), the second stage's generation of one completion
per prompt, its reward and the reference's summed log-probs (`_prepare_inputs`), evaluation, logging and
checkpointing. `compute_loss`, TRL's one hook for the loss, computes the policy's per-token log-probs of the completion
as TRL does (the same forward, `logits_to_keep` and completion mask) and hands them, the reference's sums and the
advantages r − V*(x) to `trl_ext.losses.a2po`:

    loss = mean over the completions of (β₂·log π(y|x)/π_ref(y|x) − (r − V*(x)))²

Window normalization: when the HF loop starts an optimizer window it hands its micro-batches (lists of dataset rows,
one completion each) to `_get_num_items_in_batch` (`CountWindowInLoop`), which counts their rows over the
micro-batches and processes; every micro-batch's loss is then its share, Σ over its rows / the window's rows, so the
update is the mean over the window's completions however the window is split. TRL averages each micro-batch and
divides by the accumulation steps instead: the two agree when every micro-batch holds the same number of prompts
(always on one process, but for a smaller last micro-batch of an epoch). Metrics, once per optimizer step: the loss's
`a2po_loss`, `implicit_reward` and `advantage`, and TRL's `reward` and `v_star` (logged as TRL logs them).
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import torch
from transformers import TrainingArguments
from trl.trainer.utils import selective_log_softmax

from ..core.config_conversion import trainer_config
from ..core.trl_adapter import CountWindowInLoop
from .config import A2POConfig

with warnings.catch_warnings():  # TRL's experimental notice: see config.py
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental import a2po as trl_a2po


class A2POTrainer(CountWindowInLoop, trl_a2po.A2POTrainer):
    """TRL's experimental `A2POTrainer` whose loss is trl_ext's `a2po` (config: `trl_ext.A2POConfig`), normalized
    over the optimizer window.

    The constructor takes TRL's `A2POTrainer` arguments; `args` may also be TRL's `A2POConfig` (converted).
    """

    algorithm: ClassVar[str] = "a2po"
    config_class: ClassVar[type[A2POConfig]] = A2POConfig
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "a2po"]
    #: no metric of the trainer's own beside the loss's (TRL's `reward` and `v_star` are logged by its
    #: `_prepare_inputs`, once per micro-batch)
    trainer_metrics: ClassVar[dict[str, str]] = {}

    def __init__(
        self,
        model,
        reward_funcs,
        args: A2POConfig | TrainingArguments | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        callbacks=None,
        optimizers=(None, None),
    ):
        """Check the reward functions against the config before the model loads, then build TRL's trainer and the
        loss.

        The arguments are TRL's `A2POTrainer`'s (TRL's documentation describes each); below is what trl_ext adds.

        Args:
            model (str | PreTrainedModel): The policy, as in TRL: a path / Hub id or a model. Its frozen copy is the
                reference (stage 1 samples from it; the regression's log-ratio is taken to it).
            reward_funcs (Callable | list[Callable]): As in TRL: functions of `prompts`, `completions` and the
                dataset's other columns, returning one float per completion; their weighted sum is the reward r.
            args: A `trl_ext.A2POConfig`, used as is. TRL's `A2POConfig` or a `transformers.TrainingArguments` is
                converted to one (`trl_ext.trainers.core.config_conversion`): its fields that differ from TRL's
                defaults are carried over. None: the defaults, with `output_dir="<model name>-A2PO"`.
            train_dataset (Dataset): Prompts, as in TRL (a `prompt` column, plus any the reward functions read).
            eval_dataset (Dataset | None): As in TRL; its prompts get a V* estimate too.
            processing_class (PreTrainedTokenizerBase | None): As in TRL (left padding).
            callbacks (list[TrainerCallback] | None): As in TRL.
            optimizers (tuple[Optimizer | None, LambdaLR | None]): As in TRL.

        Raises:
            TypeError: `args` is a config of another trainer (another trl_ext or TRL trainer's) or not a
                `TrainingArguments`.
            ValueError: A converted field `trl_ext.A2POConfig` refuses (the message names it); `reward_funcs` empty
                or holding something that is not callable (TRL's A2POTrainer takes functions only); `reward_weights`
                not one weight per reward function.
        """
        owner = type(self).__name__
        args = trainer_config(owner, model, args, self.config_class, "A2PO")
        funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
        check_reward_funcs(owner, funcs, args.reward_weights)
        super().__init__(
            model,
            reward_funcs,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
            optimizers=optimizers,
        )
        components = args.components.for_trainer()
        self.policy_loss_fn, self.kl_fn = components.policy_loss, components.kl_fn

    # ---- optimizer-window normalization ----------------------------------------------------------------------

    def micro_batch_counts(self, batch: list[dict[str, Any]] | dict[str, Any]) -> dict[str, torch.Tensor]:
        """The completions of a micro-batch: one per dataset row of the collated list the HF loop hands the window
        hook, or per reward of a prepared batch (evaluation). No host sync."""
        rows = len(batch) if isinstance(batch, list) else batch["rewards"].numel()
        return {"global_valid_seqs": torch.full((), float(rows), device=self.accelerator.device)}

    # ---- the loss --------------------------------------------------------------------------------------------

    def completion_logps(self, model, inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy's per-token log-probs of the completion tokens `[B, K]` and their mask (bool), from the forward
        TRL's `A2POTrainer` runs (`logits_to_keep` where the model takes it; the completion mask ends at the first
        EOS), before TRL sums them per sequence."""
        width = inputs["logits_to_keep"]
        input_ids, attention_mask = inputs["input_ids"], inputs["attention_mask"]
        model_inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if "logits_to_keep" in self.model_kwarg_keys:
            model_inputs["logits_to_keep"] = width + 1  # the last logit predicts past the sequence: dropped below
        logits = model(**model_inputs).logits[:, :-1, :][:, -width:, :]
        logprob = selective_log_softmax(logits, input_ids[:, -width:])
        return logprob, attention_mask[:, -width:].bool()

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The micro-batch's share of the window's A*-PO loss (`trl_ext.losses.a2po`), on a batch TRL's
        `_prepare_inputs` made (its `ref_logps`, `rewards` and `v_star`). `num_items_in_batch` is not used: the
        window's counts are (`_get_num_items_in_batch`)."""
        mode = "train" if self.model.training else "eval"
        logprob, mask = self.completion_logps(model, inputs)
        loss, metrics = self.policy_loss_fn(
            logprob=logprob,
            ref_logprob=inputs["ref_logps"],
            action_mask=mask,
            advantages=inputs["rewards"] - inputs["v_star"],
            **self.loss_counts(inputs, mode),
        )
        loss, _ = self.window_loss(loss, metrics, mode)
        return (loss, None) if return_outputs else loss


def check_reward_funcs(owner: str, funcs: list[Any], reward_weights: list[float] | None) -> None:
    """TRL's `A2POTrainer` calls each reward function and weights them by `reward_weights`: at least one, each
    callable, and one weight per function; else a ValueError naming `reward_funcs` or `reward_weights` (TRL would
    fail only in stage 1, after loading the model and sampling)."""
    if not funcs:
        raise ValueError(
            f"{owner}: reward_funcs is empty; give at least one function returning a reward per completion"
        )
    refused = [repr(func) for func in funcs if not callable(func)]
    if refused:
        raise ValueError(
            f"{owner}: reward_funcs holds {', '.join(refused)}, which is not callable; A*-PO's trainer takes reward "
            "functions of (prompts, completions, **columns) returning one float per completion (no reward model)"
        )
    if reward_weights is not None and len(reward_weights) != len(funcs):
        raise ValueError(
            f"{owner}: reward_weights={reward_weights!r} has {len(reward_weights)} weight(s) for {len(funcs)} reward "
            "function(s); give one weight per reward function, or None (1 each)"
        )
