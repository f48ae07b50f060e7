"""A trl_ext trainer given TRL's own config (`trl.GRPOConfig` / `trl.DPOConfig` / `trl.SFTConfig`) or a plain
`transformers.TrainingArguments` converts it to the algorithm's config, as `trl.SFTTrainer` converts a
`TrainingArguments` (`trl_ext.trainers.core.config_conversion`): the fields that differ from TRL's defaults are carried
over, the algorithm's defaults fill the rest, and a TRL loss field the algorithm does not train is refused by name.

The field-level cases call the conversion itself; one trainer per family is constructed (no training) to show that
its constructor converts."""

from __future__ import annotations

import dataclasses
import os

import pytest
import transformers
import trl
from trainer_helpers import CPU, length_reward

import trl_ext
from trl_ext.toy import build_tokenizer, toy_dataset, toy_expert_dataset, toy_preference_dataset
from trl_ext.trainers.core.config_conversion import convert_config, trainer_config

TRL_CPU = {"use_cpu": True, "bf16": False, "report_to": "none", "save_strategy": "no"}
"""What the CPU test machine needs of every config (TRL's `bf16` default needs a GPU)."""


def _default(config_class: type, name: str):
    field = next(f for f in dataclasses.fields(config_class) if f.name == name)
    return field.default


# ---------------------------------------------------------------------------------------------------------------
# The conversion, field by field
# ---------------------------------------------------------------------------------------------------------------


def test_trl_config_becomes_the_algorithm_config_with_the_fields_set(tmp_path):
    source = trl.GRPOConfig(
        output_dir=str(tmp_path),
        learning_rate=3e-6,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        logging_steps=3,
        **TRL_CPU,
    )
    args = convert_config("SAPOTrainer", source, trl_ext.SAPOConfig)
    assert type(args) is trl_ext.SAPOConfig
    assert (args.output_dir, args.learning_rate, args.per_device_train_batch_size) == (str(tmp_path), 3e-6, 8)
    assert (args.gradient_accumulation_steps, args.logging_steps) == (2, 3)
    # derived by TRL together: steps_per_generation carried over, generation_batch_size recomputed from it
    assert (args.steps_per_generation, args.generation_batch_size) == (2, 16)
    assert (args.tau_pos, args.tau_neg) == (
        _default(trl_ext.SAPOConfig, "tau_pos"),
        _default(trl_ext.SAPOConfig, "tau_neg"),
    )
    assert args.loss_type == trl.GRPOConfig.loss_type and not args.uses_trl_loss  # TRL's default: not set
    # beta is carried over; SAPO's record has no KL term (kl_loss_fn='none'): choose one in a SAPOConfig
    with_kl = trl.GRPOConfig(output_dir=str(tmp_path), beta=0.04, **TRL_CPU)
    assert convert_config("GRPOTrainer", with_kl, trl_ext.GRPOConfig).beta == 0.04
    with pytest.raises(ValueError, match=r"SAPOConfig: beta=0.04 adds a KL term but kl_loss_fn='none'"):
        convert_config("SAPOTrainer", with_kl, trl_ext.SAPOConfig)


def test_a_field_at_trls_default_takes_the_algorithms_default(tmp_path):
    """TRL's num_generations=8 is its default, so critic PPO keeps its own, one sample per prompt."""
    source = trl.GRPOConfig(output_dir=str(tmp_path), num_generations=trl.GRPOConfig.num_generations, **TRL_CPU)
    assert convert_config("PPOTrainer", source, trl_ext.PPOConfig).num_generations == 1
    source = trl.GRPOConfig(output_dir=str(tmp_path), num_generations=2, per_device_train_batch_size=4, **TRL_CPU)
    assert convert_config("PPOTrainer", source, trl_ext.PPOConfig).num_generations == 2  # set: carried over


def test_training_arguments_keep_their_values_as_trl_keeps_them(tmp_path):
    """A TrainingArguments field counts as set where it differs from TRL's config default, so TrainingArguments'
    own defaults are kept (logging_steps=500, learning_rate=5e-5), as trl.SFTTrainer keeps them."""
    source = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, use_cpu=True)
    args = convert_config("SAPOTrainer", source, trl_ext.SAPOConfig)
    assert type(args) is trl_ext.SAPOConfig
    assert (args.output_dir, args.per_device_train_batch_size, args.use_cpu) == (str(tmp_path), 8, True)
    assert (args.logging_steps, args.learning_rate, args.bf16) == (500, 5e-5, False)
    assert args.tau_neg == _default(trl_ext.SAPOConfig, "tau_neg")


