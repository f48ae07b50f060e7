"""GiGPO: group-in-group advantages for multi-turn agents, one row per step (turn) of a run.

Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training" (arXiv 2505.10978); ports Trinity-RFT
0.6.0 `GiGPOAdvantageFn` (`trinity/algorithm/advantage_fn/gigpo_advantage.py`). With r_t the immediate reward of
step t of a run (the caller's `rewards`; sparse by default: the outcome on the run's last step, 0 before it):

* episode level: each run's return R(τ) = Σ_t r_t, normalized over the runs of its task (`group_ids`):
  A_E = (R(τ) − mean) / (F + ε), F the unbiased std of the task's returns (`fnorm="std"`) or 1 (`"none"`, the
  paper's default for agents); a task with a single run uses mean 0 and F 1;
* step level: each step's discounted return R_t = Σ_{k≥t} γ^(k−t) r_k, normalized the same way over the anchor
  group of steps that start from the same environment state (`state_ids`, across every task of the batch); a
  step whose anchor group has a single member, or that has no state (None), gets A_S = 0;
* A = A_E + ω·A_S, one scalar per step (a trainer broadcasts it to the turn's tokens).

States are grouped by their value (the reference groups by `str(state)`, so 1 and "1" would share a group there).
Metrics (the reference's, over the batch): `gigpo/episode_reward_mean/{mean,max,min}` and
`gigpo/episode_reward_std/{mean,max,min}` over the tasks (the std entry is F), `gigpo/anchor_groups_total`,
`gigpo/anchor_groups_size_gt1`, `gigpo/anchor_group_hit_ratio`, `gigpo/mean_abs_A_E`, `gigpo/mean_abs_A_S`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch

from ..components import Argument
from .base import (
    AdvantageFn,
    AdvantageResult,
    GroupIds,
    check_rewards,
    group_index,
    group_stats,
    register_advantage,
    run_groups,
)

FNORMS = ("none", "std")


@register_advantage("gigpo")
class GiGPOAdvantage(AdvantageFn):
    """`compute(rewards, group_ids, *, run_ids, state_ids)`: one row per step, `rewards` the immediate step rewards
    `[N]`, `group_ids` the task of each step, `run_ids` its run (unique across the batch; the rows of a run in step
    order), `state_ids` the hashable key of the environment state the step starts from (None: no state). Returns
    the per-step advantages A_E + ω·A_S (see the module docstring); every row is kept."""

    step_rewards = True
    arguments = (
        Argument("omega", 1.0, "Weight ω of the step-level (anchor-state) advantage in A_E + ω·A_S.", ge=0),
        Argument("gamma", 1.0, "Discount γ of the step-level returns R_t = Σ_{k≥t} γ^(k−t) r_k.", ge=0, le=1),
        Argument(
            "fnorm",
            "none",
            "Normalization of both levels: `none` (F = 1, the paper's default for agents: mean-centred only) or "
            "`std` (the unbiased std of the group, as GRPO).",
            choices=FNORMS,
        ),
        Argument("epsilon", 1e-6, "ε of (x − mean)/(F + ε).", gt=0, config_name="advantage_epsilon"),
    )

    @torch.no_grad()
    def compute(
        self,
        rewards: torch.Tensor,
        group_ids: GroupIds,
        *,
        run_ids: torch.Tensor | Sequence[Hashable],
        state_ids: torch.Tensor | Sequence[Hashable | None],
    ) -> AdvantageResult:
        rewards = check_rewards(self.name, rewards)
        n, device = rewards.numel(), rewards.device
        task, num_tasks = group_index(self.name, group_ids, n, device)
        run, num_runs = group_index(self.name, run_ids, n, device, name="run_ids")
        _, run_task = run_groups(self.name, task, run, num_runs)
        state, has_state = _state_index(self.name, state_ids, n, device)

        returns = rewards.new_zeros(num_runs).index_add_(0, run, rewards)  # R(τ) per run
        a_e, task_mean, task_f = self._normalize(returns, run_task, num_tasks)
        discounted = _discounted_returns(rewards, run, num_runs, self.gamma)
        a_s = torch.zeros_like(rewards)
        num_states = int(state.max()) + 1 if has_state.any() else 0
        anchors = torch.zeros(num_states, dtype=torch.long, device=device)
        if num_states:
            members = state[has_state]
            anchors = torch.bincount(members, minlength=num_states)
            scores, _, _ = self._normalize(discounted[has_state], members, num_states)
            a_s[has_state] = torch.where(anchors[members] > 1, scores, 0.0)
        advantages = a_e[run] + self.omega * a_s

        tasks_seen = torch.bincount(run_task, minlength=num_tasks) > 0
        metrics: dict[str, float] = {}
        for name, values in (("episode_reward_mean", task_mean), ("episode_reward_std", task_f)):
            values = values[tasks_seen]
            if values.numel():
                for stat, value in (("mean", values.mean()), ("max", values.max()), ("min", values.min())):
                    metrics[f"gigpo/{name}/{stat}"] = value.item()
        total, hits = num_states, int((anchors > 1).sum())
        metrics.update(
            {
                "gigpo/anchor_groups_total": float(total),
                "gigpo/anchor_groups_size_gt1": float(hits),
                "gigpo/anchor_group_hit_ratio": hits / total if total else 0.0,
            }
        )
        if n:
            metrics["gigpo/mean_abs_A_E"] = a_e[run].abs().mean().item()
            metrics["gigpo/mean_abs_A_S"] = a_s.abs().mean().item()
        keep = torch.ones(n, dtype=torch.bool, device=device)
        return AdvantageResult(advantages, keep, metrics=metrics)

    def _normalize(
        self, values: torch.Tensor, index: torch.Tensor, num_groups: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(values − mean) / (F + ε) within each group, and each group's mean and F (a group of one: 0 and 1)."""
        _, mean, std = group_stats(values, index, num_groups)
        f = std if self.fnorm == "std" else torch.ones_like(std)
        return (values - mean[index]) / (f[index] + self.epsilon), mean, f


def _state_index(owner: str, state_ids: Any, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Each step's anchor-state group (`[N]`, 0..S−1; arbitrary where there is no state) and whether it has one."""
    if isinstance(state_ids, torch.Tensor):
        index, _ = group_index(owner, state_ids, n, device, name="state_ids")
        return index, torch.ones(n, dtype=torch.bool, device=device)
    if isinstance(state_ids, (str, bytes)) or not isinstance(state_ids, Sequence):
        raise ValueError(f"{owner}: state_ids must be an int tensor or a sequence of hashables (None: no state)")
    if len(state_ids) != n:
        raise ValueError(f"{owner}: rewards has {n} entries but state_ids has {len(state_ids)}")
    present = [i for i, s in enumerate(state_ids) if s is not None]
    index = torch.zeros(n, dtype=torch.long, device=device)
    if present:
        index[present], _ = group_index(owner, [state_ids[i] for i in present], len(present), device, "state_ids")
    has_state = torch.zeros(n, dtype=torch.bool, device=device)
    has_state[present] = True
    return index, has_state


def _discounted_returns(rewards: torch.Tensor, run: torch.Tensor, num_runs: int, gamma: float) -> torch.Tensor:
    """R_t = r_t + γ·R_{t+1} within each run, the rows of a run in step order."""
    running = [0.0] * num_runs
    out = [0.0] * rewards.numel()
    for i, (r, k) in reversed(list(enumerate(zip(rewards.tolist(), run.tolist(), strict=True)))):
        running[k] = r + gamma * running[k]
        out[i] = running[k]
    return torch.tensor(out, dtype=rewards.dtype, device=rewards.device)
