"""MIX / MIX-CHORD under window normalization: each part is normalized over its own rows of the whole window,
so the shares of the micro-batches add up to (1 − μ)·PPO(all rollout rows) + μ·SFT(all expert rows) whatever the
split, metrics included; the mix entropy bonus likewise covers the rollout rows of the window."""

from __future__ import annotations

import pytest
import torch

from trl_ext.losses import get_entropy_fn, get_policy_loss

B, T = 6, 5
MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    lp = (-torch.rand(B, T, generator=g, dtype=torch.float64) * 2).requires_grad_()
    old = lp.detach() + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    mask = torch.ones(B, T, dtype=torch.bool)
    for row, length in enumerate([5, 2, 4, 1, 3, 5]):
        mask[row, length:] = False
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    expert = torch.tensor([False, True, False, True, True, False])
    return lp, old, mask, adv, expert


def _closed_form(lp, old, mask, adv, expert, mode, mu, normalizer):
    """Each part on its own rows (the whole window) with its own loss, blended by μ."""
    usual, exp = ~expert, expert
    ppo, ppo_metrics = get_policy_loss("ppo", loss_agg_mode=mode)(
        lp[usual], old[usual], mask[usual], adv[usual], normalizer=normalizer * int(usual.sum()) / B
    )
    sft, _ = get_policy_loss("sft", loss_agg_mode=mode)(lp[exp], mask[exp], normalizer=normalizer * int(exp.sum()) / B)
    return (1 - mu) * ppo + mu * sft, ppo, sft, ppo_metrics


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("split", [[6], [3, 3], [1, 2, 3], [2, 2, 2]])
def test_window_shares_add_up_to_the_parts_over_their_own_rows(mode, split):
    lp, old, mask, adv, expert = _batch()
    loss_fn = get_policy_loss("mix", mu=0.3, loss_agg_mode=mode)
    normalizer = B * T
    window = {
        "global_valid_toks": mask.sum().double(),
        "global_valid_seqs": torch.tensor(float(B)),
        "expert_valid_toks": mask[expert].sum().double(),
        "expert_valid_seqs": expert.sum().double(),
        "normalizer": normalizer,
    }
    total, grad, metrics = 0.0, torch.zeros_like(lp), {}
    start = 0
    for size in split:
        rows = slice(start, start + size)
        start += size
        piece = lp.detach()[rows].clone().requires_grad_()
        loss, m = loss_fn(piece, old[rows], mask[rows], adv[rows], expert_mask=expert[rows], **window)
        loss.backward()
        grad[rows] = piece.grad
        total = total + loss.detach()
        for k, v in m.items():
            metrics[k] = metrics.get(k, 0.0) + v
    expected, ppo, sft, ppo_metrics = _closed_form(lp, old, mask, adv, expert, mode, 0.3, normalizer)
    expected.backward()
    torch.testing.assert_close(total, expected.detach())
    torch.testing.assert_close(grad, lp.grad)
    torch.testing.assert_close(metrics["usual/pg_loss"], ppo.detach())
    torch.testing.assert_close(metrics["expert/sft_loss"], sft.detach())
    # a token mean of the part (pg_clipfrac) comes out as the window's token mean
    torch.testing.assert_close(metrics["usual/pg_clipfrac"], ppo_metrics["pg_clipfrac"], rtol=1e-6, atol=1e-7)


def test_without_window_counts_the_reference_weighting_applies():
    lp, old, mask, adv, expert = _batch()
    fn = get_policy_loss("mix", mu=0.3, train_batch_size_usual=3, train_batch_size_expert=3)
    loss, _ = fn(lp, old, mask, adv, expert_mask=expert)
    _, ppo, sft, _ = _closed_form(lp, old, mask, adv, expert, "token-mean", 0.3, T * B)
    # n = 3 rows each, w = 1 / 3: the reference's n·w = 1 here
    torch.testing.assert_close(loss, 0.7 * ppo + 0.3 * sft)


def test_window_mode_needs_all_four_counts():
    lp, old, mask, adv, expert = _batch()
    with pytest.raises(ValueError, match="expert_valid_toks and expert_valid_seqs together"):
        get_policy_loss("mix")(lp, old, mask, adv, expert_mask=expert, global_valid_toks=10, global_valid_seqs=6)


@pytest.mark.parametrize("mode", MODES)
def test_mix_entropy_over_the_window_rollout_rows(mode):
    _, _, mask, _, expert = _batch()
    entropy = torch.rand(B, T, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    fn = get_entropy_fn("mix", entropy_coef=0.5)
    window = {
        "global_valid_toks": mask.sum(),
        "global_valid_seqs": B,
        "expert_valid_toks": mask[expert].sum(),
        "expert_valid_seqs": int(expert.sum()),
        "normalizer": B * T,
    }
    total = sum(
        fn(entropy[rows], mask[rows], mode, expert_mask=expert[rows], **window)[0]
        for rows in (slice(0, 2), slice(2, 6))
    )
    usual = ~expert
    expected, _ = get_entropy_fn("default", entropy_coef=0.5)(
        entropy[usual], mask[usual], mode, normalizer=B * T * int(usual.sum()) / B
    )
    torch.testing.assert_close(total, expected)
