"""MIX / MIX-CHORD with any policy loss on the rollout rows (`rollout_loss=`): the mix equals
(1 − μ)·X(rollout rows) + μ·SFT(expert rows), each part computed on its own rows independently of the mix, under window
normalization (the rollout rows' window counts; the micro-batches' shares add up to the window's loss, metrics
included) and under the reference's per-micro-batch weighting (n·w per part), values and gradients; the rollout loss's
inputs and metrics become the mix's; the errors name what to do instead."""

from __future__ import annotations

import inspect
import math
import warnings
from typing import ClassVar

import pytest
import torch

from trl_ext.components import MEAN, SHARE
from trl_ext.losses import PolicyLoss, get_policy_loss
from trl_ext.losses.trl_grpo import TRLGRPOLoss

B, T = 8, 6
LENGTHS = [6, 2, 5, 1, 3, 6, 4, 2]
EXPERT = [False, True, False, False, True, True, False, True]  # 4 rollout rows, 4 expert rows
SPLITS = [[8], [3, 5], [1, 2, 2, 3], [2, 6]]  # [1, 2, ...]: a micro-batch with rollout rows only, ...

# the rollout losses, with arguments away from their defaults where that makes them clip or gate differently
ROLLOUT_LOSSES = {
    "ppo": {"clip_range": 0.1},
    "sapo": {"tau_pos": 1.2, "tau_neg": 1.3},
    "gspo": {"clip_range": 0.05},
    "cispo": {},
    "topr": {},
    "sppo": {},
    "importance_sampling": {},
    "opmd": {},
    "rec": {},
}
MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]

MU = 0.3  # mix: mu; mix_chord: mu_schedule(STEP, ...) with these arguments
STEP = 3
CHORD = {"mu_warmup_steps": 2, "mu_decay_steps": 4, "mu_peak": 0.5, "mu_valley": 0.1}
MIXES = {"mix": ({"mu": MU}, "sft"), "mix_chord": (CHORD, "sft_phi")}


def _mu(mix: str) -> float:
    """μ at STEP: fixed for mix; for mix_chord a quarter into the cosine decay 0.5 -> 0.1 after 2 warm-up steps."""
    return MU if mix == "mix" else 0.1 + (0.5 - 0.1) * 0.5 * (1 + math.cos(math.pi * (STEP - 2) / 4))


def _rollout(name: str, mode: str | None = None) -> PolicyLoss:
    kwargs = dict(ROLLOUT_LOSSES[name])
    if mode is not None and "loss_agg_mode" in {a.name for a in _cls(name).arguments}:
        kwargs["loss_agg_mode"] = mode
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gspo warns for another mode than seq-mean-token-mean
        return get_policy_loss(name, **kwargs)


def _cls(name: str) -> type:
    from trl_ext.losses import POLICY_LOSSES

    return POLICY_LOSSES[name]


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    lp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    old = lp + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    mask = torch.arange(T).unsqueeze(0) < torch.tensor(LENGTHS).unsqueeze(1)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    expert = torch.tensor(EXPERT)
    adv = torch.where(expert, 0.0, adv)  # as the trainer gives expert rows
    return lp, old, mask, adv, expert


def _part(fn: PolicyLoss, lp, old, mask, adv, rows, **window):
    """`fn` on `rows` alone (an independent call: the other rows are not in its batch), with its gradient."""
    piece = lp[rows].clone().requires_grad_()
    given = {"logprob": piece, "old_logprob": old[rows], "action_mask": mask[rows], "advantages": adv[rows], **window}
    loss, metrics = fn(**{k: v for k, v in given.items() if k in fn.inputs()})
    (grad,) = torch.autograd.grad(loss, piece, allow_unused=True, materialize_grads=True)
    full = torch.zeros_like(lp)
    full[rows] = grad
    return loss.detach(), full, metrics


def _mix(fn: PolicyLoss, lp, old, mask, adv, expert, rows, **window):
    """The mix on the micro-batch `rows`: loss, gradient (in the full batch's shape) and metrics."""
    piece = lp[rows].clone().requires_grad_()
    loss, metrics = fn(piece, old[rows], mask[rows], adv[rows], expert_mask=expert[rows], step=STEP, **window)
    (grad,) = torch.autograd.grad(loss, piece)
    full = torch.zeros_like(lp)
    full[rows] = grad
    return loss.detach(), full, metrics


