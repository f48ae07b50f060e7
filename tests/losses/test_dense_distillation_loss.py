"""`trl_ext.losses.distillation` against closed forms: brute-force softmaxes over the whole vocabulary and explicit
KL sums in probability space (nothing here calls the module to compute an expected value), TRL's own chunked
kernel, the top-k coarse-graining (k categories + one tail), bad input, the chunk memory bound and the empty batch.

Convention (TRL's `DistillationConfig.beta`): 0 forward KL(p_t‖p_s), 1 reverse KL(p_s‖p_t), otherwise
β·KL(p_t‖m) + (1−β)·KL(p_s‖m) with m = (1−β)·p_s + β·p_t.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from trl_ext.losses.distillation import OutputLayer, dense_divergence, generalized_jsd, teacher_top_k

N, H, V = 6, 5, 13
ATOL = 1e-5  # the module computes logits in float32


def close(got, want, atol=ATOL):
    torch.testing.assert_close(got, want, rtol=0, atol=atol, check_dtype=False)


def kl(p, q):
    """Σ_v p_v·log(p_v/q_v) per row, 0·log(0/q) = 0 and p·log(p/0) = +inf."""
    terms = torch.where(p > 0, p * (p.log() - q.log()), torch.zeros_like(p))
    return terms.sum(-1)


def gjsd(ps, pt, beta):
    """The generalized JSD of probability rows ps (student) / pt (teacher)."""
    if beta == 0:
        return kl(pt, ps)
    if beta == 1:
        return kl(ps, pt)
    m = (1 - beta) * ps + beta * pt
    return beta * kl(pt, m) + (1 - beta) * kl(ps, m)


def probs(h, w, temperature=1.0):
    """Full softmax over the vocabulary of h·wᵀ / temperature, float64."""
    z = (h.double() @ w.double().t()) / temperature
    e = (z - z.max(-1, keepdim=True).values).exp()
    return e / e.sum(-1, keepdim=True)


def make(seed, n=N, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    hs = torch.randn(n, H, generator=g, dtype=dtype).requires_grad_()
    ws = torch.randn(V, H, generator=g, dtype=dtype).requires_grad_()
    ht, wt = torch.randn(n, H, generator=g, dtype=dtype), torch.randn(V, H, generator=g, dtype=dtype)
    return hs, ws, ht, wt, torch.randint(V, (n,), generator=g)


def grads(value, *tensors):
    return torch.autograd.grad(value.sum(), tensors, retain_graph=True)


def full(hs, ws, ht, wt, labels, beta, **kw):
    return dense_divergence(hs, OutputLayer(ws), labels, beta, teacher_hidden=ht, teacher_layer=OutputLayer(wt), **kw)


def topk(hs, ws, ht, wt, labels, beta, k, temperature=1.0):
    top = teacher_top_k(ht, OutputLayer(wt), k, labels, temperature)
    return dense_divergence(hs, OutputLayer(ws), labels, beta, teacher_top=top, temperature=temperature)


# 1. generalized_jsd on explicit distributions


@pytest.mark.parametrize("beta", [0.0, 0.25, 0.5, 0.9, 1.0])
def test_generalized_jsd_matches_brute_force(beta):
    g = torch.Generator().manual_seed(1)
    s = torch.randn(8, 7, generator=g, dtype=torch.float64).log_softmax(-1).requires_grad_()
    t = torch.randn(8, 7, generator=g, dtype=torch.float64).log_softmax(-1)
    value, expected = generalized_jsd(s, t, beta), gjsd(s.exp(), t.exp(), beta)
    close(value, expected, atol=1e-12)
    assert (value > 0).all()
    close(grads(value, s)[0], grads(expected, s)[0], atol=1e-12)
    assert generalized_jsd(t, t, beta).abs().max() < 1e-15  # zero when the distributions are equal


def test_symmetric_jsd_is_at_most_log_2():
    g = torch.Generator().manual_seed(2)
    s = (5 * torch.randn(200, 9, generator=g, dtype=torch.float64)).log_softmax(-1)
    t = (5 * torch.randn(200, 9, generator=g, dtype=torch.float64)).log_softmax(-1)
    assert generalized_jsd(s, t, 0.5).max() <= math.log(2)
    disjoint = torch.tensor([[0.0, -math.inf]], dtype=torch.float64), torch.tensor([[-math.inf, 0.0]]).double()
    assert generalized_jsd(*disjoint, 0.5).item() == pytest.approx(math.log(2), abs=1e-15)  # the bound is attained


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_zero_probability_categories(beta):
    # Category 0 is impossible for both, category 1 impossible for the teacher only.
    s = torch.tensor([[-math.inf, -1.5, -0.9, -1.2]], dtype=torch.float64)
    s = (s - s.logsumexp(-1, keepdim=True)).detach().requires_grad_()
    t = torch.tensor([[-math.inf, -math.inf, -0.3, -1.4]], dtype=torch.float64).log_softmax(-1)
    value = generalized_jsd(s, t, beta)
    if beta == 1.0:  # the student has mass where the teacher has none
        assert value.item() == math.inf
        return
    assert value.item() == pytest.approx(gjsd(s.exp(), t.exp(), beta).item(), abs=1e-12)
    assert torch.isfinite(value).all() and torch.isfinite(grads(value, s)[0]).all()
    both_zero = generalized_jsd(s, s.detach(), 1.0)  # category 0 empty in both: contributes 0, gradients finite
    assert both_zero.item() == 0.0 and torch.isfinite(grads(both_zero, s)[0]).all()
    assert generalized_jsd(t, s.detach(), 0.0).item() == math.inf  # forward KL: teacher mass where student has none


# 2. whole-vocabulary dense_divergence


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_whole_vocabulary_matches_brute_force(beta, temperature):
    hs, ws, ht, wt, labels = make(3)
    out = full(hs, ws, ht, wt, labels, beta, temperature=temperature, chunk_size=4)
    ps, pt = probs(hs, ws, temperature), probs(ht, wt, temperature)
    expected = gjsd(ps, pt, beta)
    close(out.divergence, expected)
    for got, want in zip(grads(out.divergence, hs, ws), grads(expected, hs, ws), strict=True):
        close(got, want)
    label = ps[torch.arange(N), labels].log()
    close(out.label_logprob, label)
    close(grads(out.label_logprob, hs)[0], grads(label, hs)[0])
    close(out.entropy, -(ps * ps.log()).sum(-1).detach())
    assert not out.entropy.requires_grad


def test_result_does_not_depend_on_chunk_size():
    hs, ws, ht, wt, labels = make(4, n=7)
    results = []
    for chunk_size in (1, 3, None):
        out = full(hs, ws, ht, wt, labels, 0.5, chunk_size=chunk_size)
        results.append((*out, *grads(out.divergence + out.label_logprob, hs, ws)))
    for other in results[1:]:
        for got, want in zip(other, results[0], strict=True):
            close(got, want, atol=1e-6)


def test_output_layer_transforms():
    hs, ws, ht, wt, labels = make(5)
    bias = torch.randn(V, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    layer = OutputLayer(ws, bias=bias, scale=3.0, softcap=2.0)
    z = 2.0 * torch.tanh(3.0 * (hs @ ws.t() + bias) / 2.0) / 0.7
    close(layer.logits(hs, 0.7), z.float(), atol=1e-6)
    assert layer.logits(hs, 0.7).dtype == torch.float32
    out = dense_divergence(hs, layer, labels, 0.5, teacher_hidden=ht, teacher_layer=OutputLayer(wt), temperature=0.7)
    expected = gjsd(z.softmax(-1), probs(ht, wt, 0.7), 0.5)
    close(out.divergence, expected)
    close(grads(out.divergence, hs)[0], grads(expected, hs)[0])


# 3. TRL's own kernel


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_equals_trl_chunked_divergence(beta):
    from trl.kernels.chunked_divergence import ChunkedDivergenceFunction

    hs, ws, ht, wt, labels = make(6, dtype=torch.float32)
    ws = ws.detach()
    trl_div, trl_entropy = ChunkedDivergenceFunction.apply(hs, ws, None, ht, wt, None, beta, 0.7)
    out = full(hs, ws, ht, wt, labels, beta, temperature=0.7)
    close(out.divergence, trl_div)
    close(out.entropy, trl_entropy)
    close(grads(out.divergence, hs)[0], grads(trl_div, hs)[0])


# 4. top-k: k categories + one tail


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_top_k_of_whole_vocabulary_is_the_full_divergence(beta):
    hs, ws, ht, wt, labels = make(7)
    a, b = topk(hs, ws, ht, wt, labels, beta, V, 0.7), full(hs, ws, ht, wt, labels, beta, temperature=0.7)
    close(a.divergence, b.divergence)
    for got, want in zip(grads(a.divergence, hs, ws), grads(b.divergence, hs, ws), strict=True):
        close(got, want)


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_top_k_is_the_coarse_grained_divergence(beta, k):
    hs, ws, ht, wt, labels = make(8)
    out = topk(hs, ws, ht, wt, labels, beta, k)
    ps, pt = probs(hs, ws), probs(ht, wt)
    ids = torch.topk(ht @ wt.t(), k, dim=-1).indices

    def coarse(p):
        top = p.gather(1, ids)
        return torch.cat([top, 1 - top.sum(-1, keepdim=True)], dim=1)

    expected = gjsd(coarse(ps), coarse(pt), beta)
    close(out.divergence, expected)
    close(grads(out.divergence, hs)[0], grads(expected, hs)[0])
    assert (out.divergence <= gjsd(ps, pt, beta) + ATOL).all()  # data processing
    assert (out.divergence < gjsd(ps, pt, beta) - 1e-3).any()  # and strictly below somewhere: the tail merges


@pytest.mark.parametrize("k", [1, 5, V])
def test_teacher_top_k_contents(k):
    _, _, ht, wt, labels = make(9)
    top = teacher_top_k(ht, OutputLayer(wt), k, labels, temperature=0.7, chunk_size=4)
    pt = probs(ht, wt, 0.7)
    expected_ids = torch.topk(ht @ wt.t(), k, dim=-1).indices
    assert top.ids.shape == top.logprobs.shape == (N, k)
    assert torch.equal(top.ids.sort(-1).values, expected_ids.sort(-1).values)
    close(top.logprobs, pt.gather(1, top.ids).log().float())
    assert (top.logprobs[:, :-1] >= top.logprobs[:, 1:]).all()
    close(top.label_logprob, pt[torch.arange(N), labels].log().float())
    rest = 1 - pt.gather(1, expected_ids).sum(-1)
    if k == V:
        assert (top.tail_logprob == -math.inf).all()
    else:
        close(top.tail_logprob, rest.log().float())


# 5. bad input


def test_bad_input():
    hs, ws, ht, wt, labels = make(10)
    top = teacher_top_k(ht, OutputLayer(wt), 3, labels)
    for beta in (-0.1, 1.5):
        with pytest.raises(ValueError, match="jsd_beta"):
            full(hs, ws, ht, wt, labels, beta)
    with pytest.raises(ValueError, match="either teacher_top"):
        dense_divergence(hs, OutputLayer(ws), labels, 0.5)
    with pytest.raises(ValueError, match="either teacher_top"):
        dense_divergence(hs, OutputLayer(ws), labels, 0.5, teacher_top=top, teacher_hidden=ht)
    with pytest.raises(ValueError, match="teacher_layer"):
        dense_divergence(hs, OutputLayer(ws), labels, 0.5, teacher_hidden=ht)
    with pytest.raises(ValueError, match="one vocabulary"):
        full(hs, ws, ht, wt[:-1], labels, 0.5)
    for k in (0, V + 1):
        with pytest.raises(ValueError, match="teacher_top_k"):
            teacher_top_k(ht, OutputLayer(wt), k, labels)


# 6. memory: one chunk's [chunk, V] logits at a time


class CreatedShapes(TorchDispatchMode):
    """Records the shape of every tensor any op creates (forward, recomputation and backward)."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        self.shapes += [tuple(x.shape) for x in tree_flatten(result)[0] if isinstance(x, torch.Tensor)]
        return result


