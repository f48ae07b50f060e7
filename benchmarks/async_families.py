"""Each family, synchronous against asynchronous, on the toy task: held-out reward per step and per second.

Run (from the repository root)::

    python benchmarks/async_families.py                # every default algorithm, both scenarios, 150 steps each
    python benchmarks/async_families.py --algorithms grpo,sapo --scenarios toy --steps 6 --out /tmp/async_families

For each algorithm of `--algorithms` two runs, from the same seed, the same number of optimizer steps and the toy's
`DEFAULT_TRAINING` (Adam at 1e-3, 20 warm-up steps then a linear decay, gradient clip 0.2, 128 completions per step,
16 per prompt):

* `sync`: the algorithm's own config and trainer (`trl_ext.scripts.grpo.training_classes(name, False)`: what
  `trl-ext train --algorithm NAME` trains), generating and training in turn on the machine's two cores
  (`torch.set_num_threads(2)`);
* `async`: its asynchronous form (`trl_ext.async_config_class(name)` on `trl_ext.AsyncGRPOTrainer`: what
  `--asynchronous true` trains) at `max_staleness` `--max_staleness` (1), the transformers rollout worker
  generating on one core while the trainer trains on the other, weights synced every step. Each form keeps its
  algorithm's defaults; GRPO's is `AsyncGRPOConfig`, whose defaults are TRL's asynchronous objective, four settings
  from `GRPOConfig`'s (see its docstring): the rows compare what the switch gives.

An algorithm without an asynchronous form is not run; its refusal (`trl_ext.trainers.asynchronous.forms.
async_refusal`) is recorded. The default `--algorithms`, resolved from the registry at run time: one per kind of
policy loss of the GRPO family — `grpo` (PPO's clipped ratio), `sapo` (a soft gate), `dapo` (DAPO's techniques:
`dynamic_sampling=True`, `overlong_buffer` half the completion length, `clip_range_high=0.28`, and, synchronously,
`dynamic_sampling_max_rounds` 30 as in `benchmarks/dynamic_sampling.py`), `gspo` (a sequence-level ratio), `cispo`
(a clipped importance weight) — then `reinforceplusplus` (a token-level estimator), the first algorithm of every
other family that generates (its refusal recorded where it has no asynchronous form), and the agents
(`agent_algorithms`: the per-turn estimators, `multi_step_grpo` and `gigpo`).

Three scenarios (`--scenarios`); the agents train only the third, the others only the first two:

* `toy`: the toy model (`trl_ext.toy.tiny_model_path()`; it answers " x x x", 2 to 12 letters, and stops) with
  `max_completion_length` 8. Generating a batch costs about as much as training on it.
* `long`: generation made the bottleneck. The same task, reward (`toy_reward`: 1.0 when every non-space character
  of the completion is the prompt's letter, whatever their number) and architecture, but the model's format
  pretraining (`trl_ext.toy.build_model`, `LONG_PRETRAIN_STEPS` steps) had answers of `LONG_REPEATS` letters,
  `max_completion_length` is `LONG_LENGTH` and a step trains `LONG_BATCH` completions (2 prompts × 16). Decoding is
  sequential: its time grows with the completion length, one forward of the batch per token, whatever the batch
  size, while training's grows with batch × length; long completions in small batches make generating a step's
  samples cost more than training on them (the summaries give both per step for the asynchronous runs:
  `median_generate_s`, `median_fwd_bwd_s`). With 128 completions per step the two grow alike, and the toy model
  cannot serve: it stops after at most 12 letters. Long answers drift to another letter more often, so RL must
  also teach this model to stay on its letter.
* `agent`: the toy tool task (`trl_ext.toy_agent`: look a box up with the environment's tool, then answer its secret)
  with its model and its settings (`AGENT_TRAINING`: 64 episodes per step, Adam at 5e-4, at most 2 tool rounds and
  48 tokens), the environment `LookupEnvironment` and the reward `lookup_reward`; the synchronous run is TRL's tool
  loop, the asynchronous one trl_ext's worker's episodes. Its held-out reward is `agent_held_out_reward`: the toy's
  64 held-out rows × 4 episodes, run as the worker runs them.

Per run, as `benchmarks/async_staleness.py` records it (its `run_trainer`): the training seconds per optimizer step
(the clock starts once the rollout worker has loaded; evaluations are taken off it), the held-out reward at step 0,
every `--eval_every` steps and at the last (the policy's weights copied out in a callback, scored after the run on
the toy's 64 held-out prompts × 4 samples, temperature 1, `max_completion_length` new tokens), the trained
staleness, and the CPU the machine's other processes used meanwhile (`other_processes_cores`). The summary per
(scenario, algorithm, run) is that benchmark's `summarize`: held-out reward at the end (the mean of the last two
evaluations), the step and the seconds at which it first reaches 0.8, trained samples per second, mean trained
staleness.

Outputs: `<out>.json` (settings with the commit, the algorithms and their refusals, summaries, curves) and
`<out>.png` (held-out reward against the step and against the seconds, a row per scenario). The table printed at the
end is the one `python docs/_hooks/registry_tables.py` then writes into the documentation from the JSON
(`<!-- registry: async-families -->`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import warnings
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import transformers  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling benchmarks whose helpers this reuses
from async_staleness import (  # noqa: E402
    EVAL_SAMPLES,
    EVAL_SEED,
    SYNC_THREADS,
    THRESHOLD,
    TRAINER_THREADS,
    WORKER_THREADS,
    _commit,
    _median,
    eval_steps,
    run_trainer,
    summarize,
)
from dynamic_sampling import MAX_ROUNDS  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = ("grpo", "sapo", "dapo", "gspo", "cispo", "reinforceplusplus")
"""The GRPO-family representatives of the default `--algorithms` (see the module docstring), in this order."""
MODES = ("sync", "async")
SCENARIOS = ("toy", "long", "agent")
LONG_REPEATS = (24, 48)
"""The number of letters of the long model's pretraining answers."""
LONG_PRETRAIN_STEPS = 600
"""Format pretraining steps of the long model (the toy's 200 leave its long answers drifting more often)."""
LONG_LENGTH = 48
"""`max_completion_length` of the `long` scenario."""
LONG_BATCH = 32
"""Completions per optimizer step of the `long` scenario (2 prompts × 16)."""
EXTRA_METRICS = ("completions/mean_length", "rollout/generate_s", "perf/fwd_bwd_s")
"""Logged per step besides what `run_trainer` records (None where a trainer does not log it)."""