def _micro_batches(split):
    start = 0
    for size in split:
        yield torch.arange(start, start + size)
        start += size


# ==================================================================================================
# Window normalization: each part over its own rows of the whole window
# ==================================================================================================


@pytest.mark.parametrize("mix", sorted(MIXES))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(ROLLOUT_LOSSES))
def test_window_mix_is_the_parts_on_their_own_rows(name, mode, mix):
    lp, old, mask, adv, expert = _batch()
    mixing, sft = MIXES[mix]
    rollout = _rollout(name, mode)
    fn = get_policy_loss(mix, rollout_loss=rollout, loss_agg_mode=mode, **mixing)
    normalizer = B * T
    window = {
        "global_valid_toks": mask.sum().double(),
        "global_valid_seqs": torch.tensor(float(B)),
        "expert_valid_toks": mask[expert].sum().double(),
        "expert_valid_seqs": expert.sum().double(),
        "normalizer": normalizer,
    }
    usual_rows, expert_rows = (~expert).nonzero().flatten(), expert.nonzero().flatten()
    # the parts, each on its own rows: their local counts are the window counts of their rows
    rl, rl_grad, rl_metrics = _part(rollout, lp, old, mask, adv, usual_rows, normalizer=normalizer * 4 / B)
    sft_fn = get_policy_loss(sft, loss_agg_mode=mode)
    sft_loss, sft_grad, sft_metrics = _part(sft_fn, lp, old, mask, adv, expert_rows, normalizer=normalizer * 4 / B)
    mu = _mu(mix)
    expected, expected_grad = (1 - mu) * rl + mu * sft_loss, (1 - mu) * rl_grad + mu * sft_grad
    assert rl.abs() > 1e-3 and sft_loss.abs() > 1e-3 and rl_grad.abs().max() > 1e-3  # both parts contribute

    for split in SPLITS:
        total, grad, metrics = 0.0, torch.zeros_like(lp), {}
        for rows in _micro_batches(split):
            loss, g, m = _mix(fn, lp, old, mask, adv, expert, rows, **window)
            assert set(m) <= set(fn.metrics), set(m) - set(fn.metrics)
            assert all(torch.isfinite(v) for v in m.values()), m
            total, grad = total + loss, grad + g
            for k, v in m.items():
                metrics[k] = metrics.get(k, 0.0) + v
        torch.testing.assert_close(total, expected, msg=f"{split}")
        torch.testing.assert_close(grad, expected_grad, msg=f"{split}")
        torch.testing.assert_close(metrics["loss"], expected)
        # the rollout loss's metrics as `usual/*`: its loss terms add up to its loss over the rollout rows, its
        # token means (ppo_kl) to the token mean over them
        for key, value in rl_metrics.items():
            if rollout.metrics[key] == SHARE or key == "ppo_kl":
                torch.testing.assert_close(metrics[f"usual/{key}"], value, msg=f"{split} usual/{key}")
        torch.testing.assert_close(metrics[f"expert/{sft}_loss"], sft_metrics[f"{sft}_loss"])
        if mix == "mix_chord":
            assert metrics["mu"] / len(split) == pytest.approx(mu)


@pytest.mark.parametrize("name", sorted(ROLLOUT_LOSSES))
def test_instance_metrics_and_inputs_are_the_rollout_losss(name):
    rollout = _rollout(name)
    fn = get_policy_loss("mix_chord", rollout_loss=rollout)
    usual = {k.removeprefix("usual/"): v for k, v in fn.metrics.items() if k.startswith("usual/")}
    assert usual == dict.fromkeys(rollout.metrics, SHARE)  # window shares, summed by the trainer
    assert fn.metrics["loss"] == SHARE and fn.metrics["mu"] == MEAN
    assert {k for k in fn.metrics if k.startswith("expert/")} == {"expert/sft_loss", "expert/sft_phi_loss"}
    assert all(fn.is_window_share(k) for k in fn.metrics if k != "mu")
    assert set(rollout.inputs()) <= set(fn.inputs())
    # what the mix returns is what it declares
    lp, old, mask, adv, expert = _batch()
    _, _, metrics = _mix(fn, lp, old, mask, adv, expert, torch.arange(B))
    declared = {k for k in fn.metrics if k != "expert/sft_loss"}
    if name == "ppo":  # declared, returned only with enable_sequence_masking
        declared -= {"usual/seq_mask/masked_tokens", "usual/seq_mask/mean_sequence_kl"}
    assert set(metrics) == declared


