"""The optimizer window of the asynchronous trainer, seen whole: every micro-batch of every process as one `[N, T]`.

What needs the whole optimizer window before its first micro-batch is trained lives here: verl's rollout correction
and M2PO's selection (batch statistics over the window, from π at the start of the step; the trainer's
`_prepare_window` runs them) and the token-level advantage estimators (`window_estimate`).

`WindowGather` lays the window's samples out in one order on every process: process 0's micro-batches in order, then
process 1's, ..., each micro-batch's samples in its row's order, each block padded to the largest process's (padding
rows have no trained token). A token-level tensor is `[N, T]` (a sample's trained tokens in order, `T` the window's
longest), a per-sample one `[N, k]`; `local` gives where this process's micro-batches sit, `put` writes a `[N, T]`
result back onto each micro-batch, aligned with its flat loss terms (`token_index`).

Token-level estimators in an asynchronous run (REINFORCE++, Hu 2025, arXiv 2501.03262; `grpo_verl`; GPG, Chu et al.
2025, arXiv 2504.02546; ...): the rollout worker stamps each sample's (shaped) reward and advantage 0
(`trl_ext.async_rollout.scoring`, `IN_WINDOW`), and `window_estimate` runs the estimator once per optimizer window
on its samples' rewards, groups and trained-token masks, as the synchronous trainers run it once per generation batch
(one optimizer step's samples, `steps_per_generation` = `gradient_accumulation_steps`): REINFORCE++'s whitening and
GPG's α are the window's statistics. A group the queue split between two windows is estimated from its samples in
each. A sample no reward function scored (reward NaN) takes no part and gets advantage 0, as in the worker's group
estimators. ReMax (Li et al. 2023, arXiv 2310.10505) runs here too: its `reward_baselines` `[N]`, each sample's
prompt's greedy reward, are made in the worker and stamped on the samples (`trl_ext.async_rollout.scoring`).
"""

from __future__ import annotations

from typing import Any

import torch

from ...advantages import AdvantageFn
from .packed_rows import TermGrid


class WindowGather:
    """The window's micro-batches (`grids`, this process's) as tensors over all processes (module docstring)."""

    def __init__(self, accelerator: Any, grids: list[TermGrid]):
        self.accelerator = accelerator
        self.grids = grids
        width = torch.tensor(max([g.width for g in grids] + [1]), device=accelerator.device)
        self.width = int(accelerator.reduce(width, "max"))
        self._start: int | None = None

    def _all(self, local: torch.Tensor) -> torch.Tensor:
        everything = self.accelerator.gather(self.accelerator.pad_across_processes(local, dim=0))
        # each process's block is padded to the largest: this process's rows start at its index times that size
        self._start = self.accelerator.process_index * (everything.size(0) // self.accelerator.num_processes)
        return everything

    def tokens(self, per_batch: list[torch.Tensor]) -> torch.Tensor:
        """`[N, T]`: each micro-batch's `[B_i, T_i]` grid (`TermGrid.scatter`), padded to the window's width."""
        padded = [torch.nn.functional.pad(grid, (0, self.width - grid.size(1))) for grid in per_batch]
        return self._all(torch.cat(padded) if padded else torch.zeros(0, self.width, device=self.accelerator.device))

    def terms(self, per_batch: list[torch.Tensor]) -> torch.Tensor:
        """`[N, T]`: each micro-batch's flat `[M_i]` loss-term values (aligned with its row's terms), laid out."""
        return self.tokens([grid.scatter(values) for grid, values in zip(self.grids, per_batch, strict=True)])

    def samples(self, per_batch: list[torch.Tensor]) -> torch.Tensor:
        """`[N, k]`: each micro-batch's per-sample `[B_i, k]` values."""
        return self._all(torch.cat(per_batch))

    def local(self) -> list[slice]:
        """Where each of this process's micro-batches sits among the `N` samples (after a gather)."""
        if self._start is None:
            raise RuntimeError("WindowGather.local: gather something first (tokens or samples)")
        slices, offset = [], self._start
        for grid in self.grids:
            slices.append(slice(offset, offset + grid.num_samples))
            offset += grid.num_samples
        return slices

    def put(self, batches: list[dict[str, Any]], name: str, values: torch.Tensor) -> None:
        """Store `values` (`[N, T]`) on each micro-batch as `batch[name]`, aligned with its `token_index` (0 where
        it has no loss term)."""
        for batch, grid, here in zip(batches, self.grids, self.local(), strict=True):
            terms = batch["token_index"] >= 0
            full = torch.zeros_like(batch["token_index"], dtype=values.dtype)
            full[terms] = grid.gather(values[here])
            batch[name] = full


def window_estimate(
    estimator: AdvantageFn,
    rewards: torch.Tensor,
    groups: torch.Tensor,
    mask: torch.Tensor,
    inputs: dict[str, torch.Tensor] | None = None,
    base: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
    """A token-level estimator's advantages `[N, T]` over the window (module docstring), its returns `[N, T]`
    (`AdvantageResult.returns`, GAE's value targets: 0 on the samples it did not score; None when it has none) and
    its metrics.

    Args:
        estimator: The config's advantage estimator (token-level; its inputs among the window's).
        rewards: `[N]` float, each sample's shaped reward; NaN for an unscorable sample.
        groups: `[N]` long, each sample's group id.
        mask: `[N, T]` bool, the trained tokens; a row without any is padding.
        inputs: The window's other inputs, by the estimator's names: `[N, T]` ones (`old_logprob`: μ; with a teacher
            `teacher_logprob` and `teacher_valid_mask`; with a critic `values`) and `[N]` ones (ReMax's
            `reward_baselines`); the estimator gets those it declares. Without a declared `teacher_valid_mask`, the
            tokens the teacher cannot score leave its `response_mask`, as in the synchronous distillation trainer.
        base: `[N, T]` advantages the worker stamped (distillation's task term w·Â), added on the trained tokens.
    """
    available = {"response_mask": mask, "completion_mask": mask, **(inputs or {})}
    declared = estimator.inputs()
    if "teacher_valid_mask" in available and "teacher_valid_mask" not in declared:
        available["response_mask"] = mask & available["teacher_valid_mask"]
    reads_teacher = "teacher_logprob" in declared  # distillation: the rewards enter through `base`
    used = mask.any(dim=1) & (torch.ones_like(mask[:, 0]) if reads_teacher else torch.isfinite(rewards))
    advantages = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    returns = None
    metrics: dict[str, float] = {}
    if bool(used.any()):
        chosen = {name: value[used] for name, value in available.items() if name in declared}
        result = estimator.compute(rewards[used].to(torch.float32), groups[used].tolist(), **chosen)
        kept = mask[used] & result.keep.to(mask.device).unsqueeze(1)
        advantages[used] = torch.where(kept, result.advantages.to(device=mask.device, dtype=torch.float32), 0.0)
        if result.returns is not None:
            returns = torch.zeros_like(advantages)
            returns[used] = torch.where(kept, result.returns.to(device=mask.device, dtype=torch.float32), 0.0)
        metrics = {f"advantage/{k}": float(v) for k, v in (result.metrics or {}).items()}
    if base is not None:
        advantages = advantages + torch.where(mask, base.to(advantages.dtype), 0.0)
    return advantages, returns, metrics


__all__ = ["WindowGather", "window_estimate"]
