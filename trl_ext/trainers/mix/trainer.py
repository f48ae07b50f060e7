"""MIX and MIX-CHORD: expert demonstrations mixed into the GRPO-family trainer's batches.

Each generation batch of `generation_batch_size` rows (all processes together) holds E = ceil(`expert_data_ratio`
× rows) expert demonstrations and rows − E rollouts (whole prompt groups; the config checks the arithmetic):

* the prompt dataloader yields only the rollouts' prompts, so an epoch still covers every prompt once;
* TRL generates and scores the rollouts, and the algorithm's advantage function runs on them alone;
* the next E demonstrations of the `expert_dataset` stream (a seeded permutation per pass, cycled when exhausted)
  are tokenized like the prompts, split evenly over processes and appended with advantage 0 and `expert_mask`
  True (with their old / reference log-probs when TRL computed those for the rollouts);
* TRL shuffles and splits the batch into micro-batches as usual; the MIX loss applies PPO to the rollout rows and
  (φ-weighted) SFT to the expert rows, each part normalized over its own rows of the optimizer window (or with the
  reference's per-micro-batch weighting when its batch-geometry arguments are set), blended by μ, which follows the
  global step in MIX-CHORD.

The stream's position is saved in `checkpoint-N/trl_ext_state.json`, so a resumed run draws the demonstrations the
uninterrupted run would have. `expert_data_ratio=1` generates nothing (the prompt dataset then only paces the
epochs); `expert_data_ratio=0` is the GRPO-family trainer with the MIX loss on rollouts alone.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F
from datasets import Dataset, IterableDataset
from transformers import TrainingArguments
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.utils import RepeatSampler, pad, repeat_iterable_dataset, use_adapter

from ..grpo.scoring import _loss_mask
from ..grpo.trainer import GRPOFamilyTrainer
from .config import MIXFamilyConfig
from .expert_data import ExpertStream, is_messages, load_expert_examples, logger


class MIXFamilyTrainer(GRPOFamilyTrainer):
    """A GRPO-family trainer whose batches mix rollouts with expert demonstrations (MIX, MIX-CHORD).

    Takes `trl.GRPOTrainer`'s arguments plus `expert_dataset`: demonstrations as prompt-completion rows (standard or
    conversational) or conversational `messages` rows (see `trl_ext.trainers.mix.expert_data`), in the same format as
    the prompts of `train_dataset`.
    """

    config_class = MIXFamilyConfig

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: MIXFamilyConfig | TrainingArguments | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        expert_dataset=None,
        **kwargs: Any,
    ):
        """Check the expert demonstrations, build the GRPO-family trainer, then tokenize the demonstrations.

        Args:
            model (str | PreTrainedModel): The policy, as in `trl.GRPOTrainer`.
            reward_funcs (RewardFunc | list[RewardFunc] | None): The rollouts' reward sources, as in `GRPOFamilyTrainer`
                (expert rows get no reward).
            args: The algorithm's config (`MIXConfig`, `MIXCHORDConfig`), used as is; TRL's `trl.GRPOConfig` or a
                `transformers.TrainingArguments` is converted to one (its fields that differ from TRL's defaults carried
                over, the algorithm's defaults for the rest, `expert_data_ratio` included); None: the defaults.
            train_dataset (Dataset | IterableDataset | None): The rollouts' prompts (a `prompt` column), as in
                `GRPOFamilyTrainer`.
            eval_dataset (Dataset | IterableDataset | dict[str, Dataset] | None): Evaluation prompts, as in
                `GRPOFamilyTrainer`.
            processing_class (PreTrainedTokenizerBase | ProcessorMixin | None): The tokenizer, as in TRL; it also
                tokenizes the demonstrations.
            expert_dataset (Dataset | list[dict] | None): The demonstrations, in the prompts' format: prompt-completion
                rows (standard or conversational) or conversational `messages` rows
                (`trl_ext.trainers.mix.expert_data`).
                Required unless `args.expert_data_ratio` is 0.
            **kwargs: The rest of `trl.GRPOTrainer`'s arguments (`peft_config`, `callbacks`, ...), as in
                `GRPOFamilyTrainer`; not `environment_factory` (expert rows are single-turn text).

        Raises:
            TypeError: `args` is not one of the configs above (see `GRPOFamilyTrainer`).
            ValueError: No `expert_dataset` with `expert_data_ratio` > 0; demonstrations in another format than the
                prompts (conversational vs. plain text); a vision-language model or environments; and
                `GRPOFamilyTrainer`'s errors.
        """
        owner = type(self).__name__
        args = self._resolve_args(model, args)
        ratio = args.expert_data_ratio
        if expert_dataset is None and ratio > 0:
            raise ValueError(
                f"{owner}: expert_dataset is required: expert_data_ratio={ratio} makes that share of every batch "
                "expert demonstrations (pass expert_dataset=..., or set expert_data_ratio=0 to train on rollouts only)"
            )
        examples, conversational = (
            load_expert_examples(owner, expert_dataset) if expert_dataset is not None else ([], False)
        )
        if examples and isinstance(train_dataset, Dataset) and len(train_dataset):  # a stream is not peeked at
            if "prompt" in train_dataset.column_names and is_messages(train_dataset[0]["prompt"]) != conversational:
                kinds = ("conversational", "standard (plain text)")
                raise ValueError(
                    f"{owner}: expert_dataset is {kinds[not conversational]} but the prompts of train_dataset are "
                    f"{kinds[conversational]}; demonstrations must be in the prompts' format, so that expert rows and "
                    "rollouts are tokenized with the same chat template"
                )

        super().__init__(model, reward_funcs, args, train_dataset, eval_dataset, processing_class, **kwargs)

        if self.is_vision_language_model or self.environment_factories is not None:
            raise ValueError(
                f"{owner}: {'vision-language models' if self.is_vision_language_model else 'environments'} are not "
                "supported with expert demonstrations (expert rows are text-only, single-turn)"
            )
        self._expert_rows = self._tokenize_expert_examples(examples, conversational)
        self._expert_stream = ExpertStream(len(self._expert_rows), seed=self.args.seed)
        self._expert_block_start = 0  # stream position when the buffered generation batch was drawn
        self._expert_cycled_noted = False
        self.expert_rows_per_generation = self.args.expert_rows_per_generation
        self.rollout_rows_per_generation = self.args.generation_batch_size - self.expert_rows_per_generation
        self._mixes_rows = 0 < self.expert_rows_per_generation < self.args.generation_batch_size

    # ---- expert demonstrations ---------------------------------------------------------------------------------

    def _tokenize_expert_examples(self, examples: list[tuple[Any, Any]], conversational: bool) -> list[tuple]:
        """(prompt ids, completion ids) per demonstration: the prompt exactly as TRL tokenizes prompts for
        generation, the completion as the policy would emit it (ending with EOS / the end-of-turn token),
        truncated to `max_completion_length`."""
        owner = type(self).__name__
        prompt_ids: list[list[int]] = []
        for start in range(0, len(examples), 512):
            ids, _, _ = self.tokenize_prompts([prompt for prompt, _ in examples[start : start + 512]])
            prompt_ids += [list(row) for row in ids]
        rows, truncated = [], 0
        for index, ((prompt, completion), p_ids) in enumerate(zip(examples, prompt_ids, strict=True)):
            if conversational:
                full = self.processing_class.apply_chat_template(
                    prompt + completion,
                    tools=self.tools or None,
                    chat_template=self.chat_template,
                    tokenize=True,
                    return_dict=False,
                    **self.chat_template_kwargs,
                )
                if list(full[: len(p_ids)]) != p_ids:
                    raise ValueError(
                        f"{owner}: expert_dataset row {index}: the chat template renders the prompt differently once "
                        "the completion is appended, so the completion tokens cannot be separated from the prompt"
                    )
                c_ids = list(full[len(p_ids) :])
                stops = [i for i, token in enumerate(c_ids) if token in self.eos_token_ids]
                if stops:  # what generation stops at: drop the template's trailing newline after the end of turn
                    c_ids = c_ids[: stops[-1] + 1]
            else:
                c_ids = self.text_tokenizer(completion, add_special_tokens=False)["input_ids"]
                if not c_ids or c_ids[-1] not in self.eos_token_ids:
                    c_ids = [*c_ids, self.text_tokenizer.eos_token_id]
            if len(c_ids) > self.max_completion_length:
                c_ids, truncated = c_ids[: self.max_completion_length], truncated + 1
            rows.append((p_ids, c_ids))
        if truncated and self.accelerator.is_main_process:
            logger.warning(
                "%s: %d of %d expert completions are longer than max_completion_length=%d tokens and were truncated",
                owner,
                truncated,
                len(rows),
                self.max_completion_length,
            )
        return rows

    def _expert_batch(self) -> dict[str, torch.Tensor]:
        """This process's share of the next generation batch's expert rows, padded as TRL pads rollouts."""
        indices = self._expert_stream.take(self.expert_rows_per_generation)
        if self._expert_stream.passes and not self._expert_cycled_noted:
            self._expert_cycled_noted = True
            if self.accelerator.is_main_process:
                logger.warning(
                    "%s: expert_dataset exhausted at step %d: all %d demonstrations have been used (%d per generation "
                    "batch); cycling through them again, reshuffled each pass (said once)",
                    type(self).__name__,
                    self.state.global_step,
                    self._expert_stream.size,
                    self.expert_rows_per_generation,
                )
        per_process = self.expert_rows_per_generation // self.accelerator.num_processes
        start = self.accelerator.process_index * per_process
        rows = [self._expert_rows[i] for i in indices[start : start + per_process]]
        device = self.accelerator.device
        batch = {}
        for key, column, side, value in (
            ("prompt", 0, "left", self.text_tokenizer.pad_token_id),
            ("completion", 1, "right", self.text_tokenizer.pad_token_id),
        ):
            ids = [torch.tensor(row[column]) for row in rows]
            batch[f"{key}_ids"] = pad(ids, value, side, self.pad_to_multiple_of).to(device)
            masks = [torch.ones_like(x) for x in ids]
            batch[f"{key}_mask"] = pad(masks, 0, side, self.pad_to_multiple_of).to(device)
        batch["expert_mask"] = torch.ones(len(rows), dtype=torch.bool, device=device)
        return batch

    @torch.no_grad()
    def _expert_logps(self, batch: dict[str, torch.Tensor], reference: bool) -> torch.Tensor:
        """Log-probs of the expert completions under the current policy (`old`) or the reference, as TRL computes
        them for rollouts."""
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        keep = batch["completion_ids"].size(1)
        model, adapter = self.model, contextlib.nullcontext()
        if reference and self.ref_model is not None:
            model = self.ref_model
        elif reference:  # PEFT: the base model (adapter disabled), or the "ref" adapter when re-training one
            unwrapped = self.accelerator.unwrap_model(self.model)
            adapter = use_adapter(unwrapped, adapter_name="ref" if "ref" in unwrapped.peft_config else None)
        with disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs), adapter:
            return self.log_probs_and_entropies(
                model, ids, mask, keep, batch_size=self.args.per_device_train_batch_size
            )[0]

    def score_generation_batch(self, inputs):
        if not self.model.training:  # evaluation scores the policy's own rollouts
            output = super().score_generation_batch(inputs)
            ids = output["completion_ids"]
            output["expert_mask"] = torch.zeros(ids.size(0), dtype=torch.bool, device=ids.device)
            return output
        self._expert_block_start = self._expert_stream.position
        if self.rollout_rows_per_generation == 0:  # expert_data_ratio = 1: nothing to generate
            rollouts = None
            generate_every = self.args.steps_per_generation * self.num_iterations
            needs_old = self.args.gradient_accumulation_steps % generate_every != 0
            needs_ref = self.beta != 0.0
        else:
            rollouts = super().score_generation_batch(inputs)
            n = rollouts["completion_ids"].size(0)
            rollouts["expert_mask"] = torch.zeros(n, dtype=torch.bool, device=rollouts["completion_ids"].device)
            if self.expert_rows_per_generation == 0:
                return rollouts
            needs_old, needs_ref = "old_per_token_logps" in rollouts, "ref_per_token_logps" in rollouts
        expert = self._expert_batch()
        if needs_old:
            expert["old_per_token_logps"] = self._expert_logps(expert, reference=False)
        if needs_ref:
            expert["ref_per_token_logps"] = self._expert_logps(expert, reference=True)
        if rollouts is None:
            expert["advantages"] = torch.zeros(expert["expert_mask"].shape, device=self.accelerator.device)
            expert["num_items_in_batch"] = self.accelerator.gather(expert["completion_mask"].sum()).sum()
            return expert
        return _append_rows(rollouts, expert, self.text_tokenizer.pad_token_id)

    # ---- batching: the prompt dataloader yields the rollouts' prompts only ------------------------------------------

    def train_sampler(self, dataset=None):
        if not self._mixes_rows:
            return super().train_sampler(dataset)
        return RepeatSampler(
            data_source=self.train_dataset if dataset is None else dataset,
            mini_repeat_count=self.num_generations,
            batch_size=self.rollout_rows_per_generation // self.num_generations,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )

    def get_train_dataloader(self):
        # TRL's method with the rollout rows instead of the whole generation batch (expert rows come from the stream)
        if not self._mixes_rows:
            return super().get_train_dataloader()
        dataset = self.train_dataset
        if isinstance(dataset, IterableDataset):
            if self.shuffle_dataset:
                dataset = dataset.shuffle(seed=self.args.seed)
            dataset = repeat_iterable_dataset(
                dataset,
                mini_repeat_count=self.num_generations,
                batch_size=self.rollout_rows_per_generation // self.num_generations,
                repeat_count=self.num_iterations * self.args.steps_per_generation,
            )
        return self.dataloader(
            dataset=dataset,
            description="Training",
            batch_size=self.rollout_rows_per_generation // self.accelerator.num_processes,
            sampler_fn=self.train_sampler,
            is_training=True,
        )

    # ---- the loss ------------------------------------------------------------------------------------------------

    def micro_batch_counts(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        counts = super().micro_batch_counts(batch)
        expert = batch["expert_mask"]
        counts["expert_valid_toks"] = (_loss_mask(batch) * expert.unsqueeze(1)).sum().float()
        counts["expert_valid_seqs"] = expert.sum().float()
        return counts

    def _policy_loss(self, mode: str, **inputs: Any):
        if mode == "eval" or not self.args.reference_weighting:
            return super()._policy_loss(mode, **inputs)
        # The reference's per-micro-batch weighting: the loss of each micro-batch over its own rows, divided by the
        # accumulation steps as verl does; as a share of the window (summed over processes, then scaled back by
        # their number in the loss step) it is also divided by the number of processes.
        inputs = {k: v for k, v in inputs.items() if not k.startswith(("global_valid_", "expert_valid_"))}
        inputs.pop("normalizer", None)
        loss, metrics = self.loss_step.policy_loss(mode, **inputs)
        scale = 1.0 / (self.current_gradient_accumulation_steps * self.accelerator.num_processes)
        share = self.policy_loss_fn.is_window_share
        return loss * scale, {k: v * scale if share(k) else v for k, v in metrics.items()}

    # ---- checkpoints: the position in the expert stream ------------------------------------------------------------

    def _checkpoint_state(self) -> dict[str, Any]:
        # Mid-block (steps_per_generation > gradient_accumulation_steps) a resumed run regenerates the block it was
        # in, so it must redraw that block's demonstrations.
        generate_every = self.args.steps_per_generation * self.num_iterations
        mid_block = self.generation_step % generate_every != 0
        position = self._expert_block_start if mid_block else self._expert_stream.position
        return {**super()._checkpoint_state(), "expert_rows_drawn": position}

    def _restore_checkpoint_state(self, state: dict[str, Any]) -> None:
        super()._restore_checkpoint_state(state)
        if "expert_rows_drawn" in state:
            self._expert_stream.position = self._expert_block_start = int(state["expert_rows_drawn"])


# Keys of TRL's batch and how expert rows fill the ones they do not compute: per-token keys are padded to a common
# width (prompt keys on the left, the rest on the right).
_LEFT_PADDED = ("prompt_ids", "prompt_mask")
_EXPERT_FILL = {"importance_sampling_ratio": 1.0, "sampling_per_token_logps": 0.0, "tool_mask": 1}


def _append_rows(rollouts: dict[str, Any], expert: dict[str, torch.Tensor], pad_token_id: int) -> dict[str, Any]:
    """The rollouts' batch with the expert rows appended (TRL shuffles and splits it afterwards)."""
    n_expert, width = expert["completion_ids"].shape
    merged = {}
    for key, value in rollouts.items():
        if not isinstance(value, torch.Tensor) or value.dim() == 0:
            merged[key] = value  # num_items_in_batch: the rollouts' token count, unused by the trl_ext losses
            continue
        extra = expert.get(key)
        if key == "advantages":  # expert rows are not scored: advantage 0 (per sequence or per token)
            extra = value.new_zeros((n_expert,) if value.dim() == 1 else (n_expert, width))
        elif extra is None and key in _EXPERT_FILL:
            extra = value.new_full((n_expert, width if value.size(1) != 1 else 1), _EXPERT_FILL[key])
        elif extra is None:
            raise ValueError(f"MIX trainers cannot add expert rows to a batch carrying {key!r}")
        if value.dim() == 2 and value.size(1) != extra.size(1):
            common = max(value.size(1), extra.size(1))
            fill = pad_token_id if key.endswith("_ids") else (1 if key == "tool_mask" else 0)
            value, extra = (
                F.pad(x, (common - x.size(1), 0) if key in _LEFT_PADDED else (0, common - x.size(1)), value=fill)
                for x in (value, extra)
            )
        merged[key] = torch.cat([value, extra.to(value.dtype)])
    return merged
