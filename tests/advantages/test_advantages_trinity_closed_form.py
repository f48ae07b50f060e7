"""Closed-form checks of Trinity-RFT 0.6.0's remaining advantage estimators (`remax`, `clipb`, `clipv`, `jsd`, the
trainer-side `grpo_verl` / `opmd_verl` / `asymre_verl`), of GRPO's `duplicate_experiences` on groups of unequal size,
and of REC's group of one (on which the reference crashes), on small batches worked out by hand."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from test_advantages_trinity_parity import EPS, assert_close, t64, trinity_rec_group

from trl_ext.advantages import get_advantage_fn

# ---------------------------------------------------------------------------------------------------------
# Closed-form checks
# ---------------------------------------------------------------------------------------------------------


def test_remax_hand_example():
    mask = torch.tensor([[1, 1, 0, 1, 0], [1, 1, 1, 0, 0]])
    out = get_advantage_fn("remax")(t64([2.0, -1.0]), response_mask=mask, reward_baselines=t64([0.5, 1.0]))
    # Row 0: reward 2 on position 3, the return 2 at positions 0..3; minus the baseline on valid tokens.
    assert_close(out, [[1.5, 1.5, 0.0, 1.5, 0.0], [-2.0, -2.0, -2.0, 0.0, 0.0]])
    # The completion ends with a masked tool output: the reward sits there and, multiplied by the mask, is lost.
    completion = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    out = get_advantage_fn("remax")(
        t64([2.0, -1.0]), response_mask=mask, reward_baselines=t64([0.5, 1.0]), completion_mask=completion
    )
    assert_close(out, [[-0.5, -0.5, 0.0, -0.5, 0.0], [-2.0, -2.0, -2.0, 0.0, 0.0]])
    # Token rewards: reverse cumulative sums over the valid tokens (a NaN outside the mask is ignored).
    token = t64([[1.0, 2.0, float("nan"), 3.0, 0.0], [0.5, 0.0, 0.5, 0.0, 0.0]])
    out = get_advantage_fn("remax")(token, response_mask=mask, reward_baselines=t64([1.0, 0.0]))
    assert_close(out, [[5.0, 4.0, 0.0, 2.0, 0.0], [1.0, 0.5, 0.5, 0.0, 0.0]])


def test_trainer_side_variants_sum_the_whole_row():
    # Two samples of one group; token rewards outside the mask count in the sum, as in the reference.
    token = t64([[0.0, 1.0, 2.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    a = 1.5 / (statistics.stdev([3.0, 0.0]) + EPS)
    assert_close(get_advantage_fn("grpo_verl")(token, [0, 0], response_mask=mask), [[a, a, 0], [-a, 0, 0]])
    assert_close(get_advantage_fn("opmd_verl")(token, [0, 0], response_mask=mask), [[1.5, 1.5, 0], [-1.5, 0, 0]])
    shifted = get_advantage_fn("asymre_verl", baseline_shift=-0.5)(token, [0, 0], response_mask=mask)
    assert_close(shifted, [[2.0, 2.0, 0], [-1.0, 0, 0]])
    # [N] rewards are the scores themselves; a group of one: GRPO mean 0 / std 1, baseline 0.
    assert_close(get_advantage_fn("grpo_verl")(t64([3.0]), [0], response_mask=mask[:1]), [[3 / (1 + EPS)] * 2 + [0]])
    assert_close(get_advantage_fn("asymre_verl")(t64([3.0]), ["a"], response_mask=mask[:1]), [[3.0, 3.0, 0]])


def test_clipb_hand_example():
    # One group of two: advantages +a / -a on every valid token.  S = p(H + log p) with H = -log p gives S = 0, except
    # at row 1 token 2 (H = 0, log p = log 0.5): S = -0.5 log 2 ... far below the mean.
    half = math.log(0.5)
    logprobs = t64([[half] * 4, [half] * 4])
    entropy = t64([[-half] * 4, [-half, -half, 0.0, -half]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1]])
    res = get_advantage_fn("clipb", mu=1.5).compute(
        t64([1.0, 0.0]), [0, 0], response_mask=mask, logprobs=logprobs, entropy=entropy
    )
    s = 0.5 * half  # the one non-zero signal
    es, var = s / 8, (7 * (s / 8) ** 2 + (s - s / 8) ** 2) / 8
    assert (s - es) < -1.5 * math.sqrt(var)  # ... which is removed: its advantage is negative
    assert res.token_keep.tolist() == [[True] * 4, [True, True, False, True]]
    assert res.metrics == pytest.approx(
        {"frac_clipped": 1 / 8, "frac_clipped_pos": 0.0, "frac_clipped_neg": 1 / 4, "ES": es, "varS": var}
    )
    # The same token with a positive advantage is kept.
    flipped = get_advantage_fn("clipb", mu=1.5).compute(
        t64([0.0, 1.0]), [0, 0], response_mask=mask, logprobs=logprobs, entropy=entropy
    )
    assert flipped.token_keep.all() and flipped.metrics["frac_clipped"] == 0.0
    # __call__ zeroes the removed token's advantage.
    out = get_advantage_fn("clipb", mu=1.5)(
        t64([1.0, 0.0]), [0, 0], response_mask=mask, logprobs=logprobs, entropy=entropy
    )
    a = 0.5 / (statistics.stdev([1.0, 0.0]) + EPS)
    assert_close(out, [[a] * 4, [-a, -a, 0.0, -a]])
    # A constant signal (std 0) keeps every token.
    flat = get_advantage_fn("clipb").compute(
        t64([1.0, 0.0]), [0, 0], response_mask=mask, logprobs=logprobs, entropy=-logprobs
    )
    assert flat.token_keep.all() and flat.metrics["varS"] == 0.0


def test_clipv_cap_and_zero_advantages():
    # D = necs - S with S = 0 (H = -log p): D = necs.  Row 0 (advantage +a), row 1 (-a), row 2 (a group of one with
    # reward 0: advantage 0).
    half = math.log(0.5)
    logprobs = t64([[half] * 4] * 3)
    necs = t64([[5.0, 0.0, 0.0, 0.0], [4.0, 3.0, 0.0, 0.0], [6.0, 0.0, 0.0, 0.0]])
    mask = torch.ones(3, 4, dtype=torch.int64)
    kwargs = dict(response_mask=mask, logprobs=logprobs, entropy=-logprobs, necs=necs)
    values = [5.0, 0, 0, 0, 4.0, 3.0, 0, 0, 6.0, 0, 0, 0]
    std = statistics.pstdev(values)
    assert 3.0 > 0.5 * std  # with mu = 0.5, D = 5, 4, 3, 6 all exceed mu * std
    uncapped = get_advantage_fn("clipv", mu=0.5, max_frac=1.0).compute(t64([1.0, 0.0, 0.0]), [0, 0, 1], **kwargs)
    # The positive row keeps everything; the negative row loses D = 4 and 3; the zero-advantage row loses D = 6.
    assert uncapped.token_keep.tolist() == [[True] * 4, [False, False, True, True], [False, True, True, True]]
    assert uncapped.metrics == pytest.approx(
        {"frac_clipped": 3 / 12, "frac_clipped_pos": 0.0, "frac_clipped_neg": 2 / 4, "stdD": std}
    )
    # max_frac = 0.1: at most int(1.2) = 1 negative-advantage token stays removed, the largest D (4); the
    # zero-advantage token stays removed too.
    capped = get_advantage_fn("clipv", mu=0.5, max_frac=0.1).compute(t64([1.0, 0.0, 0.0]), [0, 0, 1], **kwargs)
    assert capped.token_keep.tolist() == [[True] * 4, [False, True, True, True], [False, True, True, True]]
    # The defaults (mu 8.5, max_frac 1e-4): one outlier among 200 tokens is removed, as the cap allows one token.
    necs = torch.zeros(4, 50, dtype=torch.float64)
    necs[3, 7], necs[0, 0] = 100.0, 1.0
    defaults = get_advantage_fn("clipv").compute(
        t64([1.0, 1.0, 0.0, 0.0]),
        [0, 0, 0, 0],
        response_mask=torch.ones(4, 50),
        logprobs=torch.full((4, 50), half),
        entropy=torch.full((4, 50), -half),
        necs=necs,
    )
    assert (~defaults.token_keep).nonzero().tolist() == [[3, 7]]
    # Ties in D: the first in row-major order stays removed.
    tied = dict(kwargs, necs=t64([[5.0, 0.0, 0.0, 0.0], [4.0, 4.0, 0.0, 0.0], [6.0, 0.0, 0.0, 0.0]]))
    capped = get_advantage_fn("clipv", mu=0.5, max_frac=0.1).compute(t64([1.0, 0.0, 0.0]), [0, 0, 1], **tied)
    assert capped.token_keep[1].tolist() == [False, True, True, True]


def test_jsd_closed_form():
    teacher = t64([[math.log(0.5), math.log(0.25)]])
    student = t64([[math.log(0.25), math.log(0.25)]])
    mask = torch.ones(1, 2)
    kwargs = dict(teacher_logprob=teacher, old_logprob=student, response_mask=mask)
    # The reference's form. beta = 0: KL(student || teacher) at the sampled token = s - t; beta = 1: t - s.
    reference = {"form": "reference"}
    assert_close(get_advantage_fn("jsd", lambda_coef=0.0, **reference)(**kwargs), [[-math.log(0.5), 0.0]])
    two = get_advantage_fn("jsd", lambda_coef=1.0, kl_coef=2.0, **reference)(**kwargs)
    assert_close(two, [[-2 * math.log(2.0), 0.0]])
    # beta = 0.5: m = log((p_s + p_t) / 2) = log(3/8); JSD = 0.5 (t - m) + 0.5 (s - m).
    m = math.log(3 / 8)
    jsd = 0.5 * (math.log(0.5) - m) + 0.5 * (math.log(0.25) - m)
    res = get_advantage_fn("jsd", **reference).compute(**kwargs)
    assert_close(res.advantages, [[-jsd, 0.0]])
    assert res.metrics == pytest.approx({"jsd/mean": jsd, "jsd/std": 0.0, "advantages/mean": -jsd})
    # The default (gradient) form: beta = 0 as the reference; beta = 1: kl_coef * p_t / p_s; beta = 0.5:
    # -(1 - beta) * (s - m) = -0.5 * log(0.25 / 0.375) > 0 where the teacher prefers the token, 0 where they agree.
    assert_close(get_advantage_fn("jsd", lambda_coef=0.0)(**kwargs), [[-math.log(0.5), 0.0]])
    assert_close(get_advantage_fn("jsd", lambda_coef=1.0, kl_coef=2.0)(**kwargs), [[4.0, 2.0]])
    res = get_advantage_fn("jsd").compute(**kwargs)
    assert_close(res.advantages, [[-0.5 * math.log(2 / 3), 0.0]])
    assert res.metrics["jsd/mean"] == pytest.approx(jsd)  # the metric stays the reference's value
    # Temperature divides both log-probs.
    hot = get_advantage_fn("jsd", lambda_coef=0.0, temperature=2.0)(**kwargs)
    assert_close(hot, [[-math.log(0.5) / 2, 0.0]])
    # Masked positions are exactly 0, whatever they hold; an empty batch gives zero metrics.
    masked = get_advantage_fn("jsd").compute(
        teacher_logprob=t64([[float("-inf"), -1.0]]), old_logprob=t64([[float("nan"), -1.0]]), response_mask=[[0, 1]]
    )
    assert masked.advantages.tolist() == [[0.0, 0.0]]
    empty = get_advantage_fn("jsd").compute(
        teacher_logprob=torch.zeros(0, 3), old_logprob=torch.zeros(0, 3), response_mask=torch.zeros(0, 3)
    )
    assert empty.advantages.shape == (0, 3) and empty.metrics == {
        "jsd/mean": 0.0,
        "jsd/std": 0.0,
        "advantages/mean": 0.0,
    }


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 1.0])
def test_jsd_gradient_form_is_the_policy_gradient_of_the_divergence(beta):
    """Over a whole next-token distribution, E_student[A(x) * grad log p_student(x)] = -kl_coef * grad JSD_beta
    (autograd on the full divergence, the mixture form for 0 < beta < 1, KL(student||teacher) at 0 and
    KL(teacher||student) at 1); the reference's form does not satisfy it."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, generator=g, dtype=torch.float64, requires_grad=True)
    log_t = torch.log_softmax(torch.randn(6, generator=g, dtype=torch.float64), dim=0)
    log_s = torch.log_softmax(logits, dim=0)
    p_s, p_t = log_s.exp(), log_t.exp()
    if beta == 0:
        divergence = (p_s * (log_s - log_t)).sum()
    elif beta == 1:
        divergence = (p_t * (log_t - log_s)).sum()
    else:
        log_m = torch.log(beta * p_t + (1 - beta) * p_s)
        divergence = beta * (p_t * (log_t - log_m)).sum() + (1 - beta) * (p_s * (log_s - log_m)).sum()
    (expected,) = torch.autograd.grad(-0.7 * divergence, logits, retain_graph=True)

    def policy_gradient(form):
        fn = get_advantage_fn("jsd", lambda_coef=beta, kl_coef=0.7, form=form)
        advantages = fn(teacher_logprob=log_t.detach()[None], old_logprob=log_s.detach()[None],
                        response_mask=torch.ones(1, 6))[0]  # fmt: skip
        (grad,) = torch.autograd.grad((p_s.detach() * advantages * log_s).sum(), logits, retain_graph=True)
        return grad

    torch.testing.assert_close(policy_gradient("gradient"), expected, rtol=1e-10, atol=1e-12)
    if beta != 0:  # at beta = 0 both forms are KL(student || teacher)'s
        assert not torch.allclose(policy_gradient("reference"), expected, rtol=1e-3)


