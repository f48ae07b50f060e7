"""Critic PPO, asynchronously: a value model trained beside the policy, GAE from its values on TRL's packed rows.

The synchronous critic trainer (`trainers/critic/trainer.py`; Schulman et al. 2017, arXiv 1707.06347, Trinity-RFT's
`ppo` row on verl's critic) computes V_old once per generation batch, runs GAE (`ppo` estimator,
`advantages/gae.py`) on the rewards and those values, and trains the critic with the clipped value loss
0.5·agg(max((V − R)², (clip(V, V_old ± c) − R)²)) against the returns R = A + V_old, its own optimizer stepped with
the policy's. Asynchronously the same happens on the worker's samples, in the trainer:

* the worker stamps each sample's (shaped) reward, advantage 0 (GAE is token-level: `IN_WINDOW`, as REINFORCE++);
* once per optimizer window, before its first micro-batch (`AsyncGRPOTrainer._prepare_window`), the critic is
  forwarded on each micro-batch's packed row without gradients (`PackedCritic.values`: loaded with TRL's tree
  attention as the reference model is, one value per trained token through the row's `token_index`, the output at
  the position that predicts the token: the value of the state it is chosen in); GAE runs over the window on those
  values and the rewards (`window_pass.window_estimate`), and V_old and R are stored on each micro-batch;
* in the loss step (`value_term`, a trainer term of `LossStep`) the critic is forwarded again on the same row, with
  gradients, and its clipped value loss (normalized over the window like the policy's) is added to the loss: the two
  models share no parameter, so one backward pass gives each the gradient of its own loss only;
* at each optimizer step of the policy (`CriticStep.on_optimizer_step`, right after the policy's `optimizer.step()`)
  the critic's gradient is averaged over processes, clipped at `max_grad_norm`, and its AdamW (the policy's betas,
  epsilon and weight decay, `critic_learning_rate`) and scheduler (the policy's type and warm-up) step.

**Staleness.** The values are the current critic's (computed at training time), the rewards and μ the sample's. This
is verl's fully-asynchronous recipe (`recipe/fully_async_policy/ray_trainer.py`, `_process_batch_common`: the
trainer calls `critic_wg.compute_values` on the batch taken from the message queue, then computes the advantages,
then `update_critic`, then `update_actor`), and the right estimate here: with λ = 1 (the default) A_t = Σ_{s≥t} γ^{s−t}
r_s − V(s_t) and V is only a baseline, so its age changes the variance of the policy gradient, never its expectation
(the loss's ratio against μ corrects the sample's staleness, as for every other estimator); with λ < 1 GAE bootstraps
from V(s_{t+1}), which estimates the value under the critic's training data (the last `max_staleness` versions'
samples), closer to the trained policy π than to the sampler μ, and no fresher values exist (the worker has no
critic, and the values of the sampler's version are gone). The critic regresses on the samples' returns, i.e. on
what μ achieved, lagging the policy by the samples' staleness as in verl. V_old of the value clip is the critic at
the start of the optimizer step: one step per window, so the clip acts only through numerical differences, as in the
synchronous trainer with one optimizer step per generation batch.

`AsyncCriticConfig` is the base of the `ppo` record's asynchronous form (`AsyncPPOConfig`): `AsyncGRPOConfig` with
the synchronous config's critic fields (`CriticArguments`, checked by the same `check_critic_fields`). Refused by
name: `shared_backbone` (a value head on the policy would need the policy's hidden states from TRL's fused log-prob
forward), DeepSpeed and FSDP (the critic is a plain replica per process, averaged by hand; the synchronous trainer's
second DeepSpeed engine is not built here), fp16 (its loss scaler unscales the policy's optimizer only), a loaded
value model (it must be loaded with tree attention), and an estimator that does not read `values`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from transformers import TrainerCallback, get_scheduler
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint
from trl.experimental.async_grpo.async_grpo_trainer import TREE_ATTENTION

from ...losses.value import clipped_value_loss, explained_variance
from ..core.arguments import CriticArguments
from ..critic.config import check_critic_fields
from ..critic.value_model import check_value_vocabulary, load_value_model
from .config import AsyncGRPOConfig
from .packed_rows import PackedRow

CRITIC_DIR = "value_model"  # the critic's weights in a checkpoint and in the output (the synchronous trainer's name)
CRITIC_STATE_FILE = "critic_state.pt"  # its optimizer and scheduler in a checkpoint
CRITIC_WINDOW_KEYS = ("window_values", "window_returns")  # what the window pass stores on each micro-batch: V_old, R


@dataclass
class AsyncCriticConfig(CriticArguments, AsyncGRPOConfig):
    """The base of critic PPO's asynchronous config: `AsyncGRPOConfig` with the critic (module docstring)."""

    has_critic: ClassVar[bool] = True
    _VALID_DICT_FIELDS: ClassVar[list[str]] = [*AsyncGRPOConfig._VALID_DICT_FIELDS, "value_model_init_kwargs"]

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_critic_fields(self)
        if self.shared_backbone:
            raise ValueError(
                f"{owner}: shared_backbone=True puts a value head on the policy's backbone, which the asynchronous "
                "trainer does not train (its loss forward is TRL's fused log-prob head, without the hidden states); "
                "use a separate value model (shared_backbone=False) or train synchronously"
            )
        if self.fp16:
            raise ValueError(
                f"{owner}: fp16 mixed precision (a loss scaler for the policy's optimizer only) is not supported "
                "with a critic; use bf16=True"
            )
        super().__post_init__()
        estimator = self.components.advantage_fn
        if "values" not in estimator.needed_inputs():
            raise ValueError(
                f"{owner}: advantage_fn={self.advantage_fn_name!r} does not read the critic's values; critic PPO "
                "trains a value model for an estimator that does (`ppo`: GAE)"
            )

    @property
    def critic_lr(self) -> float:
        """The critic optimizer's learning rate (`critic_learning_rate`, else `learning_rate`)."""
        return self.learning_rate if self.critic_learning_rate is None else self.critic_learning_rate


