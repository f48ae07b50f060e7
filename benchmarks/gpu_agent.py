"""The `multi_turn` row of `gpu_report.py`: trl_ext's GiGPO against `trl.GRPOTrainer` on the toy tool-using agent.

Both trainers run the same task the same way: `trl_ext.toy_agent`'s lookup agent (its own pretrained 2-layer Qwen3,
~113k parameters, which calls the tool in most episodes), rolled out by TRL's own tool loop (`environment_factory=
LookupEnvironment`, the same dataset and reward function), with `toy_agent.AGENT_TRAINING` (64 rollouts per
optimizer step: 8 prompts x 8, in one micro-batch; completions of up to 48 tokens over at most 2 tool rounds).
Generation is real sampling here (the other rows feed fixed completions): the tool loop is the part of the step
that multi-turn training adds, so it is measured. What differs is what each trainer does with the episodes:
`trl.GRPOTrainer` puts one group-normalized advantage on every model token, `GiGPOTrainer` segments every episode
into its model turns, reads the environment's state at the start of each turn and adds the step-level advantage of
the turns that start from the same state. The row's ratio is what that per-turn bookkeeping costs.

The model is the toy agent's at every `--shape` (a randomly initialized model of the report's shape would not call
the tool, so its episodes would not be multi-turn): on a GPU its step time is dominated by the per-token overhead
of generation and by the Python of the tool loop and the advantages, not by the model's FLOPs.

`learning_rate=1e-6` (the report's setting for every row) instead of the toy run's 5e-4: the policy barely moves
during the few measured steps, so both trainers sample (nearly) the same episodes from the same seed.
"""

from __future__ import annotations

from typing import Any

import trl

import trl_ext
from trl_ext import toy_agent

ALGORITHM = "gigpo"
"""The trl_ext trainer of the row: GiGPO, whose step-level advantage reads the environment's state at every turn."""


def make_agent_trainer(kind: str, output_dir: str, steps: int, cuda: bool):
    """`trl.GRPOTrainer` (kind `trl`) or trl_ext's GiGPO trainer (kind `trl_ext`) on the toy agent, for `steps`
    optimizer steps; bf16 weights and autocast on CUDA, fp32 on CPU."""
    settings: dict[str, Any] = {
        **toy_agent.AGENT_TRAINING,
        "output_dir": output_dir,
        "use_cpu": not cuda,
        "bf16": cuda,
        "model_init_kwargs": {"dtype": "bfloat16"} if cuda else None,
        "max_steps": steps,
        "logging_steps": 1,
        "learning_rate": 1e-6,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "seed": 0,
    }
    prompts = settings["per_device_train_batch_size"] // settings["num_generations"] * steps
    if kind == "trl":
        trainer_class, config = trl.GRPOTrainer, trl.GRPOConfig(**settings)
    else:
        spec = trl_ext.get_algorithm(ALGORITHM)
        trainer_class, config = spec.trainer_class, spec.config_class(**settings)
    return trainer_class(
        model=toy_agent.tiny_agent_model_path(),
        reward_funcs=toy_agent.lookup_reward,
        args=config,
        train_dataset=toy_agent.toy_agent_dataset(prompts),
        environment_factory=toy_agent.LookupEnvironment,
    )
