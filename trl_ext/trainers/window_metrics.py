"""Loss metrics logged once per optimizer step, as the optimizer window's values (shared by every trl_ext trainer)."""

from __future__ import annotations

from typing import ClassVar

import torch

from ..components import MAX, MEAN, METRIC_KINDS, MIN, SHARE
from ..losses import KLFn


class WindowMetrics:
    """Mixin for a TRL trainer (it uses `self.accelerator` and `self._metrics[mode]`, TRL's lists averaged at
    each log) whose losses are normalized over the optimizer window."""

    _window_sums: torch.Tensor | None = None  # loss metrics summed over the current window
    _window_steps: int = 0

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
        """Move the loss metrics to `self._metrics` once per optimizer step in training (once per batch in eval),
        with one collective and one host sync; returns what was logged ({} mid-window).

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
            self._metrics[mode][name].append(logged[name])
        return logged
