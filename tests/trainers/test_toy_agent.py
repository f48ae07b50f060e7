"""The offline toy tool-using agent (`trl_ext.toy_agent`): its tokenizer, environment, reward, dataset and
pretrained model, checked against stock TRL's own tool loop (`environment_factory`, the Qwen3 response parser, the
tool-suffix splicing). The learning curve itself is measured in the module docstring, not here.

The session fixture `tiny_agent` builds the real default model (`tiny_agent_model_path`, ~20 s) into the tests' cache.
"""

from __future__ import annotations

import os

import pytest
import torch
from trainer_helpers import CPU, logged
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer
from trl.chat_template_utils import add_response_schema, supports_tool_calling

from trl_ext import toy_agent
from trl_ext.toy_agent import (
    AGENT_MODEL_VERSION,
    BOXES,
    NO_SUCH_BOX,
    LookupEnvironment,
    build_agent_tokenizer,
    lookup_reward,
    tiny_agent_model_path,
    toy_agent_dataset,
)

THINK = "<think>\n\n</think>\n\n"  # the empty think block the Qwen3 templates render; TRL's rollouts have none


@pytest.fixture(scope="module")
def agent_model(tiny_agent) -> str:
    return tiny_agent


def trainer_for(model: str, output_dir, **settings) -> GRPOTrainer:
    """Stock TRL on the toy agent task: `lookup_reward`, one `LookupEnvironment` per rollout."""
    settings = {**toy_agent.AGENT_TRAINING, **CPU, "output_dir": str(output_dir), **settings}
    args = GRPOConfig(**settings)
    return GRPOTrainer(
        model=model,
        reward_funcs=lookup_reward,
        args=args,
        train_dataset=toy_agent_dataset(64),
        environment_factory=LookupEnvironment,
    )


def env_after(box: str, secret: str, *asked: str) -> LookupEnvironment:
    env = LookupEnvironment()
    env.reset(prompt=[], box=box, secret=secret)
    for b in asked:
        env.lookup(box=b)
    return env


def call(box: str) -> dict:
    tool_calls = [{"type": "function", "function": {"name": "lookup", "arguments": {"box": box}}}]
    return {"role": "assistant", "content": "", "tool_calls": tool_calls}


def answer(text: str) -> dict:
    return {"role": "assistant", "content": text}


def result(text: str) -> dict:
    return {"role": "tool", "name": "lookup", "content": text}


# ---- tokenizer and episodes --------------------------------------------------------------------------------------


def test_tokenizer_round_trips_and_trl_recognizes_its_tool_format(agent_model):
    built = build_agent_tokenizer()
    assert build_agent_tokenizer().get_vocab() == built.get_vocab()  # deterministic
    saved = AutoTokenizer.from_pretrained(agent_model)
    # A tokenizer saved beside a qwen2 config would come back as Qwen2Tokenizer with Qwen2's pre-tokenizer.
    assert type(saved).__name__ != "Qwen2Tokenizer"
    assert saved.get_vocab() == built.get_vocab() and saved.eos_token == "<|im_end|>"
    assert saved.chat_template == built.chat_template == toy_agent._trl_template("qwen3.jinja")
    assert supports_tool_calling(saved)
    assert add_response_schema(saved).response_template is not None

    # The episode the model was pretrained on, spliced as TRL's tool loop splices it, is the chat template's
    # rendering of the conversation (without the empty think blocks), and tokenizes the same after the round trip.
    ids, labels = toy_agent._episode_ids(saved, "C", "C", "7", "7")
    assert ids == toy_agent._episode_ids(built, "C", "C", "7", "7")[0]
    messages = toy_agent._episode_messages("C", "C", "7", "7")
    rendered = saved.apply_chat_template(messages, tools=toy_agent._tools(), tokenize=False)
    assert saved.decode(ids) + "\n" == rendered.replace(THINK, "")
    # The labels are the model's own turns: the call and the answer, each ending with <|im_end|>.
    turns = saved.decode([t for t, label in zip(ids, labels, strict=True) if label != -100])
    assert turns == toy_agent._tool_call_text("C") + "<|im_end|>7<|im_end|>"


