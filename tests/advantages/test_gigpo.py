"""GiGPO's per-step advantages: closed forms, a plain-loop port of Trinity-RFT 0.6.0's `GiGPOAdvantageFn.process`,
and bad input."""

from __future__ import annotations

import random

import pytest
import torch

from trl_ext.advantages import get_advantage_fn

EPS = 1e-6


def reference_gigpo(steps: list[dict], omega=1.0, gamma=1.0, fnorm="none", epsilon=EPS) -> tuple[list, dict]:
    """The reference's `process` as plain loops over experiences (`task`, `run`, `step`, `reward` the immediate
    step reward, `state` or None), float32 statistics as it computes them; returns the advantages in input order and
    its metrics (aggregated over tasks as `aggregate_metrics` does: mean / max / min)."""

    def normalize(values):
        tensor = torch.tensor(values, dtype=torch.float32)
        if len(values) == 1:
            mean, denom = torch.tensor(0.0), torch.tensor(1.0)
        else:
            mean = tensor.mean()
            denom = tensor.std() if fnorm == "std" else torch.tensor(1.0)
        return ((tensor - mean) / (denom + epsilon)).tolist(), mean.item(), denom.item()

    a_e, discounted, episode = {}, {}, []
    for task in dict.fromkeys(s["task"] for s in steps):
        returns, runs = [], []
        for run in dict.fromkeys(s["run"] for s in steps if s["task"] == task):
            ordered = sorted((i for i, s in enumerate(steps) if s["run"] == run), key=lambda i: steps[i]["step"])
            running, values = 0.0, {}
            for i in reversed(ordered):
                running = steps[i]["reward"] + gamma * running
                values[i] = running
            discounted.update(values)
            returns.append(sum(steps[i]["reward"] for i in ordered))
            runs.append(run)
        scores, mean, denom = normalize(returns)
        episode.append((mean, denom))
        a_e.update(zip(runs, scores, strict=True))
    buckets: dict[str, list[int]] = {}
    for i, s in enumerate(steps):
        if s["state"] is not None:
            buckets.setdefault(str(s["state"]), []).append(i)
    a_s = dict.fromkeys(range(len(steps)), 0.0)
    for members in buckets.values():
        if len(members) > 1:
            scores, _, _ = normalize([discounted[i] for i in members])
            a_s.update(zip(members, scores, strict=True))
    advantages = [a_e[s["run"]] + omega * a_s[i] for i, s in enumerate(steps)]
    hits = sum(len(m) > 1 for m in buckets.values())
    metrics = {
        "gigpo/anchor_groups_total": len(buckets),
        "gigpo/anchor_groups_size_gt1": hits,
        "gigpo/anchor_group_hit_ratio": hits / len(buckets) if buckets else 0.0,
        "gigpo/mean_abs_A_E": sum(abs(a_e[s["run"]]) for s in steps) / len(steps),
        "gigpo/mean_abs_A_S": sum(abs(v) for v in a_s.values()) / len(steps),
    }
    for k, name in enumerate(("episode_reward_mean", "episode_reward_std")):
        values = [e[k] for e in episode]
        metrics.update({f"gigpo/{name}/mean": sum(values) / len(values)})
        metrics.update({f"gigpo/{name}/max": max(values), f"gigpo/{name}/min": min(values)})
    return advantages, metrics


def ours(steps: list[dict], **args):
    fn = get_advantage_fn("gigpo", **args)
    result = fn.compute(
        torch.tensor([s["reward"] for s in steps]),
        [s["task"] for s in steps],
        run_ids=[s["run"] for s in steps],
        state_ids=[s["state"] for s in steps],
    )
    return result.advantages, result.metrics


def random_batch(seed: int, sparse: bool) -> list[dict]:
    """Tasks of 2-5 runs of 1-5 steps; states shared within a task (the same start, some common later states),
    sometimes missing; runs interleaved in the rows, each run's rows in step order."""
    rng = random.Random(seed)
    runs = []
    for task in range(rng.randint(1, 4)):
        for r in range(rng.randint(1, 5)):
            length = rng.randint(1, 5)
            outcome = float(rng.random() < 0.5)
            run = []
            for t in range(length):
                reward = (outcome if t == length - 1 else 0.0) if sparse else round(rng.uniform(-1, 1), 3)
                state = None if rng.random() < 0.15 else f"t{task}-s{rng.randint(0, t)}" if t else f"t{task}-start"
                run.append({"task": f"task{task}", "run": f"task{task}-run{r}", "step": t, "reward": reward,
                            "state": state})  # fmt: skip
            runs.append(run)
    rows = []
    while any(runs):  # interleave: one step of a random unfinished run at a time
        run = rng.choice([r for r in runs if r])
        rows.append(run.pop(0))
    return rows


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(
    "args", [{}, {"fnorm": "std"}, {"omega": 0.5, "gamma": 0.9}, {"omega": 0.0}, {"gamma": 0.0, "fnorm": "std"}]
)
def test_equals_the_reference(seed, args):
    steps = random_batch(seed, sparse=seed % 2 == 0)
    expected, expected_metrics = reference_gigpo(steps, **args)
    advantages, metrics = ours(steps, **args)
    torch.testing.assert_close(advantages, torch.tensor(expected), rtol=1e-5, atol=1e-5)
    assert metrics == pytest.approx(expected_metrics, rel=1e-5, abs=1e-6)


