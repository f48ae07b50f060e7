"""Defaults and constructor signatures of the policy losses, KL and entropy terms (docs/design.md §2.1-§2.3).

Every expected value here is a literal transcribed from docs/design.md §2.3 and the reference API
(Trinity-RFT 0.6.0's `policy_loss_fn` API), not read back from the code.
"""

from __future__ import annotations

import inspect

import pytest

from trl_ext.losses import (
    ENTROPY_FNS,
    KL_FNS,
    POLICY_LOSSES,
    EntropyFn,
    KLFn,
    get_entropy_fn,
    get_kl_fn,
    get_policy_loss,
)

_MIX_SHARED = {
    "clip_range": 0.2,
    "clip_range_low": None,
    "clip_range_high": None,
    "use_dynamic_bsz": False,
    "ppo_mini_batch_size": 1,
    "ppo_micro_batch_size_per_gpu": 1,
    "ngpus_trainer": 1,
    "train_batch_size_usual": 1,
    "train_batch_size_expert": 1,
    "loss_agg_mode": "token-mean",
    "sft_loss_agg_mode": None,
    "grpo_loss_agg_mode": None,
}

EXPECTED_DEFAULTS: dict[str, dict] = {
    "decoupled_ppo": {
        "clip_range": 0.2,
        "clip_range_low": None,
        "clip_range_high": None,
        "clip_ratio_c": None,
        "loss_agg_mode": "token-mean",
        "behave_imp_weight_cap": 5.0,
        "behave_imp_weight_mode": "mask",
    },
    "ppo": {
        "clip_range": 0.2,
        "clip_range_low": None,
        "clip_range_high": None,
        "clip_ratio_c": 3.0,
        "loss_agg_mode": "token-mean",
        "enable_sequence_masking": False,
        "delta_sequence_masking": 0.1,
        "fallback_to_policy_gradient": False,
    },
    "gspo": {
        "clip_range": None,
        "clip_range_low": 3e-4,
        "clip_range_high": 4e-4,
        "loss_agg_mode": "seq-mean-token-mean",
    },
    "cispo": {
        "clip_range_low": 1.0,
        "clip_range_high": 0.28,
        "enable_mask_clip": False,
        "mask_clip_range_low": 1.0,
        "mask_clip_range_high": 0.28,
        "loss_agg_mode": "token-mean",
    },
    "sapo": {"tau_pos": 1.0, "tau_neg": 1.05, "loss_agg_mode": "token-mean", "detach_gate": False},
    # TRL 1.16's loss types (trl.GRPOConfig's defaults; LUSPO's clip bounds are GSPO's paper's, which it keeps)
    "vespo": {"k_pos": 2.0, "lambda_pos": 3.0, "k_neg": 3.0, "lambda_neg": 2.0, "loss_agg_mode": "token-mean"},
    "luspo": {
        "clip_range_low": 3e-4,
        "clip_range_high": 4e-4,
        "ratio_level": "sequence",
        "ratio_cap": None,
        "loss_agg_mode": "seq-mean-token-sum",
    },
    "topr": {"advantage_threshold": 0.0, "loss_agg_mode": "token-mean"},
    "sppo": {"epsilon": 0.3, "loss_agg_mode": "token-mean"},
    "rec": {
        "epsilon_low": 0.2,
        "epsilon_high": 0.2,
        "epsilon_low_prime": 0.6,
        "epsilon_high_prime": 2.0,
        "clip_mode": "none",
        "weight": "none",
        "regularizer": "none",
        "regularizer_coef": 0.0,
        "temp": 1.0,
    },
    "opmd": {"tau": 1.0, "loss_agg_mode": "token-mean"},
    "importance_sampling": {"loss_agg_mode": "token-mean"},
    "sft": {"loss_agg_mode": "token-mean"},
    "sft_is": {"loss_agg_mode": "token-mean"},
    "sft_phi": {"loss_agg_mode": "token-mean", "cutoff_prob": 1.0},
    "mix": {"mu": 0.1, **_MIX_SHARED},
    "mix_chord": {
        "mu_warmup_steps": 0,
        "mu_decay_steps": 0,
        "mu_peak": 0.1,
        "mu_valley": 0.1,
        "enable_phi_function": True,
        **_MIX_SHARED,
    },
    "dpo": {"beta": 0.1, "label_smoothing": 0.0},
    "tpo": {"loss_type": "sigmoid", "beta": 0.01, "label_smoothing": 0.0, "tpo_alpha": 1.0, "tpo_l_gamma": 0.5},
    "a2po": {"beta2": 0.001},  # trl.experimental.a2po.A2POConfig's
    "m2po": {"m2_threshold": 0.04, "loss_agg_mode": "token-mean", "log_ratio_clip": 20.0},
    # verl 0.9.1 (ActorConfig: clip_ratio 0.2, loss_agg_mode token-mean; dro_beta has no verl default)
    "gpg": {"loss_agg_mode": "token-mean"},
    "geo_mean": {"clip_range": 0.2, "clip_range_low": None, "clip_range_high": None},
    "dro": {"dro_beta": 0.05, "loss_agg_mode": "token-mean"},
    # verl 0.9.1: PolicyLossConfig (clip_cov_*, kl_cov_ratio, ppo_kl_coef) and ActorConfig (clip_ratio 0.2 for both
    # sides, clip_ratio_c 3.0, loss_agg_mode token-mean)
    "clip_cov": {
        "clip_range": 0.2,
        "clip_range_low": None,
        "clip_range_high": None,
        "clip_cov_ratio": 0.0002,
        "clip_cov_lb": 1.0,
        "clip_cov_ub": 5.0,
        "selection_seed": None,
        "loss_agg_mode": "token-mean",
    },
    "kl_cov": {"kl_cov_ratio": 0.0002, "ppo_kl_coef": 0.1, "loss_agg_mode": "token-mean"},
    "dppo_tv": {
        "clip_range": 0.2,
        "clip_range_low": None,
        "clip_range_high": None,
        "clip_ratio_c": 3.0,
        "loss_agg_mode": "token-mean",
    },
    "dppo_kl": {
        "clip_range": 0.2,
        "clip_range_low": None,
        "clip_range_high": None,
        "clip_ratio_c": 3.0,
        "loss_agg_mode": "token-mean",
    },
}

