"""`trl_ext.trainers.asynchronous.tree_attention`: SDPA attention over TRL's packed prefix-tree rows, checked against
independent computations.

- the mask equals a brute-force mask from the segment/path definition (query j of a segment sees
  `path[: P - L + j + 1]`) and one from the position_ids interval rule (`k <= q < end[k]`), with and without a sliding
  window, on trees built by TRL's own `TreeRow` (shared prompts, branching at several depths, chains, one sample,
  prompts of different lengths, random small-vocabulary tries);
- the attention function equals a per-query loop over the visible keys (scaling, GQA, softcap, window, dropout);
- a tiny float32 Qwen2 (GQA and not, with sliding-window layers) and a tiny Gemma2 (attention softcap + window)
  forwarded on a packed row give the per-sample eager forward's log-probabilities at every trained target, and the
  same parameter gradients; so does TRL's fused-LM-head forward, called exactly as `AsyncGRPOTrainer.compute_loss`;
- `use_tree_attention` overrides TRL's registration.
"""

from __future__ import annotations

import copy
import importlib.util

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, Gemma2Config, Qwen2Config
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from trl.experimental.async_grpo import packing
from trl.trainer.utils import add_fused_lm_head

from trl_ext.trainers.asynchronous.tree_attention import tree_attention_mask, tree_sdpa_attention, use_tree_attention

VOCAB = 97


@pytest.fixture(autouse=True)
def _registered():
    """Every test runs with our attention under TRL's name, registered after TRL's own (as the trainer will)."""
    packing.register_tree_attention()
    assert use_tree_attention("cpu") == "sdpa"


# ---- trees --------------------------------------------------------------------------------------------------------


def _sample(ids, prompt_len: int, group) -> dict:
    ids = [int(t) for t in ids]
    mask = [0] * prompt_len + [1] * (len(ids) - prompt_len)
    return {
        "input_ids": torch.tensor(ids),
        "completion_mask": torch.tensor(mask),
        "old_log_probs": torch.zeros(len(ids)),
        "advantage": 1.0,
        "group_id": group,
    }


def _tree_samples(kind: str) -> list[dict]:
    rng = np.random.default_rng(sum(map(ord, kind)))

    def rand(n):
        return list(rng.integers(5, VOCAB, size=n))

    if kind == "shared_prompts":
        samples = []
        for g in range(2):
            prompt = rand(6)
            samples += [_sample(prompt + rand(3 + i), 6, g) for i in range(3)]
        return samples
    if kind == "branching":
        base = rand(12)
        s2 = base[:5] + rand(6)
        return [
            _sample(base, 3, 0),
            _sample(base[:2] + rand(6), 3, 0),  # forks at depth 2 (inside the prompt)
            _sample(s2, 3, 0),  # forks at depth 5
            _sample(s2[:8] + rand(3), 3, 0),  # forks off the fork at depth 8
            _sample(base[:11] + rand(1), 3, 0),  # forks at the last token
            _sample(base, 3, 0),  # a duplicate: shares every node
        ]
    if kind == "chains":
        return [_sample([5 + i, *rand(4 + i)], 2, i) for i in range(3)]
    if kind == "one_sample":
        return [_sample(rand(9), 4, 0)]
    if kind == "prompt_lengths":
        samples = []
        for g, prompt_len in enumerate((2, 7, 11)):
            prompt = rand(prompt_len)
            samples += [_sample(prompt + rand(2 + i), prompt_len, g) for i in range(2)]
        return samples
    if kind.startswith("random"):  # tokens from {5, 6, 7}: the trie forks at many depths
        samples = []
        for i in range(8):
            n = int(rng.integers(3, 10))
            samples.append(_sample(rng.integers(5, 8, size=n), int(rng.integers(1, n)), i % 3))
        return samples
    raise ValueError(kind)


TREES = ["shared_prompts", "branching", "chains", "one_sample", "prompt_lengths", "random0", "random1", "random2"]