def test_closed_form():
    """Task A: run 1 (s0 → s1, outcome 1) and run 2 (s0 → s2, outcome 0); task B: one run of one step (outcome 2),
    no state. γ = 0.5 for the step returns, fnorm none."""
    rewards = torch.tensor([0.0, 1.0, 0.0, 0.0, 2.0])
    tasks, runs = ["A", "A", "A", "A", "B"], [1, 1, 2, 2, 3]
    states = ["s0", "s1", "s0", "s2", None]
    fn = get_advantage_fn("gigpo", gamma=0.5, omega=2.0)
    advantages = fn(rewards, tasks, run_ids=runs, state_ids=states)
    a_e = 0.5 / (1 + EPS)  # returns 1 and 0 around their mean 0.5
    a_s = 0.25 / (1 + EPS)  # anchor s0: discounted returns 0.5 and 0 around 0.25; s1, s2: singletons
    expected = [a_e + 2 * a_s, a_e, -a_e - 2 * a_s, -a_e, 2.0 / (1 + EPS)]  # task B: one run, mean 0 and F 1
    torch.testing.assert_close(advantages, torch.tensor(expected))


def test_std_normalization_and_states_across_tasks():
    """fnorm="std" divides by the unbiased std; an anchor state shared by two tasks is one group."""
    rewards = torch.tensor([1.0, 0.0, 3.0, 0.0])
    fn = get_advantage_fn("gigpo", fnorm="std")
    result = fn.compute(rewards, [0, 0, 1, 1], run_ids=[0, 1, 2, 3], state_ids=["x", None, "x", None])
    std_a = torch.tensor([1.0, 0.0]).std()
    std_b = torch.tensor([3.0, 0.0]).std()
    std_x = torch.tensor([1.0, 3.0]).std()
    expected = torch.stack(
        [0.5 / (std_a + EPS) - 1 / (std_x + EPS), -0.5 / (std_a + EPS), 1.5 / (std_b + EPS) + 1 / (std_x + EPS)]
    )
    torch.testing.assert_close(result.advantages[:3], expected)
    assert result.metrics["gigpo/anchor_groups_total"] == 1 and result.metrics["gigpo/anchor_group_hit_ratio"] == 1


def test_integer_state_tensor_and_interleaved_rows_give_the_same_advantages():
    rewards = torch.tensor([0.0, 0.0, 1.0, 0.0])
    contiguous = get_advantage_fn("gigpo")(
        rewards, [0, 0, 0, 0], run_ids=[0, 0, 1, 1], state_ids=torch.tensor([5, 6, 5, 7])
    )
    interleaved = get_advantage_fn("gigpo")(
        rewards[[0, 2, 1, 3]], [0, 0, 0, 0], run_ids=[0, 1, 0, 1], state_ids=[5, 5, 6, 7]
    )
    torch.testing.assert_close(interleaved, contiguous[[0, 2, 1, 3]])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"state_ids": [[1], "b", "c"]}, r"gigpo: state_ids\[0\] is not hashable \(list\)"),
        ({"state_ids": ["a", "b"]}, r"gigpo: rewards has 3 entries but state_ids has 2"),
        ({"state_ids": "abc"}, r"gigpo: state_ids must be an int tensor or a sequence of hashables"),
        ({"run_ids": [0, 0, 1], "group_ids": [0, 1, 1]}, r"gigpo: step 0 has another task .* than the other steps"),
        ({"run_ids": [0, 1]}, r"gigpo: rewards has 3 entries but run_ids has 2"),
        ({"rewards": [0.0, float("nan"), 1.0]}, r"gigpo: rewards\[1\] is nan; all rewards must be finite"),
    ],
)
def test_bad_input(kwargs, message):
    call = {"rewards": [0.0, 1.0, 0.0], "group_ids": [0, 0, 0], "run_ids": [0, 0, 1], "state_ids": ["a", "b", "a"]}
    call.update(kwargs)
    fn = get_advantage_fn("gigpo")
    with pytest.raises(ValueError, match=message):
        fn.compute(call.pop("rewards"), call.pop("group_ids"), **call)
    with pytest.raises(TypeError, match="state_ids"):
        fn.compute(torch.zeros(3), [0, 0, 0], run_ids=[0, 0, 1])  # no source of states: an error, not A_S = 0
