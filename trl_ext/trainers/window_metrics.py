"""Loss metrics logged once per optimizer step, as the optimizer window's values (shared by every trl_ext trainer)."""

from __future__ import annotations

from collections.abc import Collection

import torch


class WindowMetrics:
    """Mixin for a TRL trainer (it uses `self.accelerator` and `self._metrics[mode]`, TRL's lists averaged at
    each log) whose losses are normalized over the optimizer window."""

    _window_sums: torch.Tensor | None = None  # loss metrics summed over the current window
    _window_steps: int = 0

    def _log_loss_metrics(
        self, mode: str, metrics: dict[str, torch.Tensor], shares: Collection[str]
    ) -> dict[str, float]:
        """Move the loss metrics to `self._metrics` once per optimizer step in training (once per batch in eval),
        with one collective and one host sync; returns what was logged ({} mid-window).

        `shares` names the metrics that are this micro-batch's share of the window's value (the loss terms under
        window normalization, as each loss declares them): in training their sum over the window's micro-batches
        and processes is logged. Every other metric (ratios, clip fractions, the MoE router's `aux_loss`, ...) is
        averaged over the micro-batches and processes, as TRL averages what it logs per micro-batch."""
        values = torch.stack([metrics[n].detach().float().reshape(()).to(self.accelerator.device) for n in metrics])
        steps = 1
        if mode == "train":
            self._window_sums = values if self._window_sums is None else self._window_sums + values
            self._window_steps += 1
            if not self.accelerator.sync_gradients:
                return {}
            values, steps, self._window_sums, self._window_steps = self._window_sums, self._window_steps, None, 0
        totals = self.accelerator.reduce(values, reduction="sum").tolist()
        logged = {}
        for name, total in zip(metrics, totals, strict=True):
            share = mode == "train" and name in shares
            logged[name] = total if share else total / (self.accelerator.num_processes * steps)
            self._metrics[mode][name].append(logged[name])
        return logged