def _pack(samples: list[dict]) -> dict[str, torch.Tensor]:
    row = packing.TreeRow()
    for sample in samples:
        row.add(sample)
    return row.pack()


def _tree_kwargs(packed) -> dict:
    max_q, max_k = packed["tree_max_seqlens"].tolist()
    return {
        "tree_kv_index": packed["tree_kv_index"],
        "tree_cu_seqlens_q": packed["tree_cu_seqlens_q"],
        "tree_cu_seqlens_k": packed["tree_cu_seqlens_k"],
        "tree_max_seqlen_q": max_q,
        "tree_max_seqlen_k": max_k,
    }


def _path_mask(packed, window: int | None = None) -> torch.Tensor:
    """Brute force from the definition: query j of segment s sees path[: P - L + j + 1] (last `window` of them)."""
    n = packed["input_ids"].numel()
    cu_q, cu_k = packed["tree_cu_seqlens_q"].tolist(), packed["tree_cu_seqlens_k"].tolist()
    kv = packed["tree_kv_index"].tolist()
    mask = torch.zeros(n, n, dtype=torch.bool)
    for s in range(len(cu_q) - 1):
        path = kv[cu_k[s] : cu_k[s + 1]]
        seg_len, path_len = cu_q[s + 1] - cu_q[s], len(path)
        for j in range(seg_len):
            stop = path_len - seg_len + j + 1
            start = 0 if window is None else max(0, stop - window)
            for k in path[start:stop]:
                mask[cu_q[s] + j, k] = True
    return mask


def _interval_mask(position_ids: list[int], window: int | None = None) -> torch.Tensor:
    """Brute force from depths alone: k is visible to q iff k <= q < end[k] (and depth[q] - depth[k] < window)."""
    n = len(position_ids)
    end = [n] * n
    for k in range(n):
        for j in range(k + 1, n):
            if position_ids[j] <= position_ids[k]:
                end[k] = j
                break
    mask = torch.zeros(n, n, dtype=torch.bool)
    for q in range(n):
        for k in range(q + 1):
            if q < end[k] and (window is None or position_ids[q] - position_ids[k] < window):
                mask[q, k] = True
    return mask


# ---- the mask -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", TREES)
@pytest.mark.parametrize("window", [None, 1, 3])
def test_mask_matches_path_definition_and_interval_rule(kind, window):
    packed = _pack(_tree_samples(kind))
    n = packed["input_ids"].numel()
    mask = tree_attention_mask(
        packed["tree_kv_index"], packed["tree_cu_seqlens_q"], packed["tree_cu_seqlens_k"], n, sliding_window=window
    )
    assert mask.dtype == torch.bool and mask.shape == (n, n)
    assert torch.equal(mask, _path_mask(packed, window))
    assert torch.equal(mask, _interval_mask(packed["position_ids"].tolist(), window))
    if window is None:
        # each query sees exactly its depth + 1 keys: its sample's prefix
        assert torch.equal(mask.sum(1), packed["position_ids"] + 1)


def test_mask_structure_of_a_known_tree():
    # two samples [1 2 3] and [1 2 4]: the trie forks one token early, segments [1] [2 3] [2 4]
    packed = _pack([_sample([1, 2, 3], 1, 0), _sample([1, 2, 4], 1, 0)])
    assert packed["input_ids"].tolist() == [1, 2, 3, 2, 4]
    mask = tree_attention_mask(packed["tree_kv_index"], packed["tree_cu_seqlens_q"], packed["tree_cu_seqlens_k"], 5)
    expected = torch.tensor(
        [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 0, 1, 0], [1, 0, 0, 1, 1]], dtype=torch.bool
    )
    assert torch.equal(mask, expected)


