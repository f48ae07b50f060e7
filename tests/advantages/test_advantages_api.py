"""Tests for trl_ext.advantages, what every estimator shares: the registry, the arguments with their defaults and
their validation, bad rewards and group ids, empty batches and dtypes, the declared inputs. The estimators' values
are in test_advantages_group.py and test_advantages_token.py."""

from __future__ import annotations

import inspect
import re

import pytest
import torch

from trl_ext.advantages import ADVANTAGE_FNS, get_advantage_fn

EPS = 1e-6


def close(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=1e-6)


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
        "gdpo",
        "grpo_passk",
        "opo",
        "reinforce_plus_plus_baseline",
        "optimal_token_baseline",
    }


DEFAULT_ARGS = {
    "grpo": {
        "epsilon": 1e-6,
        "std_threshold": None,
        "duplicate_experiences": False,
        "rank_penalty": None,
        "std_cal_level": "group",
        "std_unbiased": True,
        "group_of_one": "reward",
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
    "jsd": {"lambda_coef": 0.5, "kl_coef": 1.0, "temperature": 1.0, "form": "gradient", "chunk_size": None},
    "grpo_verl": {"epsilon": 1e-6},
    "opmd_verl": {"opmd_baseline": "mean", "tau": 1.0},
    "asymre_verl": {"baseline_shift": -0.1},
    "ppo": {"gamma": 1.0, "lam": 1.0},
    "gpg": {"f_norm": 1.0},
    "gdpo": {"epsilon": 1e-6, "norm_adv_by_std": True},
    "grpo_passk": {"epsilon": 1e-6, "norm_adv_by_std": True},
    "opo": {},
    "reinforce_plus_plus_baseline": {},
    "optimal_token_baseline": {"handle_zero_tail": True, "epsilon": 1e-8, "multi_turn": False},
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
        "std_cal_level='group', std_unbiased=True, group_of_one='reward')"
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
