"""PPO's GAE advantage estimator (`ppo`) and the clipped value loss (`trl_ext.losses.value`).

The oracle of the estimator is `trinity_ppo`, a plain-Python loop port of Trinity-RFT 0.6.0's
`PPOAdvantageFn.__call__` (`trinity/algorithm/advantage_fn/ppo_advantage.py`) with its `masked_whiten`
(`trinity/algorithm/utils.py`), fed what the reference's pipeline feeds it: the reward on the last attended response
token and the critic's values on the response's attended tokens (0 on padding).  `verl_gae` ports verl's current
`compute_gae_advantage_return` (which skips masked positions) for the contrast and for `trl_ext.compat.verl`.
"""

from __future__ import annotations

import math
import random
import statistics

import pytest
import torch

from trl_ext.advantages import AdvantageResult, get_advantage_fn
from trl_ext.advantages.gae import gae_advantage_return
from trl_ext.losses import LOSS_AGG_MODES, aggregate_loss, clipped_value_loss, explained_variance
from trl_ext.losses.value import VALUE_LOSS_METRICS

D = torch.float64


# ---------------------------------------------------------------------------------------------------------
# Plain-loop ports of the references
# ---------------------------------------------------------------------------------------------------------


def trinity_masked_whiten(x, mask):
    """Trinity-RFT / verl `masked_whiten` (shift_mean=True), token by token, at every position."""
    valid = [x[i][t] for i, row in enumerate(mask) for t, m in enumerate(row) if m]
    n = len(valid)
    mean = sum(valid) / (n + 1e-8)
    var = sum((v - mean) ** 2 for v in valid) / (n + 1e-8) * (n / (n - 1))
    return [[(v - mean) / math.sqrt(var + 1e-8) for v in row] for row in x]


def trinity_ppo(token_rewards, values, mask, gamma, lam):
    """Trinity-RFT 0.6.0 `PPOAdvantageFn`: every position is a step (no skipping), then whitening over `mask`."""
    advantages = []
    for r, v in zip(token_rewards, values, strict=True):
        width = len(r)
        row = [0.0] * width
        lastgaelam = 0.0
        for t in reversed(range(width)):
            nextvalues = v[t + 1] if t < width - 1 else 0.0
            delta = r[t] + gamma * nextvalues - v[t]
            lastgaelam = delta + gamma * lam * lastgaelam
            row[t] = lastgaelam
        advantages.append(row)
    returns = [[a + b for a, b in zip(ar, vr, strict=True)] for ar, vr in zip(advantages, values, strict=True)]
    return trinity_masked_whiten(advantages, mask), returns


def verl_gae(token_rewards, values, mask, gamma, lam, whiten=True):
    """verl's `compute_gae_advantage_return` (since PR #2337): masked positions carry nextvalues / lastgaelam.
    `whiten=False`: the advantages before `masked_whiten`."""
    advantages = []
    for r, v, m in zip(token_rewards, values, mask, strict=True):
        width = len(r)
        row = [0.0] * width
        nextvalues = lastgaelam = 0.0
        for t in reversed(range(width)):
            delta = r[t] + gamma * nextvalues - v[t]
            candidate = delta + gamma * lam * lastgaelam
            if m[t]:
                nextvalues, lastgaelam = v[t], candidate
            row[t] = lastgaelam
        advantages.append(row)
    returns = [[a + b for a, b in zip(ar, vr, strict=True)] for ar, vr in zip(advantages, values, strict=True)]
    return (trinity_masked_whiten(advantages, mask) if whiten else advantages), returns


