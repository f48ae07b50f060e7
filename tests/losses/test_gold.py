"""GOLD's losses (`trl_ext.losses.gold`) against TRL 1.16's own (`trl.experimental.gold`): the generalized JSD of
`GOLDTrainer.generalized_jsd_loss` and `ULDLoss`, option by option, on the same inputs (equal values and gradients),
with two different tokenizers built offline for the cross-tokenizer case; closed forms; bad settings."""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import pytest
import torch
from trainer_helpers import build_cross_tokenizer
from trl.experimental.gold.gold_trainer import GOLDTrainer as TRLGOLDTrainer
from trl.experimental.gold.gold_trainer import ULDLoss as TRLULDLoss
from trl.experimental.gold.gold_trainer import build_teacher_inputs_from_texts

from trl_ext.losses.gold import (
    ULD_SETTINGS,
    ULDLoss,
    align_by_byte_offsets,
    check_uld_settings,
    generalized_jsd_loss,
    merge_group_probabilities,
    sorted_probability_distance,
)
from trl_ext.toy import build_tokenizer

# ---- the generalized JSD ------------------------------------------------------------------------------------------


def _jsd_inputs(seed: int = 0, shape=(3, 5, 11)):
    generator = torch.Generator().manual_seed(seed)
    student = torch.randn(*shape, generator=generator, dtype=torch.float64)
    teacher = torch.randn(*shape, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, shape[-1], shape[:-1], generator=generator)
    labels[0, :2] = -100
    labels[2, 3:] = -100
    return student, teacher, labels


def _value_and_grad(fn, student, *args, **kwargs):
    student = student.clone().requires_grad_(True)
    value = fn(student, *args, **kwargs)
    (grad,) = torch.autograd.grad(value.sum(), student)
    return value.detach(), grad


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 1.0])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("reduction", ["batchmean", "sum", "mean"])
@pytest.mark.parametrize("masked", [False, True])
def test_generalized_jsd_equals_trls(beta, temperature, reduction, masked):
    student, teacher, labels = _jsd_inputs()
    options = dict(labels=labels if masked else None, beta=beta, temperature=temperature, reduction=reduction)
    ours = _value_and_grad(generalized_jsd_loss, student, teacher, **options)
    theirs = _value_and_grad(TRLGOLDTrainer.generalized_jsd_loss, student, teacher, **options)
    assert ours[0].shape == theirs[0].shape == ()
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b)
    assert ours[1].abs().sum() > 0  # the gradient reaches the student


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("num_items", [7, torch.tensor(4.0)])
def test_generalized_jsd_over_num_items_in_batch_equals_trls(beta, num_items):
    student, teacher, labels = _jsd_inputs(1)
    options = dict(labels=labels, beta=beta, temperature=0.9, num_items_in_batch=num_items, reduction="sum")
    ours = _value_and_grad(generalized_jsd_loss, student, teacher, **options)
    theirs = _value_and_grad(TRLGOLDTrainer.generalized_jsd_loss, student, teacher, **options)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
@pytest.mark.parametrize("reduction", ["batchmean", "sum", "mean"])
def test_generalized_jsd_on_probabilities_equals_trls(beta, reduction):
    """The hybrid ULD's form: unnormalized probabilities (a vocabulary's shared part), floored at 1e-8."""
    student, teacher, _ = _jsd_inputs(2, shape=(3, 6, 9))
    student, teacher = student.softmax(-1)[0, :, :7], teacher.softmax(-1)[0, :, :7]
    teacher[0, 0] = 0.0  # below the floor
    options = dict(beta=beta, logits_are_probs=True, reduction=reduction)
    ours = _value_and_grad(generalized_jsd_loss, student, teacher, **options)
    theirs = _value_and_grad(TRLGOLDTrainer.generalized_jsd_loss, student, teacher, **options)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b)


def test_generalized_jsd_without_scored_positions_is_zero_as_trls():
    student, teacher, labels = _jsd_inputs(3)
    labels = torch.full_like(labels, -100)
    ours = _value_and_grad(generalized_jsd_loss, student, teacher, labels=labels)
    theirs = _value_and_grad(TRLGOLDTrainer.generalized_jsd_loss, student, teacher, labels=labels)
    assert ours[0] == theirs[0] == 0
    torch.testing.assert_close(ours[1], theirs[1])


