"""What on-policy distillation costs per training step, next to `trl_ext.GRPOTrainer` on identical settings.

Run (from the repository root, with the package installed)::

    python benchmarks/distillation.py                    # toy model and teacher, CPU, 5 rounds of 20 steps
    python benchmarks/distillation.py --rounds 3 --steps 10

Both trainers train the toy model (`trl_ext.toy.tiny_model_path`) on the toy task with the same settings
(`FAST_TRAINING`: 64 completions of 8 tokens per step) and the same PPO loss; the distillation trainer adds the
teacher's forward pass (`tiny_teacher_path`, the same size as the student) and, since the steps are on-policy,
one no-grad forward of the student for the sampling log-probs. Runs alternate (GRPO, distillation, GRPO, ...)
and the table shows the median of TRL's logged `step_time` (generation + scoring + loss + backward) over every
logged step after the first of each run, and the ratio distillation / GRPO.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import transformers  # noqa: E402

import trl_ext  # noqa: E402
from trl_ext import toy  # noqa: E402


def run(kind: str, steps: int, out: str) -> list[float]:
    settings = {**toy.FAST_TRAINING, "max_steps": steps, "logging_steps": 1}
    common = dict(output_dir=out, use_cpu=not torch.cuda.is_available(), bf16=False, report_to="none")
    common.update(save_strategy="no", disable_tqdm=True, activation_checkpointing=False, **settings)
    if kind == "grpo":
        trainer = trl_ext.GRPOTrainer(
            model=toy.tiny_model_path(),
            reward_funcs=toy.toy_reward,
            args=trl_ext.GRPOConfig(**common),
            train_dataset=toy.toy_dataset(),
        )
    else:
        trainer = trl_ext.OnPolicyDistillTrainer(
            model=toy.tiny_model_path(),
            teacher_model=toy.tiny_teacher_path(),
            reward_funcs=toy.toy_reward,
            args=trl_ext.OnPolicyDistillConfig(**common),
            train_dataset=toy.toy_dataset(),
        )
    trainer.remove_callback(transformers.PrinterCallback)  # no per-step log dicts on stdout
    trainer.train()
    return [entry["step_time"] for entry in trainer.state.log_history if "step_time" in entry][1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    toy.tiny_model_path(), toy.tiny_teacher_path()  # built (or found) before any timing
    times: dict[str, list[float]] = {"grpo": [], "on_policy_distill": []}
    with tempfile.TemporaryDirectory() as out:
        for _ in range(args.rounds):
            for kind in times:
                times[kind] += run(kind, args.steps, out)
    grpo, distill = (statistics.median(times[k]) for k in times)
    print(f"{'trainer':<20} {'median step_time (s)':>22} {'steps':>6}")
    for kind, value in zip(times, (grpo, distill), strict=True):
        print(f"{kind:<20} {value:>22.4f} {len(times[kind]):>6}")
    print(f"ratio on_policy_distill / grpo: {distill / grpo:.2f}")


if __name__ == "__main__":
    main()
