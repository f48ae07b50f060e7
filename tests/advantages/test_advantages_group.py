"""Tests for trl_ext.advantages, the estimators with one advantage per sample, from its group (GRPO with its std
threshold, rank penalty and duplicate_experiences; RLOO, REINFORCE, OPMD, AsymRE, REC, step-wise GRPO, RAFT):
hand-computed values and plain-Python reference implementations."""

from __future__ import annotations

import math
import random
import statistics

import pytest
import torch
from test_advantages_api import EPS, close

from trl_ext.advantages import AdvantageResult, get_advantage_fn


def py_grpo(rewards: list[float], groups: list, eps: float = EPS) -> list[float]:
    """Plain-Python GRPO reference: (R - mean) / (stdev + eps); group of one -> mean 0, std 1."""
    members: dict = {}
    for r, g in zip(rewards, groups, strict=True):
        members.setdefault(g, []).append(r)
    out = []
    for r, g in zip(rewards, groups, strict=True):
        rs = members[g]
        mean, std = (statistics.mean(rs), statistics.stdev(rs)) if len(rs) > 1 else (0.0, 1.0)
        out.append((r - mean) / (std + eps))
    return out


# ---------------------------------------------------------------------------------------------------------
# GRPO
# ---------------------------------------------------------------------------------------------------------


def test_grpo_hand_computed():
    fn = get_advantage_fn("grpo")
    # [1, 0] per group: mean 0.5, unbiased std sqrt(0.5).
    a = 0.5 / (math.sqrt(0.5) + EPS)
    close(fn(torch.tensor([1.0, 0.0, 0.0, 1.0]), [0, 0, 1, 1]), [a, -a, -a, a])
    # [1, 2, 3]: mean 2, std 1; a group of one: mean 0, std 1 -> R / (1 + eps).
    close(
        fn(torch.tensor([1.0, 2.0, 3.0, 5.0]), ["x", "x", "x", "y"]),
        [-1 / (1 + EPS), 0.0, 1 / (1 + EPS), 5 / (1 + EPS)],
    )
    # All-equal group -> 0.
    close(fn(torch.tensor([0.3, 0.3]), [0, 0]), [0.0, 0.0])


def test_grpo_matches_python_reference():
    rng = random.Random(0)
    groups = [rng.randrange(5) for _ in range(40)]
    rewards = [rng.uniform(-2, 2) for _ in range(40)]
    out = get_advantage_fn("grpo", epsilon=1e-3)(torch.tensor(rewards, dtype=torch.float64), groups)
    close(out, py_grpo(rewards, groups, eps=1e-3), atol=1e-10)


def test_grpo_std_threshold():
    fn = get_advantage_fn("grpo", std_threshold=0.5)
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 2.0])
    groups = ["a", "a", "a", "b", "b", "c"]  # std: a=0, b=sqrt(.5), c is a group of one
    res = fn.compute(rewards, groups)
    assert isinstance(res, AdvantageResult)
    assert res.source is None
    assert res.keep.tolist() == [False, False, False, True, True, False]
    b = 0.5 / (math.sqrt(0.5) + EPS)
    close(fn(rewards, groups), [0.0, 0.0, 0.0, -b, b, 0.0])

    res = get_advantage_fn("grpo", std_threshold=1.0).compute(rewards, groups)
    assert res.keep.tolist() == [False] * 6  # b: 0.707 <= 1, c: a group of one
    close(res.advantages, [0.0, 0.0, 0.0, -b, b, 2 / (1 + EPS)])  # compute keeps the raw advantages
    assert get_advantage_fn("grpo", std_threshold=1.0)(rewards, groups).abs().sum() == 0

    res = get_advantage_fn("grpo", std_threshold=0.0).compute(rewards, groups)
    assert res.keep.tolist() == [False, False, False, True, True, False]


@pytest.mark.parametrize("threshold", [0.0, 0.5, 0.999, 1.0, 100.0])
def test_grpo_std_threshold_drops_every_group_of_one(threshold):
    # Trinity-RFT skips a group of one whenever std_threshold is set, whatever its value (its std would be 1).
    rewards = torch.tensor([1.0, 0.0, 7.0, -3.0])
    groups = ["a", "a", "b", "c"]  # a: std sqrt(.5); b, c: groups of one
    res = get_advantage_fn("grpo", std_threshold=threshold).compute(rewards, groups)
    assert res.keep.tolist() == [math.sqrt(0.5) > threshold] * 2 + [False, False]
    assert get_advantage_fn("grpo").compute(rewards, groups).keep.all()  # no threshold: all kept
    # With the batch std too.
    res = get_advantage_fn("grpo", std_threshold=threshold, std_cal_level="batch").compute(rewards, groups)
    assert res.keep.tolist()[2:] == [False, False]


