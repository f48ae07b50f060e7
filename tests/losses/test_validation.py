"""Argument validation, call-time shape checks and masked-position hygiene of every loss (docs/design.md §2.1-§2.2).

* Every invalid hyperparameter is a ValueError at construction that names the parameter and the rule.
* Wrong input shapes are errors at call time, not silent broadcasts.
* An all-masked batch gives a finite loss with an exactly zero gradient.
* NaN / ±inf at masked positions change neither the loss, nor the gradient, nor the metrics.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from trl_ext.losses import LOSS_AGG_MODES, POLICY_LOSSES, get_entropy_fn, get_kl_fn, get_policy_loss

VALID_MODES_RE = ", ".join(re.escape(repr(m)) for m in LOSS_AGG_MODES)

# --------------------------------------------------------------------------------------------------
# Construction errors: (loss, kwargs, regex on the message -- parameter name AND rule)
# --------------------------------------------------------------------------------------------------

BAD_ARGS = [
    # ppo
    ("ppo", {"clip_ratio_c": 1.0}, r"ppo: clip_ratio_c=1\.0 is not valid; must be > 1$"),
    ("ppo", {"clip_ratio_c": 0.5}, r"clip_ratio_c=0\.5 .*must be > 1"),
    ("ppo", {"clip_range": -0.1}, r"clip_range=-0\.1 .*must be >= 0"),
    ("ppo", {"clip_range_low": -0.1}, r"clip_range_low=-0\.1 .*must be >= 0"),
    ("ppo", {"clip_range_high": math.inf}, r"clip_range_high=inf .*must be finite and >= 0"),
    ("ppo", {"clip_range": None}, r"no clip range given; set clip_range, or both clip_range_low and clip_range_high"),
    ("ppo", {"clip_range": None, "clip_range_low": 0.2}, r"no clip range"),
    ("ppo", {"loss_agg_mode": "mean"}, r"loss_agg_mode='mean' is not valid; must be one of " + VALID_MODES_RE),
    ("ppo", {"enable_sequence_masking": "yes"}, r"enable_sequence_masking='yes' .*must be True or False"),
    ("ppo", {"enable_sequence_masking": 1}, r"enable_sequence_masking=1 .*must be True or False"),
    ("ppo", {"fallback_to_policy_gradient": 0}, r"fallback_to_policy_gradient=0 .*must be True or False"),
    ("ppo", {"delta_sequence_masking": math.nan}, r"delta_sequence_masking=nan .*must be a finite number"),
    ("ppo", {"clip_range": True}, r"clip_range=True .*must be >= 0"),
    ("ppo", {"clip_range": "0.2"}, r"clip_range='0\.2' .*must be >= 0"),
    # gspo
    (
        "gspo",
        {"clip_range": 0.2, "clip_range_low": 1e-3, "clip_range_high": 2e-3},
        r"clip_range=0\.2 would be ignored because clip_range_low and clip_range_high are both set",
    ),
    ("gspo", {"clip_range_low": -1e-4}, r"clip_range_low=-0\.0001 .*must be >= 0"),
    ("gspo", {"loss_agg_mode": "seq-mean"}, r"loss_agg_mode='seq-mean' .*must be one of " + VALID_MODES_RE),
    # cispo
    ("cispo", {"clip_range_high": -1}, r"clip_range_high=-1 .*must be >= 0"),
    ("cispo", {"mask_clip_range_low": -0.5}, r"mask_clip_range_low=-0\.5 .*must be >= 0"),
    ("cispo", {"enable_mask_clip": 1}, r"enable_mask_clip=1 .*must be True or False"),
    # sapo
    ("sapo", {"tau_pos": 0}, r"sapo: tau_pos=0 is not valid; must be > 0$"),
    ("sapo", {"tau_neg": -1.0, "tau_pos": 0.5}, r"tau_neg=-1\.0 .*must be > 0"),
    ("sapo", {"tau_neg": 0.9}, r"tau_neg=0\.9 is not valid; must be >= tau_pos \(1\.0\)"),
    ("sapo", {"tau_pos": 2.0}, r"tau_neg=1\.05 .*must be >= tau_pos \(2\.0\)"),
    ("sapo", {"detach_gate": 1}, r"detach_gate=1 .*must be True or False"),
    # topr
    ("topr", {"advantage_threshold": math.nan}, r"advantage_threshold=nan .*must be a finite number"),
    ("topr", {"advantage_threshold": None}, r"advantage_threshold=None .*must be a finite number"),
    # sppo
    ("sppo", {"epsilon": 0}, r"epsilon=0 .*must be > 0"),
    ("sppo", {"epsilon": -0.3}, r"epsilon=-0\.3 .*must be > 0"),
    # rec
    ("rec", {"epsilon_low": 0}, r"epsilon_low=0 .*must be in \(0, 1\]"),
    ("rec", {"epsilon_low": 1.5}, r"epsilon_low=1\.5 .*must be in \(0, 1\]"),
    ("rec", {"epsilon_high": 0}, r"epsilon_high=0 .*must be > 0"),
    ("rec", {"epsilon_low_prime": 0}, r"epsilon_low_prime=0 .*must be in \(0, 1\]"),
    ("rec", {"epsilon_low_prime": 1.01}, r"epsilon_low_prime=1\.01 .*must be in \(0, 1\]"),
    ("rec", {"epsilon_high_prime": -1}, r"epsilon_high_prime=-1 .*must be > 0"),
    ("rec", {"regularizer_coef": -0.1}, r"regularizer_coef=-0\.1 .*must be >= 0"),
    ("rec", {"temp": 0}, r"temp=0 .*must be > 0"),
    ("rec", {"clip_mode": "x"}, r"clip_mode='x' .*one of 'none', 'one-side', 'two-side', 'ring', 'gspo-one-side'"),
    (
        "rec",
        {"weight": "x"},
        r"weight='x' .*one of 'none', 'importance_sampling', 'gspo_importance_sampling', 'advantage'",
    ),
    ("rec", {"regularizer": "x"}, r"regularizer='x' .*one of 'none', 'k2', 'forward-kl'"),
    *[
        (
            "rec",
            {"weight": "gspo_importance_sampling", "clip_mode": mode},
            rf"weight='gspo_importance_sampling' needs clip_mode='gspo-one-side' \(got '{mode}'\)",
        )
        for mode in ("none", "one-side", "two-side", "ring")
    ],
    # opmd
    ("opmd", {"tau": -1}, r"tau=-1 .*must be >= 0"),
    ("opmd", {"loss_agg_mode": "sum"}, r"loss_agg_mode='sum' .*one of " + VALID_MODES_RE),
    # importance_sampling / sft family
    (
        "importance_sampling",
        {"loss_agg_mode": "token-median"},
        r"loss_agg_mode='token-median' .*one of " + VALID_MODES_RE,
    ),
    ("sft", {"loss_agg_mode": None}, r"loss_agg_mode=None .*one of " + VALID_MODES_RE),
    ("sft_is", {"loss_agg_mode": "x"}, r"loss_agg_mode='x' .*one of " + VALID_MODES_RE),
    ("sft_phi", {"cutoff_prob": 0}, r"cutoff_prob=0 .*must be in \(0, 1\]"),
    ("sft_phi", {"cutoff_prob": 1.5}, r"cutoff_prob=1\.5 .*must be in \(0, 1\]"),
    ("sft_phi", {"cutoff_prob": -0.5}, r"cutoff_prob=-0\.5 .*must be in \(0, 1\]"),
    # mix
    ("mix", {"mu": 1.5}, r"mu=1\.5 .*must be in \[0, 1\]"),
    ("mix", {"mu": -0.1}, r"mu=-0\.1 .*must be in \[0, 1\]"),
    ("mix", {"ppo_mini_batch_size": 0}, r"ppo_mini_batch_size=0 .*must be an integer >= 1"),
    ("mix", {"ppo_mini_batch_size": 2.0}, r"ppo_mini_batch_size=2\.0 .*must be an integer"),
    ("mix", {"ppo_micro_batch_size_per_gpu": 0}, r"ppo_micro_batch_size_per_gpu=0 .*must be an integer >= 1"),
    ("mix", {"ngpus_trainer": 0}, r"ngpus_trainer=0 .*must be an integer >= 1"),
    (
        "mix",
        {"ngpus_trainer": 4, "train_batch_size_usual": 2, "train_batch_size_expert": 8},
        r"train_batch_size_usual=2 .*must be an integer >= 4",
    ),
    (
        "mix",
        {"ngpus_trainer": 4, "train_batch_size_usual": 8, "train_batch_size_expert": 3},
        r"train_batch_size_expert=3 .*must be an integer >= 4",
    ),
    ("mix", {"sft_loss_agg_mode": "bad"}, r"sft_loss_agg_mode='bad' .*one of " + VALID_MODES_RE),
    ("mix", {"grpo_loss_agg_mode": "bad"}, r"grpo_loss_agg_mode='bad' .*one of " + VALID_MODES_RE),
    ("mix", {"use_dynamic_bsz": 1}, r"use_dynamic_bsz=1 .*must be True or False"),
    ("mix", {"use_dynamic_bsz": None}, r"use_dynamic_bsz=None .*must be True or False"),
    ("mix", {"clip_range": -0.2}, r"clip_range=-0\.2 .*must be >= 0"),
    ("mix", {"clip_range": None}, r"no clip range"),
    # mix_chord
    ("mix_chord", {"mu_warmup_steps": -1}, r"mu_warmup_steps=-1 .*must be an integer >= 0"),
    ("mix_chord", {"mu_decay_steps": 1.5}, r"mu_decay_steps=1\.5 .*must be an integer"),
    ("mix_chord", {"mu_peak": 2}, r"mu_peak=2 .*must be in \[0, 1\]"),
    ("mix_chord", {"mu_valley": -0.5}, r"mu_valley=-0\.5 .*must be in \[0, 1\]"),
    ("mix_chord", {"enable_phi_function": 1}, r"enable_phi_function=1 .*must be True or False"),
    ("mix_chord", {"ppo_mini_batch_size": 0}, r"ppo_mini_batch_size=0 .*must be an integer >= 1"),
    ("mix_chord", {"loss_agg_mode": "bad"}, r"loss_agg_mode='bad' .*one of " + VALID_MODES_RE),
    # dpo
    ("dpo", {"beta": 0}, r"beta=0 .*must be > 0"),
    ("dpo", {"beta": -0.1}, r"beta=-0\.1 .*must be > 0"),
    ("dpo", {"label_smoothing": 0.5}, r"label_smoothing=0\.5 .*must be in \[0, 0\.5\)"),
    ("dpo", {"label_smoothing": -0.1}, r"label_smoothing=-0\.1 .*must be in \[0, 0\.5\)"),
    # m2po
    ("m2po", {"m2_threshold": -0.01}, r"m2po: m2_threshold=-0\.01 is not valid; must be >= 0$"),
    ("m2po", {"m2_threshold": math.inf}, r"m2_threshold=inf .*must be finite and >= 0"),
    ("m2po", {"log_ratio_clip": 0}, r"m2po: log_ratio_clip=0 is not valid; must be > 0$"),
    ("m2po", {"loss_agg_mode": "mean"}, r"loss_agg_mode='mean' .*one of " + VALID_MODES_RE),
    # gpg
    ("gpg", {"loss_agg_mode": "mean"}, r"gpg: loss_agg_mode='mean' is not valid; must be one of " + VALID_MODES_RE),
    # geo_mean
    ("geo_mean", {"clip_range": -0.1}, r"geo_mean: clip_range=-0\.1 is not valid; must be >= 0"),
    ("geo_mean", {"clip_range_high": -1.0}, r"clip_range_high=-1\.0 .*must be >= 0"),
    ("geo_mean", {"clip_range": None}, r"geo_mean: no clip range given"),
    ("geo_mean", {"loss_agg_mode": "token-mean"}, r"geo_mean: unknown argument\(s\) 'loss_agg_mode'"),
    # dro
    ("dro", {"dro_beta": 0}, r"dro: dro_beta=0 is not valid; must be > 0$"),
    ("dro", {"dro_beta": -0.05}, r"dro_beta=-0\.05 .*must be > 0"),
    ("dro", {"dro_beta": None}, r"dro_beta=None .*must be > 0"),
    # clip_cov / kl_cov
    ("clip_cov", {"clip_cov_ratio": -0.1}, r"clip_cov: clip_cov_ratio=-0\.1 is not valid; must be in \(0, 1\]$"),
    ("clip_cov", {"clip_cov_ratio": 0.0}, r"clip_cov: clip_cov_ratio=0\.0 is not valid"),
    ("clip_cov", {"clip_cov_lb": 6.0}, r"clip_cov: clip_cov_lb=6\.0 is not valid; must be <= clip_cov_ub=5\.0$"),
    ("clip_cov", {"clip_cov_ub": math.inf}, r"clip_cov: clip_cov_ub=inf is not valid; must be a finite number"),
    ("clip_cov", {"clip_range_high": -0.2}, r"clip_cov: clip_range_high=-0\.2 is not valid; must be >= 0"),
    ("clip_cov", {"selection_seed": -1}, r"clip_cov: selection_seed=-1 is not valid; must be an integer >= 0"),
    ("kl_cov", {"kl_cov_ratio": 1.5}, r"kl_cov: kl_cov_ratio=1\.5 is not valid; must be in \(0, 1\]$"),
    ("kl_cov", {"ppo_kl_coef": -0.1}, r"kl_cov: ppo_kl_coef=-0\.1 is not valid; must be >= 0$"),
    # dppo_tv / dppo_kl: the thresholds are divergences (>= 0), c > 1 (a truncation at or below 1 cuts r = 1)
    ("dppo_tv", {"clip_range": -0.1}, r"dppo_tv: clip_range=-0\.1 is not valid; must be >= 0"),
    ("dppo_tv", {"clip_ratio_c": 0.0}, r"dppo_tv: clip_ratio_c=0\.0 is not valid; must be > 1$"),
    ("dppo_tv", {"clip_ratio_c": 1.0}, r"dppo_tv: clip_ratio_c=1\.0 is not valid; must be > 1$"),
    ("dppo_kl", {"clip_ratio_c": 0.5}, r"dppo_kl: clip_ratio_c=0\.5 is not valid; must be > 1$"),
    ("dppo_kl", {"clip_range_low": -0.01}, r"dppo_kl: clip_range_low=-0\.01 is not valid; must be >= 0"),
    ("dppo_kl", {"clip_range": None}, r"dppo_kl: no clip range given"),
]


def test_bad_args_table_covers_every_loss():
    assert {name for name, _, _ in BAD_ARGS} == set(POLICY_LOSSES)


@pytest.mark.parametrize(("name", "kwargs", "message"), BAD_ARGS, ids=lambda x: x if isinstance(x, str) else None)
def test_invalid_hyperparameter(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_policy_loss(name, **kwargs)
    # the class itself validates too (not only the registry)
    with pytest.raises(ValueError, match=message):
        POLICY_LOSSES[name](**kwargs)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("rec", {"weight": "gspo_importance_sampling", "clip_mode": "gspo-one-side"}),
        ("sapo", {"tau_pos": 1.05, "tau_neg": 1.05}),
        ("sft_phi", {"cutoff_prob": 1.0}),
        ("sft_phi", {"cutoff_prob": 1e-6}),
        ("rec", {"epsilon_low": 1.0, "epsilon_low_prime": 1.0}),
        ("dpo", {"label_smoothing": 0.499}),
        ("mix", {"mu": 0.0, "ngpus_trainer": 4, "train_batch_size_usual": 4, "train_batch_size_expert": 4}),
        ("mix", {"mu": 1.0}),
        ("mix_chord", {"mu_peak": 1.0, "mu_valley": 0.0, "mu_warmup_steps": 0, "mu_decay_steps": 10}),
        ("ppo", {"clip_range": None, "clip_range_low": 0.2, "clip_range_high": 0.28}),
        ("ppo", {"clip_range": 0.0, "clip_ratio_c": 1.0001}),
        ("gspo", {"clip_range": 0.2, "clip_range_low": None, "clip_range_high": None}),
        ("topr", {"advantage_threshold": -0.5}),
        ("opmd", {"tau": 0}),
    ],
)
def test_valid_edge_values_accepted(name, kwargs):
    fn = get_policy_loss(name, **kwargs)
    for key, value in kwargs.items():
        if key in fn.args and value is not None:
            assert fn.args[key] == value


def test_infinite_value_message_says_finite():
    with pytest.raises(ValueError, match=r"clip_range_high=inf .*finite"):
        get_policy_loss("ppo", clip_range_high=math.inf)


@pytest.mark.parametrize("name", ["mix", "mix_chord"])
@pytest.mark.parametrize("kwargs", [{"clip_range": -0.2}, {"clip_range": None}], ids=["negative", "none"])
def test_mix_clip_range_error_names_mix(name, kwargs):
    with pytest.raises(ValueError, match=rf"^{name}: "):
        get_policy_loss(name, **kwargs)


def test_gspo_other_agg_mode_warns():
    with pytest.warns(UserWarning, match="seq-mean-token-mean"):
        get_policy_loss("gspo", loss_agg_mode="token-mean")


def test_unknown_loss_name_lists_valid_names():
    with pytest.raises(ValueError, match=r"unknown policy loss 'grpo'; valid names: ") as info:
        get_policy_loss("grpo")
    listed = str(info.value).split("valid names: ", 1)[1]
    assert set(listed.split(", ")) == set(POLICY_LOSSES)
    for bad in (None, ["ppo"], "PPO", ""):
        with pytest.raises(ValueError, match="unknown policy loss"):
            get_policy_loss(bad)


def test_unknown_kwarg_names_it_and_lists_valid_args():
    with pytest.raises(ValueError, match=r"sapo: unknown argument\(s\) 'tau'; valid arguments: ") as info:
        get_policy_loss("sapo", tau=1)
    listed = str(info.value).split("valid arguments: ", 1)[1]
    assert set(listed.split(", ")) == {"tau_pos", "tau_neg", "loss_agg_mode", "detach_gate"}
    with pytest.raises(ValueError, match=r"ppo: unknown argument\(s\) 'epsilon', 'beta'"):
        get_policy_loss("ppo", epsilon=0.2, beta=0.0)


def test_kl_construction_errors():
    with pytest.raises(ValueError, match=r"unknown KL function 'k4'; valid names: ") as info:
        get_kl_fn("k4")
    listed = set(str(info.value).split("valid names: ", 1)[1].split(", "))
    assert listed == {"none", "k1", "k2", "k3", "low_var_kl", "abs", "corrected_k3", "kl", "mse"}
    with pytest.raises(ValueError, match=r"kl_coef=-1 .*>= 0"):
        get_kl_fn("k2", kl_coef=-1)
    with pytest.raises(ValueError, match=r"kl_coef=nan .*must be finite and >= 0"):
        get_kl_fn("k2", kl_coef=math.nan)
    with pytest.raises(ValueError, match=r"adaptive=True needs target_kl and horizon"):
        get_kl_fn("k2", adaptive=True)
    with pytest.raises(ValueError, match=r"adaptive=True needs target_kl and horizon"):
        get_kl_fn("k2", adaptive=True, target_kl=0.1)
    with pytest.raises(ValueError, match=r"target_kl=0 .*> 0"):
        get_kl_fn("k2", adaptive=True, target_kl=0, horizon=100)
    with pytest.raises(ValueError, match=r"horizon=-5 .*> 0"):
        get_kl_fn("k2", adaptive=True, target_kl=0.1, horizon=-5)
    with pytest.raises(ValueError, match=r"adaptive=1 .*True or False"):
        get_kl_fn("k2", adaptive=1)


def test_entropy_construction_errors():
    with pytest.raises(ValueError, match=r"unknown entropy function 'max'; valid names: ") as info:
        get_entropy_fn("max")
    assert set(str(info.value).split("valid names: ", 1)[1].split(", ")) == {"default", "mix", "none"}
    with pytest.raises(ValueError, match=r"entropy_coef=nan .*must be a finite number"):
        get_entropy_fn("default", entropy_coef=math.nan)


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
    }


# (id, loss name, kwargs): every loss, several with non-default options.
CASES = [
    ("ppo", "ppo", {}),
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
    ("m2po", "m2po", {"m2_threshold": 0.01}),
    ("gpg", "gpg", {"loss_agg_mode": "seq-mean-token-mean"}),
    ("geo_mean", "geo_mean", {"clip_range": 0.1}),
    ("dro", "dro", {"dro_beta": 0.3, "loss_agg_mode": "seq-mean-token-sum"}),
    ("clip_cov", "clip_cov", {"clip_cov_ratio": 1.0, "clip_cov_lb": 0.0}),  # every candidate dropped: no chance
    ("kl_cov", "kl_cov", {"kl_cov_ratio": 0.2, "loss_agg_mode": "seq-mean-token-mean"}),
    ("dppo_tv", "dppo_tv", {"clip_range": 0.05}),
    ("dppo_kl", "dppo_kl", {"clip_range_low": 0.01, "clip_range_high": 0.02}),
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
    """With a float mask the loss first multiplies by the mask, finds the result not finite and recomputes it with the
    select (`multiplying_number_masks`): the same values as the clean batch's with a bool mask."""
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


