"""Config validation: every trl_ext field is checked on its own at construction (a ValueError naming the config
class, the field, the bad value), `kl_loss_fn="none"` turns the KL term off in every config, and the TRL fields
that configure TRL's own loss are errors whenever they are given (even at TRL's default), in Python, on the command
line and in a YAML `--config`; the configs still deep-copy, pickle and dump to a dict that re-loads."""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
import re
import typing

import pytest
import torch
import trl
from trainer_helpers import CPU, ROLLOUT_FAMILIES, algorithm_classes

import trl_ext
from trl_ext.advantages import get_advantage_fn
from trl_ext.cli import describe_algorithm
from trl_ext.trainers.core.documented_defaults import DocumentedDefault
from trl_ext.trainers.core.model_card import field_default
from trl_ext.trainers.core.trl_loss_fields import TRL_LOSS_FIELDS

CONFIGS = {**algorithm_classes(*ROLLOUT_FAMILIES), "dpo": trl_ext.DPOConfig}
GRPO_FAMILY = list(algorithm_classes(*ROLLOUT_FAMILIES))
HAS_DUPLICATE_EXPERIENCES = "duplicate_experiences" in get_advantage_fn("grpo").default_args()


@pytest.fixture
def make(tmp_path):
    def make(config_class, **kwargs):
        return config_class(**{"output_dir": str(tmp_path), **CPU, **kwargs})

    return make


def kl_field(config_class) -> str:
    """The field of the KL-to-reference coefficient: `beta` (GRPO family), `kl_coef` (DPO)."""
    return "kl_coef" if issubclass(config_class, trl.DPOConfig) else "beta"


def raises_naming(config_class, field: str, value=..., match: str = ""):
    """pytest.raises(ValueError) whose message names the config class and `field` (with `value`, when given)."""
    named = f"{field}={value!r}" if value is not ... else field
    return pytest.raises(ValueError, match=rf"^{config_class.__name__}\b.*{re.escape(named)}.*{match}")


# ---------------------------------------------------------------------------------------------------------------
# 1. kl_loss_fn="none" turns the KL term off, whatever the default coefficient
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", list(CONFIGS))
def test_kl_loss_fn_none_turns_the_kl_term_off(make, algorithm):
    config_class = CONFIGS[algorithm]
    name = kl_field(config_class)
    config = make(config_class, kl_loss_fn="none")
    assert getattr(config, name) == 0 and type(getattr(config, name)) is float
    assert config.components.kl_fn.name == "none"
    assert make(config_class, kl_loss_fn="none", **{name: 0.0}).components.kl_fn.name == "none"
    # (an algorithm without a reference model refuses any KL coefficient for that reason first)
    refusal = "kl_loss_fn='none'" if trl_ext.get_algorithm(algorithm).use_reference else "use_reference=False"
    with raises_naming(config_class, name, 0.1, refusal):
        make(config_class, kl_loss_fn="none", **{name: 0.1})
    # the explicit documented default counts as set: it contradicts "none"
    documented = config_class.__dataclass_fields__[name].default
    if documented != 0:
        with raises_naming(config_class, name, float(documented), refusal):
            make(config_class, kl_loss_fn="none", **{name: float(documented)})


def test_dpo_kl_loss_fn_none_with_the_default_coefficient():
    """The failing case of the brief: kl_coef defaults to 0.001, and `kl_loss_fn="none"` alone turns it off."""
    config = trl_ext.DPOConfig(output_dir="/tmp/trl_ext_unused", **CPU, kl_loss_fn="none")
    assert config.kl_coef == 0.0 and config.components.kl_fn.name == "none"
    # no per-token reference log-probs needed any more: precompute_ref_log_probs is fine
    trl_ext.DPOConfig(output_dir="/tmp/trl_ext_unused", **CPU, kl_loss_fn="none", precompute_ref_log_probs=True)


