"""AReaL's decoupled PPO (`trl_ext.losses.decoupled_ppo`: the `decoupled_ppo` loss and `loglinear_proximal_logprob`).

The expected values come from a plain-Python, per-token transcription of AReaL's `ppo_actor_loss_fn` /
`compute_behave_imp_weight` (its max / min form of the clip, not the loss's single clamp) and from hand-computed
closed forms; none shares code with `trl_ext.losses`.
"""

from __future__ import annotations

import math

import pytest
import torch

from trl_ext.losses import (
    BATCH_INPUTS,
    EPS,
    LOSS_AGG_MODES,
    DecoupledPPOPolicyLoss,
    get_policy_loss,
    loglinear_proximal_logprob,
)

F64 = torch.float64


def tensor(rows, dtype=F64, **kw):
    return torch.tensor(rows, dtype=dtype, **kw)


# ==================================================================================================
# A plain reference (AReaL's arithmetic, one token at a time)
# ==================================================================================================


def ref_token(lp, old, prox, a, eps_low, eps_high, c, cap, mode):
    """(loss, d loss / d lp) of one valid token, AReaL's way: L = w · min(max(−A·r, −A·clip(r)), c·|A|)."""
    r = math.exp(lp - prox)
    clipped = min(max(r, 1.0 - eps_low), 1.0 + eps_high)
    l1, l2 = -a * r, -a * clipped
    value = max(l1, l2)
    unclipped = l1 >= l2  # the branch carrying r (ties are avoided by the tests' values)
    if c is not None and c * abs(a) < value:  # AReaL: pg_loss3 = sign(A)·c·A
        value, unclipped = c * abs(a), False
    w = math.exp(prox - old)
    if cap is not None and w > cap:
        w = 0.0 if mode == "mask" else cap
    return w * value, (w * -a * r if unclipped else 0.0)


def ref_loss(
    lp,
    old,
    prox,
    adv,
    mask,
    *,
    eps_low=0.2,
    eps_high=0.2,
    c=None,
    cap=5.0,
    mode="mask",
    agg="token-mean",
    toks=None,
    seqs=None,
    normalizer=None,
):
    """Loss and gradient (nested lists) of the reference, aggregated over the valid tokens by `agg`."""
    rows = []
    for i, row in enumerate(mask):
        a_row = adv[i] if isinstance(adv[i], list) else [adv[i]] * len(row)
        rows.append(
            [
                ref_token(lp[i][t], old[i][t], prox[i][t], a_row[t], eps_low, eps_high, c, cap, mode)
                if m
                else (0.0, 0.0)
                for t, m in enumerate(row)
            ]
        )
    n_tok = sum(sum(row) for row in mask)
    if agg == "token-mean":
        scale = [[1.0 / ((n_tok if toks is None else toks) + EPS)] * len(r) for r in mask]
    elif agg == "token-sum":
        scale = [[1.0] * len(r) for r in mask]
    elif agg == "seq-mean-token-sum":
        n = len(mask) if seqs is None else seqs
        scale = [[1.0 / n] * len(r) for r in mask]
    elif agg == "seq-mean-token-mean":
        n = len(mask) if seqs is None else seqs
        scale = [[1.0 / n / (sum(r) + EPS)] * len(r) for r in mask]
    else:  # seq-mean-token-sum-norm
        norm = len(mask[0]) if normalizer is None else normalizer
        scale = [[1.0 / (norm + EPS)] * len(r) for r in mask]
    loss = sum(v * s for row, srow in zip(rows, scale, strict=True) for (v, _), s in zip(row, srow, strict=True))
    grad = [[g * s for (_, g), s in zip(row, srow, strict=True)] for row, srow in zip(rows, scale, strict=True)]
    return loss, grad


def run(lp, old, prox, adv, mask, *, window=None, **kwargs):
    """Loss, gradient (nested lists) and metrics (floats) of `decoupled_ppo` on float64 inputs; prox None allowed."""
    logprob = tensor(lp, requires_grad=True)
    loss, metrics = get_policy_loss("decoupled_ppo", **kwargs)(
        logprob=logprob,
        old_logprob=tensor(old),
        prox_logprob=None if prox is None else tensor(prox),
        advantages=tensor(adv),
        action_mask=tensor(mask, dtype=torch.bool),
        **(window or {}),
    )
    loss.backward()
    return loss.item(), logprob.grad.tolist(), {k: v.item() for k, v in metrics.items()}


