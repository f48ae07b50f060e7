"""The algorithm table (docs/design.md §2.5) against the reference flags transcribed from
Trinity-RFT 0.6.0's algorithm API."""

from __future__ import annotations

import dataclasses

import pytest

import trl_ext
from trl_ext.losses import ENTROPY_FNS, KL_FNS, POLICY_LOSSES

# name: (use_critic, use_reference, compute_advantage_in_trainer, can_balance_batch, schema) in Trinity-RFT 0.6.0;
# trl_ext records the flags that mean something for a TRL trainer (use_critic, use_reference, schema)
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
    "m2po": (False, False, False, True, "experience"),  # Trinity-RFT main (not in 0.6.0): M2POAlgorithm
    "gigpo": (False, True, False, True, "experience"),
    "dapo": (False, False, False, True, "experience"),
    "cpt": (False, False, False, True, "cpt"),
    "jsd": (False, False, True, True, "experience"),
    "grpo_verl": (False, True, True, True, "experience"),
}

# Trinity-RFT 0.6.0's `default_config()` of the last records (trinity/algorithm/algorithm.py: DAPOAlgorithm,
# CPTAlgorithm's SFTAlgorithm, JSDAlgorithm, GRPOverlAlgorithm), copied from the reference: the records must say the
# same. CPT's has no repeat_times, advantage or KL penalty (an SFT schema); grpo_verl's `grpo` is computed in verl's
# trainer, which is trl_ext's `grpo_verl` estimator.
TRINITY_DEFAULT_CONFIGS = {
    "dapo": {"repeat_times": 16, "advantage_fn": "grpo", "sample_strategy": "default", "policy_loss_fn": "ppo",
             "kl_penalty_fn": "none", "kl_loss_fn": "none", "entropy_loss_fn": "default"},
    "cpt": {"sample_strategy": "default", "policy_loss_fn": "sft", "kl_loss_fn": "none", "entropy_loss_fn": "none"},
    "jsd": {"repeat_times": 8, "advantage_fn": "jsd", "sample_strategy": "default", "policy_loss_fn": "ppo",
            "kl_penalty_fn": "none", "kl_loss_fn": "none", "entropy_loss_fn": "none"},
    "grpo_verl": {"repeat_times": 2, "advantage_fn": "grpo_verl", "sample_strategy": "default",
                  "policy_loss_fn": "ppo", "kl_penalty_fn": "none", "kl_loss_fn": "k2", "entropy_loss_fn": "default"},
}  # fmt: skip


# verl 0.9's policy losses as algorithms (not rows of Trinity-RFT's table): each trains its loss, on GRPO's group
# advantage except GPG (verl's `gpg` estimator), with no critic, reference model or KL term.
VERL_ALGORITHMS = {"gpg": "gpg", "geo_mean": "grpo", "dro": "grpo", "clip_cov": "grpo", "kl_cov": "grpo"}
VERL_ALGORITHMS |= {"dppo_tv": "grpo", "dppo_kl": "grpo"}
# trl_ext's own records beyond the references' tables: the asynchronous trainer's (TRL's AsyncGRPOTrainer)
OWN_ALGORITHMS = {"async_grpo": ("ppo", "grpo", "async")}
# TRL 1.16's own methods: its newest GRPO loss types (registered losses on the grpo family) and its experimental
# trainers, each a family of its own (policy loss None: the family's objective, ported)
TRL_ALGORITHMS = {
    "vespo": ("vespo", "grpo", "grpo"),
    "luspo": ("luspo", "grpo", "grpo"),
    "a2po": ("a2po", None, "a2po"),
    "gkd": (None, None, "gkd"),
    "gold": (None, None, "gold"),
    "iw_opd": (None, None, "iw_opd"),
    "sdft": (None, None, "sdft"),
    "sdpo": (None, None, "sdpo"),
    "tpo": ("tpo", None, "tpo"),
    "online_dpo": ("dpo", None, "online_dpo"),
}


def test_table_has_exactly_the_reference_algorithms():
    assert len(REFERENCE_FLAGS) == 25
    assert set(trl_ext.ALGORITHMS) == set(REFERENCE_FLAGS) | set(VERL_ALGORITHMS) | set(OWN_ALGORITHMS) | set(
        TRL_ALGORITHMS
    )


@pytest.mark.parametrize("name", sorted(TRL_ALGORITHMS))
def test_trl_methods_name_their_parts_and_family(name):
    spec = trl_ext.get_algorithm(name)
    assert (spec.policy_loss_fn, spec.advantage_fn, spec.trainer) == TRL_ALGORITHMS[name]
    assert spec.paper is not None and spec.trainer_class.__name__.endswith("Trainer")
    if spec.policy_loss_fn is None:  # the family's own objective, a ported loss in trl_ext.losses
        assert spec.loss_name == spec.family.objective and spec.loss_name.startswith("trl_ext.losses.")


@pytest.mark.parametrize("name", sorted(OWN_ALGORITHMS))
def test_own_records_name_their_parts_and_family(name):
    spec = trl_ext.get_algorithm(name)
    assert (spec.policy_loss_fn, spec.advantage_fn, spec.trainer) == OWN_ALGORITHMS[name]