def test_generalized_jsd_closed_form():
    """Two categories: forward KL, reverse KL and the β = ½ JSD written out."""
    p_s, p_t = torch.tensor([[0.25, 0.75]]), torch.tensor([[0.5, 0.5]])
    logits_s, logits_t = p_s.log(), p_t.log()
    kl = lambda p, q: float((p * (p / q).log()).sum())  # noqa: E731
    m = 0.5 * (p_s + p_t)
    assert generalized_jsd_loss(logits_s, logits_t, beta=0.0).item() == pytest.approx(kl(p_t, p_s), rel=1e-6)
    assert generalized_jsd_loss(logits_s, logits_t, beta=1.0).item() == pytest.approx(kl(p_s, p_t), rel=1e-6)
    jsd = 0.5 * kl(p_t, m) + 0.5 * kl(p_s, m)
    assert generalized_jsd_loss(logits_s, logits_t, beta=0.5).item() == pytest.approx(jsd, rel=1e-6)
    # the sum over three positions of the same pair, batchmean: divided by the 3 rows
    three = generalized_jsd_loss(logits_s.expand(3, 2), logits_t.expand(3, 2), beta=0.5, reduction="sum")
    assert three.item() == pytest.approx(3 * jsd, rel=1e-6)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"beta": 1.5}, r"beta=1.5 is not valid; must be a finite number in \[0, 1\]"),
        ({"temperature": 0.0}, r"temperature=0.0 is not valid; must be a finite number > 0"),
        (
            {"reduction": "elementwise"},
            r"reduction='elementwise' is not valid; must be one of batchmean, sum, mean, "
            r"none",
        ),
    ],
)
def test_generalized_jsd_bad_arguments(options, match):
    student, teacher, _ = _jsd_inputs()
    with pytest.raises(ValueError, match=rf"^generalized_jsd_loss: {match}"):
        generalized_jsd_loss(student, teacher, **options)


@pytest.mark.parametrize("probabilities", [False, True])
def test_generalized_jsd_reduction_none_gives_trls_terms(probabilities):
    student, teacher, labels = _jsd_inputs(4)
    if probabilities:
        student, teacher = student.softmax(-1)[..., :8], teacher.softmax(-1)[..., :8]
    options = dict(labels=labels, beta=0.3, reduction="none", logits_are_probs=probabilities)
    ours, theirs = (
        generalized_jsd_loss(student, teacher, **options),
        TRLGOLDTrainer.generalized_jsd_loss(student, teacher, **options),
    )
    assert ours.shape == theirs.shape == (int((labels != -100).sum()), student.size(-1))
    torch.testing.assert_close(ours, theirs)


# ---- ULD: the batches -------------------------------------------------------------------------------------------

PROMPTS = ["Repeat the letter c:", "Repeat the letter d:", "Say héllo:"]
COMPLETIONS = [" c c c", " d d d d", " héllo wörld c c"]
EXTRA_ROWS = 4  # the student model's vocabulary is larger than its tokenizer's (padded embedding rows)


@functools.cache
def _tokenizers():
    return build_tokenizer(), build_cross_tokenizer()


def _uld_batch(cross: bool, prompts=PROMPTS, completions=COMPLETIONS, seed: int = 0) -> dict:
    """The same texts tokenized by the student's and the teacher's tokenizer (TRL's own builder, completion-relative
    byte offsets), with random logits of each model's vocabulary."""
    student_tok, teacher_tok = _tokenizers()
    teacher_tok = teacher_tok if cross else student_tok
    generator = torch.Generator().manual_seed(seed)
    batch = {}
    for side, tok, extra in (("student", student_tok, EXTRA_ROWS), ("teacher", teacher_tok, 0)):
        ids, labels, _, offsets = build_teacher_inputs_from_texts(tok, prompts, completions)
        batch[f"{side}_input_ids"], batch[f"{side}_labels"], batch[f"{side}_byte_offsets"] = ids, labels, offsets
        shape = (*ids.shape, len(tok) + extra)
        batch[f"{side}_logits"] = 2.0 * torch.randn(*shape, generator=generator, dtype=torch.float64)
    return batch


