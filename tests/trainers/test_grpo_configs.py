"""The GRPO-family configs: fields mirror the loss's and advantage function's arguments (names, defaults, help),
TRL fields that select TRL's own loss are rejected with the field to use, and the YAML recipes parse."""

from __future__ import annotations

import dataclasses
import glob
import os

import pytest
import trl
from trainer_helpers import CPU, algorithm_classes

import trl_ext
from trl_ext.advantages import ADVANTAGE_FNS
from trl_ext.losses import POLICY_LOSSES
from trl_ext.trainers import GRPOFamilyConfig
from trl_ext.trainers.core.arguments import config_arguments
from trl_ext.trainers.core.trl_loss_fields import TRL_LOSS_FIELDS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALGORITHMS = list(algorithm_classes("grpo"))


def make(config_class, **kwargs):
    return config_class(output_dir="/tmp/trl_ext_unused", **CPU, **kwargs)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_fields_are_the_loss_and_advantage_arguments(algorithm):
    config_class = algorithm_classes("grpo")[algorithm]
    spec = trl_ext.get_algorithm(algorithm)
    assert issubclass(config_class, trl.GRPOConfig) and config_class.algorithm == algorithm
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    papers = {**dict(spec.argument_defaults), **dict(spec.paper_settings)}  # DAPO's paper clip, VESPO's TRL ε
    for component in (POLICY_LOSSES[spec.policy_loss_fn], ADVANTAGE_FNS[spec.advantage_fn]):
        # every argument, by its config name, with its default (unset in the config where it says so)
        for argument in config_arguments(component):
            field = fields[argument.field_name]
            default = None if argument.config_unset else papers.get(argument.name, argument.default)
            assert field.default == default, argument.name
    own = config_class.loss_argument_names() + config_class.advantage_argument_names()
    exposed = config_arguments(POLICY_LOSSES[spec.policy_loss_fn]) + config_arguments(ADVANTAGE_FNS[spec.advantage_fn])
    assert len(own) == len(set(own)) == len(exposed)
    if spec.advantage_fn == "grpo":  # the trainer hands it the sampling policy's log-probs when it is set
        assert fields["rank_penalty"].default is None
    # The defaults build exactly the library's default components (with the paper's arguments, DAPO's).
    config = make(config_class)
    loss = POLICY_LOSSES[spec.policy_loss_fn]
    taken = {a.name for a in config_arguments(loss)}
    assert repr(config.components.policy_loss) == repr(loss(**{k: v for k, v in papers.items() if k in taken}))
    estimator = ADVANTAGE_FNS[spec.advantage_fn]
    estimator_args = {a.name for a in config_arguments(estimator)}
    assert repr(config.components.advantage_fn) == repr(
        estimator(**{k: v for k, v in papers.items() if k in estimator_args})
    )


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_field_is_typed_and_documented(algorithm):
    config_class = algorithm_classes("grpo")[algorithm]
    own = config_class.loss_argument_names() + config_class.advantage_argument_names()
    own += [f.name for f in dataclasses.fields(GRPOFamilyConfig) if f.name not in trl.GRPOConfig.__dataclass_fields__]
    for f in dataclasses.fields(config_class):
        if f.name in own:
            assert f.type and len(f.metadata.get("help", "")) > 20, f.name
    for name in config_class.loss_argument_names() + config_class.advantage_argument_names():
        assert f"{name} (`" in config_class.__doc__, name  # TRL-style parameter list in the docstring
    assert "arXiv" in config_class.__doc__ or "Trinity" in config_class.__doc__


@pytest.mark.parametrize("algorithm", [name for name in ALGORITHMS if not trl_ext.get_algorithm(name).trl_losses])
@pytest.mark.parametrize(
    ("field", "value", "hint"),
    [
        ("loss_type", "grpo", "loss_agg_mode"),
        ("epsilon", 0.3, "trl_ext.GRPOConfig(loss_type="),
        ("epsilon_high", 0.28, ""),
        ("importance_sampling_level", "sequence", "GSPOTrainer"),
        ("sapo_temperature_neg", 2.0, "tau_neg"),
    ],
)
def test_unused_trl_fields_are_errors_naming_what_to_use(algorithm, field, value, hint):
    config_class = algorithm_classes("grpo")[algorithm]
    with pytest.raises(ValueError, match=rf"{config_class.__name__}: {field}=") as err:
        make(config_class, **{field: value})
    assert hint in str(err.value)
    default = trl.GRPOConfig.__dataclass_fields__[field].default
    if field in TRL_LOSS_FIELDS and default is not None:  # TRL's own loss parameters: an error even at the default
        with pytest.raises(ValueError, match=rf"{config_class.__name__}: {field}=.*even at TRL's default"):
            make(config_class, **{field: default})
    else:  # a field whose TRL default is None (unset) is harmless
        make(config_class, **{field: default})


def test_clip_hints_name_the_algorithms_own_fields():
    with pytest.raises(ValueError, match="use `clip_range` / `clip_range_low` / `clip_range_high`"):
        make(trl_ext.CISPOConfig, epsilon_high=0.28)
    with pytest.raises(ValueError, match="use `clip_ratio_c`"):
        make(trl_ext.ReinforcePlusPlusConfig, delta=2.0)
    with pytest.raises(ValueError, match="its arguments are: tau_pos, tau_neg"):
        make(trl_ext.SAPOConfig, epsilon=0.1)


