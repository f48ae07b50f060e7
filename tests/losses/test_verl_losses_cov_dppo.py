"""Clip-Cov / KL-Cov (`trl_ext.losses.cov`) and DPPO-Binary-TV / -KL (`trl_ext.losses.dppo`), ported from verl 0.9.1,
against closed forms written out token by token here (plain Python floats, float64 tensors), and their verl-compat
entry points (`trl_ext.compat.verl`). benchmarks/compare_verl.py compares them with verl's own code.

The batch: 4 rows of 4 tokens, row 2 empty, NaN at every masked position. Its numbers are chosen so that each test
knows which tokens are selected (see `BATCH_FACTS`): Clip-Cov's candidates with lb = 0.3, ub = 3 are (0, 0) and
(3, 0) — (1, 1) lies above ub, (3, 1) is in the range but clipped by PPO; KL-Cov's top two covariances are (1, 1) and
(0, 0); DPPO-TV (δ = 0.05) leaves out (0, 0), (0, 1) (A = 0 takes the A ≤ 0 test) and (1, 0); DPPO-KL (δ_low =
0.008, δ_high = 0.05) leaves out (0, 1), (1, 0) and (3, 1); with c = 1.3, (0, 3) and (1, 1) are truncated.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from trainer_helpers import CPU

import trl_ext
from trl_ext.compat import verl
from trl_ext.losses import LOSS_AGG_MODES, get_policy_loss
from trl_ext.losses.cov import ClipCovPolicyLoss

D = torch.float64
NAN = math.nan
EPS = 1e-8

MASK = [[1, 1, 1, 1], [1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0]]
LP = [[-0.2, -1.5, -0.7, -2.5], [-0.4, -3.0, -1.0, NAN], [NAN] * 4, [-0.1, -2.0, NAN, NAN]]
DELTA = [[0.1, -0.5, 0.05, 0.3], [-0.1, 0.4, -0.05, 0.0], [0.0] * 4, [0.0, -0.3, 0.0, 0.0]]  # lp − old
ADV = [[2.0, 0.0, -1.0, 1.0], [-2.0, -2.0, 0.5, NAN], [NAN] * 4, [1.5, -0.5, NAN, NAN]]
VALID = [(i, t) for i in range(4) for t in range(4) if MASK[i][t]]
N = len(VALID)  # 9

BATCH_FACTS = {
    "clip_cov_candidates": [(0, 0), (3, 0)],  # lb = 0.3, ub = 3.0, ε = 0.2
    "kl_cov_top2": [(1, 1), (0, 0)],
    "tv_out": {(0, 0), (0, 1), (1, 0)},  # δ_low = δ_high = 0.05
    "kl_out": {(0, 1), (1, 0), (3, 1)},  # δ_low = 0.008, δ_high = 0.05
    "truncated": {(0, 3), (1, 1)},  # r > 1.3
}


def old_of(i, t):
    return LP[i][t] - DELTA[i][t]


def tensors(lp=LP, adv=ADV):
    """(logprob leaf, old_logprob, bool mask, advantages) as float64 tensors."""
    logprob = torch.tensor(lp, dtype=D, requires_grad=True)
    old = torch.tensor([[lp[i][t] - DELTA[i][t] for t in range(4)] for i in range(4)], dtype=D)
    return logprob, old, torch.tensor(MASK, dtype=torch.bool), torch.tensor(adv, dtype=D)


def run(name, weights=None, lp=LP, adv=ADV, **kwargs):
    """Loss, gradient wrt logprob and metrics (floats) of trl_ext's `name`."""
    logprob, old, mask, advantages = tensors(lp, adv)
    extra = {} if weights is None else {"importance_sampling_ratio": weights}
    loss, metrics = get_policy_loss(name, **kwargs)(
        logprob=logprob, old_logprob=old, action_mask=mask, advantages=advantages, **extra
    )
    (grad,) = torch.autograd.grad(loss, logprob)
    return loss, grad, {k: v.item() for k, v in metrics.items()}


def grad_tensor(per_token_grad: dict) -> torch.Tensor:
    g = torch.zeros(4, 4, dtype=D)
    for (i, t), value in per_token_grad.items():
        g[i, t] = value
    return g


def weight_of(weights, i, t):
    if weights is None:
        return 1.0
    return float(weights[i, t] if weights.shape[1] > 1 else weights[i, 0])


# ==================================================================================================
# Closed forms (plain Python, token by token)
# ==================================================================================================


def cov_of(centre_eps: float) -> dict:
    """(A − mean A)·(lp − mean lp) over the valid tokens; means Σ / (n + centre_eps)."""
    mean_a = sum(ADV[i][t] for i, t in VALID) / (N + centre_eps)
    mean_lp = sum(LP[i][t] for i, t in VALID) / (N + centre_eps)
    return {(i, t): (ADV[i][t] - mean_a) * (LP[i][t] - mean_lp) for i, t in VALID}