# --------------------------------------------------------------------------------------------------
# Call-time shape errors
# --------------------------------------------------------------------------------------------------

USES_OLD = ["ppo", "gspo", "cispo", "sapo", "topr", "sppo", "rec", "importance_sampling", "mix", "mix_chord", "m2po"]
USES_OLD += ["geo_mean", "dro"]
USES_OLD += ["clip_cov", "kl_cov", "dppo_tv", "dppo_kl"]
USES_ADVANTAGES = [*USES_OLD, "opmd", "gpg"]
ALL_NAMES = sorted(POLICY_LOSSES)
ADV_SHAPE_RE = r"advantages has shape \(.*\); expected \[B\], \[B, 1\] or \[B, T\] with B=4, T=5"


def call(name, **overrides):
    kwargs = {"mu_warmup_steps": 2} if name == "mix_chord" else {}
    batch = {**make_batch(), **overrides}
    return get_policy_loss(name, **kwargs)(**batch)


def test_shape_lists_are_complete():
    assert set(USES_ADVANTAGES) | {"sft", "sft_is", "sft_phi", "dpo"} == set(POLICY_LOSSES)


@pytest.mark.parametrize("name", USES_OLD)
@pytest.mark.parametrize("shape", [(B, T - 1), (B + 1, T), (B * T,), (B, T, 1)])
def test_old_logprob_wrong_shape(name, shape):
    with pytest.raises(ValueError, match=r"old_logprob has shape \(.*\) but logprob has shape \(4, 5\)"):
        call(name, old_logprob=torch.zeros(shape, dtype=torch.float64))


