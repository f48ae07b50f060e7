"""Self-distillation: the on-policy losses of SDFT and SDPO, whose teacher is the model itself given more context.

Two methods of TRL 1.16's `trl.experimental` share this loss (TRL ships it twice, as `sdft/loss_utils.py` and
`sdpo/loss_utils.py`, identical); it is ported once here, with TRL's semantics:

* SDFT, self-distillation fine-tuning (Shenfeld, Damani, Hübotter, Agrawal 2026, "Self-Distillation Enables
  Continual Learning", arXiv 2601.19897): the student samples a completion y for its prompt x; the teacher is the
  same model (its initial, live or EMA weights) prompted with x and a demonstration c (privileged context), and
  scores the same y. The student is pulled toward the teacher's next-token distributions along y.
* SDPO, self-distillation policy optimization (Hübotter et al. 2026, "Reinforcement Learning via Self-Distillation",
  arXiv 2601.20802): the teacher's context is the feedback of the reward: a sibling rollout of the same prompt that
  the reward judged successful (and, optionally, the environment's feedback text). The loss mixes the divergence
  with a GRPO-style clipped policy loss, `(1 − w)·L_policy + w·L_distill`, w = `distillation_weight`.

Per completion position t, with p_s / p_t the student's / teacher's next-token distributions (logits divided by the
sampling temperature, by the trainer) and α = `distillation_alpha`, the divergence is GKD's generalized JSD
(`trl_ext.losses.distillation.generalized_jsd`, the same formula):

    α = 0:        KL(p_t ‖ p_s)                                   (forward KL)
    α = 1:        KL(p_s ‖ p_t)                                   (reverse KL)
    otherwise:    m = (1 − α)·p_s + α·p_t,   α·KL(p_t ‖ m) + (1 − α)·KL(p_s ‖ m)

on one of three supports (`distillation_mode`):

* `full_logits`: the whole vocabulary;
* `topk_logits`: the student's k most likely tokens (k = `distillation_topk`), each model's log-probs gathered
  there; then either renormalized over the k tokens (the divergence of the two top-k conditionals), or with
  `distillation_add_tail` one more category holding each model's remaining mass, log(1 − Σ_top-k p), where the
  captured log-mass log Σ_top-k p is first clamped to at most −1e-7 (so the tail is never empty);
* `sampled_token`: the sampled token only, a REINFORCE form of the reverse KL (α = 1 only):
  ℓ_t = sg(log p_s(y_t) − log p_t(y_t)) · log p_s(y_t), whose gradient is the reverse KL's on the sampled token.

With `distillation_is_clip` = c and the rollout policy's log-probs (TRL keeps them only when a generation batch
feeds several optimizer steps), each ℓ_t is weighted by sg(min(exp(clamp(log p_s(y_t) − log p_old(y_t), ±20)), c)).
The loss is the mean over completions of each completion's token mean over `loss_mask` (completions without a
masked-in token count as 0; SDPO's mask drops the completions that have no teacher context).

SDPO's policy loss is TRL's GRPO clip loss for SDPO's `loss_type`s, which `trl_ext.losses.trl_grpo.TRLGRPOLoss`
computes, with r = exp(log p_s − log p_old) (a completion's mean log-ratio with `importance_sampling_level=
"sequence"`; p_old = sg(p_s) without rollout log-probs) and the group-normalized advantage A:
L_policy = −min(r·A, clamp(r, 1 − ε, 1 + ε_high)·A), aggregated per `loss_type` over the micro-batch: `grpo` the mean
of the completions' token means, `bnpo` and `dapo` the token mean (SDPO's `dapo` is local to the micro-batch, unlike
`trl.GRPOTrainer`'s), `dr_grpo` Σ / (completions · `max_completion_length`).

Pure torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from .._validation import check_bool, check_choice, check_number
from .distillation import generalized_jsd
from .inputs import bool_mask, shape_of
from .trl_grpo import TRLGRPOLoss

DISTILLATION_MODES = ("sampled_token", "full_logits", "topk_logits")
"""The supports of the divergence (`distillation_mode`): the sampled token, the whole vocabulary, the student's
top-k."""

SDPO_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
"""The `loss_type`s of SDPO's policy loss (TRL's `SDPOConfig.loss_type`)."""

IMPORTANCE_LOG_RATIO_BOUND = 20.0
"""The log importance ratio log p_s − log p_old is clamped to ±this before it is exponentiated (TRL's)."""

MAX_CAPTURED_LOG_MASS = -1e-7
"""The top-k's captured log-mass is clamped to at most this before the tail bucket log(1 − Σ_top-k p) is formed."""


# --------------------------------------------------------------------------------------------- the divergences


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[ids] at each position: `[..., V]` logits and `[...]` token ids give `[...]`, computed as
    TRL's `selective_log_softmax` does (gather − logsumexp in float32 / float64, log_softmax then gather otherwise)."""
    if logits.dtype in (torch.float32, torch.float64):
        return logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def add_tail_bucket(log_probs: torch.Tensor) -> torch.Tensor:
    """Top-k log-probs `[..., k]` (summing to a captured mass ≤ 1) with one more category, the tail
    log(1 − Σ p), `[..., k + 1]`: a distribution that sums to 1. The captured log-mass is clamped to at most
    `MAX_CAPTURED_LOG_MASS` first, so the tail is never log 0."""
    captured = torch.logsumexp(log_probs, dim=-1, keepdim=True).clamp(max=MAX_CAPTURED_LOG_MASS)
    return torch.cat([log_probs, torch.log(-torch.expm1(captured))], dim=-1)


def renormalize(log_probs: torch.Tensor) -> torch.Tensor:
    """Log-probs over a support `[..., k]` renormalized to sum to 1 over it (the conditional on the support)."""
    return log_probs - torch.logsumexp(log_probs, dim=-1, keepdim=True)


def full_logit_divergence(student_logits: torch.Tensor, teacher_logits: torch.Tensor, alpha: float) -> torch.Tensor:
    """The generalized JSD (`alpha`) of the student's and the teacher's distributions over the whole vocabulary at
    each position: `[..., V]` logits give `[...]`."""
    return generalized_jsd(torch.log_softmax(student_logits, dim=-1), torch.log_softmax(teacher_logits, dim=-1), alpha)


def topk_logit_divergence(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, topk: int, alpha: float, add_tail: bool
) -> torch.Tensor:
    """The generalized JSD (`alpha`) over the student's `topk` most likely tokens at each position (renormalized, or
    with the tail bucket when `add_tail`): `[..., V]` logits give `[...]`."""
    top_student, ids = torch.topk(student_logits, k=topk, dim=-1)
    student = top_student - torch.logsumexp(student_logits, dim=-1, keepdim=True)
    teacher = teacher_logits.gather(-1, ids) - torch.logsumexp(teacher_logits, dim=-1, keepdim=True)
    return support_divergence(student, teacher, alpha, add_tail)


def support_divergence(student: torch.Tensor, teacher: torch.Tensor, alpha: float, add_tail: bool) -> torch.Tensor:
    """The generalized JSD (`alpha`) of the two models' true log-probs `[..., k]` on a common support of k tokens,
    renormalized over it, or with the tail bucket when `add_tail`: `[...]`."""
    if add_tail:
        return generalized_jsd(add_tail_bucket(student), add_tail_bucket(teacher), alpha)
    return generalized_jsd(renormalize(student), renormalize(teacher), alpha)


def teacher_support_divergence(
    student_logits: torch.Tensor,
    teacher_topk_logprobs: torch.Tensor,
    teacher_topk_ids: torch.Tensor,
    valid: torch.Tensor,
    alpha: float,
    add_tail: bool,
) -> torch.Tensor:
    """The top-k divergence on the *teacher's* top-k (a served teacher returns only its own top-k log-probs
    `[B, T, k]` and ids): the student's log-probs gathered at the teacher's ids. Both are set to 0 at the positions
    `valid` (`[B, T]`, bool) leaves out, where a served teacher has no values, so that no ±inf enters the sums."""
    keep = valid.unsqueeze(-1)
    student = torch.log_softmax(student_logits, dim=-1).gather(-1, teacher_topk_ids)
    student = torch.where(keep, student, torch.zeros_like(student))
    teacher = torch.where(keep, teacher_topk_logprobs, torch.zeros_like(teacher_topk_logprobs))
    return support_divergence(student, teacher, alpha, add_tail)


def sampled_token_divergence(student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor) -> torch.Tensor:
    """The sampled-token reverse KL's per-token loss sg(log p_s − log p_t)·log p_s, from the two models' log-probs of
    the sampled tokens (same shape): its gradient is the reverse KL's on the sampled token."""
    return (student_logprobs - teacher_logprobs).detach() * student_logprobs


def clipped_importance_weight(student_logprobs: torch.Tensor, old_logprobs: torch.Tensor, clip: float) -> torch.Tensor:
    """sg(min(exp(clamp(log p_s − log p_old, ±20)), `clip`)) per token: the rollout-policy correction of a reused
    generation batch."""
    log_ratio = (student_logprobs - old_logprobs).detach()
    log_ratio = log_ratio.clamp(min=-IMPORTANCE_LOG_RATIO_BOUND, max=IMPORTANCE_LOG_RATIO_BOUND)
    return torch.exp(log_ratio).clamp(max=clip)


def completion_mean(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean over completions (rows) of each completion's token mean over the bool `mask` (a completion without a
    masked-in token counts as 0); masked positions reach neither the value nor the gradient."""
    rows = torch.where(mask, per_token, 0).sum(-1) / mask.sum(-1).clamp(min=1)
    return rows.mean()


def token_mean(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean over every masked-in token of the batch (0 without any)."""
    return torch.where(mask, per_token, 0).sum() / mask.sum().clamp(min=1)


# ------------------------------------------------------------------------------------------------------ SDFT


def check_self_distillation_settings(
    owner: str,
    distillation_mode: Any,
    distillation_alpha: Any,
    distillation_topk: Any,
    distillation_add_tail: Any,
    distillation_is_clip: Any,
) -> None:
    """The rules of the self-distillation settings; a ValueError `"<owner>: <field>=<value> is not valid; must be
    ..."` naming the field. α in [0, 1]; `sampled_token` only with α = 1 (TRL's rule); `distillation_topk` an integer
    ≥ 1 for `topk_logits` (TRL checks it only when the loss runs); `distillation_is_clip` > 0 or None."""
    check_choice(owner, "distillation_mode", distillation_mode, DISTILLATION_MODES)
    check_number(owner, "distillation_alpha", distillation_alpha, ge=0, le=1)
    if distillation_mode == "sampled_token" and distillation_alpha != 1.0:
        raise ValueError(
            f"{owner}: distillation_alpha={distillation_alpha!r} is not valid with distillation_mode='sampled_token'; "
            "must be 1.0 (the sampled-token loss is the reverse KL only)"
        )
    if distillation_mode == "topk_logits":
        check_number(owner, "distillation_topk", distillation_topk, ge=1, integer=True)
    else:
        check_number(owner, "distillation_topk", distillation_topk, ge=1, integer=True, allow_none=True)
    check_bool(owner, "distillation_add_tail", distillation_add_tail)
    check_number(owner, "distillation_is_clip", distillation_is_clip, gt=0, allow_none=True)


class SelfDistillationResult(NamedTuple):
    """The loss (0-dim, differentiable in the student's logits) and the token mean of the per-token loss over the
    whole micro-batch (detached: TRL's `self_distillation/distillation_loss` metric)."""

    loss: torch.Tensor
    token_mean: torch.Tensor


@dataclass(frozen=True)
class SelfDistillationLoss:
    """The self-distillation loss of SDFT (and SDPO's distillation term): see the module docstring.

    The defaults are TRL's `SDFTConfig`'s. Checked at construction (`check_self_distillation_settings`).

    Attributes:
        distillation_mode: `topk_logits`, `full_logits` or `sampled_token`.
        distillation_alpha: α of the generalized JSD: 0 forward KL, 1 reverse KL, between: the α-mixture JSD.
        distillation_topk: k of `topk_logits`.
        distillation_add_tail: `topk_logits` with the tail bucket instead of renormalizing over the top-k.
        distillation_is_clip: The cap c of the rollout-policy importance weight (applied when the rollout log-probs
            are given); None: no weight.
    """

    distillation_mode: str = "topk_logits"
    distillation_alpha: float = 0.5
    distillation_topk: int | None = 100
    distillation_add_tail: bool = False
    distillation_is_clip: float | None = 2.0

    def __post_init__(self) -> None:
        check_self_distillation_settings(
            type(self).__name__,
            self.distillation_mode,
            self.distillation_alpha,
            self.distillation_topk,
            self.distillation_add_tail,
            self.distillation_is_clip,
        )

    def per_token(
        self, student_logits: torch.Tensor, teacher_logits: torch.Tensor, completion_ids: torch.Tensor
    ) -> torch.Tensor:
        """The per-token loss `[B, T]` (before the importance weight) of `[B, T, V]` logits and the sampled ids."""
        if self.distillation_mode == "topk_logits":
            return topk_logit_divergence(
                student_logits,
                teacher_logits,
                self.distillation_topk,
                self.distillation_alpha,
                self.distillation_add_tail,
            )
        if self.distillation_mode == "full_logits":
            return full_logit_divergence(student_logits, teacher_logits, self.distillation_alpha)
        return sampled_token_divergence(
            token_logprobs(student_logits, completion_ids), token_logprobs(teacher_logits, completion_ids)
        )

    def __call__(
        self,
        student_logits: torch.Tensor,
        teacher_logits: torch.Tensor,
        completion_ids: torch.Tensor,
        loss_mask: torch.Tensor,
        old_logprobs: torch.Tensor | None = None,
    ) -> SelfDistillationResult:
        """The loss of one micro-batch.

        Args:
            student_logits: `[B, T, V]`, the student's temperature-scaled logits at the completion positions (with
                gradient).
            teacher_logits: `[B, T, V]`, the teacher's, aligned to the same completion tokens.
            completion_ids: `[B, T]`, the sampled completion tokens.
            loss_mask: `[B, T]`, bool or 0/1: the positions the loss averages over.
            old_logprobs: `[B, T]`, the rollout policy's log-probs of the sampled tokens, or None (no importance
                weight).

        Raises:
            ValueError: An input of the wrong shape (naming it), or `distillation_topk` above the vocabulary.
        """
        owner = type(self).__name__
        self._check_inputs(owner, student_logits, teacher_logits, completion_ids, loss_mask, old_logprobs)
        mask = bool_mask(owner, "loss_mask", loss_mask)
        per_token = self.per_token(student_logits, teacher_logits, completion_ids)
        if self.distillation_is_clip is not None and old_logprobs is not None:
            student_logprobs = token_logprobs(student_logits, completion_ids)
            per_token = per_token * clipped_importance_weight(student_logprobs, old_logprobs, self.distillation_is_clip)
        with torch.no_grad():
            mean = token_mean(per_token, mask)
        return SelfDistillationResult(completion_mean(per_token, mask), mean)

    def _check_inputs(
        self,
        owner: str,
        student_logits: Any,
        teacher_logits: Any,
        completion_ids: Any,
        loss_mask: Any,
        old_logprobs: Any,
    ) -> None:
        if not isinstance(student_logits, torch.Tensor) or student_logits.dim() != 3:
            raise ValueError(
                f"{owner}: student_logits must be a [B, T, V] tensor, got shape {shape_of(student_logits)}"
            )
        if not isinstance(teacher_logits, torch.Tensor) or teacher_logits.shape != student_logits.shape:
            raise ValueError(
                f"{owner}: teacher_logits has shape {shape_of(teacher_logits)} but student_logits has shape "
                f"{shape_of(student_logits)}; the teacher is the student's own model: one vocabulary, one length"
            )
        positions = tuple(student_logits.shape[:2])
        for name, value in (
            ("completion_ids", completion_ids),
            ("loss_mask", loss_mask),
            ("old_logprobs", old_logprobs),
        ):
            if value is not None and (not isinstance(value, torch.Tensor) or tuple(value.shape) != positions):
                raise ValueError(f"{owner}: {name} must be [B, T] = {list(positions)}, got shape {shape_of(value)}")
        vocabulary = student_logits.shape[-1]
        if self.distillation_mode == "topk_logits" and self.distillation_topk > vocabulary:
            raise ValueError(
                f"{owner}: distillation_topk={self.distillation_topk} is not valid for a vocabulary of {vocabulary} "
                f"tokens; must be in [1, {vocabulary}]"
            )


# ------------------------------------------------------------------------------------------------------ SDPO


class SDPOResult(NamedTuple):
    """SDPO's loss (0-dim), its two parts (None where `distillation_weight` leaves one out: TRL does not compute it)
    and the distillation's token mean (TRL's `self_distillation/distillation_loss` metric; None likewise)."""

    loss: torch.Tensor
    policy_loss: torch.Tensor | None
    distillation_loss: torch.Tensor | None
    distillation_token_mean: torch.Tensor | None


@dataclass(frozen=True)
class SDPOLoss:
    """SDPO's objective, `(1 − w)·L_policy + w·L_distill` (w = `distillation_weight`; see the module docstring).

    w = 1 computes the distillation only and w = 0 the policy loss only (no teacher logits needed), as TRL.

    Attributes:
        distillation: The distillation term.
        policy: The policy loss: `TRLGRPOLoss` with one of `SDPO_LOSS_TYPES` (its `loss_type`,
            `importance_sampling_level`, `epsilon`, `epsilon_high`; no `delta`).
        distillation_weight: w, in [0, 1].
        max_completion_length: `dr_grpo`'s normalizer per completion (needed for `dr_grpo`).
    """

    distillation: SelfDistillationLoss
    policy: TRLGRPOLoss
    distillation_weight: float = 1.0
    max_completion_length: int | None = None

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_number(owner, "distillation_weight", self.distillation_weight, ge=0, le=1)
        check_choice(owner, "loss_type", self.policy.loss_type, SDPO_LOSS_TYPES)
        if self.policy.delta is not None:
            raise ValueError(f"{owner}: delta={self.policy.delta!r} is not valid; SDPO's policy loss has none: None")
        if self.policy.loss_type == "dr_grpo":
            check_number(owner, "max_completion_length", self.max_completion_length, ge=1, integer=True)

    @property
    def needs_teacher(self) -> bool:
        """Whether the loss reads the teacher's logits (w > 0)."""
        return self.distillation_weight > 0

    @property
    def needs_policy_loss(self) -> bool:
        """Whether the loss has the policy term (w < 1)."""
        return self.distillation_weight < 1

    def policy_loss(
        self,
        student_logits: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
        advantages: torch.Tensor,
        old_logprobs: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """L_policy of one micro-batch, aggregated over it per `loss_type` (`TRLGRPOLoss` with the micro-batch's own
        counts as the window)."""
        logprobs = token_logprobs(student_logits, completion_ids)
        mask = bool_mask(type(self).__name__, "completion_mask", completion_mask)
        rows = mask.shape[0]
        loss, _ = self.policy(
            logprob=logprobs,
            old_logprob=logprobs.detach() if old_logprobs is None else old_logprobs,
            action_mask=mask,
            advantages=advantages,
            global_valid_toks=mask.sum().clamp(min=1),
            global_valid_seqs=float(rows),
            normalizer=float(rows * (self.max_completion_length or 1)),
        )
        return loss

    def __call__(
        self,
        student_logits: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
        advantages: torch.Tensor,
        *,
        teacher_logits: torch.Tensor | None = None,
        self_distillation_mask: torch.Tensor | None = None,
        old_logprobs: torch.Tensor | None = None,
    ) -> SDPOResult:
        """The loss of one micro-batch.

        Args:
            student_logits: `[B, T, V]`, the student's temperature-scaled logits at the completion positions.
            completion_ids: `[B, T]`, the sampled tokens.
            completion_mask: `[B, T]`, the completion's tokens (bool or 0/1).
            advantages: `[B]`, the group-normalized advantages (read when w < 1).
            teacher_logits: `[B, T, V]`, the feedback-conditioned teacher's logits (needed when w > 0).
            self_distillation_mask: `[B]`, 1 for the completions with a teacher context (the distillation averages
                over their tokens only); None: every completion.
            old_logprobs: `[B, T]`, the rollout policy's log-probs, or None (then p_old = sg(p_s)).

        Raises:
            ValueError: `teacher_logits` missing while w > 0, or an input of the wrong shape (naming it).
        """
        owner = type(self).__name__
        policy = distillation = mean = None
        if self.needs_policy_loss:
            policy = self.policy_loss(student_logits, completion_ids, completion_mask, advantages, old_logprobs)
        if self.needs_teacher:
            if teacher_logits is None:
                raise ValueError(
                    f"{owner}: teacher_logits is required with distillation_weight={self.distillation_weight!r} (> 0)"
                )
            loss_mask = bool_mask(owner, "completion_mask", completion_mask)
            if self_distillation_mask is not None:
                if not isinstance(self_distillation_mask, torch.Tensor) or tuple(self_distillation_mask.shape) != (
                    loss_mask.shape[0],
                ):
                    raise ValueError(
                        f"{owner}: self_distillation_mask must be [B] = [{loss_mask.shape[0]}], got shape "
                        f"{shape_of(self_distillation_mask)}"
                    )
                loss_mask = loss_mask & bool_mask(owner, "self_distillation_mask", self_distillation_mask).unsqueeze(1)
            distillation, mean = self.distillation(
                student_logits, teacher_logits, completion_ids, loss_mask, old_logprobs
            )
        if policy is None:
            loss = distillation
        elif distillation is None:
            loss = policy
        else:
            loss = (1 - self.distillation_weight) * policy + self.distillation_weight * distillation
        return SDPOResult(loss, policy, distillation, mean)


def sdpo_policy_loss(
    owner: str,
    loss_type: Any,
    importance_sampling_level: Any,
    epsilon: Any,
    epsilon_high: Any,
) -> TRLGRPOLoss:
    """SDPO's policy loss from TRL's fields, checked with `owner` (a config's name) in the messages: `loss_type` one
    of `SDPO_LOSS_TYPES`, `importance_sampling_level` `token` or `sequence`, ε and ε_high ≥ 0 (None: ε)."""
    check_choice(owner, "loss_type", loss_type, SDPO_LOSS_TYPES)
    check_choice(owner, "importance_sampling_level", importance_sampling_level, ("token", "sequence"))
    check_number(owner, "epsilon", epsilon, ge=0)
    check_number(owner, "epsilon_high", epsilon_high, ge=0, allow_none=True)
    if isinstance(epsilon, int) and not isinstance(epsilon, bool):
        epsilon = float(epsilon)
    return TRLGRPOLoss(
        loss_type=loss_type,
        importance_sampling_level=importance_sampling_level,
        epsilon=epsilon,
        epsilon_high=None if epsilon_high is None else float(epsilon_high),
    )


__all__ = [
    "DISTILLATION_MODES",
    "IMPORTANCE_LOG_RATIO_BOUND",
    "MAX_CAPTURED_LOG_MASS",
    "SDPO_LOSS_TYPES",
    "SDPOLoss",
    "SDPOResult",
    "SelfDistillationLoss",
    "SelfDistillationResult",
    "add_tail_bucket",
    "check_self_distillation_settings",
    "clipped_importance_weight",
    "completion_mean",
    "full_logit_divergence",
    "renormalize",
    "sampled_token_divergence",
    "sdpo_policy_loss",
    "support_divergence",
    "teacher_support_divergence",
    "token_logprobs",
    "token_mean",
    "topk_logit_divergence",
]