def random_batch(rng: random.Random, token_rewards: bool):
    """`(rewards, values, response_mask, completion_mask)` as nested lists: varied lengths (padding), tool outputs
    inside the completion (completion 1, response 0), junk values and rewards outside the completion."""
    n, width = rng.randint(1, 6), rng.randint(2, 9)
    completion, response = [], []
    for _ in range(n):
        length = rng.choice([width, rng.randint(1, width)])
        comp = [1] * length + [0] * (width - length)
        resp = list(comp)
        for t in range(length):
            if rng.random() < 0.25:
                resp[t] = 0  # a tool output inside the completion
        completion.append(comp)
        response.append(resp)
    if sum(map(sum, response)) < 2:  # whitening needs two valid tokens
        response[0][0] = completion[0][0] = 1
        response[-1][-1] = completion[-1][-1] = 1
        for row_c in completion:
            last = max(t for t, c in enumerate(row_c) if c) if any(row_c) else -1
            for t in range(last + 1):
                row_c[t] = 1  # keep completions contiguous
    values = [[rng.uniform(-2, 2) if c else rng.choice([7.0, -9.0]) for c in row] for row in completion]
    if token_rewards:
        rewards = [[rng.choice([0.0, 0.0, 1.0, rng.uniform(-1, 1)]) if c else 5.0 for c in row] for row in completion]
    else:
        rewards = [rng.choice([0.0, 1.0, -1.0, rng.uniform(-2, 2)]) for _ in range(n)]
    return rewards, values, response, completion


def reference_inputs(rewards, values, response, completion, use_completion: bool):
    """What the reference's estimator receives: token rewards (a scalar on the last attended token) and values
    0 outside the tokens the critic covers."""
    where = completion if use_completion else response
    if isinstance(rewards[0], list):
        token_rewards = [
            [r if m else 0.0 for r, m in zip(rr, mr, strict=True)] for rr, mr in zip(rewards, where, strict=True)
        ]
    else:
        token_rewards = []
        for reward, row in zip(rewards, where, strict=True):
            placed = [0.0] * len(row)
            if any(row):
                placed[max(t for t, m in enumerate(row) if m)] = reward
            token_rewards.append(placed)
    ref_values = [[v if m else 0.0 for v, m in zip(vr, mr, strict=True)] for vr, mr in zip(values, where, strict=True)]
    return token_rewards, ref_values


def assert_close(actual: torch.Tensor, expected, tol: float = 1e-9) -> None:
    torch.testing.assert_close(actual.to(D), torch.as_tensor(expected, dtype=D), atol=tol, rtol=tol)


def masked(x, mask):
    return [[v if m else 0.0 for v, m in zip(xr, mr, strict=True)] for xr, mr in zip(x, mask, strict=True)]


# ---------------------------------------------------------------------------------------------------------
# GAE: closed form and the reference
# ---------------------------------------------------------------------------------------------------------


def whiten_by_hand(valid: list[float]) -> list[float]:
    mean, var = statistics.mean(valid), statistics.variance(valid)
    return [(x - mean) / math.sqrt(var + 1e-8) for x in valid]


def test_closed_form_tiny_batch():
    """γ 0.9, λ 0.8; row 1 has a tool output at t=1 (completion 1, response 0): Trinity-RFT steps through it
    with the critic's value there."""
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 2.0]], dtype=D)
    values = torch.tensor([[0.5, 0.2, 0.4], [0.1, 0.3, 0.5]], dtype=D)
    response = torch.tensor([[1, 1, 1], [1, 0, 1]], dtype=torch.bool)
    completion = torch.ones(2, 3, dtype=torch.bool)
    fn = get_advantage_fn("ppo", gamma=0.9, lam=0.8)
    res = fn.compute(rewards, None, response_mask=response, values=values, completion_mask=completion)
    # row 0: δ = (0.9·0.2 − 0.5, 0.9·0.4 − 0.2, 1 − 0.4) = (−0.32, 0.16, 0.6); A_t = δ_t + 0.72·A_{t+1}
    row0 = [0.10624, 0.592, 0.6]
    # row 1: δ = (0.9·0.3 − 0.1, 0.9·0.5 − 0.3, 2 − 0.5) = (0.17, 0.15, 1.5)
    row1 = [0.17 + 0.72 * 1.23, 1.23, 1.5]
    assert_close(
        res.returns, [[a + v for a, v in zip(row0, [0.5, 0.2, 0.4], strict=True)], [row1[0] + 0.1, 0.0, 2.0]], 1e-12
    )
    white = whiten_by_hand([*row0, row1[0], row1[2]])
    assert_close(res.advantages, [white[:3], [white[3], 0.0, white[4]]], 1e-7)
    assert res.keep.tolist() == [True, True] and res.source is None and res.token_keep is None
    assert isinstance(res, AdvantageResult) and res.metrics is None

    # Without completion_mask the values are read on response_mask only (verl's legacy critic: values·mask):
    # row 1's tool value is 0, δ_1 = 0.9·0.5 = 0.45, A_1 = 1.53, A_0 = −0.1 + 0.72·1.53.
    res = fn.compute(rewards, None, response_mask=response, values=values)
    white = whiten_by_hand([*row0, -0.1 + 0.72 * 1.53, 1.5])
    assert_close(res.advantages, [white[:3], [white[3], 0.0, white[4]]], 1e-7)

    # verl skips the tool output: A_1 carries A_2 = 1.5 and V_next = 0.5, A_0 = 0.9·0.5 − 0.1 + 0.72·1.5 = 1.43.
    adv, ret = gae_advantage_return(rewards, values, response, 0.9, 0.8, skip_masked=True)
    assert_close(adv, [row0, [1.43, 1.5, 1.5]], 1e-12)
    assert_close(ret, adv + values, 0)


