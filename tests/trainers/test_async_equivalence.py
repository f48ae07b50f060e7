"""The equivalence anchor of the asynchronous trainer: with staleness 0 and the same samples, its update equals the
synchronous GRPO trainer's for the same loss and estimator.

Eight samples (two groups of four) with random completions and sampler log-probs μ = the model's own plus noise (so
that the ratios differ from 1 and the clips act) are handed to both trainers as each receives its batches: the
synchronous one as TRL's padded micro-batch (prompts left-padded, μ as `old_per_token_logps`), the asynchronous one
as TRL's packed tree row (shared prompts forwarded once, trl_ext's tree attention on CPU). Both start from the same
weights; the gradients of one micro-batch are compared (cosine ≥ 0.9999, and the losses).
"""

from __future__ import annotations

import pytest
import torch
from async_helpers import async_config, gradient, make_samples, packed_batch, padded_grpo_inputs, stub_trainer
from trainer_helpers import cpu_config, toy_trainer
from transformers import AutoModelForCausalLM

from trl_ext import GRPOConfig, GRPOTrainer
from trl_ext.async_rollout import GroupScorer
from trl_ext.toy import build_tokenizer, toy_reward

CASES = {
    "ppo": {},
    "ppo/seq-mean-token-mean": {"policy_loss_fn_args": {"loss_agg_mode": "seq-mean-token-mean"}},
    "sapo": {"policy_loss_fn": "sapo"},
    "gspo": {"policy_loss_fn": "gspo"},
    "cispo": {"policy_loss_fn": "cispo"},
    "m2po": {"policy_loss_fn": "m2po", "policy_loss_fn_args": {"m2_threshold": 0.01}},
    "decoupled_ppo": {"policy_loss_fn": "decoupled_ppo", "policy_loss_fn_args": {"behave_imp_weight_cap": 1.2}},
    "ppo+kl+entropy": {"beta": 0.04, "kl_loss_fn": "k3", "entropy_coef": 0.01},
}
REWARDS = torch.tensor([1.0, 0.0, 0.5, 0.0, 0.0, 0.0, 1.0, 1.0])
GROUPS = [0, 0, 0, 0, 1, 1, 1, 1]


def _sync_gradient(trainer, samples, advantages, pad) -> tuple[torch.Tensor, float]:
    inputs = padded_grpo_inputs(samples, advantages, pad)
    if trainer.beta != 0:  # the reference is the initial model, here the trained one: its log-probs, detached
        with torch.no_grad():
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
            mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
            inputs["ref_per_token_logps"], *_ = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, mask, inputs["completion_ids"].size(1)
            )
    inputs.update(trainer.count_window([inputs]))
    trainer.model.train()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    return gradient(trainer.model), float(loss.detach())


def _async_gradient(trainer, samples, advantages, pad) -> tuple[torch.Tensor, float]:
    batch = packed_batch(samples, advantages, pad)
    trainer.model.train()
    trainer.model_version = 1
    trainer._get_num_items_in_batch([batch], trainer.accelerator.device)
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    return gradient(trainer.model), float(loss.detach())


@pytest.mark.parametrize("case", list(CASES))
def test_the_async_update_equals_the_sync_update_at_staleness_zero(case, random_tiny_model, tmp_path):
    overrides = CASES[case]
    sync = toy_trainer(GRPOTrainer, cpu_config(GRPOConfig, str(tmp_path / "sync"), **overrides), random_tiny_model)
    asynchronous = stub_trainer(random_tiny_model, async_config(str(tmp_path / "async"), **overrides))
    tokenizer = build_tokenizer()
    samples = make_samples(tokenizer, sync.model, seed=3)

    # the same estimator: the synchronous trainer's on the batch, the worker's scorer on each group
    expected = sync.advantage_fn(REWARDS, torch.tensor(GROUPS))
    scorer = GroupScorer(toy_reward, advantage_fn=asynchronous.args.advantage_fn_name)
    per_group = [scorer._advantages(REWARDS[g * 4 : g * 4 + 4].double().numpy(), [[0]] * 4, g) for g in (0, 1)]
    worker_advantages = torch.cat([result.advantages.float() for result in per_group])
    torch.testing.assert_close(worker_advantages, expected.float(), rtol=1e-6, atol=1e-6)

    g_sync, loss_sync = _sync_gradient(sync, samples, expected, tokenizer.pad_token_id)
    g_async, loss_async = _async_gradient(asynchronous, samples, worker_advantages, tokenizer.pad_token_id)
    assert g_sync.norm() > 0
    cosine = torch.nn.functional.cosine_similarity(g_sync, g_async, dim=0)
    assert cosine >= 0.9999, (case, float(cosine))
    torch.testing.assert_close(g_async.norm(), g_sync.norm(), rtol=1e-3, atol=0)
    assert loss_async == pytest.approx(loss_sync, rel=1e-4, abs=1e-6)


def test_a_stale_sample_changes_the_update(random_tiny_model, tmp_path):
    """The anchor can fail: the same samples with other sampler log-probs (a staler μ) give another update."""
    asynchronous = stub_trainer(random_tiny_model, async_config(str(tmp_path / "async")))
    tokenizer = build_tokenizer()
    plain = AutoModelForCausalLM.from_pretrained(random_tiny_model)  # the trainer's model attends on packed rows only
    fresh = make_samples(tokenizer, plain, seed=3, noise=0.0)
    stale = make_samples(tokenizer, plain, seed=3, noise=0.5)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, -1.0, 0.5, -0.5])
    g_fresh, _ = _async_gradient(asynchronous, fresh, advantages, tokenizer.pad_token_id)
    g_stale, _ = _async_gradient(asynchronous, stale, advantages, tokenizer.pad_token_id)
    assert torch.nn.functional.cosine_similarity(g_fresh, g_stale, dim=0) < 0.999