@pytest.mark.parametrize("name", [n for n in USES_OLD if n != "ppo"])
def test_old_logprob_missing(name):
    with pytest.raises(ValueError, match=r"old_logprob has shape NoneType"):
        call(name, old_logprob=None)


def test_ppo_fallback_ignores_old_logprob():
    loss, _ = get_policy_loss("ppo", fallback_to_policy_gradient=True)(**{**make_batch(), "old_logprob": None})
    assert torch.isfinite(loss)
    with pytest.raises(ValueError, match=r"old_logprob has shape NoneType"):
        call("ppo", old_logprob=None)


@pytest.mark.parametrize("name", USES_ADVANTAGES)
@pytest.mark.parametrize("shape", [(B + 1,), (B - 1,), (B, T + 1), (B, 2), (B + 1, T), (B, T, 1), (1, T), ()])
def test_advantages_wrong_shape(name, shape):
    with pytest.raises(ValueError, match=ADV_SHAPE_RE):
        call(name, advantages=torch.ones(shape, dtype=torch.float64))


@pytest.mark.parametrize("name", USES_ADVANTAGES)
def test_advantages_not_a_tensor(name):
    with pytest.raises(ValueError, match=r"advantages has shape float"):
        call(name, advantages=1.0)


@pytest.mark.parametrize("name", USES_ADVANTAGES)
def test_per_sequence_advantages_broadcast(name):
    """[B] and [B, 1] advantages equal the same values repeated over T."""
    batch = make_batch()
    per_row = torch.tensor([0.5, -1.0, 2.0, -0.25], dtype=torch.float64)
    kwargs = {"mu_warmup_steps": 2} if name == "mix_chord" else {}
    if name == "clip_cov":  # every candidate dropped: the same tokens on every call (no random draw decides)
        kwargs = {"clip_cov_ratio": 1.0, "clip_cov_lb": 0.0}
    want, _, _ = run_loss(name, kwargs, batch)
    ref, ref_grad, _ = run_loss(name, kwargs, {**batch, "advantages": per_row.unsqueeze(-1).expand(B, T).clone()})
    for adv in (per_row, per_row.unsqueeze(-1)):
        got, grad, _ = run_loss(name, kwargs, {**batch, "advantages": adv})
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=0)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=0)
    assert not torch.equal(ref, want)  # different advantages do change the loss


