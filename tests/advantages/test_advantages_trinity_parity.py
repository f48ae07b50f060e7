"""Trinity-RFT 0.6.0's remaining advantage estimators (`remax`, `clipb`, `clipv`, `jsd`, `grpo_verl`, `opmd_verl`,
`asymre_verl`) and GRPO's `rank_penalty` / `duplicate_experiences` on groups of unequal size: randomized parity with
plain-Python loop ports of the reference (`trinity/algorithm/advantage_fn/*.py`), written independently of the
vectorized code. The closed-form checks are in test_advantages_trinity_closed_form.py, the inputs and the errors of
bad inputs in test_advantages_trinity_inputs.py.

Each ``trinity_*`` function follows the reference procedure sample by sample / token by token.  Batches mix groups
of 1..6 samples (interleaved), masks with gaps and rows without a valid token, in float64.
"""

from __future__ import annotations

import math
import random
import statistics
import struct
from collections import Counter

import pytest
import torch
from test_advantages_reference import members, trinity_asymre, trinity_opmd

from trl_ext.advantages import get_advantage_fn

EPS = 1e-6
VALUES = [0.0, 0.0, 1.0, 1.0, 0.5, -1.0, 2.0]


def assert_close(actual: torch.Tensor, expected, tol: float = 1e-9) -> None:
    expected = torch.as_tensor(expected, dtype=torch.float64)
    torch.testing.assert_close(actual.to(torch.float64), expected, atol=tol, rtol=tol)


def random_token_batch(rng: random.Random, max_width: int = 8):
    """`(group ids, mask [N][T] with gaps and empty rows, rewards [N])`, groups of 1..6 samples interleaved."""
    groups = []
    for g in range(rng.randint(1, 5)):
        groups += [f"q{g}"] * rng.choice([1, 2, 3, 4, 5, 6])
    rng.shuffle(groups)
    width = rng.randint(1, max_width)
    mask = []
    for _ in groups:
        length = rng.choice([0, width, rng.randint(0, width)])
        row = [1] * length + [0] * (width - length)
        for t in range(length):
            if rng.random() < 0.2:
                row[t] = 0  # a gap (a tool output)
        mask.append(row)
    rewards = [rng.choice(VALUES) if rng.random() < 0.7 else rng.uniform(-2, 2) for _ in groups]
    return groups, mask, rewards


def uniform(rng: random.Random, n: int, t: int, low: float, high: float) -> list[list[float]]:
    return [[rng.uniform(low, high) for _ in range(t)] for _ in range(n)]


def signal_inputs(rng: random.Random, n: int, width: int) -> tuple[list[list[float]], list[list[float]]]:
    """`(logprobs, entropy)`: mostly H close to -log p (S = p (H + log p) near 0), some outliers with H = 0."""
    logprobs = uniform(rng, n, width, -4, 0)
    entropy = [[-lp + rng.uniform(-0.1, 0.1) if rng.random() > 0.1 else 0.0 for lp in row] for row in logprobs]
    return logprobs, entropy


