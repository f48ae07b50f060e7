"""Every trl_ext policy loss on the asynchronous trainer: the ones it can feed give, on TRL's packed rows, exactly the
loss the library computes on the same `[B, T]` batch; the others are refused when the config is made, naming the
input they need."""

from __future__ import annotations

import pytest
import torch
from async_helpers import async_config, make_samples, packed_batch, stub_trainer
from test_async_corrections import ADVANTAGES, _grid
from transformers import AutoModelForCausalLM

from trl_ext.families import get_family
from trl_ext.losses import POLICY_LOSSES
from trl_ext.toy import build_tokenizer

MIXING = sorted(name for name in POLICY_LOSSES if "expert_mask" in POLICY_LOSSES[name].inputs())
"""The mixing losses: fed by the MIX forms, whose trainer joins expert rows (tests/trainers/test_async_mix.py)."""
FED = sorted(
    name for name in POLICY_LOSSES
    if set(POLICY_LOSSES[name].inputs()) <= set(get_family("async").loss_inputs) and name not in MIXING
)  # fmt: skip
REFUSED = sorted(set(POLICY_LOSSES) - set(FED) - set(MIXING))


def test_the_losses_split_as_expected():
    assert {"ppo", "sapo", "gspo", "cispo", "m2po", "decoupled_ppo", "sft", "topr", "opmd"} <= set(FED)
    # tpo reads expert_mask (its reference rows): every asynchronous config refuses it, AsyncMIXConfig included
    assert set(REFUSED) == {"a2po", "dpo"} and set(MIXING) == {"mix", "mix_chord", "tpo"}


@pytest.mark.parametrize("name", MIXING)
def test_a_mixing_loss_needs_a_mix_form(name, tmp_path):
    with pytest.raises(ValueError, match=f"policy_loss_fn='{name}' mixes expert demonstrations.*AsyncMIXConfig"):
        async_config(str(tmp_path), policy_loss_fn=name)


@pytest.fixture(scope="module")
def plain(random_tiny_model):
    return AutoModelForCausalLM.from_pretrained(random_tiny_model).eval()


@pytest.mark.parametrize("name", FED)
def test_each_loss_the_trainer_feeds_equals_the_librarys_on_the_same_batch(name, random_tiny_model, plain, tmp_path):
    config = async_config(str(tmp_path), policy_loss_fn=name)
    reference = config.components.for_trainer().policy_loss  # its own copy: clip_cov's generator starts alike
    trainer = stub_trainer(random_tiny_model, config)
    samples = make_samples(build_tokenizer(), plain, seed=11, noise=0.4)
    pi, mu, mask = _grid(samples, plain)
    batch = packed_batch(samples, ADVANTAGES, build_tokenizer().pad_token_id)
    trainer.model.train()
    trainer._get_num_items_in_batch([batch], trainer.accelerator.device)
    loss = trainer.compute_loss(trainer.model, batch)
    inputs = {"logprob": pi, "old_logprob": mu, "action_mask": mask, "advantages": ADVANTAGES[:, None].expand_as(pi)}
    inputs["step"] = 0
    expected, _ = reference(**{key: value for key, value in inputs.items() if key in reference.inputs()})
    assert torch.isfinite(loss)
    assert float(loss) == pytest.approx(float(expected), rel=1e-4, abs=1e-6), name
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in trainer.model.parameters())


@pytest.mark.parametrize("name", REFUSED)
def test_a_loss_the_trainer_cannot_feed_is_refused_by_name(name, tmp_path):
    needed = [key for key in POLICY_LOSSES[name].inputs() if key not in get_family("async").loss_inputs]
    with pytest.raises(ValueError, match=f"policy_loss_fn='{name}' cannot train in the async family's trainer: it "):
        async_config(str(tmp_path), policy_loss_fn=name)
    assert needed
