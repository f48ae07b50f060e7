"""The trainers on a CUDA GPU in bf16: every trainer with its reference model, teacher or expert rows, critic PPO with
either critic, LoRA with the reference as the disabled adapter, `teacher_device`, gradient checkpointing, and the loss
step's host syncs against TRL's own trainer. Skipped without CUDA (`pytest -m gpu` on a GPU machine)."""

from __future__ import annotations

import importlib.util
import math
import warnings

import pytest
import torch
import trl
from peft import LoraConfig
from trainer_helpers import (
    TRL_EQUIVALENTS,
    TRL_SHARED_SETTINGS,
    changed,
    kl_and_entropy,
    length_reward,
    logged,
    snapshot,
)

import trl_ext
from trl_ext import toy

ALGORITHMS = sorted(name for name, spec in trl_ext.ALGORITHMS.items() if spec.has_trainer)  # every trainer
CUDA = {
    "use_cpu": False,
    "bf16": True,
    "report_to": "none",
    "save_strategy": "no",
    "logging_steps": 1,
    "seed": 0,
    "max_steps": 2,
    "learning_rate": 1e-3,
    "activation_checkpointing": False,
}
LORA = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], "task_type": "CAUSAL_LM"}


def build(algorithm: str, model: str, tmp_path, teacher: str | None = None, lora: bool = False, **overrides):
    """A trainer of `algorithm` on CUDA: bf16 weights and autocast, a reference model (beta / kl_coef > 0), the
    toy teacher for distillation, expert rows for MIX; with `lora`, a LoRA adapter whose disabled state is the
    reference."""
    spec = trl_ext.get_algorithm(algorithm)
    settings = {**CUDA, "output_dir": str(tmp_path), "model_init_kwargs": {"dtype": "bfloat16"}, **overrides}
    extra = {"peft_config": LoraConfig(**LORA)} if lora else {}
    if algorithm == "dpo":
        config = spec.config_class(**{"per_device_train_batch_size": 8, **settings})
        return spec.trainer_class(model, args=config, train_dataset=toy.toy_preference_dataset(64), **extra)
    settings = {"per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 8, **settings}
    if spec.family.name == "async":  # the offline worker (on the CPU, its own process) and fixed-count batches
        settings = {"rollout_backend": "transformers", "token_budget": 0, **settings}
    config = spec.config_class(**{**kl_and_entropy(algorithm, beta=0.04), **settings})
    if algorithm == "on_policy_distill":
        extra["teacher_model"] = teacher
    if algorithm.startswith("mix"):
        extra["expert_dataset"] = toy.toy_expert_dataset(64)
    reward = None if algorithm == "on_policy_distill" else [toy.toy_reward, length_reward]
    return spec.trainer_class(model, reward_funcs=reward, args=config, train_dataset=toy.toy_dataset(64), **extra)


def _trains(trainer) -> None:
    before = snapshot(trainer.model)
    trainer.train()
    assert changed(before, trainer.model), "no parameter changed"
    losses = logged(trainer, "loss")
    assert losses and all(math.isfinite(v) for v in losses), losses


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_trainer_trains_in_bf16_on_cuda(algorithm, tiny_model, tiny_teacher, tmp_path):
    trainer = build(algorithm, tiny_model, tmp_path, teacher=tiny_teacher)
    assert trainer.model.device.type == "cuda" and trainer.model.dtype == torch.bfloat16
    reference = getattr(trainer, "ref_model", None)
    assert reference is not None and next(reference.parameters()).device.type == "cuda"
    if algorithm == "on_policy_distill":
        assert next(trainer.teacher_model.parameters()).device.type == "cuda"
    _trains(trainer)
    names = ("dpo_loss", "kl") if algorithm == "dpo" else ("policy_loss", "kl", "entropy")
    for name in names:
        values = logged(trainer, name)
        assert values and all(math.isfinite(v) for v in values), (name, values)
    if algorithm.startswith("mix"):
        assert logged(trainer, "expert/sft_phi_loss" if algorithm == "mix_chord" else "expert/sft_loss")


@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None, reason="needs liger-kernel (and triton)")
@pytest.mark.parametrize("algorithm", ["sapo", "mix_chord", "dpo"])
def test_liger_layer_kernels(algorithm, tiny_model, tiny_teacher, tmp_path):
    """`use_liger_kernel=True` (TRL 1.16: Liger's layer kernels, the trainer's own loss) trains every family."""
    trainer = build(algorithm, tiny_model, tmp_path, teacher=tiny_teacher, use_liger_kernel=True)
    _trains(trainer)
    assert trainer.model.model.norm._get_name() == "LigerRMSNorm"  # the kernels were applied


