"""Masked-position hygiene of every loss (docs/design.md §2.1-§2.2), on the batch every loss test uses.

* An all-masked batch gives a finite loss with an exactly zero gradient (the KL and entropy terms too).
* NaN / ±inf at masked positions change neither the loss, nor the gradient, nor the metrics.
* A 0/1 mask of any dtype gives what the bool mask gives; the metrics are detached finite scalars.

The batch (`B`, `T`, `MASK`, `EXPERT`, `make_batch`) is shared with the other loss tests.
"""

from __future__ import annotations

import math

import pytest
import torch

from trl_ext.losses import LOSS_AGG_MODES, POLICY_LOSSES, get_entropy_fn, get_kl_fn, get_policy_loss

# --------------------------------------------------------------------------------------------------
# A batch every loss accepts (unused keys are ignored, docs/design.md §2.1)
# --------------------------------------------------------------------------------------------------

B, T = 4, 5
MASK = torch.tensor(
    [
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1],
        [0, 0, 0, 0, 0],  # an empty row
        [0, 1, 1, 1, 0],  # leading padding
    ],
    dtype=torch.bool,
)
EXPERT = torch.tensor([False, True, False, True])


def make_batch(seed: int = 0, dtype=torch.float64) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lp = -(torch.rand(B, T, generator=g, dtype=dtype) * 2.0 + 0.05)
    return {
        "logprob": lp,
        "old_logprob": lp + 0.3 * torch.randn(B, T, generator=g, dtype=dtype),
        "ref_logprob": lp + 0.2 * torch.randn(B, T, generator=g, dtype=dtype),
        "advantages": torch.randn(B, T, generator=g, dtype=dtype),
        "action_mask": MASK.clone(),
        "expert_mask": EXPERT.clone(),
        "step": torch.full((B,), 3),
        "prox_logprob": lp + 0.2 * torch.randn(B, T, generator=g, dtype=dtype),
    }


# (id, loss name, kwargs): every loss, several with non-default options.
CASES = [
    ("ppo", "ppo", {}),
    ("decoupled_ppo", "decoupled_ppo", {"behave_imp_weight_cap": 1.3, "clip_ratio_c": 3.0}),
    ("decoupled_ppo-truncate", "decoupled_ppo", {"behave_imp_weight_cap": 1.3, "behave_imp_weight_mode": "truncate"}),
    (
        "ppo-seqmask",
        "ppo",
        {
            "enable_sequence_masking": True,
            "delta_sequence_masking": -1.0,
            "clip_range_low": 0.1,
            "clip_range_high": 0.3,
            "loss_agg_mode": "seq-mean-token-sum",
        },
    ),
    ("ppo-fallback", "ppo", {"fallback_to_policy_gradient": True, "loss_agg_mode": "seq-mean-token-sum-norm"}),
    ("gspo", "gspo", {}),
    ("cispo", "cispo", {}),
    ("cispo-maskclip", "cispo", {"enable_mask_clip": True, "mask_clip_range_low": 0.1, "mask_clip_range_high": 0.1}),
    ("sapo", "sapo", {}),
    ("sapo-detach", "sapo", {"detach_gate": True, "loss_agg_mode": "seq-mean-token-mean"}),
    ("topr", "topr", {}),
    ("sppo", "sppo", {"epsilon": 0.1}),
    ("rec", "rec", {}),
    ("rec-two-side", "rec", {"clip_mode": "two-side"}),
    ("rec-one-side-adv", "rec", {"clip_mode": "one-side", "weight": "advantage", "temp": 0.5}),
    (
        "rec-ring-is-k2",
        "rec",
        {"clip_mode": "ring", "weight": "importance_sampling", "regularizer": "k2", "regularizer_coef": 0.1},
    ),
    (
        "rec-gspo-fkl",
        "rec",
        {
            "clip_mode": "gspo-one-side",
            "weight": "gspo_importance_sampling",
            "regularizer": "forward-kl",
            "regularizer_coef": 0.1,
        },
    ),
    ("opmd", "opmd", {"tau": 0.5}),
    ("importance_sampling", "importance_sampling", {}),
    ("sft", "sft", {}),
    ("sft_is", "sft_is", {}),
    ("sft_phi", "sft_phi", {}),
    ("sft_phi-cutoff", "sft_phi", {"cutoff_prob": 0.5}),
    ("mix", "mix", {"mu": 0.3}),
    (
        "mix-dynamic",
        "mix",
        {
            "use_dynamic_bsz": True,
            "ppo_mini_batch_size": 4,
            "ngpus_trainer": 2,
            "train_batch_size_usual": 4,
            "train_batch_size_expert": 2,
            "sft_loss_agg_mode": "seq-mean-token-mean",
        },
    ),
    ("mix_chord", "mix_chord", {"mu_warmup_steps": 2, "mu_decay_steps": 4, "mu_peak": 0.5, "mu_valley": 0.1}),
    ("mix_chord-sft", "mix_chord", {"enable_phi_function": False, "grpo_loss_agg_mode": "seq-mean-token-mean"}),
    ("dpo", "dpo", {}),
    ("dpo-ls", "dpo", {"beta": 0.5, "label_smoothing": 0.1}),
    ("tpo", "tpo", {"beta": 0.5, "label_smoothing": 0.1}),  # expert_mask: the reference rows
    ("tpo-l", "tpo", {"loss_type": "tpo-l", "tpo_alpha": 0.5}),
    ("m2po", "m2po", {"m2_threshold": 0.01}),
    ("gpg", "gpg", {"loss_agg_mode": "seq-mean-token-mean"}),
    ("geo_mean", "geo_mean", {"clip_range": 0.1}),
    ("dro", "dro", {"dro_beta": 0.3, "loss_agg_mode": "seq-mean-token-sum"}),
    ("clip_cov", "clip_cov", {"clip_cov_ratio": 1.0, "clip_cov_lb": 0.0}),  # every candidate dropped: no chance
    ("kl_cov", "kl_cov", {"kl_cov_ratio": 0.2, "loss_agg_mode": "seq-mean-token-mean"}),
    ("dppo_tv", "dppo_tv", {"clip_range": 0.05}),
    ("dppo_kl", "dppo_kl", {"clip_range_low": 0.01, "clip_range_high": 0.02}),
    ("a2po", "a2po", {}),
    ("a2po-beta2", "a2po", {"beta2": 0.5}),
    ("vespo", "vespo", {}),
    ("vespo-seq-mean", "vespo", {"lambda_pos": 1.0, "loss_agg_mode": "seq-mean-token-mean"}),
    ("luspo", "luspo", {}),
    ("luspo-token", "luspo", {"ratio_level": "token", "clip_range_low": 0.2, "clip_range_high": 0.2}),
]
CASE_IDS = [c[0] for c in CASES]

