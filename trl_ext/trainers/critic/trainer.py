"""Critic PPO: `trl.GRPOTrainer`'s generation, rewards and logging, with a value model trained beside the policy.

Schulman et al. 2017, "Proximal Policy Optimization Algorithms" (arXiv 1707.06347); Trinity-RFT's `ppo` row (verl's
critic): one sample per prompt by default, GAE advantages from the critic's values (`advantage_fn="ppo"`, γ 1, λ 1,
whitened over the batch's valid tokens), the dual-clip PPO policy loss, and the critic's clipped value loss
0.5·agg(max((V − R)², (clip(V, V_old ± c) − R)²)) against the GAE returns R = A + V_old (before whitening).

Two critics, selected by `shared_backbone`:

* **A separate value model** (the default, the reference's): a token classifier with one output
  (`AutoModelForTokenClassification`, `num_labels=1`), by default the policy's checkpoint with a new scalar head, or
  `value_model` (a path or a loaded model). It has its own optimizer (AdamW with the policy's betas, epsilon and
  weight decay, `critic_learning_rate`, the policy's scheduler type and warm-up), its own backward pass and its
  gradient clipped at `max_grad_norm`, and is stepped at every optimizer step of the policy. The two models share no
  parameter, so each gets the gradient of its own loss only. Under DeepSpeed it is a second engine with the policy's
  ZeRO configuration (its optimizer state, and under ZeRO-3 its weights, sharded like the policy's).
* **A value head on the policy's backbone** (`shared_backbone=True`, TRL's former `PPOTrainer` design): a linear
  head on the policy's last hidden state, read from the forward pass that scores the completions. One model, one
  optimizer: the loss is the policy's terms + `vf_coef` · the value loss, so the backbone gets both gradients, the
  head only the value loss's and the LM head only the policy's. The head is saved beside the policy
  (`value_head.safetensors`), never inside its weights (a plain causal LM checkpoint, loadable by vLLM).

For both, V_t is the critic's output at the position before completion token t (the value of the state the token is
chosen in). V_old is computed once per generation batch, without gradients, and goes into GAE (gathered over
processes like the rewards). The value loss is normalized over the same optimizer window as the policy loss.
`critic_warmup_steps`: the policy's loss is 0 until then (the critic learns the policy's values first).

Metrics (verl's): `vf_loss`, `vf_clipfrac`, `vpred_mean` (the values' token mean), `critic/returns`,
`critic/values`, `critic/explained_variance` (1 − Var(R − V_old) / (Var(R) + 1e-5) over the batch's valid tokens).
"""

from __future__ import annotations

import contextlib
import copy
import os
from typing import Any, ClassVar

import torch
from transformers import PreTrainedModel, get_scheduler

from ...losses.value import VALUE_LOSS_METRICS, clipped_value_loss, explained_variance
from ..grpo.scoring import _loss_mask
from ..grpo.trainer import GRPOFamilyTrainer
from .value_model import check_value_vocabulary, load_value_model

VALUE_MODEL_DIR = "value_model"  # the separate critic's weights (or its LoRA adapter), in checkpoints and the output
CRITIC_OPTIMIZER_FILE = "critic_optimizer.pt"
CRITIC_SCHEDULER_FILE = "critic_scheduler.pt"
CRITIC_ENGINE_DIR = "critic_engine"  # under DeepSpeed: the critic engine's checkpoint (optimizer and scheduler)
VALUE_HEAD_FILE = "value_head.safetensors"  # shared_backbone: the head on the policy's backbone
VALUE_HEAD = "value_head"  # its attribute on the policy


