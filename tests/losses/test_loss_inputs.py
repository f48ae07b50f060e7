"""The inputs of the losses, the KL and entropy terms and `aggregate_loss` (`trl_ext.losses.inputs`, rules 1-5).

1. Inputs are declared (`PolicyLoss.inputs()`); documented batch keys a loss does not read are ignored, any
   other keyword is a ValueError naming it.
2. GSPO: `clip_range` alone clips both sides (as the reference constructor does).
3. Masks hold only 0 and 1 (or are bool).
4. An empty batch (B = 0 or T = 0) gives a finite 0 loss with a zero gradient and finite metrics.
5. NaN / ±inf at a valid position of an input a loss reads make the loss NaN; at a masked position they change
   nothing.
6. Wrong types, shapes and dtypes of every input are ValueErrors naming the input.
"""

from __future__ import annotations

import inspect
import math
import re
import warnings

import pytest
import torch
from test_validation import EXPERT, MASK, B, T  # the batch every loss test uses

from trl_ext.losses import (
    KL_FNS,
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    aggregate_loss,
    get_entropy_fn,
    get_kl_fn,
    get_policy_loss,
    inputs,
    masked_batch,
)
from trl_ext.losses import m2po as m2po_module

VALID_USUAL = (0, 1)  # a valid position of a rollout (non-expert) row
VALID_EXPERT = (1, 2)  # a valid position of an expert row
MASKED = (0, 4)  # a masked position


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
    ("m2po", "m2po", {"m2_threshold": 0.01}),
    ("gpg", "gpg", {}),
    ("geo_mean", "geo_mean", {"clip_range_low": 0.1, "clip_range_high": 0.3}),
    ("dro", "dro", {"dro_beta": 0.5}),
    # clip_cov's random draw made certain (every candidate is dropped) so that repeated calls agree
    ("clip_cov", "clip_cov", {"clip_cov_ratio": 1.0, "clip_cov_lb": 0.0}),
    ("kl_cov", "kl_cov", {"kl_cov_ratio": 0.2}),
    ("dppo_tv", "dppo_tv", {"clip_range_low": 0.05, "clip_range_high": 0.1}),
    ("dppo_kl", "dppo_kl", {"clip_range": 0.01}),
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
    "ppo": _PG,
    "gspo": _PG,
    "cispo": _PG,
    "sapo": _PG,
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
    "m2po": _PG,
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


# ==================================================================================================
# 3. Masks
# ==================================================================================================

BAD_MASK_VALUES = [(0.5, "0.5"), (2.0, "2.0"), (-1.0, "-1.0"), (math.nan, "nan")]


def bad_mask(value, dtype=torch.float32, mask=MASK, at=(0, 3)):
    m = mask.to(dtype)
    m[at] = value
    return m


@pytest.mark.parametrize(("value", "text"), BAD_MASK_VALUES, ids=[t for _, t in BAD_MASK_VALUES])
@pytest.mark.parametrize(("name", "kwargs"), CASE_ARGS, ids=CASE_IDS)
def test_action_mask_values_other_than_0_and_1(name, kwargs, value, text):
    fn = build(name, **kwargs)
    message = rf"^{name}: action_mask must be boolean or contain only 0 and 1; found {text} at \[0, 3\]$"
    with pytest.raises(ValueError, match=message):
        fn(**{**make_batch(), "action_mask": bad_mask(value)})


@pytest.mark.parametrize("name", ["ppo", "sft", "dpo", "mix"])
def test_integer_mask_with_a_2(name):
    with pytest.raises(ValueError, match=r"action_mask must be boolean or contain only 0 and 1; found 2 at \[1, 4\]"):
        build(name)(**{**make_batch(), "action_mask": bad_mask(2, torch.int64, at=(1, 4))})


@pytest.mark.parametrize(("value", "text"), BAD_MASK_VALUES, ids=[t for _, t in BAD_MASK_VALUES])
def test_kl_entropy_aggregate_masks(value, text):
    batch = make_batch()
    found = rf"must be boolean or contain only 0 and 1; found {text} at \[0, 3\]"
    for name in sorted(set(KL_FNS) - {"none"}):
        with pytest.raises(ValueError, match=rf"^{get_kl_fn(name).name}: response_mask {found}"):
            get_kl_fn(name).calculate_kl_loss(batch["logprob"], batch["ref_logprob"], bad_mask(value))
    for name in ("default", "mix"):
        with pytest.raises(ValueError, match=rf"^{name} entropy: action_mask {found}"):
            get_entropy_fn(name, entropy_coef=0.1)(-batch["logprob"], bad_mask(value), expert_mask=EXPERT)
    with pytest.raises(ValueError, match=rf"^aggregate_loss: mask {found}"):
        aggregate_loss(batch["logprob"], bad_mask(value))