def _trl_config(**settings) -> SimpleNamespace:
    defaults = dict(
        uld_crossentropy_weight=0.0,
        uld_distillation_weight=1.0,
        uld_student_temperature=1.0,
        uld_teacher_temperature=1.0,
        uld_skip_student_eos=True,
        uld_skip_teacher_eos=True,
        use_extended_uld=True,
        uld_token_merge_strategy="observed",
        uld_use_hybrid_loss=False,
        uld_hybrid_matched_weight=None,
        uld_hybrid_unmatched_weight=None,
        beta=0.5,
    )
    assert set(defaults) == set(ULD_SETTINGS)
    return SimpleNamespace(**{**defaults, **settings})


def _both_losses(cross: bool, **settings):
    student_tok, teacher_tok = _tokenizers()
    teacher_tok = teacher_tok if cross else student_tok
    theirs = TRLULDLoss(_trl_config(**settings), student_tokenizer=student_tok, teacher_tokenizer=teacher_tok)
    ours = ULDLoss(**settings, student_vocab=student_tok.get_vocab(), teacher_vocab=teacher_tok.get_vocab())
    return ours, theirs


def _uld_value_and_grad(loss_fn, batch: dict):
    student_logits = batch["student_logits"].clone().requires_grad_(True)
    value = loss_fn(**{**batch, "student_logits": student_logits})
    (grad,) = torch.autograd.grad(value.sum(), student_logits)
    return value.detach(), grad


def _assert_uld_equal(cross: bool, batch: dict | None = None, **settings):
    batch = batch if batch is not None else _uld_batch(cross)
    ours, theirs = _both_losses(cross, **settings)
    (value, grad), (trl_value, trl_grad) = _uld_value_and_grad(ours, batch), _uld_value_and_grad(theirs, batch)
    assert value.shape == trl_value.shape
    torch.testing.assert_close(value, trl_value)
    torch.testing.assert_close(grad, trl_grad)
    if settings.get("uld_use_hybrid_loss"):
        torch.testing.assert_close(ours.last_matched_loss.detach(), theirs.last_matched_loss.detach())
        torch.testing.assert_close(ours.last_unmatched_loss.detach(), theirs.last_unmatched_loss.detach())
    return value, grad


HYBRID = {
    "off": {},
    "adaptive": {"uld_use_hybrid_loss": True},
    "fixed": {"uld_use_hybrid_loss": True, "uld_hybrid_matched_weight": 0.3, "uld_hybrid_unmatched_weight": 1.5},
}


@pytest.mark.parametrize("cross", [True, False], ids=["two-tokenizers", "one-tokenizer"])
@pytest.mark.parametrize("extended", [True, False], ids=["byte-aligned", "truncated"])
@pytest.mark.parametrize("strategy", ["observed", "bayesian"])
@pytest.mark.parametrize("hybrid", sorted(HYBRID))
def test_uld_equals_trls(cross, extended, strategy, hybrid):
    value, grad = _assert_uld_equal(
        cross, use_extended_uld=extended, uld_token_merge_strategy=strategy, beta=0.3, **HYBRID[hybrid]
    )
    assert value.item() > 0 and grad.abs().sum() > 0


@pytest.mark.parametrize(
    "settings",
    [
        {"uld_crossentropy_weight": 0.5},
        {"uld_crossentropy_weight": 0.5, "uld_distillation_weight": 0.0},
        {"uld_distillation_weight": 2.5},
        {"uld_student_temperature": 0.7, "uld_teacher_temperature": 1.6},
        {"uld_skip_student_eos": False},
        {"uld_skip_teacher_eos": False},
        {"uld_skip_student_eos": False, "uld_skip_teacher_eos": False, "uld_token_merge_strategy": "bayesian"},
        {"uld_skip_teacher_eos": False, "use_extended_uld": False},
        {"uld_use_hybrid_loss": True, "beta": 0.0, "uld_student_temperature": 2.0},
        {"uld_use_hybrid_loss": True, "beta": 1.0, "uld_skip_teacher_eos": False},
        {"uld_use_hybrid_loss": True, "uld_hybrid_matched_weight": 0.0, "uld_hybrid_unmatched_weight": 0.0},
    ],
    ids=lambda settings: ",".join(f"{k.removeprefix('uld_')}={v}" for k, v in settings.items()),
)
def test_uld_options_equal_trls_across_tokenizers(settings):
    _assert_uld_equal(True, **settings)


