"""GOLD's losses: the generalized JSD on one vocabulary, and Universal Logit Distillation (ULD) across tokenizers.

TRL 1.16's `trl.experimental.gold.GOLDTrainer` (General Online Logit Distillation: Patiño et al. 2025, "Unlocking
On-Policy Distillation for Any Model Family", a Hugging Face blog post) trains a student on its own samples (with
probability `lmbda`) or on the dataset's completions, scored by a teacher's next-token distributions, with one of two
losses, both ported here with TRL's semantics (masks, reductions, temperatures, clamps):

**The generalized JSD** (`generalized_jsd_loss`; student and teacher share one vocabulary), Agarwal et al. 2024,
"On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes" (GKD, arXiv 2306.13649). At each
position with a label (not −100), with p_s / p_t the student's / teacher's softmax of logits / τ, β = `beta`:

    β = 0: KL(p_t ‖ p_s);   β = 1: KL(p_s ‖ p_t);   else: β·KL(p_t ‖ m) + (1 − β)·KL(p_s ‖ m),  m = (1 − β)·p_s + β·p_t

summed over the vocabulary (`trl_ext.losses.distillation.generalized_jsd_terms`). Reduced as a sum over the labelled
positions divided by `num_items_in_batch` when given (TRL's gradient-accumulation count), else by `reduction`:
`batchmean` (divided by the labelled positions, at least 1; without labels by the first dimension), `sum`, `mean`
(divided by positions × vocabulary) or `none` (the terms). On logits this is GKD's loss, `trl_ext.losses.gkd.gkd_loss`
(computed in at least float32). With `logits_are_probs=True` (the hybrid ULD's matched tokens) the inputs are
unnormalized probabilities, whose log is taken after a floor of 1e-8, and no temperature applies.

**Universal Logit Distillation** (`ULDLoss`), Boizard et al. 2024, "Towards Cross-Tokenizer Distillation: the
Universal Logit Distillation Loss for LLMs" (arXiv 2402.12030): the optimal-transport (Wasserstein-1) distance
between two distributions whose supports are unrelated has a closed form on their probabilities sorted in decreasing
order, zero-padded to the larger vocabulary:

    d(p_s, p_t) = Σ_k |p_s^(k) − p_t^(k)|        (p^(k): the k-th largest probability)

Per sample, over the answer span of each side (the positions whose label is not −100, the last one dropped with
`uld_skip_student_eos` / `uld_skip_teacher_eos`), with p the softmax of logits / `uld_student_temperature` (the
student's) and logits / `uld_teacher_temperature` (the teacher's):

* alignment: `use_extended_uld=False` pairs the first min(n_s, n_t) positions of the two spans (the paper's
  truncation); `use_extended_uld=True` (GOLD) walks the two sides' UTF-8 byte offsets and closes a group wherever both
  tokenizations end a token at the same byte, so each group covers the same text on both sides. A group of several
  tokens becomes one distribution by the chain rule: `uld_token_merge_strategy="observed"` multiplies the first
  position's distribution by the probabilities of the actual later tokens; `"bayesian"` multiplies the last position's
  distribution by the probabilities of the actual earlier tokens (each probability floored at 1e-8). With
  `"observed"` the span's logits are taken at the answer positions themselves (TRL's convention, the original ULD
  code's); with `"bayesian"` one position earlier, so that position k's distribution predicts token k, and a span that
  starts the sequence loses its first group (nothing predicts it).
* the sample's loss: d summed over the aligned positions, divided by their number; with
  `uld_use_hybrid_loss=True` instead, the vocabulary is split into the tokens both tokenizers have (the same string)
  and the others: w_m · JSD_β(matched) + w_u · d(unmatched)/n, the JSD over the matched tokens' merged probabilities
  (a `batchmean` over the aligned positions, `beta`), d over the unmatched ones sorted; w_m, w_u are
  `uld_hybrid_matched_weight` / `uld_hybrid_unmatched_weight`, or (both None) the matched share of the teacher's
  vocabulary and its complement.

    L = uld_crossentropy_weight · CE(student, labels) + uld_distillation_weight · mean over samples of the sample's loss

the cross-entropy (only when its weight is > 0) being the student's mean next-token negative log-likelihood of its
labels (logits without temperature). A batch with no answer token on either side gives 0 (connected to the student's
logits).

Pure torch; the vocabularies of the hybrid form are plain `{token string: id}` dicts (a tokenizer's `get_vocab()`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F

from .distillation import generalized_jsd_terms
from .gkd import gkd_loss

IGNORE_INDEX = -100
"""The label of a position without a target (prompt, padding)."""

PROBABILITY_FLOOR = 1e-8
"""The floor of a probability before its log (the JSD on probabilities) or in a merged group's product."""

