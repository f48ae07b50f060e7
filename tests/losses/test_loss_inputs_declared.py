"""The inputs of the losses, the KL and entropy terms and `aggregate_loss` (`trl_ext.losses.inputs`), rules 1-2.

1. Inputs are declared (`PolicyLoss.inputs()`); documented batch keys a loss does not read are ignored, any
   other keyword is a ValueError naming it.
2. GSPO: `clip_range` alone clips both sides (as the reference constructor does).

Rules 3-4 are tested in test_loss_inputs_masks.py, rules 5-6 in test_loss_inputs_bad_values.py; the batch
(`make_batch`, `full_batch`), `build`, `call` and the loss `CASES` defined here serve all three modules.
"""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch
from test_validation_masked import EXPERT, MASK, B, T  # the batch every loss test uses

from trl_ext.losses import KL_FNS, POLICY_LOSSES, aggregate_loss, get_entropy_fn, get_kl_fn, get_policy_loss, inputs


def make_batch(rows: int = B, cols: int = T, seed: int = 0, dtype=torch.float64) -> dict:
    g = torch.Generator().manual_seed(seed)
    lp = -(torch.rand(rows, cols, generator=g, dtype=dtype) * 2.0 + 0.05)
    mask = MASK.clone() if (rows, cols) == (B, T) else torch.ones(rows, cols, dtype=torch.bool)
    expert = EXPERT.clone() if rows == B else torch.arange(rows) % 2 == 1
    return {
        "logprob": lp,
        "old_logprob": lp + 0.3 * torch.randn(rows, cols, generator=g, dtype=dtype),
        "ref_logprob": lp + 0.2 * torch.randn(rows, cols, generator=g, dtype=dtype),
        "advantages": torch.randn(rows, cols, generator=g, dtype=dtype),
        "action_mask": mask,
        "expert_mask": expert,
        "step": 3,
        "prox_logprob": lp + 0.2 * torch.randn(rows, cols, generator=g, dtype=dtype),
    }


def build(name: str, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gspo warns for modes other than seq-mean-token-mean
        return get_policy_loss(name, **kwargs)


def call(fn, batch: dict, leaf_keys=("logprob",)):
    """Loss, metrics and the gradients of `leaf_keys` of `fn(**batch)`."""
    leaves = {k: batch[k].detach().clone().requires_grad_(True) for k in leaf_keys}
    loss, metrics = fn(**{**batch, **leaves})
    grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True) if loss.requires_grad else None
    return loss.detach(), metrics, grads


# (id, loss, kwargs): every loss, some with options that change which inputs they read.
CASES = [
    ("ppo", "ppo", {}),
    ("decoupled_ppo", "decoupled_ppo", {"behave_imp_weight_cap": 1.3, "clip_ratio_c": 3.0}),
    ("decoupled_ppo-truncate", "decoupled_ppo", {"behave_imp_weight_cap": 1.3, "behave_imp_weight_mode": "truncate"}),
    ("ppo-seqmask", "ppo", {"enable_sequence_masking": True, "delta_sequence_masking": -1.0}),
    ("ppo-fallback", "ppo", {"fallback_to_policy_gradient": True}),
    ("gspo", "gspo", {}),
    ("cispo", "cispo", {"enable_mask_clip": True}),
    ("sapo", "sapo", {}),
    ("sapo-detach", "sapo", {"detach_gate": True}),
    ("topr", "topr", {}),
    ("sppo", "sppo", {}),
    ("rec", "rec", {}),
    ("rec-ring-is-k2", "rec", {"clip_mode": "ring", "weight": "importance_sampling", "regularizer": "k2"}),
    ("rec-gspo", "rec", {"clip_mode": "gspo-one-side", "weight": "gspo_importance_sampling"}),
    ("opmd", "opmd", {}),
    ("importance_sampling", "importance_sampling", {}),
    ("sft", "sft", {}),
    ("sft_is", "sft_is", {}),
    ("sft_phi", "sft_phi", {"cutoff_prob": 0.5}),
    ("mix", "mix", {"mu": 0.3}),
    ("mix-dynamic", "mix", {"use_dynamic_bsz": True}),
    ("mix_chord", "mix_chord", {"mu_warmup_steps": 2, "mu_decay_steps": 4, "mu_peak": 0.5}),
    ("dpo", "dpo", {"label_smoothing": 0.1}),
    ("tpo", "tpo", {"loss_type": "ipo", "tpo_alpha": 0.5}),
    ("m2po", "m2po", {"m2_threshold": 0.01}),
    ("gpg", "gpg", {}),
    ("geo_mean", "geo_mean", {"clip_range_low": 0.1, "clip_range_high": 0.3}),
    ("dro", "dro", {"dro_beta": 0.5}),
    # clip_cov's random draw made certain (every candidate is dropped) so that repeated calls agree
    ("clip_cov", "clip_cov", {"clip_cov_ratio": 1.0, "clip_cov_lb": 0.0}),
    ("kl_cov", "kl_cov", {"kl_cov_ratio": 0.2}),
    ("dppo_tv", "dppo_tv", {"clip_range_low": 0.05, "clip_range_high": 0.1}),
    ("dppo_kl", "dppo_kl", {"clip_range": 0.01}),
    ("a2po", "a2po", {"beta2": 0.5}),
    ("vespo", "vespo", {"k_neg": 2.0}),
    ("luspo", "luspo", {}),
    ("luspo-token-delta", "luspo", {"ratio_level": "token", "ratio_cap": 1.5, "clip_range_high": 0.3}),
]
CASE_IDS = [c[0] for c in CASES]
CASE_ARGS = [c[1:] for c in CASES]