def ppo_terms(i, t, low=0.2, high=0.2):
    r = math.exp(DELTA[i][t])
    unclipped, clipped = -ADV[i][t] * r, -ADV[i][t] * min(max(r, 1 - low), 1 + high)
    return r, unclipped, clipped


def clip_cov_candidates(lb, ub):
    cov = cov_of(EPS)
    return [(i, t) for i, t in VALID if not ppo_terms(i, t)[2] > ppo_terms(i, t)[1] and lb < cov[(i, t)] < ub]


def clip_cov_closed_form(dropped, weights=None):
    """Σ w·max(L1, L2)·(1 − D) / (n + ε), its gradient and the metrics, for the `dropped` tokens."""
    loss, grad = 0.0, {}
    for i, t in VALID:
        r, unclipped, clipped = ppo_terms(i, t)
        w = weight_of(weights, i, t)
        if (i, t) in dropped:
            continue
        loss += w * max(unclipped, clipped)
        grad[(i, t)] = 0.0 if clipped > unclipped else -ADV[i][t] * r * w
    metrics = {"pg_clipfrac": len(dropped) / (N + EPS), "ppo_kl": -sum(DELTA[i][t] for i, t in VALID) / (N + EPS)}
    return loss / (N + EPS), grad_tensor({k: v / (N + EPS) for k, v in grad.items()}), metrics


def kl_cov_closed_form(kappa, beta, weights=None):
    cov = cov_of(0.0)  # KL-Cov centres with plain means
    k = max(1, math.floor(N * kappa))
    top = sorted(VALID, key=lambda pos: -cov[pos])[:k]
    loss, grad = 0.0, {}
    for i, t in VALID:
        r, w, d = math.exp(DELTA[i][t]), weight_of(weights, i, t), DELTA[i][t]
        penalty = beta * abs(d) if (i, t) in top else 0.0
        loss += w * (-ADV[i][t] * r + penalty)
        grad[(i, t)] = w * (-ADV[i][t] * r + (beta * math.copysign(1.0, d) * (d != 0) if (i, t) in top else 0.0))
    metrics = {"ppo_kl_abs": sum(abs(DELTA[i][t]) for i, t in VALID) / (N + EPS), "kl_cov_frac": k / (N + EPS)}
    return loss / (N + EPS), grad_tensor({k: v / (N + EPS) for k, v in grad.items()}), metrics, top


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
# The batch is what the docstring says
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


# ==================================================================================================
# Clip-Cov
# ==================================================================================================


def test_clip_cov_every_candidate_dropped():
    """clip_cov_ratio = 1: k = n ≥ |C|, so exactly the candidates are dropped (no chance involved)."""
    loss, grad, metrics = run("clip_cov", clip_cov_ratio=1.0, clip_cov_lb=0.3, clip_cov_ub=3.0)
    expected, expected_grad, expected_metrics = clip_cov_closed_form(BATCH_FACTS["clip_cov_candidates"])
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=0)
    assert metrics == pytest.approx({**expected_metrics, "pg_loss": loss.item()}, rel=1e-12)
    assert grad[0, 0] == 0 and grad[3, 0] == 0  # dropped
    assert grad[1, 1] != 0  # above ub: kept
    assert grad[3, 1] == 0 and grad[0, 3] == 0  # clipped by PPO (no gradient either way)


def test_clip_cov_a_dropped_overflowing_token_is_nan_as_verls():
    """verl multiplies the loss by (1 − D): a dropped token whose ratio overflows (A < 0, e^Δ = inf: loss +inf) gives
    inf·0 = NaN, not 0 (which a where() would give); the same token kept gives +inf."""
    logprob = torch.tensor([[-0.5, -0.6, -0.7]], requires_grad=True)
    old = torch.tensor([[-100.5, -0.6, -0.7]])  # Δ = 100: e^Δ overflows in float32
    mask = torch.ones(1, 3, dtype=torch.bool)
    adv = torch.tensor([-1.0])
    every = {"clip_cov_lb": -1e9, "clip_cov_ub": 1e9}  # cov = 0 (one row): every unclipped token is a candidate
    dropped, _ = get_policy_loss("clip_cov", clip_cov_ratio=1.0, **every)(
        logprob=logprob, old_logprob=old, action_mask=mask, advantages=adv
    )
    assert dropped.isnan()
    kept, _ = get_policy_loss("clip_cov", clip_cov_ratio=1.0, clip_cov_lb=10.0, clip_cov_ub=20.0)(
        logprob=logprob, old_logprob=old, action_mask=mask, advantages=adv
    )
    assert kept == math.inf