@pytest.mark.parametrize("name", ["mix", "mix_chord"])
def test_expert_mask_values(name):
    expert = torch.tensor([0.0, 1.0, 0.5, 1.0])
    with pytest.raises(ValueError, match=r"expert_mask must be boolean or contain only 0 and 1; found 0.5 at \[2\]"):
        build(name)(**{**make_batch(), "expert_mask": expert})
    # 0/1 numbers are a mask
    want, _ = build(name)(**make_batch())
    got, _ = build(name)(**{**make_batch(), "expert_mask": EXPERT.to(torch.int64)})
    assert torch.equal(got, want)


def _no_sync(monkeypatch):
    """Make every host read of a tensor (`bool()`, `.item()`, `.tolist()`, `int()`, `float()`) an error."""

    def sync(self, *args, **kwargs):
        raise AssertionError("device sync")

    for method in ("__bool__", "item", "tolist", "__int__", "__float__"):
        monkeypatch.setattr(torch.Tensor, method, sync)


@pytest.mark.parametrize(("name", "kwargs"), CASE_ARGS, ids=CASE_IDS)
def test_a_bool_mask_costs_no_sync(name, kwargs, monkeypatch):
    """The 0/1 check (one device sync) only runs for a non-bool mask; with a bool mask nothing syncs."""
    if name == "clip_cov":  # verl's random draw needs the candidate count on the host: one documented sync
        pytest.skip("clip_cov syncs once per call by design (tested in test_verl_losses_cov_dppo.py)")
    if name == "m2po":  # on CPU tensors it reads M2 to skip the sort (no device there); the accelerator path must not
        monkeypatch.setattr(m2po_module, "_dropped_on_host", m2po_module._dropped_on_device)
    fn = build(name, **kwargs)
    batch = full_batch() if name.startswith("mix") else make_batch()
    batch["logprob"].requires_grad_(True)
    with monkeypatch.context() as patch:
        _no_sync(patch)
        loss, metrics = fn(**batch)
        loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(v) for v in metrics.values())
    with monkeypatch.context() as patch:
        _no_sync(patch)
        with pytest.raises(AssertionError, match="device sync"):
            fn(**{**batch, "action_mask": MASK.float()})


@pytest.mark.parametrize(("name", "kwargs"), CASE_ARGS, ids=CASE_IDS)
def test_a_number_mask_multiplies_and_selects_only_when_an_input_is_not_finite(name, kwargs, monkeypatch):
    """With a 0/1 float mask a loss multiplies by it, as the reference does (no bitwise select), and checks that the
    result is finite; with a NaN at a masked position it recomputes with the select and ignores the NaN."""
    fn = build(name, **kwargs)
    batch = full_batch() if name.startswith("mix") else make_batch()
    want, want_metrics = fn(**batch)
    selects = []
    real_select = masked_batch._Select.apply
    monkeypatch.setattr(masked_batch._Select, "apply", lambda *a: selects.append(1) or real_select(*a))
    number = {**batch, "action_mask": batch["action_mask"].to(batch["logprob"].dtype)}
    got, got_metrics = fn(**number)
    assert torch.equal(got, want)
    # MIX hands its parts bool masks (the rollout and expert rows); clip_cov, drawing at random, selects from the start
    assert not selects or name.startswith("mix") or not fn.deterministic
    dirty = {**number, "logprob": batch["logprob"].clone()}
    dirty["logprob"][~batch["action_mask"]] = math.nan
    got, got_metrics = fn(**dirty)
    assert torch.equal(got, want) and selects
    assert all(torch.equal(got_metrics[k], v) for k, v in want_metrics.items() if k != "seq_mask/masked_tokens")


# ==================================================================================================
# 4. Empty batches
# ==================================================================================================

EMPTY_SHAPES = [(0, T), (B, 0), (0, 0)]
EMPTY_IDS = ["B=0", "T=0", "B=T=0"]