@pytest.mark.parametrize("name", ALL_NAMES)
@pytest.mark.parametrize("shape", [(T,), (B, T, 1), ()])
def test_logprob_not_2d(name, shape):
    with pytest.raises(ValueError, match=r"logprob must be a \[B, T\] tensor, got shape"):
        call(name, logprob=torch.zeros(shape, dtype=torch.float64))


@pytest.mark.parametrize("name", ALL_NAMES)
def test_action_mask_wrong_shape(name):
    with pytest.raises(ValueError, match=r"action_mask has shape \(4, 4\) but logprob has shape \(4, 5\)"):
        call(name, action_mask=MASK[:, :4])


def test_dpo_ref_logprob_wrong_shape():
    with pytest.raises(ValueError, match=r"ref_logprob has shape \(4, 3\) but logprob has shape \(4, 5\)"):
        call("dpo", ref_logprob=torch.zeros(B, 3, dtype=torch.float64))


@pytest.mark.parametrize("name", ["mix", "mix_chord"])
@pytest.mark.parametrize(
    "expert_mask",
    [torch.tensor([True, False, True]), torch.ones(B + 1, dtype=torch.bool), torch.ones(B, 1, dtype=torch.bool), None],
    ids=["short", "long", "2d", "missing"],
)
def test_mix_expert_mask_wrong(name, expert_mask):
    with pytest.raises(ValueError, match=r"expert_mask must be a \[B\] tensor with B=4"):
        call(name, expert_mask=expert_mask)


