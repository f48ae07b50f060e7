"""Train trl_ext's Online DPO trainer with TRL's command-line conventions (the code behind
`examples/train_online_dpo.py`).

    accelerate launch examples/train_online_dpo.py                             # the offline tiny default
    accelerate launch examples/train_online_dpo.py --config configs/online_dpo.yaml \\
        --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --dataset_name trl-lib/ultrafeedback-prompt \\
        --reward_model_name_or_path trl-lib/Qwen2-0.5B-Reward --use_peft --report_to wandb

Arguments are parsed by `trl.TrlParser` into TRL's `GRPOScriptArguments` (`--dataset_name`, `--reward_funcs`,
`--reward_model_name_or_path`, ...: the prompts and the rewards, read as the GRPO scripts read them, `grpo.py`),
`trl_ext.OnlineDPOConfig` (every flag of TRL's `OnlineDPOConfig`: `--beta`, `--loss_type`, `--missing_eos_penalty`,
`--max_new_tokens`, ...), `trl.ModelConfig` and `trl.DatasetMixtureConfig`; `--config recipe.yaml` sets any of them.
`OnlineDPOConfig`'s own `--reward_model_path` (which TRL's trainer does not read) is taken as
`--reward_model_name_or_path`.

Without `--model_name_or_path`, the script trains the package's embedded default: the tiny offline model of
`trl_ext.toy` on the toy "repeat the letter" prompts (`trl_ext.toy.toy_dataset`), ranked by the toy task's verifiable
reward (`trl_ext.toy.repeat_letter_reward`) unless `--reward_funcs` names others, with the toy run's settings
(`ONLINE_DPO_TRAINING`) as defaults under the `--config` file and the command line; the mean reward of the sampled
completions (`reward`) rises from 0.10 to 0.85 in 100 steps. TRL's `OnlineDPOTrainer` has no evaluation loop for
prompts (its evaluation runs the model on the raw prompt strings and fails), so `--eval_strategy` other than `no` is a
usage error. A dataset without a `prompt` column is one too, before the model loads; the run summary, the closing
line and the other checks are the GRPO scripts' (`_common.py`, `finish.py`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from transformers import AutoTokenizer
from trl import DatasetMixtureConfig, get_peft_config, get_quantization_config
from trl.scripts.grpo import GRPOScriptArguments

from .. import toy
from ..algorithms import get_algorithm
from ._common import (
    ScriptParser,
    ToyDefaults,
    UsageError,
    model_arguments,
    parse,
    run_summary,
    script_help_command,
    set_defaults,
    set_model_init_kwargs,
    usage_errors_exit,
)
from .dataset_loading import RequiredColumns, data_source, load_user_dataset, select_splits
from .finish import resume_point, train_and_finish
from .grpo import reward_funcs_for
from .launch import check_launch
from .model_source import check_model_source
from .noise import quiet_known_warnings

ALGORITHM = "online_dpo"

ONLINE_DPO_TRAINING: dict[str, Any] = dict(
    learning_rate=2e-3,
    lr_scheduler_type="linear",
    warmup_steps=5,
    max_grad_norm=0.2,
    per_device_train_batch_size=64,
    max_new_tokens=8,
    temperature=1.0,
    beta=0.5,
    max_steps=100,
    logging_steps=5,
)
"""`OnlineDPOConfig` keyword arguments of the toy run on `trl_ext.toy.toy_dataset` with `repeat_letter_reward`: 64
prompts (128 completions) per step; the mean reward goes from 0.10 to 0.85 in 100 steps (~60 s of training on 2 CPU
cores). β 0.5 (TRL's default, 0.1, learns the toy more slowly: 0.68 in 100 steps); warmup and the tight gradient clip
keep the tiny model in its format, as in the GRPO toy run (`trl_ext.toy.DEFAULT_TRAINING`)."""

PROMPT_COLUMNS = RequiredColumns(
    "Online DPO",
    (("prompt",),),
    "Online DPO needs a 'prompt' column (the text, or the chat messages, that the policy completes twice; the other "
    "columns go to the reward functions)",
)


def _parser(argv: Sequence[str]) -> tuple[ScriptParser, ToyDefaults | None]:
    config_class = get_algorithm(ALGORITHM).config_class
    parser = ScriptParser(
        (GRPOScriptArguments, config_class, model_arguments(config_class), DatasetMixtureConfig),
        algorithm=ALGORITHM,
        config_class=config_class,
    )
    toy_defaults = set_defaults(
        parser, argv, f"outputs/{ALGORITHM}-tiny", ONLINE_DPO_TRAINING, "trl_ext.scripts.online_dpo.ONLINE_DPO_TRAINING"
    )
    return parser, toy_defaults


def make_parser(algorithm: str, argv: Sequence[str]) -> ScriptParser:
    """The script's `TrlParser`, with the defaults for `argv` (the toy's on the toy model) set (the family script
    protocol: the family has one algorithm)."""
    return _parser(argv)[0]


def train(algorithm: str, argv: Sequence[str]):
    """The script protocol (`trl_ext.scripts.script_for`, `trl-ext train`): the family has one algorithm."""
    return main(argv)


def main(argv: Sequence[str] | None = None):
    """Parse `argv` (default: the command line), train, save the model to `output_dir`; return the trainer.

    Mistakes in the flags or the config file, a dataset without a `prompt` column and evaluation asked for are a
    `UsageError` (a `ValueError`) raised before the model loads; from the command line (`argv=None`) they print
    `error: ...` and exit with status 2."""
    prog = os.path.basename(sys.argv[0]) or "trl_ext"
    with usage_errors_exit(prog, enabled=argv is None, help_command=script_help_command()):
        return _main(list(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]):
    parser, toy_defaults = _parser(argv)
    script_args, training_args, model_args, dataset_args = parse(parser, argv)
    resume_point(training_args)  # a wrong --resume_from_checkpoint: an error before anything loads
    check_model_source(model_args.model_name_or_path)  # a model that cannot be loaded: one line, now
    check_launch()  # several processes asked of accelerate launch, one started: a warning
    if training_args.eval_strategy != "no":
        raise UsageError(
            f"--eval_strategy {getattr(training_args.eval_strategy, 'value', training_args.eval_strategy)}: TRL's "
            "OnlineDPOTrainer has no evaluation loop for prompts (it would run the model on the raw prompt "
            "strings); leave --eval_strategy at no"
        )
    _take_reward_model_path(script_args, training_args)
    toy_task = not (dataset_args.datasets or script_args.dataset_name)
    reward_funcs = reward_funcs_for(script_args, None, toy_task)  # a wrong name: before loading any data
    if not reward_funcs:
        raise UsageError(
            "no reward: Online DPO ranks the two completions of each prompt by reward; pass --reward_funcs (TRL's "
            "reward names, or a dotted path such as my_rewards.score) or --reward_model_name_or_path"
        )
    if toy_task:
        dataset = {script_args.dataset_train_split: toy.toy_dataset()}
        data = 'the toy "repeat the letter" prompts (trl_ext.toy.toy_dataset)'
    else:
        dataset = load_user_dataset(script_args, dataset_args)
        data = script_args.dataset_name or "the --datasets mixture"
    train_dataset, _, _ = select_splits(dataset, script_args, dataset_args, training_args)
    PROMPT_COLUMNS.check(train_dataset, script_args.dataset_train_split, data_source(script_args, dataset_args))

    model = model_args.model_name_or_path or toy.tiny_model_path()
    set_model_init_kwargs(training_args, model_args)
    quantization = get_quantization_config(model_args)
    if quantization is not None:  # TRL's OnlineDPOTrainer loads the model with `model_init_kwargs` only
        training_args.model_init_kwargs["quantization_config"] = quantization
    tokenizer = AutoTokenizer.from_pretrained(
        model, revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code
    )
    with quiet_known_warnings():  # PEFT's read of a deprecated attribute (--use_peft)
        trainer = get_algorithm(ALGORITHM).trainer_class(
            model=model,
            reward_funcs=reward_funcs,
            args=training_args,
            train_dataset=train_dataset,
            processing_class=tokenizer,
            peft_config=get_peft_config(model_args),
        )
    summary = run_summary(trainer, ALGORITHM, model, data, toy_defaults)
    return train_and_finish(trainer, ALGORITHM, training_args, script_args, summary)


def _take_reward_model_path(script_args: GRPOScriptArguments, training_args) -> None:
    """`OnlineDPOConfig.reward_model_path` (a TRL field its trainer does not read) as `--reward_model_name_or_path`;
    the two naming different models is a `UsageError`."""
    path = training_args.reward_model_path
    if path is None or path == script_args.reward_model_name_or_path:
        return
    if script_args.reward_model_name_or_path is not None:
        raise UsageError(
            f"--reward_model_path {path} and --reward_model_name_or_path {script_args.reward_model_name_or_path} "
            "name different reward models; pass one of them"
        )
    script_args.reward_model_name_or_path = path
