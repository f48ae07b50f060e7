"""GRPO with and without DAPO's dynamic sampling on the toy task: held-out reward per step and per generated completion.

Run (from the repository root)::

    python benchmarks/dynamic_sampling.py                        # seeds 0, 1, 2, 120 steps: ~3 min on 2 CPU cores
    python benchmarks/dynamic_sampling.py --seeds 0 --steps 20 --out /tmp/dynamic_sampling

Dynamic sampling (DAPO, Yu et al. 2025, arXiv 2503.14476 §3.2; `trl_ext/trainers/grpo/dynamic_sampling.py`) drops the
prompt groups whose task rewards all agree, which have zero group-relative advantage, and generates for more prompts
until the generation batch holds as many informative groups as it was built for. So every trained group carries a
gradient, at the price of more generation per optimizer step. The toy task's reward (`trl_ext.toy.toy_reward`) is
0/1 (the completion is the prompt's letter repeated, or not), so uniform groups are frequent: all wrong at the start
(the model hits the letter 1 time in 8: (7/8)^16 ≈ 12% of the 16-completion groups), all right once it has learnt
the task (the reward approaches 1). The question it answers: does dropping them train faster per optimizer step, and
what does it cost in generated completions?

Both runs train the toy model (`trl_ext.toy.tiny_model_path()`, it starts at a reward of about 1/8) on
`toy_splits()["train"]` with `trl_ext.GRPOConfig` and the toy's `DEFAULT_TRAINING` (Adam at 1e-3, 20 warm-up steps
then a linear decay, gradient clip 0.2, 128 completions per step = 8 prompts × 16, 8 new tokens; GRPO's defaults
otherwise: the `ppo` clipped loss, token-mean), `--steps` optimizer steps, for each of `--seeds`, on one torch thread:

* `grpo`: plain GRPO;
* `grpo+dynamic_sampling`: the same with `dynamic_sampling=True` and `dynamic_sampling_max_rounds=--max_rounds`
  (`MAX_ROUNDS`, 30). Not the config's default 10: once the policy answers ~99% right, only 1 − 0.99^16 ≈ 15% of the
  groups are informative, and the rounds a batch needs approach 10 (the 120-step runs needed at most 8; a 150-step
  run of seed 0 needed 12 at its step 109 and stopped there with the config's error). The cap guards against a task
  that gives no signal; here the benchmark lets the cost show instead.

Per optimizer step (one generation batch each): the logged train `reward` (the mean over every completion generated
for the step, all rounds), the completions generated for it (`dynamic_sampling/prompts_drawn` × `num_generations`
with dynamic sampling, the generation batch without) and their running total, the `dynamic_sampling/*` metrics
(`rounds`, `prompts_drawn`, `groups_dropped`, `groups_surplus`), and the training seconds (evaluation excluded).
Held-out reward: at step 0, every `--eval_every` steps and at the last step, the policy's weights are copied out of
the trainer and, after the run, scored on the 64 held-out prompts (`toy_splits()["test"]`, 4 samples each,
temperature 1, a fixed seed): `benchmarks/async_staleness.py`'s `PolicySnapshots` and `held_out_reward`.

Outputs: `<out>.json` (every seed's curves, the settings and the summary) and `<out>.png` (held-out reward against
the optimizer step and against the generated completions: at each evaluation step the median over seeds of the
reward and of the completions generated so far, one line per run). The summary is printed as a markdown table,
medians over seeds: final held-out reward (the last evaluation), the step and the generated completions at which the
held-out reward first reaches `THRESHOLD`, completions generated per step and prompt groups dropped per step (each a
run's mean over its steps). The training seconds are in the JSON only: on a shared machine they are not reproducible.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import warnings
from collections.abc import Sequence
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import transformers  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling benchmark whose helpers this reuses
from async_staleness import (  # noqa: E402
    EVAL_SAMPLES,
    EVAL_SEED,
    PolicySnapshots,
    _commit,
    copy_weights,
    eval_steps,
    first_reaching,
    held_out_reward,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_ROUNDS = 30
"""`dynamic_sampling_max_rounds` of the dynamic-sampling run unless `--max_rounds` says otherwise (the config's
default, 10, stops the run near saturation: see the module docstring)."""
RUNS: dict[str, dict[str, Any]] = {  # name -> GRPOConfig overrides
    "grpo": {},
    "grpo+dynamic_sampling": {"dynamic_sampling": True},  # with dynamic_sampling_max_rounds=--max_rounds
}
THRESHOLD = 0.8
"""The held-out reward whose first crossing (step, generated completions) the summary reports."""
METRICS = ("rounds", "prompts_drawn", "groups_dropped", "groups_surplus")
"""The `dynamic_sampling/<name>` metrics recorded per step."""


# ---- pure helpers -------------------------------------------------------------------------------------------------


def parse_seeds(text: str) -> list[int]:
    """The comma-separated `--seeds`, in order: distinct integers >= 0."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise ValueError("--seeds is empty; give comma-separated integers >= 0, e.g. 0,1,2")
    try:
        seeds = [int(part) for part in parts]
    except ValueError:
        raise ValueError(f"--seeds must be comma-separated integers >= 0, got {text!r}") from None
    if any(seed < 0 for seed in seeds) or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds must be distinct integers >= 0, got {text!r}")
    return seeds