@pytest.mark.parametrize("strategy", ["observed", "bayesian"])
@pytest.mark.parametrize("extended", [True, False])
def test_uld_with_an_answer_that_starts_the_sequence_equals_trls(strategy, extended):
    """No prompt: the bayesian strategy has no logit before the answer and drops its first aligned group."""
    batch = _uld_batch(True, prompts=["", "Repeat the letter c:", ""])
    _assert_uld_equal(True, batch, uld_token_merge_strategy=strategy, use_extended_uld=extended)


def test_uld_with_empty_answers_equals_trls():
    """One row's answer is only its EOS (skipped): that row counts as 0 in the mean. No answer anywhere: 0, shape
    [1], as TRL's."""
    one_empty = _uld_batch(True, completions=["", " d d", " c"])
    _assert_uld_equal(True, one_empty)
    all_empty = _uld_batch(True, completions=["", "", ""])
    value, grad = _assert_uld_equal(True, all_empty, uld_token_merge_strategy="bayesian")
    assert value.shape == (1,) and value.item() == 0 and not grad.any()


def test_uld_needs_byte_offsets_when_extended():
    batch = {**_uld_batch(True), "student_byte_offsets": None}
    with pytest.raises(ValueError, match=r"^ULDLoss: use_extended_uld=True aligns the two tokenizations by byte"):
        ULDLoss()(**batch)
    ULDLoss(use_extended_uld=False)(**batch)  # positional: offsets unused


# ---- ULD: closed forms --------------------------------------------------------------------------------------------


def test_sorted_distance_closed_form():
    """ULD's transport distance between [0.5, 0.3, 0.2] and [0.6, 0.4] (padded with 0): |0.5−0.6| + |0.3−0.4| + 0.2."""
    student, teacher = torch.tensor([[0.2, 0.5, 0.3]]), torch.tensor([[0.4, 0.6]])
    assert sorted_probability_distance(student, teacher).item() == pytest.approx(0.4)
    # through the loss: one answer position per side (the EOS skipped), positional alignment, log-probs as logits
    labels = torch.tensor([[-100, 5, 6]])
    loss = ULDLoss(use_extended_uld=False)(
        student_logits=torch.cat([torch.zeros(1, 3), student.log(), torch.zeros(1, 3)]).unsqueeze(0),
        teacher_logits=torch.cat([torch.zeros(1, 2), teacher.log(), torch.zeros(1, 2)]).unsqueeze(0),
        student_labels=labels,
        teacher_labels=labels,
        student_input_ids=labels.clamp_min(0),
        teacher_input_ids=labels.clamp_min(0),
    )
    assert loss.item() == pytest.approx(0.4, rel=1e-6)


def test_byte_alignment_and_merge_closed_form():
    """'abcd': student tokens a|bc|d, teacher ab|c|d. Groups: (a, bc) ↔ (ab, c), then d ↔ d. Observed merge: the
    first position's distribution times p(actual later token); bayesian: the last's times p(actual earlier token)."""
    student, teacher = [(0, 1), (1, 3), (3, 4)], [(0, 2), (2, 3), (3, 4)]
    assert align_by_byte_offsets(student, teacher) == ([[0, 1], [2]], [[0, 1], [2]])
    assert align_by_byte_offsets([(0, 1), (1, 2)], [(0, 3)]) == ([[0, 1]], [[0]])  # leftover: one last group
    probs = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])
    tokens = [0, 1, 2]
    observed = merge_group_probabilities(probs, [[0, 1], [2]], tokens, "observed")
    torch.testing.assert_close(observed, torch.stack([probs[0] * 0.6, probs[2]]))
    bayesian = merge_group_probabilities(probs, [[0, 1], [2]], tokens, "bayesian")
    torch.testing.assert_close(bayesian, torch.stack([probs[1] * 0.5, probs[2]]))