@pytest.mark.parametrize("name", sorted(VERL_ALGORITHMS))
def test_verl_algorithms_train_their_loss(name):
    spec = trl_ext.get_algorithm(name)
    assert (spec.policy_loss_fn, spec.advantage_fn) == (name, VERL_ALGORITHMS[name])
    assert not spec.use_critic and not spec.use_reference and spec.kl_loss_fn == "none"
    assert spec.trainer_class.__name__.endswith("Trainer") and spec.paper is not None


@pytest.mark.parametrize("name", sorted(REFERENCE_FLAGS))
def test_flags_match_reference(name):
    spec = trl_ext.get_algorithm(name)
    assert isinstance(spec, trl_ext.AlgorithmSpec)
    assert spec.name == name
    critic, reference, _, _, schema = REFERENCE_FLAGS[name]
    assert (spec.use_critic, spec.use_reference, spec.schema) == (critic, reference, schema)
    assert type(spec.use_critic) is bool and type(spec.use_reference) is bool
    # Trinity-RFT's explorer / trainer split flags have no meaning for a TRL trainer: not recorded, no packed strings
    assert not hasattr(spec, "compute_advantage_in_trainer") and not hasattr(spec, "can_balance_batch")
    assert not hasattr(spec, "flags")


@pytest.mark.parametrize("name", sorted(TRINITY_DEFAULT_CONFIGS))
def test_default_config_is_the_references(name):
    reference = TRINITY_DEFAULT_CONFIGS[name]
    assert {key: trl_ext.get_algorithm(name).default_config()[key] for key in reference} == reference


def test_jsd_arguments_default_to_trinitys_advantage_fn_args():
    """Trinity-RFT's JSDAlgorithm sets `advantage_fn_args={"kl_coef": 1.0, "lambda_coef": 0.5}`; JSDConfig's fields
    (the `jsd` estimator's Arguments) default to the same."""
    fields = trl_ext.get_algorithm("jsd").config_class.__dataclass_fields__
    assert (fields["kl_coef"].default, fields["lambda_coef"].default, fields["jsd_temperature"].default) == (1, 0.5, 1)


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
        ("m2po", "m2po"),
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
    # and TRL's experimental trainers, which compute their own targets (A*-PO's V*) or train no advantage at all
    trl_trainers = {name for name, (_, advantage, _) in TRL_ALGORITHMS.items() if advantage is None}
    assert no_advantage == {"sft", "cpt", "dpo"} | trl_trainers
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
    "mix", "mix_chord", "on_policy_distill", "dpo", "sft", "m2po", "multi_step_grpo", "gigpo", "ppo", "dapo", "cpt",
    "jsd", "grpo_verl", *VERL_ALGORITHMS, *OWN_ALGORITHMS, *TRL_ALGORITHMS,
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


# ---- the flags drive behaviour -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", sorted(n for n, s in trl_ext.ALGORITHMS.items() if s.trainer in ("grpo", "mix", "distill"))
)
def test_repeat_times_is_the_default_group_size(name):
    spec = trl_ext.get_algorithm(name)
    field = spec.config_class.__dataclass_fields__["num_generations"]
    assert field.default == spec.repeat_times
    assert "repeat_times" in field.metadata["help"]


@pytest.mark.parametrize(
    "name", sorted(n for n, s in trl_ext.ALGORITHMS.items() if s.trainer in ("grpo", "mix", "distill"))
)
def test_use_reference_decides_whether_a_kl_term_to_a_reference_model_is_allowed(name):
    """Without a reference model (`use_reference=False`, as Trinity-RFT launches none) a KL coefficient is refused
    when the config is built, naming `beta`; with one, `beta` > 0 is a KL term (TRL then loads the reference), with
    an estimator: the record's, or one chosen where the record has none (`kl_loss_fn='none'`)."""
    spec = trl_ext.get_algorithm(name)
    settings = {"output_dir": "unused", "use_cpu": True, "bf16": False, "report_to": "none"}
    if spec.use_reference:
        estimator = {"kl_loss_fn": "k2"} if spec.kl_loss_fn == "none" else {}
        assert spec.config_class(**settings, beta=0.05, **estimator).beta == 0.05
    else:
        with pytest.raises(
            ValueError, match=rf"{spec.class_names[0]}: beta=0.05 adds a KL term .* use_reference=False"
        ):
            spec.config_class(**settings, beta=0.05)
    assert spec.config_class(**settings).beta == 0.0  # off by default either way: no reference model loaded


def test_use_critic_needs_a_family_with_a_critic():
    spec = trl_ext.get_algorithm("grpo")
    with pytest.raises(ValueError, match="use_critic=True needs a trainer family that trains a value model"):
        dataclasses.replace(spec, name="critic_grpo", use_critic=True)
    assert trl_ext.get_algorithm("ppo").use_critic and trl_ext.get_algorithm("ppo").family.uses_critic


def test_sample_strategy_is_the_familys():
    """Trinity-RFT's `sample_strategy` is `mix` exactly for the algorithms whose family mixes expert rows in."""
    mixed = {name for name, spec in trl_ext.ALGORITHMS.items() if spec.default_config()["sample_strategy"] == "mix"}
    assert mixed == {"mix", "mix_chord"}
    assert {spec.sample_strategy for spec in trl_ext.ALGORITHMS.values()} == {"mix", "default"}
