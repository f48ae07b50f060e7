"""IW-OPD: importance-weighted on-policy distillation, and the generalized JSD of the same trainer.

Xie et al. 2026, "On the Position Bias of On-Policy Distillation" (arXiv 2606.22600), as TRL 1.16's
`trl.experimental.iw_opd.IWOPDTrainer` computes it. The student samples a completion y; at each completion position
t of a row let ℓ_t = log π_θ(y_t | y_<t) be the student's log-prob of the sampled token (logits divided by
`temperature`), τ_t the teacher's, and ρ_t the sampler's (vLLM's rollout log-probs; without them the student's own
ℓ_t, detached). IW-OPD (`distillation_objective="iw_opd"`) is a policy gradient on the sampled tokens whose per-token
advantage is the teacher's log-ratio, weighted down once the rollout has drifted from the teacher:

    a_t = sg(τ_t − ρ_t)                                 the on-policy distillation advantage
    D_<t = Σ_{s<t} |a_s|,   D = max(Σ_s |a_s|, ε)        the discrepancy accumulated before t, and over the row
    w_t = sg(1 + γ·(1 − D_<t / D))                      in [1, 1 + γ]: 1 + γ at the first token, then falling
    L   = −Σ_t w_t·a_t·ℓ_t / N

(γ = `iw_opd_gamma`, ε = `iw_opd_epsilon`, N the trained completion tokens: the optimizer window's in trl_ext's
trainer, the micro-batch's own without one; the sums run over the row's completion tokens). A teacher log-prob that
is missing (not finite) at a trained token is an error: IW-OPD has no value for it.

The other objective (`"jsd"`) is GKD's generalized Jensen-Shannon divergence between the student's and the
teacher's next-token distributions (β = `beta`: 0 forward KL(p_t‖p_s), 1 reverse KL(p_s‖p_t), between: β·KL(p_t‖m)
+ (1 − β)·KL(p_s‖m) with m = (1 − β)·p_s + β·p_t), `trl_ext.losses.distillation.generalized_jsd`, summed over each
token's support and divided by N. TRL's supports, ported here:

* `loss_top_k=0` (or k ≥ the vocabulary): the whole vocabulary;
* top-k (`generalized_jsd_loss`): the teacher's k most likely tokens for β = 0, the student's for β = 1, the union
  of both (each token once) between;
* top-1 with β > 0 (`top_1_divergence`, the trainer's path for `loss_top_k=1`): the teacher's most likely token and
  the reverse token, the sampled token (`reverse_kl_top_1_mode="sampled"`) or the student's most likely one
  (`"argmax"`), once if they coincide (β = 1: the reverse token alone);
* a teacher server's top-k (`teacher_top_k_forward_kl`, β = 0): the tokens the server returned, padding (−inf)
  excluded.

On a support of k tokens both distributions are the models' probabilities of those tokens plus, with
`loss_add_tail=True`, one tail category holding the rest, log(1 − Σ_k p) with Σ_k p clamped below 1 − 1e-7 (TRL's
bucket, `tail_bucket`: the tail is never empty), or, with `loss_add_tail=False`, renormalized over the k tokens.

`IWOPDObjective` is the whole loss step of the trainer for a local teacher (`local`: the teacher's logits) or a
teacher server (`served`: its per-token log-probs), with TRL's branches. Pure torch.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .._validation import check_bool, check_choice, check_number
from .distillation import generalized_jsd

OBJECTIVES = ("iw_opd", "jsd")
"""`distillation_objective`: the sampled-token IW-OPD policy gradient, or the generalized JSD."""

REVERSE_TOP_1_MODES = ("sampled", "argmax")
"""`reverse_kl_top_1_mode`: the reverse token of the top-1 support, the sampled token or the student's argmax."""

REDUCTIONS = ("batchmean", "sum", "mean", "none")
"""`generalized_jsd_loss`'s reductions (TRL's): per trained token, summed, per element of the support, or none."""

TAIL_CLAMP = -1e-7
"""The top-k mass's log is clamped at this value before the tail's log(1 − mass) is taken (TRL's)."""


# ----------------------------------------------------------------------------------------------------------------
# IW-OPD
# ----------------------------------------------------------------------------------------------------------------


class IWOPDTerms(NamedTuple):
    """The detached terms of IW-OPD, `[B, T]`, zero off the mask: the advantage a_t, the prefix weight w_t and the
    weighted advantage w_t·a_t."""

    advantage: torch.Tensor
    weight: torch.Tensor
    weighted_advantage: torch.Tensor