def _mode_cases():
    """(id, loss, kwargs, window): every loss under every mode it has (REC: its clip modes), MIX with and
    without window counts."""
    cases = []
    for name in sorted(POLICY_LOSSES):
        if name == "rec":
            for clip in ("none", "one-side", "two-side", "ring", "gspo-one-side"):
                cases.append((f"rec-{clip}", "rec", {"clip_mode": clip}, False))
        elif name == "dpo":
            cases += [("dpo", "dpo", {}, False), ("dpo-window", "dpo", {}, True)]
        elif "loss_agg_mode" not in POLICY_LOSSES[name].default_args():  # geo_mean: its own (sequence) mean
            cases += [(name, name, {}, False), (f"{name}-window", name, {}, True)]
        else:
            for mode in LOSS_AGG_MODES:
                cases.append((f"{name}-{mode}", name, {"loss_agg_mode": mode}, False))
                if name.startswith("mix"):
                    cases.append((f"{name}-{mode}-window", name, {"loss_agg_mode": mode}, True))
                    cases.append(
                        (f"{name}-{mode}-dynamic", name, {"loss_agg_mode": mode, "use_dynamic_bsz": True}, False)
                    )
    return cases


MODE_CASES = _mode_cases()


def check_zero_metrics(metrics):
    for key, value in metrics.items():
        assert isinstance(value, torch.Tensor) and value.dim() == 0, key
        assert torch.isfinite(value), key
        assert value.item() == 0.0 or key == "mu", key


def test_mode_cases_cover_every_loss():
    assert {c[1] for c in MODE_CASES} == set(POLICY_LOSSES)


@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=EMPTY_IDS)
@pytest.mark.parametrize(("name", "kwargs", "window"), [c[1:] for c in MODE_CASES], ids=[c[0] for c in MODE_CASES])
def test_empty_batch(name, kwargs, window, shape):
    rows, cols = shape
    batch = make_batch(rows, cols)
    batch["advantages"] = torch.linspace(-1.0, 1.0, rows, dtype=torch.float64)  # per sequence: [B]
    if window:
        zero = torch.tensor(0.0)
        seqs, expert_seqs = torch.tensor(float(rows)), batch["expert_mask"].sum().float()
        batch.update(global_valid_toks=zero, global_valid_seqs=seqs, normalizer=zero)
        batch.update(expert_valid_toks=zero, expert_valid_seqs=expert_seqs)
    fn = build(name, **kwargs)
    lp = batch["logprob"].clone().requires_grad_(True)
    loss, metrics = fn(**{**batch, "logprob": lp})
    # DPO with T = 0 still has B/2 pairs, each with z = 0 (as an all-masked batch): log 2 per pair
    expected = math.log(2.0) if name == "dpo" and rows else 0.0
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert loss.item() == pytest.approx(expected, abs=0)
    assert loss.requires_grad
    loss.backward()  # backward works on an empty micro-batch
    assert lp.grad is not None and lp.grad.shape == lp.shape and torch.count_nonzero(lp.grad) == 0
    check_zero_metrics({k: v for k, v in metrics.items() if k != "dpo_loss"})
    assert torch.isfinite(metrics.get("dpo_loss", loss))


@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=EMPTY_IDS)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_empty_batch_kl_entropy_aggregate(mode, shape):
    batch = make_batch(*shape)
    lp = batch["logprob"].clone().requires_grad_(True)
    for name in sorted(KL_FNS):
        fn = get_kl_fn(name, kl_coef=0.1)
        loss, metrics = fn.calculate_kl_loss(lp, batch["ref_logprob"], batch["action_mask"], mode, batch["old_logprob"])
        assert torch.isfinite(loss) and loss.item() == 0.0, name
        check_zero_metrics({k: v for k, v in metrics.items() if k != "kl_coef"})
        if name != "none":
            (grad,) = torch.autograd.grad(loss, lp)
            assert grad.shape == lp.shape and torch.count_nonzero(grad) == 0
        rewards, penalty_metrics = fn.apply_kl_penalty_to_reward(
            torch.zeros(shape), batch["logprob"], batch["ref_logprob"], batch["action_mask"]
        )
        assert rewards.shape == shape and torch.isfinite(penalty_metrics["kl"])
    for name in ("default", "mix", "none"):
        bonus, metrics = get_entropy_fn(name, entropy_coef=0.1)(
            lp, batch["action_mask"], mode, expert_mask=batch["expert_mask"]
        )
        assert torch.isfinite(bonus) and bonus.item() == 0.0, name
        check_zero_metrics(metrics)
        if name != "none":
            (grad,) = torch.autograd.grad(bonus, lp)
            assert torch.count_nonzero(grad) == 0
    for window in ({}, {"global_valid_toks": 0, "global_valid_seqs": 0}):
        value = aggregate_loss(lp, batch["action_mask"], mode, **window)
        assert torch.isfinite(value) and value.item() == 0.0
        (grad,) = torch.autograd.grad(value, lp)
        assert torch.count_nonzero(grad) == 0