def t64(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------------------
# Reference ports
# ---------------------------------------------------------------------------------------------------------


def trinity_grpo_scores(scores: list[float], groups: list, epsilon: float = EPS) -> list[float]:
    """`(score - mean) / (std + eps)` per group (unbiased std; a group of one: mean 0, std 1), as the reference's
    trainer-side GRPO, Clip_B and Clip_V compute it on `token_level_rewards.sum(-1)`."""
    out = [0.0] * len(scores)
    for idx in members(groups).values():
        if len(idx) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = statistics.mean(scores[i] for i in idx), statistics.stdev(scores[i] for i in idx)
        for i in idx:
            out[i] = (scores[i] - mean) / (std + epsilon)
    return out


def row_sums(rewards) -> list[float]:
    return [sum(row) if isinstance(row, list) else row for row in rewards]


def broadcast(per_sample: list[float], mask: list[list[int]]) -> list[list[float]]:
    return [[a * m for m in row] for a, row in zip(per_sample, mask, strict=True)]


def float32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def trinity_signal(mask, logprobs, entropy) -> tuple[list[list[float]], list[tuple[int, int]]]:
    """S = p * (H + log p) on the valid tokens (0 elsewhere) and the valid positions."""
    valid = [(i, t) for i, row in enumerate(mask) for t, m in enumerate(row) if m]
    signal = [[0.0] * len(row) for row in mask]
    for i, t in valid:
        signal[i][t] = math.exp(logprobs[i][t]) * (entropy[i][t] + logprobs[i][t])
    return signal, valid


def trinity_fractions(mask, kept, advantages) -> dict[str, float]:
    def frac(where):
        total = sum(1 for i, row in enumerate(mask) for t, m in enumerate(row) if m and where(i, t))
        left = sum(1 for i, row in enumerate(mask) for t, m in enumerate(row) if m and where(i, t) and kept[i][t])
        return 1.0 - left / max(total, 1)

    return {
        "frac_clipped": frac(lambda i, t: True),
        "frac_clipped_pos": frac(lambda i, t: advantages[i][t] > 0),
        "frac_clipped_neg": frac(lambda i, t: advantages[i][t] < 0),
    }


def trinity_clipb(rewards, groups, mask, logprobs, entropy, epsilon=1e-6, mu=2.5):
    """ClipBAdvantageFn: (advantages, the filtered response mask, metrics)."""
    advantages = broadcast(trinity_grpo_scores(row_sums(rewards), groups, epsilon), mask)
    signal, valid = trinity_signal(mask, logprobs, entropy)
    n = max(len(valid), 1)
    es = sum(signal[i][t] for i, t in valid) / n
    var = sum((signal[i][t] - es) ** 2 for i, t in valid) / n
    std = math.sqrt(var)
    kept = [[bool(m) for m in row] for row in mask]
    if std >= 1e-12:
        for i, t in valid:
            if advantages[i][t] < 0:  # positive and zero advantages: always kept
                kept[i][t] = signal[i][t] - es >= -(mu * std)
    return advantages, kept, {**trinity_fractions(mask, kept, advantages), "ES": es, "varS": var}


def trinity_clipv(rewards, groups, mask, logprobs, entropy, necs, epsilon=1e-6, mu=8.5, max_frac=1e-4):
    """ClipVAdvantageFn: (advantages, the filtered response mask, metrics)."""
    advantages = broadcast(trinity_grpo_scores(row_sums(rewards), groups, epsilon), mask)
    signal, valid = trinity_signal(mask, logprobs, entropy)
    gap = {(i, t): necs[i][t] - signal[i][t] for i, t in valid}
    n = max(len(valid), 1)
    mean = sum(gap.values()) / n
    std = math.sqrt(sum((d - mean) ** 2 for d in gap.values()) / n)
    keep = {pos: True for pos in valid}
    if std >= 1e-12:
        keep_neg = {pos: gap[pos] <= mu * std for pos in valid}
        keep = {(i, t): advantages[i][t] > 0 or keep_neg[(i, t)] for i, t in valid}
        removed = sum(1 for pos in valid if not keep[pos])
        if float32(float32(removed) / float32(n)) > max_frac:
            cap = max(int(max_frac * n), 1)
            to_clip = [(i, t) for i, t in valid if advantages[i][t] < 0 and not keep_neg[(i, t)]]
            if len(to_clip) > cap:
                width = len(mask[0])
                ranked = sorted(to_clip, key=lambda pos: (-gap[pos], pos[0] * width + pos[1]))
                for pos in to_clip:
                    keep[pos] = True
                for pos in ranked[:cap]:
                    keep[pos] = False
    kept = [[bool(m) and keep[(i, t)] for t, m in enumerate(row)] for i, row in enumerate(mask)]
    return advantages, kept, {**trinity_fractions(mask, kept, advantages), "stdD": std}


def trinity_jsd(teacher, student, mask, lambda_coef=0.5, kl_coef=1.0, temperature=1.0):
    """JSDAdvantage: (advantages, metrics)."""
    beta = lambda_coef
    advantages, jsd_sums = [], []
    for t_row, s_row, m_row in zip(teacher, student, mask, strict=True):
        row, total = [], 0.0
        for tt, ss, m in zip(t_row, s_row, m_row, strict=True):
            if not m:
                row.append(0.0)
                continue
            s, t = ss / temperature, tt / temperature
            if beta == 0:
                jsd = s - t
            elif beta == 1:
                jsd = t - s
            else:
                a, b = s + math.log(1 - beta), t + math.log(beta)
                top = max(a, b)
                mix = top + math.log(math.exp(a - top) + math.exp(b - top))
                jsd = beta * (t - mix) + (1 - beta) * (s - mix)
            total += jsd
            row.append(-kl_coef * jsd)
        advantages.append(row)
        jsd_sums.append(total)
    n = len(jsd_sums)
    metrics = {
        "jsd/mean": sum(jsd_sums) / n,
        "jsd/std": statistics.stdev(jsd_sums) if n > 1 else 0.0,
        "advantages/mean": sum(sum(row) for row in advantages) / n,
    }
    return advantages, metrics


def trinity_remax(rewards, mask, baselines, completion=None):
    """REMAXAdvantageFn on Trinity's token rewards (a scalar reward on the last completion token): returns = the
    reverse cumulative sum of rewards * mask, advantages = returns - baseline * mask (shown 0 outside the mask)."""
    completion = completion or mask
    out = []
    for r, m_row, c_row, b in zip(rewards, mask, completion, baselines, strict=True):
        if isinstance(r, list):
            token = list(r)
        else:
            token = [0.0] * len(m_row)
            ends = [t for t, c in enumerate(c_row) if c]
            if ends:
                token[ends[-1]] = r
        running, row = 0.0, [0.0] * len(m_row)
        for t in reversed(range(len(m_row))):
            running += token[t] * m_row[t] if m_row[t] else 0.0
            row[t] = (running - b * m_row[t]) if m_row[t] else 0.0
        out.append(row)
    return out


def trinity_grpo_rank_penalty(rewards, groups, mean_logprobs, penalty, epsilon=EPS, std_threshold=None, batch=False):
    """GRPOGroupedAdvantage with rank_penalty: {kept sample: advantage}."""
    batch_std = (statistics.stdev(rewards) if len(rewards) > 1 else 1.0) if batch else None
    out = {}
    for idx in members(groups).values():
        if len(idx) == 1:
            mean, std = 0.0, 1.0
            if std_threshold is not None:
                continue
        else:
            n = len(idx)
            order = sorted(range(n), key=lambda k: mean_logprobs[idx[k]])  # ascending, ties by position
            rank = [0] * n
            for position, k in enumerate(order):
                rank[k] = position
            scaled = [rewards[i] * (1 - rank[k] / n * penalty) for k, i in enumerate(idx)]
            mean, std = statistics.mean(scaled), statistics.stdev(scaled)
            if std_threshold is not None and std <= std_threshold:
                continue
        for i in idx:
            out[i] = (rewards[i] - mean) / ((batch_std if batch else std) + epsilon)
    return out


def trinity_duplicated(rewards, groups, std_threshold, seed) -> list[tuple[int, float]]:
    """GRPOGroupedAdvantage.process with duplicate_experiences: the experiences it returns, as (sample, advantage),
    in its order: the valid groups, then a copy of a randomly chosen valid group for each skipped group."""
    by_group = members(groups)
    valid, skipped = [], 0
    for idx in by_group.values():
        rs = [rewards[i] for i in idx]
        if len(idx) == 1 or statistics.stdev(rs) <= std_threshold:
            skipped += 1
            continue
        mean, std = statistics.mean(rs), statistics.stdev(rs)
        valid.append([(i, (rewards[i] - mean) / (std + EPS)) for i in idx])
    out = [exp for group in valid for exp in group]
    if skipped and valid:
        picks = torch.randint(0, len(valid), (skipped,), generator=torch.Generator().manual_seed(seed)).tolist()
        out += [exp for k in picks for exp in valid[k]]
    return out if (valid or not skipped) else []


def trinity_rec_group(rewards: list[float]) -> list[float]:
    """RECGroupedAdvantage.calculate_group_advantage's control flow for one group without drop: `rewards` is only
    built for groups of two or more, so a group of one raises UnboundLocalError as in Trinity-RFT 0.6.0."""
    if len(rewards) == 1:
        mean = 0.0
    else:
        tensor = list(rewards)
        mean = statistics.mean(tensor)
    positive = [r >= mean for r in tensor]  # `tensor` is unbound for a group of one: the reference's crash
    assert len(positive) == len(rewards)
    return [r - mean for r in tensor]


# ---------------------------------------------------------------------------------------------------------
# Parity
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_trainer_side_group_variants_parity(seed):
    rng = random.Random(seed)
    for _ in range(40):
        groups, mask, rewards = random_token_batch(rng)
        token = uniform(rng, len(groups), len(mask[0]), -1, 1) if rng.random() < 0.5 else rewards
        scores = row_sums(token)
        m = torch.tensor(mask)
        out = get_advantage_fn("grpo_verl", epsilon=1e-3)(t64(token), groups, response_mask=m)
        assert_close(out, broadcast(trinity_grpo_scores(scores, groups, 1e-3), mask))
        for kwargs in ({}, {"opmd_baseline": "logavgexp", "tau": 0.6}):
            out = get_advantage_fn("opmd_verl", **kwargs)(t64(token), groups, response_mask=m)
            assert_close(out, broadcast(trinity_opmd(scores, groups, **kwargs), mask))
        out = get_advantage_fn("asymre_verl", baseline_shift=0.2)(t64(token), groups, response_mask=m)
        assert_close(out, broadcast(trinity_asymre(scores, groups, 0.2), mask))


@pytest.mark.parametrize("seed", range(3))
def test_remax_parity(seed):
    rng = random.Random(10 + seed)
    for _ in range(40):
        groups, mask, rewards = random_token_batch(rng)
        n, width = len(groups), len(mask[0])
        baselines = [rng.uniform(-1, 1) for _ in range(n)]
        completion = [[1 if (m or rng.random() < 0.5) else 0 for m in row] for row in mask]
        fn = get_advantage_fn("remax")
        out = fn(t64(rewards), response_mask=torch.tensor(mask), reward_baselines=t64(baselines))
        assert_close(out, trinity_remax(rewards, mask, baselines))
        out = fn(
            t64(rewards),
            response_mask=torch.tensor(mask),
            reward_baselines=t64(baselines),
            completion_mask=torch.tensor(completion),
        )
        assert_close(out, trinity_remax(rewards, mask, baselines, completion))
        token = uniform(rng, n, width, -1, 1)
        out = fn(t64(token), response_mask=torch.tensor(mask), reward_baselines=t64(baselines))
        assert_close(out, trinity_remax(token, mask, baselines))


@pytest.mark.parametrize("mu", [0.4, 1.3, 2.5])
def test_clipb_parity(mu):
    rng = random.Random(20)
    clipped = 0
    for _ in range(60):
        groups, mask, rewards = random_token_batch(rng)
        n, width = len(groups), len(mask[0])
        token = uniform(rng, n, width, -1, 1) if rng.random() < 0.3 else rewards
        logprobs, entropy = signal_inputs(rng, n, width)
        res = get_advantage_fn("clipb", mu=mu).compute(
            t64(token), groups, response_mask=torch.tensor(mask), logprobs=t64(logprobs), entropy=t64(entropy)
        )
        advantages, kept, metrics = trinity_clipb(token, groups, mask, logprobs, entropy, mu=mu)
        assert_close(res.advantages, advantages)
        assert res.token_keep.tolist() == kept
        assert res.keep.all() and res.source is None
        assert res.metrics.keys() == metrics.keys()
        assert all(math.isclose(res.metrics[k], v, rel_tol=1e-9, abs_tol=1e-12) for k, v in metrics.items())
        clipped += metrics["frac_clipped"] > 0
    assert clipped > 5


@pytest.mark.parametrize(("mu", "max_frac"), [(0.3, 0.0), (0.6, 0.05), (0.9, 0.2), (8.5, 1e-4), (0.4, 1.0)])
def test_clipv_parity(mu, max_frac):
    rng = random.Random(30)
    capped = clipped = 0
    for _ in range(60):
        groups, mask, rewards = random_token_batch(rng)
        n, width = len(groups), len(mask[0])
        token = uniform(rng, n, width, -1, 1) if rng.random() < 0.3 else rewards
        logprobs, entropy = signal_inputs(rng, n, width)
        necs = uniform(rng, n, width, -1, 1)
        res = get_advantage_fn("clipv", mu=mu, max_frac=max_frac).compute(
            t64(token),
            groups,
            response_mask=torch.tensor(mask),
            logprobs=t64(logprobs),
            entropy=t64(entropy),
            necs=t64(necs),
        )
        advantages, kept, metrics = trinity_clipv(
            token, groups, mask, logprobs, entropy, necs, mu=mu, max_frac=max_frac
        )
        assert_close(res.advantages, advantages)
        assert res.token_keep.tolist() == kept
        assert res.metrics.keys() == metrics.keys()
        assert all(math.isclose(res.metrics[k], v, rel_tol=1e-9, abs_tol=1e-12) for k, v in metrics.items())
        # The cap bit: fewer negative-advantage tokens removed than the uncapped rule would remove.
        uncapped = trinity_clipv(token, groups, mask, logprobs, entropy, necs, mu=mu, max_frac=1.0)[1]
        capped += kept != uncapped
        clipped += metrics["frac_clipped"] > 0
    assert clipped > 5 or mu > 1  # the defaults (mu 8.5) need a rare outlier: test_clipv_cap_and_zero_advantages
    if max_frac < 0.5 and mu < 1:
        assert capped > 3


@pytest.mark.parametrize("lambda_coef", [0.0, 0.3, 0.5, 1.0])
@pytest.mark.parametrize(("temperature", "chunk_size"), [(1.0, None), (0.7, 3)])
def test_jsd_parity(lambda_coef, temperature, chunk_size):
    rng = random.Random(40)
    fn = get_advantage_fn(
        "jsd", lambda_coef=lambda_coef, kl_coef=0.8, temperature=temperature, chunk_size=chunk_size, form="reference"
    )
    for _ in range(30):
        groups, mask, _ = random_token_batch(rng)
        n, width = len(groups), len(mask[0])
        teacher, student = uniform(rng, n, width, -6, 0), uniform(rng, n, width, -6, 0)
        masked_teacher = [
            [v if m else float("nan") for v, m in zip(r, mr, strict=True)] for r, mr in zip(teacher, mask, strict=True)
        ]
        res = fn.compute(
            teacher_logprob=t64(masked_teacher), old_logprob=t64(student), response_mask=torch.tensor(mask)
        )
        advantages, metrics = trinity_jsd(teacher, student, mask, lambda_coef, 0.8, temperature)
        assert_close(res.advantages, advantages)
        assert (res.advantages[~torch.tensor(mask, dtype=torch.bool)] == 0).all()
        assert res.metrics.keys() == metrics.keys()
        assert all(math.isclose(res.metrics[k], v, rel_tol=1e-9, abs_tol=1e-12) for k, v in metrics.items())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rank_penalty": 0.5},
        {"rank_penalty": 1.0, "std_cal_level": "batch"},
        {"rank_penalty": 0.3, "std_threshold": 0.25},
        {"rank_penalty": 0.8, "epsilon": 0.01},
    ],
)
def test_grpo_rank_penalty_parity(kwargs):
    rng = random.Random(50)
    fn = get_advantage_fn("grpo", **kwargs)
    for _ in range(60):
        groups, mask, rewards = random_token_batch(rng)
        logprobs = uniform(rng, len(groups), len(mask[0]), -3, 0)
        if rng.random() < 0.3:  # ties of the mean log-prob
            logprobs = [[-1.0] * len(row) for row in logprobs]
        means = [
            sum(v for v, m in zip(r, mr, strict=True) if m) / sum(mr) if sum(mr) else math.inf
            for r, mr in zip(logprobs, mask, strict=True)
        ]  # the reference's mean of no token is NaN, which sorts last
        res = fn.compute(t64(rewards), groups, logprobs=t64(logprobs), response_mask=torch.tensor(mask))
        expected = trinity_grpo_rank_penalty(
            rewards,
            groups,
            means,
            kwargs["rank_penalty"],
            kwargs.get("epsilon", EPS),
            kwargs.get("std_threshold"),
            kwargs.get("std_cal_level") == "batch",
        )
        assert {i for i, k in enumerate(res.keep.tolist()) if k} == set(expected)
        assert all(math.isclose(res.advantages[i].item(), a, rel_tol=1e-9, abs_tol=1e-9) for i, a in expected.items())


