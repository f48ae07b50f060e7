"""One TRL adapter for every GRPO-family algorithm.

`GRPOFamilyTrainer` subclasses `trl.GRPOTrainer` at three narrow points and keeps everything else of TRL
(generation with transformers or vLLM, reward functions, PEFT, the reference model, DeepSpeed / FSDP, logging,
checkpointing):

* `_calculate_rewards`: rejects non-finite rewards, naming the reward function and the sample, before any
  weight changes.
* `_generate_and_score_completions`: replaces TRL's advantages by the algorithm's advantage function applied to
  each prompt group's summed rewards (token-level `[B, T]` advantages included); samples the function drops
  (e.g. `std_threshold`, RAFT's selection) are masked out of the loss.
* `_compute_loss`: per-token log-probs and entropies through TRL's fused log-prob path, then the algorithm's
  policy loss, the KL term (`kl_loss_fn` with coefficient `beta`, adaptive if asked) and the entropy bonus, all
  normalized over the optimizer window (DESIGN §2.6: token / sequence counts of every micro-batch of the
  optimizer step, summed over processes), so the gradient does not depend on how the step is split into
  micro-batches and processes.

Every metric of the loss is logged under its `trl_ext.losses` name next to `policy_loss`, `kl`, `kl_coef` and
`entropy`; each combines over the optimizer window as its component declares it (`metrics`: a `SHARE` is summed,
a `MEAN` averaged).
"""

from __future__ import annotations

import json
import os
from typing import Any, ClassVar

import torch
import trl
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..losses import aggregate_loss
from .grpo_config import GRPOFamilyConfig
from .model_card import AlgorithmModelCard
from .window_metrics import WindowMetrics

_MULTIMODAL_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)
_STATE_FILE = "trl_ext_state.json"