def test_empty_mix_chord_with_a_step_tensor():
    batch = make_batch(0, T)
    loss, metrics = build("mix_chord")(**{**batch, "step": torch.tensor(3)})
    assert loss.item() == 0.0 and torch.isfinite(metrics["mu"])


# ==================================================================================================
# 5. Non-finite values: NaN at valid positions, ignored at masked ones
# ==================================================================================================


def reads_of(case_id: str, name: str) -> list[str]:
    """The per-token inputs a loss case reads."""
    if name == "dpo":
        return ["logprob", "ref_logprob"]
    if case_id == "ppo-fallback" or name in ("opmd", "gpg"):
        return ["logprob", "advantages"]
    if name.startswith("sft"):
        return ["logprob"]
    return ["logprob", "old_logprob", "advantages"]


READ_CASES = [(case_id, name, kwargs, key) for case_id, name, kwargs in CASES for key in reads_of(case_id, name)]
FILLS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


@pytest.mark.parametrize("fill", FILLS)
@pytest.mark.parametrize(
    ("name", "kwargs", "key"), [c[1:] for c in READ_CASES], ids=[f"{c[0]}-{c[3]}" for c in READ_CASES]
)
def test_non_finite_at_a_valid_position_gives_nan(name, kwargs, key, fill):
    fn = build(name, **kwargs)
    batch = make_batch()
    positions = [VALID_USUAL, VALID_EXPERT] if key == "logprob" or not name.startswith("mix") else [VALID_USUAL]
    for at in positions:
        dirty = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        dirty[key][at] = FILLS[fill]
        loss, _ = fn(**dirty)
        assert torch.isnan(loss), (at, loss)


@pytest.mark.parametrize("fill", FILLS)
@pytest.mark.parametrize(
    ("name", "kwargs", "key"), [c[1:] for c in READ_CASES], ids=[f"{c[0]}-{c[3]}" for c in READ_CASES]
)
def test_non_finite_at_a_masked_position_changes_nothing(name, kwargs, key, fill):
    fn = build(name, **kwargs)
    batch = make_batch()
    clean_loss, clean_metrics, (clean_grad,) = call(fn, batch)
    dirty = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    dirty[key][MASKED] = FILLS[fill]
    dirty[key][2] = FILLS[fill]  # the empty row
    loss, metrics, (grad,) = call(fn, dirty)
    assert torch.isfinite(loss) and torch.equal(loss, clean_loss)
    assert torch.isfinite(grad).all() and torch.equal(grad, clean_grad)
    for k, v in clean_metrics.items():
        if k != "seq_mask/masked_tokens":  # counts padding by definition (see test_validation)
            assert torch.equal(metrics[k], v), k


@pytest.mark.parametrize("name", ["ppo", "sapo", "importance_sampling", "ppo-dual"])
@pytest.mark.parametrize("key", ["logprob", "old_logprob"])
@pytest.mark.parametrize("fill", ["inf", "-inf"])
def test_an_infinite_log_ratio_is_not_clamped_into_a_finite_loss(name, key, fill):
    """The ±20 log-ratio clamp would turn lp − old = ±inf into a finite ratio; the loss is NaN instead."""
    kwargs = {"clip_ratio_c": 10.0} if name == "ppo-dual" else {}
    fn = get_policy_loss(name.removesuffix("-dual"), **kwargs)
    batch = make_batch()
    batch["advantages"] = -batch["advantages"].abs() if name == "ppo-dual" else batch["advantages"]
    batch[key][VALID_USUAL] = FILLS[fill]
    loss, _ = fn(**batch)
    assert torch.isnan(loss)