def test_clip_cov_no_candidate_is_plain_ppo_without_dual_clip():
    loss, grad, metrics = run("clip_cov", clip_cov_lb=10.0, clip_cov_ub=20.0)
    expected, expected_grad, _ = clip_cov_closed_form([])
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=0)
    assert metrics["pg_clipfrac"] == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_clip_cov_random_draw_is_verls(seed):
    """k = max(⌊0.12·9⌋, 1) = 1 of the 2 candidates, drawn as verl does: `torch.randperm(|C|)` on the global CPU
    generator, the first k of the permutation index the candidates in row-major order."""
    torch.manual_seed(seed)
    chosen = [BATCH_FACTS["clip_cov_candidates"][j] for j in torch.randperm(2)[:1].tolist()]
    torch.manual_seed(seed)
    loss, grad, metrics = run("clip_cov", clip_cov_ratio=0.12, clip_cov_lb=0.3, clip_cov_ub=3.0)
    expected, expected_grad, expected_metrics = clip_cov_closed_form(chosen)
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=0)
    assert metrics == pytest.approx({**expected_metrics, "pg_loss": loss.item()}, rel=1e-12)
    assert metrics["pg_clipfrac"] == pytest.approx(1 / N)


def test_clip_cov_draws_k_of_the_candidates_in_row_major_order():
    """The batch twice (8 rows, n = 18; the same means, so the same covariances): 4 candidates, (0, 0), (3, 0),
    (4, 0), (7, 0) in row-major order, and k = ⌊0.2·18⌋ = 3 of them dropped: all but the one at position perm[3] of
    verl's `torch.randperm(4)`."""
    logprob = torch.tensor([row for _ in range(2) for row in LP], dtype=D)
    old = logprob - torch.tensor([row for _ in range(2) for row in DELTA], dtype=D)
    mask = torch.tensor([row for _ in range(2) for row in MASK], dtype=torch.bool)
    adv = torch.tensor([row for _ in range(2) for row in ADV], dtype=D)
    candidates = sorted((i + 4 * copy, t) for copy in range(2) for i, t in BATCH_FACTS["clip_cov_candidates"])
    fn = get_policy_loss("clip_cov", clip_cov_ratio=0.2, clip_cov_lb=0.3, clip_cov_ub=3.0)
    seen = set()
    for seed in range(8):
        torch.manual_seed(seed)
        kept = candidates[torch.randperm(4)[3]]
        torch.manual_seed(seed)
        lp_leaf = logprob.clone().requires_grad_(True)
        loss, metrics = fn(logprob=lp_leaf, old_logprob=old, action_mask=mask, advantages=adv)
        (grad,) = torch.autograd.grad(loss, lp_leaf)
        dropped = {pos for pos in candidates if grad[pos] == 0}
        assert dropped == set(candidates) - {kept}
        assert metrics["pg_clipfrac"].item() == pytest.approx(3 / (2 * N))
        seen.add(kept)
    assert len(seen) > 1  # the draw does decide


def test_clip_cov_selection_seed():
    """`selection_seed`: the loss's own generator (the global one untouched); its draws are the global generator's
    right after `torch.manual_seed(selection_seed)`, one after the other over calls."""
    kwargs = {"clip_cov_ratio": 0.12, "clip_cov_lb": 0.3, "clip_cov_ub": 3.0}
    fn_global = get_policy_loss("clip_cov", **kwargs)
    logprob, old, mask, adv = tensors()
    batch = {"logprob": logprob, "old_logprob": old, "action_mask": mask, "advantages": adv}
    torch.manual_seed(123)
    global_losses = [fn_global(**batch)[0].item() for _ in range(6)]
    fn = get_policy_loss("clip_cov", selection_seed=123, **kwargs)
    state = torch.random.get_rng_state()
    seeded = [fn(**batch)[0].item() for _ in range(6)]
    assert torch.equal(torch.random.get_rng_state(), state)
    assert seeded == global_losses
    assert len(set(seeded)) == 2  # both candidates drawn over the calls
    again = get_policy_loss("clip_cov", selection_seed=123, **kwargs)
    assert [again(**batch)[0].item() for _ in range(6)] == seeded


