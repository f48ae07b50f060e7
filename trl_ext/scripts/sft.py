"""Train trl_ext's SFT trainer with TRL's command-line conventions (the code behind `examples/train_sft.py`).

    accelerate launch examples/train_sft.py                                    # the offline tiny default
    accelerate launch examples/train_sft.py --config configs/sft.yaml \\
        --model_name_or_path Qwen/Qwen2.5-0.5B --dataset_name trl-lib/Capybara \\
        --sft_loss_fn sft_phi --cutoff_prob 0.9 --use_peft --lora_r 32 --report_to wandb

Arguments are parsed by `trl.TrlParser` into TRL's `ScriptArguments` (`--dataset_name`, `--dataset_train_split`,
...), `trl_ext.SFTConfig` (every `trl.SFTConfig` flag plus `--sft_loss_fn`, `--cutoff_prob` and `--loss_agg_mode`;
TRL's `--loss_type nll|dft` still works), `trl.ModelConfig` and `trl.DatasetMixtureConfig`, as `trl sft` does;
`--config recipe.yaml` sets any of them.

Without `--model_name_or_path`, the script trains the package's embedded default: the tiny offline model of
`trl_ext.toy` on the toy task's expert demonstrations (`toy_expert_dataset`: prompt "Repeat the letter c:",
completion " c c c"), evaluating on held-out demonstrations (the `--dataset_test_split` split, default "test").
On the toy model (no model named, or `--model_name_or_path` is `trl_ext.toy.tiny_model_path()`) the toy's settings
`trl_ext.toy.SFT_TRAINING` are the defaults, under the `--config` file and the command line
(command line > config file > toy defaults > TRL's defaults); with a real model TRL's defaults apply. Without a CUDA
device, `use_cpu=True` and `bf16=False` are the defaults. Before training the main process prints a summary of the run
(see `grpo.py`); a user dataset without the requested split is an error naming the flag and the splits that exist,
before the model loads.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from trl import DatasetMixtureConfig, ModelConfig, ScriptArguments, get_peft_config, get_quantization_config

from .. import toy
from ..toy import SFT_TRAINING
from ..trainers.sft_config import SFTConfig
from ._common import (
    ScriptParser,
    ToyDefaults,
    load_user_dataset,
    parse,
    run_summary,
    script_help_command,
    select_splits,
    set_defaults,
    set_model_init_kwargs,
    train_and_finish,
    usage_errors_exit,
)


def _parser(argv: Sequence[str]) -> tuple[ScriptParser, ToyDefaults | None]:
    parser = ScriptParser((ScriptArguments, SFTConfig, ModelConfig, DatasetMixtureConfig))
    return parser, set_defaults(parser, argv, "outputs/sft-tiny", SFT_TRAINING, "trl_ext.toy.SFT_TRAINING")


def make_parser(algorithm: str, argv: Sequence[str]) -> ScriptParser:
    """The script's `TrlParser`, with the defaults for `argv` (the toy's on the toy model) set (the family script
    protocol: the family has one algorithm)."""
    return _parser(argv)[0]


def train(algorithm: str, argv: Sequence[str]):
    """The family script protocol (`TrainerFamily.script`, `trl-ext train`): the SFT family has one algorithm."""
    return main(argv)


def main(argv: Sequence[str] | None = None):
    """Parse `argv` (default: the command line), train, save the model to `output_dir`; return the trainer.

    Mistakes in the flags or the config file, and a dataset split that does not exist, are a `UsageError` (a
    `ValueError`) raised before the model loads; from the command line (`argv=None`) they print `error: ...` and
    exit with status 2."""
    prog = os.path.basename(sys.argv[0]) or "trl_ext"
    with usage_errors_exit(prog, enabled=argv is None, help_command=script_help_command()):
        return _main(list(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]):
    from ..trainers.sft_trainer import SFTTrainer

    parser, toy_defaults = _parser(argv)
    script_args, training_args, model_args, dataset_args = parse(parser, argv)
    dataset = load_user_dataset(script_args, dataset_args)
    if dataset is None:
        dataset = {
            script_args.dataset_train_split: toy.toy_expert_dataset(),
            script_args.dataset_test_split: toy.toy_expert_dataset(toy.TEST_PROMPTS, seed=toy.TEST_SEED),
        }
        if script_args.dataset_test_split == script_args.dataset_train_split:
            dataset = {script_args.dataset_train_split: toy.toy_expert_dataset()}
        data = "the toy task's expert demonstrations (trl_ext.toy.toy_expert_dataset)"
    else:
        data = script_args.dataset_name or "the --datasets mixture"
    train_dataset, eval_dataset = select_splits(dataset, script_args, dataset_args, training_args)
    model = model_args.model_name_or_path or toy.tiny_model_path()
    set_model_init_kwargs(training_args, model_args)
    trainer = SFTTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        quantization_config=get_quantization_config(model_args),
        peft_config=get_peft_config(model_args),
    )
    summary = run_summary(trainer, "sft", model, data, toy_defaults)
    return train_and_finish(trainer, "sft", training_args, script_args, summary)