# ---- pure helpers -------------------------------------------------------------------------------------------------


def parse_list(text: str, flag: str, known: tuple[str, ...] | None = None) -> list[str]:
    """The comma-separated names of `flag`, in order, distinct (each one of `known` when given)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError(f"{flag} is empty")
    if len(set(names)) != len(names):
        raise ValueError(f"{flag} names one twice: {text!r}")
    unknown = [name for name in names if known is not None and name not in known]
    if unknown:
        raise ValueError(f"{flag}: unknown {', '.join(unknown)}; choose among {', '.join(known or ())}")
    return names


def default_algorithms() -> list[str]:
    """`KINDS` that are registered, then the first algorithm of each other family that generates (registry order),
    then the agents (`agent_algorithms`)."""
    from trl_ext import ALGORITHMS
    from trl_ext.trainers.asynchronous.forms import async_algorithms

    chosen = [name for name in KINDS if name in ALGORITHMS]
    families = {ALGORITHMS[name].trainer for name in chosen}
    for name in async_algorithms():
        if ALGORITHMS[name].trainer not in families:
            families.add(ALGORITHMS[name].trainer)
            chosen.append(name)
    return chosen + [name for name in agent_algorithms() if name not in chosen]


def agent_algorithms() -> list[str]:
    """The algorithms that generate and whose advantage works on the model turns of episodes (it declares `run_ids`):
    they train the `agent` scenario's tool task, and only it."""
    from trl_ext import ALGORITHMS
    from trl_ext.advantages import ADVANTAGE_FNS
    from trl_ext.trainers.asynchronous.forms import async_algorithms

    def per_turn(name: str) -> bool:
        fn = ADVANTAGE_FNS.get(ALGORITHMS[name].advantage_fn or "")
        return fn is not None and "run_ids" in fn.inputs()

    return [name for name in async_algorithms() if per_turn(name)]