def test_non_finite_gradient_of_finite_inputs_is_unchanged():
    """The guard adds an exact 0 for finite inputs: the loss and gradient equal those of the plain formula."""
    batch = make_batch()
    lp = batch["logprob"].clone().requires_grad_(True)
    loss, _ = get_policy_loss("opmd", tau=0.0)(lp, MASK, batch["advantages"])
    plain = batch["logprob"].clone().requires_grad_(True)
    want = aggregate_loss(-batch["advantages"] * plain, MASK)
    (grad,) = torch.autograd.grad(loss, lp)
    (want_grad,) = torch.autograd.grad(want, plain)
    assert torch.equal(loss, want) and torch.equal(grad, want_grad)


@pytest.mark.parametrize("fill", FILLS)
def test_non_finite_per_sequence_advantages(fill):
    batch = make_batch()
    adv = torch.tensor([0.5, -1.0, 2.0, -0.25], dtype=torch.float64)
    adv[0] = FILLS[fill]  # row 0 has valid tokens
    for name in ("ppo", "opmd", "cispo"):
        loss, _ = get_policy_loss(name)(**{**batch, "advantages": adv})
        assert torch.isnan(loss), name
    adv = torch.tensor([0.5, -1.0, FILLS[fill], -0.25], dtype=torch.float64)  # row 2 is empty
    for name in ("ppo", "opmd", "cispo"):
        loss, _ = get_policy_loss(name)(**{**batch, "advantages": adv})
        assert torch.isfinite(loss), name


@pytest.mark.parametrize("fill", FILLS)
def test_non_finite_dpo_reference_sums(fill):
    batch = make_batch()
    sums = torch.where(MASK, batch["ref_logprob"], 0).sum(-1)
    fn = get_policy_loss("dpo")
    clean, _ = fn(batch["logprob"], sums, MASK)
    valid = sums.clone()
    valid[0] = FILLS[fill]
    assert torch.isnan(fn(batch["logprob"], valid, MASK)[0])
    empty_row = sums.clone()
    empty_row[2] = FILLS[fill]
    assert torch.equal(fn(batch["logprob"], empty_row, MASK)[0], clean)


KL_READS = [(name, key) for name in sorted(set(KL_FNS) - {"none"}) for key in ("logprob", "ref_logprob")] + [
    ("corrected_k3", "old_logprob")
]


@pytest.mark.parametrize("fill", FILLS)
@pytest.mark.parametrize(("name", "key"), KL_READS)
def test_kl_non_finite(name, key, fill):
    fn = get_kl_fn(name, kl_coef=0.1)
    for mode in LOSS_AGG_MODES:
        losses = []
        for at in (None, VALID_USUAL, MASKED):
            batch = make_batch()
            if at is not None:
                batch[key][at] = FILLS[fill]
            loss, _ = fn.calculate_kl_loss(batch["logprob"], batch["ref_logprob"], MASK, mode, batch["old_logprob"])
            losses.append(loss)
        clean, valid, masked = losses
        assert torch.isfinite(clean) and torch.isnan(valid), mode
        assert torch.equal(masked, clean), mode


def test_ppo_fallback_does_not_read_old_logprob():
    batch = make_batch()
    batch["old_logprob"][VALID_USUAL] = math.nan
    loss, _ = get_policy_loss("ppo", fallback_to_policy_gradient=True)(**batch)
    assert torch.isfinite(loss)


def test_kl_ignores_old_logprob_unless_it_reads_it():
    batch = make_batch()
    batch["old_logprob"][VALID_USUAL] = math.inf
    loss, _ = get_kl_fn("k2").calculate_kl_loss(
        batch["logprob"], batch["ref_logprob"], MASK, old_logprob=batch["old_logprob"]
    )
    assert torch.isfinite(loss)


@pytest.mark.parametrize("fill", FILLS)
def test_entropy_and_aggregate_non_finite(fill):
    batch = make_batch()
    for name in ("default", "mix"):
        entropy = -batch["logprob"].clone()
        entropy[VALID_USUAL] = FILLS[fill]
        bonus, _ = get_entropy_fn(name, entropy_coef=0.1)(entropy, MASK, expert_mask=EXPERT)
        assert torch.isnan(bonus), name
    for mode in LOSS_AGG_MODES:
        values = batch["logprob"].clone()
        values[VALID_USUAL] = FILLS[fill]
        assert torch.isnan(aggregate_loss(values, MASK, mode)), mode


# ==================================================================================================
# 6. Fuzz: wrong types, shapes and dtypes of every input
# ==================================================================================================