def test_cases_cover_every_loss():
    assert {name for _, name, _ in CASES} == set(POLICY_LOSSES)


# ==================================================================================================
# 1. Declared inputs, unknown keywords
# ==================================================================================================

_WINDOW = ("global_valid_toks", "global_valid_seqs", "normalizer")
_PG = ("logprob", "old_logprob", "action_mask", "advantages", *_WINDOW)
_MIX = (
    "logprob",
    "old_logprob",
    "action_mask",
    "advantages",
    "expert_mask",
    "step",
    "global_valid_toks",
    "global_valid_seqs",
    "expert_valid_toks",
    "expert_valid_seqs",
    "normalizer",
)
EXPECTED_INPUTS = {
    "decoupled_ppo": ("logprob", "old_logprob", "action_mask", "advantages", "prox_logprob", *_WINDOW),
    "ppo": _PG,
    "gspo": _PG,
    "cispo": _PG,
    "sapo": _PG,
    "vespo": ("logprob", "old_logprob", "action_mask", "advantages", "importance_sampling_ratio", *_WINDOW),
    "luspo": _PG,
    "topr": _PG,
    "sppo": _PG,
    "rec": ("logprob", "old_logprob", "action_mask", "advantages", "global_valid_toks", "global_valid_seqs"),
    "opmd": ("logprob", "action_mask", "advantages", *_WINDOW),
    "importance_sampling": _PG,
    "sft": ("logprob", "action_mask", *_WINDOW),
    "sft_is": ("logprob", "action_mask", *_WINDOW),
    "sft_phi": ("logprob", "action_mask", *_WINDOW),
    "mix": _MIX,
    "mix_chord": _MIX,
    "dpo": ("logprob", "ref_logprob", "action_mask", "global_valid_seqs"),
    "tpo": ("logprob", "action_mask", "expert_mask", "global_valid_seqs", "expert_valid_seqs", "expert_valid_toks"),
    "a2po": ("logprob", "ref_logprob", "action_mask", "advantages", "global_valid_seqs"),
    "m2po": ("logprob", "old_logprob", "action_mask", "advantages", "window_selected", *_WINDOW),
    "gpg": ("logprob", "action_mask", "advantages", "importance_sampling_ratio", *_WINDOW),
    "geo_mean": (
        "logprob",
        "old_logprob",
        "action_mask",
        "advantages",
        "importance_sampling_ratio",
        "global_valid_seqs",
    ),
    "dro": ("logprob", "old_logprob", "action_mask", "advantages", "importance_sampling_ratio", *_WINDOW),
    **dict.fromkeys(
        ("clip_cov", "kl_cov", "dppo_tv", "dppo_kl"),
        ("logprob", "old_logprob", "action_mask", "advantages", "importance_sampling_ratio", *_WINDOW),
    ),
}