@pytest.mark.parametrize("algorithm", list(CONFIGS))
def test_kl_coefficient_defaults_are_documented_and_resolved(make, algorithm):
    config_class = CONFIGS[algorithm]
    name = kl_field(config_class)
    f = config_class.__dataclass_fields__[name]
    expected = 0.001 if algorithm == "dpo" else 0.0  # every GRPO-family config keeps TRL's beta=0.0
    assert isinstance(f.default, DocumentedDefault) and f.default == expected
    assert repr(field_default(f)) == repr(expected)  # what `trl-ext list` and the model card print
    assert repr(expected) in f.metadata["help"]
    config = make(config_class)
    assert getattr(config, name) == expected and type(getattr(config, name)) is float  # a plain float once built
    assert config.components.kl_fn.name == ("k2" if expected else "none")
    assert make(config_class, **{name: expected}).components.kl_fn.kl_coef == expected  # explicit default: same run


def test_trl_ext_list_shows_the_real_kl_default():
    dpo = describe_algorithm("dpo").split("settings    ")[1]
    assert "kl_coef=0.001" in dpo and "None" not in dpo


def test_kl_loss_fn_none_on_the_command_line():
    parser = trl.TrlParser((trl_ext.DPOConfig,))
    base = ["--output_dir", "/tmp/trl_ext_unused", "--use_cpu", "--bf16", "false", "--report_to", "none"]
    (config,) = parser.parse_args_and_config([*base, "--kl_loss_fn", "none"])
    assert config.kl_coef == 0.0
    with pytest.raises(ValueError, match=r"DPOConfig: kl_coef=0.001 adds a KL term but kl_loss_fn='none'"):
        parser.parse_args_and_config([*base, "--kl_loss_fn", "none", "--kl_coef", "0.001"])
    (config,) = trl.TrlParser((trl_ext.SAPOConfig,)).parse_args_and_config([*base, "--kl_loss_fn", "none"])
    assert config.beta == 0.0


# ---------------------------------------------------------------------------------------------------------------
# 2. TRL fields of TRL's own loss: errors whenever given; switches: errors when turned on
# ---------------------------------------------------------------------------------------------------------------

TRL_GRPO_DEFAULTS = {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}


ALGORITHM_CONFIGS = [name for name in GRPO_FAMILY if not trl_ext.get_algorithm(name).trl_losses]


def _trl_value(field):
    default = TRL_GRPO_DEFAULTS[field]
    return default if default is not None else 1.5  # None (TRL's "off") is indistinguishable from unset


@pytest.mark.parametrize("algorithm", ALGORITHM_CONFIGS)
@pytest.mark.parametrize("field", list(TRL_LOSS_FIELDS))
def test_trl_loss_fields_are_errors_even_at_trls_default(make, algorithm, field):
    config_class = algorithm_classes(*ROLLOUT_FAMILIES)[algorithm]
    value = _trl_value(field)
    with raises_naming(config_class, field, value, "does not use"):
        make(config_class, **{field: value})
    assert config_class.__dataclass_fields__[field].default is None
    assert (
        "The algorithms' configs (SAPOConfig, ...): not used"
        in config_class.__dataclass_fields__[field].metadata["help"]
    )


@pytest.mark.parametrize("field", list(TRL_LOSS_FIELDS))
def test_grpo_config_trains_trls_loss_when_a_trl_loss_field_is_set(make, field):
    """`trl_ext.GRPOConfig` is the config a `trl.GRPOConfig` user swaps in: a TRL loss field selects TRL's loss."""
    value = _trl_value(field)
    config = make(trl_ext.GRPOConfig, **{field: value})
    assert config.uses_trl_loss and config.policy_loss_name == "trl_grpo"
    assert getattr(config.components.policy_loss, field) == value
    assert config.kl_loss_fn == "k3"  # TRL's estimator
    assert config.components.advantage_fn.epsilon == 1e-4  # TRL's (R - mean) / (std + 1e-4)
    assert config.advantage_epsilon == 1e-4  # and the config says so (the model card, the logged dict)
    assert make(trl_ext.GRPOConfig, **{field: value}, advantage_epsilon=1e-3).components.advantage_fn.epsilon == 1e-3
    assert config.to_dict()[field] == value  # kept in the logged dict (it re-loads)
    plain = make(trl_ext.GRPOConfig)
    assert not plain.uses_trl_loss and plain.policy_loss_name == "ppo" and plain.kl_loss_fn == "k2"
    assert field not in plain.to_dict()


