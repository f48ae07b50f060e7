"""Train trl_ext's SDFT trainer (self-distillation fine-tuning) with TRL's command-line conventions (the code behind
`examples/train_sdft.py`).

    accelerate launch examples/train_sdft.py                                   # the offline tiny default
    accelerate launch examples/train_sdft.py --config configs/sdft.yaml \\
        --model_name_or_path Qwen/Qwen2.5-1.5B-Instruct --dataset_name <prompts with a privileged_context column>

Arguments are parsed by `trl.TrlParser` into TRL's `ScriptArguments` (`--dataset_name`, `--dataset_train_split`,
...), `trl_ext.SDFTConfig` (every `trl.experimental.sdft.SDFTConfig` flag), `trl.ModelConfig` and
`trl.DatasetMixtureConfig`; `--config recipe.yaml` (or a packaged recipe's name) sets any of them. The rows need a
`prompt` (text or chat messages) and a `privileged_context` (the demonstration the teacher sees); a user dataset
without them is an error naming the flag and the dataset's columns, before the model loads. `ModelConfig`'s
quantization flags go to `model_init_kwargs` (TRL's SDFT trainer takes no quantization argument).

Without `--model_name_or_path`, the script trains the package's embedded default: the tiny offline model of
`trl_ext.toy` (which repeats a letter unrelated to the prompt) on the toy task's demonstrations
(`toy_demonstration_dataset`: "Repeat the letter c:" with the privileged context " c c c"). The toy teacher prompt
is the prompt followed by the demonstration (`teacher_prompt_template="{prompt}{privileged_context}"`), the format the
toy model was pretrained on, so the teacher, having just read " c c c", predicts more c's, and the student learns to
answer the prompt's letter without the demonstration. What it learns is logged as `reward`: the toy reward
(`trl_ext.toy.toy_reward`) of the rollouts that each step trains on (a readout, `RolloutRewardCallback`; SDFT itself
uses no reward). Command line > config file > toy defaults (`SDFT_TRAINING`) > TRL's defaults. Before training the
main process prints a summary of the run; after it, the closing line (steps, the reward's first and last value, the
saved model, the curves).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from datasets import Dataset
from transformers import TrainerCallback
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
from .dataset_loading import RequiredColumns, check_columns, data_source, load_user_dataset, select_splits
from .finish import resume_point, train_and_finish
from .launch import check_launch
from .model_source import check_model_source
from .noise import quiet_known_warnings

SDFT_TRAINING: dict[str, Any] = dict(
    learning_rate=1e-3,
    lr_scheduler_type="linear",
    warmup_steps=5,
    max_grad_norm=0.5,
    per_device_train_batch_size=64,
    num_generations=8,
    max_completion_length=8,
    temperature=1.0,
    max_steps=60,
    logging_steps=5,
    distillation_topk=20,
    teacher_prompt_template="{prompt}{privileged_context}",
)
"""`SDFTConfig` keyword arguments of the SDFT toy run on `toy_demonstration_dataset`: TRL's loss and teacher defaults
(the generalized JSD with α = 0.5 over the student's top-k tokens, k = 20 here; the initial model as the teacher) and
the toy's teacher prompt (see the module docstring). The rollouts' toy reward goes from ~0.08 to ~0.74 in 60 steps
(~45 s of training on 2 CPU cores)."""

SDFT_COLUMNS = RequiredColumns(
    "SDFT",
    (("prompt", "privileged_context"),),
    "SDFT needs 'prompt' and 'privileged_context' columns (the prompt the student completes, and the demonstration "
    "the teacher reads after it: text or chat messages)",
)


def toy_demonstration_dataset(num_rows: int = 256, seed: int = 0) -> Dataset:
    """The toy task for SDFT: `num_rows` rows of `prompt` ("Repeat the letter c:"), `privileged_context` (a correct
    answer, " c c c": `trl_ext.toy.toy_expert_dataset`'s completion) and `target` ("c"). Letters balanced and
    shuffled with `seed`; built offline."""
    demos = toy.toy_expert_dataset(num_rows, seed=seed)
    return Dataset.from_dict(
        {"prompt": demos["prompt"], "privileged_context": demos["completion"], "target": demos["target"]}
    )


class RolloutRewardCallback(TrainerCallback):
    """Logs a reward function's mean over the rollouts of TRL's self-distillation trainers as `reward` (in evaluation
    `eval_reward`): what the student's own completions score, at each generation batch. A readout: nothing trains on
    it. Each process logs the mean of its own rollouts (the main process's is the one logged).

    Args:
        reward_func: A TRL reward function, called with `prompts` and `completions` (decoded text).
        metric_log: The trainer's `metric_log(mode)`: TRL's lists of the values averaged at each log.
    """

    def __init__(self, reward_func: Callable[..., list[float]], metric_log: Callable[[str], dict[str, list[float]]]):
        self.reward_func = reward_func
        self.metric_log = metric_log

    def on_self_distillation_batch_prepared(
        self, args, state, control, model=None, processing_class=None, prompt_ids=None, completion_ids=None, **kwargs
    ):
        tokenizer = getattr(processing_class, "tokenizer", processing_class)
        prompts = tokenizer.batch_decode(prompt_ids, skip_special_tokens=True)
        completions = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        rewards = torch.tensor(self.reward_func(prompts=prompts, completions=completions), dtype=torch.float32)
        self.metric_log("train" if model.training else "eval")["reward"].append(rewards.nanmean().item())


@dataclass(frozen=True)
class SelfDistillationScript:
    """The script of a self-distillation family (SDFT, SDPO): TRL's trainer on prompt rows, the toy task's rows and
    defaults on the toy model. `trainer_arguments` and `toy_callbacks` are the family's hooks.

    Attributes:
        algorithm: The family's algorithm (`sdft`, `sdpo`).
        toy_data: `toy_data(rows, seed=...)`: the toy task's rows.
        toy_training: The toy run's defaults, named `toy_training_name` in the run summary.
        data_description: The summary's words for the toy data.
        columns: The columns the trainer reads from a row.
        script_arguments: The dataclass of the script's own flags (TRL's `ScriptArguments`, or a subclass).
    """

    algorithm: str
    toy_data: Callable[..., Dataset]
    toy_training: dict[str, Any]
    toy_training_name: str
    data_description: str
    columns: RequiredColumns
    script_arguments: type = ScriptArguments

    def _parser(self, argv: Sequence[str]) -> tuple[ScriptParser, ToyDefaults | None]:
        config = get_algorithm(self.algorithm).config_class
        parser = ScriptParser(
            (self.script_arguments, config, ModelConfig, DatasetMixtureConfig), algorithm=self.algorithm
        )
        output = f"outputs/{self.algorithm}-tiny"
        return parser, set_defaults(parser, argv, output, self.toy_training, self.toy_training_name)

    def make_parser(self, algorithm: str, argv: Sequence[str]) -> ScriptParser:
        """The script's `TrlParser`, with the defaults for `argv` (the toy's on the toy model) set."""
        return self._parser(argv)[0]

    def train(self, algorithm: str, argv: Sequence[str]):
        """The script protocol (`trl_ext.scripts.script_for`, `trl-ext train`): the family has one algorithm."""
        return self.main(argv)

    def main(self, argv: Sequence[str] | None = None):
        """Parse `argv` (default: the command line), train, save the model to `output_dir`; return the trainer.

        Mistakes in the flags or the config file, and a dataset without the split or the columns, are a `UsageError`
        (a `ValueError`) raised before the model loads; from the command line (`argv=None`) they print `error: ...`
        and exit with status 2."""
        prog = os.path.basename(sys.argv[0]) or "trl_ext"
        with usage_errors_exit(prog, enabled=argv is None, help_command=script_help_command()):
            return self._main(list(sys.argv[1:] if argv is None else argv))

    def trainer_arguments(self, script_args: Any, toy_task: bool) -> dict[str, Any]:
        """The trainer's arguments beyond the model, config and datasets (SDPO: its reward functions)."""
        return {}

    def toy_callbacks(self, trainer: Any) -> list[TrainerCallback]:
        """Callbacks of the toy run (SDFT: the rollouts' toy reward as `reward`)."""
        return []

    def _main(self, argv: list[str]):
        parser, toy_defaults = self._parser(argv)
        script_args, training_args, model_args, dataset_args = parse(parser, argv)
        resume_point(training_args)  # a wrong --resume_from_checkpoint: an error before anything loads
        check_model_source(model_args.model_name_or_path)  # a model that cannot be loaded: one line, now
        check_launch()  # several processes asked of accelerate launch, one started: a warning
        toy_task = not (dataset_args.datasets or script_args.dataset_name)
        extra = self.trainer_arguments(script_args, toy_task)  # a wrong reward name: before any data loads
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
        source = data_source(script_args, dataset_args)
        check_columns(self.algorithm, training_args, splits, source)
        for split, rows in splits:
            if rows is not None:
                self.columns.check(rows, split, source)
        model = model_args.model_name_or_path or toy.tiny_model_path()
        set_model_init_kwargs(training_args, model_args)
        quantization = get_quantization_config(model_args)
        if quantization is not None:  # TRL's self-distillation trainers load the model with model_init_kwargs only
            training_args.model_init_kwargs.setdefault("quantization_config", quantization)
        with quiet_known_warnings():  # PEFT's read of a deprecated attribute (--use_peft)
            trainer = get_algorithm(self.algorithm).trainer_class(
                model=model,
                args=training_args,
                train_dataset=train_dataset,
                eval_dataset=eval_dataset,
                peft_config=get_peft_config(model_args),
                **extra,
            )
        if toy_task:
            for callback in self.toy_callbacks(trainer):
                trainer.add_callback(callback)
        summary = run_summary(trainer, self.algorithm, model, data, toy_defaults)
        return train_and_finish(trainer, self.algorithm, training_args, script_args, summary)


@dataclass(frozen=True)
class SDFTScript(SelfDistillationScript):
    """SDFT's script: on the toy task, the rollouts' toy reward is logged as `reward`."""

    def toy_callbacks(self, trainer: Any) -> list[TrainerCallback]:
        return [RolloutRewardCallback(toy.toy_reward, trainer.metric_log)]


SCRIPT = SDFTScript(
    algorithm="sdft",
    toy_data=toy_demonstration_dataset,
    toy_training=SDFT_TRAINING,
    toy_training_name="trl_ext.scripts.sdft.SDFT_TRAINING",
    data_description="the toy task's prompts with a demonstration as privileged context "
    "(trl_ext.scripts.sdft.toy_demonstration_dataset)",
    columns=SDFT_COLUMNS,
)
make_parser, train, main = SCRIPT.make_parser, SCRIPT.train, SCRIPT.main
