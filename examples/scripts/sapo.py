"""SAPO (Soft Adaptive Policy Optimization, arXiv 2511.20347) with `trl_ext.SAPOTrainer`: a prompt dataset and a
verifiable reward function written here, TRL's flags, and SAPO's own.

    # offline: trl_ext's tiny toy model on the "repeat the letter" task built below, CPU, ~1 minute:
    # the reward rises from ~0.12 to ~0.99
    python examples/scripts/sapo.py

    # your model and data: a Hub id, a dataset folder or a .jsonl file with `prompt` and `target` columns
    accelerate launch examples/scripts/sapo.py \\
        --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --dataset_name prompts.jsonl \\
        --output_dir sapo-Qwen2.5-0.5B --learning_rate 1e-6 --per_device_train_batch_size 8 --num_generations 8 \\
        --max_completion_length 256 --tau_pos 1.0 --tau_neg 1.05 --use_peft --lora_r 16 --lora_target_modules all-linear

It is TRL's GRPO script with one change, the two classes: `SAPOConfig` is a `trl.GRPOConfig` (every TRL flag works)
whose loss is SAPO's soft gate with its temperatures `--tau_pos` / `--tau_neg` (`--detach_gate`: Trinity-RFT <= 0.6's
gradient), and `SAPOTrainer` takes exactly `trl.GRPOTrainer`'s arguments. Logged besides TRL's metrics: `sapo_loss`,
`avg_soft_gate`, `avg_ratio`, `pos_adv_frac`.
"""

import random

import torch
from datasets import Dataset, load_dataset
from trl import ModelConfig, ScriptArguments, TrlParser, get_peft_config, get_quantization_config

from trl_ext import SAPOConfig, SAPOTrainer
from trl_ext.toy import DEFAULT_TRAINING, tiny_model_path


def repeat_the_letter(num_prompts: int = 1024, seed: int = 0) -> Dataset:
    """The task: "Repeat the letter c:" -> " c c c". The `target` column is passed to the reward function."""
    rng = random.Random(seed)
    letters = [rng.choice("abcdefgh") for _ in range(num_prompts)]
    return Dataset.from_dict({"prompt": [f"Repeat the letter {c}:" for c in letters], "target": letters})


def repeat_reward(completions, target, **kwargs) -> list[float]:
    """1.0 if the completion is the row's `target` letter repeated (" c c c"), else 0.0. TRL calls a reward function
    with the completions and every other dataset column as a keyword argument, one value per completion."""
    rewards = []
    for completion, letter in zip(completions, target, strict=True):
        text = completion if isinstance(completion, str) else completion[-1]["content"]  # plain or conversational
        chars = text.replace(" ", "")
        rewards.append(float(bool(chars) and set(chars) == {letter}))
    return rewards


def load_prompts(script_args: ScriptArguments) -> Dataset:
    """`--dataset_name` (a .json / .jsonl file, a dataset folder or a Hub id), else the task above."""
    name = script_args.dataset_name
    if name is None:
        return repeat_the_letter()
    if name.endswith((".json", ".jsonl")):
        dataset = load_dataset("json", data_files=name, split="train")
    else:
        dataset = load_dataset(name, name=script_args.dataset_config, split=script_args.dataset_train_split)
    missing = {"prompt", "target"} - set(dataset.column_names)
    if missing:  # before the model loads
        raise ValueError(f"--dataset_name {name}: needs the columns 'prompt' and 'target'; missing {sorted(missing)}")
    return dataset


def parse_args(argv=None):
    parser = TrlParser((ScriptArguments, SAPOConfig, ModelConfig))
    if not torch.cuda.is_available():
        parser.set_defaults(use_cpu=True, bf16=False)  # TRL's configs default to bf16, which needs a GPU
    model_args, _ = TrlParser(ModelConfig, add_help=False).parse_args_and_config(argv, return_remaining_strings=True)
    toy = model_args.model_name_or_path is None  # no model on the command line or in the --config file
    if toy:  # the toy's hyperparameters (learning rate 1e-3, groups of 16, ...) as defaults: flags still override them
        parser.set_defaults(output_dir="outputs/example-sapo", activation_checkpointing=False, **DEFAULT_TRAINING)
    script_args, training_args, model_args = parser.parse_args_and_config(argv)
    if toy:
        model_args.model_name_or_path = tiny_model_path()  # trl_ext's offline toy model, built (~5 s) on first use
    return script_args, training_args, model_args


def main(argv=None) -> SAPOTrainer:
    script_args, training_args, model_args = parse_args(argv)
    train_dataset = load_prompts(script_args)
    training_args.model_init_kwargs = {
        "revision": model_args.model_revision,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }

    trainer = SAPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=repeat_reward,
        args=training_args,
        train_dataset=train_dataset,
        quantization_config=get_quantization_config(model_args),
        peft_config=get_peft_config(model_args),  # LoRA with --use_peft (None without)
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)

    trainer.save_model(training_args.output_dir)  # also writes a model card naming SAPO and its settings
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=script_args.dataset_name)
    return trainer


if __name__ == "__main__":
    main()