@pytest.mark.parametrize(
    ("config_class", "kwargs", "message"),
    [
        (trl_ext.SAPOConfig, {"tau_neg": 0.5}, r"SAPOConfig \(policy loss\): sapo: tau_neg=0.5 .* >= tau_pos"),
        (trl_ext.SPPOConfig, {"sppo_epsilon": -1.0}, r"sppo_epsilon=-1.0 is not valid; must be > 0"),
        (trl_ext.RECConfig, {"rec_clip_mode": "both"}, r"rec_clip_mode='both' is not valid; must be one of"),
        (trl_ext.RECConfig, {"rec_weight": "gspo_importance_sampling"}, r"gspo-one-side"),
        (trl_ext.GRPOConfig, {"loss_agg_mode": "mean"}, r"loss_agg_mode='mean' is not valid; must be one of"),
        (trl_ext.GRPOConfig, {"clip_ratio_c": 1.0}, r"clip_ratio_c=1.0 is not valid"),
        (trl_ext.GRPOConfig, {"advantage_epsilon": 0.0}, r"advantage function.*advantage_epsilon=0.0"),
        (trl_ext.OPMDConfig, {"opmd_baseline": "max"}, r"opmd_baseline='max' is not valid"),
        (
            trl_ext.GRPOConfig,
            {"kl_loss_fn": "k9", "beta": 0.1},
            r"GRPOConfig: kl_loss_fn='k9' is not valid; must be one of",
        ),
        (trl_ext.GRPOConfig, {"beta": 0.1, "kl_loss_fn": "none"}, r"beta=0.1 adds a KL term but kl_loss_fn='none'"),
        (trl_ext.GRPOConfig, {"entropy_coef": 0.01, "entropy_loss_fn": "none"}, r"entropy_loss_fn='none'"),
        (trl_ext.GRPOConfig, {"beta": 0.1, "adaptive_kl": True}, r"adaptive_kl=True needs target_kl and kl_horizon"),
        (trl_ext.RLOOConfig, {"scale_rewards": "batch"}, r"advantage function `rloo` does not divide by a reward std"),
        (trl_ext.GRPOConfig, {"scale_rewards": "none", "std_cal_level": "batch"}, r"contradict each other"),
        (trl_ext.GRPOConfig, {"scale_rewards": "median"}, r"scale_rewards='median' is not valid; must be one of"),
        (
            trl_ext.SAPOConfig,
            {"use_adaptive_entropy": True, "entropy_loss_fn": "none"},
            r"use_adaptive_entropy=True is set but entropy_loss_fn",
        ),
        (trl_ext.GRPOConfig, {"loss_type": "dapo", "clip_ratio_c": 4.0}, r"clip_ratio_c=4.0 configures trl_ext's"),
        (trl_ext.GRPOConfig, {"loss_type": "grpx"}, r"loss_type='grpx' is not valid; must be one of"),
        (trl_ext.SAPOConfig, {"num_generations": 1, "per_device_train_batch_size": 4}, r"at least 2 generations"),
    ],
)
def test_bad_arguments_fail_at_config_construction(config_class, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(config_class, **kwargs)


def test_renamed_fields_reach_the_loss():
    assert make(trl_ext.SPPOConfig, sppo_epsilon=0.5).components.policy_loss.epsilon == 0.5
    rec = make(trl_ext.RECConfig, rec_clip_mode="ring", rec_epsilon_high_prime=3.0).components.policy_loss
    assert (rec.clip_mode, rec.epsilon_high_prime) == ("ring", 3.0)
    assert make(trl_ext.OPMDConfig, advantage_tau=2.0, tau=0.5).components.advantage_fn.tau == 2.0
    assert make(trl_ext.OPMDConfig, advantage_tau=2.0, tau=0.5).components.policy_loss.tau == 0.5
    kl = make(trl_ext.GRPOConfig, beta=0.2, kl_loss_fn="low_var_kl").components.kl_fn
    assert (kl.name, kl.kl_coef) == ("low_var_kl", 0.2)
    assert make(trl_ext.GRPOConfig).components.kl_fn.name == "none"  # beta = 0: no KL term, no reference model


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml"))))
def test_recipes_parse_into_their_config(path):
    from trl_ext.scripts import script_for

    algorithm = os.path.basename(path)[: -len(".yaml")]
    trl_ext.get_algorithm(algorithm)  # every recipe is an algorithm's
    configs = {name: s.config_class for name, s in trl_ext.ALGORITHMS.items() if s.has_trainer}
    argv = ["--config", path, "--output_dir", "/tmp/trl_ext_unused", "--use_cpu", "--bf16", "false"]
    script = script_for(algorithm)  # the script of the family's data parses it
    parser = script.make_parser(algorithm, argv)
    config = parser.parse_args_and_config(argv)[1]
    assert type(config) is configs[algorithm]
    import yaml

    with open(path) as f:
        recipe = yaml.safe_load(f)
    for key, value in recipe.items():
        assert getattr(config, key) == value, key
    if trl_ext.get_algorithm(algorithm).policy_loss_fn is not None:  # else its family's own objective
        assert config.components.policy_loss.name in trl_ext.losses.POLICY_LOSSES  # the recipe builds its loss
