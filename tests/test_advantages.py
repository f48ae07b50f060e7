"""Tests for trl_ext.advantages: hand-computed values and plain-Python reference implementations."""

from __future__ import annotations

import math
import random
import statistics

import pytest
import torch

from trl_ext.advantages import ADVANTAGE_FNS, AdvantageResult, get_advantage_fn

EPS = 1e-6


def close(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=1e-6)


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
# Registry / API
# ---------------------------------------------------------------------------------------------------------


def test_registry_names():
    assert set(ADVANTAGE_FNS) == {
        "grpo",
        "rloo",
        "reinforce",
        "opmd",
        "asymre",
        "rec",
        "step_wise_grpo",
        "reinforceplusplus",
        "on_policy_distill",
        "raft",
    }


@pytest.mark.parametrize(
    ("name", "defaults"),
    [
        ("grpo", {"epsilon": 1e-6, "std_threshold": None, "rank_penalty": None, "std_cal_level": "group"}),
        ("rloo", {}),
        ("reinforce", {}),
        ("opmd", {"opmd_baseline": "mean", "tau": 1.0}),
        ("asymre", {"baseline_shift": -0.1}),
        ("rec", {"epsilon": 1e-6, "std_normalize": False, "drop": None}),
        ("step_wise_grpo", {"epsilon": 1e-6}),
        ("reinforceplusplus", {"gamma": 1.0}),
        ("on_policy_distill", {"kl_coef": 1.0, "distill_baseline": "none"}),
    ],
)
def test_default_args(name, defaults):
    cls = ADVANTAGE_FNS[name]
    assert cls.default_args() == defaults
    fn = get_advantage_fn(name)
    assert type(fn) is cls
    assert fn.hyperparams() == defaults
    assert type(fn).__name__ in repr(fn)


def test_repr_shows_hyperparams():
    assert repr(get_advantage_fn("grpo", epsilon=0.01)) == (
        "GRPOAdvantage(epsilon=0.01, std_threshold=None, rank_penalty=None, std_cal_level='group')"
    )


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match=r"unknown advantage function 'gae'.*grpo.*rloo"):
        get_advantage_fn("gae")