FLOAT_BAD = {
    "none": None,
    "list": [[0.0] * T] * B,
    "str": "x",
    "shape": torch.zeros(B, T, 1, dtype=torch.float64),
    "int": torch.zeros(B, T, dtype=torch.int64),
    "complex": torch.zeros(B, T, dtype=torch.complex64),
    "bool": torch.zeros(B, T, dtype=torch.bool),
}
ADV_BAD = {**FLOAT_BAD, "shape": torch.zeros(B + 1), "int": torch.zeros(B, dtype=torch.int64)}
MASK_BAD = {
    "none": None,
    "list": MASK.tolist(),
    "str": "x",
    "shape": MASK[:, :3],
    "complex": MASK.to(torch.complex64),
}
EXPERT_BAD = {
    "none": None,
    "list": EXPERT.tolist(),
    "str": "x",
    "shape": EXPERT[:3],
    "2d": EXPERT.unsqueeze(-1),
    "complex": EXPERT.to(torch.complex64),
}
STEP_BAD = {"none": None, "str": "3", "list": [3], "float": 3.5, "bool": True, "complex": torch.tensor([3j] * B)}
IS_RATIO_BAD = {  # the optional importance_sampling_ratio: [B, T] or [B, 1], floating point (None: not given)
    "list": [[1.0] * T] * B,
    "str": "x",
    "1d": torch.ones(B, dtype=torch.float64),
    "3d": torch.ones(B, T, 1, dtype=torch.float64),
    "shape": torch.ones(B, T + 1, dtype=torch.float64),
    "rows": torch.ones(B + 1, 1, dtype=torch.float64),
    "int": torch.ones(B, T, dtype=torch.int64),
    "bool": torch.ones(B, 1, dtype=torch.bool),
}
WINDOW_BAD = {
    "str": "8",
    "list": [8],
    "shape": torch.ones(2),
    "negative": -1,
    "nan": math.nan,
    "bool": True,
    "complex": torch.tensor(8j),
    "bool-tensor": torch.tensor(True),
}


def _fuzz_cases():
    cases = []
    for name in sorted(POLICY_LOSSES):
        reads = set(POLICY_LOSSES[name].inputs())
        table = {
            "logprob": FLOAT_BAD,
            "old_logprob": FLOAT_BAD,
            "ref_logprob": FLOAT_BAD,
            "advantages": ADV_BAD,
            "action_mask": MASK_BAD,
            "expert_mask": EXPERT_BAD,
            "step": STEP_BAD if name == "mix_chord" else {},
            "importance_sampling_ratio": IS_RATIO_BAD,
            **dict.fromkeys(("global_valid_toks", "global_valid_seqs", "normalizer"), WINDOW_BAD),
            **dict.fromkeys(("expert_valid_toks", "expert_valid_seqs"), WINDOW_BAD),
        }
        for key in sorted(reads):
            for bad_id, bad in table[key].items():
                cases.append(pytest.param(name, key, bad, id=f"{name}-{key}-{bad_id}"))
    return cases


def _window_batch(name):
    batch = full_batch() if name.startswith("mix") else make_batch()
    if not name.startswith("mix"):
        batch.update(global_valid_toks=torch.tensor(30.0), global_valid_seqs=8, normalizer=40.0)
    return {k: batch[k] for k in POLICY_LOSSES[name].inputs() if k in batch}


@pytest.mark.parametrize(("name", "key", "bad"), _fuzz_cases())
def test_fuzz_policy_loss_inputs(name, key, bad):
    batch = _window_batch(name)
    assert torch.isfinite(get_policy_loss(name)(**batch)[0])  # the batch is valid as is
    batch[key] = bad
    with pytest.raises(ValueError, match=re.escape(key)):
        get_policy_loss(name)(**batch)


