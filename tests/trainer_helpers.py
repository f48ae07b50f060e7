"""Small helpers for the trainer tests: CPU configs for the tiny model and parameter snapshots."""

from __future__ import annotations

from typing import Any

import torch

CPU = {
    "use_cpu": True,
    "bf16": False,
    "activation_checkpointing": False,
    "report_to": "none",
    "save_strategy": "no",
    "logging_steps": 1,
    "seed": 0,
}


# The trl_ext algorithms with a TRL equivalent (tests/trainers/test_trl_parity.py checks them update by update):
# algorithm: (trl_ext config overrides, trl.GRPOConfig overrides).
TRL_EQUIVALENTS = {
    "sapo": ({"loss_agg_mode": "seq-mean-token-mean"}, {"loss_type": "sapo"}),
    "cispo": ({"clip_range_high": 4.0}, {"loss_type": "cispo", "epsilon_high": 5.0}),
    # TRL's bias-corrected KL multiplies by the *sequence* ratio under sequence-level IS: compare plain k3.
    "gspo": (
        {"kl_loss_fn": "k3"},
        {
            "loss_type": "grpo",
            "importance_sampling_level": "sequence",
            "epsilon": 3e-4,
            "epsilon_high": 4e-4,
            "use_bias_correction_kl": False,
        },
    ),
    "grpo": ({"loss_agg_mode": "token-mean"}, {"loss_type": "dapo"}),
}
# TRL normalizes advantages by (group std + 1e-4) and adds the bias-corrected k3 KL.
TRL_SHARED_SETTINGS = {"advantage_epsilon": 1e-4, "kl_loss_fn": "corrected_k3"}


def cpu_config(config_class: type, output_dir: str, **overrides: Any):
    """A config for a few quick steps of the tiny model on CPU (batch 8 = 2 prompts × 4 generations)."""
    settings = {
        **CPU,
        "output_dir": output_dir,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 8,
        "max_steps": 2,
        "learning_rate": 1e-3,
        **overrides,
    }
    return config_class(**settings)


def free_port() -> int:
    """A TCP port nothing listens on now: a launched multi-process run's rendezvous port, instead of accelerate's
    default 29500, which a run still shutting down (or another job on the machine) may hold, hanging the new one."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def changed(before: dict[str, torch.Tensor], model: torch.nn.Module) -> set[str]:
    return {name for name, p in model.named_parameters() if not torch.equal(before[name], p.detach())}


def logged(trainer, key: str) -> list[float]:
    return [entry[key] for entry in trainer.state.log_history if key in entry]


def length_reward(completions, **kwargs) -> list[float]:
    """A graded reward (completion length mod 5) that varies within almost every group, so every step has a
    non-zero policy gradient even when the toy task's all-or-nothing reward is 0 for a whole small batch."""
    return [float(len(c) % 5) for c in completions]


def toy_trainer(trainer_class, config, model_path: str, reward_funcs=length_reward, rows: int = 32):
    """A GRPO-family trainer (trl's or trl_ext's) on `rows` prompts of the toy task, with the toy tokenizer."""
    from trl_ext.toy import build_tokenizer, toy_dataset

    return trainer_class(
        model=model_path,
        reward_funcs=reward_funcs,
        args=config,
        train_dataset=toy_dataset(rows),
        processing_class=build_tokenizer(),
    )


def train_update(trainer) -> dict[str, torch.Tensor]:
    """Train `trainer`; each parameter's update."""
    before = snapshot(trainer.model)
    trainer.train()
    return {name: p.detach() - before[name] for name, p in trainer.model.named_parameters()}


def kl_and_entropy(algorithm: str, beta: float = 0.0, entropy_coef: float = 0.0) -> dict[str, Any]:
    """Config settings that add a KL term `beta` (only where the record has a reference model) and an entropy bonus
    `entropy_coef` to `algorithm`'s config, choosing `k2` / `default` where its record has no such term (`none`)."""
    import trl_ext

    spec = trl_ext.get_algorithm(algorithm)
    settings: dict[str, Any] = {}
    if beta and spec.use_reference:
        settings.update(beta=beta, kl_loss_fn="k2" if spec.kl_loss_fn == "none" else spec.kl_loss_fn)
    if entropy_coef:
        entropy = "default" if spec.entropy_loss_fn == "none" else spec.entropy_loss_fn
        settings.update(entropy_coef=entropy_coef, entropy_loss_fn=entropy)
    return settings


ROLLOUT_FAMILIES = ("grpo", "mix", "distill", "critic")
"""The trainer families that generate their own rollouts (a `trl.GRPOTrainer`), one config class per algorithm."""


def algorithm_classes(*families: str, trainers: bool = False) -> dict[str, type]:
    """{algorithm: config class (or trainer class)} of the algorithms of `families`, from the records."""
    import trl_ext

    return {
        name: spec.trainer_class if trainers else spec.config_class
        for name, spec in trl_ext.ALGORITHMS.items()
        if spec.trainer in families
    }


def build_tool_model(path: str) -> str:
    """The untrained toy model with its tokenizer wearing TRL's shipped Qwen3 chat template, saved to `path`: TRL
    renders tool schemas with it and parses the model's tool calls (it attaches that parser itself, as for a real
    Qwen3 checkpoint)."""
    import importlib.resources

    from trl_ext.toy import build_model, build_tokenizer

    tokenizer = build_tokenizer()
    tokenizer.chat_template = (importlib.resources.files("trl") / "chat_templates" / "qwen3.jinja").read_text()
    tokenizer.model_max_length = 2048
    model = build_model(tokenizer, seed=0)
    # The tool schemas in the system prompt alone take ~600 tokens of this small byte-level vocabulary, and TRL's
    # tool loop stops a rollout whose sequence reaches max_position_embeddings (256 for the toy). RoPE has no table,
    # so a longer limit is just a number.
    model.config.max_position_embeddings = 2048
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def child_loop(worker):
    """The child loop (`RolloutLoop`) of a `TransformersRolloutWorker`, run in this process: no spawn, plain queues,
    no weight receiver (call its `_rollout_batch(version=...)`; the samples land on `loop.channels.rollout_buffer`)."""
    import queue
    import threading
    from types import SimpleNamespace

    from trl_ext.async_rollout.rollout_loop import Channels, RolloutLoop

    channels = Channels(
        rollout_buffer=queue.Queue(), metrics_queue=queue.Queue(), stop_event=threading.Event(),
        ready_event=threading.Event(), failed_event=threading.Event(), error_queue=queue.Queue(),
        heartbeat=SimpleNamespace(value=0.0), stage=SimpleNamespace(value=b""),
    )  # fmt: skip
    return RolloutLoop(worker._config, channels, receiver=None)