def test_unknown_kwarg_is_named_and_valid_ones_listed():
    with pytest.raises(ValueError, match=r"grpo: unknown hyperparameter\(s\) 'eps'.*epsilon.*std_threshold"):
        get_advantage_fn("grpo", eps=0.1)
    with pytest.raises(ValueError, match=r"rloo: unknown hyperparameter\(s\) 'gamma'"):
        ADVANTAGE_FNS["rloo"](gamma=1.0)


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("grpo", {"epsilon": -1}, r"grpo: epsilon=-1 is not valid; must be > 0"),
        ("grpo", {"epsilon": 0}, r"epsilon=0 is not valid; must be > 0"),
        ("grpo", {"epsilon": float("nan")}, r"epsilon=nan is not valid"),
        ("grpo", {"epsilon": "1e-6"}, r"epsilon='1e-6' is not valid"),
        ("grpo", {"std_threshold": -0.5}, r"std_threshold=-0.5 is not valid; must be >= 0 or None"),
        ("grpo", {"rank_penalty": 1.5}, r"rank_penalty=1.5 is not valid; must be in \[0, 1\] or None"),
        ("grpo", {"rank_penalty": -0.1}, r"rank_penalty=-0.1 is not valid"),
        (
            "grpo",
            {"std_cal_level": "token"},
            r"std_cal_level='token' is not valid; must be one of 'group', 'batch'",
        ),
        ("opmd", {"opmd_baseline": "max"}, r"opmd: opmd_baseline='max' is not valid; must be one of 'mean'"),
        ("opmd", {"tau": 0.0}, r"opmd: tau=0.0 is not valid; must be > 0"),
        ("asymre", {"baseline_shift": float("inf")}, r"asymre: baseline_shift=inf is not valid"),
        ("asymre", {"baseline_shift": None}, r"asymre: baseline_shift=None is not valid"),
        ("rec", {"epsilon": -1e-3}, r"rec: epsilon=-0.001 is not valid; must be > 0"),
        ("rec", {"std_normalize": 1}, r"rec: std_normalize=1 is not valid; must be True or False"),
        ("rec", {"drop": "random"}, r"rec: drop='random' is not valid; must be one of None, 'balance'"),
        ("step_wise_grpo", {"epsilon": 0}, r"step_wise_grpo: epsilon=0 is not valid; must be > 0"),
        (
            "reinforceplusplus",
            {"gamma": 1.1},
            r"reinforceplusplus: gamma=1.1 is not valid; must be in \[0, 1\]",
        ),
        ("reinforceplusplus", {"gamma": -0.1}, r"gamma=-0.1 is not valid"),
        (
            "on_policy_distill",
            {"kl_coef": -1.0},
            r"on_policy_distill: kl_coef=-1.0 is not valid; must be >= 0",
        ),
        ("on_policy_distill", {"kl_coef": True}, r"kl_coef=True is not valid"),
        (
            "on_policy_distill",
            {"distill_baseline": "mean"},
            r"distill_baseline='mean' is not valid; must be one of 'none', 'batch', 'group'",
        ),
    ],
)
def test_invalid_hyperparameters(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_advantage_fn(name, **kwargs)


@pytest.mark.parametrize("name", ["grpo", "rloo", "reinforce", "opmd", "asymre", "rec"])
def test_bad_rewards(name):
    fn = get_advantage_fn(name)
    with pytest.raises(ValueError, match=rf"{name}: rewards\[3\] is nan"):
        fn(torch.tensor([0.0, 1.0, 0.0, float("nan")]), [0, 0, 1, 1])
    with pytest.raises(ValueError, match=r"rewards\[0\] is inf, rewards\[2\] is -inf"):
        fn(torch.tensor([float("inf"), 1.0, float("-inf"), 0.0]), [0, 0, 1, 1])
    with pytest.raises(ValueError, match=r"rewards has 3 entries but group_ids has 2"):
        fn(torch.tensor([0.0, 1.0, 2.0]), ["a", "b"])
    with pytest.raises(ValueError, match=r"rewards has 3 entries but group_ids has 4"):
        fn(torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0, 0, 1, 1]))
    with pytest.raises(ValueError, match=r"rewards must be 1-D"):
        fn(torch.zeros(2, 2), [0, 0])
    with pytest.raises(ValueError, match=r"group_ids tensor must have an integer dtype"):
        fn(torch.zeros(2), torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"group_ids\[1\] is not hashable"):
        fn(torch.zeros(2), [0, [1]])


@pytest.mark.parametrize("name", ["grpo", "rloo", "reinforce", "opmd", "asymre", "rec"])
def test_empty_and_dtypes(name):
    fn = get_advantage_fn(name)
    empty = fn(torch.zeros(0), [])
    assert empty.shape == (0,) and empty.dtype == torch.float32
    res = fn.compute(torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.long))
    assert res.advantages.shape == (0,) and res.keep.shape == (0,)

    rewards64 = torch.tensor([1.0, 0.0, 0.5, 2.0], dtype=torch.float64)
    assert fn(rewards64, [0, 0, 1, 1]).dtype == torch.float64
    ints = fn(torch.tensor([1, 0, 1, 1]), [0, 0, 1, 1])
    assert ints.dtype == torch.float32
    close(ints, fn(torch.tensor([1.0, 0.0, 1.0, 1.0]), [0, 0, 1, 1]))

    grad_rewards = torch.tensor([1.0, 0.0, 0.5], requires_grad=True)
    assert not fn(grad_rewards, [0, 0, 0]).requires_grad