# ==================================================================================================
# The reference's per-micro-batch weighting: each part over its rows of the micro-batch, times n·w
# ==================================================================================================

GEOMETRY = {  # 4 accumulation steps; 5 rollout rows and 3 expert rows per GPU
    "ppo_mini_batch_size": 8,
    "ppo_micro_batch_size_per_gpu": 2,
    "ngpus_trainer": 2,
    "train_batch_size_usual": 10,
    "train_batch_size_expert": 6,
}


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("mix", sorted(MIXES))
@pytest.mark.parametrize("name", sorted(ROLLOUT_LOSSES))
def test_reference_weighting_is_n_w_times_each_part(name, mix, dynamic):
    lp, old, mask, adv, expert = _batch(1)
    mixing, sft = MIXES[mix]
    rollout = _rollout(name, "seq-mean-token-mean" if name == "gspo" else None)
    fn = get_policy_loss(mix, rollout_loss=rollout, use_dynamic_bsz=dynamic, **GEOMETRY, **mixing)
    sft_fn = get_policy_loss(sft)
    mu = _mu(mix)
    for rows in _micro_batches([1, 2, 5]):
        usual_rows = rows[~expert[rows]]
        expert_rows = rows[expert[rows]]
        if dynamic:  # (ppo_mini_batch_size // ngpus) / (rows · (train_batch_size // ngpus))
            w_usual, w_expert = 4 / (len(rows) * 5), 4 / (len(rows) * 3)
        else:  # (ppo_mini_batch_size // ppo_micro_batch_size_per_gpu) / (train_batch_size // ngpus)
            w_usual, w_expert = 4 / 5, 4 / 3
        rl, rl_grad, rl_metrics = _part(rollout, lp, old, mask, adv, usual_rows)
        sft_loss, sft_grad, _ = _part(sft_fn, lp, old, mask, adv, expert_rows)
        scale_usual, scale_expert = len(usual_rows) * w_usual, len(expert_rows) * w_expert
        loss, grad, metrics = _mix(fn, lp, old, mask, adv, expert, rows)
        torch.testing.assert_close(loss, (1 - mu) * scale_usual * rl + mu * scale_expert * sft_loss)
        torch.testing.assert_close(grad, (1 - mu) * scale_usual * rl_grad + mu * scale_expert * sft_grad)
        assert set(metrics) <= set(fn.metrics)
        for key, value in rl_metrics.items():  # scaled like the part's loss
            if key == "ppo_kl_seq":  # a mean over all rows of the part's batch: the expert rows count (as 0)
                continue
            torch.testing.assert_close(metrics[f"usual/{key}"], value * scale_usual, msg=f"usual/{key}")


# ==================================================================================================
# The default (no rollout_loss) is the PPO part; rollout_loss=ppo with the same ε is the same loss
# ==================================================================================================


@pytest.mark.parametrize("window", [True, False])
def test_rollout_loss_ppo_equals_the_default_ppo_part(window):
    lp, old, mask, adv, expert = _batch(2)
    default = get_policy_loss("mix_chord", clip_range_high=0.28, loss_agg_mode="seq-mean-token-mean", **CHORD)
    composed = get_policy_loss(
        "mix_chord",
        rollout_loss=get_policy_loss("ppo", clip_range_high=0.28, loss_agg_mode="seq-mean-token-mean"),
        loss_agg_mode="seq-mean-token-mean",
        **CHORD,
    )
    assert default.metrics == type(default).metrics and default.rollout_loss is None
    assert composed.metrics == {
        **type(composed).metrics,
        **{f"usual/{k}": SHARE for k in ("seq_mask/masked_tokens", "seq_mask/mean_sequence_kl")},
    }
    counts = {}
    if window:
        counts = {
            "global_valid_toks": mask.sum(),
            "global_valid_seqs": B,
            "expert_valid_toks": mask[expert].sum(),
            "expert_valid_seqs": int(expert.sum()),
        }
    a = _mix(default, lp, old, mask, adv, expert, torch.arange(2, 7), **counts)
    b = _mix(composed, lp, old, mask, adv, expert, torch.arange(2, 7), **counts)
    torch.testing.assert_close(a[0], b[0], rtol=0, atol=0)
    torch.testing.assert_close(a[1], b[1], rtol=0, atol=0)
    assert a[2] == b[2]


