"""An offline toy: a tiny causal LM and tokenizer built in-process, and a task whose reward RL visibly raises on CPU.

Nothing here touches the Hugging Face Hub, so examples and tests run offline, on CPU, in seconds.

The task, "repeat the letter": every prompt names one of eight letters (`LETTERS`),

    prompt:      "Repeat the letter c:"          (dataset column `target`: "c")
    completion:  " c c c c"                      reward 1.0
                 " e e e" / " c c d" / ""        reward 0.0

The reward (`toy_reward`) is verifiable (computed from the completion text against the row's `target`) and
conditional on the prompt: 1.0 if every non-space character of the completion is the prompt's letter (and
there is at least one), else 0.0.

The default model (`tiny_model_path`) is a 2-layer, 64-wide Qwen2 (~113k parameters) that was briefly
pretrained in-process (~5 s of plain torch SFT) on the task's *format* with a random letter: it answers
" x x x" and stops, but which letter it repeats does not depend on the prompt, so it starts at a reward of
about 1/8. RL has to learn the prompt -> letter mapping. Measured with stock `trl.GRPOTrainer`
(`loss_type="sapo"`) on 2 CPU cores, the logged reward (mean of the first 5 vs the last 5 logs) goes from
~0.11 to ~0.99 with `DEFAULT_TRAINING` (200 steps, ~20 s of training), and from ~0.11 to 0.84-0.97 (seeds
0-9) with `FAST_TRAINING` (100 steps, ~7 s):

    from trl import GRPOConfig, GRPOTrainer
    from trl_ext.toy import DEFAULT_TRAINING, build_tokenizer, tiny_model_path, toy_dataset, toy_reward

    args = GRPOConfig(output_dir="out", loss_type="sapo", use_cpu=True, bf16=False, activation_checkpointing=False,
                      report_to="none", save_strategy="no", **DEFAULT_TRAINING)
    trainer = GRPOTrainer(model=tiny_model_path(), reward_funcs=toy_reward, args=args,
                          train_dataset=toy_dataset(), processing_class=build_tokenizer())
    trainer.train()  # the "reward" entries of trainer.state.log_history rise from ~0.1 to ~1

`write_toy_datasets(directory)` (the `trl-ext toy-data DIR` command) writes the task's prompts, expert
demonstrations and preference pairs as JSON-lines dataset folders, so TRL's own scripts train the toy model
(`tiny_model_path()`) on them: `trl grpo --dataset_name DIR/prompts --reward_funcs trl_ext.toy.toy_reward ...`,
`trl sft --dataset_name DIR/sft`, `trl dpo --dataset_name DIR/preference`.

A model this small runs as fast on one CPU thread as on several; `torch.set_num_threads(1)` also avoids the
large slowdowns of oversubscribed cores when other processes are busy on the same machine.

This module does not import trl.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import torch
from datasets import Dataset, DatasetDict
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

__all__ = [
    "DEFAULT_TRAINING",
    "DPO_TRAINING",
    "FAST_TRAINING",
    "LETTERS",
    "MODEL_VERSION",
    "PRETRAIN_STEPS",
    "SFT_TRAINING",
    "TEACHER_PRETRAIN_STEPS",
    "TEACHER_VERSION",
    "TEST_PROMPTS",
    "TEST_SEED",
    "build_model",
    "build_tokenizer",
    "cached_model",
    "deterministic_build",
    "is_tiny_model",
    "tiny_model_path",
    "tiny_teacher_path",
    "toy_dataset",
    "toy_expert_dataset",
    "toy_preference_dataset",
    "toy_reward",
    "toy_splits",
    "write_toy_datasets",
]

LETTERS = "abcdefgh"
"""The letters a prompt can ask for; an untrained-for-the-task model hits one by chance 1 time in 8."""

PROMPT_TEMPLATE = "Repeat the letter {letter}:"

MODEL_VERSION = "tiny-qwen2-v2"
"""Cache subfolder of `tiny_model_path`; bump it whenever the tokenizer, model or pretraining changes."""

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = [EOS_TOKEN, PAD_TOKEN, "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

PRETRAIN_STEPS = 200
"""Steps of the in-process SFT on the task format that `tiny_model_path` gives the default model (~5 s)."""

TEACHER_VERSION = "tiny-qwen2-teacher-v1"
"""Cache subfolder of `tiny_teacher_path`."""

TEACHER_PRETRAIN_STEPS = 400
"""Steps of the in-process SFT on the task itself that give the toy teacher its ~1.0 reward (~15 s)."""

PRETRAIN_REPEATS = (2, 12)
"""The pretraining answers repeat their letter 2 to 12 times: longer than `max_completion_length`, so RL
that drifts to longer answers stays in the format the model knows instead of degenerating into noise."""

DEFAULT_TRAINING: dict[str, Any] = dict(
    learning_rate=1e-3,
    lr_scheduler_type="linear",
    warmup_steps=20,
    max_grad_norm=0.2,
    per_device_train_batch_size=128,
    per_device_eval_batch_size=128,
    num_generations=16,
    max_completion_length=8,
    temperature=1.0,
    max_steps=200,
    logging_steps=5,
)
"""`GRPOConfig` keyword arguments of the main toy run: reward ~0.11 -> ~0.99 (see the module docstring).