@pytest.mark.parametrize("mode", ["whole", "top-k"])
def test_no_tensor_beyond_one_chunk_of_logits(mode):
    n, v, h, chunk = 64, 50, 6, 4
    g = torch.Generator().manual_seed(11)
    hs, ws = torch.randn(n, h, generator=g).requires_grad_(), torch.randn(v, h, generator=g).requires_grad_()
    ht, wt, labels = torch.randn(n, h, generator=g), torch.randn(v, h, generator=g), torch.randint(v, (n,))
    top = teacher_top_k(ht, OutputLayer(wt), 5, labels, chunk_size=chunk)
    teacher = {"teacher_top": top} if mode == "top-k" else {"teacher_hidden": ht, "teacher_layer": OutputLayer(wt)}

    def run(chunk_size):
        out = dense_divergence(hs, OutputLayer(ws), labels, 0.5, chunk_size=chunk_size, **teacher)
        (out.divergence + out.label_logprob).sum().backward()

    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t, lambda t: t):
        run(chunk)
    # Checkpointing keeps only each chunk's input hidden states for the backward pass, no logits.
    assert saved and max(s.numel() for s in saved) <= chunk * h and all(v not in s for s in saved)
    with CreatedShapes() as created:
        run(chunk)
    per_vocab = [s for s in created.shapes if v in s and s not in {(v, h), (h, v)}]  # the weight and its gradient
    assert per_vocab and max(math.prod(s) for s in per_vocab) == chunk * v
    with CreatedShapes() as unchunked:  # control: one chunk of all positions does create the [N, V] logits
        run(None)
    assert (n, v) in unchunked.shapes


