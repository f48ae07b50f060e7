"""What the training scripts (`grpo.py`, `dpo.py`) share: defaults (the toy's under the config file and the command
line), model kwargs, the start-of-run summary, usage errors (the datasets: `dataset_loading.py`; the run's end:
`finish.py`)."""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import dataclasses
import difflib
import os
import sys
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
import yaml
from trl import TrlParser

from .._packaged import find_recipe, recipe_names
from ..algorithms import get_algorithm
from .run_settings import settings_lines, shown_value


class UsageError(ValueError):
    """A mistake in the command line or the `--config` file: an unknown flag, an invalid value, a dataset split that
    does not exist. The scripts' command-line entries (`trl-ext train`, `python examples/train_*.py`) print it and
    exit with status 2; called with an explicit `argv`, the scripts raise it (a `ValueError`)."""


def usage_error_line(prog: str, error: BaseException | str, help_command: str | None = None) -> str:
    """`prog: error: <the error on one line> (see <help_command>)`: what a usage error prints, instead of argparse's
    full usage (hundreds of lines for the training scripts' flags)."""
    line = f"{prog}: error: {' '.join(str(error).split())}"
    return f"{line} (see {help_command})" if help_command else line


@contextlib.contextmanager
def usage_errors_exit(prog: str, enabled: bool = True, help_command: str | None = None) -> Iterator[None]:
    """Turn a `UsageError` into one line on stderr, `prog: error: ... (see <help_command>)` (default `prog --help`),
    and exit status 2 (argparse's convention)."""
    try:
        yield
    except UsageError as error:
        if not enabled:
            raise
        print(usage_error_line(prog, error, help_command or f"{prog} --help"), file=sys.stderr)
        raise SystemExit(2) from None


def script_help_command() -> str:
    """How to get the running script's help: `python examples/train_sapo.py --help`."""
    script = sys.argv[0] if sys.argv and sys.argv[0] else "the script"
    return f"python {script} --help" if script.endswith(".py") else f"{script} --help"


class _UsageErrors:
    """An argparse parser whose errors (unknown flags, invalid values, missing values) raise `UsageError` instead of
    printing the whole usage and exiting; `--help` still prints the full help."""

    def error(self, message: str):
        raise UsageError(message)