def iw_opd_weights(advantage: torch.Tensor, gamma: float, epsilon: float) -> torch.Tensor:
    """The prefix weights w_t = 1 + γ·(1 − D_<t / max(D, ε)) of the advantages `[B, T]` (zero off the completion), per
    row (detached)."""
    magnitude = advantage.abs()
    before = magnitude.cumsum(dim=1) - magnitude
    total = magnitude.sum(dim=1, keepdim=True).clamp_min(epsilon)
    return (1.0 + gamma * (1.0 - before / total)).detach()


def iw_opd_loss(
    student_logprob: torch.Tensor,
    teacher_logprob: torch.Tensor,
    mask: torch.Tensor,
    *,
    rollout_logprob: torch.Tensor | None = None,
    iw_opd_gamma: float = 0.5,
    iw_opd_epsilon: float = 1e-8,
    normalizer: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, IWOPDTerms]:
    """IW-OPD on the sampled tokens (see the module docstring), rows `[B, T]` aligned on the completion.

    Args:
        student_logprob: ℓ_t, the student's log-probs of the sampled tokens (differentiable).
        teacher_logprob: τ_t, the teacher's; must be finite where `mask` is set.
        mask: The trained completion tokens (bool).
        rollout_logprob: ρ_t, the sampler's log-probs; None: the student's own (detached).
        iw_opd_gamma: γ >= 0, the weights' amplification.
        iw_opd_epsilon: ε > 0, the floor of a row's total discrepancy.
        normalizer: N, the tokens the sum is divided by (the optimizer window's); None: `mask`'s count (at least 1).

    Returns:
        The loss and its detached terms.

    Raises:
        ValueError: A teacher log-prob missing (not finite) at a trained token.
    """
    missing = mask & ~torch.isfinite(teacher_logprob)
    if missing.any():
        raise ValueError(
            f"iw_opd: the teacher's log-probs are missing (not finite) at {int(missing.sum())} of the "
            f"{int(mask.sum())} trained completion tokens; IW-OPD needs one for every sampled token"
        )
    sampler = student_logprob if rollout_logprob is None else rollout_logprob
    advantage = torch.where(mask, teacher_logprob, 0.0) - torch.where(mask, sampler, 0.0)
    advantage = torch.where(mask, advantage.detach(), 0.0)
    weight = iw_opd_weights(advantage, iw_opd_gamma, iw_opd_epsilon)
    weighted = weight * advantage
    loss = torch.where(mask, -student_logprob * weighted, 0.0).sum()
    denominator = mask.sum().clamp_min(1) if normalizer is None else normalizer
    return loss / denominator, IWOPDTerms(advantage, weight, weighted)