@pytest.mark.parametrize("name", ["grpo", "rloo", "opmd", "asymre", "rec"])
def test_group_id_types_equivalent(name):
    fn = get_advantage_fn(name)
    rewards = torch.tensor([1.0, 0.0, 3.0, 0.5, 2.0, 4.0])
    by_str = fn(rewards, ["p1", "p1", "p2", "p1", "p2", "p3"])
    by_int = fn(rewards, [7, 7, -2, 7, -2, 100])
    by_tensor = fn(rewards, torch.tensor([7, 7, -2, 7, -2, 100]))
    by_tuple = fn(rewards, (("a", 1), ("a", 1), ("b", 2), ("a", 1), ("b", 2), ("c", 3)))
    close(by_str, by_int)
    close(by_str, by_tensor)
    close(by_str, by_tuple)


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
    groups = ["a", "a", "a", "b", "b", "c"]  # std: a=0, b=sqrt(.5), c=1 (group of one)
    res = fn.compute(rewards, groups)
    assert isinstance(res, AdvantageResult)
    assert res.keep.tolist() == [False, False, False, True, True, True]
    b = 0.5 / (math.sqrt(0.5) + EPS)
    close(fn(rewards, groups), [0.0, 0.0, 0.0, -b, b, 2 / (1 + EPS)])

    res = get_advantage_fn("grpo", std_threshold=1.0).compute(rewards, groups)
    assert res.keep.tolist() == [False] * 6  # b: 0.707 <= 1, c: 1 <= 1
    close(res.advantages, [0.0, 0.0, 0.0, -b, b, 2 / (1 + EPS)])  # compute keeps the raw advantages
    assert get_advantage_fn("grpo", std_threshold=1.0)(rewards, groups).abs().sum() == 0

    res = get_advantage_fn("grpo", std_threshold=0.0).compute(rewards, groups)
    assert res.keep.tolist() == [False, False, False, True, True, True]


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
    fn = get_advantage_fn("grpo", rank_penalty=0.5)
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, -1.0, 2.0])
    logp = torch.tensor([-1.0, -3.0, -0.5, -2.0, 5.0, -7.0])
    groups = [0, 0, 0, 0, 1, 1]
    # Group 0 (G=4): positives by descending logp: idx0 (rank 0), idx3 (rank 1), idx1 (rank 2)
    #   factors 1 - .5*4/4 = .5, 1 - .5*3/4 = .625, 1 - .5*2/4 = .75; idx2 (reward 0) unchanged.
    # Group 1 (G=2): idx5 is the only positive -> rank 0 -> factor .5; idx4 (reward -1) unchanged.
    shaped = [0.5, 0.75, 0.0, 0.625, -1.0, 1.0]
    close(fn(rewards, groups, seq_logprobs=logp), py_grpo(shaped, groups))
    with pytest.raises(ValueError, match=r"grpo: rank_penalty is set, so compute\(\) needs seq_logprobs"):
        fn(rewards, groups)
    with pytest.raises(ValueError, match=r"seq_logprobs\[1\] is nan"):
        fn(rewards, groups, seq_logprobs=torch.tensor([0.0, float("nan"), 0, 0, 0, 0]))
    with pytest.raises(ValueError, match=r"seq_logprobs must have shape \(6,\)"):
        fn(rewards, groups, seq_logprobs=torch.zeros(5))


def test_grpo_rank_penalty_ties_and_zero():
    # Ties: stable by index -> idx0 rank 0 (factor 1 - 1*2/2 = 0), idx1 rank 1 (factor 1 - 1*1/2 = .5).
    out = get_advantage_fn("grpo", rank_penalty=1.0)(torch.tensor([1.0, 1.0]), [0, 0], seq_logprobs=[-1.0, -1.0])
    close(out, py_grpo([0.0, 0.5], [0, 0]))
    # rank_penalty=0 leaves rewards unchanged; seq_logprobs is ignored without rank_penalty.
    rewards = torch.tensor([1.0, 0.0, 1.0])
    base = get_advantage_fn("grpo")(rewards, [0, 0, 0], seq_logprobs=torch.tensor([1.0, 2.0, 3.0]))
    close(get_advantage_fn("grpo", rank_penalty=0.0)(rewards, [0, 0, 0], seq_logprobs=[1.0, 2.0, 3.0]), base)


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
    # Group [1, 0]: mean .5 -> baseline .4; group of one: mean 0 -> baseline -0.1.
    close(fn(torch.tensor([1.0, 0.0, 1.0]), [0, 0, 1]), [0.6, -0.4, 1.1])
    close(get_advantage_fn("asymre", baseline_shift=0.25)(torch.tensor([2.0, 0.0]), [0, 0]), [0.75, -1.25])


