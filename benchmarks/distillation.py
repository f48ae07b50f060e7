"""On-policy distillation, trl_ext against TRL's own `DistillationTrainer`: held-out reward per step and per second.

Run (from the repository root, with the package installed)::

    python benchmarks/distillation.py                          # 3 seeds × 100 steps per trainer, ~2 min, 2 CPU cores
    python benchmarks/distillation.py --seeds 1 --steps 30 --eval-every 10
    python benchmarks/distillation.py --plot docs/distillation.png --json docs/distillation.json

Every trainer distils the toy task's embedded teacher (`trl_ext.toy.tiny_teacher_path()`, reward ~1.0) into the
toy student (`tiny_model_path()`, reward ~0.1), on the toy prompts, with `trl_ext.toy.FAST_TRAINING` (Adam at
1e-3, warm-up, clipping), 64 completions per step and the sampling temperature 1; no trainer sees the task reward.

* `trl beta=1`, `trl beta=0.5`: `trl.DistillationTrainer` (one completion per prompt, 64 prompts per step), the
  generalized JSD over the whole vocabulary (reverse KL, JSD);
* `sampled-token`: `OnPolicyDistillTrainer` with its defaults: the reference's per-token advantage
  log π_teacher − log π_old under the PPO loss;
* `top-k=8`, `top-k=8 b=0.5`, `full`: `OnPolicyDistillTrainer` with `teacher_top_k=8` (`jsd_beta` 1 / 0.5) and
  `-1` (`jsd_beta` 1): TRL's loss on the teacher's top 8 tokens (+ tail) / on the whole vocabulary.

trl_ext's trainers sample 32 prompts × 2 completions (TRL's GRPO machinery needs at least 2 per prompt), TRL's 64
prompts × 1.

Every `--eval-every` steps the student samples one completion for each of 512 held-out prompt rows
(`toy_dataset` with the test seed, the same torch seed every time) and the table shows the mean task reward,
averaged over the seeds, with the training time so far (evaluation excluded). The last lines compare each dense
row with TRL's row of the same β at every logged step; the target: never more than 0.05 behind TRL's held-out
reward.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
from trl_ext import toy  # noqa: E402

TRAINERS = {  # name -> (library, config overrides, the TRL row it is held to)
    "trl beta=1": ("trl", {"beta": 1.0}, None),
    "trl beta=0.5": ("trl", {"beta": 0.5}, None),
    "sampled-token": ("trl_ext", {}, None),
    "top-k=8": ("trl_ext", {"teacher_top_k": 8}, "trl beta=1"),
    "top-k=8 b=0.5": ("trl_ext", {"teacher_top_k": 8, "jsd_beta": 0.5}, "trl beta=0.5"),
    "full": ("trl_ext", {"teacher_top_k": -1}, "trl beta=1"),
}
TOLERANCE = 0.05


class HeldOutReward(transformers.TrainerCallback):
    """The student's mean task reward on held-out prompts (one sampled completion each, a fixed seed) at step 0 and
    every `every` steps, with the training seconds so far."""

    def __init__(self, tokenizer, prompts: list[str], targets: list[str], every: int, max_new_tokens: int):
        self.tokenizer, self.prompts, self.targets = tokenizer, prompts, targets
        self.every, self.max_new_tokens = every, max_new_tokens
        self.points: list[tuple[int, float, float]] = []
        self.started = self.excluded = 0.0

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._evaluate(0, model)
        self.points[0] = (0, self.points[0][1], 0.0)
        self.started, self.excluded = time.perf_counter(), 0.0

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0:
            self._evaluate(state.global_step, model)

    @torch.no_grad()
    def _evaluate(self, step: int, model) -> None:
        begin = time.perf_counter()
        was_training = model.training
        model.eval()
        self.tokenizer.padding_side = "left"
        batch = self.tokenizer(self.prompts, return_tensors="pt", padding=True).to(model.device)
        with torch.random.fork_rng():
            torch.manual_seed(1234)
            out = model.generate(
                **batch, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=self.max_new_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
            )  # fmt: skip
        completions = self.tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
        reward = statistics.fmean(toy.toy_reward(completions, target=self.targets))
        model.train(was_training)
        end = time.perf_counter()
        self.points.append((step, reward, begin - self.started - self.excluded))
        self.excluded += end - begin


def train(name: str, steps: int, seed: int, every: int, out: str) -> list[tuple[int, float, float]]:
    library, overrides, _ = TRAINERS[name]
    settings = {**toy.FAST_TRAINING, "max_steps": steps, "logging_steps": steps, "seed": seed}
    common = dict(output_dir=out, use_cpu=not torch.cuda.is_available(), bf16=False, report_to="none")
    common.update(save_strategy="no", disable_tqdm=True, **settings)
    student, teacher = toy.tiny_model_path(), toy.tiny_teacher_path()
    if library == "trl":
        common.pop("num_generations")
        args = trl.DistillationConfig(gradient_checkpointing=False, **common, **overrides)
        trainer = trl.DistillationTrainer(
            model=student, teacher_model=teacher, args=args, train_dataset=toy.toy_dataset()
        )
    else:
        args = trl_ext.OnPolicyDistillConfig(
            activation_checkpointing=False, **{**common, "num_generations": 2}, **overrides
        )
        trainer = trl_ext.OnPolicyDistillTrainer(
            model=student, teacher_model=teacher, args=args, train_dataset=toy.toy_dataset()
        )
    held_out = toy.toy_dataset(512, seed=toy.TEST_SEED)
    prompts, targets = list(held_out["prompt"]), list(held_out["target"])
    callback = HeldOutReward(trainer.processing_class, prompts, targets, every, settings["max_completion_length"])
    trainer.add_callback(callback)
    trainer.remove_callback(transformers.PrinterCallback)
    trainer.train()
    return callback.points


def plot(curves: dict[str, list[list[float]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, points in curves.items():
        steps, rewards, seconds = zip(*points, strict=True)
        style = "--" if name.startswith("trl ") else "-"
        axes[0].plot(steps, rewards, style, marker="o", label=name)
        axes[1].plot(seconds, rewards, style, marker="o", label=name)
    axes[0].set_xlabel("step")
    axes[1].set_xlabel("training seconds (2 CPU cores)")
    for ax in axes:
        ax.set_ylabel("held-out reward")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("On-policy distillation on the toy task: trl.DistillationTrainer (dashed) and trl_ext")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--trainers", default=",".join(TRAINERS), help="comma-separated names of the table")
    parser.add_argument("--plot", help="write the curves to this PNG (needs matplotlib)")
    parser.add_argument("--json", help="write the numbers to this JSON file")
    args = parser.parse_args()
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    toy.tiny_model_path(), toy.tiny_teacher_path()  # built (or found) before any timing
    names = args.trainers.split(",")
    runs: dict[str, list] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as out:
        for seed in range(args.seeds):
            for name in names:
                runs[name].append(train(name, args.steps, seed, args.eval_every, out))
    curves = {  # per logged step: mean over the seeds of the held-out reward and of the seconds
        name: [
            [step, statistics.fmean(r[i][1] for r in seeds), statistics.fmean(r[i][2] for r in seeds)]
            for i, (step, _, _) in enumerate(seeds[0])
        ]
        for name, seeds in runs.items()
    }
    steps = [point[0] for point in next(iter(curves.values()))]
    print(f"held-out reward (mean of {args.seeds} seed(s), 512 prompts each), training seconds in brackets")
    print(f"{'step':>5}  " + "  ".join(f"{name:>17}" for name in names))
    for i, step in enumerate(steps):
        print(f"{step:>5}  " + "  ".join(f"{curves[n][i][1]:>8.3f} ({curves[n][i][2]:>5.1f}s)" for n in names))
    for name in names:
        peer = TRAINERS[name][2]
        if peer not in curves:
            continue
        gaps = [point[1] - ref[1] for point, ref in zip(curves[name], curves[peer], strict=True)]
        behind = min(gaps)
        verdict = "meets" if behind >= -TOLERANCE else "misses"
        print(
            f"{name} - {peer}: from {behind:+.3f} to {max(gaps):+.3f} over {len(gaps)} logged steps "
            f"({verdict} the target: never more than {TOLERANCE} behind)"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seeds": args.seeds, "steps": args.steps, "curves": curves}, f, indent=1)
    if args.plot:
        plot(curves, args.plot)


if __name__ == "__main__":
    main()
