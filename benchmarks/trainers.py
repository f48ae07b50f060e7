"""Step time and peak memory of the trl_ext trainers against TRL's own GRPOTrainer with the equivalent loss.

Run (from the repository root, with the package installed)::

    python benchmarks/trainers.py                          # CPU, the toy model, 4 algorithms, 3 rounds of 15 steps
    python benchmarks/trainers.py --algorithms sapo --rounds 5
    python benchmarks/trainers.py --bf16 --hidden 512 --layers 8 --batch 128 --completion 64   # a GPU, larger model

For SAPO, CISPO, GSPO and GRPO the script trains the same model on the toy task twice per round, once with the
trl_ext trainer and once with `trl.GRPOTrainer` configured with the equivalent `loss_type` (the README's mapping,
the one `tests/trainers/test_trl_parity.py` checks update by update), alternating which goes first. Same seed, batch,
generation settings and optimizer; `beta=0` (TRL's default, no reference model).

* **Step time**: TRL's logged `step_time` (generation, scoring, loss, backward and optimizer step), median over
  every step after the first of each run, over all rounds.
* **Peak memory**: on CUDA, `torch.cuda.max_memory_allocated` during a training step (reset before each), the
  maximum over the steps of a separate short run; on CPU there is no allocator counter, so the peak of live tensor
  storage during each `training_step`, recorded by `losses.PeakMemoryTracker` (a `TorchDispatchMode`).

Ratios are trl_ext / TRL (targets: time <= 1.02, memory <= 1.00). The script exits 0 whatever the numbers: it is a
report.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402
from torch.utils._python_dispatch import _disable_current_modes  # noqa: E402

import trl_ext  # noqa: E402
from trl_ext import toy  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from losses import PeakMemoryTracker  # noqa: E402

# algorithm: (trl_ext config overrides, trl.GRPOConfig overrides)
EQUIVALENT = {
    "sapo": ({"loss_agg_mode": "seq-mean-token-mean"}, {"loss_type": "sapo"}),
    "cispo": ({"clip_range_high": 4.0}, {"loss_type": "cispo", "epsilon_high": 5.0}),
    "gspo": ({}, {"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4}),
    "grpo": ({"loss_agg_mode": "token-mean"}, {"loss_type": "dapo"}),
}


def build_model(hidden: int, layers: int, out: str) -> str:
    """The toy model (hidden 64, 2 layers), or an untrained larger Qwen2 with the toy tokenizer."""
    if (hidden, layers) == (64, 2):
        return toy.tiny_model_path()
    tokenizer = toy.build_tokenizer()
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
        num_attention_heads=max(hidden // 64, 1), num_key_value_heads=max(hidden // 128, 1),
        max_position_embeddings=512, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.Qwen2ForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def make_trainer(kind: str, algorithm: str, model: str, args: argparse.Namespace, out: str, steps: int):
    ours, theirs = EQUIVALENT[algorithm]
    settings = dict(
        output_dir=out, use_cpu=args.device == "cpu", bf16=args.bf16, activation_checkpointing=False,
        per_device_train_batch_size=args.batch, num_generations=args.generations,
        max_completion_length=args.completion, max_steps=steps, logging_steps=1, learning_rate=1e-4,
        report_to="none", save_strategy="no", disable_tqdm=True, seed=0,
    )  # fmt: skip
    if kind == "trl_ext":
        spec = trl_ext.get_algorithm(algorithm)
        config, trainer_class = spec.config_class(**settings, advantage_epsilon=1e-4, **ours), spec.trainer_class
    else:
        config, trainer_class = trl.GRPOConfig(**settings, **theirs), trl.GRPOTrainer
    trainer = trainer_class(model=model, reward_funcs=toy.toy_reward, args=config, train_dataset=toy.toy_dataset())
    trainer.remove_callback(transformers.PrinterCallback)
    return trainer


def step_times(trainer) -> list[float]:
    trainer.train()
    return [entry["step_time"] for entry in trainer.state.log_history if "step_time" in entry][1:]


def peak_memory(trainer, device: str, with_generation: bool) -> float:
    """Peak MiB during one training step, maximum over the run's steps. Without generation: the memory that
    generation and scoring allocate is not counted (on CPU the tracker is off while they run; on CUDA the peak is
    reset after them), which isolates the loss's forward + backward, where the trainers differ."""
    peaks: list[float] = []
    step, generate = trainer.training_step, trainer._generate_and_score_completions

    def generate_untracked(*a, **k):
        if device == "cuda":
            output = generate(*a, **k)
            if not with_generation:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            return output
        if with_generation:
            return generate(*a, **k)
        with _disable_current_modes():
            return generate(*a, **k)

    def measured(*a, **k):
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            result = step(*a, **k)
            torch.cuda.synchronize()
            peaks.append((torch.cuda.max_memory_allocated() - base) / 2**20)
            return result
        with PeakMemoryTracker() as tracker:
            result = step(*a, **k)
        peaks.append(tracker.peak / 2**20)
        return result

    trainer.training_step, trainer._generate_and_score_completions = measured, generate_untracked
    trainer.train()
    return max(peaks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", default=",".join(EQUIVALENT))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--memory-steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--generations", type=int, default=16)
    parser.add_argument("--completion", type=int, default=8, help="max_completion_length")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    transformers.logging.set_verbosity_error()
    if args.device == "cpu":
        torch.set_num_threads(1)
    algorithms = args.algorithms.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(args.hidden, args.layers, os.path.join(tmp, "model"))
        times: dict[tuple[str, str], list[float]] = {}
        for round_index in range(args.rounds):
            for algorithm in algorithms:
                order = ("trl_ext", "trl") if round_index % 2 == 0 else ("trl", "trl_ext")
                for kind in order:
                    trainer = make_trainer(kind, algorithm, model, args, os.path.join(tmp, "out"), args.steps)
                    times.setdefault((algorithm, kind), []).extend(step_times(trainer))
        memory = {}
        for algorithm in algorithms:
            for kind in ("trl_ext", "trl"):
                for full in (True, False):
                    trainer = make_trainer(kind, algorithm, model, args, os.path.join(tmp, "out"), args.memory_steps)
                    memory[algorithm, kind, full] = peak_memory(trainer, args.device, full)
    print(
        f"device {args.device}, bf16 {args.bf16}, model hidden {args.hidden} x {args.layers} layers, batch "
        f"{args.batch} ({args.generations} per prompt), {args.completion} new tokens, torch {torch.__version__}, "
        f"trl {trl.__version__}; medians over {args.rounds} rounds x {args.steps - 1} steps"
    )
    print("peak MiB: a whole training step / the step without generation and scoring (loss forward + backward)")
    print(f"{'algorithm':<10} {'step s ours':>12} {'step s TRL':>11} {'time ratio':>11} {'peak ours':>15} "
          f"{'peak TRL':>15} {'memory ratio':>14}")  # fmt: skip
    for algorithm in algorithms:
        ours, theirs = (statistics.median(times[algorithm, kind]) for kind in ("trl_ext", "trl"))
        peaks = {kind: [memory[algorithm, kind, full] for full in (True, False)] for kind in ("trl_ext", "trl")}
        ratios = [a / b for a, b in zip(peaks["trl_ext"], peaks["trl"], strict=True)]
        mine, trls = (" / ".join(f"{v:.1f}" for v in peaks[kind]) for kind in ("trl_ext", "trl"))
        print(
            f"{algorithm:<10} {ours:>12.4f} {theirs:>11.4f} {ours / theirs:>11.3f} {mine:>15} {trls:>15} "
            f"{' / '.join(f'{r:.3f}' for r in ratios):>14}"
        )


if __name__ == "__main__":
    main()
