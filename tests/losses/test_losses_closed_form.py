"""Every policy loss against closed forms: hand-computed examples and an independent plain-Python port.

`plain_reference` re-derives each loss token by token with `math` and the analytic derivative, so
value, gradient and metrics are checked against code that shares nothing with `trl_ext.losses`.
"""

from __future__ import annotations

import math
import warnings

import plain_reference as ref
import pytest
import torch

from trl_ext.losses import get_policy_loss

# ------------------------------------------------------------------------------------------------
# Hand-checkable examples: numbers you can verify on paper.
# ------------------------------------------------------------------------------------------------

LN = math.log


def run(name, *, lp, old=None, mask=None, adv=None, **kwargs):
    lp = torch.tensor(lp, dtype=torch.float64, requires_grad=True)
    inputs = {
        "logprob": lp,
        "action_mask": torch.ones_like(lp, dtype=torch.bool) if mask is None else torch.tensor(mask),
    }
    if old is not None:
        inputs["old_logprob"] = torch.tensor(old, dtype=torch.float64)
    if adv is not None:
        inputs["advantages"] = torch.tensor(adv, dtype=torch.float64)
    call_kwargs = {k: kwargs.pop(k) for k in ("ref_logprob", "expert_mask", "step") if k in kwargs}
    if "ref_logprob" in call_kwargs:
        call_kwargs["ref_logprob"] = torch.tensor(call_kwargs["ref_logprob"], dtype=torch.float64)
    loss, metrics = get_policy_loss(name, **kwargs)(**inputs, **call_kwargs)
    loss.backward()
    return loss.item(), lp.grad.flatten().tolist(), {k: v.item() for k, v in metrics.items()}


def test_ppo_by_hand():
    # token 1: r = 0.5/0.25 = 2 → clipped to 1.2 with A = 1 (max(−2, −1.2) = −1.2, no gradient);
    # token 2: r = 1 → −1, gradient −1.  token-mean: (−1.2 − 1)/2, grad [0, −1/2].
    loss, grad, metrics = run("ppo", lp=[[LN(0.5), LN(0.5)]], old=[[LN(0.25), LN(0.5)]], adv=[1.0])
    assert loss == pytest.approx(-1.1)
    assert grad == pytest.approx([0.0, -0.5])
    assert metrics["pg_clipfrac"] == pytest.approx(0.5)
    assert metrics["ppo_kl"] == pytest.approx(-LN(2) / 2)


def test_ppo_dual_clip_by_hand():
    # A = −1, r = e^2 ≈ 7.39: C = max(7.39, 1.2) = 7.39 > L3 = c = 3 → loss 3, no gradient.
    loss, grad, metrics = run("ppo", lp=[[0.0]], old=[[-2.0]], adv=[-1.0])
    assert loss == pytest.approx(3.0)
    assert grad == [0.0]
    assert metrics["pg_clipfrac_lower"] == pytest.approx(1.0)
    # A = −1, r = 2: C = 2 < 3 → the unclipped branch, gradient −A·r = 2.
    loss, grad, _ = run("ppo", lp=[[LN(2)]], old=[[0.0]], adv=[-1.0])
    assert (loss, grad) == (pytest.approx(2.0), [pytest.approx(2.0)])


def test_gspo_by_hand():
    # s = mean(log 2, 0) = log(2)/2 → r = √2 on both tokens; A = −1, ε = 0.5 / 0.5: L1 = √2 > L2 = 1.5?
    # No: clip(√2 ≈ 1.414) = 1.414 (inside [0.5, 1.5]) → L = √2, gradient −A·r = √2 per token, seq-mean-token-mean.
    loss, grad, metrics = run(
        "gspo", lp=[[LN(2), 0.0]], old=[[0.0, 0.0]], adv=[-1.0], clip_range_low=0.5, clip_range_high=0.5
    )
    assert loss == pytest.approx(math.sqrt(2))
    assert grad == pytest.approx([math.sqrt(2) / 2, math.sqrt(2) / 2])
    assert metrics["ppo_kl_seq"] == pytest.approx(-LN(2) / 2)