class GRPOFamilyTrainer(AlgorithmModelCard, WindowMetrics, trl.GRPOTrainer):
    """A `trl.GRPOTrainer` whose advantages and loss are a trl_ext algorithm's.

    Use an algorithm's trainer (`SAPOTrainer`, `GSPOTrainer`, ...: built from its record by
    `trl_ext.trainers.algorithm_classes`) with its config (`SAPOConfig`, ...); the constructor takes exactly
    `trl.GRPOTrainer`'s arguments.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = GRPOFamilyConfig
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "grpo"]

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: GRPOFamilyConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        **kwargs: Any,
    ):
        algorithm = self.config_class.algorithm
        args = self._resolve_args(model, args)
        funcs = reward_funcs if isinstance(reward_funcs, list) else [] if reward_funcs is None else [reward_funcs]
        if not funcs:
            raise ValueError(
                f"{type(self).__name__}: reward_funcs is required: pass a reward function, a list of them, or a "
                "reward model (id/path or PreTrainedModel); got none"
            )
        for split, dataset in (("train_dataset", train_dataset), ("eval_dataset", eval_dataset)):
            for key, data in dataset.items() if isinstance(dataset, dict) else [(None, dataset)]:
                _check_prompt_column(type(self).__name__, split if key is None else f"{split}[{key!r}]", data)

        super().__init__(model, reward_funcs, args, train_dataset, eval_dataset, processing_class, **kwargs)

        self.algorithm = algorithm
        self.policy_loss_fn = args.build_policy_loss()
        self.advantage_fn = args.build_advantage_fn()
        self.kl_fn = args.build_kl_fn()
        self.entropy_fn = args.build_entropy_fn()
        self.loss_agg_mode = args.aggregation
        self._gathered_rewards: torch.Tensor | None = None
        self._window: dict[str, torch.Tensor] = {}

    @classmethod
    def _resolve_args(cls, model, args: GRPOFamilyConfig | None) -> GRPOFamilyConfig:
        """`args`, checked to be the algorithm's config; the config's defaults when None (as TRL does)."""
        algorithm = cls.config_class.algorithm
        if args is None:
            name = model if isinstance(model, str) else getattr(model.config, "_name_or_path", "model")
            return cls.config_class(output_dir=f"{str(name).rstrip('/').split('/')[-1]}-{algorithm}")
        if not isinstance(args, cls.config_class):
            raise TypeError(
                f"{cls.__name__}: args must be a {cls.config_class.__name__} (it accepts every "
                f"trl.GRPOConfig field plus the {algorithm} arguments), got {type(args).__name__}"
            )
        return args

    # ---- rewards and advantages -------------------------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        # Gathered over processes: every rank sees the same tensor, so every rank raises the same error.
        bad_value = torch.isinf(rewards_per_func)
        unscored = torch.isnan(rewards_per_func).all(dim=1)
        if bad_value.any() or unscored.any():
            local = slice(
                self.accelerator.process_index * len(prompts), (self.accelerator.process_index + 1) * len(prompts)
            )
            if bad_value.any():
                row, col = (int(i) for i in bad_value.nonzero()[0])
                what = f"reward function {self.reward_func_names[col]!r} returned {rewards_per_func[row, col].item()}"
            else:
                row = int(unscored.nonzero()[0])
                what = "every reward function returned None or NaN"
            where = f"sample {row} of the generation batch"
            if local.start <= row < local.stop:
                where += f" (prompt {prompts[row - local.start]!r}, completion {completions[row - local.start]!r})"
            raise ValueError(
                f"{type(self).__name__}: {what} for {where}; rewards must be finite numbers (a function may return "
                "None for a sample it does not score, as long as another function scores it)"
            )
        self._gathered_rewards = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        rewards_per_func, self._gathered_rewards = self._gathered_rewards, None
        device = rewards_per_func.device
        rewards = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        group_ids = torch.arange(rewards.numel(), device=device) // group_size

        result, response_mask = self._compute_advantages(rewards, group_ids, output)
        # The completions table shows each completion's own advantage: 0 for a row replaced by a duplicate.
        table = _zero_dropped(result.advantages, result.keep)
        row_advantages = result.advantages  # the advantage of each row of the batch that trains
        if result.source is not None:  # `duplicate_experiences`: dropped groups' rows become copies of kept ones
            copied = result.source != torch.arange(rewards.numel(), device=device)
            self._metrics[mode]["advantages/duplicated_frac"].append(copied.float().mean().item())
            table = table.masked_fill(copied, 0.0)
            output = self._take_rows(output, result.source)
            row_advantages = result.advantages[result.source]

        completion_mask = output["completion_mask"]
        n_local = completion_mask.size(0)
        local = slice(self.accelerator.process_index * n_local, (self.accelerator.process_index + 1) * n_local)
        keep = result.keep[local]
        advantages = _zero_dropped(row_advantages[local], keep)
        if advantages.dim() == 2:
            advantages = advantages[:, : completion_mask.size(1)]
        output["advantages"] = advantages.float()
        dropped_frac = 1.0 - result.keep.float().mean().item()
        self._metrics[mode]["advantages/dropped_frac"].append(dropped_frac)
        if dropped_frac > 0:
            output["completion_mask"] = completion_mask * keep.unsqueeze(1).to(completion_mask.dtype)
        # The completions table logs the advantages TRL computed; show ours (per-sequence mean if token-level).
        if table.dim() == 2:
            table = table.sum(1) / response_mask.sum(1).clamp(min=1)
        self._show_advantages(table)
        return output

    def _take_rows(self, output: dict[str, Any], source: torch.Tensor) -> dict[str, Any]:
        """`output` with row i of the generation batch (all processes) replaced by row `source[i]`.

        Each process's row-aligned tensors are padded to a common width (prompts on the left, completions on the
        right), gathered, indexed with its slice of `source`, and cropped back to the width its rows need, so a
        process that receives no longer row keeps its tensors' shapes."""
        images = [key for key in _MULTIMODAL_KEYS if key in output]
        if images:
            raise ValueError(
                f"{type(self).__name__}: duplicate_experiences cannot copy the rows of a multimodal batch "
                f"({', '.join(images)}); set duplicate_experiences=False"
            )
        n_local = output["completion_mask"].size(0)
        rows = source[self.accelerator.process_index * n_local : (self.accelerator.process_index + 1) * n_local]
        taken = dict(output)
        for key, value in output.items():
            if key == "advantages" or not isinstance(value, torch.Tensor) or value.dim() == 0:
                continue
            fill = 1 if key == "importance_sampling_ratio" else 0
            fill = self._tokenizer.pad_token_id if key.endswith("_ids") else fill
            if value.dim() > 1:
                value = self.accelerator.pad_across_processes(
                    value, dim=1, pad_index=fill, pad_first=key.startswith("prompt")
                )
            taken[key] = self.accelerator.gather(value)[rows]
        used = taken["prompt_mask"].any(0).nonzero()
        start = int(used[0]) if used.numel() else taken["prompt_mask"].size(1)
        used = taken["completion_mask"].any(0).nonzero()
        end = int(used[-1]) + 1 if used.numel() else 0
        width = taken["completion_mask"].size(1)
        for key, value in taken.items():
            if key in ("prompt_ids", "prompt_mask"):
                taken[key] = value[:, start:]
            elif isinstance(value, torch.Tensor) and value.dim() == 2 and value.size(1) == width:
                taken[key] = value[:, :end]
        taken["num_items_in_batch"] = self.accelerator.gather(_loss_mask(taken).sum()).sum()
        return taken

    def _show_advantages(self, values: torch.Tensor) -> None:
        """Put one advantage per sample of the generation batch (all processes, `[N]`) in the completions table,
        which TRL filled with the advantages it computed."""
        logged = self._logs["advantages"]
        if len(logged) >= values.numel():
            for i, value in enumerate(values.tolist(), start=len(logged) - values.numel()):
                logged[i] = value

    def _compute_advantages(
        self, rewards: torch.Tensor, group_ids: torch.Tensor, output: dict[str, Any]
    ) -> tuple[Any, torch.Tensor | None]:
        """The advantage function on the generation batch's summed rewards (every process's samples, `[N]`), and
        the gathered response mask of token-level advantages (`[N, T]`; None for `[N]` advantages)."""
        wanted = self.advantage_fn.inputs()  # the estimator declares what it reads besides the rewards
        kwargs: dict[str, Any] = {}
        # Token-level returns need every sample's masks: pad to a common width and gather. The loss mask has gaps
        # where tool outputs sit inside a completion; the reward sits on the completion's last token.
        for name, mask in (("response_mask", _loss_mask), ("completion_mask", lambda out: out["completion_mask"])):
            if name in wanted:
                padded = self.accelerator.pad_across_processes(mask(output), dim=1, pad_index=0)
                kwargs[name] = self.accelerator.gather(padded).bool()
        if "generator" in wanted:  # random choices (REC's balance drop, duplicate_experiences): seeded per step
            generator = torch.Generator(device="cpu").manual_seed(self.args.seed * 1_000_003 + self.state.global_step)
            kwargs["generator"] = generator
        return self.advantage_fn.compute(rewards, group_ids, **kwargs), kwargs.get("response_mask")

    # ---- optimizer-window normalization ----------------------------------------------------------------------

    def _prepare_inputs(self, generation_batch):
        inputs = super()._prepare_inputs(generation_batch)
        if not self.model.training:
            return inputs
        accumulation = self.current_gradient_accumulation_steps
        if self._step % accumulation == 0:
            # The window is the next `accumulation` buffered micro-batches (`steps_per_generation` is a multiple
            # of the accumulation steps, checked by the config), on every process.
            start = self._step % self.args.steps_per_generation
            window = [self._window_counts(batch) for batch in self._buffered_inputs[start : start + accumulation]]
            names = list(window[0])
            counts = torch.stack([sum(batch[name] for batch in window) for name in names])
            counts = self.accelerator.reduce(counts, reduction="sum")
            self._window = dict(zip(names, counts, strict=True))
        return {**inputs, **self._window}

    def _window_counts(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """What a micro-batch adds to the window's counts (`global_valid_toks` tokens, `global_valid_seqs` rows)."""
        mask = _loss_mask(batch)
        rows = torch.full((), float(mask.size(0)), device=mask.device)  # filled on the device: no host sync
        return {"global_valid_toks": mask.sum().float(), "global_valid_seqs": rows}

    def _window_kwargs(self, inputs: dict[str, Any], mode: str) -> dict[str, Any]:
        """The aggregation kwargs of the losses: the window's counts in training, the micro-batch's own in eval,
        and Dr. GRPO's `seq-mean-token-sum-norm` normalizer, sequences × max_completion_length."""
        if mode == "train":
            window = {name: inputs[name] for name in self._window}
        else:
            window = self._window_counts(inputs)
        window["normalizer"] = window["global_valid_seqs"] * self.max_completion_length
        return window

    # ---- the loss --------------------------------------------------------------------------------------------

    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        mask = _loss_mask(inputs).bool()
        logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model,
            torch.cat([prompt_ids, completion_ids], dim=1),
            torch.cat([prompt_mask, completion_mask], dim=1),
            completion_ids.size(1),
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **{key: inputs.get(key) for key in _MULTIMODAL_KEYS},
        )
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        advantages = inputs["advantages"]
        if "importance_sampling_ratio" in inputs:  # vLLM truncated / masked IS correction, per token or sequence
            advantages = (advantages if advantages.dim() == 2 else advantages.unsqueeze(1)) * inputs[
                "importance_sampling_ratio"
            ]
        window = self._window_kwargs(inputs, mode)

        # The batch in the losses' vocabulary; `_policy_loss` hands the loss the inputs it declares (`inputs()`).
        batch_inputs = {"expert_mask": inputs.get("expert_mask"), "step": self.state.global_step}
        policy_loss, loss_metrics = self._policy_loss(
            mode,
            logprob=logps,
            old_logprob=old,
            action_mask=mask,
            advantages=advantages,
            ref_logprob=inputs.get("ref_per_token_logps"),
            **batch_inputs,
            **window,
        )
        loss = policy_loss
        metrics = {**loss_metrics, "policy_loss": policy_loss.detach()}
        if self.beta != 0.0:
            kl_loss, kl_metrics = self.kl_fn.calculate_kl_loss(
                logps, inputs["ref_per_token_logps"], mask, self.loss_agg_mode, old_logprob=old, **window
            )
            loss = loss + kl_loss
            metrics["kl"], metrics["kl_coef"] = kl_metrics["kl_loss"], kl_metrics["kl_coef"]
        if self.entropy_fn.entropy_coef != 0.0:
            bonus, entropy_metrics = self.entropy_fn(
                entropies, mask, self.loss_agg_mode, expert_mask=batch_inputs["expert_mask"], **window
            )
            loss = loss - bonus
            metrics.update(entropy_metrics)
        metrics["entropy"] = aggregate_loss(
            entropies.detach(), mask, "token-mean", global_valid_toks=window.get("global_valid_toks")
        )

        if mode == "train":
            # Window shares sum to the window's loss over micro-batches and processes; DDP / DeepSpeed / FSDP
            # average gradients over processes, so scale back by their number (as TRL's `dapo` does).
            loss = loss * self.accelerator.num_processes
        if self.aux_loss_enabled:
            scale = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss + self.router_aux_loss_coef * aux_loss / scale
            metrics["aux_loss"] = aux_loss.detach()
        logged = self._log_loss_metrics(mode, metrics)
        if logged and mode == "train" and self.kl_fn.adaptive:  # the optimizer step: update beta from the window's KL
            self.kl_fn.update_kl_coef(logged["kl"], batch_size=int(inputs["global_valid_seqs"].item()))
            self.beta = self.kl_fn.kl_coef
        return loss

    def _policy_loss(self, mode: str, **inputs: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The algorithm's policy loss on one micro-batch: its share of the window's loss, and its metrics."""
        return self.policy_loss_fn(**_read_by(self.policy_loss_fn, inputs))

    # ---- checkpoints: the state trl_ext adds to TRL's (`trl_ext_state.json`) ---------------------------------------

    def _checkpoint_state(self) -> dict[str, Any]:
        """What a resumed run needs beyond TRL's checkpoint: the adaptive KL coefficient."""
        return {"kl_coef": self.kl_fn.kl_coef} if self.kl_fn.adaptive else {}

    def _restore_checkpoint_state(self, state: dict[str, Any]) -> None:
        if self.kl_fn.adaptive and "kl_coef" in state:
            self.kl_fn.kl_coef = self.beta = state["kl_coef"]

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        state = self._checkpoint_state()
        if state and self.args.should_save:
            folder = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            with open(os.path.join(folder, _STATE_FILE), "w") as f:
                json.dump(state, f)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        path = os.path.join(checkpoint, _STATE_FILE) if checkpoint is not None else None
        if path is not None and os.path.exists(path):
            with open(path) as f:
                self._restore_checkpoint_state(json.load(f))


def _read_by(loss_fn: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """The `inputs` that `loss_fn` declares it reads (`inputs()`)."""
    return {name: inputs[name] for name in loss_fn.inputs() if name in inputs}


def _zero_dropped(advantages: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Advantages (`[N]` or `[N, T]`) with the rows the estimator dropped set to 0."""
    return advantages.masked_fill(~keep.view(-1, *[1] * (advantages.dim() - 1)), 0.0)


def _loss_mask(inputs: dict[str, Any]) -> torch.Tensor:
    mask = inputs["completion_mask"]
    return mask if "tool_mask" not in inputs else mask * inputs["tool_mask"]


def _check_prompt_column(owner: str, split: str, dataset: Any) -> None:
    if dataset is None:
        return
    columns = getattr(dataset, "column_names", None)
    if columns is None and getattr(dataset, "features", None) is not None:
        columns = list(dataset.features)
    if columns is not None and "prompt" not in columns:
        raise ValueError(
            f"{owner}: {split} has no 'prompt' column (columns: {', '.join(map(repr, columns)) or 'none'}); "
            "rename the column holding the prompts to 'prompt', e.g. dataset.rename_column('question', 'prompt')"
        )
