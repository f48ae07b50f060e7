"""The verl-compat entry points of Clip-Cov, KL-Cov, DPPO-TV and DPPO-KL (`trl_ext.compat.verl`): verl's `agg_loss`
weights and metric names against the closed forms of test_verl_losses_cov.py and test_verl_losses_dppo.py, the config
read as a mapping or an object, verl's in-function defaults, and the global seed deciding Clip-Cov's draw."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from test_verl_losses_cov import (
    ADV,
    BATCH_FACTS,
    DELTA,
    EPS,
    MASK,
    NAN,
    VALID,
    D,
    N,
    clip_cov_candidates,
    clip_cov_closed_form,
    grad_tensor,
    kl_cov_closed_form,
    ppo_terms,
    tensors,
)
from test_verl_losses_cov_dppo_inputs import NAMES
from test_verl_losses_dppo import dppo_closed_form

from trl_ext.compat import verl

# ==================================================================================================
# verl compat
# ==================================================================================================

INFO = {"dp_size": 2, "batch_num_tokens": 20, "global_batch_size": 6, "loss_scale_factor": 7}
ROW_TOKENS = [sum(row) for row in MASK]


def agg_weight(mode, i, info):
    """verl's agg_loss weight of a token of row i (written out per mode)."""
    dp = info.get("dp_size", 1)
    n_tok = info.get("batch_num_tokens", N)
    n_seq = info.get("global_batch_size", sum(1 for n in ROW_TOKENS if n))
    return {
        "token-mean": dp / n_tok,
        "token-sum": dp,
        "seq-mean-token-sum": dp / n_seq,
        "seq-mean-token-mean": dp / n_seq / (ROW_TOKENS[i] + 1e-8),
        "seq-mean-token-sum-norm": dp / n_seq / info.get("loss_scale_factor", 4),
    }[mode]


def verl_config(name, info, as_object=False, **overrides):
    policy_loss = {"clip_cov_ratio": 1.0, "clip_cov_lb": 0.3, "clip_cov_ub": 3.0, "kl_cov_ratio": 0.25}
    policy_loss["ppo_kl_coef"] = 0.5
    cfg = {"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": None, "clip_ratio_c": 1.3}
    if name == "dppo_kl":
        cfg.update(clip_ratio_low=0.008, clip_ratio_high=0.05)
    elif name == "dppo_tv":
        cfg.update(clip_ratio=0.05)
    cfg.update({"policy_loss": policy_loss, "global_batch_info": dict(info), **overrides})
    if as_object:
        cfg["policy_loss"] = SimpleNamespace(**cfg["policy_loss"])
        return SimpleNamespace(**cfg)
    return cfg


def closed_form_tokens(name, weights):
    """Per-token (loss, dloss/dlp) of the batch under `verl_config(name)`, times `weights`."""
    if name == "clip_cov":
        dropped = BATCH_FACTS["clip_cov_candidates"]
        out = {}
        for i, t in VALID:
            r, unclipped, clipped = ppo_terms(i, t)
            keep = (i, t) not in dropped
            out[(i, t)] = (max(unclipped, clipped) * keep, (0.0 if clipped > unclipped else -ADV[i][t] * r) * keep)
    elif name == "kl_cov":
        top = BATCH_FACTS["kl_cov_top2"]
        out = {}
        for i, t in VALID:
            r, d = math.exp(DELTA[i][t]), DELTA[i][t]
            penalty = (i, t) in top
            out[(i, t)] = (
                -ADV[i][t] * r + 0.5 * abs(d) * penalty,
                -ADV[i][t] * r + 0.5 * math.copysign(1, d) * penalty,
            )
    else:
        low, high = (0.008, 0.05) if name == "dppo_kl" else (0.05, 0.05)
        losses, grads, _, _, _ = dppo_closed_form(name[-2:], low, high, 1.3)
        out = {pos: (losses[pos], grads[pos]) for pos in VALID}
    return {pos: (value * weights[pos], slope * weights[pos]) for pos, (value, slope) in out.items()}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", verl.AGG_LOSS_MODES)
