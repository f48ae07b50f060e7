"""`trl_ext.compat.nemo_rl`: NeMo-RL's loss protocol over trl_ext's policy losses."""

from __future__ import annotations

import warnings

import pytest
import torch

from trl_ext.compat.nemo_rl import REFUSED, LossInputType, LossType, as_loss_function
from trl_ext.losses import LOSS_AGG_MODES, POLICY_LOSSES, get_policy_loss

B, T = 8, 6

SUPPORTED = sorted(set(POLICY_LOSSES) - set(REFUSED))


def _cases() -> list[tuple[str, dict]]:
    """(loss name, constructor kwargs) for every supported loss and every aggregation it supports."""
    cases = []
    for name in SUPPORTED:
        if "loss_agg_mode" in POLICY_LOSSES[name].default_args():
            # clip_cov: every candidate dropped, so that no random draw makes two calls differ
            certain = {"clip_cov_ratio": 1.0, "clip_cov_lb": 0.0} if name == "clip_cov" else {}
            cases += [(name, {"loss_agg_mode": mode, **certain}) for mode in LOSS_AGG_MODES]
        elif name == "rec":  # REC's aggregation follows its clip_mode
            cases += [(name, {"clip_mode": "two-side"}), (name, {"clip_mode": "gspo-one-side"})]
        else:
            cases.append((name, {}))
    return cases


CASES = _cases()
IDS = [f"{name}-{'-'.join(map(str, kwargs.values())) or 'default'}" for name, kwargs in CASES]
# The token selections of M2PO, Clip-Cov and KL-Cov are nonlinear in the batch: they run over the rows of each call,
# so micro-batch shares add up to the global batch's loss only where the selections agree (tests/losses/test_m2po.py)
PER_CALL_SELECTION = ("m2po", "clip_cov", "kl_cov")
SPLIT_CASES = [case for case in CASES if case[0] not in PER_CALL_SELECTION]
SPLIT_IDS = [i for case, i in zip(CASES, IDS, strict=True) if case[0] not in PER_CALL_SELECTION]


def _build(name: str, kwargs: dict, **extra):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gspo warns about aggregations other than its paper's
        return as_loss_function(name, **kwargs, **extra), get_policy_loss(name, **kwargs)


def _batch(seed: int = 0, per_token_adv: bool = True):
    g = torch.Generator().manual_seed(seed)
    lp = (-torch.rand(B, T, generator=g) * 2).requires_grad_()
    prev = lp.detach() + 0.3 * torch.randn(B, T, generator=g)
    adv = torch.randn(B, T, generator=g) if per_token_adv else torch.randn(B, generator=g)
    lengths = torch.tensor([6, 3, 5, 1, 6, 4, 2, 5])
    token_mask = (torch.arange(T) < lengths.unsqueeze(-1)).long()
    token_mask[2, 0] = 0  # a prompt-like hole at the start
    data = {
        "advantages": adv,
        "prev_logprobs": prev,
        "reference_policy_logprobs": prev - 0.1,
        "token_mask": token_mask,
        "sample_mask": torch.ones(B),
    }
    return lp, data


def _counts(data) -> tuple[torch.Tensor, torch.Tensor]:
    """NeMo-RL's (global_valid_seqs, global_valid_toks) of `data`."""
    sample = data["sample_mask"]
    return sample.sum(), (data["token_mask"] * sample.unsqueeze(-1)).sum()


def _rows(data, rows) -> dict:
    return {k: v[rows] for k, v in data.items()}


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=IDS)
def test_matches_trl_ext_call(name, kwargs):
    loss_fn, fn = _build(name, kwargs)
    lp, data = _batch()
    seqs, toks = _counts(data)
    loss, metrics = loss_fn(data, seqs, toks, next_token_logprobs=lp)
    inputs = {
        "logprob": lp,
        "old_logprob": data["prev_logprobs"],
        "ref_logprob": data["reference_policy_logprobs"],
        "advantages": data["advantages"],
        "action_mask": data["token_mask"].bool(),
        "global_valid_toks": toks,
        "global_valid_seqs": seqs,
    }
    expected, expected_metrics = fn(**{k: v for k, v in inputs.items() if k in fn.inputs()})
    assert torch.equal(loss, expected)
    assert metrics.keys() == expected_metrics.keys()
    for key, value in metrics.items():
        assert value.dim() == 0 and not value.requires_grad, key
        assert torch.allclose(value, expected_metrics[key], atol=1e-6, equal_nan=True), key


