"""An offline toy tool-using agent for multi-turn RL: "look up, then answer", with TRL's `environment_factory`.

Like `trl_ext.toy`, nothing here touches the Hugging Face Hub: the tokenizer and a tiny model are built and
briefly pretrained in-process, so the task runs offline, on CPU, in seconds.

The task: every row names one of eight boxes (`BOXES`, column `box`) and holds a secret digit drawn at random per
row (`SECRETS`, column `secret`), so the secret cannot be learned from the box. The prompt asks for the secret; the
environment (`LookupEnvironment`) has one tool, `lookup(box)`, that returns the secret for the row's box and
"no such box" for any other. A rollout, as TRL's tool loop runs it (at most `max_tool_calling_iterations` tool
rounds):

    user:       What is the secret in box C?             (system prompt: the Qwen3 tool boilerplate + schema)
    assistant:  <tool_call>{"name": "lookup", "arguments": {"box": "C"}}</tool_call>
    tool:       7
    assistant:  7                                        reward 1.0

The reward (`lookup_reward`, a plain reward function: `get_reward()` cannot see the final answer) is 1.0 if the
final assistant message makes no tool call, its content (stripped) equals the secret, and `lookup` was called with
the row's box during the rollout; else 0.0. Answering without a lookup, after a lookup of another box only, or
with a wrong secret all score 0.

The model (`tiny_agent_model_path`) is a 2-layer, 64-wide Qwen3 (~113k parameters, tied embeddings) with its own
byte-level BPE tokenizer (607 tokens) wearing TRL's shipped Qwen3 chat template, so TRL renders the tool schema and
parses the tool calls itself. The tokenizer is trained on the text TRL renders during a rollout (the system prompt
with the tool schema, the `<tool_call>` JSON, the `<tool_response>` block), with box letters and digits kept as
their own tokens, so an episode is short: a 40-token prompt and a 17-token lookup-then-answer completion. It was
pretrained (`AGENT_PRETRAIN_STEPS`, ~20 s of plain torch on one CPU thread) on such episodes, concatenated exactly
as TRL's tool loop builds them, with a mix of behaviours (`PRETRAIN_MIX`): 30% look up the prompt's box and copy
the secret, 35% look up another box and answer a random digit, 35% answer a random digit without a lookup. So it
calls the tool ~64% of the time, with the prompt's box ~43% of those times, and copies a looked-up secret ~98% of
the time: its reward starts at ~0.27, with variance inside each group of rollouts, and RL has to learn to always
look up the prompt's box.

Measured with stock `trl.GRPOTrainer` and `AGENT_TRAINING` (100 steps of 8 prompts x 8 rollouts, one log every 2
steps) on 2 CPU cores, the logged reward goes from 0.33 to 0.94 (mean of the first 5 vs the last 5 logs; the very
first log, at step 2, is 0.23; trainer seeds 1 and 2: 0.34 -> 0.94 and 0.33 -> 0.94) in ~22 s of training with one
torch thread, ~17 s with two (~26 s and ~22 s for the whole script, plus ~22 s to build the model on first use).
The rollouts of a group disagree at first (`frac_reward_zero_std` ~0.05) and mostly agree at the end (~0.6):

    from trl import GRPOConfig, GRPOTrainer
    from trl_ext.toy_agent import AGENT_TRAINING, LookupEnvironment, lookup_reward, tiny_agent_model_path
    from trl_ext.toy_agent import toy_agent_dataset

    args = GRPOConfig(output_dir="out", use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                      **AGENT_TRAINING)
    trainer = GRPOTrainer(model=tiny_agent_model_path(), reward_funcs=lookup_reward, args=args,
                          train_dataset=toy_agent_dataset(), environment_factory=LookupEnvironment)
    trainer.train()  # the "reward" entries of trainer.state.log_history rise from ~0.3 to ~0.9

This module does not import trl (it reads TRL's chat template files from the installed package).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
from typing import Any

import torch
from datasets import Dataset, DatasetDict
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from trl_ext.toy import TEST_PROMPTS, TEST_SEED, cached_model, deterministic_build

__all__ = [
    "AGENT_MODEL_VERSION",
    "AGENT_PRETRAIN_STEPS",
    "AGENT_TRAINING",
    "BOXES",
    "NO_SUCH_BOX",
    "PRETRAIN_MIX",
    "PROMPT_TEMPLATE",
    "SECRETS",
    "LookupEnvironment",
    "build_agent_model",
    "build_agent_tokenizer",
    "lookup_reward",
    "tiny_agent_model_path",
    "toy_agent_dataset",
    "toy_agent_splits",
]

BOXES = "ABCDEFGH"
"""The boxes a prompt can ask about (dataset column `box`)."""

SECRETS = "0123456789"
"""A row's secret is one of these digits, drawn at random per row (dataset column `secret`)."""

