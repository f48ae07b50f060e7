"""VESPO and LUSPO, TRL 1.16's newest loss types, as registered policy losses (`vespo`, `luspo`): TRL is the oracle.

1. The loss against TRL's own code on the same inputs: VESPO's φ is TRL's `GRPOTrainer.get_gamma_weights` (a static
   method), the rest of TRL's per-token loss and aggregation is written out below as `_compute_loss` does it.
2. `VESPOTrainer` / `LUSPOTrainer` with their defaults, and the composed `trl_ext.GRPOConfig(policy_loss_fn=...)`,
   make the same updates as `trl.GRPOTrainer(loss_type=...)` given TRL's settings, over two iterations on each
   generation batch (so that the ratios leave 1 and φ, the clip and the sequence ratio all matter). SGD without
   gradient clipping makes the update −lr × gradient, so a gradient difference shows directly.
3. Both compose with another estimator and train asynchronously (`tests/trainers/test_async_all_losses.py` trains
   every registered loss there); the closed forms pin φ(1) = 1 and the length scaling.
"""

from __future__ import annotations

import math

import pytest
import torch
import trl
from trainer_helpers import cpu_config, length_reward, logged, toy_trainer, train_update

import trl_ext
from trl_ext.losses import get_policy_loss

SGD = {
    "optim": "sgd",
    "learning_rate": 0.05,
    "max_grad_norm": 0.0,
    "lr_scheduler_type": "constant",
    "per_device_train_batch_size": 16,
    "max_steps": 2,
    "num_iterations": 2,
}


def _batch(seed: int, rows: int = 6, tokens: int = 5, per_token_advantages: bool = False):
    g = torch.Generator().manual_seed(seed)
    logprob = (-torch.rand(rows, tokens, generator=g, dtype=torch.float64) * 2).requires_grad_()
    old = logprob.detach() + 0.3 * torch.randn(rows, tokens, generator=g, dtype=torch.float64)
    mask = torch.rand(rows, tokens, generator=g) > 0.25
    mask[:, 0] = True
    shape = (rows, tokens) if per_token_advantages else (rows, 1)
    advantages = torch.randn(*shape, generator=g, dtype=torch.float64)
    # the sampler's correction: 1 at masked positions, as TRL builds it from masked log-prob differences
    rho = torch.where(mask, torch.exp(0.1 * torch.randn(rows, tokens, generator=g, dtype=torch.float64)), 1.0)
    return logprob, old, mask, advantages, rho


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("with_sampler_correction", [False, True])
@pytest.mark.parametrize("kl", [(2.0, 3.0, 3.0, 2.0), (1.0, 0.5, 4.0, 1.5)])
def test_vespo_equals_trls_gamma_weights_and_loss(seed, with_sampler_correction, kl):
    logprob, old, mask, advantages, rho = _batch(seed)
    rho = rho if with_sampler_correction else None
    k_pos, lambda_pos, k_neg, lambda_neg = kl
    m = mask.double()
    phi = trl.GRPOTrainer.get_gamma_weights(
        advantages=advantages,
        log_ratio_per_token=logprob.detach() - old,
        mask=m,
        importance_sampling_ratio=rho,
        k_pos=k_pos,
        lambda_pos=lambda_pos,
        k_neg=k_neg,
        lambda_neg=lambda_neg,
    )
    theirs = ((-phi * advantages * logprob) * m).sum() / m.sum()  # TRL: token sum / the window's tokens
    (their_grad,) = torch.autograd.grad(theirs, logprob)
    loss = get_policy_loss("vespo", k_pos=k_pos, lambda_pos=lambda_pos, k_neg=k_neg, lambda_neg=lambda_neg)
    ours, metrics = loss(
        logprob=logprob, old_logprob=old, action_mask=mask, advantages=advantages, importance_sampling_ratio=rho
    )
    (our_grad,) = torch.autograd.grad(ours, logprob)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(our_grad, their_grad)
    assert metrics["vespo/phi_seq_mean"].item() == pytest.approx(phi.mean().item(), rel=1e-6)


@pytest.mark.parametrize("level", ["sequence", "token"])
@pytest.mark.parametrize("delta", [None, 1.1])
def test_luspo_equals_trls_per_token_loss_and_aggregation(level, delta):
    logprob, old, mask, advantages, _ = _batch(3)
    m = mask.double()
    log_ratio = logprob - old
    if level == "sequence":  # TRL's `_compute_loss`, written out
        weight = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    else:
        weight = log_ratio
    coef_1 = torch.exp(weight)
    coef_2 = torch.clamp(coef_1, 1 - 0.2, 1 + 0.28)
    if delta is not None:
        coef_1 = torch.clamp(coef_1, max=delta)
    per_token = -torch.min(coef_1 * advantages, coef_2 * advantages)
    theirs = (per_token * m).sum(-1).mean()
    (their_grad,) = torch.autograd.grad(theirs, logprob)
    loss = get_policy_loss("luspo", clip_range_low=0.2, clip_range_high=0.28, ratio_level=level, ratio_cap=delta)
    ours, _ = loss(logprob=logprob, old_logprob=old, action_mask=mask, advantages=advantages)
    (our_grad,) = torch.autograd.grad(ours, logprob)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(our_grad, their_grad)


