"""What the training scripts (`grpo.py`, `dpo.py`) share: defaults, dataset loading, model kwargs, the finish."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import torch
import yaml
from trl import TrlParser, get_dataset


def uses_default_model(argv: Sequence[str]) -> bool:
    """True when neither the command line nor the `--config` file names a model."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--model_name_or_path")
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if known.model_name_or_path:
        return False
    if known.config:
        with open(known.config) as f:
            return not (yaml.safe_load(f) or {}).get("model_name_or_path")
    return True


def set_defaults(parser: TrlParser, argv: Sequence[str], output_dir: str, toy_training: dict[str, Any]) -> None:
    """CPU defaults without CUDA; the toy's output dir and hyperparameters when no model is named."""
    if not torch.cuda.is_available():
        parser.set_defaults(use_cpu=True, bf16=False)
    if uses_default_model(argv):
        parser.set_defaults(output_dir=output_dir, activation_checkpointing=False, **toy_training)


def load_user_dataset(script_args, dataset_args):
    """The dataset named by `--datasets` (a mixture) or `--dataset_name`, as `trl` scripts load it; None if neither."""
    if dataset_args.datasets:
        return get_dataset(dataset_args)
    if script_args.dataset_name:
        from datasets import load_dataset

        return load_dataset(
            script_args.dataset_name, name=script_args.dataset_config, streaming=script_args.dataset_streaming
        )
    return None


def set_model_init_kwargs(training_args, model_args) -> None:
    """`ModelConfig`'s loading options into the config's `model_init_kwargs` (explicit entries win)."""
    training_args.model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
        **(training_args.model_init_kwargs or {}),
    }


def train_and_finish(trainer, name: str, training_args, script_args):
    """Train (resuming if asked), save, report, push if asked, and tear down on every rank together."""
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.accelerator.print(
        f"Trained {name} for {trainer.state.global_step} steps on {trainer.accelerator.num_processes} process(es); "
        f"model saved to {training_args.output_dir}"
    )
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=script_args.dataset_name)
    # Every rank reaches the teardown together: a gloo process group torn down while a peer has already exited can
    # block in its destructor (seen once in 2-process CPU runs).
    trainer.accelerator.wait_for_everyone()
    if hasattr(trainer, "end"):  # transformers >= 5.18: finish the trackers, destroy the process group
        trainer.end()
    return trainer