def generated_per_step(logs: Sequence[dict[str, Any]], num_generations: int, generation_batch: int) -> list[int]:
    """The completions generated for each logged step: `dynamic_sampling/prompts_drawn` × `num_generations` where a
    log has it (dynamic sampling), else `generation_batch` (one generation batch per optimizer step)."""
    out = []
    for log in logs:
        drawn = log.get("dynamic_sampling/prompts_drawn")
        out.append(generation_batch if drawn is None else round(drawn * num_generations))
    return out


def cumulative(values: Sequence[float]) -> list[float]:
    """The running totals of `values`."""
    total, out = 0.0, []
    for value in values:
        total += value
        out.append(total)
    return out


def generated_at(steps: Sequence[int], generated_so_far: Sequence[float], at: Sequence[int]) -> list[float]:
    """The completions generated up to each step of `at` (0 at step 0), from the per-step running total
    `generated_so_far` of the optimizer steps `steps`."""
    by_step = {0: 0.0, **dict(zip(steps, generated_so_far, strict=True))}
    missing = [step for step in at if step not in by_step]
    if missing:
        raise ValueError(f"generated_at: no running total for step(s) {missing}; the run has steps {list(steps)}")
    return [by_step[step] for step in at]


def median_curve(seeds: Sequence[dict[str, Any]], x: str) -> tuple[list[float], list[float]]:
    """The held-out curve of a run, median over its seeds: at each evaluation step the median of `eval[x]` (`steps`
    or `generated`) and of `eval["reward"]`. Every seed must have the same evaluation steps."""
    if not seeds:
        raise ValueError("median_curve: no seeds")
    steps = seeds[0]["eval"]["steps"]
    if any(seed["eval"]["steps"] != steps for seed in seeds):
        raise ValueError("median_curve: the seeds were evaluated at different steps")
    xs = [statistics.median(seed["eval"][x][i] for seed in seeds) for i in range(len(steps))]
    ys = [statistics.median(seed["eval"]["reward"][i] for seed in seeds) for i in range(len(steps))]
    return xs, ys


def summarize_seed(run: dict[str, Any], threshold: float = THRESHOLD) -> dict[str, Any]:
    """One seed's summary from its curves (the keys `train` writes)."""
    held_out = run["eval"]
    step, generated = first_reaching(held_out["steps"], held_out["generated"], held_out["reward"], threshold)
    dropped = run["groups_dropped"]
    return {
        "final_held_out_reward": held_out["reward"][-1],
        "steps_to_threshold": step,
        "generated_to_threshold": generated,
        "generated_per_step": statistics.fmean(run["generated"]),
        "groups_dropped_per_step": None if None in dropped else statistics.fmean(dropped),
        "train_seconds": run["seconds"][-1],
    }