class PackedCritic:
    """The value model forwarded on TRL's packed rows, its optimizer and scheduler (module docstring)."""

    def __init__(self, owner: str, model: torch.nn.Module, args: AsyncCriticConfig, accelerator: Any):
        self.owner, self.model, self.args, self.accelerator = owner, model, args, accelerator
        trained = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            trained,
            lr=args.critic_lr,
            betas=(args.adam_beta1, args.adam_beta2),
            eps=args.adam_epsilon,
            weight_decay=args.weight_decay,
        )
        self.scheduler = get_scheduler(
            args.lr_scheduler_type,
            self.optimizer,
            num_warmup_steps=args.get_warmup_steps(args.max_steps),
            num_training_steps=args.max_steps,
        )
        self.steps = 0  # the critic's optimizer steps (one per optimizer step of the policy)

    @classmethod
    def load(cls, owner: str, trainer: Any, source: Any, args: AsyncCriticConfig) -> PackedCritic:
        """Build the critic from `source` (a path or Hub id; default the config's `value_model_name_or_path`, else
        the policy's checkpoint with a new scalar head) for tree attention, on the trainer's device.

        Raises:
            TypeError: `source` is a loaded model.
            ValueError: DeepSpeed or FSDP; a value model that cannot be built, or whose vocabulary differs from the
                policy's.
        """
        for enabled, name in ((trainer.is_deepspeed_enabled, "DeepSpeed"), (trainer.is_fsdp_enabled, "FSDP")):
            if enabled:
                raise ValueError(
                    f"{owner}: {name} is not supported with a critic asynchronously (the critic trains as a plain "
                    "replica on each process beside the policy, its gradient averaged by hand; it is not sharded nor "
                    "made an engine); train with DDP, or critic PPO synchronously (PPOTrainer: DeepSpeed ZeRO-2/3)"
                )
        if not isinstance(source, str | os.PathLike):
            raise TypeError(
                f"{owner}: value_model must be a path or Hub id for asynchronous training (got "
                f"{type(source).__name__}): the critic is loaded with TRL's tree attention to score the packed rows"
            )
        source = os.fspath(source)
        init = dict(args.value_model_init_kwargs or {})
        init.setdefault("dtype", args.dtype)
        init.setdefault("trust_remote_code", args.trust_remote_code)
        model = load_value_model(owner, source, {**init, "attn_implementation": TREE_ATTENTION})
        check_value_vocabulary(owner, model, trainer.model)
        if args.activation_checkpointing:  # as the policy: recompute the critic's activations in the backward pass
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs)
        model.train()
        return cls(owner, model.to(trainer.accelerator.device), args, trainer.accelerator)

    # ---- values ------------------------------------------------------------------------------------------------

    def values(self, row: PackedRow) -> torch.Tensor:
        """V of the row's trained tokens `[M]` (float32): the critic's output at each token's `token_index`, the
        packed position that predicts it (the state the token is chosen in)."""
        kwargs = {key: value for key, value in row.forward_kwargs.items() if key != "shift_labels"}
        logits = self.model(**kwargs).logits
        if logits.size(-1) != 1:
            raise ValueError(
                f"{self.owner}: the value model returns {logits.size(-1)} outputs per token; it needs one (a token "
                "classifier with num_labels=1)"
            )
        return logits[0, row.token_index, 0].float()

    def window_values(self, window: Any, rows: list[PackedRow]) -> torch.Tensor:
        """V_old `[N, T]` over the optimizer window (`WindowGather`), without gradients."""
        with torch.no_grad(), self.accelerator.autocast():
            return window.terms([self.values(row) for row in rows])

    def put_targets(
        self,
        window: Any,
        batches: list[dict[str, Any]],
        values: torch.Tensor,
        returns: torch.Tensor | None,
        mask: torch.Tensor,
        rewards: torch.Tensor,
        metrics: dict[str, Any],
    ) -> None:
        """Store V_old and the returns `[N, T]` on each micro-batch (`window_values`, `window_returns`) and add the
        window's critic metrics (verl's) over the trained tokens (`mask`) of the scored samples (finite `rewards`);
        on an unscorable sample's tokens the return is V_old itself, so the value loss there has no gradient."""
        if returns is None:
            raise RuntimeError(f"{self.owner}: the advantage estimator returned no returns (value targets)")
        used = mask & torch.isfinite(rewards).unsqueeze(1)
        returns = torch.where(used, returns.to(values.dtype), values)
        window.put(batches, "window_values", values)
        window.put(batches, "window_returns", returns)
        if bool(used.any()):
            metrics["critic/returns"] = returns[used].mean()
            metrics["critic/values"] = values[used].mean()
            metrics["critic/explained_variance"] = explained_variance(values, returns, used)

    # ---- training ----------------------------------------------------------------------------------------------

    def value_term(self, mode: str, batch: Any, window: dict[str, Any], loss: torch.Tensor, metrics: dict) -> Any:
        """`LossStep`'s trainer term: in training the micro-batch's share of the window's clipped value loss, added
        to the loss (its gradient reaches the critic only); the policy's terms are 0 during `critic_warmup_steps`."""
        if mode != "train":
            return loss
        source = batch.source
        if "window_values" not in source or "window_returns" not in source:
            raise RuntimeError(f"{self.owner}: the micro-batch has no critic targets (its window was not prepared)")
        row: PackedRow = source["row"]
        vpreds = row.grid().scatter(self.values(row))
        value_loss, value_metrics = clipped_value_loss(
            vpreds,
            source["window_values"].to(vpreds.dtype),
            source["window_returns"].to(vpreds.dtype),
            batch.mask.bool(),
            cliprange_value=self.args.cliprange_value,
            loss_agg_mode="token-mean",
            **window,
        )
        metrics.update(value_metrics)
        if self.steps < self.args.critic_warmup_steps:
            loss = loss * 0.0  # the critic learns first (the graph stays, so every process runs the same ops)
        return loss + value_loss

    def step(self) -> None:
        """The critic's optimizer step: its gradient averaged over processes (as DDP averages the policy's),
        clipped at `max_grad_norm`, then its optimizer and scheduler."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.accelerator.num_processes > 1:
            for p in params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                torch.distributed.all_reduce(p.grad, op=torch.distributed.ReduceOp.AVG)
        if self.args.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(params, self.args.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1

    # ---- checkpoints -------------------------------------------------------------------------------------------

    def save(self, folder: str, with_optimizer: bool = True) -> None:
        """The critic's weights under `folder/value_model`, with its optimizer, scheduler and step count (main
        process)."""
        if not self.accelerator.is_main_process:
            return
        self.model.save_pretrained(os.path.join(folder, CRITIC_DIR), safe_serialization=True)
        if with_optimizer:
            state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}
            torch.save({**state, "steps": self.steps}, os.path.join(folder, CRITIC_STATE_FILE))

    def resume(self, checkpoint: str | bool | None, output_dir: str) -> None:
        """Restore the critic from `checkpoint` (`True`: the last one of `output_dir`), if any.

        Raises:
            ValueError: The checkpoint has no critic (written by another trainer).
        """
        if checkpoint is True:
            checkpoint = get_last_checkpoint(output_dir)
        if not checkpoint:
            return
        weights, state = os.path.join(checkpoint, CRITIC_DIR), os.path.join(checkpoint, CRITIC_STATE_FILE)
        if not (os.path.isdir(weights) and os.path.isfile(state)):
            raise ValueError(
                f"{self.owner}: {checkpoint} has no {CRITIC_DIR}/ and {CRITIC_STATE_FILE} (a checkpoint of another "
                "trainer?); critic PPO resumes its value model with the policy"
            )
        from safetensors.torch import load_file

        self.model.load_state_dict(load_file(os.path.join(weights, "model.safetensors"), device="cpu"))
        saved = torch.load(state, map_location=self.accelerator.device, weights_only=True)
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        self.steps = int(saved["steps"])


def build_critic(owner: str, trainer: Any, model: str, value_model: Any) -> PackedCritic | None:
    """The trainer's critic with a critic config (`value_model`, else the config's `value_model_name_or_path`, else
    the policy's checkpoint `model` with a new scalar head), its optimizer stepped with the policy's (`CriticStep`);
    None without one.

    Raises:
        ValueError: `value_model` without a critic config; `PackedCritic.load`'s errors.
    """
    args = trainer.args
    if not getattr(args, "has_critic", False):
        if value_model is not None:
            raise ValueError(
                f"{owner}: value_model is given, but {type(args).__name__} trains no critic; use critic PPO's "
                "asynchronous config (AsyncPPOConfig)"
            )
        return None
    source = value_model if value_model is not None else args.value_model_name_or_path or model
    critic = PackedCritic.load(owner, trainer, source, args)
    trainer.add_callback(CriticStep(critic))
    return critic


class CriticStep(TrainerCallback):
    """Steps the critic's optimizer right after the policy's (`on_optimizer_step`), saves it into each checkpoint
    (`on_save`) and beside the final model (`on_train_end`)."""

    def __init__(self, critic: PackedCritic):
        self.critic = critic

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.critic.step()

    def on_save(self, args, state, control, **kwargs):
        self.critic.save(os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"))

    def on_train_end(self, args, state, control, **kwargs):
        self.critic.save(args.output_dir, with_optimizer=False)


__all__ = ["CRITIC_WINDOW_KEYS", "AsyncCriticConfig", "CriticStep", "PackedCritic", "build_critic"]
