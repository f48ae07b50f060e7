"""Per-turn advantages on TRL's multi-turn rollouts (`multi_step_grpo`, `gigpo`), offline.

The toy model wears TRL's Qwen3 chat template and its `generate` is replaced by a script: rollout i of a group
follows `SCRIPTS[i]`, one text per model turn, so the turns, the tool calls, the environments' states and rewards
are known, and the advantages on each turn's tokens are checked against closed forms computed here by hand.

The environment walks a line: `move(step)` moves it and appends 0.5·step to `turn_rewards`; its `state_key` is its
position; the episode reward (`get_reward`) is 1 at position 3. The four scripted rollouts of the group:

    rollout 0:  move(1) | move(2) | done      positions 0 -> 1 -> 3   reward 1   turn rewards 0.5, 1.0, 0
    rollout 1:  move(3) | done                positions 0 -> 3        reward 1   turn rewards 1.5, 0
    rollout 2:  move(1) | done                positions 0 -> 1        reward 0   turn rewards 0.5, 0
    rollout 3:  done                          position 0              reward 0   turn rewards 0
"""

from __future__ import annotations

import json
import math
from unittest.mock import patch

import pytest
import torch
from datasets import Dataset
from trainer_helpers import CPU, build_tool_model

import trl_ext
from trl_ext.trainers.core.turns import segment_turns

GENERATIONS = 4
IM_END = "<|im_end|>"
ASSISTANT = "<|im_start|>assistant"
EPSILON = 1e-6  # step_wise_grpo's and gigpo's default ε


def move(step: int, tag: str) -> str:
    """A turn that calls `move(step)`; `tag` tells the script's rollouts apart in the prompts of later turns."""
    return f"{tag}<tool_call>\n{json.dumps({'name': 'move', 'arguments': {'step': step}})}\n</tool_call>"


SCRIPTS = [
    [move(1, "a"), move(2, "a"), "done"],
    [move(3, "b"), "done"],
    [move(1, "c"), "done"],
    ["done"],
]
TURNS = [len(script) for script in SCRIPTS]
OUTCOMES = [1.0, 1.0, 0.0, 0.0]


class TextLineEnvironment:
    """Walks a line, without trl_ext's protocol: states come from the text the model saw, no turn rewards."""

    def reset(self, **kwargs) -> None:
        self.position = 0

    def move(self, step: int) -> int:
        """
        Move along the line.

        Args:
            step: How far to move.

        Returns:
            The new position.
        """
        self.position += step
        return self.position

    def get_reward(self) -> float:
        return float(self.position == 3)


class LineEnvironment(TextLineEnvironment):
    """The walk with trl_ext's multi-turn protocol: `state_key` (the position) and `turn_rewards` (0.5·step)."""

    def reset(self, **kwargs) -> None:
        super().reset()
        self.turn_rewards = []

    @property
    def state_key(self):
        return ("at", self.position)

    def move(self, step: int) -> int:
        """
        Move along the line.

        Args:
            step: How far to move.

        Returns:
            The new position.
        """
        self.turn_rewards.append(0.5 * step)
        return super().move(step)


class ScriptedGenerate:
    """Stands in for `model.generate`: a row's turn k of rollout i is `scripts[i][k]`; rollout i is row i of the
    first call (the group's rows in order) and, in later calls, the script whose first turn's tag the prompt shows."""

    def __init__(self, tokenizer, scripts):
        self.tokenizer = tokenizer
        self.scripts = scripts

    def _text(self, row: int, prompt: str) -> str:
        turn = prompt.count(ASSISTANT) - 1  # the prompt ends with the header of the turn to generate
        if turn == 0:
            return self.scripts[row % len(self.scripts)][0]
        (script,) = [s for s in self.scripts if len(s) > 1 and s[0] in prompt]
        return script[turn]

    def __call__(self, input_ids, attention_mask, **kwargs):
        prompts = [self.tokenizer.decode(ids[mask.bool()]) for ids, mask in zip(input_ids, attention_mask, strict=True)]
        answers = [self.tokenizer.encode(self._text(i, p) + IM_END) for i, p in enumerate(prompts)]
        width = max(map(len, answers))
        pad = self.tokenizer.pad_token_id
        completion_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids in answers], device=input_ids.device)
        return torch.cat([input_ids, completion_ids], dim=1)


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory) -> str:
    return build_tool_model(str(tmp_path_factory.mktemp("tool_model")))


