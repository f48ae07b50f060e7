"""`trl_ext.compat.verl` against closed forms (verl itself is not a test dependency; benchmarks/compare_verl.py
compares with the real verl 0.9 core_algos)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from trl_ext.advantages.reinforce_plus_plus import masked_whiten
from trl_ext.compat import verl
from trl_ext.losses import clipped_value_loss, get_policy_loss

D = torch.float64


def batch():
    """4 rows of 5 tokens; row 2 empty. Ratios hit the upper clip (A > 0), the lower clip and the dual clip (A < 0)."""
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 0, 0, 0]], dtype=D)
    old = torch.full((4, 5), -1.0, dtype=D)
    delta = torch.tensor(
        [
            [0.5, -0.5, 0.1, 0.0, -0.1],
            [1.5, -0.5, 0.05, 9.0, 9.0],
            [0.3, 0.3, 0.3, 0.3, 0.3],
            [0.2, -0.2, 0.0, 0.0, 0.0],
        ],
        dtype=D,
    )
    adv = torch.tensor([[1.0] * 5, [-2.0] * 5, [1.0] * 5, [0.5, -0.5, 0.0, 0.0, 0.0]], dtype=D)
    return old, old + delta, adv, mask


def config(**kw):
    base = {"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0}
    base.update(tau_pos=1.0, tau_neg=1.05, global_batch_info={})
    return {**base, **kw}


# ------------------------------------------------------------------------------------------------- agg_loss


def masked_sum(x, m):
    return (x * m).sum()


@pytest.mark.parametrize("mode", verl.AGG_LOSS_MODES)
@pytest.mark.parametrize("global_info", [False, True])
def test_agg_loss_closed_form(mode, global_info):
    _, _, _, m = batch()
    x = torch.randn(4, 5, dtype=D)
    n_row = m.sum(-1)
    if global_info:
        kw = {"dp_size": 4, "batch_num_tokens": 40, "global_batch_size": 12, "loss_scale_factor": 16}
        dp, n_tok, n_seq, scale = 4, 40, 12, 16
    else:
        kw, dp, n_tok, n_seq, scale = {}, 1, m.sum(), (n_row > 0).sum(), 5  # 3 non-empty rows
    expected = {
        "token-mean": masked_sum(x, m) / n_tok * dp,
        "token-sum": masked_sum(x, m) * dp,
        "seq-mean-token-sum": (x * m).sum(-1).sum() / n_seq * dp,
        "seq-mean-token-mean": ((x * m).sum(-1) / (n_row + 1e-8)).sum() / n_seq * dp,
        "seq-mean-token-sum-norm": (x * m).sum(-1).sum() / n_seq * dp / scale,
    }[mode]
    torch.testing.assert_close(verl.agg_loss(x, m, mode, **kw), expected)
    torch.testing.assert_close(verl.agg_loss(x, m.bool(), mode, **kw), expected)  # bool mask too


def test_agg_loss_errors_and_nan_safety():
    _, _, _, m = batch()
    x = torch.randn(4, 5, dtype=D)
    with pytest.raises(ValueError, match="batch_num_tokens is required"):
        verl.agg_loss(x, m, "token-mean", dp_size=2)
    for mode in ("seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        with pytest.raises(ValueError, match="global_batch_size is required"):
            verl.agg_loss(x, m, mode, dp_size=2)
    with pytest.raises(ValueError, match="Invalid loss_agg_mode"):
        verl.agg_loss(x, m, "seq-sum")
    x_nan = x.masked_fill(m == 0, float("nan"))
    for mode in verl.AGG_LOSS_MODES:
        torch.testing.assert_close(verl.agg_loss(x_nan, m, mode), verl.agg_loss(x, m, mode))
    assert verl.agg_loss(x, torch.zeros_like(m), "token-mean").item() == 0.0


# ------------------------------------------------------------------------------------------------- PPO


def dual_clip_ppo(old, lp, adv, low, high, c):
    ratio = torch.exp((lp - old).clamp(-20, 20))
    l1, l2 = -adv * ratio, -adv * ratio.clamp(1 - low, 1 + high)
    clip1 = torch.maximum(l1, l2)
    return torch.where(adv < 0, torch.minimum(clip1, -adv * c), clip1), ratio


@pytest.mark.parametrize("mode", verl.AGG_LOSS_MODES)
def test_compute_policy_loss_dual_clip(mode):
    old, lp, adv, m = batch()
    losses, ratio = dual_clip_ppo(old, lp, adv, 0.2, 0.28, 3.0)
    neg = adv < 0
    # the data hit every branch: upper clip, lower clip and dual clip
    assert ((ratio > 1.28) & (adv > 0) & (m > 0)).any()
    assert ((ratio < 0.8) & neg & (m > 0)).any()
    assert ((ratio > 3.0) & neg & (m > 0)).any()
    lp = lp.clone().requires_grad_(True)
    pg_loss, clipfrac, ppo_kl, clipfrac_lower = verl.compute_policy_loss(
        old, lp, adv, m, cliprange=0.2, cliprange_high=0.28, loss_agg_mode=mode
    )
    torch.testing.assert_close(pg_loss, verl.agg_loss(losses, m, mode))
    clipped = torch.where(neg, ratio < 0.8, ratio > 1.28) & (adv != 0)
    torch.testing.assert_close(clipfrac, masked_sum(clipped.to(D), m) / (m.sum() + 1e-8))
    torch.testing.assert_close(clipfrac_lower, masked_sum((neg & (ratio > 3)).to(D), m) / (m.sum() + 1e-8))
    torch.testing.assert_close(ppo_kl, masked_sum(-(lp - old).detach().clamp(-20, 20), m) / (m.sum() + 1e-8))
    # gradient of the closed form
    ref_lp = lp.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(pg_loss, lp)
    (ref_grad,) = torch.autograd.grad(
        verl.agg_loss(dual_clip_ppo(old, ref_lp, adv, 0.2, 0.28, 3.0)[0], m, mode), ref_lp
    )
    torch.testing.assert_close(grad, ref_grad)


def test_compute_policy_loss_rejects_small_clip_ratio_c():
    old, lp, adv, m = batch()
    with pytest.raises(ValueError, match="clip_ratio_c"):
        verl.compute_policy_loss(old, lp, adv, m, cliprange=0.2, clip_ratio_c=1.0)


# ------------------------------------------------------------------------------------------------- KL


@pytest.mark.parametrize(
    "name, formula",
    [
        ("kl", lambda lp, ref: lp - ref),
        ("k1", lambda lp, ref: lp - ref),
        ("abs", lambda lp, ref: (lp - ref).abs()),
        ("mse", lambda lp, ref: 0.5 * (lp - ref) ** 2),
        ("k2", lambda lp, ref: 0.5 * (lp - ref) ** 2),
        (
            "low_var_kl",
            lambda lp, ref: (torch.exp((ref - lp).clamp(-20, 20)) - (ref - lp).clamp(-20, 20) - 1).clamp(-10, 10),
        ),
        ("k3", lambda lp, ref: (torch.exp((ref - lp).clamp(-20, 20)) - (ref - lp).clamp(-20, 20) - 1).clamp(-10, 10)),
    ],
)
def test_kl_penalty(name, formula):
    lp = torch.randn(3, 4, dtype=D) - 1
    ref = lp + torch.randn(3, 4, dtype=D)
    ref[0, 0] = lp[0, 0] + 5.0  # k3's ±10 clamp hit
    lp.requires_grad_(True)
    expected = formula(lp, ref)
    got = verl.kl_penalty(lp, ref, name)
    torch.testing.assert_close(got, expected)
    (grad,) = torch.autograd.grad(got.sum(), lp)
    torch.testing.assert_close(grad, torch.autograd.grad(expected.sum(), lp)[0])
    # straight-through: the estimator's value, k2's gradient (lp - ref)
    plus = verl.kl_penalty(lp, ref, name + "+")
    torch.testing.assert_close(plus, expected)
    (grad,) = torch.autograd.grad(plus.sum(), lp)
    torch.testing.assert_close(grad, (lp - ref).detach())


def test_kl_penalty_errors():
    lp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="Unknown kl_penalty"):
        verl.kl_penalty(lp, lp, "k4")
    with pytest.raises(NotImplementedError):
        verl.kl_penalty(lp, lp, "full")


# ------------------------------------------------------------------------------------------------- registry


def test_registry_names_custom_and_unknown():
    assert {"vanilla", "gspo", "sapo", "cispo"} <= set(verl.POLICY_LOSS_REGISTRY)
    assert verl.get_policy_loss_fn("vanilla") is verl.compute_policy_loss_vanilla

    @verl.register_policy_loss("test_custom")
    def custom(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights):
        return verl.agg_loss(-advantages * log_prob, response_mask, loss_agg_mode), {}

    try:
        old, lp, adv, m = batch()
        loss, _ = verl.get_policy_loss_fn("test_custom")(old, lp, adv, m, "token-mean", None, None)
        torch.testing.assert_close(loss, verl.agg_loss(-adv * lp, m, "token-mean"))
        with pytest.raises(ValueError, match=r"Unsupported loss mode: nope\. Supported modes are: .*'test_custom'"):
            verl.get_policy_loss_fn("nope")
    finally:
        del verl.POLICY_LOSS_REGISTRY["test_custom"]


# ------------------------------------------------------------------------------------------------- policy losses


def trl_ext_loss(name, mode, old, lp, adv, m, **kw):
    """The trl_ext loss under the matching (local) aggregation: equal to verl's except for empty rows in the
    seq-mean modes and seq-mean-token-sum-norm's division by rows, which `rescale` undoes."""
    loss, _ = get_policy_loss(name, loss_agg_mode=mode, **kw)(
        logprob=lp, old_logprob=old, action_mask=m.bool(), advantages=adv
    )
    rows, nonempty = m.shape[0], (m.sum(-1) > 0).sum()
    rescale = {"seq-mean-token-sum": rows / nonempty, "seq-mean-token-mean": rows / nonempty}
    rescale["seq-mean-token-sum-norm"] = 1 / nonempty
    return loss * rescale.get(mode, 1.0)


