"""The asynchronous trainer's staleness corrections in closed form, on hand-made samples.

π (the trained policy's log-probs) comes from an independent plain forward of each sample; μ (the sampler's) is
π plus noise. Each test writes the loss the option must give from π, μ, the advantages and the policy versions,
and compares it with the trainer's loss on TRL's packed rows (one or two micro-batches of one optimizer window).
"""

from __future__ import annotations

import math

import pytest
import torch
from async_helpers import async_config, make_samples, packed_batch, stub_trainer
from transformers import AutoModelForCausalLM

from trl_ext.losses import get_policy_loss
from trl_ext.losses.m2po import m2po_mask
from trl_ext.toy import build_tokenizer

ADVANTAGES = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 0.25, -0.25])


@pytest.fixture(scope="module")
def plain(random_tiny_model):
    return AutoModelForCausalLM.from_pretrained(random_tiny_model).eval()


def _grid(samples, plain) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """π, μ `[B, T]` over each sample's completion tokens, and the mask."""
    width = max(int(s["completion_mask"].sum()) for s in samples)
    pi, mu = torch.zeros(len(samples), width), torch.zeros(len(samples), width)
    mask = torch.zeros(len(samples), width, dtype=torch.bool)
    for b, s in enumerate(samples):
        ids = torch.tensor(s["input_ids"])
        with torch.no_grad():
            logps = torch.log_softmax(plain(ids[None]).logits[0].float(), -1)
        start, n = s["prompt_len"], int(s["completion_mask"].sum())
        pi[b, :n] = logps[start - 1 : start - 1 + n].gather(1, ids[start:, None])[:, 0]
        mu[b, :n] = torch.tensor(s["old_log_probs"][start:])
        mask[b, :n] = True
    return pi, mu, mask


def _window_loss(trainer, batches) -> float:
    """The optimizer window's loss: the sum of its micro-batches' shares (one process)."""
    trainer.model.train()
    trainer._get_num_items_in_batch(batches, trainer.accelerator.device)
    with torch.no_grad():
        return sum(float(trainer.compute_loss(trainer.model, batch)) for batch in batches)


def test_truncated_importance_sampling_against_the_sampler(random_tiny_model, plain, tmp_path):
    """`rollout_is="token"`: each token's advantage × min(π/μ, 2); PPO's ratio to the step's own weights is 1, so
    the token-mean loss is −Σ w·A / N."""
    config = async_config(str(tmp_path), rollout_is="token", rollout_is_threshold=2.0)
    trainer = stub_trainer(random_tiny_model, config)
    samples = make_samples(build_tokenizer(), plain, seed=5, noise=0.8)
    pi, mu, mask = _grid(samples, plain)
    w = torch.exp(pi - mu).clamp(max=2.0)
    expected = -(w * ADVANTAGES[:, None])[mask].sum() / mask.sum()
    batch = packed_batch(samples, ADVANTAGES, build_tokenizer().pad_token_id)
    assert (torch.exp(pi - mu)[mask] > 2).any()  # the truncation acts
    assert _window_loss(trainer, [batch]) == pytest.approx(float(expected), rel=1e-4, abs=1e-6)


def test_token_rejection_leaves_the_window_count(random_tiny_model, plain, tmp_path):
    """`rollout_rs="token_k1"`: a token with π/μ outside [1/U, U] leaves the loss and the window's token count."""
    config = async_config(str(tmp_path), rollout_rs="token_k1", rollout_rs_threshold=1.5)
    trainer = stub_trainer(random_tiny_model, config)
    samples = make_samples(build_tokenizer(), plain, seed=6, noise=0.8)
    pi, mu, mask = _grid(samples, plain)
    kept = mask & ((mu - pi).abs() <= math.log(1.5))
    assert 0 < kept.sum() < mask.sum()
    expected = -ADVANTAGES[:, None].expand_as(kept)[kept].sum() / kept.sum()
    batch = packed_batch(samples, ADVANTAGES, build_tokenizer().pad_token_id)
    assert _window_loss(trainer, [batch]) == pytest.approx(float(expected), rel=1e-4, abs=1e-6)


