"""Multi-turn episodes in trl_ext's transformers rollout worker: `tools` and `environment_factory`, as TRL's
`GRPOTrainer` runs them.

An episode is one completion of one prompt, made of model turns with the tools' outputs between them; the worker
runs a batch of episodes in rounds, each round one batched `generate` call for the episodes still going:

1. before the first round each episode draws an environment (one instance per episode, pooled across batches, made by
   `environment_factory`, or by `environment_factory[row["environment"]]` when it is a dict), calls `reset(**row)`
   and appends what it returns to the prompt's last message; the prompt is rendered with the tools (the standalone
   `tools` and the environment's public methods but `reset` / `get_reward`) by the chat template;
2. a round samples one turn per episode after its prompt and completion so far, up to what is left of
   `max_completion_length`, parses it (TRL's `parse_response`) and, when it calls tools and fewer than
   `max_tool_calling_iterations` rounds of tool calls ran, runs them (a tool that raises, or an unknown name, answers
   `{"error": ...}`, as in TRL) and appends the tool messages' tokens, rendered as TRL renders them
   (`tool_suffix_ids`), to the completion; results that would take the completion past `max_completion_length`
   (or the prompt and completion past the model's length) are dropped and the episode ends on its tool call, as
   in TRL;
3. the episode's sample is its prompt and completion, `completion_mask` 1 on the model's tokens and 0 on the tool
   outputs (and their template tokens), so the trainer trains on the turns only; its sampling log-probs come from one
   forward pass over the whole episode afterwards.

The reward functions get the completion messages (assistant and tool messages) and the episodes' environments
(`environments=`), as in TRL; an environment class with a `get_reward` method is one more reward source
(`EnvironmentReward`, weight 1, named after the class). For a per-turn estimator (`gigpo`, `step_wise_grpo`) the
worker records, through the environment protocol of `trl_ext.turn_records`, the state each turn starts from and each
turn's rewards, and stamps them on the sample (`TURN_STATES_KEY`, `TURN_REWARDS_KEY`); the trainer's window estimate
reads them (`trl_ext.trainers.asynchronous.turn_window`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..turn_records import STATE_KEY, TurnRecorder, state_id

TURN_STATES_KEY = "__turn_states__"
"""Where an episode's per-turn environment states (`state_id`s; absent: the environment has no `state_key`) ride in
its sample's `metrics`, from the worker to the trainer's collator (which removes them)."""
TURN_REWARDS_KEY = "__turn_rewards__"
"""Where an episode's per-turn rewards (the environment's `turn_rewards`) ride in its sample's `metrics`, likewise."""
_NOT_TOOLS = ("reset", "get_reward")


def environment_tools(environment: Any) -> list[Callable]:
    """An environment's tools: its public methods but `reset` and `get_reward`, bound to it (read on the class, so
    that no property is evaluated)."""
    return [
        getattr(environment, name)
        for name, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
        if name not in _NOT_TOOLS and not name.startswith("_")
    ]


def environment_factories(owner: str, environment_factory: Any) -> dict[Any, Callable[[], Any]]:
    """`environment_factory` as `{name: factory}` (`{None: factory}` for a single callable), checked."""
    if environment_factory is None:
        return {}
    factories = environment_factory if isinstance(environment_factory, dict) else {None: environment_factory}
    for name, factory in factories.items():
        if not callable(factory):
            where = "environment_factory" if name is None else f"environment_factory[{name!r}]"
            raise ValueError(f"{owner}: {where} must be a callable returning an environment, got {factory!r}")
    return factories


def probe_environments(owner: str, environment_factory: Any) -> dict[Any, Any]:
    """One instance of each environment (`{name: instance}`), each checked to have a callable `reset`."""
    probes = {}
    for name, factory in environment_factories(owner, environment_factory).items():
        instance = factory()
        if not callable(getattr(instance, "reset", None)):
            raise ValueError(
                f"{owner}: the environment {type(instance).__name__} made by environment_factory has no callable "
                "reset(**row); each environment must define one"
            )
        probes[name] = instance
    return probes