def iw_opd_metrics(terms: IWOPDTerms, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """TRL's IW-OPD metrics over the trained tokens (empty when there are none): the mean weighted advantage and
    |advantage|, and the mean, smallest and largest weight."""
    if not mask.any():
        return {}
    weight = terms.weight[mask]
    return {
        "iw_opd/mean_advantage": terms.weighted_advantage[mask].mean(),
        "iw_opd/mean_abs_advantage": terms.advantage[mask].abs().mean(),
        "iw_opd/mean_weight": weight.mean(),
        "iw_opd/min_weight": weight.min(),
        "iw_opd/max_weight": weight.max(),
    }


# ----------------------------------------------------------------------------------------------------------------
# The generalized JSD on TRL's supports
# ----------------------------------------------------------------------------------------------------------------


def tail_bucket(log_probs: torch.Tensor, support_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's tail category: the log-probs `[N, K]` of a support (−inf off `support_mask`) with log(1 − Σ_K p)
    appended, the support's mass clamped below 1 − 1e-7 (so the tail's log is finite); and the mask with the tail."""
    mass = torch.logsumexp(log_probs, dim=-1, keepdim=True).clamp(max=TAIL_CLAMP)
    tail = torch.log(-torch.expm1(mass))
    return torch.cat([log_probs, tail], dim=-1), torch.cat([support_mask, torch.ones_like(support_mask[..., :1])], -1)


def support_divergence(
    student: torch.Tensor, teacher: torch.Tensor, support_mask: torch.Tensor, beta: float, add_tail: bool
) -> tuple[torch.Tensor, int]:
    """The generalized JSD (`beta`) per row over a support: the student's and the teacher's log-probs `[N, K]` of its
    tokens (entries off `support_mask`, each token's repeats, are ignored), with the tail category or renormalized
    (`add_tail`). Returns the divergence `[N]` and the number of categories (K, plus the tail)."""
    student = torch.where(support_mask, student, -math.inf)
    teacher = torch.where(support_mask, teacher, -math.inf)
    if add_tail:
        student, _ = tail_bucket(student, support_mask)
        teacher, _ = tail_bucket(teacher, support_mask)
    else:
        student = student - torch.logsumexp(student, dim=-1, keepdim=True)
        teacher = teacher - torch.logsumexp(teacher, dim=-1, keepdim=True)
    return generalized_jsd(student, teacher, beta), student.shape[-1]


def top_k_support(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, top_k: int, beta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's top-k support of each row `[N, V]`: the teacher's k most likely tokens for β = 0, the student's for β = 1,
    both for 0 < β < 1 (the student's that the teacher's already hold masked out). Returns the token ids `[N, K]`
    (0 where masked) and the mask."""
    if beta == 0:
        ids = teacher_logits.topk(top_k, dim=-1).indices
        return ids, torch.ones_like(ids, dtype=torch.bool)
    if beta == 1:
        ids = student_logits.topk(top_k, dim=-1).indices
        return ids, torch.ones_like(ids, dtype=torch.bool)
    teacher_ids = teacher_logits.topk(top_k, dim=-1).indices
    student_ids = student_logits.topk(top_k, dim=-1).indices
    repeated = (student_ids.unsqueeze(-1) == teacher_ids.unsqueeze(-2)).any(-1)
    mask = torch.cat([torch.ones_like(teacher_ids, dtype=torch.bool), ~repeated], dim=-1)
    ids = torch.cat([teacher_ids, student_ids], dim=-1)
    return torch.where(mask, ids, 0), mask


def reduce_divergence(
    divergence: torch.Tensor,
    reduction: str = "batchmean",
    *,
    rows: int | None = None,
    categories: int = 1,
    normalizer: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """TRL's reduction of the per-token divergences `divergence` `[N]` (`_reduce_divergence_loss`): divided by
    `normalizer` when given (the window's tokens), else `batchmean` (by `rows`, default N, at least 1), `sum`, `mean`
    (by N·`categories`: TRL's mean runs over each token's support elements) or `none` (the per-token values)."""
    if normalizer is not None:
        return divergence.sum() / normalizer
    if reduction == "batchmean":
        return divergence.sum() / max(divergence.shape[0] if rows is None else rows, 1)
    if reduction == "sum":
        return divergence.sum()
    if reduction == "mean":
        return divergence.sum() / (divergence.numel() * categories)
    return divergence


def generalized_jsd_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    beta: float = 0.5,
    temperature: float = 1.0,
    reduction: str = "batchmean",
    top_k: int = 0,
    add_tail: bool = True,
    normalizer: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """TRL's `IWOPDTrainer.generalized_jsd_loss`: the generalized JSD (`beta`) of the logits `[B, T, V]` at
    `temperature`, over the whole vocabulary (`top_k=0`, or k >= V) or `top_k_support` (with `tail_bucket` or
    renormalized: `add_tail`), at the tokens of `mask` `[B, T]` (None: every position), reduced by
    `reduce_divergence` (`batchmean` without a mask divides by B, as TRL's; `none` gives the per-token divergence,
    `[N]` with a mask, `[B, T]` without)."""
    check_choice("generalized_jsd_loss", "reduction", reduction, REDUCTIONS)
    shape = student_logits.shape[:-1]
    rows = None if mask is not None else student_logits.shape[0]
    if mask is not None:
        student_logits, teacher_logits = student_logits[mask], teacher_logits[mask]
    else:
        student_logits, teacher_logits = student_logits.flatten(0, -2), teacher_logits.flatten(0, -2)
    student_logits, teacher_logits = student_logits / temperature, teacher_logits / temperature
    student = torch.log_softmax(student_logits, dim=-1)
    teacher = torch.log_softmax(teacher_logits, dim=-1)
    if 0 < top_k < student_logits.shape[-1]:
        ids, support_mask = top_k_support(student_logits, teacher_logits, top_k, beta)
        divergence, categories = support_divergence(
            student.gather(-1, ids), teacher.gather(-1, ids), support_mask, beta, add_tail
        )
    else:
        divergence, categories = generalized_jsd(student, teacher, beta), student.shape[-1]
    if reduction == "none" and normalizer is None and mask is None:
        return divergence.reshape(shape)
    return reduce_divergence(divergence, reduction, rows=rows, categories=categories, normalizer=normalizer)


def top_1_divergence(
    student_log_probs: torch.Tensor,
    teacher_top_1_ids: torch.Tensor,
    teacher_top_1_logprobs: torch.Tensor,
    reverse_ids: torch.Tensor,
    reverse_teacher_logprobs: torch.Tensor,
    beta: float,
    add_tail: bool = True,
) -> torch.Tensor:
    """TRL's top-1 generalized JSD for β > 0 (`_compute_sparse_top_1_divergence_loss`), per token `[N]`: the support
    is the teacher's most likely token and the reverse token (once if they are the same; for β = 1 the reverse
    token alone), from the student's log-probs `[N, V]` and the teacher's log-probs of those tokens `[N]`."""
    if beta == 1:
        ids = reverse_ids.unsqueeze(-1)
        support_mask = torch.ones_like(ids, dtype=torch.bool)
        teacher = reverse_teacher_logprobs.unsqueeze(-1)
    else:
        ids = torch.stack([teacher_top_1_ids, reverse_ids], dim=-1)
        support_mask = torch.stack(
            [torch.ones_like(reverse_ids, dtype=torch.bool), reverse_ids != teacher_top_1_ids], -1
        )
        ids = torch.where(support_mask, ids, 0)
        teacher = torch.stack([teacher_top_1_logprobs, reverse_teacher_logprobs], dim=-1)
    return support_divergence(student_log_probs.gather(-1, ids), teacher, support_mask, beta, add_tail)[0]


def teacher_top_k_forward_kl(
    student_log_probs: torch.Tensor, teacher_logprobs: torch.Tensor, teacher_ids: torch.Tensor, add_tail: bool = True
) -> torch.Tensor:
    """TRL's forward KL on a teacher server's top-k (`_compute_server_forward_kl_loss`), per token `[N]`: the
    student's log-probs `[N, V]` and the teacher's top-k log-probs and ids `[N, K]` (−inf: no entry)."""
    valid = teacher_logprobs > -math.inf
    return support_divergence(student_log_probs.gather(-1, teacher_ids), teacher_logprobs, valid, 0.0, add_tail)[0]


# ----------------------------------------------------------------------------------------------------------------
# The trainer's loss step
# ----------------------------------------------------------------------------------------------------------------


class ServedTeacher(NamedTuple):
    """A teacher server's log-probs of a batch's completions, `[B, T']` aligned on the completion like the student's
    rows (T' <= T, −inf where the server returned nothing): the sampled token's, and its top-k log-probs and token
    ids `[B, T', K]` (TRL's `_get_teacher_token_logprobs_from_server`: `actual_logprobs`, `topk_logprobs`,
    `topk_token_ids`)."""

    actual_logprobs: torch.Tensor
    topk_logprobs: torch.Tensor
    topk_token_ids: torch.Tensor


class ObjectiveOutput(NamedTuple):
    """The loss and its metrics (detached 0-dim tensors, TRL's names)."""

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor]


class IWOPDObjective:
    """The loss of TRL's `IWOPDTrainer`, configured by its config's fields (same names, same defaults; see the module
    docstring): `local` for a local teacher's logits, `served` for a teacher server's log-probs.

    Args:
        distillation_objective: `"iw_opd"` (the sampled-token policy gradient) or `"jsd"` (the generalized JSD).
        beta: β in [0, 1] of the JSD (0 forward KL, 1 reverse KL).
        temperature: T > 0: both models' logits are divided by it.
        loss_top_k: k >= 0 of the JSD's support (0: the whole vocabulary).
        loss_add_tail: The JSD's tail category on a top-k support (else renormalized).
        reverse_kl_top_1_mode: The reverse token of the top-1 support, `"sampled"` or `"argmax"`.
        iw_opd_gamma: γ >= 0 of IW-OPD's weights.
        iw_opd_epsilon: ε > 0 of IW-OPD's weights.

    Raises:
        ValueError: A value outside its range, or `reverse_kl_top_1_mode="argmax"` with IW-OPD (defined on the
            sampled tokens): the message names the field and what it may be.
    """

    OPTIONS = (
        "distillation_objective",
        "beta",
        "temperature",
        "loss_top_k",
        "loss_add_tail",
        "reverse_kl_top_1_mode",
        "iw_opd_gamma",
        "iw_opd_epsilon",
    )
    """The config fields the objective reads (TRL's `IWOPDConfig`'s)."""

    def __init__(
        self,
        distillation_objective: str = "iw_opd",
        beta: float = 1.0,
        temperature: float = 1.0,
        loss_top_k: int = 1,
        loss_add_tail: bool = True,
        reverse_kl_top_1_mode: str = "sampled",
        iw_opd_gamma: float = 0.5,
        iw_opd_epsilon: float = 1e-8,
    ):
        owner = type(self).__name__
        self.distillation_objective = check_choice(owner, "distillation_objective", distillation_objective, OBJECTIVES)
        self.beta = float(check_number(owner, "beta", beta, ge=0, le=1))
        self.temperature = float(check_number(owner, "temperature", temperature, gt=0))
        self.loss_top_k = check_number(owner, "loss_top_k", loss_top_k, ge=0, integer=True)
        self.loss_add_tail = check_bool(owner, "loss_add_tail", loss_add_tail)
        self.reverse_kl_top_1_mode = check_choice(
            owner, "reverse_kl_top_1_mode", reverse_kl_top_1_mode, REVERSE_TOP_1_MODES
        )
        self.iw_opd_gamma = float(check_number(owner, "iw_opd_gamma", iw_opd_gamma, ge=0))
        self.iw_opd_epsilon = float(check_number(owner, "iw_opd_epsilon", iw_opd_epsilon, gt=0))
        if distillation_objective == "iw_opd" and reverse_kl_top_1_mode != "sampled":
            raise ValueError(
                f"{owner}: reverse_kl_top_1_mode={reverse_kl_top_1_mode!r} is not valid with "
                "distillation_objective='iw_opd'; must be 'sampled' (IW-OPD is defined on the sampled tokens)"
            )

    def check_served(self) -> None:
        """Refuse the options a teacher server cannot serve (it returns the sampled token's log-prob and its own
        top-k only), naming the field: `reverse_kl_top_1_mode="argmax"`, `loss_top_k=0` with β = 0, and a
        `loss_top_k` other than 1 with β > 0 (the JSD)."""
        owner = type(self).__name__
        if self.reverse_kl_top_1_mode == "argmax":
            raise ValueError(
                f"{owner}: reverse_kl_top_1_mode='argmax' is not valid with a teacher server; must be 'sampled' (the "
                "server cannot score the student's own top token)"
            )
        if self.distillation_objective == "jsd" and self.beta == 0 and self.loss_top_k < 1:
            raise ValueError(
                f"{owner}: loss_top_k=0 is not valid with a teacher server and beta=0; must be >= 1 (the server "
                "returns its top-k log-probs, not the whole vocabulary)"
            )
        if self.distillation_objective == "jsd" and self.beta > 0 and self.loss_top_k != 1:
            raise ValueError(
                f"{owner}: loss_top_k={self.loss_top_k} is not valid with a teacher server and beta={self.beta:g}; "
                "must be 1 (the served JSD with a reverse term is implemented on the top-1 support)"
            )

    def _log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits / self.temperature, dim=-1)

    def _iw_opd(self, student_logits, completion_ids, mask, teacher_logprob, rollout_logprob, normalizer):
        student = self._log_probs(student_logits).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
        loss, terms = iw_opd_loss(
            student,
            teacher_logprob,
            mask,
            rollout_logprob=rollout_logprob,
            iw_opd_gamma=self.iw_opd_gamma,
            iw_opd_epsilon=self.iw_opd_epsilon,
            normalizer=normalizer,
        )
        return ObjectiveOutput(loss, iw_opd_metrics(terms, mask))

    def local(
        self,
        student_logits: torch.Tensor,
        teacher_logits: torch.Tensor,
        completion_ids: torch.Tensor,
        mask: torch.Tensor,
        rollout_logprob: torch.Tensor | None = None,
        normalizer: torch.Tensor | float | None = None,
    ) -> ObjectiveOutput:
        """The loss with a local teacher (TRL's `compute_loss` without a server).

        Args:
            student_logits: The student's logits `[B, T, V]` that predict the completion tokens.
            teacher_logits: The teacher's, same shape (no gradient is taken through them).
            completion_ids: The completion tokens `[B, T]`.
            mask: The trained completion tokens `[B, T]` (bool).
            rollout_logprob: The sampler's log-probs `[B, T]` (IW-OPD's ρ), or None.
            normalizer: The tokens the loss is divided by; None: the trained tokens of `mask` (at least 1).
        """
        teacher_logits = teacher_logits.detach()
        if self.distillation_objective == "iw_opd":
            teacher = self._log_probs(teacher_logits).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
            return self._iw_opd(student_logits, completion_ids, mask, teacher, rollout_logprob, normalizer)
        if self.beta > 0 and self.loss_top_k == 1:
            student_logits, teacher_logits = student_logits[mask], teacher_logits[mask]
            teacher = self._log_probs(teacher_logits)
            top_1 = teacher_logits.argmax(dim=-1)
            sampled = completion_ids[mask]
            reverse = student_logits.argmax(dim=-1) if self.reverse_kl_top_1_mode == "argmax" else sampled
            divergence = top_1_divergence(
                self._log_probs(student_logits),
                top_1,
                teacher.gather(-1, top_1.unsqueeze(-1)).squeeze(-1),
                reverse,
                teacher.gather(-1, reverse.unsqueeze(-1)).squeeze(-1),
                self.beta,
                self.loss_add_tail,
            )
            return ObjectiveOutput(reduce_divergence(divergence, normalizer=normalizer), {})
        loss = generalized_jsd_loss(
            student_logits,
            teacher_logits,
            mask,
            beta=self.beta,
            temperature=self.temperature,
            top_k=self.loss_top_k,
            add_tail=self.loss_add_tail,
            normalizer=normalizer,
        )
        return ObjectiveOutput(loss, {})

    def served(
        self,
        student_logits: torch.Tensor,
        completion_ids: torch.Tensor,
        mask: torch.Tensor,
        teacher: ServedTeacher,
        rollout_logprob: torch.Tensor | None = None,
        normalizer: torch.Tensor | float | None = None,
    ) -> ObjectiveOutput:
        """The loss with a teacher server's log-probs (TRL's `compute_loss` with `use_teacher_server=True`): the
        positions past the server's width T' are dropped (IW-OPD: an error if any is trained); the JSD's sampled
        and top-1 log-probs must be there at every trained token. Arguments as `local`'s, `teacher` for the teacher's
        logits."""
        self.check_served()
        dtype = student_logits.dtype if student_logits.is_floating_point() else torch.float32
        teacher = ServedTeacher(
            teacher.actual_logprobs.to(dtype), teacher.topk_logprobs.to(dtype), teacher.topk_token_ids
        )
        width = teacher.actual_logprobs.shape[1]
        student_logits, completion_ids = student_logits[:, :width], completion_ids[:, :width]
        if self.distillation_objective == "iw_opd":
            if mask[:, width:].any():
                raise ValueError(
                    f"iw_opd: the teacher server returned log-probs for {width} completion tokens, but trained tokens "
                    "lie past them; IW-OPD needs the teacher's log-prob of every sampled token"
                )
            rollout = None if rollout_logprob is None else rollout_logprob[:, :width]
            return self._iw_opd(
                student_logits, completion_ids, mask[:, :width], teacher.actual_logprobs, rollout, normalizer
            )
        mask = mask[:, :width]
        student = self._log_probs(student_logits[mask])
        if self.beta > 0:
            actual, top_1 = teacher.actual_logprobs[mask], teacher.topk_logprobs[mask][:, 0]
            needed = [("sampled-token", actual, "reverse")] + ([("top-1", top_1, "forward")] if self.beta < 1 else [])
            for name, values, term in needed:
                missing = int((~torch.isfinite(values)).sum())
                if missing:
                    raise ValueError(
                        f"jsd: the teacher server's {name} log-probs are missing at {missing} of the "
                        f"{values.shape[0]} trained completion tokens; the {term} KL term needs them"
                    )
            divergence = top_1_divergence(
                student,
                teacher.topk_token_ids[mask][:, 0],
                top_1,
                completion_ids[mask],
                actual,
                self.beta,
                self.loss_add_tail,
            )
        else:
            divergence = teacher_top_k_forward_kl(
                student, teacher.topk_logprobs[mask], teacher.topk_token_ids[mask], self.loss_add_tail
            )
        return ObjectiveOutput(reduce_divergence(divergence, normalizer=normalizer), {})
