"""The inputs of the losses, the KL and entropy terms and `aggregate_loss` (`trl_ext.losses.inputs`), rules 3-4.

3. Masks hold only 0 and 1 (or are bool): a bool mask costs no device sync; a 0/1 number mask is checked once
   (until it changes in place) and then selects as the bool mask does.
4. An empty batch (B = 0 or T = 0) gives a finite 0 loss with a zero gradient and finite metrics.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_loss_inputs_declared import CASE_ARGS, CASE_IDS, build, full_batch, make_batch
from test_validation_masked import EXPERT, MASK, B, T  # the batch every loss test uses

from trl_ext.losses import (
    KL_FNS,
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    aggregate_loss,
    get_entropy_fn,
    get_kl_fn,
)
from trl_ext.losses import m2po as m2po_module

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
        pytest.skip("clip_cov syncs once per call by design (tested in test_verl_losses_cov.py)")
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
def test_a_number_mask_selects_as_the_bool_mask_and_keeps_the_nan_contract(name, kwargs):
    """A 0/1 float mask gives the bool mask's loss, gradient and metrics; NaN at its masked positions reach none of
    them, and a NaN at one valid position makes the loss NaN."""
    fn = build(name, **kwargs)
    batch = full_batch() if name.startswith("mix") else make_batch()
    number = {**batch, "action_mask": batch["action_mask"].to(batch["logprob"].dtype)}

    def run(inputs, logprob):
        lp = logprob.clone().requires_grad_(True)
        torch.manual_seed(0)  # clip_cov draws the tokens it drops
        loss, metrics = fn(**{**inputs, "logprob": lp})
        (grad,) = torch.autograd.grad(loss, lp)
        return loss, grad, metrics

    want, want_grad, want_metrics = run(batch, batch["logprob"])
    dirty = batch["logprob"].clone()
    dirty[~batch["action_mask"]] = math.nan
    for logprob in (batch["logprob"], dirty):
        got, got_grad, got_metrics = run(number, logprob)
        assert torch.equal(got, want) and torch.equal(got_grad, want_grad)
        assert all(torch.equal(got_metrics[k], v) for k, v in want_metrics.items() if k != "seq_mask/masked_tokens")
    at_valid = batch["logprob"].clone()
    at_valid[tuple(batch["action_mask"].nonzero()[0])] = math.nan
    torch.manual_seed(0)
    assert torch.isnan(fn(**{**number, "logprob": at_valid})[0])


def test_a_number_mask_is_checked_at_every_call(monkeypatch):
    """A float mask is checked for 0/1 at every call (no bookkeeping of masks already seen): a change in place,
    directly or through a view, is refused at the next call."""
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
    assert len(checks) == 3
    mask[0, 0] = 0.5
    with pytest.raises(ValueError, match=r"action_mask must be boolean or contain only 0 and 1; found 0.5 at \[0, 0\]"):
        fn(**{**batch, "action_mask": mask})
    mask[0, 0] = 1.0
    fn(**{**batch, "action_mask": mask})
    mask[1:][0, 3] = 2.0  # through a view: the same version counter
    with pytest.raises(ValueError, match=r"found 2.0 at \[1, 3\]"):
        fn(**{**batch, "action_mask": mask})


def test_clip_cov_draws_once_with_a_number_mask():
    """clip_cov draws the tokens it drops at random: with a float mask and a masked NaN it draws once, the same tokens
    as with a bool mask."""
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
    expected = math.log(2.0) if name in ("dpo", "tpo") and rows else 0.0  # TPO: its pair of non-expert rows
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert loss.item() == pytest.approx(expected, abs=0)
    assert loss.requires_grad
    loss.backward()  # backward works on an empty micro-batch
    assert lp.grad is not None and lp.grad.shape == lp.shape and torch.count_nonzero(lp.grad) == 0
    check_zero_metrics({k: v for k, v in metrics.items() if k not in ("dpo_loss", "preference_loss", "tpo_loss")})
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