PROMPT_TEMPLATE = "What is the secret in box {box}?"

NO_SUCH_BOX = "no such box"
"""What `LookupEnvironment.lookup` returns for any box but the row's."""

AGENT_MODEL_VERSION = "tiny-agent-qwen3-v1"
"""Cache subfolder of `tiny_agent_model_path`; bump it whenever the tokenizer, model or pretraining changes."""

AGENT_PRETRAIN_STEPS = 600
"""Steps (batches of 32 episodes) of the in-process SFT that `tiny_agent_model_path` gives the model (~20 s).

The copying (of the box into the call, of the looked-up secret into the answer) appears after ~100-150 steps; by
600 a looked-up secret is copied ~98% of the time (0.84-0.95 at 300 steps on seeds 0-5, 0.98 at 600 on seeds 0, 1,
2 and 5)."""

PRETRAIN_MIX = {"right": 0.3, "wrong": 0.35, "guess": 0.35}
"""The behaviours of the pretraining episodes (fractions): look up the prompt's box and copy the secret; look up
another box, read "no such box" and answer a random digit; answer a random digit without a lookup."""

# The eos token is `<|im_end|>` (as for Qwen3 chat models; `<|endoftext|>` stays a stop id in the generation config):
# TRL's tool loop splices the tool response after the calling turn from the tokenizer's eos token
# (`GRPOTrainer._get_tool_suffix_ids`), so the spliced rollout is exactly the chat template's rendering (minus
# Qwen3's empty think blocks).
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = ["<|endoftext|>", PAD_TOKEN, "<|im_start|>", EOS_TOKEN]

TOKENIZER_VOCAB = 1000
"""The BPE trainer's vocabulary budget; the corpus runs out of merges first (607 tokens in all)."""

MAX_TOKEN_CHARS = 32
"""The longest token the BPE may learn: the tool boilerplate still takes a few dozen tokens, not one."""

AGENT_TRAINING: dict[str, Any] = dict(
    learning_rate=5e-4,
    warmup_steps=10,
    max_grad_norm=0.2,
    per_device_train_batch_size=64,
    num_generations=8,
    max_completion_length=48,
    max_tool_calling_iterations=2,
    temperature=1.0,
    max_steps=100,
    logging_steps=2,
    activation_checkpointing=False,
)
"""`GRPOConfig` keyword arguments of the toy agent run: reward ~0.3 -> ~0.9 (see the module docstring).

`max_completion_length` bounds the whole multi-turn completion (the calls, the tool responses and the answer): a
lookup-then-answer completion takes 17 tokens, two lookups and an answer 32. `activation_checkpointing=False`:
TRL turns it on by default, which only slows a model this small down."""


