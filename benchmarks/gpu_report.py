"""Step time, tokens per second and peak CUDA memory of trl_ext's trainers against TRL's, at a realistic shape.

Run (from the repository root, on one GPU; every row at the defaults has not been timed yet: seven of the rows, 4
rounds x 4 steps, took about 9 minutes on an H100)::

    python benchmarks/gpu_report.py                       # writes gpu_report.md
    python benchmarks/gpu_report.py --rows sapo,grpo --rounds 6 --output report.md --json report.json
    python benchmarks/gpu_report.py --rows distillation   # trl.DistillationTrainer against teacher_top_k 0, 64, -1
    python benchmarks/gpu_report.py --shape tiny          # CPU or GPU, a few seconds per run: checks the script

`benchmarks/gpu_check.sh` runs every row at a budget (`--rounds 2 --steps 1 --time-limit`) after the GPU test suite,
in at most 8 minutes.

Shape (`--shape 0.5b`, the default): a randomly initialized Qwen2-architecture model with Qwen2.5-0.5B's
dimensions (hidden 896, 24 layers, 14 heads / 2 KV heads, MLP 4864, vocabulary 151,936, tied embeddings: 494M
parameters) in bf16, `bf16=True`, TRL's defaults otherwise (gradient checkpointing on, AdamW); 8 generations per
prompt, prompts of 64-128 tokens, completions of 256-512 tokens (those shorter than 512 end with EOS), micro-batches
of 16 sequences and 4 accumulation steps: 64 sequences (8 prompts) per optimizer step. The `distillation` rows
train on 64 completions per optimizer step too: TRL's `DistillationTrainer` samples one completion per prompt (64
prompts), trl_ext's `OnPolicyDistillTrainer` 2 per prompt (32 prompts; TRL's GRPO machinery needs at least 2).

Completions are not generated: both trainers get the same fixed random token ids through TRL's `rollout_func`,
seeded per call (`trl.DistillationTrainer` has no `rollout_func`: its prompt tokenization and generation return the
same ids instead, see `fixed_generation`; each optimizer step's completions are then the same in both trainers, its
prompts drawn from the same lengths). Generation is TRL's own code in both trainers; sampling 512 tokens with
`model.generate` would take most of each step and only dilute the comparison. Everything else of a step runs:
decoding and scoring the completions, the advantages, the loss's forward and backward over the micro-batches, the
optimizer step, logging (`logging_steps=1`).

Rows (trl_ext / TRL, in one process, interleaved: each round runs every row's two trainers, alternating which goes
first):

* `sapo`, `cispo`, `gspo`, `grpo`: the trl_ext trainer against `trl.GRPOTrainer` with the equivalent `loss_type`
  (`benchmarks/trainers.py`'s mapping, checked update by update in `tests/trainers/test_trl_parity.py`). Targets:
  step time and peak memory <= 1.00x TRL.
* `mix_chord`: `MIXCHORDTrainer` (its default share of expert demonstrations, of the same lengths, in every batch)
  against `trl.GRPOTrainer` (`dapo`) on the same batch. TRL has no such algorithm; the ratio is what the expert rows
  cost over plain GRPO.
* `distillation`: `OnPolicyDistillTrainer` against `trl.DistillationTrainer` with `beta=1` (reverse KL over the whole
  vocabulary), teacher: a second random model of the same shape, loaded in bf16 by both (`teacher_model_init_kwargs`),
  pure distillation (no reward functions), both with `learning_rate=1e-6`, bf16, activation (gradient) checkpointing
  on, `max_completion_length=512`, temperature 1, set explicitly. Three sub-rows, each against the same TRL runs:
  `distillation[k=0]` (`teacher_top_k=0`: the sampled-token estimator), `distillation[k=64]` (`teacher_top_k=64`,
  `jsd_beta=1`: the generalized JSD over the teacher's top 64 tokens + a tail category; targets: step time <= 0.80x
  and peak memory <= 0.50x TRL's) and `distillation[k=-1]` (`teacher_top_k=-1`: TRL's loss over the whole vocabulary,
  chunked). `--rows distillation` runs all three; a sub-row's name runs that one (and TRL's side).
* `dpo`: `trl_ext.DPOTrainer` with `kl_coef=0` (the sigmoid loss TRL computes) against `trl.DPOTrainer`, pairs of
  the same prompt and completion lengths, 8 pairs (16 sequences) per micro-batch, reference model loaded.
* `ppo`: `trl_ext.PPOTrainer` (its defaults: a critic of the policy's shape initialized from it, GAE) against
  trl_ext's `GRPOTrainer` (its defaults) on the same completions, 8 per prompt: what the critic costs (its values
  at generation, its forward and backward in every micro-batch, its optimizer), since TRL has no PPO trainer; the
  "TRL" columns of this row are trl_ext's GRPO. Below the table, both sides' median step is broken down into
  generation (the rollouts, rewards and reference log-probs of `_generate_and_score_completions`, without the critic's
  values), critic (its values at generation, its value-loss forward and backward, its optimizer step) and policy (the
  rest of the step: the policy's forward, backward and optimizer step), each part timed with CUDA synchronized at its
  ends (in this row only).
* `multi_turn`: trl_ext's `GiGPOTrainer` against `trl.GRPOTrainer` on the toy tool-using agent
  (`trl_ext.toy_agent`, TRL's `environment_factory`), both sampling their episodes through TRL's tool loop: what
  the per-turn advantages cost. Its model is the toy agent's at every shape (see `gpu_agent.py`).

Before the rounds, every trainer runs once untimed on the same batches (Triton compiles its log-prob kernel for each
new sequence length, cuBLAS and attention pick kernels per shape). Order still matters: on an H100 the first trainer
of the first row of a round measured up to ~8% slower than the second, so the default number of rounds is even (each
trainer of a row goes first equally often; the `distillation` rows' four trainers run in one order, then reversed).

Measured, per optimizer step after the first `--warmup` ones: wall time from the step's start to its end (CUDA
synchronized at both ends); tokens = the prompt and completion tokens (attention mask) of every micro-batch the loss
ran on; peak = `torch.cuda.max_memory_allocated` over the measured steps (weights, gradients and optimizer state
included). Medians over all measured steps of all rounds, with a 95% bootstrap interval of the step-time ratio
(step times resampled on each side): on a shared GPU machine single steps vary by +-15%, and a ratio whose interval
holds 1.00 does not differ from TRL's in that run. Below the table, each row's targets and whether this run meets
them (a time ratio whose interval holds the target is reported as not told apart from it). The script exits 0
whatever the numbers: it is a report.

The Markdown (`--output`) and, with `--json`, the same figures as JSON (`gpu_figures.row_figures` per row, the
settings and versions) are written after every round, so a run stopped from outside keeps its finished rounds. With
`--time-limit S`, a row group's runs of a round start only if they fit in S seconds from the start (estimated from
that group's previous pass): the rows it leaves out of a round have fewer rounds (`runs` in the JSON), and a row
with none is listed as not measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
import zlib
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore")

import datasets  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402
from datasets import Dataset  # noqa: E402

import trl_ext  # noqa: E402
from trl_ext import toy  # noqa: E402

# The sibling modules in benchmarks/ (ratio_interval is unused here: tests import it from this module, its old home)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_agent import make_agent_trainer  # noqa: E402
from gpu_figures import part_lines, ratio_interval, row_figures, table, target_lines  # noqa: E402, F401
from gpu_meters import PartMeter, StepMeter, count_tokens  # noqa: E402
from trainers import EQUIVALENT  # noqa: E402

SHAPES: dict[str, dict[str, Any]] = {
    "0.5b": dict(
        hidden=896, intermediate=4864, layers=24, heads=14, kv_heads=2, vocab=151_936,
        prompt=(64, 128), completion=(256, 512), micro_batch=16, accumulation=4,
    ),
    "tiny": dict(
        hidden=64, intermediate=256, layers=2, heads=2, kv_heads=1, vocab=4096,
        prompt=(8, 16), completion=(16, 32), micro_batch=8, accumulation=2,
    ),
}  # fmt: skip
GENERATIONS = 8
GRPO_ROWS = ("sapo", "cispo", "gspo", "grpo")
ROWS = (*GRPO_ROWS, "mix_chord", "distillation", "dpo", "ppo", "multi_turn")
# The `distillation` row's sub-rows: OnPolicyDistillTrainer's teacher_top_k (each against TRL's runs)
DISTILL_TOP_K = {"distillation[k=0]": 0, "distillation[k=64]": 64, "distillation[k=-1]": -1}
DISTILL_GENERATIONS = 2  # trl_ext's completions per prompt in the distillation rows (TRL's GRPO machinery needs >= 2)
# row: (step time ratio, peak memory ratio) at most; rows not named here have no target
TARGETS = {**{row: (1.00, 1.00) for row in GRPO_ROWS}, "distillation[k=64]": (0.80, 0.50)}
NOTES = {"mix_chord": "against plain GRPO: TRL has no MIX-CHORD"}  # after "no target" in the row's target line
PART_ROWS = ("ppo",)  # the rows whose step is broken down into parts (the breakdown adds CUDA synchronizations)
PART_NAMES = {"ppo": ("critic PPO", "trl_ext GRPO")}  # the two sides in a row's table of parts


def table_rows(selected: list[str]) -> list[str]:
    """The rows of the table (`distillation` stands for its three sub-rows), in order, without repeats."""
    rows: list[str] = []
    for row in selected:
        for name in DISTILL_TOP_K if row == "distillation" else (row,):
            if name not in rows:
                rows.append(name)
    return rows


def baseline(row: str) -> str:
    """The name under which a table row's TRL side is measured: every distillation sub-row shares TRL's runs."""
    return "distillation" if row in DISTILL_TOP_K else row


def measured_groups(rows: list[str]) -> list[list[tuple[str, str]]]:
    """The (name, kind) runs of each round, grouped by their TRL side: a group's runs are interleaved, in this order
    in even rounds and reversed in odd ones."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for row in rows:
        groups.setdefault(baseline(row), []).append((row, "trl_ext"))
    return [[*runs, (name, "trl")] for name, runs in groups.items()]


