"""Dense distillation: the generalized JSD between the student's and the teacher's next-token distributions.

Agarwal et al. 2024, "On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes" (GKD,
arXiv 2306.13649), as TRL's `DistillationTrainer` computes it. With p_s / p_t the student's / teacher's
distribution at a completion position, both from logits divided by the sampling temperature, and β = `jsd_beta`
(TRL's `beta`):

    β = 0:        KL(p_t ‖ p_s)                                        (forward KL)
    β = 1:        KL(p_s ‖ p_t)                                        (reverse KL)
    otherwise:    m = (1 − β)·p_s + β·p_t,   β·KL(p_t ‖ m) + (1 − β)·KL(p_s ‖ m)

over one of two supports:

* the whole vocabulary (`teacher_top_k=-1`): exactly TRL's divergence;
* the teacher's top-k (`teacher_top_k=k`): the teacher's k most likely tokens at the position, each its own
  category, and one tail category holding every other token (each model's remaining mass, 1 − Σ_top-k p). This
  is the divergence between the two distributions coarse-grained onto k + 1 categories: never above the full
  one (data processing), equal to it when k is the vocabulary size (the tail is then empty), and a student that
  moves mass off the teacher's top-k pays for it in the tail category. (Renormalizing both over the top-k instead
  would let the student shift mass outside the set unseen: the instability verl's on-policy distillation PR
  reports for top-k reverse KL.) The teacher's top-k ids, log-probs and tail log-mass are `[N, k]`, `[N, k]`, `[N]`
  per scored position, kept from the sampling step (`teacher_top_k_logprobs`).

Memory: the positions are processed `chunk_size` at a time and each chunk's `[chunk, V]` logits are recomputed in
the backward pass (activation checkpointing), so no `[N, V]` tensor exists, only one chunk's. Pure torch.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.utils.checkpoint import checkpoint

CHUNK_ELEMENTS = 1 << 25
"""Logits per chunk (positions × vocabulary) when no `chunk_size` is given: 128 MiB of float32."""


@dataclass
class OutputLayer:
    """A causal LM's output projection: logits = scale·(h·Wᵀ + b), soft-capped as `softcap·tanh(logits/softcap)` when
    `softcap` is set (Gemma), then divided by the temperature. `gathered` is entered around every use of the weight
    (e.g. a DeepSpeed ZeRO-3 gather of a partitioned weight, whose full row count is then `rows`; the backward pass
    enters it again)."""

    weight: torch.Tensor  # [V, H]
    bias: torch.Tensor | None = None
    scale: float = 1.0
    softcap: float | None = None
    gathered: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    rows: int | None = None  # the weight's rows when its local shape is not the full one (a partitioned weight)

    @property
    def vocab_size(self) -> int:
        return int(self.weight.shape[0]) if self.rows is None else self.rows

    def logits(self, hidden: torch.Tensor, temperature: float) -> torch.Tensor:
        """Float32 logits `[N, V]` of the hidden states `[N, H]`, divided by `temperature`."""
        device = hidden.device.type
        # The matmul runs in the autocast dtype when autocast is on (as the model's own head would), else in the
        # weight's; the logits always come out in float32, never rounded to half precision.
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else self.weight.dtype
        with torch.autocast(device, enabled=False):
            weight, hidden = self.weight.to(dtype), hidden.to(dtype)
            if dtype not in (torch.float16, torch.bfloat16):
                z = (hidden @ weight.t()).float()
            elif hidden.is_cuda:
                z = torch.mm(hidden, weight.t(), out_dtype=torch.float32)
            else:  # no half-precision matmul with a float32 output off CUDA
                z = hidden.float() @ weight.float().t()
        if self.bias is not None:
            z = z + self.bias.float()
        if self.scale != 1.0:
            z = z * self.scale
        if self.softcap is not None:
            z = self.softcap * torch.tanh(z / self.softcap)
        return z / temperature if temperature != 1.0 else z


class TeacherTopK(NamedTuple):
    """The teacher's top-k at each scored position: token ids `[N, k]`, their log-probs `[N, k]`, the log of the
    remaining mass `[N]` (−inf when k is the vocabulary size), and the log-prob of the sampled token `[N]`."""

    ids: torch.Tensor
    logprobs: torch.Tensor
    tail_logprob: torch.Tensor
    label_logprob: torch.Tensor


def default_chunk_size(vocab_size: int) -> int:
    return max(1, CHUNK_ELEMENTS // max(vocab_size, 1))


def tail_logprob(log_probs: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log Σ_{v ∉ ids} p_v per row of the log-probs `[N, V]`, excluding the ids `[N, k]`."""
    return torch.logsumexp(log_probs.scatter(1, ids, -math.inf), dim=-1)