@pytest.mark.parametrize("algorithm", ["sapo", "gspo", "mix_chord", "on_policy_distill", "dpo"])
def test_lora_with_the_reference_as_the_disabled_adapter(algorithm, tiny_model, tiny_teacher, tmp_path):
    trainer = build(algorithm, tiny_model, tmp_path, teacher=tiny_teacher, lora=True)
    assert getattr(trainer, "ref_model", None) is None  # the reference is the model with its adapter disabled
    before = snapshot(trainer.model)
    trainer.train()
    moved = changed(before, trainer.model)
    assert moved and all("lora_" in name for name in moved), sorted(moved)[:5]
    kl = logged(trainer, "kl")
    assert kl and all(math.isfinite(v) for v in kl) and kl[-1] > 0  # the adapter moved away from the reference


def test_teacher_device(tiny_model, tiny_teacher, tmp_path):
    """A teacher on another device (`teacher_device`) scores the same tokens as one on the student's device: the
    same first generation batch gives the same distillation KL (fp32, so the devices' kernels agree closely)."""
    kl = {}
    for device in ("cpu", "cuda:0"):
        overrides = {"bf16": False, "model_init_kwargs": None, "teacher_device": device, "max_steps": 1, "beta": 0.0}
        trainer = build("on_policy_distill", tiny_model, tmp_path / device, teacher=tiny_teacher, **overrides)
        assert next(trainer.teacher_model.parameters()).device == torch.device(device)
        _trains(trainer)
        kl[device] = logged(trainer, "kl/mean")[0]
    assert kl["cpu"] == pytest.approx(kl["cuda:0"], rel=1e-3, abs=1e-4)


@pytest.mark.parametrize(("algorithm", "lora"), [("sapo", False), ("mix_chord", False), ("sapo", True)])
def test_gradient_checkpointing_gives_the_same_update(algorithm, lora, tiny_model, tmp_path):
    """Gradient checkpointing recomputes activations in the backward: the update must not change (fp32)."""
    updates = []
    for checkpointing in (False, True):
        overrides = {"bf16": False, "model_init_kwargs": None, "max_steps": 1}
        overrides["activation_checkpointing"] = checkpointing
        trainer = build(algorithm, tiny_model, tmp_path / str(checkpointing), lora=lora, **overrides)
        before = snapshot(trainer.model)
        trainer.train()
        updates.append(torch.cat([(p.detach() - before[n]).flatten() for n, p in trainer.model.named_parameters()]))
    assert updates[0].norm() > 0
    torch.testing.assert_close(updates[1], updates[0], rtol=1e-3, atol=1e-6)


def _count_loss_syncs(trainer) -> list[int]:
    """Train, counting the host syncs (`torch.cuda.set_sync_debug_mode`) inside each call of `_compute_loss`."""
    counts: list[int] = []
    compute_loss = trainer._compute_loss

    def counted(model, inputs, *args, **kwargs):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                result = compute_loss(model, inputs, *args, **kwargs)
            finally:
                torch.cuda.set_sync_debug_mode(0)
        counts.append(sum("synchroniz" in str(w.message) for w in caught))
        return result

    trainer._compute_loss = counted
    trainer.train()
    return counts


