"""Normalization over the optimizer window, one mechanism for every trl_ext trainer family (docs/design.md §2.6).

The loss of one optimizer step must not depend on how the step is split into micro-batches and processes. So each
family says what one micro-batch adds to the window's counts (`micro_batch_counts`: tokens, rows, ...); when a
window starts, `count_window` sums them over the window's micro-batches and all processes (one all-reduce), and
every micro-batch's loss is its *share* of the window's loss (`loss_counts` hands the losses the window's counts,
as NeMo-RL's `global_valid_toks` / `global_valid_seqs`). `scale_for_processes` undoes the gradient averaging of
DDP / DeepSpeed / FSDP. The loss metrics are logged once per optimizer step (`_log_loss_metrics`), each combined
over the window as its component declares it.

Where the window starts depends on the family: the HF training loop hands a window's micro-batches to
`_get_num_items_in_batch` before the first one runs (`CountWindowInLoop`: DPO, SFT, async GRPO); the GRPO family
generates the completions as it prepares its micro-batches, so it counts when it has prepared the window's.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ...components import MAX, MEAN, METRIC_KINDS, MIN, SHARE
from ...losses import KLFn


class WindowNormalization:
    """Mixin for a trl_ext trainer whose losses are normalized over the optimizer window (it uses
    `self.accelerator` and `self.metric_log`)."""

    _window: ClassVar[dict[str, torch.Tensor]] = {}  # the current window's counts (set per instance)
    _window_sums: torch.Tensor | None = None  # loss metrics summed over the current window
    _window_steps: int = 0

    # ---- counts ---------------------------------------------------------------------------------------------------

    def micro_batch_counts(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """What one micro-batch adds to the window's counts, as 0-dim float tensors on its device (no host sync):
        `global_valid_toks` (loss tokens), `global_valid_seqs` (rows) and whatever else the family's loss reads."""
        raise NotImplementedError

    def count_window(self, batches: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """The window's counts: `micro_batch_counts` summed over its micro-batches and over processes (one
        all-reduce); kept as the counts of the window's micro-batches (`loss_counts`)."""
        per_batch = [self.micro_batch_counts(batch) for batch in batches]
        names = list(per_batch[0])
        sums = torch.stack([sum(counts[name] for counts in per_batch) for name in names])
        sums = self.accelerator.reduce(sums, reduction="sum")
        self._window = dict(zip(names, sums, strict=True))
        return self._window

    def loss_counts(self, inputs: dict[str, Any], mode: str) -> dict[str, torch.Tensor]:
        """The counts a micro-batch's loss is normalized by: the window's in training, its own in evaluation."""
        return dict(self._window) if mode == "train" else self.micro_batch_counts(inputs)

    def scale_for_processes(self, loss: torch.Tensor, mode: str) -> torch.Tensor:
        """A window share summed over processes: DDP / DeepSpeed / FSDP average gradients over processes, so scale
        the training loss back by their number (as TRL's `dapo` does)."""
        return loss * self.accelerator.num_processes if mode == "train" else loss

    def window_loss(
        self, loss: torch.Tensor, metrics: dict[str, torch.Tensor], mode: str, aux_loss: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The end of every trainer's loss step: the micro-batch's window share scaled for the processes, plus the
        MoE router's auxiliary loss (TRL's: a per-micro-batch mean, averaged over the accumulation steps), and the
        metrics logged over the window. Returns the loss and what was logged ({} mid-window)."""
        loss = self.scale_for_processes(loss, mode)
        if aux_loss is not None:
            scale = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss + self.router_aux_loss_coef * aux_loss / scale
            metrics["aux_loss"] = aux_loss.detach()
        return loss, self._log_loss_metrics(mode, metrics)

    # ---- metrics --------------------------------------------------------------------------------------------------

    #: the metrics a trainer adds itself: the policy loss's value, the mean token entropy (a share under the window's
    #: token count), the MoE router's auxiliary loss
    trainer_metrics: ClassVar[dict[str, str]] = {"policy_loss": SHARE, "entropy": SHARE, "aux_loss": MEAN}

    def metric_kinds(self) -> dict[str, str]:
        """How each logged metric combines over the window: as the policy loss, the KL term (logged as `kl` and
        `kl_coef`) and the entropy term declare it, and the trainer's own `trainer_metrics`."""
        kl = {**KLFn.metrics, **self.kl_fn.metrics}  # `none` returns no metrics; the estimators' kinds are KLFn's
        entropy = getattr(self, "entropy_fn", None)
        return {
            **self.policy_loss_fn.metrics,
            **(entropy.metrics if entropy is not None else {}),
            "kl": kl["kl_loss"],
            "kl_coef": kl["kl_coef"],
            **self.trainer_metrics,
        }

    def _log_loss_metrics(self, mode: str, metrics: dict[str, torch.Tensor]) -> dict[str, float]:
        """Move the loss metrics to TRL's metric lists (`metric_log`) once per optimizer step in training (once
        per batch in eval), with one collective and one host sync; returns what was logged ({} mid-window).

        `metric_kinds()` says how each metric combines over the window, as the components declare it (`metrics`):
        `SHARE` metrics are this micro-batch's share of the window's value (the loss terms under window
        normalization), and in training their sum over the window's micro-batches and processes is logged; `MEAN`
        metrics (ratios, clip fractions, the MoE router's `aux_loss`, ...) are averaged over the micro-batches and
        processes, as TRL averages what it logs per micro-batch; `MIN` / `MAX` metrics are averaged over the
        micro-batches on each process, and the smallest / largest process's average is logged. A metric without a
        declared kind is an error."""
        kinds = self.metric_kinds()
        undeclared = [name for name in metrics if kinds.get(name) not in METRIC_KINDS]
        if undeclared:
            raise ValueError(
                f"{type(self).__name__}: metric(s) {', '.join(map(repr, undeclared))} have no declared kind; a loss "
                f"declares each metric it returns in its `metrics` ({{name: one of {METRIC_KINDS}}}, "
                "trl_ext.components)"
            )
        values = torch.stack([metrics[n].detach().float().reshape(()).to(self.accelerator.device) for n in metrics])
        steps = 1
        if mode == "train":
            self._window_sums = values if self._window_sums is None else self._window_sums + values
            self._window_steps += 1
            if not self.accelerator.sync_gradients:
                return {}
            values, steps, self._window_sums, self._window_steps = self._window_sums, self._window_steps, None, 0
        per_process = self.accelerator.gather(values).reshape(self.accelerator.num_processes, -1)  # [P, metrics]
        order = (SHARE, MEAN, MIN, MAX)
        combined = torch.stack(
            [per_process.sum(0), per_process.mean(0) / steps, per_process.amin(0) / steps, per_process.amax(0) / steps]
        ).tolist()  # the one host sync
        logged = {}
        for i, name in enumerate(metrics):
            kind = MEAN if kinds[name] == SHARE and mode != "train" else kinds[name]  # in eval a share is the value
            logged[name] = combined[order.index(kind)][i]
            self.metric_log(mode)[name].append(logged[name])
        return logged
