"""Tests for trl_ext.advantages: hand-computed values and plain-Python reference implementations."""

from __future__ import annotations

import inspect
import math
import random
import re
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
        "gigpo",
        "reinforceplusplus",
        "on_policy_distill",
        "raft",
        "remax",
        "clipb",
        "clipv",
        "jsd",
        "grpo_verl",
        "opmd_verl",
        "asymre_verl",
        "ppo",
        "gpg",
    }


DEFAULT_ARGS = {
    "grpo": {
        "epsilon": 1e-6,
        "std_threshold": None,
        "duplicate_experiences": False,
        "rank_penalty": None,
        "std_cal_level": "group",
    },
    "rloo": {},
    "reinforce": {},
    "opmd": {"opmd_baseline": "mean", "tau": 1.0},
    "asymre": {"baseline_shift": -0.1},
    "rec": {"epsilon": 1e-6, "std_normalize": False, "drop": None},
    "step_wise_grpo": {"epsilon": 1e-6, "enable_step_norm": False, "std_cal_level": "group", "std_threshold": None},
    "gigpo": {"omega": 1.0, "gamma": 1.0, "fnorm": "none", "epsilon": 1e-6},
    "reinforceplusplus": {"gamma": 1.0},
    "on_policy_distill": {"kl_coef": 1.0, "distill_baseline": "none"},
    "raft": {"min_reward": None},
    "remax": {},
    "clipb": {"epsilon": 1e-6, "mu": 2.5},
    "clipv": {"epsilon": 1e-6, "mu": 8.5, "max_frac": 1e-4},
    "jsd": {"lambda_coef": 0.5, "kl_coef": 1.0, "temperature": 1.0, "chunk_size": None},
    "grpo_verl": {"epsilon": 1e-6},
    "opmd_verl": {"opmd_baseline": "mean", "tau": 1.0},
    "asymre_verl": {"baseline_shift": -0.1},
    "ppo": {"gamma": 1.0, "lam": 1.0},
    "gpg": {"f_norm": 1.0},
}
"""Every estimator's arguments with their defaults, in declaration order."""


@pytest.mark.parametrize("name", sorted(ADVANTAGE_FNS))
def test_default_args(name):
    defaults = DEFAULT_ARGS[name]
    cls = ADVANTAGE_FNS[name]
    assert list(cls.default_args().items()) == list(defaults.items())
    fn = get_advantage_fn(name)
    assert type(fn) is cls
    assert fn.args == defaults
    assert type(fn).__name__ in repr(fn)


@pytest.mark.parametrize("name", sorted(ADVANTAGE_FNS))
def test_signature_shows_the_arguments(name):
    """`inspect.signature` (what `help()` and IDEs show) lists exactly the arguments, keyword-only, with defaults."""
    parameters = inspect.signature(ADVANTAGE_FNS[name]).parameters.values()
    assert [(p.name, p.kind, p.default) for p in parameters] == [
        (argument, inspect.Parameter.KEYWORD_ONLY, default) for argument, default in DEFAULT_ARGS[name].items()
    ]


def test_repr_shows_arguments():
    assert repr(get_advantage_fn("grpo", epsilon=0.01)) == (
        "GRPOAdvantage(epsilon=0.01, std_threshold=None, duplicate_experiences=False, rank_penalty=None, "
        "std_cal_level='group')"
    )


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match=r"unknown advantage function 'gae'.*grpo.*rloo"):
        get_advantage_fn("gae")


@pytest.mark.parametrize("name", sorted(ADVANTAGE_FNS))
def test_unknown_argument_is_named_and_valid_ones_listed(name):
    valid = ", ".join(DEFAULT_ARGS[name]) or "none"  # grpo: "epsilon, std_threshold, ...", rloo: "none"
    message = rf"^{name}: unknown argument\(s\) 'eps'; valid arguments: {re.escape(valid)}$"
    with pytest.raises(ValueError, match=message):
        get_advantage_fn(name, eps=0.1)
    with pytest.raises(ValueError, match=message):
        ADVANTAGE_FNS[name](eps=0.1)


def _out_of_range_values():
    """One bad value per rule of every argument spec: a bound crossed by 1, a non-choice, a non-bool."""
    for name, cls in sorted(ADVANTAGE_FNS.items()):
        for spec in cls.arguments:
            values = [bound - 1 for bound in (spec.gt, spec.ge) if bound is not None]
            values += [bound + 1 for bound in (spec.lt, spec.le) if bound is not None]
            values += ["not-a-choice"] if spec.choices else []
            values += ["yes"] if spec.type is bool else []
            for value in values:
                yield pytest.param(name, spec.name, value, id=f"{name}-{spec.name}={value!r}")


OUT_OF_RANGE = list(_out_of_range_values())