@pytest.mark.parametrize("algorithm", ["sapo", "cispo", "gspo", "grpo"])
def test_loss_step_syncs_no_more_than_trls(algorithm, tiny_model, tmp_path):
    """The loss step (log-probs, loss, KL, entropy, metrics) of one micro-batch waits on the GPU no more often than
    TRL's own `_compute_loss` with the equivalent loss_type, over 2 optimizer steps of 4 micro-batches each."""
    ours, theirs = TRL_EQUIVALENTS[algorithm]
    settings = {**CUDA, "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 8}
    settings.update(gradient_accumulation_steps=4, beta=0.04, model_init_kwargs={"dtype": "bfloat16"})
    spec = trl_ext.get_algorithm(algorithm)
    data = toy.toy_dataset(64)
    reward = [toy.toy_reward, length_reward]
    config = spec.config_class(**settings, output_dir=str(tmp_path / "ours"), **{**TRL_SHARED_SETTINGS, **ours})
    mine = _count_loss_syncs(spec.trainer_class(tiny_model, reward_funcs=reward, args=config, train_dataset=data))
    config = trl.GRPOConfig(**settings, output_dir=str(tmp_path / "trl"), **theirs)
    trls = _count_loss_syncs(trl.GRPOTrainer(tiny_model, reward_funcs=reward, args=config, train_dataset=data))
    print(f"{algorithm}: host syncs per micro-batch, trl_ext {mine}, TRL {trls}")
    assert len(mine) == len(trls) == 8
    assert sum(mine) <= sum(trls), (mine, trls)
    # Inside an optimizer window (not its last micro-batch, where the metrics are logged) at most TRL's count.
    inner = [i for i in range(8) if i % 4 != 3]
    assert max(mine[i] for i in inner) <= max(trls[i] for i in inner), (mine, trls)


@pytest.mark.parametrize("top_k", [64, -1])
def test_dense_distillation_on_cuda(top_k, tiny_model, tiny_teacher, tmp_path):
    """teacher_top_k on CUDA in bf16 (the float32-output projection), with a LoRA student: finite divergence, only
    the adapter moves."""
    trainer = build("on_policy_distill", tiny_model, tmp_path, teacher=tiny_teacher, lora=True, teacher_top_k=top_k)
    before = snapshot(trainer.model)
    trainer.train()
    moved = changed(before, trainer.model)
    assert moved and all("lora_" in name for name in moved)
    divergence = logged(trainer, "distill/divergence")
    assert divergence and all(math.isfinite(v) and v > 0 for v in divergence)


def test_dense_whole_vocabulary_equals_trls_kernel_on_cuda(tiny_model, tiny_teacher, tmp_path):
    """teacher_top_k=-1 on CUDA against TRL's Triton `ChunkedDivergenceFunction` on the same hidden states (bf16
    inputs, float32 logits on both sides), and the same with the teacher on the CPU (`teacher_device`: its output
    layer is copied to the student's device once)."""
    from trl.trainer.distillation_trainer import _chunked_divergence_loss

    from trl_ext.losses.distillation import OutputLayer, dense_divergence

    torch.manual_seed(0)
    student = torch.nn.Linear(64, 300, bias=False).cuda().bfloat16()
    teacher = torch.nn.Linear(64, 300, bias=False).cuda().bfloat16()
    h_s = torch.randn(2, 40, 64, device="cuda", dtype=torch.bfloat16)
    h_t = torch.randn(2, 40, 64, device="cuda", dtype=torch.bfloat16)
    mask = torch.ones(2, 40, device="cuda")
    for beta in (0.0, 0.5, 1.0):
        theirs, _, _ = _chunked_divergence_loss(h_s, h_t, student.weight, teacher.weight, mask, beta)
        ours = dense_divergence(
            h_s.flatten(0, 1), OutputLayer(student.weight), torch.zeros(80, dtype=torch.long, device="cuda"), beta,
            teacher_hidden=h_t.flatten(0, 1), teacher_layer=OutputLayer(teacher.weight),
        ).divergence.mean()  # fmt: skip
        assert ours.item() == pytest.approx(theirs.item(), rel=1e-3, abs=1e-5), beta

    divergence = {}
    for device in ("cpu", "cuda:0"):
        overrides = {"bf16": False, "model_init_kwargs": None, "teacher_device": device, "max_steps": 1}
        trainer = build("on_policy_distill", tiny_model, tmp_path / device, teacher=tiny_teacher, teacher_top_k=-1,
                        **overrides)  # fmt: skip
        _trains(trainer)
        divergence[device] = logged(trainer, "distill/divergence")[0]
    assert divergence["cpu"] == pytest.approx(divergence["cuda:0"], rel=1e-3, abs=1e-5)


@pytest.mark.parametrize("algorithm", ["multi_step_grpo", "gigpo"])
def test_multi_turn_agent_on_cuda(algorithm, tmp_path):
    """The toy lookup agent through TRL's tool loop on CUDA in bf16: real generation calls the tool (more than one
    model turn per episode), the per-turn advantages train, and GiGPO finds shared anchor states."""
    from trl_ext import toy_agent

    spec = trl_ext.get_algorithm(algorithm)
    settings = {**toy_agent.AGENT_TRAINING, **CUDA, "output_dir": str(tmp_path), "beta": 0.04}
    settings["model_init_kwargs"] = {"dtype": "bfloat16"}
    trainer = spec.trainer_class(
        toy_agent.tiny_agent_model_path(),
        reward_funcs=toy_agent.lookup_reward,
        args=spec.config_class(**settings),
        train_dataset=toy_agent.toy_agent_dataset(64),
        environment_factory=toy_agent.LookupEnvironment,
    )
    assert trainer.model.device.type == "cuda" and trainer.model.dtype == torch.bfloat16
    _trains(trainer)
    turns = logged(trainer, "turns/per_completion")
    assert turns and all(t > 1 for t in turns), turns
    for name in ("policy_loss", "kl", "entropy"):
        values = logged(trainer, name)
        assert values and all(math.isfinite(v) for v in values), (name, values)
    if algorithm == "gigpo":
        assert all(v > 0 for v in logged(trainer, "advantage/gigpo/anchor_groups_size_gt1"))


@pytest.mark.parametrize("shared_backbone", [False, True])
def test_critic_ppo_on_cuda(shared_backbone, tiny_model, tmp_path):
    """Critic PPO in bf16 on CUDA with either critic: the value model (or the value head) on the GPU in bf16, both
    losses finite, and the critic moved."""
    trainer = build("ppo", tiny_model, tmp_path, num_generations=1, shared_backbone=shared_backbone)
    critic = trainer.value_head if shared_backbone else trainer.value_model
    parameter = next(critic.parameters())
    assert parameter.device.type == "cuda" and parameter.dtype == torch.bfloat16
    before = snapshot(critic)
    _trains(trainer)
    assert changed(before, critic), "the critic did not move"
    for name in ("vf_loss", "critic/explained_variance"):
        values = logged(trainer, name)
        assert values and all(math.isfinite(v) for v in values), (name, values)