def test_grpo_batch_std():
    rewards = [1.0, 0.0, 0.0, 1.0, 3.0]
    groups = [0, 0, 1, 1, 2]
    std = statistics.stdev(rewards)
    means = [0.5, 0.5, 0.5, 0.5, 0.0]  # per group; group of one -> 0
    expected = [(r - m) / (std + EPS) for r, m in zip(rewards, means, strict=True)]
    close(get_advantage_fn("grpo", std_cal_level="batch")(torch.tensor(rewards), groups), expected)
    # A single sample: batch std is 1.
    close(get_advantage_fn("grpo", std_cal_level="batch")(torch.tensor([2.0]), [0]), [2 / (1 + EPS)])


def test_grpo_rank_penalty_hand_example():
    """Trinity-RFT's rank penalty: the group mean / std are those of R·(1 − rank/n·β), rank ascending by mean token
    log-prob (0 = the least likely); the numerator keeps R."""
    fn = get_advantage_fn("grpo", rank_penalty=0.5)
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, -1.0, 2.0], dtype=torch.float64)
    groups = [0, 0, 0, 0, 1, 1]
    # Mean log-probs over the mask: row 0 -1, row 1 -3, row 2 -0.5, row 3 -2 (its masked -100 ignored), row 4 5,
    # row 5 -7.
    logprobs = torch.tensor(
        [[-1.0, -1.0], [-2.0, -4.0], [-0.5, float("nan")], [-2.0, -100.0], [5.0, 5.0], [-7.0, -7.0]],
        dtype=torch.float64,
    )
    mask = torch.tensor([[1, 1], [1, 1], [1, 0], [1, 0], [1, 1], [1, 1]])
    # Group 0 (n=4): ascending ranks idx1 0, idx3 1, idx0 2, idx2 3 -> factors 1, 7/8, 3/4, 5/8:
    # scaled [0.75, 1, 0, 0.875].  Group 1 (n=2): idx5 rank 0 (factor 1), idx4 rank 1 (factor 3/4): [-0.75, 2].
    scaled0, scaled1 = [0.75, 1.0, 0.0, 0.875], [-0.75, 2.0]
    m0, s0 = statistics.mean(scaled0), statistics.stdev(scaled0)
    m1, s1 = statistics.mean(scaled1), statistics.stdev(scaled1)
    expected = [(r - m0) / (s0 + EPS) for r in [1.0, 1.0, 0.0, 1.0]] + [(r - m1) / (s1 + EPS) for r in [-1.0, 2.0]]
    close(fn(rewards, groups, logprobs=logprobs, response_mask=mask), expected, atol=1e-12)
    with pytest.raises(ValueError, match=r"grpo: rank_penalty is set, so compute\(\) needs logprobs and response_mask"):
        fn(rewards, groups)
    with pytest.raises(ValueError, match=r"grpo: rank_penalty is set, so compute\(\) needs response_mask"):
        fn(rewards, groups, logprobs=logprobs)
    with pytest.raises(
        ValueError, match=r"grpo: logprobs\[1, 0\] is nan, logprobs\[1, 1\] is nan; logprobs must be finite where"
    ):
        fn(rewards, groups, logprobs=logprobs.index_fill(0, torch.tensor([1]), float("nan")), response_mask=mask)
    with pytest.raises(ValueError, match=r"grpo: logprobs must have the shape \(6, 2\) of response_mask"):
        fn(rewards, groups, logprobs=torch.zeros(6, 3), response_mask=mask)
    with pytest.raises(ValueError, match=r"grpo: response_mask has 5 rows but rewards has 6 entries"):
        fn(rewards, groups, logprobs=torch.zeros(5, 2), response_mask=torch.ones(5, 2))
    with pytest.raises(ValueError, match=r"grpo: response_mask must be a 2-D"):
        fn(rewards, groups, logprobs=torch.zeros(6), response_mask=torch.ones(6))