def scenario_algorithms(scenario: str, names: list[str]) -> list[str]:
    """Of `names`, those `scenario` trains: the agents in `agent`, the others in `toy` and `long`."""
    agents = set(agent_algorithms())
    return [name for name in names if (name in agents) == (scenario == "agent")]


def describe(algorithm: str) -> dict[str, str | None]:
    """An algorithm's family (None when unknown) and why it is not run asynchronously (None: it is run)."""
    from trl_ext import ALGORITHMS

    return {"family": ALGORITHMS[algorithm].trainer if algorithm in ALGORITHMS else None, "refused": refusal(algorithm)}


def refusal(algorithm: str) -> str | None:
    """Why `algorithm` is not run asynchronously (None: it is): unknown, or without an asynchronous form."""
    from trl_ext import ALGORITHMS
    from trl_ext.trainers.asynchronous.forms import async_refusal

    if algorithm not in ALGORITHMS:
        return f"not a registered algorithm (known: {', '.join(ALGORITHMS)})"
    try:
        return async_refusal(algorithm)
    except ValueError as error:  # e.g. an algorithm that does not generate
        return str(error)


def overrides(algorithm: str, mode: str, length: int) -> dict[str, Any]:
    """The config fields an algorithm's runs set beyond `DEFAULT_TRAINING` (see the module docstring)."""
    if algorithm != "dapo":
        return {}
    dapo = {"dynamic_sampling": True, "overlong_buffer": length // 2, "clip_range_high": 0.28}
    return {**dapo, "dynamic_sampling_max_rounds": MAX_ROUNDS} if mode == "sync" else dapo


def scenario_settings(scenario: str) -> dict[str, Any]:
    """A scenario's `max_completion_length`, completions per step where not the toy's, and model (see the module
    docstring)."""
    from trl_ext import toy

    if scenario == "toy":
        return {"max_completion_length": toy.DEFAULT_TRAINING["max_completion_length"], "model": toy.MODEL_VERSION}
    if scenario == "agent":
        from trl_ext import toy_agent

        training = toy_agent.AGENT_TRAINING
        per_run = ("max_steps", "logging_steps", "activation_checkpointing")  # what `make_config` sets itself
        return {
            "max_completion_length": training["max_completion_length"], "model": toy_agent.AGENT_MODEL_VERSION,
            "training": {k: v for k, v in training.items() if k not in per_run},
        }  # fmt: skip
    return {
        "max_completion_length": LONG_LENGTH, "per_device_train_batch_size": LONG_BATCH, "model": long_model_version(),
        "answer_letters": list(LONG_REPEATS), "pretrain_steps": LONG_PRETRAIN_STEPS,
    }  # fmt: skip


# ---- the long model ----------------------------------------------------------------------------------------------


def long_model_version() -> str:
    from trl_ext import toy

    return f"{toy.MODEL_VERSION}-long{LONG_REPEATS[0]}-{LONG_REPEATS[1]}x{LONG_PRETRAIN_STEPS}"


def long_model_path() -> str:
    """The `long` scenario's model: the toy's, format-pretrained on answers of `LONG_REPEATS` letters (the toy
    module's `PRETRAIN_REPEATS`, set for the build only), cached beside the toy model (about a minute on first use)."""
    from trl_ext import toy

    def build():
        tokenizer, saved = toy.build_tokenizer(), toy.PRETRAIN_REPEATS
        toy.PRETRAIN_REPEATS = LONG_REPEATS
        try:
            return toy.build_model(tokenizer, seed=0, pretrain_steps=LONG_PRETRAIN_STEPS), tokenizer
        finally:
            toy.PRETRAIN_REPEATS = saved

    return toy.cached_model(None, long_model_version(), build)


def scenario_model_path(scenario: str) -> str | None:
    """The model a scenario trains (None: the toy's)."""
    if scenario == "agent":
        from trl_ext import toy_agent

        return toy_agent.tiny_agent_model_path()
    return long_model_path() if scenario == "long" else None


# ---- the agent's held-out reward ---------------------------------------------------------------------------------


def agent_held_out_reward(model, tokenizer, rows: list[dict[str, Any]], max_completion_length: int) -> float:
    """The mean `lookup_reward` of `EVAL_SAMPLES` episodes per held-out row, run as trl_ext's rollout worker runs
    them (`trl_ext.async_rollout.episodes.EpisodeRunner`: the toy's environment, at most 2 tool rounds, temperature
    1, `EVAL_SEED`)."""
    import statistics

    from trl_ext.async_rollout.episodes import EpisodeRunner
    from trl_ext.toy_agent import AGENT_TRAINING, LookupEnvironment, lookup_reward

    runner = EpisodeRunner(
        owner="agent_held_out_reward", tokenizer=tokenizer, tools=None, environment_factory=LookupEnvironment,
        max_tool_calling_iterations=AGENT_TRAINING["max_tool_calling_iterations"],
        max_completion_length=max_completion_length, max_model_len=model.config.max_position_embeddings,
    )  # fmt: skip
    eos = model.generation_config.eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    eos += [tokenizer.eos_token_id] if tokenizer.eos_token_id not in eos else []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]

    def generate(inputs: list[list[int]], budgets: list[int]) -> list[list[int]]:
        width = max(map(len, inputs))
        ids = torch.tensor([[pad] * (width - len(x)) + x for x in inputs])
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in inputs])
        config = transformers.GenerationConfig(
            do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max(budgets), eos_token_id=eos,
            pad_token_id=pad,
        )  # fmt: skip
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)[:, width:].tolist()
        turns = []
        for tokens, budget in zip(out, budgets, strict=True):
            end = next((t + 1 for t, token in enumerate(tokens) if token in eos), len(tokens))
            turns.append(tokens[: min(end, budget)])
        return turns

    model.eval()
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(EVAL_SEED)
        episodes = runner.begin(rows, EVAL_SAMPLES)
        runner.run(episodes, generate)
    rewards = lookup_reward([e.completion for e in episodes], environments=[e.environment for e in episodes])
    return statistics.fmean(rewards)


