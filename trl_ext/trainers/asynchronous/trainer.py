"""`AsyncGRPOTrainer`: TRL's experimental asynchronous GRPO trainer with any trl_ext loss and group estimator.

TRL 1.16's `trl.experimental.async_grpo.AsyncGRPOTrainer` decouples generation from training: a rollout worker
streams scored samples into a queue while the trainer trains on them, each up to `max_staleness` policy versions old
(TRL drops older ones), and the weights go back to the worker every `weight_sync_steps`. Its samples arrive packed
into prefix-tree rows (one per process), and its loss is PPO's clip against the sampler's log-probs μ with GRPO
advantages computed in the worker.

This subclass changes what is trained and nothing of how samples flow:

* **the loss** (`compute_loss`, the one override of the training step): TRL's forward on the packed row, unpacked into
  `[B, T]` (`packed_rows`), then the loss step every RL trainer calls (`core/loss_step.py`): the policy loss, the
  KL term (a frozen reference forwarded on the same row when `beta` > 0), the entropy bonus and TRL's options around
  them, normalized over the optimizer window (`core/window.py`);
* **the advantage**: the config's estimator, on each complete group, in the worker (`trl_ext.async_rollout`);
* **staleness**: μ is the sampler (`old_logprob`); `decoupled_ppo` gets π_prox (`prox_logp_method`); verl's rollout
  correction (`rollout_is` / `rollout_rs`) weighs and rejects against μ, the loss's π_old then being the step's own
  weights (verl's recomputed old log-probs: its correction is a decoupled objective); a loss that declares
  `window_selected` (M2PO) gets its selection made over the whole window. The last two take one forward pass without
  gradients over the window before its first micro-batch (`_prepare_window`), so that their batch statistics, and the
  token count that normalizes the loss, are the window's;
* **the generator**: `rollout_backend="transformers"` builds trl_ext's offline `TransformersRolloutWorker`; attention
  on the packed rows runs without flash-attention where its kernel is missing (`tree_attention`);
* **resuming** with that worker (`train`, `resume`): a checkpoint also holds the worker's position (one past the last
  group `training_step` trained) and the policy version, and `train(resume_from_checkpoint=...)` restores both.

Bad input stops early: a non-path model, a reward function that cannot be pickled into the worker's process, an
estimator the worker cannot run, a malformed sample (`RolloutSampleCheck`), a failed weight sync (named, with the
version).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from accelerate.utils import broadcast_object_list
from transformers import AutoTokenizer
from trl.experimental.async_grpo import AsyncGRPOTrainer as _TRLAsyncGRPOTrainer
from trl.experimental.async_grpo import async_grpo_trainer as _trl_async
from trl.trainer.utils import add_fused_lm_head, create_model_from_path

from ...async_rollout import GroupScorer, TransformersRolloutWorker
from ...async_rollout.episodes import environment_rewards
from ...async_rollout.trl_loop import refuse_worker_made_inputs, use_trl_ext_scoring
from ...components import MAX, MEAN
from ...losses.decoupled_ppo import loglinear_proximal_logprob
from ...losses.value import VALUE_LOSS_METRICS
from ..core.loss_step import LossStep, StepBatch, step_part
from ..core.trl_adapter import CountWindowInLoop
from ..distill.trainer import no_task_reward, teacher_argument
from .config import AsyncGRPOConfig
from .critic import CRITIC_WINDOW_KEYS, build_critic
from .distill import PackedTeacher
from .mix import ExpertRows
from .packed_rows import PackedRow
from .resume import RolloutPosition, RolloutStateSaver, read_rollout_state
from .samples import HEALTH_POLL_S, VersionedCollator, checked_rollout_queue, expert_flags, sample_values
from .tree_attention import use_tree_attention
from .turn_window import TURN_KEYS, row_turns, turn_count, window_turn_estimate
from .window_pass import WindowGather, window_estimate


class AsyncGRPOTrainer(CountWindowInLoop, _TRLAsyncGRPOTrainer):
    """TRL's `AsyncGRPOTrainer` training the config's trl_ext loss and estimator (see the module docstring).

    Args:
        model (str): The model's path or Hub id: TRL's asynchronous trainer loads it itself, and so does the worker.
        reward_funcs: Callables (pickled into the worker's process: module-level functions, `functools.partial`
            or callable instances), as TRL's.
        args (AsyncGRPOConfig | None): The config; default `AsyncGRPOConfig` in `<model>-AsyncGRPO`.
        train_dataset: The prompts (a `prompt` column), as TRL's; the worker cycles them.
        eval_dataset: Must be None: TRL's asynchronous trainer does not evaluate.
        processing_class: The tokenizer, as TRL's (loaded from `model` when None).
        callbacks: As TRL's.
        optimizers: As TRL's.
        peft_config: As TRL's (LoRA: TRL merges the adapter into the weights it sends).
        tools: As TRL's (the vLLM worker's multi-turn tool loop).
        environment_factory: As TRL's (the vLLM worker's environments).
        rollout_worker: TRL's `RolloutWorkerProtocol`; default: TRL's vLLM worker, or with
            `rollout_backend="transformers"` trl_ext's `TransformersRolloutWorker`.
        weight_transfer: TRL's `WeightTransferProtocol`; default: TRL's NCCL transfer, or the transformers worker's
            `LocalWeightTransfer`.
        quantization_config: How the model is loaded (into `args.model_init_kwargs`), as the training scripts pass it.
        teacher_model: With a distillation config (`AsyncDistillConfig`): the teacher's path or Hub id (default: the
            config's `teacher_model_name_or_path`), forwarded on the packed rows (`asynchronous/distill.py`);
            `reward_funcs` is then optional (pure distillation), as in the synchronous distillation trainer.
        expert_dataset: With a MIX config (`AsyncMIXFamilyConfig`): the demonstrations joined to each micro-batch
            (`asynchronous/mix.py`), in the synchronous MIX trainer's formats; required when `expert_data_ratio` > 0.
        value_model: With critic PPO's config (`AsyncPPOConfig`): the value model's path or Hub id (default: the
            config's `value_model_name_or_path`, else the policy's checkpoint with a new scalar head; `critic.py`).
    """

    config_class: ClassVar[type] = AsyncGRPOConfig
    algorithm: ClassVar[str] = "async_grpo"
    policy_loss_fn = step_part("policy_loss_fn")
    kl_fn = step_part("kl_fn")
    entropy_fn = step_part("entropy_fn")
    #: the trainer's own metrics besides the loss's: the samples' staleness when trained (TRL's `sample/staleness_*`
    #: are taken when a sample leaves the queue, one micro-batch before it is trained: accelerate's dispatcher
    #: collates the next micro-batch ahead)
    trainer_metrics: ClassVar[dict[str, str]] = {
        **CountWindowInLoop.trainer_metrics,
        "trained_staleness_mean": MEAN,
        "trained_staleness_max": MAX,
        **VALUE_LOSS_METRICS,  # critic PPO's value loss (`asynchronous/critic.py`)
    }

    def __init__(
        self,
        model: str,
        reward_funcs: Callable | list[Callable] | None = None,
        args: AsyncGRPOConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        callbacks=None,
        optimizers=(None, None),
        peft_config=None,
        tools=None,
        environment_factory=None,
        rollout_worker=None,
        weight_transfer=None,
        quantization_config=None,
        teacher_model=None,
        expert_dataset=None,
        value_model=None,
    ):
        owner = type(self).__name__
        if eval_dataset is not None:
            raise ValueError(
                f"{owner}: eval_dataset is given, but TRL's asynchronous trainer does not evaluate (its samples come "
                "from the rollout worker); leave eval_dataset None (eval_strategy='no')"
            )
        if not isinstance(model, str):
            raise TypeError(
                f"{owner}: model must be a path or Hub id (got {type(model).__name__}): TRL's asynchronous trainer "
                "loads the model itself, and the rollout worker loads the same one; save the model and pass its path"
            )
        if args is None:
            args = AsyncGRPOConfig(output_dir=f"{model.rstrip('/').split('/')[-1]}-AsyncGRPO")
        elif not isinstance(args, AsyncGRPOConfig):
            raise TypeError(
                f"{owner}: args must be a trl_ext.AsyncGRPOConfig (got {type(args).__name__}); it carries the loss "
                "and the estimator"
            )
        if quantization_config is not None:  # as the training scripts pass it: how the model is loaded
            args.model_init_kwargs = {**(args.model_init_kwargs or {}), "quantization_config": quantization_config}
        reward_funcs = (
            [] if reward_funcs is None else list(reward_funcs) if isinstance(reward_funcs, list) else [reward_funcs]
        )
        teacher = None
        if args.has_teacher:
            teacher = teacher_argument(owner, model, teacher_model, args)
            if not reward_funcs:
                if args.reward_weight > 0:
                    raise ValueError(
                        f"{owner}: reward_weight={args.reward_weight} blends task rewards into the advantages, but no "
                        "reward_funcs were given; pass reward functions or set reward_weight=0 (pure distillation)"
                    )
                reward_funcs = [no_task_reward]
        elif teacher_model is not None:
            raise ValueError(
                f"{owner}: teacher_model is given, but {type(args).__name__} does not distill; use a distillation "
                "algorithm's asynchronous config (AsyncOnPolicyDistillConfig, AsyncJSDConfig)"
            )
        if args.has_experts and args.expert_data_ratio > 0 and expert_dataset is None:
            raise ValueError(
                f"{owner}: expert_dataset is required: expert_data_ratio={args.expert_data_ratio} joins expert "
                "demonstrations to every micro-batch (pass expert_dataset=..., or set expert_data_ratio=0)"
            )
        if expert_dataset is not None and not args.has_experts:
            raise ValueError(
                f"{owner}: expert_dataset is given, but {type(args).__name__} does not mix demonstrations in; use a "
                "MIX algorithm's asynchronous config (AsyncMIXConfig, AsyncMIXCHORDConfig)"
            )
        if environment_factory is not None and args.rollout_backend == "transformers" and rollout_worker is None:
            reward_funcs += environment_rewards(owner, environment_factory)  # TRL's: a `get_reward` is one more source
        scorer = GroupScorer(
            reward_funcs,
            advantage_fn=args.advantage_fn_name,
            advantage_fn_args=args.advantage_kwargs(),
            seed=args.seed,
            drop_uniform_groups=args.dynamic_sampling,
            overlong_buffer=args.overlong_buffer,
            overlong_penalty_factor=args.overlong_penalty_factor,
            max_completion_length=args.max_completion_length,
            teacher=args.has_teacher,
            critic=args.has_critic,
            reward_weight=getattr(args, "reward_weight", 0.0),
            reward_advantage_fn=getattr(args, "reward_advantage_fn", "grpo"),
        )
        scorer.check_picklable()  # before anything loads: TRL's worker and ours pickle them into a child process
        refuse_worker_made_inputs(owner, scorer, rollout_worker, args.rollout_backend)  # ReMax, agents: ours only
        self.group_scorer = scorer  # what the worker scores with (rewards, DAPO's shaping, the estimator)
        if rollout_worker is None and args.rollout_backend == "transformers":
            if processing_class is None:
                processing_class = AutoTokenizer.from_pretrained(model, padding_side="left")
            rollout_worker = TransformersRolloutWorker(
                model_path=model,
                dataset=train_dataset,
                processing_class=processing_class,
                scorer=scorer,
                tools=tools,
                environment_factory=environment_factory,
                max_tool_calling_iterations=args.max_tool_calling_iterations,
                **_worker_settings(args),
            )
            weight_transfer = weight_transfer or rollout_worker.weight_transfer
        self.loss_step = LossStep(self, args.components.for_trainer(), args, trainer_terms=self._staleness)
        self.beta = args.beta
        # a loss that selects over the whole window (M2PO) gets the selection made there (`_prepare_window`), and so
        # does a token-level estimator its advantages (`window_pass`)
        self._selects_over_window = "window_selected" in self.policy_loss_fn.inputs()
        self.window_estimator = scorer.estimator if scorer.estimates_in_window else None
        super().__init__(
            model=model,
            reward_funcs=reward_funcs,
            args=args,
            train_dataset=train_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
            optimizers=optimizers,
            peft_config=peft_config,
            tools=tools,
            environment_factory=environment_factory,
            rollout_worker=rollout_worker,
            weight_transfer=weight_transfer,
        )
        self.attention_path = use_tree_attention(self.accelerator.device)
        if self.accelerator.is_main_process:
            use_trl_ext_scoring(self.rollout_worker, scorer)  # TRL's vLLM worker: our estimator in its loop
            self.rollout_queue = checked_rollout_queue(
                self.rollout_queue, self.rollout_worker, lambda: self.model_version
            )
        self.ref_model = self._reference_model(model) if self.beta != 0 else None
        self.expert_rows = None
        if args.has_experts and args.expert_data_ratio > 0:
            self.expert_rows = ExpertRows(
                owner, expert_dataset, self.processing_class, args.max_completion_length, args.seed,
                args.expert_rows_per_device, lambda: self.model_version, args.chat_template_kwargs,
            )  # fmt: skip
        self.teacher = None
        if teacher is not None:  # after TRL's init: the tokenizer and the device are known
            self.teacher = PackedTeacher.load(
                owner, teacher, args, self.processing_class, self.accelerator.device, self.temperature
            )
        self.critic = build_critic(owner, self, model, value_model)  # critic PPO's value model (`critic.py`)
        self.correction = args.build_rollout_correction()
        self.rollout_position = RolloutPosition()  # the groups trained: the worker's position a checkpoint saves
        if self.accelerator.is_main_process and hasattr(self.rollout_worker, "start_at"):  # the offline worker
            size = len(train_dataset)
            extra = self._expert_position if self.expert_rows is not None else None
            saver = RolloutStateSaver(self.rollout_position, lambda: self.model_version, args.seed, size, extra)
            self.add_callback(saver)

    # ---- the pieces around TRL's loop -------------------------------------------------------------------------

    def _reference_model(self, path: str) -> torch.nn.Module:
        """A frozen copy of the initial policy, forwarded on the same packed rows (the KL term, `beta` > 0)."""
        kwargs = dict(self.args.model_init_kwargs or {})
        kwargs.setdefault("dtype", self.args.dtype)
        ref = create_model_from_path(path, device_map=None, attn_implementation=_trl_async.TREE_ATTENTION, **kwargs)
        add_fused_lm_head(ref, temperature=self.temperature, outputs=("log_probs",))
        ref.requires_grad_(False).eval()
        return ref.to(self.accelerator.device)

    def add_callback(self, callback) -> None:
        """TRL adds two `StepIntervalCallback`s on purpose (the weight sync and the step metrics), and transformers
        warns about the second as a duplicate; it is added without that notice."""
        handler = self.callback_handler
        if isinstance(callback, _trl_async.StepIntervalCallback) and any(
            isinstance(c, _trl_async.StepIntervalCallback) for c in handler.callbacks
        ):
            handler.callbacks.append(callback)
            return
        super().add_callback(callback)

    def train(self, resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None, **kwargs):
        """HF's `train`; resuming with the offline worker also restores the rollout (`resume`): the policy version
        the checkpoint's weights were published as (the first sync sends the next one) and the worker's dataset
        position (the group after the last one trained)."""
        worker = self.rollout_worker if self.accelerator.is_main_process else None
        if resume_from_checkpoint and hasattr(worker, "start_at"):
            state = read_rollout_state(
                resume_from_checkpoint, self.args.output_dir, self.args.seed, len(self.train_dataset)
            )
            if state is not None:
                self.model_version = state["model_version"]
                worker.update_model_version(self.model_version)
                worker.start_at(state["next_group_id"])
                self.rollout_position.restart(state["next_group_id"], state["groups_trained"])
                self._groups_before_resume = state["groups_trained"]  # TRL's epoch-driven stop counts on
                if self.expert_rows is not None and "expert_rows_drawn" in state:
                    self.expert_rows.stream.position = int(state["expert_rows_drawn"])
        if self.critic is not None:  # critic PPO: its weights, optimizer and scheduler
            self.critic.resume(resume_from_checkpoint, self.args.output_dir)
        return super().train(resume_from_checkpoint, trial, ignore_keys_for_eval, **kwargs)

    def _expert_position(self) -> dict[str, int]:
        """MIX's demonstration stream at the last micro-batch trained (one collated ahead drew its own)."""
        ahead = self.rollout_position.pending * self.expert_rows.per_row * self.accelerator.num_processes
        return {"expert_rows_drawn": self.expert_rows.stream.position - ahead}

    def training_step(self, model, inputs, num_items_in_batch=None):
        """TRL's step on one micro-batch, whose groups then count as trained (`rollout_position`)."""
        loss = super().training_step(model, inputs, num_items_in_batch)
        self.rollout_position.trained()
        return loss

    def get_train_dataloader(self):
        """TRL's dataloader; its collator also packs each sample's policy version (`behave_version`) and records
        each micro-batch's groups (`rollout_position`), and its queue dataset asks the worker's health every second
        while it waits (`async_samples`)."""
        loader = super().get_train_dataloader()
        torch_loader = getattr(loader, "base_dataloader", loader)  # accelerate's dispatcher wraps a torch DataLoader
        collator = VersionedCollator.from_trl(torch_loader.collate_fn)
        collator.expert_rows = self.expert_rows  # MIX: the demonstrations join each micro-batch
        collator.turn_layout = self.group_scorer.per_turn or self.args.turns_as_samples  # episodes' model turns
        torch_loader.collate_fn = self.rollout_position.recording(collator)
        queue = getattr(self, "_rollout_dataset", None)  # the main process's
        if queue is not None:
            queue.poll_interval_s = HEALTH_POLL_S
        return loader

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        for name in ("behave_version", "sample_group", "sample_reward", "sample_baseline", "sample_expert", *TURN_KEYS):
            if name not in self._signature_columns:
                self._signature_columns.append(name)

    def _sync_weight(self):
        """TRL's weight sync; a failure names the transfer and the version it was sending. TRL counts the versions
        on the main process only; every process gets its count (the loss reads it: staleness, AReaL's proximal
        policy)."""
        try:
            super()._sync_weight()
        except Exception as error:
            transfer = type(getattr(self, "weight_transfer", None)).__name__
            raise RuntimeError(
                f"{type(self).__name__}: the weight sync to version {self.model_version + 1} failed in {transfer}: "
                f"{type(error).__name__}: {error}"
            ) from error
        if self.accelerator.num_processes > 1:
            self.model_version = broadcast_object_list([self.model_version], from_process=0)[0]

    # ---- the optimizer window ---------------------------------------------------------------------------------

    def _get_num_items_in_batch(self, batch_samples: list, device: torch.device) -> None:
        """The window's micro-batches, before the first one runs: the pass that needs the whole window (rollout
        correction, M2PO's selection), then the window's counts (`count_window`)."""
        self._prepare_window(batch_samples)
        return super()._get_num_items_in_batch(batch_samples, device)

    def micro_batch_counts(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Loss tokens (without the window's rejected ones) and samples (model turns with `turns_as_samples`) of this
        process's row."""
        selected = batch["token_index"] >= 0
        keep = batch.get("window_keep")
        tokens = keep[selected].sum() if keep is not None else selected.sum()
        segments = batch["segment_id"][selected]
        samples = segments.max() + 1 if segments.numel() else torch.zeros((), device=segments.device)
        rows = turn_count(batch, int(samples)) if self.args.turns_as_samples else samples  # each turn a sample
        counts = {"global_valid_toks": tokens.float(), "global_valid_seqs": rows.float().reshape(())}
        if self.args.has_experts:  # MIX: each part is normalized over its own rows of the window
            expert = expert_flags(batch, int(samples))
            counts["expert_valid_toks"] = expert[segments].sum().float()
            counts["expert_valid_seqs"] = expert.sum().float()
        return counts

    def _prepare_window(self, batches: list[dict[str, Any]]) -> None:
        """Decide over the whole window (all micro-batches, all processes; `window_pass`) what needs it: a token-level
        estimator's advantages (`window_estimate`), then, from π at the start of the optimizer step, verl's rollout
        correction against μ (its weights, `window_weights`, and kept tokens, `window_keep`: batch normalization and
        rejection see the whole batch, as verl's) and M2PO's second-moment selection (`window_selected`). Each is
        stored on its micro-batch, aligned with its `token_index`. The correction and the selection take one forward
        pass without gradients per micro-batch; nothing runs when none of them is on."""
        needs_policy = self.correction.enabled or self._selects_over_window
        if not (needs_policy or self.window_estimator is not None):
            return
        rows = [PackedRow.from_inputs(batch) for batch in batches]
        window = WindowGather(self.accelerator, [row.grid() for row in rows])
        grids = window.grids
        mask = window.tokens([grid.mask.float() for grid in grids]).bool()
        experts = None
        if self.args.has_experts:  # MIX's demonstrations: no part in the estimates, corrections and selections
            flags = [expert_flags(b, g.num_samples)[g.row].float() for b, g in zip(batches, grids, strict=True)]
            experts = window.terms(flags).bool()
            mask = mask & ~experts
        metrics: dict[str, float] = {}
        if self.window_estimator is not None:
            names = ["sample_reward", "sample_group"] + (
                ["sample_baseline"] if self.group_scorer.needs_greedy_baseline else []
            )
            per_sample = [torch.stack([sample_values(b, name, g) for name in names], 1)
                          for b, g in zip(batches, grids, strict=True)]  # fmt: skip
            rewards, groups, *baselines = window.samples(per_sample).unbind(1)
            if self.group_scorer.per_turn:  # multi-turn episodes: one row per model turn (`turn_window`)
                advantages, stats = window_turn_estimate(self.window_estimator, window, batches, rewards, groups, mask)
                metrics.update(stats)
            else:
                advantages = self._window_estimate(window, batches, rows, rewards, groups, baselines, mask, metrics)
            window.put(batches, "window_advantages", advantages)
        elif self._selects_over_window:
            advantages = window.terms([row.advantages.float() for row in rows])
        if needs_policy:
            with torch.no_grad():
                logps = []
                for row, grid in zip(rows, grids, strict=True):
                    out = self.model(**row.forward_kwargs, fused_lm_head=True)
                    logps.append(grid.scatter(out.log_probs.flatten()[row.token_index].float()))
            old = window.tokens(logps)
            sampler = window.terms([row.old_log_probs.float() for row in rows])
            keep = mask
            if self.correction.enabled:
                weights, kept, stats = self.correction(old, sampler, mask)
                metrics.update(stats)
                if weights is not None:
                    window.put(
                        batches, "window_weights", weights if experts is None else weights.masked_fill(experts, 1)
                    )
                if self.correction.rs_bounds:
                    keep = mask & kept
                    window.put(batches, "window_keep", keep if experts is None else keep | experts)
            if self._selects_over_window:  # M2PO's log-ratio is π against the sampler μ, over the kept tokens
                selected, stats = self.policy_loss_fn.select_over_window(old - sampler, advantages, keep)
                metrics.update(stats)
                window.put(batches, "window_selected", selected)
        if metrics:
            values = torch.stack([torch.as_tensor(v, dtype=torch.float32) for v in metrics.values()]).tolist()
            for name, value in zip(metrics, values, strict=True):
                self.metric_log("train")[name].append(value)

    def _window_estimate(self, window, batches, rows, rewards, groups, baselines, mask, metrics) -> torch.Tensor:
        """A token-level estimator's advantages `[N, T]` over the window (`window_estimate`); critic PPO's value
        targets stored on the micro-batches too."""
        inputs, base = self._window_estimator_inputs(window, rows, metrics)
        if baselines:  # ReMax: each sample's greedy baseline `[N]`, made in the worker
            inputs["reward_baselines"] = baselines[0]
        advantages, returns, stats = window_estimate(self.window_estimator, rewards, groups.long(), mask, inputs, base)
        if self.critic is not None:  # critic PPO: V_old and the returns, the value loss's (`critic.py`)
            self.critic.put_targets(window, batches, inputs["values"], returns, mask, rewards, metrics)
        metrics.update(stats)
        return advantages

    def _window_estimator_inputs(
        self, window: WindowGather, rows: list[PackedRow], metrics: dict[str, float]
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """What the window estimator declares beyond the masks, over the window: μ (`old_logprob`) and, with a
        teacher, its log-probs and the tokens it can score (its reverse-KL estimate log μ − log π_teacher logged as
        `kl/mean`, as the synchronous distillation trainer logs it); and the task term the worker stamped
        (distillation's reward_weight·Â), when there is one."""
        declared, inputs = self.window_estimator.inputs(), {}
        if "old_logprob" in declared or self.teacher is not None:
            inputs["old_logprob"] = window.terms([row.old_log_probs.float() for row in rows])
        if self.teacher is not None:
            scored = [self.teacher.log_probs(row) for row in rows]
            inputs["teacher_logprob"] = window.terms([logps for logps, _ in scored])
            valid = window.terms([ok.float() for _, ok in scored]).bool()
            inputs["teacher_valid_mask"] = valid
            kl = torch.where(valid, inputs["old_logprob"] - inputs["teacher_logprob"], 0.0)
            metrics["kl/mean"] = kl.sum() / valid.sum().clamp(min=1)
        if self.critic is not None:  # critic PPO: the current critic's values on the packed rows
            inputs["values"] = self.critic.window_values(window, rows)
        base = None
        if self.group_scorer.reward_weight > 0:
            base = window.terms([row.advantages.float() for row in rows])
        return inputs, base

    # ---- the loss ---------------------------------------------------------------------------------------------

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """TRL's forward on the packed row, unpacked to `[B, T]`, then the loss step (`core.loss_step`)."""
        mode = "train" if self.model.training else "eval"
        row = PackedRow.from_inputs(inputs)
        grid = row.grid()
        terms = inputs["token_index"] >= 0
        extras = {name: grid.scatter(inputs[name][terms]) for name in _WINDOW_KEYS if name in inputs}

        forward_start = _trl_async.time.time()
        router = {"output_router_logits": True} if self.aux_loss_enabled else {}
        outputs = model(**row.forward_kwargs, fused_lm_head=True, **router)
        logps = grid.scatter(outputs.log_probs.flatten()[row.token_index])
        entropies = grid.scatter(outputs.entropy.flatten()[row.token_index])
        self._last_forward_time_s = _trl_async.time.time() - forward_start

        mask = grid.mask & extras["window_keep"] if "window_keep" in extras else grid.mask
        sampler = grid.scatter(row.old_log_probs.to(logps.dtype))  # μ
        # verl's rollout correction: π_old is the trained policy, recomputed; μ enters through the correction
        old = logps.detach() if self.correction.enabled else sampler
        ratio = extras.get("window_weights")
        ref = None
        if self.ref_model is not None:
            with torch.no_grad():
                ref_out = self.ref_model(**row.forward_kwargs, fused_lm_head=True)
            ref = grid.scatter(ref_out.log_probs.flatten()[row.token_index].to(logps.dtype))
        reads = self.policy_loss_fn.inputs()
        batch = StepBatch(
            logprob=logps,
            entropy=entropies,
            mask=mask,
            advantages=extras.get("window_advantages", grid.scatter(row.advantages)).to(logps.dtype),
            old_logprob=old,
            sampling_logprob=sampler,
            ref_logprob=ref,
            importance_sampling_ratio=None if ratio is None else torch.where(mask, ratio.to(logps.dtype), 1.0),
            aux_loss=outputs.aux_loss if self.aux_loss_enabled else None,
            loss_inputs={
                "prox_logprob": self._proximal(logps, old, row) if "prox_logprob" in reads else None,
                "window_selected": extras.get("window_selected"),
                "expert_mask": expert_flags(inputs, grid.num_samples) if self.args.has_experts else None,
            },
            source={"behave_version": row.behave_version, "row": row, **extras},
            turns=row_turns(inputs, grid.num_samples, grid.width) if self.args.turns_as_samples else None,
        )
        loss = self.loss_step(batch, self.loss_counts(inputs, mode), mode)
        self.beta = self.loss_step.beta
        self._account_step(inputs)
        return loss

    def _staleness(self, mode, batch, window, loss, metrics) -> torch.Tensor:
        """The samples' staleness at the step (the trainer's own metrics; no loss term)."""
        versions = batch.source["behave_version"]
        expert = batch.loss_inputs.get("expert_mask")
        if versions is not None and expert is not None:  # MIX's demonstrations are no samples of the policy's
            versions = versions[~expert]
        if versions is not None and versions.numel():
            staleness = self.model_version - versions.float()
            metrics["trained_staleness_mean"], metrics["trained_staleness_max"] = staleness.mean(), staleness.max()
        return loss if self.critic is None else self.critic.value_term(mode, batch, window, loss, metrics)

    def _proximal(self, logps: torch.Tensor, old: torch.Tensor, row: PackedRow) -> torch.Tensor | None:
        """π_prox of a decoupled loss: the step's weights (`recompute`: the loss's default, sg(π)), or AReaL's
        log-linear interpolation between μ and π from the versions: the weights being trained become version
        `model_version + 1`, the proximal ones are `model_version`."""
        if self.args.prox_logp_method == "recompute" or row.behave_version is None:
            return None
        versions = row.behave_version.to(logps.device)
        return loglinear_proximal_logprob(
            old, logps.detach(), versions, proximal_version=self.model_version, current_version=self.model_version + 1
        )

    def _account_step(self, inputs: dict[str, Any]) -> None:
        """TRL's per-step accounting (its `perf/*` and `batch/*` metrics), as its `compute_loss` keeps it."""
        forward_tokens = float(inputs["global_n_forward_tokens"][0])
        mean_seq_len = float(inputs["mean_seq_len"][0])
        self._step_forward_tokens += forward_tokens
        self._step_trained_tokens += float(inputs["global_n_tokens"][0])
        self._step_seq_len_weighted += mean_seq_len * forward_tokens
        self._step_samples += forward_tokens / mean_seq_len
        self._step_forward_s += self._last_forward_time_s


_WINDOW_KEYS = ("window_keep", "window_weights", "window_selected", "window_advantages", *CRITIC_WINDOW_KEYS)


def _worker_settings(args: AsyncGRPOConfig) -> dict[str, Any]:
    """The transformers worker's settings from the config: TRL's sampling fields, and a queue that holds what TRL's
    worker keeps in flight (`max_inflight_tasks`, by default `max(max_staleness, 1)` optimizer steps of samples)."""
    from accelerate import PartialState

    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * PartialState().num_processes
    inflight = args.max_inflight_tasks if args.max_inflight_tasks > 0 else max(args.max_staleness, 1) * per_step
    batch = args.rollout_batch_size or max(args.num_generations, per_step - per_step % args.num_generations)
    return dict(
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        min_p=args.min_p,
        repetition_penalty=args.repetition_penalty,
        generation_batch_size=batch,
        queue_maxsize=inflight,
        seed=args.seed,
        num_threads=args.rollout_num_threads,
    )


def _peak_flops_or_none(accelerator, dtype):
    """TRL's peak FLOPs of the device for its MFU metric; None (MFU not logged) where TRL cannot tell, e.g. on a CPU,
    where TRL's own lookup fails."""
    try:
        return _trl_peak_flops(accelerator, dtype)
    except Exception:
        return None


_trl_peak_flops = _trl_async.get_peak_flops_per_device
_trl_async.get_peak_flops_per_device = _peak_flops_or_none  # the one name of TRL's module this adapter replaces


__all__ = ["AsyncGRPOTrainer"]
