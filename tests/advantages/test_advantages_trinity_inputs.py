"""The inputs of Trinity-RFT 0.6.0's remaining advantage estimators: the inputs each one needs, which take token
rewards, `__call__` zeroing the tokens `token_keep` drops, and the errors of bad arguments and bad inputs."""

from __future__ import annotations

import pytest
import torch
from test_advantages_trinity_parity import t64

from trl_ext.advantages import ADVANTAGE_FNS, AdvantageResult, get_advantage_fn

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
        "ppo", "reinforceplusplus", "remax", "grpo_verl", "opmd_verl", "asymre_verl", "gpg", "clipb", "clipv",
        "gdpo", "reinforce_plus_plus_baseline", "optimal_token_baseline",
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
