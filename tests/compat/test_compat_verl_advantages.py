"""`trl_ext.compat.verl`'s advantage estimators, estimator registry, KL controllers, entropy / REINFORCE / bypass
losses and PF-PPO resampling against hand-computed values (benchmarks/compare_verl.py compares them with verl)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trl_ext.compat import verl

D = torch.float64
UIDS = np.array(["a", "a", "a", "b"], dtype=object)  # group a: 3 rows, b: a group of one


def outcome_batch():
    """Scores 1, 3, 5 (group a) and 2 (b), on the first token; masks of 2, 3, 1 and 2 tokens."""
    rewards = torch.zeros(4, 3, dtype=D)
    rewards[:, 0] = torch.tensor([1.0, 3.0, 5.0, 2.0], dtype=D)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=D)
    return rewards, mask


def whiten(values, mask):
    """Independent masked whitening: (x − mean)/sqrt(unbiased var + 1e-8) over the valid entries."""
    valid = values[mask.bool()]
    return (values - valid.mean()) / torch.sqrt(valid.var() + 1e-8)


@pytest.mark.parametrize("index", [UIDS, np.array([7, 7, 7, 9]), torch.tensor([7, 7, 7, 9])])
def test_grpo_rloo_opo_closed_forms(index):
    rewards, mask = outcome_batch()
    expected = {
        # mean 3, std 2 in group a; a group of one: mean 0, std 1
        "compute_grpo_outcome_advantage": [-2 / (2 + 1e-6), 0.0, 2 / (2 + 1e-6), 2 / (1 + 1e-6)],
        "compute_grpo_vectorized_outcome_advantage": [-2 / (2 + 1e-6), 0.0, 2 / (2 + 1e-6), 2 / (1 + 1e-6)],
        "compute_rloo_outcome_advantage": [1 - 4.0, 3 - 3.0, 5 - 2.0, 2.0],  # R − mean of the others; single: R
        "compute_rloo_vectorized_outcome_advantage": [-3.0, 0.0, 3.0, 0.0],  # single: 0
        # baseline Σ l·R / Σ l = (2·1 + 3·3 + 1·5)/6 = 16/6
        "compute_opo_outcome_advantage": [1 - 16 / 6, 3 - 16 / 6, 5 - 16 / 6, 2.0],
    }
    for name, values in expected.items():
        advantages, returns = getattr(verl, name)(rewards, mask, index)
        torch.testing.assert_close(advantages, torch.tensor(values, dtype=D).unsqueeze(-1) * mask, msg=name)
        assert returns is advantages
    dr_grpo, _ = verl.compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(dr_grpo, torch.tensor([[-2.0], [0.0], [2.0], [2.0]], dtype=D) * mask)


@pytest.mark.parametrize("name", ["compute_grpo_outcome_advantage", "compute_grpo_vectorized_outcome_advantage"])
def test_grpo_accepts_epsilon_zero(name):
    """As verl: ε = 0 divides by the bare group std (scores 1, 0: mean 0.5, std 1/√2)."""
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=D)
    advantages, _ = getattr(verl, name)(rewards, torch.ones(2, 2, dtype=D), ["a", "a"], epsilon=0.0)
    half = 1 / math.sqrt(2)
    torch.testing.assert_close(advantages, torch.tensor([[half, half], [-half, -half]], dtype=D))


def test_grpo_passk():
    rewards = torch.zeros(5, 2, dtype=D)
    rewards[:, 1] = torch.tensor([1.0, 3.0, 2.0, 4.0, 4.5], dtype=D)
    mask = torch.ones(5, 2, dtype=D)
    index = np.array([0, 0, 0, 1, 1])
    advantages, _ = verl.compute_grpo_passk_outcome_advantage(rewards, mask, index, config={})
    # group 0: best 3, second 2, std([1, 3, 2]) = 1; group 1: 4.5 − 4 over std 0.5/√2
    expected = [0.0, 1 / (1 + 1e-6), 0.0, 0.0, 0.5 / (0.5 / math.sqrt(2) + 1e-6)]
    torch.testing.assert_close(advantages, torch.tensor(expected, dtype=D).unsqueeze(-1).expand(5, 2))
    raw, _ = verl.compute_grpo_passk_outcome_advantage(rewards, mask, index, config={"norm_adv_by_std_in_grpo": False})
    assert raw[:, 0].tolist() == [0.0, 1.0, 0.0, 0.0, 0.5]
    with pytest.raises(ValueError, match="group"):
        verl.compute_grpo_passk_outcome_advantage(rewards, mask, np.array([0, 0, 0, 1, 2]), config={})
    with pytest.raises(TypeError, match=r"compute_grpo_passk_outcome_advantage.*config"):
        verl.compute_grpo_passk_outcome_advantage(rewards, mask, index)


def test_reinforce_plus_plus_baseline_and_gdpo_whiten_over_valid_tokens():
    rewards, mask = outcome_batch()
    centered = torch.tensor([[-2.0], [0.0], [2.0], [2.0]], dtype=D) * mask  # R − group mean; single: mean 0
    advantages, _ = verl.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, UIDS)
    torch.testing.assert_close(advantages, whiten(centered, mask) * mask)

    grpo = torch.tensor([[-2 / (2 + 1e-6)], [0.0], [2 / (2 + 1e-6)], [2 / (1 + 1e-6)]], dtype=D) * mask
    gdpo, _ = verl.compute_gdpo_outcome_advantage(rewards, mask, UIDS)  # one component: whitened GRPO
    torch.testing.assert_close(gdpo, whiten(grpo, mask) * mask)

    # two components from non_tensor_batch, weights (1, 0.5): GRPO per component, weighted sum, whitened
    components = {"fmt": np.array([1.0, 1.0, 0.0, 1.0]), "acc": [0.0, 2.0, 4.0, 3.0]}
    config = {"gdpo_reward_keys": ["fmt", "acc"], "gdpo_reward_weights": [1.0, 0.5]}
    batch = {"prompts": torch.zeros(4, 2), "attention_mask": torch.ones(4, 5)}
    mixed, _ = verl.compute_gdpo_outcome_advantage(
        rewards, mask, UIDS, config=config, non_tensor_batch=components, batch=batch
    )
    std_fmt = torch.tensor([1.0, 1.0, 0.0]).std().item()  # group a's std of (1, 1, 0)
    fmt = [1 / 3 / (std_fmt + 1e-6), 1 / 3 / (std_fmt + 1e-6), -2 / 3 / (std_fmt + 1e-6), 1 / (1 + 1e-6)]
    acc = [-2 / (2 + 1e-6), 0.0, 2 / (2 + 1e-6), 3 / (1 + 1e-6)]
    total = torch.tensor([f + 0.5 * a for f, a in zip(fmt, acc, strict=True)], dtype=D).unsqueeze(-1) * mask
    torch.testing.assert_close(mixed, (whiten(total, mask) * mask).to(mixed.dtype), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="gdpo_reward_keys"):
        verl.compute_gdpo_outcome_advantage(rewards, mask, UIDS, config={}, non_tensor_batch=components, batch=batch)
    with pytest.raises(ValueError, match="'missing' not found"):
        bad = {"gdpo_reward_keys": ["missing"]}
        verl.compute_gdpo_outcome_advantage(rewards, mask, UIDS, config=bad, non_tensor_batch=components, batch=batch)


def test_reinforce_plus_plus_skips_observation_tokens():
    rewards = torch.tensor([[0.0, 9.0, 0.0, 1.0], [0.0, 0.0, 2.0, 0.0]], dtype=D)
    mask = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 0]], dtype=D)
    advantages, returns = verl.compute_reinforce_plus_plus_outcome_advantage(
        rewards, mask, config=SimpleNamespace(gamma=0.5)
    )
    # row 0: G_3 = 1, G_2 = 0.5, the observation token is skipped (its 9 too), G_0 = 0.25; row 1: 0.5, 1, 2, 0
    expected = torch.tensor([[0.25, 0.0, 0.5, 1.0], [0.5, 1.0, 2.0, 0.0]], dtype=D)
    torch.testing.assert_close(returns, expected)
    torch.testing.assert_close(advantages, whiten(expected, mask) * mask)
    with pytest.raises(TypeError, match=r"compute_reinforce_plus_plus_outcome_advantage.*config"):
        verl.compute_reinforce_plus_plus_outcome_advantage(rewards, mask)


def test_remax():
    rewards = torch.tensor([[0.0, 5.0, 1.0], [2.0, 0.0, 0.0]], dtype=D)
    mask = torch.tensor([[1, 0, 1], [1, 0, 0]], dtype=D)
    advantages, returns = verl.compute_remax_outcome_advantage(rewards, torch.tensor([0.25, 1.0], dtype=D), mask)
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1.0, 1.0], [2.0, 0.0, 0.0]], dtype=D))
    # a masked position inside the response keeps G (verl); after the response G is 0
    torch.testing.assert_close(advantages, torch.tensor([[0.75, 1.0, 0.75], [1.0, 0.0, 0.0]], dtype=D))
    with pytest.raises(TypeError, match=r"compute_remax_outcome_advantage.*reward_baselines"):
        verl.compute_remax_outcome_advantage(rewards, None, mask)


def otb_inputs(mask):
    shape = mask.shape
    return torch.full(shape, math.log(0.5), dtype=D), torch.full(shape, 0.5, dtype=D)  # w = 1 − 2·0.5 + 0.5 = 0.5


def test_optimal_token_baseline():
    rewards = torch.tensor([[0.0, 2.0], [1.0, 0.0], [0.0, 3.0]], dtype=D)
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]], dtype=D)
    index = np.array(["p", "p", "q"])
    # G: row 0 (2, 2), row 1 (1, 0); W: row 0 (0.5, 1.0), row 1 (0.5, 0 masked)
    # B_0 = (2·0.5 + 1·0.5)/1.0 = 1.5, B_1 = 2·1/1 = 2; row 2 is a group of one: B = 0
    for tail, b01 in ((True, 0.0), (False, 2.0)):  # zero tail: row 0 is the strictly longest of its group
        advantages, returns = verl.compute_optimal_token_baseline_advantage(
            rewards, mask, index, *otb_inputs(mask), handle_zero_tail=tail
        )
        torch.testing.assert_close(returns, torch.tensor([[2.0, 2.0], [1.0, 0.0], [3.0, 3.0]], dtype=D))
        expected = torch.tensor([[2 - 1.5, 2 - b01], [1 - 1.5, 0.0], [3.0, 3.0]], dtype=D)
        torch.testing.assert_close(advantages, expected, atol=1e-6, rtol=1e-6)
    # multi-turn: positions count over the loss tokens, so a row (0, _, 2) with a gap acts as (0, 2)
    gap_rewards = torch.tensor([[0.0, 7.0, 2.0], [1.0, 0.0, 0.0], [0.0, 3.0, 0.0]], dtype=D)
    gap_mask = torch.tensor([[1, 0, 1], [1, 0, 0], [1, 1, 0]], dtype=D)
    advantages, _ = verl.compute_multi_turn_optimal_token_baseline_advantage(
        gap_rewards, gap_mask, index, *otb_inputs(gap_mask)
    )
    torch.testing.assert_close(
        advantages, torch.tensor([[0.5, 0.0, 2.0], [-0.5, 0.0, 0.0], [3.0, 3.0, 0.0]], dtype=D), atol=1e-6, rtol=0
    )
    with pytest.raises(TypeError, match=r"compute_optimal_token_baseline_advantage.*sum_pi_squared"):
        verl.compute_optimal_token_baseline_advantage(rewards, mask, index, otb_inputs(mask)[0], None)


def test_estimator_registry():
    assert len(verl.AdvantageEstimator) == 14 and verl.AdvantageEstimator.GRPO == "grpo"
    assert set(verl.ADV_ESTIMATOR_REGISTRY) == {e.value for e in verl.AdvantageEstimator}
    assert verl.get_adv_estimator_fn(verl.AdvantageEstimator.GRPO) is verl.compute_grpo_outcome_advantage
    assert verl.get_adv_estimator_fn("tir_optimal_token_baseline") is (
        verl.compute_multi_turn_optimal_token_baseline_advantage
    )
    with pytest.raises(ValueError, match="Unknown advantage estimator simply: GAE"):
        verl.get_adv_estimator_fn("GAE")
    verl.register_adv_est("grpo")(verl.compute_grpo_outcome_advantage)  # the same function again: fine
    with pytest.raises(ValueError, match="Adv estimator grpo has already been registered"):
        verl.register_adv_est("grpo")(verl.compute_rloo_outcome_advantage)

    original = verl.ADV_ESTIMATOR_REGISTRY
    try:  # verl's tests replace the registry by assignment: register / get must use the new dict
        verl.ADV_ESTIMATOR_REGISTRY = {"gae": len}
        verl.register_adv_est("mine")(abs)
        assert verl.ADV_ESTIMATOR_REGISTRY == {"gae": len, "mine": abs} and "mine" not in original
        assert verl.get_adv_estimator_fn("gae") is len
        with pytest.raises(ValueError, match="simply: grpo"):
            verl.get_adv_estimator_fn("grpo")
    finally:
        verl.ADV_ESTIMATOR_REGISTRY = original


def test_missing_inputs_name_the_function_and_input():
    rewards, mask = outcome_batch()
    with pytest.raises(TypeError, match=r"compute_grpo_outcome_advantage.*index"):
        verl.compute_grpo_outcome_advantage(rewards, mask, None)
    with pytest.raises(TypeError, match=r"compute_rloo_outcome_advantage.*response_mask"):
        verl.compute_rloo_outcome_advantage(rewards, None, UIDS)
    with pytest.raises(TypeError, match=r"compute_gae_advantage_return.*values"):
        verl.compute_gae_advantage_return(rewards, None, mask, 1.0, 1.0)
    with pytest.raises(TypeError, match=r"compute_gpg_outcome_advantage.*index"):
        verl.compute_gpg_outcome_advantage(rewards, mask, None)
    with pytest.raises(ValueError, match=r"compute_opo_outcome_advantage.*index"):
        verl.compute_opo_outcome_advantage(rewards, mask, UIDS[:3])


def test_kl_rewards_and_controllers():
    lp, ref = torch.tensor([[-1.0, -0.5]], dtype=D), torch.tensor([[-1.5, -0.25]], dtype=D)
    torch.testing.assert_close(verl.kl_penalty_forward(lp, ref, "k1"), torch.tensor([[0.5, -0.25]], dtype=D))
    torch.testing.assert_close(verl.kl_penalty_forward(lp, ref, "mse"), torch.tensor([[0.125, 0.03125]], dtype=D))
    scores = torch.tensor([[1.0, 2.0]], dtype=D)
    torch.testing.assert_close(verl.compute_rewards(scores, lp, ref, 0.1), torch.tensor([[0.95, 2.025]], dtype=D))
    with pytest.raises(ValueError, match=r"k3\+"):
        verl.kl_penalty_forward(lp, ref, "k3+")

    adaptive = verl.get_kl_controller({"type": "adaptive", "kl_coef": 0.1, "target_kl": 0.05, "horizon": 100})
    assert isinstance(adaptive, verl.AdaptiveKLController) and adaptive.value == 0.1
    adaptive.update(0.1, n_steps=10)  # error clip(0.1/0.05 − 1) = 0.2: ×(1 + 0.2·10/100)
    assert adaptive.value == pytest.approx(0.102)
    adaptive.update(0.01, n_steps=50)  # error −0.2: ×(1 − 0.2·50/100)
    assert adaptive.value == pytest.approx(0.102 * 0.9)
    fixed = verl.get_kl_controller(SimpleNamespace(type="fixed", kl_coef=0.3))
    fixed.update(10.0, n_steps=5)
    assert isinstance(fixed, verl.FixedKLController) and fixed.value == 0.3
    with pytest.raises(ValueError, match=r"kl_ctrl\.type"):
        verl.get_kl_controller({"type": "pid", "kl_coef": 0.1})
    with pytest.raises(ValueError, match="horizon"):
        verl.get_kl_controller({"type": "adaptive", "kl_coef": 0.1, "target_kl": 0.05, "horizon": 0})


def test_entropy_and_reinforce_losses():
    logits = torch.zeros(2, 3, 4, dtype=D)
    logits[1] = torch.tensor([50.0, 0.0, 0.0, 0.0], dtype=D)  # ~one-hot: entropy ~0
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=D)
    loss = verl.compute_entropy_loss(logits, mask)  # token-mean of (log 4, log 4, ~0)
    torch.testing.assert_close(loss, torch.tensor(2 * math.log(4) / 3, dtype=D), atol=1e-12, rtol=1e-12)
    with pytest.raises(ValueError, match="compute_entropy_loss"):
        verl.compute_entropy_loss(logits[0], mask)

    rollout = torch.tensor([[-1.0, -2.0, -3.0]], dtype=D)
    lp = torch.tensor([[-0.5, -2.5, -1.0]], dtype=D)
    adv, m = torch.tensor([[1.0, -2.0, 9.0]], dtype=D), torch.tensor([[1, 1, 0]], dtype=D)
    w = torch.tensor([[2.0, 0.5, 1.0]], dtype=D)
    config = SimpleNamespace(global_batch_info={})
    loss, metrics = verl.compute_policy_loss_reinforce(rollout, lp, adv, m, "token-mean", config, w)
    torch.testing.assert_close(loss, torch.tensor((-(1 * -0.5 * 2) - (-2 * -2.5 * 0.5)) / 2, dtype=D))
    assert metrics == {"actor/ppo_kl": pytest.approx(((-1 + 0.5) + (-2 + 2.5)) / 2)}
    with pytest.raises(TypeError, match="config"):
        verl.compute_policy_loss_reinforce(rollout, lp, adv, m)


def test_bypass_mode():
    rollout = torch.tensor([[-1.0, -2.0, -1.0]], dtype=D)
    lp = torch.tensor([[-0.5, -2.5, -1.0]], dtype=D)
    adv, m = torch.tensor([[1.0, -2.0, 3.0]], dtype=D), torch.ones(1, 3, dtype=D)

    def config(**settings):
        base = {"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": None, "global_batch_info": {}}
        return {**base, "policy_loss": {"rollout_correction": settings}}

    loss_fn = verl.get_policy_loss_fn("bypass_mode")
    loss, metrics = loss_fn(rollout, lp, adv, m, "token-mean", config(loss_type="reinforce", rollout_is="token"))
    weights = torch.clamp(torch.exp(lp - rollout), max=2.0)  # TIS at the default threshold 2.0
    torch.testing.assert_close(loss, (-adv * lp * weights).mean())
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(math.exp(0.5))
    assert isinstance(metrics["rollout_corr/rollout_is_mean"], float)
    loss, _ = loss_fn(rollout, rollout, adv, m, "token-mean", config())  # ppo_clip with ratio 1: −mean(A)
    torch.testing.assert_close(loss, -adv.mean())
    with pytest.raises(ValueError, match="rollout_correction config not found"):
        loss_fn(rollout, lp, adv, m, "token-mean", {"policy_loss": {}})
    with pytest.raises(ValueError, match="loss_type"):
        loss_fn(rollout, lp, adv, m, "token-mean", config(loss_type="dpo"))


def test_pf_ppo_reweight_data():
    class TensorDict(dict):
        pass

    scores = torch.tensor([[1.0, 0.0], [5.0, 0.0], [3.0, 0.0], [2.0, 1.0]])
    batch = TensorDict(token_level_scores=scores, row=torch.arange(4))
    batch.batch_size = [4]
    data = SimpleNamespace(
        batch=batch,
        non_tensor_batch={"uid": np.array(list("abcd")), "ids": [0, 1, 2, 3]},
        meta_info={"rows": [0, 1, 2, 3], "k": 1},
    )
    torch.manual_seed(0)
    out = verl.compute_pf_ppo_reweight_data(data, "max_min")
    rows = out.batch["row"]
    assert set(rows.tolist()) <= {0, 1} and out.batch.batch_size == [4]  # only the max (5) and min (1) rows
    assert out.non_tensor_batch["uid"].tolist() == ["abcd"[i] for i in rows]
    assert out.non_tensor_batch["ids"] == out.meta_info["rows"] == rows.tolist() and out.meta_info["k"] == 1
    assert data.batch["row"].tolist() == [0, 1, 2, 3] and data.meta_info["rows"] == [0, 1, 2, 3]  # input unchanged
    with pytest.raises(ValueError, match="reweight_method"):
        verl.compute_pf_ppo_reweight_data(data, "softmax")