def test_an_episode_is_short_and_its_box_and_secret_are_single_tokens():
    tokenizer = build_agent_tokenizer()
    ids, _ = toy_agent._episode_ids(tokenizer, "C", "C", "7", "7")
    prompt = tokenizer.apply_chat_template(
        toy_agent._prompt_messages("C"), tools=toy_agent._tools(), add_generation_prompt=True, return_dict=False
    )
    assert '"name": "lookup"' in tokenizer.decode(prompt)  # the tool schema is in the system prompt
    assert len(prompt) <= 48 and len(ids) <= 64  # 40 and 57 (the documented numbers; target <= 200)
    tokens = [tokenizer.decode([t]) for t in ids]
    assert tokens.count("C") == 2 and tokens.count("7") == 2  # user turn and call; tool response and answer


# ---- environment -------------------------------------------------------------------------------------------------


def test_lookup_returns_the_secret_only_for_the_rows_box():
    env = env_after("C", "7")
    assert env.state_key == ("start", "C") and env.turn_rewards == [] and not env.found
    assert env.lookup(box="B") == NO_SUCH_BOX
    assert env.state_key == ("looked_up", "B", NO_SUCH_BOX) and not env.found
    assert env.lookup(box=" c ") == "7"  # stripped, case-insensitive
    assert env.state_key == ("looked_up", "C", "7") and env.found
    assert env.lookup(box="Z") == NO_SUCH_BOX and env.found  # the last lookup is the state; found stays
    assert env.lookups == [("B", NO_SUCH_BOX), ("C", "7"), ("Z", NO_SUCH_BOX)]
    assert env.turn_rewards == []  # sparse outcome reward: no per-turn rewards in this toy

    env.turn_rewards.append(0.5)  # a tool could append one
    env.reset(prompt=[], box="A", secret="3")
    assert env.state_key == ("start", "A") and env.lookups == [] and env.turn_rewards == [] and not env.found
    assert env.lookup(box="C") == NO_SUCH_BOX  # the old row's box is gone
    with pytest.raises(ValueError, match="box"):
        env.reset(prompt=[])


def test_trl_exposes_only_lookup_as_a_tool(agent_model, tmp_path):
    trainer = trainer_for(agent_model, tmp_path)
    assert [tool.__name__ for tool in trainer.tools] == ["lookup"]  # not reset, state_key, found, turn_rewards
    assert trainer.reward_func_names == ["lookup_reward"]  # no get_reward: the reward function is the only source
    # TRL splices the tool result exactly as the pretraining episodes did.
    for content in ("7", NO_SUCH_BOX):
        message = {"role": "tool", "name": "lookup", "content": content}
        assert trainer._get_tool_suffix_ids([message]) == toy_agent._tool_suffix_ids(trainer.processing_class, content)


# ---- reward ------------------------------------------------------------------------------------------------------


def test_reward_is_one_only_for_the_secret_after_the_right_lookup():
    cases = [  # (environment after the rollout's lookups, completion, reward)
        (env_after("C", "7", "C"), [call("C"), result("7"), answer("7")], 1.0),
        (env_after("C", "7", "C"), [call("C"), result("7"), answer(" 7\n")], 1.0),  # stripped
        (env_after("C", "7", "B", "C"), [call("B"), result(NO_SUCH_BOX), call("C"), result("7"), answer("7")], 1.0),
        (env_after("C", "7", "C"), [call("C"), result("7"), answer("3")], 0.0),  # wrong answer
        (env_after("C", "7", "C"), [call("C"), result("7"), answer("The secret is 7")], 0.0),  # not just the secret
        (env_after("C", "7"), [answer("7")], 0.0),  # right answer without a lookup
        (env_after("C", "7", "B"), [call("B"), result(NO_SUCH_BOX), answer("7")], 0.0),  # only another box
        (env_after("C", "7", "C"), [call("C"), result("7"), call("C")], 0.0),  # ended on a tool call
        (env_after("C", "7", "C"), [call("C"), result("7")], 0.0),  # no final answer
        (env_after("C", "7", "C"), [], 0.0),
    ]
    environments = [env for env, _, _ in cases]
    completions = [completion for _, completion, _ in cases]
    assert lookup_reward(completions=completions, environments=environments) == [r for _, _, r in cases]
    with pytest.raises(ValueError, match="environments"):
        lookup_reward(completions=completions)


