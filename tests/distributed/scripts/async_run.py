"""Train the asynchronous trainer one optimizer step on fixed samples and save the update (for test_async_window).

Run as `python async_run.py OUT --model M --configs a,b,...`, or under `torchrun --nproc_per_node 2`. The main
process puts the same 8 `RolloutSample`s (two groups of four, `model_version=1`: the cold weight sync at train begin
makes the trainer's version 1, so none is dropped as stale) into a `StubWorker`'s queue, followed by 8 filler samples
that are never trained (accelerate's dispatcher fetches one micro-batch ahead, and would otherwise wait on an empty
queue forever). TRL's `FixedCountBatcher` groups `per_device_train_batch_size × num_processes` samples into one
row per process and the dispatcher sends row i to process i. With SGD at learning rate 1, no clipping and a constant
schedule, the update is −(the window's gradient), which must not depend on the number of processes.

Each configuration of `CONFIGS` trains the same window of 8 samples in `accumulation` micro-batches; its per-device
batch is 8 / (processes × accumulation). `uneven` puts 5 samples in the first group and 3 in the second, so that
the processes hold different numbers of samples; `decoupled_ppo/loglinear` trains samples of version 0 (one step
stale) with AReaL's log-linear proximal policy. The control `token-mean/local` normalizes over each process's own
window (its counts not all-reduced): on one process it is the plain token mean, on two it is another gradient.

Saved by the main process: {config: {"update": {name: Δ}, "logs": the step's log, "rows": per process, the samples of
each of its micro-batches}}.
"""

import argparse
import os
import sys
import time
import types
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore")

TESTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [TESTS, os.path.join(TESTS, "trainers")]  # trainer_helpers, async_helpers

import torch  # noqa: E402
from async_helpers import StubTransfer, StubWorker, async_config, make_samples, stub_trainer  # noqa: E402
from trl.experimental.async_grpo.async_rollout_worker import RolloutSample  # noqa: E402

from trl_ext.toy import toy_expert_dataset  # noqa: E402
from trl_ext.trainers.asynchronous.forms import async_config_class  # noqa: E402

WINDOW = 8  # samples per optimizer step
ADVANTAGES = [1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 0.25, -0.75]  # uneven, so that the samples weigh differently
M2PO = {"policy_loss_fn": "m2po", "policy_loss_fn_args": {"m2_threshold": 0.01}}
ROLLOUT_IS = {"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": True}
LOGLINEAR = {"policy_loss_fn": "decoupled_ppo", "prox_logp_method": "loglinear"}
REINFORCE_PP = {"advantage_fn": "reinforceplusplus"}
REWARDS = [1.0, 0.0, 0.5, 0.0, 1.0, 1.0, 0.25, 0.0]  # what the worker stamps for a window estimator

# name: (config overrides, gradient accumulation steps, group sizes)
CONFIGS = {
    "token-mean": ({"loss_agg_mode": "token-mean"}, 1, (4, 4)),
    "seq-mean-token-mean": ({"loss_agg_mode": "seq-mean-token-mean"}, 1, (4, 4)),
    "seq-mean-token-sum": ({"loss_agg_mode": "seq-mean-token-sum"}, 1, (4, 4)),
    "token-mean/ga2": ({"loss_agg_mode": "token-mean"}, 2, (4, 4)),
    "seq-mean-token-sum/ga2": ({"loss_agg_mode": "seq-mean-token-sum"}, 2, (4, 4)),
    "m2po": (M2PO, 1, (4, 4)),
    "m2po/ga2": (M2PO, 2, (4, 4)),
    "rollout_is": (ROLLOUT_IS, 1, (4, 4)),
    "rollout_is/ga2": (ROLLOUT_IS, 2, (4, 4)),
    "token-mean/uneven": ({"loss_agg_mode": "token-mean"}, 1, (5, 3)),
    "m2po/uneven": (M2PO, 1, (5, 3)),
    "rollout_is/uneven": (ROLLOUT_IS, 1, (5, 3)),
    "decoupled_ppo/loglinear": (LOGLINEAR, 1, (4, 4)),
    "token-mean/local": ({"loss_agg_mode": "token-mean"}, 1, (4, 4)),
    "reinforceplusplus": (REINFORCE_PP, 1, (4, 4)),
    "reinforceplusplus/uneven": (REINFORCE_PP, 1, (5, 3)),
    "critic": ({}, 1, (4, 4)),
    "critic/ga2": ({}, 2, (4, 4)),
    "mix": ({}, 1, (4, 4)),
    "mix/ga2": ({}, 2, (4, 4)),
    "distill": ({}, 1, (4, 4)),
    "distill/uneven": ({}, 1, (5, 3)),
    "gigpo": ({}, 1, (4, 4)),
    "gigpo/uneven": ({}, 1, (5, 3)),
    "gigpo/turns": ({"turns_as_samples": True, "loss_agg_mode": "seq-mean-token-mean"}, 1, (4, 4)),
}
FORMS = {"critic": "ppo", "mix": "mix", "distill": "on_policy_distill", "gigpo": "gigpo"}
"""The configurations that train an algorithm's asynchronous form, by name prefix."""
WINDOW_ESTIMATED = ("reinforceplusplus", "critic", "distill", "gigpo")
"""The configurations whose estimator runs over the window: the worker stamps rewards, the trainer estimates."""
STALE = ("decoupled_ppo/loglinear",)  # samples of version 0, one step old when trained


