"""MIX and MIX-CHORD, asynchronously: expert demonstrations joined to each micro-batch of the worker's rollouts.

The synchronous MIX trainer (`trainers/mix/trainer.py`; Trinity-RFT's MIX, CHORD: Zhang et al. 2025, arXiv
2508.11408) fills a share `expert_data_ratio` of each generation batch with demonstrations, and the mixing loss
trains PPO on the rollout rows and (φ-weighted) SFT on the expert rows, each part normalized over its own rows of
the optimizer window, blended by μ (scheduled by the global step in MIX-CHORD).

Asynchronously the rollouts come from the worker's queue, TRL's `per_device_train_batch_size` of them per process
and micro-batch (TRL's meaning of the field: its fixed-count batcher pulls that many). The trainer joins
`ceil(ratio / (1 − ratio) · per_device_train_batch_size)` demonstrations to each process's row of every micro-batch,
so that they are `ratio` of the rows as in the synchronous trainer (16 rollouts and 16 demonstrations at the default
0.5). `ExpertRows` draws them from the synchronous trainer's `ExpertStream` (a seeded permutation per pass, cycled),
tokenizes them as the worker tokenizes prompts (`prompt_token_ids`) with the completion as the policy would emit it,
and adds them to the rows in the collator (`VersionedCollator`), where TRL packs them into the prefix tree with the
rollouts. Each expert sample is flagged (`sample_expert`, the loss's `expert_mask`), has advantage 0 and no sampler
log-probs (the expert part of the loss does not read them), is left out of the window's corrections, selections
and estimators, and of the staleness metrics.

`AsyncMIXFamilyConfig` is the base of the MIX records' asynchronous forms (`AsyncMIXConfig`, `AsyncMIXCHORDConfig`):
the mixing loss's composition of the synchronous configs (`MIXComposition`: a `policy_loss_fn` that is not a mixing
loss is the rollout rows' loss), `expert_data_ratio` and the `mix` entropy bonus (over the rollouts only). The
reference's per-micro-batch weighting (the mixing loss's batch-geometry arguments) is refused: it counts rows of a
fixed batch, which a queue of rollouts does not have; the window normalization of each part is used.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ...async_rollout.rollout_loop import prompt_token_ids
from ...losses import POLICY_LOSSES
from ..core.arguments import _help, entropy_field
from ..mix.config import MIXComposition
from ..mix.expert_data import ExpertStream, load_expert_examples, logger
from .config import AsyncGRPOConfig
from .samples import EXPERT_GROUP, EXPERT_KEY, VERSION_KEY


@dataclass
class AsyncMIXFamilyConfig(MIXComposition, AsyncGRPOConfig):
    """The base of the MIX algorithms' asynchronous configs (see the module docstring)."""

    has_experts: ClassVar[bool] = True
    entropy_choices: ClassVar[tuple[str, ...]] = ("mix", "default", "none")

    expert_data_ratio: float = field(
        default=0.5,
        metadata=_help(
            "Share of each micro-batch's rows that are expert demonstrations (from the trainer's `expert_dataset`): "
            "ceil(ratio / (1 − ratio) × per_device_train_batch_size) of them join each process's "
            "per_device_train_batch_size rollouts. In [0, 1): 0 trains on rollouts only; 1 (no rollouts) has "
            "nothing to generate asynchronously."
        ),
    )
    entropy_loss_fn: str = entropy_field("mix", expert_rows=True)

    def __post_init__(self) -> None:
        ratio = self.expert_data_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio < 1:
            raise ValueError(
                f"{type(self).__name__}: expert_data_ratio={ratio!r} is not valid; must be a number in [0, 1) (the "
                "share of each micro-batch's rows that are expert demonstrations; 1, only expert rows, generates "
                "nothing: train it synchronously)"
            )
        super().__post_init__()
        loss = POLICY_LOSSES[self.policy_loss_name]
        geometry = [spec.field_name for spec in loss.arguments if spec.config_unset]
        given = [name for name in geometry if getattr(self, name) is not None]
        if given:
            raise ValueError(
                f"{type(self).__name__}: {given[0]}={getattr(self, given[0])!r} asks for the reference's "
                "per-micro-batch weighting, which counts the rows of a fixed batch; an asynchronous run takes "
                "rollouts from a queue, so each part is normalized over its rows of the optimizer window: leave "
                f"{', '.join(geometry)} unset"
            )

    @property
    def expert_rows_per_device(self) -> int:
        """Demonstrations joined to each process's row of a micro-batch (module docstring)."""
        ratio = self.expert_data_ratio
        return math.ceil(ratio / (1 - ratio) * self.per_device_train_batch_size - 1e-9)