def test_clip_cov_syncs_once(monkeypatch):
    """The draw needs |C| on the host: one `nonzero` (its result's size is the sync), no other host read."""
    calls = []
    original = torch.Tensor.nonzero

    def counting(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    def refuse(self, *args, **kwargs):
        raise AssertionError("device sync")

    monkeypatch.setattr(torch.Tensor, "nonzero", counting)
    for method in ("__bool__", "item", "__int__", "__float__", "tolist"):
        monkeypatch.setattr(torch.Tensor, method, refuse)
    logprob, old, mask, adv = tensors()
    loss, _ = get_policy_loss("clip_cov", clip_cov_ratio=0.12, clip_cov_lb=0.3, clip_cov_ub=3.0)(
        logprob=logprob, old_logprob=old, action_mask=mask, advantages=adv
    )
    loss.backward()
    assert len(calls) == 1
    calls.clear()
    for name in ("kl_cov", "dppo_tv", "dppo_kl"):  # no sync at all
        get_policy_loss(name)(logprob=logprob, old_logprob=old, action_mask=mask, advantages=adv)[0].backward()
    assert not calls


def verl_masked_mean(values, mask):
    """verl's `masked_mean` as written there (verl.utils.torch_functional), dtypes included."""
    return (torch.where(mask.bool(), values, 0.0) * mask).sum() / (mask.sum() + 1e-8)


def verl_clip_cov_covariance(log_prob, advantages, mask):
    """verl's `cov_all` of `compute_policy_loss_clip_cov`, on `[B, T]` advantages."""
    return (advantages - verl_masked_mean(advantages, mask)) * (log_prob - verl_masked_mean(log_prob.detach(), mask))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("adv_shape", ["per-sequence", "per-token"])
def test_clip_cov_equal_advantages_centre_to_zero_as_verls(dtype, adv_shape):
    """A − mean A is exactly 0 for equal advantages with a bool mask, as in verl (its count n + 1e-8 is float32, n):
    cov = 0 is no candidate at lb = 0 (cov > lb), so nothing is dropped. With the count in float64, n + 1e-8 made
    A − mean A ≈ 3.5e-9, the second token a candidate and the loss −0.3329 (pg_clipfrac 0.5)."""
    logprob = torch.tensor([[-1.3, -0.2]], dtype=dtype, requires_grad=True)
    old = torch.tensor([[-1.25, -0.21]], dtype=dtype)
    adv = torch.tensor([0.7], dtype=dtype) if adv_shape == "per-sequence" else torch.full((1, 2), 0.7, dtype=dtype)
    fn = get_policy_loss(
        "clip_cov", clip_cov_ratio=1.0, clip_cov_lb=0.0, clip_cov_ub=10.0, clip_range_low=0.2, clip_range_high=0.28
    )
    loss, metrics = fn(logprob=logprob, old_logprob=old, action_mask=torch.ones(1, 2, dtype=torch.bool), advantages=adv)
    # neither token clipped by PPO (r = e^−0.05, e^0.01) nor dropped: −A·mean(r)
    assert loss.item() == pytest.approx(-0.7 * (math.exp(-0.05) + math.exp(0.01)) / 2, abs=1e-6)
    assert loss.item() == pytest.approx(-0.6864, abs=1e-4)
    assert metrics["pg_clipfrac"].item() == 0.0
    (grad,) = torch.autograd.grad(loss, logprob)
    assert (grad != 0).all()  # no token dropped


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.int64, torch.float32, torch.float64], ids=str)
def test_clip_cov_covariance_is_verls_to_the_bit(monkeypatch, dtype, mask_dtype):
    """The cov that Clip-Cov's candidates are chosen by equals verl's `cov_all` exactly at every valid token (the
    means' dtypes follow the mask's as in verl's `masked_mean`), per-sequence or per-token advantages alike."""
    seen = []
    per_token_loss = ClipCovPolicyLoss.per_token_loss

    def capturing(self, b, delta, adv, cov, metrics):
        seen.append(cov.clone())
        return per_token_loss(self, b, delta, adv, cov, metrics)

    monkeypatch.setattr(ClipCovPolicyLoss, "per_token_loss", capturing)
    g = torch.Generator().manual_seed(0)
    logprob = (-torch.rand(5, 7, generator=g, dtype=torch.float64) * 3).to(dtype)
    old = logprob - 0.01
    mask = torch.rand(5, 7, generator=g) < 0.7
    mask[2] = False
    rows = torch.randn(5, 1, generator=g, dtype=torch.float64).to(dtype)
    fn = get_policy_loss("clip_cov", clip_cov_ratio=0.5, clip_cov_lb=-1.0, clip_cov_ub=1.0)
    for adv in (rows.squeeze(-1), rows.expand(5, 7).clone()):
        seen.clear()
        fn(logprob=logprob, old_logprob=old, action_mask=mask.to(mask_dtype), advantages=adv)
        expected = verl_clip_cov_covariance(logprob, rows.expand(5, 7), mask.to(mask_dtype))
        assert seen[0].dtype == expected.dtype
        assert torch.equal(seen[0][mask], expected[mask])


# ==================================================================================================
# KL-Cov
# ==================================================================================================