def _trl_template(name: str) -> str:
    """A chat template shipped with TRL (`trl/chat_templates/<name>`), read without importing trl."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("trl_ext.toy_agent needs TRL's shipped chat templates: pip install trl")
    path = os.path.join(next(iter(spec.submodule_search_locations)), "chat_templates", name)
    with open(path, encoding="utf-8") as f:
        return f.read()


class LookupEnvironment:
    """The toy agent's environment, for `GRPOTrainer(environment_factory=LookupEnvironment)`.

    TRL gives each rollout of a batch its own instance (pooled and reused across batches), calls `reset(**row)` with
    the dataset row (columns `prompt`, `box`, `secret`) and exposes `lookup` to the model as its only tool (every
    public method but `reset` / `get_reward` becomes a tool; the attributes and properties below are not methods, so
    they are not tools). The reward is `lookup_reward`, which reads `found` and `secret`.

    Attributes read by trl_ext's multi-turn trainers (at the start of each model turn):

    * `state_key`: a hashable key of the environment's state, equal for equal states across rollouts:
      `("start", box)` after `reset`, and `("looked_up", asked, result)` after a lookup (the last one: the box asked
      for, upper-cased, and what `lookup` returned, the secret or `NO_SUCH_BOX`).
    * `turn_rewards`: a list of per-turn rewards, cleared by `reset`, to which tools may append. This toy leaves it
      empty: its reward is the sparse outcome reward `lookup_reward`.

    Also: `box` and `secret` (the row's), `lookups` (the `(asked, result)` pairs so far) and `found` (whether the
    row's box was looked up).
    """

    def __init__(self) -> None:
        self.box: str | None = None
        self.secret: str | None = None
        self.lookups: list[tuple[str, str]] = []
        self.turn_rewards: list[float] = []

    def reset(self, box: str | None = None, secret: str | None = None, **kwargs: Any) -> None:
        """Start a rollout on a dataset row (its `box` and `secret` columns; the other columns are ignored)."""
        if box is None or secret is None:
            raise ValueError("LookupEnvironment.reset needs the row's `box` and `secret` (see toy_agent_dataset)")
        self.box, self.secret = str(box), str(secret)
        self.lookups = []
        self.turn_rewards = []

    def lookup(self, box: str) -> str:
        """
        Open a box and read the secret inside.

        Args:
            box: The letter of the box.

        Returns:
            The secret, or "no such box".
        """
        asked = str(box).strip().upper()
        result = self.secret if self.box is not None and asked == self.box else NO_SUCH_BOX
        self.lookups.append((asked, result))
        return result

    @property
    def found(self) -> bool:
        """Whether `lookup` was called with the row's box since `reset`."""
        return self.box is not None and any(asked == self.box for asked, _ in self.lookups)

    @property
    def state_key(self) -> tuple[str | None, ...]:
        """`("start", box)` before any lookup, `("looked_up", asked, result)` after one (the last)."""
        if not self.lookups:
            return ("start", self.box)
        return ("looked_up", *self.lookups[-1])


def lookup_reward(completions: list[Any], environments: list[Any] | None = None, **kwargs: Any) -> list[float]:
    """The toy agent's reward: 1.0 if the rollout looked up the row's box and then answered its secret, else 0.0.

    "Answered" means: the last message of the completion is an assistant message without tool calls whose content,
    stripped, equals the secret. A rollout that answers without a lookup, looked up only other boxes, answers
    another digit, or ends on a tool call (out of tool rounds or completion length) scores 0.

    TRL's reward-function signature: `completions` are the conversational completions (assistant, tool,
    assistant ... messages), `environments` the rollouts' `LookupEnvironment`s, which TRL passes to reward
    functions when it runs an `environment_factory`. An environment's `get_reward()` could not do this: it sees
    the tool calls, never the final answer.
    """
    if environments is None:
        raise ValueError("lookup_reward needs the rollouts' `environments` (TRL passes them with environment_factory)")
    if len(environments) != len(completions):
        raise ValueError(f"got {len(completions)} completions but {len(environments)} environments")
    rewards = []
    for completion, environment in zip(completions, environments, strict=True):
        final = completion[-1] if isinstance(completion, list) and completion else {}
        content = final.get("content") if isinstance(final, dict) else None
        answered = final.get("role") == "assistant" and not final.get("tool_calls") and isinstance(content, str)
        correct = answered and environment.found and content.strip() == environment.secret
        rewards.append(float(correct))
    return rewards


def _prompt_messages(box: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": PROMPT_TEMPLATE.format(box=box)}]


def _tools() -> list[Any]:
    """The tools as TRL hands them to the chat template: the environment's bound public methods."""
    return [LookupEnvironment().lookup]


def _tool_call_text(box: str) -> str:
    """The assistant's lookup call as the Qwen3 template renders it (and TRL's response parser reads it)."""
    return "<tool_call>\n" + json.dumps({"name": "lookup", "arguments": {"box": box}}) + "\n</tool_call>"


def _tool_suffix_text(result: str) -> str:
    """What TRL splices in after a calling turn's `<|im_end|>`: the tool response and the next assistant header."""
    return f"\n<|im_start|>user\n<tool_response>\n{result}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


def _episode_messages(box: str, call: str | None, result: str | None, answer: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = _prompt_messages(box)
    if call is not None:
        tool_calls = [{"type": "function", "function": {"name": "lookup", "arguments": {"box": call}}}]
        messages.append({"role": "assistant", "content": "", "tool_calls": tool_calls})
        messages.append({"role": "tool", "name": "lookup", "content": result})
    messages.append({"role": "assistant", "content": answer})
    return messages


_SPECIAL = re.compile("|".join(re.escape(token) for token in SPECIAL_TOKENS))


def _tokenizer_corpus() -> list[str]:
    """The texts TRL tokenizes separately during a rollout: each prompt (system prompt with the tool schema, user
    turn, assistant header), tool call, tool-response suffix and answer; plus a whole episode per box as the Qwen3
    chat template and TRL's training variant of it render it. Split at the special tokens, which BPE must not
    learn merges for."""
    template, training_template = _trl_template("qwen3.jinja"), _trl_template("qwen3_training.jinja")
    renderer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), eos_token=EOS_TOKEN)
    renderer.chat_template = template
    tools = _tools()
    texts: list[str] = []
    for box in BOXES:
        messages = _prompt_messages(box)
        texts += [renderer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)] * 4
        for secret in SECRETS:
            texts += [_tool_call_text(box), _tool_suffix_text(secret), secret + EOS_TOKEN]
        texts += [_tool_suffix_text(NO_SUCH_BOX)] * 4
        episode = _episode_messages(box, box, "3", "3")
        for chat_template in (template, training_template):
            texts.append(renderer.apply_chat_template(episode, tools, tokenize=False, chat_template=chat_template))
    return [piece for text in texts for piece in _SPECIAL.split(text) if piece]