# 7. empty batch


@pytest.mark.parametrize("mode", ["whole", "top-k"])
def test_empty_batch(mode):
    hs, ws, ht, wt, labels = make(12, n=0)
    out = topk(hs, ws, ht, wt, labels, 0.5, 3) if mode == "top-k" else full(hs, ws, ht, wt, labels, 0.5)
    assert all(t.shape == (0,) for t in out)
    (out.divergence + out.label_logprob).sum().backward()
    assert hs.grad is not None and hs.grad.shape == (0, H)
    # the output layer gets a (zero) gradient too: a process without scored tokens must still give DDP one
    assert ws.grad is not None and not ws.grad.any()


def test_logits_are_float32_of_the_autocast_dtype_not_rounded():
    """Under bf16 autocast with float32 weights, the projection runs on bf16 inputs (as the model's own head would)
    and its logits are not rounded to bf16."""
    hs, ws, *_ = make(13, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = OutputLayer(ws.detach()).logits(hs.detach(), 1.0)
    expected = hs.detach().bfloat16().float() @ ws.detach().bfloat16().float().t()
    assert logits.dtype == torch.float32
    torch.testing.assert_close(logits, expected, rtol=1e-6, atol=1e-6)
    assert not torch.equal(logits, logits.bfloat16().float())  # finer than bf16