@pytest.mark.parametrize(("kappa", "beta", "k"), [(0.25, 0.1, 2), (0.0002, 1.0, 1), (1.0, 0.5, 9), (0.5, 0.0, 4)])
@pytest.mark.parametrize("weighted", [False, True])
def test_kl_cov_closed_form(kappa, beta, k, weighted):
    weights = None
    if weighted:  # large weights: folded into A they would change the covariance ranking; here they do not
        weights = torch.tensor([[1.0, 50.0, 1.0, 1.0], [0.1, 0.01, 3.0, NAN], [NAN] * 4, [9.0, 2.0, NAN, NAN]], dtype=D)
    loss, grad, metrics = run("kl_cov", weights, kl_cov_ratio=kappa, ppo_kl_coef=beta)
    expected, expected_grad, expected_metrics, top = kl_cov_closed_form(kappa, beta, weights)
    assert len(top) == k
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=0)
    assert metrics == pytest.approx({**expected_metrics, "pg_loss": loss.item()}, rel=1e-12)


def test_kl_cov_ties_go_to_the_earlier_position():
    """Constant advantages: every covariance is 0; the k = 2 penalized tokens are the first two valid ones."""
    adv = [[1.0 if MASK[i][t] else NAN for t in range(4)] for i in range(4)]
    _, grad, metrics = run("kl_cov", adv=adv, kl_cov_ratio=0.25, ppo_kl_coef=1.0)
    _, plain, _ = run("kl_cov", adv=adv, kl_cov_ratio=0.25, ppo_kl_coef=0.0)
    penalized = {(i, t) for i, t in VALID if grad[i, t] != plain[i, t]}
    assert penalized == {(0, 0), (0, 1)}
    assert metrics["kl_cov_frac"] == pytest.approx(2 / N)


def test_kl_cov_selects_within_the_micro_batch():
    """Window counts change the normalization only: a micro-batch selects among its own tokens."""
    logprob, old, mask, adv = tensors()
    fn = get_policy_loss("kl_cov", kl_cov_ratio=0.5, ppo_kl_coef=1.0)
    rows = slice(0, 2)  # 7 valid tokens: k = 3
    local, _ = fn(logprob=logprob[rows], old_logprob=old[rows], action_mask=mask[rows], advantages=adv[rows])
    share, metrics = fn(
        logprob=logprob[rows], old_logprob=old[rows], action_mask=mask[rows], advantages=adv[rows],
        global_valid_toks=20,
    )  # fmt: skip
    torch.testing.assert_close(share, local * (7 + EPS) / (20 + EPS), rtol=1e-12, atol=0)
    assert metrics["kl_cov_frac"].item() == pytest.approx(3 / 7)


# ==================================================================================================
# Input rules: empty batch, NaN, importance_sampling_ratio, arguments
# ==================================================================================================

NAMES = ["clip_cov", "kl_cov", "dppo_tv", "dppo_kl"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (0, 0)])
def test_empty_batch_gives_a_finite_zero(name, mode, shape):
    lp = torch.zeros(shape, dtype=D, requires_grad=True)
    loss, metrics = get_policy_loss(name, loss_agg_mode=mode)(
        logprob=lp, old_logprob=torch.zeros(shape, dtype=D), action_mask=torch.ones(shape, dtype=torch.bool),
        advantages=torch.zeros(shape[0], dtype=D), importance_sampling_ratio=torch.ones(shape[0], 1, dtype=D),
    )  # fmt: skip
    assert loss.item() == 0.0
    loss.backward()
    assert torch.count_nonzero(lp.grad) == 0
    assert all(torch.isfinite(v) and v.item() == 0.0 for v in metrics.values())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("key", ["logprob", "old_logprob", "advantages", "importance_sampling_ratio"])
@pytest.mark.parametrize("fill", [NAN, math.inf, -math.inf])
def test_non_finite_at_a_valid_position_gives_nan(name, key, fill):
    logprob, old, mask, adv = tensors()
    batch = {
        "logprob": logprob.detach().clone(), "old_logprob": old, "action_mask": mask, "advantages": adv.clone(),
        "importance_sampling_ratio": torch.ones(4, 4, dtype=D),
    }  # fmt: skip
    batch[key][1, 2] = fill
    loss, _ = get_policy_loss(name)(**batch)
    assert torch.isnan(loss)


@pytest.mark.parametrize("name", NAMES)
def test_non_finite_at_masked_positions_changes_nothing(name):
    kwargs = {"clip_cov_ratio": 1.0, "clip_cov_lb": 0.0} if name == "clip_cov" else {}
    clean_lp = [[0.0 if math.isnan(x) else x for x in row] for row in LP]
    clean_adv = [[0.0 if math.isnan(x) else x for x in row] for row in ADV]
    weights = torch.full((4, 4), 1.5, dtype=D)
    dirty_weights = weights.clone()
    dirty_weights[~torch.tensor(MASK, dtype=torch.bool)] = math.inf
    loss, grad, metrics = run(name, dirty_weights, **kwargs)
    clean_loss, clean_grad, clean_metrics = run(name, weights, lp=clean_lp, adv=clean_adv, **kwargs)
    assert torch.isfinite(loss) and loss.item() == clean_loss.item()
    assert torch.equal(grad, clean_grad) and torch.isfinite(grad).all()
    assert metrics == clean_metrics