def test_closed_forms():
    """On-policy φ(1) = e^{λ − λ} = 1: VESPO is −A·lp; LUSPO at the sequence level is |y|·(−A) per sequence."""
    lp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, 0.0]], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    adv = torch.tensor([1.5, -2.0], dtype=torch.float64)
    vespo, metrics = get_policy_loss("vespo")(logprob=lp, old_logprob=lp.detach(), action_mask=mask, advantages=adv)
    assert vespo.item() == pytest.approx((1.5 * 3.5 - 2.0 * 1.0) / 5)
    assert metrics["vespo/phi_seq_mean"].item() == pytest.approx(1.0)
    luspo, _ = get_policy_loss("luspo")(logprob=lp, old_logprob=lp.detach(), action_mask=mask, advantages=adv)
    assert luspo.item() == pytest.approx((3 * -1.5 + 2 * 2.0) / 2)
    # W = e^{0.5}: φ = exp(λ + k·0.5 − λ·e^{0.5}) with (k, λ) = (2, 3) for A ≥ 0
    old = lp.detach().clone()
    old[0, 0] -= 0.5
    _, metrics = get_policy_loss("vespo")(logprob=lp, old_logprob=old, action_mask=mask, advantages=adv)
    expected = (math.exp(3 + 2 * 0.5 - 3 * math.exp(0.5)) + 1.0) / 2
    assert metrics["vespo/phi_seq_mean"].item() == pytest.approx(expected)


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match=r"luspo: ratio_level='seq' is not valid; must be one of 'sequence', 'token'"):
        get_policy_loss("luspo", ratio_level="seq")
    with pytest.raises(ValueError, match=r"luspo: ratio_cap=1\.0 is not valid; must be > 1"):
        get_policy_loss("luspo", ratio_cap=1.0)
    with pytest.raises(
        ValueError, match=r"vespo: importance_sampling_ratio has shape \(5,\); expected \[B\], \[B, 1\]"
    ):
        lp, old, mask, adv, rho = _batch(0)
        get_policy_loss("vespo")(
            logprob=lp, old_logprob=old, action_mask=mask, advantages=adv, importance_sampling_ratio=rho[0]
        )


# id -> (trl_ext algorithm, its config's settings, trl.GRPOConfig's settings for the same objective)
TRAINER_CASES = {
    "vespo": ("vespo", {}, {"loss_type": "vespo"}),
    "vespo-composed": (
        "grpo",
        {"policy_loss_fn": "vespo", "policy_loss_fn_args": {"k_neg": 2.5}, "advantage_epsilon": 1e-4},
        {"loss_type": "vespo", "vespo_k_neg": 2.5},
    ),
    "luspo": (
        "luspo",
        {},
        {"loss_type": "luspo", "importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4},
    ),
    "luspo-token-delta": (
        "luspo",
        {"ratio_level": "token", "clip_range_low": 0.01, "clip_range_high": 0.02, "ratio_cap": 1.02},
        {"loss_type": "luspo", "epsilon": 0.01, "epsilon_high": 0.02, "delta": 1.02},
    ),
}


@pytest.mark.parametrize("case", list(TRAINER_CASES))
def test_trainer_makes_trls_update(case, tiny_model, tmp_path, float_tolerance):
    algorithm, ours_settings, trl_settings = TRAINER_CASES[case]
    spec = trl_ext.get_algorithm(algorithm)
    config = cpu_config(spec.config_class, str(tmp_path / "ours"), **SGD, **ours_settings)
    ours = toy_trainer(spec.trainer_class, config, tiny_model, length_reward)
    ours_update = train_update(ours)
    theirs = toy_trainer(trl.GRPOTrainer, cpu_config(trl.GRPOConfig, str(tmp_path / "trl"), **SGD, **trl_settings),
                         tiny_model, length_reward)  # fmt: skip
    theirs_update = train_update(theirs)
    assert logged(ours, "reward") == logged(theirs, "reward")  # the same samples and rewards
    if "vespo" in case:  # φ left 1 on the second iteration: the weighting is exercised
        tol = float_tolerance(torch.float32, logged(theirs, "num_tokens")[-1])
        phi = logged(theirs, "vespo/phi_seq_mean")
        assert logged(ours, "vespo/phi_seq_mean") == pytest.approx(phi, rel=tol["rtol"], abs=tol["atol"])
    total = torch.cat([u.flatten() for u in theirs_update.values()])
    assert total.norm() > 1e-4
    for name, update in ours_update.items():
        torch.testing.assert_close(update, theirs_update[name], rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