@pytest.mark.parametrize("algorithm", GRPO_FAMILY)
def test_trl_code_sees_trls_defaults(make, algorithm):
    """After construction the TRL loss fields hold TRL's defaults, so TRL's own code reads valid values."""
    config = make(algorithm_classes(*ROLLOUT_FAMILIES)[algorithm])
    for field in TRL_LOSS_FIELDS:
        assert getattr(config, field) == TRL_GRPO_DEFAULTS[field], field


def test_trl_loss_fields_on_the_command_line_and_in_yaml(tmp_path):
    base = ["--output_dir", str(tmp_path), "--use_cpu", "--bf16", "false", "--report_to", "none"]
    parser = trl.TrlParser((trl_ext.SAPOConfig,))
    with pytest.raises(ValueError, match=r"SAPOConfig: loss_type='dapo' is a trl.GRPOConfig field"):
        parser.parse_args_and_config([*base, "--loss_type", "dapo"])
    with pytest.raises(ValueError, match=r"SAPOConfig: epsilon=0.2 .*its arguments are: tau_pos"):
        parser.parse_args_and_config([*base, "--epsilon", "0.2"])
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("tau_neg: 1.1\nsapo_temperature_neg: 1.05\n")
    with pytest.raises(ValueError, match=r"SAPOConfig: sapo_temperature_neg=1.05 .*tau_neg"):
        parser.parse_args_and_config([*base, "--config", str(recipe)])
    recipe.write_text("tau_neg: 1.1\nuse_liger_kernel: true\n")  # TRL's options around the loss are taken
    parser = trl.TrlParser((trl_ext.SAPOConfig,))  # (a parser keeps the defaults of the last --config file)
    (config,) = parser.parse_args_and_config([*base, "--config", str(recipe)])
    assert config.tau_neg == 1.1 and config.loss_type == "dapo" and config.use_liger_kernel


@pytest.mark.parametrize(
    "kwargs",
    [
        {"loss_type": "ipo"},
        {"loss_type": ["sigmoid", "ipo"], "loss_weights": [1.0, 0.5]},
        {"ld_alpha": 0.5},
        {"f_divergence_type": "forward_kl"},
        {"f_divergence_type": "alpha_divergence", "f_alpha_divergence_coef": 0.3},
        {"loss_type": "discopop", "discopop_tau": 0.1},
        {"use_weighting": True},
        {"precompute_ref_log_probs": True},
    ],
)
def test_dpo_config_takes_every_trl_loss_option(make, kwargs):
    config = make(trl_ext.DPOConfig, **kwargs)
    loss = config.components.policy_loss
    for field, value in kwargs.items():
        if field == "loss_type":  # the loss keeps the list of loss types as a tuple
            assert loss.loss_type == tuple(value if isinstance(value, list) else [value])
        elif field == "loss_weights":
            assert list(loss.loss_weights) == value
        elif field != "precompute_ref_log_probs":
            assert getattr(loss, field) == value, field
    if "precompute_ref_log_probs" in kwargs:  # the KL term needs per-token reference log-probs: off by default
        assert config.kl_coef == 0.0


@pytest.mark.parametrize(
    ("field", "value"),
    [("loss_weights", [True]), ("use_weighting", 1), ("loss_type", "dpo"), ("ld_alpha", 1.5)],
)
def test_dpo_bad_loss_options_name_the_field(make, field, value):
    with pytest.raises(ValueError, match=rf"DPOConfig.*{field}="):
        make(trl_ext.DPOConfig, **{field: value})


def _reload(config):
    d = config.to_dict()
    d.pop("generation_batch_size", None)  # TRL's own: set together with steps_per_generation, not re-loadable
    return type(config)(**d)


