"""TRL's packed tree rows, unpacked into the `[B, T]` batches the trl_ext losses take.

TRL's asynchronous trainer (`trl.experimental.async_grpo`) forwards one row per process: the micro-batch's samples
folded into a prefix tree (`packing.TreeRow`), padded to the longest row of the micro-batch so that the dispatcher can
scatter row i to process i. Its loss terms are flat: `token_index` (the packed position predicting each trained
token), `old_log_probs` (the sampler's log-prob of it: μ), `advantages` and `segment_id` (which sample it belongs to),
laid out sample by sample, each sample's tokens in order, padded with `token_index = -1`.

`PackedRow.from_inputs` strips the inter-process padding (what TRL's `compute_loss` does before its forward) and
`PackedRow.grid` lays the flat terms out as `[B, T]`: row b is sample b of the row, column t its t-th trained token,
`mask` the valid positions. Nothing here reads the model: pure torch, no host sync beyond the shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

TREE_KEYS = ("tree_kv_index", "tree_cu_seqlens_q", "tree_cu_seqlens_k")


@dataclass(frozen=True)
class TermGrid:
    """Where each flat loss term sits in the `[B, T]` layout: sample `row[i]`, column `col[i]`."""

    row: torch.Tensor  # [M] long
    col: torch.Tensor  # [M] long
    num_samples: int
    width: int

    @property
    def mask(self) -> torch.Tensor:
        """`[B, T]` bool: True at every trained token."""
        return self.scatter(torch.ones_like(self.row, dtype=torch.bool), fill=False)

    def scatter(self, values: torch.Tensor, fill: float | bool = 0.0) -> torch.Tensor:
        """The flat `[M]` values as `[B, T]` (differentiable), `fill` at the positions without a term."""
        out = values.new_full((self.num_samples, self.width), fill)
        return out.index_put((self.row, self.col), values)

    def gather(self, grid: torch.Tensor) -> torch.Tensor:
        """The inverse of `scatter`: the `[M]` values of a `[B, T]` tensor at the terms' positions."""
        return grid[self.row, self.col]


@dataclass(frozen=True)
class PackedRow:
    """One process's row of a packed micro-batch, its padding stripped."""

    forward_kwargs: dict[str, Any]  # input_ids, position_ids, shift_labels ([1, N]) and the tree kwargs
    token_index: torch.Tensor  # [M]
    old_log_probs: torch.Tensor  # [M], μ
    advantages: torch.Tensor  # [M]
    segment_id: torch.Tensor  # [M]
    behave_version: torch.Tensor | None  # [B]: the policy version that generated each sample, if the batch has it

    @classmethod
    def from_inputs(cls, inputs: dict[str, Any]) -> PackedRow:
        """The row of `inputs` (TRL's collated batch as this process receives it: leading dimension 1)."""
        valid = inputs["attention_mask"].bool()
        selected = inputs["token_index"] >= 0
        kwargs = {key: inputs[key][valid].unsqueeze(0) for key in ("input_ids", "position_ids", "shift_labels")}
        kwargs.update({key: inputs[key][inputs[key] >= 0] for key in TREE_KEYS})
        kwargs["tree_max_seqlen_q"], kwargs["tree_max_seqlen_k"] = inputs["tree_max_seqlens"][0].tolist()
        versions = inputs.get("behave_version")
        if versions is not None:
            versions = versions[versions >= 0]
        return cls(
            forward_kwargs=kwargs,
            token_index=inputs["token_index"][selected],
            old_log_probs=inputs["old_log_probs"][selected],
            advantages=inputs["advantages"][selected],
            segment_id=inputs["segment_id"][selected],
            behave_version=versions,
        )

    @property
    def num_forward_tokens(self) -> int:
        return self.forward_kwargs["input_ids"].size(1)

    def grid(self) -> TermGrid:
        """The `[B, T]` layout of the row's terms. TRL lays them out sample by sample (`TreeRow.pack`), so a term's
        column is its offset from its sample's first term."""
        segment = self.segment_id
        if segment.numel() == 0:
            return TermGrid(segment, segment, 0, 0)
        num_samples = int(segment.max()) + 1
        if self.behave_version is not None:
            num_samples = max(num_samples, self.behave_version.numel())
        counts = torch.bincount(segment, minlength=num_samples)
        starts = torch.cumsum(counts, 0) - counts
        col = torch.arange(segment.numel(), device=segment.device) - starts[segment]
        return TermGrid(segment, col, num_samples, int(counts.max()))
