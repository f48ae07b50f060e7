"""Shared fixtures: the offline tiny models (built once per test session, shared by the xdist workers) and
trainer-run helpers."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

from pathlib import Path

import pytest
import torch
from session_builds import TOY_CACHE, built_once

# One thread: as fast as two for the tiny model, and immune to the 30-60x slowdowns that oversubscribed
# threads suffer on a busy 2-core machine. Subprocess launches get OMP_NUM_THREADS=1 for the same reason.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """Path of the package's default toy model (pretrained on the task format), built in a session folder."""
    from trl_ext.toy import tiny_model_path

    return built_once(tmp_path_factory, "tiny_model", lambda folder: tiny_model_path(str(folder)), TOY_CACHE)


def _random_tiny(tmp_path_factory, name: str, seed: int) -> str:
    def build(folder: Path) -> str:
        from trl_ext.toy import build_model, build_tokenizer

        done = folder / ".built"
        if not done.is_file():
            tokenizer = build_tokenizer()
            build_model(tokenizer, seed=seed).save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            done.touch()
        return str(folder)

    return built_once(tmp_path_factory, name, build)


@pytest.fixture(scope="session")
def random_tiny_model(tmp_path_factory) -> str:
    """Path of an untrained tiny Qwen2 with the toy tokenizer (for tests that only compare updates)."""
    return _random_tiny(tmp_path_factory, "random_tiny", seed=0)


@pytest.fixture(scope="session")
def random_teacher(tmp_path_factory) -> str:
    """Another untrained tiny Qwen2 (seed 1) with the toy tokenizer: a teacher that is not the student."""
    return _random_tiny(tmp_path_factory, "random_teacher", seed=1)


@pytest.fixture
def toy_cache(tiny_model, monkeypatch) -> str:
    """Point `trl_ext.toy.tiny_model_path()` (the scripts' default model) at the session's built model."""
    root = os.path.dirname(tiny_model)
    monkeypatch.setenv("TRL_EXT_CACHE", root)
    return root


@pytest.fixture(scope="session")
def tiny_teacher(tiny_model, tmp_path_factory) -> str:
    """Path of the toy task's teacher (`trl_ext.toy.tiny_teacher_path`), cached beside `tiny_model` so that the
    scripts' default teacher (under `toy_cache`) is this one."""
    from trl_ext.toy import tiny_teacher_path

    return built_once(tmp_path_factory, "tiny_teacher", lambda folder: tiny_teacher_path(str(folder)), TOY_CACHE)


@pytest.fixture(scope="session")
def tiny_agent(tiny_model, tmp_path_factory) -> str:
    """Path of the toy agent model (`trl_ext.toy_agent.tiny_agent_model_path`, ~20 s to build), cached beside
    `tiny_model` so that the scripts' default agent (under `toy_cache`) is this one."""
    from trl_ext.toy_agent import tiny_agent_model_path

    return built_once(tmp_path_factory, "tiny_agent", lambda folder: tiny_agent_model_path(str(folder)), TOY_CACHE)


@pytest.fixture(scope="session")
def tiny_moe(tmp_path_factory) -> str:
    """An untrained tiny Qwen2-MoE (4 experts, top-2, router aux loss coefficient 0.01) with the toy tokenizer."""
    from transformers import GenerationConfig, Qwen2MoeConfig, Qwen2MoeForCausalLM

    from trl_ext.toy import build_tokenizer

    tokenizer = build_tokenizer()
    config = Qwen2MoeConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        router_aux_loss_coef=0.01,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    model = Qwen2MoeForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True, max_new_tokens=8
    )
    path = str(tmp_path_factory.mktemp("tiny_moe"))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def float_tolerance():
    """`float_tolerance(dtype, n_terms=1, magnitude=1.0)`: `{"rtol", "atol"}` for comparing two computations of the
    same float values that round differently (another summation order, batch split, process count or kernel: AVX2
    and AVX-512 CPUs reduce in other orders). Spread it into `torch.testing.assert_close`; for `pytest.approx` pass
    `rel=tol["rtol"], abs=tol["atol"]`. (A fixture, as `from conftest import` would find tests/gpu/conftest.py.)

    Each float operation rounds by at most eps / 2 relative, eps = `torch.finfo(dtype).eps` (float32 2**-23 ≈ 1.2e-7,
    float64 2**-52 ≈ 2.2e-16). Over a sum of n terms the roundings of the partial sums add up like a random walk, to
    about eps·√n times the size of the numbers summed (eps·n at worst), and two orderings differ by that much:

        rtol = 4 · eps · √n_terms        atol = rtol · magnitude

    The factor 4 covers the few roundings per term (a product, an exp, the stored result). `n_terms`: the size of the
    sums, e.g. the tokens a gradient or a token mean sums over. `magnitude`: the size of the numbers that are rounded,
    not of the result, since where they cancel (an update entry near 0, a loss near 0) their absolute error remains;
    for a parameter update measured as (p + Δ) − p, the largest |p| plus the largest |Δ|.
    """

    def tolerance(dtype: torch.dtype, n_terms: float = 1, magnitude: float | torch.Tensor = 1.0) -> dict[str, float]:
        if isinstance(magnitude, torch.Tensor):
            magnitude = magnitude.detach().item()
        rtol = 4 * torch.finfo(dtype).eps * float(n_terms) ** 0.5
        return {"rtol": rtol, "atol": rtol * float(magnitude)}

    return tolerance
