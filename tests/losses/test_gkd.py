"""GKD's loss (`trl_ext.losses.gkd.gkd_loss`) against TRL's `GKDTrainer.generalized_jsd_loss` on the same random
logits, for every β / temperature / reduction / mask TRL supports (values and gradients), a closed form, the one
deliberate difference (float32 under half-precision logits) and the errors."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from trl_ext.losses.distillation import generalized_jsd
from trl_ext.losses.gkd import REDUCTIONS, gkd_loss

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.gkd import GKDTrainer as TRLGKDTrainer

trl_loss = TRLGKDTrainer.generalized_jsd_loss
BETAS = (0.0, 0.5, 1.0, 0.3)
TEMPERATURES = (1.0, 0.5, 2.0)


def _inputs(seed: int = 0, shape=(3, 5, 17), dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    student = (3 * torch.randn(shape, generator=generator)).to(dtype)
    teacher = (3 * torch.randn(shape, generator=generator)).to(dtype)
    labels = torch.randint(0, shape[-1], shape[:-1], generator=generator)
    labels[0, :2] = -100  # a prompt
    labels[-1, -1] = -100  # padding
    return student, teacher, labels


def _value_and_grads(loss_fn, student, teacher, **kwargs):
    student, teacher = student.clone().requires_grad_(), teacher.clone().requires_grad_()
    value = loss_fn(student, teacher, **kwargs)
    # A fixed random weighting of the outputs, so that `none` (a tensor) checks every element's gradient.
    weights = torch.rand(value.shape, generator=torch.Generator().manual_seed(1)) if value.dim() else 1.0
    (value * weights).sum().backward()
    return value.detach(), student.grad, teacher.grad


def _assert_same(kwargs, student, teacher):
    theirs = _value_and_grads(trl_loss, student, teacher, **kwargs)
    ours = _value_and_grads(gkd_loss, student, teacher, **kwargs)
    for name, a, b in zip(("value", "student grad", "teacher grad"), theirs, ours, strict=True):
        torch.testing.assert_close(b, a, msg=lambda m, name=name: f"{name}, {kwargs}: {m}")


@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("masked", [True, False], ids=["labels", "no-labels"])
def test_equals_trl(beta, temperature, reduction, masked):
    student, teacher, labels = _inputs()
    kwargs = dict(beta=beta, temperature=temperature, reduction=reduction, labels=labels if masked else None)
    _assert_same(kwargs, student, teacher)


@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("count", [7, torch.tensor(11.0)], ids=["int", "tensor"])
def test_num_items_in_batch_overrides_the_reduction_as_in_trl(beta, count):
    student, teacher, labels = _inputs(seed=2)
    for reduction in REDUCTIONS:
        kwargs = dict(beta=beta, labels=labels, reduction=reduction, num_items_in_batch=count)
        _assert_same(kwargs, student, teacher)
    total = gkd_loss(student, teacher, labels, beta=beta, reduction="sum")
    assert gkd_loss(student, teacher, labels, beta=beta, num_items_in_batch=count).item() == pytest.approx(
        total.item() / float(count), rel=1e-6
    )


def test_the_reductions_and_the_mask():
    """batchmean = the mean over the labelled positions of each position's divergence (without labels: the sum over
    the first dimension's rows), mean = that divided by the vocabulary size, none = [N, V] terms of the labelled
    positions only; a fully masked batch gives 0 (not NaN) with a gradient path, as TRL's."""
    student, teacher, labels = _inputs(seed=3)
    vocabulary = student.shape[-1]
    mask = labels != -100
    per_position = generalized_jsd(student.log_softmax(-1), teacher.log_softmax(-1), 0.3)  # [B, T]
    batchmean = gkd_loss(student, teacher, labels, beta=0.3)
    assert batchmean.item() == pytest.approx(per_position[mask].mean().item(), rel=1e-6)
    no_labels = gkd_loss(student, teacher, beta=0.3)
    assert no_labels.item() == pytest.approx(per_position.sum().item() / student.shape[0], rel=1e-6)
    mean = gkd_loss(student, teacher, labels, beta=0.3, reduction="mean")
    assert mean.item() == pytest.approx(batchmean.item() / vocabulary, rel=1e-6)
    terms = gkd_loss(student, teacher, labels, beta=0.3, reduction="none")
    assert terms.shape == (int(mask.sum()), vocabulary)
    torch.testing.assert_close(terms.sum(-1), per_position[mask])

    nothing = torch.full_like(labels, -100)
    student = student.clone().requires_grad_()
    for beta in BETAS:
        loss = gkd_loss(student, teacher, nothing, beta=beta)
        torch.testing.assert_close(loss, trl_loss(student, teacher, nothing, beta=beta))
        assert loss.item() == 0.0
        loss.backward()
        assert torch.equal(student.grad, torch.zeros_like(student))


