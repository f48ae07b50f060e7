"""The `trl-ext` command.

    trl-ext train --algorithm sapo [--config configs/sapo.yaml] [TRL flags]   # = examples/train_sapo.py
    trl-ext train --algorithm sapo --help                                    # every flag of sapo
    trl-ext train --accelerate_config zero3 --algorithm sapo [...]           # under `accelerate launch`
    trl-ext list                                                             # algorithms, losses, defaults, papers
    trl-ext env                                                              # versions and devices, for bug reports
    trl-ext toy-data DIR                                                     # the toy datasets, for `trl grpo` etc.

`train` takes exactly the flags of the example scripts (`trl_ext/scripts/grpo.py`, `trl_ext/scripts/dpo.py`) and,
like them, trains the embedded tiny default offline when no `--model_name_or_path` is given; run it under
`accelerate launch` for several processes (`accelerate launch -m trl_ext.cli train --algorithm sapo ...`), or pass
`--accelerate_config FILE_OR_NAME` (a packaged config's name: `multi_gpu`, `zero3`, `fsdp`, ...), as `trl grpo` takes
it. `--config NAME` reads the packaged recipe `trl_ext/configs/NAME.yaml` when no file NAME exists.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import platform
import signal
import sys
import textwrap
from collections.abc import Sequence

from . import __version__
from .algorithms import ALGORITHMS
from .families import FAMILIES


def _trainable() -> list[str]:
    return [name for name, spec in ALGORITHMS.items() if spec.has_trainer]


def _guess(name: str, choices: Sequence[str]) -> str:
    """` (did you mean sapo?)` for a mistyped `name` close to one of `choices`, else ""."""
    from .scripts._common import did_you_mean

    guess = did_you_mean(name, choices)
    return f" (did you mean {guess}?)" if guess else ""


def train(algorithm: str, argv: Sequence[str]):
    """Train `algorithm` with the script of its family's data (`trl_ext.scripts.script_for`: the example scripts'
    argument parsing); returns the trainer (the programmatic form of `trl-ext train`). A mistake in the flags, the
    config file or the dataset's splits is a `ValueError` (`trl_ext.scripts._common.UsageError`) raised before the
    model loads."""
    from .scripts import script_for
    from .scripts._common import UsageError, asynchronous_requested

    spec = ALGORITHMS.get(algorithm)
    if spec is None or not spec.has_trainer:
        what = "has no trainer yet" if spec is not None else f"is not an algorithm{_guess(algorithm, _trainable())}"
        raise UsageError(f"--algorithm {algorithm!r} {what}; choose one of {', '.join(_trainable())}")
    if spec.family.schema != "experience" and asynchronous_requested(argv):  # the rollout scripts check it themselves
        from .trainers.asynchronous.forms import async_config_class

        try:
            async_config_class(algorithm)
        except ValueError as error:
            raise UsageError(f"--asynchronous true: {error}") from None
    return script_for(algorithm).train(algorithm, list(argv))


def list_algorithms() -> str:
    """The algorithms grouped by trainer family, one line each (class, loss / advantage, paper), then the records
    without a trainer. Imports neither the configs nor trl."""
    lines = []
    for family in FAMILIES.values():
        members = [spec for spec in ALGORITHMS.values() if spec.trainer == family.name]
        if not members:
            continue
        lines.append(f"{family.name}: {family.description}")
        for spec in members:
            parts = spec.loss_name.rsplit(".", 1)[-1] + (f" / {spec.advantage_fn}" if spec.advantage_fn else "")
            paper = f"arXiv {spec.paper.arxiv}" if spec.paper else ""
            lines.append(f"  {spec.name:<18} {spec.class_names[1]:<25} {parts:<30} {paper}".rstrip())
    untrained = [name for name, spec in ALGORITHMS.items() if not spec.has_trainer]
    if untrained:
        lines.append(f"no trainer yet (losses in trl_ext.losses): {', '.join(untrained)}")
    lines += composable_parts()
    lines.append("An algorithm's settings and defaults: trl-ext list ALGORITHM")
    return "\n".join(textwrap.fill(line, 118, subsequent_indent="    ") for line in lines)


def composable_parts() -> list[str]:
    """What a GRPO-family config composes (`policy_loss_fn`, `advantage_fn`, the KL estimators), from the
    registries, one line each."""
    from .advantages import ADVANTAGE_FNS
    from .losses import KL_FNS, POLICY_LOSSES

    kl = [name for name, cls in KL_FNS.items() if cls.name == name]  # without the aliases (kl = k1, mse = k2)
    return [
        "compose on any grpo / mix / distill config (with *_args dicts; each part refused where its trainer cannot "
        "feed it):",
        f"  policy_loss_fn   {', '.join(sorted(POLICY_LOSSES))}",
        f"  advantage_fn     {', '.join(sorted(ADVANTAGE_FNS))}",
        f"  kl_loss_fn / kl_penalty_fn (KL in the loss with beta / in the reward)   {', '.join(kl)}",
    ]


def describe_algorithm(name: str) -> str:
    """One algorithm in full: its classes, components, paper, and its config's own settings with their defaults."""
    from .scripts._common import UsageError

    if name not in ALGORITHMS:
        raise UsageError(
            f"unknown algorithm {name!r}{_guess(name, list(ALGORITHMS))}; choose one of {', '.join(ALGORITHMS)}"
        )
    spec = ALGORITHMS[name]
    lines = [f"{name}: {spec.description}", f"  paper       {spec.paper or '-'}"]
    components = f"policy loss {spec.loss_name}, advantage {spec.advantage_fn or '-'}"
    components += f", KL {spec.kl_loss_fn}, entropy {spec.entropy_loss_fn}"
    lines.append(f"  components  {components} (Trinity-RFT's defaults)")
    if spec.paper_settings:  # the config's defaults beside the reference's flags
        paper = ", ".join(f"{key}={value!r}" for key, value in spec.paper_settings)
        lines += textwrap.wrap(
            f"  paper's     {paper}: the config's defaults (Trinity-RFT's record leaves them at the components' and "
            "the family's)",
            118,
            subsequent_indent="              ",
        )
    if spec.has_trainer and spec.family.per_algorithm_classes:
        lines.append(
            f"  compose     {spec.class_names[0]}(policy_loss_fn=..., advantage_fn=..., *_args, kl_penalty_fn=...): "
            "parts in trl-ext list"
        )
    if not spec.has_trainer:
        lines.append(f"  trainer     none yet: its loss is trl_ext.losses.get_policy_loss({spec.policy_loss_fn!r})")
        return "\n".join(lines)
    from .trainers.core.model_card import algorithm_fields, field_default

    config, trainer = spec.class_names
    lines.append(f"  trainer     trl_ext.{trainer} / trl_ext.{config} ({spec.family.name} family)")
    lines.append(f"  train       trl-ext train --algorithm {name}   (flags: trl-ext train --algorithm {name} --help)")
    if spec.family.schema == "experience" and name != "async_grpo":
        from .trainers.asynchronous.forms import async_config_name, async_refusal

        reason = async_refusal(name)
        form = f"trl_ext.{async_config_name(name)} on AsyncGRPOTrainer (--asynchronous true)"
        form = f"none yet: {reason}" if reason else form
        lines += textwrap.wrap(f"  async       {form}", 118, subsequent_indent="              ")
    settings = [f"{f.name}={field_default(f)!r}" for f in algorithm_fields(spec.config_class, name)]
    lines.append(textwrap.fill("  settings    " + ", ".join(settings), 118, subsequent_indent="              "))
    return "\n".join(lines)