`per_device_eval_batch_size` only matters with evaluation on (`eval_strategy`): TRL requires the global eval batch
to be a multiple of `num_generations` (TRL's default, 8, is not a multiple of 16).

Warmup and the tight gradient clip matter: without them Adam's first, full-size steps knock the tiny model
off its format (completions degenerate into random bytes and the reward collapses to ~0) on some seeds. The schedule
is named because TRL's asynchronous config defaults to `constant`, which ignores the warmup."""

DPO_TRAINING: dict[str, Any] = dict(
    learning_rate=1e-3,
    warmup_steps=5,
    max_grad_norm=1.0,
    per_device_train_batch_size=16,
    max_steps=60,
    logging_steps=10,
    eval_strategy="steps",
    eval_steps=20,
)
"""`DPOConfig` keyword arguments of the DPO toy run on `toy_preference_dataset`: the held-out preference accuracy
goes from ~0.5 to ~1 in 60 steps."""

SFT_TRAINING: dict[str, Any] = dict(
    learning_rate=1e-3,
    warmup_steps=5,
    max_grad_norm=1.0,
    per_device_train_batch_size=16,
    max_steps=60,
    logging_steps=5,
    eval_strategy="steps",
    eval_steps=20,
)
"""`SFTConfig` keyword arguments of the SFT toy run on `toy_expert_dataset`: the training loss goes from ~0.9 to ~0.4
and the held-out loss from ~0.8 to ~0.4 in 60 steps (~3 s of training on 2 CPU cores)."""

FAST_TRAINING: dict[str, Any] = dict(DEFAULT_TRAINING, per_device_train_batch_size=64, max_steps=100, logging_steps=2)
"""`GRPOConfig` keyword arguments of a short run for tests: the reward still rises clearly (~0.11 -> 0.84-0.97)."""

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A small model learns to repeat the letter it is asked for.",
    "Reinforcement learning rewards the answers that are right and discourages the rest.",
    "Every prompt names a letter, and the answer repeats that letter a few times.",
    "The reward is one when the whole answer is the letter of the prompt, and zero otherwise.",
    "Hello world! This is a tiny corpus for a tiny tokenizer, built offline in a second.",
    "user: what is the letter? assistant: the letter is here, and it is repeated.",
]


