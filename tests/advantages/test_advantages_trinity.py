"""Trinity-RFT 0.6.0's remaining advantage estimators (`remax`, `clipb`, `clipv`, `jsd`, `grpo_verl`, `opmd_verl`,
`asymre_verl`) and GRPO's `rank_penalty` / `duplicate_experiences` on groups of unequal size: randomized parity with
plain-Python loop ports of the reference (`trinity/algorithm/advantage_fn/*.py`), written independently of the
vectorized code, plus closed-form checks and the errors of bad inputs.

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

from trl_ext.advantages import ADVANTAGE_FNS, AdvantageResult, get_advantage_fn

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
    fn = get_advantage_fn("jsd", lambda_coef=lambda_coef, kl_coef=0.8, temperature=temperature, chunk_size=chunk_size)
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


# ---------------------------------------------------------------------------------------------------------
# Closed-form checks
# ---------------------------------------------------------------------------------------------------------


def test_remax_hand_example():
    mask = torch.tensor([[1, 1, 0, 1, 0], [1, 1, 1, 0, 0]])
    out = get_advantage_fn("remax")(t64([2.0, -1.0]), response_mask=mask, reward_baselines=t64([0.5, 1.0]))
    # Row 0: reward 2 on position 3, the return 2 at positions 0..3; minus the baseline on valid tokens.
    assert_close(out, [[1.5, 1.5, 0.0, 1.5, 0.0], [-2.0, -2.0, -2.0, 0.0, 0.0]])
    # The completion ends with a masked tool output: the reward sits there and, multiplied by the mask, is lost.
    completion = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    out = get_advantage_fn("remax")(
        t64([2.0, -1.0]), response_mask=mask, reward_baselines=t64([0.5, 1.0]), completion_mask=completion
    )
    assert_close(out, [[-0.5, -0.5, 0.0, -0.5, 0.0], [-2.0, -2.0, -2.0, 0.0, 0.0]])
    # Token rewards: reverse cumulative sums over the valid tokens (a NaN outside the mask is ignored).
    token = t64([[1.0, 2.0, float("nan"), 3.0, 0.0], [0.5, 0.0, 0.5, 0.0, 0.0]])
    out = get_advantage_fn("remax")(token, response_mask=mask, reward_baselines=t64([1.0, 0.0]))
    assert_close(out, [[5.0, 4.0, 0.0, 2.0, 0.0], [1.0, 0.5, 0.5, 0.0, 0.0]])


def test_trainer_side_variants_sum_the_whole_row():
    # Two samples of one group; token rewards outside the mask count in the sum, as in the reference.
    token = t64([[0.0, 1.0, 2.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    a = 1.5 / (statistics.stdev([3.0, 0.0]) + EPS)
    assert_close(get_advantage_fn("grpo_verl")(token, [0, 0], response_mask=mask), [[a, a, 0], [-a, 0, 0]])
    assert_close(get_advantage_fn("opmd_verl")(token, [0, 0], response_mask=mask), [[1.5, 1.5, 0], [-1.5, 0, 0]])
    shifted = get_advantage_fn("asymre_verl", baseline_shift=-0.5)(token, [0, 0], response_mask=mask)
    assert_close(shifted, [[2.0, 2.0, 0], [-1.0, 0, 0]])
    # [N] rewards are the scores themselves; a group of one: GRPO mean 0 / std 1, baseline 0.
    assert_close(get_advantage_fn("grpo_verl")(t64([3.0]), [0], response_mask=mask[:1]), [[3 / (1 + EPS)] * 2 + [0]])
    assert_close(get_advantage_fn("asymre_verl")(t64([3.0]), ["a"], response_mask=mask[:1]), [[3.0, 3.0, 0]])


def test_clipb_hand_example():
    # One group of two: advantages +a / -a on every valid token.  S = p(H + log p) with H = -log p gives S = 0, except
    # at row 1 token 2 (H = 0, log p = log 0.5): S = -0.5 log 2 ... far below the mean.
    half = math.log(0.5)
    logprobs = t64([[half] * 4, [half] * 4])
    entropy = t64([[-half] * 4, [-half, -half, 0.0, -half]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1]])
    res = get_advantage_fn("clipb", mu=1.5).compute(
        t64([1.0, 0.0]), [0, 0], response_mask=mask, logprobs=logprobs, entropy=entropy
    )
    s = 0.5 * half  # the one non-zero signal
    es, var = s / 8, (7 * (s / 8) ** 2 + (s - s / 8) ** 2) / 8
    assert (s - es) < -1.5 * math.sqrt(var)  # ... which is removed: its advantage is negative
    assert res.token_keep.tolist() == [[True] * 4, [True, True, False, True]]
    assert res.metrics == pytest.approx(
        {"frac_clipped": 1 / 8, "frac_clipped_pos": 0.0, "frac_clipped_neg": 1 / 4, "ES": es, "varS": var}
    )
    # The same token with a positive advantage is kept.
    flipped = get_advantage_fn("clipb", mu=1.5).compute(
        t64([0.0, 1.0]), [0, 0], response_mask=mask, logprobs=logprobs, entropy=entropy
    )
    assert flipped.token_keep.all() and flipped.metrics["frac_clipped"] == 0.0
    # __call__ zeroes the removed token's advantage.
    out = get_advantage_fn("clipb", mu=1.5)(
        t64([1.0, 0.0]), [0, 0], response_mask=mask, logprobs=logprobs, entropy=entropy
    )
    a = 0.5 / (statistics.stdev([1.0, 0.0]) + EPS)
    assert_close(out, [[a] * 4, [-a, -a, 0.0, -a]])
    # A constant signal (std 0) keeps every token.
    flat = get_advantage_fn("clipb").compute(
        t64([1.0, 0.0]), [0, 0], response_mask=mask, logprobs=logprobs, entropy=-logprobs
    )
    assert flat.token_keep.all() and flat.metrics["varS"] == 0.0


def test_clipv_cap_and_zero_advantages():
    # D = necs - S with S = 0 (H = -log p): D = necs.  Row 0 (advantage +a), row 1 (-a), row 2 (a group of one with
    # reward 0: advantage 0).
    half = math.log(0.5)
    logprobs = t64([[half] * 4] * 3)
    necs = t64([[5.0, 0.0, 0.0, 0.0], [4.0, 3.0, 0.0, 0.0], [6.0, 0.0, 0.0, 0.0]])
    mask = torch.ones(3, 4, dtype=torch.int64)
    kwargs = dict(response_mask=mask, logprobs=logprobs, entropy=-logprobs, necs=necs)
    values = [5.0, 0, 0, 0, 4.0, 3.0, 0, 0, 6.0, 0, 0, 0]
    std = statistics.pstdev(values)
    assert 3.0 > 0.5 * std  # with mu = 0.5, D = 5, 4, 3, 6 all exceed mu * std
    uncapped = get_advantage_fn("clipv", mu=0.5, max_frac=1.0).compute(t64([1.0, 0.0, 0.0]), [0, 0, 1], **kwargs)
    # The positive row keeps everything; the negative row loses D = 4 and 3; the zero-advantage row loses D = 6.
    assert uncapped.token_keep.tolist() == [[True] * 4, [False, False, True, True], [False, True, True, True]]
    assert uncapped.metrics == pytest.approx(
        {"frac_clipped": 3 / 12, "frac_clipped_pos": 0.0, "frac_clipped_neg": 2 / 4, "stdD": std}
    )
    # max_frac = 0.1: at most int(1.2) = 1 negative-advantage token stays removed, the largest D (4); the
    # zero-advantage token stays removed too.
    capped = get_advantage_fn("clipv", mu=0.5, max_frac=0.1).compute(t64([1.0, 0.0, 0.0]), [0, 0, 1], **kwargs)
    assert capped.token_keep.tolist() == [[True] * 4, [False, True, True, True], [False, True, True, True]]
    # The defaults (mu 8.5, max_frac 1e-4): one outlier among 200 tokens is removed, as the cap allows one token.
    necs = torch.zeros(4, 50, dtype=torch.float64)
    necs[3, 7], necs[0, 0] = 100.0, 1.0
    defaults = get_advantage_fn("clipv").compute(
        t64([1.0, 1.0, 0.0, 0.0]),
        [0, 0, 0, 0],
        response_mask=torch.ones(4, 50),
        logprobs=torch.full((4, 50), half),
        entropy=torch.full((4, 50), -half),
        necs=necs,
    )
    assert (~defaults.token_keep).nonzero().tolist() == [[3, 7]]
    # Ties in D: the first in row-major order stays removed.
    tied = dict(kwargs, necs=t64([[5.0, 0.0, 0.0, 0.0], [4.0, 4.0, 0.0, 0.0], [6.0, 0.0, 0.0, 0.0]]))
    capped = get_advantage_fn("clipv", mu=0.5, max_frac=0.1).compute(t64([1.0, 0.0, 0.0]), [0, 0, 1], **tied)
    assert capped.token_keep[1].tolist() == [False, True, True, True]


def test_jsd_closed_form():
    teacher = t64([[math.log(0.5), math.log(0.25)]])
    student = t64([[math.log(0.25), math.log(0.25)]])
    mask = torch.ones(1, 2)
    kwargs = dict(teacher_logprob=teacher, old_logprob=student, response_mask=mask)
    # beta = 0: KL(student || teacher) at the sampled token = s - t; beta = 1: t - s.
    assert_close(get_advantage_fn("jsd", lambda_coef=0.0)(**kwargs), [[-math.log(0.5), 0.0]])
    assert_close(get_advantage_fn("jsd", lambda_coef=1.0, kl_coef=2.0)(**kwargs), [[-2 * math.log(2.0), 0.0]])
    # beta = 0.5: m = log((p_s + p_t) / 2) = log(3/8); JSD = 0.5 (t - m) + 0.5 (s - m).
    m = math.log(3 / 8)
    jsd = 0.5 * (math.log(0.5) - m) + 0.5 * (math.log(0.25) - m)
    res = get_advantage_fn("jsd").compute(**kwargs)
    assert_close(res.advantages, [[-jsd, 0.0]])
    assert res.metrics == pytest.approx({"jsd/mean": jsd, "jsd/std": 0.0, "advantages/mean": -jsd})
    # Temperature divides both log-probs.
    hot = get_advantage_fn("jsd", lambda_coef=0.0, temperature=2.0)(**kwargs)
    assert_close(hot, [[-math.log(0.5) / 2, 0.0]])
    # Masked positions are exactly 0, whatever they hold; an empty batch gives zero metrics.
    masked = get_advantage_fn("jsd").compute(
        teacher_logprob=t64([[float("-inf"), -1.0]]), old_logprob=t64([[float("nan"), -1.0]]), response_mask=[[0, 1]]
    )
    assert masked.advantages.tolist() == [[0.0, 0.0]]
    empty = get_advantage_fn("jsd").compute(
        teacher_logprob=torch.zeros(0, 3), old_logprob=torch.zeros(0, 3), response_mask=torch.zeros(0, 3)
    )
    assert empty.advantages.shape == (0, 3) and empty.metrics == {
        "jsd/mean": 0.0,
        "jsd/std": 0.0,
        "advantages/mean": 0.0,
    }


def test_grpo_duplicate_experiences_unequal_sizes_layout():
    fn = get_advantage_fn("grpo", std_threshold=0.0, duplicate_experiences=True)
    # Group a (3 samples, valid) replaces group b (1 sample, skipped: a group of one): b's row takes a's first
    # sample, a's two others are appended as rows 4 and 5.
    res = fn.compute(t64([1.0, 0.0, 2.0, 7.0]), ["a", "a", "a", "b"])
    assert res.source.tolist() == [0, 1, 2, 0, 1, 2] and res.keep.all()
    a = get_advantage_fn("grpo")(t64([1.0, 0.0, 2.0]), [0, 0, 0])
    assert_close(fn(t64([1.0, 0.0, 2.0, 7.0]), ["a", "a", "a", "b"]), torch.cat([a, a]))
    # Group a (2 samples, valid) replaces group b (3 samples, std 0): b's third row is dropped.
    res = fn.compute(t64([3.0, 3.0, 1.0, 3.0, 0.0]), ["b", "b", "a", "b", "a"])
    assert res.source.tolist() == [2, 4, 2, 3, 4] and res.keep.tolist() == [True, True, True, False, True]


def test_rec_group_of_one_reference_crashes():
    """The reference's REC builds its rewards tensor only for groups of two or more (with or without drop), so a
    group of one raises; trl_ext keeps it with A = R (README, "Deliberate differences")."""
    with pytest.raises(UnboundLocalError):
        trinity_rec_group([2.0])
    assert trinity_rec_group([1.0, 0.0]) == [0.5, -0.5]
    for drop in (None, "balance"):
        for reward in (2.0, -1.0):
            res = get_advantage_fn("rec", drop=drop).compute(t64([reward]), [0])
            assert res.keep.all() and res.advantages.tolist() == [reward]


# ---------------------------------------------------------------------------------------------------------
# API: needed inputs, token rewards, token_keep
# ---------------------------------------------------------------------------------------------------------


def test_needed_inputs():
    assert get_advantage_fn("grpo").needed_inputs() == ()
    assert get_advantage_fn("grpo", rank_penalty=0.1).needed_inputs() == ("logprobs", "response_mask")
    dup = get_advantage_fn("grpo", std_threshold=0.0, duplicate_experiences=True, rank_penalty=0.1)
    assert dup.needed_inputs() == ("logprobs", "response_mask", "generator")
    assert get_advantage_fn("rec").needed_inputs() == ()
    assert get_advantage_fn("rec", drop="balance").needed_inputs() == ("generator",)
    assert get_advantage_fn("clipb").needed_inputs() == ("response_mask", "logprobs", "entropy")
    assert get_advantage_fn("clipv").needed_inputs() == ("response_mask", "logprobs", "entropy", "necs")
    assert get_advantage_fn("remax").needed_inputs() == ("response_mask", "reward_baselines", "completion_mask")
    assert get_advantage_fn("jsd").needed_inputs() == ("teacher_logprob", "old_logprob", "response_mask")
    for name in ("grpo_verl", "opmd_verl", "asymre_verl", "gpg"):
        assert get_advantage_fn(name).needed_inputs() == ("response_mask",)
    for name, cls in ADVANTAGE_FNS.items():
        fn = cls()
        assert set(fn.needed_inputs()) <= set(cls.inputs()), name


def test_token_rewards_flags():
    flagged = {name for name, cls in ADVANTAGE_FNS.items() if cls.token_rewards}
    assert flagged == {
        "ppo", "reinforceplusplus", "remax", "grpo_verl", "opmd_verl", "asymre_verl", "gpg", "clipb", "clipv"
    }  # fmt: skip
    assert all(ADVANTAGE_FNS[name].token_level for name in flagged)
    assert all(ADVANTAGE_FNS[name].token_level for name in ("jsd", "clipb", "clipv", "remax"))


def test_call_zeroes_the_tokens_token_keep_drops():
    class Fixed(ADVANTAGE_FNS["reinforce"]):
        def compute(self, rewards, group_ids):
            token_keep = torch.tensor([[True, False], [True, True]])
            return AdvantageResult(torch.ones(2, 2), torch.tensor([True, False]), token_keep=token_keep)

    assert Fixed()(None, None).tolist() == [[1.0, 0.0], [0.0, 0.0]]


# ---------------------------------------------------------------------------------------------------------
# Bad inputs
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("clipb", {"mu": -1.0}, r"clipb: mu=-1.0 is not valid; must be >= 0"),
        ("clipb", {"epsilon": 0.0}, r"clipb: epsilon=0.0 is not valid; must be > 0"),
        ("clipv", {"max_frac": 1.5}, r"clipv: max_frac=1.5 is not valid; must be in \[0, 1\]"),
        ("clipv", {"mu": float("nan")}, r"clipv: mu=nan is not valid"),
        ("jsd", {"lambda_coef": 1.1}, r"jsd: lambda_coef=1.1 is not valid; must be in \[0, 1\]"),
        ("jsd", {"kl_coef": -0.5}, r"jsd: kl_coef=-0.5 is not valid; must be >= 0"),
        ("jsd", {"temperature": 0.0}, r"jsd: temperature=0.0 is not valid; must be > 0"),
        ("jsd", {"chunk_size": 0}, r"jsd: chunk_size=0 is not valid; must be an integer >= 1 or None"),
        ("jsd", {"chunk_size": 2.5}, r"jsd: chunk_size=2.5 is not valid"),
        ("grpo_verl", {"epsilon": -1.0}, r"grpo_verl: epsilon=-1.0 is not valid"),
        ("grpo_verl", {"std_threshold": 0.1}, r"grpo_verl: unknown argument\(s\) 'std_threshold'"),
        ("opmd_verl", {"tau": 0}, r"opmd_verl: tau=0 is not valid; must be > 0"),
        ("asymre_verl", {"baseline_shift": float("inf")}, r"asymre_verl: baseline_shift=inf is not valid"),
        ("remax", {"gamma": 1.0}, r"remax: unknown argument\(s\) 'gamma'; valid arguments: none"),
    ],
)
def test_bad_arguments(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_advantage_fn(name, **kwargs)


def _clip_inputs(n=2, t=3, **changes):
    inputs = dict(
        response_mask=torch.ones(n, t),
        logprobs=torch.full((n, t), -1.0),
        entropy=torch.ones(n, t),
        necs=torch.ones(n, t),
    )
    inputs.update(changes)
    return inputs


@pytest.mark.parametrize("name", ["clipb", "clipv"])
def test_clip_bad_inputs(name):
    fn = get_advantage_fn(name)
    inputs = _clip_inputs()
    if name == "clipb":
        inputs.pop("necs")

    def call(rewards=None, groups=(0, 0), **changes):
        rewards = torch.zeros(2) if rewards is None else rewards
        return fn.compute(rewards, list(groups), **{**inputs, **changes})

    nan_inside = torch.full((2, 3), -1.0).index_put((torch.tensor(1), torch.tensor(2)), torch.tensor(float("nan")))
    with pytest.raises(ValueError, match=rf"{name}: logprobs\[1, 2\] is nan; logprobs must be finite where"):
        call(logprobs=nan_inside)
    assert (
        call(logprobs=nan_inside, response_mask=torch.tensor([[1, 1, 1], [1, 1, 0]])).token_keep[1, 2].item() is False
    )
    with pytest.raises(ValueError, match=rf"{name}: entropy\[0, 0\] is inf"):
        call(entropy=torch.tensor([[float("inf"), 1, 1], [1, 1, 1]]))
    with pytest.raises(ValueError, match=rf"{name}: entropy must have the shape \(2, 3\) of response_mask"):
        call(entropy=torch.ones(2, 4))
    with pytest.raises(ValueError, match=rf"{name}: response_mask must be a 2-D"):
        call(response_mask=torch.ones(6))
    with pytest.raises(ValueError, match=rf"{name}: response_mask must be boolean or contain only 0 and 1"):
        call(response_mask=torch.full((2, 3), 0.5))
    with pytest.raises(ValueError, match=rf"{name}: rewards must have shape \[N\] or \[N, T\] = \(2, 3\)"):
        call(rewards=torch.zeros(3))
    with pytest.raises(ValueError, match=rf"{name}: rewards\[0, 1\] is nan; token rewards are summed"):
        call(rewards=t64([[0.0, float("nan"), 0.0], [0.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match=rf"{name}: rewards has 2 entries but group_ids has 3"):
        call(groups=(0, 0, 1))
    if name == "clipv":
        with pytest.raises(ValueError, match=r"clipv: necs\[0, 0\] is nan"):
            call(necs=torch.tensor([[float("nan"), 1, 1], [1, 1, 1]]))
    with pytest.raises(TypeError):
        fn.compute(torch.zeros(2), [0, 0], response_mask=torch.ones(2, 3))  # the per-token inputs are required


@pytest.mark.parametrize("name", ["grpo_verl", "opmd_verl", "asymre_verl"])
def test_trainer_side_bad_inputs(name):
    fn = get_advantage_fn(name)
    with pytest.raises(ValueError, match=rf"{name}: rewards\[1\] is inf; all rewards must be finite"):
        fn(t64([0.0, float("inf")]), [0, 0], response_mask=torch.ones(2, 2))
    with pytest.raises(ValueError, match=rf"{name}: rewards must have shape \[N\] or \[N, T\] = \(2, 2\)"):
        fn(torch.zeros(2, 3), [0, 0], response_mask=torch.ones(2, 2))
    with pytest.raises(ValueError, match=rf"{name}: response_mask must be a 2-D \[N, T\] tensor"):
        fn(torch.zeros(2), [0, 0], response_mask=torch.ones(2))
    with pytest.raises(ValueError, match=rf"{name}: group_ids\[1\] is not hashable"):
        fn(torch.zeros(2), [0, [1]], response_mask=torch.ones(2, 2))
    empty = fn(torch.zeros(0), [], response_mask=torch.ones(0, 4))
    assert empty.shape == (0, 4)


def test_remax_bad_inputs():
    fn = get_advantage_fn("remax")
    mask = torch.ones(2, 3)
    with pytest.raises(ValueError, match=r"remax: reward_baselines\[1\] is nan; reward_baselines must be finite"):
        fn(t64([1.0, 0.0]), response_mask=mask, reward_baselines=t64([0.0, float("nan")]))
    with pytest.raises(ValueError, match=r"remax: reward_baselines must have shape \(2,\)"):
        fn(t64([1.0, 0.0]), response_mask=mask, reward_baselines=t64([0.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match=r"remax: reward_baselines must be 1-D"):
        fn(t64([1.0, 0.0]), response_mask=mask, reward_baselines=torch.zeros(2, 1))
    with pytest.raises(ValueError, match=r"remax: rewards\[0, 2\] is nan; rewards must be finite where response_mask"):
        fn(t64([[0.0, 0.0, float("nan")], [0.0, 0.0, 0.0]]), response_mask=mask, reward_baselines=torch.zeros(2))
    with pytest.raises(ValueError, match=r"remax: response_mask is 1 where completion_mask is 0"):
        fn(t64([1.0, 0.0]), response_mask=mask, reward_baselines=torch.zeros(2), completion_mask=torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"remax: response_mask must be a 2-D"):
        fn(t64([1.0, 0.0]), response_mask=torch.ones(2), reward_baselines=torch.zeros(2))


def test_jsd_bad_inputs():
    fn = get_advantage_fn("jsd")
    with pytest.raises(ValueError, match=r"jsd: teacher_logprob \(2, 3\), old_logprob \(2, 4\) and response_mask"):
        fn(teacher_logprob=torch.zeros(2, 3), old_logprob=torch.zeros(2, 4), response_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"jsd: .*response_mask \(2, 4\) must all have one shape"):
        fn(teacher_logprob=torch.zeros(2, 3), old_logprob=torch.zeros(2, 3), response_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match=r"jsd: old_logprob\[0, 1\] is nan; log-probs must be finite where"):
        fn(teacher_logprob=torch.zeros(1, 2), old_logprob=t64([[0.0, float("nan")]]), response_mask=torch.ones(1, 2))
    with pytest.raises(ValueError, match=r"jsd: teacher_logprob\[0, 0\] is -inf"):
        fn(teacher_logprob=t64([[float("-inf"), 0.0]]), old_logprob=torch.zeros(1, 2), response_mask=torch.ones(1, 2))
    with pytest.raises(ValueError, match=r"jsd: response_mask must be boolean or contain only 0 and 1"):
        fn(teacher_logprob=torch.zeros(1, 2), old_logprob=torch.zeros(1, 2), response_mask=torch.full((1, 2), 2))