@pytest.mark.parametrize("gamma", [0.9, 0.95, 1.0])
@pytest.mark.parametrize("lam", [0.9, 0.95, 1.0])
@pytest.mark.parametrize("token_rewards", [True, False])
@pytest.mark.parametrize("use_completion", [True, False])
def test_matches_trinity_reference(gamma, lam, token_rewards, use_completion):
    rng = random.Random(hash((gamma, lam, token_rewards, use_completion)) % 2**32)
    fn = get_advantage_fn("ppo", gamma=gamma, lam=lam)
    for _ in range(8):
        rewards, values, response, completion = random_batch(rng, token_rewards)
        ref_rewards, ref_values = reference_inputs(rewards, values, response, completion, use_completion)
        expected_adv, expected_ret = trinity_ppo(ref_rewards, ref_values, response, gamma, lam)
        kwargs = {"completion_mask": torch.tensor(completion)} if use_completion else {}
        res = fn.compute(
            torch.tensor(rewards, dtype=D),
            None,
            response_mask=torch.tensor(response),
            values=torch.tensor(values, dtype=D),
            **kwargs,
        )
        assert res.advantages.dtype == D and res.returns.dtype == D
        assert_close(res.advantages, masked(expected_adv, response))
        assert_close(res.returns, masked(expected_ret, response))
        assert res.keep.all()


@pytest.mark.parametrize(("gamma", "lam"), [(0.9, 0.95), (1.0, 0.9), (0.95, 1.0), (1.0, 1.0)])
def test_core_skip_masked_matches_verl(gamma, lam):
    rng = random.Random(7)
    for _ in range(10):
        rewards, values, response, _ = random_batch(rng, token_rewards=True)
        adv, ret = gae_advantage_return(
            torch.tensor(rewards, dtype=D), torch.tensor(values, dtype=D), torch.tensor(response).bool(), gamma, lam,
            skip_masked=True,
        )  # fmt: skip
        expected_adv, expected_ret = verl_gae(rewards, values, response, gamma, lam, whiten=False)
        assert_close(adv, expected_adv)
        assert_close(ret, expected_ret)


def test_no_skipping_versus_verl():
    """Trinity-RFT 0.6.0 steps through tool outputs, verl skips them: with γ = λ = 1 and the rewards on loss tokens
    the sums telescope to the same advantages; with γ < 1 they differ."""
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, -1.0]], dtype=D)
    values = torch.tensor([[0.2, 0.9, -0.4, 0.3], [0.1, 0.2, 0.3, 0.4]], dtype=D)
    mask = torch.tensor([[1, 0, 0, 1], [1, 1, 0, 1]], dtype=torch.bool)
    for gamma, lam, same in [(1.0, 1.0, True), (0.9, 1.0, False), (1.0, 0.8, False)]:
        a_trinity, _ = gae_advantage_return(rewards, values, mask, gamma, lam, skip_masked=False)
        a_verl, _ = gae_advantage_return(rewards, values, mask, gamma, lam, skip_masked=True)
        assert torch.allclose(a_trinity[mask], a_verl[mask]) is same, (gamma, lam)