# Two rows, five tokens; row 1 has two padding positions. With ε_low 0.2, ε_high 0.28, c 3, cap 5 the valid tokens
# cover: A > 0 inside the clip (r = e^0.1), A > 0 clipped (r = e^0.5), A < 0 clipped low (r = e^-0.5), A < 0 dual
# clipped (r = e^1.5 > 3), A < 0 inside (r = e^0.05), a token whose w = e^2 > cap (masked), w < 1 and w > 1 elsewhere.
LP = [[-1.0, -0.5, -2.0, -0.2, -1.2], [-0.7, -1.5, -0.9, 7.0, -3.0]]
PROX = [[-1.1, -1.0, -1.5, -1.7, -1.25], [-0.5, -1.5, -1.0, 0.0, 0.0]]
OLD = [[-1.3, -0.8, -1.4, -1.0, -3.25], [-0.6, -1.2, -1.1, 0.0, 0.0]]
ADV = [[1.0, 2.0, -1.0, -0.5, -1.5], [0.8, -0.3, 1.2, 0.0, 0.0]]
MASK = [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
CLIPS = {"clip_range_low": 0.2, "clip_range_high": 0.28, "clip_ratio_c": 3.0}
REF_CLIPS = {"eps_low": 0.2, "eps_high": 0.28, "c": 3.0}


# ==================================================================================================
# Closed forms
# ==================================================================================================


def test_loss_and_gradient_match_the_reference():
    loss, grad, metrics = run(LP, OLD, PROX, ADV, MASK, **CLIPS)
    expected, expected_grad = ref_loss(LP, OLD, PROX, ADV, MASK, **REF_CLIPS)
    assert loss == pytest.approx(expected, rel=1e-12)
    assert grad == [pytest.approx(row, rel=1e-12, abs=1e-15) for row in expected_grad]
    assert metrics["pg_loss"] == pytest.approx(expected, rel=1e-12)


def test_one_token_by_hand():
    # A > 0 inside the clip: L = −A·r·w = −e^{0.1}·e^{0.2}; gradient −e^{0.3}; token-mean over 1 token.
    loss, grad, _ = run([[-1.0]], [[-1.3]], [[-1.1]], [[1.0]], [[1]])
    assert loss == pytest.approx(-math.exp(0.3) / (1 + EPS), rel=1e-12)
    assert grad == [[pytest.approx(-math.exp(0.3) / (1 + EPS), rel=1e-12)]]


def test_without_dual_clip_a_negative_advantage_is_unbounded():
    # A < 0, r = e^1.5 ≈ 4.48 > 3: with c = 3 the loss is 0.5·3·w (no gradient); without c it is 0.5·r·w.
    lp, prox, old, adv = [[-0.2]], [[-1.7]], [[-1.0]], [[-0.5]]
    w = math.exp(-0.7)
    dual, dual_grad, dual_metrics = run(lp, old, prox, adv, [[1]], clip_ratio_c=3.0)
    plain, plain_grad, plain_metrics = run(lp, old, prox, adv, [[1]])  # AReaL's default: c_clip None
    assert dual == pytest.approx(0.5 * 3.0 * w / (1 + EPS), rel=1e-12)
    assert dual_grad == [[0.0]]
    assert dual_metrics["pg_clipfrac_lower"] == pytest.approx(1.0, rel=1e-6)
    assert plain == pytest.approx(0.5 * math.exp(1.5) * w / (1 + EPS), rel=1e-12)
    assert plain_grad == [[pytest.approx(0.5 * math.exp(1.5) * w / (1 + EPS), rel=1e-12)]]
    assert plain_metrics["pg_clipfrac_lower"] == 0.0


def test_metrics_by_hand():
    _, _, metrics = run(LP, OLD, PROX, ADV, MASK, **CLIPS)
    n = 8
    log_w = [
        p - o
        for prow, orow, mrow in zip(PROX, OLD, MASK, strict=True)
        for p, o, m in zip(prow, orow, mrow, strict=True)
        if m
    ]
    kept = [x for x in log_w if math.exp(x) <= 5.0]
    assert len(kept) == n - 1  # the e^2 token is masked
    assert metrics["decoupled/behave_weight_mean"] == pytest.approx(
        sum(map(math.exp, kept)) / (len(kept) + EPS), rel=1e-12
    )
    assert metrics["decoupled/behave_approx_kl"] == pytest.approx(sum(kept) / (len(kept) + EPS), rel=1e-12)
    assert metrics["decoupled/behave_weight_max"] == pytest.approx(math.exp(2.0), rel=1e-12)
    assert metrics["decoupled/behave_masked_fraction"] == pytest.approx(1 / n, rel=1e-6)
    # Clipped: (A>0, r=e^.5 > 1.28), (A<0, r=e^-.5 < .8), (row 1: A<0, r=1 no; A>0, r=e^.1 no) -> 2 of 8;
    # dual-clipped (A<0, r > 3): 1 of 8; ppo_kl = mean of prox − lp.
    assert metrics["pg_clipfrac"] == pytest.approx(2 / n, rel=1e-6)
    assert metrics["pg_clipfrac_lower"] == pytest.approx(1 / n, rel=1e-6)
    kl = [
        p - lp
        for prow, lrow, mrow in zip(PROX, LP, MASK, strict=True)
        for p, lp, m in zip(prow, lrow, mrow, strict=True)
        if m
    ]
    assert metrics["ppo_kl"] == pytest.approx(sum(kl) / n, rel=1e-6)
    assert set(metrics) == set(DecoupledPPOPolicyLoss.metrics)


# ==================================================================================================
# The proximal policy: omitted, equal to the behaviour policy
# ==================================================================================================


def test_prox_none_is_the_detached_logprob():
    omitted = run(LP, OLD, None, ADV, MASK, **CLIPS)
    detached = run(LP, OLD, LP, ADV, MASK, **CLIPS)  # prox given as the (constant) values of logprob
    assert omitted[0] == pytest.approx(detached[0], rel=1e-14)
    assert omitted[1] == [pytest.approx(row, rel=1e-14) for row in detached[1]]
    assert omitted[2] == pytest.approx(detached[2], rel=1e-14)
    # r ≡ 1: L = −A·w with w = e^{lp − old} (masked above the cap), gradient −A·w per token, over 8 tokens.
    total = 0.0
    for lrow, orow, arow, mrow in zip(LP, OLD, ADV, MASK, strict=True):
        for lp, o, a, m in zip(lrow, orow, arow, mrow, strict=True):
            w = math.exp(lp - o)
            total += -a * (w if w <= 5.0 else 0.0) if m else 0.0
    assert omitted[0] == pytest.approx(total / (8 + EPS), rel=1e-12)


def test_prox_none_inside_autograd_matches_passing_logprob_detach():
    lp = tensor(LP, requires_grad=True)
    fn = get_policy_loss("decoupled_ppo", **CLIPS)
    common = {"old_logprob": tensor(OLD), "advantages": tensor(ADV), "action_mask": tensor(MASK, dtype=torch.bool)}
    a, _ = fn(logprob=lp, **common)
    (ga,) = torch.autograd.grad(a, lp)
    b, _ = fn(logprob=lp, prox_logprob=lp.detach(), **common)
    (gb,) = torch.autograd.grad(b, lp)
    assert a.item() == b.item()
    assert torch.equal(ga, gb)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_prox_equal_to_behaviour_is_ppo(mode):
    """With π_prox = μ the weight is 1 and the loss is trl_ext's `ppo` with the same clip (and dual clip)."""
    lp = tensor(LP, requires_grad=True)
    common = {"old_logprob": tensor(OLD), "advantages": tensor(ADV), "action_mask": tensor(MASK, dtype=torch.bool)}
    ours, ours_metrics = get_policy_loss("decoupled_ppo", loss_agg_mode=mode, **CLIPS)(
        logprob=lp, prox_logprob=tensor(OLD), **common
    )
    (g_ours,) = torch.autograd.grad(ours, lp)
    ppo, ppo_metrics = get_policy_loss("ppo", loss_agg_mode=mode, **CLIPS)(logprob=lp, **common)
    (g_ppo,) = torch.autograd.grad(ppo, lp)
    assert ours.item() == pytest.approx(ppo.item(), rel=1e-14)
    assert torch.allclose(g_ours, g_ppo, rtol=1e-14, atol=0)
    for name in ("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl", "pg_loss"):
        assert ours_metrics[name].item() == pytest.approx(ppo_metrics[name].item(), rel=1e-14), name
    assert ours_metrics["decoupled/behave_weight_mean"].item() == pytest.approx(8 / (8 + EPS), rel=1e-12)
    assert ours_metrics["decoupled/behave_masked_fraction"].item() == 0.0


def test_old_and_prox_are_not_differentiated():
    lp = tensor(LP, requires_grad=True)
    old = tensor(OLD, requires_grad=True)
    prox = tensor(PROX, requires_grad=True)
    loss, _ = get_policy_loss("decoupled_ppo")(
        logprob=lp, old_logprob=old, prox_logprob=prox, advantages=tensor(ADV), action_mask=tensor(MASK).bool()
    )
    loss.backward()
    assert old.grad is None and prox.grad is None
    assert lp.grad.abs().sum() > 0


# ==================================================================================================
# The behaviour weight's cap: mask vs truncate
# ==================================================================================================

# One row, A = 1 everywhere, lp = prox (r = 1, inside every clip): the loss is −Σ w / n exactly.
CAP_LP = [[0.0, 0.0, 0.0, 0.0]]
CAP_OLD = [[-2.0, -0.5, 1.0, -1.5]]  # w = e^2 (> 5), e^.5, e^-1, e^1.5 (< 5)
CAP_ADV = [[1.0, 1.0, 1.0, 1.0]]
CAP_MASK = [[1, 1, 1, 1]]


@pytest.mark.parametrize(
    ("mode", "cap", "weights"),
    [
        ("mask", 5.0, [0.0, math.exp(0.5), math.exp(-1.0), math.exp(1.5)]),
        ("truncate", 5.0, [5.0, math.exp(0.5), math.exp(-1.0), math.exp(1.5)]),
        ("mask", None, [math.exp(2.0), math.exp(0.5), math.exp(-1.0), math.exp(1.5)]),
        ("truncate", 4.0, [4.0, math.exp(0.5), math.exp(-1.0), 4.0]),
    ],
)
def test_cap_masks_or_truncates(mode, cap, weights):
    loss, grad, metrics = run(
        CAP_LP, CAP_OLD, CAP_LP, CAP_ADV, CAP_MASK, behave_imp_weight_cap=cap, behave_imp_weight_mode=mode
    )
    # A masked token stays in the denominator (4 tokens), as AReaL divides by the count before its cap.
    assert loss == pytest.approx(-sum(weights) / (4 + EPS), rel=1e-12)
    assert grad == [pytest.approx([-w / (4 + EPS) for w in weights], rel=1e-12)]
    over = sum(1 for d in (2.0, 0.5, -1.0, 1.5) if cap is not None and math.exp(d) > cap)
    assert metrics["decoupled/behave_masked_fraction"] == pytest.approx(over / 4, rel=1e-6)
    applied = [w for w in weights if w > 0]
    assert metrics["decoupled/behave_weight_mean"] == pytest.approx(sum(applied) / (len(applied) + EPS), rel=1e-12)
    assert metrics["decoupled/behave_weight_max"] == pytest.approx(math.exp(2.0), rel=1e-12)  # before the cap


def test_weight_equal_to_the_cap_is_kept():
    # AReaL masks w > cap (strictly). prox − old = 1.5 exactly in float64, so w equals the cap computed the same way.
    cap = torch.exp(tensor(1.5)).item()
    loss, _, metrics = run([[2.0]], [[0.5]], [[2.0]], [[1.0]], [[1]], behave_imp_weight_cap=cap)
    assert loss == pytest.approx(-cap / (1 + EPS), rel=1e-12)
    assert metrics["decoupled/behave_masked_fraction"] == 0.0


def test_default_is_areal_mask_at_five():
    assert DecoupledPPOPolicyLoss.default_args() == {
        "clip_range": 0.2,
        "clip_range_low": None,
        "clip_range_high": None,
        "clip_ratio_c": None,
        "loss_agg_mode": "token-mean",
        "behave_imp_weight_cap": 5.0,
        "behave_imp_weight_mode": "mask",
    }
    fn = get_policy_loss("decoupled_ppo", clip_range=0.3)
    assert (fn.clip_range_low, fn.clip_range_high) == (0.3, 0.3)
    assert get_policy_loss("decoupled_ppo", clip_range_high=0.28).clip_range_high == 0.28


# ==================================================================================================
# Aggregation modes and window counts
# ==================================================================================================

WINDOWS = {
    "token-mean": {"global_valid_toks": 20},
    "token-sum": {"global_valid_toks": 20},
    "seq-mean-token-sum": {"global_valid_seqs": 6},
    "seq-mean-token-mean": {"global_valid_seqs": 6},
    "seq-mean-token-sum-norm": {"normalizer": 12.0},
}
REF_WINDOW_KEYS = {"global_valid_toks": "toks", "global_valid_seqs": "seqs", "normalizer": "normalizer"}


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("windowed", [False, True])
def test_aggregation_modes(mode, windowed):
    window = WINDOWS[mode] if windowed else {}
    loss, grad, _ = run(LP, OLD, PROX, ADV, MASK, window=window, loss_agg_mode=mode, **CLIPS)
    ref_window = {REF_WINDOW_KEYS[k]: v for k, v in window.items()}
    expected, expected_grad = ref_loss(LP, OLD, PROX, ADV, MASK, agg=mode, **REF_CLIPS, **ref_window)
    assert loss == pytest.approx(expected, rel=1e-12)
    assert grad == [pytest.approx(row, rel=1e-12, abs=1e-15) for row in expected_grad]


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_window_shares_add_up_to_the_whole_batch(mode):
    whole, _, _ = run(LP, OLD, PROX, ADV, MASK, loss_agg_mode=mode, **CLIPS)
    window = {"global_valid_toks": 8, "global_valid_seqs": 2}
    parts = [
        run([LP[i]], [OLD[i]], [PROX[i]], [ADV[i]], [MASK[i]], window=window, loss_agg_mode=mode, **CLIPS)[0]
        for i in range(2)
    ]
    assert sum(parts) == pytest.approx(whole, rel=1e-7)


def test_per_sequence_advantages_broadcast():
    adv_rows = [1.5, -0.7]
    loss, grad, _ = run(LP, OLD, PROX, adv_rows, MASK, **CLIPS)
    expected, expected_grad = ref_loss(LP, OLD, PROX, adv_rows, MASK, **REF_CLIPS)
    assert loss == pytest.approx(expected, rel=1e-12)
    assert grad == [pytest.approx(row, rel=1e-12, abs=1e-15) for row in expected_grad]


# ==================================================================================================
# The log-linear proximal approximation
# ==================================================================================================


def test_loglinear_values_per_row():
    behave = tensor([[-1.0, -2.0]] * 6)
    lp = tensor([[-0.2, -1.0]] * 6, requires_grad=True)
    # v_θ = 4, v_prox = 3: α = 3/4 (v_behave 0), 1/2 (v_behave 2), 0 (v_behave 3 = v_prox), 0 (v_behave 4 = v_θ),
    # 0 (v_behave 5 > v_θ), 0 (v_behave −1: AReaL's prompt-token marker).
    versions = torch.tensor([0, 2, 3, 4, 5, -1])
    out = loglinear_proximal_logprob(behave, lp, versions, 3, 4)
    alphas = [0.75, 0.5, 0.0, 0.0, 0.0, 0.0]
    expected = [[-1.0 + a * 0.8, -2.0 + a * 1.0] for a in alphas]
    assert out.tolist() == [pytest.approx(row, rel=1e-15) for row in expected]
    assert not out.requires_grad and out.dtype == F64
    assert torch.equal(out[3], behave[3])  # v_θ == v_behave: exactly log μ
    # v_θ == v_behave == v_prox: AReaL's guard (v_θ − v_behave > 0) still gives α = 0, not 0/0.
    same = loglinear_proximal_logprob(behave, lp, 4, 4, 4)
    assert torch.equal(same, behave)


def test_loglinear_alpha_is_clamped_and_accepts_tensors_and_per_token_versions():
    behave = tensor([[-1.0, -2.0, -3.0]])
    lp = tensor([[0.0, 0.0, 0.0]])
    # v_prox above v_θ would give α = 5/4: clamped to 1 (log π_θ); v_prox = v_θ gives α = 1.
    assert loglinear_proximal_logprob(behave, lp, 0, 5, 4).tolist() == [[0.0, 0.0, 0.0]]
    assert loglinear_proximal_logprob(behave, lp, torch.tensor([1]), torch.tensor(4), torch.tensor(4)).tolist() == [
        [0.0, 0.0, 0.0]
    ]
    # Per-token versions [B, T] (AReaL's form): α = (2 − v)/(3 − v) = 2/3, 1/2, 0.
    out = loglinear_proximal_logprob(behave, lp, torch.tensor([[0, 1, 2]]), 2, 3)
    assert out.tolist() == [pytest.approx([-1.0 / 3, -1.0, -3.0], rel=1e-15)]
    # float32 inputs: a float32 result.
    out32 = loglinear_proximal_logprob(behave.float(), lp.float(), torch.tensor([2]), 3, 4)
    assert out32.dtype == torch.float32
    assert out32.tolist() == [pytest.approx([-0.5, -1.0, -1.5], rel=1e-7)]


def test_loglinear_bad_inputs():
    behave, lp = tensor([[-1.0, -2.0]]), tensor([[0.0, 0.0]])
    with pytest.raises(ValueError, match="behave_version"):
        loglinear_proximal_logprob(behave, lp, torch.tensor([0, 1]), 1, 2)
    with pytest.raises(ValueError, match="proximal_version"):
        loglinear_proximal_logprob(behave, lp, 0, torch.tensor([1]), 2)
    with pytest.raises(TypeError, match="current_version"):
        loglinear_proximal_logprob(behave, lp, 0, 1, "2")
    with pytest.raises(ValueError, match="behave_logprob"):
        loglinear_proximal_logprob(tensor([[-1.0]]), lp, 0, 1, 2)
    with pytest.raises(ValueError, match="logprob"):
        loglinear_proximal_logprob(behave.long(), lp, 0, 1, 2)


def test_loglinear_feeds_the_loss():
    # With v_θ = v_prox + 1 and v_behave = v_prox (fresh rollout) α = 0: π_prox ≈ μ, so the loss is `ppo`'s.
    lp = tensor(LP, requires_grad=True)
    prox = loglinear_proximal_logprob(tensor(OLD), lp, torch.tensor([3, 3]), 3, 4)
    common = {"old_logprob": tensor(OLD), "advantages": tensor(ADV), "action_mask": tensor(MASK, dtype=torch.bool)}
    ours, _ = get_policy_loss("decoupled_ppo", **CLIPS)(logprob=lp, prox_logprob=prox, **common)
    ppo, _ = get_policy_loss("ppo", **CLIPS)(logprob=lp, **common)
    assert ours.item() == pytest.approx(ppo.item(), rel=1e-14)


# ==================================================================================================
# Arguments and inputs
# ==================================================================================================


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"behave_imp_weight_cap": -1.0}, "behave_imp_weight_cap"),
        ({"behave_imp_weight_cap": 1.0}, "behave_imp_weight_cap"),  # AReaL: must be > 1
        ({"behave_imp_weight_cap": math.inf}, "behave_imp_weight_cap"),
        ({"behave_imp_weight_mode": "token_mask"}, "behave_imp_weight_mode"),
        ({"behave_imp_weight_mode": None}, "behave_imp_weight_mode"),
        ({"clip_ratio_c": 1.0}, "clip_ratio_c"),
        ({"clip_range": -0.1}, "clip_range"),
        ({"loss_agg_mode": "mean"}, "loss_agg_mode"),
        ({"clip_range": None}, "clip_range"),
        ({"eps_clip": 0.2}, "eps_clip"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, field):
    with pytest.raises(ValueError, match=field) as info:
        get_policy_loss("decoupled_ppo", **kwargs)
    if field == "behave_imp_weight_mode":
        assert "'mask'" in str(info.value) and "'truncate'" in str(info.value)


