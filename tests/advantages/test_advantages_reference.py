"""Randomized parity of trl_ext.advantages with plain-Python loop ports of Trinity-RFT 0.6.0's estimators.

Each ``trinity_*`` function below follows the reference procedure of ``trinity/algorithm/advantage_fn``
group by group (as the reference loops over its experiences), written independently of the vectorized
implementation, with the deliberate differences stated where they apply (REC's group of one).
Rewards are drawn from a small set of dyadic values so that ties (a reward equal to its group mean, equal
rewards within a group) are frequent and exact.
"""

from __future__ import annotations

import math
import random
import statistics

import pytest
import torch
from test_advantages_token import py_reinforce_pp

from trl_ext.advantages import get_advantage_fn

VALUES = [0.0, 0.0, 1.0, 1.0, 0.5, -1.0, 2.0, 0.25]


def close(actual: float, expected: float, tol: float = 1e-9) -> bool:
    return abs(actual - expected) <= tol * max(1.0, abs(expected))


def random_batch(rng: random.Random, equal_sizes: bool = False) -> tuple[list[float], list[str]]:
    """Interleaved groups (sizes 1..6, or one common size) of rewards from VALUES or uniform."""
    num_groups = rng.randint(1, 6)
    common = rng.randint(1, 5)
    continuous = rng.random() < 0.25
    rewards, groups = [], []
    for g in range(num_groups):
        for _ in range(common if equal_sizes else rng.choice([1, 1, 2, 3, 4, 6])):
            rewards.append(rng.uniform(-2, 2) if continuous else rng.choice(VALUES))
            groups.append(f"q{g}")
    order = list(range(len(rewards)))
    rng.shuffle(order)
    return [rewards[i] for i in order], [groups[i] for i in order]


def members(groups: list) -> dict:
    """Group id -> the indices of its samples, groups in order of first appearance (Trinity's group_by)."""
    out: dict = {}
    for i, g in enumerate(groups):
        out.setdefault(g, []).append(i)
    return out


# ---------------------------------------------------------------------------------------------------------
# Reference ports
# ---------------------------------------------------------------------------------------------------------


def trinity_grpo(
    rewards, groups, epsilon=1e-6, std_threshold=None, std_cal_level="group"
) -> tuple[dict[int, float], list[str]]:
    """GRPOGroupedAdvantage without rank_penalty: {kept sample: advantage}, and the skipped groups in order."""
    batch_std = None
    if std_cal_level == "batch":
        batch_std = statistics.stdev(rewards) if len(rewards) > 1 else 1.0
    out, skipped = {}, []
    for g, idx in members(groups).items():
        rs = [rewards[i] for i in idx]
        if len(rs) == 1:
            mean, std = 0.0, 1.0
            skip = std_threshold is not None
        else:
            mean, std = statistics.mean(rs), statistics.stdev(rs)
            skip = std_threshold is not None and std <= std_threshold
        if skip:
            skipped.append(g)
            continue
        for i in idx:
            out[i] = (rewards[i] - mean) / ((batch_std if batch_std is not None else std) + epsilon)
    return out, skipped


def trinity_asymre(rewards, groups, baseline_shift=-0.1) -> list[float]:
    out = [0.0] * len(rewards)
    for idx in members(groups).values():
        baseline = 0.0 if len(idx) == 1 else statistics.mean(rewards[i] for i in idx) + baseline_shift
        for i in idx:
            out[i] = rewards[i] - baseline
    return out


def trinity_opmd(rewards, groups, opmd_baseline="mean", tau=1.0) -> list[float]:
    out = [0.0] * len(rewards)
    for idx in members(groups).values():
        rs = [rewards[i] for i in idx]
        if len(rs) == 1:
            baseline = 0.0
        elif opmd_baseline == "mean":
            baseline = statistics.mean(rs)
        else:
            top = max(r / tau for r in rs)
            baseline = tau * (top + math.log(sum(math.exp(r / tau - top) for r in rs)) - math.log(len(rs)))
        for i in idx:
            out[i] = rewards[i] - baseline
    return out


def trinity_rloo(rewards, groups) -> list[float]:
    out = list(rewards)
    for idx in members(groups).values():
        n = len(idx)
        if n > 1:
            mean = statistics.mean(rewards[i] for i in idx)
            for i in idx:
                out[i] = rewards[i] * n / (n - 1) - mean * n / (n - 1)
    return out


def trinity_rec(rewards, groups, dropped: set[int], epsilon=1e-6, std_normalize=False, drop=None) -> list[float]:
    """RECGroupedAdvantage with the random choice of dropped negatives given (``dropped``); checks that the
    choice follows the reference's rule.  A group of one (the reference crashes) gets mean 0 / std 1."""
    out = [0.0] * len(rewards)
    for idx in members(groups).values():
        rs = [rewards[i] for i in idx]
        full_mean = statistics.mean(rs)
        negatives = [i for i in idx if rewards[i] < full_mean]
        num_pos = len(idx) - len(negatives)
        expected_drops = len(negatives) - num_pos if drop == "balance" and len(negatives) > num_pos else 0
        group_dropped = [i for i in idx if i in dropped]
        assert len(group_dropped) == expected_drops and set(group_dropped) <= set(negatives)
        kept = [i for i in idx if i not in dropped]
        if len(kept) <= 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = statistics.mean(rewards[i] for i in kept), statistics.pstdev(rewards[i] for i in kept)
        for i in kept:
            out[i] = (rewards[i] - mean) / (std + epsilon) if std_normalize else rewards[i] - mean
    return out


