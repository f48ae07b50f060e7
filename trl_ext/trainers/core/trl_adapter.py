"""The points every trl_ext trainer shares with the TRL trainer it extends: TRL's metric lists, its model card's
name and paper, HF's checkpoint (saved when an error stops a run, `error_checkpoint.py`) and the HF loop's per-window
hook. A family's own points are in its adapter module
(`core/trl_private_names.py` lists them all)."""

from __future__ import annotations

from typing import Any

import torch

from .error_checkpoint import SavesOnError
from .model_card import AlgorithmModelCard, display_name, paper
from .window import WindowNormalization


class TrainerAdapter(SavesOnError, AlgorithmModelCard):
    """Mixin for a trl_ext trainer, before the TRL trainer in its bases (it needs `self.algorithm`): TRL's model
    card names the algorithm and its paper, with trl_ext's section (`AlgorithmModelCard`); an error that stops
    `train` after its first step leaves a checkpoint (`SavesOnError`)."""

    @property
    def _name(self) -> str:
        return f"{display_name(self.algorithm)} (trl_ext)"

    @property
    def _paper(self) -> dict[str, str]:
        return paper(self.algorithm)

    def save_checkpoint_now(self) -> None:
        """HF's checkpoint of the current step, `output_dir/checkpoint-<step>`, as its loop saves one at `save_steps`
        (the family's own state and the callbacks' `on_save` included)."""
        self._save_checkpoint(self.model_wrapped, trial=None)
        self.control = self.callback_handler.on_save(self.args, self.state, self.control)

    def metric_log(self, mode: str) -> dict[str, list[float]]:
        """TRL's lists of the values logged in `mode` ("train" or "eval"), averaged at each log."""
        return self._metrics[mode]


class CountWindowInLoop(WindowNormalization, TrainerAdapter):
    """For a trainer whose micro-batches come straight from the HF training loop (DPO, SFT, async GRPO): the loop
    hands each optimizer window's micro-batches to `_get_num_items_in_batch` before the first one runs, which
    counts them (`count_window`). The loss is then already the window's share, so HF must not divide it again."""

    loss_is_scaled_for_ga = True

    def _get_num_items_in_batch(self, batch_samples: list, device: torch.device) -> None:
        self.count_window(batch_samples)
        return None

    def count_window(self, batches: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """The window's counts; the `input_tokens` a family counts go to TRL's `num_tokens` (divided by the
        tensor-parallel degree, as TRL counts them)."""
        window = super().count_window(batches)
        tokens = window.pop("input_tokens", None)
        if tokens is not None:
            self._total_train_tokens += int(tokens.item()) // getattr(self, "_tp_size", 1)
        return window

    def log_trained_tokens(self, mode: str) -> None:
        """TRL's `num_tokens` metric: the input tokens trained on so far (counted with each window)."""
        self.metric_log(mode)["num_tokens"] = [self._total_train_tokens]