class UsageArgumentParser(_UsageErrors, argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose errors raise `UsageError`."""


class _ParserCaptured(BaseException):  # a BaseException: no `except Exception` on the way swallows it
    pass


_CAPTURED: contextvars.ContextVar[list | None] = contextvars.ContextVar("trl_ext_captured_parser", default=None)


@contextlib.contextmanager
def captured_parser() -> Iterator[list]:
    """Within the block, a training script stops where it would parse its arguments: its `ScriptParser`, with the
    defaults it set for its argv (the toy's on the toy model), is appended to the yielded list, and nothing is parsed,
    loaded or trained. `trl-ext train` uses it for `--help` and to split `accelerate launch`'s flags from the
    script's, whichever script `train` runs for the algorithm."""
    found: list = []
    token = _CAPTURED.set(found)
    try:
        yield found
    except _ParserCaptured:
        pass
    finally:
        _CAPTURED.reset(token)


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to a mistyped `word` (`difflib`'s, similarity at least 0.6), or None."""
    matches = difflib.get_close_matches(word, list(choices), n=1)
    return matches[0] if matches else None


class ScriptParser(_UsageErrors, TrlParser):
    """The training scripts' `TrlParser`: no flag abbreviations (`--lr 3` would otherwise be ambiguous or, worse, pick
    a flag), errors as `UsageError` (`unrecognized arguments: --tau_postive 1.1 (did you mean --tau_pos?)`, `argument
    --learning_rate: invalid float value: 'abc'`, ...) and `--config NAME` resolved to a packaged recipe
    (`resolve_config`).

    Its help (`--help`) lists `algorithm`'s own settings first (`algorithm_fields`: what the algorithm adds to TRL's
    config or changes), then the flags of each dataclass in turn, under a short usage line: TRL's and transformers'
    training flags are over a thousand lines."""

    def __init__(self, dataclass_types, algorithm: str | None = None, config_class: type | None = None, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("usage", "%(prog)s [-h] [--config FILE_OR_NAME] [--FLAG VALUE ...]")
        kwargs.setdefault(
            "epilog",
            "--config FILE_OR_NAME: a YAML mapping of these flags to values (the command line overrides them), or the "
            f"name of a packaged recipe: {', '.join(recipe_names())}.",
        )
        super().__init__(dataclass_types, **kwargs)
        self._group_flags(algorithm, config_class)

    def _group_flags(self, algorithm: str | None, config_class: type | None) -> None:
        """Put each dataclass's flags under a titled group, the algorithm's own settings first. Help only: the parser
        reads the flags from `_actions`, which keeps them all."""
        from ..trainers.core.model_card import algorithm_fields

        groups: list[tuple[str, list[str]]] = []
        config = config_class or (get_algorithm(algorithm).config_class if algorithm is not None else None)
        if config is not None:
            own = [f.name for f in algorithm_fields(config, algorithm)]
            groups.append((f"{algorithm} settings (trl_ext.{config.__name__}): the algorithm's own", own))
        for dataclass_type in self.dataclass_types:
            title = f"{dataclass_type.__name__} ({dataclass_type.__module__.split('.')[0]})"
            if dataclass_type is config:
                trl = next((c.__name__ for c in config.__mro__ if c.__module__.startswith("trl.")), "TrainingArguments")
                title = f"trl_ext.{config.__name__}'s other flags: TRL's {trl} and transformers' TrainingArguments"
            groups.append((title, [f.name for f in dataclasses.fields(dataclass_type)]))
        group_of: dict[str, int] = {}  # a field's first group
        for index, (_, names) in enumerate(groups):
            for name in names:
                group_of.setdefault(name, index)
        options = self._optionals._group_actions
        members: list[list[argparse.Action]] = [[] for _ in groups]
        for action in options:  # a boolean field has two flags, `--name` and `--no_name`, of one `dest`
            if action.dest in group_of:
                members[group_of[action.dest]].append(action)
        for (title, _), actions in zip(groups, members, strict=True):
            if actions:
                self.add_argument_group(title)._group_actions.extend(actions)
        options[:] = [action for action in options if action.dest not in group_of]  # -h, --config

    def _guesses(self, typed: Iterable[str]) -> str:
        """`did you mean --tau_pos` for one mistyped flag among `typed` (`--name`, `--name=value`, values ignored),
        `did you mean --tau_pos for --tau_postive, --learning_rate for --lerning_rate` for several; "" for none."""
        flags = {option[2:].replace("-", "_") for option in self._option_string_actions if option.startswith("--")}
        guesses = []
        for string in typed:
            flag = string.split("=", 1)[0]
            guess = did_you_mean(flag[2:].replace("-", "_"), flags) if flag.startswith("--") else None
            if guess is not None:
                guesses.append((flag, f"--{guess}"))
        if len(guesses) == 1:
            return f"did you mean {guesses[0][1]}"
        return f"did you mean {', '.join(f'{guess} for {flag}' for flag, guess in guesses)}" if guesses else ""

    def unrecognized(self, strings: Sequence[str]) -> str:
        """`unrecognized arguments: STRINGS`, with the flag closest to a mistyped one: `(did you mean --tau_pos?)`."""
        guesses = self._guesses(strings)
        return f"unrecognized arguments: {' '.join(strings)}" + (f" ({guesses}?)" if guesses else "")

    def parse_args_and_config(
        self,
        args: Sequence[str] | None = None,
        return_remaining_strings: bool = False,
        fail_with_unknown_args: bool = True,
        separate_remaining_strings: bool = False,
    ) -> tuple:
        """`TrlParser.parse_args_and_config`, with `--config NAME` resolved, and every mistake a `UsageError`: an
        unknown flag (`unrecognized arguments: ...`), a value a config refuses, a key of the config file that no flag
        takes. With `return_remaining_strings=True` the unknown strings are returned instead, as TRL does."""
        captured = _CAPTURED.get()
        if captured is not None:
            captured.append(self)
            raise _ParserCaptured
        *outputs, from_config, from_command_line = self._parse(args)
        if return_remaining_strings:
            remaining = (from_config, from_command_line)
            return (*outputs, *(remaining if separate_remaining_strings else (from_config + from_command_line,)))
        if from_command_line:
            raise UsageError(self.unrecognized(from_command_line))
        if from_config and fail_with_unknown_args:
            self.refuse_config_keys(args or [], from_config)
        return tuple(outputs)

    def parse_known_script_args(self, args: Sequence[str]) -> tuple[tuple, list[str]]:
        """The dataclasses parsed from `args` and the command-line strings that no flag takes (`accelerate launch`'s,
        for `trl-ext train --accelerate_config`); a key of the config file that no flag takes is a `UsageError`."""
        *outputs, from_config, from_command_line = self._parse(args)
        if from_config:
            self.refuse_config_keys(args, from_config)
        return tuple(outputs), list(from_command_line)

    def _parse(self, args: Sequence[str] | None) -> tuple:
        args = resolve_config_argument(list(sys.argv[1:] if args is None else args))
        try:
            return super().parse_args_and_config(args, True, True, True)
        except UsageError:
            raise
        except ValueError as error:  # a config's check of its values, TRL's check of the config file
            raise UsageError(str(error)) from error

    def refuse_config_keys(self, args: Sequence[str], from_config: Sequence[str]) -> None:
        keys = from_config[::2]  # TRL's ["--key", "value", ...]
        guesses = self._guesses(keys).replace("--", "")
        raise UsageError(
            f"--config {_config_value(args)}: unknown keys {', '.join(key[2:] for key in keys)} (no flag of this "
            f"script takes them{f'; {guesses}?' if guesses else ''})"
        )


# ---------------------------------------------------------------------------------------------- config files


def resolve_config(value: str) -> str:
    """The file `--config value` reads: `value` itself when it is a file, else the packaged recipe of that name
    (`sapo` -> `trl_ext/configs/sapo.yaml`; a bare name: no path separator, no `.yaml`). Anything else is a
    `UsageError` that lists the packaged names."""
    path = find_recipe(value)
    if path is not None:
        return path
    reason = "not a file" if os.path.exists(value) else "no such file"
    raise UsageError(
        f"--config {value}: {reason}, nor a packaged recipe; give a YAML file or one of {', '.join(recipe_names())}"
    )


def _config_value(argv: Sequence[str]) -> str | None:
    value = None
    for i, token in enumerate(argv):
        if token == "--config" and i + 1 < len(argv):
            value = argv[i + 1]
        elif token.startswith("--config="):
            value = token.split("=", 1)[1]
    return value


def resolve_config_argument(argv: Sequence[str]) -> list[str]:
    """`argv` with `--config VALUE` / `--config=VALUE` as `--config <resolve_config(VALUE)>` (the form `TrlParser`
    reads); a `--config` without a value is a `UsageError`."""
    out: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        if token == "--config" or token.startswith("--config="):
            value = token.split("=", 1)[1] if "=" in token else next(tokens, None)
            if value is None or value.startswith("--"):
                raise UsageError("argument --config: expected one argument (a YAML file or a packaged recipe's name)")
            out += ["--config", resolve_config(value)]
        else:
            out.append(token)
    return out


# --------------------------------------------------------------------------------------------------- defaults


@dataclasses.dataclass
class ToyDefaults:
    """The toy defaults of a run on the toy model, and where each value of the run comes from."""

    name: str  # e.g. "trl_ext.toy.DEFAULT_TRAINING"
    values: dict[str, Any]  # every toy default, output_dir and activation_checkpointing included
    sources: dict[str, str]  # key -> "toy", "--config <file>" or "the command line"
    hyperparameters: tuple[str, ...] = ()  # the keys of `name`, the ones the summary lists

    def overridden(self) -> dict[str, str]:
        return {key: source for key, source in self.sources.items() if source != "toy"}

    def recipe_warning(self, width: int = 118) -> list[str]:
        """A warning when a `--config` recipe set the toy run's values: its settings (a learning rate of 1e-6, ...)
        are for a real model, and the toy may learn nothing with them."""
        recipes = sorted({s.removeprefix("--config ") for s in self.sources.values() if s.startswith("--config")})
        if not recipes:
            return []
        text = (
            f"Warning: {', '.join(recipes)} is a recipe for a real model; on the toy model its settings may learn "
            "nothing in this run. Leave out --config to train the toy with its own settings, or name a model with "
            "--model_name_or_path."
        )
        return textwrap.wrap(text, width=width)

    def describe(self, args: Any, width: int = 118) -> list[str]:
        """Summary lines: the toy defaults in effect, then each override with its source and the toy value."""
        keys = self.hyperparameters or tuple(self.values)
        kept = [f"{k}={shown_value(getattr(args, k))}" for k in keys if self.sources[k] == "toy"]
        lines = [f"toy defaults ({self.name}, under --config and the command line): " + (", ".join(kept) or "none")]
        by_source: dict[str, list[str]] = {}
        for key in keys:
            if self.sources[key] != "toy":
                item = f"{key}={shown_value(getattr(args, key))} (toy {shown_value(self.values[key])})"
                by_source.setdefault(self.sources[key], []).append(item)
        lines += [f"overridden by {source}: {', '.join(items)}" for source, items in by_source.items()]
        wrapped = []
        for line in lines:
            wrapped += textwrap.wrap(line, width=width, initial_indent="  ", subsequent_indent="      ")
        return wrapped


def _model_and_config(argv: Sequence[str]) -> tuple[str | None, str | None, dict[str, Any]]:
    """The model named by the command line or the `--config` file, the config file's path and its contents."""
    pre = UsageArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--model_name_or_path")
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(resolve_config_argument(argv))
    config: dict[str, Any] = {}
    if known.config:
        try:
            with open(known.config) as f:
                config = yaml.safe_load(f) or {}
        except OSError as error:
            raise UsageError(f"--config {known.config}: {error.strerror}") from error
        except yaml.YAMLError as error:
            raise UsageError(f"--config {known.config}: not valid YAML: {error}") from error
        if not isinstance(config, dict):
            raise UsageError(f"--config {known.config}: expected a YAML mapping of flag names to values")
    return known.model_name_or_path or config.get("model_name_or_path"), known.config, config


def _command_line_keys(argv: Sequence[str]) -> set[str]:
    """The field names the command line sets (`--name value`, `--name=value`, `--name-with-dashes`, `--no_name`)."""
    keys = set()
    for token in argv:
        if token.startswith("--"):
            key = token[2:].split("=", 1)[0].replace("-", "_")
            keys.add(key)
            if key.startswith("no_"):
                keys.add(key[3:])
    return keys


def _checkpointing_default(parser: TrlParser) -> bool | None:
    """The training config's default for activation checkpointing: TRL's configs still default the deprecated alias
    `gradient_checkpointing` (True), which transformers 5 resolves with a FutureWarning on every run."""
    for dataclass_type in parser.dataclass_types:
        fields = {f.name: f for f in dataclasses.fields(dataclass_type)}
        if "activation_checkpointing" in fields and "gradient_checkpointing" in fields:
            return fields["gradient_checkpointing"].default
    return None


def set_defaults(
    parser: TrlParser,
    argv: Sequence[str],
    output_dir: str,
    toy_training: dict[str, Any],
    toy_name: str,
    toy_version: str | None = None,
) -> ToyDefaults | None:
    """CPU defaults without CUDA; on the toy model, the toy's output dir and hyperparameters as defaults.

    Precedence: command line > `--config` file > toy defaults > TRL's defaults (`TrlParser` applies the config file's
    values as defaults over these). `toy_version`: the cached toy model the run's toy task uses (default: the
    single-turn toy's). Returns where each toy value comes from, or None when a real model is named.

    The config's checkpointing default is passed under its current name, `activation_checkpointing` (off on the toy
    model), unless the command line or the config file sets either name: a user's `--gradient_checkpointing` keeps
    working (with transformers' deprecation warning), and is never silently overridden by a default."""
    if not torch.cuda.is_available():
        parser.set_defaults(use_cpu=True, bf16=False)
    accelerator = getattr(torch, "accelerator", None)
    if not (accelerator.is_available() if accelerator is not None else torch.cuda.is_available()):
        # No accelerator at all: where deepspeed is installed, accelerate imports it (to recognize its engines) and
        # DeepSpeed warns that it "could not detect" one and falls back to the CPU. Name the CPU, as it would pick.
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    model, config_path, config = _model_and_config(argv)
    command_line = _command_line_keys(argv)
    checkpointing_set = bool({"activation_checkpointing", "gradient_checkpointing"} & (command_line | set(config)))
    from ..toy import MODEL_VERSION, is_tiny_model

    if model is not None and not is_tiny_model(model, version=toy_version or MODEL_VERSION):
        default = _checkpointing_default(parser)
        if default is not None and not checkpointing_set:
            parser.set_defaults(activation_checkpointing=default)
        return None
    values: dict[str, Any] = {"output_dir": output_dir}
    if not checkpointing_set:
        values["activation_checkpointing"] = False
    values["ddp_find_unused_parameters"] = False  # every toy parameter gets a gradient: no DDP search, no warning
    values.update(toy_training)
    parser.set_defaults(**values)
    sources = {
        key: "the command line" if key in command_line else f"--config {config_path}" if key in config else "toy"
        for key in values
    }
    return ToyDefaults(toy_name, values, sources, tuple(toy_training))


def asynchronous_requested(argv: Sequence[str]) -> bool:
    """The value of `--asynchronous` in `argv` (HfArgumentParser's bool syntax: `--asynchronous`, `--asynchronous
    true`, `--asynchronous=false`); a bad value is a `UsageError` naming the flag."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--asynchronous", nargs="?", const="true", default="false")
    value = pre.parse_known_args(list(argv))[0].asynchronous
    if value.lower() not in ("true", "yes", "y", "1", "false", "no", "n", "0"):
        raise UsageError(f"--asynchronous: {value!r} is not a boolean (true or false)")
    return value.lower() in ("true", "yes", "y", "1")


def parse(parser: TrlParser, argv: Sequence[str]) -> tuple:
    """`parser.parse_args_and_config(argv)`, its errors (unknown flags, invalid values) as `UsageError`."""
    try:
        return parser.parse_args_and_config(list(argv))
    except ValueError as error:
        raise UsageError(str(error)) from error


def model_arguments(config_class: type) -> type:
    """`trl.ModelConfig`, without the fields that `config_class` declares itself (TRL's `AsyncGRPOConfig` has its own
    `dtype`): each flag parsed into one field, the training config's."""
    from trl import ModelConfig

    own = {f.name for f in dataclasses.fields(config_class)}
    clashes = [f for f in dataclasses.fields(ModelConfig) if f.name in own]
    if not clashes:
        return ModelConfig
    kept = [
        (f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory, metadata=f.metadata))
        for f in dataclasses.fields(ModelConfig)
        if f.name not in own
    ]
    return dataclasses.make_dataclass(
        "ModelConfig", kept, bases=(), namespace={"__post_init__": ModelConfig.__post_init__}
    )


def set_model_init_kwargs(training_args, model_args) -> None:
    """`ModelConfig`'s loading options into the config's `model_init_kwargs` (explicit entries win; an option left
    unset stays out, so that the trainer's own choice holds: TRL's asynchronous trainer sets the attention)."""
    dtype = getattr(model_args, "dtype", getattr(training_args, "dtype", None))
    model_args.dtype = dtype  # where the training config declares it (`model_arguments`), its value
    options = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": dtype,
    }
    training_args.model_init_kwargs = {
        **{name: value for name, value in options.items() if value is not None},
        **(training_args.model_init_kwargs or {}),
    }


# ------------------------------------------------------------------------------------------------ run summary


def model_description(model: str) -> str:
    from ..toy import MODEL_VERSION, TEACHER_VERSION
    from ..toy_agent import AGENT_MODEL_VERSION

    name = os.path.basename(os.path.normpath(model))
    if name in (MODEL_VERSION, TEACHER_VERSION, AGENT_MODEL_VERSION) and os.path.isdir(model):
        return f"{name} (trl_ext's toy model, {model})"
    return model


def _parameters(model: torch.nn.Module) -> tuple[int, int]:
    """(total, trainable) parameters; DeepSpeed ZeRO-3 partitions report their full size as `ds_numel`."""
    total = trainable = 0
    for p in model.parameters():
        n = getattr(p, "ds_numel", p.numel())
        total += n
        trainable += n if p.requires_grad else 0
    return total, trainable


def _rows(dataset) -> str:
    try:
        return f"{len(dataset):,}"
    except TypeError:  # streaming
        return "streamed"


def _dotted(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None)
    return f"{obj.__module__}.{name}" if name and getattr(obj, "__module__", None) else repr(obj)


def rollout_sources(trainer) -> str:
    """What scores and drives a rollout trainer's episodes, for the summary's data line: `; reward toy_reward` (TRL's
    names of the reward functions in use) and `; environment my_envs.Calc (tools add, ...)`; "" for other trainers."""
    names = getattr(trainer, "reward_func_names", None)
    if names is None:
        return ""
    text = f"; reward {', '.join(names) or 'none'}"
    factories = getattr(trainer, "environment_factories", None) or {}
    tools = ", ".join(getattr(tool, "__name__", repr(tool)) for tool in getattr(trainer, "tools", None) or [])
    for factory in factories.values():
        text += f"; environment {_dotted(factory)} (one per rollout; tools {tools or 'none'})"
    return text


def run_summary(trainer, algorithm: str, model: str, data: str, toy: ToyDefaults | None) -> str:
    """The start-of-run summary (at most ~15 lines): algorithm, model, data (with a rollout trainer's reward functions
    and environment), optimizer, batch and generation geometry, length, the algorithm's non-default settings, the toy
    defaults in play and the output dir."""
    args, accelerator = trainer.args, trainer.accelerator
    processes = accelerator.num_processes
    total, trainable = _parameters(trainer.model)
    params = f"{total:,} parameters" + (f", {trainable:,} trainable" if trainable != total else "")
    rows = f"{_rows(trainer.train_dataset)} train rows"
    if trainer.eval_dataset is not None:
        rows += f", {_rows(trainer.eval_dataset)} eval rows"
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * processes
    from ..trainers.core.model_card import config_family

    family = config_family(type(args), algorithm)
    unit = family.batch_unit
    warmup = f"warmup {args.warmup_steps:g} " + ("steps" if args.warmup_steps >= 1 else "of the steps")
    scheduler = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    lines = [
        f"trl_ext {algorithm}: {type(trainer).__name__} / {type(args).__name__}, {processes} process(es) on "
        f"{accelerator.device.type}",
        f"  model       {model_description(model)}: {params}",
        *textwrap.wrap(f"  data        {data}: {rows}{rollout_sources(trainer)}", 118, subsequent_indent=" " * 14),
        f"  optimizer   learning_rate {args.learning_rate:g} ({scheduler}, {warmup}), "
        f"max_grad_norm {args.max_grad_norm:g}",
        f"  batch       {args.per_device_train_batch_size} {unit} per device x {args.gradient_accumulation_steps} "
        f"accumulation step(s) x {processes} process(es) = {per_step} {unit} per optimizer step",
        f"  {family.geometry(args)}",
    ]
    length = f"max_steps {args.max_steps}" if args.max_steps > 0 else f"num_train_epochs {args.num_train_epochs:g}"
    evaluation = {"no": "eval off", "epoch": "eval every epoch"}.get(
        getattr(args.eval_strategy, "value", args.eval_strategy),
        f"eval every {args.eval_steps or args.logging_steps:g} steps",
    )
    lines.append(f"  schedule    {length}; logging every {args.logging_steps:g} steps; {evaluation}")
    if hasattr(args, "composition"):  # the trained parts, composed ones marked
        parts = "; ".join(f"{part} {text}" for part, text in args.composition().items())
        lines += textwrap.wrap(f"  parts       {parts}", width=118, subsequent_indent="              ")
    shown = ("learning_rate", "per_device_train_batch_size", "num_generations", "max_completion_length")
    lines += settings_lines(args, algorithm, shown)
    if toy is not None:
        lines += toy.describe(args)
    output = f"  output      {args.output_dir}"
    if toy is not None and toy.sources["output_dir"] == "toy":
        output += " (the toy default)"
    lines.append(output)
    if toy is not None:
        lines += toy.recipe_warning()
    return "\n".join(lines)