def build_agent_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (607 tokens) trained in-process on the toy agent's rendered episodes; deterministic.

    Box letters (a lone `A`-`H`) and digits are pre-tokenized as their own tokens, so the box and the secret are
    single tokens wherever they appear; the text between them is merged freely (tokens of up to `MAX_TOKEN_CHARS`
    characters, across spaces and punctuation), so the Qwen3 tool boilerplate and the tool schema take 32 tokens.
    eos `<|im_end|>`, pad `<|pad|>`, left padding, and TRL's shipped Qwen3 chat template (`qwen3.jinja`, which
    TRL recognizes: it renders the tool schema and parses the tool calls with its Qwen3 response template).
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\b[A-H]\b|\d"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        max_token_length=MAX_TOKEN_CHARS,
        show_progress=False,
    )
    tok.train_from_iterator(_tokenizer_corpus(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[token for token in SPECIAL_TOKENS if token not in (EOS_TOKEN, PAD_TOKEN)],
        padding_side="left",
        model_max_length=512,
    )
    tokenizer.chat_template = _trl_template("qwen3.jinja")
    return tokenizer


def _tool_suffix_ids(tokenizer: PreTrainedTokenizerFast, result: str) -> list[int]:
    """The ids TRL appends after a calling turn (the tool message and the next assistant header), computed as
    `GRPOTrainer._get_tool_suffix_ids` does: from a dummy conversation rendered with TRL's prefix-preserving training
    variant of the Qwen3 template (which TRL swaps in for tool use), cut after the eos that ends the calling turn."""
    template = _trl_template("qwen3_training.jinja")
    calls = [{"type": "function", "function": {"name": "lookup", "arguments": {}}}]
    dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": calls}]
    tool = [{"role": "tool", "name": "lookup", "content": result}]
    prefix = tokenizer.apply_chat_template(dummy, tokenize=True, return_dict=False, chat_template=template)
    full = tokenizer.apply_chat_template(
        dummy + tool, add_generation_prompt=True, tokenize=True, return_dict=False, chat_template=template
    )
    ends = [i for i, token in enumerate(prefix) if token == tokenizer.eos_token_id]
    prefix = prefix[: ends[-1] + 1] if ends else prefix
    if full[: len(prefix)] != prefix:
        raise ValueError("the chat template does not render the tool call the same way before and after its result")
    return full[len(prefix) :]


def _episode_ids(
    tokenizer: PreTrainedTokenizerFast, box: str, call: str | None, result: str | None, answer: str
) -> tuple[list[int], list[int]]:
    """(input ids, labels) of one episode, concatenated as TRL's tool loop builds a rollout: the prompt rendered with
    the tool schema, the calling turn's ids, the tool suffix, the answer's ids. Labels on the assistant tokens."""
    eos = tokenizer.eos_token_id
    prompt = tokenizer.apply_chat_template(
        _prompt_messages(box), tools=_tools(), add_generation_prompt=True, tokenize=True, return_dict=False
    )
    ids, labels = list(prompt), [-100] * len(prompt)
    if call is not None:
        turn = [*tokenizer.encode(_tool_call_text(call)), eos]
        suffix = _tool_suffix_ids(tokenizer, result or "")
        ids += turn + suffix
        labels += turn + [-100] * len(suffix)
    turn = [*tokenizer.encode(answer), eos]
    return ids + turn, labels + turn


def _pretrain(
    model: Qwen3ForCausalLM, tokenizer: PreTrainedTokenizerFast, steps: int, seed: int, batch_size: int = 32
) -> None:
    """Plain torch SFT on episodes of the `PRETRAIN_MIX` behaviours, with random boxes and secrets."""
    rng = random.Random(seed)
    pad = tokenizer.pad_token_id
    episodes: dict[tuple[Any, ...], tuple[list[int], list[int]]] = {}

    def episode(*key: Any) -> tuple[list[int], list[int]]:
        if key not in episodes:
            episodes[key] = _episode_ids(tokenizer, *key)
        return episodes[key]

    behaviours, weights = zip(*PRETRAIN_MIX.items(), strict=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0 - i / steps)
    model.train()
    for _ in range(steps):
        seqs, labels = [], []
        for _ in range(batch_size):
            box, secret = rng.choice(BOXES), rng.choice(SECRETS)
            behaviour = rng.choices(behaviours, weights)[0]
            if behaviour == "right":
                ids, lab = episode(box, box, secret, secret)
            elif behaviour == "wrong":
                ids, lab = episode(box, rng.choice([b for b in BOXES if b != box]), NO_SUCH_BOX, secret)
            else:
                ids, lab = episode(box, None, None, secret)
            seqs.append(ids)
            labels.append(lab)
        width = max(map(len, seqs))
        input_ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])
        attention_mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
        label_ids = torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels])
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=label_ids).loss
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()