JSD_REDUCTIONS = ("batchmean", "sum", "mean", "none")
"""The reductions of `generalized_jsd_loss` (TRL's)."""

TOKEN_MERGE_STRATEGIES = ("observed", "bayesian")
"""How `ULDLoss` merges the distributions of a group of tokens (and where it reads the answer logits)."""

ULD_SETTINGS = (
    "uld_crossentropy_weight",
    "uld_distillation_weight",
    "uld_student_temperature",
    "uld_teacher_temperature",
    "uld_skip_student_eos",
    "uld_skip_teacher_eos",
    "use_extended_uld",
    "uld_token_merge_strategy",
    "uld_use_hybrid_loss",
    "uld_hybrid_matched_weight",
    "uld_hybrid_unmatched_weight",
    "beta",
)
"""`ULDLoss`'s settings: the names of TRL's `GOLDConfig` fields that configure it."""


def _check_real(owner: str, name: str, value: object, *, low: float, strict: bool, high: float | None = None) -> None:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if strict else value >= low) and (high is None or value <= high)
    if not ok:
        bound = f"> {low:g}" if strict else f">= {low:g}" if high is None else f"in [{low:g}, {high:g}]"
        raise ValueError(f"{owner}: {name}={value!r} is not valid; must be a finite number {bound}")