def summarize(seeds: Sequence[dict[str, Any]], threshold: float = THRESHOLD) -> dict[str, Any]:
    """A run's summary: the median over its seeds of each `summarize_seed` figure (None where a seed has None:
    a seed that never reached the threshold, or a run without dynamic sampling's metrics)."""
    if not seeds:
        raise ValueError("summarize: no seeds")
    per_seed = [summarize_seed(seed, threshold) for seed in seeds]
    return {
        key: None if any(s[key] is None for s in per_seed) else statistics.median(s[key] for s in per_seed)
        for key in per_seed[0]
    } | {"seeds": len(per_seed)}


def markdown_table(summaries: dict[str, dict[str, Any]], threshold: float = THRESHOLD) -> str:
    """The summaries as a markdown table, one row per run (medians over seeds)."""

    def show(value: Any, digits: int) -> str:
        return "—" if value is None else f"{value:.{digits}f}"

    lines = [
        f"| run | final held-out reward | steps to {threshold} | completions to {threshold} | completions per step | "
        "groups dropped per step |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, s in summaries.items():
        cells = [
            show(s["final_held_out_reward"], 3), show(s["steps_to_threshold"], 0),
            show(s["generated_to_threshold"], 0), show(s["generated_per_step"], 1),
            show(s["groups_dropped_per_step"], 2),
        ]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---- the runs -----------------------------------------------------------------------------------------------------


def make_config(name: str, steps: int, seed: int, out: str, max_rounds: int = MAX_ROUNDS):
    """The `trl_ext.GRPOConfig` of run `name` (see the module docstring); `max_rounds`: its
    `dynamic_sampling_max_rounds` (with dynamic sampling only)."""
    import trl_ext
    from trl_ext import toy

    if name not in RUNS:
        raise ValueError(f"make_config: unknown run {name!r}; choose among {', '.join(RUNS)}")
    settings = {**toy.DEFAULT_TRAINING, "max_steps": steps, "logging_steps": 1, "seed": seed, **RUNS[name]}
    if settings.get("dynamic_sampling"):
        settings["dynamic_sampling_max_rounds"] = max_rounds
    return trl_ext.GRPOConfig(
        output_dir=out, use_cpu=True, bf16=False, report_to="none", save_strategy="no", disable_tqdm=True,
        activation_checkpointing=False, **settings,
    )  # fmt: skip


def train(
    name: str, steps: int, seed: int, every: int, out: str, eval_model, tokenizer, max_rounds: int = MAX_ROUNDS
) -> dict[str, Any]:
    """One seed of run `name`: its per-step curves and held-out evaluations (see the module docstring)."""
    import trl_ext
    from trl_ext import toy

    config = make_config(name, steps, seed, out, max_rounds)
    trainer = trl_ext.GRPOTrainer(
        model=toy.tiny_model_path(), reward_funcs=toy.toy_reward, args=config, train_dataset=toy.toy_splits()["train"]
    )
    trainer.remove_callback(transformers.PrinterCallback)
    evaluations = eval_steps(steps, every)
    snapshots = PolicySnapshots(set(evaluations))
    trainer.add_callback(snapshots)
    trainer.train()

    by_step = {entry["step"]: entry for entry in trainer.state.log_history if "reward" in entry}
    done = sorted(snapshots.seconds)
    if sorted(by_step) != done:
        raise RuntimeError(f"train: {name} seed {seed} logged steps {sorted(by_step)}, trained steps {done}")
    logs = [by_step[step] for step in done]
    generated = generated_per_step(logs, config.num_generations, config.generation_batch_size)
    so_far = cumulative(generated)
    test = toy.toy_splits()["test"]
    prompts, targets = list(test["prompt"]), list(test["target"])
    held_out = {"steps": sorted(snapshots.snapshots), "reward": []}
    held_out["generated"] = generated_at(done, so_far, held_out["steps"])
    for step in held_out["steps"]:
        copy_weights(snapshots.snapshots[step], eval_model)
        held_out["reward"].append(held_out_reward(eval_model, tokenizer, prompts, targets, EVAL_SAMPLES))
    return {
        "seed": seed,
        "steps": done,
        "seconds": [snapshots.seconds[step] for step in done],
        "reward": [log["reward"] for log in logs],
        "generated": generated,
        "generated_so_far": so_far,
        **{metric: [log.get(f"dynamic_sampling/{metric}") for log in logs] for metric in METRICS},
        "eval": held_out,
    }


def plot(runs: dict[str, list[dict[str, Any]]], path: str, threshold: float = THRESHOLD) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_step, by_generated) = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    cmap = plt.get_cmap("tab10")
    for i, (name, seeds) in enumerate(runs.items()):
        style = dict(label=name, color=cmap(i % 10), marker="o", markersize=3, linewidth=1.6)
        by_step.plot(*median_curve(seeds, "steps"), **style)
        by_generated.plot(*median_curve(seeds, "generated"), **style)
    for ax, label in ((by_step, "optimizer step"), (by_generated, "completions generated so far")):
        ax.axhline(threshold, color="grey", linewidth=0.8, linestyle=":")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
        ax.set_ylim(-0.02, 1.02)
    seeds = len(next(iter(runs.values())))
    by_step.set_ylabel(f"held-out reward (64 prompts × {EVAL_SAMPLES} samples), median of {seeds} seeds")
    by_generated.legend(fontsize=9, loc="lower right")
    fig.suptitle("GRPO with and without dynamic sampling on the toy task (0/1 reward, DEFAULT_TRAINING)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    from trl_ext import toy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated integers")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--eval_every", type=int, default=5)
    parser.add_argument("--max_rounds", type=int, default=MAX_ROUNDS, help="dynamic_sampling_max_rounds")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "dynamic_sampling"))
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)
    eval_steps(args.steps, args.eval_every)  # checks both
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    path = toy.tiny_model_path()
    eval_model = transformers.AutoModelForCausalLM.from_pretrained(path)  # default attention, loaded once
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in RUNS}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for name in RUNS:
                run = train(name, args.steps, seed, args.eval_every, tmp, eval_model, tokenizer, args.max_rounds)
                runs[name].append(run)
                first, last = run["eval"]["reward"][0], run["eval"]["reward"][-1]
                generated, seconds = run["generated_so_far"][-1], run["seconds"][-1]
                print(
                    f"{name:<22} seed {seed}  held-out {first:.3f} -> {last:.3f}  {generated:.0f} completions  "
                    f"({seconds:.1f} s training)",
                    flush=True,
                )
    summaries = {name: summarize(seed_runs) for name, seed_runs in runs.items()}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    settings = {
        "steps": args.steps, "seeds": seeds, "eval_every": args.eval_every, "training": toy.DEFAULT_TRAINING,
        "runs": RUNS, "max_rounds": args.max_rounds,
        "eval": {"prompts": toy.TEST_PROMPTS, "samples": EVAL_SAMPLES, "seed": EVAL_SEED, "temperature": 1.0},
        "threshold": THRESHOLD, "torch_threads": 1, "torch": torch.__version__, "commit": _commit(),
    }  # fmt: skip
    with open(args.out + ".json", "w") as f:
        json.dump({"settings": settings, "summary": summaries, "runs": runs}, f, indent=1)
    plot(runs, args.out + ".png")
    print(markdown_table(summaries))
    print(f"wrote {args.out}.png and {args.out}.json")


if __name__ == "__main__":
    main()
