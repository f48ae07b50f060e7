"""Helpers of the asynchronous trainer's tests: stand-ins for TRL's worker protocols, hand-made samples, packed rows."""

from __future__ import annotations

import queue
from typing import Any

import numpy as np
import torch
from trainer_helpers import cpu_config


class StubWorker:
    """TRL's `RolloutWorkerProtocol` with a queue the test fills itself."""

    def __init__(self):
        self.rollout_buffer: queue.Queue = queue.Queue()
        self.metrics_queue: queue.Queue = queue.Queue()
        self.versions: list[int] = []

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def update_model_version(self, version: int) -> None:
        self.versions.append(version)

    def check_health(self, stale_after_s: float) -> None:
        pass


class StubTransfer:
    """TRL's `WeightTransferProtocol`, keeping the names it was sent (or failing, to test the error)."""

    def __init__(self, fail: bool = False):
        self.fail, self.sent = fail, []

    def init_weight_transfer(self) -> None:
        pass

    def pause(self) -> None:
        pass

    def send_weights(self, iterator) -> None:
        names = [name for name, _ in iterator]
        if self.fail:
            raise ConnectionError("the receiver went away")
        self.sent.append(names)

    def resume(self) -> None:
        pass

    def destroy(self) -> None:
        pass


def async_config(output_dir: str, config_class=None, **overrides: Any):
    """`trainer_helpers.cpu_config` for `AsyncGRPOConfig` (or an algorithm's asynchronous `config_class`), batching a
    fixed number of samples (no vLLM server to ask for a token budget)."""
    from trl_ext import AsyncGRPOConfig

    return cpu_config(config_class or AsyncGRPOConfig, output_dir, **{"token_budget": 0, **overrides})


def stub_trainer(model_path: str, config, worker=None, transfer=None, trainer_class=None, **kwargs: Any):
    """An `AsyncGRPOTrainer` (trl_ext's, or `trainer_class`: TRL's) fed by the test (a `StubWorker`), on the toy
    task's prompts; `kwargs`: the trainer's further arguments (MIX's `expert_dataset`, ...)."""
    from trl_ext import AsyncGRPOTrainer
    from trl_ext.toy import build_tokenizer, toy_dataset, toy_reward

    return (trainer_class or AsyncGRPOTrainer)(
        model=model_path,
        reward_funcs=toy_reward,
        args=config,
        train_dataset=toy_dataset(16),
        processing_class=build_tokenizer(),
        rollout_worker=worker or StubWorker(),
        weight_transfer=transfer or StubTransfer(),
        **kwargs,
    )


def make_samples(tokenizer, model, groups: int = 2, size: int = 4, seed: int = 0, noise: float = 0.3) -> list[dict]:
    """`groups` × `size` samples of the toy prompts with random completions of 2-8 tokens; their sampler log-probs μ
    are the model's own (temperature 1, a plain forward) plus Gaussian noise, so that the ratios differ from 1."""
    from trl_ext.toy import toy_dataset

    rng = np.random.default_rng(seed)
    prompts = toy_dataset(groups, seed=seed)["prompt"]
    samples = []
    for g, prompt in enumerate(prompts):
        prompt_ids = tokenizer(prompt)["input_ids"]
        for _ in range(size):
            completion = rng.integers(10, tokenizer.vocab_size - 1, size=int(rng.integers(2, 9))).tolist()
            ids = prompt_ids + completion
            with torch.no_grad():
                logps = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
            target = torch.tensor(ids[1:])
            own = torch.cat([torch.zeros(1), logps[:-1].gather(1, target[:, None])[:, 0]])
            mask = np.array([0] * len(prompt_ids) + [1] * len(completion))
            mu = own.numpy() + noise * rng.standard_normal(len(ids)) * mask
            samples.append(
                {
                    "input_ids": np.array(ids),
                    "completion_mask": mask,
                    "old_log_probs": np.minimum(mu, 0.0).astype(np.float32) * mask,
                    "group_id": g,
                    "prompt_len": len(prompt_ids),
                }
            )
    return samples


def packed_batch(
    samples: list[dict], advantages, pad_token_id: int, versions=None, rewards=None, baselines=None
) -> dict[str, torch.Tensor]:
    """The samples as TRL packs one micro-batch for one process (a `TreeRow`, trl_ext's collator); `rewards`: each
    sample's reward as the worker stamps it for an estimator that runs over the optimizer window; `baselines`: each
    sample's greedy baseline (ReMax) as the worker stamps it."""
    from trl.experimental.async_grpo.packing import TreeRow

    from trl_ext.async_rollout.scoring import WINDOW_BASELINE_KEY, WINDOW_REWARD_KEY
    from trl_ext.trainers.asynchronous.samples import VERSION_KEY, VersionedCollator

    row = TreeRow()
    for i, sample in enumerate(samples):
        version = 1 if versions is None else int(versions[i])
        metrics = {VERSION_KEY: version} if rewards is None else {VERSION_KEY: version, WINDOW_REWARD_KEY: rewards[i]}
        if baselines is not None:
            metrics[WINDOW_BASELINE_KEY] = baselines[i]
        row.add(
            {
                "input_ids": torch.tensor(sample["input_ids"]),
                "completion_mask": torch.tensor(sample["completion_mask"]),
                "old_log_probs": torch.tensor(sample["old_log_probs"]),
                "advantage": float(advantages[i]),
                "group_id": sample["group_id"],
                "metrics": metrics,
            }
        )
    return VersionedCollator(pad_token_id=pad_token_id, num_processes=1)([[row]])


def padded_grpo_inputs(samples: list[dict], advantages, pad_token_id: int) -> dict[str, torch.Tensor]:
    """The same samples as the synchronous GRPO trainer's prepared micro-batch: prompts left-padded, completions
    right-padded, μ as TRL's `old_per_token_logps`."""
    prompts = [s["input_ids"][: s["prompt_len"]] for s in samples]
    completions = [s["input_ids"][s["prompt_len"] :] for s in samples]
    olds = [s["old_log_probs"][s["prompt_len"] :] for s in samples]
    p, c = max(map(len, prompts)), max(map(len, completions))
    prompt_ids = torch.full((len(samples), p), pad_token_id)
    prompt_mask = torch.zeros(len(samples), p, dtype=torch.long)
    completion_ids = torch.full((len(samples), c), pad_token_id)
    completion_mask = torch.zeros(len(samples), c, dtype=torch.long)
    old = torch.zeros(len(samples), c)
    for i, (pr, co, ol) in enumerate(zip(prompts, completions, olds, strict=True)):
        prompt_ids[i, p - len(pr) :], prompt_mask[i, p - len(pr) :] = torch.tensor(pr), 1
        completion_ids[i, : len(co)], completion_mask[i, : len(co)] = torch.tensor(co), 1
        old[i, : len(ol)] = torch.tensor(ol)
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.as_tensor(advantages, dtype=torch.float32),
        "old_per_token_logps": old,
    }


def gradient(model: torch.nn.Module) -> torch.Tensor:
    """The model's gradient as one vector (parameters in name order), then cleared."""
    grads = []
    for _, p in sorted(model.named_parameters()):
        grads.append(torch.zeros_like(p).flatten() if p.grad is None else p.grad.detach().flatten().clone())
        p.grad = None
    return torch.cat(grads)


def async_update(trainer, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """One micro-batch `batch` as the whole optimizer window of the asynchronous `trainer` (its window pass, then its
    loss, backward): `(gradient, loss)`, the gradient cleared from the model (`gradient`)."""
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    trainer._get_num_items_in_batch([batch], trainer.accelerator.device)
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    return gradient(trainer.model), loss.detach()