def _check_bool(owner: str, name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{owner}: {name}={value!r} is not valid; must be True or False")


def check_uld_settings(owner: str, settings: Mapping[str, object]) -> None:
    """Check `ULDLoss`'s settings (`ULD_SETTINGS`, by `GOLDConfig`'s names); a ValueError names the field and its
    allowed values (`owner` starts the message)."""
    unknown = sorted(set(settings) - set(ULD_SETTINGS))
    if unknown:
        raise ValueError(f"{owner}: unknown ULD setting(s) {', '.join(unknown)}; valid: {', '.join(ULD_SETTINGS)}")
    for name in ("uld_crossentropy_weight", "uld_distillation_weight"):
        if name in settings:
            _check_real(owner, name, settings[name], low=0.0, strict=False)
    for name in ("uld_student_temperature", "uld_teacher_temperature"):
        if name in settings:
            _check_real(owner, name, settings[name], low=0.0, strict=True)
    for name in ("uld_skip_student_eos", "uld_skip_teacher_eos", "use_extended_uld", "uld_use_hybrid_loss"):
        if name in settings:
            _check_bool(owner, name, settings[name])
    strategy = settings.get("uld_token_merge_strategy", "observed")
    if strategy not in TOKEN_MERGE_STRATEGIES:
        raise ValueError(
            f"{owner}: uld_token_merge_strategy={strategy!r} is not valid; must be one of "
            f"{', '.join(map(repr, TOKEN_MERGE_STRATEGIES))}"
        )
    if "beta" in settings:
        _check_real(owner, "beta", settings["beta"], low=0.0, strict=False, high=1.0)
    matched, unmatched = settings.get("uld_hybrid_matched_weight"), settings.get("uld_hybrid_unmatched_weight")
    if (matched is None) != (unmatched is None):
        raise ValueError(
            f"{owner}: uld_hybrid_matched_weight={matched!r} and uld_hybrid_unmatched_weight={unmatched!r} are not "
            "valid together; both must be None (weights from the vocabularies' overlap) or both numbers >= 0"
        )
    if matched is not None:
        _check_real(owner, "uld_hybrid_matched_weight", matched, low=0.0, strict=False)
        _check_real(owner, "uld_hybrid_unmatched_weight", unmatched, low=0.0, strict=False)


def generalized_jsd_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor | None = None,
    beta: float = 0.5,
    temperature: float = 1.0,
    reduction: str = "batchmean",
    logits_are_probs: bool = False,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """TRL's `GOLDTrainer.generalized_jsd_loss`: the generalized JSD (`beta`) between the student's and the
    teacher's distributions over the last dimension, reduced over the labelled positions (see the module docstring).
    On logits it is GKD's loss, `trl_ext.losses.gkd.gkd_loss`; GOLD adds probabilities as inputs.

    Args:
        student_logits: `[..., V]` logits (or probabilities with `logits_are_probs`), differentiable.
        teacher_logits: `[..., V]`, the same shape.
        labels: `[...]` (the logits' leading shape), −100 where a position is not scored; None: every position.
        beta: In [0, 1]: 0 the forward KL(p_t ‖ p_s), 1 the reverse KL(p_s ‖ p_t), between: the generalized JSD.
        temperature: > 0; the logits are divided by it (not with `logits_are_probs`).
        reduction: `batchmean`, `sum`, `mean` or `none` (the terms; ignored when `num_items_in_batch` is given).
        logits_are_probs: The inputs are probabilities: their log (floored at 1e-8) is used as is.
        num_items_in_batch: The sum is divided by it (a number or a tensor) instead of `reduction`'s count.

    Returns:
        The scalar loss, or with `reduction="none"` the `[positions, V]` terms (the logits' shape without labels).

    Raises:
        ValueError: `beta` outside [0, 1], `temperature` not > 0, an unknown `reduction`, or mismatched shapes.
    """
    owner = "generalized_jsd_loss"
    _check_real(owner, "beta", beta, low=0.0, strict=False, high=1.0)
    _check_real(owner, "temperature", temperature, low=0.0, strict=True)
    if reduction not in JSD_REDUCTIONS:
        raise ValueError(f"{owner}: reduction={reduction!r} is not valid; must be one of {', '.join(JSD_REDUCTIONS)}")
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"{owner}: student_logits {tuple(student_logits.shape)} and teacher_logits "
            f"{tuple(teacher_logits.shape)} must have the same shape"
        )
    if labels is not None and labels.shape != student_logits.shape[:-1]:
        raise ValueError(
            f"{owner}: labels {tuple(labels.shape)} must have the logits' leading shape "
            f"{tuple(student_logits.shape[:-1])}"
        )
    if not logits_are_probs:
        return gkd_loss(student_logits, teacher_logits, labels, beta, temperature, reduction, num_items_in_batch)
    student = student_logits.clamp_min(PROBABILITY_FLOOR).log()
    teacher = teacher_logits.clamp_min(PROBABILITY_FLOOR).log()
    terms = generalized_jsd_terms(student, teacher, float(beta))  # [..., V]
    if labels is not None:
        terms = terms[labels != IGNORE_INDEX]
    if num_items_in_batch is not None:
        if isinstance(num_items_in_batch, torch.Tensor):
            num_items_in_batch = num_items_in_batch.to(terms.device)
        return terms.sum() / num_items_in_batch
    if reduction == "batchmean":  # per labelled position (per row of the first dimension without labels), 0 for none
        return terms.sum() / max(terms.size(0), 1)
    if reduction == "sum":
        return terms.sum()
    return terms.mean() if reduction == "mean" else terms


def answer_spans(labels: torch.Tensor) -> tuple[list[int], list[int]]:
    """Per row of `labels` `[B, T]`: the first position whose label is not −100 and the number of such positions
    (0 and 0 for a row without any)."""
    starts, sizes = [], []
    for row in labels:
        scored = row.ne(IGNORE_INDEX)
        if not scored.any():
            starts.append(0)
            sizes.append(0)
            continue
        starts.append(int(scored.nonzero(as_tuple=True)[0][0].item()))
        sizes.append(int(scored.sum().item()))
    return starts, sizes


def align_by_byte_offsets(
    student_offsets: Sequence[Sequence[int]], teacher_offsets: Sequence[Sequence[int]]
) -> tuple[list[list[int]], list[list[int]]]:
    """Group two tokenizations of one text: walk both `(start, end)` byte-offset lists, advancing the side whose
    current token ends first, and close a group where both end at the same byte. Returns the student's and the
    teacher's groups of positions (the same count); what is left when one side runs out is one last group."""
    student_groups: list[list[int]] = []
    teacher_groups: list[list[int]] = []
    s_start = t_start = s = t = 0
    n_s, n_t = len(student_offsets), len(teacher_offsets)
    while s < n_s and t < n_t:
        s_end, t_end = student_offsets[s][1], teacher_offsets[t][1]
        if s_end < t_end:
            s += 1
        elif s_end > t_end:
            t += 1
        else:
            s += 1
            t += 1
            student_groups.append(list(range(s_start, s)))
            teacher_groups.append(list(range(t_start, t)))
            s_start, t_start = s, t
    if s < n_s or t < n_t:
        student_groups.append(list(range(s_start, n_s)))
        teacher_groups.append(list(range(t_start, n_t)))
    return student_groups, teacher_groups


