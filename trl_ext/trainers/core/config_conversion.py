"""A trainer's `args`: the trainer's own config, or TRL's config (or a `TrainingArguments`) converted to it.

Every trl_ext trainer takes what its TRL trainer takes, so that swapping only the trainer's import keeps a TRL script
working: `SAPOTrainer(model, args=trl.GRPOConfig(...))` trains SAPO with a `SAPOConfig` built from that config, as
`trl.SFTTrainer` builds its `SFTConfig` from a `TrainingArguments`. `trainer_config` is called by each trainer
family's constructor, first thing:

* None: the config class's defaults, `output_dir` named after the model (as TRL does);
* an instance of the trainer's config class: that object, unchanged;
* an instance of the TRL config the trainer's config extends (`trl.GRPOConfig`, `trl.DPOConfig`, `trl.SFTConfig`)
  or a plain `transformers.TrainingArguments`: converted (`convert_config`);
* anything else, another trl_ext config (another algorithm's) or another TRL trainer's config included: a TypeError
  naming both classes.

A TRL config carries every field, set or not, so a field counts as set when its value differs from the default of
the TRL config class (a `TrainingArguments` field too: `bf16=False`, `learning_rate=5e-5`, ... are kept, as TRL keeps
them, where TRL's config defaults to `bf16=True`, `learning_rate=1e-6`). The fields set are carried over; the rest
take the algorithm config's defaults: its loss and advantage arguments, its KL estimator, the markers by which it
tells a default from a value given (`beta`), and the TRL fields whose default it changes (critic PPO's
`num_generations=1`, MIX's `per_device_train_batch_size=16`), so a TRL config that holds TRL's default there gets
the algorithm's; pass the algorithm's own config to keep TRL's value. A TRL field that configures TRL's own loss
(`loss_type`, `epsilon`, `sapo_temperature_neg`, ...), carried over because it was set, is refused by the algorithm's
config as if given to it, naming the field and the trl_ext field to use (`GRPOFamilyConfig`; `trl_ext.GRPOConfig`
trains TRL's loss with it), and so is every other value the algorithm cannot train with.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, TypeVar

from transformers import TrainingArguments
from trl.trainer.utils import get_config_model_id

from .config_fields import trl_defaults

ConfigT = TypeVar("ConfigT", bound=TrainingArguments)

DERIVED_FIELDS = frozenset({"generation_batch_size"})
"""TRL fields that a TRL config derives in `__post_init__` and that may not be given with the field they are derived
with: `trl.GRPOConfig` computes `generation_batch_size` from `steps_per_generation` (carried over) and refuses both."""


def trainer_config(owner: str, model: Any, args: Any, config_class: type[ConfigT], run_name: str) -> ConfigT:
    """The trainer's config from its `args` argument (see the module's docstring).

    Args:
        owner: the trainer's class name, which the errors start with.
        model: the trainer's `model` argument (a path / Hub id or a model): names the default `output_dir`.
        args: None, a `config_class` instance, the TRL config `config_class` extends, or a `TrainingArguments`.
        config_class: the trainer's config class (`SAPOConfig`, `trl_ext.DPOConfig`, ...).
        run_name: the default `output_dir`'s suffix, `<model name>-<run_name>`.

    Returns:
        `args` itself when it is a `config_class`; else a new `config_class`.

    Raises:
        TypeError: `args` is neither of the above, e.g. another algorithm's config.
        ValueError: a converted field is refused by `config_class` (see `convert_config`).
    """
    if args is None:
        name = model if isinstance(model, str) else get_config_model_id(model.config)
        return config_class(output_dir=f"{str(name).rstrip('/').split('/')[-1]}-{run_name}")
    if isinstance(args, config_class):
        return args
    return convert_config(owner, args, config_class)


def convert_config(owner: str, args: TrainingArguments, config_class: type[ConfigT]) -> ConfigT:
    """`args`, an instance of the TRL config `config_class` extends or a `TrainingArguments`, as a `config_class`:
    the fields set (different from the TRL config's defaults) carried over, the rest at `config_class`'s defaults.

    Raises:
        TypeError: `args` is a trl_ext config (of another class than `config_class`), the config of another TRL
            trainer, or not a `TrainingArguments` at all.
        ValueError: `args` has a field set that `config_class` does not have (a subclass's own field), or
            `config_class` refuses a value carried over (a field of TRL's own loss, ...): the message names the
            field.
    """
    trl_config, source = _trl_base(config_class), type(args)
    if not isinstance(args, TrainingArguments):
        refused = "not a TrainingArguments"
    elif _is_trl_ext(source):
        refused = "another trl_ext trainer's config"
    elif not isinstance(args, trl_config) and trl_config_of(source) is not None:
        refused = "the config of another TRL trainer"
    else:
        refused = None
    if refused:
        raise TypeError(
            f"{owner}: args must be a {_display(config_class)} (a {_display(trl_config)} or a "
            f"transformers.TrainingArguments is converted to one), got {_display(source)}, {refused}"
        )
    defaults = trl_defaults(trl_config)
    own_defaults = trl_defaults(source)
    targets = {f.name for f in dataclasses.fields(config_class) if f.init}
    given, unknown = {}, []
    for f in dataclasses.fields(args):
        if not f.init or f.name in DERIVED_FIELDS:
            continue
        value = getattr(args, f.name)
        if not _differs(value, defaults.get(f.name, own_defaults.get(f.name, dataclasses.MISSING))):
            continue
        if f.name in targets:
            given[f.name] = copy.deepcopy(value)  # the new config owns its dicts and lists
        else:
            unknown.append(f.name)
    if unknown:
        raise ValueError(
            f"{owner}: args, a {_display(source)}, sets {', '.join(sorted(unknown))}, which "
            f"{_display(config_class)} does not have (its fields are {_display(trl_config)}'s and the algorithm's); "
            f"pass a {_display(config_class)}, or leave them at their defaults"
        )
    try:
        return config_class(**given)
    except ValueError as error:
        raise ValueError(
            f"{owner}: args, a {_display(source)}, converted to a {_display(config_class)} (its fields that "
            f"differ from {_display(trl_config)}'s defaults carried over): {error}"
        ) from error


def _differs(value: Any, default: Any) -> bool:
    try:
        return bool(value != default)
    except Exception:  # a value that does not compare to the default (an array, ...): set
        return True


def _trl_base(config_class: type) -> type:
    """The TRL config class that `config_class` extends (`trl.GRPOConfig`, ...), else `TrainingArguments`."""
    return trl_config_of(config_class) or TrainingArguments


def trl_config_of(cls: type) -> type | None:
    """The first class of `cls`'s MRO defined in TRL (a TRL trainer's config), or None."""
    return next((c for c in cls.__mro__ if c.__module__.split(".")[0] == "trl"), None)


def _is_trl_ext(cls: type) -> bool:
    """Whether `cls` is (or extends) a trl_ext config class."""
    return any(c.__module__.split(".")[0] == "trl_ext" for c in cls.__mro__)


def _display(cls: type) -> str:
    """`cls` as a user imports it: `trl_ext.SAPOConfig`, `trl.GRPOConfig`, `transformers.TrainingArguments`."""
    package = cls.__module__.split(".")[0]
    if package in ("trl_ext", "trl", "transformers"):
        return f"{package}.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"