@pytest.mark.parametrize(
    ("config_class", "field", "value", "use_instead"),
    [
        (trl_ext.SAPOConfig, "loss_type", "dr_grpo", r"trl_ext.GRPOTrainer"),
        (trl_ext.GSPOConfig, "epsilon", 0.3, r"use `clip_range` / `clip_range_low` / `clip_range_high`"),
        (trl_ext.SAPOConfig, "epsilon", 0.3, r"its arguments are: tau_pos, tau_neg"),
        (trl_ext.SAPOConfig, "sapo_temperature_neg", 1.5, r"use `SAPOConfig.tau_neg`"),
        (trl_ext.MIXConfig, "importance_sampling_level", "sequence", r"GSPOTrainer"),
    ],
)
def test_a_trl_loss_field_set_is_refused_naming_the_field_to_use(tmp_path, config_class, field, value, use_instead):
    source = trl.GRPOConfig(output_dir=str(tmp_path), **TRL_CPU, **{field: value})
    with pytest.raises(
        ValueError, match=rf"Trainer: args, a trl.GRPOConfig, converted to a trl_ext.{config_class.__name__}"
    ) as e:
        convert_config("Trainer", source, config_class)
    assert f"{field}={value!r} is a trl.GRPOConfig field" in str(e.value)
    assert e.match(use_instead)


def test_trl_grpo_config_with_a_trl_loss_trains_trls_loss_in_grpo(tmp_path):
    """`trl_ext.GRPOConfig` trains TRL's own loss when one of its fields is set: converted the same way."""
    source = trl.GRPOConfig(output_dir=str(tmp_path), loss_type="dr_grpo", epsilon=0.3, **TRL_CPU)
    args = convert_config("GRPOTrainer", source, trl_ext.GRPOConfig)
    assert args.uses_trl_loss and (args.loss_type, args.epsilon) == ("dr_grpo", 0.3)
    assert args.policy_loss_name == "trl_grpo"


def test_dpo_and_sft_configs_convert(tmp_path):
    source = trl.DPOConfig(output_dir=str(tmp_path), learning_rate=1e-5, beta=0.2, loss_type=["ipo"], **TRL_CPU)
    args = convert_config("DPOTrainer", source, trl_ext.DPOConfig)
    assert type(args) is trl_ext.DPOConfig
    assert (args.learning_rate, args.beta, args.loss_type) == (1e-5, 0.2, ["ipo"])
    assert args.kl_coef == _default(trl_ext.DPOConfig, "kl_coef")  # the KL term: trl_ext's default
    source = trl.SFTConfig(output_dir=str(tmp_path), loss_type="dft", eos_token="<|end|>", **TRL_CPU)
    args = convert_config("SFTTrainer", source, trl_ext.SFTConfig)
    assert type(args) is trl_ext.SFTConfig
    assert (args.sft_loss_fn, args.eos_token) == ("sft_is", "<|end|>")  # TRL's dft is sft_is; the token kept as is
    source = transformers.TrainingArguments(output_dir=str(tmp_path), hub_token="secret", use_cpu=True)
    args = convert_config("SFTTrainer", source, trl_ext.SFTConfig)
    assert (args.sft_loss_fn, args.hub_token, args.learning_rate) == ("sft", "secret", 5e-5)


@pytest.mark.parametrize(
    ("make_args", "got"),
    [
        (lambda out: trl_ext.CISPOConfig(output_dir=out, **TRL_CPU), "trl_ext.CISPOConfig, another trl_ext trainer"),
        (lambda out: trl_ext.GRPOConfig(output_dir=out, **TRL_CPU), "trl_ext.GRPOConfig, another trl_ext trainer"),
        (lambda out: trl.DPOConfig(output_dir=out, **TRL_CPU), "trl.DPOConfig, the config of another TRL trainer"),
        (lambda out: {"output_dir": out}, "builtins.dict, not a TrainingArguments"),
    ],
    ids=["another algorithm", "trl_ext GRPO (a trl.GRPOConfig subclass)", "another TRL trainer", "a dict"],
)
def test_another_trainers_config_is_refused_naming_both_classes(tmp_path, make_args, got):
    with pytest.raises(
        TypeError,
        match=rf"SAPOTrainer: args must be a trl_ext.SAPOConfig \(a trl.GRPOConfig or a "
        rf"transformers.TrainingArguments is converted to one\), got {got}",
    ):
        trainer_config("SAPOTrainer", "unused", make_args(str(tmp_path)), trl_ext.SAPOConfig, "sapo")