@pytest.mark.parametrize(("name", "kwargs"), SPLIT_CASES, ids=SPLIT_IDS)
@pytest.mark.parametrize("n_micro", [2, 4])
def test_micro_batches_add_up_to_global_batch(name, kwargs, n_micro):
    loss_fn, _ = _build(name, kwargs)
    lp, data = _batch(seed=1, per_token_adv=n_micro == 2)
    seqs, toks = _counts(data)

    whole, _ = loss_fn(data, seqs, toks, next_token_logprobs=lp)
    (grad_whole,) = torch.autograd.grad(whole, lp)

    size = B // n_micro
    parts = [
        loss_fn(_rows(data, slice(i, i + size)), seqs, toks, next_token_logprobs=lp[i : i + size])[0]
        for i in range(0, B, size)
    ]
    total = torch.stack(parts).sum()
    (grad_total,) = torch.autograd.grad(total, lp)
    assert torch.allclose(total, whole, atol=1e-6)
    assert torch.allclose(grad_total, grad_whole, atol=1e-6)


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=IDS)
def test_sample_mask_zero_row_contributes_nothing(name, kwargs):
    loss_fn, _ = _build(name, kwargs)
    lp, data = _batch(seed=2)
    data["sample_mask"][5] = 0
    data["prev_logprobs"][5] = float("nan")  # never read at an excluded sample
    seqs, toks = _counts(data)
    loss, _ = loss_fn(data, seqs, toks, next_token_logprobs=lp)
    (grad,) = torch.autograd.grad(loss, lp)

    keep = [i for i in range(B) if i != 5]
    kept = _rows(data, keep)
    kept_loss, _ = loss_fn(kept, *_counts(kept), next_token_logprobs=lp[keep])
    (kept_grad,) = torch.autograd.grad(kept_loss, lp)
    assert torch.isfinite(loss)
    assert torch.allclose(loss, kept_loss, atol=1e-6)
    assert torch.equal(grad[5], torch.zeros(T))
    assert torch.allclose(grad, kept_grad, atol=1e-6)


def test_enums_mirror_nemo_rl():
    assert {m.name: m.value for m in LossType} == {"TOKEN_LEVEL": "token_level", "SEQUENCE_LEVEL": "sequence_level"}
    assert {m.name: m.value for m in LossInputType} == {
        "LOGIT": "logit",
        "LOGPROB": "logprob",
        "DISTILLATION": "distillation",
        "DRAFT": "draft",
    }


@pytest.mark.parametrize(
    ("name", "kwargs", "expected"),
    [
        ("ppo", {}, LossType.TOKEN_LEVEL),
        ("ppo", {"loss_agg_mode": "seq-mean-token-mean"}, LossType.SEQUENCE_LEVEL),
        ("sapo", {"loss_agg_mode": "seq-mean-token-sum"}, LossType.SEQUENCE_LEVEL),
        ("cispo", {"loss_agg_mode": "seq-mean-token-sum-norm"}, LossType.SEQUENCE_LEVEL),
        ("gspo", {}, LossType.SEQUENCE_LEVEL),
        ("sft", {}, LossType.TOKEN_LEVEL),
        ("rec", {}, LossType.TOKEN_LEVEL),
        ("rec", {"clip_mode": "gspo-one-side"}, LossType.SEQUENCE_LEVEL),
    ],
)
def test_loss_type_follows_loss_agg_mode(name, kwargs, expected):
    loss_fn = as_loss_function(name, **kwargs)
    assert loss_fn.loss_type is expected
    assert loss_fn.input_type is LossInputType.LOGPROB


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_losses_say_why(name):
    with pytest.raises(ValueError, match=rf"policy loss '{name}' is not available through NeMo-RL"):
        as_loss_function(name)