@pytest.mark.parametrize("name", NAMES)
def test_importance_sampling_ratio_shapes(name):
    logprob, old, mask, adv = tensors()
    fn = get_policy_loss(name)
    batch = {"logprob": logprob, "old_logprob": old, "action_mask": mask, "advantages": adv}
    with pytest.raises(ValueError, match="importance_sampling_ratio"):
        fn(**batch, importance_sampling_ratio=torch.ones(4, dtype=D))  # [B]: ambiguous, refused
    with pytest.raises(ValueError, match="importance_sampling_ratio"):
        fn(**batch, importance_sampling_ratio=torch.ones(4, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="importance_sampling_ratio"):
        fn(**batch, importance_sampling_ratio=torch.ones(4, 3, dtype=D))
    torch.manual_seed(0)  # clip_cov: the same draw for both calls
    ones, _ = fn(**batch, importance_sampling_ratio=torch.ones(4, 1, dtype=D))
    torch.manual_seed(0)
    none, _ = fn(**batch)
    assert torch.equal(ones, none)


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("clip_cov", {"clip_cov_ratio": -0.1}, r"^clip_cov: clip_cov_ratio=-0\.1 is not valid; must be in \(0, 1\]$"),
        ("clip_cov", {"clip_cov_ratio": 1.5}, r"^clip_cov: clip_cov_ratio=1\.5 is not valid"),
        ("clip_cov", {"clip_cov_lb": 5.5}, r"^clip_cov: clip_cov_lb=5\.5 is not valid; must be <= clip_cov_ub=5\.0$"),
        ("clip_cov", {"clip_cov_ub": 0.5}, r"^clip_cov: clip_cov_lb=1\.0 is not valid; must be <= clip_cov_ub=0\.5$"),
        ("clip_cov", {"clip_range": -0.2}, r"^clip_cov: clip_range=-0\.2 is not valid"),
        ("clip_cov", {"clip_range_low": -0.2}, r"^clip_cov: clip_range_low=-0\.2 is not valid"),
        ("clip_cov", {"selection_seed": 1.5}, r"^clip_cov: selection_seed=1\.5 is not valid"),
        ("kl_cov", {"kl_cov_ratio": 0.0}, r"^kl_cov: kl_cov_ratio=0\.0 is not valid; must be in \(0, 1\]$"),
        ("kl_cov", {"ppo_kl_coef": -1.0}, r"^kl_cov: ppo_kl_coef=-1\.0 is not valid; must be >= 0$"),
        ("kl_cov", {"loss_agg_mode": "mean"}, r"^kl_cov: loss_agg_mode='mean' is not valid"),
        ("dppo_tv", {"clip_range": -0.1}, r"^dppo_tv: clip_range=-0\.1 is not valid; must be >= 0"),
        ("dppo_tv", {"clip_range_high": -0.1}, r"^dppo_tv: clip_range_high=-0\.1 is not valid; must be >= 0"),
        ("dppo_kl", {"clip_range_low": -0.1}, r"^dppo_kl: clip_range_low=-0\.1 is not valid; must be >= 0"),
        ("dppo_kl", {"clip_ratio_c": -1.0}, r"^dppo_kl: clip_ratio_c=-1\.0 is not valid; must be > 1$"),
        ("dppo_tv", {"clip_ratio_c": 1.0}, r"^dppo_tv: clip_ratio_c=1\.0 is not valid; must be > 1$"),
        ("dppo_kl", {"clip_ratio_c": 0.5}, r"^dppo_kl: clip_ratio_c=0\.5 is not valid; must be > 1$"),
        ("dppo_kl", {"clip_range": None}, r"^dppo_kl: no clip range given"),
    ],
)
def test_bad_arguments_are_refused_naming_them(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_policy_loss(name, **kwargs)


def test_defaults_are_verls_effective_ones():
    assert get_policy_loss("clip_cov").args == {
        "clip_range": 0.2, "clip_range_low": 0.2, "clip_range_high": 0.2, "clip_cov_ratio": 0.0002,
        "clip_cov_lb": 1.0, "clip_cov_ub": 5.0, "selection_seed": None, "loss_agg_mode": "token-mean",
    }  # fmt: skip
    assert get_policy_loss("kl_cov").args == {"kl_cov_ratio": 0.0002, "ppo_kl_coef": 0.1, "loss_agg_mode": "token-mean"}
    for name in ("dppo_tv", "dppo_kl"):
        assert get_policy_loss(name).args == {
            "clip_range": 0.2, "clip_range_low": 0.2, "clip_range_high": 0.2, "clip_ratio_c": 3.0,
            "loss_agg_mode": "token-mean",
        }  # fmt: skip
        assert "divergence threshold" in type(get_policy_loss(name)).argument("clip_range").help


# ==================================================================================================
# verl compat
# ==================================================================================================

INFO = {"dp_size": 2, "batch_num_tokens": 20, "global_batch_size": 6, "loss_scale_factor": 7}
ROW_TOKENS = [sum(row) for row in MASK]


def agg_weight(mode, i, info):
    """verl's agg_loss weight of a token of row i (written out per mode)."""
    dp = info.get("dp_size", 1)
    n_tok = info.get("batch_num_tokens", N)
    n_seq = info.get("global_batch_size", sum(1 for n in ROW_TOKENS if n))
    return {
        "token-mean": dp / n_tok,
        "token-sum": dp,
        "seq-mean-token-sum": dp / n_seq,
        "seq-mean-token-mean": dp / n_seq / (ROW_TOKENS[i] + 1e-8),
        "seq-mean-token-sum-norm": dp / n_seq / info.get("loss_scale_factor", 4),
    }[mode]


def verl_config(name, info, as_object=False, **overrides):
    policy_loss = {"clip_cov_ratio": 1.0, "clip_cov_lb": 0.3, "clip_cov_ub": 3.0, "kl_cov_ratio": 0.25}
    policy_loss["ppo_kl_coef"] = 0.5
    cfg = {"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": None, "clip_ratio_c": 1.3}
    if name == "dppo_kl":
        cfg.update(clip_ratio_low=0.008, clip_ratio_high=0.05)
    elif name == "dppo_tv":
        cfg.update(clip_ratio=0.05)
    cfg.update({"policy_loss": policy_loss, "global_batch_info": dict(info), **overrides})
    if as_object:
        cfg["policy_loss"] = SimpleNamespace(**cfg["policy_loss"])
        return SimpleNamespace(**cfg)
    return cfg


def closed_form_tokens(name, weights):
    """Per-token (loss, dloss/dlp) of the batch under `verl_config(name)`, times `weights`."""
    if name == "clip_cov":
        dropped = BATCH_FACTS["clip_cov_candidates"]
        out = {}
        for i, t in VALID:
            r, unclipped, clipped = ppo_terms(i, t)
            keep = (i, t) not in dropped
            out[(i, t)] = (max(unclipped, clipped) * keep, (0.0 if clipped > unclipped else -ADV[i][t] * r) * keep)
    elif name == "kl_cov":
        top = BATCH_FACTS["kl_cov_top2"]
        out = {}
        for i, t in VALID:
            r, d = math.exp(DELTA[i][t]), DELTA[i][t]
            penalty = (i, t) in top
            out[(i, t)] = (
                -ADV[i][t] * r + 0.5 * abs(d) * penalty,
                -ADV[i][t] * r + 0.5 * math.copysign(1, d) * penalty,
            )
    else:
        low, high = (0.008, 0.05) if name == "dppo_kl" else (0.05, 0.05)
        losses, grads, _, _, _ = dppo_closed_form(name[-2:], low, high, 1.3)
        out = {pos: (losses[pos], grads[pos]) for pos in VALID}
    return {pos: (value * weights[pos], slope * weights[pos]) for pos, (value, slope) in out.items()}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", verl.AGG_LOSS_MODES)
@pytest.mark.parametrize("info", [{}, INFO], ids=["local", "global"])
@pytest.mark.parametrize("weighted", [False, True])
def test_compat_closed_form(name, mode, info, weighted):
    logprob, old, mask, adv = tensors()
    rollout = torch.tensor([[0.5, 1.5, 2.0, 0.25], [1.0, 3.0, 0.7, NAN], [NAN] * 4, [1.2, 0.9, NAN, NAN]], dtype=D)
    loss, metrics = verl.get_policy_loss_fn(name)(
        old, logprob, adv, mask.to(D), mode, verl_config(name, info), rollout if weighted else None
    )
    (grad,) = torch.autograd.grad(loss, logprob)
    weights = {(i, t): agg_weight(mode, i, info) * (rollout[i, t].item() if weighted else 1.0) for i, t in VALID}
    tokens = closed_form_tokens(name, weights)
    assert loss.item() == pytest.approx(sum(v for v, _ in tokens.values()), rel=1e-10)
    torch.testing.assert_close(grad, grad_tensor({pos: s for pos, (_, s) in tokens.items()}), rtol=1e-10, atol=0)
    ppo_kl = -sum(DELTA[i][t] for i, t in VALID) / (N + EPS)
    expected = {
        "clip_cov": {"actor/pg_clipfrac": 2 / (N + EPS), "actor/ppo_kl": ppo_kl},
        "kl_cov": {"actor/ppo_kl": sum(abs(DELTA[i][t]) for i, t in VALID) / (N + EPS)},
        "dppo_tv": {
            "actor/pg_clipfrac": 3 / (N + EPS),
            "actor/ppo_kl": ppo_kl,
            "actor/pg_clipfrac_lower": 2 / (N + EPS),
        },
        "dppo_kl": {
            "actor/pg_clipfrac": 3 / (N + EPS),
            "actor/ppo_kl": ppo_kl,
            "actor/pg_clipfrac_lower": 2 / (N + EPS),
        },
    }[name]
    assert metrics.keys() == expected.keys() and all(isinstance(v, float) for v in metrics.values())
    assert metrics == pytest.approx(expected, rel=1e-12)


def test_compat_registry_and_config_reading():
    for name in NAMES:
        assert verl.get_policy_loss_fn(name) is getattr(verl, f"compute_policy_loss_{name}")
    logprob, old, mask, adv = tensors()
    args = (old, logprob.detach(), adv, mask.to(D), "token-mean")
    for name in NAMES:  # a config object reads as the mapping does
        assert verl.get_policy_loss_fn(name)(*args, verl_config(name, {}, as_object=True))[0].item() == pytest.approx(
            verl.get_policy_loss_fn(name)(*args, verl_config(name, {}))[0].item(), rel=1e-14
        )
    # policy_loss keys left None fall back to verl's in-function defaults (kl_cov: ratio 0.0002 → k = 1, β = 1.0)
    cfg = verl_config("kl_cov", {}, policy_loss={"kl_cov_ratio": None, "ppo_kl_coef": None})
    loss, _ = verl.compute_policy_loss_kl_cov(*args, cfg)
    assert loss.item() == pytest.approx(kl_cov_closed_form(0.0002, 1.0)[0] * (N + EPS) / N, rel=1e-10)
    cfg = verl_config("clip_cov", {}, policy_loss={"clip_cov_lb": None, "clip_cov_ub": None, "clip_cov_ratio": None})
    candidates = clip_cov_candidates(1.0, 5.0)  # verl's bounds (1, 5): 3 candidates, k = 1
    assert candidates == [(0, 0), (1, 1), (3, 0)]
    torch.manual_seed(5)
    dropped = [candidates[j] for j in torch.randperm(3)[:1].tolist()]
    torch.manual_seed(5)
    loss, metrics = verl.compute_policy_loss_clip_cov(*args, cfg)
    assert loss.item() == pytest.approx(clip_cov_closed_form(dropped)[0] * (N + EPS) / N, rel=1e-10)
    for name in ("clip_cov", "kl_cov"):
        with pytest.raises(ValueError, match=rf"{name}: config.policy_loss is required"):
            verl.get_policy_loss_fn(name)(*args, verl_config(name, {}, policy_loss=None))
        with pytest.raises(ValueError, match="ratio=-1"):
            verl.get_policy_loss_fn(name)(*args, verl_config(name, {}, policy_loss={f"{name}_ratio": -1}))
    # DPPO: clip_ratio_c missing → verl's 20.0 (no truncation here), against 1.3 in the config above
    for name in ("dppo_tv", "dppo_kl"):
        cfg = verl_config(name, {})
        del cfg["clip_ratio_c"]
        loss, metrics = verl.get_policy_loss_fn(name)(*args, cfg)
        low, high = (0.008, 0.05) if name == "dppo_kl" else (0.05, 0.05)
        losses, _, expected, _, _ = dppo_closed_form(name[-2:], low, high, 20.0)
        assert loss.item() == pytest.approx(sum(losses.values()) / N, rel=1e-10)
        assert metrics["actor/pg_clipfrac_lower"] == 0.0
        assert metrics["actor/pg_clipfrac"] == pytest.approx(expected["pg_clipfrac"], rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_compat_clip_cov_draw_follows_the_global_seed(seed):
    """As verl's: `torch.manual_seed` before the call fixes which of the 2 candidates is dropped (k = 1)."""
    logprob, old, mask, adv = tensors()
    cfg = verl_config("clip_cov", {}, policy_loss={"clip_cov_ratio": 0.12, "clip_cov_lb": 0.3, "clip_cov_ub": 3.0})
    torch.manual_seed(seed)
    chosen = [BATCH_FACTS["clip_cov_candidates"][j] for j in torch.randperm(2)[:1].tolist()]
    torch.manual_seed(seed)
    loss, metrics = verl.compute_policy_loss_clip_cov(old, logprob, adv, mask.to(D), "token-mean", cfg)
    assert loss.item() == pytest.approx(clip_cov_closed_form(chosen)[0] * (N + EPS) / N, rel=1e-10)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(1 / N)