def test_a_subclass_field_the_algorithm_lacks_is_refused_when_set(tmp_path):
    @dataclasses.dataclass
    class ScriptConfig(trl.GRPOConfig):
        dataset_name: str | None = None

    at_default = ScriptConfig(output_dir=str(tmp_path), **TRL_CPU)
    assert type(convert_config("SAPOTrainer", at_default, trl_ext.SAPOConfig)) is trl_ext.SAPOConfig
    with pytest.raises(ValueError, match=r"sets dataset_name, which trl_ext.SAPOConfig does not have"):
        convert_config(
            "SAPOTrainer", ScriptConfig(output_dir=str(tmp_path), dataset_name="x", **TRL_CPU), trl_ext.SAPOConfig
        )


@dataclasses.dataclass
class CPUSAPOConfig(trl_ext.SAPOConfig):
    """SAPO's defaults on a machine without bf16 (what `args=None` gives)."""

    use_cpu: bool = True
    bf16: bool = False


class CPUSAPOTrainer(trl_ext.SAPOTrainer):
    config_class = CPUSAPOConfig


def test_the_algorithms_own_config_passes_through_and_none_gives_the_defaults(tmp_path, monkeypatch):
    own = trl_ext.SAPOConfig(output_dir=str(tmp_path), **TRL_CPU)
    assert trainer_config("SAPOTrainer", "unused", own, trl_ext.SAPOConfig, "sapo") is own
    monkeypatch.chdir(tmp_path)
    args = trainer_config("SAPOTrainer", "org/tiny-model/", None, CPUSAPOConfig, "sapo")
    assert type(args) is CPUSAPOConfig and args.output_dir == "tiny-model-sapo"


# ---------------------------------------------------------------------------------------------------------------
# Each family's constructor converts (no training)
# ---------------------------------------------------------------------------------------------------------------


def _grpo_args(source: str, out, **overrides):
    """TRL's config or a TrainingArguments for a GRPO-family trainer (what a TRL script would pass)."""
    settings = {**CPU, "output_dir": str(out), "per_device_train_batch_size": 8, "max_steps": 1, "learning_rate": 3e-6}
    if source == "TrainingArguments":
        return transformers.TrainingArguments(**settings, **overrides)
    return trl.GRPOConfig(**settings, max_completion_length=8, **overrides)


def _assert_carried(args, config_class, out, per_device=8):
    assert type(args) is config_class
    assert (args.output_dir, args.per_device_train_batch_size, args.learning_rate) == (str(out), per_device, 3e-6)


@pytest.mark.parametrize("source", ["trl", "TrainingArguments"])
def test_grpo_family_trainer_converts(random_tiny_model, tmp_path, source):
    group = {"num_generations": 4} if source == "trl" else {}
    trainer = trl_ext.SAPOTrainer(
        model=random_tiny_model,
        reward_funcs=length_reward,
        args=_grpo_args(source, tmp_path, **group),
        train_dataset=toy_dataset(8),
        processing_class=build_tokenizer(),
    )
    _assert_carried(trainer.args, trl_ext.SAPOConfig, tmp_path)
    assert trainer.num_generations == group.get("num_generations", _default(trl_ext.SAPOConfig, "num_generations"))
    assert trainer.args.tau_neg == _default(trl_ext.SAPOConfig, "tau_neg")
    assert trainer.policy_loss_fn.tau_neg == trainer.args.tau_neg  # the loss is built from the converted config


