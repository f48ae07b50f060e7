"""Train trl_ext's IW-OPD trainer with TRL's command-line conventions (the code behind `examples/train_iw_opd.py`).

    accelerate launch examples/train_iw_opd.py                                 # the offline tiny default
    accelerate launch examples/train_iw_opd.py --config configs/iw_opd.yaml \\
        --model_name_or_path Qwen/Qwen3-0.6B --teacher_model_name_or_path Qwen/Qwen3-4B \\
        --dataset_name <dataset of chat messages>

Arguments are parsed by `trl.TrlParser` into TRL's `ScriptArguments` (`--dataset_name`, `--dataset_train_split`,
...), `trl_ext.IWOPDConfig` (every flag of TRL's experimental `IWOPDConfig`: `--distillation_objective`,
`--iw_opd_gamma`, `--teacher_model_name_or_path`, `--use_teacher_server`, ...), `trl.ModelConfig` and
`trl.DatasetMixtureConfig`; `--config recipe.yaml` (or a packaged recipe's name) sets any of them. TRL's trainer
reads a `messages` column of chat messages: a prompt alone (the student completes it) or ending with the
assistant's answer (trained on directly when a step is off-policy, `lmbda` < 1).

Without `--model_name_or_path`, the script trains the package's embedded default: the tiny offline model of
`trl_ext.toy` distilled from the toy's teacher (`trl_ext.toy.tiny_teacher_path()`, unless
`--teacher_model_name_or_path` names another) on the toy task's prompts (`trl_ext.toy.toy_splits`), with the toy
defaults (`IW_OPD_TRAINING`) under the config file and the command line. The toy models were trained on the task as
plain text ("Repeat the letter c:" -> " c c c", the answer copying the prompt's token), so the toy run hands TRL's
trainer its prompts as plain text (`PlainPromptCollator`) instead of through the chat template. The student starts
by answering with a random letter (toy reward ~1/8), the teacher with the prompt's (~1.0); the run measures the toy
reward of the student's completions of the 64 held-out prompts before training and at each log (`ToyReward`, logged
as `reward`, which the closing line and the curves follow) and prints both ends. A real model needs a teacher:
`--teacher_model_name_or_path`, or `--use_teacher_server true` with `--teacher_model_server_url`. The run summary,
the usage errors and the run's end are the other scripts' (`_common.py`, `dataset_loading.py`, `finish.py`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import torch
from datasets import Dataset
from transformers import TrainerCallback
from trl import DatasetMixtureConfig, ModelConfig, ScriptArguments, get_peft_config

from .. import toy
from ..algorithms import get_algorithm
from ._common import (
    ScriptParser,
    UsageError,
    parse,
    run_summary,
    script_help_command,
    set_defaults,
    set_model_init_kwargs,
    usage_errors_exit,
)
from .dataset_loading import RequiredColumns, data_source, load_user_dataset, select_splits
from .finish import resume_point, train_and_finish
from .launch import check_launch
from .model_source import check_model_source
from .noise import quiet_known_warnings

ALGORITHM = "iw_opd"

IW_OPD_TRAINING: dict[str, Any] = dict(
    learning_rate=1e-3,
    lr_scheduler_type="linear",
    warmup_steps=10,
    max_grad_norm=0.2,
    per_device_train_batch_size=128,
    num_generations=16,
    max_completion_length=8,
    max_length=64,
    max_steps=120,
    logging_steps=10,
)
"""`IWOPDConfig` keyword arguments of the IW-OPD toy run, with TRL's loss and sampling defaults
(`distillation_objective="iw_opd"`, `iw_opd_gamma=0.5`, `lmbda=1.0`, `temperature=1.0`, `top_p=0.95`): 8 prompts x
16 completions per step. The held-out toy reward goes from ~0.15 to ~1.0 in 120 steps (~45 s on 2 CPU cores). With
64 completions per step it rises more slowly (~0.7 after 100 steps): the sampled-token advantage has no baseline,
and smaller batches leave it noisier."""

MESSAGES_COLUMNS = RequiredColumns(
    "IW-OPD",
    (("messages",),),
    "IW-OPD (TRL's IWOPDTrainer) needs a 'messages' column of chat messages: the prompt, which the student completes, "
    "optionally ending with the assistant's answer (trained on at the off-policy steps, lmbda < 1)",
)


class PlainPromptCollator:
    """The batches of TRL's IW-OPD trainer from plain-text prompts, the toy task's format (the toy models answer
    "Repeat the letter c:" with " c c c", copying the prompt's token; TRL's own collator reads `messages` through the
    chat template, where the answer's first token is another one): each row's `prompt` tokenized as it is (at most
    `max_prompt_length` tokens), left-padded, with no completion (the student generates it)."""

    def __init__(self, tokenizer, max_prompt_length: int | None = None):
        self.tokenizer, self.max_prompt_length = tokenizer, max_prompt_length

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        rows = [
            self.tokenizer(
                row["prompt"], truncation=self.max_prompt_length is not None, max_length=self.max_prompt_length,
                add_special_tokens=False,
            )["input_ids"]
            for row in examples
        ]  # fmt: skip
        width = max(map(len, rows))
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in rows])
        attention_mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in rows])
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": torch.full_like(input_ids, -100),
            "prompts": input_ids,
            "prompt_attention_mask": attention_mask,
        }


class ToyReward(TrainerCallback):
    """The toy reward (`trl_ext.toy.repeat_letter_reward`) of the student's sampled completions of held-out prompts,
    measured before training (logged at step 0) and before each log (logged with it, as `reward`). Sampled as the
    trainer samples (its temperature and completion length), from a fixed seed and without touching the run's random
    state."""

    def __init__(self, trainer, dataset: Dataset, seed: int = toy.TEST_SEED):
        self.trainer, self.dataset, self.seed = trainer, dataset, seed
        self.values: list[tuple[int, float]] = []

    @torch.no_grad()
    def measure(self) -> float:
        """The mean toy reward of one sampled completion per held-out prompt."""
        trainer, tokenizer = self.trainer, self.trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        training = model.training
        encoded = tokenizer(list(self.dataset["prompt"]), padding=True, return_tensors="pt", add_special_tokens=False)
        encoded = {key: value.to(model.device) for key, value in encoded.items()}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            model.eval()
            generated = model.generate(
                **encoded,
                do_sample=True,
                temperature=trainer.args.temperature,
                top_p=trainer.args.top_p,
                max_new_tokens=trainer.args.max_completion_length,
                pad_token_id=tokenizer.pad_token_id,
            )
            model.train(training)
        completions = tokenizer.batch_decode(generated[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
        rewards = toy.repeat_letter_reward(completions, target=list(self.dataset["target"]))
        return sum(rewards) / len(rewards)

    def _record(self, step: int) -> float:
        value = self.measure()
        self.values.append((step, value))
        return value

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:
            state.log_history.append({"reward": self._record(0), "step": 0})

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_log or state.global_step == state.max_steps:  # measured just before the trainer logs
            self.trainer.metric_log("train")["reward"].append(self._record(state.global_step))


def _parser(argv: Sequence[str]):
    parser = ScriptParser(
        (ScriptArguments, get_algorithm(ALGORITHM).config_class, ModelConfig, DatasetMixtureConfig),
        algorithm=ALGORITHM,
    )
    toy_defaults = set_defaults(
        parser, argv, f"outputs/{ALGORITHM}-tiny", IW_OPD_TRAINING, f"{__name__}.IW_OPD_TRAINING"
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

    Mistakes in the flags or the config file, a dataset without a `messages` column, and a real model without a
    teacher are a `UsageError` (a `ValueError`) raised before the model loads; from the command line (`argv=None`)
    they print `error: ...` and exit with status 2."""
    prog = os.path.basename(sys.argv[0]) or "trl_ext"
    with usage_errors_exit(prog, enabled=argv is None, help_command=script_help_command()):
        return _main(list(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]):
    parser, toy_defaults = _parser(argv)
    script_args, training_args, model_args, dataset_args = parse(parser, argv)
    resume_point(training_args)  # a wrong --resume_from_checkpoint: an error before anything loads
    check_model_source(model_args.model_name_or_path)
    check_launch()
    dataset = load_user_dataset(script_args, dataset_args)
    embedded = dataset is None
    if embedded:
        dataset = toy.toy_splits(script_args.dataset_train_split, script_args.dataset_test_split)
        data = "the toy task's prompts, as plain text (trl_ext.toy.toy_splits)"
    else:
        data = script_args.dataset_name or "the --datasets mixture"
    train_dataset, eval_dataset, note = select_splits(dataset, script_args, dataset_args, training_args, embedded)
    data += f" ({note})" if note else ""
    if not embedded:
        source = data_source(script_args, dataset_args)
        splits = [(script_args.dataset_train_split, train_dataset), (script_args.dataset_test_split, eval_dataset)]
        for split, rows in splits:
            if rows is not None:
                MESSAGES_COLUMNS.check(rows, split, source)
    training_args.teacher_model_name_or_path = _teacher(training_args, toy_defaults is not None)
    model = model_args.model_name_or_path or toy.tiny_model_path()
    set_model_init_kwargs(training_args, model_args)
    toy_task = {}
    if embedded:  # the toy's plain-text prompts (TRL's collator reads chat messages)
        tokenizer = toy.build_tokenizer() if toy_defaults is not None else _tokenizer(model, training_args, model_args)
        collator = PlainPromptCollator(tokenizer, training_args.max_prompt_length)
        toy_task = {"processing_class": tokenizer, "data_collator": collator}
    with quiet_known_warnings():
        trainer = get_algorithm(ALGORITHM).trainer_class(
            model=model,
            args=training_args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            peft_config=get_peft_config(model_args),
            **toy_task,
        )
    reward = None
    if embedded and toy_defaults is not None:  # the toy task on the toy model: follow its reward
        reward = ToyReward(trainer, toy.toy_dataset(toy.TEST_PROMPTS, seed=toy.TEST_SEED))
        trainer.add_callback(reward)
    summary = run_summary(trainer, ALGORITHM, model, data, toy_defaults)
    train_and_finish(trainer, ALGORITHM, training_args, script_args, summary)
    if reward is not None and len(reward.values) > 1:
        (_, before), (step, after) = reward.values[0], reward.values[-1]
        trainer.accelerator.print(
            f"Toy reward of the student's completions of {toy.TEST_PROMPTS} held-out prompts: {before:.2f} before "
            f"training -> {after:.2f} after step {step} (the teacher's: ~1.0)"
        )
    return trainer


def _teacher(training_args, on_toy: bool) -> str | None:
    """The local teacher: `--teacher_model_name_or_path`, the toy's teacher on the toy model, None with a teacher
    server; a real model without either is a `UsageError`."""
    if training_args.use_teacher_server:
        return None
    if training_args.teacher_model_name_or_path:
        check_model_source(training_args.teacher_model_name_or_path)
        return training_args.teacher_model_name_or_path
    if on_toy:
        return toy.tiny_teacher_path()
    raise UsageError(
        "IW-OPD distills a teacher: name it with --teacher_model_name_or_path (a model sharing the student's "
        "tokenizer), or serve it with --use_teacher_server true --teacher_model_server_url URL"
    )


def _tokenizer(model: str, training_args, model_args):
    """The tokenizer of a named model (the toy task's prompts with a real model), with TRL's pad-token fallback."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        model, revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code
    )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
