"""Train trl_ext's GOLD trainer with TRL's command-line conventions (the code behind `examples/train_gold.py`).

    accelerate launch examples/train_gold.py                                   # the offline tiny default
    accelerate launch examples/train_gold.py --config configs/gold.yaml \\
        --model_name_or_path meta-llama/Llama-3.2-1B-Instruct --teacher_model_name_or_path Qwen/Qwen2.5-1.5B-Instruct \\
        --dataset_name trl-lib/chatbot_arena_completions --use_peft --lora_r 64 --report_to wandb

Arguments are parsed by `trl.TrlParser` into TRL's `ScriptArguments` (`--dataset_name`, `--dataset_train_split`,
...), `trl_ext.GOLDConfig` (every flag of TRL's `GOLDConfig`: `--teacher_model_name_or_path`, `--lmbda`, `--beta`,
`--use_uld_loss`, `--uld_use_hybrid_loss`, ...), `trl.ModelConfig` and `trl.DatasetMixtureConfig`; `--config
recipe.yaml` sets any of them. A user dataset needs prompt-completion rows, chat `messages`, plain text
(`--dataset_text_field`) or tokenized `input_ids` (checked before the model loads), and a teacher
(`--teacher_model_name_or_path`).

Without `--model_name_or_path`, the script trains the package's embedded default: the tiny offline model of
`trl_ext.toy` distilled from the toy task's teacher (`trl_ext.toy.tiny_teacher_path()`, the default of
`--teacher_model_name_or_path` on the toy model) on the toy task's expert demonstrations (`toy_expert_dataset`: prompt
"Repeat the letter c:", completion " c c c"), evaluating the off-policy distillation loss on held-out demonstrations
(the `--dataset_test_split` split, default "test"). The toy defaults (`GOLD_TRAINING`), the run summary and the usage
errors are `DatasetScript`'s (`_dataset_script.py`). On the toy student the run ends with the toy task's reward of its
sampled answers to the held-out prompts before and after training, beside the teacher's (`toy_task_reward`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from .. import toy
from ._common import ScriptParser, ToyDefaults
from ._dataset_script import DatasetScript

GOLD_TRAINING: dict[str, Any] = {
    **toy.SFT_TRAINING,
    "max_steps": 40,
    "per_device_eval_batch_size": 32,
    "max_length": 64,
    "max_completion_length": 8,
    "temperature": 1.0,
    "lmbda": 0.5,
    "use_uld_loss": True,
    "uld_use_hybrid_loss": True,
    "uld_token_merge_strategy": "bayesian",
}
"""`GOLDConfig` keyword arguments of the GOLD toy run on `toy_expert_dataset`, distilled from the toy teacher: the SFT
toy run's optimizer, 40 steps, half of the micro-batches sampled by the student (at temperature 1, at most 8 tokens),
and GOLD's hybrid ULD loss (with one tokenizer every token is matched: the JSD over the vocabulary on the byte-aligned
completion). The `bayesian` alignment scores the distribution that predicts each completion token, the first one
included, where the toy task is decided (`observed`, TRL's default, compares the distributions at the completion's
positions, which predict its second token onward). The toy task's reward of the student's samples on held-out
prompts goes from 0.11 to 0.88 (the teacher's 0.91), in about 90 s of CPU time for the whole run."""


def toy_task_reward(model, tokenizer, num_prompts: int = toy.TEST_PROMPTS, seed: int = toy.TEST_SEED) -> float:
    """The toy task's mean reward (`trl_ext.toy.repeat_letter_reward`) of `model`'s answers to `num_prompts` held-out
    prompts (`toy_dataset(num_prompts, seed=seed)`), each sampled once at temperature 1 (at most 8 new tokens), with
    the random number generators seeded by `seed` and restored after."""
    rows = toy.toy_dataset(num_prompts, seed=seed)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            inputs = tokenizer(list(rows["prompt"]), return_tensors="pt", padding=True).to(model.device)
            outputs = model.generate(
                **inputs, do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8,
                pad_token_id=tokenizer.pad_token_id,
            )  # fmt: skip
    finally:
        model.train(was_training)
    completions = tokenizer.batch_decode(outputs[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    rewards = toy.repeat_letter_reward(completions, target=list(rows["target"]))
    return sum(rewards) / len(rewards)


@dataclass(frozen=True)
class DistillationScript(DatasetScript):
    """`DatasetScript` for a family distilled from a teacher (`--teacher_model_name_or_path`): on the toy model the
    teacher defaults to the toy task's (`trl_ext.toy.tiny_teacher_path()`, built on first use), and after training
    the toy student's task reward before and after, beside the teacher's, is printed and returned as the trainer's
    `toy_task_rewards` (`{"student_before": ..., "student_after": ..., "teacher": ...}`)."""

    def _parser(self, argv: Sequence[str]) -> tuple[ScriptParser, ToyDefaults | None]:
        parser, toy_defaults = super()._parser(argv)
        if toy_defaults is not None and not {"-h", "--help"} & set(argv):
            parser.set_defaults(teacher_model_name_or_path=toy.tiny_teacher_path())
        return parser, toy_defaults

    def _main(self, argv: list[str]):
        trainer = super()._main(argv)
        student = getattr(trainer.model.config, "_name_or_path", None)
        if toy.is_tiny_model(student):
            tokenizer = trainer.processing_class
            trainer.toy_task_rewards = {
                "student_before": toy_task_reward(AutoModelForCausalLM.from_pretrained(student), tokenizer),
                "student_after": toy_task_reward(trainer.model, tokenizer),
                "teacher": toy_task_reward(trainer.teacher_model, tokenizer),
            }
            rewards = trainer.toy_task_rewards
            trainer.accelerator.print(
                f"Toy task reward of the student's samples on {toy.TEST_PROMPTS} held-out prompts: "
                f"{rewards['student_before']:.2f} -> {rewards['student_after']:.2f} (the teacher's: "
                f"{rewards['teacher']:.2f})"
            )
        return trainer


SCRIPT = DistillationScript(
    algorithm="gold",
    toy_data=toy.toy_expert_dataset,
    toy_training=GOLD_TRAINING,
    toy_training_name="trl_ext.scripts.gold.GOLD_TRAINING",
    data_description="the toy task's expert demonstrations (trl_ext.toy.toy_expert_dataset), scored by the toy teacher",
)
make_parser, train, main = SCRIPT.make_parser, SCRIPT.train, SCRIPT.main