def test_outcome_rewards_sit_on_the_last_token():
    """[N] rewards equal token rewards on each row's last completion (else response) token."""
    values = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, -0.5, 0.2, 9.0], [0.3, 0.3, 0.3, 0.3]], dtype=D)
    response = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 1, 0]], dtype=torch.bool)
    completion = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    outcome = torch.tensor([1.0, -2.0, 0.5], dtype=D)
    fn = get_advantage_fn("ppo", gamma=0.9, lam=0.95)
    for comp, last in [(None, [1, 2, 2]), (completion, [2, 2, 3])]:
        placed = torch.zeros(3, 4, dtype=D)
        placed[torch.arange(3), torch.tensor(last)] = outcome
        kwargs = {} if comp is None else {"completion_mask": comp}
        a = fn.compute(outcome, None, response_mask=response, values=values, **kwargs)
        b = fn.compute(placed, None, response_mask=response, values=values, **kwargs)
        assert_close(a.advantages, b.advantages, 0)
        assert_close(a.returns, b.returns, 0)


def test_whitening_statistics_and_masked_zeros():
    """(A − mean)·rsqrt(var + 1e-8) over every valid token of the batch: mean Σ/(n + 1e-8), unbiased variance."""
    torch.manual_seed(0)
    n, t = 5, 7
    rewards, values = torch.randn(n, t, dtype=D), torch.randn(n, t, dtype=D)
    response = torch.rand(n, t) < 0.7
    response[0, :2] = True
    res = get_advantage_fn("ppo", gamma=0.95, lam=0.9).compute(rewards, None, response_mask=response, values=values)
    raw, _ = gae_advantage_return(
        rewards * response, values * response, response, 0.95, 0.9, skip_masked=False
    )  # rewards and values outside response_mask are 0 (no completion_mask)
    valid = raw[response]
    count = valid.numel()
    mean = valid.sum() / (count + 1e-8)
    var = ((valid - mean) ** 2).sum() / (count + 1e-8) * count / (count - 1)
    torch.testing.assert_close(res.advantages[response], (valid - mean) * torch.rsqrt(var + 1e-8))
    assert abs(float(res.advantages[response].mean())) < 1e-8
    assert float(res.advantages[response].var()) == pytest.approx(float(var / (var + 1e-8)), rel=1e-9)
    assert float(res.advantages[response].var()) == pytest.approx(1.0, abs=1e-6)
    assert (res.advantages[~response] == 0).all() and (res.returns[~response] == 0).all()
    torch.testing.assert_close(res.returns[response], (raw + values)[response])


