"""Exact attention over TRL's packed prefix-tree rows with torch SDPA, for machines without flash-attention 3.

TRL's `AsyncGRPOTrainer` folds a micro-batch's samples into a prefix trie (`trl.experimental.async_grpo.packing.
TreeRow`) and forwards the trie once, laid out in DFS pre-order as one packed row of `N` unique tokens. The row is cut
into segments (unary chains of the trie): segment `s` occupies the packed positions `[cu_q[s], cu_q[s+1])` (length
`L`), and its root-to-segment path, `P` packed positions whose last `L` are the segment's own, is
`tree_kv_index[cu_k[s]:cu_k[s+1]]`. Query `j` of the segment (0-based) attends to

    path[: P - L + j + 1]

i.e. to its ancestors and to itself, exactly the keys the sample it belongs to had before it. Equivalently, from the
depths (`position_ids`) alone: key `k` is visible to query `q` iff `k <= q < end[k]`, `end[k]` being the first
`j > k` with `depth[j] <= depth[k]` (the end of `k`'s subtree in the pre-order). A sliding window `w` further keeps
only keys with `depth[q] - depth[k] < w`, the window of the unpacked sequence (flash-attention's
`window_size=(w - 1, 0)`).

TRL computes this with flash-attention 3's varlen kernel (`packing.tree_attention`: the `kernels` package and CUDA),
so on a CPU, or a GPU without that kernel, nothing trains. `tree_sdpa_attention` is a drop-in replacement with the
same calling convention: it builds the dense boolean mask `allowed[q, k]` (`tree_attention_mask`) and runs
`torch.nn.functional.scaled_dot_product_attention` on it (an explicit matmul / tanh-softcap / softmax path when a
`softcap` is asked for, which SDPA cannot do). The result is exact: every packed position gets the attention output
of the unpacked per-sample forward, so log-probabilities and gradients equal those of the per-sample forward. The
cost is the dense mask: O(N^2) memory (one bool per query-key pair, plus the O(N^2) scores SDPA itself forms on CPU)
instead of the kernel's O(N), which is fine for CPU-sized rows and is why the flash kernel is used wherever it loads.

`use_tree_attention(device)` registers the implementation the device supports under TRL's name
(`packing.TREE_ATTENTION`), overriding TRL's own registration (which `AsyncGRPOTrainer.__init__` makes).
"""

from __future__ import annotations

import importlib.util
import logging

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface
from trl.experimental.async_grpo import packing

__all__ = ["tree_attention_mask", "tree_sdpa_attention", "use_tree_attention"]

logger = logging.getLogger(__name__)


