"""The input rules of Clip-Cov, KL-Cov, DPPO-TV and DPPO-KL (`trl_ext.losses.cov`, `trl_ext.losses.dppo`): an empty
batch, NaN / ±inf at valid and at masked positions, the shapes of `importance_sampling_ratio`, bad arguments refused
naming them, and verl's effective defaults; on the batch of test_verl_losses_cov.py."""

from __future__ import annotations

import math

import pytest
import torch
from test_verl_losses_cov import ADV, LP, MASK, NAN, D, run, tensors

from trl_ext.losses import LOSS_AGG_MODES, get_policy_loss

# ==================================================================================================
# Input rules: empty batch, NaN, importance_sampling_ratio, arguments
# ==================================================================================================

NAMES = ["clip_cov", "kl_cov", "dppo_tv", "dppo_kl"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (0, 0)])
def test_empty_batch_gives_a_finite_zero(name, mode, shape):
    lp = torch.zeros(shape, dtype=D, requires_grad=True)
    loss, metrics = get_policy_loss(name, loss_agg_mode=mode)(
        logprob=lp, old_logprob=torch.zeros(shape, dtype=D), action_mask=torch.ones(shape, dtype=torch.bool),
        advantages=torch.zeros(shape[0], dtype=D), importance_sampling_ratio=torch.ones(shape[0], 1, dtype=D),
    )  # fmt: skip
    assert loss.item() == 0.0
    loss.backward()
    assert torch.count_nonzero(lp.grad) == 0
    assert all(torch.isfinite(v) and v.item() == 0.0 for v in metrics.values())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("key", ["logprob", "old_logprob", "advantages", "importance_sampling_ratio"])
@pytest.mark.parametrize("fill", [NAN, math.inf, -math.inf])
def test_non_finite_at_a_valid_position_gives_nan(name, key, fill):
    logprob, old, mask, adv = tensors()
    batch = {
        "logprob": logprob.detach().clone(), "old_logprob": old, "action_mask": mask, "advantages": adv.clone(),
        "importance_sampling_ratio": torch.ones(4, 4, dtype=D),
    }  # fmt: skip
    batch[key][1, 2] = fill
    loss, _ = get_policy_loss(name)(**batch)
    assert torch.isnan(loss)


@pytest.mark.parametrize("name", NAMES)
def test_non_finite_at_masked_positions_changes_nothing(name):
    kwargs = {"clip_cov_ratio": 1.0, "clip_cov_lb": 0.0} if name == "clip_cov" else {}
    clean_lp = [[0.0 if math.isnan(x) else x for x in row] for row in LP]
    clean_adv = [[0.0 if math.isnan(x) else x for x in row] for row in ADV]
    weights = torch.full((4, 4), 1.5, dtype=D)
    dirty_weights = weights.clone()
    dirty_weights[~torch.tensor(MASK, dtype=torch.bool)] = math.inf
    loss, grad, metrics = run(name, dirty_weights, **kwargs)
    clean_loss, clean_grad, clean_metrics = run(name, weights, lp=clean_lp, adv=clean_adv, **kwargs)
    assert torch.isfinite(loss) and loss.item() == clean_loss.item()
    assert torch.equal(grad, clean_grad) and torch.isfinite(grad).all()
    assert metrics == clean_metrics