def test_batch_inputs_vocabulary():
    assert inputs.BATCH_INPUTS == (
        "logprob",
        "old_logprob",
        "prox_logprob",
        "window_selected",
        "ref_logprob",
        "action_mask",
        "advantages",
        "expert_mask",
        "step",
        "global_valid_toks",
        "global_valid_seqs",
        "normalizer",
        "expert_valid_toks",
        "expert_valid_seqs",
    )
    assert inputs.WINDOW_INPUTS == _WINDOW


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_inputs_literal(name):
    cls = POLICY_LOSSES[name]
    assert cls.inputs() == EXPECTED_INPUTS[name]
    assert get_policy_loss(name).inputs() == EXPECTED_INPUTS[name]  # on an instance too
    # every input is a documented batch key, or the optional importance-sampling correction, which a trainer hands
    # only to a loss that declares it (an undeclared one stays an unknown-input error)
    assert set(cls.inputs()) <= {*inputs.BATCH_INPUTS, "importance_sampling_ratio"}


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_inputs_are_the_signature_plus_window_inputs(name):
    """Each fact is stated once: the named parameters of `__call__`, then the class's `window_inputs`."""
    cls = POLICY_LOSSES[name]
    params = [
        p.name
        for p in list(inspect.signature(cls.__call__).parameters.values())[1:]
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]
    assert cls.inputs() == tuple(dict.fromkeys([*params, *cls.window_inputs]))


def test_kl_and_entropy_inputs():
    kl = ("logprob", "ref_logprob", "response_mask", "loss_agg_mode", "old_logprob", "token_weights", *_WINDOW)
    for name in KL_FNS:
        assert get_kl_fn(name).inputs() == kl
    assert get_entropy_fn("default").inputs() == ("entropy", "action_mask", "loss_agg_mode", *_WINDOW)
    assert get_entropy_fn("none").inputs() == ("entropy", "action_mask", "loss_agg_mode", *_WINDOW)
    assert get_entropy_fn("mix").inputs() == (
        "entropy",
        "action_mask",
        "loss_agg_mode",
        "expert_mask",
        "global_valid_toks",
        "global_valid_seqs",
        "expert_valid_toks",
        "expert_valid_seqs",
        "normalizer",
    )


def full_batch(**overrides) -> dict:
    """Every documented batch key (window counts included)."""
    batch = make_batch()
    batch.update(
        global_valid_toks=torch.tensor(30.0),
        global_valid_seqs=torch.tensor(8.0),
        normalizer=40.0,
        expert_valid_toks=torch.tensor(12.0),
        expert_valid_seqs=torch.tensor(4.0),
        window_selected=torch.rand(B, T, generator=torch.Generator().manual_seed(1)) < 0.7,
    )
    return {**batch, **overrides}


@pytest.mark.parametrize(("name", "kwargs"), CASE_ARGS, ids=CASE_IDS)
def test_exactly_the_declared_inputs_give_the_same_loss(name, kwargs):
    """A trainer can hand a loss its `inputs()` only, or the whole batch: the documented keys it does not read
    are ignored."""
    fn = build(name, **kwargs)
    batch = full_batch()
    assert set(batch) == set(inputs.BATCH_INPUTS)
    loss_all, metrics_all, _ = call(fn, batch)
    loss_own, metrics_own, _ = call(fn, {k: batch[k] for k in fn.inputs() if k in batch})
    assert torch.isfinite(loss_all)
    assert torch.equal(loss_all, loss_own)
    assert metrics_all.keys() == metrics_own.keys()


@pytest.mark.parametrize(("name", "kwargs"), CASE_ARGS, ids=CASE_IDS)
def test_unknown_input_is_an_error(name, kwargs):
    fn = build(name, **kwargs)
    reads = ", ".join(fn.inputs())
    message = (
        rf"^{name}: unknown input 'global_valid_tok'; {name} reads {reads} \(did you mean 'global_valid_toks'\?\)$"
    )
    with pytest.raises(ValueError, match=message):
        fn(**make_batch(), global_valid_tok=torch.tensor(20.0))
    with pytest.raises(ValueError, match=rf"^{name}: unknown inputs 'entropy', 'foo'; {name} reads "):
        fn(**make_batch(), entropy=torch.zeros(B, T), foo=1)


def test_unknown_input_message_ppo_literal():
    with pytest.raises(ValueError) as info:
        get_policy_loss("ppo")(**make_batch(), global_valid_tok=20)
    assert str(info.value) == (
        "ppo: unknown input 'global_valid_tok'; ppo reads logprob, old_logprob, action_mask, advantages, "
        "global_valid_toks, global_valid_seqs, normalizer (did you mean 'global_valid_toks'?)"
    )