# ---- the runs -----------------------------------------------------------------------------------------------------


def make_config(algorithm: str, mode: str, scenario: str, steps: int, seed: int, out: str, max_staleness: int):
    """`(config, trainer class)` of one run: the classes `trl-ext train --algorithm NAME [--asynchronous true]`
    picks, with the toy's `DEFAULT_TRAINING`, the scenario's completion length and the algorithm's overrides."""
    from trl_ext import toy
    from trl_ext.scripts.grpo import training_classes

    config_class, trainer_class = training_classes(algorithm, mode == "async")
    scenario = scenario_settings(scenario)
    training = scenario.get("training", toy.DEFAULT_TRAINING)
    scenario_fields = {k: v for k, v in scenario.items() if k in training}
    length = scenario_fields["max_completion_length"]
    settings = {
        **training, **scenario_fields, "max_steps": steps, "logging_steps": 1, "seed": seed,
        **overrides(algorithm, mode, length),
    }  # fmt: skip
    common = dict(
        output_dir=out, use_cpu=True, bf16=False, report_to="none", save_strategy="no", disable_tqdm=True,
        activation_checkpointing=False, **settings,
    )  # fmt: skip
    if mode == "sync":
        return _toy_parts(config_class(**common)), trainer_class
    worker = dict(rollout_backend="transformers", token_budget=0, rollout_num_threads=WORKER_THREADS)
    if getattr(config_class, "has_experts", False):  # the synchronous batch's rollouts; the demonstrations join them
        ratio = common.get("expert_data_ratio", config_class.__dataclass_fields__["expert_data_ratio"].default)
        common["per_device_train_batch_size"] = round(common["per_device_train_batch_size"] * (1 - ratio))
    return _toy_parts(config_class(max_staleness=max_staleness, **worker, **common)), trainer_class