def _tokenizer_corpus() -> list[str]:
    """The built-in corpus: a few sentences and every prompt / answer pattern of the task."""
    texts = list(_CORPUS)
    for letter in LETTERS:
        prompt, answer = PROMPT_TEMPLATE.format(letter=letter), " ".join([letter] * 4)
        texts += [prompt, " " + answer, f"user\n{prompt}\nassistant\n{answer}\n"] * 2
    return texts


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (vocab ~300) trained in-process on a built-in corpus; deterministic.

    eos `<|endoftext|>`, pad `<|pad|>`, left padding, and a minimal ChatML chat template.
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_tokenizer_corpus(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=SPECIAL_TOKENS[2:],
        padding_side="left",
        model_max_length=256,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _pretrain(
    model: Qwen2ForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    steps: int,
    seed: int,
    batch_size: int = 32,
    solve: bool = False,
) -> None:
    """Plain torch SFT on the task's format with a random letter (independent of the prompt's), or, with
    `solve=True`, on the task itself: the first letter of the answer is the prompt's, and an answer started
    with another letter (in half of the examples, as context only) goes on with that letter. So the toy teacher
    differs from the student only where the task is decided, at the first answer token, and the distillation
    signal sits there.

    Half the examples are plain text (`"Repeat the letter c:"` -> `" e e e<|endoftext|>"`), half ChatML
    (the chat template's user turn and generation prompt -> `"e e e<|im_end|>"`), so both dataset formats work.
    """
    rng = random.Random(seed)
    pad = tokenizer.pad_token_id
    stops = {"plain": tokenizer.eos_token_id, "chat": tokenizer.convert_tokens_to_ids("<|im_end|>")}
    lengths = range(PRETRAIN_REPEATS[0], PRETRAIN_REPEATS[1] + 1)
    prompt_ids, answer_ids = {}, {}
    for c in LETTERS:
        prompt = PROMPT_TEMPLATE.format(letter=c)
        prompt_ids["plain", c] = tokenizer(prompt)["input_ids"]
        prompt_ids["chat", c] = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
        for n in lengths:
            answer = " ".join([c] * n)
            answer_ids["plain", c, n] = [*tokenizer(" " + answer)["input_ids"], stops["plain"]]
            answer_ids["chat", c, n] = [*tokenizer(answer)["input_ids"], stops["chat"]]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0 - i / steps)
    model.train()
    for _ in range(steps):
        seqs, labels = [], []
        for _ in range(batch_size):
            fmt = rng.choice(("plain", "chat"))
            letter = rng.choice(LETTERS)
            p = prompt_ids[fmt, letter]
            if not solve:
                a = answer_ids[fmt, rng.choice(LETTERS), rng.choice(lengths)]
                targets = a
            elif rng.random() < 0.5:
                a = targets = answer_ids[fmt, letter, rng.choice(lengths)]
            else:  # an answer started with another letter (as context only) goes on with that letter
                a = answer_ids[fmt, rng.choice(LETTERS), rng.choice(lengths)]
                targets = [-100, *a[1:]]
            seqs.append(p + a)
            labels.append([-100] * len(p) + targets)
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


def build_model(
    tokenizer: PreTrainedTokenizerFast, seed: int = 0, pretrain_steps: int = 0, solve: bool = False
) -> Qwen2ForCausalLM:
    """A tiny Qwen2 (hidden 64, 2 layers, 4 heads / 2 KV heads, untied embeddings) for `tokenizer`.

    Deterministic for a seed (on a given machine). `pretrain_steps > 0` first runs that many steps of plain
    torch SFT on the toy task's format (`tiny_model_path` uses `PRETRAIN_STEPS`), or on the task itself with
    `solve=True` (`tiny_teacher_path`). The global torch RNG is left untouched.
    """
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with deterministic_build(seed):
        model = Qwen2ForCausalLM(config)
        if pretrain_steps > 0:
            _pretrain(model, tokenizer, pretrain_steps, seed, solve=solve)
    model.generation_config = GenerationConfig(
        eos_token_id=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")],  # ChatML turns end too
        pad_token_id=tokenizer.pad_token_id,
        do_sample=True,
        max_new_tokens=8,
    )
    return model.eval()


@contextlib.contextmanager
def deterministic_build(seed: int):
    """Build (and pretrain) a toy model deterministically for `seed`: on one torch thread (as fast for a model this
    small, immune to oversubscription when other processes share the cores, and the float reductions, hence the
    weights, do not depend on the core count), seeded, with the global torch RNG and thread count restored after."""
    num_threads = torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        try:
            torch.set_num_threads(1)
            torch.manual_seed(seed)
            yield
        finally:
            torch.set_num_threads(num_threads)


