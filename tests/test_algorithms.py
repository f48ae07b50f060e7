"""The algorithm table (docs/design.md §2.5) against the reference flags transcribed from
Trinity-RFT 0.6.0's algorithm API."""

from __future__ import annotations

import dataclasses

import pytest

import trl_ext
from trl_ext.losses import ENTROPY_FNS, KL_FNS, POLICY_LOSSES

# name: (use_critic, use_reference, compute_advantage_in_trainer, can_balance_batch, schema)
REFERENCE_FLAGS: dict[str, tuple[bool, bool, bool, bool, str]] = {
    "sft": (False, False, False, True, "sft"),
    "ppo": (True, True, True, True, "experience"),
    "grpo": (False, True, False, True, "experience"),
    "reinforceplusplus": (False, True, True, True, "experience"),
    "rloo": (False, True, True, True, "experience"),
    "opmd": (False, True, False, True, "experience"),
    "asymre": (False, False, False, True, "experience"),
    "dpo": (False, True, False, False, "dpo"),
    "topr": (False, True, False, True, "experience"),
    "cispo": (False, True, False, True, "experience"),
    "gspo": (False, True, False, True, "experience"),
    "sapo": (False, True, False, True, "experience"),
    "mix": (False, True, False, True, "experience"),
    "mix_chord": (False, True, False, True, "experience"),
    "raft": (False, False, False, True, "experience"),
    "sppo": (False, False, False, True, "experience"),
    "rec": (False, True, False, True, "experience"),
    "multi_step_grpo": (False, True, False, True, "experience"),
    "on_policy_distill": (False, False, True, True, "experience"),
}


def test_table_has_exactly_the_reference_algorithms():
    assert len(REFERENCE_FLAGS) == 19
    assert set(trl_ext.ALGORITHMS) == set(REFERENCE_FLAGS)


@pytest.mark.parametrize("name", sorted(REFERENCE_FLAGS))
def test_flags_match_reference(name):
    spec = trl_ext.get_algorithm(name)
    assert isinstance(spec, trl_ext.AlgorithmSpec)
    assert spec.name == name
    got = (spec.use_critic, spec.use_reference, spec.compute_advantage_in_trainer, spec.can_balance_batch, spec.schema)
    assert got == REFERENCE_FLAGS[name]
    for flag in got[:4]:
        assert type(flag) is bool


@pytest.mark.parametrize("name", sorted(REFERENCE_FLAGS))
def test_default_components_exist(name):
    spec = trl_ext.get_algorithm(name)
    assert spec.policy_loss_fn in POLICY_LOSSES
    assert spec.kl_loss_fn in KL_FNS
    assert spec.kl_penalty_fn in KL_FNS
    assert spec.entropy_loss_fn in ENTROPY_FNS
    assert isinstance(spec.repeat_times, int) and spec.repeat_times >= 1
    config = spec.default_config()
    assert config == {
        "repeat_times": spec.repeat_times,
        "sample_strategy": spec.sample_strategy,
        "policy_loss_fn": spec.policy_loss_fn,
        "advantage_fn": spec.advantage_fn,
        "kl_penalty_fn": spec.kl_penalty_fn,
        "kl_loss_fn": spec.kl_loss_fn,
        "entropy_loss_fn": spec.entropy_loss_fn,
    }


@pytest.mark.parametrize(
    ("name", "policy"),
    [
        ("sapo", "sapo"),
        ("gspo", "gspo"),
        ("cispo", "cispo"),
        ("grpo", "ppo"),
        ("dpo", "dpo"),
        ("mix", "mix"),
        ("mix_chord", "mix_chord"),
        ("sft", "sft"),
        ("raft", "sft"),
        ("rec", "rec"),
        ("topr", "topr"),
        ("sppo", "sppo"),
        ("opmd", "opmd"),
        ("asymre", "opmd"),
    ],
)
def test_policy_loss_choice(name, policy):
    assert trl_ext.get_algorithm(name).policy_loss_fn == policy


def test_mix_algorithms_use_mix_entropy():
    for name in ("mix", "mix_chord"):
        assert trl_ext.get_algorithm(name).entropy_loss_fn == "mix"


def test_advantage_fns_exist():
    from trl_ext import advantages

    for name, spec in trl_ext.ALGORITHMS.items():
        if spec.advantage_fn is None or spec.advantage_fn == "ppo":  # ppo needs a critic (GAE)
            continue
        assert spec.advantage_fn in advantages.ADVANTAGE_FNS, name


def test_rl_algorithms_have_an_advantage():
    """Every algorithm on rollouts has one. RAFT's is trl_ext's best-of-group selection `raft` (the reference's
    table has none: Trinity-RFT selects RAFT's experiences outside the advantage step), so that the record names
    what its trainer builds."""
    no_advantage = {name for name, spec in trl_ext.ALGORITHMS.items() if spec.advantage_fn is None}
    assert no_advantage == {"sft", "dpo"}
    assert trl_ext.get_algorithm("raft").advantage_fn == "raft"


@pytest.mark.parametrize("bad", ["grpo2", "GRPO", "", "trinity"])
def test_unknown_algorithm(bad):
    with pytest.raises(ValueError, match=f"unknown algorithm {bad!r}") as info:
        trl_ext.get_algorithm(bad)
    for name in REFERENCE_FLAGS:
        assert name in str(info.value)


def test_unhashable_algorithm_name():
    with pytest.raises(ValueError, match="unknown algorithm"):
        trl_ext.get_algorithm(["grpo"])


WITH_TRAINER = {
    "grpo", "gspo", "cispo", "sapo", "topr", "sppo", "rec", "opmd", "asymre", "reinforceplusplus", "rloo", "raft",
    "mix", "mix_chord", "on_policy_distill", "dpo",
}  # fmt: skip


def test_which_algorithms_have_a_trainer():
    assert {name for name, spec in trl_ext.ALGORITHMS.items() if spec.has_trainer} == WITH_TRAINER


@pytest.mark.parametrize("name", sorted(set(REFERENCE_FLAGS) - WITH_TRAINER))
def test_no_trainer_yet(name):
    spec = trl_ext.get_algorithm(name)
    for attribute in ("trainer_class", "config_class"):
        with pytest.raises(NotImplementedError, match=f"algorithm {name!r} has no trainer yet") as info:
            getattr(spec, attribute)
        assert f"get_policy_loss({spec.policy_loss_fn!r})" in str(info.value)


def test_spec_is_frozen():
    spec = trl_ext.get_algorithm("grpo")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.use_critic = True