def merge_group_probabilities(
    probs: torch.Tensor, groups: Sequence[Sequence[int]], token_ids: Sequence[int], strategy: str
) -> torch.Tensor:
    """One distribution per group of positions of `probs` `[n, V]` (`[len(groups), V]`; `probs` itself without
    groups): a single position's own; several positions' by the chain rule (`strategy`, see the module docstring),
    the actual tokens `token_ids` giving the scalar factors; an empty group zeros."""
    if not groups:
        return probs
    rows = []
    for group in groups:
        if len(group) > 1:
            base, scalar_positions = (
                (probs[group[-1]], group[:-1]) if strategy == "bayesian" else (probs[group[0]], group[1:])
            )
            product: torch.Tensor | float = 1.0
            for position in scalar_positions:
                product = product * probs[position, token_ids[position]].clamp_min(PROBABILITY_FLOOR)
            rows.append(base * product)
        elif len(group) == 1:
            rows.append(probs[group[0]])
        else:
            rows.append(torch.zeros_like(probs[0]))
    return torch.stack(rows)


def sorted_probability_distance(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Σ over rows and ranks of |p_s^(k) − p_t^(k)|: each row of `student` `[n, V_s]` and `teacher` `[n, V_t]`
    sorted in decreasing order, the shorter zero-padded to the longer vocabulary."""
    student_sorted = student.sort(dim=-1, descending=True).values
    teacher_sorted = teacher.sort(dim=-1, descending=True).values
    width = max(student_sorted.size(-1), teacher_sorted.size(-1))
    student_sorted = F.pad(student_sorted, (0, width - student_sorted.size(-1)))
    teacher_sorted = F.pad(teacher_sorted, (0, width - teacher_sorted.size(-1)))
    return F.l1_loss(student_sorted, teacher_sorted, reduction="sum")


class VocabularyOverlap:
    """The tokens two vocabularies (`{token string: id}`) share: for each shared string, its teacher id and student
    id (`teacher_ids` ascending, `student_ids` in the same order), as `[M]` tensors."""

    def __init__(self, student_vocab: Mapping[str, int], teacher_vocab: Mapping[str, int]):
        mapping = {
            teacher_id: student_vocab[token] for token, teacher_id in teacher_vocab.items() if token in student_vocab
        }
        if not mapping:
            raise ValueError(
                "ULDLoss: uld_use_hybrid_loss=True needs vocabularies that share tokens, but the student's and the "
                "teacher's have no token string in common; set uld_use_hybrid_loss=False"
            )
        teacher_ids = sorted(mapping)
        self.teacher_ids = torch.tensor(teacher_ids, dtype=torch.long)
        self.student_ids = torch.tensor([mapping[i] for i in teacher_ids], dtype=torch.long)

    def on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The teacher's and the student's ids on `device` (moved once)."""
        if self.teacher_ids.device != device:
            self.teacher_ids, self.student_ids = self.teacher_ids.to(device), self.student_ids.to(device)
        return self.teacher_ids, self.student_ids


class ULDLoss:
    """TRL's `ULDLoss` (`trl.experimental.gold`): Universal Logit Distillation with GOLD's token alignment and the
    hybrid ULD + JSD form (see the module docstring for the formulas).

        loss_fn = ULDLoss(use_extended_uld=True, uld_token_merge_strategy="bayesian")
        loss = loss_fn(student_logits=s, teacher_logits=t, student_labels=sl, teacher_labels=tl,
                       student_input_ids=si, teacher_input_ids=ti, student_byte_offsets=so, teacher_byte_offsets=to)

    Args:
        uld_crossentropy_weight: Weight (>= 0) of the student's cross-entropy on its labels; 0: not computed.
        uld_distillation_weight: Weight (>= 0) of the distillation term.
        uld_student_temperature: The student's softmax temperature (> 0).
        uld_teacher_temperature: The teacher's softmax temperature (> 0).
        uld_skip_student_eos: Leave the last answer position of the student (its EOS) out.
        uld_skip_teacher_eos: Leave the last answer position of the teacher (its EOS) out.
        use_extended_uld: Align by byte offsets and merge split tokens (GOLD); False: positional truncation (ULD).
        uld_token_merge_strategy: `observed` or `bayesian`.
        uld_use_hybrid_loss: JSD over the tokens both vocabularies share, sorted distance over the others.
        uld_hybrid_matched_weight: The JSD part's weight (>= 0), or None (with the other: adaptive weights).
        uld_hybrid_unmatched_weight: The sorted part's weight (>= 0), or None.
        beta: The hybrid JSD's β, in [0, 1].
        student_vocab: `{token string: id}` of the student's tokenizer (the hybrid form needs both vocabularies).
        teacher_vocab: `{token string: id}` of the teacher's tokenizer.

    Attributes:
        last_matched_loss, last_unmatched_loss: The hybrid form's two parts for the last sample it scored (set by
            the hybrid form only: TRL's trainer logs them as `matched_loss` / `unmatched_loss` when present).

    Raises:
        ValueError: A setting outside its allowed values (named), the hybrid form without both vocabularies or with
            vocabularies that share no token.
    """

    def __init__(
        self,
        *,
        uld_crossentropy_weight: float = 0.0,
        uld_distillation_weight: float = 1.0,
        uld_student_temperature: float = 1.0,
        uld_teacher_temperature: float = 1.0,
        uld_skip_student_eos: bool = True,
        uld_skip_teacher_eos: bool = True,
        use_extended_uld: bool = True,
        uld_token_merge_strategy: str = "observed",
        uld_use_hybrid_loss: bool = False,
        uld_hybrid_matched_weight: float | None = None,
        uld_hybrid_unmatched_weight: float | None = None,
        beta: float = 0.5,
        student_vocab: Mapping[str, int] | None = None,
        teacher_vocab: Mapping[str, int] | None = None,
    ):
        check_uld_settings(
            "ULDLoss",
            {
                "uld_crossentropy_weight": uld_crossentropy_weight,
                "uld_distillation_weight": uld_distillation_weight,
                "uld_student_temperature": uld_student_temperature,
                "uld_teacher_temperature": uld_teacher_temperature,
                "uld_skip_student_eos": uld_skip_student_eos,
                "uld_skip_teacher_eos": uld_skip_teacher_eos,
                "use_extended_uld": use_extended_uld,
                "uld_token_merge_strategy": uld_token_merge_strategy,
                "uld_use_hybrid_loss": uld_use_hybrid_loss,
                "uld_hybrid_matched_weight": uld_hybrid_matched_weight,
                "uld_hybrid_unmatched_weight": uld_hybrid_unmatched_weight,
                "beta": beta,
            },
        )
        self.crossentropy_weight = uld_crossentropy_weight
        self.distillation_weight = uld_distillation_weight
        self.student_temperature = uld_student_temperature
        self.teacher_temperature = uld_teacher_temperature
        self.skip_student_eos = uld_skip_student_eos
        self.skip_teacher_eos = uld_skip_teacher_eos
        self.use_extended_uld = use_extended_uld
        self.token_merge_strategy = uld_token_merge_strategy
        self.use_hybrid_loss = uld_use_hybrid_loss
        self.hybrid_matched_weight = uld_hybrid_matched_weight
        self.hybrid_unmatched_weight = uld_hybrid_unmatched_weight
        self.beta = beta
        self.overlap = None
        if uld_use_hybrid_loss:
            if student_vocab is None or teacher_vocab is None:
                raise ValueError(
                    "ULDLoss: uld_use_hybrid_loss=True needs student_vocab and teacher_vocab (each tokenizer's "
                    "get_vocab()), to tell the tokens both vocabularies share"
                )
            self.overlap = VocabularyOverlap(student_vocab, teacher_vocab)

    def __call__(
        self,
        student_logits: torch.Tensor,
        teacher_logits: torch.Tensor,
        student_labels: torch.Tensor,
        teacher_labels: torch.Tensor,
        student_input_ids: torch.Tensor,
        teacher_input_ids: torch.Tensor,
        student_byte_offsets: torch.Tensor | None = None,
        teacher_byte_offsets: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The loss of a batch (TRL's calling convention).

        Args:
            student_logits: `[B, T_s, V_s]`, differentiable.
            teacher_logits: `[B, T_t, V_t]`.
            student_labels: `[B, T_s]`, −100 outside the answer.
            teacher_labels: `[B, T_t]`, likewise.
            student_input_ids: `[B, T_s]`, the tokens (read where split tokens are merged).
            teacher_input_ids: `[B, T_t]`.
            student_byte_offsets: `[B, T_s, 2]` UTF-8 `(start, end)` of each answer token relative to the answer's
                text; needed with `use_extended_uld`.
            teacher_byte_offsets: `[B, T_t, 2]`, in the same coordinates.

        Returns:
            The scalar loss (shape `[1]` when no sample has an answer token, as TRL's).

        Raises:
            ValueError: Byte offsets missing with `use_extended_uld=True`.
        """
        if self.crossentropy_weight > 0:
            shift_logits = student_logits[..., :-1, :]
            shift_labels = student_labels[..., 1:]
            crossentropy = F.cross_entropy(
                shift_logits.reshape(-1, shift_logits.size(-1)), shift_labels.reshape(-1), ignore_index=IGNORE_INDEX
            )
            crossentropy = self.crossentropy_weight * crossentropy
        else:
            crossentropy = 0.0
        return crossentropy + self.distillation_loss(
            student_logits,
            teacher_logits,
            student_labels,
            teacher_labels,
            student_input_ids,
            teacher_input_ids,
            student_byte_offsets,
            teacher_byte_offsets,
        )

    def distillation_loss(
        self,
        student_logits: torch.Tensor,
        teacher_logits: torch.Tensor,
        student_labels: torch.Tensor,
        teacher_labels: torch.Tensor,
        student_input_ids: torch.Tensor,
        teacher_input_ids: torch.Tensor,
        student_byte_offsets: torch.Tensor | None = None,
        teacher_byte_offsets: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`uld_distillation_weight` × the mean over samples of each sample's aligned loss (no cross-entropy)."""
        student_starts, student_sizes = answer_spans(student_labels)
        teacher_starts, teacher_sizes = answer_spans(teacher_labels)
        if self.skip_student_eos:
            student_sizes = [size - 1 for size in student_sizes]
        if self.skip_teacher_eos:
            teacher_sizes = [size - 1 for size in teacher_sizes]
        if not student_sizes or not teacher_sizes or max(max(student_sizes), max(teacher_sizes)) <= 0:
            # TRL's value and shape for a batch without answers: 0, shape [1], connected to the student's logits
            return torch.zeros(1, device=student_logits.device) * student_logits.sum() * 1e-8
        losses = [
            self.sample_loss(
                i,
                student_logits,
                teacher_logits,
                (student_starts[i], student_sizes[i]),
                (teacher_starts[i], teacher_sizes[i]),
                student_input_ids,
                teacher_input_ids,
                student_byte_offsets,
                teacher_byte_offsets,
            )
            for i in range(student_logits.size(0))
        ]
        return self.distillation_weight * torch.stack(losses).mean()

    def _offsets(self, offsets: torch.Tensor | None, i: int, start: int, size: int) -> list[list[int]]:
        if offsets is None:
            raise ValueError(
                "ULDLoss: use_extended_uld=True aligns the two tokenizations by byte offsets; pass "
                "student_byte_offsets and teacher_byte_offsets, or set use_extended_uld=False"
            )
        return offsets[i, start : start + size].tolist()

    def sample_loss(
        self,
        i: int,
        student_logits: torch.Tensor,
        teacher_logits: torch.Tensor,
        student_span: tuple[int, int],
        teacher_span: tuple[int, int],
        student_input_ids: torch.Tensor,
        teacher_input_ids: torch.Tensor,
        student_byte_offsets: torch.Tensor | None,
        teacher_byte_offsets: torch.Tensor | None,
    ) -> torch.Tensor:
        """Sample `i`'s aligned loss, its answer spans given as `(start, size)` (sizes after the EOS skips)."""
        (s_start, s_size), (t_start, t_size) = student_span, teacher_span
        unscored = student_logits[i].sum() * 0.0
        if s_size <= 0 or t_size <= 0:
            return unscored
        bayesian = self.token_merge_strategy == "bayesian"
        if bayesian and (s_start == 0 or t_start == 0):  # nothing predicts the span's first token: drop its group
            if self.use_extended_uld:
                s_groups, t_groups = align_by_byte_offsets(
                    self._offsets(student_byte_offsets, i, s_start, s_size),
                    self._offsets(teacher_byte_offsets, i, t_start, t_size),
                )
                if not s_groups or not t_groups:
                    return unscored
                s_drop, t_drop = len(s_groups[0]), len(t_groups[0])
            else:
                s_drop = t_drop = 1
            s_start, s_size, t_start, t_size = s_start + s_drop, s_size - s_drop, t_start + t_drop, t_size - t_drop
            if s_size <= 0 or t_size <= 0:
                return unscored
        shift = 1 if bayesian else 0
        student_probs = F.softmax(
            student_logits[i, s_start - shift : s_start + s_size - shift] / self.student_temperature, dim=-1
        )
        teacher_probs = F.softmax(
            teacher_logits[i, t_start - shift : t_start + t_size - shift] / self.teacher_temperature, dim=-1
        )
        student_tokens = student_input_ids[i, s_start : s_start + s_size].tolist()
        teacher_tokens = teacher_input_ids[i, t_start : t_start + t_size].tolist()
        if self.use_extended_uld:
            s_groups, t_groups = align_by_byte_offsets(
                self._offsets(student_byte_offsets, i, s_start, s_size),
                self._offsets(teacher_byte_offsets, i, t_start, t_size),
            )
            # a pair with an empty side (the teacher's zero-width EOS left over) would merge to zeros: dropped
            pairs = [(sg, tg) for sg, tg in zip(s_groups, t_groups, strict=False) if sg and tg]
            strategy = self.token_merge_strategy
            student_aligned = merge_group_probabilities(
                student_probs, [sg for sg, _ in pairs], student_tokens, strategy
            )
            teacher_aligned = merge_group_probabilities(
                teacher_probs, [tg for _, tg in pairs], teacher_tokens, strategy
            )
        else:
            length = min(len(student_tokens), len(teacher_tokens))
            student_aligned, teacher_aligned = student_probs[:length], teacher_probs[:length]
        if self.overlap is not None:
            return self.hybrid_loss(student_aligned, teacher_aligned)
        return sorted_probability_distance(student_aligned, teacher_aligned) / student_aligned.size(0)

    def hybrid_loss(self, student_aligned: torch.Tensor, teacher_aligned: torch.Tensor) -> torch.Tensor:
        """w_m · JSD over the shared tokens + w_u · the sorted distance over the others, of aligned `[n, V_s]` /
        `[n, V_t]` distributions; the two parts are kept as `last_matched_loss` / `last_unmatched_loss`."""
        device = student_aligned.device
        teacher_ids, student_ids = self.overlap.on(device)
        teacher_vocab_size = teacher_aligned.size(-1)
        teacher_matched = torch.zeros(teacher_vocab_size, dtype=torch.bool, device=device)
        student_matched = torch.zeros(student_aligned.size(-1), dtype=torch.bool, device=device)
        teacher_matched[teacher_ids] = True
        student_matched[student_ids] = True
        matched_loss = generalized_jsd_loss(
            student_aligned[:, student_ids],
            teacher_aligned[:, teacher_ids],
            beta=self.beta,
            reduction="batchmean",
            logits_are_probs=True,
        )
        teacher_rest, student_rest = teacher_aligned[:, ~teacher_matched], student_aligned[:, ~student_matched]
        unmatched_loss = torch.tensor(0.0, device=device)
        if teacher_rest.size(-1) > 0 and student_rest.size(-1) > 0:
            unmatched_loss = sorted_probability_distance(student_rest, teacher_rest) / student_aligned.size(0)
        if self.hybrid_matched_weight is None:
            matched_weight = len(teacher_ids) / max(1, teacher_vocab_size)
            unmatched_weight = 1.0 - matched_weight
        else:
            matched_weight, unmatched_weight = self.hybrid_matched_weight, self.hybrid_unmatched_weight
        self.last_matched_loss, self.last_unmatched_loss = matched_loss, unmatched_loss
        return matched_weight * matched_loss + unmatched_weight * unmatched_loss