@pytest.mark.parametrize("algorithm", list(CONFIGS))
def test_dumped_config_reloads_and_copies(make, tmp_path, algorithm):
    config_class = CONFIGS[algorithm]
    config = make(config_class, kl_loss_fn="none")
    d = config.to_dict()
    if algorithm != "dpo":  # unset TRL loss fields are left out (DPO's loss fields are all TRL's, kept)
        assert not set(TRL_LOSS_FIELDS) & set(d)
    assert "kl_loss_fn" in d and d[kl_field(config_class)] == 0.0
    reloaded = _reload(config)
    assert reloaded.to_dict() == d
    for copied in (copy.deepcopy(config), pickle.loads(pickle.dumps(config))):
        assert copied.to_dict() == d and copied.loss_type == config.loss_type
    torch.save(config, tmp_path / "training_args.bin")  # what the Trainer writes with each checkpoint
    loaded = torch.load(tmp_path / "training_args.bin", weights_only=False)
    assert loaded.to_dict() == d
    config.to_json_string()
    config.to_sanitized_dict()


@pytest.mark.parametrize("algorithm", ["sapo", "mix", "on_policy_distill", "dpo"])
def test_a_copy_made_from_the_values_is_accepted(make, algorithm):
    """`dataclasses.replace` re-runs `__post_init__` with every field's value: the TRL defaults the config filled in
    for TRL's code are not taken for values the user gave."""
    config_class = CONFIGS[algorithm]
    config = make(config_class, kl_loss_fn="none")
    # TRL's own limit: generation_batch_size is derived, and may not be given with steps_per_generation
    derived = {} if algorithm == "dpo" else {"generation_batch_size": None}
    copied = dataclasses.replace(config, learning_rate=1e-5, **derived)
    assert copied.learning_rate == 1e-5 and copied.to_dict() == {**config.to_dict(), "learning_rate": 1e-5}
    if algorithm == "dpo" or trl_ext.get_algorithm(algorithm).trl_losses:
        return  # these configs take TRL's loss fields
    with raises_naming(config_class, "loss_type"):  # what the user sets is still an error
        dataclasses.replace(config, loss_type=TRL_GRPO_DEFAULTS["loss_type"], **derived)


# ---------------------------------------------------------------------------------------------------------------
# 3. Each field on its own, named as the user wrote it
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config_class", "kwargs", "field", "value"),
    [
        (trl_ext.GRPOConfig, {"kl_loss_fn": "k9"}, "kl_loss_fn", "k9"),  # beta=0: never built, still checked
        (trl_ext.GRPOConfig, {"target_kl": math.nan}, "target_kl", math.nan),  # without adaptive_kl
        (trl_ext.GRPOConfig, {"target_kl": -0.1}, "target_kl", -0.1),
        (trl_ext.GRPOConfig, {"target_kl": "0.1"}, "target_kl", "0.1"),
        (trl_ext.GRPOConfig, {"kl_horizon": -5}, "kl_horizon", -5),
        (trl_ext.GRPOConfig, {"kl_horizon": 1000.5}, "kl_horizon", 1000.5),
        (trl_ext.GRPOConfig, {"kl_horizon": "1000"}, "kl_horizon", "1000"),
        (trl_ext.SAPOConfig, {"entropy_loss_fn": "max"}, "entropy_loss_fn", "max"),
        (trl_ext.SAPOConfig, {"entropy_loss_fn": "mix"}, "entropy_loss_fn", "mix"),  # MIX's, needs expert rows
        (trl_ext.GRPOConfig, {"beta": -0.1}, "beta", -0.1),  # not `kl_coef`
        (trl_ext.GRPOConfig, {"beta": "0.1"}, "beta", "0.1"),
        (trl_ext.GRPOConfig, {"beta": math.inf}, "beta", math.inf),
        (trl_ext.GRPOConfig, {"beta": 0.1, "adaptive_kl": 1}, "adaptive_kl", 1),  # not `adaptive`
        (
            trl_ext.GRPOConfig,
            {"beta": 0.1, "adaptive_kl": True, "target_kl": 0.1, "kl_horizon": 0},
            "kl_horizon",  # not `horizon`
            0,
        ),
        (trl_ext.GRPOConfig, {"adaptive_kl": True, "target_kl": 0.1, "kl_horizon": 100}, "adaptive_kl", True),  # β=0
        (trl_ext.OnPolicyDistillConfig, {"teacher_model_name_or_path": ""}, "teacher_model_name_or_path", ""),
        (trl_ext.OnPolicyDistillConfig, {"teacher_model_name_or_path": 3}, "teacher_model_name_or_path", 3),
        (trl_ext.OnPolicyDistillConfig, {"teacher_model_init_kwargs": [1]}, "teacher_model_init_kwargs", [1]),
        (trl_ext.OnPolicyDistillConfig, {"teacher_model_init_kwargs": "{x"}, "teacher_model_init_kwargs", "{x"),
        (trl_ext.OnPolicyDistillConfig, {"teacher_model_init_kwargs": "[1]"}, "teacher_model_init_kwargs", "[1]"),
        (trl_ext.OnPolicyDistillConfig, {"teacher_device": 1}, "teacher_device", 1),
        (trl_ext.OnPolicyDistillConfig, {"teacher_device": ""}, "teacher_device", ""),
        (trl_ext.DPOConfig, {"kl_loss_fn": "k9"}, "kl_loss_fn", "k9"),
        (trl_ext.DPOConfig, {"kl_loss_fn": "k9", "kl_coef": 0}, "kl_loss_fn", "k9"),
        (trl_ext.DPOConfig, {"kl_coef": math.nan}, "kl_coef", math.nan),
        # unhashable values of choice fields: a ValueError naming the field, never `TypeError: unhashable type`
        (trl_ext.GRPOConfig, {"policy_loss_fn": ["ppo"]}, "policy_loss_fn", ["ppo"]),
        (trl_ext.GRPOConfig, {"advantage_fn": {"grpo": 1}}, "advantage_fn", {"grpo": 1}),
        (trl_ext.GRPOConfig, {"kl_loss_fn": ["k2"]}, "kl_loss_fn", ["k2"]),
        (trl_ext.GRPOConfig, {"loss_agg_mode": ["token-mean"]}, "loss_agg_mode", ["token-mean"]),
        (trl_ext.SAPOConfig, {"entropy_loss_fn": {"default"}}, "entropy_loss_fn", {"default"}),
        (trl_ext.DPOConfig, {"kl_loss_fn": ["k1"]}, "kl_loss_fn", ["k1"]),
        (trl_ext.SFTConfig, {"sft_loss_fn": ["sft"]}, "sft_loss_fn", ["sft"]),
        (trl_ext.SFTConfig, {"sft_loss_fn": {"sft": 1}}, "sft_loss_fn", {"sft": 1}),
    ],
)
def test_each_field_is_checked_on_its_own(make, config_class, kwargs, field, value):
    with raises_naming(config_class, field, value) as err:
        make(config_class, **kwargs)
    assert type(err.value) is ValueError