def test_hybrid_adaptive_weights_closed_form():
    """Vocabularies {a, b, x} (student) and {a, b, y, z} (teacher): a, b shared. Adaptive weights: 2/4 and 2/4; the
    matched part is the JSD of the shared tokens' probabilities, the unmatched one the sorted distance of the rest."""
    student_vocab, teacher_vocab = {"a": 0, "b": 1, "x": 2}, {"y": 0, "a": 1, "b": 2, "z": 3}
    loss_fn = ULDLoss(uld_use_hybrid_loss=True, beta=0.5, student_vocab=student_vocab, teacher_vocab=teacher_vocab)
    p_s, p_t = torch.tensor([[0.5, 0.3, 0.2]]), torch.tensor([[0.1, 0.4, 0.3, 0.2]])
    total = loss_fn.hybrid_loss(p_s, p_t)
    jsd = generalized_jsd_loss(p_s[:, [0, 1]], p_t[:, [1, 2]], beta=0.5, logits_are_probs=True)
    expected = 0.5 * jsd + 0.5 * (abs(0.2 - 0.2) + abs(0.0 - 0.1))
    assert total.item() == pytest.approx(expected.item(), rel=1e-6)
    assert loss_fn.last_unmatched_loss.item() == pytest.approx(0.1, rel=1e-6)


# ---- bad settings and deliberate differences ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"uld_crossentropy_weight": -1.0}, r"uld_crossentropy_weight=-1.0 is not valid; must be a finite number >= 0"),
        ({"uld_distillation_weight": math.nan}, r"uld_distillation_weight=nan is not valid"),
        ({"uld_student_temperature": 0.0}, r"uld_student_temperature=0.0 is not valid; must be a finite number > 0"),
        ({"uld_teacher_temperature": -2}, r"uld_teacher_temperature=-2 is not valid; must be a finite number > 0"),
        ({"uld_token_merge_strategy": "first"}, r"uld_token_merge_strategy='first' is not valid; must be one of "
                                                r"'observed', 'bayesian'"),
        ({"use_extended_uld": "yes"}, r"use_extended_uld='yes' is not valid; must be True or False"),
        ({"beta": 2.0}, r"beta=2.0 is not valid; must be a finite number in \[0, 1\]"),
        ({"uld_hybrid_matched_weight": 0.5}, r"uld_hybrid_matched_weight=0.5 and uld_hybrid_unmatched_weight=None "
                                             r"are not valid together"),
        ({"uld_hybrid_matched_weight": 0.5, "uld_hybrid_unmatched_weight": -1.0},
         r"uld_hybrid_unmatched_weight=-1.0 is not valid; must be a finite number >= 0"),
    ],
)  # fmt: skip
def test_bad_settings_name_the_field(settings, match):
    with pytest.raises(ValueError, match=rf"^ULDLoss: {match}"):
        ULDLoss(**settings)
    with pytest.raises(ValueError, match=rf"^GOLDConfig: {match}"):
        check_uld_settings("GOLDConfig", settings)


def test_hybrid_needs_both_vocabularies_where_trl_falls_back_to_plain_uld():
    """Deliberate difference: TRL's `ULDLoss` without tokenizers silently computes the plain (sorted) loss when
    `uld_use_hybrid_loss=True`; the port refuses it (GOLDTrainer always has both tokenizers, so trained losses agree).
    Vocabularies without a shared token are an error in both (TRL's: `max()` of an empty sequence)."""
    batch = _uld_batch(True)
    plain = _uld_value_and_grad(TRLULDLoss(_trl_config()), batch)[0]
    fallback = _uld_value_and_grad(TRLULDLoss(_trl_config(uld_use_hybrid_loss=True)), batch)[0]
    assert fallback == plain
    with pytest.raises(ValueError, match=r"^ULDLoss: uld_use_hybrid_loss=True needs student_vocab and teacher_vocab"):
        ULDLoss(uld_use_hybrid_loss=True)
    with pytest.raises(ValueError, match=r"have no token string in common"):
        ULDLoss(uld_use_hybrid_loss=True, student_vocab={"a": 0}, teacher_vocab={"b": 0})
    with pytest.raises(ValueError):
        TRLULDLoss(
            _trl_config(uld_use_hybrid_loss=True),
            student_tokenizer=SimpleNamespace(get_vocab=lambda: {"a": 0}),
            teacher_tokenizer=SimpleNamespace(get_vocab=lambda: {"b": 0}),
        )