def test_grpo_rank_penalty_ties_and_zero():
    # Ties: by index -> idx0 rank 0 (factor 1), idx1 rank 1 (factor 1 - 1/2 = .5): scaled [1, .5].
    fn = get_advantage_fn("grpo", rank_penalty=1.0)
    out = fn(torch.tensor([1.0, 1.0]), [0, 0], logprobs=[[-1.0], [-1.0]], response_mask=[[1], [1]])
    close(out, [(1 - 0.75) / (statistics.stdev([1.0, 0.5]) + EPS)] * 2)
    # rank_penalty=0 leaves the statistics unchanged; the inputs are ignored without rank_penalty.
    rewards = torch.tensor([1.0, 0.0, 1.0])
    lp, mask = torch.tensor([[1.0], [2.0], [3.0]]), torch.ones(3, 1)
    base = get_advantage_fn("grpo")(rewards, [0, 0, 0], logprobs=lp, response_mask=mask)
    close(get_advantage_fn("grpo", rank_penalty=0.0)(rewards, [0, 0, 0], logprobs=lp, response_mask=mask), base)
    # A row with no valid token ranks last (the reference's NaN mean sorts last); a group of one is not scaled.
    out = fn(
        torch.tensor([1.0, 1.0, 3.0]), [0, 0, 1], logprobs=torch.zeros(3, 2), response_mask=[[0, 0], [1, 1], [1, 1]]
    )
    close(out, [(1 - 0.75) / (statistics.stdev([1.0, 0.5]) + EPS)] * 2 + [3 / (1 + EPS)])


# ---------------------------------------------------------------------------------------------------------
# GRPO: duplicate_experiences
# ---------------------------------------------------------------------------------------------------------