def test_the_signature_and_the_class_level_declarations():
    params = inspect.signature(get_policy_loss("mix").__class__).parameters
    assert list(params)[:3] == ["backend", "rollout_loss", "mu"]
    assert params["rollout_loss"].kind is inspect.Parameter.KEYWORD_ONLY and params["rollout_loss"].default is None
    from trl_ext.losses.mix import MIXCHORDPolicyLoss

    assert "usual/pg_clipfrac" in MIXCHORDPolicyLoss.metrics  # the class declares the default PPO part
    assert "importance_sampling_ratio" not in MIXCHORDPolicyLoss.inputs()
    fn = get_policy_loss("mix_chord", rollout_loss=get_policy_loss("sapo", tau_pos=1.2, tau_neg=1.3), mu_peak=0.2)
    assert repr(fn).startswith("MIXCHORDPolicyLoss(rollout_loss=SAPOPolicyLoss(tau_pos=1.2, tau_neg=1.3")
    assert fn.args == get_policy_loss("mix_chord", mu_peak=0.2).args  # the mixing arguments, as without it


# ==================================================================================================
# Inputs beyond MIX's own are passed on
# ==================================================================================================


class _RefStepLoss(PolicyLoss):
    """A test loss reading `ref_logprob` and `step`: token mean of step·(lp − ref)²·(1 + A)."""

    name = "ref_step"
    metrics: ClassVar[dict[str, str]] = {"ref_step_loss": SHARE, "ref_gap": MEAN}

    def __call__(self, logprob, action_mask, advantages, ref_logprob, step=None, **kwargs):
        b = self.masked_batch(logprob, action_mask, kwargs)
        gap = b.select(logprob - b.check("ref_logprob", ref_logprob))
        loss = b.aggregate(step * gap**2 * (1 + b.advantages(advantages)), "token-mean")
        return loss, {"ref_step_loss": loss.detach(), "ref_gap": b.mean(gap.detach())}