@pytest.mark.parametrize(
    ("name", "kwargs", "match"),
    [
        ("ppoo", {}, r"unknown policy loss 'ppoo'"),
        ("ppo", {"clip_rnge": 0.2}, r"clip_rnge"),
        ("ppo", {"loss_agg_mode": "mean"}, r"loss_agg_mode='mean'"),
        ("ppo", {"normalizer": 10}, r"normalizer=10 only applies to loss_agg_mode='seq-mean-token-sum-norm'"),
        ("ppo", {"loss_agg_mode": "seq-mean-token-sum-norm", "normalizer": -1}, r"normalizer=-1"),
    ],
)
def test_bad_construction_is_a_clear_error(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        as_loss_function(name, **kwargs)


@pytest.mark.parametrize("key", ["advantages", "prev_logprobs", "token_mask", "sample_mask"])
def test_missing_data_key_names_it(key):
    lp, data = _batch()
    del data[key]
    with pytest.raises(ValueError, match=rf"data has no '{key}'"):
        as_loss_function("ppo")(data, 8, 20, next_token_logprobs=lp)


def test_unshifted_tensor_is_a_clear_error():
    lp, data = _batch()
    data["prev_logprobs"] = torch.cat([data["prev_logprobs"], data["prev_logprobs"][:, :1]], dim=1)  # T + 1
    with pytest.raises(ValueError, match=r"prev_logprobs.*slice NeMo-RL's \[B, T\] tensors \[:, 1:\]"):
        as_loss_function("ppo")(data, 8, 20, next_token_logprobs=lp)


def test_sft_needs_no_advantages_or_prev_logprobs():
    lp, data = _batch()
    data = {"token_mask": data["token_mask"], "sample_mask": data["sample_mask"]}
    seqs, toks = _counts(data)
    loss, metrics = as_loss_function("sft")(data, seqs, toks, next_token_logprobs=lp)
    mask = data["token_mask"].bool()
    assert torch.allclose(loss, -lp[mask].sum() / toks, atol=1e-6)
    assert set(metrics) == {"sft_loss"}


def test_normalizer_is_passed_on():
    lp, data = _batch()
    seqs, toks = _counts(data)
    loss, _ = as_loss_function("sft", loss_agg_mode="seq-mean-token-sum-norm", normalizer=40.0)(
        data, seqs, toks, next_token_logprobs=lp
    )
    default, _ = as_loss_function("sft", loss_agg_mode="seq-mean-token-sum-norm")(
        data, seqs, toks, next_token_logprobs=lp
    )
    mask = data["token_mask"].bool()
    assert torch.allclose(loss, -lp[mask].sum() / 40.0, atol=1e-6)
    assert torch.allclose(default, -lp[mask].sum() / T, atol=1e-6)  # trl_ext's default: the micro-batch's T


def test_ppo_token_mean_closed_form():
    """Dual-clip PPO written out by hand, with a sample excluded by sample_mask and global counts."""
    eps, c = 0.2, 3.0
    lp, data = _batch(seed=3)
    data["sample_mask"][1] = 0
    lp_, old, adv = lp.detach(), data["prev_logprobs"], data["advantages"]
    mask = (data["token_mask"] * data["sample_mask"].unsqueeze(-1)).bool()
    global_toks = float(mask.sum()) + 7.0  # other micro-batches of the global batch hold 7 more tokens

    total = 0.0
    for i in range(B):
        for t in range(T):
            if not mask[i, t]:
                continue
            a, r = float(adv[i, t]), float(torch.exp(lp_[i, t] - old[i, t]))
            surrogate = max(-a * r, -a * min(max(r, 1 - eps), 1 + eps))
            total += min(surrogate, -a * c) if a < 0 else surrogate
    expected = total / (global_toks + 1e-8)

    loss, metrics = as_loss_function("ppo", clip_range=eps, clip_ratio_c=c)(
        data, torch.tensor(7.0), torch.tensor(global_toks), next_token_logprobs=lp
    )
    assert abs(float(loss.detach()) - expected) < 1e-6
    assert torch.equal(metrics["pg_loss"], loss.detach())