# Metrics that by definition look at masked positions: the reference counts the A < 0 positions of
# masked rows over the whole row, padding included (docs/design.md §2.3, ppo).
PADDING_METRICS = {"seq_mask/masked_tokens"}


def test_cases_cover_every_loss():
    assert {name for _, name, _ in CASES} == set(POLICY_LOSSES)


def run_loss(name, kwargs, batch):
    fn = get_policy_loss(name, **kwargs)
    lp = batch["logprob"].clone().requires_grad_(True)
    loss, metrics = fn(**{**batch, "logprob": lp})
    (grad,) = torch.autograd.grad(loss, lp)
    return loss.detach(), grad, metrics


def check_metrics(metrics):
    assert isinstance(metrics, dict) and metrics
    for key, value in metrics.items():
        assert isinstance(value, torch.Tensor), key
        assert value.dim() == 0, key
        assert not value.requires_grad, key
        assert torch.isfinite(value), key


@pytest.mark.parametrize(("name", "kwargs"), [c[1:] for c in CASES], ids=CASE_IDS)
def test_clean_batch_baseline(name, kwargs):
    """The comparison below means something: on this batch the losses are non-trivial."""
    loss, grad, metrics = run_loss(name, kwargs, make_batch())
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert torch.isfinite(grad).all()
    assert torch.count_nonzero(grad[MASK]) > 0
    assert torch.count_nonzero(grad[~MASK]) == 0
    check_metrics(metrics)


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float64], ids=["bool", "float"])
@pytest.mark.parametrize("fill", ["nan", "inf", "-inf", "mixed"])
@pytest.mark.parametrize(("name", "kwargs"), [c[1:] for c in CASES], ids=CASE_IDS)
def test_masked_nan_inf_do_not_leak(name, kwargs, fill, mask_dtype):
    """NaN / ±inf at masked positions, with a bool or a 0/1 float mask: the same values as the clean batch's with a
    bool mask."""
    clean = make_batch()
    dirty = make_batch()
    dirty["action_mask"] = dirty["action_mask"].to(mask_dtype)
    fills = {"nan": [math.nan], "inf": [math.inf], "-inf": [-math.inf], "mixed": [math.nan, math.inf, -math.inf]}[fill]
    n_masked = int((~MASK).sum())
    poison = torch.tensor([fills[i % len(fills)] for i in range(n_masked)], dtype=torch.float64)
    for key in ("logprob", "old_logprob", "ref_logprob", "advantages"):
        dirty[key][~MASK] = poison.roll(1) if key == "advantages" else poison
        # the masked values of the clean batch really differ from the poison
        assert torch.isfinite(clean[key]).all()

    loss_c, grad_c, metrics_c = run_loss(name, kwargs, clean)
    loss_d, grad_d, metrics_d = run_loss(name, kwargs, dirty)

    assert torch.isfinite(loss_d)
    assert torch.equal(loss_d, loss_c)
    assert torch.isfinite(grad_d).all()
    assert torch.equal(grad_d, grad_c)
    assert torch.count_nonzero(grad_d[~MASK]) == 0
    check_metrics(metrics_d)
    assert set(metrics_d) == set(metrics_c)
    for key in set(metrics_c) - PADDING_METRICS:
        assert torch.equal(metrics_d[key], metrics_c[key]), key