def trinity_step_wise(
    rewards, groups, runs, epsilon=1e-6, enable_step_norm=False, std_cal_level="group", std_threshold=None
) -> dict[int, float]:
    """StepWiseGRPOAdvantageFn: {kept step: advantage}; a run's last step is its last sample."""
    tasks = members(groups)
    batch_std = None
    if std_cal_level == "batch":
        last_rewards = [rewards[t[ks[-1]]] for t in tasks.values() for ks in members([runs[i] for i in t]).values()]
        batch_std = statistics.stdev(last_rewards) if len(last_rewards) > 1 else 1.0
    out = {}
    for task in tasks.values():
        run_steps = {r: [task[k] for k in ks] for r, ks in members([runs[i] for i in task]).items()}
        last = {r: rewards[steps[-1]] for r, steps in run_steps.items()}
        if len(last) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = statistics.mean(last.values()), statistics.stdev(last.values())
        if std_threshold is not None and (len(last) == 1 or std <= std_threshold):
            continue
        for r, steps in run_steps.items():
            score = (last[r] - mean) / ((batch_std if batch_std is not None else std) + epsilon)
            for i in steps:
                out[i] = score / len(steps) if enable_step_norm else score
    return out


def trinity_reinforce_pp(rewards, completion_mask, loss_mask, gamma) -> list[list[float]]:
    """REINFORCEPLUSPLUSAdvantageFn on Trinity's token rewards: the reward on the last completion token, the return
    carried over every position (tool outputs included), whitened over the loss mask."""
    token_rewards = []
    for r, comp in zip(rewards, completion_mask, strict=True):
        token = [0.0] * len(comp)
        if any(comp):
            token[max(t for t, c in enumerate(comp) if c)] = r
        token_rewards.append(token)
    return py_reinforce_pp(token_rewards, loss_mask, gamma, reward_mask=[[1] * len(c) for c in completion_mask])


# ---------------------------------------------------------------------------------------------------------
# Parity
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"epsilon": 0.1},
        {"std_cal_level": "batch"},
        {"std_threshold": 0.0},
        {"std_threshold": 0.3, "std_cal_level": "batch"},
        {"std_threshold": 1.0},
    ],
)
def test_grpo_parity(kwargs):
    rng = random.Random(0)
    fn = get_advantage_fn("grpo", **kwargs)
    for _ in range(200):
        rewards, groups = random_batch(rng)
        res = fn.compute(torch.tensor(rewards, dtype=torch.float64), groups)
        expected, _ = trinity_grpo(rewards, groups, **kwargs)
        assert {i for i, k in enumerate(res.keep.tolist()) if k} == set(expected)
        assert all(close(res.advantages[i].item(), a) for i, a in expected.items())


@pytest.mark.parametrize("std_threshold", [0.0, 0.4])
def test_grpo_duplicate_experiences_parity(std_threshold):
    rng = random.Random(1)
    fn = get_advantage_fn("grpo", std_threshold=std_threshold, duplicate_experiences=True)
    duplicated = 0
    for seed in range(200):
        rewards, groups = random_batch(rng, equal_sizes=True)
        res = fn.compute(
            torch.tensor(rewards, dtype=torch.float64), groups, generator=torch.Generator().manual_seed(seed)
        )
        advantages, skipped = trinity_grpo(rewards, groups, std_threshold=std_threshold)
        by_group = members(groups)
        valid = [g for g in by_group if g not in skipped]
        if not skipped or not valid:
            assert res.source is None
            assert {i for i, k in enumerate(res.keep.tolist()) if k} == set(advantages)
            continue
        duplicated += 1
        # Trinity: torch.randint(0, len(valid), (len(skipped),)) picks, per skipped group in order, the valid
        # group whose deep copies are appended; here the skipped group's rows become those copies.
        picks = torch.randint(0, len(valid), (len(skipped),), generator=torch.Generator().manual_seed(seed))
        expected_source = list(range(len(rewards)))
        for g, k in zip(skipped, picks.tolist(), strict=True):
            for row, src in zip(by_group[g], by_group[valid[k]], strict=True):
                expected_source[row] = src
        assert res.source.tolist() == expected_source and res.keep.all()
        out = fn(torch.tensor(rewards, dtype=torch.float64), groups, generator=torch.Generator().manual_seed(seed))
        assert all(close(out[row].item(), advantages[src]) for row, src in enumerate(expected_source))
    assert duplicated > 10