def test_grpo_duplicate_experiences_single_valid_group():
    fn = get_advantage_fn("grpo", std_threshold=0.0, duplicate_experiences=True)
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 4.0, 4.0])
    groups = [0, 0, 1, 1, 2, 2, 3, 3]  # only group 0 has a std > 0
    res = fn.compute(rewards, groups)
    a = 0.5 / (math.sqrt(0.5) + EPS)
    assert res.source.tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    assert res.keep.tolist() == [True] * 8
    close(res.advantages, [a, -a, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # each sample's own advantage
    close(fn(rewards, groups), [a, -a] * 4)  # per output row: the advantage of its source


def test_grpo_duplicate_experiences_random_choice():
    fn = get_advantage_fn("grpo", std_threshold=0.1, duplicate_experiences=True)
    # Interleaved groups of three: rows of group g are g, g + 4, g + 8; groups 1 and 3 have std 0.
    groups = torch.tensor([0, 1, 2, 3] * 3)
    rewards = torch.tensor([1.0, 5.0, 0.0, -1.0, 0.0, 5.0, 2.0, -1.0, 0.5, 5.0, 1.0, -1.0])
    members = {g: [g, g + 4, g + 8] for g in range(4)}
    plain = get_advantage_fn("grpo")(rewards, groups)
    seen = set()
    for seed in range(16):
        res = fn.compute(rewards, groups, generator=torch.Generator().manual_seed(seed))
        pick = torch.randint(0, 2, (2,), generator=torch.Generator().manual_seed(seed)).tolist()
        chosen = [[0, 2][k] for k in pick]  # valid groups in order; skipped groups 1, 3 in order
        expected = list(range(12))
        for skipped, valid in zip((1, 3), chosen, strict=True):
            for row, src in zip(members[skipped], members[valid], strict=True):
                expected[row] = src
        assert res.source.tolist() == expected
        assert res.keep.all()
        close(res.advantages, plain)
        close(fn(rewards, groups, generator=torch.Generator().manual_seed(seed)), plain[res.source])
        seen.add(tuple(chosen))
    assert len(seen) > 1


def test_grpo_duplicate_experiences_edge_cases():
    fn = get_advantage_fn("grpo", std_threshold=0.0, duplicate_experiences=True)
    # Nothing skipped: identity (source None).
    res = fn.compute(torch.tensor([1.0, 0.0, 0.0, 2.0]), [0, 0, 1, 1])
    assert res.source is None and res.keep.all()
    # Every group skipped: nothing kept, nothing to copy.
    res = fn.compute(torch.tensor([1.0, 1.0, 3.0, 3.0, 5.0]), [0, 0, 1, 1, 2])
    assert res.source is None and not res.keep.any()
    assert fn(torch.tensor([1.0, 1.0, 3.0, 3.0, 5.0]), [0, 0, 1, 1, 2]).abs().sum() == 0
    # Unequal sizes are fine when nothing is duplicated (test_advantages_trinity_closed_form.py and
    # test_advantages_trinity_parity.py cover duplicating them).
    assert fn.compute(torch.tensor([1.0, 0.0, 2.0, 0.0, 1.0]), [0, 0, 1, 1, 1]).source is None
    # Without duplicate_experiences a skipped group is just dropped.
    res = get_advantage_fn("grpo", std_threshold=0.0).compute(torch.tensor([1.0, 0.0, 1.0, 1.0]), [0, 0, 1, 1])
    assert res.source is None and res.keep.tolist() == [True, True, False, False]


def test_advantage_result_source_default():
    res = AdvantageResult(torch.zeros(2), torch.ones(2, dtype=torch.bool))
    assert res.source is None and res.token_keep is None and res.metrics is None and res.returns is None
    assert len(res) == 6
    assert res[2] is None and AdvantageResult(*res).source is None


# ---------------------------------------------------------------------------------------------------------
# RLOO / REINFORCE / OPMD / AsymRE
# ---------------------------------------------------------------------------------------------------------


def test_rloo_hand_and_loop_reference():
    fn = get_advantage_fn("rloo")
    # [1, 0, 0]: A_0 = 1 - 0, A_1 = 0 - (1 + 0)/2; group of one: A = R.
    close(fn(torch.tensor([1.0, 0.0, 0.0, 4.0]), [0, 0, 0, 1]), [1.0, -0.5, -0.5, 4.0])

    rng = random.Random(1)
    groups = [rng.randrange(6) for _ in range(30)]
    rewards = [rng.uniform(-1, 3) for _ in range(30)]
    expected = []
    for i, (r, g) in enumerate(zip(rewards, groups, strict=True)):
        others = [rj for j, (rj, gj) in enumerate(zip(rewards, groups, strict=True)) if gj == g and j != i]
        expected.append(r - sum(others) / len(others) if others else r)
    close(fn(torch.tensor(rewards, dtype=torch.float64), groups), expected, atol=1e-10)


def test_reinforce_is_identity():
    rewards = torch.tensor([1.0, -2.0, 0.5])
    out = get_advantage_fn("reinforce")(rewards, [0, 0, 1])
    close(out, [1.0, -2.0, 0.5])
    assert out.data_ptr() != rewards.data_ptr()


def test_opmd_mean_and_logavgexp():
    rewards = [1.0, 0.0, 2.0, 3.0]
    groups = [0, 0, 0, 1]
    close(get_advantage_fn("opmd")(torch.tensor(rewards), groups), [0.0, -1.0, 1.0, 3.0])
    for tau in (1.0, 0.3, 5.0):
        b = tau * math.log(sum(math.exp(r / tau) for r in rewards[:3]) / 3)
        out = get_advantage_fn("opmd", opmd_baseline="logavgexp", tau=tau)(
            torch.tensor(rewards, dtype=torch.float64), groups
        )
        close(out, [1.0 - b, 0.0 - b, 2.0 - b, 3.0], atol=1e-10)  # group of one: b = 0
    # Large rewards / small tau stay finite (logsumexp is stabilised).
    out = get_advantage_fn("opmd", opmd_baseline="logavgexp", tau=0.01)(torch.tensor([100.0, 0.0]), [0, 0])
    close(out, [0.01 * math.log(2), -100 + 0.01 * math.log(2)], atol=1e-4)


def test_asymre_shift():
    fn = get_advantage_fn("asymre")  # baseline_shift = -0.1
    # Group [1, 0]: mean .5 -> baseline .4.
    close(fn(torch.tensor([1.0, 0.0, 3.0, 1.0]), [0, 0, 1, 1]), [0.6, -0.4, 1.1, -0.9])
    close(get_advantage_fn("asymre", baseline_shift=0.25)(torch.tensor([2.0, 0.0]), [0, 0]), [0.75, -1.25])


@pytest.mark.parametrize("shift", [-0.1, 0.0, 0.25])
def test_asymre_group_of_one_is_the_reward(shift):
    # Trinity-RFT: a group of one has baseline 0 (no shift), so A = R.
    fn = get_advantage_fn("asymre", baseline_shift=shift)
    close(fn(torch.tensor([1.0, 0.0, 1.0, -2.0]), [0, 0, 1, 2]), [0.5 - shift, -0.5 - shift, 1.0, -2.0])


# ---------------------------------------------------------------------------------------------------------
# REC
# ---------------------------------------------------------------------------------------------------------


def test_rec_values():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0])
    groups = [0, 0, 0, 0, 1]
    close(get_advantage_fn("rec")(rewards, groups), [0.75, -0.25, -0.25, -0.25, 2.0])
    std = statistics.pstdev([1.0, 0.0, 0.0, 0.0])  # population std: sqrt(3) / 4
    expected = [0.75 / (std + EPS)] + [-0.25 / (std + EPS)] * 3 + [2.0 / (1 + EPS)]
    close(get_advantage_fn("rec", std_normalize=True)(rewards, groups), expected)
    assert get_advantage_fn("rec").compute(rewards, groups).keep.all()