def check_episode_setup(
    owner: str, tokenizer: Any, dataset: Any, scorer: Any, tools: Any, max_tool_calling_iterations: Any
) -> None:
    """Refuse, naming the field, what multi-turn episodes cannot run with: tools that are not a list of callables, a
    chat template that cannot render tool calls, text prompts, an estimator that needs a greedy baseline (ReMax: no
    greedy episodes are generated), a bad `max_tool_calling_iterations`."""
    from trl.chat_template_utils import supports_tool_calling

    if tools is not None and (not isinstance(tools, list | tuple) or not all(callable(t) for t in tools)):
        raise ValueError(f"{owner}: tools must be a list of callables (functions with docstrings), got {tools!r}")
    if max_tool_calling_iterations is not None and (
        isinstance(max_tool_calling_iterations, bool)
        or not isinstance(max_tool_calling_iterations, int)
        or max_tool_calling_iterations < 0
    ):
        raise ValueError(
            f"{owner}: max_tool_calling_iterations={max_tool_calling_iterations!r} is not valid; must be an integer "
            ">= 0 or None (no limit)"
        )
    if not supports_tool_calling(tokenizer):
        raise ValueError(
            f"{owner}: the tokenizer's chat template cannot render tool calls (user -> assistant with tool_calls -> "
            "tool); multi-turn episodes need one"
        )
    if "prompt" in dataset.column_names and len(dataset) and isinstance(dataset[0]["prompt"], str):
        raise ValueError(
            f"{owner}: the dataset's prompts are text, but episodes with tools need conversational prompts (a list "
            "of messages with roles)"
        )
    if scorer.needs_greedy_baseline:
        raise ValueError(
            f"{owner}: advantage_fn={scorer.advantage_fn_name!r} compares each reward with a greedy completion's, "
            "which the worker makes for single-turn prompts only; with tools use another advantage function"
        )


class EnvironmentReward:
    """The reward source of an environment class that owns its reward (`get_reward()`): each completion's
    environment's `get_reward()` when it is of that class, else None (not scored by it). Named after the class."""

    def __init__(self, environment_type: type):
        self.environment_type = environment_type
        self.__name__ = environment_type.__name__

    def __call__(self, environments: list[Any] | None = None, **kwargs: Any) -> list[float | None]:
        if environments is None:
            raise ValueError(f"{self.__name__}.get_reward: the completions' environments were not passed")
        rewards = []
        for environment in environments:
            if type(environment) is not self.environment_type:
                rewards.append(None)
                continue
            value = environment.get_reward()
            rewards.append(asyncio.run(value) if inspect.isawaitable(value) else value)
        return rewards


def environment_rewards(owner: str, environment_factory: Any) -> list[EnvironmentReward]:
    """One `EnvironmentReward` per environment class that defines `get_reward` (TRL's extra reward sources)."""
    types = []
    for instance in probe_environments(owner, environment_factory).values():
        if callable(getattr(type(instance), "get_reward", None)) and type(instance) not in types:
            types.append(type(instance))
    return [EnvironmentReward(kind) for kind in types]


@dataclass
class Episode:
    """One episode in the making: its prompt and what the model and the tools added."""

    prompt: list[dict[str, Any]]
    prompt_ids: list[int]
    tools: list[Callable]
    environment: Any = None
    completion: list[dict[str, Any]] = field(default_factory=list)  # the assistant and tool messages
    completion_ids: list[int] = field(default_factory=list)
    model_mask: list[int] = field(default_factory=list)  # 1: the model's token, 0: a tool output's
    tool_calls: int = 0
    tool_failures: int = 0
    exhausted: bool = False  # it asked for tools past max_tool_calling_iterations

    @property
    def turns(self) -> int:
        """The model turns: the runs of the model's tokens."""
        return sum(1 for t, m in enumerate(self.model_mask) if m and (t == 0 or not self.model_mask[t - 1]))


Generate = Callable[[list[list[int]], list[int]], list[list[int]]]
"""`(inputs, budgets) -> turns`: one sampled turn after each input, at most its budget of tokens, up to and including
its first eos."""