def build_agent_model(
    tokenizer: PreTrainedTokenizerFast, seed: int = 0, pretrain_steps: int = AGENT_PRETRAIN_STEPS
) -> Qwen3ForCausalLM:
    """A tiny Qwen3 (hidden 64, 2 layers, 4 heads of 16 / 2 KV heads, tied embeddings) for `tokenizer`, pretrained
    with `pretrain_steps` steps of plain torch SFT on the toy agent's episodes (0: an untrained model).

    Deterministic for a seed (on a given machine): built on one torch thread, with the global torch RNG left
    untouched. `initializer_range=0.1` (5x the default) and the tied embeddings make the copying appear within
    ~150 pretraining steps on every seed tried; with the defaults it often had not after 400.
    The generation config stops on `<|im_end|>` and `<|endoftext|>`. `max_position_embeddings` is 512 (RoPE has no
    table; an episode takes ~60 tokens, TRL's tool loop stops a rollout that reaches the limit).
    """
    im_end = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    # A Qwen3, not a Qwen2 like `trl_ext.toy`'s: `AutoTokenizer` loads a tokenizer saved beside a `qwen2` config as
    # `Qwen2Tokenizer`, which replaces the saved pre-tokenizer with Qwen2's word-splitting regex, so TRL would not load
    # the tokenizer the model was trained with. A `qwen3` config keeps the saved `TokenizersBackend`.
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        initializer_range=0.1,
        bos_token_id=None,
        eos_token_id=im_end,
        pad_token_id=tokenizer.pad_token_id,
    )
    with deterministic_build(seed):
        model = Qwen3ForCausalLM(config)
        if pretrain_steps > 0:
            _pretrain(model, tokenizer, pretrain_steps, seed)
    model.generation_config = GenerationConfig(
        eos_token_id=[im_end, tokenizer.convert_tokens_to_ids("<|endoftext|>")],
        pad_token_id=tokenizer.pad_token_id,
        do_sample=True,
        max_new_tokens=32,
    )
    return model.eval()