def environment() -> str:
    """Versions of Python, trl_ext and its stack, and the devices, for bug reports."""
    import torch

    lines = [
        f"trl_ext: {__version__}",
        f"python: {sys.version.split()[0]} ({platform.platform()})",
        f"torch: {torch.__version__} (CUDA build {torch.version.cuda or 'none'})",
    ]
    for package in ("trl", "transformers", "accelerate", "peft", "datasets", "wandb", "vllm", "deepspeed"):
        try:
            lines.append(f"{package}: {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            lines.append(f"{package}: not installed")
    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        lines.append(f"devices: {len(names)} CUDA ({', '.join(names)})")
    else:
        lines.append(f"devices: CPU only ({os.cpu_count()} cores)")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse with a usage error on one line (`trl-ext train: error: ... (see trl-ext train --help)`, exit status 2),
    not the usage first."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def _wrap(text: str, indent: str = "  ") -> str:
    return textwrap.fill(text, width=118, initial_indent=indent, subsequent_indent=indent + "    ")


def train_help() -> str:
    """`trl-ext train --help`: the algorithms that train, and how to see an algorithm's flags."""
    from ._packaged import accelerate_config_names, recipe_names

    return "\n".join(
        [
            "usage: trl-ext train --algorithm NAME [--config FILE_OR_NAME] [--accelerate_config FILE_OR_NAME] [flags]",
            "",
            _wrap(
                "Train an algorithm with the flags of its example script (examples/train_NAME.py): TRL's script, "
                "model, dataset and training flags and the algorithm's own. Without --model_name_or_path it trains "
                "trl_ext's toy model offline.",
                "",
            ),
            "",
            _wrap(f"--algorithm NAME  one of {', '.join(_trainable())}"),
            _wrap("trl-ext train --algorithm NAME --help  prints every flag of that algorithm"),
            _wrap(
                "--config FILE_OR_NAME  a YAML file of flag values (the command line overrides them), or a packaged "
                f"recipe's name: {', '.join(recipe_names())}"
            ),
            _wrap(
                "--accelerate_config FILE_OR_NAME  launch the run with `accelerate launch --config_file FILE` (flags "
                "of accelerate launch, such as --num_processes 2, pass through); a file or a packaged config's name: "
                f"{', '.join(accelerate_config_names())}"
            ),
        ]
    )


def script_parser(algorithm: str, argv: Sequence[str]):
    """The `TrlParser` (`trl_ext.scripts._common.ScriptParser`) that `train(algorithm, argv)` parses `argv` with, its
    defaults set for `argv` (the toy's on the toy model); nothing is parsed, loaded or trained."""
    from .scripts._common import captured_parser

    with captured_parser() as found:
        train(algorithm, list(argv))
    if not found:
        raise RuntimeError(f"trl-ext train --algorithm {algorithm}: the script did not parse its arguments")
    return found[0]


def _subtract_subsequence(items: Sequence[str], subsequence: Sequence[str]) -> list[str]:
    """`items` without the ordered subsequence `subsequence` (TRL's CLI's split of the launcher's strings)."""
    rest, position = [], 0
    for item in items:
        if position < len(subsequence) and item == subsequence[position]:
            position += 1
        else:
            rest.append(item)
    return rest


def accelerate_launch_args(algorithm: str, accelerate_config: str, argv: Sequence[str]) -> list[str]:
    """The arguments of `accelerate launch` that run `trl-ext train --algorithm ALGORITHM ARGV` under an accelerate
    config, as TRL's CLI builds them for `trl grpo --accelerate_config ...`: `--config_file FILE`, the strings of `argv`
    that no flag of the algorithm's script takes (accelerate's own, such as `--num_processes 2`), then
    `-m trl_ext.cli train --algorithm ALGORITHM` and the script's flags.

    `accelerate_config` is a file or the name of a packaged config (`trl_ext/configs/accelerate/<name>.yaml`, or an
    alias: `zero3`, `fsdp2`, `single_gpu`, ...). The script's flags are parsed here, so a mistake in them is a
    `UsageError` before any process starts."""
    return _launch_plan(algorithm, accelerate_config, argv)[0]


def _launch_plan(algorithm: str, accelerate_config: str, argv: Sequence[str]) -> tuple[list[str], tuple]:
    """`accelerate_launch_args`, and the dataclasses that the script's parser parsed from `argv`."""
    from ._packaged import accelerate_config_names, find_accelerate_config
    from .scripts._common import UsageError

    path = find_accelerate_config(accelerate_config)
    if path is None:
        reason = "not a file" if os.path.exists(accelerate_config) else "no such file"
        raise UsageError(
            f"--accelerate_config {accelerate_config}: {reason}, nor a packaged accelerate config; give a file or "
            f"one of {', '.join(accelerate_config_names())}"
        )
    parsed, launcher = script_parser(algorithm, argv).parse_known_script_args(list(argv))
    script_args = _subtract_subsequence(list(argv), launcher)
    arguments = ["--config_file", path, *launcher, "-m", "trl_ext.cli", "train", "--algorithm", algorithm]
    return [*arguments, *script_args], parsed


def check_before_launch(parsed: Sequence[object]) -> None:
    """What the scripts check of their parsed flags before anything loads and that no process needs to start for:
    `--resume_from_checkpoint` and `--model_name_or_path` (`resolve_checkpoint`, `check_model_source`). Checked in
    `trl-ext train --accelerate_config`'s own process, a mistake is one line, not one per process."""
    from transformers import TrainingArguments

    from .scripts.finish import resolve_checkpoint
    from .scripts.model_source import check_model_source

    for arguments in parsed:
        if isinstance(arguments, TrainingArguments):
            resolve_checkpoint(arguments.resume_from_checkpoint, arguments.output_dir)
        elif hasattr(arguments, "model_name_or_path"):  # trl's ModelConfig (or `model_arguments`' form of it)
            check_model_source(arguments.model_name_or_path)


USAGE_ERROR_STATUS = 2
"""The exit status of a usage error (argparse's, the scripts' `usage_errors_exit`)."""

_ELASTIC_LOGGER = "torch.distributed.elastic.multiprocessing.api"
_ELASTIC_FAILURE_LOGS = ("failed (exitcode: ", "Sending process ")
"""torch elastic's log lines when a process fails (`E... failed (exitcode: 2) local_rank: 0 ...`) and as it stops the
others (`W... Sending process 123 closing signal SIGTERM`): what `failed_run_status` says, or, for a usage error,
noise after the error's one line."""


def _not_a_failure_log(record: logging.LogRecord) -> bool:
    return not (isinstance(record.msg, str) and record.msg.startswith(_ELASTIC_FAILURE_LOGS))


def failed_run_status(error: BaseException) -> int | None:
    """The exit status for `trl-ext train --accelerate_config` when `accelerate launch` raised `error` for processes
    that failed (torch elastic's `ChildFailedError`: the multi_gpu, FSDP and DeepSpeed launchers); None for any other
    error.

    A usage error (a process exited with status 2, the others with 2 or stopped by the launcher's SIGTERM) is
    `USAGE_ERROR_STATUS`, after the processes printed its line; else the first failure's status (1 for a signal),
    after the launcher's summary of the failed processes (rank, exit status or signal), without its traceback
    through the launcher's code: the processes printed their own errors and tracebacks."""
    try:
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    except ImportError:  # a torch without torch.distributed: no such error
        return None
    if not isinstance(error, ChildFailedError):
        return None
    statuses = {failure.exitcode for failure in error.failures.values()}
    if USAGE_ERROR_STATUS in statuses and statuses <= {USAGE_ERROR_STATUS, -signal.SIGTERM}:
        return USAGE_ERROR_STATUS
    print(str(error).strip("\n"), file=sys.stderr, flush=True)
    status = error.get_first_failure()[1].exitcode
    return status if status > 0 else 1


def launch(algorithm: str, accelerate_config: str, argv: Sequence[str]) -> None:
    """`trl-ext train --accelerate_config CONFIG --algorithm ALGORITHM ARGV`: `accelerate launch` with the arguments of
    `accelerate_launch_args`; waits for the processes. A flag that neither the script nor `accelerate launch` takes
    is a `UsageError`, and so is a model or checkpoint that cannot be loaded (`check_before_launch`); a failed run
    exits with its status (its processes printed the error; for a usage error, nothing of the launcher:
    `failed_run_status`)."""
    import subprocess

    from accelerate.commands.launch import launch_command, launch_command_parser

    from .scripts._common import UsageError

    arguments, parsed = _launch_plan(algorithm, accelerate_config, argv)
    check_before_launch(parsed)
    parser = launch_command_parser()

    def error(message: str):
        raise UsageError(f"{message} (neither a flag of the {algorithm} script nor of accelerate launch)")

    parser.error = error  # one line, not accelerate's usage
    launcher_args = parser.parse_args(arguments)
    elastic = logging.getLogger(_ELASTIC_LOGGER)
    elastic.addFilter(_not_a_failure_log)
    try:
        launch_command(launcher_args)
    except subprocess.CalledProcessError as failure:  # one process (accelerate's simple launcher)
        raise SystemExit(failure.returncode) from None
    except Exception as failure:  # torch elastic's ChildFailedError (the multi_gpu, FSDP and DeepSpeed launchers)
        status = failed_run_status(failure)
        if status is None:
            raise
        raise SystemExit(status) from None
    finally:
        elastic.removeFilter(_not_a_failure_log)


def toy_data(directory: str) -> str:
    """`trl-ext toy-data DIR`: write the toy task's datasets under `directory` (`trl_ext.toy.write_toy_datasets`) and
    describe them, with the toy model's path (`trl_ext.toy.tiny_model_path()`, built on first use) and the `trl`
    commands that train on them."""
    import torch

    accelerator = getattr(torch, "accelerator", None)
    gpu = accelerator.is_available() if accelerator is not None else torch.cuda.is_available()
    if not gpu:  # as the scripts do: no "could not detect an accelerator" warning from DeepSpeed, where installed
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from .toy import tiny_model_path, write_toy_datasets

    written = write_toy_datasets(os.path.abspath(directory))
    model = tiny_model_path()
    lines = []
    for kind, (path, splits) in written.items():
        lines.append(f"{kind:<11}{path}  ({', '.join(f'{split}: {rows} rows' for split, rows in splits.items())})")
    lines.append(f"{'model':<11}{model}  (trl_ext.toy.tiny_model_path(): the toy model and its tokenizer)")
    common = f"--model_name_or_path {model}" + ("" if gpu else " --use_cpu --bf16 false")
    lines += [
        "",
        "TRL's own scripts train on them, e.g.:",
        f"  trl grpo {common} --output_dir outputs/trl-grpo-toy --dataset_name {written['prompts'][0]} "
        "--reward_funcs trl_ext.toy.toy_reward --num_generations 4 --per_device_train_batch_size 8 "
        "--max_completion_length 8",
        f"  trl sft {common} --output_dir outputs/trl-sft-toy --dataset_name {written['sft'][0]}",
        f"  trl dpo {common} --output_dir outputs/trl-dpo-toy --dataset_name {written['preference'][0]}",
    ]
    return "\n".join(lines)


def _print(text: str) -> None:
    """Print to stdout; a reader that closed the pipe early (`trl-ext list | head`) ends the output quietly."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes at exit


def main(argv: Sequence[str] | None = None) -> None:
    """The `trl-ext` command. Returns None, so the console script exits with status 0 after a run; use `train(...)`
    for the trainer. A usage error (an unknown flag or algorithm, a bad value, a missing `--algorithm`, a bad
    `--config`) prints one line, `trl-ext ...: error: ... (see ... --help)`, on stderr and exits with status 2."""
    parser = _Parser(prog="trl-ext", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train_parser = commands.add_parser(
        "train",
        help="train an algorithm (every TRL flag of the example scripts is accepted; see trl-ext train --help)",
        add_help=False,
        allow_abbrev=False,
    )
    train_parser.add_argument("--algorithm", help=f"one of {', '.join(_trainable())}")
    train_parser.add_argument("--accelerate_config")
    train_parser.add_argument("-h", "--help", action="store_true")
    list_parser = commands.add_parser("list", help="the algorithms by trainer family; one algorithm's settings")
    list_parser.add_argument("algorithm", nargs="?", help="show this algorithm's classes, parts and defaults")
    commands.add_parser("env", help="versions and devices, for bug reports")
    toy_parser = commands.add_parser(
        "toy-data",
        help="write the toy task's datasets (GRPO prompts, SFT demonstrations, DPO pairs) for TRL's own scripts, and "
        "print the toy model's path",
    )
    toy_parser.add_argument("directory", help="where to write prompts/, sft/ and preference/")
    args, rest = parser.parse_known_args(argv)
    if args.command == "train":
        if args.algorithm is None:
            if args.help:
                _print(train_help())
                return None
            train_parser.error("the following arguments are required: --algorithm")
        if args.algorithm not in _trainable():
            train_parser.error(
                f"--algorithm {args.algorithm!r} has no trainer{_guess(args.algorithm, _trainable())}; choose one of "
                f"{', '.join(_trainable())}"
            )
        from .scripts._common import usage_errors_exit

        with usage_errors_exit("trl-ext train", help_command=f"trl-ext train --algorithm {args.algorithm} --help"):
            if args.help:  # the full help of the algorithm's script
                script = script_parser(args.algorithm, rest)
                script.prog = f"trl-ext train --algorithm {args.algorithm}"
                script.print_help()
            elif args.accelerate_config is not None:
                launch(args.algorithm, args.accelerate_config, rest)
            else:
                train(args.algorithm, rest)
        return None
    if rest:
        (toy_parser if args.command == "toy-data" else parser).error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "toy-data":
        _print(toy_data(args.directory))
    elif args.command == "env":
        _print(environment())
    elif args.algorithm is not None:
        from .scripts._common import usage_errors_exit

        with usage_errors_exit("trl-ext list", help_command="trl-ext list"):
            _print(describe_algorithm(args.algorithm))
    else:
        _print(list_algorithms())
    return None


if __name__ == "__main__":
    sys.exit(main())