def test_cispo_by_hand():
    # r = 2 → w = clamp(2, 0, 1.28) = 1.28; L = −A·1.28·lp; gradient −A·1.28 (A = 0.5).
    loss, grad, metrics = run("cispo", lp=[[LN(0.5)]], old=[[LN(0.25)]], adv=[0.5])
    assert loss == pytest.approx(-0.5 * 1.28 * LN(0.5))
    assert grad == pytest.approx([-0.64])
    # With the mask clip, r = 2 > 1.28 and A > 0 → the token is masked: no loss, no gradient.
    loss, grad, metrics = run("cispo", lp=[[LN(0.5)]], old=[[LN(0.25)]], adv=[0.5], enable_mask_clip=True)
    assert (loss, grad, metrics["unmasked_frac"]) == (0.0, [0.0], 0.0)


def test_sapo_by_hand():
    # At r = 1 the paper's gate has value 2/τ and gradient weight 4σ(0)(1 − σ(0))·1 = 1.
    loss, grad, metrics = run("sapo", lp=[[-1.0]], old=[[-1.0]], adv=[2.0])
    assert loss == pytest.approx(-2.0 * 2.0)
    assert grad == pytest.approx([-2.0])
    assert metrics["avg_soft_gate"] == pytest.approx(2.0)
    # detach_gate (Trinity-RFT): L = −A·sg(f)·lp, gradient −A·2/τ_neg for A < 0.
    loss, grad, _ = run("sapo", lp=[[-1.0]], old=[[-1.0]], adv=[-2.0], detach_gate=True)
    assert loss == pytest.approx(2.0 * (2 / 1.05) * -1.0)
    assert grad == pytest.approx([2.0 * 2 / 1.05])


def test_topr_by_hand():
    # A = −1 ≤ 0 with r = 0.5: α = 0.5 → L = 0.5·lp; A = 1: α = 1 → L = −lp.
    loss, grad, metrics = run("topr", lp=[[LN(0.25)], [LN(0.5)]], old=[[LN(0.5)], [LN(0.25)]], adv=[-1.0, 1.0])
    assert loss == pytest.approx((0.5 * LN(0.25) - LN(0.5)) / 2)
    assert grad == pytest.approx([0.25, -0.5])
    assert metrics["avg_alpha"] == pytest.approx(0.75)


def test_sppo_by_hand():
    # ε = 0.3: r = 1.2 is kept (gradient −A), r = 2 is dropped.
    loss, grad, metrics = run("sppo", lp=[[LN(1.2), LN(2.0)]], old=[[0.0, 0.0]], adv=[1.0])
    assert loss == pytest.approx(-LN(1.2) / 2)
    assert grad == pytest.approx([-0.5, 0.0])
    assert metrics["pg_clipfrac"] == pytest.approx(0.5)


def test_rec_by_hand():
    # one-side, A = 1: r = 1.1 ≤ 1.2 kept, r = 1.5 dropped; k2 regularizer 0.5·x² on both tokens.
    lp, old = [[LN(1.1), LN(1.5)]], [[0.0, 0.0]]
    loss, grad, _ = run("rec", lp=lp, old=old, adv=[1.0], clip_mode="one-side", regularizer="k2", regularizer_coef=0.5)
    assert loss == pytest.approx((-LN(1.1) + 0.5 * LN(1.1) ** 2 + 0.5 * LN(1.5) ** 2) / 2)
    assert grad == pytest.approx([(-1 + LN(1.1)) / 2, LN(1.5) / 2])
    # weight="advantage": A·e^{A/temp} with temp = 2 → 1·e^0.5.
    loss, grad, _ = run("rec", lp=[[-1.0]], old=[[-1.0]], adv=[1.0], weight="advantage", temp=2.0)
    assert loss == pytest.approx(math.exp(0.5))
    assert grad == pytest.approx([-math.exp(0.5)])


def test_opmd_importance_sampling_and_sft_by_hand():
    loss, grad, _ = run("opmd", lp=[[-2.0]], adv=[3.0], tau=2.0)
    assert (loss, grad) == (pytest.approx(2.0), [pytest.approx(-1.0)])
    loss, grad, metrics = run("importance_sampling", lp=[[LN(0.5)]], old=[[LN(0.25)]], adv=[1.5])
    assert (loss, grad, metrics["ratio/mean"]) == (pytest.approx(-3.0), [pytest.approx(-3.0)], pytest.approx(2.0))
    assert run("sft", lp=[[LN(0.5), LN(0.25)]])[:2] == (
        pytest.approx(-(LN(0.5) + LN(0.25)) / 2),
        pytest.approx([-0.5, -0.5]),
    )
    assert run("sft_is", lp=[[LN(0.5)]])[:2] == (pytest.approx(-0.5 * LN(0.5)), [pytest.approx(-0.5)])
    # φ(p) = p(1 − p) = 0.25 at p = 0.5; with cutoff 0.4 the token (p = 0.5 > 0.4) is clamped: no gradient.
    assert run("sft_phi", lp=[[LN(0.5)]])[:2] == (pytest.approx(-0.25 * LN(0.5)), [pytest.approx(-0.25)])
    loss, grad, _ = run("sft_phi", lp=[[LN(0.5)]], cutoff_prob=0.4)
    assert (loss, grad) == (pytest.approx(-0.25 * LN(0.4)), [0.0])


