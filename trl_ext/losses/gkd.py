"""GKD's loss: the generalized JSD between the student's and the teacher's next-token distributions over the whole
vocabulary, at every completion position, reduced as TRL's `GKDTrainer.generalized_jsd_loss` reduces it.

Agarwal et al. 2024, "On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes" (GKD, arXiv
2306.13649), Eq. (1). With p_s = softmax(z_s / τ) and p_t = softmax(z_t / τ) the student's and the teacher's
distributions at one position (logits z, temperature τ) and β = `beta`:

    β = 0:        D = KL(p_t ‖ p_s)                                    (forward KL, supervised KD)
    β = 1:        D = KL(p_s ‖ p_t)                                    (reverse KL)
    otherwise:    m = (1 − β)·p_s + β·p_t,   D = β·KL(p_t ‖ m) + (1 − β)·KL(p_s ‖ m)

each the sum over the vocabulary v of one term d_v (`trl_ext.losses.distillation.generalized_jsd_terms`, the same
divergence that the on-policy distillation trainer computes). The positions are those whose label is not -100
(`labels`; without labels, every position). The reduction of the selected terms d (N positions × V tokens):

    num_items_in_batch n given:   Σ d / n              (whatever `reduction` says: TRL's gradient-accumulation fix,
                                                        n = the optimizer window's completion tokens)
    reduction="batchmean":        Σ d / max(N, 1)      with labels: the mean over completion tokens of D;
                                  Σ d / max(B, 1)      without: over the first dimension of the logits (the rows)
    reduction="sum":              Σ d
    reduction="mean":             Σ d / (N·V)          (every vocabulary term counts: D's mean divided by V)
    reduction="none":             d, shape [N, V] with labels, else the logits' shape

GKD trains on a mix of completions: with probability λ (`lmbda`) a batch's completions are sampled from the student
(on-policy), else they are the dataset's (or, with `seq_kd`, the teacher's samples); the loss above is the same for
all. The mix is the trainer's (`trl_ext.trainers.gkd`); this module is the loss, pure torch.

One deliberate difference from TRL: the log-softmax and the divergence are computed in float32 (float64 stays
float64), where TRL computes them in the logits' dtype (bfloat16 under bf16 training, where the vocabulary's
log-sum-exp and the mixture lose most of their digits, and β itself is rounded to bfloat16).
"""

from __future__ import annotations

import torch

from .._validation import check_choice, check_number
from .distillation import generalized_jsd_terms

IGNORE_INDEX = -100
"""The label of a position that takes no loss (the prompt, padding): TRL's and transformers' convention."""

REDUCTIONS = ("batchmean", "sum", "mean", "none")
"""The reductions of `gkd_loss` (TRL's `generalized_jsd_loss`'s), see the module docstring."""


def gkd_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor | None = None,
    beta: float = 0.5,
    temperature: float = 1.0,
    reduction: str = "batchmean",
    num_items_in_batch: torch.Tensor | int | float | None = None,
) -> torch.Tensor:
    """The GKD loss of the student's logits against the teacher's (see the module docstring for the formula).

    The arguments and defaults are those of TRL's `GKDTrainer.generalized_jsd_loss`.

    Args:
        student_logits: The student's next-token logits `[..., V]` (typically `[B, T, V]`, already shifted so that
            position t predicts the label at t); differentiable.
        teacher_logits: The teacher's logits, the same shape (gradients flow into them too if they require any).
        labels: `[...]`, the logits' shape without the vocabulary; positions labelled -100 are left out. None: every
            position counts.
        beta: β in [0, 1]: 0 forward KL, 1 reverse KL, in between the generalized JSD.
        temperature: τ > 0, dividing both models' logits.
        reduction: `batchmean`, `sum`, `mean` or `none` (`REDUCTIONS`).
        num_items_in_batch: When given, the loss is the sum of the terms divided by it (the optimizer window's token
            count that HF's loop passes), whatever `reduction` says.

    Returns:
        A scalar (float32, or float64 for float64 logits), or the terms themselves for `reduction="none"`.

    Raises:
        ValueError: `beta` outside [0, 1], `temperature` not > 0, an unknown `reduction`, logits of two shapes, or
            `labels` not of the logits' shape without the vocabulary.
    """
    check_number("gkd_loss", "beta", beta, ge=0, le=1)
    check_number("gkd_loss", "temperature", temperature, gt=0)
    check_choice("gkd_loss", "reduction", reduction, REDUCTIONS)
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"gkd_loss: student_logits {tuple(student_logits.shape)} and teacher_logits {tuple(teacher_logits.shape)} "
            "must have one shape: GKD compares the two models' distributions over one vocabulary at the same positions"
        )
    if student_logits.dim() < 1:
        raise ValueError("gkd_loss: the logits need a vocabulary dimension (their last)")
    if labels is not None and labels.shape != student_logits.shape[:-1]:
        raise ValueError(
            f"gkd_loss: labels {tuple(labels.shape)} must have the logits' shape without the vocabulary, "
            f"{tuple(student_logits.shape[:-1])}"
        )
    dtype = torch.promote_types(student_logits.dtype, torch.float32)
    if labels is not None:  # the positions that take a loss, before the [.., V] work
        selected = labels != IGNORE_INDEX
        student_logits, teacher_logits = student_logits[selected], teacher_logits[selected]
    student = torch.log_softmax(student_logits.to(dtype) / temperature, dim=-1)
    teacher = torch.log_softmax(teacher_logits.to(dtype) / temperature, dim=-1)
    terms = generalized_jsd_terms(student, teacher, float(beta))

    if num_items_in_batch is not None:
        total = terms.sum()
        if isinstance(num_items_in_batch, torch.Tensor):
            num_items_in_batch = num_items_in_batch.to(total.device)
        return total / num_items_in_batch
    if reduction == "batchmean":
        # With labels, the rows are the selected positions; 0 of them gives 0 (not 0/0), with a gradient path.
        return terms.sum() / max(terms.size(0), 1)
    if reduction == "sum":
        return terms.sum()
    if reduction == "mean":
        return terms.mean()
    return terms