def test_bad_prox_logprob_is_refused_by_name():
    fn = get_policy_loss("decoupled_ppo")
    common = {"logprob": tensor(LP), "old_logprob": tensor(OLD), "advantages": tensor(ADV)}
    mask = tensor(MASK, dtype=torch.bool)
    with pytest.raises(ValueError, match="prox_logprob"):
        fn(**common, action_mask=mask, prox_logprob=tensor([[0.0]]))
    with pytest.raises(ValueError, match="prox_logprob"):
        fn(**common, action_mask=mask, prox_logprob=torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="did you mean 'prox_logprob'"):
        fn(**common, action_mask=mask, prox_logprobs=tensor(PROX))


def test_prox_logprob_is_a_batch_key_other_losses_ignore():
    assert "prox_logprob" in BATCH_INPUTS
    assert "prox_logprob" in DecoupledPPOPolicyLoss.inputs()
    common = {"old_logprob": tensor(OLD), "advantages": tensor(ADV), "action_mask": tensor(MASK, dtype=torch.bool)}
    ppo = get_policy_loss("ppo")
    with_key, _ = ppo(logprob=tensor(LP), prox_logprob=tensor(PROX), **common)
    without, _ = ppo(logprob=tensor(LP), **common)
    assert with_key.item() == without.item()


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("shape", [(0, 4), (3, 0)])
@pytest.mark.parametrize("prox", [False, True])
def test_empty_batch_gives_a_finite_zero(mode, shape, prox):
    lp = torch.zeros(shape, dtype=F64, requires_grad=True)
    loss, metrics = get_policy_loss("decoupled_ppo", loss_agg_mode=mode)(
        logprob=lp,
        old_logprob=torch.zeros(shape, dtype=F64),
        prox_logprob=torch.zeros(shape, dtype=F64) if prox else None,
        advantages=torch.zeros(shape, dtype=F64),
        action_mask=torch.zeros(shape, dtype=torch.bool),
    )
    assert loss.item() == 0.0
    loss.backward()
    assert lp.grad.shape == shape
    assert all(torch.isfinite(v).item() and v.item() == 0.0 for v in metrics.values())


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("where", ["logprob", "old_logprob", "prox_logprob", "advantages"])
@pytest.mark.parametrize("mask_dtype", [torch.bool, F64])  # a number mask takes the multiply-and-recompute path
def test_non_finite_at_a_masked_position_does_not_leak(bad, where, mask_dtype):
    mask = tensor(MASK, dtype=mask_dtype)
    clean = {"logprob": LP, "old_logprob": OLD, "prox_logprob": PROX, "advantages": ADV}

    def call(values):
        lp = tensor(values["logprob"], requires_grad=True)
        others = {k: tensor(v) for k, v in values.items() if k != "logprob"}
        loss, metrics = get_policy_loss("decoupled_ppo", **CLIPS)(logprob=lp, action_mask=mask, **others)
        loss.backward()
        return loss, lp.grad, metrics

    dirty = {k: [list(row) for row in v] for k, v in clean.items()}
    dirty[where][1][4] = bad  # row 1, token 4: padding
    loss, grad, metrics = call(dirty)
    loss0, grad0, metrics0 = call(clean)
    assert loss.item() == loss0.item()
    assert torch.equal(grad, grad0)
    assert {k: v.item() for k, v in metrics.items()} == {k: v.item() for k, v in metrics0.items()}


@pytest.mark.parametrize("where", ["logprob", "old_logprob", "prox_logprob", "advantages"])
def test_non_finite_at_a_valid_position_makes_the_loss_nan(where):
    values = {"logprob": LP, "old_logprob": OLD, "prox_logprob": PROX, "advantages": ADV}
    values = {k: [list(row) for row in v] for k, v in values.items()}
    values[where][0][0] = math.inf
    loss, _ = get_policy_loss("decoupled_ppo")(
        action_mask=tensor(MASK).bool(), **{k: tensor(v) for k, v in values.items()}
    )
    assert math.isnan(loss.item())