def _segment_layout(
    tree_kv_index: torch.Tensor,
    tree_cu_seqlens_q: torch.Tensor,
    tree_cu_seqlens_k: torch.Tensor,
    num_positions: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Check the tree tensors and return (cu_q, cu_k, segment of each packed position, depth of each position)."""
    for name, tensor in (
        ("tree_kv_index", tree_kv_index),
        ("tree_cu_seqlens_q", tree_cu_seqlens_q),
        ("tree_cu_seqlens_k", tree_cu_seqlens_k),
    ):
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 1 or tensor.is_floating_point():
            raise TypeError(f"tree_attention_mask: `{name}` must be a 1-D integer tensor, got {tensor!r}")
    if tree_cu_seqlens_q.numel() != tree_cu_seqlens_k.numel() or tree_cu_seqlens_q.numel() < 2:
        raise ValueError(
            "tree_attention_mask: `tree_cu_seqlens_q` and `tree_cu_seqlens_k` must have the same length S + 1 >= 2, "
            f"got {tree_cu_seqlens_q.numel()} and {tree_cu_seqlens_k.numel()}"
        )
    device = tree_kv_index.device
    cu_q = tree_cu_seqlens_q.to(device=device, dtype=torch.long)
    cu_k = tree_cu_seqlens_k.to(device=device, dtype=torch.long)
    seg_len, path_len = cu_q.diff(), cu_k.diff()
    first_q, last_q, first_k, last_k = torch.stack([cu_q[0], cu_q[-1], cu_k[0], cu_k[-1]]).tolist()
    if first_q != 0 or last_q != num_positions:
        raise ValueError(
            f"tree_attention_mask: `tree_cu_seqlens_q` must run from 0 to num_positions={num_positions}, "
            f"got {first_q} to {last_q}"
        )
    if first_k != 0 or last_k != tree_kv_index.numel():
        raise ValueError(
            f"tree_attention_mask: `tree_cu_seqlens_k` must run from 0 to len(tree_kv_index)={tree_kv_index.numel()}, "
            f"got {first_k} to {last_k}"
        )
    if bool(((seg_len < 1) | (path_len < seg_len)).any()):
        raise ValueError(
            "tree_attention_mask: every segment needs 1 <= length (tree_cu_seqlens_q) <= path length "
            "(tree_cu_seqlens_k), since a segment's path ends with its own positions"
        )
    segment = torch.repeat_interleave(torch.arange(seg_len.numel(), device=device), seg_len)
    # Query j of segment s is entry P - L + j of its path: its depth in the trie (its position_id).
    depth = (path_len - seg_len)[segment] + torch.arange(num_positions, device=device) - cu_q[segment]
    return cu_q, cu_k, segment, depth


def tree_attention_mask(
    tree_kv_index: torch.Tensor,
    tree_cu_seqlens_q: torch.Tensor,
    tree_cu_seqlens_k: torch.Tensor,
    num_positions: int,
    *,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """The `[N, N]` boolean mask `allowed[q, k]` of a packed tree row (`N = num_positions`, on `tree_kv_index`'s
    device).

    Query `j` of segment `s` may attend to `path[: P - L + j + 1]`, `path = tree_kv_index[cu_k[s]:cu_k[s+1]]` (see the
    module docstring): the keys on its segment's path, less the positions of its own segment after it. With
    `sliding_window=w`, a key is kept only if `depth(q) - depth(k) < w`, depth being the index along the path.
    Fully vectorized: one scatter of the paths into a `[S, N]` membership table, one gather into `[N, N]`.
    """
    if sliding_window is not None and (isinstance(sliding_window, bool) or not isinstance(sliding_window, int)):
        raise TypeError(f"tree_attention_mask: `sliding_window` must be a positive int or None, got {sliding_window!r}")
    if sliding_window is not None and sliding_window < 1:
        raise ValueError(f"tree_attention_mask: `sliding_window` must be a positive int or None, got {sliding_window}")
    cu_q, cu_k, segment, depth = _segment_layout(tree_kv_index, tree_cu_seqlens_q, tree_cu_seqlens_k, num_positions)
    device = tree_kv_index.device
    num_segments = cu_q.numel() - 1
    kv_index = tree_kv_index.to(torch.long)
    if kv_index.numel() and bool(((kv_index < 0) | (kv_index >= num_positions)).any()):
        raise ValueError(f"tree_attention_mask: `tree_kv_index` entries must lie in [0, {num_positions})")
    # on_path[s, k]: packed position k lies on the root-to-segment path of segment s.
    on_path = torch.zeros(num_segments, num_positions, dtype=torch.bool, device=device)
    entry_segment = torch.repeat_interleave(torch.arange(num_segments, device=device), cu_k.diff())
    on_path[entry_segment, kv_index] = True
    allowed = on_path[segment]
    # The path holds the whole own segment; a query sees its own segment only up to itself (causal).
    positions = torch.arange(num_positions, device=device)
    allowed &= ~((segment[:, None] == segment[None, :]) & (positions[None, :] > positions[:, None]))
    if sliding_window is not None:
        # A key on q's path has the same depth along q's path as along its own segment's path (a prefix of it).
        allowed &= (depth[:, None] - depth[None, :]) < sliding_window
    return allowed


def tree_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *,
    tree_kv_index: torch.Tensor,
    tree_cu_seqlens_q: torch.Tensor,
    tree_cu_seqlens_k: torch.Tensor,
    tree_max_seqlen_q: int,
    tree_max_seqlen_k: int,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention over a packed tree row with the calling convention of TRL's `packing.tree_attention`.

    `query` is `[1, heads, N, head_dim]`, `key`/`value` `[1, kv_heads, N, head_dim]` (grouped-query attention when
    `kv_heads < heads`); returns `(out [1, N, heads, head_dim], None)`. `attention_mask` is ignored (TRL registers a
    mask function that returns None); `tree_max_seqlen_q/k` are only needed by the varlen kernel. `scaling` defaults
    to `head_dim ** -0.5`; `softcap` caps the scores as `softcap * tanh(scores / softcap)`. The attention dropout is
    the `dropout` the model passes, else the module's `attention_dropout` in training mode, as in transformers'
    `sdpa_attention_forward` (TRL's flash-attention 3 path has no dropout).
    """
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError(
            "tree_sdpa_attention: query/key/value must be [1, heads, N, head_dim], got shapes "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    if query.shape[0] != 1:
        raise ValueError(f"tree_sdpa_attention: a packed tree row has batch size 1, got {query.shape[0]}")
    num_heads, num_positions, head_dim = query.shape[1:]
    num_kv_heads = key.shape[1]
    if key.shape[2] != num_positions or value.shape[2] != num_positions or num_heads % num_kv_heads:
        raise ValueError(
            "tree_sdpa_attention: key/value must have N positions and a number of heads dividing the query's, got "
            f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    key, value = key.to(query.dtype), value.to(query.dtype)
    allowed = tree_attention_mask(
        tree_kv_index.to(query.device),
        tree_cu_seqlens_q,
        tree_cu_seqlens_k,
        num_positions,
        sliding_window=sliding_window or None,
    )
    # Models pass `dropout=0.0 if not self.training else self.attention_dropout`; the same when they do not.
    dropout = kwargs.get("dropout")
    if dropout is None:
        dropout = 0.0 if not module.training else getattr(module, "attention_dropout", 0.0)
    scale = head_dim**-0.5 if scaling is None else scaling

    if softcap:
        # SDPA has no score capping: the explicit path (transformers' eager_attention_forward with a tanh cap).
        if num_kv_heads != num_heads:
            key = key.repeat_interleave(num_heads // num_kv_heads, dim=1)
            value = value.repeat_interleave(num_heads // num_kv_heads, dim=1)
        scores = torch.matmul(query, key.transpose(2, 3)) * scale
        scores = softcap * torch.tanh(scores / softcap)
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        if dropout:
            weights = F.dropout(weights, p=dropout)
        out = torch.matmul(weights, value)
    else:
        out = F.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=allowed,
            dropout_p=dropout,
            scale=scale,
            enable_gqa=num_kv_heads != num_heads,
        )
    return out.transpose(1, 2).contiguous(), None


def _flash_kernel_loads(device: torch.device) -> bool:
    """Whether TRL's flash-attention 3 tree kernel can run on `device` (CUDA, `kernels` installed, kernel loads)."""
    if device.type != "cuda" or not torch.cuda.is_available() or importlib.util.find_spec("kernels") is None:
        return False
    try:
        packing._flash_attn()
    except Exception as error:  # the hub may be unreachable or the GPU unsupported: fall back to SDPA
        logger.warning("use_tree_attention: flash-attention 3 kernel did not load (%s); using SDPA", error)
        return False
    return True


def use_tree_attention(device: torch.device | str) -> str:
    """Register the tree attention `device` can run under TRL's name `packing.TREE_ATTENTION`; return which.

    TRL's flash-attention 3 `packing.tree_attention` where the device is CUDA and the `kernels` package's kernel
    loads ("flash"), else `tree_sdpa_attention` ("sdpa"). Both `transformers.AttentionInterface` and
    `AttentionMaskInterface` are registered (the mask function returns None: the tree kwargs carry the structure),
    so calling this after TRL's `register_tree_attention()` replaces TRL's registration.
    """
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"use_tree_attention: `device` must be a torch.device or str, got {type(device).__name__}")
    flash = _flash_kernel_loads(torch.device(device))
    AttentionInterface.register(packing.TREE_ATTENTION, packing.tree_attention if flash else tree_sdpa_attention)
    AttentionMaskInterface.register(packing.TREE_ATTENTION, lambda **kwargs: None)
    return "flash" if flash else "sdpa"