# The reference classes' constructor arguments with their `__init__` defaults, transcribed by hand from
# the reference API file (`importance_sampling` has no entry there).
_REF_MIX_SHARED = {
    "clip_range": None,
    "clip_range_low": None,
    "clip_range_high": None,
    "use_dynamic_bsz": None,
    "ppo_mini_batch_size": 1,
    "ppo_micro_batch_size_per_gpu": 1,
    "ngpus_trainer": 1,
    "train_batch_size_usual": 1,
    "train_batch_size_expert": 1,
    "loss_agg_mode": "token-mean",
    "sft_loss_agg_mode": None,
    "grpo_loss_agg_mode": None,
}
REFERENCE_INIT: dict[str, dict] = {
    "ppo": {
        "backend": "verl",
        "clip_range": None,
        "clip_range_low": None,
        "clip_range_high": None,
        "clip_ratio_c": 3.0,
        "loss_agg_mode": "token-mean",
        "enable_sequence_masking": False,
        "delta_sequence_masking": 0.1,
    },
    "opmd": {"backend": "verl", "tau": 1.0, "loss_agg_mode": "token-mean"},
    "dpo": {"backend": "verl", "beta": 0.1, "label_smoothing": 0.0},
    "sft": {"backend": "verl", "loss_agg_mode": "token-mean"},
    "mix": {"backend": "verl", "mu": 0.1, **_REF_MIX_SHARED},
    "gspo": {
        "backend": "verl",
        "clip_range": None,
        "clip_range_low": None,
        "clip_range_high": None,
        "loss_agg_mode": "seq-mean-token-mean",
    },
    "topr": {"backend": "verl", "advantage_threshold": 0.0, "loss_agg_mode": "token-mean"},
    "cispo": {
        "backend": "verl",
        "clip_range_low": 1.0,
        "clip_range_high": 0.28,
        "enable_mask_clip": False,
        "mask_clip_range_low": 1.0,
        "mask_clip_range_high": 0.28,
        "loss_agg_mode": "token-mean",
    },
    "mix_chord": {
        "backend": "verl",
        "mu_warmup_steps": 0,
        "mu_decay_steps": 0,
        "mu_peak": 0.1,
        "mu_valley": 0.1,
        "enable_phi_function": True,
        **_REF_MIX_SHARED,
    },
    "sft_is": {"backend": "verl", "loss_agg_mode": "token-mean"},
    "sft_phi": {"backend": "verl", "loss_agg_mode": "token-mean", "cutoff_prob": 1.0},
    "sppo": {"backend": "verl", "epsilon": 0.3, "loss_agg_mode": "token-mean"},
    "rec": {
        "backend": "verl",
        "epsilon_low": 0.2,
        "epsilon_high": 0.2,
        "epsilon_low_prime": 0.4,
        "epsilon_high_prime": 0.4,
        "clip_mode": "none",
        "weight": "none",
        "regularizer": "none",
        "regularizer_coef": 0.0,
        "temp": 1.0,
    },
    "sapo": {"backend": "verl", "tau_pos": 1.0, "tau_neg": 1.05, "loss_agg_mode": "token-mean"},
    # Trinity-RFT main (not in 0.6.0): trinity/algorithm/policy_loss_fn/m2po_policy_loss.py
    "m2po": {"backend": "verl", "m2_threshold": 0.04, "loss_agg_mode": "token-mean", "log_ratio_clip": 20.0},
}

