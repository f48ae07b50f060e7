"""The rewards and advantages of a GRPO-family generation batch (`GRPOScoring`): non-finite rewards refused, the
algorithm's advantage function in place of TRL's advantages (token-level ones, the KL penalty on the rewards,
ReMax's greedy baselines, the per-turn layout), dropped samples masked out, and verl's rollout correction.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import torch
from trl.data_utils import is_conversational
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import nanstd, use_adapter

from ...advantages.overlong import overlong_penalty
from ...advantages.reinforce_plus_plus import place_token_rewards

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
"""TRL's multimodal batch keys: forwarded to the log-prob pass; `duplicate_experiences` cannot copy their rows."""


class GRPOScoring:
    """Mixin of `GRPOFamilyTrainer`: the generation batch's rewards, advantages and rollout correction."""

    _gathered_overlong: torch.Tensor | None = None
    _reward_components: torch.Tensor | None = None

    def checked_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = self.trl_rewards(inputs, prompts, completions, completion_ids_list)
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
        if self.args.overlong_buffer:  # DAPO's length penalty, added to the weighted rewards in scoring
            lengths = torch.tensor([len(ids) for ids in completion_ids_list], device=rewards_per_func.device)
            self._gathered_overlong = overlong_penalty(
                self.accelerator.gather(lengths),
                self.max_completion_length,
                self.args.overlong_buffer,
                self.args.overlong_penalty_factor,
            )
        return rewards_per_func

    def _generate_round(self, inputs) -> tuple[dict[str, Any], torch.Tensor, torch.Tensor | None]:
        """One generation and reward pass of TRL's on the local prompts `inputs`: `(output, rewards_per_func [N, F],
        overlong penalties [N] or None)`, the rewards of every process's samples."""
        self._arm_turn_recorder()
        output = self.trl_generate_and_score(inputs)
        if self.kl_penalty_fn is not None and output.get("ref_per_token_logps") is None:  # TRL's only for beta != 0
            output["ref_per_token_logps"] = self._reference_log_probs(output)
        rewards_per_func, self._gathered_rewards = self._gathered_rewards, None
        overlong, self._gathered_overlong = self._gathered_overlong, None
        return output, rewards_per_func, overlong

    def score_generation_batch(self, inputs):
        mode = "train" if self.model.training else "eval"
        table_rows = None
        if mode == "train" and self.args.dynamic_sampling:
            output, rewards_per_func, overlong, table_rows = self.dynamic_sampler.sample(inputs)
        else:
            output, rewards_per_func, overlong = self._generate_round(inputs)
        self._generation_inputs = inputs  # the dataset rows: ReMax scores its greedy completions with them
        device = rewards_per_func.device
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        self._reward_components = rewards_per_func  # GDPO's per-function rewards
        if self.multi_objective_aggregation == "normalize_then_sum":  # GDPO: normalize each function per group first
            rewards_per_func = _normalize_per_group(rewards_per_func, group_size)
        rewards = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
        if overlong is not None:
            rewards = rewards + overlong.to(rewards.dtype)
            self.metric_log(mode)["rewards/overlong_penalty/mean"].append(overlong.mean().item())
            self.metric_log(mode)["rewards/overlong_penalty/frac"].append((overlong < 0).float().mean().item())
        group_ids = torch.arange(rewards.numel(), device=device) // group_size

        result, response_mask = self._compute_advantages(rewards, group_ids, output)
        self._reward_components = None
        if self.beta == 0:
            output.pop("ref_per_token_logps", None)  # the loss has no KL term
        for name, value in (result.metrics or {}).items():
            self.metric_log(mode)[f"advantage/{name}"].append(float(value))
        # The completions table shows each completion's own advantage: 0 for a row replaced by a duplicate.
        table = _zero_dropped(result.advantages, result.keep)
        row_advantages = result.advantages  # the advantage of each row of the batch that trains
        if result.source is not None:  # `duplicate_experiences`: dropped groups' rows become copies of kept ones
            copied = result.source != torch.arange(rewards.numel(), device=device)
            self.metric_log(mode)["advantages/duplicated_frac"].append(copied.float().mean().item())
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
        self.metric_log(mode)["advantages/dropped_frac"].append(dropped_frac)
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
        if table_rows is not None:  # dynamic sampling: the table shows the last generation round's samples
            shown = table.new_zeros(table.numel())
            taken = table_rows >= 0
            table = shown.index_copy_(0, table_rows[taken], table[taken])
        self._show_advantages(table)
        return output

    def _correct_rollouts(self, output: dict[str, Any], mode: str) -> None:
        """verl's rollout correction (`rollout_is` / `rollout_rs`) on the generation batch, all processes together
        (verl corrects its whole training batch: the batch normalization and the metrics are over it).

        π_old is TRL's `old_per_token_logps` (computed here when TRL did not, and kept for the loss as TRL keeps them
        with its own correction), π_rollout the sampler's `sampling_per_token_logps`; a token the sampler could not
        score (NaN) gets no correction, TRL's rule. The weights become `importance_sampling_ratio` (1 off the loss
        mask, as TRL's), which the loss step applies once, as it applies TRL's (the config turned TRL's own
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
            self.metric_log(mode)[name].append(value)

    def _take_rows(
        self,
        output: dict[str, Any],
        source: torch.Tensor,
        n_local: int | None = None,
        purpose: str = "duplicate_experiences",
    ) -> dict[str, Any]:
        """`output` with row i of the generation batch (all processes) replaced by row `source[i]` of the gathered
        `output`; each process takes `n_local` rows (default: as many as it has).

        Each process's row-aligned tensors are padded to a common width (prompts on the left, completions on the
        right), gathered, indexed with its slice of `source`, and cropped back to the width its rows need, so a
        process that receives no longer row keeps its tensors' shapes. `purpose` names the setting in the error
        for a multimodal batch."""
        images = [key for key in _MULTIMODAL_KEYS if key in output]
        if images:
            raise ValueError(
                f"{type(self).__name__}: {purpose} cannot copy the rows of a multimodal batch "
                f"({', '.join(images)}); set {purpose}=False"
            )
        n_local = n_local or output["completion_mask"].size(0)
        rows = source[self.accelerator.process_index * n_local : (self.accelerator.process_index + 1) * n_local]
        taken = dict(output)
        for key, value in output.items():
            if key == "advantages" or not isinstance(value, torch.Tensor) or value.dim() == 0:
                continue
            fill = 1 if key == "importance_sampling_ratio" else 0
            fill = self.text_tokenizer.pad_token_id if key.endswith("_ids") else fill
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
        logged = self.completions_table("advantages")
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
        if "sum_pi_squared" in needed:
            local["sum_pi_squared"] = self._sum_pi_squared(output)
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
        if "reward_components" in declared:  # GDPO: each reward function's rewards, normalized one by one
            kwargs["reward_components"] = self._reward_components
            kwargs["reward_weights"] = self.reward_weights.to(rewards.device)
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
        with disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            logps, entropies = self._log_probs(self.model, output, entropy)
        return (logps if old is None else old), entropies

    def _reference_log_probs(self, output: dict[str, Any]) -> torch.Tensor:
        """The reference model's per-token log-probs `[B, T]` of the local completions, as TRL computes them for
        beta != 0: its reference model (`ref_model`), or with PEFT the policy with the adapter off (or its initial
        `ref` adapter). The KL penalty on the rewards reads them when the loss has no KL term."""
        if self.ref_model is not None:
            return self._log_probs(self.ref_model, output, entropy=False)[0]
        unwrapped = self.accelerator.unwrap_model(self.model)
        with use_adapter(unwrapped, adapter_name="ref" if "ref" in unwrapped.peft_config else None):
            return self._log_probs(self.model, output, entropy=False)[0]

    def _log_probs(self, model, output: dict[str, Any], entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`model`'s per-token log-probs (and entropies) of the local completions, without gradients, TRL's batch
        size at a time."""
        completion_ids = output["completion_ids"]
        mode = "train" if self.model.training else "eval"
        batch_size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        with torch.no_grad():
            logps, entropies, _ = self.log_probs_and_entropies(
                model,
                torch.cat([output["prompt_ids"], completion_ids], dim=1),
                torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1),
                completion_ids.size(1),
                batch_size=batch_size,
                compute_entropy=entropy,
                **{key: output.get(key) for key in _MULTIMODAL_KEYS},
            )
        return logps, entropies

    def _sum_pi_squared(self, output: dict[str, Any]) -> torch.Tensor:
        """Σ_v π(v)² at each completion position `[B, T]` under the sampling policy (the current weights, TRL's
        `temperature`): the optimal token baseline's path-variance proxy (`optimal_token_baseline`). One forward
        pass without gradients, `per_device_train_batch_size` rows at a time."""
        completion_ids = output["completion_ids"]
        width = completion_ids.size(1)
        input_ids = torch.cat([output["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        step = self.args.per_device_train_batch_size
        values = []
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            for start in range(0, input_ids.size(0), step):
                rows = slice(start, start + step)
                logits = self.model(
                    input_ids=input_ids[rows], attention_mask=attention_mask[rows], logits_to_keep=width + 1
                ).logits[:, :-1]
                probs = torch.softmax(logits.float() / self.temperature, dim=-1)
                values.append(probs.square().sum(-1))
        return torch.cat(values)

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
            self.metric_log(mode)[f"advantage/{name}"].append(float(value))
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
        generation path (vLLM when it is on) and scored by the reward functions (with DAPO's overlong penalty from its
        length when `overlong_buffer` > 0, as the samples' rewards are: verl's reward manager scores its baseline
        batch alike, and the asynchronous worker does the same); every sample of the prompt's group gets it. Each
        process generates for the groups of its own rows (whole groups: the config checks it)."""
        inputs = self._generation_inputs
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        firsts = [inputs[i] for i in range(0, len(inputs), group)]
        prompts = [row["prompt"] for row in firsts]
        prompt_ids, images, multimodal = self.tokenize_prompts(prompts)
        with self._greedy_generation():
            completion_ids, _ = self.generate_single_turn(prompt_ids, images, multimodal, 1)
        if is_conversational({"prompt": prompts[0]}):
            texts = self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
            completions = [[{"role": "assistant", "content": text}] for text in texts]
        else:
            completions = self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
        per_func = self.calculate_rewards(firsts, prompts, completions, completion_ids)  # non-finite: an error
        self._gathered_rewards = None
        baselines = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)
        penalty, self._gathered_overlong = self._gathered_overlong, None
        if penalty is not None:  # DAPO's length penalty: the baseline is the greedy completion's reward, shaped alike
            baselines = baselines + penalty.to(baselines)
        self.metric_log(mode)["advantage/greedy_reward"].append(baselines.mean().item())
        return baselines.repeat_interleave(group)[: group_ids.numel()]


def _normalize_per_group(rewards_per_func: torch.Tensor, group_size: int) -> torch.Tensor:
    """GDPO's per-function normalization (TRL's `multi_objective_aggregation="normalize_then_sum"`): each reward
    function's rewards `[N, F]` minus their prompt group's mean, over the group's std + 1e-4 (NaN-aware)."""
    grouped = rewards_per_func.view(-1, group_size, rewards_per_func.size(1))
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    std = nanstd(grouped, dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
    return ((grouped - mean) / (std + 1e-4)).view_as(rewards_per_func)


def _zero_dropped(advantages: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Advantages (`[N]` or `[N, T]`) with the rows the estimator dropped set to 0."""
    return advantages.masked_fill(~keep.view(-1, *[1] * (advantages.dim() - 1)), 0.0)


def _loss_mask(inputs: dict[str, Any]) -> torch.Tensor:
    """The loss mask `[B, T]`: the completion mask times `tool_mask` (the loss-only mask: tool outputs, rejected
    tokens) where the batch has one; the GRPO family's trainers all read the loss tokens through it."""
    mask = inputs["completion_mask"]
    return mask if "tool_mask" not in inputs else mask * inputs["tool_mask"]