@pytest.mark.parametrize("std_threshold", [0.0, 0.4])
def test_grpo_duplicate_experiences_unequal_sizes_parity(std_threshold):
    """The kept output rows (a row: its source sample and advantage) are the reference's experiences."""
    rng = random.Random(60)
    fn = get_advantage_fn("grpo", std_threshold=std_threshold, duplicate_experiences=True)
    grown = shrunk = 0
    for seed in range(150):
        groups, _, rewards = random_token_batch(rng)
        if seed % 2:  # binary rewards: groups of equal rewards (skipped) of every size
            rewards = [rng.choice([0.0, 1.0]) for _ in rewards]
        res = fn.compute(t64(rewards), groups, generator=torch.Generator().manual_seed(seed))
        expected = trinity_duplicated(rewards, groups, std_threshold, seed)
        source = res.source if res.source is not None else torch.arange(len(rewards))
        assert source.shape == res.keep.shape
        rows = [(int(source[r]), round(res.advantages[source[r]].item(), 9)) for r in range(len(source)) if res.keep[r]]
        assert Counter(rows) == Counter((i, round(a, 9)) for i, a in expected)
        out = fn(t64(rewards), groups, generator=torch.Generator().manual_seed(seed))
        assert out.shape == res.keep.shape
        grown += len(source) > len(rewards)
        shrunk += not res.keep.all() and res.source is not None
    assert grown > 5 and shrunk > 3
