"""Critic PPO: `trl.GRPOTrainer`'s generation, rewards and logging, with a value model trained beside the policy.

Schulman et al. 2017, "Proximal Policy Optimization Algorithms" (arXiv 1707.06347); Trinity-RFT's `ppo` row (verl's
critic): one sample per prompt by default, GAE advantages from the critic's values (`advantage_fn="ppo"`, γ 1, λ 1,
whitened over the batch's valid tokens), the dual-clip PPO policy loss, and the critic's clipped value loss
0.5·agg(max((V − R)², (clip(V, V_old ± c) − R)²)) against the GAE returns R = A + V_old (before whitening).

* The value model is a token classifier with one output (`AutoModelForTokenClassification`, `num_labels=1`): by
  default the policy's checkpoint with a new scalar head, or `value_model` (a path or a loaded model). V_t is its
  output at the position before completion token t: the value of the state the token is chosen in.
* V_old is computed once per generation batch, without gradients, with the values going into GAE (gathered over
  processes like the rewards).
* The critic has its own optimizer (AdamW with the policy's betas, epsilon and weight decay, `critic_learning_rate`,
  the policy's scheduler type and warm-up) and is stepped, and its gradient clipped at `max_grad_norm`, at every
  optimizer step of the policy: the value loss is normalized over the same optimizer window as the policy loss, and
  the two models share no parameter, so each gets the gradient of its own loss only.
* `critic_warmup_steps`: the policy's loss is 0 until then (the critic learns the policy's values first).
* Metrics (verl's): `vf_loss`, `vf_clipfrac`, `vpred_mean` (the values' token mean), `critic/returns`,
  `critic/values`, `critic/explained_variance` (1 − Var(R − V_old) / (Var(R) + 1e-5) over the batch's valid tokens).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import torch
from transformers import AutoConfig, AutoModelForTokenClassification, PreTrainedModel, get_scheduler
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..losses.value import VALUE_LOSS_METRICS, clipped_value_loss, explained_variance
from .grpo_trainer import GRPOFamilyTrainer, _loss_mask


class CriticFamilyTrainer(GRPOFamilyTrainer):
    """A `trl.GRPOTrainer` with a critic: GAE advantages from a value model trained with the clipped value loss.

    Takes `trl.GRPOTrainer`'s arguments (`peft_config`: LoRA on the policy) plus `value_model` (a path or a
    `PreTrainedModel` whose output `.logits` is `[B, T, 1]`; default: `args.value_model_name_or_path`, else the
    policy's checkpoint with a new scalar head) and `value_peft_config` (LoRA on the critic, e.g.
    `LoraConfig(task_type="TOKEN_CLS", ...)`: its adapter and scalar head train)."""

    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "ppo"]
    trainer_metrics: ClassVar[dict[str, str]] = {**GRPOFamilyTrainer.trainer_metrics, **VALUE_LOSS_METRICS}

    def __init__(
        self,
        model,
        reward_funcs=None,
        args=None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        value_model: str | PreTrainedModel | None = None,
        value_peft_config: Any = None,
        **kwargs: Any,
    ):
        args = self._resolve_args(model, args)
        super().__init__(model, reward_funcs, args, train_dataset, eval_dataset, processing_class, **kwargs)
        source = value_model if value_model is not None else args.value_model_name_or_path
        if source is None:
            source = model if isinstance(model, str) else self.model.config._name_or_path
        if self.is_deepspeed_enabled or self.is_fsdp_enabled:
            raise ValueError(
                f"{type(self).__name__}: the critic is not yet sharded with DeepSpeed / FSDP (it would train as a "
                "plain replica beside a sharded policy); train critic PPO with DDP (accelerate's multi_gpu config)"
            )
        if self._is_vlm:
            raise ValueError(
                f"{type(self).__name__}: vision-language policies are not supported (the critic reads text)"
            )
        critic = self._load_value_model(source)
        if args.activation_checkpointing:  # as the policy: recompute the critic's activations in the backward pass
            critic.gradient_checkpointing_enable(gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs)
        if value_peft_config is not None:  # LoRA on the critic: its adapter and its scalar head train
            from peft import get_peft_model

            critic = get_peft_model(critic, value_peft_config)
        self.value_model = self.accelerator.prepare_model(critic)
        self.critic_optimizer = self.critic_scheduler = None
        self._returns: torch.Tensor | None = None
        self._values: torch.Tensor | None = None

    # ---- the value model ---------------------------------------------------------------------------------------

    def _load_value_model(self, source: str | PreTrainedModel) -> PreTrainedModel:
        owner = type(self).__name__
        if isinstance(source, str):
            init = dict(self.args.value_model_init_kwargs or {})
            init.setdefault("dtype", self.model.dtype)
            init.setdefault("trust_remote_code", self.args.trust_remote_code)
            try:
                config = AutoConfig.from_pretrained(source, num_labels=1, trust_remote_code=init["trust_remote_code"])
                config.classifier_dropout = 0.0  # values, not a classifier: no dropout on the head
                critic = AutoModelForTokenClassification.from_pretrained(source, config=config, **init)
            except (ValueError, KeyError, AttributeError) as error:
                raise ValueError(
                    f"{owner}: cannot build a value model from {source!r} (a token classifier with one output: its "
                    f"backbone and a scalar head over its hidden size): {error}"
                ) from error
        else:
            critic = source
        vocabulary = getattr(critic.config, "vocab_size", None)
        policy_vocabulary = self.model.config.get_text_config().vocab_size
        if vocabulary is not None and vocabulary != policy_vocabulary:
            raise ValueError(
                f"{owner}: the value model's vocabulary has {vocabulary} tokens but the policy's {policy_vocabulary}; "
                "the critic reads the policy's token ids, so it needs the policy's tokenizer"
            )
        critic.train()
        return critic

    def _critic_values(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor, length: int) -> torch.Tensor:
        """V_t `[B, length]`: the critic's output at the position before each of the last `length` tokens."""
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
        if logits.size(-1) != 1:
            raise ValueError(
                f"{type(self).__name__}: the value model returns {logits.size(-1)} outputs per token; it needs one "
                "(a token classifier with num_labels=1)"
            )
        return logits[:, -length - 1 : -1, 0].float()

    def _old_values(self, output: dict[str, Any]) -> torch.Tensor:
        """V_old of the local completions `[B, T]`, without gradients, a micro-batch at a time."""
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        length, batch = output["completion_ids"].size(1), self.args.per_device_train_batch_size
        with torch.no_grad():
            return torch.cat(
                [self._critic_values(self.value_model, ids[i : i + batch], mask[i : i + batch], length)
                 for i in range(0, ids.size(0), batch)]
            )  # fmt: skip

    # ---- advantages --------------------------------------------------------------------------------------------

    def _trainer_advantage_inputs(self, output: dict[str, Any], needed: tuple[str, ...]) -> dict[str, torch.Tensor]:
        self._values = self._old_values(output)
        return {"values": self._values} if "values" in needed else {}

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self._returns is not None:
            n_local = output["completion_mask"].size(0)
            start = self.accelerator.process_index * n_local
            width = output["completion_mask"].size(1)
            output["returns"] = self._returns[start : start + n_local, :width].float()
            output["old_values"] = self._values[:, :width]
            self._log_critic_batch(output)
        self._returns = None
        return output

    def _compute_advantages(self, rewards, group_ids, output):
        result, response_mask = super()._compute_advantages(rewards, group_ids, output)
        self._returns = result.returns
        return result, response_mask

    def _log_critic_batch(self, output: dict[str, Any]) -> None:
        """The generation batch's (all processes) mean return, mean old value and explained variance (verl's)."""
        mode = "train" if self.model.training else "eval"
        batch = {"returns": output["returns"], "values": output["old_values"], "mask": _loss_mask(output)}
        batch = {k: self.accelerator.gather(self.accelerator.pad_across_processes(v, dim=1)) for k, v in batch.items()}
        mask = batch["mask"].bool()
        self._metrics[mode]["critic/returns"].append(batch["returns"][mask].mean().item())
        self._metrics[mode]["critic/values"].append(batch["values"][mask].mean().item())
        explained = explained_variance(batch["values"], batch["returns"], mask)
        self._metrics[mode]["critic/explained_variance"].append(explained.item())

    # ---- the losses ----------------------------------------------------------------------------------------------

    def _add_trainer_terms(self, mode, inputs, window, loss, metrics):
        """The value loss on the micro-batch (training only), after the policy's terms; the policy's are 0 during
        `critic_warmup_steps`."""
        if mode != "train":
            return loss
        if self.state.global_step < self.args.critic_warmup_steps:
            loss = loss * 0.0  # the critic learns first (the graph stays, so every process runs the same ops)
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        vpreds = self._critic_values(self.value_model, ids, attention, inputs["completion_ids"].size(1))
        value_loss, value_metrics = clipped_value_loss(
            vpreds,
            inputs["old_values"],
            inputs["returns"],
            _loss_mask(inputs).bool(),
            cliprange_value=self.args.cliprange_value,
            loss_agg_mode="token-mean",
            **window,
        )
        metrics.update(value_metrics)
        return loss + value_loss

    # ---- the critic's optimizer ----------------------------------------------------------------------------------

    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model)
        if self.critic_optimizer is None:
            args = self.args
            self.critic_optimizer = torch.optim.AdamW(
                [p for p in self.value_model.parameters() if p.requires_grad],
                lr=args.critic_lr,
                betas=(args.adam_beta1, args.adam_beta2),
                eps=args.adam_epsilon,
                weight_decay=args.weight_decay,
            )
        return optimizer

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        scheduler = super().create_scheduler(num_training_steps, optimizer)
        if self.critic_scheduler is None:
            self.critic_scheduler = get_scheduler(
                self.args.lr_scheduler_type,
                self.critic_optimizer,
                num_warmup_steps=self.args.get_warmup_steps(num_training_steps),
                num_training_steps=num_training_steps,
            )
        return scheduler

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.accelerator.sync_gradients:  # the policy's optimizer steps after this micro-batch: so does the critic
            if self.args.max_grad_norm:
                self.accelerator.clip_grad_norm_(self.value_model.parameters(), self.args.max_grad_norm)
            self.critic_optimizer.step()
            self.critic_scheduler.step()
            self.critic_optimizer.zero_grad(set_to_none=True)
        return loss

    # ---- checkpoints: the critic, its optimizer and scheduler beside the policy's ---------------------------------

    def _save_critic(self, folder: str, with_optimizer: bool) -> None:
        if not self.args.should_save:
            return
        critic = self.accelerator.unwrap_model(self.value_model)
        critic.save_pretrained(os.path.join(folder, VALUE_MODEL_DIR), safe_serialization=True)
        if with_optimizer:
            torch.save(self.critic_optimizer.state_dict(), os.path.join(folder, CRITIC_OPTIMIZER_FILE))
            torch.save(self.critic_scheduler.state_dict(), os.path.join(folder, CRITIC_SCHEDULER_FILE))

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        self._save_critic(folder, with_optimizer=True)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        folder = os.path.join(checkpoint, VALUE_MODEL_DIR)
        if not os.path.isdir(folder):
            raise ValueError(
                f"{type(self).__name__}: {checkpoint} has no {VALUE_MODEL_DIR}/ (a checkpoint of another trainer?); "
                "critic PPO resumes its value model with the policy"
            )
        from safetensors.torch import load_file

        critic = self.accelerator.unwrap_model(self.value_model)
        if hasattr(critic, "peft_config"):  # a LoRA critic saves its adapter (and head) only
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(critic, load_file(os.path.join(folder, "adapter_model.safetensors")))
        else:
            critic.load_state_dict(load_file(os.path.join(folder, "model.safetensors"), device="cpu"))
        device = self.accelerator.device
        self.critic_optimizer.load_state_dict(
            torch.load(os.path.join(checkpoint, CRITIC_OPTIMIZER_FILE), map_location=device, weights_only=True)
        )
        self.critic_scheduler.load_state_dict(
            torch.load(os.path.join(checkpoint, CRITIC_SCHEDULER_FILE), weights_only=True)
        )

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        super().save_model(output_dir, _internal_call)
        if not _internal_call:  # the final model: the critic beside it (a checkpoint saves it with its optimizer)
            self._save_critic(output_dir or self.args.output_dir, with_optimizer=False)


VALUE_MODEL_DIR = "value_model"
CRITIC_OPTIMIZER_FILE = "critic_optimizer.pt"
CRITIC_SCHEDULER_FILE = "critic_scheduler.pt"
