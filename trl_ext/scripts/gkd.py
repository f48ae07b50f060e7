"""Train trl_ext's GKD trainer with TRL's command-line conventions (the code behind `examples/train_gkd.py`).

    accelerate launch examples/train_gkd.py                                    # the offline tiny default
    accelerate launch examples/train_gkd.py --config configs/gkd.yaml \\
        --model_name_or_path Qwen/Qwen2-0.5B-Instruct --teacher_model_name_or_path Qwen/Qwen2-1.5B-Instruct \\
        --dataset_name trl-lib/chatbot_arena_completions --report_to wandb

Arguments are parsed by `trl.TrlParser` into TRL's `ScriptArguments` (`--dataset_name`, `--dataset_train_split`,
...), `trl_ext.GKDConfig` (every `trl.experimental.gkd.GKDConfig` flag: `--teacher_model_name_or_path`, `--lmbda`,
`--beta`, `--temperature`, `--max_new_tokens`, `--seq_kd`, ...), `trl.ModelConfig` and `trl.DatasetMixtureConfig`, as
TRL's GKD example does; `--config recipe.yaml` sets any of them. The rows are chat `messages` whose last message is
the completion (TRL's GKD collator), or tokenized `input_ids`.

Without `--model_name_or_path`, the script distills the toy teacher (`trl_ext.toy.tiny_teacher_path()`, which answers
with the prompt's letter) into the tiny offline model of `trl_ext.toy` (which repeats a letter unrelated to the
prompt) on the toy task's demonstrations as chat messages (`toy_chat_dataset`), evaluating on held-out ones (the
`--dataset_test_split` split, default "test"): the held-out `eval_loss` is the student's divergence from the teacher
on the held-out completions, measured before training too (`eval_on_start`). `toy_greedy_reward` measures what the
student learnt: the toy reward of its greedy answers to the held-out prompts (~0.12 before, the teacher's 1.0 after
`GKD_TRAINING`). The toy defaults (`GKD_TRAINING`, and the toy teacher), the run summary and the usage errors are
`DatasetScript`'s (`_dataset_script.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from datasets import Dataset

from .. import toy
from ._common import ScriptParser, ToyDefaults, _command_line_keys, _model_and_config
from ._dataset_script import DatasetScript

GKD_TRAINING: dict[str, Any] = dict(
    learning_rate=3e-3,
    warmup_steps=5,
    max_grad_norm=1.0,
    per_device_train_batch_size=16,
    per_device_eval_batch_size=64,
    max_steps=100,
    logging_steps=10,
    eval_strategy="steps",
    eval_steps=50,
    eval_on_start=True,
    lmbda=0.5,
    beta=0.5,
    temperature=1.0,
    max_new_tokens=8,
)
"""`GKDConfig` keyword arguments of the GKD toy run on `toy_chat_dataset` (TRL's `lmbda` and `beta`: half the batches
on-policy, the symmetric JSD): the held-out divergence from the teacher goes from ~0.16 to ~0.02 and the greedy toy
reward from ~0.12 to 1.0 in 100 steps (~30 s of training on 2 CPU cores)."""


def toy_chat_dataset(num_demos: int = 256, seed: int = 0) -> Dataset:
    """The toy task's demonstrations (`trl_ext.toy.toy_expert_dataset`, conversational) as the chat rows TRL's GKD
    collator reads: `messages` (the user's prompt "Repeat the letter c:", then the assistant's "c c c") and `target`
    (the letter, for `toy_greedy_reward`). Letters balanced and shuffled with `seed`; built offline."""
    demos = toy.toy_expert_dataset(num_demos, seed=seed, conversational=True)
    messages = [prompt + completion for prompt, completion in zip(demos["prompt"], demos["completion"], strict=True)]
    return Dataset.from_dict({"messages": messages, "target": demos["target"]})


@torch.no_grad()
def toy_greedy_reward(model, tokenizer, rows: Dataset, max_new_tokens: int = 8) -> float:
    """The toy reward (`trl_ext.toy.toy_reward`) of `model`'s greedy answers to the prompts of `rows` (rows of
    `toy_chat_dataset`: each prompt is its `messages` without the last, the letter its `target`), averaged: how often
    the student answers as the teacher does (the toy teacher's is 1.0)."""
    prompts = [
        tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True, tokenize=False)
        for messages in rows["messages"]
    ]
    device = next(model.parameters()).device
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    was_training = model.training
    model.eval()
    try:
        generated = model.generate(
            **encoded, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
    finally:
        model.train(was_training)
    answers = tokenizer.batch_decode(generated[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    rewards = toy.toy_reward(answers, target=rows["target"])
    return sum(rewards) / max(len(rewards), 1)


@dataclass(frozen=True)
class DistillationScript(DatasetScript):
    """`DatasetScript` for a trainer that distills a teacher: on the toy model, the toy teacher
    (`trl_ext.toy.tiny_teacher_path()`, built on first use) is the default `--teacher_model_name_or_path`, under the
    `--config` file and the command line."""

    def _parser(self, argv: Sequence[str]) -> tuple[ScriptParser, ToyDefaults | None]:
        parser, toy_defaults = super()._parser(argv)
        named = "teacher_model_name_or_path" in _command_line_keys(argv) | set(_model_and_config(argv)[2])
        if toy_defaults is not None and not named:  # the toy teacher is built only when it is the one used
            parser.set_defaults(teacher_model_name_or_path=toy.tiny_teacher_path())
        return parser, toy_defaults


SCRIPT = DistillationScript(
    algorithm="gkd",
    toy_data=toy_chat_dataset,
    toy_training=GKD_TRAINING,
    toy_training_name="trl_ext.scripts.gkd.GKD_TRAINING",
    data_description="the toy task's demonstrations as chat messages (trl_ext.scripts.gkd.toy_chat_dataset), "
    "distilled from the toy teacher (trl_ext.toy.tiny_teacher_path)",
)
make_parser, train, main = SCRIPT.make_parser, SCRIPT.train, SCRIPT.main