def build_model(shape: dict[str, Any], tokenizer, path: str, seed: int, device: str) -> int:
    """Save a randomly initialized Qwen2 of `shape` (bf16 on CUDA) with `tokenizer` at `path`; its parameter count."""
    config = transformers.Qwen2Config(
        vocab_size=shape["vocab"], hidden_size=shape["hidden"], intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"],
        max_position_embeddings=4096, tie_word_embeddings=True, rope_theta=1e6,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.Qwen2ForCausalLM(config)
    if device == "cuda":
        model = model.to(torch.bfloat16)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    count = sum(p.numel() for p in model.parameters())
    del model
    return count


class FixedRollouts:
    """A `rollout_func`: the same prompt ids for the same prompt text, and random completions (seeded per call, so
    two trainers given fresh instances see the same batches). Completions shorter than the maximum end with EOS."""

    def __init__(self, shape: dict[str, Any], tokenizer, seed: int = 0) -> None:
        self.shape, self.calls, self.seed = shape, 0, seed
        self.low, self.high = len(toy.SPECIAL_TOKENS), len(tokenizer)  # ordinary tokens only
        self.eos = tokenizer.eos_token_id

    def _ids(self, lengths: tuple[int, int], generator: torch.Generator) -> list[int]:
        n = int(torch.randint(lengths[0], lengths[1] + 1, (1,), generator=generator))
        return torch.randint(self.low, self.high, (n,), generator=generator).tolist()

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.calls)
        self.calls += 1
        prompt_ids, completion_ids = [], []
        for prompt in prompts:
            prompt_generator = torch.Generator().manual_seed(zlib.crc32(str(prompt).encode()))
            prompt_ids.append(self._ids(self.shape["prompt"], prompt_generator))
            ids = self._ids(self.shape["completion"], generator)
            if len(ids) < self.shape["completion"][1]:
                ids[-1] = self.eos
            completion_ids.append(ids)
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}


