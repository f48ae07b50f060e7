"""TRL 1.16's Online DPO step as the oracle of trl_ext's: its loss is inline in `OnlineDPOTrainer.training_step`, so
the tests run that method itself (and trl_ext's override of it) on a stand-in trainer whose generation, forward
passes and reward functions return given tensors, and read the loss handed to the backward pass, the gradient of the
policy's log-probs and the statistics."""

from __future__ import annotations

import types
from dataclasses import dataclass
from types import SimpleNamespace

import torch

EOS = 0


class StatsDict(dict):
    """TRL's `stats`: a list per key, made on first use."""

    def __missing__(self, key):
        self[key] = []
        return self[key]


@dataclass
class StepResult:
    loss: torch.Tensor  # what the step back-propagated
    grad: torch.Tensor  # the gradient of the policy's per-token log-probs [2P, T], TRL's generation order
    stats: dict[str, list[float]]


def sampled_batch(prompts: int = 6, length: int = 7, seed: int = 0, eos_rate: float = 0.0) -> dict[str, torch.Tensor]:
    """Two completions per prompt, rows [first of each prompt; second of each prompt] as TRL generates them: random
    per-token log-probs of the policy and the reference (float64), completion masks of varied lengths (at least one
    token), completion ids (an EOS in a share `eos_rate` of them) and rewards with ties."""
    g = torch.Generator().manual_seed(seed)
    rows = 2 * prompts
    lengths = torch.randint(1, length + 1, (rows,), generator=g)
    ids = torch.randint(1, 20, (rows, length), generator=g)
    ends = torch.rand(rows, generator=g) < eos_rate
    ids[ends, lengths[ends] - 1] = EOS
    return {
        "policy": -torch.rand(rows, length, generator=g, dtype=torch.float64) * 3,
        "ref": -torch.rand(rows, length, generator=g, dtype=torch.float64) * 3,
        "mask": (torch.arange(length) < lengths[:, None]).long(),
        "completion_ids": ids,
        "rewards": torch.randint(0, 3, (rows,), generator=g).to(torch.float32),  # ties within pairs
    }


def run_step(
    trainer_class: type,
    batch: dict[str, torch.Tensor],
    beta: float,
    loss_type: str,
    missing_eos_penalty: float | None = None,
    policy_loss_fn=None,
) -> StepResult:
    """`trainer_class.training_step` on a stand-in trainer that generates `batch` (TRL's `OnlineDPOTrainer`, or
    trl_ext's, whose named steps are bound to the stand-in and whose loss is `policy_loss_fn`)."""
    policy = batch["policy"].clone().requires_grad_(True)
    policy_model = torch.nn.Identity()  # what training_step calls `train()` on and hands back to `_forward`
    captured = {}

    def forward(model, *args):
        return policy if model is policy_model else batch["ref"]

    def backward(loss, **kwargs):
        captured["loss"] = loss.detach()
        loss.backward()

    trainer = SimpleNamespace(
        args=SimpleNamespace(
            use_vllm=False,
            missing_eos_penalty=missing_eos_penalty,
            loss_type=loss_type,
            torch_empty_cache_steps=None,
            optim="sgd",
            n_gpu=1,
            gradient_accumulation_steps=1,
        ),
        beta=beta,
        eos_token_ids=[EOS],
        ref_model="reference",
        reward_funcs=[None],
        stats=StatsDict(),
        _generate=lambda model, prompts, images: (None, None, batch["completion_ids"], batch["mask"], None),
        _forward=forward,
        processing_class=SimpleNamespace(batch_decode=lambda ids, skip_special_tokens: ["c"] * len(ids)),
        _calculate_rewards_from_functions=lambda **kwargs: batch["rewards"].clone(),
        accelerator=SimpleNamespace(gather_for_metrics=lambda x: x, backward=backward),
        policy_loss_fn=policy_loss_fn,
    )
    for step in ("rank_pairs", "pair_loss", "record_statistics"):
        if hasattr(trainer_class, step):
            setattr(trainer, step, types.MethodType(getattr(trainer_class, step), trainer))
    trainer_class.training_step(trainer, policy_model, {"prompt": ["p"] * (policy.size(0) // 2)})
    return StepResult(captured["loss"], policy.grad, dict(trainer.stats))


def ranked_interleaved(rewards: torch.Tensor) -> torch.Tensor:
    """The rows a pairwise loss takes, by TRL's ranking: each prompt's chosen then its rejected completion (the one
    with the higher reward is chosen; a tie chooses the first)."""
    prompts = rewards.size(0) // 2
    first = rewards[:prompts] >= rewards[prompts:]
    index = torch.arange(prompts)
    chosen = torch.where(first, index, index + prompts)
    rejected = torch.where(first, index + prompts, index)
    return torch.stack((chosen, rejected), dim=1).reshape(-1)
