"""The inputs of the losses, the KL and entropy terms and `aggregate_loss` (`trl_ext.losses.inputs`), rules 5-6.

5. NaN / ±inf at a valid position of an input a loss reads make the loss NaN; at a masked position they change
   nothing.
6. Wrong types, shapes and dtypes of every input are ValueErrors naming the input (fuzzed).
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from test_loss_inputs_declared import CASES, build, call, full_batch, make_batch
from test_validation_masked import EXPERT, MASK, B, T  # the batch every loss test uses

from trl_ext.losses import (
    KL_FNS,
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    aggregate_loss,
    get_entropy_fn,
    get_kl_fn,
    get_policy_loss,
)

VALID_USUAL = (0, 1)  # a valid position of a rollout (non-expert) row
VALID_EXPERT = (1, 2)  # a valid position of an expert row
MASKED = (0, 4)  # a masked position


# ==================================================================================================
# 5. Non-finite values: NaN at valid positions, ignored at masked ones
# ==================================================================================================


def reads_of(case_id: str, name: str) -> list[str]:
    """The per-token inputs a loss case reads."""
    if name == "dpo":
        return ["logprob", "ref_logprob"]
    if name == "tpo":
        return ["logprob"]
    if name == "a2po":
        return ["logprob", "ref_logprob", "advantages"]
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
        if k != "seq_mask/masked_tokens":  # counts padding by definition (see test_validation_masked)
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
            "prox_logprob": {k: v for k, v in FLOAT_BAD.items() if k != "none"},
            "window_selected": {k: v for k, v in MASK_BAD.items() if k != "none"},
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
        batch.update(expert_valid_toks=torch.tensor(6.0), expert_valid_seqs=2)  # tpo: its reference rows
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