@pytest.mark.parametrize("name", NAMES)
def test_importance_sampling_ratio_shapes(name):
    logprob, old, mask, adv = tensors()
    fn = get_policy_loss(name)
    batch = {"logprob": logprob, "old_logprob": old, "action_mask": mask, "advantages": adv}
    with pytest.raises(ValueError, match="importance_sampling_ratio"):
        fn(**batch, importance_sampling_ratio=torch.ones(4, dtype=D))  # [B]: ambiguous, refused
    with pytest.raises(ValueError, match="importance_sampling_ratio"):
        fn(**batch, importance_sampling_ratio=torch.ones(4, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="importance_sampling_ratio"):
        fn(**batch, importance_sampling_ratio=torch.ones(4, 3, dtype=D))
    torch.manual_seed(0)  # clip_cov: the same draw for both calls
    ones, _ = fn(**batch, importance_sampling_ratio=torch.ones(4, 1, dtype=D))
    torch.manual_seed(0)
    none, _ = fn(**batch)
    assert torch.equal(ones, none)


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("clip_cov", {"clip_cov_ratio": -0.1}, r"^clip_cov: clip_cov_ratio=-0\.1 is not valid; must be in \(0, 1\]$"),
        ("clip_cov", {"clip_cov_ratio": 1.5}, r"^clip_cov: clip_cov_ratio=1\.5 is not valid"),
        ("clip_cov", {"clip_cov_lb": 5.5}, r"^clip_cov: clip_cov_lb=5\.5 is not valid; must be <= clip_cov_ub=5\.0$"),
        ("clip_cov", {"clip_cov_ub": 0.5}, r"^clip_cov: clip_cov_lb=1\.0 is not valid; must be <= clip_cov_ub=0\.5$"),
        ("clip_cov", {"clip_range": -0.2}, r"^clip_cov: clip_range=-0\.2 is not valid"),
        ("clip_cov", {"clip_range_low": -0.2}, r"^clip_cov: clip_range_low=-0\.2 is not valid"),
        ("clip_cov", {"selection_seed": 1.5}, r"^clip_cov: selection_seed=1\.5 is not valid"),
        ("kl_cov", {"kl_cov_ratio": 0.0}, r"^kl_cov: kl_cov_ratio=0\.0 is not valid; must be in \(0, 1\]$"),
        ("kl_cov", {"ppo_kl_coef": -1.0}, r"^kl_cov: ppo_kl_coef=-1\.0 is not valid; must be >= 0$"),
        ("kl_cov", {"loss_agg_mode": "mean"}, r"^kl_cov: loss_agg_mode='mean' is not valid"),
        ("dppo_tv", {"clip_range": -0.1}, r"^dppo_tv: clip_range=-0\.1 is not valid; must be >= 0"),
        ("dppo_tv", {"clip_range_high": -0.1}, r"^dppo_tv: clip_range_high=-0\.1 is not valid; must be >= 0"),
        ("dppo_kl", {"clip_range_low": -0.1}, r"^dppo_kl: clip_range_low=-0\.1 is not valid; must be >= 0"),
        ("dppo_kl", {"clip_ratio_c": -1.0}, r"^dppo_kl: clip_ratio_c=-1\.0 is not valid; must be > 1$"),
        ("dppo_tv", {"clip_ratio_c": 1.0}, r"^dppo_tv: clip_ratio_c=1\.0 is not valid; must be > 1$"),
        ("dppo_kl", {"clip_ratio_c": 0.5}, r"^dppo_kl: clip_ratio_c=0\.5 is not valid; must be > 1$"),
        ("dppo_kl", {"clip_range": None}, r"^dppo_kl: no clip range given"),
    ],
)
def test_bad_arguments_are_refused_naming_them(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_policy_loss(name, **kwargs)


def test_defaults_are_verls_effective_ones():
    assert get_policy_loss("clip_cov").args == {
        "clip_range": 0.2, "clip_range_low": 0.2, "clip_range_high": 0.2, "clip_cov_ratio": 0.0002,
        "clip_cov_lb": 1.0, "clip_cov_ub": 5.0, "selection_seed": None, "loss_agg_mode": "token-mean",
    }  # fmt: skip
    assert get_policy_loss("kl_cov").args == {"kl_cov_ratio": 0.0002, "ppo_kl_coef": 0.1, "loss_agg_mode": "token-mean"}
    for name in ("dppo_tv", "dppo_kl"):
        assert get_policy_loss(name).args == {
            "clip_range": 0.2, "clip_range_low": 0.2, "clip_range_high": 0.2, "clip_ratio_c": 3.0,
            "loss_agg_mode": "token-mean",
        }  # fmt: skip
        assert "divergence threshold" in type(get_policy_loss(name)).argument("clip_range").help