@pytest.mark.parametrize("rows", [1, 3, 5])
def test_dpo_odd_rows(rows):
    batch = {
        "logprob": torch.zeros(rows, T),
        "ref_logprob": torch.zeros(rows, T),
        "action_mask": torch.ones(rows, T),
    }
    with pytest.raises(ValueError, match=rf"dpo: logprob has {rows} rows; expected an even number"):
        get_policy_loss("dpo")(**batch)


def test_mix_chord_needs_step():
    with pytest.raises(ValueError, match=r"mix_chord: `step` .* is required"):
        call("mix_chord", step=None)


def test_mix_chord_bad_step_shape():
    with pytest.raises(ValueError, match=r"step must be an int or a \[B\] tensor, got shape \(4, 1\)"):
        call("mix_chord", step=torch.full((B, 1), 3))
    with pytest.raises(ValueError, match=r"got shape \(0,\)"):
        call("mix_chord", step=torch.zeros(0, dtype=torch.long))


def test_mix_chord_step_values_differ():
    # torch._assert_async raises RuntimeError synchronously on CPU (asynchronously on CUDA)
    with pytest.raises((RuntimeError, ValueError), match="step"):
        call("mix_chord", step=torch.tensor([3, 3, 4, 3]))


def test_mix_chord_step_int_equals_tensor():
    a, _ = call("mix_chord", step=3)
    b, _ = call("mix_chord", step=torch.full((B,), 3))
    torch.testing.assert_close(a, b, rtol=1e-6, atol=0)