# ---- dataset -----------------------------------------------------------------------------------------------------


def test_dataset_rows_and_secrets_that_vary_per_row():
    dataset = toy_agent_dataset(64, seed=0)
    assert dataset.column_names == ["prompt", "box", "secret"]
    assert [dataset["box"].count(box) for box in BOXES] == [8] * len(BOXES)  # balanced
    for row in dataset:
        assert row["prompt"] == [{"role": "user", "content": f"What is the secret in box {row['box']}?"}]
        assert row["secret"] in toy_agent.SECRETS
    for box in BOXES:  # the secret is per row, not per box
        assert len({s for b, s in zip(dataset["box"], dataset["secret"], strict=True) if b == box}) > 1
    assert toy_agent_dataset(64, seed=0)["secret"] == dataset["secret"]
    assert toy_agent_dataset(64, seed=1)["secret"] != dataset["secret"]


# ---- the pretrained model through TRL's tool loop ----------------------------------------------------------------


def test_model_is_cached(agent_model):
    root = os.path.dirname(agent_model)
    assert os.path.basename(agent_model) == AGENT_MODEL_VERSION
    assert tiny_agent_model_path(root) == agent_model  # reused, not rebuilt
    assert not [name for name in os.listdir(root) if name.startswith(".")]  # no temporary folder left behind


def test_sampled_rollouts_make_parseable_calls_and_start_with_a_mixed_reward(agent_model, tmp_path):
    # One step of stock TRL (learning rate 0: the weights stay): 16 prompts x 8 sampled rollouts through TRL's tool
    # loop, its Qwen3 response parser and the environments.
    trainer = trainer_for(agent_model, tmp_path, learning_rate=0.0, max_steps=1, per_device_train_batch_size=128)
    torch.manual_seed(0)
    trainer.train()
    completions = list(trainer._logs["completion"])
    rewards = list(trainer._logs["rewards"]["lookup_reward"])
    assert len(completions) == len(trainer.environments) == len(rewards) == 128

    first_turns = [completion[0] for completion in completions]
    parsed = sum(bool(turn.get("tool_calls")) for turn in first_turns)
    unparsed = sum("<tool_call>" in turn["content"] for turn in first_turns)  # a call the parser could not read
    assert parsed >= 0.9 * (parsed + unparsed)
    assert 0.3 < parsed / len(first_turns) < 0.95  # the pretraining mix: ~64% call the tool
    assert logged(trainer, "tools/failure_frequency")[0] <= 0.1

    # Each reward agrees with its rollout: the right box looked up, then the secret answered.
    for completion, env, reward in zip(completions, trainer.environments, rewards, strict=True):
        assert reward == float(env.found and completion[-1]["content"].strip() == env.secret)
    assert 0.05 < sum(rewards) / len(rewards) < 0.6  # ~0.27 before RL
    groups = [rewards[i : i + 8] for i in range(0, len(rewards), 8)]
    assert sum(len(set(group)) > 1 for group in groups) >= len(groups) // 2  # variance inside most groups


def test_greedy_rollouts_look_up_the_right_box_and_copy_the_secret(agent_model, tmp_path):
    # The most likely action at each decision is the right one (the call, the prompt's box, the secret), so the
    # greedy policy solves the task; sampling does not (above), which is what RL fixes.
    trainer = trainer_for(
        agent_model,
        tmp_path,
        learning_rate=0.0,
        max_steps=1,
        per_device_train_batch_size=16,
        num_generations=2,
        generation_kwargs={"do_sample": False},
    )
    trainer.train()
    for env in trainer.environments:
        assert env.lookups[:1] == [(env.box, env.secret)]
    assert sum(trainer._logs["rewards"]["lookup_reward"]) >= 0.9 * 16