def graded_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """A reward that varies within every group, so every loss has a gradient."""
    return [(len(c) % 7) / 7 for c in completions]


def _letters(lengths: tuple[int, int], rng: torch.Generator) -> str:
    """Text of about n tokens (n drawn from `lengths`): single letters separated by spaces."""
    n = int(torch.randint(lengths[0], lengths[1], (1,), generator=rng))
    return " " + " ".join(toy.LETTERS[int(i)] for i in torch.randint(0, len(toy.LETTERS), (n,), generator=rng))


def make_trainer(
    row: str, kind: str, paths: dict[str, str], shape: dict[str, Any], args: argparse.Namespace, steps: int
):
    cuda = args.device == "cuda"
    settings: dict[str, Any] = dict(
        output_dir=paths["out"], use_cpu=not cuda, bf16=cuda, per_device_train_batch_size=shape["micro_batch"],
        gradient_accumulation_steps=shape["accumulation"], max_steps=steps, logging_steps=1, learning_rate=1e-6,
        report_to="none", save_strategy="no", disable_tqdm=True, seed=0,
    )  # fmt: skip
    if row == "multi_turn":
        return make_agent_trainer(kind, paths["out"], steps, cuda)
    tokenizer = transformers.AutoTokenizer.from_pretrained(paths["model"])
    if row == "dpo":
        rng = torch.Generator().manual_seed(0)
        pairs = shape["micro_batch"] // 2 * shape["accumulation"] * steps
        data = Dataset.from_dict(
            {
                "prompt": [_letters(shape["prompt"], rng) for _ in range(pairs)],
                "chosen": [_letters(shape["completion"], rng) for _ in range(pairs)],
                "rejected": [_letters(shape["completion"], rng) for _ in range(pairs)],
            }
        )
        dpo = {
            **settings,
            "per_device_train_batch_size": shape["micro_batch"] // 2,
            "max_length": shape["prompt"][1] + shape["completion"][1] + 8,
        }
        if kind == "trl_ext":
            return trl_ext.DPOTrainer(paths["model"], args=trl_ext.DPOConfig(**dpo, kl_coef=0.0), train_dataset=data)
        return trl.DPOTrainer(paths["model"], args=trl.DPOConfig(**dpo), train_dataset=data)

    if baseline(row) == "distillation":
        return make_distillation_trainer(row, kind, paths, shape, settings, tokenizer, steps, cuda)

    settings.update(num_generations=GENERATIONS, max_completion_length=shape["completion"][1])
    prompts = shape["micro_batch"] * shape["accumulation"] // GENERATIONS * steps
    data = Dataset.from_dict({"prompt": [f"prompt {i}" for i in range(prompts)]})
    common = dict(train_dataset=data, rollout_func=FixedRollouts(shape, tokenizer))
    if kind == "trl" and row == "ppo":  # critic PPO's cost is measured against trl_ext's GRPO (TRL has no PPO)
        return trl_ext.GRPOTrainer(
            paths["model"], reward_funcs=graded_reward, args=trl_ext.GRPOConfig(**settings), **common
        )
    if kind == "trl":
        theirs = EQUIVALENT[row][1] if row in EQUIVALENT else {"loss_type": "dapo"}
        config = trl.GRPOConfig(**settings, **theirs)
        return trl.GRPOTrainer(paths["model"], reward_funcs=graded_reward, args=config, **common)
    spec = trl_ext.get_algorithm(row)
    ours = EQUIVALENT[row][0] if row in EQUIVALENT else {}
    if row in EQUIVALENT:
        ours = {**ours, "advantage_epsilon": 1e-4}  # TRL's std epsilon
    config = spec.config_class(**settings, **ours)
    if row == "mix_chord":
        rng = torch.Generator().manual_seed(1)
        n = shape["micro_batch"] * shape["accumulation"] * steps
        expert = Dataset.from_dict(
            {
                "prompt": [_letters(shape["prompt"], rng) for _ in range(n)],
                "completion": [_letters(shape["completion"], rng) for _ in range(n)],
            }
        )
        common["expert_dataset"] = expert
    return spec.trainer_class(paths["model"], reward_funcs=graded_reward, args=config, **common)


