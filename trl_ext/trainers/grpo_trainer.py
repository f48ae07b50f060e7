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
  normalized over the optimizer window (docs/design.md §2.6: token / sequence counts of every micro-batch of the
  optimizer step, summed over processes), so the gradient does not depend on how the step is split into
  micro-batches and processes.

verl's rollout correction (`rollout_is` / `rollout_rs`, `trl_ext.rollout_correction`) is computed per generation batch
(`_correct_rollouts`): its weights reach the loss as TRL's vLLM importance-sampling ratio does (in its place), its
rejections leave the loss mask.

TRL's options around the loss are applied here for every algorithm, as TRL applies them: `top_entropy_quantile`
and `off_policy_mask_threshold` zero the advantages of the tokens / sequences they drop, `use_bias_correction_kl`
weighs the per-token KL by π/π_old, and the entropy bonus uses TRL's coefficient control (`use_adaptive_entropy`).
`get_batch_samples` keeps the window's batches so that a window may span two generation batches
(`steps_per_generation` not a multiple of the accumulation steps).

Every metric of the loss is logged under its `trl_ext.losses` name next to `policy_loss`, `kl`, `kl_coef` and
`entropy`; each combines over the optimizer window as its component declares it (`metrics`: a `SHARE` is summed,
a `MEAN` averaged).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from typing import Any, ClassVar

import torch
import trl
from transformers import TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl.data_utils import is_conversational
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import nanstd

from ..advantages.reinforce_plus_plus import place_token_rewards
from ..losses import aggregate_loss
from .config_conversion import trainer_config
from .grpo_config import GRPOFamilyConfig
from .model_card import AlgorithmModelCard
from .multi_turn import MultiTurnAdvantages
from .turns import segment_turns, turn_samples
from .window import WindowNormalization

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