# Where our defaults differ from the reference `__init__`: the reference's `default_args()` (what a
# Trinity config runs with) wins over its `__init__` (docs/design.md §2.3) -- PPO / MIX take clip_range 0.2,
# GSPO its paper's 3e-4 / 4e-4, REC the ε' of its default_args, MIX a plain bool for use_dynamic_bsz.
DOCUMENTED_DEVIATIONS: dict[str, set[str]] = {
    "ppo": {"clip_range"},
    "gspo": {"clip_range_low", "clip_range_high"},
    "mix": {"clip_range", "use_dynamic_bsz"},
    "mix_chord": {"clip_range", "use_dynamic_bsz"},
    "rec": {"epsilon_low_prime", "epsilon_high_prime"},
}


def test_policy_loss_names():
    assert set(POLICY_LOSSES) == set(EXPECTED_DEFAULTS)
    assert len(POLICY_LOSSES) == 28


@pytest.mark.parametrize("name", sorted(EXPECTED_DEFAULTS))
def test_default_args_literal(name):
    cls = POLICY_LOSSES[name]
    defaults = cls.default_args()
    assert defaults == EXPECTED_DEFAULTS[name]
    # Exact types too: 3.0 vs 3, False vs 0 would compare equal above.
    for key, value in EXPECTED_DEFAULTS[name].items():
        assert type(defaults[key]) is type(value), key
    assert "backend" not in defaults
    # A fresh dict each call: mutating it must not change the class defaults.
    defaults.clear()
    assert cls.default_args() == EXPECTED_DEFAULTS[name]


@pytest.mark.parametrize("name", sorted(EXPECTED_DEFAULTS))
def test_default_construction_matches_explicit_defaults(name):
    cls = POLICY_LOSSES[name]
    plain = cls()
    explicit = cls(**cls.default_args())
    via_registry = get_policy_loss(name)
    assert type(via_registry) is cls
    assert plain.args == explicit.args == via_registry.args
    assert set(plain.args) == set(EXPECTED_DEFAULTS[name])
    assert plain.name == name
    # The args of an instance rebuild an identical instance.
    assert cls(**plain.args).args == plain.args


@pytest.mark.parametrize("name", sorted(REFERENCE_INIT))
def test_reference_constructor_args_exist(name):
    params = inspect.signature(POLICY_LOSSES[name]).parameters
    missing = [arg for arg in REFERENCE_INIT[name] if arg not in params]
    assert not missing, f"{name}: reference constructor arguments missing: {missing}"
    assert params["backend"].default == "verl"
    # Every reference argument is accepted by keyword through the registry.
    kwargs = {arg: EXPECTED_DEFAULTS[name][arg] for arg in REFERENCE_INIT[name] if arg != "backend"}
    assert get_policy_loss(name, backend="verl", **kwargs).args == get_policy_loss(name).args