def test_group_ids_none_and_call():
    """GAE uses no groups: `group_ids` None (or anything) gives the same; `__call__` returns the [N, T] advantages."""
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    values = torch.tensor([[0.1, 0.2, 0.0], [0.3, 0.2, 0.1]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    fn = get_advantage_fn("ppo", gamma=0.99, lam=0.95)
    out = fn(rewards, None, response_mask=mask, values=values)
    assert out.shape == (2, 3) and out.dtype == torch.float32
    assert torch.equal(out, fn.compute(rewards, [7, 7], response_mask=mask, values=values).advantages)
    assert torch.equal(out, fn(rewards, torch.tensor([0, 1]), response_mask=mask, values=values))
    assert type(fn).uses_groups is False and fn.token_level and fn.token_rewards
    assert fn.inputs() == ("response_mask", "values", "completion_mask")
    assert fn.needed_inputs() == ("response_mask", "values", "completion_mask")
    # int rewards [N] become float32; values are cast to the rewards' dtype
    res = fn.compute([1, 0], None, response_mask=mask, values=values.to(D))
    assert res.advantages.dtype == torch.float32 == res.returns.dtype
    empty = fn.compute(
        torch.zeros(0), None, response_mask=torch.zeros(0, 3, dtype=torch.bool), values=torch.zeros(0, 3)
    )
    assert empty.advantages.shape == (0, 3) and empty.returns.shape == (0, 3)


def test_values_outside_the_completion_are_ignored():
    """The critic's output on padding (and NaN there) never bootstraps the last token."""
    rewards = torch.tensor([1.0, 0.0])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    values = torch.tensor([[0.1, 0.2, 0.0, 0.0], [0.3, 0.2, 0.1, 0.0]])
    junk = values.clone()
    junk[0, 2:] = torch.tensor([5.0, float("nan")])
    junk[1, 3] = float("inf")
    fn = get_advantage_fn("ppo", gamma=0.9, lam=0.9)
    a = fn.compute(rewards, None, response_mask=mask, values=values)
    b = fn.compute(rewards, None, response_mask=mask, values=junk)
    assert torch.equal(a.advantages, b.advantages) and torch.equal(a.returns, b.returns)


@pytest.mark.parametrize(
    ("kwargs", "inputs", "message"),
    [
        ({"gamma": 1.1}, {}, r"^ppo: gamma=1.1 is not valid; must be in \[0, 1\]"),
        ({"gamma": -0.1}, {}, r"^ppo: gamma=-0.1 is not valid"),
        ({"lam": 1.5}, {}, r"^ppo: lam=1.5 is not valid; must be in \[0, 1\]"),
        ({"lam": -1.0}, {}, r"^ppo: lam=-1.0 is not valid"),
        ({"lam": float("nan")}, {}, r"^ppo: lam=nan is not valid"),
        ({}, {"values": torch.zeros(2, 2)}, r"^ppo: values must have the shape \(2, 3\)"),
        ({}, {"values": torch.zeros(2)}, r"^ppo: values must have the shape"),
        ({}, {"values": torch.tensor([[0.0, float("nan"), 0], [0, 0, 0]])}, r"^ppo: values\[0, 1\] is nan"),
        ({}, {"values": torch.tensor([[0.0, 0, 0], [float("inf"), 0, 0]])}, r"^ppo: values\[1, 0\] is inf"),
        ({}, {"rewards": torch.zeros(3)}, r"^ppo: rewards must have shape \[N\] or \[N, T\]"),
        ({}, {"rewards": torch.tensor([float("nan"), 0.0])}, r"^ppo: rewards\[0\] is nan"),
        ({}, {"response_mask": torch.tensor([[1, 0, 0], [0, 0, 0]])}, r"^ppo: .*at least 2 valid tokens"),
        ({}, {"response_mask": torch.tensor([[2, 0, 0], [1, 0, 0]])}, r"^ppo: response_mask must be boolean"),
    ],
)
def test_bad_input(kwargs, inputs, message):
    call = {
        "rewards": torch.tensor([1.0, 0.0]),
        "response_mask": torch.tensor([[1, 1, 0], [1, 1, 1]]),
        "values": torch.zeros(2, 3),
        **inputs,
    }
    with pytest.raises(ValueError, match=message):
        fn = get_advantage_fn("ppo", **kwargs)
        fn.compute(call.pop("rewards"), None, **call)


def test_missing_values_is_a_type_error():
    with pytest.raises(TypeError, match="values"):
        get_advantage_fn("ppo").compute(torch.ones(2), None, response_mask=torch.ones(2, 2))


# ---------------------------------------------------------------------------------------------------------
# The clipped value loss
# ---------------------------------------------------------------------------------------------------------


def value_batch():
    """2 rows × 3; row 1 has one valid token and NaN on its masked positions. c = 0.2:
    tok (0,0): V 1.5 clipped to 1.2, L1 0.25 < L2 0.64 (clip active, counted in clipfrac);
    tok (0,1): V 1.1 inside [0.8, 1.2], L1 = L2 = 1.21 (not counted: strict >);
    tok (0,2): V 0.5 clipped to 0.8, L2 0.04 < L1 0.25 (clip inactive);
    tok (1,0): V 0 inside [−0.2, 0.2], L1 = L2 = 0.09."""
    nan = float("nan")
    vpreds = torch.tensor([[1.5, 1.1, 0.5], [0.0, nan, nan]], dtype=D, requires_grad=True)
    values = torch.tensor([[1.0, 1.0, 1.0], [0.0, nan, 3.0]], dtype=D)
    returns = torch.tensor([[2.0, 0.0, 1.0], [0.3, nan, nan]], dtype=D)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    return vpreds, values, returns, mask


def test_value_loss_closed_form_and_gradient():
    vpreds, values, returns, mask = value_batch()
    loss, metrics = clipped_value_loss(vpreds, values, returns, mask, cliprange_value=0.2)
    assert loss.item() == pytest.approx(0.5 * (0.64 + 1.21 + 0.25 + 0.09) / (4 + 1e-8), rel=1e-12)
    assert set(metrics) == set(VALUE_LOSS_METRICS) == {"vf_loss", "vf_clipfrac", "vpred_mean"}
    assert float(metrics["vf_loss"]) == loss.item() and not metrics["vf_loss"].requires_grad
    assert float(metrics["vf_clipfrac"]) == pytest.approx(0.25, rel=1e-7)
    assert float(metrics["vpred_mean"]) == pytest.approx((1.5 + 1.1 + 0.5 + 0.0) / 4, rel=1e-7)
    loss.backward()
    # d/dV of 0.5·L/4: clipped side active -> 0; otherwise (V − R)/4; masked (NaN) positions -> 0
    expected = torch.tensor([[0.0, 1.1 / 4, (0.5 - 1.0) / 4], [(0.0 - 0.3) / 4, 0.0, 0.0]], dtype=D)
    torch.testing.assert_close(vpreds.grad, expected)


def test_value_loss_no_clipping_with_a_wide_range():
    vpreds, values, returns, mask = value_batch()
    loss, metrics = clipped_value_loss(vpreds, values, returns, mask, cliprange_value=10.0)
    assert loss.item() == pytest.approx(0.5 * (0.25 + 1.21 + 0.25 + 0.09) / (4 + 1e-8), rel=1e-12)
    assert float(metrics["vf_clipfrac"]) == 0.0
    # c = 0: the clipped term is (V_old − R)², larger on (0,0) (1.0 > 0.25) and (0,1) (1.0 < 1.21: no)
    loss, metrics = clipped_value_loss(vpreds, values, returns, mask, cliprange_value=0.0)
    assert loss.item() == pytest.approx(0.5 * (1.0 + 1.21 + 0.25 + 0.09) / (4 + 1e-8), rel=1e-12)
    assert float(metrics["vf_clipfrac"]) == pytest.approx(0.25, rel=1e-7)


def verl_value_loss_by_hand(vpreds, values, returns, c):
    """verl's per-token value loss in plain Python: V clipped to [V_old − c, V_old + c], the larger squared error."""
    clipped = min(max(vpreds, values - c), values + c)
    return max((vpreds - returns) ** 2, (clipped - returns) ** 2), (clipped - returns) ** 2 > (vpreds - returns) ** 2


@pytest.mark.parametrize(
    ("side", "vpreds", "returns"),
    [
        # V far below V_old = 1: clipped up to the lower bound 0.8; R = 0.3 near V, so (0.8 − R)² = 0.25 > 0.01
        ("lower", [0.2, 0.0, 0.9], [0.3, -0.1, 0.5]),
        # V far above V_old = 1: clipped down to the upper bound 1.2; R = 1.9 near V, so (1.2 − R)² = 0.49 > 0.01
        ("upper", [2.0, 2.5, 1.1], [1.9, 2.6, 1.5]),
    ],
)
def test_value_loss_each_clip_bound_decides_when_its_side_is_larger(side, vpreds, returns):
    """The clipped term is the larger one on the `side` bound for the first two tokens (the third inside the range),
    so the loss, its clip fraction and its gradient (0 where the clipped term wins) depend on that bound: moving it
    (c → 2c on that side only) changes them."""
    c, v_old = 0.2, 1.0
    per_token = [verl_value_loss_by_hand(v, v_old, r, c) for v, r in zip(vpreds, returns, strict=True)]
    assert [clipped for _, clipped in per_token] == [True, True, False]
    bound = v_old - c if side == "lower" else v_old + c
    assert per_token[0][0] == pytest.approx((bound - returns[0]) ** 2)  # the bound itself enters the loss
    v = torch.tensor([vpreds], dtype=D, requires_grad=True)
    loss, metrics = clipped_value_loss(
        v, torch.full((1, 3), v_old, dtype=D), torch.tensor([returns], dtype=D), torch.ones(1, 3, dtype=torch.bool), c
    )
    assert loss.item() == pytest.approx(0.5 * sum(term for term, _ in per_token) / (3 + 1e-8), rel=1e-12)
    assert float(metrics["vf_clipfrac"]) == pytest.approx(2 / 3, rel=1e-7)
    (grad,) = torch.autograd.grad(loss, v)
    expected = [0.0, 0.0, (vpreds[2] - returns[2]) / 3]  # d/dV of 0.5·(V − R)²/3 where unclipped, 0 where clipped
    torch.testing.assert_close(grad, torch.tensor([expected], dtype=D))


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_value_loss_aggregation_modes(mode):
    vpreds, values, returns, mask = value_batch()
    per_token = torch.tensor([[0.64, 1.21, 0.25], [0.09, 0.0, 0.0]], dtype=D)
    loss, _ = clipped_value_loss(vpreds, values, returns, mask, 0.2, loss_agg_mode=mode, normalizer=5.0)
    expected = 0.5 * aggregate_loss(per_token, mask, mode, normalizer=5.0)
    assert loss.item() == pytest.approx(float(expected), rel=1e-12)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_value_loss_window_shares_add_up(mode):
    """Micro-batches called with the window's counts sum to the whole batch's loss (and gradient)."""
    torch.manual_seed(1)
    b, t = 6, 5
    vpreds = torch.randn(b, t, dtype=D, requires_grad=True)
    values = vpreds.detach() + 0.3 * torch.randn(b, t, dtype=D)
    returns = torch.randn(b, t, dtype=D)
    mask = torch.rand(b, t) < 0.7
    mask[2] = False  # an empty row counts as a sequence, as in the local mean
    window = {"global_valid_toks": mask.sum(), "global_valid_seqs": b, "normalizer": 4.0 * t}
    whole, _ = clipped_value_loss(vpreds, values, returns, mask, 0.2, loss_agg_mode=mode, normalizer=4.0 * t)
    (whole_grad,) = torch.autograd.grad(whole, vpreds)
    parts = [
        clipped_value_loss(vpreds[rows], values[rows], returns[rows], mask[rows], 0.2, loss_agg_mode=mode, **window)[0]
        for rows in (slice(0, 1), slice(1, 4), slice(4, 6))
    ]
    total = sum(parts)
    torch.testing.assert_close(total, whole)
    (grad,) = torch.autograd.grad(total, vpreds)
    torch.testing.assert_close(grad, whole_grad)


def test_value_loss_bad_input():
    vpreds, values, returns, mask = value_batch()
    for bad in (-0.1, float("nan"), float("inf"), "0.2", None, True):
        with pytest.raises(ValueError, match=r"^clipped_value_loss: cliprange_value=.* is not valid"):
            clipped_value_loss(vpreds, values, returns, mask, cliprange_value=bad)
    with pytest.raises(ValueError, match=r"unknown input 'global_valid_tok'.*did you mean 'global_valid_toks'"):
        clipped_value_loss(vpreds, values, returns, mask, 0.2, global_valid_tok=4)
    with pytest.raises(ValueError, match="loss_agg_mode='token-median' is not valid"):
        clipped_value_loss(vpreds, values, returns, mask, 0.2, loss_agg_mode="token-median")
    with pytest.raises(ValueError, match=r"returns has shape \(2, 2\)"):
        clipped_value_loss(vpreds, values, returns[:, :2], mask, 0.2)
    with pytest.raises(ValueError, match="response_mask must be boolean or contain only 0 and 1"):
        clipped_value_loss(vpreds, values, returns, mask.to(D) * 2, 0.2)


def test_value_loss_nan_at_a_valid_position_and_empty_batch():
    vpreds, values, returns, mask = value_batch()
    returns = returns.clone()
    returns[0, 1] = float("nan")
    loss, _ = clipped_value_loss(vpreds, values, returns, mask, 0.2)
    assert math.isnan(loss.item())
    empty = torch.zeros(0, 3, dtype=D, requires_grad=True)
    loss, metrics = clipped_value_loss(empty, empty.detach(), empty.detach(), torch.zeros(0, 3, dtype=torch.bool), 0.2)
    assert loss.item() == 0.0 and all(math.isfinite(float(v)) for v in metrics.values())


def test_explained_variance():
    torch.manual_seed(2)
    values, returns = torch.randn(4, 6, dtype=D), torch.randn(4, 6, dtype=D)
    mask = torch.rand(4, 6) < 0.6
    r, v = returns[mask], values[mask]
    expected = 1.0 - torch.var(r - v) / (torch.var(r) + 1e-5)
    torch.testing.assert_close(explained_variance(values, returns, mask), expected)
    assert float(explained_variance(returns, returns, mask)) == pytest.approx(1.0)
    one = torch.zeros(4, 6, dtype=torch.bool)
    one[0, 0] = True
    assert math.isnan(float(explained_variance(values, returns, one)))
    with pytest.raises(ValueError, match="must have one shape"):
        explained_variance(values, returns[:, :2], mask)