@pytest.mark.parametrize("info", [{}, INFO], ids=["local", "global"])
@pytest.mark.parametrize("weighted", [False, True])
def test_compat_closed_form(name, mode, info, weighted):
    logprob, old, mask, adv = tensors()
    rollout = torch.tensor([[0.5, 1.5, 2.0, 0.25], [1.0, 3.0, 0.7, NAN], [NAN] * 4, [1.2, 0.9, NAN, NAN]], dtype=D)
    loss, metrics = verl.get_policy_loss_fn(name)(
        old, logprob, adv, mask.to(D), mode, verl_config(name, info), rollout if weighted else None
    )
    (grad,) = torch.autograd.grad(loss, logprob)
    weights = {(i, t): agg_weight(mode, i, info) * (rollout[i, t].item() if weighted else 1.0) for i, t in VALID}
    tokens = closed_form_tokens(name, weights)
    assert loss.item() == pytest.approx(sum(v for v, _ in tokens.values()), rel=1e-10)
    torch.testing.assert_close(grad, grad_tensor({pos: s for pos, (_, s) in tokens.items()}), rtol=1e-10, atol=0)
    ppo_kl = -sum(DELTA[i][t] for i, t in VALID) / (N + EPS)
    expected = {
        "clip_cov": {"actor/pg_clipfrac": 2 / (N + EPS), "actor/ppo_kl": ppo_kl},
        "kl_cov": {"actor/ppo_kl": sum(abs(DELTA[i][t]) for i, t in VALID) / (N + EPS)},
        "dppo_tv": {
            "actor/pg_clipfrac": 3 / (N + EPS),
            "actor/ppo_kl": ppo_kl,
            "actor/pg_clipfrac_lower": 2 / (N + EPS),
        },
        "dppo_kl": {
            "actor/pg_clipfrac": 3 / (N + EPS),
            "actor/ppo_kl": ppo_kl,
            "actor/pg_clipfrac_lower": 2 / (N + EPS),
        },
    }[name]
    assert metrics.keys() == expected.keys() and all(isinstance(v, float) for v in metrics.values())
    assert metrics == pytest.approx(expected, rel=1e-12)


