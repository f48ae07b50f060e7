"""TRL's `environment_factory` through trl_ext's GRPO-family trainers, offline.

An environment is a class with `reset(**kwargs)`, an optional `get_reward()` and public methods that TRL exposes
to the model as tools. `GRPOFamilyTrainer` lets `reward_funcs` be omitted and skips its prompt-column check when an
`environment_factory` is given, and leaves the rest to `trl.GRPOTrainer`. These tests check, with the toy tokenizer
wearing TRL's Qwen3 chat template (so TRL can render tool schemas and parse tool calls) and `model.generate`
replaced by a fake that answers fixed texts:

* an environment that owns the reward (`get_reward`, no `reward_funcs`) trains: the tools run on each rollout's own
  environment, the model's next turn sees the tool results, the logged reward is what the environments returned,
  `tools/call_frequency` / `tools/failure_frequency` count the calls, and the weights move;
* an environment that owns the data (`reset()` returns the prompt, `train_dataset=None`, `max_steps` set) trains:
  the prompts the model is given are the environment's, and the weights move;
* an environment without `get_reward` and no `reward_funcs` is still rejected with TRL's "No reward source provided".
"""

from __future__ import annotations

import json
from unittest.mock import patch

import pytest
import torch
from datasets import Dataset
from trainer_helpers import CPU, build_tool_model, changed, logged, snapshot
from transformers import AutoTokenizer
from trl.chat_template_utils import add_response_schema, supports_tool_calling

import trl_ext

STEPS = 2
GENERATIONS = 3
IM_END = "<|im_end|>"
TOOL_RESPONSE = "<tool_response>"  # how TRL's Qwen3 template wraps a tool result in the next prompt
ALGORITHMS = [trl_ext.SAPOTrainer, trl_ext.CISPOTrainer, trl_ext.GRPOTrainer]


def tool_call(name: str, step: int) -> str:
    """A completion that calls tool `name` in the Qwen3 tool-call format TRL parses."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': {'step': step}})}\n</tool_call>"


# ---- environments ------------------------------------------------------------------------------------------------


class CounterEnvironment:
    """Owns the reward: the counter its `increment` tool raised during the rollout."""

    def __init__(self):
        self.counter = 0
        self.resets = 0

    def reset(self, **kwargs) -> None:
        self.counter = 0
        self.resets += 1

    def increment(self, step: int) -> int:
        """
        Increment the counter.

        Args:
            step: Value to add to the counter.

        Returns:
            The updated counter value.
        """
        self.counter += step
        return self.counter

    def get_reward(self) -> float:
        return float(self.counter)


class QuizEnvironment:
    """Owns the data: `reset` returns the prompt. No tools, no reward."""

    QUESTION = "Name a fruit that starts with the letter a."

    def __init__(self):
        self.resets = 0

    def reset(self, **kwargs) -> str:
        self.resets += 1
        return self.QUESTION


# ---- model, config and fake generation ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory) -> str:
    """The untrained toy model, its tokenizer wearing TRL's shipped Qwen3 chat template, saved to a folder."""
    path = build_tool_model(str(tmp_path_factory.mktemp("tool_model")))
    # The template survives the round trip and TRL recognizes it: it renders tool calls, and TRL knows how to parse
    # its responses (the trainer attaches that parser itself, as for a real Qwen3 checkpoint).
    saved = AutoTokenizer.from_pretrained(path)
    assert supports_tool_calling(saved)
    assert add_response_schema(saved).response_template is not None
    return path


def config(trainer_class, output_dir):
    """Tiny CPU settings: one group of 3 rollouts per step, a high learning rate so that two steps move every weight."""
    return trainer_class.config_class(
        **CPU,
        output_dir=str(output_dir),
        per_device_train_batch_size=GENERATIONS,  # one prompt group per step
        num_generations=GENERATIONS,
        max_completion_length=192,  # a tool call and its result take ~140 tokens of the toy vocabulary
        max_steps=STEPS,
        learning_rate=0.1,
    )


class FakeGenerate:
    """Stands in for `model.generate`: answers each row of the batch with a fixed text and records the prompts.

    A row whose prompt holds a tool result (the second turn of a rollout that called a tool) gets `after_tool`;
    otherwise row i of the batch gets `first_turn[i % len(first_turn)]`, so the rollouts of a prompt group get the
    texts in order. Each answer ends with `<|im_end|>`, an eos id TRL stops on, and is right-padded with the pad id.
    """

    def __init__(self, tokenizer, first_turn: list[str], after_tool: str = "Done!"):
        self.tokenizer = tokenizer
        self.first_turn = first_turn
        self.after_tool = after_tool
        self.prompts: list[list[str]] = []  # the decoded prompts of each call

    def __call__(self, input_ids, attention_mask, **kwargs):
        prompts = [self.tokenizer.decode(ids[mask.bool()]) for ids, mask in zip(input_ids, attention_mask, strict=True)]
        self.prompts.append(prompts)
        texts = [
            self.after_tool if TOOL_RESPONSE in prompt else self.first_turn[i % len(self.first_turn)]
            for i, prompt in enumerate(prompts)
        ]
        answers = [self.tokenizer.encode(text + IM_END) for text in texts]
        width = max(map(len, answers))
        pad = self.tokenizer.pad_token_id
        completion_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids in answers], device=input_ids.device)
        return torch.cat([input_ids, completion_ids], dim=1)


