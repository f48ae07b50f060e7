"""verl 0.9.1's `gdpo`, `grpo_passk`, `opo`, `reinforce_plus_plus_baseline` and `optimal_token_baseline` /
`tir_optimal_token_baseline` estimators: closed forms worked out by hand on small tensors, then float64 random
comparisons with plain-loop re-implementations of verl's code (groups of one, all-equal groups, fully masked rows,
unequal lengths, ties), and the estimators' input errors."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

import numpy as np
import pytest
import torch

from trl_ext.advantages import ADVANTAGE_FNS, get_advantage_fn
from trl_ext.advantages.gdpo import gdpo_advantages
from trl_ext.advantages.opo import opo_advantages
from trl_ext.advantages.optimal_token_baseline import multi_turn_optimal_token_baseline, optimal_token_baseline
from trl_ext.advantages.passk import grpo_passk_advantages
from trl_ext.advantages.reinforce_plus_plus import (
    masked_whiten,
    reinforce_plus_plus_baseline_advantages,
    verl_masked_whiten,
)

EPS = 1e-6
D = torch.float64


def t64(x) -> torch.Tensor:
    return torch.tensor(x, dtype=D)


def close(actual: torch.Tensor, expected, rtol: float = 1e-12, atol: float = 1e-12) -> None:
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), rtol=rtol, atol=atol)


def lengths_mask(lengths, width: int) -> torch.Tensor:
    return torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(-1)


def whiten_by_hand(values: list[float]) -> tuple[float, float]:
    """(mean, 1/sqrt(unbiased var + 1e-8)) of a list of floats (the closed form of verl's masked_whiten)."""
    return statistics.mean(values), 1 / math.sqrt(statistics.variance(values) + 1e-8)


# ---------------------------------------------------------------------------------------------------------
# Plain-loop re-implementations of verl 0.9.1 (core_algos.py / torch_functional.py), float64
# ---------------------------------------------------------------------------------------------------------


def verl_whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl_F.masked_whiten as verl writes it (masked_sum / masked_mean / masked_var)."""

    def masked_mean(v, m):
        return (torch.where(m.bool(), v, 0.0) * m).sum() / (m.sum() + 1e-8)

    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    mask_sum = mask.sum()
    variance = variance * (mask_sum / (mask_sum - 1))
    return (values - mean) * torch.rsqrt(variance + 1e-8)


def verl_grpo_scores(scores: list[float], ids: list, epsilon: float, norm: bool) -> list[float]:
    """compute_grpo_outcome_advantage's per-sample scalars (before the broadcast)."""
    groups = defaultdict(list)
    for s, g in zip(scores, ids, strict=True):
        groups[g].append(s)
    out = []
    for s, g in zip(scores, ids, strict=True):
        members = groups[g]
        mean, std = (0.0, 1.0) if len(members) == 1 else (statistics.mean(members), statistics.stdev(members))
        out.append((s - mean) / (std + epsilon) if norm else s - mean)
    return out


def verl_gdpo(components: torch.Tensor, mask: torch.Tensor, ids: list, weights, epsilon: float, norm: bool):
    total = torch.zeros(mask.shape, dtype=D)
    for k in range(components.shape[1]):
        a = verl_grpo_scores(components[:, k].tolist(), ids, epsilon, norm)
        total = total + float(weights[k]) * (t64(a).unsqueeze(-1) * mask)
    return verl_whiten(total, mask) * mask


def verl_passk(scores: torch.Tensor, ids: list, epsilon: float, norm: bool) -> torch.Tensor:
    advantages = torch.zeros_like(scores)
    by_group, rows = defaultdict(list), defaultdict(list)
    for i, g in enumerate(ids):
        by_group[g].append(scores[i])
        rows[g].append(i)
    for g in by_group:
        rewards = torch.stack(by_group[g])
        topk, topk_idx = torch.topk(rewards, 2)
        advantage = topk[0] - topk[1]
        if norm:
            advantage = advantage / (torch.std(rewards) + epsilon)
        advantages[rows[g][topk_idx[0].item()]] = advantage
    return advantages


def verl_opo(scores: list[float], lengths: list[float], ids: list) -> list[float]:
    groups = defaultdict(list)
    for s, n, g in zip(scores, lengths, ids, strict=True):
        groups[g].append((s, n))
    out = []
    for s, g in zip(scores, ids, strict=True):
        members = groups[g]
        baseline = 0.0 if len(members) == 1 else sum(n * r for r, n in members) / sum(n for _, n in members)
        out.append(s - baseline)
    return out


def verl_rfpp_baseline(scores: list[float], ids: list, mask: torch.Tensor) -> torch.Tensor:
    groups = defaultdict(list)
    for s, g in zip(scores, ids, strict=True):
        groups[g].append(s)
    centred = [
        s - (0.0 if len(groups[g]) == 1 else statistics.mean(groups[g])) for s, g in zip(scores, ids, strict=True)
    ]
    tiled = t64(centred).unsqueeze(-1).tile([1, mask.shape[1]]) * mask
    return verl_whiten(tiled, mask) * mask


def verl_otb(rewards, mask, ids, lp, spp, is_w, zero_tail, epsilon):
    """compute_optimal_token_baseline_advantage, verl's loops."""
    returns = (rewards * mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
    w = 1 - 2 * torch.exp(lp) + spp
    if is_w is not None:
        w = w * is_w**2
    w_cum = (w * mask).cumsum(dim=-1)
    groups = defaultdict(list)
    for i, g in enumerate(ids):
        groups[g].append(i)
    baselines = torch.zeros_like(returns)
    for rows in groups.values():
        if len(rows) == 1:
            continue
        idx = torch.tensor(rows)
        num = (returns[idx] * w_cum[idx] * mask[idx]).sum(dim=0)
        den = (w_cum[idx] * mask[idx]).sum(dim=0) + epsilon
        baselines[idx] = (num / den).unsqueeze(0).expand(len(rows), -1)
        if zero_tail:
            lengths = mask[idx].sum(dim=-1)
            ordered, _ = torch.sort(lengths)
            longest, second = int(ordered[-1]), int(ordered[-2])
            at_max = (lengths == longest).nonzero(as_tuple=True)[0]
            if at_max.numel() == 1 and longest > second:
                baselines[rows[int(at_max[0])], second:] = 0.0
    return (returns - baselines) * mask, returns


def verl_tir_otb(rewards, mask, ids, lp, spp, is_w, zero_tail, epsilon):
    """compute_multi_turn_optimal_token_baseline_advantage, verl's loops."""
    returns = (rewards * mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
    w = 1 - 2 * torch.exp(lp) + spp
    if is_w is not None:
        w = w * is_w**2
    w_cum = (w * mask).cumsum(dim=-1)
    lengths = mask.sum(dim=-1).long()
    width = int(lengths.max())
    all_w = torch.zeros(len(lengths), width, dtype=D)
    all_r = torch.zeros_like(all_w)
    for i in range(len(lengths)):
        if lengths[i] == 0:
            continue
        all_w[i, : lengths[i]] = w_cum[i, mask[i].bool()]
        all_r[i, : lengths[i]] = returns[i, mask[i].bool()]
    groups = defaultdict(list)
    for i, g in enumerate(ids):
        if lengths[i] > 0:
            groups[g].append(i)
    baselines = torch.zeros_like(all_r)
    for rows in groups.values():
        if len(rows) == 1:
            continue
        idx = torch.tensor(rows)
        baselines[idx] = (all_r[idx] * all_w[idx]).sum(dim=0) / (all_w[idx].sum(dim=0) + epsilon)
        if zero_tail:
            group_lengths = lengths[idx]
            ordered, _ = torch.sort(group_lengths)
            longest, second = int(ordered[-1]), int(ordered[-2])
            at_max = (group_lengths == longest).nonzero(as_tuple=True)[0]
            if at_max.numel() == 1 and longest > second:
                baselines[rows[int(at_max[0])], second:] = 0.0
    compact = all_r - baselines
    advantages = torch.zeros_like(returns)
    for i in range(len(lengths)):
        if lengths[i] > 0:
            advantages[i, mask[i].bool()] = compact[i, : lengths[i]]
    return advantages * mask, returns


# ---------------------------------------------------------------------------------------------------------
# Random batches: groups of one, an all-equal group, a fully masked row, unequal lengths, gaps
# ---------------------------------------------------------------------------------------------------------

IDS = ["a", "b", "a", "c", "d", "b", "a", "e", "e", "e", "b", "d"]  # a: 3, b: 3, c: 1, d: 2, e: 3
T = 7


def random_batch(seed: int, gaps: bool = False):
    g = torch.Generator().manual_seed(seed)
    n = len(IDS)
    lengths = torch.randint(1, T + 1, (n,), generator=g)
    lengths[4] = 0  # a fully masked row (group d)
    lengths[7] = lengths[8] = 5  # group e: a tie for the longest...
    lengths[9] = 3
    mask = lengths_mask(lengths.tolist(), T)
    if gaps:
        mask &= torch.rand(n, T, generator=g) > 0.25  # tool outputs spliced into the responses
        mask[:, 0] = lengths > 0  # only row 4 is fully masked
    scores = torch.randint(0, 3, (n,), generator=g).to(D) + 0.5 * torch.randn(n, generator=g, dtype=D)
    scores[[7, 8, 9]] = 1.25  # group e: all rewards equal
    return g, mask, scores


def group_codes(ids: list) -> tuple[torch.Tensor, int]:
    codes: dict = {}
    return torch.tensor([codes.setdefault(x, len(codes)) for x in ids]), len(set(ids))


# ---------------------------------------------------------------------------------------------------------
# verl's masked_whiten
# ---------------------------------------------------------------------------------------------------------


def test_verl_masked_whiten_closed_form_and_the_float32_count():
    values = t64([[1.0, 2.0, 9.0], [4.0, -3.0, 0.5]])
    mask = t64([[1, 1, 0], [1, 1, 0]])
    selected = mask.bool()
    mean, scale = whiten_by_hand([1.0, 2.0, 4.0, -3.0])  # mean 1, unbiased variance 26/3
    assert mean == 1.0
    expected = [0.0, 1.0 * scale, 3.0 * scale, -4.0 * scale]
    close(verl_masked_whiten(values, mask)[selected], expected, rtol=1e-8, atol=1e-8)  # float64 mask: 4 + 1e-8
    # A bool mask: verl's 4 + 1e-8 is float32 (= 4, so the mean is exactly 1) and its Bessel factor 4/3 a float32
    # division; the variance is (0 + 1 + 9 + 16)/4 = 6.5 times float32(4/3).
    bessel = float(np.float32(4 / 3))
    assert bessel != 4 / 3
    close(verl_masked_whiten(values, selected)[selected], (values[selected] - 1.0) / math.sqrt(6.5 * bessel + 1e-8))
    with pytest.raises(ValueError, match=r"verl_masked_whiten needs at least 2 valid tokens in the mask, got 1"):
        verl_masked_whiten(values, torch.tensor([[1, 0, 0], [0, 0, 0]], dtype=torch.bool))


def test_trl_ext_masked_whiten_is_not_verl_bit_for_bit():
    """The reason `verl_masked_whiten` exists: trl_ext's (Trinity-RFT's) `masked_whiten` differs from verl's by ~1e-7
    relative with a bool mask (verl's float32 Bessel factor), and by rounding only with a float64 mask."""
    values = torch.randn(6, 5, generator=torch.Generator().manual_seed(0), dtype=D)
    mask = lengths_mask([5, 3, 4, 1, 2, 5], 5)
    ours, verl = masked_whiten(values, mask) * mask, verl_masked_whiten(values, mask) * mask
    assert not torch.equal(ours, verl)
    close(ours, verl, rtol=2e-7, atol=2e-7)
    close(masked_whiten(values, mask) * mask, verl_masked_whiten(values, mask.to(D)) * mask, rtol=1e-14, atol=1e-14)


# ---------------------------------------------------------------------------------------------------------
# GDPO
# ---------------------------------------------------------------------------------------------------------


def test_gdpo_by_hand_with_missing_component_rewards():
    """Group A = rows 0-2, B = rows 3-4; NaN = no reward (row 4: none at all, unscorable); weights (1, 2)."""
    nan = math.nan
    components = t64([[1.0, 0.0], [nan, 1.0], [3.0, nan], [2.0, 5.0], [nan, nan]])
    mask = lengths_mask([2, 2, 1, 2, 2], 2)
    # A, component 0 over rows {0, 2}: mean 2, std sqrt(2); component 1 over rows {0, 1}: mean 1/2, std sqrt(1/2).
    # B has a single scored row (3) in each component: mean 0, std 1.
    s0 = -1 / (math.sqrt(2) + EPS) + 2 * (-0.5 / (math.sqrt(0.5) + EPS))
    s1 = 2 * (0.5 / (math.sqrt(0.5) + EPS))
    s2 = 1 / (math.sqrt(2) + EPS)
    s3 = 2 / (1 + EPS) + 2 * 5 / (1 + EPS)
    mean, scale = whiten_by_hand([s0, s0, s1, s1, s2, s3, s3])  # row 4 is left out of the whitening
    expected = [[(s0 - mean) * scale] * 2, [(s1 - mean) * scale] * 2, [(s2 - mean) * scale, 0.0]]
    expected += [[(s3 - mean) * scale] * 2, [0.0, 0.0]]
    fn = get_advantage_fn("gdpo")
    groups = ["A", "A", "A", "B", "B"]
    out = fn(t64([9.0] * 5), groups, response_mask=mask, reward_components=components, reward_weights=[1.0, 2.0])
    close(out, expected, rtol=1e-6, atol=1e-7)  # verl's float32 Bessel factor
    index = torch.tensor([0, 0, 0, 1, 1])
    close(gdpo_advantages(components, index, 2, mask, t64([1.0, 2.0])), out, rtol=0, atol=0)


def test_gdpo_single_component_without_std_is_whitened_dr_grpo():
    """No components: the summed rewards; norm_adv_by_std=False: R − mean, then whitened."""
    rewards = t64([[0.0, 1.0], [3.0, 0.0], [2.0, 0.0]])  # scores 1, 3, 2; groups {0, 1}, {2}
    mask = lengths_mask([2, 1, 2], 2)
    centred = [-1.0, 1.0, 2.0]  # mean 2 for the pair, 0 for the single row
    mean, scale = whiten_by_hand([-1.0, -1.0, 1.0, 2.0, 2.0])
    expected = [[(c - mean) * scale] * 2 for c in centred]
    expected[1][1] = 0.0
    out = get_advantage_fn("gdpo", norm_adv_by_std=False)(rewards, [0, 0, 1], response_mask=mask)
    close(out, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gdpo_matches_verl_on_random_batches(seed, norm):
    g, mask, _ = random_batch(seed)
    components = torch.randn(len(IDS), 3, generator=g, dtype=D)
    components[:, 1] = torch.randint(0, 2, (len(IDS),), generator=g).to(D)  # a 0/1 reward
    components[[7, 8, 9], 0] = 0.5  # group e: all equal in component 0
    weights = t64([1.0, 0.5, 2.0])
    expected = verl_gdpo(components, mask, IDS, weights, EPS, norm)
    fn = get_advantage_fn("gdpo", norm_adv_by_std=norm)
    out = fn(components.sum(-1), IDS, response_mask=mask, reward_components=components, reward_weights=weights)
    close(out, expected, rtol=1e-10, atol=1e-10)
    index, num_groups = group_codes(IDS)
    close(gdpo_advantages(components, index, num_groups, mask, weights, EPS, norm), expected, rtol=1e-10, atol=1e-10)
    # No components: `rewards` (summed over the row) is the single component, weight 1.
    token_rewards = torch.zeros(len(IDS), T, dtype=D)
    token_rewards[:, 0] = components[:, 0]
    close(fn(token_rewards, IDS, response_mask=mask), verl_gdpo(components[:, :1], mask, IDS, [1.0], EPS, norm))


def test_gdpo_input_errors():
    fn = get_advantage_fn("gdpo")
    mask = torch.ones(2, 2, dtype=torch.bool)
    with pytest.raises(TypeError, match=r"GDPOAdvantage.compute\(\) missing 1 required keyword-only argument: "):
        fn(t64([1.0, 2.0]), [0, 0])
    with pytest.raises(ValueError, match=r"gdpo: reward_components must have shape \[N, K\] with N = 2"):
        fn(t64([1.0, 2.0]), [0, 0], response_mask=mask, reward_components=t64([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"gdpo: reward_components\[1, 0\] is inf"):
        fn(t64([1.0, 2.0]), [0, 0], response_mask=mask, reward_components=t64([[1.0], [math.inf]]))
    with pytest.raises(ValueError, match=r"gdpo: reward_weights must have shape \(1,\), one per reward component"):
        fn(t64([1.0, 2.0]), [0, 0], response_mask=mask, reward_components=t64([[1.0], [2.0]]), reward_weights=[1, 2])
    with pytest.raises(ValueError, match=r"gdpo: rewards\[0\] is nan"):
        fn(t64([math.nan, 2.0]), [0, 0], response_mask=mask)
    with pytest.raises(ValueError, match=r"gdpo: verl_masked_whiten needs at least 2 valid tokens"):
        fn(t64([1.0, 2.0]), [0, 0], response_mask=torch.tensor([[1, 0], [0, 0]]))
    with pytest.raises(ValueError, match=r"gdpo: rewards has 2 entries but group_ids has 3"):
        fn(t64([1.0, 2.0]), [0, 0, 1], response_mask=mask)
    assert fn(torch.zeros(0), [], response_mask=torch.zeros(0, 3)).shape == (0, 3)


# ---------------------------------------------------------------------------------------------------------
# Pass@k
# ---------------------------------------------------------------------------------------------------------


def test_passk_by_hand():
    """a = (0, 5, 2): the 5 gets (5 − 2)/(std + ε), std = sqrt(57)/3; b = (4, 4, 1): a tie for the best, all 0;
    c = (1, 2): the 2 gets 1/(sqrt(1/2) + ε)."""
    rewards = t64([0.0, 4.0, 5.0, 1.0, 2.0, 4.0, 2.0, 1.0])
    ids = ["a", "b", "a", "c", "a", "b", "c", "b"]
    out = get_advantage_fn("grpo_passk")(rewards, ids)
    close(out, [0, 0, 3 / (math.sqrt(57) / 3 + EPS), 0, 0, 0, 1 / (math.sqrt(0.5) + EPS), 0])
    close(get_advantage_fn("grpo_passk", norm_adv_by_std=False)(rewards, ids), [0, 0, 3, 0, 0, 0, 1, 0])


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_passk_matches_verl_on_random_batches_with_ties(seed, norm):
    g = torch.Generator().manual_seed(seed)
    ids = [0, 1, 2, 0, 1, 2, 3, 3, 0, 1, 2, 2, 4, 4]
    rewards = torch.randint(0, 3, (len(ids),), generator=g).to(D)  # many ties
    rewards[[12, 13]] = 2.0  # group 4: all equal
    expected = verl_passk(rewards, ids, EPS, norm)
    close(get_advantage_fn("grpo_passk", norm_adv_by_std=norm)(rewards, ids), expected)
    index, num_groups = group_codes(ids)
    close(grpo_passk_advantages(rewards, index, num_groups, EPS, norm), expected)


def test_passk_group_of_one_is_an_error():
    with pytest.raises(ValueError, match=r"grpo_passk: Pass@k needs at least 2 samples per group, but group 'b' "):
        get_advantage_fn("grpo_passk")(t64([1.0, 0.0, 2.0]), ["a", "a", "b"])
    with pytest.raises(ValueError, match=r"group 7 \(sample 2\) has 1"):
        get_advantage_fn("grpo_passk")(t64([1.0, 0.0, 2.0]), torch.tensor([3, 3, 7]))
    with pytest.raises(ValueError, match=r"grpo_passk_advantages: .* group 1 \(sample 2\) has 1"):
        grpo_passk_advantages(t64([1.0, 0.0, 2.0]), torch.tensor([0, 0, 1]), 2)


# ---------------------------------------------------------------------------------------------------------
# OPO
# ---------------------------------------------------------------------------------------------------------


def test_opo_by_hand():
    """g: (R, L) = (1, 2), (0, 3), (4, 1) -> b = (2 + 0 + 4)/6 = 1; h: a group of one -> b = 0; z: two rows
    without loss tokens -> b = 0 (verl: 0/0 = NaN)."""
    rewards = t64([1.0, 0.0, 7.0, 4.0, 2.0, 5.0])
    mask = lengths_mask([2, 3, 2, 1, 0, 0], 3)
    out = get_advantage_fn("opo")(rewards, ["g", "g", "h", "g", "z", "z"], response_mask=mask)
    close(out, [0.0, -1.0, 7.0, 3.0, 2.0, 5.0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_opo_matches_verl_on_random_batches(seed):
    _, mask, scores = random_batch(seed, gaps=True)
    lengths = mask.sum(-1)
    expected = verl_opo(scores.tolist(), lengths.tolist(), IDS)
    close(get_advantage_fn("opo")(scores, IDS, response_mask=mask), expected)
    index, num_groups = group_codes(IDS)
    close(opo_advantages(scores, lengths, index, num_groups), expected)


def test_opo_inputs():
    fn = get_advantage_fn("opo")
    assert fn.inputs() == ("response_mask",)
    with pytest.raises(TypeError, match=r"OPOAdvantage.compute\(\) missing 1 required keyword-only argument: "):
        fn(t64([1.0, 2.0]), [0, 0])
    with pytest.raises(ValueError, match=r"opo: response_mask has 2 rows but rewards has 3 entries"):
        fn(t64([1.0, 2.0, 3.0]), [0, 0, 0], response_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"opo: rewards must be 1-D \[N\]"):
        fn(torch.ones(2, 3), [0, 0], response_mask=torch.ones(2, 3))


# ---------------------------------------------------------------------------------------------------------
# REINFORCE++-baseline
# ---------------------------------------------------------------------------------------------------------


def test_reinforce_plus_plus_baseline_by_hand():
    """R = (1, 3 | 2): centred (−1, 1 | 2); tokens (−1, −1, 1, 2, 2): mean 0.6, unbiased variance 9.2/4 = 2.3."""
    mask = lengths_mask([2, 1, 2], 2)
    out = get_advantage_fn("reinforce_plus_plus_baseline")(t64([1.0, 3.0, 2.0]), ["a", "a", "b"], response_mask=mask)
    scale = 1 / math.sqrt(2.3 + 1e-8)
    close(out, [[-1.6 * scale, -1.6 * scale], [0.4 * scale, 0.0], [1.4 * scale, 1.4 * scale]], rtol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reinforce_plus_plus_baseline_matches_verl_on_random_batches(seed):
    _, mask, scores = random_batch(seed)
    expected = verl_rfpp_baseline(scores.tolist(), IDS, mask)
    close(get_advantage_fn("reinforce_plus_plus_baseline")(scores, IDS, response_mask=mask), expected, rtol=1e-10)
    index, num_groups = group_codes(IDS)
    close(reinforce_plus_plus_baseline_advantages(scores, index, num_groups, mask), expected, rtol=1e-10)


def test_reinforce_plus_plus_baseline_needs_two_tokens():
    fn = get_advantage_fn("reinforce_plus_plus_baseline")
    with pytest.raises(ValueError, match=r"reinforce_plus_plus_baseline: verl_masked_whiten needs at least 2 valid"):
        fn(t64([1.0, 2.0]), [0, 0], response_mask=torch.tensor([[0, 1], [0, 0]]))
    with pytest.raises(TypeError, match=r"missing 1 required keyword-only argument: 'response_mask'"):
        fn(t64([1.0, 2.0]), [0, 0])


# ---------------------------------------------------------------------------------------------------------
# Optimal Token Baseline
# ---------------------------------------------------------------------------------------------------------

# Rows 0, 1 form group g, row 2 is alone. π = 1/2 and Σπ² = 1/2 everywhere, so each loss token adds w = 1/2 to W.
OTB_MASK = torch.tensor([[1, 0, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]], dtype=torch.bool)
OTB_REWARDS = t64([2.0, 1.0, 3.0])  # on each row's last loss token: G = (2, 2, 2, 2), (1, 1, 0, 0), (3, 3, 0, 0)
OTB_INPUTS = {
    "response_mask": OTB_MASK,
    "logprobs": torch.full((3, 4), math.log(0.5), dtype=D),
    "sum_pi_squared": torch.full((3, 4), 0.5, dtype=D),
}


def test_otb_by_hand():
    """W = (.5, .5, 1, 1.5) and (.5, 1, 1, 1); per position t: B_t = Σ G W m / Σ W m = 1.5, 1, 2, 2. The longest
    row (3 loss tokens > 2) gets B = 0 from position 2 on; row 2 (a group of one) gets B = 0."""
    fn = get_advantage_fn("optimal_token_baseline")
    out = fn(OTB_REWARDS, ["g", "g", "h"], **OTB_INPUTS)
    close(out, [[0.5, 0.0, 2.0, 2.0], [-0.5, 0.0, 0.0, 0.0], [3.0, 3.0, 0.0, 0.0]], rtol=1e-7, atol=1e-7)
    out = get_advantage_fn("optimal_token_baseline", handle_zero_tail=False)(OTB_REWARDS, ["g", "g", "h"], **OTB_INPUTS)
    close(out, [[0.5, 0.0, 0.0, 0.0], [-0.5, 0.0, 0.0, 0.0], [3.0, 3.0, 0.0, 0.0]], rtol=1e-7, atol=1e-7)


def test_tir_otb_by_hand():
    """Compacted over the loss tokens: W = (.5, 1, 1.5) and (.5, 1), G = (2, 2, 2) and (1, 1); per loss-token
    position k: B_k = 1.5, 1.5, 2; the longer row's B is 0 from k = 2 on. Put back at the loss tokens."""
    fn = get_advantage_fn("optimal_token_baseline", multi_turn=True)
    out = fn(OTB_REWARDS, ["g", "g", "h"], **OTB_INPUTS)
    close(out, [[0.5, 0.0, 0.5, 2.0], [-0.5, -0.5, 0.0, 0.0], [3.0, 3.0, 0.0, 0.0]], rtol=1e-7, atol=1e-7)
    out = get_advantage_fn("optimal_token_baseline", multi_turn=True, handle_zero_tail=False)(
        OTB_REWARDS, ["g", "g", "h"], **OTB_INPUTS
    )
    close(out, [[0.5, 0.0, 0.5, 0.0], [-0.5, -0.5, 0.0, 0.0], [3.0, 3.0, 0.0, 0.0]], rtol=1e-7, atol=1e-7)
    token_rewards = torch.zeros(3, 4, dtype=D)
    token_rewards[[0, 1, 2], [3, 1, 1]] = OTB_REWARDS
    _, returns = multi_turn_optimal_token_baseline(
        token_rewards, OTB_MASK, torch.tensor([5, 5, 9]), OTB_INPUTS["logprobs"], OTB_INPUTS["sum_pi_squared"]
    )
    close(returns, [[2.0] * 4, [1.0, 1.0, 0.0, 0.0], [3.0, 3.0, 0.0, 0.0]])


@pytest.mark.parametrize("multi_turn", [False, True])
@pytest.mark.parametrize("zero_tail", [True, False])
@pytest.mark.parametrize("with_is", [False, True])
@pytest.mark.parametrize("gaps", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_otb_matches_verl_on_random_batches(seed, gaps, with_is, zero_tail, multi_turn):
    g, mask, _ = random_batch(seed, gaps=gaps)
    n = len(IDS)
    rewards = torch.randn(n, T, generator=g, dtype=D) * (torch.rand(n, T, generator=g) < 0.4)
    lp = -torch.rand(n, T, generator=g, dtype=D) * 3
    spp = torch.rand(n, T, generator=g, dtype=D)
    is_w = torch.rand(n, T, generator=g, dtype=D) * 2 if with_is else None
    reference = verl_tir_otb if multi_turn else verl_otb
    ours = multi_turn_optimal_token_baseline if multi_turn else optimal_token_baseline
    for mask_dtype in (torch.bool, D):
        m = mask.to(mask_dtype)
        expected, expected_returns = reference(rewards, m.to(D), IDS, lp, spp, is_w, zero_tail, 1e-8)
        advantages, returns = ours(rewards, m, group_codes(IDS)[0] * 3 + 1, lp, spp, is_w, zero_tail, 1e-8)
        close(advantages, expected)
        close(returns, expected_returns)
    if not with_is:
        fn = get_advantage_fn("optimal_token_baseline", handle_zero_tail=zero_tail, multi_turn=multi_turn)
        noise = torch.where(mask, 0.0, math.nan)  # ignored outside the mask
        out = fn(rewards, IDS, response_mask=mask, logprobs=lp + noise, sum_pi_squared=spp + noise)
        expected, _ = reference(rewards * mask, mask.to(D), IDS, lp, spp, None, zero_tail, 1e-8)
        close(out, expected)


def test_otb_scalar_rewards_sit_on_the_last_loss_token():
    """A scalar reward sits on the row's last `response_mask` token, so a completion ending in a masked tool output
    keeps it: the same advantages as the token rewards placed there by hand."""
    fn = get_advantage_fn("optimal_token_baseline")
    assert fn.needed_inputs() == ("response_mask", "logprobs", "sum_pi_squared")
    mask = OTB_MASK.clone()
    mask[0, 3] = False  # row 0 ends with a masked token: its last loss token is 2
    token_rewards = torch.zeros(3, 4, dtype=D)
    token_rewards[0, 2], token_rewards[1, 1], token_rewards[2, 1] = OTB_REWARDS
    inputs = {**OTB_INPUTS, "response_mask": mask}
    out = fn(OTB_REWARDS, ["g", "g", "h"], **inputs)
    close(out, fn(token_rewards, ["g", "g", "h"], **inputs))
    assert out[0, :3].abs().sum() > 0  # the reward was not lost


def test_otb_input_errors():
    fn = get_advantage_fn("optimal_token_baseline")
    inputs = dict(OTB_INPUTS)
    del inputs["sum_pi_squared"]
    with pytest.raises(TypeError, match=r"OptimalTokenBaselineAdvantage.compute\(\) missing 1 required .*'sum_pi_sq"):
        fn(OTB_REWARDS, [0, 0, 1], **inputs)
    with pytest.raises(
        ValueError, match=r"optimal_token_baseline: compute\(\) needs sum_pi_squared \[N, T\], got None"
    ):
        fn(OTB_REWARDS, [0, 0, 1], **inputs, sum_pi_squared=None)
    with pytest.raises(ValueError, match=r"optimal_token_baseline: logprobs must have the shape \(3, 4\)"):
        fn(OTB_REWARDS, [0, 0, 1], **{**OTB_INPUTS, "logprobs": torch.zeros(3, 3)})
    with pytest.raises(ValueError, match=r"optimal_token_baseline: sum_pi_squared\[0, 0\] is nan"):
        fn(OTB_REWARDS, [0, 0, 1], **{**OTB_INPUTS, "sum_pi_squared": torch.full((3, 4), math.nan)})
    with pytest.raises(ValueError, match=r"optimal_token_baseline: rewards has 3 entries but group_ids has 2"):
        fn(OTB_REWARDS, [0, 0], **OTB_INPUTS)


# ---------------------------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "defaults", "token_level"),
    [
        ("gdpo", {"epsilon": 1e-6, "norm_adv_by_std": True}, True),
        ("grpo_passk", {"epsilon": 1e-6, "norm_adv_by_std": True}, False),
        ("opo", {}, False),
        ("reinforce_plus_plus_baseline", {}, True),
        ("optimal_token_baseline", {"handle_zero_tail": True, "epsilon": 1e-8, "multi_turn": False}, True),
    ],
)
def test_registered_with_verl_defaults(name, defaults, token_level):
    assert ADVANTAGE_FNS[name].default_args() == defaults
    assert ADVANTAGE_FNS[name].token_level is token_level
    assert get_advantage_fn(name).args == defaults
