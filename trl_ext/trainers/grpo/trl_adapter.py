"""Where the GRPO family meets `trl.GRPOTrainer`: each TRL method it overrides hands over to a trl_ext step named
here, and each private TRL attribute it reads has an accessor here. Nothing else in the family touches TRL's
private names (`core/trl_private_names.py` lists them)."""

from __future__ import annotations

import os
from typing import Any

import torch
import trl
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..core.trl_adapter import TrainerAdapter


class GRPOAdapter(TrainerAdapter, trl.GRPOTrainer):
    """`trl.GRPOTrainer`, fastened to trl_ext at named points.

    The steps a family overrides (each defaults to TRL's own): `score_generation_batch`, `checked_rewards`,
    `next_micro_batch`, `micro_batch_loss`, `generate_rollouts`, `generation_round_starts`, `train_sampler`,
    `save_trl_ext_state` / `load_trl_ext_state`. TRL's own implementations are the `trl_*` methods."""

    # ---- TRL's methods, handed over to trl_ext's steps --------------------------------------------------------------

    def _generate_and_score_completions(self, inputs):
        return self.score_generation_batch(inputs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        return self.checked_rewards(inputs, prompts, completions, completion_ids_list)

    def _prepare_inputs(self, generation_batch):
        return self.next_micro_batch(generation_batch)

    def _compute_loss(self, model, inputs):
        return self.micro_batch_loss(model, inputs)

    def _generate(self, prompts):
        return self.generate_rollouts(prompts)

    def _generate_single_turn(self, *args, **kwargs):
        self.generation_round_starts()
        return super()._generate_single_turn(*args, **kwargs)

    def _get_train_sampler(self, dataset=None):
        return self.train_sampler(dataset)

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        self.save_trl_ext_state(
            os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        )

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            self.load_trl_ext_state(checkpoint)

    # ---- the steps, TRL's by default -------------------------------------------------------------------------------

    def score_generation_batch(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """The training batch of a generation batch of prompt rows: completions, rewards, advantages."""
        return self.trl_generate_and_score(inputs)

    def checked_rewards(self, inputs, prompts, completions, completion_ids_list) -> torch.Tensor:
        """The rewards `[N, F]` of every process's samples, one column per reward function."""
        return self.trl_rewards(inputs, prompts, completions, completion_ids_list)

    def next_micro_batch(self, generation_batch):
        """The micro-batch the loss runs on next."""
        return self.trl_prepare_inputs(generation_batch)

    def micro_batch_loss(self, model, inputs) -> torch.Tensor:
        """The loss of one prepared micro-batch."""
        return self.trl_compute_loss(model, inputs)

    def generate_rollouts(self, prompts):
        """TRL's generation of the completions (single- or multi-turn) of a list of prompts."""
        return self.trl_generate(prompts)

    def generation_round_starts(self) -> None:
        """Called as each of TRL's generation rounds starts (a turn of a multi-turn rollout)."""

    def train_sampler(self, dataset=None):
        """The sampler of the training prompts."""
        return self.trl_train_sampler(dataset)

    def save_trl_ext_state(self, folder: str) -> None:
        """Save what a resumed run needs beyond TRL's checkpoint into the checkpoint `folder`."""

    def load_trl_ext_state(self, folder: str) -> None:
        """Restore what `save_trl_ext_state` saved in the checkpoint `folder`."""

    # ---- TRL's own implementations ---------------------------------------------------------------------------------

    def trl_generate_and_score(self, inputs):
        return super()._generate_and_score_completions(inputs)

    def trl_rewards(self, inputs, prompts, completions, completion_ids_list) -> torch.Tensor:
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def trl_prepare_inputs(self, generation_batch):
        return super()._prepare_inputs(generation_batch)

    def trl_compute_loss(self, model, inputs) -> torch.Tensor:
        return super()._compute_loss(model, inputs)

    def trl_train_sampler(self, dataset=None):
        return super()._get_train_sampler(dataset)

    def trl_generate(self, prompts):
        return super()._generate(prompts)

    # ---- TRL's private attributes ----------------------------------------------------------------------------------

    def calculate_rewards(self, inputs, prompts, completions, completion_ids_list) -> torch.Tensor:
        """TRL's reward pass (`checked_rewards` included, and any subclass's override of TRL's method)."""
        return self._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations: int):
        """One generation round of TRL's, as its multi-turn loop runs it: `(completion ids, ...)`."""
        return self._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations)

    def log_probs_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, **kwargs):
        """TRL's fused per-token log-prob pass: `(log-probs [B, T], entropies or None, router aux loss or None)`."""
        return self._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, **kwargs)

    def tokenize_prompts(self, prompts: list) -> tuple[list[list[int]], Any, Any]:
        """Prompts tokenized as TRL tokenizes them for generation: `(ids, images, multimodal fields)`."""
        return self._tokenize_prompts(prompts)

    @property
    def text_tokenizer(self):
        """The tokenizer (the processor's, for a vision-language model)."""
        return self._tokenizer

    @property
    def is_vision_language_model(self) -> bool:
        return self._is_vlm

    @property
    def generation_step(self) -> int:
        """TRL's micro-batch counter, which decides when TRL generates a new generation batch."""
        return self._step

    @generation_step.setter
    def generation_step(self, value: int) -> None:
        self._step = value

    def completions_table(self, column: str) -> list:
        """A column of TRL's completions table (the values logged with each sample)."""
        return self._logs[column]

    def tool_tables(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """Each rollout's (sync, async) tool tables of the current generation batch."""
        return list(zip(self._sync_tool_dicts, self._async_tool_dicts, strict=True))

    def dataloader(self, **kwargs: Any):
        """A dataloader built as TRL builds its training one (`dataset`, `description`, `batch_size`, `sampler_fn`,
        `is_training`)."""
        return self._get_dataloader(**kwargs)
