"""Invariants of the losses and of the window normalization (docs/design.md §2.6)."""

from __future__ import annotations

import warnings

import pytest
import torch

from trl_ext.losses import LOSS_AGG_MODES, aggregate_loss, get_policy_loss


def batch(rows=6, cols=10, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    lp = -torch.rand(rows, cols, generator=gen, dtype=dtype) * 3 - 0.05
    lengths = torch.randint(1, cols + 1, (rows,), generator=gen)
    mask = torch.arange(cols) < lengths.unsqueeze(-1)
    adv = torch.randn(rows, generator=gen, dtype=dtype)
    return lp, mask, adv


def grad_of(name, lp, old, mask, adv, **kwargs):
    lp = lp.clone().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn = get_policy_loss(name, **kwargs)
    loss, _ = fn(logprob=lp, old_logprob=old, action_mask=mask, advantages=adv)
    loss.backward()
    return lp.grad


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_on_policy_gradient_is_the_plain_policy_gradient(mode):
    """At r = 1 (old = lp) the gradients of ppo, gspo, cispo and the paper's SAPO all equal the
    gradient of agg(−A·lp), the plain policy gradient; Trinity's detached SAPO gate gives 2/τ times it."""
    lp, mask, adv = batch()
    plain = lp.clone().requires_grad_(True)
    aggregate_loss(-adv.unsqueeze(-1) * plain, mask, mode).backward()
    assert plain.grad.abs().sum() > 0
    old = lp.clone()
    for name in ("ppo", "gspo", "cispo", "sapo"):
        torch.testing.assert_close(grad_of(name, lp, old, mask, adv, loss_agg_mode=mode), plain.grad, msg=name)
    # The detached gate weighs the gradient by f(1) = 2/τ (τ_pos for A > 0, τ_neg otherwise).
    detached = grad_of("sapo", lp, old, mask, adv, loss_agg_mode=mode, detach_gate=True, tau_pos=1.0, tau_neg=2.0)
    scale = torch.where(adv > 0, 2.0, 1.0).unsqueeze(-1)
    torch.testing.assert_close(detached, plain.grad * scale)


def test_sapo_paper_gradient_decays_off_policy_while_the_detached_gate_grows():
    """Paper SAPO's weight 4σ(1−σ)·r is 1 at r = 1 and vanishes far off-policy; Trinity's detached
    gate f(r) = 4σ/τ keeps growing with r."""
    ratios = torch.tensor([0.5, 1.0, 2.0, 8.0], dtype=torch.float64)
    old = torch.zeros(1, 4, dtype=torch.float64)
    lp = ratios.log().unsqueeze(0)
    mask = torch.ones(1, 4, dtype=torch.bool)
    adv = torch.ones(1, dtype=torch.float64)
    # seq-mean-token-sum: each token's gradient is its own weight (no 1/N)
    paper = -grad_of("sapo", lp, old, mask, adv, loss_agg_mode="seq-mean-token-sum")[0]
    detached = -grad_of("sapo", lp, old, mask, adv, loss_agg_mode="seq-mean-token-sum", detach_gate=True)[0]
    sig = torch.sigmoid(ratios - 1)
    torch.testing.assert_close(paper, 4 * sig * (1 - sig) * ratios)
    torch.testing.assert_close(detached, 4 * sig)
    assert paper[1] == pytest.approx(1.0)
    assert paper[0] < paper[1] and paper[3] < 0.05  # a soft trust region: far-off tokens barely move
    assert detached[0] < detached[1] < detached[2] < detached[3]


def test_ppo_fallback_to_policy_gradient_ignores_old_logprob():
    lp, mask, adv = batch()
    far_off = lp + 5.0  # would clip everything
    on_policy = grad_of("ppo", lp, lp.clone(), mask, adv)
    torch.testing.assert_close(grad_of("ppo", lp, far_off, mask, adv, fallback_to_policy_gradient=True), on_policy)
    assert not torch.allclose(grad_of("ppo", lp, far_off, mask, adv), on_policy)


# ------------------------------------------------------------------------------------------------
# Window normalization: the shares of the micro-batches add up to the whole batch's loss.
# ------------------------------------------------------------------------------------------------

WINDOW_CASES = [
    ("ppo", {}),
    ("gspo", {"clip_range_low": 0.1, "clip_range_high": 0.1}),
    ("cispo", {}),
    ("sapo", {}),
    ("topr", {}),
    ("sppo", {}),
    ("opmd", {}),
    ("importance_sampling", {}),
    ("sft_phi", {}),
]


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize(("name", "kwargs"), WINDOW_CASES)
@pytest.mark.parametrize("splits", [[8], [2, 2, 2, 2], [3, 1, 4], [1] * 8])
def test_window_shares_sum_to_the_full_batch_loss(name, kwargs, mode, splits):
    lp, mask, adv = batch(rows=8, cols=12, seed=3)
    gen = torch.Generator().manual_seed(1)
    old = lp + 0.3 * torch.randn(lp.shape, generator=gen, dtype=lp.dtype)
    mask[5] = False  # an empty row counts as a row, as in the local mean
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn = get_policy_loss(name, loss_agg_mode=mode, **kwargs)

    full = lp.clone().requires_grad_(True)
    full_loss, _ = fn(logprob=full, old_logprob=old, action_mask=mask, advantages=adv)
    full_loss.backward()

    window = {"global_valid_toks": mask.sum(), "global_valid_seqs": mask.shape[0]}
    parts = lp.clone().requires_grad_(True)
    total = torch.zeros((), dtype=lp.dtype)
    start = 0
    for size in splits:
        rows = slice(start, start + size)
        share, _ = fn(
            logprob=parts[rows], old_logprob=old[rows], action_mask=mask[rows], advantages=adv[rows], **window
        )
        total = total + share
        start += size
    total.backward()
    torch.testing.assert_close(total, full_loss.detach())
    torch.testing.assert_close(parts.grad, full.grad)


def test_window_shares_for_dpo_pairs():
    lp, mask, _ = batch(rows=8, cols=6, seed=5)
    ref = lp + 0.2
    fn = get_policy_loss("dpo", beta=0.5)
    full = lp.clone().requires_grad_(True)
    full_loss, _ = fn(logprob=full, ref_logprob=ref, action_mask=mask)
    full_loss.backward()
    parts = lp.clone().requires_grad_(True)
    total = sum(
        fn(logprob=parts[i : i + 2], ref_logprob=ref[i : i + 2], action_mask=mask[i : i + 2], global_valid_seqs=8)[0]
        for i in range(0, 8, 2)
    )
    total.backward()
    torch.testing.assert_close(total, full_loss.detach())
    torch.testing.assert_close(parts.grad, full.grad)


def test_without_window_counts_a_loss_aggregates_its_own_batch():
    """Local aggregation (what the reference does): a micro-batch's loss is its own mean, so the plain
    mean of micro-batch losses differs from the full-batch token mean when lengths differ."""
    lp, mask, adv = batch(rows=4, cols=8, seed=9)
    mask[0, 1:] = False  # row 0 has 1 token, the others more
    fn = get_policy_loss("ppo")
    old = lp.clone()
    full, _ = fn(logprob=lp, old_logprob=old, action_mask=mask, advantages=adv)
    halves = [
        fn(logprob=lp[i : i + 2], old_logprob=old[i : i + 2], action_mask=mask[i : i + 2], advantages=adv[i : i + 2])[0]
        for i in (0, 2)
    ]
    expected_first = aggregate_loss(-adv[:2].unsqueeze(-1).expand(2, 8), mask[:2])
    torch.testing.assert_close(halves[0], expected_first)
    assert not torch.allclose((halves[0] + halves[1]) / 2, full)


def test_aggregate_loss_modes_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, float("nan"), float("inf")]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate_loss(values, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate_loss(values, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert aggregate_loss(values, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate_loss(values, mask, "seq-mean-token-sum-norm").item() == pytest.approx(10 / 3)
    assert aggregate_loss(values, mask, "seq-mean-token-sum-norm", normalizer=5).item() == pytest.approx(10 / 5)
    assert aggregate_loss(values, mask, "token-mean", global_valid_toks=8).item() == pytest.approx(10 / 8)
    assert aggregate_loss(
        values, mask, "seq-mean-token-mean", global_valid_seqs=torch.tensor(4)
    ).item() == pytest.approx(6 / 4)
    # NaN / inf at masked positions reach neither the value nor the gradient
    leaf = values.clone().requires_grad_(True)
    aggregate_loss(leaf, mask, "token-mean").backward()
    torch.testing.assert_close(leaf.grad, torch.tensor([[0.25, 0.25, 0.25], [0.25, 0.0, 0.0]], dtype=torch.float64))
    empty = aggregate_loss(values, torch.zeros(2, 3), "token-mean")
    assert empty.item() == 0.0


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float64], ids=["bool", "float"])
@pytest.mark.parametrize(
    "name", ["ppo", "gspo", "cispo", "sapo", "topr", "sppo", "rec", "opmd", "importance_sampling", "gpg", "m2po"]
)
def test_nan_advantage_of_an_empty_row_does_not_leak(name, mask_dtype):
    """A per-sequence advantage belongs to masked-out positions when its row has no valid token (with a float mask: the
    multiplied loss is NaN there and is recomputed with the select)."""
    lp, mask, adv = batch(rows=4, cols=5, seed=11)
    mask[2] = False
    mask = mask.to(mask_dtype)
    old = lp + 0.1
    poisoned = adv.clone()
    poisoned[2] = float("nan")
    clean = adv.clone()
    clean[2] = 0.0
    results = []
    for advantages in (poisoned, clean):
        leaf = lp.clone().requires_grad_(True)
        loss, metrics = get_policy_loss(name)(logprob=leaf, old_logprob=old, action_mask=mask, advantages=advantages)
        loss.backward()
        results.append((loss.detach(), leaf.grad, metrics))
    (loss_p, grad_p, metrics_p), (loss_c, grad_c, metrics_c) = results
    assert torch.isfinite(loss_p) and torch.isfinite(grad_p).all()
    torch.testing.assert_close(loss_p, loss_c)
    torch.testing.assert_close(grad_p, grad_c)
    for key in metrics_c:
        torch.testing.assert_close(metrics_p[key], metrics_c[key])