def test_bad_json_on_the_command_line_names_the_field(tmp_path):
    parser = trl.TrlParser((trl_ext.OnPolicyDistillConfig,))
    base = ["--output_dir", str(tmp_path), "--use_cpu", "--bf16", "false", "--report_to", "none"]
    with pytest.raises(
        ValueError, match=r"OnPolicyDistillConfig: teacher_model_init_kwargs='\{\"dtype\": ' .*JSON"
    ) as e:
        parser.parse_args_and_config([*base, "--teacher_model_init_kwargs", '{"dtype": '])
    assert type(e.value) is ValueError  # not a bare json.JSONDecodeError
    (config,) = parser.parse_args_and_config([*base, "--teacher_model_init_kwargs", '{"dtype": "bfloat16"}'])
    assert config.teacher_model_init_kwargs == {"dtype": "bfloat16"}


# ---------------------------------------------------------------------------------------------------------------
# 4. Fuzz: every field trl_ext adds to the TRL config, with invalid values for its type
# ---------------------------------------------------------------------------------------------------------------

TRL_BASE = {"dpo": trl.DPOConfig}
# TRL fields whose values trl_ext reads and therefore checks: fuzzed too
TRL_FIELDS_READ = {"dpo": ["beta", "label_smoothing"]}
TRL_FIELDS_READ_GRPO = ["beta", "entropy_coef"]

