"""DPPO-Binary-TV / -KL (`trl_ext.losses.dppo`), ported from verl 0.9.1, against closed forms written out token by
token here (plain Python floats, float64 tensors), on the batch of test_verl_losses_cov.py, whose facts (Clip-Cov's,
KL-Cov's and DPPO's selections) are checked here. benchmarks/compare_verl.py compares them with verl's own code.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_verl_losses_cov import (
    ADV,
    BATCH_FACTS,
    DELTA,
    EPS,
    LP,
    NAN,
    VALID,
    D,
    N,
    clip_cov_candidates,
    cov_of,
    grad_tensor,
    kl_cov_closed_form,
    old_of,
    ppo_terms,
    run,
    tensors,
    weight_of,
)
from trainer_helpers import CPU

import trl_ext
from trl_ext.losses import LOSS_AGG_MODES, get_policy_loss

# ==================================================================================================
# Closed forms (plain Python, token by token)
# ==================================================================================================


def binary_tv(i, t):
    return math.exp(LP[i][t]) - math.exp(old_of(i, t))


def binary_kl(i, t):
    p, p_old = math.exp(LP[i][t]), math.exp(old_of(i, t))
    return p_old * (old_of(i, t) - LP[i][t]) + (1 - p_old) * math.log((1 - p_old + 1e-8) / (1 - p + 1e-8))


def dppo_kept(kind, i, t, low, high):
    a, p, p_old = ADV[i][t], math.exp(LP[i][t]), math.exp(old_of(i, t))
    if kind == "tv":
        return binary_tv(i, t) <= high if a > 0 else binary_tv(i, t) >= -low
    if a > 0:
        return binary_kl(i, t) <= high or p <= p_old
    return binary_kl(i, t) <= low or p >= p_old


def dppo_closed_form(kind, low, high, c, weights=None, valid=VALID):
    """Per token L = −A·min(r, c)·M·lp (×w) and dL/dlp = −A·min(r, c)·M (×w), summed over `valid`."""
    losses, grads, out, truncated = {}, {}, set(), set()
    for i, t in valid:
        r, w = math.exp(max(min(DELTA[i][t], 20.0), -20.0)), weight_of(weights, i, t)
        kept = dppo_kept(kind, i, t, low, high)
        coefficient = -ADV[i][t] * min(r, c) * kept * w
        losses[(i, t)], grads[(i, t)] = coefficient * LP[i][t], coefficient
        out |= set() if kept else {(i, t)}
        truncated |= {(i, t)} if kept and r > c else set()
    n = len(valid)
    metrics = {
        "pg_clipfrac": len(out) / (n + EPS),
        "pg_clipfrac_lower": len(truncated) / (n + EPS),
        "ppo_kl": -sum(DELTA[i][t] for i, t in valid) / (n + EPS),
    }
    return losses, grads, metrics, out, truncated


# ==================================================================================================
# The batch is what test_verl_losses_cov.py's docstring says
# ==================================================================================================


def test_batch_facts():
    assert clip_cov_candidates(0.3, 3.0) == BATCH_FACTS["clip_cov_candidates"]
    cov = cov_of(EPS)
    assert 3.0 < cov[(1, 1)] and 0.3 < cov[(3, 1)] < 3.0 and ppo_terms(3, 1)[2] > ppo_terms(3, 1)[1]
    assert kl_cov_closed_form(0.25, 0.1)[3] == BATCH_FACTS["kl_cov_top2"]
    assert dppo_closed_form("tv", 0.05, 0.05, 1.3)[3] == BATCH_FACTS["tv_out"]
    assert dppo_closed_form("kl", 0.008, 0.05, 1.3)[3] == BATCH_FACTS["kl_out"]
    assert dppo_closed_form("kl", 0.008, 0.05, 1.3)[4] == BATCH_FACTS["truncated"]


# ==================================================================================================
# DPPO
# ==================================================================================================

DPPO_CASES = [
    ("dppo_tv", "tv", {"clip_range_low": 0.05, "clip_range_high": 0.05, "clip_ratio_c": 1.3}),
    ("dppo_tv", "tv", {"clip_range": 0.05, "clip_ratio_c": 1.3}),
    ("dppo_kl", "kl", {"clip_range_low": 0.008, "clip_range_high": 0.05, "clip_ratio_c": 1.3}),
    ("dppo_kl", "kl", {"clip_range": 0.2}),  # verl's defaults: nothing outside, nothing truncated (c = 3)
]


@pytest.mark.parametrize(("name", "kind", "kwargs"), DPPO_CASES)
@pytest.mark.parametrize("weighted", [None, "token", "row"])
def test_dppo_closed_form(name, kind, kwargs, weighted):
    low = kwargs.get("clip_range_low", kwargs.get("clip_range"))
    high = kwargs.get("clip_range_high", kwargs.get("clip_range"))
    c = kwargs.get("clip_ratio_c", 3.0)
    weights = None
    if weighted == "token":
        weights = torch.linspace(0.5, 2.0, 16, dtype=D).reshape(4, 4)
        weights[2] = NAN  # masked: ignored
    elif weighted == "row":
        weights = torch.tensor([[0.5], [2.0], [NAN], [1.5]], dtype=D)
    loss, grad, metrics = run(name, weights, **kwargs)
    losses, grads, expected, _, _ = dppo_closed_form(kind, low, high, c, weights)
    assert loss.item() == pytest.approx(sum(losses.values()) / (N + EPS), rel=1e-12)
    torch.testing.assert_close(grad, grad_tensor({k: v / (N + EPS) for k, v in grads.items()}), rtol=1e-12, atol=0)
    assert metrics == pytest.approx({**expected, "pg_loss": loss.item()}, rel=1e-12)


def test_dppo_by_hand():
    """One token, A = 1, lp = log 0.5, old = log 0.25: r = 2, TV step p − p_old = 0.25."""
    lp = torch.tensor([[math.log(0.5)]], dtype=D, requires_grad=True)
    common = {
        "old_logprob": torch.tensor([[math.log(0.25)]], dtype=D),
        "action_mask": torch.ones(1, 1, dtype=torch.bool),
        "advantages": torch.tensor([[1.0]], dtype=D),
    }
    # inside (δ_high = 0.3): L = −1·min(2, 1.5)·log 0.5, gradient −1.5; the ratio is truncated
    loss, metrics = get_policy_loss("dppo_tv", clip_range=0.3, clip_ratio_c=1.5)(logprob=lp, **common)
    (grad,) = torch.autograd.grad(loss, lp)
    assert loss.item() == pytest.approx(-1.5 * math.log(0.5))
    assert grad.item() == pytest.approx(-1.5)
    assert metrics["pg_clipfrac"].item() == 0.0 and metrics["pg_clipfrac_lower"].item() == pytest.approx(1.0)
    # outside (δ_high = 0.2 < 0.25): no loss, no gradient
    loss, metrics = get_policy_loss("dppo_tv", clip_range=0.2)(logprob=lp, **common)
    assert loss.item() == 0.0 and torch.autograd.grad(loss, lp)[0].item() == 0.0
    assert metrics["pg_clipfrac"].item() == pytest.approx(1.0)
    # KL: p_old·log(p_old/p) + (1 − p_old)·log((1 − p_old)/(1 − p)) = 0.25·log 0.5 + 0.75·log 1.5 ≈ 0.1308
    kl = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    for threshold, inside in ((kl + 1e-3, True), (kl - 1e-3, False)):
        loss, _ = get_policy_loss("dppo_kl", clip_range=threshold, clip_ratio_c=3.0)(logprob=lp, **common)
        assert loss.item() == pytest.approx(-2.0 * math.log(0.5) if inside else 0.0)
    # p fell (p ≤ p_old): inside for A > 0 whatever the divergence
    fell = {**common, "old_logprob": torch.zeros(1, 1, dtype=D)}
    loss, _ = get_policy_loss("dppo_kl", clip_range=0.0)(logprob=lp, **fell)
    assert loss.item() == pytest.approx(-0.5 * math.log(0.5))


@pytest.mark.parametrize("name", ["dppo_tv", "dppo_kl"])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("splits", [[1, 3], [2, 2], [1, 1, 1, 1]])
def test_dppo_window_shares_sum_to_the_whole_batch(name, mode, splits):
    """With the window's counts, the micro-batch shares add up to the whole batch's loss and gradient."""
    fn = get_policy_loss(name, clip_range=0.05, clip_ratio_c=1.3, loss_agg_mode=mode)
    logprob, old, mask, adv = tensors()
    weights = torch.linspace(0.5, 2.0, 4, dtype=D).reshape(4, 1)
    whole, _ = fn(logprob=logprob, old_logprob=old, action_mask=mask, advantages=adv, importance_sampling_ratio=weights)
    (grad_whole,) = torch.autograd.grad(whole, logprob)
    window = {"global_valid_toks": mask.sum(), "global_valid_seqs": 4}
    total, start = 0.0, 0
    for size in splits:
        rows = slice(start, start + size)
        share, _ = fn(
            logprob=logprob[rows], old_logprob=old[rows], action_mask=mask[rows], advantages=adv[rows],
            importance_sampling_ratio=weights[rows], **window,
        )  # fmt: skip
        total, start = total + share, start + size
    (grad_total,) = torch.autograd.grad(total, logprob)
    torch.testing.assert_close(total, whole.detach(), rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(grad_total, grad_whole, rtol=1e-12, atol=1e-15)
    # and the whole batch under token-mean is the closed form's Σ / (n + ε)
    if mode == "token-mean":
        losses, _, _, _, _ = dppo_closed_form(name[-2:], 0.05, 0.05, 1.3, weights)
        assert whole.item() == pytest.approx(sum(losses.values()) / (N + EPS), rel=1e-12)


@pytest.mark.parametrize("name", ["dppo_tv", "dppo_kl"])
def test_dppo_clip_ratio_c_must_exceed_one(name):
    """c truncates the importance ratio: c <= 1 would cap every ratio above 1 (and, below 1, r = 1 itself), so it is
    refused naming the rule, in the loss and in the algorithm's config, as PPO's dual-clip c; c = 1.5 is accepted."""
    for c in (1.0, 0.5):
        with pytest.raises(ValueError, match=rf"^{name}: clip_ratio_c={c!r} is not valid; must be > 1$"):
            get_policy_loss(name, clip_ratio_c=c)
    assert get_policy_loss(name, clip_ratio_c=1.5).clip_ratio_c == 1.5
    config_class = {"dppo_tv": trl_ext.DPPOTVConfig, "dppo_kl": trl_ext.DPPOKLConfig}[name]
    with pytest.raises(ValueError, match=rf"^{config_class.__name__}\b.*clip_ratio_c=0\.5 is not valid; must be > 1$"):
        config_class(output_dir="/tmp/trl_ext_unused", **CPU, clip_ratio_c=0.5)
    config = config_class(output_dir="/tmp/trl_ext_unused", **CPU, clip_ratio_c=1.5)
    assert config.components.policy_loss.clip_ratio_c == 1.5
