"""KL estimators, the KL loss / reward penalty, the adaptive coefficient and the entropy terms
(docs/design.md §2.2), checked against closed forms computed in plain Python `math`."""

from __future__ import annotations

import math

import pytest
import torch

from trl_ext.losses import KL_FNS, get_entropy_fn, get_kl_fn

EPS = 1e-8

# (lp, ref, old) triples: small and large differences in both directions, equal values, and differences
# beyond the ±20 input / ±10 output clamps of low_var_kl and the [0, 2] ratio clamp of corrected_k3.
POINTS = [
    (-1.0, -1.5, -1.2),
    (-0.3, -0.3, -0.3),
    (-2.0, -0.5, -2.5),  # d = 1.5, lp - old = 0.5 -> ratio e^0.5 inside [0, 2]
    (-0.5, -2.0, -1.5),  # d = -1.5, ratio e^1 = 2.718 -> clamped to 2
    (-3.0, -1.0, -0.5),  # ratio e^-2.5
    (-30.0, -1.0, -29.0),  # d = 29: low_var_kl input clamp to 20, output clamp to 10
    (-1.0, -26.0, -1.0),  # d = -25: input clamp to -20 -> e^-20 + 19 -> output clamp 10
    (-4.0, -1.0, -4.0),  # d = 3: e^3 - 4 = 16.09 -> output clamp 10 with no input clamp
    (-1.0, -3.0, -1.0),  # d = -2: e^-2 + 1 = 1.135, no clamp
]


def _k1(lp, ref, old):
    return lp - ref


def _k2(lp, ref, old):
    return 0.5 * (lp - ref) ** 2


def _k3(lp, ref, old):
    d = ref - lp
    return math.exp(d) - 1.0 - d


def _low_var(lp, ref, old):
    d = min(max(ref - lp, -20.0), 20.0)
    return min(max(math.exp(d) - d - 1.0, -10.0), 10.0)


def _abs(lp, ref, old):
    return abs(lp - ref)


def _corrected_k3(lp, ref, old):
    if old is None:
        return _k3(lp, ref, old)
    return min(max(math.exp(lp - old), 0.0), 2.0) * _k3(lp, ref, old)


CLOSED_FORMS = {
    "k1": _k1,
    "kl": _k1,
    "k2": _k2,
    "mse": _k2,
    "k3": _k3,
    "low_var_kl": _low_var,
    "abs": _abs,
    "corrected_k3": _corrected_k3,
    "none": lambda lp, ref, old: 0.0,
}


def _t(values):
    return torch.tensor(values, dtype=torch.float64)


def test_closed_forms_cover_every_estimator():
    assert set(CLOSED_FORMS) == set(KL_FNS)


@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
def test_calculate_kl_closed_form(name):
    lp, ref, old = (_t([p[i] for p in POINTS]).view(3, 3) for i in range(3))
    kl = get_kl_fn(name).calculate_kl(lp, ref, old)
    assert kl.shape == lp.shape
    expected = [CLOSED_FORMS[name](*p) for p in POINTS]
    assert kl.flatten().tolist() == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_clamps_are_actually_hit():
    """Guard on the test data: the points above do exercise every clamp."""
    assert _low_var(-30.0, -1.0, None) == 10.0
    assert _low_var(-1.0, -26.0, None) == 10.0
    assert _low_var(-4.0, -1.0, None) == 10.0
    assert math.exp(29.0) - 30.0 != math.exp(20.0) - 21.0
    assert _corrected_k3(-0.5, -2.0, -1.5) == pytest.approx(2.0 * _k3(-0.5, -2.0, None))
    assert _corrected_k3(-0.5, -2.0, -1.5) != pytest.approx(math.e * _k3(-0.5, -2.0, None))


