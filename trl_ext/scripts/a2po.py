"""Train trl_ext's A*-PO trainer with TRL's command-line conventions (the code behind `examples/train_a2po.py`).

    accelerate launch examples/train_a2po.py                                   # the offline tiny default
    accelerate launch examples/train_a2po.py --config configs/a2po.yaml \\
        --model_name_or_path Qwen/Qwen2.5-1.5B --dataset_name <prompts with a verifiable answer> \\
        --reward_funcs accuracy_reward

Arguments are parsed by `trl.TrlParser` into TRL's `GRPOScriptArguments` (`--dataset_name`, `--reward_funcs`, ...:
the same reward functions `trl grpo` takes, TRL's names or dotted import paths), `trl_ext.A2POConfig` (every flag of
TRL's experimental `A2POConfig`: `--num_value_samples`, `--beta1`, `--beta2`, `--filter_all_incorrect`, ...),
`trl.ModelConfig` and `trl.DatasetMixtureConfig`; `--config recipe.yaml` (or a packaged recipe's name) sets any of
them. TRL's `A2POTrainer` takes reward functions only, neither a reward model (`--reward_model_name_or_path`) nor PEFT
or quantization (`--use_peft`, `--load_in_4bit`, `--load_in_8bit`): each is an error naming the flag, before the model
loads.

Without `--model_name_or_path`, the script trains the package's embedded default: the tiny offline model of
`trl_ext.toy` on its "repeat the letter" prompts (`toy_prompt_splits`, rows of `trl_ext.toy.toy_dataset`) with the
verifiable reward `trl_ext.toy.repeat_letter_reward`; on the toy model the toy run's settings (`A2PO_TRAINING`) are
the defaults, under the `--config` file and the command line (command line > config file > toy defaults > TRL's
defaults). Before training the main process prints a summary of the run (`grpo.py` describes it); the first stage
(V* from the reference's samples) runs when training starts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from datasets import DatasetDict
from trl import DatasetMixtureConfig
from trl.scripts.grpo import GRPOScriptArguments

from .. import toy
from ..algorithms import get_algorithm
from ._common import (
    ScriptParser,
    ToyDefaults,
    UsageError,
    asynchronous_requested,
    model_arguments,
    parse,
    run_summary,
    script_help_command,
    set_defaults,
    set_model_init_kwargs,
    usage_errors_exit,
)
from .dataset_loading import check_columns, data_source, load_user_dataset, select_splits
from .finish import resume_point, train_and_finish
from .grpo import reward_funcs_for
from .launch import check_launch
from .model_source import check_model_source
from .noise import quiet_known_warnings

ALGORITHM = "a2po"

A2PO_TRAINING: dict[str, Any] = dict(
    learning_rate=1e-3,
    lr_scheduler_type="linear",
    warmup_steps=10,
    max_grad_norm=0.5,
    per_device_train_batch_size=64,
    max_completion_length=8,
    max_steps=100,
    logging_steps=5,
    num_value_samples=32,
    beta2=0.1,
    filter_all_incorrect=False,
)
"""`A2POConfig` keyword arguments of the toy run on the "repeat the letter" prompts: the logged reward goes from ~0.1
to ~0.8-0.95 in 100 steps of 64 prompts, one completion each.