def test_out_of_range_cases_cover_the_ruled_arguments():
    arguments = {(name, spec.name) for name, cls in ADVANTAGE_FNS.items() for spec in cls.arguments}
    covered = {case.values[:2] for case in OUT_OF_RANGE}
    # any finite number
    assert arguments - covered == {
        ("asymre", "baseline_shift"),
        ("asymre_verl", "baseline_shift"),
        ("raft", "min_reward"),
    }


@pytest.mark.parametrize(("name", "argument", "value"), OUT_OF_RANGE)
def test_out_of_range_argument_is_rejected(name, argument, value):
    message = rf"^{name}: {argument}={re.escape(repr(value))} is not valid; must be "
    with pytest.raises(ValueError, match=message):
        get_advantage_fn(name, **{argument: value})


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
        ("rec", {"drop": "random"}, r"rec: drop='random' is not valid; must be one of 'balance'"),
        ("grpo", {"duplicate_experiences": 1}, r"grpo: duplicate_experiences=1 is not valid; must be True or False"),
        (
            "grpo",
            {"duplicate_experiences": True},
            r"grpo: duplicate_experiences=True has no effect without std_threshold",
        ),
        ("step_wise_grpo", {"epsilon": 0}, r"step_wise_grpo: epsilon=0 is not valid; must be > 0"),
        (
            "step_wise_grpo",
            {"enable_step_norm": "yes"},
            r"step_wise_grpo: enable_step_norm='yes' is not valid; must be True or False",
        ),
        (
            "step_wise_grpo",
            {"std_cal_level": "run"},
            r"step_wise_grpo: std_cal_level='run' is not valid; must be one of 'group', 'batch'",
        ),
        (
            "step_wise_grpo",
            {"std_threshold": -1.0},
            r"step_wise_grpo: std_threshold=-1.0 is not valid; must be >= 0 or None",
        ),
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
    # Unequal sizes are fine when nothing is duplicated (test_advantages_trinity.py covers duplicating them).
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
# REINFORCE++
# ---------------------------------------------------------------------------------------------------------


def py_reinforce_pp(
    token_rewards: list[list[float]], mask: list[list[int]], gamma: float, reward_mask: list[list[int]] | None = None
) -> list[list[float]]:
    """Plain-Python REINFORCE++ reference (Trinity-RFT / verl): returns_t = r_t + gamma * returns_{t+1} over ALL
    positions (never reset; rewards outside ``reward_mask``, default ``mask``, count as 0), then whitened with the
    mean / unbiased variance over the valid tokens (masked_mean divides by count + 1e-8) and masked."""
    reward_mask = mask if reward_mask is None else reward_mask
    returns = []
    for rewards_row, r_mask_row in zip(token_rewards, reward_mask, strict=True):
        running, row = 0.0, [0.0] * len(rewards_row)
        for t in reversed(range(len(rewards_row))):
            running = (rewards_row[t] if r_mask_row[t] else 0.0) + gamma * running
            row[t] = running
        returns.append(row)
    valid = [x for row, m_row in zip(returns, mask, strict=True) for x, m in zip(row, m_row, strict=True) if m]
    n = len(valid)
    mean = sum(valid) / (n + 1e-8)
    var = sum((x - mean) ** 2 for x in valid) / (n + 1e-8) * n / (n - 1)
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


# A TRL multi-turn tool rollout: completion_mask is 1 over the whole completion (then right padding), tool_mask
# 0 on the tool output spliced between two model turns; the loss mask is completion_mask * tool_mask.
TOOL_COMPLETION_MASK = [[1, 1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0]]
TOOL_MASK = [[1, 1, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1]]


def _product(a: list[list[int]], b: list[list[int]]) -> list[list[int]]:
    return [[x * y for x, y in zip(ra, rb, strict=True)] for ra, rb in zip(a, b, strict=True)]


def test_reinforce_pp_carries_the_return_across_a_tool_output_gamma_one():
    loss_mask = torch.tensor(_product(TOOL_COMPLETION_MASK, TOOL_MASK))  # row 0: [1, 1, 0, 0, 1, 1, 0, 0]
    out = get_advantage_fn("reinforceplusplus")(torch.tensor([1.0, -1.0], dtype=torch.float64), response_mask=loss_mask)
    # gamma = 1: every valid token's return is its row's reward, the first turn's included: four 1s and three
    # -1s, mean 1/7, unbiased variance 8/7.
    pos, neg = (1 - 1 / 7) / math.sqrt(8 / 7 + 1e-8), (-1 - 1 / 7) / math.sqrt(8 / 7 + 1e-8)
    close(out, [[pos, pos, 0, 0, pos, pos, 0, 0], [neg, neg, neg, 0, 0, 0, 0, 0]], atol=1e-9)