def make_trainer(trainer_class, tool_model, tmp_path, environment=LineEnvironment, **overrides):
    settings = {
        **CPU,
        "output_dir": str(tmp_path),
        "per_device_train_batch_size": GENERATIONS,
        "num_generations": GENERATIONS,
        "max_completion_length": 512,
        "max_steps": 1,
        "learning_rate": 1e-3,
        **overrides,
    }
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": "Walk to 3."}]] * 2})
    return trainer_class(
        model=tool_model,
        args=trainer_class.config_class(**settings),
        train_dataset=dataset,
        environment_factory=environment,
    )


def rollout(trainer, scripts=SCRIPTS) -> dict:
    """One generation batch through the trainer (scripted generation): its prepared output."""
    fake = ScriptedGenerate(trainer.processing_class, scripts)
    trainer.model.train()
    rows = [trainer.train_dataset[0]] * GENERATIONS
    with patch.object(trainer.model, "generate", side_effect=fake):
        return trainer._generate_and_score_completions(rows)


def turn_values(output) -> list[list[float]]:
    """The advantage on each model turn's tokens (all equal within a turn, checked), per rollout."""
    mask = output["completion_mask"] * output["tool_mask"]
    turns = segment_turns(mask)
    advantages = output["advantages"]
    values = []
    for b in range(mask.size(0)):
        row = []
        for t in range(int(turns.count[b])):
            on_turn = advantages[b][turns.index[b] == t]
            assert torch.allclose(on_turn, on_turn[0].expand_as(on_turn))
            row.append(on_turn[0].item())
        values.append(row)
    return values


def grpo(values: list[float]) -> list[float]:
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return [(v - mean) / (std + EPSILON) for v in values]


# ---- turns ---------------------------------------------------------------------------------------------------------


def test_turns_follow_the_script_and_tool_outputs_get_no_advantage(tool_model, tmp_path):
    trainer = make_trainer(trl_ext.MultiStepGRPOTrainer, tool_model, tmp_path)
    output = rollout(trainer)
    mask = output["completion_mask"] * output["tool_mask"]
    assert segment_turns(mask).count.tolist() == TURNS
    tool_tokens = (output["completion_mask"] == 1) & (output["tool_mask"] == 0)
    assert tool_tokens.sum() > 0
    assert (output["advantages"][tool_tokens] == 0).all()  # tool outputs and template tokens: no policy gradient
    assert (output["advantages"][output["completion_mask"] == 0] == 0).all()
    assert trainer._metrics["train"]["turns/per_completion"] == [sum(TURNS) / len(TURNS)]


# ---- multi_step_grpo ------------------------------------------------------------------------------------------------


def test_multi_step_grpo_puts_the_episode_advantage_on_every_turn(tool_model, tmp_path):
    trainer = make_trainer(trl_ext.MultiStepGRPOTrainer, tool_model, tmp_path)
    episode = grpo(OUTCOMES)  # the outcome only: turn rewards are read by gigpo, not by step-wise GRPO
    expected = [[a] * n for a, n in zip(episode, TURNS, strict=True)]
    assert turn_values(rollout(trainer)) == [pytest.approx(row, abs=1e-6) for row in expected]


def test_multi_step_grpo_step_norm_divides_by_the_number_of_turns(tool_model, tmp_path):
    trainer = make_trainer(
        trl_ext.MultiStepGRPOTrainer, tool_model, tmp_path, advantage_fn_args={"enable_step_norm": True}
    )
    episode = grpo(OUTCOMES)
    expected = [[a / n] * n for a, n in zip(episode, TURNS, strict=True)]
    assert turn_values(rollout(trainer)) == [pytest.approx(row, abs=1e-6) for row in expected]


# ---- gigpo ----------------------------------------------------------------------------------------------------------


def gigpo_closed_form(step_rewards, states, omega=1.0):
    """A = A_E + ω·A_S with fnorm none and γ = 1: A_E the episode return minus the group's mean, A_S the turn's
    return-to-go minus the mean over the turns with the same state (0 alone), each over 1 + ε."""
    returns = [sum(r) for r in step_rewards]
    mean = sum(returns) / len(returns)
    to_go = [[sum(r[t:]) for t in range(len(r))] for r in step_rewards]
    anchors: dict = {}
    for run_states, run_to_go in zip(states, to_go, strict=True):
        for state, value in zip(run_states, run_to_go, strict=True):
            anchors.setdefault(state, []).append(value)
    expected = []
    for ret, run_states, run_to_go in zip(returns, states, to_go, strict=True):
        a_e = (ret - mean) / (1 + EPSILON)
        row = []
        for state, value in zip(run_states, run_to_go, strict=True):
            group = anchors[state]
            a_s = 0.0 if len(group) == 1 else (value - sum(group) / len(group)) / (1 + EPSILON)
            row.append(a_e + omega * a_s)
        expected.append(row)
    return expected