def test_grpo_family_trainer_without_args_takes_the_defaults(random_tiny_model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # output_dir is relative, named after the model
    trainer = CPUSAPOTrainer(
        model=random_tiny_model,
        reward_funcs=length_reward,
        train_dataset=toy_dataset(8),
        processing_class=build_tokenizer(),
    )
    assert type(trainer.args) is CPUSAPOConfig
    assert trainer.args.output_dir == f"{os.path.basename(random_tiny_model)}-sapo"
    assert trainer.args.learning_rate == _default(trl_ext.SAPOConfig, "learning_rate")


def test_mix_trainer_converts(random_tiny_model, tmp_path):
    trainer = trl_ext.MIXTrainer(
        model=random_tiny_model,
        reward_funcs=length_reward,
        args=_grpo_args("trl", tmp_path, num_generations=4),
        train_dataset=toy_dataset(8),
        expert_dataset=toy_expert_dataset(8),
        processing_class=build_tokenizer(),
    )
    # per_device_train_batch_size=8 is TRL's default, so MIX's own default (16: rollouts and demonstrations) holds
    _assert_carried(
        trainer.args, trl_ext.MIXConfig, tmp_path, per_device=_default(trl_ext.MIXConfig, "per_device_train_batch_size")
    )
    assert trainer.args.expert_data_ratio == _default(trl_ext.MIXConfig, "expert_data_ratio")
    assert trainer.expert_rows_per_generation == 8  # ceil(0.5 × 16)


def test_distillation_trainer_converts(random_tiny_model, random_teacher, tmp_path):
    trainer = trl_ext.OnPolicyDistillTrainer(
        model=random_tiny_model,
        teacher_model=random_teacher,
        args=_grpo_args("trl", tmp_path),
        train_dataset=toy_dataset(8),
        processing_class=build_tokenizer(),
    )
    _assert_carried(trainer.args, trl_ext.OnPolicyDistillConfig, tmp_path)
    assert trainer.args.reward_weight == _default(trl_ext.OnPolicyDistillConfig, "reward_weight")
    assert trainer.teacher_model is not None


def test_critic_ppo_trainer_converts(random_tiny_model, tmp_path):
    trainer = trl_ext.PPOTrainer(
        model=random_tiny_model,
        reward_funcs=length_reward,
        args=_grpo_args("TrainingArguments", tmp_path),
        train_dataset=toy_dataset(8),
        processing_class=build_tokenizer(),
    )
    _assert_carried(trainer.args, trl_ext.PPOConfig, tmp_path)
    assert trainer.num_generations == 1  # PPO's default (TrainingArguments has no group size)
    assert trainer.value_model is not None


def test_multi_turn_trainer_converts(random_tiny_model, tmp_path):
    trainer = trl_ext.GiGPOTrainer(
        model=random_tiny_model,
        reward_funcs=length_reward,
        args=_grpo_args("trl", tmp_path, num_generations=4),
        train_dataset=toy_dataset(8),
        processing_class=build_tokenizer(),
    )
    _assert_carried(trainer.args, trl_ext.GiGPOConfig, tmp_path)
    assert trainer.advantage_fn.name == "gigpo"


def test_dpo_trainer_converts(random_tiny_model, tmp_path):
    settings = {
        **CPU,
        "output_dir": str(tmp_path),
        "per_device_train_batch_size": 4,
        "max_steps": 1,
        "learning_rate": 3e-6,
    }
    for args, beta in ((trl.DPOConfig(**settings, beta=0.2), 0.2), (transformers.TrainingArguments(**settings), 0.1)):
        trainer = trl_ext.DPOTrainer(
            model=random_tiny_model,
            args=args,
            train_dataset=toy_preference_dataset(8),
            processing_class=build_tokenizer(),
        )
        _assert_carried(trainer.args, trl_ext.DPOConfig, tmp_path, per_device=4)
        assert trainer.policy_loss_fn.beta == beta  # TRL's beta, or the default when TrainingArguments has none


def test_sft_trainer_converts(random_tiny_model, tmp_path):
    settings = {
        **CPU,
        "output_dir": str(tmp_path),
        "per_device_train_batch_size": 4,
        "max_steps": 1,
        "learning_rate": 3e-6,
    }
    for args, loss in (
        (trl.SFTConfig(**settings, loss_type="dft"), "sft_is"),
        (transformers.TrainingArguments(**settings), "sft"),
    ):
        trainer = trl_ext.SFTTrainer(
            model=random_tiny_model, args=args, train_dataset=toy_expert_dataset(8), processing_class=build_tokenizer()
        )
        _assert_carried(trainer.args, trl_ext.SFTConfig, tmp_path, per_device=4)
        assert trainer.args.sft_loss_fn == trainer.policy_loss_fn.name == loss