TRL_EXT_ARGS = {
    "vanilla": ("ppo", {"clip_range_low": 0.2, "clip_range_high": 0.28, "clip_ratio_c": 3.0}),
    "gspo": ("gspo", {"clip_range_low": 0.2, "clip_range_high": 0.28}),
    "sapo": ("sapo", {"tau_pos": 1.0, "tau_neg": 1.05}),
    "cispo": ("cispo", {"clip_range_low": 0.2, "clip_range_high": 0.28}),
}


@pytest.mark.filterwarnings("ignore:gspo")
@pytest.mark.parametrize("name", ["vanilla", "gspo", "sapo", "cispo"])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_policy_loss_equals_trl_ext(name, mode):
    old, lp, adv, m = batch()
    lp = lp.clone().requires_grad_(True)
    loss, metrics = verl.get_policy_loss_fn(name)(old, lp, adv, m, mode, config(), None)
    assert set(metrics) == {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"}
    assert all(isinstance(v, float) for v in metrics.values())
    trl_name, kw = TRL_EXT_ARGS[name]
    expected = trl_ext_loss(trl_name, "seq-mean-token-mean" if name == "sapo" else mode, old, lp, adv, m, **kw)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(torch.autograd.grad(loss, lp)[0], torch.autograd.grad(expected, lp)[0])


def test_vanilla_equals_compute_policy_loss_and_reads_config_objects():
    old, lp, adv, m = batch()
    expected = verl.compute_policy_loss(old, lp, adv, m, 0.2, None, 0.28, 3.0, "token-mean")
    for cfg in (config(), SimpleNamespace(**config())):
        loss, metrics = verl.compute_policy_loss_vanilla(old, lp, adv, m, "token-mean", cfg)
        torch.testing.assert_close(loss, expected[0])
        assert metrics == pytest.approx(
            {
                "actor/pg_clipfrac": expected[1].item(),
                "actor/ppo_kl": expected[2].item(),
                "actor/pg_clipfrac_lower": expected[3].item(),
            }
        )
    with pytest.raises(ValueError, match="config"):
        verl.compute_policy_loss_vanilla(old, lp, adv, m, "token-mean", None)


def test_hand_formulas_gspo_sapo_cispo():
    old, lp, adv, m = batch()
    lp = lp.clone().requires_grad_(True)
    # GSPO-token: s = exp(row mean of lp - old) on every token, gradient through lp
    s = torch.exp(((lp - old).detach() * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1))
    r = s * torch.exp(lp - lp.detach())
    gspo = torch.maximum(-adv * r, -adv * r.clamp(0.8, 1.28))
    loss, _ = verl.compute_policy_loss_gspo(old, lp, adv, m, "seq-mean-token-mean", config())
    torch.testing.assert_close(loss, verl.agg_loss(gspo, m, "seq-mean-token-mean"))
    # SAPO: -A·σ(τ(r−1))·4/τ, always seq-mean-token-mean
    ratio = torch.exp(lp - old)
    tau = torch.where(adv > 0, 1.0, 1.05).to(D)
    sapo = -adv * torch.sigmoid(tau * (ratio - 1)) * 4 / tau
    loss, _ = verl.compute_policy_loss_sapo(old, lp, adv, m, "token-mean", config())
    torch.testing.assert_close(loss, verl.agg_loss(sapo, m, "seq-mean-token-mean"))
    # CISPO: -sg(clip(r))·A·lp
    cispo = -ratio.detach().clamp(0.8, 1.28) * adv * lp
    loss, metrics = verl.compute_policy_loss_cispo(old, lp, adv, m, "token-sum", config())
    torch.testing.assert_close(loss, verl.agg_loss(cispo, m, "token-sum"))
    outside = ((ratio < 0.8) | (ratio > 1.28)).to(D)
    assert metrics["actor/pg_clipfrac"] == pytest.approx((masked_sum(outside, m) / m.sum()).item())
    assert metrics["actor/pg_clipfrac_lower"] == 0.0


@pytest.mark.parametrize("name", ["vanilla", "gspo", "sapo", "cispo"])
@pytest.mark.parametrize("mode", verl.AGG_LOSS_MODES)
def test_rollout_is_weights_and_global_batch_info(name, mode):
    """Loss with weights w = agg_loss(L·w) where L is the per-token loss: checked with a one-hot w (picks one
    token's loss) summed over tokens, against the weight-free loss, under global batch info."""
    old, lp, adv, m = batch()
    info = {"dp_size": 2, "batch_num_tokens": 20, "global_batch_size": 6, "loss_scale_factor": 7}
    fn, cfg = verl.get_policy_loss_fn(name), config(global_batch_info=info)
    unweighted, _ = fn(old, lp, adv, m, mode, cfg, None)
    ones, _ = fn(old, lp, adv, m, mode, cfg, torch.ones_like(m))
    torch.testing.assert_close(ones, unweighted)
    w = torch.rand(4, 5, dtype=D) * 2
    weighted, metrics = fn(old, lp, adv, m, mode, cfg, w)
    picks = [fn(old, lp, adv, m, mode, cfg, one_hot)[0] for one_hot in torch.eye(20, dtype=D).reshape(20, 4, 5)]
    torch.testing.assert_close(weighted, sum(p * w.flatten()[k] for k, p in enumerate(picks)))
    torch.testing.assert_close(sum(picks), unweighted)
    assert metrics == fn(old, lp, adv, m, mode, cfg, None)[1]  # verl's metrics ignore the weights
    with pytest.raises(ValueError, match="rollout_is_weights"):
        fn(old, lp, adv, m, mode, cfg, -w)


# ------------------------------------------------------------------------------------------- GAE, value loss


def verl_gae_loop(r, v, m, gamma, lam):
    """verl 0.9's `compute_gae_advantage_return`, as written there (masked positions carry nextvalues / lastgaelam),
    with its `masked_whiten`."""
    nextvalues, lastgaelam, out = 0, 0, []
    for t in reversed(range(r.shape[-1])):
        delta = r[:, t] + gamma * nextvalues - v[:, t]
        lastgaelam_ = delta + gamma * lam * lastgaelam
        nextvalues = v[:, t] * m[:, t] + (1 - m[:, t]) * nextvalues
        lastgaelam = lastgaelam_ * m[:, t] + (1 - m[:, t]) * lastgaelam
        out.append(lastgaelam)
    adv = torch.stack(out[::-1], dim=1)
    returns = adv + v
    mean = masked_sum(adv, m) / (m.sum() + 1e-8)
    var = masked_sum((adv - mean) ** 2, m) / (m.sum() + 1e-8) * (m.sum() / (m.sum() - 1))
    return (adv - mean) * torch.rsqrt(var + 1e-8), returns


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.9, 0.95), (0.99, 0.9)])
def test_compute_gae_advantage_return(gamma, lam):
    torch.manual_seed(0)
    r, v = torch.randn(5, 7, dtype=D), torch.randn(5, 7, dtype=D)
    m = (torch.rand(5, 7) < 0.7).to(D)  # holes: observation tokens
    m[0, :2] = 1
    adv, ret = verl.compute_gae_advantage_return(r, v, m, gamma, lam)
    expected_adv, expected_ret = verl_gae_loop(r, v, m, gamma, lam)
    torch.testing.assert_close(adv, expected_adv)  # every position, masked ones included
    torch.testing.assert_close(ret, expected_ret)
    # at the valid positions the advantages are trl_ext's whitening of the same raw advantages
    valid = m.bool()
    torch.testing.assert_close(adv[valid], masked_whiten(ret - v, valid)[valid])
    one = torch.zeros_like(m)
    one[0, 0] = 1
    with pytest.raises(ValueError, match="sum of the mask is one"):
        verl.compute_gae_advantage_return(r, v, one, 1.0, 1.0)
    with pytest.raises(ValueError, match="At least one element in the mask"):
        verl.compute_gae_advantage_return(r, v, one * 0, 1.0, 1.0)