def test_gigpo_groups_turns_by_the_environment_state_and_reads_turn_rewards(tool_model, tmp_path):
    trainer = make_trainer(trl_ext.GiGPOTrainer, tool_model, tmp_path)
    # Turn rewards (0.5·step) plus the outcome on the last turn; states are the positions each turn starts from.
    step_rewards = [[0.5, 1.0, 1.0], [1.5, 1.0], [0.5, 0.0], [0.0]]
    states = [[0, 1, 3], [0, 3], [0, 1], [0]]
    expected = gigpo_closed_form(step_rewards, states)
    assert expected == [
        pytest.approx([2.25, 2.125, 1.125]),
        pytest.approx([2.25, 1.125]),
        pytest.approx([-1.75, -1.875]),
        pytest.approx([-2.75]),
    ]
    assert turn_values(rollout(trainer)) == [pytest.approx(row, abs=1e-5) for row in expected]


def test_gigpo_without_environment_states_groups_turns_by_the_text_seen(tool_model, tmp_path):
    trainer = make_trainer(trl_ext.GiGPOTrainer, tool_model, tmp_path, environment=TextLineEnvironment)
    # Sparse rewards (no turn_rewards attribute); the state is the prompt plus the tool outputs so far: rollouts 0
    # and 2 both saw "1" before their second turn; rollout 0's third turn ("1", "3") and rollout 1's second ("3")
    # differ, although the environment is at 3 in both.
    step_rewards = [[0.0, 0.0, 1.0], [0.0, 1.0], [0.0, 0.0], [0.0]]
    states = [["p", "p1", "p13"], ["p", "p3"], ["p", "p1"], ["p"]]
    expected = gigpo_closed_form(step_rewards, states)
    assert turn_values(rollout(trainer)) == [pytest.approx(row, abs=1e-5) for row in expected]


# ---- truncation ---------------------------------------------------------------------------------------------------

LONG = [move(3, "a"), "done " * 12]  # rollout 0: a tool call, then a long answer; the others answer at once
SHORT = ["done"]


def tool_output_end(tool_model, tmp_path) -> int:
    """Where rollout 0's second turn starts in its completion (after its first turn and the tool output)."""
    trainer = make_trainer(trl_ext.MultiStepGRPOTrainer, tool_model, tmp_path / "probe")
    output = rollout(trainer, [LONG, SHORT, SHORT, SHORT])
    turns = segment_turns(output["completion_mask"] * output["tool_mask"])
    return int((turns.index[0] == 1).nonzero()[0])


def test_a_truncated_last_turn_is_a_turn_and_masked_truncation_keeps_the_reward_in_the_group(tool_model, tmp_path):
    end = tool_output_end(tool_model, tmp_path)
    episode = grpo([1.0, 0.0, 0.0, 0.0])
    trainer = make_trainer(trl_ext.MultiStepGRPOTrainer, tool_model, tmp_path / "a", max_completion_length=end + 2)
    output = rollout(trainer, [LONG, SHORT, SHORT, SHORT])
    turns = segment_turns(output["completion_mask"] * output["tool_mask"])
    assert turns.count.tolist() == [2, 1, 1, 1] and int((turns.index[0] == 1).sum()) == 2  # cut to 2 tokens
    assert turn_values(output) == [pytest.approx([a] * n, abs=1e-6) for a, n in zip(episode, [2, 1, 1, 1], strict=True)]

    # mask_truncated_completions: rollout 0 has no turn left (no advantage anywhere), but its reward 1 still counts
    # in the group's mean and std, as in TRL's GRPO.
    trainer = make_trainer(
        trl_ext.MultiStepGRPOTrainer,
        tool_model,
        tmp_path / "b",
        max_completion_length=end + 2,
        mask_truncated_completions=True,
    )
    output = rollout(trainer, [LONG, SHORT, SHORT, SHORT])
    assert segment_turns(output["completion_mask"] * output["tool_mask"]).count.tolist() == [0, 1, 1, 1]
    assert (output["advantages"][0] == 0).all()
    assert turn_values(output) == [[], *[pytest.approx([a], abs=1e-6) for a in episode[1:]]]


