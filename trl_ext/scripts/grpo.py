"""Train a GRPO-family algorithm with TRL's command-line conventions (the code behind `examples/train_*.py`).

    accelerate launch examples/train_sapo.py                                   # the offline tiny default
    accelerate launch examples/train_sapo.py --config configs/sapo.yaml \\
        --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --dataset_name trl-lib/DeepMath-103K \\
        --reward_funcs accuracy_reward --use_peft --lora_r 16 --report_to wandb

Arguments are parsed by `trl.TrlParser` into TRL's `GRPOScriptArguments` (`--dataset_name`, `--reward_funcs`,
`--reward_model_name_or_path`, ...), the algorithm's config (every `GRPOConfig` flag plus the algorithm's loss
and advantage arguments), `trl.ModelConfig` (`--model_name_or_path`, `--use_peft`, `--lora_r`, ...) and
`trl.DatasetMixtureConfig`; `--config recipe.yaml` sets any of them, and the command line overrides the file.

`--asynchronous true` trains the algorithm asynchronously: its asynchronous config (`AsyncSAPOConfig`, ...: the same
flags and defaults, plus TRL's asynchronous ones such as `--max_staleness`) on `trl_ext.AsyncGRPOTrainer`, offline with
trl_ext's transformers rollout worker on the toy model, into `outputs/<algorithm>-async-tiny` by default; an algorithm
without an asynchronous form yet is refused with the reason (`trl_ext.trainers.asynchronous.forms`).

MIX / MIX-CHORD also read `--expert_dataset_name` (and `--expert_dataset_config`, `--expert_dataset_split`): the
expert demonstrations, prompt/completion or conversational `messages` rows in the prompts' format. On-policy
distillation reads its teacher from `--teacher_model_name_or_path` (and `--teacher_model_init_kwargs`, a JSON
object); `--reward_funcs` is optional there (logged, and trained on with `--reward_weight` > 0).

`--environment_factory my_envs.Calculator` (TRL's multi-turn tool loop: one instance per rollout, `reset(**row)`,
its public methods the tools) is checked before anything loads: a class without `reset` or without tools is refused,
and a user environment (any but the toy's `trl_ext.toy_agent.LookupEnvironment`) needs `--dataset_name` (its rows,
chat-message prompts) and a reward (`--reward_funcs`, or its own `get_reward`): the toy task's rows and reward only fit
the toy's environment. Without `--model_name_or_path` an environment's run trains the toy agent model
(`trl_ext.toy_agent.tiny_agent_model_path()`), whose chat template renders tool calls.

Without `--model_name_or_path`, the script trains the package's embedded default: the tiny offline model of
`trl_ext.toy` on its "repeat the letter" task with a verifiable reward (and, for MIX / MIX-CHORD, the task's
embedded expert demonstrations; for on-policy distillation, the task's embedded teacher
`trl_ext.toy.tiny_teacher_path()`). The toy task has a held-out split (`trl_ext.toy.toy_splits`, named by
`--dataset_test_split`, default "test"), so `--eval_strategy steps --eval_steps 10` evaluates (`eval_reward`, ...).

On the toy model (no model named, or `--model_name_or_path` is `trl_ext.toy.tiny_model_path()`) the toy's
hyperparameters (`trl_ext.toy.DEFAULT_TRAINING`: learning rate, batch, group size, ...) and output dir are the
defaults, under the `--config` file and the command line: command line > config file > toy defaults > TRL's defaults.
With a real model TRL's (and the algorithm config's) defaults apply. Without a CUDA device, `use_cpu=True` and
`bf16=False` are the defaults.

Before training, the main process prints a summary of the run: algorithm, model and its size, data, learning rate,
batch and generation geometry, length, the algorithm settings that differ from their defaults, the toy defaults in
play (and which the config file or the command line overrode) and the output dir. `--dataset_name` takes a Hub id, a
local directory or a local .jsonl / .json / .csv / .parquet file; a path that does not exist, a user dataset without
the requested train or test split, or without a `prompt` column, is a one-line error naming the flag, before the
model loads (`dataset_loading.py`).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trl import DatasetMixtureConfig, get_peft_config, get_quantization_config
from trl.scripts.grpo import GRPOScriptArguments

from ..algorithms import get_algorithm
from ..toy import DEFAULT_TRAINING
from ._common import (
    ScriptParser,
    ToyDefaults,
    UsageError,
    asynchronous_requested,
    did_you_mean,
    model_arguments,
    parse,
    run_summary,
    script_help_command,
    set_defaults,
    set_model_init_kwargs,
    usage_errors_exit,
)
from .dataset_loading import (
    check_chat_prompts,
    check_columns,
    data_source,
    load_named_dataset,
    load_user_dataset,
    select_splits,
)
from .finish import resume_point, train_and_finish
from .launch import check_launch
from .model_source import check_model_source
from .noise import quiet_known_warnings


@dataclass
class ExpertDataArguments:
    """Where MIX / MIX-CHORD read their expert demonstrations."""

    expert_dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Expert demonstrations (Hub id or local path) for MIX / MIX-CHORD: prompt/completion or "
            "conversational 'messages' rows. Default with the toy model: the toy task's demonstrations."
        },
    )
    expert_dataset_config: str | None = field(default=None, metadata={"help": "Configuration of the expert dataset."})
    expert_dataset_split: str = field(default="train", metadata={"help": "Split of the expert dataset."})


@dataclass
class EnvironmentArguments:
    """Where a multi-turn run gets its environments (TRL's `environment_factory`)."""

    environment_factory: str | None = field(
        default=None,
        metadata={
            "help": "Dotted import path of an environment class (or factory) for TRL's multi-turn tool loop, e.g. "
            "my_envs.Calculator: one instance per rollout, reset(**row) before it, its public methods the tools. "
            "Default with the toy model and a multi-turn algorithm (multi_step_grpo, gigpo): the toy lookup task's "
            "environment (trl_ext.toy_agent.LookupEnvironment)."
        },
    )


def _load(name: str, flag: str) -> Any:
    """The object at dotted import path `name` (the working directory importable, as `trl grpo` does)."""
    module, _, attr = name.rpartition(".")
    if not module:
        raise UsageError(f"{flag}: {name!r} is not a dotted import path (e.g. my_module.{name})")
    sys.path.insert(0, os.getcwd())
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as error:
        raise UsageError(f"{flag}: cannot load {name!r} ({error})") from error


def multi_turn(algorithm: str) -> bool:
    """Whether the algorithm's advantage works on the turns of multi-turn episodes (it takes `run_ids`): its embedded
    default is then the toy lookup task (`trl_ext.toy_agent`), rolled out through TRL's tool loop."""
    from ..advantages import ADVANTAGE_FNS

    name = get_algorithm(algorithm).advantage_fn
    return name is not None and "run_ids" in ADVANTAGE_FNS.get(name).inputs()


TRL_ENVIRONMENT_CONTRACT = (
    "TRL's environment_factory makes one instance per rollout (calling it with no arguments), calls its reset(**row) "
    "with the rollout's dataset row, and offers the model its public methods (typed, with a docstring) as tools"
)


def environment_class(factory: Any, path: str) -> type:
    """The class of the environments that `--environment_factory path` (`factory`: a class, or a function that returns
    an instance, called once here as TRL will) makes, checked against TRL 1.16's `environment_factory` contract: it
    takes no arguments, its class has a `reset` method, and tools, its other public methods but `get_reward` (TRL
    lists both as `inspect.isfunction` members of the class). A `UsageError` naming the flag and what is missing."""
    if not callable(factory):
        raise UsageError(f"--environment_factory {path}: not a class or a function (a {type(factory).__name__})")
    try:
        inspect.signature(factory).bind()
    except TypeError as error:
        message = f"--environment_factory {path}: cannot be called with no arguments ({error})"
        raise UsageError(f"{message}; {TRL_ENVIRONMENT_CONTRACT}") from error
    except ValueError:  # no signature to check (a builtin)
        pass
    environment = factory if inspect.isclass(factory) else type(factory())
    methods = dict(inspect.getmembers(environment, predicate=inspect.isfunction))
    tools = [name for name in methods if name not in ("reset", "get_reward") and not name.startswith("_")]
    missing = ["reset method"] if "reset" not in methods else []
    missing += [] if tools else ["tools (public methods besides reset and get_reward)"]
    if missing:
        raise UsageError(
            f"--environment_factory {path}: {environment.__name__} has no {' and no '.join(missing)}; "
            f"{TRL_ENVIRONMENT_CONTRACT}"
        )
    return environment


def check_environment_task(path: str, environment: type, toy_task: bool, agent: bool, script_args) -> None:
    """A user environment (not the toy's `LookupEnvironment`) never runs on the toy task's rows or with its reward:
    without `--dataset_name` (the toy task's rows would reach its `reset(**row)`), or without a reward (no
    `--reward_funcs` / `--reward_model_name_or_path`, and no `get_reward` method, TRL's environment-owned reward), it
    is a `UsageError` asking for them."""
    from ..toy_agent import LookupEnvironment

    toy_environment = issubclass(environment, LookupEnvironment)
    problems = []
    if toy_task and not (agent and toy_environment):
        rows = "the toy lookup task's (for its LookupEnvironment)" if agent else 'the toy "repeat the letter" task\'s'
        problems.append(
            f"without --dataset_name its rows would be {rows}: pass --dataset_name with your task's rows (each is "
            "passed to reset(**row); a 'prompt' column of chat messages, or reset() returns the prompt)"
        )
    owns_reward = inspect.isfunction(getattr(environment, "get_reward", None))
    if not (script_args.reward_funcs or script_args.reward_model_name_or_path or owns_reward or toy_environment):
        problems.append(
            "its rollouts have no reward: pass --reward_funcs (TRL's reward names, or a dotted path such as "
            "my_rewards.solved) or give it a get_reward() method (the toy task's reward only scores the toy task, "
            "with its trl_ext.toy_agent.LookupEnvironment)"
        )
    if problems:
        raise UsageError(f"--environment_factory {path}: " + "; and ".join(problems))


def reward_funcs_for(script_args: GRPOScriptArguments, environment: type | None, toy_task: bool) -> list[Any]:
    """The run's reward functions: `--reward_model_name_or_path` and `--reward_funcs`; without them, the toy's own
    reward where the toy's environment (`lookup_reward`) or, without an environment, the toy task's data
    (`toy_reward`) is used; else none (a user environment's `get_reward`, which `check_environment_task` ensured)."""
    from .. import toy, toy_agent

    funcs = _reward_funcs(script_args)
    if not funcs and environment is not None and issubclass(environment, toy_agent.LookupEnvironment):
        funcs = [toy_agent.lookup_reward]
    elif not funcs and toy_task and environment is None:
        funcs = [toy.toy_reward]
    return funcs


def _reward_funcs(script_args: GRPOScriptArguments) -> list[Any]:
    """TRL's reward-function names (`accuracy_reward`, ...) or dotted import paths, as `trl grpo` reads them."""
    from trl import rewards

    registry = {
        "accuracy_reward": rewards.accuracy_reward,
        "reasoning_accuracy_reward": rewards.reasoning_accuracy_reward,
        "think_format_reward": rewards.think_format_reward,
        "get_soft_overlong_punishment": rewards.get_soft_overlong_punishment(
            max_completion_len=1280, soft_punish_cache=256
        ),
    }
    funcs: list[Any] = []
    if script_args.reward_model_name_or_path:
        funcs.append(script_args.reward_model_name_or_path)
    for name in script_args.reward_funcs or []:
        if name in registry:
            funcs.append(registry[name])
        elif "." in name:
            funcs.append(_load(name, "--reward_funcs"))
        else:
            guess = did_you_mean(name, registry)
            raise UsageError(
                f"--reward_funcs: cannot load {name!r}{f' (did you mean {guess}?)' if guess else ''}; use one of "
                f"{', '.join(registry)} or a dotted import path (e.g. my_rewards.exact_match)"
            )
    return funcs


def _check_expert_dataset(args: ExpertDataArguments, toy_task: bool) -> None:
    if args.expert_dataset_name is None and not toy_task:
        raise UsageError(
            "--expert_dataset_name is required: MIX / MIX-CHORD train on expert demonstrations of your task "
            "(prompt/completion or conversational 'messages' rows)"
        )


def _expert_dataset(args: ExpertDataArguments, toy_task: bool):
    _check_expert_dataset(args, toy_task)
    if args.expert_dataset_name is None:
        from ..toy import toy_expert_dataset

        return toy_expert_dataset()
    return load_named_dataset(
        args.expert_dataset_name,
        "--expert_dataset_name",
        config=args.expert_dataset_config,
        split=args.expert_dataset_split,
    )


@dataclass
class AsynchronousArguments:
    """Whether the algorithm trains asynchronously (its `Async<Config>` on `AsyncGRPOTrainer`)."""

    asynchronous: bool = field(
        default=False,
        metadata={
            "help": "Train asynchronously: a rollout worker generates and scores while the trainer trains "
            "(trl_ext.AsyncGRPOTrainer with the algorithm's asynchronous config, e.g. AsyncSAPOConfig: the same "
            "flags and defaults, plus TRL's asynchronous ones such as --max_staleness). On the command line only."
        },
    )


def training_classes(algorithm: str, asynchronous: bool) -> tuple[type, type]:
    """`(config class, trainer class)` that train `algorithm`: its own, or its asynchronous config on
    `AsyncGRPOTrainer` (`trl_ext.async_config_class`; an algorithm without one is a `UsageError` saying why)."""
    spec = get_algorithm(algorithm)
    if not asynchronous:
        return spec.config_class, spec.trainer_class
    from ..trainers import AsyncGRPOTrainer
    from ..trainers.asynchronous.forms import async_config_class

    try:
        return async_config_class(algorithm), AsyncGRPOTrainer
    except ValueError as error:
        raise UsageError(f"--asynchronous true: {error}") from None


def family_arguments(algorithm: str) -> tuple[type, ...]:
    """The argument groups the algorithm's family adds to the flags: the environments where its trainer records the
    turns of TRL's multi-turn rollouts (`run_ids` among its advantage inputs), the expert data where it mixes expert
    rows into the batch (`sample_strategy` mix)."""
    family = get_algorithm(algorithm).family
    groups: list[type] = []
    if "run_ids" in family.advantage_inputs:
        groups.append(EnvironmentArguments)
    if family.sample_strategy == "mix":
        groups.append(ExpertDataArguments)
    return tuple(groups)


def _parser(algorithm: str, argv: Sequence[str]) -> tuple[ScriptParser, ToyDefaults | None]:
    asynchronous = asynchronous_requested(argv)
    config_class, _ = training_classes(algorithm, asynchronous)
    parser = ScriptParser(
        (
            GRPOScriptArguments,
            config_class,
            model_arguments(config_class),
            DatasetMixtureConfig,
            *family_arguments(algorithm),
            AsynchronousArguments,
        ),
        algorithm=algorithm,
        config_class=config_class,
    )
    suffix = "-async" if asynchronous and algorithm != "async_grpo" else ""  # not over the synchronous run's output
    if multi_turn(algorithm):
        from ..toy_agent import AGENT_MODEL_VERSION, AGENT_TRAINING

        toy = set_defaults(
            parser,
            argv,
            f"outputs/{algorithm}{suffix}-tiny",
            AGENT_TRAINING,
            "trl_ext.toy_agent.AGENT_TRAINING",
            toy_version=AGENT_MODEL_VERSION,
        )
    else:
        output_dir = f"outputs/{algorithm}{suffix}-tiny"
        toy = set_defaults(parser, argv, output_dir, DEFAULT_TRAINING, "trl_ext.toy.DEFAULT_TRAINING")
    return parser, toy


def make_parser(algorithm: str, argv: Sequence[str]) -> ScriptParser:
    """The script's `TrlParser`, with the defaults for `argv` (the toy's on the toy model) set."""
    return _parser(algorithm, argv)[0]


def train(algorithm: str, argv: Sequence[str]):
    """The script protocol (`trl_ext.scripts.script_for`, `trl-ext train`): `main(algorithm, argv)`."""
    return main(algorithm, argv)


def main(algorithm: str, argv: Sequence[str] | None = None):
    """Parse `argv` (default: the command line), train, save the model to `output_dir`; return the trainer.

    Mistakes in the flags or the config file, and a dataset split that does not exist, are a `UsageError` (a
    `ValueError`) raised before the model loads; from the command line (`argv=None`) they print `error: ...` and
    exit with status 2."""
    prog = os.path.basename(sys.argv[0]) or "trl_ext"
    with usage_errors_exit(prog, enabled=argv is None, help_command=script_help_command()):
        return _main(algorithm, list(sys.argv[1:] if argv is None else argv))


def _main(algorithm: str, argv: list[str]):
    from .. import toy, toy_agent

    asynchronous = asynchronous_requested(argv)
    _, trainer_class = training_classes(algorithm, asynchronous)
    parser, toy_defaults = _parser(algorithm, argv)
    script_args, training_args, model_args, dataset_args, *family_args, async_args = parse(parser, argv)
    if async_args.asynchronous != asynchronous:
        raise UsageError("asynchronous: set it on the command line (--asynchronous true), not in the --config file")
    resume_point(training_args)  # a wrong --resume_from_checkpoint: an error before anything loads
    check_model_source(model_args.model_name_or_path)  # a model that cannot be loaded: one line, now
    check_launch()  # several processes asked of accelerate launch, one started: a warning
    expert = next((a for a in family_args if isinstance(a, ExpertDataArguments)), None)
    environments = next((a for a in family_args if isinstance(a, EnvironmentArguments)), None)

    model = model_args.model_name_or_path
    toy_task = not (dataset_args.datasets or script_args.dataset_name)
    agent = toy_task and multi_turn(algorithm)
    if expert is not None:
        _check_expert_dataset(expert, toy_task)  # before loading anything
    factory = environment = None
    if environments is not None and environments.environment_factory:
        path = environments.environment_factory
        factory = _load(path, "--environment_factory")
        environment = environment_class(factory, path)
        check_environment_task(path, environment, toy_task, agent, script_args)
    if agent and factory is None:
        factory = environment = toy_agent.LookupEnvironment
    reward_funcs = reward_funcs_for(script_args, environment, toy_task)  # a wrong name: before loading any data
    dataset = load_user_dataset(script_args, dataset_args)
    if agent:
        dataset = toy_agent.toy_agent_splits(script_args.dataset_train_split, script_args.dataset_test_split)
        data = 'the toy "look up, then answer" tool task (trl_ext.toy_agent.toy_agent_splits)'
    elif toy_task:
        dataset = toy.toy_splits(script_args.dataset_train_split, script_args.dataset_test_split)
        data = 'the toy "repeat the letter" task (trl_ext.toy.toy_splits)'
    else:
        data = script_args.dataset_name or "the --datasets mixture"
    optional_test = toy_defaults is not None and toy_defaults.sources.get("eval_strategy") == "toy"
    train_dataset, eval_dataset, note = select_splits(dataset, script_args, dataset_args, training_args, optional_test)
    data += f" ({note})" if note else ""
    splits = [(script_args.dataset_train_split, train_dataset), (script_args.dataset_test_split, eval_dataset)]
    if environment is None:
        check_columns(algorithm, training_args, splits, data_source(script_args, dataset_args))
    else:  # TRL 1.16: a row without a prompt is an empty user turn, which the string reset() returns completes
        reason = "with --environment_factory, TRL's tool loop needs each prompt"
        check_chat_prompts(splits, data_source(script_args, dataset_args), reason)
    extra: dict[str, Any] = {}
    if expert is not None:  # MIX / MIX-CHORD: their demonstrations (the toy task's with the toy prompts)
        extra["expert_dataset"] = _expert_dataset(expert, toy_task)
    if factory is not None:
        extra["environment_factory"] = factory
    if model is None:
        training_args.use_toy_task()  # what the toy task provides for the family (distillation: its teacher)
        # an environment's tools need a chat template that renders tool calls: the toy agent model's
        model = toy_agent.tiny_agent_model_path() if environment is not None else toy.tiny_model_path()

    set_model_init_kwargs(training_args, model_args)
    with quiet_known_warnings():  # PEFT's read of a deprecated attribute, TRL's environment_factory notice
        trainer = trainer_class(
            model=model,
            reward_funcs=reward_funcs,
            args=training_args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            quantization_config=get_quantization_config(model_args),
            peft_config=get_peft_config(model_args),
            **extra,
        )
    summary = run_summary(trainer, algorithm, model, data, toy_defaults)
    return train_and_finish(trainer, algorithm, training_args, script_args, summary)