@pytest.mark.parametrize("mode", verl.AGG_LOSS_MODES)
@pytest.mark.parametrize("global_info", [False, True])
def test_compute_value_loss(mode, global_info):
    torch.manual_seed(1)
    _, _, _, m = batch()
    vpreds = torch.randn(4, 5, dtype=D, requires_grad=True)
    values = vpreds.detach() + 0.4 * torch.randn(4, 5, dtype=D)
    returns = torch.randn(4, 5, dtype=D)
    kw = {"dp_size": 2, "batch_num_tokens": 20, "global_batch_size": 6, "loss_scale_factor": 8} if global_info else {}
    loss, clipfrac = verl.compute_value_loss(vpreds, returns, values, m, 0.3, mode, **kw)
    clipped = torch.max(torch.min(vpreds, values + 0.3), values - 0.3)
    l1, l2 = (vpreds - returns) ** 2, (clipped - returns) ** 2
    expected = 0.5 * verl.agg_loss(torch.max(l1, l2), m, mode, **kw)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(clipfrac, masked_sum((l2 > l1).to(D), m) / (m.sum() + 1e-8))
    assert 0 < float(clipfrac) < 1
    (grad,) = torch.autograd.grad(loss, vpreds)
    (expected_grad,) = torch.autograd.grad(expected, vpreds)
    torch.testing.assert_close(grad, expected_grad)