def test_m2po_selects_over_the_whole_window(random_tiny_model, plain, tmp_path):
    """`m2po` over two micro-batches: the tokens masked are those M2PO's selection masks over the union of the
    window's samples, against μ; the window's loss is the loss of the whole batch."""
    tau = 0.05
    config = async_config(
        str(tmp_path), policy_loss_fn="m2po", policy_loss_fn_args={"m2_threshold": tau}, gradient_accumulation_steps=2
    )
    trainer = stub_trainer(random_tiny_model, config)
    samples = make_samples(build_tokenizer(), plain, seed=7, noise=0.8)
    pi, mu, mask = _grid(samples, plain)
    advantages = ADVANTAGES[:, None].expand_as(pi)
    keep, stats = m2po_mask(pi - mu, advantages, mask, tau)
    assert 0 < stats["m2po/masked_fraction"] < 1
    reference = get_policy_loss("m2po", m2_threshold=tau)
    expected, _ = reference(logprob=pi, old_logprob=mu, action_mask=mask, advantages=advantages)
    pad = build_tokenizer().pad_token_id
    halves = [packed_batch(samples[:4], ADVANTAGES[:4], pad), packed_batch(samples[4:], ADVANTAGES[4:], pad)]
    assert _window_loss(trainer, halves) == pytest.approx(float(expected), rel=1e-4, abs=1e-6)
    # the selection per micro-batch (what a per-micro-batch loss would do) masks other tokens here
    per_half = [m2po_mask(pi[h] - mu[h], advantages[h], mask[h], tau)[0] for h in (slice(0, 4), slice(4, 8))]
    assert not torch.equal(torch.cat(per_half), keep)


def test_decoupled_ppo_with_the_log_linear_proximal_policy(random_tiny_model, plain, tmp_path):
    """`decoupled_ppo` with `prox_logp_method="loglinear"`: π_prox = μ + α(π − μ), α = (v − v_μ)/(v + 1 − v_μ) with
    v the trainer's version (the step's weights); the loss is −Σ w·min(r·A, clip(r)·A) / N with r = π/π_prox at
    π_prox's value (r = e^(1−α)(π−μ)) and w = π_prox/μ, 0 beyond the cap."""
    config = async_config(
        str(tmp_path),
        policy_loss_fn="decoupled_ppo",
        policy_loss_fn_args={"behave_imp_weight_cap": 1.3},
        prox_logp_method="loglinear",
    )
    trainer = stub_trainer(random_tiny_model, config)
    samples = make_samples(build_tokenizer(), plain, seed=8, noise=0.6)
    pi, mu, mask = _grid(samples, plain)
    versions = torch.tensor([5, 5, 4, 4, 3, 3, 2, 2])
    trainer.model_version = 5
    alpha = ((5 - versions) / (6 - versions)).float()[:, None]
    prox = mu + alpha * (pi - mu)
    ratio = torch.exp(pi - prox)
    adv = ADVANTAGES[:, None]
    clipped = torch.maximum(-ratio * adv, -ratio.clamp(0.8, 1.2) * adv)
    weight = torch.exp(prox - mu)
    weight = torch.where(weight > 1.3, 0.0, weight)
    expected = (weight * clipped)[mask].sum() / mask.sum()
    assert (torch.exp(prox - mu)[mask] > 1.3).any() and (alpha > 0).any()
    batch = packed_batch(samples, ADVANTAGES, build_tokenizer().pad_token_id, versions=versions)
    assert _window_loss(trainer, [batch]) == pytest.approx(float(expected), rel=1e-4, abs=1e-6)


def test_the_trained_staleness_is_logged(random_tiny_model, plain, tmp_path):
    """`trained_staleness_mean` / `trained_staleness_max`: the trainer's version minus each sample's, at the optimizer
    step."""
    trainer = stub_trainer(random_tiny_model, async_config(str(tmp_path)))
    samples = make_samples(build_tokenizer(), plain, seed=9)
    trainer.model_version = 6
    batch = packed_batch(samples, ADVANTAGES, build_tokenizer().pad_token_id, versions=[6, 6, 5, 5, 4, 4, 2, 2])
    _window_loss(trainer, [batch])
    assert trainer._metrics["train"]["trained_staleness_mean"] == [pytest.approx((0 + 0 + 1 + 1 + 2 + 2 + 4 + 4) / 8)]
    assert trainer._metrics["train"]["trained_staleness_max"] == [4.0]