# ---------------------------------------------------------------------------------------------------------
# REC
# ---------------------------------------------------------------------------------------------------------


def test_rec_values():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0])
    groups = [0, 0, 0, 0, 1]
    close(get_advantage_fn("rec")(rewards, groups), [0.75, -0.25, -0.25, -0.25, 2.0])
    std = statistics.stdev([1.0, 0.0, 0.0, 0.0])  # 0.5
    expected = [0.75 / (std + EPS)] + [-0.25 / (std + EPS)] * 3 + [2.0 / (1 + EPS)]
    close(get_advantage_fn("rec", std_normalize=True)(rewards, groups), expected)
    assert get_advantage_fn("rec").compute(rewards, groups).keep.all()


def test_rec_drop_balance():
    fn = get_advantage_fn("rec", drop="balance")
    # g0: 1 positive, 4 negatives; g1: 3 positives, 1 negative; g2: all equal (A = 0); g3: 2 pos, 3 neg.
    rewards = torch.tensor([1, 0, 0, 0, 0, 1, 1, 1, 0, 0.5, 0.5, 1, 1, 0, 0, 0], dtype=torch.float64)
    groups = ["g0"] * 5 + ["g1"] * 4 + ["g2"] * 2 + ["g3"] * 5
    seen = set()
    for seed in range(20):
        res = fn.compute(rewards, groups, generator=torch.Generator().manual_seed(seed))
        keep = res.keep.tolist()
        assert keep[0] and sum(keep[1:5]) == 1  # g0: positive kept, one negative kept
        assert all(keep[5:9])  # g1: fewer negatives than positives -> all kept
        assert all(keep[9:11])  # g2: zero advantages are kept
        assert keep[11] and keep[12] and sum(keep[13:16]) == 2  # g3
        seen.add(tuple(keep))
        out = fn(rewards, groups, generator=torch.Generator().manual_seed(seed))
        close(out, torch.where(res.keep, res.advantages, 0.0))
        assert (out[~res.keep] == 0).all()
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


# ---------------------------------------------------------------------------------------------------------
# REINFORCE++
# ---------------------------------------------------------------------------------------------------------


def py_reinforce_pp(token_rewards: list[list[float]], mask: list[list[int]], gamma: float) -> list[list[float]]:
    """Plain-Python REINFORCE++ reference (verl): discounted returns, then masked whitening."""
    returns = []
    for rewards_row, mask_row in zip(token_rewards, mask, strict=True):
        running, row = 0.0, [0.0] * len(rewards_row)
        for t in reversed(range(len(rewards_row))):
            running = rewards_row[t] + gamma * running
            row[t] = running
            running *= mask_row[t]
        returns.append(row)
    valid = [x for row, m_row in zip(returns, mask, strict=True) for x, m in zip(row, m_row, strict=True) if m]
    mean, var = statistics.mean(valid), statistics.variance(valid)  # unbiased variance
    return [
        [(x - mean) / math.sqrt(var + 1e-8) * m for x, m in zip(row, m_row, strict=True)]
        for row, m_row in zip(returns, mask, strict=True)
    ]


MASK = [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 1, 1, 1, 0]]


@pytest.mark.parametrize("gamma", [1.0, 0.9, 0.0])
def test_reinforce_pp_scalar_rewards(gamma):
    rewards = [1.0, 0.0, 2.0, -1.0]
    # Scalar reward on each row's last valid token.
    token = [[0, 0, 1.0, 0, 0], [0, 0, 0, 0, 0.0], [0, 2.0, 0, 0, 0], [0, 0, 0, -1.0, 0]]
    fn = get_advantage_fn("reinforceplusplus", gamma=gamma)
    out = fn(torch.tensor(rewards, dtype=torch.float64), response_mask=torch.tensor(MASK))
    assert out.shape == (4, 5) and out.dtype == torch.float64
    close(out, py_reinforce_pp(token, MASK, gamma), atol=1e-9)
    res = fn.compute(torch.tensor(rewards), None, response_mask=torch.tensor(MASK, dtype=torch.bool))
    assert res.keep.tolist() == [True] * 4
    close(res.advantages, py_reinforce_pp(token, MASK, gamma), atol=1e-5)