NOT_FINITE = [math.nan, math.inf, -math.inf]
BY_KIND = {
    "float": ["0.1", True, [0.1], *NOT_FINITE],
    "int": [1.5, 2.0, "3", True, -1, *NOT_FINITE],
    "bool": ["yes", "true", 1, 0, 1.0, math.nan],
    "str": ["", "no-such-name", 1, 1.5, True, ["token-mean"]],
    "dict": ["not json", "{bad json", "[1, 2]", 1, True, [("dtype", "bfloat16")], {1: "x"}],
}
# Out-of-range values of specific fields (on top of their type's list)
OUT_OF_RANGE = {
    "teacher_top_k": [-2],
    "jsd_beta": [-0.1, 1.5],
    "advantage_epsilon": [0.0, -1e-6],
    "std_threshold": [-0.1],
    "target_kl": [0.0, -0.1],
    "kl_horizon": [0],
    "clip_range": [-0.1],
    "clip_range_low": [-0.1],
    "clip_range_high": [-0.1],
    "clip_ratio_c": [1.0, 0.5],
    "mask_clip_range_low": [-0.5],
    "mask_clip_range_high": [-0.5],
    "tau_pos": [0.0, -1.0],
    "tau_neg": [0.5],
    "sppo_epsilon": [0.0, -0.3],
    "rec_epsilon_low": [0.0, 1.5],
    "rec_epsilon_high": [0.0],
    "rec_epsilon_low_prime": [0.0, 1.5],
    "rec_epsilon_high_prime": [-1.0],
    "rec_regularizer_coef": [-0.1],
    "rec_temp": [0.0],
    "tau": [-1.0],
    "advantage_tau": [0.0],
    "gamma": [-0.1, 1.5],
    "mu": [1.5, -0.1],
    "mu_peak": [1.5],
    "mu_valley": [-0.5],
    "ppo_mini_batch_size": [0],
    "ppo_micro_batch_size_per_gpu": [0],
    "ngpus_trainer": [0],
    "expert_data_ratio": [1.5, -0.1],
    "kl_coef": [-1.0],
    "reward_weight": [-1.0],
    "beta": [-0.1],
    "label_smoothing": [0.5, -0.1],
    "duplicate_experiences": [True],  # without std_threshold
}
# Where one algorithm's field of that name has another range (none at present: DPPO's `clip_ratio_c`, a truncation
# of the IS weight, needs c > 1 as PPO's dual clip does).
OUT_OF_RANGE_OF: dict[tuple[str, str], list] = {}
FREE_TEXT = {"teacher_model_name_or_path", "value_model_name_or_path"}  # any non-empty string may name a model


def _kind(config_class, name: str) -> tuple[str, bool]:
    """(kind, optional) of a field's annotation (resolved: HfArgumentParser replaces `Field.type` in place)."""
    hint = typing.get_type_hints(config_class)[name]
    args = typing.get_args(hint) or (hint,)
    optional = type(None) in args
    for kind, python_type in (("bool", bool), ("int", int), ("float", float), ("dict", dict), ("str", str)):
        if any(a is python_type or typing.get_origin(a) is python_type for a in args):
            return kind, optional
    raise AssertionError(f"{name}: no invalid values for type {hint!r}")


MINUS_ONE_VALID = {"teacher_top_k"}  # -1 means the whole vocabulary


def added_fields(algorithm: str) -> list[str]:
    config_class = CONFIGS[algorithm]
    base = {f.name for f in dataclasses.fields(TRL_BASE.get(algorithm, trl.GRPOConfig))}
    own = [f.name for f in dataclasses.fields(config_class) if f.name not in base]
    return own + TRL_FIELDS_READ.get(algorithm, TRL_FIELDS_READ_GRPO)


def invalid_values(config_class, name: str, algorithm: str = "") -> list:
    kind, optional = _kind(config_class, name)
    values = [v for v in BY_KIND[kind] if not (name in FREE_TEXT and v == "no-such-name")]
    values = [v for v in values if not (name in MINUS_ONE_VALID and v == -1)]
    values += OUT_OF_RANGE_OF.get((algorithm, name), OUT_OF_RANGE.get(name, []))
    if not optional:
        values.append(None)
    return values


FUZZ_CASES = [(algorithm, name) for algorithm in CONFIGS for name in added_fields(algorithm)]


def test_fuzz_covers_every_added_field():
    assert len(FUZZ_CASES) > 100
    names = {name for _, name in FUZZ_CASES}
    assert {"kl_loss_fn", "adaptive_kl", "target_kl", "kl_horizon", "entropy_loss_fn", "kl_coef"} <= names
    assert {"teacher_model_init_kwargs", "teacher_device", "expert_data_ratio", "duplicate_experiences"} <= names