@pytest.mark.parametrize("shift", [-0.1, 0.3])
def test_asymre_parity(shift):
    rng = random.Random(2)
    fn = get_advantage_fn("asymre", baseline_shift=shift)
    for _ in range(200):
        rewards, groups = random_batch(rng)
        out = fn(torch.tensor(rewards, dtype=torch.float64), groups).tolist()
        assert all(map(close, out, trinity_asymre(rewards, groups, shift)))


@pytest.mark.parametrize("kwargs", [{}, {"opmd_baseline": "logavgexp", "tau": 0.7}, {"opmd_baseline": "logavgexp"}])
def test_opmd_parity(kwargs):
    rng = random.Random(3)
    fn = get_advantage_fn("opmd", **kwargs)
    for _ in range(200):
        rewards, groups = random_batch(rng)
        out = fn(torch.tensor(rewards, dtype=torch.float64), groups).tolist()
        assert all(map(close, out, trinity_opmd(rewards, groups, **kwargs)))


def test_rloo_and_reinforce_parity():
    rng = random.Random(4)
    for _ in range(200):
        rewards, groups = random_batch(rng)
        out = get_advantage_fn("rloo")(torch.tensor(rewards, dtype=torch.float64), groups).tolist()
        assert all(map(close, out, trinity_rloo(rewards, groups)))
        out = get_advantage_fn("reinforce")(torch.tensor(rewards, dtype=torch.float64), groups).tolist()
        assert out == rewards


@pytest.mark.parametrize("drop", [None, "balance"])
@pytest.mark.parametrize("std_normalize", [False, True])
def test_rec_parity(drop, std_normalize):
    rng = random.Random(5)
    fn = get_advantage_fn("rec", drop=drop, std_normalize=std_normalize, epsilon=1e-3)
    for seed in range(200):
        rewards, groups = random_batch(rng)
        res = fn.compute(
            torch.tensor(rewards, dtype=torch.float64), groups, generator=torch.Generator().manual_seed(seed)
        )
        dropped = {i for i, k in enumerate(res.keep.tolist()) if not k}
        expected = trinity_rec(rewards, groups, dropped, epsilon=1e-3, std_normalize=std_normalize, drop=drop)
        assert all(map(close, res.advantages.tolist(), expected))


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"enable_step_norm": True},
        {"std_cal_level": "batch", "epsilon": 0.01},
        {"std_threshold": 0.0},
        {"std_threshold": 0.3, "std_cal_level": "batch", "enable_step_norm": True},
    ],
)
def test_step_wise_grpo_parity(kwargs):
    rng = random.Random(6)
    fn = get_advantage_fn("step_wise_grpo", **kwargs)
    for _ in range(150):
        steps = [
            (g, r, s, rng.choice(VALUES))
            for g in range(rng.randint(1, 4))
            for r in range(rng.choice([1, 1, 2, 3, 4]))
            for s in range(rng.randint(1, 4))
        ]
        rng.shuffle(steps)
        steps.sort(key=lambda x: x[2])  # runs interleaved; each run's steps in order (the last step last)
        rewards = [x[3] for x in steps]
        groups = [f"q{x[0]}" for x in steps]
        runs = [f"q{x[0]}/r{x[1]}" for x in steps]
        res = fn.compute(torch.tensor(rewards, dtype=torch.float64), groups, run_ids=runs)
        expected = trinity_step_wise(rewards, groups, runs, **kwargs)
        assert {i for i, k in enumerate(res.keep.tolist()) if k} == set(expected)
        assert all(close(res.advantages[i].item(), a) for i, a in expected.items())


@pytest.mark.parametrize("gamma", [1.0, 0.9, 0.5])
def test_reinforce_pp_parity_on_tool_masks(gamma):
    rng = random.Random(7)
    fn = get_advantage_fn("reinforceplusplus", gamma=gamma)
    checked = 0
    for _ in range(150):
        n, width = rng.randint(1, 5), rng.randint(2, 10)
        completion, loss = [], []
        for _ in range(n):
            length = rng.randint(1, width)
            comp = [1] * length + [0] * (width - length)
            tool = [1] * width
            if length > 2 and rng.random() < 0.7:  # a masked tool output somewhere inside (or at the end)
                a = rng.randint(1, length - 1)
                b = rng.randint(a, length)
                tool[a:b] = [0] * (b - a)
            completion.append(comp)
            loss.append([c * t for c, t in zip(comp, tool, strict=True)])
        if sum(map(sum, loss)) < 2:
            continue
        checked += 1
        rewards = [rng.uniform(-1, 2) for _ in range(n)]
        out = fn(
            torch.tensor(rewards, dtype=torch.float64),
            response_mask=torch.tensor(loss),
            completion_mask=torch.tensor(completion),
        )
        expected = torch.tensor(trinity_reinforce_pp(rewards, completion, loss, gamma), dtype=torch.float64)
        torch.testing.assert_close(out, expected, atol=1e-9, rtol=1e-9)
    assert checked > 100