@torch.no_grad()
def teacher_top_k(
    hidden: torch.Tensor,
    layer: OutputLayer,
    k: int,
    labels: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> TeacherTopK:
    """The teacher's top-k distribution at each position of its hidden states `[N, H]` (at `temperature`), and the
    log-prob of each position's sampled token `labels` `[N]`, chunk by chunk (no `[N, V]` tensor)."""
    if not 1 <= k <= layer.vocab_size:
        raise ValueError(f"teacher_top_k: k={k} must be in [1, {layer.vocab_size}] (the teacher's vocabulary)")
    step = chunk_size or default_chunk_size(layer.vocab_size)
    parts = []
    with layer.gathered():
        for start in range(0, hidden.shape[0], step):
            log_probs = torch.log_softmax(layer.logits(hidden[start : start + step], temperature), dim=-1)
            values, ids = log_probs.topk(k, dim=-1)
            label = log_probs.gather(1, labels[start : start + step, None]).squeeze(1)
            parts.append((ids, values, tail_logprob(log_probs, ids), label))
    if not parts:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return TeacherTopK(labels.new_zeros(0, k), empty.new_zeros(0, k), empty, empty)
    return TeacherTopK(*(torch.cat(column) for column in zip(*parts, strict=True)))


def generalized_jsd(student: torch.Tensor, teacher: torch.Tensor, beta: float) -> torch.Tensor:
    """The generalized JSD of each row of the log-probs `student` / `teacher` `[N, C]` over its C categories (see
    the module docstring), `[N]`: the sum of `generalized_jsd_terms` over the categories."""
    return generalized_jsd_terms(student, teacher, beta).sum(-1)


def generalized_jsd_terms(student: torch.Tensor, teacher: torch.Tensor, beta: float) -> torch.Tensor:
    """Each category's term of the generalized JSD between the log-probs `student` / `teacher` `[..., C]` (the same
    shape out), whose sum over the last dimension is `generalized_jsd`. A category with probability 0 (log-prob
    −inf) contributes p·log(p/q) = 0 for its own model's term; where the other model's probability is 0, the
    (forward / reverse) KL term is +inf as it should."""
    s_valid, t_valid = student > -math.inf, teacher > -math.inf
    s, t = torch.where(s_valid, student, 0.0), torch.where(t_valid, teacher, 0.0)  # finite: no NaN gradients
    if beta == 0.0:
        terms = torch.where(t_valid, t.exp() * (t - torch.where(s_valid, s, -math.inf)), 0.0)
    elif beta == 1.0:
        terms = torch.where(s_valid, s.exp() * (s - torch.where(t_valid, t, -math.inf)), 0.0)
    else:
        mixture = torch.logaddexp(
            torch.where(s_valid, s + math.log(1 - beta), -math.inf), torch.where(t_valid, t + math.log(beta), -math.inf)
        )
        mixture = torch.where(s_valid | t_valid, mixture, 0.0)
        terms = beta * torch.where(t_valid, t.exp() * (t - mixture), 0.0) + (1 - beta) * torch.where(
            s_valid, s.exp() * (s - mixture), 0.0
        )
    return terms


class DenseDistillation(NamedTuple):
    """Per position `[N]`: the divergence (differentiable in the student), the student's log-prob of the sampled
    token (differentiable) and the student's entropy (detached)."""

    divergence: torch.Tensor
    label_logprob: torch.Tensor
    entropy: torch.Tensor


def dense_divergence(
    student_hidden: torch.Tensor,
    student_layer: OutputLayer,
    labels: torch.Tensor,
    beta: float,
    *,
    teacher_top: TeacherTopK | None = None,
    teacher_hidden: torch.Tensor | None = None,
    teacher_layer: OutputLayer | None = None,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> DenseDistillation:
    """The generalized JSD (`beta`) between the student (hidden states `[N, H]` through `student_layer`) and the
    teacher, over the teacher's top-k (`teacher_top`) or the whole vocabulary (`teacher_hidden` through
    `teacher_layer`, no gradient), at `temperature`, `chunk_size` positions at a time (default: about 2**25 logits
    per chunk), each chunk's logits recomputed in the backward pass."""
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"jsd_beta={beta} must be in [0, 1] (0 forward KL, 1 reverse KL, between: JSD)")
    if (teacher_top is None) == (teacher_hidden is None):
        raise ValueError("dense_divergence: give either teacher_top (top-k) or teacher_hidden (whole vocabulary)")
    if teacher_hidden is not None and teacher_layer is None:
        raise ValueError("dense_divergence: teacher_hidden needs the teacher's teacher_layer")
    if teacher_layer is not None and teacher_layer.vocab_size != student_layer.vocab_size:
        raise ValueError(
            f"dense_divergence: the whole-vocabulary divergence needs one vocabulary, but the student's output layer "
            f"has {student_layer.vocab_size} rows and the teacher's {teacher_layer.vocab_size}"
        )
    n = student_hidden.shape[0]
    step = chunk_size or default_chunk_size(student_layer.vocab_size)

    def chunk(hidden: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        end = start + hidden.shape[0]
        with student_layer.gathered():
            log_ps = torch.log_softmax(student_layer.logits(hidden, temperature), dim=-1)
        label = log_ps.gather(1, labels[start:end, None]).squeeze(1)
        entropy = -(log_ps.detach().exp() * log_ps.detach()).sum(-1)
        if teacher_top is not None:
            ids = teacher_top.ids[start:end]
            student = torch.cat([log_ps.gather(1, ids), tail_logprob(log_ps, ids)[:, None]], dim=1)
            teacher = torch.cat([teacher_top.logprobs[start:end], teacher_top.tail_logprob[start:end, None]], dim=1)
        else:
            with torch.no_grad(), teacher_layer.gathered():
                teacher = torch.log_softmax(teacher_layer.logits(teacher_hidden[start:end], temperature), dim=-1)
            student = log_ps
        return generalized_jsd(student, teacher.float(), beta), label, entropy

    outputs = []
    for start in range(0, n, step):
        hidden = student_hidden[start : start + step]
        if torch.is_grad_enabled():
            outputs.append(checkpoint(chunk, hidden, start, use_reentrant=False))
        else:
            outputs.append(chunk(hidden, start))
    if not outputs:
        # Stays connected to the student's backbone and output layer: an empty batch backpropagates zeros to both
        # (a process without scored positions must still give DDP a gradient for every parameter).
        empty = (student_hidden.sum() + student_layer.weight.sum()) * 0.0
        return DenseDistillation(empty.expand(0), empty.expand(0), empty.detach().expand(0))
    divergence, label, entropy = (torch.cat(column) for column in zip(*outputs, strict=True))
    return DenseDistillation(divergence, label, entropy.detach())