@pytest.mark.parametrize(("name", "kwargs"), [c[1:] for c in CASES], ids=CASE_IDS)
def test_all_zero_mask(name, kwargs):
    batch = make_batch()
    batch["action_mask"] = torch.zeros(B, T, dtype=torch.bool)
    for key in ("old_logprob", "ref_logprob", "advantages"):
        batch[key] = torch.full((B, T), math.nan, dtype=torch.float64)
    fn = get_policy_loss(name, **kwargs)
    lp = batch["logprob"].clone().requires_grad_(True)
    loss, metrics = fn(**{**batch, "logprob": lp})
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert loss.requires_grad  # backward works on an all-padding micro-batch (e.g. in DDP)
    loss.backward()
    assert torch.isfinite(lp.grad).all()
    assert torch.count_nonzero(lp.grad) == 0
    check_metrics(metrics)


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.int64, torch.float32])
def test_all_zero_mask_kl_and_entropy(mask_dtype):
    batch = make_batch()
    zeros = torch.zeros(B, T, dtype=mask_dtype)
    lp = batch["logprob"].clone().requires_grad_(True)
    for name in ("k1", "k2", "k3", "low_var_kl", "abs", "corrected_k3"):
        for mode in LOSS_AGG_MODES:
            loss, metrics = get_kl_fn(name, kl_coef=0.1).calculate_kl_loss(
                lp, batch["ref_logprob"], zeros, mode, old_logprob=batch["old_logprob"]
            )
            assert torch.isfinite(loss) and loss.item() == 0.0
            (grad,) = torch.autograd.grad(loss, lp)
            assert torch.count_nonzero(grad) == 0 and torch.isfinite(grad).all()
            check_metrics(metrics)
    entropy = batch["ref_logprob"].neg().requires_grad_(True)
    for name in ("default", "mix"):
        for mode in LOSS_AGG_MODES:
            bonus, metrics = get_entropy_fn(name, entropy_coef=0.1)(entropy, zeros, mode, expert_mask=EXPERT)
            assert torch.isfinite(bonus) and bonus.item() == 0.0
            (grad,) = torch.autograd.grad(bonus, entropy)
            assert torch.count_nonzero(grad) == 0 and torch.isfinite(grad).all()
            check_metrics(metrics)


@pytest.mark.parametrize(("name", "kwargs"), [c[1:] for c in CASES], ids=CASE_IDS)
def test_numeric_mask_equals_bool_mask(name, kwargs):
    """action_mask may be bool or 0/1 of any dtype."""
    batch = make_batch()
    want, grad_want, _ = run_loss(name, kwargs, batch)
    for dtype in (torch.int64, torch.float32):
        mask = batch["action_mask"].to(dtype)
        got, grad_got, _ = run_loss(name, kwargs, {**batch, "action_mask": mask})
        assert torch.equal(got, want)
        assert torch.equal(grad_got, grad_want)
        assert torch.equal(mask, batch["action_mask"].to(dtype))  # the caller's mask is never written to


@pytest.mark.parametrize(("name", "kwargs"), [c[1:] for c in CASES], ids=CASE_IDS)
def test_metrics_detached_and_scalar(name, kwargs):
    batch = make_batch(seed=3)
    _, _, metrics = run_loss(name, kwargs, batch)
    check_metrics(metrics)