def test_dpo_by_hand():
    # One pair, β = 1: z = (−1 − (−2)) − (−3 − (−2)) = 2 → loss −log σ(2); dL/dS_c = −σ(−2).
    loss, grad, metrics = run("dpo", lp=[[-1.0], [-3.0]], ref_logprob=[[-2.0], [-2.0]], beta=1.0, mask=[[True], [True]])
    assert loss == pytest.approx(-math.log(ref.sigmoid(2.0)))
    assert grad == pytest.approx([-ref.sigmoid(-2.0), ref.sigmoid(-2.0)])
    assert metrics["chosen_reward"] == pytest.approx(1.0)
    assert metrics["rejected_reward"] == pytest.approx(-1.0)
    assert metrics["accuracy_mean"] == 1.0


def test_dpo_is_per_pair_not_summed_over_the_batch():
    # Two pairs with z = +4 and −4. Per pair: mean(−log σ(0.4), −log σ(−0.4)). The reference sums all pairs
    # into one z = 0 and would give −log σ(0) = log 2 instead.
    lp = [[0.0], [-4.0], [-4.0], [0.0]]
    loss, _, _ = run("dpo", lp=lp, ref_logprob=[[0.0]] * 4, mask=[[True]] * 4)
    expected = (-math.log(ref.sigmoid(0.4)) - math.log(ref.sigmoid(-0.4))) / 2
    assert loss == pytest.approx(expected)
    assert loss != pytest.approx(math.log(2))


def test_mix_by_hand():
    # Row 0 usual (A = 1, r = 1 → ppo −1), row 1 expert (sft −log 0.5); weights 1: (1 − μ)·1·(−1) + μ·1·log 2.
    loss, grad, metrics = run(
        "mix",
        lp=[[-1.0], [LN(0.5)]],
        old=[[-1.0], [0.0]],
        adv=[1.0, 5.0],
        expert_mask=torch.tensor([False, True]),
        mu=0.25,
    )
    assert loss == pytest.approx(0.75 * -1.0 + 0.25 * LN(2))
    assert grad == pytest.approx([-0.75, -0.25])
    assert metrics["usual/pg_loss"] == pytest.approx(-1.0)
    assert metrics["expert/sft_loss"] == pytest.approx(LN(2))


@pytest.mark.parametrize(
    ("step", "mu"),
    [
        (0, 0.0),
        (5, 0.25),
        (10, 0.5),
        (15, 0.02 + 0.48 * 0.5 * (1 + math.cos(math.pi * 5 / 20))),
        (30, 0.02),
        (99, 0.02),
    ],
)
def test_mix_chord_mu_schedule(step, mu):
    # W = 10 warm-up steps to μ_peak = 0.5, cosine decay over D = 20 steps to μ_valley = 0.02.
    args = {"mu_warmup_steps": 10, "mu_decay_steps": 20, "mu_peak": 0.5, "mu_valley": 0.02}
    for step_input in (step, torch.full((2,), step)):
        _, _, metrics = run(
            "mix_chord", lp=[[-1.0], [-1.0]], old=[[-1.0], [-1.0]], adv=[1.0, 1.0],
            expert_mask=torch.tensor([False, True]), step=step_input, **args,
        )  # fmt: skip
        assert metrics["mu"] == pytest.approx(mu)


# ------------------------------------------------------------------------------------------------
# Random shapes against the plain-Python port
# ------------------------------------------------------------------------------------------------

SHAPES = [(1, 1), (1, 7), (2, 3), (5, 9), (12, 16), (30, 24)]