def train(trainer, fake: FakeGenerate) -> set[str]:
    """Train with `fake` as the model's generation; the names of the parameters that changed."""
    before = snapshot(trainer.model)
    with patch.object(trainer.model, "generate", side_effect=fake):
        trainer.train()
    return changed(before, trainer.model)


# ---- tests -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("trainer_class", ALGORITHMS, ids=lambda cls: cls.__name__)
def test_environment_owned_reward(trainer_class, tool_model, tmp_path):
    # Rollout 0 calls `increment(step=2)`, rollout 1 a tool that does not exist, rollout 2 no tool; the two that
    # called a tool then answer "Done!". The environments' counters, hence rewards, are 2, 0, 0.
    environments = []

    def factory():
        environments.append(CounterEnvironment())
        return environments[-1]

    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": "Count up by two."}]] * 2})
    trainer = trainer_class(
        model=tool_model, args=config(trainer_class, tmp_path), train_dataset=dataset, environment_factory=factory
    )
    assert trainer.reward_func_names == ["CounterEnvironment"]  # the environment is the only reward source
    assert [tool.__name__ for tool in trainer.tools] == ["increment"]  # neither reset nor get_reward is a tool

    fake = FakeGenerate(
        trainer.processing_class, [tool_call("increment", 2), tool_call("decrement", 1), "I will not count."]
    )
    moved = train(trainer, fake)

    # Each step: one call for the group, one for the two rollouts that called a tool, with the tool results in view.
    assert [len(prompts) for prompts in fake.prompts] == [GENERATIONS, 2] * STEPS
    assert all("Count up by two." in prompt for prompts in fake.prompts for prompt in prompts)
    assert all('"name": "increment"' in prompt for prompts in fake.prompts for prompt in prompts)  # tool schema
    increment_result, decrement_result = fake.prompts[-1]
    assert f"{TOOL_RESPONSE}\n2\n</tool_response>" in increment_result
    assert "Tool decrement not found." in decrement_result

    # One instance per rollout, built once and reset every step; the last rollouts left the counters 2, 0, 0.
    assert environments == trainer.environments
    assert [env.resets for env in environments] == [STEPS] * GENERATIONS
    assert [env.counter for env in environments] == [2, 0, 0]

    # The logged reward is the environments' (2 + 0 + 0) / 3; 2 calls per 3 rollouts, 1 of the 2 failed.
    assert logged(trainer, "reward") == pytest.approx([2 / 3] * STEPS)
    assert logged(trainer, "rewards/CounterEnvironment/mean") == pytest.approx([2 / 3] * STEPS)
    assert logged(trainer, "tools/call_frequency") == pytest.approx([2 / 3] * STEPS)
    assert logged(trainer, "tools/failure_frequency") == pytest.approx([1 / 2] * STEPS)
    assert moved == {name for name, _ in trainer.model.named_parameters()}


def test_environment_owned_data(tool_model, tmp_path):
    # No dataset: TRL drives the loop with empty placeholder prompts, and each rollout's `reset` supplies the text.
    environments = []

    def factory():
        environments.append(QuizEnvironment())
        return environments[-1]

    def answer_length(completions, **kwargs):
        return [float(len(completion[-1]["content"])) for completion in completions]

    trainer_class = trl_ext.CISPOTrainer
    trainer = trainer_class(
        model=tool_model,
        reward_funcs=answer_length,
        args=config(trainer_class, tmp_path),
        train_dataset=None,
        environment_factory=factory,
    )
    fake = FakeGenerate(trainer.processing_class, ["a", "apple", "avocado"])
    moved = train(trainer, fake)

    expected_prompt = f"<|im_start|>user\n{QuizEnvironment.QUESTION}{IM_END}\n<|im_start|>assistant\n"
    assert fake.prompts == [[expected_prompt] * GENERATIONS] * STEPS
    assert [env.resets for env in environments] == [STEPS] * GENERATIONS
    assert logged(trainer, "reward") == pytest.approx([(1 + 5 + 7) / 3] * STEPS)
    assert moved == {name for name, _ in trainer.model.named_parameters()}


@pytest.mark.parametrize("reward_funcs", [None, []], ids=["None", "empty"])
def test_environment_without_reward_source_is_rejected(reward_funcs, tool_model, tmp_path):
    trainer_class = trl_ext.SAPOTrainer
    with pytest.raises(ValueError, match=r"^No reward source provided"):
        trainer_class(
            model=tool_model,
            reward_funcs=reward_funcs,
            args=config(trainer_class, tmp_path),
            train_dataset=None,
            environment_factory=QuizEnvironment,
        )