@pytest.mark.parametrize("name", sorted(REFERENCE_INIT))
def test_reference_init_defaults_match_except_documented(name):
    """Our defaults equal the reference `__init__` defaults except for the documented deviations."""
    ours = POLICY_LOSSES[name].default_args()
    deviations = DOCUMENTED_DEVIATIONS.get(name, set())
    for arg, ref_default in REFERENCE_INIT[name].items():
        if arg == "backend":
            continue
        if arg in deviations:
            assert ours[arg] != ref_default, f"{name}.{arg}: listed as a deviation but equals the reference"
        else:
            assert ours[arg] == ref_default, f"{name}.{arg}: {ours[arg]!r} != reference {ref_default!r}"


VERL_LOSSES = {"gpg", "geo_mean", "dro", "clip_cov", "kl_cov", "dppo_tv", "dppo_kl"}
"""The losses ported from verl 0.9.1 (not Trinity-RFT classes: their defaults are pinned in EXPECTED_DEFAULTS)."""
TRL_LOSSES = {"a2po", "vespo", "luspo", "tpo"}
"""TRL 1.16's losses registered as policy losses: GRPO loss types and experimental trainers' (their defaults:
TRL's configs', pinned above)."""


def test_reference_args_cover_every_reference_class():
    ours = set(POLICY_LOSSES) - {"importance_sampling", "decoupled_ppo"} - VERL_LOSSES - TRL_LOSSES
    assert set(REFERENCE_INIT) == ours


@pytest.mark.parametrize("name", sorted(EXPECTED_DEFAULTS))
def test_backend_accepted_and_ignored(name):
    fn = get_policy_loss(name, backend="anything")
    assert fn.backend == "anything"
    assert fn.args == get_policy_loss(name).args
    assert type(fn)(backend="megatron").backend == "megatron"


def test_overrides_are_applied():
    fn = get_policy_loss("sapo", tau_neg=1.1)
    assert fn.tau_neg == 1.1 and fn.tau_pos == 1.0
    assert fn.args == {"tau_pos": 1.0, "tau_neg": 1.1, "loss_agg_mode": "token-mean", "detach_gate": False}
    rec = get_policy_loss("rec", clip_mode="ring", epsilon_low_prime=0.5)
    assert rec.clip_mode == "ring" and rec.epsilon_low_prime == 0.5 and rec.epsilon_high_prime == 2.0


def test_ppo_clip_range_falls_back_to_symmetric():
    fn = get_policy_loss("ppo")
    assert (fn.clip_range_low, fn.clip_range_high) == (0.2, 0.2)
    fn = get_policy_loss("ppo", clip_range_high=0.28)
    assert (fn.clip_range_low, fn.clip_range_high) == (0.2, 0.28)
    fn = get_policy_loss("ppo", clip_range=None, clip_range_low=0.1, clip_range_high=0.3)
    assert (fn.clip_range_low, fn.clip_range_high) == (0.1, 0.3)


def test_kl_defaults():
    assert KLFn.default_args() == {"kl_coef": 0.001, "adaptive": False, "target_kl": None, "horizon": None}
    for name in KL_FNS:
        fn = get_kl_fn(name)
        assert fn.kl_coef == 0.001
        assert fn.adaptive is False
        assert fn.target_kl is None and fn.horizon is None
    assert set(KL_FNS) == {"none", "k1", "k2", "k3", "low_var_kl", "abs", "corrected_k3", "kl", "mse"}
    fn = get_kl_fn("k3", kl_coef=0.05, adaptive=True, target_kl=0.1, horizon=1000)
    assert (fn.kl_coef, fn.adaptive, fn.target_kl, fn.horizon) == (0.05, True, 0.1, 1000)
    assert isinstance(fn.kl_coef, float)


def test_kl_signature_defaults():
    params = inspect.signature(get_kl_fn).parameters
    assert {k: p.default for k, p in params.items() if k != "name"} == {
        "kl_coef": 0.001,
        "adaptive": False,
        "target_kl": None,
        "horizon": None,
    }


def test_entropy_defaults():
    assert EntropyFn.default_args() == {"entropy_coef": 0.0}
    assert set(ENTROPY_FNS) == {"default", "mix", "none"}
    for name in ENTROPY_FNS:
        assert get_entropy_fn(name).entropy_coef == 0.0
    assert get_entropy_fn("default", entropy_coef=0.01).entropy_coef == 0.01
    assert inspect.signature(get_entropy_fn).parameters["entropy_coef"].default == 0.0