class CriticFamilyTrainer(GRPOFamilyTrainer):
    """A `trl.GRPOTrainer` with a critic: GAE advantages from a value model trained with the clipped value loss.

    Takes `trl.GRPOTrainer`'s arguments (`peft_config`: LoRA on the policy) plus, for a separate value model,
    `value_model` (a path or a `PreTrainedModel` whose output `.logits` is `[B, T, 1]`; default:
    `args.value_model_name_or_path`, else the policy's checkpoint with a new scalar head) and `value_peft_config`
    (LoRA on the critic, e.g. `LoraConfig(task_type="TOKEN_CLS", ...)`: its adapter and scalar head train). With
    `args.shared_backbone` the value head sits on the policy (its LoRA, if any, is the policy's)."""

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
        """Check the critic's arguments, build the GRPO-family trainer, then add the critic.

        Args:
            model (str | PreTrainedModel): The policy, as in `trl.GRPOTrainer`.
            reward_funcs (RewardFunc | list[RewardFunc] | None): The reward sources, as in `GRPOFamilyTrainer`.
            args (CriticFamilyConfig | TrainingArguments | None): The algorithm's config (`PPOConfig`), used as is;
                TRL's `trl.GRPOConfig` or a `transformers.TrainingArguments` is converted to one (its fields that differ
                from TRL's defaults carried over, the algorithm's defaults for the rest: one generation per prompt, γ,
                λ, the value clip, ...); None: the defaults.
            train_dataset (Dataset | IterableDataset | None): The prompts (a `prompt` column), as in
                `GRPOFamilyTrainer`.
            eval_dataset (Dataset | IterableDataset | dict[str, Dataset] | None): Evaluation prompts, as in
                `GRPOFamilyTrainer`.
            processing_class (PreTrainedTokenizerBase | ProcessorMixin | None): The tokenizer, as in TRL.
            value_model: The separate critic: a path / Hub id (a token classifier with one output is built from it,
                loaded with `args.value_model_init_kwargs`) or a model whose output `.logits` is `[B, T, 1]`. Default:
                `args.value_model_name_or_path`, else the policy's checkpoint with a new scalar head. Not with
                `args.shared_backbone`.
            value_peft_config: A PEFT config for the separate critic (e.g. `LoraConfig(task_type="TOKEN_CLS")`: its
                adapter and scalar head train). Not with `args.shared_backbone`.
            **kwargs: The rest of `trl.GRPOTrainer`'s arguments (`peft_config`: LoRA on the policy, `callbacks`, ...),
                as in `GRPOFamilyTrainer`.

        Raises:
            TypeError: `args` is not one of the configs above (see `GRPOFamilyTrainer`).
            ValueError: `value_model` / `value_peft_config` with `shared_backbone=True`; a value model that cannot be
                built or whose vocabulary differs from the policy's; FSDP, fp16 or a vision-language policy; and
                `GRPOFamilyTrainer`'s errors.
        """
        args = self._resolve_args(model, args)
        owner = type(self).__name__
        if args.shared_backbone and (value_model is not None or value_peft_config is not None):
            raise ValueError(
                f"{owner}: value_model / value_peft_config configure a separate value model, but "
                "args.shared_backbone=True puts the value head on the policy"
            )
        super().__init__(model, reward_funcs, args, train_dataset, eval_dataset, processing_class, **kwargs)
        if self.is_fsdp_enabled:
            raise ValueError(
                f"{owner}: FSDP is not supported yet (the critic would train as a plain replica beside a sharded "
                "policy); train critic PPO with DDP or DeepSpeed ZeRO-2/3"
            )
        if self.is_vision_language_model:
            raise ValueError(f"{owner}: vision-language policies are not supported (the critic reads text)")
        if self.accelerator.scaler is not None:
            raise ValueError(
                f"{owner}: fp16 mixed precision (a loss scaler for the policy's loss only) is not supported with a "
                "critic; use bf16=True"
            )
        self.value_model = self.critic_optimizer = self.critic_scheduler = self.value_head = None
        self._returns: torch.Tensor | None = None
        self._values: torch.Tensor | None = None
        self._hidden: torch.Tensor | None = None  # shared_backbone: the policy's last hidden state, while scoring
        if args.shared_backbone:
            self._add_value_head()
            return
        source = value_model if value_model is not None else args.value_model_name_or_path
        if source is None:
            source = model if isinstance(model, str) else self.model.config._name_or_path
        critic = self._load_value_model(source)
        if args.activation_checkpointing:  # as the policy: recompute the critic's activations in the backward pass
            critic.gradient_checkpointing_enable(gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs)
        if value_peft_config is not None:  # LoRA on the critic: its adapter and its scalar head train
            from peft import get_peft_model

            critic = get_peft_model(critic, value_peft_config)
        if self.is_deepspeed_enabled:  # an engine of its own once the policy's exists (`_critic_engine`)
            self.value_model = critic if _zero_stage(self) == 3 else critic.to(self.accelerator.device)
        else:
            self.value_model = self.accelerator.prepare_model(critic)

    # ---- the separate value model ------------------------------------------------------------------------------

    def _load_value_model(self, source: str | PreTrainedModel) -> PreTrainedModel:
        owner = type(self).__name__
        if isinstance(source, str):
            init = dict(self.args.value_model_init_kwargs or {})
            init.setdefault("dtype", self.model.dtype)
            init.setdefault("trust_remote_code", self.args.trust_remote_code)
            critic = load_value_model(owner, source, init)
        else:
            critic = source
        check_value_vocabulary(owner, critic, self.model)
        critic.train()
        return critic

    def _critic_engine(self) -> None:
        """Under DeepSpeed, make the critic an engine of its own once the policy's engine exists: the policy's
        resolved DeepSpeed configuration (ZeRO stage, precision, accumulation, `gradient_clipping`) with the
        critic's AdamW and scheduler as client optimizer and scheduler."""
        if not self.is_deepspeed_enabled or self.args.shared_backbone or _is_engine(self.value_model):
            return
        if not _is_engine(self.model_wrapped):
            return  # the policy is not an engine yet (evaluation before training): the critic stays a module
        import deepspeed

        self._make_critic_optimizer()  # (not made yet where the DeepSpeed config names the policy's optimizer)
        self._make_critic_scheduler(self.state.max_steps)
        config = copy.deepcopy(self.accelerator.deepspeed_config)
        config.pop("optimizer", None)  # the critic's optimizer and scheduler are its own (client) ones
        config.pop("scheduler", None)
        config["zero_allow_untested_optimizer"] = True
        self.value_model, self.critic_optimizer, _, self.critic_scheduler = deepspeed.initialize(
            model=self.value_model,
            optimizer=self.critic_optimizer,
            lr_scheduler=self.critic_scheduler,
            config=config,
        )

    # ---- the value head on the policy's backbone ---------------------------------------------------------------

    def _policy_backbone(self) -> torch.nn.Module:
        """The policy's decoder (its final hidden states feed the LM head), inside PEFT's wrapper if any."""
        model = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        return model.base_model

    def _add_value_head(self) -> None:
        """A linear head hidden → 1 on the policy (initialized like a token classifier's score head), trained with
        it; its output at the position before each completion token is that token's value.

        A forward hook on the backbone keeps the last hidden state of the forward pass that scores the completions
        (`micro_batch_loss`), and the value loss reads the head's output on it. The head is used outside that forward
        pass, so DDP leaves it alone (it would count it as unused, then see its gradient arrive) and the trainer
        averages its gradient over processes itself (`_reduce_head_gradient`)."""
        model = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        config = model.config.get_text_config()
        hidden = getattr(config, "hidden_size", None)
        if not isinstance(hidden, int):
            raise ValueError(
                f"{type(self).__name__}: shared_backbone=True needs the policy's hidden size (config.hidden_size) "
                f"for its value head; {type(config).__name__} has none"
            )
        head = torch.nn.Linear(hidden, 1, dtype=model.dtype, device=model.device)
        with torch.no_grad():  # from `seed` alone: the same head on every process (DDP does not broadcast it)
            weight = torch.randn(head.weight.shape, generator=torch.Generator().manual_seed(self.args.seed))
            head.weight.copy_(weight * getattr(config, "initializer_range", 0.02))
            head.bias.zero_()
        model.add_module(VALUE_HEAD, head)  # trainable even under LoRA: added after PEFT froze the base weights
        model._keys_to_ignore_on_save = {*(model._keys_to_ignore_on_save or ()), *_head_keys()}
        self.value_head = head
        self._policy_backbone().register_forward_hook(self._keep_hidden_state)
        head_names = [name for name, p in self.model.named_parameters() if any(p is q for q in head.parameters())]
        self.model._ddp_params_and_buffers_to_ignore = head_names  # read by DistributedDataParallel when it wraps

    def _keep_hidden_state(self, module, args, output) -> None:
        if self._hidden is not None:  # only inside `micro_batch_loss`, where the slot is armed
            self._hidden = output[0] if isinstance(output, tuple) else output.last_hidden_state

    def micro_batch_loss(self, model, inputs):
        if not self.args.shared_backbone:
            return super().micro_batch_loss(model, inputs)
        self._hidden = torch.empty(0)  # armed: the scoring forward pass leaves its last hidden state here
        try:
            return super().micro_batch_loss(model, inputs)
        finally:
            self._hidden = None

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The value head's output `[B, L]` (float32) on hidden states `[B, L, H]`."""
        return self.value_head(hidden.to(self.value_head.weight.dtype)).squeeze(-1).float()

    # ---- values ------------------------------------------------------------------------------------------------

    def _critic_values(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor, length: int) -> torch.Tensor:
        """V_t `[B, length]` of the separate value model: its output at the position before each of the last
        `length` tokens."""
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
        if self.args.shared_backbone:
            backbone = self._policy_backbone()

            def values(i: int) -> torch.Tensor:
                hidden = backbone(input_ids=ids[i : i + batch], attention_mask=mask[i : i + batch], use_cache=False)
                return self._head(hidden.last_hidden_state[:, -length - 1 : -1])
        else:
            self._critic_engine()

            def values(i: int) -> torch.Tensor:
                return self._critic_values(self.value_model, ids[i : i + batch], mask[i : i + batch], length)

        with torch.no_grad(), self._gathered_critic(), self.accelerator.autocast():
            return torch.cat([values(i) for i in range(0, ids.size(0), batch)])

    def _gathered_critic(self):
        """Under ZeRO-3 before the critic is an engine (evaluation before training), its partitioned weights
        gathered for a forward pass; otherwise nothing."""
        if self.value_model is None or _is_engine(self.value_model) or _zero_stage(self) != 3:
            return contextlib.nullcontext()
        import deepspeed

        return deepspeed.zero.GatheredParameters(list(self.value_model.parameters()))

    # ---- advantages --------------------------------------------------------------------------------------------

    def _trainer_advantage_inputs(self, output: dict[str, Any], needed: tuple[str, ...]) -> dict[str, torch.Tensor]:
        self._values = self._old_values(output)
        return {"values": self._values} if "values" in needed else {}

    def score_generation_batch(self, inputs):
        output = super().score_generation_batch(inputs)
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
        self.metric_log(mode)["critic/returns"].append(batch["returns"][mask].mean().item())
        self.metric_log(mode)["critic/values"].append(batch["values"][mask].mean().item())
        explained = explained_variance(batch["values"], batch["returns"], mask)
        self.metric_log(mode)["critic/explained_variance"].append(explained.item())

    # ---- the losses ----------------------------------------------------------------------------------------------

    def _value_loss(self, inputs: dict[str, Any], window: dict[str, Any], metrics: dict[str, Any]) -> torch.Tensor:
        """The micro-batch's share of the window's clipped value loss, its metrics added to `metrics`."""
        length = inputs["completion_ids"].size(1)
        if self.args.shared_backbone:
            vpreds = self._head(self._hidden[:, -length - 1 : -1])
        else:
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
            attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
            vpreds = self._critic_values(self.value_model, ids, attention, length)
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
        return value_loss

    def _add_trainer_terms(self, mode, batch, window, loss, metrics):
        """In training, the value loss: added to the loss with `vf_coef` on a shared backbone, else back-propagated
        through the value model on its own (its value still added to the logged loss). The policy's terms are 0
        during `critic_warmup_steps`."""
        if mode != "train":
            return loss
        if self.state.global_step < self.args.critic_warmup_steps:
            loss = loss * 0.0  # the critic learns first (the graph stays, so every process runs the same ops)
        if self.args.shared_backbone:
            return loss + self.args.vf_coef * self._value_loss(batch.source, window, metrics)
        sync = self.accelerator.sync_gradients
        if _is_engine(self.value_model):
            value_loss = self._value_loss(batch.source, window, metrics)
            self.value_model.set_gradient_accumulation_boundary(is_boundary=sync)
            self.value_model.backward(self.scale_for_processes(value_loss, mode), scale_wrt_gas=False)
            if sync:
                self.value_model.step()  # clips at gradient_clipping, steps the critic's optimizer and scheduler
        else:  # DDP reduces the critic's gradients at the optimizer step's last micro-batch only, as the policy's
            with contextlib.nullcontext() if sync else self.accelerator.no_sync(self.value_model):
                value_loss = self._value_loss(batch.source, window, metrics)
                self.scale_for_processes(value_loss, mode).backward()
        return loss + value_loss.detach()

    # ---- the critic's optimizer ----------------------------------------------------------------------------------

    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model)
        self._make_critic_optimizer()
        return optimizer

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        scheduler = super().create_scheduler(num_training_steps, optimizer)
        self._make_critic_scheduler(num_training_steps)
        return scheduler

    def _make_critic_optimizer(self) -> None:
        if self.critic_optimizer is None and not self.args.shared_backbone:
            args = self.args
            self.critic_optimizer = torch.optim.AdamW(
                [p for p in self.value_model.parameters() if p.requires_grad],
                lr=args.critic_lr,
                betas=(args.adam_beta1, args.adam_beta2),
                eps=args.adam_epsilon,
                weight_decay=args.weight_decay,
            )

    def _make_critic_scheduler(self, num_training_steps: int) -> None:
        if self.critic_scheduler is None and not self.args.shared_backbone:
            self.critic_scheduler = get_scheduler(
                self.args.lr_scheduler_type,
                self.critic_optimizer,
                num_warmup_steps=self.args.get_warmup_steps(num_training_steps),
                num_training_steps=num_training_steps,
            )

    def training_step(self, model, inputs, num_items_in_batch=None):
        self._critic_engine()
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.args.shared_backbone and self.accelerator.sync_gradients:
            self._reduce_head_gradient()
        step_here = self.critic_optimizer is not None and not _is_engine(self.value_model)
        if step_here and self.accelerator.sync_gradients:  # the policy's optimizer steps now: so does the critic
            self._step_critic()
        return loss

    def _step_critic(self) -> None:
        """The separate critic's optimizer step (an engine steps itself in its backward pass): its gradient clipped
        at `max_grad_norm`, then its optimizer and scheduler."""
        if self.args.max_grad_norm:
            self.accelerator.clip_grad_norm_(self.value_model.parameters(), self.args.max_grad_norm)
        self.critic_optimizer.step()
        self.critic_scheduler.step()
        self.critic_optimizer.zero_grad(set_to_none=True)

    def _reduce_head_gradient(self) -> None:
        """Under DDP, average the value head's gradient over processes before the optimizer step, as DDP averages
        the policy's (DeepSpeed reduces it with the policy's)."""
        if not isinstance(self.model_wrapped, torch.nn.parallel.DistributedDataParallel):
            return
        for p in self.value_head.parameters():
            if p.grad is not None:
                torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.AVG)

    # ---- checkpoints: the critic (or the head), its optimizer and scheduler beside the policy's ------------------

    def _save_critic(self, folder: str, with_optimizer: bool) -> None:
        """Every process calls this (gathering ZeRO-3 weights and saving an engine are collective)."""
        if self.args.shared_backbone:
            self._save_value_head(folder)
            return
        critic = self.accelerator.unwrap_model(self.value_model)
        try:
            state = self.accelerator.get_state_dict(self.value_model)
        except ValueError:  # ZeRO-3 without stage3_gather_16bit_weights_on_model_save: the engine checkpoint only
            state = None
        if self.args.should_save and state is not None:
            critic.save_pretrained(os.path.join(folder, VALUE_MODEL_DIR), state_dict=state, safe_serialization=True)
        if not with_optimizer:
            return
        if _is_engine(self.value_model):
            self.value_model.save_checkpoint(os.path.join(folder, CRITIC_ENGINE_DIR))
        elif self.args.should_save:
            torch.save(self.critic_optimizer.state_dict(), os.path.join(folder, CRITIC_OPTIMIZER_FILE))
            torch.save(self.critic_scheduler.state_dict(), os.path.join(folder, CRITIC_SCHEDULER_FILE))

    def _save_value_head(self, folder: str) -> None:
        from safetensors.torch import save_file

        with self._gathered_head():
            state = {name: p.detach().cpu().contiguous() for name, p in self.value_head.named_parameters()}
        if self.args.should_save:
            os.makedirs(folder, exist_ok=True)
            save_file(state, os.path.join(folder, VALUE_HEAD_FILE))

    def _gathered_head(self):
        if _zero_stage(self) != 3:
            return contextlib.nullcontext()
        import deepspeed

        return deepspeed.zero.GatheredParameters(list(self.value_head.parameters()))

    def save_trl_ext_state(self, folder: str) -> None:
        super().save_trl_ext_state(folder)
        self._save_critic(folder, with_optimizer=True)

    def load_trl_ext_state(self, checkpoint: str) -> None:
        super().load_trl_ext_state(checkpoint)
        owner = type(self).__name__
        if self.args.shared_backbone:  # the policy's optimizer holds the head's state; its weights are beside
            if not self.is_deepspeed_enabled:  # (a DeepSpeed checkpoint restored them with the policy's engine)
                self._load_value_head(checkpoint)
            return
        self._critic_engine()
        if _is_engine(self.value_model):  # weights, optimizer and scheduler: the engine's own checkpoint
            folder = os.path.join(checkpoint, CRITIC_ENGINE_DIR)
            if not os.path.isdir(folder):
                raise ValueError(f"{owner}: {checkpoint} has no {CRITIC_ENGINE_DIR}/ (saved without DeepSpeed?)")
            strict = not hasattr(self.value_model.module, "peft_config")  # a LoRA critic's frozen base is not saved
            self.value_model.load_checkpoint(folder, load_module_strict=strict)
            return
        folder = os.path.join(checkpoint, VALUE_MODEL_DIR)
        if not os.path.isdir(folder):
            raise ValueError(
                f"{owner}: {checkpoint} has no {VALUE_MODEL_DIR}/ (a checkpoint of another trainer?); critic PPO "
                "resumes its value model with the policy"
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

    def _load_value_head(self, folder: str) -> None:
        from safetensors.torch import load_file

        path = os.path.join(folder, VALUE_HEAD_FILE)
        if not os.path.isfile(path):
            raise ValueError(
                f"{type(self).__name__}: {folder} has no {VALUE_HEAD_FILE} (the value head of shared_backbone=True)"
            )
        self.value_head.load_state_dict(load_file(path, device=str(self.value_head.weight.device)))

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        super().save_model(output_dir, _internal_call)
        if not _internal_call:  # the final model: the critic beside it (a checkpoint saves it with its optimizer)
            self._save_critic(output_dir or self.args.output_dir, with_optimizer=False)


def _head_keys() -> set[str]:
    return {f"{VALUE_HEAD}.weight", f"{VALUE_HEAD}.bias"}


def _is_engine(model: Any) -> bool:
    return type(model).__name__ == "DeepSpeedEngine"


def _zero_stage(trainer: GRPOFamilyTrainer) -> int:
    """The ZeRO stage of the trainer's DeepSpeed configuration (0 without DeepSpeed)."""
    if not trainer.is_deepspeed_enabled:
        return 0
    plugin = trainer.accelerator.state.deepspeed_plugin
    return int(plugin.deepspeed_config.get("zero_optimization", {}).get("stage", 0))
