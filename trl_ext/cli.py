"""The `trl-ext` command.

    trl-ext train --algorithm sapo [--config configs/sapo.yaml] [TRL flags]   # = examples/train_sapo.py
    trl-ext list                                                             # algorithms, losses, defaults, papers
    trl-ext env                                                              # versions and devices, for bug reports

`train` takes exactly the flags of the example scripts (`trl_ext/scripts/grpo.py`, `trl_ext/scripts/dpo.py`) and,
like them, trains the embedded tiny default offline when no `--model_name_or_path` is given; run it under
`accelerate launch` for several processes (`accelerate launch -m trl_ext.cli train --algorithm sapo ...`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys
from collections.abc import Sequence

from . import __version__
from .algorithms import ALGORITHMS


def _trainable() -> list[str]:
    return [name for name, spec in ALGORITHMS.items() if spec.has_trainer]


def train(algorithm: str, argv: Sequence[str]):
    """Train `algorithm` with the example scripts' argument parsing; returns the trainer (the programmatic form of
    `trl-ext train`). A mistake in the flags, the config file or the dataset's splits is a `ValueError`
    (`trl_ext.scripts._common.UsageError`) raised before the model loads."""
    if algorithm not in ALGORITHMS or not ALGORITHMS[algorithm].has_trainer:
        raise SystemExit(
            f"trl-ext train: --algorithm {algorithm!r} has no trainer; choose one of {', '.join(_trainable())}"
        )
    if ALGORITHMS[algorithm].schema == "dpo":  # preference pairs: the DPO script (a DPOTrainer)
        from .scripts.dpo import main as dpo_main

        return dpo_main(list(argv))
    from .scripts.grpo import main as grpo_main

    return grpo_main(algorithm, list(argv))


def list_algorithms() -> str:
    """Each algorithm: its trainer and config, policy loss, advantage, KL / entropy defaults, its own config fields
    with their defaults, and the paper. Imports neither the configs nor trl (only the argument dataclasses)."""
    from .trainers.model_card import algorithm_defaults

    lines = []
    for name, spec in ALGORITHMS.items():
        if not spec.has_trainer:
            lines.append(f"{name}  (no trainer: loss `{spec.policy_loss_fn}` in trl_ext.losses)  {spec.paper or '-'}")
            continue
        config, trainer = spec.class_names
        lines.append(f"{name}  {trainer} / {config}  {spec.paper}")
        lines.append(f"    {spec.description}")
        lines.append(
            f"    loss: {spec.policy_loss_fn}   advantage: {spec.advantage_fn or '-'}   "
            f"KL estimator: {spec.kl_estimator} (reference default: {spec.kl_loss_fn})   "
            f"entropy: {spec.entropy_loss_fn}"
        )
        defaults = algorithm_defaults(name)
        lines.append(f"    defaults: {', '.join(f'{field}={value!r}' for field, value in defaults.items())}")
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


def main(argv: Sequence[str] | None = None) -> None:
    """The `trl-ext` command. Returns None, so the console script exits with status 0 after a run; use `train(...)`
    for the trainer. Usage errors print `trl-ext ...: error: ...` on stderr and exit with status 2, an algorithm
    without a trainer exits with status 1 and says so."""
    parser = argparse.ArgumentParser(prog="trl-ext", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train_parser = commands.add_parser(
        "train", help="train an algorithm (every TRL flag of the example scripts is accepted)", add_help=False
    )
    train_parser.add_argument("--algorithm", required=True, help=f"one of {', '.join(_trainable())}")
    commands.add_parser("list", help="the algorithms, their losses, defaults and papers")
    commands.add_parser("env", help="versions and devices, for bug reports")
    args, rest = parser.parse_known_args(argv)
    if args.command == "train":
        from .scripts._common import usage_errors_exit

        with usage_errors_exit("trl-ext train"):
            train(args.algorithm, rest)
        return None
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    print(list_algorithms() if args.command == "list" else environment())
    return None


if __name__ == "__main__":
    sys.exit(main())