The first stage keeps the paper's β₁ = 0.5. Three settings differ from the paper's (and TRL's defaults), for the
toy: `num_value_samples` 32 (with the paper's 8 samples at the untrained model's ~1/8 success rate, about a third of
the eight prompts would draw no correct sample, get V* = 0 and then learn nothing from their wrong answers, whose
advantage r − V* is 0); `beta2` 0.1 (the paper's 1e-3 targets log-ratios of A/β₂, hundreds of nats, harmless at its
learning rate of 1e-6 but at the toy's 1e-3 the regression pushes the sampled wrong answers down until the tiny model
loses the answer format); and `filter_all_incorrect` False (the toy task repeats its eight prompts over the rows, and
TRL drops a prompt when any one of its rows drew only wrong samples)."""


TOY_PROMPTS = 128
"""Rows of the toy run's train split: the first stage samples `num_value_samples` completions of every row before
training (the toy task has eight distinct prompts, so more rows add stage-1 time, not prompts)."""


def toy_prompt_splits(train_split: str = "train", test_split: str = "test") -> DatasetDict:
    """The toy task's prompts for A*-PO: `TOY_PROMPTS` rows of `trl_ext.toy.toy_dataset` (`prompt`, `target`) and the
    held-out rows of `trl_ext.toy.toy_splits` (the same name twice: the train rows alone)."""
    splits = {train_split: toy.toy_dataset(TOY_PROMPTS)}
    if test_split != train_split:
        splits[test_split] = toy.toy_dataset(toy.TEST_PROMPTS, seed=toy.TEST_SEED)
    return DatasetDict(splits)


def _parser(argv: Sequence[str]) -> tuple[ScriptParser, ToyDefaults | None]:
    config_class = get_algorithm(ALGORITHM).config_class
    parser = ScriptParser(
        (GRPOScriptArguments, config_class, model_arguments(config_class), DatasetMixtureConfig),
        algorithm=ALGORITHM,
        config_class=config_class,
    )
    toy_defaults = set_defaults(
        parser, argv, f"outputs/{ALGORITHM}-tiny", A2PO_TRAINING, "trl_ext.scripts.a2po.A2PO_TRAINING"
    )
    return parser, toy_defaults


def make_parser(algorithm: str, argv: Sequence[str]) -> ScriptParser:
    """The script's `TrlParser`, with the defaults for `argv` (the toy's on the toy model) set (the family script
    protocol: the family has one algorithm, `a2po`)."""
    return _parser(argv)[0]


def train(algorithm: str, argv: Sequence[str]):
    """The script protocol (`trl_ext.scripts.script_for`, `trl-ext train`): the family has one algorithm."""
    return main(argv)


def main(argv: Sequence[str] | None = None):
    """Parse `argv` (default: the command line), train, save the model to `output_dir`; return the trainer.

    Mistakes in the flags or the config file, a dataset split that does not exist and the options TRL's A2POTrainer
    cannot take are a `UsageError` (a `ValueError`) raised before the model loads; from the command line
    (`argv=None`) they print `error: ...` and exit with status 2."""
    prog = os.path.basename(sys.argv[0]) or "trl_ext"
    with usage_errors_exit(prog, enabled=argv is None, help_command=script_help_command()):
        return _main(list(sys.argv[1:] if argv is None else argv))


def check_model_options(script_args: GRPOScriptArguments, model_args) -> None:
    """The flags TRL's `A2POTrainer` has no argument for: a reward model, PEFT and quantization; a `UsageError` naming
    the flag."""
    refused = {
        "--reward_model_name_or_path": (
            script_args.reward_model_name_or_path,
            "A*-PO's trainer scores with reward functions only: pass --reward_funcs (TRL's names or a dotted path)",
        ),
        "--use_peft": (model_args.use_peft, "TRL's A2POTrainer takes no peft_config: train the full model"),
        "--load_in_4bit": (model_args.load_in_4bit, "TRL's A2POTrainer takes no quantization_config"),
        "--load_in_8bit": (model_args.load_in_8bit, "TRL's A2POTrainer takes no quantization_config"),
    }
    for flag, (value, reason) in refused.items():
        if value:
            raise UsageError(f"{flag}: not supported by the a2po trainer; {reason}")


def _main(argv: list[str]):
    if asynchronous_requested(argv):  # `trl-ext train --asynchronous true`: the family has no asynchronous form
        reason = get_algorithm(ALGORITHM).family.synchronous_only
        raise UsageError(f"--asynchronous true: {ALGORITHM} has no asynchronous form: {reason}")
    parser, toy_defaults = _parser(argv)
    script_args, training_args, model_args, dataset_args = parse(parser, argv)
    resume_point(training_args)  # a wrong --resume_from_checkpoint: an error before anything loads
    check_model_source(model_args.model_name_or_path)  # a model that cannot be loaded: one line, now
    check_model_options(script_args, model_args)
    check_launch()  # several processes asked of accelerate launch, one started: a warning
    toy_task = not (dataset_args.datasets or script_args.dataset_name)
    reward_funcs = reward_funcs_for(script_args, None, toy_task)  # a wrong name: before loading any data
    if not reward_funcs:
        raise UsageError(
            "--reward_funcs is required with your dataset: A*-PO scores each completion with reward functions (TRL's "
            "names such as accuracy_reward, or a dotted import path such as my_rewards.exact_match)"
        )
    dataset = load_user_dataset(script_args, dataset_args)
    if toy_task:
        dataset = toy_prompt_splits(script_args.dataset_train_split, script_args.dataset_test_split)
        data = 'the toy "repeat the letter" task (trl_ext.scripts.a2po.toy_prompt_splits)'
    else:
        data = script_args.dataset_name or "the --datasets mixture"
    train_dataset, eval_dataset, note = select_splits(dataset, script_args, dataset_args, training_args)
    data += f" ({note})" if note else ""
    splits = [(script_args.dataset_train_split, train_dataset), (script_args.dataset_test_split, eval_dataset)]
    check_columns(ALGORITHM, training_args, splits, data_source(script_args, dataset_args))
    model = model_args.model_name_or_path or toy.tiny_model_path()
    set_model_init_kwargs(training_args, model_args)
    with quiet_known_warnings():
        trainer = get_algorithm(ALGORITHM).trainer_class(
            model=model,
            reward_funcs=reward_funcs,
            args=training_args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
        )
    summary = run_summary(trainer, ALGORITHM, model, data, toy_defaults)
    return train_and_finish(trainer, ALGORITHM, training_args, script_args, summary)