def test_reinforce_pp_token_rewards_nan_padding():
    gamma = 0.8
    token = [
        [0.1, -0.2, 1.0, 0.0, 0.0],
        [0.0, 0.3, 0.0, 0.5, -1.0],
        [0.2, 0.7, 0.0, 0.0, 0.0],
        [0.0, 0.4, -0.3, 0.9, 0.0],
    ]
    expected = py_reinforce_pp(token, MASK, gamma)
    rewards = torch.tensor(token, dtype=torch.float64)
    mask = torch.tensor(MASK, dtype=torch.bool)
    rewards[~mask] = float("nan")
    rewards[0, 4] = float("inf")
    out = get_advantage_fn("reinforceplusplus", gamma=gamma)(rewards, response_mask=mask)
    assert torch.isfinite(out).all()
    close(out, expected, atol=1e-9)
    assert (out[~mask] == 0).all()


def test_reinforce_pp_errors_and_edge_cases():
    fn = get_advantage_fn("reinforceplusplus")
    with pytest.raises(ValueError, match=r"rewards\[1, 2\] is nan"):
        fn(torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, float("nan")]]), response_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"rewards\[1\] is nan"):
        fn(torch.tensor([0.0, float("nan")]), response_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"needs at least 2 valid tokens"):
        fn(torch.tensor([1.0, 2.0]), response_mask=torch.tensor([[0, 0], [0, 1]]))
    with pytest.raises(ValueError, match=r"rewards must have shape \[N\] or \[N, T\]"):
        fn(torch.zeros(3), response_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"response_mask must be a 2-D"):
        fn(torch.zeros(3), response_mask=torch.ones(3))
    with pytest.raises(ValueError, match=r"response_mask must be boolean or contain only 0 and 1"):
        fn(torch.zeros(2), response_mask=torch.full((2, 3), 0.5))
    # Empty batch; a row without valid tokens gets zeros.
    assert fn(torch.zeros(0), response_mask=torch.ones(0, 4)).shape == (0, 4)
    out = fn(torch.tensor([1.0, 0.0, 5.0]), response_mask=torch.tensor([[1, 1], [1, 0], [0, 0]]))
    close(out[2], [0.0, 0.0])
    close(out[:2], py_reinforce_pp([[0, 1.0], [0.0, 0]], [[1, 1], [1, 0]], 1.0), atol=1e-5)


# ---------------------------------------------------------------------------------------------------------
# On-policy distillation
# ---------------------------------------------------------------------------------------------------------