def test_grpo_duplicate_experiences_unequal_sizes_layout():
    fn = get_advantage_fn("grpo", std_threshold=0.0, duplicate_experiences=True)
    # Group a (3 samples, valid) replaces group b (1 sample, skipped: a group of one): b's row takes a's first
    # sample, a's two others are appended as rows 4 and 5.
    res = fn.compute(t64([1.0, 0.0, 2.0, 7.0]), ["a", "a", "a", "b"])
    assert res.source.tolist() == [0, 1, 2, 0, 1, 2] and res.keep.all()
    a = get_advantage_fn("grpo")(t64([1.0, 0.0, 2.0]), [0, 0, 0])
    assert_close(fn(t64([1.0, 0.0, 2.0, 7.0]), ["a", "a", "a", "b"]), torch.cat([a, a]))
    # Group a (2 samples, valid) replaces group b (3 samples, std 0): b's third row is dropped.
    res = fn.compute(t64([3.0, 3.0, 1.0, 3.0, 0.0]), ["b", "b", "a", "b", "a"])
    assert res.source.tolist() == [2, 4, 2, 3, 4] and res.keep.tolist() == [True, True, True, False, True]


def test_rec_group_of_one_reference_crashes():
    """The reference's REC builds its rewards tensor only for groups of two or more (with or without drop), so a
    group of one raises; trl_ext keeps it with A = R (README, "Deliberate differences")."""
    with pytest.raises(UnboundLocalError):
        trinity_rec_group([2.0])
    assert trinity_rec_group([1.0, 0.0]) == [0.5, -0.5]
    for drop in (None, "balance"):
        for reward in (2.0, -1.0):
            res = get_advantage_fn("rec", drop=drop).compute(t64([reward]), [0])
            assert res.keep.all() and res.advantages.tolist() == [reward]
