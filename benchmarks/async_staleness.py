"""Synchronous against asynchronous GRPO on the toy task: held-out reward per step and per second, by staleness.

Run (from the repository root)::

    python benchmarks/async_staleness.py                       # every run, 150 steps each, ~3 min on 2 CPU cores
    python benchmarks/async_staleness.py --runs sync,async0,async4,async4-m2po --steps 30 --out /tmp/async

Every run trains the toy model (`trl_ext.toy`: repeat the letter the prompt names; it starts at a reward of about
1/8) on `toy_splits()["train"]` with the toy's `DEFAULT_TRAINING` (Adam at 1e-3, 20 warm-up steps then a linear
decay, gradient clip 0.2, 128 completions per step, 16 per prompt, 8 new tokens), seed `--seed`, `--steps` optimizer
steps:

* `sync`: `trl_ext.GRPOTrainer` (the `ppo` loss, token-mean: the asynchronous default's objective), which generates
  and trains in turn, both on the machine's two cores (`torch.set_num_threads(2)`);
* `async0`, `async1`, `async2`, `async4`: `trl_ext.AsyncGRPOTrainer` (the `ppo` loss against the sampler μ) at
  `max_staleness` 0, 1, 2, 4, its transformers rollout worker generating on one core (`rollout_num_threads=1`)
  while the trainer trains on the other (`torch.set_num_threads(1)`), weights synced every step;
* `async4-m2po`, `async4-decoupled_ppo`: `max_staleness` 4 with `policy_loss_fn="m2po"` (M2PO, arXiv 2510.01161)
  and `"decoupled_ppo"` (AReaL, arXiv 2505.24298), each with its default arguments; `async4-decoupled_ppo-loglinear`
  the latter with AReaL's log-linear proximal policy (`prox_logp_method="loglinear"`).

Per optimizer step: the training seconds so far (the clock starts when the trainer's `on_train_begin` callbacks
have run, i.e. after the rollout worker has loaded its model; that start-up is recorded apart as `startup_s`), the
logged train `reward`, and for the asynchronous runs the staleness of the trained samples (`trained_staleness_mean` /
`trained_staleness_max`, logged by trl_ext at the optimizer step) and TRL's `sample/dropped_stale_total`. Each run also
records the CPU the machine's other processes used meanwhile (`other_processes_cores`: 0 when it had the machine to
itself), since its seconds are only comparable on a quiet machine.

Held-out reward: at step 0, every `--eval_every` steps and at the last step the policy's weights are copied
(`state_dict`) out of the trainer, inside a trainer callback; the copy's time is measured and taken off the clock.
After the run each copy is loaded into one plain toy model (default attention: the asynchronous trainer's own model
attends only on packed rows), which samples 4 completions (temperature 1, a fixed seed, 8 new tokens) for each of the
64 held-out prompts (`toy_splits()["test"]`), scored with `toy_reward`. Evaluating after the run, not in the
callback, keeps the rollout worker from generating ahead while the trainer would be evaluating.

Outputs: `<out>.json` (every run's curves and summary) and `<out>.png` (held-out reward against the step and against
the training seconds, one line per run); the summary is printed as a markdown table: final held-out reward (mean of
the last two evaluations), the step and the seconds at which the held-out reward first reaches 0.8, trained samples
per second (trained completions / training seconds), mean trained staleness, dropped stale samples.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile
import time
import warnings
from collections.abc import Sequence
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import transformers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS: dict[str, tuple[str, dict[str, Any]]] = {  # name -> (trainer kind, config overrides)
    "sync": ("sync", {}),
    "async0": ("async", {"max_staleness": 0}),
    "async1": ("async", {"max_staleness": 1}),
    "async2": ("async", {"max_staleness": 2}),
    "async4": ("async", {"max_staleness": 4}),
    "async4-m2po": ("async", {"max_staleness": 4, "policy_loss_fn": "m2po"}),
    "async4-decoupled_ppo": ("async", {"max_staleness": 4, "policy_loss_fn": "decoupled_ppo"}),
    "async4-decoupled_ppo-loglinear": (
        "async",
        {"max_staleness": 4, "policy_loss_fn": "decoupled_ppo", "prox_logp_method": "loglinear"},
    ),
}
THRESHOLD = 0.8
"""The held-out reward whose first crossing (step, seconds) the summary reports."""
EVAL_SAMPLES = 4
"""Sampled completions per held-out prompt."""
EVAL_SEED = 1234
"""The torch seed of every held-out evaluation (the same for every run and step)."""
SYNC_THREADS, TRAINER_THREADS, WORKER_THREADS = 2, 1, 1


# ---- pure helpers -------------------------------------------------------------------------------------------------


def parse_runs(text: str) -> list[str]:
    """The comma-separated `--runs` names, in order, each one of `RUNS`."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError(f"--runs is empty; choose among {', '.join(RUNS)}")
    unknown = [name for name in names if name not in RUNS]
    if unknown:
        raise ValueError(f"--runs: unknown run(s) {', '.join(unknown)}; choose among {', '.join(RUNS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"--runs names a run twice: {text!r}")
    return names


def eval_steps(max_steps: int, every: int) -> list[int]:
    """The steps with a held-out evaluation: 0, every `every` steps, and `max_steps`."""
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"eval_steps: max_steps must be an int >= 1, got {max_steps!r}")
    if not isinstance(every, int) or every < 1:
        raise ValueError(f"eval_steps: every (--eval_every) must be an int >= 1, got {every!r}")
    return sorted(set(range(0, max_steps + 1, every)) | {max_steps})