def test_low_var_kl_values_explicit():
    fn = get_kl_fn("low_var_kl")
    lp = _t([-30.0, -1.0, -1.0, -1.0])
    ref = _t([-1.0, -26.0, -3.0, -1.0])
    kl = fn.calculate_kl(lp, ref)
    assert kl.tolist() == pytest.approx([10.0, 10.0, math.exp(-2.0) + 1.0, 0.0], rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_low_var_kl_gradient_is_autograds_through_the_reference_bit_for_bit(dtype):
    """low_var_kl computes its gradient itself (a short backward pass): it must be the very bits autograd gives through
    the reference's operations, at the clamps' edges, past them, near d = 0 (where g·e − g and g·(e − 1) differ) and
    at NaN / ±inf (gradient 0 there)."""
    generator = torch.Generator().manual_seed(0)
    edges = [20.0, -20.0, 2.6, -11.0, 25.0, -25.0, math.nan, 0.0, 1e-9, -1e-9, math.inf, -math.inf]
    d = torch.cat([torch.randn(4000, generator=generator) * 8, torch.randn(1000, generator=generator) * 1e-3])
    d = torch.cat([d, torch.tensor(edges)]).to(dtype)
    grad_out = torch.randn(d.shape, generator=generator).to(dtype)
    ours, reference = d.clone().requires_grad_(True), d.clone().requires_grad_(True)
    kl = get_kl_fn("low_var_kl").kl_from_log_ratio(ours)
    clamped = reference.clamp(-20.0, 20.0)
    expected = (torch.exp(clamped) - clamped - 1.0).clamp(-10.0, 10.0)
    kl.backward(grad_out)
    expected.backward(grad_out)
    bits = {torch.float64: torch.int64, torch.float32: torch.int32, torch.bfloat16: torch.int16}[dtype]
    assert torch.equal(kl.detach().view(bits), expected.detach().view(bits))
    assert torch.equal(ours.grad.view(bits), reference.grad.view(bits))
    assert ours.grad[[-6, -2, -1]].eq(0).all()  # NaN and ±inf: no gradient


def test_corrected_k3_without_old_is_k3():
    lp, ref = _t([p[0] for p in POINTS]), _t([p[1] for p in POINTS])
    assert torch.equal(get_kl_fn("corrected_k3").calculate_kl(lp, ref), get_kl_fn("k3").calculate_kl(lp, ref))
    ratio_zero = get_kl_fn("corrected_k3").calculate_kl(_t([-50.0]), _t([-49.0]), _t([0.0]))
    assert 0.0 <= ratio_zero.item() < 1e-20  # ratio e^-50 (clamp floor 0 keeps it non-negative)


@pytest.mark.parametrize(("alias", "name"), [("kl", "k1"), ("mse", "k2")])
def test_verl_aliases(alias, name):
    assert KL_FNS[alias] is KL_FNS[name]
    lp, ref = _t([-1.0, -2.0, -0.1]), _t([-1.5, -0.5, -0.1])
    assert torch.equal(get_kl_fn(alias).calculate_kl(lp, ref), get_kl_fn(name).calculate_kl(lp, ref))


# --------------------------------------------------------------------------------------------------
# calculate_kl_loss
# --------------------------------------------------------------------------------------------------

LP = [[-1.0, -0.5, -2.0, -0.7], [-0.2, -1.1, -0.9, -3.0], [-0.4, -0.6, -0.8, -1.0]]
REF = [[-1.2, -0.4, -1.0, -0.7], [-0.5, -1.0, -2.9, -1.0], [-0.1, -0.9, -0.3, -2.0]]
OLD = [[-0.9, -0.6, -2.2, -0.5], [-0.3, -1.0, -1.4, -2.0], [-0.5, -0.4, -0.8, -1.3]]
MASK = [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]


def _py_agg(values, mask, mode):
    if mode == "token-mean":
        num = sum(v * m for row, mrow in zip(values, mask, strict=True) for v, m in zip(row, mrow, strict=True))
        return num / (sum(map(sum, mask)) + EPS)
    assert mode == "seq-mean-token-mean"
    rows = [
        sum(v * m for v, m in zip(row, mrow, strict=True)) / (sum(mrow) + EPS)
        for row, mrow in zip(values, mask, strict=True)
    ]
    return sum(rows) / len(rows)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("name", ["k1", "k2", "k3", "low_var_kl", "abs", "corrected_k3"])
def test_calculate_kl_loss(name, mode):
    coef = 0.05
    fn = get_kl_fn(name, kl_coef=coef)
    per_token = [
        [CLOSED_FORMS[name](lp, ref, old) for lp, ref, old in zip(*rows, strict=True)]
        for rows in zip(LP, REF, OLD, strict=True)
    ]
    expected = _py_agg(per_token, MASK, mode)
    loss, metrics = fn.calculate_kl_loss(_t(LP), _t(REF), torch.tensor(MASK), mode, old_logprob=_t(OLD))
    assert loss.dim() == 0
    assert loss.item() == pytest.approx(coef * expected, rel=1e-12)
    assert set(metrics) == {"kl_loss", "kl_coef"}
    assert metrics["kl_loss"].item() == pytest.approx(expected, rel=1e-12)
    assert metrics["kl_coef"].item() == pytest.approx(coef)
    for value in metrics.values():
        assert value.dim() == 0 and not value.requires_grad


def test_calculate_kl_loss_masked_values_do_not_leak():
    """NaN / inf at masked positions of logprob, ref and old change neither the loss nor the gradient."""
    mask = torch.tensor(MASK, dtype=torch.bool)
    results = []
    for fill in (None, math.nan, math.inf, -math.inf):
        lp, ref, old = _t(LP), _t(REF), _t(OLD)
        if fill is not None:
            for x in (lp, ref, old):
                x[~mask] = fill
        lp.requires_grad_(True)
        loss, metrics = get_kl_fn("low_var_kl", kl_coef=0.1).calculate_kl_loss(lp, ref, mask, old_logprob=old)
        (grad,) = torch.autograd.grad(loss, lp)
        assert torch.isfinite(loss) and torch.isfinite(grad).all()
        assert torch.count_nonzero(grad[~mask]) == 0
        results.append((loss.detach(), grad, metrics["kl_loss"]))
    for result in results[1:]:
        for got, want in zip(result, results[0], strict=True):
            assert torch.equal(got, want)


def test_k2_loss_gradient():
    coef = 0.3
    lp = _t(LP).requires_grad_(True)
    mask = torch.tensor(MASK)
    loss, _ = get_kl_fn("k2", kl_coef=coef).calculate_kl_loss(lp, _t(REF), mask, "token-mean")
    loss.backward()
    n = sum(map(sum, MASK))
    for i, row in enumerate(MASK):
        for j, m in enumerate(row):
            want = coef * (LP[i][j] - REF[i][j]) / (n + EPS) if m else 0.0
            if m:
                assert lp.grad[i, j].item() == pytest.approx(want, rel=1e-10)
            else:
                assert lp.grad[i, j].item() == 0.0


def test_kl_none_loss_is_zero():
    lp = _t(LP).requires_grad_(True)
    loss, metrics = get_kl_fn("none", kl_coef=1.0).calculate_kl_loss(lp, _t(REF), torch.tensor(MASK))
    assert loss.dim() == 0 and loss.item() == 0.0
    assert metrics == {}


@pytest.mark.parametrize("name", sorted(KL_FNS))
def test_kl_loss_all_masked(name):
    lp = _t(LP).requires_grad_(True)
    loss, _ = get_kl_fn(name, kl_coef=0.5).calculate_kl_loss(lp, _t(REF), torch.zeros(3, 4), old_logprob=_t(OLD))
    assert loss.dim() == 0 and loss.item() == 0.0
    if name == "none":
        return
    (grad,) = torch.autograd.grad(loss, lp)
    assert torch.count_nonzero(grad) == 0


def test_kl_loss_bad_mode():
    with pytest.raises(ValueError, match=r"loss_agg_mode='mean'.*token-mean"):
        get_kl_fn("k2").calculate_kl_loss(_t(LP), _t(REF), torch.tensor(MASK), "mean")


def test_kl_loss_shape_mismatch():
    with pytest.raises(ValueError, match=r"ref_logprob has shape \(3, 3\)"):
        get_kl_fn("k2").calculate_kl_loss(_t(LP), _t(REF)[:, :3], torch.tensor(MASK))


# --------------------------------------------------------------------------------------------------
# Adaptive coefficient
# --------------------------------------------------------------------------------------------------


def test_adaptive_update_sequence():
    fn = get_kl_fn("k2", kl_coef=0.001, adaptive=True, target_kl=0.1, horizon=100)
    expected = 0.001
    # kl/target - 1: 2.0 -> clipped to +0.2; -0.1; -1 -> clipped to -0.2; 0; +0.15
    for kl, factor in [(0.3, 1.02), (0.09, 0.99), (0.0, 0.98), (0.1, 1.0), (0.115, 1.015)]:
        fn.update_kl_coef(kl, batch_size=10)
        expected *= factor
        assert fn.kl_coef == pytest.approx(expected, rel=1e-12)
    assert fn.kl_coef == pytest.approx(0.001 * 1.02 * 0.99 * 0.98 * 1.015, rel=1e-12)


def test_adaptive_update_accepts_tensor_and_scales_with_batch():
    fn = get_kl_fn("k1", kl_coef=0.2, adaptive=True, target_kl=0.5, horizon=40)
    fn.update_kl_coef(torch.tensor(0.6), batch_size=4)  # 0.6/0.5 - 1 = 0.2 -> 1 + 0.2*4/40
    assert fn.kl_coef == pytest.approx(0.2 * 1.02, rel=1e-6)
    fn.update_kl_coef(torch.tensor(0.45), batch_size=8)  # -0.1 -> 1 - 0.1*8/40
    assert fn.kl_coef == pytest.approx(0.2 * 1.02 * 0.98, rel=1e-6)


def test_non_adaptive_update_is_noop():
    fn = get_kl_fn("k2", kl_coef=0.01)
    for kl in (0.0, 0.3, 10.0):
        fn.update_kl_coef(kl, batch_size=64)
        assert fn.kl_coef == 0.01


# --------------------------------------------------------------------------------------------------
# In-reward penalty
# --------------------------------------------------------------------------------------------------


def _penalty_inputs():
    scores = _t([[0.0, 0.0, 1.0, 7.0], [2.0, 5.0, 5.0, 5.0], [0.5, -0.5, 0.0, 1.0]])
    mask = torch.tensor(MASK)
    return scores, mask


def test_apply_kl_penalty_to_reward():
    coef = 0.2
    fn = get_kl_fn("k1", kl_coef=coef)
    scores, mask = _penalty_inputs()
    rewards, metrics = fn.apply_kl_penalty_to_reward(scores.clone(), _t(LP), _t(REF), mask)
    row_means = []
    for i, row in enumerate(MASK):
        kls = []
        for j, m in enumerate(row):
            if m:
                kl = LP[i][j] - REF[i][j]
                kls.append(kl)
                assert rewards[i, j].item() == pytest.approx(scores[i, j].item() - coef * kl, rel=1e-12)
            else:
                assert rewards[i, j].item() == scores[i, j].item()
        row_means.append(sum(kls) / (len(kls) + EPS))
    assert metrics["kl"].item() == pytest.approx(sum(row_means) / len(row_means), rel=1e-12)
    assert metrics["kl_coef"].item() == pytest.approx(coef)
    assert fn.kl_coef == coef  # not adaptive: unchanged
    for value in metrics.values():
        assert value.dim() == 0 and not value.requires_grad


def test_apply_kl_penalty_ignores_masked_garbage_and_updates_adaptive_coef():
    fn = get_kl_fn("k2", kl_coef=0.1, adaptive=True, target_kl=0.01, horizon=30)
    scores, mask = _penalty_inputs()
    lp, ref = _t(LP), _t(REF)
    lp[mask == 0] = math.nan
    ref[mask == 0] = math.inf
    rewards, metrics = fn.apply_kl_penalty_to_reward(scores, lp, ref, mask)
    assert torch.isfinite(rewards).all()
    assert torch.equal(rewards[mask == 0], scores[mask == 0])
    current = metrics["kl"].item()
    assert current > 0.01 * 1.2  # so the error is clipped to +0.2
    assert metrics["kl_coef"].item() == pytest.approx(0.1)  # the coefficient used for this batch
    assert fn.kl_coef == pytest.approx(0.1 * (1 + 0.2 * 3 / 30), rel=1e-12)


# --------------------------------------------------------------------------------------------------
# Entropy
# --------------------------------------------------------------------------------------------------

ENT = [[1.0, 2.0, 0.5, 3.0], [0.7, 0.1, 4.0, 4.0], [2.5, 1.5, 0.2, 0.9]]


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_default_entropy(mode):
    coef = 0.01
    ent = _t(ENT).requires_grad_(True)
    bonus, metrics = get_entropy_fn("default", entropy_coef=coef)(ent, torch.tensor(MASK), mode)
    if mode in ("token-mean", "seq-mean-token-mean"):
        expected = _py_agg(ENT, MASK, mode)
    elif mode == "seq-mean-token-sum":
        expected = sum(sum(e * m for e, m in zip(r, mr, strict=True)) for r, mr in zip(ENT, MASK, strict=True)) / 3
    else:
        expected = sum(sum(e * m for e, m in zip(r, mr, strict=True)) for r, mr in zip(ENT, MASK, strict=True)) / (
            4 + EPS
        )
    assert bonus.item() == pytest.approx(coef * expected, rel=1e-12)
    assert set(metrics) == {"entropy_loss"}
    assert metrics["entropy_loss"].item() == pytest.approx(expected, rel=1e-12)  # unscaled
    assert not metrics["entropy_loss"].requires_grad
    bonus.backward()
    assert torch.count_nonzero(ent.grad[torch.tensor(MASK) == 0]) == 0
    assert (ent.grad[torch.tensor(MASK) == 1] > 0).all()


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_mix_entropy_is_default_on_non_expert_rows(mode):
    coef = 0.02
    ent = _t([*ENT, [9.0, 9.0, 9.0, 9.0]])
    mask = torch.tensor([*MASK, [1, 1, 0, 0]])
    expert = torch.tensor([False, True, False, True])
    bonus, metrics = get_entropy_fn("mix", entropy_coef=coef)(ent, mask, mode, expert_mask=expert)
    want, want_metrics = get_entropy_fn("default", entropy_coef=coef)(ent[~expert], mask[~expert], mode)
    assert bonus.item() == pytest.approx(want.item(), rel=1e-12)
    assert metrics["entropy_loss"].item() == pytest.approx(want_metrics["entropy_loss"].item(), rel=1e-12)
    # and it differs from the default over all rows (the expert rows carry different entropies)
    everything, _ = get_entropy_fn("default", entropy_coef=coef)(ent, mask, mode)
    assert everything.item() != pytest.approx(bonus.item())


def test_mix_entropy_requires_expert_mask():
    with pytest.raises(ValueError, match="expert_mask"):
        get_entropy_fn("mix", entropy_coef=0.1)(_t(ENT), torch.tensor(MASK))
    with pytest.raises(ValueError, match=r"expert_mask must be a \[B\] tensor with B=3"):
        get_entropy_fn("mix", entropy_coef=0.1)(_t(ENT), torch.tensor(MASK), expert_mask=torch.tensor([True, False]))


def test_mix_entropy_all_expert_rows_gives_zero():
    ent = _t(ENT).requires_grad_(True)
    bonus, metrics = get_entropy_fn("mix", entropy_coef=0.5)(ent, torch.tensor(MASK), expert_mask=torch.ones(3) > 0)
    assert bonus.item() == 0.0 and metrics["entropy_loss"].item() == 0.0
    bonus.backward()
    assert torch.count_nonzero(ent.grad) == 0


def test_none_entropy_is_zero():
    bonus, metrics = get_entropy_fn("none", entropy_coef=0.5)(_t(ENT), torch.tensor(MASK))
    assert bonus.dim() == 0 and bonus.item() == 0.0
    assert metrics == {}


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float64], ids=["bool", "float"])
@pytest.mark.parametrize("name", ["default", "mix"])
def test_entropy_masked_garbage_and_all_zero_mask(name, mask_dtype):
    """With a float mask the entropy is first a dot product with the mask, not finite here, and is recomputed with the
    select: the clean value, a finite gradient, 0 at masked positions."""
    kwargs = {"expert_mask": torch.tensor([False, True, False])} if name == "mix" else {}
    fn = get_entropy_fn(name, entropy_coef=0.1)
    mask = torch.tensor(MASK, dtype=torch.bool)
    clean, _ = fn(_t(ENT), mask, **kwargs)
    dirty = _t(ENT)
    dirty[~mask] = math.nan
    dirty[0, 3] = math.inf
    dirty.requires_grad_(True)
    got, metrics = fn(dirty, mask.to(mask_dtype), **kwargs)
    assert torch.equal(got.detach(), clean)
    assert torch.isfinite(metrics["entropy_loss"])
    (grad,) = torch.autograd.grad(got, dirty)
    assert torch.isfinite(grad).all() and torch.count_nonzero(grad[~mask]) == 0

    ent = _t(ENT).requires_grad_(True)
    zero, _ = fn(ent, torch.zeros_like(mask), **kwargs)
    assert zero.item() == 0.0
    (grad,) = torch.autograd.grad(zero, ent)
    assert torch.count_nonzero(grad) == 0
