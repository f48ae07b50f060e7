"""Construction-time argument validation of every loss and of the KL and entropy terms (docs/design.md §2.1-§2.2).

* Every invalid hyperparameter is a ValueError at construction that names the parameter and the rule.
* Valid edge values are accepted; an unknown loss, KL or entropy name and an unknown argument are errors that list
  the valid ones.
"""

from __future__ import annotations

import math
import re

import pytest

from trl_ext.losses import LOSS_AGG_MODES, POLICY_LOSSES, get_entropy_fn, get_kl_fn, get_policy_loss

VALID_MODES_RE = ", ".join(re.escape(repr(m)) for m in LOSS_AGG_MODES)

# --------------------------------------------------------------------------------------------------
# Construction errors: (loss, kwargs, regex on the message -- parameter name AND rule)
# --------------------------------------------------------------------------------------------------

BAD_ARGS = [
    (
        "decoupled_ppo",
        {"behave_imp_weight_cap": -1.0},
        r"decoupled_ppo: behave_imp_weight_cap=-1\.0 is not valid; must be > 1 or None$",
    ),
    (
        "decoupled_ppo",
        {"behave_imp_weight_mode": "token_mask"},
        r"behave_imp_weight_mode='token_mask' is not valid; must be one of 'mask', 'truncate'",
    ),
    # ppo
    ("ppo", {"clip_ratio_c": 1.0}, r"ppo: clip_ratio_c=1\.0 is not valid; must be > 1 or None$"),
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
    ("vespo", {"k_pos": -1.0}, r"vespo: k_pos=-1\.0 is not valid; must be >= 0$"),
    ("vespo", {"lambda_neg": "2"}, r"vespo: lambda_neg='2' is not valid"),
    ("luspo", {"ratio_level": "row"}, r"luspo: ratio_level='row' is not valid; must be one of 'sequence', 'token'$"),
    ("luspo", {"ratio_cap": 0.9}, r"luspo: ratio_cap=0\.9 is not valid; must be > 1 or None$"),
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
    # tpo
    ("tpo", {"loss_type": "simpo"}, r"tpo: loss_type='simpo' is not valid; must be one of 'sigmoid', 'hinge', 'ipo'"),
    ("tpo", {"beta": 0.0}, r"tpo: beta=0\.0 is not valid; must be > 0$"),
    ("tpo", {"tpo_alpha": -0.5}, r"tpo: tpo_alpha=-0\.5 is not valid; must be >= 0$"),
    ("tpo", {"tpo_l_gamma": math.nan}, r"tpo: tpo_l_gamma=nan is not valid; must be a finite number$"),
    # a2po
    ("a2po", {"beta2": 0}, r"a2po: beta2=0 is not valid; must be > 0$"),
    ("a2po", {"beta2": math.nan}, r"a2po: beta2=nan is not valid; must be finite and > 0$"),
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