def test_closed_form_on_two_tokens():
    """One position, a vocabulary of two: p_s = (1/2, 1/2), p_t = (9/10, 1/10), each KL written out by hand."""
    p_s, p_t = (0.5, 0.5), (0.9, 0.1)
    student = torch.tensor([[math.log(p) for p in p_s]], dtype=torch.float64)
    teacher = torch.tensor([[math.log(p) for p in p_t]], dtype=torch.float64)

    def kl(p, q):
        return sum(a * math.log(a / b) for a, b in zip(p, q, strict=True))

    assert gkd_loss(student, teacher, beta=0.0).item() == pytest.approx(kl(p_t, p_s), rel=1e-12)
    assert gkd_loss(student, teacher, beta=1.0).item() == pytest.approx(kl(p_s, p_t), rel=1e-12)
    for beta in (0.5, 0.3, 0.9):
        m = [(1 - beta) * s + beta * t for s, t in zip(p_s, p_t, strict=True)]
        expected = beta * kl(p_t, m) + (1 - beta) * kl(p_s, m)
        assert gkd_loss(student, teacher, beta=beta).item() == pytest.approx(expected, rel=1e-12)
    # The temperature divides both models' logits: at τ = 2, p ∝ √p.
    soft = [math.sqrt(p) / (math.sqrt(0.9) + math.sqrt(0.1)) for p in p_t]
    assert gkd_loss(student, teacher, beta=0.0, temperature=2.0).item() == pytest.approx(kl(soft, p_s), rel=1e-12)


def test_half_precision_logits_are_computed_in_float32():
    """The deliberate difference: TRL computes the log-softmax and the divergence in the logits' dtype (bfloat16 under
    bf16 training, β rounded to bfloat16); the port upcasts to float32 first, so its value on bfloat16 logits is
    TRL's on the same logits in float32, and TRL's own bfloat16 value is off by far more."""
    student, teacher, labels = _inputs(seed=4, shape=(2, 6, 300))
    student, teacher = student.bfloat16(), teacher.bfloat16()
    for beta in BETAS:
        ours = gkd_loss(student, teacher, labels, beta=beta)
        assert ours.dtype == torch.float32
        exact = trl_loss(student.float(), teacher.float(), labels, beta=beta)
        torch.testing.assert_close(ours, exact)
        theirs = trl_loss(student, teacher, labels, beta=beta)
        assert theirs.dtype == torch.bfloat16
        assert abs(theirs.float() - exact).item() > 10 * abs(ours - exact).item()
    assert gkd_loss(student.double(), teacher.double(), labels).dtype == torch.float64


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"beta": 1.5}, r"gkd_loss: beta=1.5 is not valid; must be in \[0, 1\]"),
        ({"beta": -0.1}, r"gkd_loss: beta=-0.1 is not valid; must be in \[0, 1\]"),
        ({"temperature": 0.0}, r"gkd_loss: temperature=0.0 is not valid; must be > 0"),
        ({"reduction": "average"}, r"gkd_loss: reduction='average' is not valid; must be one of 'batchmean', 'sum', "
                                   r"'mean', 'none'"),
    ],
)  # fmt: skip
def test_bad_arguments_name_the_field(kwargs, message):
    student, teacher, labels = _inputs()
    with pytest.raises(ValueError, match=message):
        gkd_loss(student, teacher, labels, **kwargs)


def test_bad_shapes():
    student, teacher, labels = _inputs()
    with pytest.raises(ValueError, match=r"student_logits \(3, 5, 17\) and teacher_logits \(3, 5, 16\) must have one"):
        gkd_loss(student, teacher[..., :16])
    with pytest.raises(ValueError, match=r"labels \(3, 4\) must have the logits' shape without the vocabulary, "):
        gkd_loss(student, teacher, labels[:, :4])