def tiny_agent_model_path(cache_dir: str | None = None) -> str:
    """The path of the toy agent model + tokenizer, built (and pretrained, ~20 s) on first use and then reused.

    Saved with `save_pretrained` under `cache_dir` (default `$TRL_EXT_CACHE`, else `~/.cache/trl_ext`) in an
    `AGENT_MODEL_VERSION` subfolder. Written into a temporary folder and renamed into place, so concurrent processes
    (e.g. started together by torchrun) never see a half-written model.
    """
    return cached_model(cache_dir, AGENT_MODEL_VERSION, _agent_model)


def _agent_model() -> tuple[Qwen3ForCausalLM, PreTrainedTokenizerFast]:
    tokenizer = build_agent_tokenizer()
    return build_agent_model(tokenizer, seed=0, pretrain_steps=AGENT_PRETRAIN_STEPS), tokenizer


def toy_agent_dataset(num_prompts: int = 1024, seed: int = 0) -> Dataset:
    """`num_prompts` rows: a conversational `prompt` (`[{"role": "user", "content": "What is the secret in box C?"}]`),
    its `box` ("C") and a `secret` digit drawn at random per row ("7"), which `LookupEnvironment.reset` receives.

    Boxes are balanced (each of `BOXES` equally often, up to rounding) and shuffled with `seed`; the secrets are
    drawn with the same seed, independently of the box.
    """
    rng = random.Random(seed)
    boxes = [BOXES[i % len(BOXES)] for i in range(num_prompts)]
    rng.shuffle(boxes)
    secrets = [rng.choice(SECRETS) for _ in boxes]
    return Dataset.from_dict({"prompt": [_prompt_messages(box) for box in boxes], "box": boxes, "secret": secrets})


def toy_agent_splits(train_split: str = "train", test_split: str = "test") -> DatasetDict:
    """The task with a train and a held-out split, as TRL scripts index a loaded dataset: `toy_agent_dataset()` and
    `toy_agent_dataset(TEST_PROMPTS, seed=TEST_SEED)` (other secrets, the same eight boxes). The same name twice
    gives the train rows alone."""
    if test_split == train_split:
        return DatasetDict({train_split: toy_agent_dataset()})
    return DatasetDict({train_split: toy_agent_dataset(), test_split: toy_agent_dataset(TEST_PROMPTS, seed=TEST_SEED)})