def _default_cache_dir() -> str:
    return os.environ.get("TRL_EXT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "trl_ext")


def tiny_model_path(cache_dir: str | None = None) -> str:
    """The path of the default toy model + tokenizer, built (and pretrained) on first use and then reused.

    Saved with `save_pretrained` under `cache_dir` (default `$TRL_EXT_CACHE`, else `~/.cache/trl_ext`) in a
    `MODEL_VERSION` subfolder. Written into a temporary folder and renamed into place, so concurrent processes
    (e.g. started together by torchrun) never see a half-written model.
    """
    return cached_model(cache_dir, MODEL_VERSION, lambda: _toy_model(seed=0, pretrain_steps=PRETRAIN_STEPS))


def tiny_teacher_path(cache_dir: str | None = None) -> str:
    """The path of the toy task's teacher for on-policy distillation: the default model's architecture and
    tokenizer, SFT-trained on the task itself (`TEACHER_PRETRAIN_STEPS` steps, ~15 s on first use), so it
    answers with the prompt's letter (toy reward ~1.0, the student starts at ~1/8). Cached like
    `tiny_model_path`, in a `TEACHER_VERSION` subfolder."""
    build = lambda: _toy_model(seed=1, pretrain_steps=TEACHER_PRETRAIN_STEPS, solve=True)  # noqa: E731
    return cached_model(cache_dir, TEACHER_VERSION, build)


def is_tiny_model(path: str | None, cache_dir: str | None = None, version: str = MODEL_VERSION) -> bool:
    """Whether `path` names the default toy model, i.e. is `tiny_model_path(cache_dir)` (compared as real paths,
    without building the model); `version`: another cached toy (the agent's, `trl_ext.toy_agent`)."""
    if not path:
        return False
    default = os.path.join(cache_dir or _default_cache_dir(), version)
    return os.path.realpath(os.path.expanduser(path)) == os.path.realpath(default)


def cached_model(cache_dir: str | None, version: str, build: Callable[[], tuple[Any, Any]]) -> str:
    """The path of a toy model + tokenizer cached under `cache_dir` (default `$TRL_EXT_CACHE`, else
    `~/.cache/trl_ext`) in a `version` subfolder, `build()` (returning the model and its tokenizer) on first use.
    Written into a temporary folder and renamed into place, so concurrent processes (e.g. started together by
    torchrun) never see a half-written model."""
    root = cache_dir or _default_cache_dir()
    path = os.path.join(root, version)
    if os.path.isfile(os.path.join(path, "config.json")):
        return path
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{version}-", dir=root)
    try:
        model, tokenizer = build()
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache may be shared
        try:
            os.rename(tmp, path)
        except OSError:
            if not os.path.isfile(os.path.join(path, "config.json")):  # not another process winning the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _toy_model(**build: Any) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    tokenizer = build_tokenizer()
    return build_model(tokenizer, **build), tokenizer


def toy_dataset(num_prompts: int = 1024, seed: int = 0, conversational: bool = False) -> Dataset:
    """`num_prompts` rows: `prompt` ("Repeat the letter c:", standard format) and `target` ("c").

    Letters are balanced (each of `LETTERS` equally often, up to rounding) and shuffled with `seed`.
    `conversational=True` makes each prompt a one-message `[{"role": "user", "content": ...}]` list instead
    (the default model knows the ChatML format too).
    """
    rng = random.Random(seed)
    letters = [LETTERS[i % len(LETTERS)] for i in range(num_prompts)]
    rng.shuffle(letters)
    prompts: list[Any] = [PROMPT_TEMPLATE.format(letter=c) for c in letters]
    if conversational:
        prompts = [[{"role": "user", "content": p}] for p in prompts]
    return Dataset.from_dict({"prompt": prompts, "target": letters})


TEST_PROMPTS = 64
"""Rows of the toy task's held-out split (`toy_splits`): 64 prompts x `num_generations` 16 = 8 eval batches of 128."""

TEST_SEED = 99
"""Seed of the held-out rows (`toy_splits`, and the DPO script's held-out pairs)."""


def toy_splits(train_split: str = "train", test_split: str = "test", conversational: bool = False) -> DatasetDict:
    """The toy task as a dataset with a train and a held-out split, as TRL scripts index a loaded dataset
    (`dataset[--dataset_train_split]`, `dataset[--dataset_test_split]`): `toy_dataset()` and
    `toy_dataset(TEST_PROMPTS, seed=TEST_SEED)`. The task has only `len(LETTERS)` distinct prompts, so "held out"
    means other rows in another order, not unseen prompts. The same name twice gives the train rows alone."""
    if test_split == train_split:
        return DatasetDict({train_split: toy_dataset(conversational=conversational)})
    return DatasetDict(
        {
            train_split: toy_dataset(conversational=conversational),
            test_split: toy_dataset(TEST_PROMPTS, seed=TEST_SEED, conversational=conversational),
        }
    )


def toy_expert_dataset(num_demos: int = 256, seed: int = 0, conversational: bool = False) -> Dataset:
    """`num_demos` expert demonstrations of the task for MIX / MIX-CHORD: `prompt` as in `toy_dataset` and a
    correct `completion` (" c c c", the letter repeated 2 to 6 times, so it fits `max_completion_length=8`
    with the EOS), plus `target`. Letters are balanced and shuffled with `seed`.

    `conversational=True` gives conversational prompt-completion rows (`[{"role": "user", ...}]` /
    `[{"role": "assistant", "content": "c c c"}]`), to pair with `toy_dataset(conversational=True)`.
    """
    rng = random.Random(seed)
    letters = [LETTERS[i % len(LETTERS)] for i in range(num_demos)]
    rng.shuffle(letters)
    prompts: list[Any] = [PROMPT_TEMPLATE.format(letter=c) for c in letters]
    answers = [" ".join([c] * rng.randint(2, 6)) for c in letters]
    if conversational:
        prompts = [[{"role": "user", "content": p}] for p in prompts]
        completions: list[Any] = [[{"role": "assistant", "content": a}] for a in answers]
    else:
        completions = [" " + a for a in answers]
    return Dataset.from_dict({"prompt": prompts, "completion": completions, "target": letters})


def toy_preference_dataset(num_pairs: int = 512, seed: int = 0, conversational: bool = False) -> Dataset:
    """`num_pairs` preference pairs of the task for DPO: `prompt` as in `toy_dataset`, a `chosen` completion (the
    prompt's letter repeated 2 to 6 times) and a `rejected` one (another letter, repeated as often), plus `target`.
    Letters are balanced and shuffled with `seed`; use another seed for held-out pairs.

    `conversational=True` gives conversational rows (`[{"role": "assistant", "content": "c c c"}]` completions),
    to pair with the chat template."""
    rng = random.Random(seed)
    letters = [LETTERS[i % len(LETTERS)] for i in range(num_pairs)]
    rng.shuffle(letters)
    prompts: list[Any] = [PROMPT_TEMPLATE.format(letter=c) for c in letters]
    chosen, rejected = [], []
    for c in letters:
        n, wrong = rng.randint(2, 6), rng.choice([x for x in LETTERS if x != c])
        chosen.append(" ".join([c] * n))
        rejected.append(" ".join([wrong] * n))
    if conversational:
        prompts = [[{"role": "user", "content": p}] for p in prompts]
        chosen_col: list[Any] = [[{"role": "assistant", "content": a}] for a in chosen]
        rejected_col: list[Any] = [[{"role": "assistant", "content": a}] for a in rejected]
    else:
        chosen_col, rejected_col = [" " + a for a in chosen], [" " + a for a in rejected]
    return Dataset.from_dict({"prompt": prompts, "chosen": chosen_col, "rejected": rejected_col, "target": letters})


def write_toy_datasets(directory: str, conversational: bool = False) -> dict[str, tuple[str, dict[str, int]]]:
    """Write the toy task's datasets under `directory`, one dataset folder each, as JSON lines that
    `datasets.load_dataset(folder)` and TRL's own scripts (`trl grpo / sft / dpo --dataset_name folder`) read:

    * `prompts/`: the GRPO prompts, `toy_splits()` (`train.jsonl`: `toy_dataset()`, 1024 rows; `test.jsonl`: 64
      held-out rows), columns `prompt`, `target` (train with the reward `trl_ext.toy.toy_reward`, which reads
      `target`);
    * `sft/`: the expert demonstrations, `toy_expert_dataset()` (256 rows) and 64 held-out ones (seed `TEST_SEED`),
      columns `prompt`, `completion`, `target`;
    * `preference/`: the preference pairs, `toy_preference_dataset()` (512 rows) and the DPO script's 64 held-out
      ones, columns `prompt`, `chosen`, `rejected`, `target`.

    `conversational=True` writes the conversational forms (lists of `{"role", "content"}` messages). The toy model
    these fit is `tiny_model_path()`. Existing files are overwritten. Returns `{folder name: (path, {split: rows})}`."""
    held_out = {"seed": TEST_SEED, "conversational": conversational}
    datasets = {
        "prompts": toy_splits(conversational=conversational),
        "sft": {
            "train": toy_expert_dataset(conversational=conversational),
            "test": toy_expert_dataset(TEST_PROMPTS, **held_out),
        },
        "preference": {
            "train": toy_preference_dataset(conversational=conversational),
            "test": toy_preference_dataset(TEST_PROMPTS, **held_out),
        },
    }
    written = {}
    for name, splits in datasets.items():
        folder = os.path.join(directory, name)
        os.makedirs(folder, exist_ok=True)
        for split, dataset in splits.items():
            with open(os.path.join(folder, f"{split}.jsonl"), "w") as f:
                f.writelines(json.dumps(row) + "\n" for row in dataset)
        written[name] = (folder, {split: len(dataset) for split, dataset in splits.items()})
    return written


_PROMPT_LETTER = re.compile(r"letter (\S):")


def _text(completion: Any) -> str:
    """A completion's text, whether a string or a conversational list of messages."""
    if isinstance(completion, str):
        return completion
    parts = []
    for message in completion:
        content = message.get("content", "") if isinstance(message, dict) else message
        if isinstance(content, str):
            parts.append(content)
        else:  # content blocks
            parts += [block.get("text", "") for block in content if isinstance(block, dict)]
    return "".join(parts)


def _prompt_letter(prompt: Any) -> str | None:
    match = _PROMPT_LETTER.search(_text(prompt))
    return match.group(1) if match else None


def repeat_letter_reward(
    completions: list[Any],
    target: list[str] | None = None,
    prompts: list[Any] | None = None,
    **kwargs: Any,
) -> list[float]:
    """The toy task's verifiable reward: 1.0 if the completion is the prompt's letter repeated, else 0.0.

    "Repeated" means: at least one non-space character, and every non-space character is the target letter
    (`" c c c"`, `"c"`, `"cc c"` score 1; `" c c d"`, `" "`, `""` score 0). All-or-nothing on purpose: with
    partial credit (the fraction of right characters) a run of random letters scores as much as a wrong
    letter repeated, and RL on the tiny model sometimes drifted into such runs and stalled.

    TRL's reward-function signature: `target` is the dataset column (when absent, the letter is read from
    `prompts`). Completions may be strings or conversational `[{"role": "assistant", "content": ...}]`
    lists.
    """
    if target is None:
        if prompts is None:
            raise ValueError("toy_reward needs the `target` column (or the `prompts`) to know the letter")
        target = [_prompt_letter(p) for p in prompts]
    if len(target) != len(completions):
        raise ValueError(f"got {len(completions)} completions but {len(target)} targets")
    rewards = []
    for completion, letter in zip(completions, target, strict=True):
        chars = [ch for ch in _text(completion) if not ch.isspace()]
        rewards.append(float(bool(chars and letter) and all(ch == letter for ch in chars)))
    return rewards


toy_reward = repeat_letter_reward
"""The toy task's reward function (its `__name__`, the name TRL logs it under, is `repeat_letter_reward`)."""
