"""Reward against step for every trl_ext trainer on the toy task, same seed and budget.

Run (from the repository root)::

    python benchmarks/learning_curves.py                        # writes docs/learning_curves.png and .json
    python benchmarks/learning_curves.py --algorithms sapo,grpo --steps 50 --out /tmp/curves

Every GRPO-family algorithm with a trainer (GRPO, GSPO, CISPO, SAPO, TOPR, sPPO, REC, OPMD, AsymRE, REINFORCE++,
RLOO, RAFT, MIX, MIX-CHORD) and on-policy distillation train the toy model (`trl_ext.toy`: repeat the letter the
prompt names; the model starts at a reward of about 1/8) with `trl_ext.toy.FAST_TRAINING` (64 completions per step,
16 per prompt, Adam at 1e-3 with warm-up and clipping), seed 0, for `--steps` steps, each with its config's
defaults otherwise. MIX / MIX-CHORD add the toy's expert demonstrations (their default `expert_data_ratio` 0.5);
on-policy distillation distils the toy teacher and never sees the reward (it is only logged; dashed lines), once
with the reference estimator (its default) and once with `distill_baseline="group"` (`on_policy_distill+group`).
The logged `reward` (the mean over the step's rollouts) is plotted against the step, with a moving average over 5
logs. DPO and SFT are not here: they do not sample during training (DPO's held-out preference accuracy is in the
README's DPO section); nor are the multi-turn algorithms, which train a tool-using agent (`benchmarks/multi_turn.py`).
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

import trl_ext  # noqa: E402
from trl_ext import toy  # noqa: E402
from trl_ext.scripts.grpo import multi_turn  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Curves beyond each algorithm's defaults: name -> (algorithm, config overrides).
VARIANTS = {"on_policy_distill+group": ("on_policy_distill", {"distill_baseline": "group"})}
# DPO and SFT do not sample; the multi-turn algorithms train a tool-using agent instead (benchmarks/multi_turn.py).
ALGORITHMS = [
    name
    for name, spec in trl_ext.ALGORITHMS.items()
    if spec.has_trainer and spec.schema == "experience" and not multi_turn(name)
] + list(VARIANTS)


def train(name: str, steps: int, seed: int, out: str) -> dict:
    algorithm, overrides = VARIANTS.get(name, (name, {}))
    spec = trl_ext.get_algorithm(algorithm)
    settings = {**toy.FAST_TRAINING, "max_steps": steps, "logging_steps": 1, "seed": seed, **overrides}
    config = spec.config_class(
        output_dir=out, use_cpu=not torch.cuda.is_available(), bf16=False, activation_checkpointing=False,
        report_to="none", save_strategy="no", disable_tqdm=True, **settings,
    )  # fmt: skip
    config.use_toy_task()  # what the toy task provides for the family (distillation: its teacher; async: its worker)
    extra = {}
    if spec.sample_strategy == "mix":
        extra["expert_dataset"] = toy.toy_expert_dataset()
    trainer = spec.trainer_class(
        model=toy.tiny_model_path(), reward_funcs=toy.toy_reward, args=config, train_dataset=toy.toy_dataset(), **extra
    )
    trainer.remove_callback(transformers.PrinterCallback)
    start = time.perf_counter()
    trainer.train()
    rewards = [(entry["step"], entry["reward"]) for entry in trainer.state.log_history if "reward" in entry]
    return {"steps": [s for s, _ in rewards], "reward": [r for _, r in rewards], "seconds": time.perf_counter() - start}


def plot(curves: dict[str, dict], path: str, window: int = 5) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 6))
    cmap = plt.get_cmap("tab20")
    for i, (name, curve) in enumerate(curves.items()):
        rewards = curve["reward"]
        smooth = [sum(rewards[max(0, j - window + 1) : j + 1]) / len(rewards[max(0, j - window + 1) : j + 1])
                  for j in range(len(rewards))]  # fmt: skip
        style = "--" if name.startswith("on_policy_distill") else "-"  # never trained on the reward
        ax.plot(curve["steps"], smooth, style, label=name, color=cmap(i % 20), linewidth=1.6)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(f"toy reward (moving average over {window} steps)")
    ax.set_title("trl_ext trainers on the toy task (same seed and budget, FAST_TRAINING)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(ncol=3, fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS))
    parser.add_argument("--steps", type=int, default=toy.FAST_TRAINING["max_steps"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "learning_curves"))
    args = parser.parse_args()
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    toy.tiny_model_path(), toy.tiny_teacher_path()
    curves = {}
    with tempfile.TemporaryDirectory() as tmp:
        for algorithm in args.algorithms.split(","):
            curves[algorithm] = train(algorithm, args.steps, args.seed, tmp)
            r, seconds = curves[algorithm]["reward"], curves[algorithm]["seconds"]
            first, last = sum(r[:5]) / len(r[:5]), sum(r[-5:]) / len(r[-5:])
            print(f"{algorithm:<18} reward first 5 {first:.3f}  last 5 {last:.3f}  ({seconds:.0f} s)", flush=True)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    settings = {"steps": args.steps, "seed": args.seed, "training": toy.FAST_TRAINING}
    with open(args.out + ".json", "w") as f:
        json.dump({"settings": settings, "curves": curves}, f, indent=1)
    plot(curves, args.out + ".png")
    print(f"wrote {args.out}.png and {args.out}.json")


if __name__ == "__main__":
    main()