def fixed_generation(trainer: Any, rollouts: FixedRollouts) -> None:
    """Give `trl.DistillationTrainer` (which has no `rollout_func`) the ids of `rollouts`: its prompt tokenization
    returns the rollouts' prompt ids and its generation their completion ids. The rest of its `_generate` (the
    completion metrics) and everything after it run unchanged."""
    completions: list[list[int]] = []

    def tokenize_prompts(prompts: list[Any]):
        out = rollouts(prompts, trainer)
        completions[:] = out["completion_ids"]
        return out["prompt_ids"], None, {}

    def generate_single_turn(prompt_ids, images, multimodal_fields, has_tool_images=False):
        assert len(completions) == len(prompt_ids)
        return list(completions)

    trainer._tokenize_prompts = tokenize_prompts
    trainer._generate_single_turn = generate_single_turn


def make_distillation_trainer(
    row: str,
    kind: str,
    paths: dict[str, str],
    shape: dict[str, Any],
    settings: dict[str, Any],
    tokenizer,
    steps: int,
    cuda: bool,
):
    """`trl.DistillationTrainer(beta=1)` (kind `trl`) or `OnPolicyDistillTrainer` with the sub-row's `teacher_top_k`
    (kind `trl_ext`): the same 64 completions per optimizer step, teacher, learning rate, bf16, checkpointing and
    completion length, all set explicitly (TRL's `DistillationConfig` defaults differ from `TrainingArguments`')."""
    sequences = shape["micro_batch"] * shape["accumulation"]  # completions per optimizer step
    settings = {
        **settings,
        "activation_checkpointing": True,  # TRL's default (`gradient_checkpointing`), the report's setting
        "max_completion_length": shape["completion"][1],
        "temperature": 1.0,
        "teacher_model_init_kwargs": {"dtype": "bfloat16" if cuda else "float32"},
    }
    rollouts = FixedRollouts(shape, tokenizer)
    if kind == "trl":
        data = Dataset.from_dict({"prompt": [f"prompt {i}" for i in range(sequences * steps)]})
        config = trl.DistillationConfig(**settings, beta=1.0)
        trainer = trl.DistillationTrainer(
            paths["model"], teacher_model=paths["teacher"], args=config, train_dataset=data
        )
        fixed_generation(trainer, rollouts)
        return trainer
    data = Dataset.from_dict({"prompt": [f"prompt {i}" for i in range(sequences // DISTILL_GENERATIONS * steps)]})
    config = trl_ext.OnPolicyDistillConfig(
        **settings, num_generations=DISTILL_GENERATIONS, teacher_top_k=DISTILL_TOP_K[row], jsd_beta=1.0
    )
    return trl_ext.OnPolicyDistillTrainer(  # pure distillation: no reward functions
        paths["model"], args=config, teacher_model=paths["teacher"], train_dataset=data, rollout_func=rollouts
    )


def run(row: str, kind: str, paths: dict[str, str], shape: dict[str, Any], args: argparse.Namespace) -> dict:
    trainer = make_trainer(row, kind, paths, shape, args, args.warmup + args.steps)
    trainer.remove_callback(transformers.PrinterCallback)
    meter = StepMeter(args.warmup, args.device == "cuda")
    trainer.add_callback(meter)
    counted = count_tokens(trainer, meter)
    parts = PartMeter(trainer, meter) if row in PART_ROWS else None
    start = time.perf_counter()
    trainer.train()
    tokens = torch.stack(counted).sum().item() if counted else 0
    result = {"times": meter.times, "tokens": tokens, "peak": meter.peak, "wall": time.perf_counter() - start}
    result["parts"] = parts.per_step if parts is not None else []
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert all(map(math.isfinite, losses)), f"{row}/{kind}: non-finite loss {losses}"
    del trainer
    gc.collect()
    if args.device == "cuda":
        torch.cuda.empty_cache()
    return result


def measured_figures(results: dict[tuple[str, str], list[dict]], rows: list[str]) -> dict[str, dict[str, Any]]:
    """`gpu_figures.row_figures` of every row measured so far (a row group's runs of a round run all or none)."""
    return {
        row: row_figures(results[row, "trl_ext"], results[baseline(row), "trl"], TARGETS.get(row))
        for row in rows
        if (row, "trl_ext") in results
    }


def description(args: argparse.Namespace, shape: dict[str, Any], parameters: int) -> str:
    """The paragraph under the report's title: the shape, the settings, the versions and what each row compares."""
    return (
        f"Shape `{args.shape}`: Qwen2 architecture, {parameters / 1e6:.0f}M parameters (hidden {shape['hidden']}, "
        f"{shape['layers']} layers, vocabulary {shape['vocab']:,}), {'bf16' if args.device == 'cuda' else 'fp32'}; "
        f"{GENERATIONS} generations per prompt, prompts {shape['prompt'][0]}-{shape['prompt'][1]} tokens, "
        f"completions {shape['completion'][0]}-{shape['completion'][1]} tokens, micro-batch {shape['micro_batch']} "
        f"sequences x {shape['accumulation']} accumulation steps. Medians over {args.rounds} rounds x {args.steps} "
        f"steps (after {args.warmup} warm-up step). torch {torch.__version__}, transformers "
        f"{transformers.__version__}, trl {trl.__version__}. Ratios are trl_ext / TRL; targets: sapo, cispo, gspo, "
        "grpo: time and memory <= 1.00; distillation[k=64]: time <= 0.80 and memory <= 0.50 (distillation[k=0] and "
        "[k=-1]: no target). mix_chord runs against plain GRPO (TRL has no MIX-CHORD); the distillation rows against "
        f"`trl.DistillationTrainer(beta=1)` on the same completions, {shape['micro_batch'] * shape['accumulation']} "
        f"prompts x 1 completion per step (trl_ext: {DISTILL_GENERATIONS} completions per prompt, same number of "
        "completions), teacher: a second model of the same shape; ppo (critic PPO) runs against trl_ext's GRPO on "
        "the same completions (TRL has no PPO): the ratio is what the critic costs; multi_turn runs GiGPO against "
        "`trl.GRPOTrainer` on the toy tool-using agent (its own 113k-parameter Qwen3 at every shape, 8 prompts x 8 "
        "episodes per step, sampled through TRL's tool loop): the ratio is what the per-turn advantages cost."
    )


def write_report(
    args: argparse.Namespace,
    meta: dict[str, Any],
    figures: dict[str, dict[str, Any]],
    rows: list[str],
) -> str:
    """Write the Markdown report (and the JSON with `--json`) of the rows measured so far; the Markdown text."""
    not_measured = [row for row in rows if row not in figures]
    fewer = [f"{row} {f['trl_ext']['runs']}" for row, f in figures.items() if f["trl_ext"]["runs"] < args.rounds]
    notes = []
    if fewer:
        notes.append(f"Fewer rounds than {args.rounds} (--time-limit): " + ", ".join(fewer) + ".")
    if not_measured:
        notes.append("Not measured (--time-limit): " + ", ".join(not_measured) + ".")
    text = "\n".join(
        [
            f"# trl_ext vs TRL on {meta['device']}",
            "",
            meta["description"],
            "",
            *table(figures),
            "",
            *[line for note in notes for line in (note, "")],
            *part_lines(figures, PART_NAMES),
            *target_lines(figures, NOTES),
            "",
        ]
    )
    with open(args.output, "w") as f:
        f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**meta, "rows": figures, "not_measured": not_measured}, f, indent=1)
    return text


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="0.5b")
    choices = (*ROWS, *DISTILL_TOP_K)
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, from {', '.join(choices)}")
    parser.add_argument("--rounds", type=int, default=4, help="even: each trainer of a row goes first equally often")
    parser.add_argument("--steps", type=int, default=4, help="measured optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=1, help="optimizer steps per run before measuring")
    parser.add_argument("--output", default="gpu_report.md", help="the Markdown report")
    parser.add_argument("--json", help="also write the figures as JSON to this path")
    parser.add_argument("--time-limit", type=float, help="seconds: start no row group's round that would end later")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    unknown = sorted(set(args.rows.split(",")) - set(choices))
    if unknown:
        parser.error(f"--rows: unknown {', '.join(unknown)}; choose from {', '.join(choices)}")
    if args.rounds < 1 or args.steps < 1:
        parser.error(f"--rounds and --steps: at least 1 (got {args.rounds} and {args.steps})")
    return args


def main() -> None:
    args = parse_args()
    rows = table_rows(args.rows.split(","))
    groups = measured_groups(rows)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    shape = SHAPES[args.shape]
    began = time.perf_counter()
    deadline = began + args.time_limit if args.time_limit is not None else math.inf
    results: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = toy.build_tokenizer()
        tokenizer.model_max_length = 4096
        paths = {name: os.path.join(tmp, name) for name in ("model", "teacher", "out")}
        parameters = build_model(shape, tokenizer, paths["model"], 0, args.device)
        if any(baseline(row) == "distillation" for row in rows):  # the teacher: same shape, another seed
            build_model(shape, tokenizer, paths["teacher"], 1, args.device)
        meta: dict[str, Any] = {
            "device": torch.cuda.get_device_name() if args.device == "cuda" else "CPU",
            "description": description(args, shape, parameters),
            "settings": {
                "shape": args.shape, **shape, "parameters": parameters, "generations": GENERATIONS,
                "rows": rows, "rounds": args.rounds, "steps": args.steps, "warmup": args.warmup,
                "time_limit_s": args.time_limit,
            },
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "trl": trl.__version__, "trl_ext": trl_ext.__version__},
            "left_out": [],  # per round: the rows --time-limit left out of it
        }  # fmt: skip
        # Untimed: one whole run of each trainer on the same batches, so that no measured run pays a one-time cost
        # (Triton kernel compilation for each new sequence length, cuBLAS and attention kernel selection for these
        # shapes, allocator growth): without it the first trainer of each row measured up to 1.6x slower. Each
        # group's pass also times it, for --time-limit.
        last_pass: list[float] = []
        for group in groups:
            start = time.perf_counter()
            for row, kind in group:
                run(row, kind, paths, shape, args)
            last_pass.append(time.perf_counter() - start)
        print(f"warm-up done (elapsed {time.perf_counter() - began:.0f} s)", flush=True)
        for round_index in range(args.rounds):
            left_out: list[str] = []
            for index, group in enumerate(groups):
                if time.perf_counter() + last_pass[index] > deadline:
                    left_out += [row for row, kind in group if kind == "trl_ext"]
                    continue
                start = time.perf_counter()
                for row, kind in group if round_index % 2 == 0 else reversed(group):
                    result = run(row, kind, paths, shape, args)
                    results.setdefault((row, kind), []).append(result)
                    print(
                        f"round {round_index} {row:<20} {kind:<8} median step {statistics.median(result['times']):.3f}"
                        f" s, peak {result['peak']:.2f} GiB, run {result['wall']:.1f} s "
                        f"(elapsed {time.perf_counter() - began:.0f} s); steps "
                        + " ".join(f"{t:.3f}" for t in result["times"]),
                        flush=True,
                    )
                last_pass[index] = time.perf_counter() - start
            if left_out:
                print(f"round {round_index}: --time-limit left out {', '.join(left_out)}", flush=True)
                meta["left_out"].append({"round": round_index, "rows": left_out})
            meta["elapsed_s"] = time.perf_counter() - began
            text = write_report(args, meta, measured_figures(results, rows), rows)
    print(text)
    written = args.output + (f" and {args.json}" if args.json else "")
    print(f"written to {written} ({time.perf_counter() - began:.0f} s in all)")


if __name__ == "__main__":
    main()
