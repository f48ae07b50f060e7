"""MIX-CHORD (CHORD, arXiv 2508.11408) with `trl_ext.MIXCHORDTrainer`: RL on the model's own rollouts blended with an
SFT loss on expert demonstrations, the SFT weight mu following a warm-up / cosine-decay schedule.

    # offline: trl_ext's tiny toy model, the "repeat the letter" prompts and demonstrations built below, CPU,
    # ~1 minute: the reward rises from ~0.1 to ~0.98
    python examples/scripts/mix_chord.py

    # your model, prompts (`prompt`, `target` columns) and demonstrations (prompt / completion rows)
    accelerate launch examples/scripts/mix_chord.py \\
        --model_name_or_path Qwen/Qwen2.5-1.5B-Instruct --dataset_name prompts.jsonl \\
        --expert_dataset_name demonstrations.jsonl --output_dir chord-Qwen2.5-1.5B --learning_rate 1e-6 \\
        --expert_data_ratio 0.2 --mu_warmup_steps 200 --mu_decay_steps 400 --mu_peak 0.5 --mu_valley 0.02

What differs from `trl.GRPOTrainer`: the trainer takes `expert_dataset=` (prompt / completion or conversational
`messages` rows, in the prompts' format), and `--expert_data_ratio` of every batch is demonstrations instead of
rollouts. The loss is (1 - mu) x PPO on the rollouts + mu x SFT on the demonstrations, the SFT tokens weighted by
p(1 - p) (`--enable_phi_function`, CHORD-phi), with mu rising linearly from 0 to `--mu_peak` over `--mu_warmup_steps`
optimizer steps, then decaying (cosine) to `--mu_valley` over `--mu_decay_steps`. Logged besides TRL's metrics: `mu`,
`usual/pg_loss` (the rollouts' loss) and `expert/sft_phi_loss` (the demonstrations').
"""

import random
from dataclasses import dataclass, field

import torch
from datasets import Dataset, load_dataset
from trl import ModelConfig, ScriptArguments, TrlParser, get_peft_config

from trl_ext import MIXCHORDConfig, MIXCHORDTrainer
from trl_ext.losses import mu_schedule
from trl_ext.toy import DEFAULT_TRAINING, tiny_model_path


@dataclass
class ExpertArguments:
    expert_dataset_name: str | None = field(
        default=None, metadata={"help": "Expert demonstrations: a .json / .jsonl file, a dataset folder or a Hub id."}
    )


def letter_prompts(num_rows: int, seed: int, demonstrations: bool = False) -> Dataset:
    """The task's prompts ("Repeat the letter c:", `target` "c") or, with `demonstrations`, correct answers to them
    (" c c c", the prompt-completion rows an expert dataset holds)."""
    rng = random.Random(seed)
    letters = [rng.choice("abcdefgh") for _ in range(num_rows)]
    rows = {"prompt": [f"Repeat the letter {c}:" for c in letters], "target": letters}
    if demonstrations:
        rows["completion"] = [" " + " ".join([c] * rng.randint(2, 6)) for c in letters]
    return Dataset.from_dict(rows)


def repeat_reward(completions, target, **kwargs) -> list[float]:
    """1.0 if the completion is the row's `target` letter repeated (" c c c"), else 0.0."""
    rewards = []
    for completion, letter in zip(completions, target, strict=True):
        text = completion if isinstance(completion, str) else completion[-1]["content"]  # plain or conversational
        chars = text.replace(" ", "")
        rewards.append(float(bool(chars) and set(chars) == {letter}))
    return rewards


def load(flag: str, name: str, split: str, columns: set[str]) -> Dataset:
    """A .json / .jsonl file, a dataset folder or a Hub id, checked for the columns the script reads."""
    if name.endswith((".json", ".jsonl")):
        dataset = load_dataset("json", data_files=name, split="train")
    else:
        dataset = load_dataset(name, split=split)
    missing = columns - set(dataset.column_names)
    if missing:  # before the model loads
        raise ValueError(f"{flag} {name}: needs the columns {sorted(columns)}; missing {sorted(missing)}")
    return dataset


def parse_args(argv=None):
    parser = TrlParser((ScriptArguments, MIXCHORDConfig, ModelConfig, ExpertArguments))
    if not torch.cuda.is_available():
        parser.set_defaults(use_cpu=True, bf16=False)  # TRL's configs default to bf16, which needs a GPU
    model_args, _ = TrlParser(ModelConfig, add_help=False).parse_args_and_config(argv, return_remaining_strings=True)
    toy = model_args.model_name_or_path is None  # no model on the command line or in the --config file
    if toy:  # the toy's hyperparameters and a short mu schedule as defaults: flags still override them
        schedule = {"mu_warmup_steps": 20, "mu_decay_steps": 100, "mu_peak": 0.5, "mu_valley": 0.05}
        parser.set_defaults(output_dir="outputs/example-mix-chord", activation_checkpointing=False, **schedule)
        parser.set_defaults(**DEFAULT_TRAINING)
    script_args, training_args, model_args, expert_args = parser.parse_args_and_config(argv)
    if script_args.dataset_name and not expert_args.expert_dataset_name:  # before any model loads
        raise ValueError("--expert_dataset_name is required with --dataset_name: demonstrations of your prompts' task")
    if toy:
        model_args.model_name_or_path = tiny_model_path()  # trl_ext's offline toy model, built (~5 s) on first use
    return script_args, training_args, model_args, expert_args


def main(argv=None) -> MIXCHORDTrainer:
    script_args, training_args, model_args, expert_args = parse_args(argv)
    # The prompts the model samples rollouts for, and the demonstrations (in the prompts' format, plain or chat).
    train_dataset = letter_prompts(1024, seed=0)
    if script_args.dataset_name:
        split = script_args.dataset_train_split
        train_dataset = load("--dataset_name", script_args.dataset_name, split, {"prompt", "target"})
    expert_dataset = letter_prompts(256, seed=1, demonstrations=True)
    if expert_args.expert_dataset_name:  # checked by the trainer: prompt / completion or `messages` rows
        expert_dataset = load("--expert_dataset_name", expert_args.expert_dataset_name, "train", set())

    training_args.model_init_kwargs = {
        "revision": model_args.model_revision,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    # mu, the SFT term's weight, at the schedule's turning points (the loss computes it with this same function)
    args = training_args
    for step in sorted({0, args.mu_warmup_steps, args.mu_warmup_steps + args.mu_decay_steps}):
        mu = mu_schedule(step, args.mu_warmup_steps, args.mu_decay_steps, args.mu_peak, args.mu_valley)
        print(f"mu at optimizer step {step}: {mu:.3g}")

    trainer = MIXCHORDTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=repeat_reward,  # scores the rollouts only: demonstrations are not rewarded
        args=training_args,
        train_dataset=train_dataset,
        expert_dataset=expert_dataset,
        peft_config=get_peft_config(model_args),
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    return trainer


if __name__ == "__main__":
    main()
