"""bf16 on CPU: every trainer (the twelve GRPO-family algorithms, MIX, MIX-CHORD, on-policy distillation, DPO) trains
two steps with `bf16=True`, with the model loaded in bf16 and with fp32 weights under bf16 autocast.

Each run checks that the loss and the trainer's loss metrics are logged and finite, that every parameter moves, and
that a training step computes the loss in the dtype TRL uses for its own loss: a `TorchDispatchMode` records every
float32 tensor of `[B, T, V]` size (numel >= B·T·V/2; views and in-place results are not new tensors) created during
the first `training_step` (generation, scoring, loss, backward), and trl_ext may create no more of them, no more of
their elements, and no more of either per (op, number of dimensions), than `trl.GRPOTrainer` (the equivalent
`loss_type`) / `trl.DPOTrainer` creates in the same setting. The comparison is relative because TRL's fused log-prob
kernel itself makes fp32 `[N, V]` tiles of each scoring pass (N = rows × (sequence − 1); at the toy vocabulary one
tile is the whole vocabulary) and fp32 `[V, H]` gradient buffers. Logits upcast anywhere in trl_ext's loss path (an
explicit `.float()`, or a plain forward, whose logits accelerate's mixed-precision wrapper returns in fp32) add
`[B, T, V]` fp32 tensors that TRL does not have.
"""

from __future__ import annotations

import collections
import math

import pytest
import torch
import trl
from test_dpo_trainer import _config as dpo_config
from test_dpo_trainer import _trainer as dpo_trainer
from test_grpo_trainers import make_trainer as grpo_trainer
from test_mix_trainers import _trainer as mix_trainer
from test_on_policy_distill import _trainer as distill_trainer
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from trainer_helpers import (
    TRL_EQUIVALENTS,
    algorithm_classes,
    changed,
    cpu_config,
    kl_and_entropy,
    length_reward,
    snapshot,
)

import trl_ext
from trl_ext.toy import build_tokenizer, toy_dataset, toy_preference_dataset

# 2 prompts × 4 generations (DPO: 4 pairs = 8 rows), completions of at most 8 tokens, 2 steps. lr 1e-2: bf16 weights
# do not resolve Adam's first steps of 1e-3 on weights near 1 (the RMSNorm scales), so a smaller lr moves only some.
COMMON = {"bf16": True, "max_steps": 2, "learning_rate": 1e-2}
ROWS, COMPLETION = 8, 8
# The GRPO family: beta > 0, so the reference model's log-probs and the KL term run in bf16 too (TRL with the same
# beta). No entropy bonus: its backward through the fused kernel makes fp32 tiles that TRL (no bonus) does not.
GRPO_ARGS = {"beta": 0.02}
SETTINGS = {"bf16-weights": torch.bfloat16, "fp32-weights-autocast": torch.float32}
CASES = sorted(name for name, spec in trl_ext.ALGORITHMS.items() if spec.has_trainer)  # every trainer


