"""GiGPO (Feng et al. 2025, arXiv 2505.10978) with `trl_ext.GiGPOTrainer`: a tool-using agent trained on TRL's own
multi-turn rollouts, with an environment and a reward function written here.

    # offline: trl_ext's tiny toy agent on the "look up, then answer" task below, CPU, ~2 minutes:
    # the reward rises from ~0.35 to ~0.94
    python examples/scripts/gigpo.py

    # a tool-calling chat model; your dataset needs `prompt` (conversational), `box` and `secret` columns
    accelerate launch examples/scripts/gigpo.py \\
        --model_name_or_path Qwen/Qwen3-1.7B --dataset_name boxes.jsonl --output_dir gigpo-Qwen3-1.7B \\
        --learning_rate 1e-6 --max_tool_calling_iterations 4 --max_completion_length 2048 --omega 1.0 --gamma 1.0

The environment follows TRL's `environment_factory` contract: one instance per rollout, `reset(**row)` before it
(with the dataset row's columns), and every public method but `reset` a tool the model may call (TRL reads its
signature and docstring into the tool schema). What trl_ext adds: each model turn of an episode gets its own
advantage, the episode's (its reward against its group's) plus `--omega` x a step advantage (the turn's return-to-go,
discounted by `--gamma`, against the other turns of the batch that started from the same state). The state is the
environment's `state_key`, read at the start of each turn; tools may append per-turn rewards to `turn_rewards`.
Logged besides TRL's metrics: `turns/per_completion`, `advantage/gigpo/anchor_group_hit_ratio` (the share of states
more than one turn started from).
"""

import random

import torch
from datasets import Dataset, load_dataset
from trl import ModelConfig, ScriptArguments, TrlParser, get_peft_config

from trl_ext import GiGPOConfig, GiGPOTrainer
from trl_ext.toy_agent import AGENT_TRAINING, tiny_agent_model_path


class SecretBoxes:
    """Eight boxes, A to H, one of which (the row's `box`) holds the row's `secret` digit."""

    def reset(self, box: str, secret: str, **row) -> None:
        """Called with the dataset row before each rollout. A returned string would be appended to the prompt."""
        self.box, self.secret = str(box).upper(), str(secret)
        self.opened = []  # (box asked for, what it held)
        self.turn_rewards = []  # optional per-turn rewards (trl_ext adds the episode's reward on the last turn)

    # A tool: TRL renders its name, type hints and docstring into the prompt's tool schema (the toy agent was
    # pretrained on exactly this one, so edit it freely for a real model only).
    def lookup(self, box: str) -> str:
        """
        Open a box and read the secret inside.

        Args:
            box: The letter of the box.

        Returns:
            The secret, or "no such box".
        """
        asked = box.strip().upper()
        result = self.secret if asked == self.box else "no such box"
        self.opened.append((asked, result))
        return result

    @property  # a property, not a method: not a tool
    def state_key(self):
        """The state a turn starts from (GiGPO's anchor): turns from equal keys are compared with each other."""
        return ("start", self.box) if not self.opened else ("looked_up", *self.opened[-1])


def lookup_reward(completions, environments, **kwargs) -> list[float]:
    """1.0 if the rollout opened the row's box and its final message answers the secret, else 0.0. TRL passes the
    rollouts' environments to reward functions, so the reward reads their state (which boxes were opened)."""
    rewards = []
    for messages, env in zip(completions, environments, strict=True):
        final = messages[-1]  # the completion's messages: assistant, tool, assistant, ...
        answered = final["role"] == "assistant" and not final.get("tool_calls")
        opened = any(asked == env.box for asked, _ in env.opened)
        rewards.append(float(answered and opened and (final.get("content") or "").strip() == env.secret))
    return rewards


def secret_boxes(num_rows: int = 1024, seed: int = 0) -> Dataset:
    rng = random.Random(seed)
    boxes = [rng.choice("ABCDEFGH") for _ in range(num_rows)]
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": f"What is the secret in box {box}?"}] for box in boxes],
            "box": boxes,  # passed to SecretBoxes.reset
            "secret": [str(rng.randrange(10)) for _ in boxes],
        }
    )


def parse_args(argv=None):
    parser = TrlParser((ScriptArguments, GiGPOConfig, ModelConfig))
    if not torch.cuda.is_available():
        parser.set_defaults(use_cpu=True, bf16=False)  # TRL's configs default to bf16, which needs a GPU
    model_args, _ = TrlParser(ModelConfig, add_help=False).parse_args_and_config(argv, return_remaining_strings=True)
    toy = model_args.model_name_or_path is None  # no model on the command line or in the --config file
    if toy:  # the toy agent's hyperparameters (groups of 8, 2 tool rounds, ...) as defaults: flags override them
        parser.set_defaults(output_dir="outputs/example-gigpo", **AGENT_TRAINING)
    script_args, training_args, model_args = parser.parse_args_and_config(argv)
    if toy:
        model_args.model_name_or_path = tiny_agent_model_path()  # trl_ext's toy agent, built (~20 s) on first use
    return script_args, training_args, model_args


def main(argv=None) -> GiGPOTrainer:
    script_args, training_args, model_args = parse_args(argv)
    if script_args.dataset_name is None:
        train_dataset = secret_boxes()
    elif script_args.dataset_name.endswith((".json", ".jsonl")):
        train_dataset = load_dataset("json", data_files=script_args.dataset_name, split="train")
    else:
        train_dataset = load_dataset(script_args.dataset_name, split=script_args.dataset_train_split)
    missing = {"prompt", "box", "secret"} - set(train_dataset.column_names)
    if missing:  # before the model loads
        raise ValueError(f"--dataset_name: needs the columns prompt, box and secret; missing {sorted(missing)}")
    training_args.model_init_kwargs = {
        "revision": model_args.model_revision,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }

    trainer = GiGPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=lookup_reward,
        args=training_args,
        train_dataset=train_dataset,
        environment_factory=SecretBoxes,  # called once per concurrent rollout; instances are reused via reset
        peft_config=get_peft_config(model_args),
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    return trainer


if __name__ == "__main__":
    main()