def test_compat_registry_and_config_reading():
    for name in NAMES:
        assert verl.get_policy_loss_fn(name) is getattr(verl, f"compute_policy_loss_{name}")
    logprob, old, mask, adv = tensors()
    args = (old, logprob.detach(), adv, mask.to(D), "token-mean")
    for name in NAMES:  # a config object reads as the mapping does
        assert verl.get_policy_loss_fn(name)(*args, verl_config(name, {}, as_object=True))[0].item() == pytest.approx(
            verl.get_policy_loss_fn(name)(*args, verl_config(name, {}))[0].item(), rel=1e-14
        )
    # policy_loss keys left None fall back to verl's in-function defaults (kl_cov: ratio 0.0002 → k = 1, β = 1.0)
    cfg = verl_config("kl_cov", {}, policy_loss={"kl_cov_ratio": None, "ppo_kl_coef": None})
    loss, _ = verl.compute_policy_loss_kl_cov(*args, cfg)
    assert loss.item() == pytest.approx(kl_cov_closed_form(0.0002, 1.0)[0] * (N + EPS) / N, rel=1e-10)
    cfg = verl_config("clip_cov", {}, policy_loss={"clip_cov_lb": None, "clip_cov_ub": None, "clip_cov_ratio": None})
    candidates = clip_cov_candidates(1.0, 5.0)  # verl's bounds (1, 5): 3 candidates, k = 1
    assert candidates == [(0, 0), (1, 1), (3, 0)]
    torch.manual_seed(5)
    dropped = [candidates[j] for j in torch.randperm(3)[:1].tolist()]
    torch.manual_seed(5)
    loss, metrics = verl.compute_policy_loss_clip_cov(*args, cfg)
    assert loss.item() == pytest.approx(clip_cov_closed_form(dropped)[0] * (N + EPS) / N, rel=1e-10)
    for name in ("clip_cov", "kl_cov"):
        with pytest.raises(ValueError, match=rf"{name}: config.policy_loss is required"):
            verl.get_policy_loss_fn(name)(*args, verl_config(name, {}, policy_loss=None))
        with pytest.raises(ValueError, match="ratio=-1"):
            verl.get_policy_loss_fn(name)(*args, verl_config(name, {}, policy_loss={f"{name}_ratio": -1}))
    # DPPO: clip_ratio_c missing → verl's 20.0 (no truncation here), against 1.3 in the config above
    for name in ("dppo_tv", "dppo_kl"):
        cfg = verl_config(name, {})
        del cfg["clip_ratio_c"]
        loss, metrics = verl.get_policy_loss_fn(name)(*args, cfg)
        low, high = (0.008, 0.05) if name == "dppo_kl" else (0.05, 0.05)
        losses, _, expected, _, _ = dppo_closed_form(name[-2:], low, high, 20.0)
        assert loss.item() == pytest.approx(sum(losses.values()) / N, rel=1e-10)
        assert metrics["actor/pg_clipfrac_lower"] == 0.0
        assert metrics["actor/pg_clipfrac"] == pytest.approx(expected["pg_clipfrac"], rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_compat_clip_cov_draw_follows_the_global_seed(seed):
    """As verl's: `torch.manual_seed` before the call fixes which of the 2 candidates is dropped (k = 1)."""
    logprob, old, mask, adv = tensors()
    cfg = verl_config("clip_cov", {}, policy_loss={"clip_cov_ratio": 0.12, "clip_cov_lb": 0.3, "clip_cov_ub": 3.0})
    torch.manual_seed(seed)
    chosen = [BATCH_FACTS["clip_cov_candidates"][j] for j in torch.randperm(2)[:1].tolist()]
    torch.manual_seed(seed)
    loss, metrics = verl.compute_policy_loss_clip_cov(old, logprob, adv, mask.to(D), "token-mean", cfg)
    assert loss.item() == pytest.approx(clip_cov_closed_form(chosen)[0] * (N + EPS) / N, rel=1e-10)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(1 / N)


@pytest.mark.parametrize(
    ("dtype", "mask_dtype", "loss", "clipfrac"),
    [
        (torch.float64, torch.float64, 0.0, 1.0),  # A − mean A = −0.7·1e-8/(1 + 1e-8): cov ≈ 9.1e-17 > lb, dropped
        (torch.float64, torch.bool, 0.6659, 0.0),  # n + 1e-8 is float32 (= n): cov = 0, no candidate at lb = 0
        (torch.float32, torch.float32, 0.6659, 0.0),  # float32: n + 1e-8 = n, cov = 0
        (torch.float32, torch.float64, 0.6659, 0.0),  # the float64 means round back to float32: cov = 0
    ],
)
def test_compat_clip_cov_centres_in_the_masks_dtype_as_verl(dtype, mask_dtype, loss, clipfrac):
    """verl's `masked_mean` divides by n + 1e-8 in the mask's dtype: with a float64 mask and float64 values one token
    of advantage −0.7 centres to a tiny positive cov and is dropped (loss 0, pg_clipfrac 1), as verl 0.9.1."""
    cfg = verl_config("clip_cov", {}, clip_ratio_low=0.2, clip_ratio_high=0.28)
    cfg["policy_loss"].update(clip_cov_ratio=1.0, clip_cov_lb=0.0, clip_cov_ub=10.0)
    logprob, old, adv = (torch.tensor([[x]], dtype=dtype) for x in (-1.3, -1.25, -0.7))
    mask = torch.ones(1, 1, dtype=mask_dtype)
    pg_loss, metrics = verl.compute_policy_loss_clip_cov(old, logprob, adv, mask, config=cfg)
    assert pg_loss.item() == pytest.approx(loss, abs=1e-4)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(clipfrac)