class ExpertRows:
    """The demonstrations joined to the micro-batches (module docstring).

    Args:
        owner: The trainer's name, for errors.
        dataset: The demonstrations (`trl_ext.trainers.mix.expert_data` formats).
        tokenizer: The policy's tokenizer.
        max_completion_length: Longer demonstrations are truncated (noted once).
        seed: The stream's seed.
        per_row: Demonstrations added to each process's row.
        version: The trainer's current policy version (an expert sample's `behave_version`: never stale).
        chat_template_kwargs: As the worker's, for conversational prompts.
    """

    def __init__(
        self,
        owner: str,
        dataset: Any,
        tokenizer: Any,
        max_completion_length: int,
        seed: int,
        per_row: int,
        version: Callable[[], int],
        chat_template_kwargs: dict[str, Any] | None = None,
    ):
        examples, conversational = load_expert_examples(owner, dataset)
        text = getattr(tokenizer, "tokenizer", tokenizer)
        eos = {text.eos_token_id} - {None}
        if not eos:
            raise ValueError(f"{owner}: the tokenizer has no eos token, which ends each demonstration's completion")
        self.rows: list[tuple[list[int], list[int]]] = []
        truncated = 0
        for index, (prompt, completion) in enumerate(examples):
            prompt_ids = prompt_token_ids(tokenizer, prompt, chat_template_kwargs)
            if conversational:
                full = tokenizer.apply_chat_template(
                    prompt + completion, tokenize=True, return_dict=True, **(chat_template_kwargs or {})
                )["input_ids"]
                if list(full[: len(prompt_ids)]) != prompt_ids:
                    raise ValueError(
                        f"{owner}: expert_dataset row {index}: the chat template renders the prompt differently once "
                        "the completion is appended, so the completion tokens cannot be separated from the prompt"
                    )
                completion_ids = list(full[len(prompt_ids) :])
                stops = [i for i, token in enumerate(completion_ids) if token in eos]
                if stops:  # what generation stops at: the template's text after the end of turn is dropped
                    completion_ids = completion_ids[: stops[-1] + 1]
            else:
                completion_ids = list(text(completion, add_special_tokens=False)["input_ids"])
                if not completion_ids or completion_ids[-1] not in eos:
                    completion_ids.append(text.eos_token_id)
            if len(completion_ids) > max_completion_length:
                completion_ids, truncated = completion_ids[:max_completion_length], truncated + 1
            self.rows.append((prompt_ids, completion_ids))
        if truncated:
            logger.warning(
                "%s: %d of %d expert completions are longer than max_completion_length=%d tokens and were truncated",
                owner, truncated, len(self.rows), max_completion_length,
            )  # fmt: skip
        self.stream = ExpertStream(len(self.rows), seed=seed)
        self.per_row, self.version = per_row, version

    def add_to(self, rows: list[Any]) -> None:
        """Add `per_row` demonstrations to each of TRL's planned rows (`TreeRow`s) of one micro-batch."""
        version = self.version()
        for row in rows:
            for index in self.stream.take(self.per_row):
                prompt_ids, completion_ids = self.rows[index]
                row.add({
                    "input_ids": np.asarray(prompt_ids + completion_ids, dtype=np.int64),
                    "completion_mask": np.asarray([0] * len(prompt_ids) + [1] * len(completion_ids), dtype=np.int64),
                    "old_log_probs": np.zeros(len(prompt_ids) + len(completion_ids), dtype=np.float32),
                    "advantage": 0.0,
                    "group_id": EXPERT_GROUP,
                    "metrics": {EXPERT_KEY: 1.0, VERSION_KEY: version},
                })  # fmt: skip


__all__ = ["AsyncMIXFamilyConfig", "ExpertRows"]