def as_episodes(samples: list[dict], group_sizes: tuple[int, ...]) -> list[dict]:
    """GiGPO's episodes: in the second group a completion of 5 tokens or more has its third token made a tool output
    (completion mask 0), so it holds two model turns while the first group's hold one (the processes' turn tables
    then differ in width); each turn carries its environment state (shared by some turns of the other episodes) and
    a turn reward, as trl_ext's worker stamps them."""
    from trl_ext.async_rollout.episodes import TURN_REWARDS_KEY, TURN_STATES_KEY

    for i, sample in enumerate(samples):
        mask, start = sample["completion_mask"].copy(), sample["prompt_len"]
        turns = 1
        if i >= group_sizes[0] and mask.sum() >= 5:
            mask[start + 2] = 0
            turns = 2
        sample["completion_mask"], sample["old_log_probs"] = mask, sample["old_log_probs"] * mask
        states = [1000 + sample["group_id"], 2000 + i % 2][:turns]
        sample["metrics"] = {TURN_STATES_KEY: states, TURN_REWARDS_KEY: [0.25 * (i % 3), 0.0][:turns]}
    return samples


def rollout_samples(
    model_path: str, group_sizes: tuple[int, ...], version: int = 1, stamped: bool = False, episodes: bool = False
) -> list[RolloutSample]:
    """The window's samples (`make_samples` on a plain forward of the model: μ = π + noise), then the filler;
    `stamped`: each carries its reward for the trainer's window estimator (advantage 0), as trl_ext's worker stamps
    it; `episodes`: GiGPO's multi-turn episodes (`as_episodes`)."""
    from transformers import AutoModelForCausalLM

    from trl_ext.async_rollout.scoring import WINDOW_REWARD_KEY
    from trl_ext.toy import build_tokenizer

    tokenizer, model = build_tokenizer(), AutoModelForCausalLM.from_pretrained(model_path).eval()
    made = make_samples(tokenizer, model, groups=2, size=max(group_sizes), seed=7, noise=0.5)
    window = [s for g, size in enumerate(group_sizes) for s in made[g * max(group_sizes) :][:size]]
    if episodes:
        window = as_episodes(window, group_sizes)
    filler = make_samples(tokenizer, model, groups=2, size=4, seed=8)
    for sample in filler:
        sample["group_id"] += len(group_sizes)
    advantages = ADVANTAGES + [0.0] * len(filler)
    rewards = REWARDS + [0.0] * len(filler)
    return [
        RolloutSample(
            prompt="",
            completion="",
            input_ids=sample["input_ids"],
            completion_mask=sample["completion_mask"],
            old_log_probs=sample["old_log_probs"],
            advantage=0.0 if stamped else advantage,
            model_version=version,
            group_id=sample["group_id"],
            metrics={**sample.get("metrics", {}), **({WINDOW_REWARD_KEY: reward} if stamped else {})},
        )
        for sample, advantage, reward in zip(window + filler, advantages, rewards, strict=True)
    ]