def first_reaching(
    steps: Sequence[int], seconds: Sequence[float], rewards: Sequence[float], threshold: float
) -> tuple[int | None, float | None]:
    """The (step, seconds) of the first evaluation whose reward is >= `threshold`; (None, None) if none is."""
    if not len(steps) == len(seconds) == len(rewards):
        raise ValueError(
            f"first_reaching: steps, seconds and rewards must have one entry per evaluation, got lengths "
            f"{len(steps)}, {len(seconds)}, {len(rewards)}"
        )
    for step, second, reward in zip(steps, seconds, rewards, strict=True):
        if reward >= threshold:
            return step, second
    return None, None


def summarize(run: dict[str, Any], threshold: float = THRESHOLD) -> dict[str, Any]:
    """A run's summary from its curves (the keys `train` writes; see the module docstring)."""
    held_out = run["eval"]
    if len(held_out["reward"]) < 2:
        raise ValueError("summarize: a run needs at least two held-out evaluations (step 0 and the last)")
    step, second = first_reaching(held_out["steps"], held_out["seconds"], held_out["reward"], threshold)
    staleness = [value for value in run["trained_staleness_mean"] if value is not None]
    step_seconds = [b - a for a, b in zip([0.0, *run["seconds"][:-1]], run["seconds"], strict=True)]
    return {
        "final_held_out_reward": statistics.fmean(held_out["reward"][-2:]),
        "steps_to_threshold": step,
        "seconds_to_threshold": second,
        "samples_per_s": run["trained_samples"] / run["train_seconds"],
        "train_seconds": run["train_seconds"],
        "mean_staleness": statistics.fmean(staleness) if staleness else None,
        "max_staleness_seen": max((v for v in run["trained_staleness_max"] if v is not None), default=None),
        "dropped_samples": sum(v for v in run["dropped_stale"] if v is not None),
        "median_step_s": statistics.median(step_seconds),
        "median_weight_sync_s": _median(run.get("weight_sync_s", [])),
        "median_rollout_wait_s": _median(run.get("rollout_wait_s", [])),
    }


