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


def build_cross_tokenizer():
    """A second byte-level BPE tokenizer, trained in-process on the toy task's text: another vocabulary than the toy
    tokenizer's (330 entries, eos `<|endoftext|>`, pad `<pad>`) whose merges cross spaces in process (`" c c c"` is
    `Ġ`, `cĠcĠ`, `c` where the toy tokenizer has `Ġc` three times), for cross-tokenizer distillation. It shares the 256
    byte tokens and the eos string with the toy tokenizer (saved beside a Qwen2 model, `AutoTokenizer` reloads it as
    a Qwen2 tokenizer: Qwen2's pre-tokenizer, and `<|endoftext|>` added when missing, past the model's vocabulary)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from trl_ext.toy import CHAT_TEMPLATE, LETTERS, PROMPT_TEMPLATE

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=330,
        special_tokens=["<|endoftext|>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [PROMPT_TEMPLATE.format(letter=c) + " " + " ".join([c] * n) for c in LETTERS for n in range(1, 7)]
    backend.train_from_iterator(corpus * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|endoftext|>",
        pad_token="<pad>",
        padding_side="left",
        model_max_length=256,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def served_teacher(trainer, inputs: dict, k: int) -> dict[str, torch.Tensor]:
    """What TRL's vLLM teacher server returns for a self-distillation batch (SDFT, SDPO), computed from the trainer's
    own teacher: the sampled tokens' log-probs and the top-`k` log-probs and ids, −inf / 0 past each completion's
    end."""
    import math

    width = inputs["completion_ids"].size(1)
    with torch.no_grad():
        logits = trainer._forward_logits(
            trainer.teacher_model, inputs["teacher_input_ids"], inputs["teacher_attention_mask"], width
        ).log_softmax(-1)
    real = inputs["completion_mask"].bool()
    actual = logits.gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    top, ids = logits.topk(k, dim=-1)
    return {
        "actual_logprobs": torch.where(real, actual, -math.inf),
        "topk_logprobs": torch.where(real.unsqueeze(-1), top, -math.inf),
        "topk_token_ids": torch.where(real.unsqueeze(-1), ids, 0),
    }