def test_compute_value_loss_matches_trl_ext_and_refuses_a_negative_range():
    torch.manual_seed(2)
    _, _, _, m = batch()
    vpreds, values, returns = (torch.randn(4, 5, dtype=D) for _ in range(3))
    loss, clipfrac = verl.compute_value_loss(vpreds, returns, values, m, 0.2)
    ours, metrics = clipped_value_loss(vpreds, values, returns, m.bool(), 0.2)
    torch.testing.assert_close(loss, ours, rtol=1e-7, atol=0)  # ε of trl_ext's token mean
    torch.testing.assert_close(clipfrac, metrics["vf_clipfrac"])
    with pytest.raises(ValueError, match=r"compute_value_loss: cliprange_value=-0\.1 is not valid"):
        verl.compute_value_loss(vpreds, returns, values, m, -0.1)


BLOCKER = """
import sys, warnings
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("trl", "transformers", "numpy"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
sys.meta_path.insert(0, Blocker())
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch
from trl_ext.compat import verl
x = torch.randn(2, 3)
verl.get_policy_loss_fn("vanilla")(x, x, x, torch.ones(2, 3), "token-mean", {"clip_ratio": 0.2}, None)
verl.kl_penalty(x, x, "k3+")
verl.compute_gae_advantage_return(x, x, torch.ones(2, 3), 0.9, 0.95)
verl.compute_value_loss(x, x, x, torch.ones(2, 3), 0.2)
"""


def test_import_needs_only_torch():
    """Importing and using the module works with trl, transformers and numpy unimportable."""
    subprocess.run([sys.executable, "-c", BLOCKER], check=True)