def test_mask_rejects_bad_inputs():
    packed = _pack(_tree_samples("branching"))
    args = (packed["tree_kv_index"], packed["tree_cu_seqlens_q"], packed["tree_cu_seqlens_k"])
    n = packed["input_ids"].numel()
    with pytest.raises(ValueError, match="num_positions"):
        tree_attention_mask(*args, n + 1)
    with pytest.raises(ValueError, match="same length"):
        tree_attention_mask(args[0], args[1][:-1], args[2], n)
    with pytest.raises(TypeError, match="sliding_window"):
        tree_attention_mask(*args, n, sliding_window=2.5)
    with pytest.raises(ValueError, match="sliding_window"):
        tree_attention_mask(*args, n, sliding_window=0)
    with pytest.raises(TypeError, match="tree_kv_index"):
        tree_attention_mask(args[0].float(), args[1], args[2], n)


# ---- the attention function against a per-query loop --------------------------------------------------------------


class _Attn(torch.nn.Module):
    def __init__(self, attention_dropout: float = 0.0):
        super().__init__()
        self.attention_dropout = attention_dropout


def _loop_attention(packed, q, k, v, scaling, window, softcap):
    """Per query and head: softmax over the visible keys (from `_path_mask`) of the (capped) scaled scores."""
    allowed = _path_mask(packed, window)
    heads, n, _ = q.shape[1:]
    group = heads // k.shape[1]
    out = torch.zeros(1, n, heads, v.shape[-1], dtype=torch.float64)
    for h in range(heads):
        for i in range(n):
            keys = allowed[i].nonzero().flatten()
            scores = (k[0, h // group, keys].double() @ q[0, h, i].double()) * scaling
            if softcap:
                scores = softcap * torch.tanh(scores / softcap)
            out[0, i, h] = torch.softmax(scores, 0) @ v[0, h // group, keys].double()
    return out


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@pytest.mark.parametrize(("scaling", "window", "softcap"), [(None, None, None), (0.3, 2, None), (0.7, None, 1.5)])
def test_attention_matches_loop(kv_heads, scaling, window, softcap):
    packed = _pack(_tree_samples("random0"))
    n, heads, dim = packed["input_ids"].numel(), 4, 8
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, heads, n, dim, generator=gen)
    k, v = (torch.randn(1, kv_heads, n, dim, generator=gen) for _ in range(2))
    out, weights = tree_sdpa_attention(
        _Attn(), q, k, v, None, scaling=scaling, sliding_window=window, softcap=softcap, **_tree_kwargs(packed)
    )
    assert weights is None and out.shape == (1, n, heads, dim)
    expected = _loop_attention(packed, q, k, v, dim**-0.5 if scaling is None else scaling, window, softcap)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("softcap", [None, 2.0])
def test_dropout_only_in_training_and_unbiased(softcap):
    packed = _pack(_tree_samples("chains"))
    n, heads, dim = packed["input_ids"].numel(), 2, 4
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, heads, n, dim, generator=gen) for _ in range(3))
    kwargs = {"softcap": softcap, **_tree_kwargs(packed)}
    plain, _ = tree_sdpa_attention(_Attn(0.0), q, k, v, None, **kwargs)
    module = _Attn(0.5).eval()
    torch.testing.assert_close(tree_sdpa_attention(module, q, k, v, None, **kwargs)[0], plain)
    module.train()
    torch.manual_seed(0)
    draws = torch.stack([tree_sdpa_attention(module, q, k, v, None, **kwargs)[0] for _ in range(4000)])
    assert not torch.allclose(draws[0], plain, atol=1e-3)  # dropout is on
    # inverted dropout keeps the expectation: the mean of the draws approaches the plain output
    torch.testing.assert_close(draws.mean(0), plain, rtol=0, atol=0.1)
    # the model-passed `dropout` wins over the module attribute (as in transformers' sdpa_attention_forward)
    torch.testing.assert_close(tree_sdpa_attention(module, q, k, v, None, dropout=0.0, **kwargs)[0], plain)