def test_the_typo_would_have_changed_the_loss():
    """Why rule 1 matters: the misspelt window count silently fell back to micro-batch normalization."""
    fn = get_policy_loss("ppo")
    local, _ = fn(**make_batch())
    window, _ = fn(**make_batch(), global_valid_toks=40)
    assert not torch.allclose(local, window)


@pytest.mark.parametrize("name", sorted(KL_FNS))
def test_kl_unknown_input(name):
    batch = make_batch()
    fn = get_kl_fn(name, kl_coef=0.1)
    args = (batch["logprob"], batch["ref_logprob"], batch["action_mask"])
    owner = fn.name  # the aliases kl / mse are k1 / k2
    with pytest.raises(
        ValueError, match=rf"^{owner}: unknown input 'global_valid_tok'; .*did you mean 'global_valid_toks'"
    ):
        fn.calculate_kl_loss(*args, global_valid_tok=20)
    # the documented batch keys are ignored, the window counts read
    loss, _ = fn.calculate_kl_loss(*args, "token-mean", expert_mask=EXPERT, expert_valid_toks=3, global_valid_toks=20)
    assert torch.isfinite(loss)


@pytest.mark.parametrize("name", ["default", "mix", "none"])
def test_entropy_unknown_input(name):
    batch = make_batch()
    fn = get_entropy_fn(name, entropy_coef=0.1)
    entropy = -batch["logprob"]
    with pytest.raises(ValueError, match=rf"^{name} entropy: unknown input 'normaliser'.*did you mean 'normalizer'"):
        fn(entropy, batch["action_mask"], expert_mask=EXPERT, normaliser=3)
    bonus, _ = fn(entropy, batch["action_mask"], "token-mean", expert_mask=EXPERT, ref_logprob=batch["ref_logprob"])
    assert torch.isfinite(bonus)


def test_aggregate_loss_unknown_keyword():
    values = make_batch()["logprob"]
    with pytest.raises(ValueError, match=r"^aggregate_loss: unknown input 'global_valid_tok'.*'global_valid_toks'"):
        aggregate_loss(values, MASK, global_valid_tok=20)
    with pytest.raises(ValueError, match=r"^aggregate_loss: unknown input 'expert_mask'"):  # reads no batch dict
        aggregate_loss(values, MASK, expert_mask=EXPERT)


# ==================================================================================================
# 2. GSPO's clip_range
# ==================================================================================================


def test_gspo_clip_range_sets_both_bounds():
    fn = get_policy_loss("gspo", clip_range=0.2)
    assert (fn.clip_range_low, fn.clip_range_high) == (0.2, 0.2)
    explicit = get_policy_loss("gspo", clip_range_low=0.2, clip_range_high=0.2)
    batch = make_batch()
    torch.testing.assert_close(fn(**batch)[0], explicit(**batch)[0], rtol=0, atol=0)
    assert not torch.equal(fn(**batch)[0], get_policy_loss("gspo")(**batch)[0])  # the paper's ε clip more


def test_gspo_paper_bounds_without_a_clip_value():
    fn = get_policy_loss("gspo")
    assert (fn.clip_range_low, fn.clip_range_high) == (3e-4, 4e-4)
    assert type(fn).default_args() == {
        "clip_range": None,
        "clip_range_low": 3e-4,
        "clip_range_high": 4e-4,
        "loss_agg_mode": "seq-mean-token-mean",
    }
    # one bound given: the other falls back to clip_range, else to the paper's value
    fn = get_policy_loss("gspo", clip_range_low=0.1)
    assert (fn.clip_range_low, fn.clip_range_high) == (0.1, 4e-4)
    fn = get_policy_loss("gspo", clip_range=0.2, clip_range_high=0.3)
    assert (fn.clip_range_low, fn.clip_range_high) == (0.2, 0.3)
    with pytest.raises(ValueError, match=r"clip_range=0\.2 would be ignored"):
        get_policy_loss("gspo", clip_range=0.2, clip_range_low=3e-4, clip_range_high=4e-4)
    with pytest.raises(ValueError, match=r"gspo: clip_range=-0\.2 is not valid"):
        get_policy_loss("gspo", clip_range=-0.2)