def count_window_locally(self, batches):
    """Control: the window's counts summed over this process's micro-batches only (no all-reduce)."""
    per_batch = [self.micro_batch_counts(batch) for batch in batches]
    self._window = {name: sum(counts[name] for counts in per_batch) for name in per_batch[0]}
    return self._window


def record_rows(trainer) -> list[int]:
    """Wrap `compute_loss` to record the number of samples of each micro-batch this process trains."""
    rows = []
    compute_loss = trainer.compute_loss

    def recording(model, inputs, *args, **kwargs):
        experts = int(inputs["sample_expert"].sum()) if "sample_expert" in inputs else 0  # MIX's demonstrations
        rows.append(int((inputs["behave_version"] >= 0).sum()) - experts)
        return compute_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = recording
    return rows


def record_critic_gradient(critic) -> dict:
    """Wrap the critic's optimizer step to record its gradient after the average over processes (Adam's first step is
    about the gradient's sign: the gradient itself is the sharp comparison)."""
    grads: dict = {}
    step = critic.optimizer.step

    def recording(*args, **kwargs):
        grads.update({n: p.grad.detach().clone() for n, p in critic.model.named_parameters() if p.grad is not None})
        return step(*args, **kwargs)

    critic.optimizer.step = recording
    return grads


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--model", required=True)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    args = parser.parse_args()
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    main_process = int(os.environ.get("RANK", "0")) == 0
    results = {}
    for name in args.configs.split(","):
        overrides, accumulation, group_sizes = CONFIGS[name]
        form = FORMS.get(name.split("/")[0])
        config_class = async_config_class(form) if form else None
        config = async_config(
            os.path.join(os.path.dirname(args.out), "run"),
            config_class=config_class,
            per_device_train_batch_size=WINDOW // (processes * accumulation),
            gradient_accumulation_steps=accumulation,
            max_steps=1,
            optim="sgd",
            learning_rate=1.0,
            lr_scheduler_type="constant",
            warmup_steps=0,
            max_grad_norm=0.0,  # no clipping
            logging_steps=1,
            seed=0,
            **overrides,
        )
        worker = StubWorker()
        if main_process:  # TRL's main process alone pulls from the worker's queue
            stamped = name.startswith(WINDOW_ESTIMATED)
            episodes = form == "gigpo"
            for sample in rollout_samples(args.model, group_sizes, 0 if name in STALE else 1, stamped, episodes):
                worker.rollout_buffer.put(sample)
        extra = {"expert_dataset": toy_expert_dataset(16)} if form == "mix" else {}
        if form == "on_policy_distill":  # the teacher: the initial weights (μ is π plus noise: the advantages move)
            extra["teacher_model"] = args.model
        trainer = stub_trainer(args.model, config, worker=worker, transfer=StubTransfer(), **extra)
        if name.endswith("/local"):
            trainer.count_window = types.MethodType(count_window_locally, trainer)
        rows = record_rows(trainer)
        critic = trainer.critic.model if trainer.critic is not None else torch.nn.Module()
        critic_grads = record_critic_gradient(trainer.critic) if trainer.critic is not None else {}
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        critic_before = {n: p.detach().clone() for n, p in critic.named_parameters()}
        trainer.train()
        update = {n: p.detach() - before[n] for n, p in trainer.model.named_parameters()}
        critic_update = {n: p.detach() - critic_before[n] for n, p in critic.named_parameters()}
        if torch.distributed.is_initialized():
            every = [None] * processes
            torch.distributed.all_gather_object(every, rows)
            rows = every
        else:
            rows = [rows]
        results[name] = {"update": update, "logs": trainer.state.log_history[0], "rows": rows}
        results[name]["critic_update"] = critic_update
        results[name]["critic_gradient"] = critic_grads
    if main_process:
        torch.save(results, args.out)
    if torch.distributed.is_initialized():  # every rank reaches the teardown together (see window_run.py)
        torch.distributed.barrier()
        time.sleep(0.2)
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