def test_on_policy_distill_formula_and_masks():
    teacher = torch.tensor([[-1.0, -2.0, float("nan")], [-0.5, float("-inf"), -3.0]], dtype=torch.float64)
    old = torch.tensor([[-1.5, -1.0, -2.0], [-0.25, -1.0, float("nan")]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    teacher_valid = torch.tensor([[True, True, True], [True, False, True]])
    fn = get_advantage_fn("on_policy_distill", kl_coef=2.0)
    out = fn(teacher_logprob=teacher, old_logprob=old, response_mask=mask, teacher_valid_mask=teacher_valid)
    assert out.dtype == torch.float64
    close(out, [[2 * 0.5, 2 * -1.0, 0.0], [2 * -0.25, 0.0, 0.0]])
    res = fn.compute(
        None,
        None,
        teacher_logprob=teacher,
        old_logprob=old,
        response_mask=mask,
        teacher_valid_mask=teacher_valid,
    )
    assert res.keep.tolist() == [True, True]
    close(
        get_advantage_fn("on_policy_distill", kl_coef=0.0)(
            teacher_logprob=teacher, old_logprob=old, response_mask=mask, teacher_valid_mask=teacher_valid
        ),
        torch.zeros(2, 3),
    )
    # -inf at a valid position is an error that points at teacher_valid_mask.
    with pytest.raises(ValueError, match=r"teacher_logprob\[1, 1\] is -inf.*teacher_valid_mask"):
        fn(teacher_logprob=teacher, old_logprob=old, response_mask=mask)


def test_on_policy_distill_baselines():
    # Two groups of two samples, three positions; masked positions (and a teacher-invalid one) stay 0.
    teacher = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -1.0, -9.0], [-2.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    old = torch.tensor([[-0.5, -1.0, -1.0], [-1.0, -1.0, -1.0], [-1.0, -3.0, -1.0], [-1.0, -2.0, -1.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]])
    teacher_valid = torch.tensor([[True, True, False], [True, True, True], [True, True, True], [True, True, True]])
    raw = 2.0 * (teacher - old)  # [[-1, -2, -4], [1, 0, -16], [-2, 4, 0], [0, 2, 0]]
    valid = (mask.bool() & teacher_valid).double()
    kwargs = dict(teacher_logprob=teacher, old_logprob=old, response_mask=mask, teacher_valid_mask=teacher_valid)

    none = get_advantage_fn("on_policy_distill", kl_coef=2.0)(**kwargs)
    close(none, raw * valid)
    # batch: minus the mean over the 7 valid tokens, (-1 - 2 + 1 + 0 - 2 + 4 + 0) / 7 = 0
    batch = get_advantage_fn("on_policy_distill", kl_coef=2.0, distill_baseline="batch")(**kwargs)
    close(batch, raw * valid)
    shifted = dict(kwargs, teacher_logprob=teacher - 0.5)  # every valid advantage -1: the mean is -1 lower too
    close(get_advantage_fn("on_policy_distill", kl_coef=2.0, distill_baseline="batch")(**shifted), raw * valid)
    # group: per group (rows 0-1, rows 2-3) and position, minus the mean over that group's valid entries.
    group = get_advantage_fn("on_policy_distill", kl_coef=2.0, distill_baseline="group")
    expected = [
        [-1 - 0.0, -2 - (-1.0), 0.0],  # position 0: mean(-1, 1) = 0; position 1: mean(-2, 0) = -1; pos 2 invalid
        [1 - 0.0, 0 - (-1.0), 0.0],  # masked at position 2
        [-2 - (-1.0), 4 - 4.0, 0 - 0.0],  # position 0: mean(-2, 0) = -1; position 1: only row 2 is valid
        [0 - (-1.0), 0.0, 0.0],
    ]
    close(group(torch.zeros(4), torch.tensor([7, 7, 3, 3]), **kwargs), expected)
    close(group(None, ["a", "a", "b", "b"], **kwargs), expected)
    with pytest.raises(ValueError, match=r"distill_baseline='group' needs the group_ids"):
        group(**kwargs)


def test_on_policy_distill_shape_mismatch():
    fn = get_advantage_fn("on_policy_distill")
    with pytest.raises(ValueError, match=r"teacher_logprob \(2, 3\), old_logprob \(2, 4\), response_mask \(2, 3\)"):
        fn(teacher_logprob=torch.zeros(2, 3), old_logprob=torch.zeros(2, 4), response_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"teacher_valid_mask \(3, 3, 1\)"):
        fn(
            teacher_logprob=torch.zeros(3, 3),
            old_logprob=torch.zeros(3, 3),
            response_mask=torch.ones(3, 3),
            teacher_valid_mask=torch.ones(3, 3, 1),
        )
    with pytest.raises(ValueError, match=r"expected tensors of one shape \[N, T\]"):
        fn(teacher_logprob=torch.zeros(3), old_logprob=torch.zeros(3), response_mask=torch.ones(3))
    empty = fn(teacher_logprob=torch.zeros(0, 5), old_logprob=torch.zeros(0, 5), response_mask=torch.ones(0, 5))
    assert empty.shape == (0, 5)


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