@pytest.mark.parametrize("room", [0, -1], ids=["cut-to-nothing", "tool-output-dropped"])
def test_a_turn_with_no_tokens_is_no_turn_and_its_round_stays_with_the_turn_that_called(room, tool_model, tmp_path):
    # room 0: TRL keeps the tool output and cuts the next turn to nothing; room -1: the tool output would not fit and
    # TRL drops it. The tool ran either way (the environment is at 3 and recorded 1.5): one turn, whose reward is
    # 1.5 + the outcome 1, starting from position 0 like the other rollouts' turns.
    end = tool_output_end(tool_model, tmp_path)
    trainer = make_trainer(trl_ext.GiGPOTrainer, tool_model, tmp_path / "run", max_completion_length=end + room)
    output = rollout(trainer, [LONG, SHORT, SHORT, SHORT])
    assert segment_turns(output["completion_mask"] * output["tool_mask"]).count.tolist() == [1, 1, 1, 1]
    assert trainer.environments[0].position == 3
    expected = gigpo_closed_form([[2.5], [0.0], [0.0], [0.0]], [[0], [0], [0], [0]])
    assert turn_values(output) == [pytest.approx(row, abs=1e-5) for row in expected]


def test_an_episode_that_never_answers_ends_at_max_tool_calling_iterations(tool_model, tmp_path):
    # Rollout 0 calls the tool every turn: TRL stops after 2 rounds; its third turn's call is never run.
    calls = [move(1, "a"), move(1, "a"), move(1, "a"), move(1, "a")]
    trainer = make_trainer(trl_ext.GiGPOTrainer, tool_model, tmp_path, max_tool_calling_iterations=2)
    output = rollout(trainer, [calls, SHORT, SHORT, SHORT])
    assert segment_turns(output["completion_mask"] * output["tool_mask"]).count.tolist() == [3, 1, 1, 1]
    assert trainer.environments[0].position == 2
    expected = gigpo_closed_form([[0.5, 0.5, 0.0], [0.0], [0.0], [0.0]], [[0, 1, 2], [0], [0], [0]])
    assert turn_values(output) == [pytest.approx(row, abs=1e-5) for row in expected]


# ---- bad input ----------------------------------------------------------------------------------------------------


class FailingEnvironment(LineEnvironment):
    """`move` raises for a negative step (after recording nothing): TRL turns the error into the tool's output."""

    def move(self, step: int) -> int:
        """
        Move forward along the line.

        Args:
            step: How far to move (not negative).

        Returns:
            The new position.
        """
        if step < 0:
            raise ValueError("cannot move backwards")
        return super().move(step)


def test_a_tool_that_raises_is_a_failed_call_the_model_sees_and_its_turn_counts(tool_model, tmp_path):
    trainer = make_trainer(trl_ext.GiGPOTrainer, tool_model, tmp_path, environment=FailingEnvironment)
    output = rollout(trainer, [[move(-1, "a"), "done"], SHORT, SHORT, SHORT])
    assert segment_turns(output["completion_mask"] * output["tool_mask"]).count.tolist() == [2, 1, 1, 1]
    assert trainer._metrics["train"]["tools/failure_frequency"] == [1.0]
    # The failed call changed nothing: the second turn starts from position 0 again and shares its anchor group.
    expected = gigpo_closed_form([[0.0, 0.0], [0.0], [0.0], [0.0]], [[0, 0], [0], [0], [0]])
    assert turn_values(output) == [pytest.approx(row, abs=1e-5) for row in expected]


class ListStateEnvironment(LineEnvironment):
    @property
    def state_key(self):
        return [self.position]


class NoStateEnvironment(LineEnvironment):
    state_key = None


class BrokenStateEnvironment(LineEnvironment):
    @property
    def state_key(self):
        raise RuntimeError("no observation yet")


class WordRewardEnvironment(LineEnvironment):
    def move(self, step: int) -> int:
        """
        Move along the line.

        Args:
            step: How far to move.

        Returns:
            The new position.
        """
        self.turn_rewards.append("high")
        return super().move(step)


class DictRewardEnvironment(LineEnvironment):
    def reset(self, **kwargs) -> None:
        super().reset()
        self.turn_rewards = {}


class ForgetfulEnvironment(LineEnvironment):
    def get_reward(self) -> float:
        self.turn_rewards.clear()  # before trl_ext reads them
        return super().get_reward()