def _kl_entropy_aggregate_fuzz():
    cases = []
    for key, table in (
        ("logprob", FLOAT_BAD),
        ("ref_logprob", FLOAT_BAD),
        ("old_logprob", {k: v for k, v in FLOAT_BAD.items() if k != "none"}),  # None: not given
        ("response_mask", MASK_BAD),
        ("global_valid_toks", WINDOW_BAD),
        ("normalizer", WINDOW_BAD),
    ):
        cases += [pytest.param("kl", key, bad, id=f"kl-{key}-{i}") for i, bad in table.items()]
    for name in ("default", "mix"):
        for key, table in (
            ("entropy", FLOAT_BAD),
            ("action_mask", MASK_BAD),
            ("global_valid_seqs", WINDOW_BAD),
            *([("expert_mask", EXPERT_BAD), ("expert_valid_toks", WINDOW_BAD)] if name == "mix" else []),
        ):
            cases += [
                pytest.param(f"entropy-{name}", key, bad, id=f"entropy-{name}-{key}-{i}") for i, bad in table.items()
            ]
    for key, table in (
        ("values", FLOAT_BAD),
        ("mask", MASK_BAD),
        ("normalizer", WINDOW_BAD),
        ("global_valid_toks", WINDOW_BAD),
        ("global_valid_seqs", WINDOW_BAD),
    ):
        cases += [pytest.param("aggregate_loss", key, bad, id=f"aggregate-{key}-{i}") for i, bad in table.items()]
    return cases


@pytest.mark.parametrize(("what", "key", "bad"), _kl_entropy_aggregate_fuzz())
def test_fuzz_kl_entropy_aggregate_inputs(what, key, bad):
    batch = make_batch()
    window = {"global_valid_toks": 30.0, "global_valid_seqs": 8, "normalizer": 40.0}
    if what == "kl":
        fn = get_kl_fn("corrected_k3").calculate_kl_loss
        kwargs = {"logprob": batch["logprob"], "ref_logprob": batch["ref_logprob"], "response_mask": MASK}
        kwargs.update(old_logprob=batch["old_logprob"], **window)
    elif what.startswith("entropy"):
        fn = get_entropy_fn(what.split("-")[1], entropy_coef=0.1)
        kwargs = {"entropy": -batch["logprob"], "action_mask": MASK, "expert_mask": EXPERT, **window}
        if what == "entropy-mix":
            kwargs.update(expert_valid_toks=10.0, expert_valid_seqs=4)
    else:
        fn = aggregate_loss
        kwargs = {"values": batch["logprob"], "mask": MASK, **window}
    assert torch.isfinite(fn(**kwargs)[0] if what != "aggregate_loss" else fn(**kwargs))
    kwargs[key] = bad
    with pytest.raises(ValueError, match=re.escape(key)):
        fn(**kwargs)


def test_a_number_mask_is_checked_once_until_it_changes_in_place(monkeypatch):
    """A float mask that passed its 0/1 check is not checked again while unchanged (its version counter); a change in
    place, directly or through a view, brings the check back and a bad value is refused."""
    fn = build("ppo")
    batch = make_batch()
    mask = batch["action_mask"].to(torch.float64)
    checks = []
    real_addcmul = torch.addcmul
    monkeypatch.setattr(torch, "addcmul", lambda *a, **k: checks.append(1) or real_addcmul(*a, **k))
    want, _ = fn(**batch)
    for _ in range(3):
        got, _ = fn(**{**batch, "action_mask": mask})
        assert torch.equal(got, want)
    assert len(checks) == 1
    mask[0, 0] = 0.5
    with pytest.raises(ValueError, match=r"action_mask must be boolean or contain only 0 and 1; found 0.5 at \[0, 0\]"):
        fn(**{**batch, "action_mask": mask})
    mask[0, 0] = 1.0
    fn(**{**batch, "action_mask": mask})
    mask[1:][0, 3] = 2.0  # through a view: the same version counter
    with pytest.raises(ValueError, match=r"found 2.0 at \[1, 3\]"):
        fn(**{**batch, "action_mask": mask})


def test_clip_cov_draws_once_with_a_number_mask():
    """clip_cov draws the tokens it drops at random: with a float mask it selects from the start instead of multiplying
    and recomputing after a masked NaN, so it draws once, the same tokens as with a bool mask."""
    fn = build("clip_cov", clip_cov_ratio=0.5, clip_cov_lb=-1e9, clip_cov_ub=1e9)  # some, not all, dropped
    batch = make_batch()
    torch.manual_seed(0)
    want, _ = fn(**batch)
    after_bool = torch.rand(8)
    mask = batch["action_mask"].to(batch["logprob"].dtype)
    dirty = {**batch, "action_mask": mask, "old_logprob": batch["old_logprob"].clone()}
    dirty["old_logprob"][~batch["action_mask"]] = math.nan  # the draw's candidates stay (they come from lp and A)
    torch.manual_seed(0)
    got, _ = fn(**dirty)
    assert torch.equal(got, want)
    assert torch.equal(torch.rand(8), after_bool)  # the generator moved as far as with the bool mask