def test_attention_rejects_batched_rows():
    packed = _pack(_tree_samples("chains"))
    n = packed["input_ids"].numel()
    x = torch.randn(2, 2, n, 4)
    with pytest.raises(ValueError, match="batch size 1"):
        tree_sdpa_attention(_Attn(), x, x, x, None, **_tree_kwargs(packed))


# ---- whole models: packed forward == per-sample eager forward -----------------------------------------------------


def _models(config):
    """The same seeded weights under the tree attention and under eager attention."""
    torch.manual_seed(0)
    # from_config sets the implementation on the config it is given: one copy per model
    tree = AutoModelForCausalLM.from_config(
        copy.deepcopy(config), attn_implementation=packing.TREE_ATTENTION, dtype=torch.float32
    )
    eager = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="eager", dtype=torch.float32)
    eager.load_state_dict(tree.state_dict())
    assert tree.config._attn_implementation == packing.TREE_ATTENTION
    assert eager.config._attn_implementation == "eager"
    return tree.eval(), eager.eval()


def _qwen2(kv_heads: int = 2, **extra) -> Qwen2Config:
    return Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        vocab_size=VOCAB,
        **extra,
    )


def _reference(eager, samples, full_logits: bool = False):
    """Per-sample unpadded forwards: log-prob (and entropy) of every trained target, in TRL's `token_index` order."""
    log_probs, entropies = [], []
    for sample in samples:
        ids, mask = sample["input_ids"], sample["completion_mask"]
        if full_logits:
            logits = eager(input_ids=ids[None]).logits[0]
        else:
            logits = eager.lm_head(eager.model(input_ids=ids[None]).last_hidden_state[0])
        lp = torch.log_softmax(logits, -1)
        for t in range(1, ids.numel()):
            if mask[t]:
                log_probs.append(lp[t - 1, ids[t]])
                entropies.append(-(lp[t - 1].exp() * lp[t - 1]).sum())
    return torch.stack(log_probs), torch.stack(entropies)


def _packed_log_probs(tree, packed, full_logits: bool = False):
    inputs = {"input_ids": packed["input_ids"][None], "position_ids": packed["position_ids"][None]}
    if full_logits:
        logits = tree(**inputs, **_tree_kwargs(packed)).logits[0]
    else:
        logits = tree.lm_head(tree.model(**inputs, **_tree_kwargs(packed)).last_hidden_state[0])
    index = packed["token_index"]
    return torch.log_softmax(logits, -1)[index, packed["shift_labels"][index]]


def _assert_same_grads(tree, eager):
    """Parameter gradients allclose (rtol 1e-4, atol 1e-6 in units of the tensor's largest gradient when that is above
    1: float32 rounding of Gemma2's gradients of magnitude ~20 is ~1e-5)."""
    eager_params = dict(eager.named_parameters())
    for name, param in tree.named_parameters():
        expected = eager_params[name].grad
        assert param.grad is not None and expected is not None, name
        atol = 1e-6 * max(1.0, expected.abs().max().item())
        torch.testing.assert_close(param.grad, expected, rtol=1e-4, atol=atol, msg=name)


def _check_exact(config, kind: str, full_logits: bool = False):
    tree, eager = _models(config)
    samples = _tree_samples(kind)
    packed = _pack(samples)
    tree_lp = _packed_log_probs(tree, packed, full_logits)
    ref_lp, _ = _reference(eager, samples, full_logits)
    assert tree_lp.shape == ref_lp.shape
    assert (tree_lp - ref_lp).abs().max().item() <= 1e-5
    tree_lp.sum().backward()
    ref_lp.sum().backward()
    _assert_same_grads(tree, eager)
    return tree_lp.detach()