def test_rec_std_normalize_uses_the_population_std():
    # Trinity-RFT normalizes by sel_rewards.std(unbiased=False), also when nothing is dropped.
    rewards = torch.tensor([3.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    std = math.sqrt((4 + 0 + 1 + 1) / 4)  # mean 1; the unbiased std would be sqrt(6 / 3)
    out = get_advantage_fn("rec", std_normalize=True, epsilon=1e-3)(rewards, [0] * 4)
    close(out, [2 / (std + 1e-3), 0.0, -1 / (std + 1e-3), -1 / (std + 1e-3)], atol=1e-12)


@pytest.mark.parametrize("std_normalize", [False, True])
def test_rec_balance_recomputes_mean_and_std_over_the_kept_samples(std_normalize):
    # [1, 0, 0, 0]: mean .25, one positive, three negatives -> two random negatives dropped.  The two kept
    # samples [1, 0] have mean .5 and population std .5: A = +-.5 (or +-.5 / (.5 + eps)); dropped: A = 0.
    fn = get_advantage_fn("rec", drop="balance", std_normalize=std_normalize)
    a = 0.5 / (0.5 + EPS) if std_normalize else 0.5
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 5.0, 5.0])
    groups = [0, 0, 0, 0, 1, 1]
    kept_negatives = set()
    for seed in range(12):
        res = fn.compute(rewards, groups, generator=torch.Generator().manual_seed(seed))
        keep = res.keep.tolist()
        assert keep[0] and sum(keep[1:4]) == 1 and keep[4] and keep[5]
        j = 1 + keep[1:4].index(True)
        kept_negatives.add(j)
        expected = [a, 0.0, 0.0, 0.0, 0.0, 0.0]
        expected[j] = -a
        close(res.advantages, expected)
    assert len(kept_negatives) > 1