def _toy_parts(config):
    """`config` with the toy task's teacher (distillation), as `trl-ext train` sets it on the toy task."""
    from trl_ext import toy

    if getattr(config, "teacher_model_name_or_path", "") is None:
        config.teacher_model_name_or_path = toy.tiny_teacher_path()
    return config


def train(algorithm, mode, scenario, args, out, eval_model, tokenizer) -> dict[str, Any]:
    """One run: `run_trainer`'s record with the run's classes and overrides."""
    config, trainer_class = make_config(algorithm, mode, scenario, args.steps, args.seed, out, args.max_staleness)
    model_path = scenario_model_path(scenario)
    threads = SYNC_THREADS if mode == "sync" else TRAINER_THREADS
    from trl_ext import toy

    extra = {"expert_dataset": toy.toy_expert_dataset()} if hasattr(config, "expert_data_ratio") else {}
    task = None
    if scenario == "agent":
        from trl_ext import toy_agent

        extra["environment_factory"] = toy_agent.LookupEnvironment
        test = list(toy_agent.toy_agent_splits()["test"])
        task = {
            "reward_funcs": toy_agent.lookup_reward, "train_dataset": toy_agent.toy_agent_splits()["train"],
            "held_out": lambda model: agent_held_out_reward(model, tokenizer, test, config.max_completion_length),
        }  # fmt: skip
    run = run_trainer(
        trainer_class, config, args.eval_every, eval_model, tokenizer, threads, model_path, EXTRA_METRICS, extra, task
    )
    length = config.max_completion_length
    classes = [type(config).__name__, trainer_class.__name__]
    return {
        "algorithm": algorithm,
        "mode": mode,
        "classes": classes,
        "overrides": overrides(algorithm, mode, length),
        **run,
    }


def summary(run: dict[str, Any]) -> dict[str, Any]:
    """`summarize`'s summary of a run, with the median seconds per step of an asynchronous run's generation
    (`rollout/generate_s`: the worker's `generate` calls) and training (`perf/fwd_bwd_s`); None where not logged."""
    return {
        **summarize(run),
        "median_generate_s": _median(run.get("rollout/generate_s", [])),
        "median_fwd_bwd_s": _median(run.get("perf/fwd_bwd_s", [])),
    }