def _median(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def markdown_table(summaries: dict[str, dict[str, Any]], threshold: float = THRESHOLD) -> str:
    """The summaries as a markdown table, one row per run."""

    def show(value: Any, digits: int) -> str:
        return "—" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)

    lines = [
        f"| run | final held-out reward | steps to {threshold} | seconds to {threshold} | samples/s | "
        "mean staleness | dropped samples |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in summaries.items():
        cells = [
            show(s["final_held_out_reward"], 3), show(s["steps_to_threshold"], 0), show(s["seconds_to_threshold"], 1),
            show(s["samples_per_s"], 0), show(s["mean_staleness"], 2), show(int(s["dropped_samples"]), 0),
        ]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def copy_weights(source: dict[str, torch.Tensor], model: torch.nn.Module) -> None:
    """Load `source` (a policy's `state_dict`) into `model`: every entry of the model's `state_dict` must be in it,
    with the same shape; extra entries of `source` are an error too (a different architecture)."""
    target = model.state_dict()
    missing = sorted(set(target) - set(source))
    extra = sorted(set(source) - set(target))
    if missing or extra:
        raise ValueError(f"copy_weights: the state_dicts differ; missing {missing[:5]}, unexpected {extra[:5]}")
    for name, tensor in target.items():
        if tuple(source[name].shape) != tuple(tensor.shape):
            raise ValueError(
                f"copy_weights: {name} has shape {tuple(source[name].shape)}, the model's is {tuple(tensor.shape)}"
            )
    model.load_state_dict(source)


@torch.no_grad()
def held_out_reward(
    model: torch.nn.Module,
    tokenizer: Any,
    prompts: Sequence[str],
    targets: Sequence[str],
    samples: int = EVAL_SAMPLES,
    max_new_tokens: int = 8,
    seed: int = EVAL_SEED,
) -> float:
    """The mean `toy_reward` of `samples` completions per prompt (temperature 1, no top-k / top-p, `seed`), each
    stopped at the model's generation-config eos tokens or the tokenizer's, as the trainers stop."""
    from trl_ext.toy import toy_reward

    if len(prompts) != len(targets):
        raise ValueError(f"held_out_reward: {len(prompts)} prompts but {len(targets)} targets")
    model.eval()
    tokenizer.padding_side = "left"
    batch = tokenizer(list(prompts), return_tensors="pt", padding=True)
    eos = model.generation_config.eos_token_id  # the trainers stop at these (the toy: <|endoftext|>, <|im_end|>)
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    eos += [tokenizer.eos_token_id] if tokenizer.eos_token_id not in eos else []
    config = transformers.GenerationConfig(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
        num_return_sequences=samples, eos_token_id=eos, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        out = model.generate(**batch, generation_config=config)
    completions = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    repeated = [target for target in targets for _ in range(samples)]  # generate's order: each prompt's samples
    return statistics.fmean(toy_reward(completions, target=repeated))


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy since boot, all cores (`/proc/stat`: user, nice, system, irq,
    softirq, steal); 0.0 where there is no `/proc/stat`."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds of this process and its reaped children (the rollout worker, once stopped)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


# ---- the runs -----------------------------------------------------------------------------------------------------


class PolicySnapshots(transformers.TrainerCallback):
    """Per optimizer step, the training seconds so far; at the evaluation steps a copy of the policy's weights.

    The clock starts at `on_train_begin` (added after the trainer's own callbacks: the asynchronous trainer's has
    started the rollout worker by then); the copies' time is taken off it."""

    def __init__(self, steps: set[int]):
        self.steps = steps
        self.seconds: dict[int, float] = {}
        self.snapshots: dict[int, dict[str, torch.Tensor]] = {}
        self.started = self.excluded = 0.0
        self.began_at = 0.0

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.began_at = time.perf_counter()
        self._snapshot(0, model)
        self.started, self.excluded = time.perf_counter(), 0.0

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.seconds[state.global_step] = time.perf_counter() - self.started - self.excluded
        if state.global_step in self.steps:
            begin = time.perf_counter()
            self._snapshot(state.global_step, model)
            self.excluded += time.perf_counter() - begin

    def _snapshot(self, step: int, model) -> None:
        self.snapshots[step] = {name: t.detach().to("cpu", copy=True) for name, t in model.state_dict().items()}


def _config(kind: str, steps: int, seed: int, out: str, overrides: dict[str, Any]):
    import trl_ext
    from trl_ext import toy

    settings = {**toy.DEFAULT_TRAINING, "max_steps": steps, "logging_steps": 1, "seed": seed, **overrides}
    common = dict(
        output_dir=out, use_cpu=True, bf16=False, report_to="none", save_strategy="no", disable_tqdm=True,
        activation_checkpointing=False, **settings,
    )  # fmt: skip  # no recomputation in either trainer (TRL's asynchronous config turns it on by default)
    if kind == "sync":
        return trl_ext.GRPOConfig(policy_loss_fn="ppo", **common)
    return trl_ext.AsyncGRPOConfig(
        rollout_backend="transformers", token_budget=0, rollout_num_threads=WORKER_THREADS, **common
    )


def train(name: str, steps: int, seed: int, every: int, out: str, eval_model, tokenizer) -> dict[str, Any]:
    """One run (see the module docstring): its per-step curves, held-out evaluations and timings."""
    import trl_ext

    kind, overrides = RUNS[name]
    config = _config(kind, steps, seed, out, overrides)
    trainer_class = trl_ext.GRPOTrainer if kind == "sync" else trl_ext.AsyncGRPOTrainer
    threads = SYNC_THREADS if kind == "sync" else TRAINER_THREADS
    return {
        "kind": kind,
        "overrides": overrides,
        **run_trainer(trainer_class, config, every, eval_model, tokenizer, threads),
    }


def run_trainer(
    trainer_class: type,
    config,
    every: int,
    eval_model,
    tokenizer,
    threads: int,
    model_path: str | None = None,
    extra_metrics: Sequence[str] = (),
    trainer_kwargs: dict[str, Any] | None = None,
    task: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train `trainer_class` with `config` on the toy task (`model_path`, default the toy model) on `threads` torch
    threads: the per-step curves, the held-out evaluations every `every` steps (`held_out_reward` of `eval_model`,
    `config.max_completion_length` new tokens) and the timings, as the module docstring describes; plus, per step,
    each logged metric of `extra_metrics` under its own name (None where a step did not log it). `trainer_kwargs`:
    the trainer's further arguments (MIX's `expert_dataset`); `task`: another task's `reward_funcs`,
    `train_dataset` and `held_out` (the held-out reward of a model) in place of the toy's."""
    from trl_ext import toy

    steps = config.max_steps
    torch.set_num_threads(threads)
    task = task or {}
    trainer = trainer_class(
        model=model_path or toy.tiny_model_path(), reward_funcs=task.get("reward_funcs", toy.toy_reward),
        args=config, train_dataset=task.get("train_dataset", toy.toy_splits()["train"]), **(trainer_kwargs or {}),
    )  # fmt: skip
    trainer.remove_callback(transformers.PrinterCallback)
    evaluations = eval_steps(steps, every)
    snapshots = PolicySnapshots(set(evaluations))
    trainer.add_callback(snapshots)  # after the trainer's own: the rollout worker runs when the clock starts
    busy, own = machine_busy_seconds(), own_cpu_seconds()
    called = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - called
    others = max(0.0, machine_busy_seconds() - busy - (own_cpu_seconds() - own))  # other processes' CPU seconds

    logs = {entry["step"]: entry for entry in trainer.state.log_history if "reward" in entry}
    done = sorted(snapshots.seconds)
    per_step = config.per_device_train_batch_size * config.gradient_accumulation_steps
    trained = [logs.get(s, {}).get("batch/samples_per_step", per_step) for s in done]
    test = toy.toy_splits()["test"]
    prompts, targets = list(test["prompt"]), list(test["target"])
    held_out = {"steps": [], "seconds": [], "reward": []}
    for step in sorted(snapshots.snapshots):
        copy_weights(snapshots.snapshots[step], eval_model)
        held_out["steps"].append(step)
        held_out["seconds"].append(0.0 if step == 0 else snapshots.seconds[step])
        held_out["reward"].append(
            task["held_out"](eval_model)
            if "held_out" in task
            else held_out_reward(eval_model, tokenizer, prompts, targets, EVAL_SAMPLES, config.max_completion_length)
        )
    return {
        "steps": done,
        "seconds": [snapshots.seconds[s] for s in done],
        "reward": [logs.get(s, {}).get("reward") for s in done],
        "trained_staleness_mean": [logs.get(s, {}).get("trained_staleness_mean") for s in done],
        "trained_staleness_max": [logs.get(s, {}).get("trained_staleness_max") for s in done],
        "dropped_stale": [logs.get(s, {}).get("sample/dropped_stale_total") for s in done],
        "rollout_wait_s": [logs.get(s, {}).get("perf/rollout_wait_s") for s in done],
        "weight_sync_s": [logs.get(s, {}).get("perf/weight_sync_s") for s in done],
        "fwd_bwd_s": [logs.get(s, {}).get("perf/fwd_bwd_s") for s in done],
        "eval": held_out,
        "trained_samples": float(sum(trained)),
        "train_seconds": snapshots.seconds[done[-1]],
        "startup_s": snapshots.began_at - called,
        "other_processes_cpu_s": others,
        "other_processes_cores": others / wall,  # 0: the machine was ours; 1: one core busy elsewhere throughout
        **{key: [logs.get(s, {}).get(key) for s in done] for key in extra_metrics},
    }


def plot(runs: dict[str, dict[str, Any]], path: str, threshold: float = THRESHOLD) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    cmap = plt.get_cmap("tab10")
    for i, (name, run) in enumerate(runs.items()):
        style = dict(label=name, color=cmap(i % 10), marker="o", markersize=3, linewidth=1.6)
        style["linestyle"] = "--" if run["kind"] == "sync" else "-"
        by_step.plot(run["eval"]["steps"], run["eval"]["reward"], **style)
        by_time.plot(run["eval"]["seconds"], run["eval"]["reward"], **style)
    for ax, label in ((by_step, "optimizer step"), (by_time, "training seconds (2 CPU cores, evaluation excluded)")):
        ax.axhline(threshold, color="grey", linewidth=0.8, linestyle=":")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
        ax.set_ylim(-0.02, 1.02)
    by_step.set_ylabel(f"held-out reward (64 prompts × {EVAL_SAMPLES} samples)")
    by_time.legend(fontsize=8, loc="lower right")
    fig.suptitle("Synchronous vs asynchronous GRPO on the toy task (same seed, DEFAULT_TRAINING)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _commit() -> str | None:
    """The repository's commit (the library version the numbers belong to), or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def main() -> None:
    from trl_ext import toy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, among {', '.join(RUNS)}")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--eval_every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "async_staleness"))
    args = parser.parse_args()
    names = parse_runs(args.runs)
    eval_steps(args.steps, args.eval_every)  # checks both
    transformers.logging.set_verbosity_error()
    path = toy.tiny_model_path()
    eval_model = transformers.AutoModelForCausalLM.from_pretrained(path)  # default attention, loaded once
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            runs[name] = train(name, args.steps, args.seed, args.eval_every, tmp, eval_model, tokenizer)
            run = runs[name]
            print(
                f"{name:<22} held-out {run['eval']['reward'][0]:.3f} -> {run['eval']['reward'][-1]:.3f}  "
                f"({run['train_seconds']:.1f} s training, {run['startup_s']:.1f} s start-up, "
                f"other processes {run['other_processes_cores']:.2f} cores)",
                flush=True,
            )
    summaries = {name: summarize(run) for name, run in runs.items()}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    settings = {
        "steps": args.steps, "seed": args.seed, "eval_every": args.eval_every, "training": toy.DEFAULT_TRAINING,
        "eval": {"prompts": toy.TEST_PROMPTS, "samples": EVAL_SAMPLES, "seed": EVAL_SEED, "temperature": 1.0},
        "threads": {"sync": SYNC_THREADS, "async_trainer": TRAINER_THREADS, "async_worker": WORKER_THREADS},
        "threshold": THRESHOLD, "cpu_count": os.cpu_count(), "torch": torch.__version__, "commit": _commit(),
    }  # fmt: skip
    with open(args.out + ".json", "w") as f:
        json.dump({"settings": settings, "summary": summaries, "runs": runs}, f, indent=1)
    plot(runs, args.out + ".png")
    print(markdown_table(summaries))
    print(f"wrote {args.out}.png and {args.out}.json")


if __name__ == "__main__":
    main()
