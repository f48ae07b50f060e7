"""A config resolves its trained parts once (`config.components`, `trl_ext.trainers.core.resolved`), and its trainer
trains a copy of that object: building a config, its trainer and a training step constructs the policy loss at most
twice (once for most; twice for critic PPO, whose config checks around TRL's with a stand-in group size, and for DPO,
whose config checks its loss before TRL's checks normalize the fields). A config changed
after construction builds its parts again, and two trainers from one config do not share a stateful part."""

from __future__ import annotations

import pickle

import pytest
import torch
from test_dpo_trainer import _trainer as dpo_trainer
from test_grpo_trainers import make_trainer as grpo_trainer
from test_mix_trainers import _trainer as mix_trainer
from test_on_policy_distill import _trainer as distill_trainer
from test_ppo_trainer import make_trainer as ppo_trainer
from test_sft_trainer import _trainer as sft_trainer
from trainer_helpers import cpu_config, logged, toy_trainer

import trl_ext
from trl_ext.losses import PolicyLoss


@pytest.fixture
def constructions(monkeypatch) -> list[str]:
    """The class name of every policy loss constructed while the test runs (sub-losses included: MIX's parts)."""
    built: list[str] = []
    init = PolicyLoss.__init__

    def counting(self, *args, **kwargs):
        built.append(type(self).__name__)
        init(self, *args, **kwargs)

    monkeypatch.setattr(PolicyLoss, "__init__", counting)
    return built


CASES = {
    "sapo": (lambda m, t, tmp: grpo_trainer("sapo", m, str(tmp), max_steps=1), ["SAPOPolicyLoss"]),
    "grpo with TRL's loss": (
        lambda m, t, tmp: grpo_trainer("grpo", m, str(tmp), max_steps=1, loss_type="dr_grpo"),
        ["TRLGRPOLoss"],
    ),
    "mix_chord": (
        lambda m, t, tmp: mix_trainer(m, tmp, cls=trl_ext.MIXCHORDTrainer, max_steps=1),
        ["MIXCHORDPolicyLoss", "PPOPolicyLoss", "SFTPhiLoss"],
    ),
    "on_policy_distill": (lambda m, t, tmp: distill_trainer(m, t, tmp, max_steps=1), ["PPOPolicyLoss"]),
    "ppo": (lambda m, t, tmp: ppo_trainer(m, tmp, max_steps=1), ["PPOPolicyLoss"] * 2),
    "dpo": (lambda m, t, tmp: dpo_trainer(m, tmp), ["TRLDPOLoss"] * 2),
    "sft": (lambda m, t, tmp: sft_trainer(m, tmp), ["SFTLoss"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_config_trainer_and_step_build_the_policy_loss_once(case, constructions, tiny_model, tiny_teacher, tmp_path):
    make, expected = CASES[case]
    trainer = make(tiny_model, tiny_teacher, tmp_path)
    trainer.train()
    assert trainer.state.global_step == 1 and logged(trainer, "loss")
    assert constructions == expected
    # the trainer's parts are a copy of the config's, not a second build
    assert type(trainer.policy_loss_fn) is type(trainer.args.components.policy_loss)
    assert trainer.policy_loss_fn is not trainer.args.components.policy_loss


def test_a_changed_field_rebuilds_the_parts(constructions, tmp_path):
    config = cpu_config(trl_ext.SAPOConfig, str(tmp_path), kl_loss_fn="k2", beta=0.1)
    first = config.components
    assert config.components is first and len(constructions) == 1  # asked again: the same object
    assert first.kl_fn.kl_coef == 0.1 and first.policy_loss.tau_pos == 1.0
    config.beta, config.tau_pos = 0.3, 1.02  # changed after construction: never trained stale
    assert config.components.kl_fn.kl_coef == 0.3 and config.components.policy_loss.tau_pos == 1.02
    assert len(constructions) == 2
    config.tau_pos = 2.0  # now invalid (SAPO needs tau_neg >= tau_pos): refused when the parts are next built
    with pytest.raises(ValueError, match=r"SAPOConfig \(policy loss\): sapo: tau_neg=1.05 is not valid"):
        config.components  # noqa: B018


def test_trainers_of_one_config_do_not_share_state(tiny_model, tmp_path):
    """The adaptive KL coefficient of the reward penalty moves with training: one trainer's, never the config's."""
    config = cpu_config(
        trl_ext.GRPOConfig,
        str(tmp_path),
        max_steps=1,
        kl_penalty_fn="k1",
        kl_penalty_fn_args={"adaptive": True, "kl_coef": 0.05, "target_kl": 1e-6, "horizon": 10},
    )
    first = toy_trainer(trl_ext.GRPOTrainer, config, tiny_model)
    first.train()
    assert first.kl_penalty_fn.kl_coef != 0.05  # the controller adapted in training
    assert config.components.kl_penalty_fn.kl_coef == 0.05  # the config's own parts are untouched
    second = toy_trainer(trl_ext.GRPOTrainer, config, tiny_model)
    assert second.kl_penalty_fn.kl_coef == 0.05 and second.kl_penalty_fn is not first.kl_penalty_fn


def test_a_pickled_config_rebuilds_its_parts(tmp_path):
    """The Trainer saves its arguments with torch.save: the built parts are not pickled, and come back on use."""
    config = cpu_config(trl_ext.CISPOConfig, str(tmp_path), clip_range_high=3.0)
    state = pickle.dumps(config)
    assert b"CISPOPolicyLoss" not in state
    restored = pickle.loads(state)
    assert restored.components.policy_loss.clip_range_high == 3.0
    loaded = torch.load(_saved(config, tmp_path), weights_only=False)
    assert loaded.components.policy_loss.clip_range_high == 3.0


def _saved(config, tmp_path) -> str:
    path = str(tmp_path / "training_args.bin")
    torch.save(config, path)
    return path