class GRPOFamilyTrainer(AlgorithmModelCard, WindowNormalization, MultiTurnAdvantages, trl.GRPOTrainer):
    """A `trl.GRPOTrainer` whose advantages and loss are a trl_ext algorithm's.

    Use an algorithm's trainer (`SAPOTrainer`, `GSPOTrainer`, ...: built from its record by
    `trl_ext.trainers.algorithm_classes`) with its config (`SAPOConfig`, ...) or TRL's `trl.GRPOConfig` (converted);
    the constructor takes `trl.GRPOTrainer`'s arguments.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = GRPOFamilyConfig
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "grpo"]

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: GRPOFamilyConfig | TrainingArguments | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        **kwargs: Any,
    ):
        """Check the arguments, then build the `trl.GRPOTrainer` with the algorithm's config.

        The arguments are `trl.GRPOTrainer`'s (TRL's documentation describes each); below is what trl_ext adds.

        Args:
            model (str | PreTrainedModel): The policy, as in TRL: a path / Hub id (loaded with `args.model_init_kwargs`)
                or a model.
            reward_funcs (RewardFunc | list[RewardFunc] | None): A reward function, a reward model (path / Hub id or
                model) or a list of them, as in TRL; required unless `environment_factory` is given (its environments
                may score the completions). A non-finite reward stops training with an error naming the function and the
                sample.
            args: The algorithm's config (`config_class`, e.g. `SAPOConfig`), used as is. TRL's `trl.GRPOConfig` or a
                `transformers.TrainingArguments` is converted to one (`trl_ext.trainers.config_conversion`): its fields
                that differ from TRL's defaults are carried over, the others take the algorithm's defaults. None: the
                algorithm's defaults, with `output_dir="<model name>-<algorithm>"`.
            train_dataset (Dataset | IterableDataset | None): The prompts, as in TRL: a dataset with a `prompt` column
                (checked before the model loads) unless `environment_factory` provides them.
            eval_dataset (Dataset | IterableDataset | dict[str, Dataset] | None): Evaluation prompts (a dataset or a
                dict of them), checked like `train_dataset`.
            processing_class (PreTrainedTokenizerBase | ProcessorMixin | None): The tokenizer or processor, as in TRL
                (default: the model's).
            **kwargs: The rest of `trl.GRPOTrainer`'s arguments, passed on: `reward_processing_classes`, `callbacks`,
                `optimizers`, `quantization_config`, `peft_config` (LoRA on the policy, as in TRL) and the multi-turn
                rollouts, `tools`, `environment_factory` (one environment per rollout; GiGPO and multi-step GRPO read
                each turn's `state_key` and `turn_rewards` from it, see `trl_ext.trainers.multi_turn`) and
                `rollout_func`.

        Raises:
            TypeError: `args` is another algorithm's config, another TRL trainer's config, or not a `TrainingArguments`.
            ValueError: No reward source; a dataset without a `prompt` column; a converted field the algorithm refuses,
                e.g. TRL's `loss_type` or `epsilon` set on a `trl.GRPOConfig` for an algorithm other than GRPO (the
                message names the trl_ext field to use); an advantage function that scores a greedy completion (ReMax)
                with `tools`, `environment_factory` or `rollout_func`.
        """
        algorithm = self.config_class.algorithm
        args = self._resolve_args(model, args)
        funcs = reward_funcs if isinstance(reward_funcs, list) else [] if reward_funcs is None else [reward_funcs]
        environment = kwargs.get("environment_factory") is not None  # it may own the rewards and the prompts
        if not funcs and not environment:
            raise ValueError(
                f"{type(self).__name__}: No reward source provided; reward_funcs is required: pass a reward function, "
                "a list of them, or a reward model (id/path or PreTrainedModel), or an environment_factory whose "
                "environments score the completions; got none"
            )
        for split, dataset in (("train_dataset", train_dataset), ("eval_dataset", eval_dataset)):
            for key, data in dataset.items() if isinstance(dataset, dict) else [(None, dataset)]:
                if not environment:
                    _check_prompt_column(type(self).__name__, split if key is None else f"{split}[{key!r}]", data)

        if "reward_baselines" in args.build_advantage_fn().needed_inputs():
            for name in ("rollout_func", "tools", "environment_factory"):
                if kwargs.get(name):
                    raise ValueError(
                        f"{type(self).__name__}: advantage_fn={args.advantage_fn_name!r} compares each reward with the "
                        f"reward of a greedy completion of the prompt from TRL's single-turn generation, which "
                        f"cannot be made with {name}; drop {name} or choose another advantage function"
                    )

        # TRL loads the reference model (and computes its log-probs) only for beta != 0; KL in the reward needs it
        # too: TRL sees a non-zero beta while it builds and while it generates (`_reference_log_probs`).
        self._reference_for_reward = args.kl_penalty_fn != "none" and args.beta == 0
        beta = args.beta
        if self._reference_for_reward:
            args.beta = 1.0
        try:
            super().__init__(model, reward_funcs, args, train_dataset, eval_dataset, processing_class, **kwargs)
        finally:
            args.beta = beta
        self.beta = beta

        self.algorithm = algorithm
        self.policy_loss_fn = args.build_policy_loss()
        self.advantage_fn = args.build_advantage_fn()
        self.kl_penalty_fn = args.build_kl_penalty_fn()
        self.kl_fn = args.build_kl_fn()
        self.entropy_fn = args.build_entropy_fn()
        self.rollout_correction = args.build_rollout_correction()
        self.loss_agg_mode = args.aggregation
        self.entropy_loss_agg_mode = args.entropy_aggregation
        self._gathered_rewards: torch.Tensor | None = None
        self._window_batches: list[Any] | None = None  # the raw batches of the next optimizer window
        self._window_queue: list[dict[str, Any]] = []  # its prepared micro-batches, with the window's counts

    @classmethod
    def _resolve_args(cls, model, args: Any) -> GRPOFamilyConfig:
        """`args` as the algorithm's config: itself, its defaults when None, or converted from TRL's config."""
        return trainer_config(cls.__name__, model, args, cls.config_class, cls.config_class.algorithm)

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

    @contextlib.contextmanager
    def _reference_log_probs(self):
        """TRL computes the reference log-probs only while its `beta` is non-zero: so it is while it generates, when
        the KL penalty on the rewards needs them and the loss has no KL term."""
        if not self._reference_for_reward:
            yield
            return
        self.beta = 1.0
        try:
            yield
        finally:
            self.beta = 0.0

    def _generate_and_score_completions(self, inputs):
        with self._reference_log_probs():
            output = super()._generate_and_score_completions(inputs)
        self._generation_inputs = inputs  # the dataset rows: ReMax scores its greedy completions with them
        mode = "train" if self.model.training else "eval"
        rewards_per_func, self._gathered_rewards = self._gathered_rewards, None
        device = rewards_per_func.device
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        if self.multi_objective_aggregation == "normalize_then_sum":  # GDPO: normalize each function per group first
            rewards_per_func = _normalize_per_group(rewards_per_func, group_size)
        rewards = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
        group_ids = torch.arange(rewards.numel(), device=device) // group_size

        result, response_mask = self._compute_advantages(rewards, group_ids, output)
        if self._reference_for_reward:
            output.pop("ref_per_token_logps", None)  # the loss has no KL term
        for name, value in (result.metrics or {}).items():
            self._metrics[mode][f"advantage/{name}"].append(float(value))
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
        token_keep = result.token_keep
        if token_keep is not None:  # a token filter (clipb): the tokens it drops leave the loss and its counts
            token_keep = token_keep[local, : completion_mask.size(1)]
            output["completion_mask"] = output["completion_mask"] * token_keep.to(completion_mask.dtype)
        self._correct_rollouts(output, mode)
        # The completions table logs the advantages TRL computed; show ours (per-sequence mean if token-level).
        if table.dim() == 2:
            table = table.sum(1) / response_mask.sum(1).clamp(min=1)
        self._show_advantages(table)
        return output

    def _correct_rollouts(self, output: dict[str, Any], mode: str) -> None:
        """verl's rollout correction (`rollout_is` / `rollout_rs`) on the generation batch, all processes together
        (verl corrects its whole training batch: the batch normalization and the metrics are over it).

        π_old is TRL's `old_per_token_logps` (computed here when TRL did not, and kept for the loss as TRL keeps them
        with its own correction), π_rollout the sampler's `sampling_per_token_logps`; a token the sampler could not
        score (NaN) gets no correction, TRL's rule. The weights become `importance_sampling_ratio` (1 off the loss
        mask, as TRL's), which `_compute_loss` applies once, as it applies TRL's (the config turned TRL's own
        correction off). A rejected token leaves `tool_mask`, the loss-only mask (the attention mask is untouched):
        it leaves the loss and the window's token count, while its row stays in the row count (as in verl, whose
        sequence means divide by the mini-batch size). The metrics are logged once per generation batch under
        verl's names (`rollout_corr/...`)."""
        correction = self.rollout_correction
        if not correction.enabled:
            return
        sampling = output.get("sampling_per_token_logps")
        if sampling is None:
            raise ValueError(
                f"{type(self).__name__}: rollout_is={correction.rollout_is!r} / rollout_rs={correction.rollout_rs!r} "
                "need the sampler's per-token log-probs, but the generation returned none (TRL has them from vLLM, "
                "use_vllm=True, or from a rollout_func's 'logprobs')"
            )
        old, _ = self._sampling_log_probs(output, entropy=False)
        output["old_per_token_logps"] = old
        mask = _loss_mask(output).bool()
        sampling = torch.where(torch.isnan(sampling), old, sampling)
        local = torch.stack([old.float(), sampling.float(), mask.float()], dim=1)  # [B, 3, T]
        old_all, sampling_all, mask_all = self.accelerator.gather(
            self.accelerator.pad_across_processes(local, dim=2)
        ).unbind(1)
        weights, kept, metrics = correction(old_all, sampling_all, mask_all.bool())
        n_local, width = mask.shape
        rows = slice(self.accelerator.process_index * n_local, (self.accelerator.process_index + 1) * n_local)
        if weights is not None:
            output["importance_sampling_ratio"] = torch.where(mask, weights[rows, :width], 1.0)
        if correction.rs_bounds:
            rejected = mask & ~kept[rows, :width]
            tool_mask = output.get("tool_mask", torch.ones_like(output["completion_mask"]))
            output["tool_mask"] = tool_mask.masked_fill(rejected, 0)
        values = torch.stack(list(metrics.values())).tolist()  # one host sync
        for name, value in zip(metrics, values, strict=True):
            self._metrics[mode][name].append(value)

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
        the gathered response mask of token-level advantages (`[N, T]`; None for `[N]` advantages).

        The function gets the inputs it declares: the gathered masks, a seeded generator, the sampling policy's
        per-token log-probs and entropies (`logprobs`, `entropy`: one forward pass without gradients, unless TRL
        already computed the log-probs and no entropy is needed) and ReMax's `reward_baselines` (the reward of one
        greedy completion per prompt). With `kl_penalty_fn`, the rewards first become token rewards: the score on the
        completion's last token minus coef·KL(π_old ‖ π_ref) on every loss token; a function that takes token
        rewards gets them as `[N, T]`, the others each completion's sum."""
        fn, penalty = self.advantage_fn, self.kl_penalty_fn
        declared, needed = fn.inputs(), fn.needed_inputs()
        local = {"response_mask": _loss_mask(output), "completion_mask": output["completion_mask"]}
        if "logprobs" in needed or "entropy" in needed or penalty is not None:
            local["logprobs"], local["entropy"] = self._sampling_log_probs(output, entropy="entropy" in needed)
        local.update(self._trainer_advantage_inputs(output, needed))
        if penalty is not None:
            local["ref_logprobs"] = output["ref_per_token_logps"]
        # Every sample's per-token inputs, padded to a common width and gathered: a prompt's group may span processes
        # and token-level estimators normalize over the batch. The response mask also serves the completions table.
        gathered = {
            name: self.accelerator.gather(self.accelerator.pad_across_processes(value, dim=1, pad_index=0))
            for name, value in local.items()
            if value is not None and (name in declared or name == "response_mask" or penalty is not None)
        }
        for name in ("response_mask", "completion_mask"):
            if name in gathered:
                gathered[name] = gathered[name].bool()
        kwargs: dict[str, Any] = {name: gathered[name] for name in declared if name in gathered}
        if "generator" in declared:  # random choices (REC's balance drop, duplicate_experiences): seeded per step
            generator = torch.Generator(device="cpu").manual_seed(self.args.seed * 1_000_003 + self.state.global_step)
            kwargs["generator"] = generator
        if "reward_baselines" in needed:
            kwargs["reward_baselines"] = self._greedy_baselines(group_ids)
        if penalty is not None:
            rewards = self._penalized_rewards(rewards, gathered, takes_tokens=fn.token_rewards)
        if self._per_turn():  # one row per model turn (multi-turn estimators): advantages on the turns' tokens
            response_mask = gathered["response_mask"]
            return self._turn_advantages(rewards, group_ids, output, response_mask, kwargs), response_mask
        response_mask = gathered["response_mask"] if "response_mask" in declared else None
        return fn.compute(rewards, group_ids, **kwargs), response_mask

    def _trainer_advantage_inputs(self, output: dict[str, Any], needed: tuple[str, ...]) -> dict[str, torch.Tensor]:
        """Per-token inputs `[B, T]` of the local completions that only this trainer computes (the critic's values in
        critic PPO), for the advantage function that needs them; gathered like the others."""
        return {}

    def _sampling_log_probs(self, output: dict[str, Any], entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The sampling policy's per-token log-probs `[B, T]` of the local completions (TRL's, when it computed them
        and no entropy is asked for), and their entropies (None unless `entropy`)."""
        old = output.get("old_per_token_logps")
        if old is not None and not entropy:
            return old, None
        completion_ids = output["completion_ids"]
        mode = "train" if self.model.training else "eval"
        batch_size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            logps, entropies, _ = self._get_per_token_logps_and_entropies(
                self.model,
                torch.cat([output["prompt_ids"], completion_ids], dim=1),
                torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1),
                completion_ids.size(1),
                batch_size=batch_size,
                compute_entropy=entropy,
                **{key: output.get(key) for key in _MULTIMODAL_KEYS},
            )
        return (logps if old is None else old), entropies

    def _penalized_rewards(self, rewards: torch.Tensor, gathered: dict[str, torch.Tensor], takes_tokens: bool):
        """The KL penalty on the rewards (`kl_penalty_fn`): token rewards `[N, T]` = the score on the completion's
        last token − coef·KL(π_old ‖ π_ref) on the loss tokens (`[N, T]` for a function that takes token rewards,
        else each completion's sum `[N]`); logs the batch KL and the coefficient as the reference does
        (`advantage/kl`, `advantage/kl_coef`) and steps an adaptive coefficient."""
        mode = "train" if self.model.training else "eval"
        scores, loss_mask = place_token_rewards(
            "kl_penalty_fn", rewards, gathered["response_mask"], gathered["completion_mask"]
        )
        coefficient = self.kl_penalty_fn.kl_coef
        token_rewards, metrics = self.kl_penalty_fn.apply_kl_penalty_to_reward(
            scores, gathered["logprobs"].to(rewards.dtype), gathered["ref_logprobs"].to(rewards.dtype), loss_mask
        )
        metrics["kl_coef"] = coefficient  # the coefficient applied (a float, as the reference logs it)
        if mode == "eval":  # evaluation does not move an adaptive coefficient
            self.kl_penalty_fn.kl_coef = coefficient
        for name, value in metrics.items():
            self._metrics[mode][f"advantage/{name}"].append(float(value))
        return token_rewards if takes_tokens else token_rewards.sum(dim=1)  # score − coef·Σ_t KL_t

    @contextlib.contextmanager
    def _greedy_generation(self):
        """TRL's generation, greedy: vLLM at temperature 0, transformers with `do_sample=False`."""
        if self.use_vllm:
            generation = self.vllm_generation
            saved = generation.temperature
            generation.temperature = 0.0
            try:
                yield
            finally:
                generation.temperature = saved
            return
        saved_config, saved_kwargs = self.generation_config, self.generation_kwargs
        greedy = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None, "min_p": None}
        self.generation_config = copy.deepcopy(saved_config)
        self.generation_config.update(**greedy)
        self.generation_kwargs = {**saved_kwargs, **greedy}
        try:
            yield
        finally:
            self.generation_config, self.generation_kwargs = saved_config, saved_kwargs

    def _greedy_baselines(self, group_ids: torch.Tensor) -> torch.Tensor:
        """ReMax's baselines `[N]`: the reward of one greedy completion of each prompt, generated through TRL's
        generation path (vLLM when it is on) and scored by the reward functions; every sample of the prompt's group
        gets it. Each process generates for the groups of its own rows (whole groups: the config checks it)."""
        inputs = self._generation_inputs
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        firsts = [inputs[i] for i in range(0, len(inputs), group)]
        prompts = [row["prompt"] for row in firsts]
        prompt_ids, images, multimodal = self._tokenize_prompts(prompts)
        with self._greedy_generation():
            completion_ids, _ = self._generate_single_turn(prompt_ids, images, multimodal, 1)
        if is_conversational({"prompt": prompts[0]}):
            texts = self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
            completions = [[{"role": "assistant", "content": text}] for text in texts]
        else:
            completions = self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
        per_func = self._calculate_rewards(firsts, prompts, completions, completion_ids)  # non-finite: an error
        self._gathered_rewards = None
        baselines = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)
        self._metrics[mode]["advantage/greedy_reward"].append(baselines.mean().item())
        return baselines.repeat_interleave(group)[: group_ids.numel()]

    # ---- optimizer-window normalization ----------------------------------------------------------------------

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """The training loop fetches an optimizer window's batches before its first micro-batch runs: keep them, so
        that the window's counts can be taken when it starts (`_start_window`)."""
        batches, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        self._window_batches = list(batches)
        return batches, num_items

    def _prepare_inputs(self, generation_batch):
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        if not self._window_queue:
            self._start_window(generation_batch)
        return self._window_queue.pop(0)

    def _start_window(self, generation_batch) -> None:
        """Prepare every micro-batch of the optimizer window that starts now with TRL's `_prepare_inputs` (which
        generates whenever a micro-batch starts a new generation batch: a window may span several when
        `steps_per_generation` is not a multiple of the accumulation steps; the weights do not change within a
        window, so generating early samples from the same policy), then count the window's tokens and rows over
        every micro-batch and process (docs/design.md §2.6), and queue the micro-batches with the counts."""
        batches = self._window_batches or [generation_batch]
        self._window_batches = None
        start, prepared = self._step, []
        try:
            for offset, batch in enumerate(batches):
                self._step = start + offset
                prepared.append(super()._prepare_inputs(batch))
        finally:
            self._step = start
        window = self.count_window(prepared)
        self._window_queue = [{**inputs, **window} for inputs in prepared]

    def micro_batch_counts(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """What a micro-batch adds to the window's counts (`global_valid_toks` tokens, `global_valid_seqs` rows)."""
        mask = _loss_mask(batch)
        if self.args.turns_as_samples:  # each model turn is a sample of the seq-mean aggregations
            rows = segment_turns(mask).count.sum().float()
        else:
            rows = torch.full((), float(mask.size(0)), device=mask.device)  # filled on the device: no host sync
        return {"global_valid_toks": mask.sum().float(), "global_valid_seqs": rows}

    def _window_kwargs(self, inputs: dict[str, Any], mode: str) -> dict[str, Any]:
        """The aggregation kwargs of the losses: the window's counts in training, the micro-batch's own in eval,
        and Dr. GRPO's `seq-mean-token-sum-norm` normalizer, sequences × max_completion_length."""
        if mode == "train":
            window = {name: inputs[name] for name in self._window}
        else:
            window = self.micro_batch_counts(inputs)
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
        sampling_ratio = inputs.get("importance_sampling_ratio")  # vLLM's truncated / masked IS correction
        if sampling_ratio is not None and "importance_sampling_ratio" not in self.policy_loss_fn.inputs():
            advantages = _per_token(advantages) * sampling_ratio
            sampling_ratio = None
        entropy_mask = None
        if self.top_entropy_quantile < 1.0:  # the policy gradient on the highest-entropy tokens only (TRL)
            entropy_mask = self.get_high_entropy_mask(entropies.detach(), mask, 1 - self.top_entropy_quantile)
            advantages = _per_token(advantages) * entropy_mask
        if self.off_policy_mask_threshold is not None:  # DeepSeek-V3.2's off-policy sequence mask (TRL)
            keep = self.get_off_policy_mask(
                advantages=_per_token(inputs["advantages"]),
                per_token_logps=logps,
                sampling_per_token_logps=inputs.get("sampling_per_token_logps", old),
                mask=mask.float(),
                off_policy_threshold=self.off_policy_mask_threshold,
            )
            advantages = _per_token(advantages) * keep
        ref = inputs.get("ref_per_token_logps")
        if self.args.turns_as_samples:  # one row per model turn, on its tokens: turn r is row r of every tensor
            rows, mask = turn_samples(mask)
            logps, old, entropies, advantages = logps[rows], old[rows], entropies[rows], advantages[rows]
            ref, sampling_ratio, entropy_mask = (
                x if x is None else x[rows] for x in (ref, sampling_ratio, entropy_mask)
            )
        window = self._window_kwargs(inputs, mode)

        # The batch in the losses' vocabulary; `_policy_loss` hands the loss the inputs it declares (`inputs()`).
        batch_inputs = {"expert_mask": inputs.get("expert_mask"), "step": self.state.global_step}
        policy_loss, loss_metrics = self._policy_loss(
            mode,
            logprob=logps,
            old_logprob=old,
            action_mask=mask,
            advantages=advantages,
            ref_logprob=ref,
            importance_sampling_ratio=sampling_ratio,
            **batch_inputs,
            **window,
        )
        loss = policy_loss
        metrics = {**loss_metrics, "policy_loss": policy_loss.detach()}
        if self.beta != 0.0:
            weights = self._importance_ratio(logps, old, mask) if self.args.use_bias_correction_kl else None
            kl_loss, kl_metrics = self.kl_fn.calculate_kl_loss(
                logps,
                ref,
                mask,
                self.loss_agg_mode,
                old_logprob=old,
                token_weights=weights,
                **window,
            )
            loss = loss + kl_loss
            metrics["kl"], metrics["kl_coef"] = kl_metrics["kl_loss"], kl_metrics["kl_coef"]
            if self.loss_agg_mode != "token-mean" and self.args.uses_trl_loss:  # TRL logs the KL's token mean
                kl = self.kl_fn.calculate_kl(logps.detach(), ref, old)
                kl = kl if weights is None else kl * weights.detach()
                metrics["kl"] = aggregate_loss(
                    torch.where(mask, kl, 0), mask, "token-mean", global_valid_toks=window.get("global_valid_toks")
                )
        if self._entropy_bonus_enabled:
            loss = loss - self._entropy_bonus(mode, entropies, mask, entropy_mask, batch_inputs, window, metrics)
        metrics["entropy"] = aggregate_loss(
            entropies.detach(), mask, "token-mean", global_valid_toks=window.get("global_valid_toks")
        )

        loss = self._add_trainer_terms(mode, inputs, window, loss, metrics)
        loss = self.scale_for_processes(loss, mode)
        if self.aux_loss_enabled:
            scale = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss + self.router_aux_loss_coef * aux_loss / scale
            metrics["aux_loss"] = aux_loss.detach()
        logged = self._log_loss_metrics(mode, metrics)
        if logged and mode == "train" and self.kl_fn.adaptive:  # the optimizer step: update beta from the window's KL
            self.kl_fn.update_kl_coef(logged["kl"], batch_size=int(inputs["global_valid_seqs"].item()))
            self.beta = self.kl_fn.kl_coef
        return loss

    def _add_trainer_terms(
        self, mode: str, inputs: dict[str, Any], window: dict[str, Any], loss: torch.Tensor, metrics: dict[str, Any]
    ) -> torch.Tensor:
        """The micro-batch's loss with the trainer's own terms (none here; the critic's value loss in critic PPO),
        their metrics added to `metrics` (declared in `trainer_metrics`)."""
        return loss

    def _importance_ratio(self, logps: torch.Tensor, old: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """π/π_old per token `[B, T]` (per sequence `[B, 1]` with TRL's `importance_sampling_level="sequence"`),
        differentiable: `use_bias_correction_kl` weighs the per-token KL with it, as TRL does."""
        log_ratio = torch.where(mask, logps - old, 0)
        if getattr(self.policy_loss_fn, "importance_sampling_level", "token") == "sequence":
            log_ratio = (log_ratio.sum(-1) / mask.sum(-1).clamp(min=1)).unsqueeze(-1)
        return torch.exp(log_ratio)

    def _entropy_bonus(
        self,
        mode: str,
        entropies: torch.Tensor,
        mask: torch.Tensor,
        entropy_mask: torch.Tensor | None,
        batch_inputs: dict[str, Any],
        window: dict[str, Any],
        metrics: dict[str, torch.Tensor],
    ) -> torch.Tensor:
        """The entropy bonus coef·agg(entropy) (subtracted from the loss), with TRL's coefficient control.

        The coefficient is TRL's `entropy_coef`; with `use_adaptive_entropy` it is applied only while the previous
        optimizer step's entropy was at or below `entropy_target`, and moved by `entropy_coef_delta` (within
        [`entropy_coef_min`, `entropy_coef_max`]) once per optimizer step from the window's token-mean entropy over
        all processes, as TRL does. With `top_entropy_quantile` the bonus acts on the same tokens as the policy
        gradient, as a token mean over each micro-batch's selected tokens (TRL's definition)."""
        effective = mask if entropy_mask is None else mask & entropy_mask
        counts = window
        if entropy_mask is not None:  # TRL: each micro-batch's own token mean, averaged over the window
            scale = self.current_gradient_accumulation_steps * self.accelerator.num_processes if mode == "train" else 1
            count = effective.sum().float().clamp(min=1.0) * scale
            counts = {**window, "global_valid_toks": count}
        if self.use_adaptive_entropy:
            coef = self.entropy_coef if self._last_world_entropy <= self.args.entropy_target else 0.0
        else:
            coef = self.entropy_coef
        self.entropy_fn.entropy_coef = coef
        bonus, entropy_metrics = self.entropy_fn(
            entropies, effective, self.entropy_loss_agg_mode, expert_mask=batch_inputs["expert_mask"], **counts
        )
        metrics.update(entropy_metrics)
        if mode == "train" and self.use_adaptive_entropy:
            stats = torch.stack([torch.where(effective, entropies.detach(), 0).sum(), effective.sum().float()])
            self._entropy_window_stats = (
                stats if self._entropy_window_stats is None else self._entropy_window_stats + stats
            )
            if self.accelerator.sync_gradients:
                total, tokens = self.accelerator.reduce(self._entropy_window_stats, reduction="sum").tolist()
                self._last_world_entropy = total / max(tokens, 1.0)
                step = self.args.entropy_coef_delta
                if self._last_world_entropy <= self.args.entropy_target:
                    self.entropy_coef = min(self.entropy_coef + step, self.args.entropy_coef_max)
                else:
                    self.entropy_coef = max(self.entropy_coef - step, self.args.entropy_coef_min)
                self._entropy_window_stats = None
        if mode == "train" and self.accelerator.sync_gradients:
            self._metrics[mode]["entropy_coef"].append(self.entropy_coef)
        return bonus

    def _policy_loss(self, mode: str, **inputs: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The algorithm's policy loss on one micro-batch: its share of the window's loss, and its metrics."""
        return self.policy_loss_fn(**_read_by(self.policy_loss_fn, inputs))

    # ---- checkpoints: the state trl_ext adds to TRL's (`trl_ext_state.json`) ---------------------------------------

    def _checkpoint_state(self) -> dict[str, Any]:
        """What a resumed run needs beyond TRL's checkpoint: the adaptive KL coefficient."""
        state = {"kl_coef": self.kl_fn.kl_coef} if self.kl_fn.adaptive else {}
        if self.kl_penalty_fn is not None and self.kl_penalty_fn.adaptive:
            state["kl_penalty_coef"] = self.kl_penalty_fn.kl_coef
        return state

    def _restore_checkpoint_state(self, state: dict[str, Any]) -> None:
        if self.kl_fn.adaptive and "kl_coef" in state:
            self.kl_fn.kl_coef = self.beta = state["kl_coef"]
        if self.kl_penalty_fn is not None and "kl_penalty_coef" in state:
            self.kl_penalty_fn.kl_coef = state["kl_penalty_coef"]

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


def _normalize_per_group(rewards_per_func: torch.Tensor, group_size: int) -> torch.Tensor:
    """GDPO's per-function normalization (TRL's `multi_objective_aggregation="normalize_then_sum"`): each reward
    function's rewards `[N, F]` minus their prompt group's mean, over the group's std + 1e-4 (NaN-aware)."""
    grouped = rewards_per_func.view(-1, group_size, rewards_per_func.size(1))
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    std = nanstd(grouped, dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
    return ((grouped - mean) / (std + 1e-4)).view_as(rewards_per_func)


def _per_token(advantages: torch.Tensor) -> torch.Tensor:
    """Advantages `[B]` as a column `[B, 1]` (`[B, T]` unchanged), to multiply by per-token factors."""
    return advantages if advantages.dim() == 2 else advantages.unsqueeze(1)


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