BAD_ENVIRONMENTS = {
    "unhashable-state": (
        ListStateEnvironment,
        r"sample 0 \(ListStateEnvironment\) has state_key=\[0\] of type list, which is not hashable",
    ),
    "no-states": (
        NoStateEnvironment,
        r"advantage_fn='gigpo' groups turns by the state they start from, but every environment's state_key was None",
    ),
    "state-raises": (
        BrokenStateEnvironment,
        r"reading the environment of sample 0 \(BrokenStateEnvironment\) raised RuntimeError\('no observation yet'\)",
    ),
    "reward-not-a-number": (
        WordRewardEnvironment,
        r"sample 0 \(WordRewardEnvironment\) has turn_rewards\[0\]='high'; turn rewards must be finite numbers",
    ),
    "rewards-not-a-list": (
        DictRewardEnvironment,
        r"sample 0 \(DictRewardEnvironment\) has turn_rewards of type dict; it must be a list",
    ),
    "rewards-lost": (ForgetfulEnvironment, r"sample 0 \(ForgetfulEnvironment\) lost entries of turn_rewards"),
}


@pytest.mark.parametrize("environment, message", BAD_ENVIRONMENTS.values(), ids=BAD_ENVIRONMENTS)
def test_bad_environment_protocol_is_refused_naming_the_sample(environment, message, tool_model, tmp_path):
    trainer = make_trainer(trl_ext.GiGPOTrainer, tool_model, tmp_path, environment=environment)
    with pytest.raises(ValueError, match=message):
        rollout(trainer)


def test_turn_states_follow_the_rounds_of_tool_calls():
    from trl_ext.turn_records import TurnRecorder

    environment = LineEnvironment()
    environment.reset()
    recorder = TurnRecorder("GiGPOTrainer", [environment])
    recorder.generation_starts()
    environment.move(1)
    recorder.tool_called(0)
    assert recorder.turns(0, 2) == ([("at", 0), ("at", 1)], [0.5, 0.0])
    assert recorder.turns(0, 1) == ([("at", 0)], [0.5])  # a round with no turn after it: its reward stays
    assert recorder.turns(0, 0) == ([None], [0.5])  # no turn at all: one row holding every reward
    # round 2's call named an unknown tool (TRL answered with an error, no tool ran): turn 2 starts where turn 1 did
    recorder.generation_starts()
    recorder.generation_starts()
    environment.move(1)
    recorder.tool_called(0)  # after round 3
    assert recorder.turns(0, 3) == ([("at", 0), ("at", 1), ("at", 1)], [0.5, 0.0, 0.5])
    with pytest.raises(ValueError, match=r"sample 0 has 2 model turn\(s\) .* called after generation round 3"):
        recorder.turns(0, 2)


def test_a_rollout_env_mask_of_the_wrong_length_is_refused_naming_the_sample(tool_model, tmp_path):
    def rollout_func(prompts, trainer):
        ids = [[5, 6, 7, 8]] * len(prompts)
        masks = [[1, 0, 1, 1]] * len(prompts)
        masks[1] = [1, 0, 1]
        return {"prompt_ids": [[3, 4]] * len(prompts), "completion_ids": ids, "logprobs": ids, "env_mask": masks}

    settings = {**CPU, "output_dir": str(tmp_path), "per_device_train_batch_size": GENERATIONS}
    settings.update(num_generations=GENERATIONS, max_completion_length=8, max_steps=1)
    trainer = trl_ext.GiGPOTrainer(
        model=tool_model,
        reward_funcs=lambda completions, **kwargs: [1.0] * len(completions),
        args=trl_ext.GiGPOConfig(**settings),
        train_dataset=Dataset.from_dict({"prompt": ["walk"] * 2}),
        rollout_func=rollout_func,
    )
    with pytest.raises(ValueError, match=r"the rollout_func's env_mask of sample 1 has 3 entries but its completion 4"):
        trainer._generate_and_score_completions([{"prompt": "walk"}] * GENERATIONS)


@pytest.mark.parametrize("config_class", [trl_ext.MIXConfig, trl_ext.OnPolicyDistillConfig])
def test_the_per_turn_parts_need_the_grpo_family_trainer(config_class, tmp_path):
    with pytest.raises(ValueError, match=r"it needs `run_ids`, the run each step .* only the grpo family's trainer"):
        config_class(**CPU, output_dir=str(tmp_path), advantage_fn="step_wise_grpo")
    with pytest.raises(ValueError, match=r"turns_as_samples=True trains each model turn as a sample of its own"):
        config_class(**CPU, output_dir=str(tmp_path), turns_as_samples=True, loss_agg_mode="seq-mean-token-mean")