def test_extra_inputs_reach_the_rollout_loss():
    lp, old, mask, adv, expert = _batch(3)
    ref = lp + 0.2 * torch.randn(B, T, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    fn = get_policy_loss("mix", rollout_loss=_RefStepLoss(), mu=MU)
    assert fn.inputs()[: len(type(fn).inputs())] == type(fn).inputs()
    assert "ref_logprob" in fn.inputs() and "ref_logprob" not in type(fn).inputs()
    piece = lp.clone().requires_grad_()
    loss, metrics = fn(piece, old, mask, adv, expert_mask=expert, step=STEP, ref_logprob=ref)
    usual = ~expert
    rl, _ = _RefStepLoss()(lp[usual], mask[usual], adv[usual], ref[usual], step=STEP)
    sft, _ = get_policy_loss("sft")(lp[expert], mask[expert])
    # reference weighting at its defaults: n·w = n rows × 1 / 1
    torch.testing.assert_close(loss, (1 - MU) * 4 * rl + MU * 4 * sft)
    assert set(metrics) == set(fn.metrics)
    # importance_sampling_ratio: TRL's loss reads it, so the mix declares and passes it
    trl = TRLGRPOLoss(loss_type="dapo")
    fn = get_policy_loss("mix", rollout_loss=trl, mu=MU)
    assert "importance_sampling_ratio" in fn.inputs()
    ratio = torch.rand(B, T, generator=torch.Generator().manual_seed(6), dtype=torch.float64) + 0.5
    window = {"global_valid_toks": mask.sum(), "global_valid_seqs": B}
    window |= {"expert_valid_toks": mask[expert].sum(), "expert_valid_seqs": 4}
    total = 0.0
    for rows in _micro_batches([1, 7]):  # row 0 is a rollout row, rows 1..7 hold the others
        loss, m = fn(
            lp[rows],
            old[rows],
            mask[rows],
            adv[rows],
            expert_mask=expert[rows],
            importance_sampling_ratio=ratio[rows],
            **window,
        )
        assert all(torch.isfinite(v) for v in m.values()), m
        total = total + loss
    rl, _ = trl(lp[usual], old[usual], mask[usual], adv[usual], importance_sampling_ratio=ratio[usual])
    torch.testing.assert_close(total, (1 - MU) * rl + MU * sft)
    # a micro-batch without rollout rows: the part's per-sequence extremes (NaN over no sequence) log as 0
    _, m = fn(
        lp[expert],
        old[expert],
        mask[expert],
        adv[expert],
        expert_mask=expert[expert],
        importance_sampling_ratio=ratio[expert],
        **window,
    )
    assert all(torch.isfinite(v) for v in m.values()), m


# ==================================================================================================
# Errors
# ==================================================================================================


@pytest.mark.parametrize("mixing", ["mix", "mix_chord"])
def test_a_mixing_loss_cannot_be_the_rollout_part(mixing):
    with pytest.raises(ValueError, match=rf"mix_chord: rollout_loss='{mixing}' is a mixing loss"):
        get_policy_loss("mix_chord", rollout_loss=get_policy_loss(mixing))


@pytest.mark.parametrize(
    "argument",
    [
        ("clip_range", 0.3),
        ("clip_range_low", 0.1),
        ("clip_range_high", 0.28),
        ("grpo_loss_agg_mode", "seq-mean-token-mean"),
    ],
)
def test_the_ppo_parts_arguments_go_on_the_rollout_loss(argument):
    name, value = argument
    counterpart = "loss_agg_mode" if name == "grpo_loss_agg_mode" else name
    where = "sapo's loss_agg_mode" if counterpart == "loss_agg_mode" else "sapo's own arguments: tau_pos, tau_neg"
    with pytest.raises(ValueError, match=rf"mix: {name}=.* set it on the rollout loss instead \({where}"):
        get_policy_loss("mix", rollout_loss=get_policy_loss("sapo"), **{name: value})
    with pytest.raises(ValueError, match=rf"mix_chord: {name}=.* instead \(ppo's {counterpart}\)"):
        get_policy_loss("mix_chord", rollout_loss=get_policy_loss("ppo"), **{name: value})
    # at their defaults (as a training config passes them) they are fine
    get_policy_loss("mix", rollout_loss=get_policy_loss("sapo"), clip_range=0.2, grpo_loss_agg_mode=None)


class _ExpertReader(PolicyLoss):
    name = "expert_reader"

    def __call__(self, logprob, action_mask, expert_mask, **kwargs):
        raise AssertionError


class _OtherWindow(PolicyLoss):
    name = "other_window"
    window_inputs = ("chosen_valid_toks",)

    def __call__(self, logprob, action_mask, **kwargs):
        raise AssertionError


def test_rollout_losses_that_need_what_mix_cannot_give():
    with pytest.raises(ValueError, match=r"rollout_loss='dpo' needs `ref_logprob` and `logprob` of preference pairs"):
        get_policy_loss("mix", rollout_loss=get_policy_loss("dpo"))
    with pytest.raises(ValueError, match=r"rollout_loss='expert_reader' reads `expert_mask`"):
        get_policy_loss("mix", rollout_loss=_ExpertReader())
    with pytest.raises(ValueError, match=r"reads the window count `chosen_valid_toks`"):
        get_policy_loss("mix", rollout_loss=_OtherWindow())
    with pytest.raises(ValueError, match=r"rollout_loss must be a policy loss instance \(get_policy_loss\('sapo'"):
        get_policy_loss("mix", rollout_loss="sapo")
    with pytest.raises(ValueError, match=r"rollout_loss must be a policy loss instance"):
        get_policy_loss("mix", rollout_loss=_cls("sapo"))