@pytest.mark.parametrize(("algorithm", "name"), FUZZ_CASES, ids=[f"{a}-{n}" for a, n in FUZZ_CASES])
def test_fuzz_invalid_values_name_the_field(make, algorithm, name):
    if name == "duplicate_experiences" and not HAS_DUPLICATE_EXPERIENCES:
        pytest.skip("the grpo advantage function does not take duplicate_experiences yet")
    config_class = CONFIGS[algorithm]
    accepted, unnamed = [], []
    for value in invalid_values(config_class, name, algorithm):
        try:
            make(config_class, **{name: value})
        except ValueError as err:
            message = str(err)
            if type(err) is not ValueError or not message.startswith(config_class.__name__) or name not in message:
                unnamed.append((value, type(err).__name__, message))
        except Exception as err:
            unnamed.append((value, type(err).__name__, str(err)))
        else:
            accepted.append(value)
    assert not accepted, f"{config_class.__name__}.{name}: invalid values accepted: {accepted!r}"
    assert not unnamed, f"{config_class.__name__}.{name}: errors not naming the field: {unnamed!r}"


@pytest.mark.parametrize("algorithm", list(CONFIGS))
def test_every_field_at_its_default_constructs(make, algorithm):
    """The defaults, given explicitly (as a dumped recipe would), construct the same config."""
    config_class = CONFIGS[algorithm]
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    explicit = {name: field_default(fields[name]) for name in added_fields(algorithm)}
    explicit = {name: float(v) if isinstance(v, DocumentedDefault) else v for name, v in explicit.items()}
    implicit = make(config_class)
    config = make(config_class, **explicit)
    for name in explicit:
        assert getattr(config, name) == getattr(implicit, name), name


# ---------------------------------------------------------------------------------------------------------------
# 5. duplicate_experiences
# ---------------------------------------------------------------------------------------------------------------


def test_duplicate_experiences_field():
    f = trl_ext.GRPOConfig.__dataclass_fields__["duplicate_experiences"]
    assert f.default is False and "Polaris" in f.metadata["help"] and "std_threshold" in f.metadata["help"]
    assert {"duplicate_experiences"} <= set(trl_ext.SAPOConfig.advantage_argument_names())
    assert "duplicate_experiences" not in trl_ext.RLOOConfig.__dataclass_fields__


@pytest.mark.skipif(not HAS_DUPLICATE_EXPERIENCES, reason="grpo advantage without duplicate_experiences yet")
def test_duplicate_experiences_reaches_the_advantage_function(make):
    config = make(trl_ext.GRPOConfig, std_threshold=0.0, duplicate_experiences=True)
    assert config.components.advantage_fn.duplicate_experiences is True
    assert make(trl_ext.MIXConfig).components.advantage_fn.duplicate_experiences is False
    with raises_naming(trl_ext.GRPOConfig, "duplicate_experiences", True, "std_threshold"):
        make(trl_ext.GRPOConfig, duplicate_experiences=True)


def test_gspo_config_clip_range_sets_both_bounds(tmp_path):
    """As the reference's constructor: `clip_range` alone is both bounds; the paper's 3e-4 / 4e-4 apply only when
    no clip value is given; an unset bound falls back to the paper's value next to an explicit one."""
    kwargs = {"output_dir": str(tmp_path), "report_to": "none", "use_cpu": True}

    def bounds(**fields):
        fn = trl_ext.GSPOConfig(**kwargs, **fields).components.policy_loss
        return fn.clip_range_low, fn.clip_range_high

    assert bounds(clip_range=0.2) == (0.2, 0.2)
    assert bounds() == (3e-4, 4e-4)
    assert bounds(clip_range_low=0.1) == (0.1, 4e-4)
    assert bounds(clip_range=0.2, clip_range_high=0.3) == (0.2, 0.3)
    with pytest.raises(ValueError, match="clip_range"):
        trl_ext.GSPOConfig(**kwargs, clip_range=0.2, clip_range_low=0.1, clip_range_high=0.1)