def plot(data: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, threshold = data["runs"], data["settings"]["threshold"]
    fig, axes = plt.subplots(len(runs), 2, figsize=(13, 4.6 * len(runs)), squeeze=False, sharey=True)
    cmap = plt.get_cmap("tab10")
    for (by_step, by_time), (scenario, algorithms) in zip(axes, runs.items(), strict=True):
        for i, (algorithm, modes) in enumerate(algorithms.items()):
            for mode, run in modes.items():
                style = dict(label=f"{algorithm} {mode}", color=cmap(i % 10), marker="o", markersize=3, linewidth=1.5)
                style["linestyle"] = "--" if mode == "sync" else "-"
                by_step.plot(run["eval"]["steps"], run["eval"]["reward"], **style)
                by_time.plot(run["eval"]["seconds"], run["eval"]["reward"], **style)
        length = data["settings"]["scenarios"][scenario]["max_completion_length"]
        for ax, label in ((by_step, "optimizer step"), (by_time, "training seconds (evaluation excluded)")):
            ax.axhline(threshold, color="grey", linewidth=0.8, linestyle=":")
            ax.set_xlabel(label)
            ax.grid(alpha=0.3)
            ax.set_ylim(-0.02, 1.02)
            ax.set_title(f"{scenario}: {length} new tokens", fontsize=10)
        by_step.set_ylabel(f"held-out reward (64 prompts × {EVAL_SAMPLES} samples)")
        by_time.legend(fontsize=7, loc="lower right", ncol=2)
    fig.suptitle("Each family synchronous (dashed, 2 cores) and asynchronous (solid, 1 + 1 cores) on the toy tasks")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def registry_tables():
    """The documentation's hook module (`docs/_hooks/registry_tables.py`), whose renderer prints the table."""
    spec = importlib.util.spec_from_file_location(
        "registry_tables", os.path.join(ROOT, "docs", "_hooks", "registry_tables.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    from trl_ext import toy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", default=None, help="comma-separated; default: see the module docstring")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, among {SCENARIOS}")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, among {MODES}")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--eval_every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_staleness", type=int, default=1)
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "async_families"))
    args = parser.parse_args()
    names = default_algorithms() if args.algorithms is None else parse_list(args.algorithms, "--algorithms")
    scenarios = parse_list(args.scenarios, "--scenarios", SCENARIOS)
    modes = parse_list(args.modes, "--modes", MODES)
    eval_steps(args.steps, args.eval_every)  # checks both
    transformers.logging.set_verbosity_error()
    algorithms = {name: describe(name) for name in names}
    for name, record in algorithms.items():
        if record["refused"] is not None:
            print(f"{name}: not run ({record['refused']})", flush=True)
    runnable = [name for name in names if algorithms[name]["refused"] is None]
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    failed: dict[str, str] = {}  # "scenario algorithm mode" -> the error; the other runs go on
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in scenarios:
            path = scenario_model_path(scenario) or toy.tiny_model_path()
            eval_model = transformers.AutoModelForCausalLM.from_pretrained(path)  # default attention
            tokenizer = transformers.AutoTokenizer.from_pretrained(path)
            runs[scenario] = {}
            for name in scenario_algorithms(scenario, runnable):
                runs[scenario][name] = {}
                for mode in modes:
                    label = f"{scenario:<5} {name:<18} {mode:<5}"
                    try:
                        run = train(name, mode, scenario, args, tmp, eval_model, tokenizer)
                    except Exception as error:  # recorded and reported by the exit status; the other runs go on
                        failed[f"{scenario} {name} {mode}"] = f"{type(error).__name__}: {error}"
                        print(f"{label} FAILED: {type(error).__name__}: {error}", flush=True)
                        continue
                    runs[scenario][name][mode] = run
                    print(
                        f"{label} held-out {run['eval']['reward'][0]:.3f} -> {run['eval']['reward'][-1]:.3f}  "
                        f"({run['train_seconds']:.1f} s training, {run['startup_s']:.1f} s start-up, "
                        f"other processes {run['other_processes_cores']:.2f} cores)",
                        flush=True,
                    )
    summaries = {s: {a: {m: summary(r) for m, r in ms.items()} for a, ms in by.items()} for s, by in runs.items()}
    settings = {
        "steps": args.steps, "seed": args.seed, "eval_every": args.eval_every, "max_staleness": args.max_staleness,
        "training": toy.DEFAULT_TRAINING, "scenarios": {s: scenario_settings(s) for s in scenarios},
        "eval": {"prompts": toy.TEST_PROMPTS, "samples": EVAL_SAMPLES, "seed": EVAL_SEED, "temperature": 1.0},
        "threads": {"sync": SYNC_THREADS, "async_trainer": TRAINER_THREADS, "async_worker": WORKER_THREADS},
        "threshold": THRESHOLD, "cpu_count": os.cpu_count(), "torch": torch.__version__, "commit": _commit(),
    }  # fmt: skip
    data = {"settings": settings, "algorithms": algorithms, "failed": failed, "summary": summaries, "runs": runs}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(data, f, indent=1)
    plot(data, args.out + ".png")
    print(registry_tables().async_families_table(data))
    print(f"wrote {args.out}.png and {args.out}.json")
    if failed:
        raise SystemExit(f"{len(failed)} run(s) failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