class LargeFloat32(TorchDispatchMode):
    """Records (op, shape) of every float32 op output with at least `threshold` elements that is a new tensor (not
    sharing a storage with an input: views and in-place ops are not allocations)."""

    def __init__(self, threshold: int) -> None:
        super().__init__()
        self.threshold = threshold
        self.created: list[tuple[str, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        large = [
            t
            for t in tree_leaves(out)
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.numel() >= self.threshold
        ]
        if large:
            inputs = {
                t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)
            }
            for t in large:
                if t.untyped_storage().data_ptr() not in inputs:
                    self.created.append((func.__name__, tuple(t.shape)))
        return out


def train_recording_first_step(trainer, vocab: int) -> tuple[list[tuple[str, tuple[int, ...]]], torch.dtype]:
    """Train; return the large fp32 tensors created during the first `training_step` and the dtype of its loss."""
    recorder, step, loss_dtype = LargeFloat32(ROWS * COMPLETION * vocab // 2), trainer.training_step, []

    def recorded(*args, **kwargs):
        if loss_dtype:
            return step(*args, **kwargs)
        with recorder:
            loss = step(*args, **kwargs)
        loss_dtype.append(loss.dtype)
        return loss

    trainer.training_step = recorded
    trainer.train()
    return recorder.created, loss_dtype[0]


def _by_kind(created) -> tuple[collections.Counter, collections.Counter]:
    """Count and elements of the recorded tensors per kind: (op, number of dimensions)."""
    counts, sizes = collections.Counter(), collections.Counter()
    for op, shape in created:
        counts[op, len(shape)] += 1
        sizes[op, len(shape)] += math.prod(shape)
    return counts, sizes


@pytest.fixture(scope="module")
def trl_reference(random_tiny_model, tmp_path_factory):
    """`(kind, dtype, overrides) -> (large fp32 tensors, loss dtype)` of TRL's own trainer's first training step on
    the same model and batch, computed once per setting."""
    cache = {}

    def reference(kind: str, dtype: torch.dtype, **overrides):
        key = (kind, dtype, tuple(sorted(overrides.items())))
        if key not in cache:
            out = str(tmp_path_factory.mktemp("trl"))
            settings = {**COMMON, "max_steps": 1, "model_init_kwargs": {"dtype": dtype}, **overrides}
            if kind == "dpo":
                trainer = trl.DPOTrainer(
                    model=random_tiny_model,
                    args=dpo_config(trl.DPOConfig, out, **settings),
                    train_dataset=toy_preference_dataset(16),
                    processing_class=build_tokenizer(),
                )
            else:
                trainer = trl.GRPOTrainer(
                    model=random_tiny_model,
                    reward_funcs=length_reward,
                    args=cpu_config(trl.GRPOConfig, out, **settings),
                    train_dataset=toy_dataset(32),
                    processing_class=build_tokenizer(),
                )
            cache[key] = train_recording_first_step(trainer, len(build_tokenizer()))
        return cache[key]

    return reference


def build(case: str, model: str, teacher: str, out: str, dtype: torch.dtype):
    """trl_ext's trainer for `case`, the metrics it must log, and TRL's trainer of the same setting (kind, config)."""
    settings = {**COMMON, "model_init_kwargs": {"dtype": dtype}}
    if case in algorithm_classes("grpo", trainers=True):
        beta = GRPO_ARGS["beta"] if trl_ext.get_algorithm(case).use_reference else 0.0  # no reference model
        grpo_args = kl_and_entropy(case, beta)  # the KL estimator: the record's, k2 where it has none
        trainer = grpo_trainer(case, model, out, reward_funcs=length_reward, **grpo_args, **settings)
        _, metrics = trainer.policy_loss_fn(  # the loss's own metric names (Trinity-RFT's)
            logprob=torch.zeros(2, 3),
            old_logprob=torch.zeros(2, 3),
            action_mask=torch.ones(2, 3),
            advantages=torch.tensor([1.0, -1.0]),
        )
        # TRL's equivalent loss_type (the README's mapping); TRL's default `dapo` (token-mean) for the others.
        theirs = TRL_EQUIVALENTS.get(case, ({}, {"loss_type": "dapo"}))[1]
        kl = ["kl", "kl_coef"] if beta else []
        return trainer, [*metrics, "policy_loss", *kl, "entropy"], ("grpo", {"beta": beta, **theirs})
    if case in ("mix", "mix_chord"):
        cls = trl_ext.MIXTrainer if case == "mix" else trl_ext.MIXCHORDTrainer
        # beta = 0 (both): with a reference model MIX scores the rollouts' and the expert rows' reference log-probs in
        # two passes (half-batch fp32 tiles: more tensors than TRL's one pass over the batch, fewer elements).
        trainer = mix_trainer(model, out, cls=cls, **settings)
        expert = ["expert/sft_loss"] if case == "mix" else ["expert/sft_phi_loss", "mu"]
        return trainer, ["usual/pg_loss", "usual/ppo_kl", *expert, "policy_loss", "entropy"], ("grpo", {})
    if case == "on_policy_distill":
        trainer = distill_trainer(model, teacher, out, **settings)
        # Two no-grad scoring passes (the teacher's log-probs, the student's sampling log-probs) like TRL's with a
        # reference model (beta > 0) and off-policy iterations (old_per_token_logps).
        trl_settings = {"beta": 0.02, "num_iterations": 2}
        return trainer, ["kl/mean", "kl/std", "pg_loss", "policy_loss", "entropy"], ("grpo", trl_settings)
    trainer = dpo_trainer(model, out, **settings)
    return trainer, ["dpo_loss", "chosen_reward", "rejected_reward", "accuracy_mean", "kl", "kl_coef"], ("dpo", {})


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("case", CASES)
def test_trains_in_bf16_without_fp32_logits(case, setting, random_tiny_model, random_teacher, trl_reference, tmp_path):
    dtype = SETTINGS[setting]
    trainer, metric_names, (kind, trl_overrides) = build(case, random_tiny_model, random_teacher, str(tmp_path), dtype)
    assert trainer.model.dtype == dtype
    if case == "on_policy_distill":
        assert next(trainer.teacher_model.parameters()).dtype == dtype
    before = snapshot(trainer.model)
    created, loss_dtype = train_recording_first_step(trainer, len(build_tokenizer()))

    # 1. Finite loss and loss metrics at every logged step.
    steps = [entry for entry in trainer.state.log_history if "loss" in entry and "train_loss" not in entry]
    assert len(steps) == 2
    for entry in steps:
        for name in ["loss", *metric_names]:
            assert name in entry and math.isfinite(entry[name]), (name, entry)
    # 2. Every parameter moved.
    assert changed(before, trainer.model) == set(before)
    # 3. No large fp32 tensor that TRL's own trainer does not also make in the same setting, and the loss in TRL's
    # dtype.
    theirs, trl_loss_dtype = trl_reference(kind, dtype, **trl_overrides)
    assert loss_dtype == trl_loss_dtype
    report = f"trl_ext: {collections.Counter(created)}\nTRL: {collections.Counter(theirs)}"
    assert len(created) <= len(theirs), report
    assert sum(math.prod(shape) for _, shape in created) <= sum(math.prod(shape) for _, shape in theirs), report
    (ours_counts, ours_sizes), (theirs_counts, theirs_sizes) = _by_kind(created), _by_kind(theirs)
    for key in ours_counts:  # e.g. a `[B, T, V]` log_softmax output: 3 dimensions, where TRL's kernel tiles have 2
        assert ours_counts[key] <= theirs_counts[key] and ours_sizes[key] <= theirs_sizes[key], (key, report)
