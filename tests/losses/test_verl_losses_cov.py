"""Clip-Cov / KL-Cov (`trl_ext.losses.cov`), ported from verl 0.9.1, against closed forms written out token by token
here (plain Python floats, float64 tensors). benchmarks/compare_verl.py compares them with verl's own code.

The batch, shared with test_verl_losses_dppo.py (DPPO-Binary-TV / -KL), test_verl_losses_cov_dppo_inputs.py and
test_verl_losses_cov_dppo_compat.py: 4 rows of 4 tokens, row 2 empty, NaN at every masked position. Its numbers are
chosen so that each test knows which tokens are selected (see `BATCH_FACTS`): Clip-Cov's candidates with lb = 0.3,
ub = 3 are (0, 0) and (3, 0) — (1, 1) lies above ub, (3, 1) is in the range but clipped by PPO; KL-Cov's top two
covariances are (1, 1) and (0, 0); DPPO-TV (δ = 0.05) leaves out (0, 0), (0, 1) (A = 0 takes the A ≤ 0 test) and
(1, 0); DPPO-KL (δ_low = 0.008, δ_high = 0.05) leaves out (0, 1), (1, 0) and (3, 1); with c = 1.3, (0, 3) and (1, 1)
are truncated.
"""

from __future__ import annotations

import math

import pytest
import torch

from trl_ext.losses import get_policy_loss
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
