"""Per-turn credit on a tool-using agent: TRL's GRPOTrainer against MultiStepGRPO and GiGPO, same seeds and budget.

Run (from the repository root)::

    python benchmarks/multi_turn.py                             # writes docs/multi_turn.png and .json
    python benchmarks/multi_turn.py --seeds 0 --steps 20 --out /tmp/multi_turn

The task is the embedded toy agent (`trl_ext.toy_agent`: look a box's secret up with a tool, then answer it),
rolled out by TRL's own tool loop (`environment_factory`), with `trl_ext.toy_agent.AGENT_TRAINING` and each
trainer's defaults otherwise:

* `trl.GRPOTrainer`: one advantage per episode (TRL's group-normalized reward on every model token; its `dapo` loss);
* `MultiStepGRPOTrainer`: the same episode advantage on every model turn, with Trinity-RFT's `multi_step_grpo`
  parts (dual-clip PPO loss, token-mean);
* `GiGPOTrainer`: the episode advantage plus the step-level advantage of the turns that start from the same state
  (`LookupEnvironment.state_key`: before the lookup, after a lookup of the right box, after a wrong one).

Each run logs the mean reward of every step's rollouts; the plot shows the mean over seeds with a moving average,
and the JSON holds every run's curve and wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402

import trl_ext  # noqa: E402
from trl_ext import toy_agent  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINERS = {
    "trl_grpo": (trl.GRPOTrainer, trl.GRPOConfig),
    "multi_step_grpo": (trl_ext.MultiStepGRPOTrainer, trl_ext.MultiStepGRPOConfig),
    "gigpo": (trl_ext.GiGPOTrainer, trl_ext.GiGPOConfig),
}


def train(name: str, steps: int, seed: int, out: str) -> dict:
    trainer_class, config_class = TRAINERS[name]
    settings = {**toy_agent.AGENT_TRAINING, "max_steps": steps, "logging_steps": 1, "seed": seed}
    config = config_class(
        output_dir=out, use_cpu=not torch.cuda.is_available(), bf16=False, report_to="none", save_strategy="no",
        disable_tqdm=True, **settings,
    )  # fmt: skip
    trainer = trainer_class(
        model=toy_agent.tiny_agent_model_path(),
        reward_funcs=toy_agent.lookup_reward,
        args=config,
        train_dataset=toy_agent.toy_agent_dataset(),
        environment_factory=toy_agent.LookupEnvironment,
    )
    trainer.remove_callback(transformers.PrinterCallback)
    start = time.perf_counter()
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "reward" in entry]
    return {
        "steps": [entry["step"] for entry in logs],
        "reward": [entry["reward"] for entry in logs],
        "tool_calls": [entry.get("tools/call_frequency", 0.0) for entry in logs],
        "seconds": time.perf_counter() - start,
    }


def mean_curve(runs: list[dict]) -> list[float]:
    return [sum(values) / len(values) for values in zip(*(run["reward"] for run in runs), strict=True)]


def plot(results: dict[str, list[dict]], path: str, window: int = 5) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, runs in results.items():
        curve = mean_curve(runs)
        smooth = [sum(curve[max(0, j - window + 1) : j + 1]) / len(curve[max(0, j - window + 1) : j + 1])
                  for j in range(len(curve))]  # fmt: skip
        ax.plot(runs[0]["steps"], smooth, label=f"{name} ({len(runs)} seeds)", linewidth=1.8)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(f"toy agent reward (mean over seeds, moving average over {window} steps)")
    ax.set_title("Per-turn credit on TRL's multi-turn rollouts (trl_ext.toy_agent)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainers", default=",".join(TRAINERS))
    parser.add_argument("--steps", type=int, default=toy_agent.AGENT_TRAINING["max_steps"])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "multi_turn"))
    args = parser.parse_args()
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    toy_agent.tiny_agent_model_path()
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.trainers.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                run = train(name, args.steps, seed, tmp)
                results.setdefault(name, []).append({"seed": seed, **run})
                r = run["reward"]
                first, last = sum(r[:5]) / len(r[:5]), sum(r[-5:]) / len(r[-5:])
                seconds = run["seconds"]
                print(f"{name:<16} seed {seed}  reward first 5 {first:.3f}  last 5 {last:.3f}  ({seconds:.0f} s)")
    for name, runs in results.items():
        curve = mean_curve(runs)
        print(f"{name:<16} mean over seeds: first 5 {sum(curve[:5]) / 5:.3f}  last 5 {sum(curve[-5:]) / 5:.3f}")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    settings = {"steps": args.steps, "seeds": args.seeds, "training": toy_agent.AGENT_TRAINING}
    with open(args.out + ".json", "w") as f:
        json.dump({"settings": settings, "runs": results}, f, indent=1)
    plot(results, args.out + ".png")
    print(f"wrote {args.out}.png and {args.out}.json")


if __name__ == "__main__":
    main()
