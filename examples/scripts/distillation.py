"""On-policy distillation (Agarwal et al. 2024, arXiv 2306.13649; Thinking Machines' Tinker recipe) with
`trl_ext.OnPolicyDistillTrainer`: the student samples completions and a frozen teacher scores them token by token;
the teacher's log-probs against the student's are the per-token advantages of a PPO loss.

    # offline: trl_ext's tiny toy student and its toy teacher (which solves the task), CPU, ~1 minute:
    # the student's logged reward rises from ~0.1 to ~0.95
    python examples/scripts/distillation.py

    # your student and teacher (they must share a tokenizer), prompts with a `prompt` column
    accelerate launch examples/scripts/distillation.py \\
        --model_name_or_path Qwen/Qwen3-0.6B --teacher_model_name_or_path Qwen/Qwen3-8B \\
        --teacher_model_init_kwargs '{"dtype": "bfloat16"}' --dataset_name prompts.jsonl \\
        --output_dir distill-Qwen3-0.6B --learning_rate 1e-6 --num_generations 4 --max_completion_length 1024

What differs from `trl.GRPOTrainer`: the trainer takes `teacher_model=` (a path / Hub id, loaded with
`--teacher_model_init_kwargs`, or a loaded `PreTrainedModel`; else `--teacher_model_name_or_path`), placed on
`--teacher_device` (default: the student's). The per-token advantage is `--kl_coef` x (log p_teacher - log p_student)
of the sampled token; `--teacher_top_k k` (k > 0, or -1 for the whole vocabulary) distills instead with a dense
generalized JSD over the teacher's top-k tokens (`--jsd_beta`: 0 forward KL, 1 reverse KL). Reward functions are
optional: with the default `--reward_weight 0` they are only logged; with w > 0, w x their GRPO advantage is added.
Logged besides TRL's metrics: `kl/mean` (student-teacher KL estimate), `distill/divergence` in the dense modes.
"""

import random

import torch
from datasets import Dataset, load_dataset
from trl import ModelConfig, ScriptArguments, TrlParser, get_peft_config

from trl_ext import OnPolicyDistillConfig, OnPolicyDistillTrainer
from trl_ext.toy import DEFAULT_TRAINING, tiny_model_path, tiny_teacher_path


def letter_prompts(num_rows: int = 1024, seed: int = 0) -> Dataset:
    """The task: "Repeat the letter c:" -> " c c c" (`target` "c", read by the reward below)."""
    rng = random.Random(seed)
    letters = [rng.choice("abcdefgh") for _ in range(num_rows)]
    return Dataset.from_dict({"prompt": [f"Repeat the letter {c}:" for c in letters], "target": letters})


def repeat_reward(completions, target, **kwargs) -> list[float]:
    """1.0 if the completion is the row's `target` letter repeated (" c c c"), else 0.0: logged, to watch the student
    learn the task from the teacher alone."""
    rewards = []
    for completion, letter in zip(completions, target, strict=True):
        text = completion if isinstance(completion, str) else completion[-1]["content"]  # plain or conversational
        chars = text.replace(" ", "")
        rewards.append(float(bool(chars) and set(chars) == {letter}))
    return rewards


def parse_args(argv=None):
    parser = TrlParser((ScriptArguments, OnPolicyDistillConfig, ModelConfig))
    if not torch.cuda.is_available():
        parser.set_defaults(use_cpu=True, bf16=False)  # TRL's configs default to bf16, which needs a GPU
    model_args, _ = TrlParser(ModelConfig, add_help=False).parse_args_and_config(argv, return_remaining_strings=True)
    toy = model_args.model_name_or_path is None  # no model on the command line or in the --config file
    if toy:  # the toy's hyperparameters as defaults: flags still override them
        parser.set_defaults(output_dir="outputs/example-distillation", activation_checkpointing=False)
        parser.set_defaults(**DEFAULT_TRAINING)
    script_args, training_args, model_args = parser.parse_args_and_config(argv)
    if not toy and training_args.teacher_model_name_or_path is None:  # before any model loads
        raise ValueError("--teacher_model_name_or_path is required with --model_name_or_path (same tokenizer)")
    if toy:
        model_args.model_name_or_path = tiny_model_path()  # trl_ext's offline toy model, built (~5 s) on first use
    return script_args, training_args, model_args


def main(argv=None) -> OnPolicyDistillTrainer:
    script_args, training_args, model_args = parse_args(argv)
    if script_args.dataset_name is None:
        train_dataset = letter_prompts()
    elif script_args.dataset_name.endswith((".json", ".jsonl")):
        train_dataset = load_dataset("json", data_files=script_args.dataset_name, split="train")
    else:
        train_dataset = load_dataset(script_args.dataset_name, split=script_args.dataset_train_split)
    training_args.model_init_kwargs = {
        "revision": model_args.model_revision,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    # The teacher: --teacher_model_name_or_path, else (on the toy) trl_ext's toy teacher, the toy model's architecture
    # and tokenizer trained on the task itself (reward ~1.0 where the student starts at ~1/8; ~15 s on first use).
    teacher = training_args.teacher_model_name_or_path or tiny_teacher_path()

    trainer = OnPolicyDistillTrainer(
        model=model_args.model_name_or_path,
        teacher_model=teacher,
        reward_funcs=repeat_reward if "target" in train_dataset.column_names else None,  # optional
        args=training_args,
        train_dataset=train_dataset,
        peft_config=get_peft_config(model_args),
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)  # the student only
    return trainer


if __name__ == "__main__":
    main()
