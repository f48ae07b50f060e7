"""Expert demonstrations for MIX / MIX-CHORD: the accepted dataset formats, their validation, and the endless
stream that supplies each generation batch's expert rows.

Accepted formats (TRL's dataset formats, https://huggingface.co/docs/trl/dataset_formats):

* prompt-completion, standard:        {"prompt": "Repeat the letter c:", "completion": " c c c"}
* prompt-completion, conversational:  {"prompt": [{"role": "user", "content": ...}],
                                       "completion": [{"role": "assistant", "content": ...}]}
* conversational language modeling:   {"messages": [..., {"role": "assistant", "content": ...}]}
  (the last message must be the assistant's: it is the completion, the messages before it the prompt)

Extra columns are ignored. This module does not tokenize (the trainer does, with its own chat template) and
does not import trl.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

logger = logging.getLogger(__name__)

FORMATS = "'prompt' + 'completion' columns (standard or conversational), or a conversational 'messages' column"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return "".join(block.get("text", "") for block in content if isinstance(block, dict))
    return ""


def is_messages(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in value)


def _columns(dataset: Any) -> list[str] | None:
    columns = getattr(dataset, "column_names", None)
    if columns is None and isinstance(dataset, Sequence) and dataset and isinstance(dataset[0], dict):
        columns = list(dataset[0])
    return columns


def load_expert_examples(owner: str, dataset: Any) -> tuple[list[tuple[Any, Any]], bool]:
    """The (prompt, completion) pairs of an expert dataset and whether they are conversational.

    Raises a ValueError naming the problem (no usable column, a streaming dataset, mixed formats, empty
    completions with their row indices) before anything is tokenized or trained.
    """
    if dataset is None or not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        kind = "None" if dataset is None else type(dataset).__name__
        hint = ", e.g. Dataset.from_list(list(stream.take(n)))" if kind == "IterableDataset" else ""
        raise ValueError(
            f"{owner}: expert_dataset must be a map-style dataset (a datasets.Dataset or a list of dicts) with "
            f"{FORMATS}; got {kind}{hint}"
        )
    columns = _columns(dataset)
    if columns is None or not ({"prompt", "completion"} <= set(columns) or "messages" in columns):
        found = ", ".join(map(repr, columns or [])) or "none"
        raise ValueError(f"{owner}: expert_dataset has no usable columns (found: {found}); it needs {FORMATS}")
    if len(dataset) == 0:
        raise ValueError(f"{owner}: expert_dataset is empty")
    use_messages = not {"prompt", "completion"} <= set(columns)
    rows = dataset.to_list() if hasattr(dataset, "to_list") else list(dataset)

    examples: list[tuple[Any, Any]] = []
    empty: list[int] = []
    conversational = None
    for index, row in enumerate(rows):
        if use_messages:
            messages = row["messages"]
            if not is_messages(messages) or not messages or messages[-1]["role"] != "assistant":
                raise ValueError(
                    f"{owner}: expert_dataset row {index}: 'messages' must be a list of {{'role', 'content'}} dicts "
                    f"ending with the assistant's message (the demonstration); got {messages!r:.200}"
                )
            prompt, completion = messages[:-1], messages[-1:]
        else:
            prompt, completion = row["prompt"], row["completion"]
        row_conversational = is_messages(prompt)
        if row_conversational != is_messages(completion) or not (
            row_conversational or (isinstance(prompt, str) and isinstance(completion, str))
        ):
            raise ValueError(
                f"{owner}: expert_dataset row {index}: prompt and completion must both be strings or both be lists "
                f"of {{'role', 'content'}} messages; got {type(prompt).__name__} and {type(completion).__name__}"
            )
        if conversational is None:
            conversational = row_conversational
        elif conversational != row_conversational:
            raise ValueError(
                f"{owner}: expert_dataset mixes conversational and standard rows (row 0 is "
                f"{'conversational' if conversational else 'standard'}, row {index} is not)"
            )
        text = "".join(_content_text(m["content"]) for m in completion) if row_conversational else completion
        if not text:
            empty.append(index)
        examples.append((prompt, completion))
    if empty:
        shown = ", ".join(map(str, empty[:10])) + (", ..." if len(empty) > 10 else "")
        raise ValueError(
            f"{owner}: expert_dataset has {len(empty)} empty completion(s) (rows {shown}); a demonstration must have "
            "a non-empty completion: remove or fix those rows"
        )
    return examples, bool(conversational)


class ExpertStream:
    """An endless order over `size` demonstrations: a seeded permutation per pass, each pass a new one.

    `position` (rows drawn so far) is the whole state: a resumed run restores it and draws the same rows.
    """

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.seed = seed
        self.position = 0
        self._order: tuple[int, torch.Tensor] | None = None

    def _permutation(self, epoch: int) -> torch.Tensor:
        if self._order is None or self._order[0] != epoch:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._order = (epoch, torch.randperm(self.size, generator=generator))
        return self._order[1]

    def take(self, count: int) -> list[int]:
        """The indices of the next `count` demonstrations."""
        indices = []
        for position in range(self.position, self.position + count):
            epoch, offset = divmod(position, self.size)
            indices.append(int(self._permutation(epoch)[offset]))
        self.position += count
        return indices

    @property
    def passes(self) -> int:
        """Completed passes over the demonstrations."""
        return self.position // self.size
