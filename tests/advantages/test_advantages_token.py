"""Tests for trl_ext.advantages, the token-level estimators (REINFORCE++, its returns across a tool output included,
and on-policy distillation): hand-computed values and plain-Python reference implementations."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from test_advantages_api import close

from trl_ext.advantages import get_advantage_fn

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