def test_reinforce_pp_discounts_across_a_tool_output():
    loss_mask = torch.tensor(_product(TOOL_COMPLETION_MASK, TOOL_MASK))
    out = get_advantage_fn("reinforceplusplus", gamma=0.5)(
        torch.tensor([1.0, -1.0], dtype=torch.float64), response_mask=loss_mask
    )
    # Row 0: reward 1 on position 5; the return halves at every position, the tool positions 2, 3 included:
    # [1/32, 1/16, (1/8), (1/4), 1/2, 1].  Row 1: reward -1 on position 2: [-1/4, -1/2, -1].
    returns = [[1 / 32, 1 / 16, 0, 0, 1 / 2, 1, 0, 0], [-1 / 4, -1 / 2, -1, 0, 0, 0, 0, 0]]
    valid = [1 / 32, 1 / 16, 1 / 2, 1, -1 / 4, -1 / 2, -1]
    mean, std = statistics.mean(valid), statistics.stdev(valid)
    rows = zip(returns, loss_mask.tolist(), strict=True)
    expected = [[(x - mean) / std * m for x, m in zip(r, mr, strict=True)] for r, mr in rows]
    close(out, expected, atol=1e-7)
    close(out, py_reinforce_pp([[0, 0, 0, 0, 0, 1.0, 0, 0], [0, 0, -1.0, 0, 0, 0, 0, 0]], loss_mask.tolist(), 0.5))


def test_reinforce_pp_reward_on_the_last_completion_token():
    # Row 0 ends with a tool output (the tool-call iteration limit was hit): the loss mask ends at position 3,
    # the completion at position 5.  Trinity-RFT puts the reward on the last attended token: pass completion_mask.
    completion = [[1, 1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0]]
    tool = [[1, 1, 1, 1, 0, 0, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1]]
    loss_mask = _product(completion, tool)  # row 0: [1, 1, 1, 1, 0, 0, 0, 0]
    rewards = torch.tensor([1.0, -1.0], dtype=torch.float64)
    fn = get_advantage_fn("reinforceplusplus", gamma=0.5)
    on_completion = fn(rewards, response_mask=torch.tensor(loss_mask), completion_mask=torch.tensor(completion))
    valid = [1 / 32, 1 / 16, 1 / 8, 1 / 4, -1 / 4, -1 / 2, -1]  # row 0: 1 on position 5, two halvings to 3
    mean, std = statistics.mean(valid), statistics.stdev(valid)
    row0 = [(x - mean) / std for x in valid[:4]] + [0.0] * 4
    row1 = [(x - mean) / std for x in valid[4:]] + [0.0] * 5
    close(on_completion, [row0, row1], atol=1e-7)
    # Without completion_mask the reward sits on the loss mask's last token (position 3).
    on_loss = fn(rewards, response_mask=torch.tensor(loss_mask))
    token = [[0, 0, 0, 1.0, 0, 0, 0, 0], [0, 0, -1.0, 0, 0, 0, 0, 0]]
    close(on_loss, py_reinforce_pp(token, loss_mask, 0.5), atol=1e-9)
    # gamma = 1: where the reward sits after the last valid token does not matter.
    close(
        get_advantage_fn("reinforceplusplus")(
            rewards, response_mask=torch.tensor(loss_mask), completion_mask=torch.tensor(completion)
        ),
        get_advantage_fn("reinforceplusplus")(rewards, response_mask=torch.tensor(loss_mask)),
    )
    # Token-level rewards count wherever completion_mask is 1 (tool positions included), as in the reference.
    token_rewards = torch.tensor([[0, 0, 0, 0, 0.5, 1.0, 0, 0], [0, 0, -1.0, 0, 0, 0, 0, 0]], dtype=torch.float64)
    out = fn(token_rewards, response_mask=torch.tensor(loss_mask), completion_mask=torch.tensor(completion))
    close(out, py_reinforce_pp(token_rewards.tolist(), loss_mask, 0.5, reward_mask=completion), atol=1e-9)
    # The loss mask must lie inside the completion mask.
    with pytest.raises(ValueError, match=r"reinforceplusplus: response_mask is 1 where completion_mask is 0"):
        fn(rewards, response_mask=torch.tensor(completion), completion_mask=torch.tensor(loss_mask))
    with pytest.raises(ValueError, match=r"completion_mask must have shape \(2, 8\)"):
        fn(rewards, response_mask=torch.tensor(loss_mask), completion_mask=torch.ones(2, 7))


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


def test_each_estimator_declares_the_inputs_it_reads():
    """`inputs()`: the keyword-only inputs of `compute`, which the trainer hands over (it never branches on names)."""
    from trl_ext.advantages import ADVANTAGE_FNS

    declared = {name: cls.inputs() for name, cls in ADVANTAGE_FNS.items()}
    assert declared["reinforceplusplus"] == ("response_mask", "completion_mask")
    assert declared["rec"] == ("generator",)
    assert declared["grpo"] == ("logprobs", "response_mask", "generator")
    assert declared["step_wise_grpo"] == ("run_ids",)
    assert all(declared[name] == () for name in ("rloo", "reinforce", "opmd", "asymre", "raft"))
    for name, inputs in declared.items():
        assert not {"rewards", "group_ids"} & set(inputs), name