@pytest.mark.parametrize("kind", ["shared_prompts", "branching", "chains", "one_sample", "prompt_lengths", "random0"])
@pytest.mark.parametrize("kv_heads", [2, 4], ids=["gqa", "mha"])
def test_qwen2_packed_forward_equals_per_sample(kind, kv_heads):
    _check_exact(_qwen2(kv_heads), kind)


@pytest.mark.parametrize("kind", ["branching", "prompt_lengths"])
def test_qwen2_sliding_window_equals_per_sample(kind):
    # layer 0 full attention, layer 1 a window of 3 tokens (transformers' eager path applies the window)
    config = _qwen2(use_sliding_window=True, sliding_window=3, max_window_layers=1)
    assert config.layer_types == ["full_attention", "sliding_attention"]
    windowed = _check_exact(config, kind)
    tree, _ = _models(_qwen2())  # the same weights without a window: the window must change the result
    assert (windowed - _packed_log_probs(tree, _pack(_tree_samples(kind)))).abs().max() > 1e-3


def test_gemma2_softcap_and_window_equal_per_sample():
    # Gemma2: attention-score softcap on every layer, alternating sliding (window 3) and full layers, final softcap
    def config(attn_softcap):
        return Gemma2Config(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            query_pre_attn_scalar=16,
            vocab_size=VOCAB,
            sliding_window=3,
            attn_logit_softcapping=attn_softcap,
            final_logit_softcapping=5.0,
            initializer_range=0.3,  # scores large enough for the cap to matter
        )

    capped = _check_exact(config(0.5), "branching", full_logits=True)
    tree, _ = _models(config(None))  # same weights without the cap: the cap must change the result
    assert (capped - _packed_log_probs(tree, _pack(_tree_samples("branching")), True)).abs().max() > 1e-3


@pytest.mark.parametrize("kind", ["shared_prompts", "branching"])
def test_trl_fused_lm_head_forward_equals_per_sample(kind):
    """The forward exactly as `AsyncGRPOTrainer.compute_loss` calls it, with TRL's fused LM head."""
    tree, eager = _models(_qwen2())
    add_fused_lm_head(tree, temperature=1.0, outputs=("log_probs", "entropy"))
    samples = _tree_samples(kind)
    packed = _pack(samples)
    outputs = tree(
        input_ids=packed["input_ids"][None],
        position_ids=packed["position_ids"][None],
        shift_labels=packed["shift_labels"][None],
        fused_lm_head=True,
        **_tree_kwargs(packed),
    )
    index = packed["token_index"]
    log_probs, entropy = outputs.log_probs.flatten()[index], outputs.entropy.flatten()[index]
    ref_lp, ref_entropy = _reference(eager, samples)
    assert (log_probs - ref_lp).abs().max().item() <= 1e-5
    assert (entropy - ref_entropy).abs().max().item() <= 1e-5
    log_probs.sum().backward()
    ref_lp.sum().backward()
    _assert_same_grads(tree, eager)


# ---- registration -------------------------------------------------------------------------------------------------


def test_use_tree_attention_overrides_trl_registration():
    packing.register_tree_attention()
    assert ALL_ATTENTION_FUNCTIONS[packing.TREE_ATTENTION] is packing.tree_attention
    assert use_tree_attention("cpu") == "sdpa"
    assert use_tree_attention(torch.device("cpu")) == "sdpa"
    assert ALL_ATTENTION_FUNCTIONS[packing.TREE_ATTENTION] is tree_sdpa_attention
    assert ALL_MASK_ATTENTION_FUNCTIONS[packing.TREE_ATTENTION](cache_position=None) is None
    with pytest.raises(TypeError, match="device"):
        use_tree_attention(0)


@pytest.mark.skipif(importlib.util.find_spec("kernels") is not None, reason="the flash kernel may load here")
def test_use_tree_attention_falls_back_without_kernels():
    assert use_tree_attention("cuda") == "sdpa"
    assert ALL_ATTENTION_FUNCTIONS[packing.TREE_ATTENTION] is tree_sdpa_attention