def make_batch(shape, dtype, seed, per_token_adv, empty_rows=True):
    gen = torch.Generator().manual_seed(seed)
    rows, cols = shape
    lp = -(torch.rand(shape, generator=gen, dtype=torch.float64) * 2.0) - 0.01
    old = lp + 0.4 * torch.randn(shape, generator=gen, dtype=torch.float64)
    lengths = torch.randint(0, cols + 1, (rows,), generator=gen)
    lengths[0] = max(int(lengths[0]), 1)  # at least one valid token overall
    if not empty_rows:
        lengths = lengths.clamp(min=1)
    mask = torch.arange(cols).unsqueeze(0) < lengths.unsqueeze(1)
    adv = torch.randn(shape if per_token_adv else (rows,), generator=gen, dtype=torch.float64)
    return lp.to(dtype), old.to(dtype), mask, adv.to(dtype)


def as_lists(lp, old, mask, adv):
    adv_full = adv.unsqueeze(-1).expand_as(lp) if adv.dim() == 1 else adv
    return lp.double().tolist(), old.double().tolist(), mask.tolist(), adv_full.double().tolist()


# name -> (trl_ext kwargs, reference function taking (lp, old, mask, adv) lists)
CASES = {
    "ppo": ({}, lambda lp, old, m, a: ref.ppo(lp, old, m, a)),
    "ppo-asym-seqmean": (
        {"clip_range_low": 0.1, "clip_range_high": 0.28, "clip_ratio_c": 2.0, "loss_agg_mode": "seq-mean-token-mean"},
        lambda lp, old, m, a: ref.ppo(lp, old, m, a, 0.1, 0.28, 2.0, "seq-mean-token-mean"),
    ),
    "ppo-seq-masking": (
        {"enable_sequence_masking": True, "delta_sequence_masking": 0.0, "loss_agg_mode": "seq-mean-token-sum"},
        lambda lp, old, m, a: ref.ppo(lp, old, m, a, mode="seq-mean-token-sum", seq_mask_delta=0.0),
    ),
    "ppo-sum-norm": (
        {"loss_agg_mode": "seq-mean-token-sum-norm"},
        lambda lp, old, m, a: ref.ppo(lp, old, m, a, mode="seq-mean-token-sum-norm"),
    ),
    "gspo": ({}, lambda lp, old, m, a: ref.gspo(lp, old, m, a)),
    "gspo-wide": (
        {"clip_range_low": 0.1, "clip_range_high": 0.2},
        lambda lp, old, m, a: ref.gspo(lp, old, m, a, 0.1, 0.2),
    ),
    "cispo": ({}, lambda lp, old, m, a: ref.cispo(lp, old, m, a)),
    "cispo-mask": (
        {"enable_mask_clip": True, "clip_range_low": 0.2, "mask_clip_range_low": 0.3, "mask_clip_range_high": 0.25},
        lambda lp, old, m, a: ref.cispo(lp, old, m, a, clip_low=0.2, mask_clip=(0.3, 0.25)),
    ),
    "sapo": ({}, lambda lp, old, m, a: ref.sapo(lp, old, m, a)),
    "sapo-detached-seqmean": (
        {"detach_gate": True, "tau_pos": 0.5, "tau_neg": 2.0, "loss_agg_mode": "seq-mean-token-mean"},
        lambda lp, old, m, a: ref.sapo(lp, old, m, a, 0.5, 2.0, True, "seq-mean-token-mean"),
    ),
    "topr": ({}, lambda lp, old, m, a: ref.topr(lp, old, m, a)),
    "topr-threshold": ({"advantage_threshold": 0.5}, lambda lp, old, m, a: ref.topr(lp, old, m, a, 0.5)),
    "sppo": ({}, lambda lp, old, m, a: ref.sppo(lp, old, m, a)),
    "opmd": ({"tau": 0.5}, lambda lp, old, m, a: ref.opmd(lp, m, a, 0.5)),
    "importance_sampling": ({}, lambda lp, old, m, a: ref.importance_sampling(lp, old, m, a)),
    "sft": ({}, lambda lp, old, m, a: ref.sft(lp, m)),
    "sft_is": ({}, lambda lp, old, m, a: ref.sft(lp, m, "sft_is")),
    "sft_phi": ({}, lambda lp, old, m, a: ref.sft(lp, m, "sft_phi")),
    "sft_phi-cutoff": (
        {"cutoff_prob": 0.3, "loss_agg_mode": "seq-mean-token-mean"},
        lambda lp, old, m, a: ref.sft(lp, m, "sft_phi", 0.3, "seq-mean-token-mean"),
    ),
}
for clip_mode in ("none", "one-side", "two-side", "ring", "gspo-one-side"):
    for weight, reg in [("none", "none"), ("importance_sampling", "k2"), ("advantage", "forward-kl")]:
        args = {"clip_mode": clip_mode, "weight": weight, "regularizer": reg, "regularizer_coef": 0.3, "temp": 0.7}
        CASES[f"rec-{clip_mode}-{weight}"] = (args, lambda lp, old, m, a, args=args: ref.rec(lp, old, m, a, **args))