class EpisodeRunner:
    """Runs batches of episodes in the rollout worker's process (see the module docstring).

    Args:
        owner: Who runs them, for the error messages.
        tokenizer: The policy's tokenizer (given TRL's response schema when it has none, to parse tool calls).
        tools: The standalone tools (callables with docstrings, as TRL's).
        environment_factory: None, a callable returning an environment, or a dict of them by the rows'
            `environment` field.
        max_tool_calling_iterations: The most rounds of tool calls per episode (None: no limit).
        max_completion_length: The most completion tokens per episode, tool outputs included.
        max_model_len: The model's context length: results that would reach it are dropped.
        chat_template_kwargs: Extra keyword arguments of `apply_chat_template`.
    """

    def __init__(
        self,
        *,
        owner: str,
        tokenizer: Any,
        tools: list[Callable] | None,
        environment_factory: Any,
        max_tool_calling_iterations: int | None,
        max_completion_length: int,
        max_model_len: int,
        chat_template_kwargs: dict[str, Any] | None = None,
    ):
        from trl.chat_template_utils import (
            add_response_schema,
            get_training_chat_template,
            is_chat_template_prefix_preserving,
        )

        self.owner = owner
        if (
            getattr(tokenizer, "response_template", None) is None
            and getattr(tokenizer, "response_schema", None) is None
        ):
            tokenizer = add_response_schema(tokenizer)
        self.tokenizer = tokenizer
        self.tools = list(tools or [])
        self.factories = environment_factories(owner, environment_factory)
        self.pool = {name: [instance] for name, instance in probe_environments(owner, environment_factory).items()}
        self.max_iterations = max_tool_calling_iterations
        self.max_completion_length = max_completion_length
        self.max_model_len = max_model_len
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.chat_template = (
            None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)
        )

    @property
    def has_environments(self) -> bool:
        return bool(self.factories)

    def begin(self, rows: list[dict[str, Any]], repeat: int) -> list[Episode]:
        """`repeat` episodes of each row, each with its own environment (reset on the row) and its prompt's ids."""
        episodes, cursor = [], {}
        for row in rows:
            name = row.get("environment") if len(self.factories) > 1 or None not in self.factories else None
            if self.factories and name not in self.factories:
                raise ValueError(
                    f"{self.owner}: a row has environment={name!r}, which is not among environment_factory's "
                    f"{list(self.factories)}"
                )
            for _ in range(repeat):
                environment, prompt, tools = None, list(row["prompt"]), self.tools
                if self.factories:
                    pool, index = self.pool[name], cursor.get(name, 0)
                    if index == len(pool):
                        pool.append(self.factories[name]())
                    cursor[name] = index + 1
                    environment = pool[index]
                    reset_kwargs = {k: v for k, v in row.items() if k != "environment"} if name is not None else row
                    prompt = _with_observation(prompt, environment.reset(**reset_kwargs))
                    tools = self.tools + environment_tools(environment)
                episodes.append(Episode(prompt, self.prompt_ids(prompt, tools), tools, environment))
        return episodes

    def prompt_ids(self, prompt: list[dict[str, Any]], tools: list[Callable]) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            prompt,
            tools=tools or None,  # `or None`: some templates render the tool boilerplate for tools=[]
            chat_template=self.chat_template,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            **self.chat_template_kwargs,
        )["input_ids"]
        return list(ids[0] if ids and isinstance(ids[0], list) else ids)

    def run(self, episodes: list[Episode], generate: Generate) -> TurnRecorder | None:
        """Run the episodes to their ends, round by round (module docstring); the recorder of their environments'
        turns (None without environments)."""
        from trl.chat_template_utils import parse_response

        recorder = None
        if self.factories:
            recorder = TurnRecorder(self.owner, [episode.environment for episode in episodes])
        active, iteration = list(range(len(episodes))), 0
        while active:
            if recorder is not None:
                recorder.generation_starts()
            inputs = [episodes[i].prompt_ids + episodes[i].completion_ids for i in active]
            budgets = [self.max_completion_length - len(episodes[i].completion_ids) for i in active]
            turns = generate(inputs, budgets)
            going = []
            for i, prefix, ids in zip(active, inputs, turns, strict=True):
                episode = episodes[i]
                if not ids:
                    continue
                message = parse_response(self.tokenizer, ids, prefix=prefix, tools=episode.tools)
                episode.completion.append(message)
                episode.completion_ids += ids
                episode.model_mask += [1] * len(ids)
                calls = message.get("tool_calls")
                if not calls:
                    continue
                if self.max_iterations is not None and iteration >= self.max_iterations:
                    episode.exhausted = True
                    continue
                results = self.call_tools(episode, calls)
                if recorder is not None:
                    recorder.tool_called(i)
                suffix = self.tool_suffix_ids(results)
                length = len(episode.completion_ids) + len(suffix)
                if length > self.max_completion_length or len(episode.prompt_ids) + length >= self.max_model_len:
                    continue  # TRL drops results past the budget: the episode ends on its tool call
                episode.completion += results
                episode.completion_ids += suffix
                episode.model_mask += [0] * len(suffix)
                if length < self.max_completion_length:
                    going.append(i)
            active, iteration = going, iteration + 1
        return recorder

    def call_tools(self, episode: Episode, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each tool call's message (`{"role": "tool", "name", "content"}`); a failure answers `{"error": ...}`."""
        table = {tool.__name__: tool for tool in episode.tools}
        messages = []
        for call in calls:
            episode.tool_calls += 1
            if call.get("type", "function") != "function":
                name, result = call.get("name", "unknown"), {"error": f"Unsupported tool call type: {call['type']}"}
                episode.tool_failures += 1
            else:
                name = call["function"]["name"]
                try:
                    if name not in table:
                        raise ValueError(f"Tool {name} not found.")
                    result = table[name](**(call["function"].get("arguments") or {}))
                    if inspect.isawaitable(result):
                        result = asyncio.run(result)
                except Exception as error:
                    episode.tool_failures += 1
                    result = {"error": str(error)}
            messages.append(
                {"role": "tool", "name": name, "content": result if isinstance(result, list) else str(result)}
            )
        return messages

    def tool_suffix_ids(self, tool_messages: list[dict[str, Any]]) -> list[int]:
        """The tokens the chat template puts after an assistant turn for `tool_messages`, up to the next generation
        prompt: the difference between a short conversation rendered with them and without them (TRL's
        `GRPOTrainer` does the same), its prefix cut after its last eos."""
        calls = [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]
        dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": calls}]
        render = dict(tokenize=True, chat_template=self.chat_template, return_dict=False, **self.chat_template_kwargs)
        prefix = list(self.tokenizer.apply_chat_template(dummy, add_generation_prompt=False, **render))
        full = list(self.tokenizer.apply_chat_template(dummy + tool_messages, add_generation_prompt=True, **render))
        ends = [t for t, token in enumerate(prefix) if token == self.tokenizer.eos_token_id]
        if ends:
            prefix = prefix[: ends[-1] + 1]
        if full[: len(prefix)] != prefix:
            raise ValueError(
                f"{self.owner}: the chat template renders an assistant turn differently once tool messages follow it; "
                "multi-turn training needs a prefix-preserving template"
            )
        return full[len(prefix) :]

    def finish(self, episodes: list[Episode], recorder: TurnRecorder | None, per_turn: bool) -> list[dict[str, Any]]:
        """Each episode's metrics for its sample: with a per-turn estimator (`per_turn`) its turns' states (when its
        environment has a `state_key`) and rewards."""
        stamps = []
        for i, episode in enumerate(episodes):
            stamp: dict[str, Any] = {}
            if per_turn and recorder is not None:
                states, rewards = recorder.turns(i, episode.turns)
                stamp[TURN_REWARDS_KEY] = [float(r) for r in rewards]
                if hasattr(episode.environment, STATE_KEY):
                    stamp[TURN_STATES_KEY] = [state_id(state) for state in states]
            stamps.append(stamp)
        return stamps


def _with_observation(prompt: list[dict[str, Any]], observation: Any) -> list[dict[str, Any]]:
    """The prompt with `reset`'s observation appended to its last message (TRL's rule); None leaves it."""
    if observation is None:
        return prompt
    content = prompt[-1]["content"]
    if isinstance(observation, list) and isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if isinstance(observation, str) and isinstance(content, list):
        observation = [{"type": "text", "text": observation}]
    return [*prompt[:-1], {**prompt[-1], "content": content + observation}]


__all__ = [
    "TURN_REWARDS_KEY",
    "TURN_STATES_KEY",
    "EnvironmentReward",
    "Episode",
    "EpisodeRunner",
    "check_episode_setup",
    "environment_rewards",
    "environment_tools",
    "probe_environments",
]