def test_rec_balance_ties_at_the_mean_count_as_positive():
    fn = get_advantage_fn("rec", drop="balance")
    # [3, 1, 0, 0]: mean 1; 3 and 1 (= mean) are positive, so 2 positives vs 2 negatives: nothing dropped.
    res = fn.compute(torch.tensor([3.0, 1.0, 0.0, 0.0]), [0] * 4, generator=torch.Generator().manual_seed(0))
    assert res.keep.all()
    close(res.advantages, [2.0, 0.0, -1.0, -1.0])
    # [5, 1, 0, 0, 0, 0]: mean 1 -> 2 positives, 4 negatives -> 2 negatives dropped; the kept [5, 1, 0, 0] have
    # mean 1.5 and population std sqrt(17) / 2.
    fn_std = get_advantage_fn("rec", drop="balance", std_normalize=True)
    rewards = torch.tensor([5.0, 1.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    std = math.sqrt(17) / 2
    for seed in range(6):
        res = fn_std.compute(rewards, [0] * 6, generator=torch.Generator().manual_seed(seed))
        assert res.keep[:2].all() and int(res.keep[2:].sum()) == 2
        expected = torch.tensor([3.5, -0.5, -1.5, -1.5, -1.5, -1.5], dtype=torch.float64) / (std + EPS)
        close(res.advantages, torch.where(res.keep, expected, 0.0), atol=1e-12)


@pytest.mark.parametrize("drop", [None, "balance"])
def test_rec_group_of_one(drop):
    # The reference crashes on a group of one; here it gets mean 0 / std 1 and is kept.
    rewards = torch.tensor([2.0, -1.0, 1.0, 0.0])
    groups = [0, 1, 2, 2]
    res = get_advantage_fn("rec", drop=drop).compute(rewards, groups)
    assert res.keep.all()
    close(res.advantages, [2.0, -1.0, 0.5, -0.5])
    out = get_advantage_fn("rec", drop=drop, std_normalize=True)(rewards, groups)
    close(out, [2.0 / (1 + EPS), -1.0 / (1 + EPS), 0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS)])


def test_rec_drop_balance():
    fn = get_advantage_fn("rec", drop="balance")
    # g0: 1 positive, 4 negatives; g1: 3 positives, 1 negative; g2: all equal (at the mean: positive);
    # g3: 2 pos, 3 neg.
    rewards = torch.tensor([1, 0, 0, 0, 0, 1, 1, 1, 0, 0.5, 0.5, 1, 1, 0, 0, 0], dtype=torch.float64)
    groups = ["g0"] * 5 + ["g1"] * 4 + ["g2"] * 2 + ["g3"] * 5
    seen = set()
    for seed in range(20):
        res = fn.compute(rewards, groups, generator=torch.Generator().manual_seed(seed))
        keep = res.keep.tolist()
        assert keep[0] and sum(keep[1:5]) == 1  # g0: positive kept, one negative kept
        assert all(keep[5:9])  # g1: fewer negatives than positives -> all kept
        assert all(keep[9:11])  # g2: samples at the mean are positive
        assert keep[11] and keep[12] and sum(keep[13:16]) == 2  # g3
        seen.add(tuple(keep))
        out = fn(rewards, groups, generator=torch.Generator().manual_seed(seed))
        close(out, torch.where(res.keep, res.advantages, 0.0))
        assert (out[~res.keep] == 0).all() and (res.advantages[~res.keep] == 0).all()
        close(out[:5][res.keep[:5]], [0.5, -0.5])  # g0 recomputed over the two kept samples
    assert len(seen) > 1  # the kept negatives are random
    a = fn.compute(rewards, groups, generator=torch.Generator().manual_seed(3)).keep
    b = fn.compute(rewards, groups, generator=torch.Generator().manual_seed(3)).keep
    assert torch.equal(a, b)
    assert fn.compute(rewards, groups).keep.sum() == 16 - 3 - 1  # works without a generator


# ---------------------------------------------------------------------------------------------------------
# Step-wise GRPO
# ---------------------------------------------------------------------------------------------------------


def test_step_wise_grpo_broadcast():
    fn = get_advantage_fn("step_wise_grpo")
    # Group q1: run r0 (idx 0, 2, 4; last reward 1) and run r1 (idx 1, 3; last reward 0; 9 is not last).
    # Group q2: a single run r2 (idx 5, 6; last reward 3) -> 3 / (1 + eps).
    rewards = torch.tensor([0.0, 9.0, 0.0, 0.0, 1.0, 0.0, 3.0])
    groups = ["q1", "q1", "q1", "q1", "q1", "q2", "q2"]
    runs = ["r0", "r1", "r0", "r1", "r0", "r2", "r2"]
    a = 0.5 / (math.sqrt(0.5) + EPS)
    expected = [a, -a, a, -a, a, 3 / (1 + EPS), 3 / (1 + EPS)]
    close(fn(rewards, groups, run_ids=runs), expected)
    close(
        fn(rewards, torch.tensor([1, 1, 1, 1, 1, 2, 2]), run_ids=torch.tensor([0, 1, 0, 1, 0, 2, 2])),
        expected,
    )
    assert fn.compute(rewards, groups, run_ids=runs).keep.all()

    with pytest.raises(ValueError, match=r"every run must belong to a single group"):
        fn(rewards, groups, run_ids=["r0", "r1", "r0", "r1", "r0", "r0", "r2"])
    with pytest.raises(ValueError, match=r"rewards has 7 entries but run_ids has 2"):
        fn(rewards, groups, run_ids=["r0", "r1"])
    with pytest.raises(TypeError):
        fn(rewards, groups)
    assert fn(torch.zeros(0), [], run_ids=[]).shape == (0,)


def test_step_wise_grpo_enable_step_norm():
    fn = get_advantage_fn("step_wise_grpo", enable_step_norm=True)
    rewards = torch.tensor([0.0, 9.0, 0.0, 0.0, 1.0, 0.0, 3.0])
    groups = ["q1", "q1", "q1", "q1", "q1", "q2", "q2"]
    runs = ["r0", "r1", "r0", "r1", "r0", "r2", "r2"]  # r0: 3 steps, r1: 2 steps, r2: 2 steps
    a = 0.5 / (math.sqrt(0.5) + EPS)
    close(fn(rewards, groups, run_ids=runs), [a / 3, -a / 2, a / 3, -a / 2, a / 3, 1.5 / (1 + EPS), 1.5 / (1 + EPS)])


def test_step_wise_grpo_batch_std():
    fn = get_advantage_fn("step_wise_grpo", std_cal_level="batch")
    rewards = torch.tensor([0.0, 9.0, 0.0, 0.0, 1.0, 0.0, 3.0], dtype=torch.float64)
    groups = ["q1", "q1", "q1", "q1", "q1", "q2", "q2"]
    runs = ["r0", "r1", "r0", "r1", "r0", "r2", "r2"]
    # Last-step rewards of all runs: [1, 0, 3] -> unbiased std sqrt(7 / 3); the means stay per group
    # (q1: .5; q2, a single run: 0).
    s = math.sqrt(7 / 3)
    a = 0.5 / (s + EPS)
    close(fn(rewards, groups, run_ids=runs), [a, -a, a, -a, a, 3 / (s + EPS), 3 / (s + EPS)], atol=1e-12)
    # A single run in the batch: std 1.
    close(fn(torch.tensor([0.0, 2.0]), [0, 0], run_ids=[5, 5]), [2 / (1 + EPS)] * 2)


def test_step_wise_grpo_std_threshold():
    rewards = torch.tensor([0.0, 9.0, 0.0, 0.0, 1.0, 0.0, 3.0, 2.0, 2.0])
    groups = ["q1", "q1", "q1", "q1", "q1", "q2", "q2", "q3", "q3"]
    runs = ["r0", "r1", "r0", "r1", "r0", "r2", "r2", "r3", "r4"]
    # q1: runs [1, 0] -> std sqrt(.5); q2: a single run -> always skipped; q3: runs [2, 2] -> std 0.
    for threshold, q1_kept in ((0.0, True), (0.5, True), (0.75, False)):
        res = get_advantage_fn("step_wise_grpo", std_threshold=threshold).compute(rewards, groups, run_ids=runs)
        assert res.keep.tolist() == [q1_kept] * 5 + [False] * 4
    res = get_advantage_fn("step_wise_grpo").compute(rewards, groups, run_ids=runs)
    assert res.keep.all()


# ---------------------------------------------------------------------------------------------------------
# RAFT
# ---------------------------------------------------------------------------------------------------------


def test_raft_keeps_the_first_best_sample_of_each_group():
    from trl_ext.advantages import get_advantage_fn

    rewards = torch.tensor([0.2, 0.9, 0.9, 0.1, 0.0, 0.0, 0.5, 0.3])
    result = get_advantage_fn("raft").compute(rewards, [0, 0, 0, 0, 1, 1, 2, 2])
    assert result.keep.tolist() == [False, True, False, False, True, False, True, False]
    assert result.advantages.tolist() == [1.0] * 8
    strict = get_advantage_fn("raft", min_reward=0.4).compute(rewards, [0, 0, 0, 0, 1, 1, 2, 2])
    assert strict.keep.tolist() == [False, True, False, False, False, False, True, False]
    with pytest.raises(ValueError, match="raft: min_reward=nan is not valid"):
        get_advantage_fn("raft", min_reward=float("nan"))


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, [-1 / (math.sqrt(2) + 1e-6), 1 / (math.sqrt(2) + 1e-6), 2.0 / (1 + 1e-6)]),
        ({"std_unbiased": False}, [-1 / (1 + 1e-6), 1 / (1 + 1e-6), 2.0 / (1 + 1e-6)]),
        ({"group_of_one": "zero"}, [-1 / (math.sqrt(2) + 1e-6), 1 / (math.sqrt(2) + 1e-6), 0.0]),
        ({"std_unbiased": False, "group_of_one": "zero", "epsilon": 1e-8}, [-1.0, 1.0, 0.0]),
    ],
)
def test_grpo_std_and_group_of_one_options(options, expected):
    """Rewards [1, 3] in one group and [2] alone: the unbiased std is √2, the population std 1; a group of one is
    centred on 0 (A = R/(1 + ε), verl / Trinity-RFT) or on its own reward (A = 0, TRL's asynchronous worker)."""
    result = get_advantage_fn("grpo", **options).compute(torch.tensor([1.0, 3.0, 2.0]), [0, 0, 1])
    assert result.advantages.tolist() == pytest.approx(expected, rel=1e-6, abs=1e-9)
