"""The asynchronous default is TRL's asynchronous objective: `trl_ext.AsyncGRPOTrainer` with its default config and
`trl.experimental.async_grpo.AsyncGRPOTrainer` give the same loss and gradient on the same packed samples, fresh
and stale (sampler log-probs μ far from π, where Trinity-RFT's dual clip would act), and the worker's default
advantages are TRL's worker's: (R − mean) / (population std + 1e-8) over a group's scored samples, 0 for a sample
no function scored and for a group with one scored sample."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from async_helpers import async_config, gradient, make_samples, packed_batch, stub_trainer
from trainer_helpers import cpu_config
from transformers import AutoModelForCausalLM
from trl.experimental.async_grpo import AsyncGRPOConfig as TRLAsyncGRPOConfig
from trl.experimental.async_grpo import AsyncGRPOTrainer as TRLAsyncGRPOTrainer

from trl_ext.async_rollout import GroupScorer
from trl_ext.toy import build_tokenizer, toy_reward
from trl_ext.trainers.asynchronous.tree_attention import use_tree_attention

ADVANTAGES = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, -1.0, 0.5, -0.5])


def _trl_worker_advantages(rewards: list[float | None]) -> list[float]:
    """TRL's worker (`async_rollout_worker.py`): the scored samples' (R − mean) / (std + 1e-8), numpy's population
    std; 0 for an unscored one."""
    values = np.array([math.nan if r is None else r for r in rewards], dtype=float)
    scored = ~np.isnan(values)
    advantages = np.zeros_like(values)
    if scored.any():
        advantages[scored] = (values[scored] - values[scored].mean()) / (values[scored].std() + 1e-8)
    return advantages.tolist()


@pytest.mark.parametrize(
    "rewards",
    [[1.0, 3.0], [0.0, 1.0, 1.0, 0.5], [None, 2.0], [None, None, 1.0, 0.0], [2.0, 2.0, 2.0], [None, None]],
    ids=["two", "four", "one-scored", "two-scored", "equal", "none-scored"],
)
def test_the_default_worker_advantages_are_trls(rewards, tmp_path):
    config = async_config(str(tmp_path))
    scorer = GroupScorer(toy_reward, advantage_fn=config.advantage_fn_name, advantage_fn_args=config.advantage_kwargs())
    values = [math.nan if r is None else r for r in rewards]
    advantages, keep = scorer.group_advantages(values, [[0]] * len(rewards), 0)
    assert advantages.tolist() == pytest.approx(_trl_worker_advantages(rewards), abs=1e-6)
    assert keep.all()


def test_trinitys_advantage_is_one_setting_away(tmp_path):
    """Rewards [1, 3]: TRL's ±1.0 by default; Trinity-RFT's ±0.7071 with its three settings."""
    settings = {"std_unbiased": True, "advantage_epsilon": 1e-6, "group_of_one": "reward"}
    for config, expected in ((async_config(str(tmp_path)), 1.0), (async_config(str(tmp_path), **settings), 0.7071)):
        scorer = GroupScorer(toy_reward, advantage_fn="grpo", advantage_fn_args=config.advantage_kwargs())
        advantages, _ = scorer.group_advantages([1.0, 3.0], [[0]] * 2, 0)
        assert advantages.tolist() == pytest.approx([-expected, expected], abs=1e-4)


def _trl_trainer(model_path: str, output_dir: str) -> TRLAsyncGRPOTrainer:
    args = cpu_config(TRLAsyncGRPOConfig, output_dir, token_budget=0)  # as `async_config` builds ours
    trainer = stub_trainer(model_path, args, trainer_class=TRLAsyncGRPOTrainer)
    use_tree_attention("cpu")  # TRL registered its flash-attention kernel under the name: attend with SDPA on CPU
    return trainer


def _loss_and_gradient(trainer, batch, ours: bool) -> tuple[float, torch.Tensor]:
    trainer.current_gradient_accumulation_steps = 1  # as the training loop sets it
    trainer.model.train()
    if ours:
        trainer.model_version = 1
        trainer._get_num_items_in_batch([batch], trainer.accelerator.device)
    loss = trainer.compute_loss(trainer.model, {k: v.clone() for k, v in batch.items()})
    loss.backward()
    return float(loss.detach()), gradient(trainer.model)


@pytest.mark.parametrize("noise", [0.0, 2.5], ids=["fresh", "stale"])
def test_the_default_update_equals_trls_async_trainer(noise, random_tiny_model, tmp_path):
    ours = stub_trainer(random_tiny_model, async_config(str(tmp_path / "ours")))
    theirs = _trl_trainer(random_tiny_model, str(tmp_path / "trl"))
    tokenizer = build_tokenizer()
    plain = AutoModelForCausalLM.from_pretrained(random_tiny_model)
    samples = make_samples(tokenizer, plain, seed=3, noise=noise)
    batch = packed_batch(samples, ADVANTAGES, tokenizer.pad_token_id)
    loss_ours, g_ours = _loss_and_gradient(ours, batch, ours=True)
    loss_trl, g_trl = _loss_and_gradient(theirs, batch, ours=False)
    assert g_trl.norm() > 0
    assert loss_ours == pytest.approx(loss_trl, rel=1e-5, abs=1e-6)
    torch.testing.assert_close(g_ours, g_trl, rtol=1e-4, atol=1e-6)
    if noise:  # the anchor can fail: Trinity-RFT's dual clip acts on these stale samples
        dual = stub_trainer(random_tiny_model, async_config(str(tmp_path / "dual"), clip_ratio_c=3.0))
        loss_dual, _ = _loss_and_gradient(dual, batch, ours=True)
        assert abs(loss_dual - loss_trl) > 1e-3
