"""The DPO trainer: `trl.DPOTrainer` with trl_ext's DPO loss (TRL's loss options) and Trinity-RFT's KL term.

Everything but the loss step is TRL's: dataset preparation and tokenization, the preference collator (rows
[all chosen; all rejected]), the reference model (reloaded, PEFT's disabled adapter, or log-prob sums precomputed
with `precompute_ref_log_probs`), TR-DPO's `sync_ref_model`, logging, checkpointing. `_compute_loss` (TRL's only
hook for the loss) runs the policy through TRL's fused log-prob head, takes the reference's per-token log-probs
(or TRL's precomputed sums), and computes

    loss = Σ_k λ_k · mean over pairs of ℓ_k  +  kl_coef · token-mean(KL(π‖π_ref))

with every loss option of `trl.DPOConfig` (`loss_type` ℓ_k and `loss_weights` λ_k, f-divergences, LD-DPO, WPO:
`trl_ext.losses.dpo.TRLDPOLoss`, where each formula and paper is written) and the KL term of the record (off with
`precompute_ref_log_probs=True`, see `DPOConfig`). Both are normalized over the optimizer window: the pair and
token counts of every accumulation step, summed over processes, are taken when the window starts
(`_get_num_items_in_batch`, HF's per-window hook), so the update does not depend on how the window is split into
micro-batches and processes, even when the last micro-batch of an epoch is smaller. TRL averages each micro-batch
instead; the two agree when every micro-batch of a window holds the same number of pairs (and, for the `sft` loss
type, of chosen tokens), e.g. with gradient_accumulation_steps=1 on one process. Metrics: the loss's
`chosen_reward`, `rejected_reward`, `accuracy_mean`, `dpo_loss` (the whole preference loss), the KL's `kl` and
`kl_coef`, and TRL's `rewards/margins`, `logps/chosen`, `logps/rejected` (`ld_alpha`-weighted, as TRL's),
`entropy`, `num_tokens`.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import torch
import trl
from transformers import TrainingArguments
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import use_adapter

from ...components import MEAN, SHARE
from ...losses import aggregate_loss
from ..core.config_conversion import trainer_config
from ..core.trl_adapter import CountWindowInLoop
from .config import DPOConfig

_NON_MODEL_KEYS = {"completion_mask", "ref_chosen_logps", "ref_rejected_logps"}


class DPOTrainer(CountWindowInLoop, trl.DPOTrainer):
    """A `trl.DPOTrainer` whose loss is trl_ext's DPO loss (`TRLDPOLoss`: every loss option of `trl.DPOConfig`) plus
    the KL term, normalized over the optimizer window (config: `trl_ext.DPOConfig`).

    The constructor takes `trl.DPOTrainer`'s arguments; `args` may also be TRL's `trl.DPOConfig` (converted).
    """

    config_class: ClassVar[type[DPOConfig]] = DPOConfig
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "dpo"]
    #: TRL's DPO metrics that the trainer adds (means over the micro-batch), the entropy and the router's aux_loss
    trainer_metrics: ClassVar[dict[str, str]] = {
        "entropy": SHARE,
        "aux_loss": MEAN,
        "rewards/margins": MEAN,
        "logps/chosen": MEAN,
        "logps/rejected": MEAN,
    }

    def __init__(
        self,
        model,
        ref_model=None,
        args: DPOConfig | TrainingArguments | None = None,
        *posargs: Any,
        **kwargs: Any,
    ):
        """Build the `trl.DPOTrainer` with trl_ext's DPO config, and the loss and KL term from it.

        The arguments are `trl.DPOTrainer`'s (TRL's documentation describes each); below is what trl_ext adds.

        Args:
            model (str | PreTrainedModel): The policy, as in TRL: a path / Hub id or a model.
            ref_model (PreTrainedModel | None): The reference model, as in TRL (default: a copy of the policy, or the
                PEFT adapter disabled). Also the KL term's reference (`args.kl_loss_fn`, `args.kl_coef`).
            args: A `trl_ext.DPOConfig`, used as is. TRL's `trl.DPOConfig` or a `transformers.TrainingArguments` is
                converted to one (`trl_ext.trainers.core.config_conversion`): its fields that differ from TRL's defaults
                are carried over (every TRL loss option included: `loss_type`, `beta`, ...), the others take
                `trl_ext.DPOConfig`'s defaults (the KL term's too). None: the defaults, with `output_dir="<model
                name>-dpo"`.
            *posargs: The rest of `trl.DPOTrainer`'s arguments in its order (`data_collator`, `train_dataset`,
                `eval_dataset`, `processing_class`, ...).
            **kwargs: The same by name, passed on: `train_dataset` and `eval_dataset` (preference pairs),
                `processing_class`, `peft_config`, `callbacks`, `optimizers`, `quantization_config`, ...

        Raises:
            TypeError: `args` is a config of another trainer (another trl_ext or TRL trainer's) or not a
                `TrainingArguments`.
            ValueError: A converted field `trl_ext.DPOConfig` refuses (the message names it), and TRL's own errors.
        """
        owner = type(self).__name__
        args = trainer_config(owner, model, args, self.config_class, "dpo")
        super().__init__(model, ref_model, args, *posargs, **kwargs)
        self.algorithm = "dpo"
        components = args.components.for_trainer()
        self.policy_loss_fn, self.kl_fn = components.policy_loss, components.kl_fn

    # ---- optimizer-window normalization ----------------------------------------------------------------------

    def micro_batch_counts(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Rows (2 per pair), completion tokens, chosen completion tokens (the `sft` loss type's) and input tokens
        (TRL's `num_tokens`) of a micro-batch (rows are [all chosen; all rejected])."""
        mask = batch["completion_mask"][..., 1:]
        rows = torch.full((), float(mask.size(0)), device=mask.device)  # filled on the device: no host sync
        return {
            "global_valid_seqs": rows,
            "global_valid_toks": mask.sum().float(),
            "chosen_valid_toks": mask[: mask.size(0) // 2].sum().float(),
            "input_tokens": batch["attention_mask"].sum().float(),
        }

    # ---- the loss --------------------------------------------------------------------------------------------

    def _compute_loss(self, model, inputs, return_outputs):
        mode = "train" if self.model.training else "eval"
        model_kwargs = {k: v for k, v in inputs.items() if k not in _NON_MODEL_KEYS}
        model_kwargs["use_cache"] = False
        if self.aux_loss_enabled:
            model_kwargs["output_router_logits"] = True
        completion_mask = inputs["completion_mask"]
        labels = inputs["input_ids"].masked_fill(completion_mask == 0, -100)
        outputs = model(**model_kwargs, labels=labels, fused_lm_head=True)
        mask = completion_mask[..., 1:].bool()
        width = mask.size(1)  # prompt-learning PEFT prepends virtual tokens: keep the real tokens' positions
        logps = outputs.log_probs[:, -width:]
        ref = self._reference_logps(inputs, model_kwargs, labels, width)

        pairs = logps.size(0) // 2  # rows are [all chosen; all rejected]; the loss takes (chosen, rejected) pairs
        interleave = torch.arange(2 * pairs, device=logps.device).view(2, pairs).t().reshape(-1)
        window = self.loss_counts(inputs, mode)
        window.pop("input_tokens", None)
        chosen_valid_toks = window.pop("chosen_valid_toks", None)
        weighting = {}
        if self.policy_loss_fn.use_weighting:  # WPO: TRL's fused head adds log Σ_v π(v)² when use_weighting is on
            weighting["log_sum_sq_probs"] = outputs.log_sum_sq_probs[:, -width:][interleave]
        loss, metrics = self.policy_loss_fn(
            logprob=logps[interleave],
            ref_logprob=ref[interleave],
            action_mask=mask[interleave],
            chosen_valid_toks=chosen_valid_toks,
            **weighting,
            **window,
        )
        if self.kl_fn.name != "none":
            kl_loss, kl_metrics = self.kl_fn.calculate_kl_loss(logps, ref, mask, "token-mean", **window)
            loss = loss + kl_loss
            metrics["kl"], metrics["kl_coef"] = kl_metrics["kl_loss"], kl_metrics["kl_coef"]
        with torch.no_grad():  # TRL's metrics that the loss does not report
            metrics["rewards/margins"] = metrics["chosen_reward"] - metrics["rejected_reward"]  # β·mean(ρ_c − ρ_r)
            sums = self.policy_loss_fn.sequence_logps(logps[interleave].detach(), mask[interleave])
            metrics["logps/chosen"], metrics["logps/rejected"] = sums[0::2].mean(), sums[1::2].mean()
            if outputs.entropy is not None:
                metrics["entropy"] = aggregate_loss(
                    outputs.entropy[:, -width:].detach(),
                    mask,
                    "token-mean",
                    global_valid_toks=window["global_valid_toks"],
                )
        loss, _ = self.window_loss(loss, metrics, mode, outputs.aux_loss if self.aux_loss_enabled else None)
        self.log_trained_tokens(mode)

        if return_outputs:
            warnings.warn(
                "`return_outputs=True` recomputes the logits with an extra forward pass (the fused LM head does not "
                "build them), as trl.DPOTrainer does",
                FutureWarning,
                stacklevel=2,
            )
            with torch.no_grad():
                outputs = model(**{k: v for k, v in model_kwargs.items() if k != "output_router_logits"})
        return (loss, outputs) if return_outputs else loss

    def _reference_logps(self, inputs, model_kwargs, labels, width: int) -> torch.Tensor:
        """The reference's per-token log-probs `[2B, T]`, or TRL's precomputed per-row sums `[2B]`."""
        if self.precompute_ref_logps:
            return torch.cat([inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]])
        ref_kwargs = {k: v for k, v in model_kwargs.items() if k != "output_router_logits"}
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            if self.ref_model is None:  # PEFT: the adapter disabled (or the initial copy loaded as "ref")
                unwrapped = self.accelerator.unwrap_model(self.model)
                with use_adapter(unwrapped, adapter_name="ref" if "ref" in unwrapped.peft_config else None):
                    outputs = self.model(**ref_kwargs, labels=labels, fused_lm_head=True)
            else:
                outputs = self.ref_model(**ref_kwargs, labels=labels, fused_lm_head=True)
        return outputs.log_probs[:, -width:]