args = {"clip_mode": "gspo-one-side", "weight": "gspo_importance_sampling", "epsilon_low": 0.1, "epsilon_high": 0.1}
CASES["rec-gspo-is"] = (args, lambda lp, old, m, a, args=args: ref.rec(lp, old, m, a, **args))


def tolerance(dtype):
    return {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-12}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_plain_reference_on_random_shapes(case, dtype):
    kwargs, reference = CASES[case]
    name = case.split("-")[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn = get_policy_loss(name, **kwargs)
    for i, shape in enumerate(SHAPES):
        for per_token in (False, True):
            lp, old, mask, adv = make_batch(shape, dtype, seed=1000 * i + per_token, per_token_adv=per_token)
            lp.requires_grad_(True)
            loss, metrics = fn(logprob=lp, old_logprob=old, action_mask=mask, advantages=adv)
            loss.backward()
            value, grad, ref_metrics = reference(*as_lists(lp.detach(), old, mask, adv))
            tol = tolerance(dtype)
            assert loss.dtype == dtype
            assert loss.item() == pytest.approx(value, rel=tol["rtol"] * 10, abs=tol["atol"] * 10), (shape, per_token)
            torch.testing.assert_close(lp.grad, torch.tensor(grad, dtype=dtype), **tol)
            assert set(metrics) == set(ref_metrics)
            for key, expected in ref_metrics.items():
                assert metrics[key].item() == pytest.approx(expected, rel=1e-4, abs=1e-5), (key, shape, per_token)


@pytest.mark.parametrize("sft_kind", ["sft", "sft_phi"])
@pytest.mark.parametrize("geometry", ["default", "micro", "dynamic"])
def test_mix_matches_plain_reference(sft_kind, geometry):
    name = "mix" if sft_kind == "sft" else "mix_chord"
    kwargs = {"mu": 0.3} if name == "mix" else {"mu_peak": 0.3, "mu_valley": 0.3}
    # Reference weights: (mini // micro) / (tbs // ngpus); dynamic: (mini // ngpus) / (B · (tbs // ngpus)).
    rows = 6
    if geometry == "micro":
        kwargs.update(ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=2, ngpus_trainer=2)
        kwargs.update(train_batch_size_usual=12, train_batch_size_expert=4)
        w_usual, w_expert = 4 / 6, 4 / 2
    elif geometry == "dynamic":
        kwargs.update(use_dynamic_bsz=True, ppo_mini_batch_size=8, ngpus_trainer=2)
        kwargs.update(train_batch_size_usual=12, train_batch_size_expert=4)
        w_usual, w_expert = 4 / (rows * 6), 4 / (rows * 2)
    else:
        w_usual = w_expert = 1.0
    fn = get_policy_loss(name, **kwargs)
    expert = torch.tensor([False, True, False, False, True, False])
    lp, old, mask, adv = make_batch((rows, 7), torch.float64, seed=7, per_token_adv=False, empty_rows=False)
    lp.requires_grad_(True)
    loss, metrics = fn(logprob=lp, old_logprob=old, action_mask=mask, advantages=adv, expert_mask=expert, step=3)
    loss.backward()
    value, grad, ref_metrics = ref.mix(
        *as_lists(lp.detach(), old, mask, adv), expert.tolist(), 0.3, w_usual, w_expert, sft_kind
    )
    assert loss.item() == pytest.approx(value, rel=1e-10)
    torch.testing.assert_close(lp.grad, torch.tensor(grad, dtype=torch.float64))
    for key, expected in ref_metrics.items():
        assert metrics[key].item() == pytest.approx(expected, rel=1e-9, abs=1e-12), key


@pytest.mark.parametrize("expert_rows", [[], [0, 1, 2, 3]])
def test_mix_with_one_group_empty(expert_rows):
    """An all-usual or all-expert batch: the empty part contributes exactly 0 (and finite gradients)."""
    expert = torch.zeros(4, dtype=torch.bool)
    expert[expert_rows] = True
    lp, old, mask, adv = make_batch((4, 5), torch.float64, seed=3, per_token_adv=False, empty_rows=False)
    lp.requires_grad_(True)
    loss, metrics = get_policy_loss("mix", mu=0.4)(
        logprob=lp, old_logprob=old, action_mask=mask, advantages=adv, expert_mask=expert
    )
    loss.backward()
    value, grad, _ = ref.mix(*as_lists(lp.detach(), old, mask, adv), expert.tolist(), 0.4)
    assert loss.item() == pytest.approx(value, rel=1e-10)
    torch.testing.assert_close(lp.grad, torch.tensor(grad, dtype=torch.float64))
    empty_part = "usual/pg_loss" if expert_rows else "expert/sft_loss"
    assert metrics[empty_part].item() == 0.0


@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dpo_matches_plain_reference(label_smoothing, dtype):
    for i, (pairs, cols) in enumerate([(1, 1), (1, 6), (4, 5), (16, 12)]):
        lp, ref_lp, mask, _ = make_batch((2 * pairs, cols), dtype, seed=i, per_token_adv=False)
        lp.requires_grad_(True)
        fn = get_policy_loss("dpo", beta=0.5, label_smoothing=label_smoothing)
        loss, metrics = fn(logprob=lp, ref_logprob=ref_lp, action_mask=mask)
        loss.backward()
        value, grad, ref_metrics = ref.dpo(
            lp.detach().double().tolist(), ref_lp.double().tolist(), mask.tolist(), 0.5, label_smoothing
        )
        tol = tolerance(dtype)
        assert loss.item() == pytest.approx(value, rel=tol["rtol"] * 10)
        torch.testing.assert_close(lp.grad, torch.tensor(grad, dtype=dtype), **tol)
        for key, expected in ref_metrics.items():
            assert metrics[key].item() == pytest.approx(expected, rel=1e-4, abs=1e-6), key


def test_dpo_takes_precomputed_reference_sums():
    torch.manual_seed(0)
    lp, reference = -torch.rand(4, 5, dtype=torch.float64), -torch.rand(4, 5, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]]).bool()
    fn = get_policy_loss("dpo", beta=0.3, label_smoothing=0.1)
    per_token, metrics = fn(logprob=lp, ref_logprob=reference, action_mask=mask)
    sums, sum_metrics = fn(logprob=lp, ref_logprob=(reference * mask).sum(-1), action_mask=mask)
    torch.testing.assert_close(sums, per_token)
    assert {k: float(v) for k, v in sum_metrics.items()} == pytest.approx({k: float(v) for k, v in metrics.items()})
    with pytest.raises(ValueError, match=r"dpo: ref_logprob must be \[B, T\] or \[B\] with B=4, got \(3,\)"):
        fn(logprob=lp, ref_logprob=torch.zeros(3, dtype=torch.float64), action_mask=mask)


@pytest.mark.parametrize(("clip_ratio_c", "loss", "lower"), [(None, math.exp(1.6), 0.0), (3.0, 3.0, 1.0)])
def test_ppo_without_the_dual_clip_is_trls_clip(clip_ratio_c, loss, lower):
    """One token, A = −1, log π = −1.0, log π_old = −2.6 (ratio e^1.6 ≈ 4.953): TRL's PPO clip gives −A·r (the ratio
    is only clipped from below for A < 0) and the gradient −A·r; Trinity-RFT's dual clip bounds it at −A·c, no
    gradient."""
    logprob = torch.tensor([[-1.0]], requires_grad=True)
    fn = get_policy_loss("ppo", clip_ratio_c=clip_ratio_c)
    value, metrics = fn(
        logprob=logprob,
        old_logprob=torch.tensor([[-2.6]]),
        action_mask=torch.tensor([[True]]),
        advantages=torch.tensor([-1.0]),
    )
    value.backward()
    assert float(value) == pytest.approx(loss, rel=1e-5)
    assert float(logprob.grad) == pytest.approx(loss if clip_ratio_c is None else 0.0, rel=1e-5)
    assert float(metrics["pg_clipfrac_lower"]) == lower
