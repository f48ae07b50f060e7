"""The script of a family that trains on a dataset as it is (DPO's preference pairs, SFT's demonstrations), with TRL's
command-line conventions: `dpo.py` and `sft.py` are this script with their family's toy data and defaults.

Arguments are parsed by `trl.TrlParser` into TRL's `ScriptArguments` (`--dataset_name`, `--dataset_train_split`,
...), the family's config, `trl.ModelConfig` and `trl.DatasetMixtureConfig`, as `trl dpo` / `trl sft` do; `--config
recipe.yaml` (or a packaged recipe's name) sets any of them.

Without `--model_name_or_path`, the script trains the package's embedded default: the tiny offline model of
`trl_ext.toy` on the toy task's data for the family, evaluating on a held-out split (the `--dataset_test_split`
split, default "test"). On the toy model (no model named, or `--model_name_or_path` is
`trl_ext.toy.tiny_model_path()`) the family's toy settings are the defaults, under the `--config` file and the
command line (command line > config file > toy defaults > TRL's defaults); with a real model TRL's defaults apply.
Without a CUDA device, `use_cpu=True` and `bf16=False` are the defaults. Before training the main process prints a
summary of the run (see `grpo.py`). A dataset path that does not exist, a user dataset without the requested split or
without the columns the family's TRL trainer reads (DPO: `chosen` and `rejected`; SFT: `messages`, `text`, or
`prompt` and `completion`) is an error naming the flag, before the model loads (`dataset_loading.py`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trl import DatasetMixtureConfig, ModelConfig, ScriptArguments, get_peft_config, get_quantization_config

from .. import toy
from ..algorithms import get_algorithm
from ._common import (
    ScriptParser,
    ToyDefaults,
    parse,
    run_summary,
    script_help_command,
    set_defaults,
    set_model_init_kwargs,
    usage_errors_exit,
)
from .dataset_loading import check_columns, data_source, load_user_dataset, select_splits
from .finish import resume_point, train_and_finish
from .launch import check_launch
from .model_source import check_model_source
from .noise import quiet_known_warnings


@dataclass(frozen=True)
class DatasetScript:
    """The script of `algorithm`'s family: `toy_data(rows, seed=...)` makes the toy task's data, `toy_training` (named
    `toy_training_name` in the run summary) holds the toy run's defaults."""

    algorithm: str
    toy_data: Callable[..., Any]
    toy_training: dict[str, Any]
    toy_training_name: str
    data_description: str

    def _parser(self, argv: Sequence[str]) -> tuple[ScriptParser, ToyDefaults | None]:
        config = get_algorithm(self.algorithm).config_class
        parser = ScriptParser((ScriptArguments, config, ModelConfig, DatasetMixtureConfig), algorithm=self.algorithm)
        output = f"outputs/{self.algorithm}-tiny"
        return parser, set_defaults(parser, argv, output, self.toy_training, self.toy_training_name)

    def make_parser(self, algorithm: str, argv: Sequence[str]) -> ScriptParser:
        """The script's `TrlParser`, with the defaults for `argv` (the toy's on the toy model) set (the family script
        protocol: the family has one algorithm)."""
        return self._parser(argv)[0]

    def train(self, algorithm: str, argv: Sequence[str]):
        """The script protocol (`trl_ext.scripts.script_for`, `trl-ext train`): the family has one algorithm."""
        return self.main(argv)

    def main(self, argv: Sequence[str] | None = None):
        """Parse `argv` (default: the command line), train, save the model to `output_dir`; return the trainer.

        Mistakes in the flags or the config file, and a dataset split that does not exist, are a `UsageError` (a
        `ValueError`) raised before the model loads; from the command line (`argv=None`) they print `error: ...` and
        exit with status 2."""
        prog = os.path.basename(sys.argv[0]) or "trl_ext"
        with usage_errors_exit(prog, enabled=argv is None, help_command=script_help_command()):
            return self._main(list(sys.argv[1:] if argv is None else argv))

    def _main(self, argv: list[str]):
        parser, toy_defaults = self._parser(argv)
        script_args, training_args, model_args, dataset_args = parse(parser, argv)
        resume_point(training_args)  # a wrong --resume_from_checkpoint: an error before anything loads
        check_model_source(model_args.model_name_or_path)  # a model that cannot be loaded: one line, now
        check_launch()  # several processes asked of accelerate launch, one started: a warning
        dataset = load_user_dataset(script_args, dataset_args)
        if dataset is None:
            train_split, test_split = script_args.dataset_train_split, script_args.dataset_test_split
            dataset = {train_split: self.toy_data()}
            if test_split != train_split:
                dataset[test_split] = self.toy_data(toy.TEST_PROMPTS, seed=toy.TEST_SEED)
            data = self.data_description
        else:
            data = script_args.dataset_name or "the --datasets mixture"
        optional_test = toy_defaults is not None and toy_defaults.sources.get("eval_strategy") == "toy"
        train_dataset, eval_dataset, note = select_splits(
            dataset, script_args, dataset_args, training_args, optional_test
        )
        data += f" ({note})" if note else ""
        splits = [(script_args.dataset_train_split, train_dataset), (script_args.dataset_test_split, eval_dataset)]
        check_columns(self.algorithm, training_args, splits, data_source(script_args, dataset_args))
        model = model_args.model_name_or_path or toy.tiny_model_path()
        set_model_init_kwargs(training_args, model_args)
        with quiet_known_warnings():  # PEFT's read of a deprecated attribute (--use_peft)
            trainer = get_algorithm(self.algorithm).trainer_class(
                model=model,
                args=training_args,
                train_dataset=train_dataset,
                eval_dataset=eval_dataset,
                quantization_config=get_quantization_config(model_args),
                peft_config=get_peft_config(model_args),
            )
        summary = run_summary(trainer, self.algorithm, model, data, toy_defaults)
        return train_and_finish(trainer, self.algorithm, training_args, script_args, summary)
