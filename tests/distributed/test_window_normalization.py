"""Normalization over the optimizer window (docs/design.md §2.6): the same 16 fixed completions trained as 1 process × 4
accumulation steps, 1 process × 1 step with 4× the batch, and 2 processes × 2 steps (torchrun, gloo, CPU) give the
same two updates, for every `loss_agg_mode`, with a KL and an entropy term, token-level advantages (REINFORCE++),
dropped samples (RAFT), dropped groups replaced by copies of kept ones (`duplicate_experiences`, rows copied across
processes), DAPO's dynamic sampling (a uniform group replaced by a group of a second generation round, rows moved
across processes) with its overlong reward shaping, MIX-CHORD's two parts (rollouts and expert rows, each normalized
over its own rows of the window, with a scheduled μ), on-policy distillation (teacher advantages with a group baseline
and a reward term, computed over the whole generation batch of every process) and the multi-turn algorithms (two model
turns around a tool output: GiGPO's anchor states gathered over processes, and each turn a sample of the seq-mean
aggregation) and critic PPO (GAE on the critic's values, its value loss normalized over the same window and its own
optimizer stepped with the policy's, so the second step's values agree too). A control run that normalizes each micro-
batch by itself (TRL's `grpo` / `bnpo` convention) does not, so the comparison can fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import ClassVar

import pytest
import torch

import trl_ext
from trl_ext.components import MAX, MEAN, MIN, SHARE
from trl_ext.trainers.core.window import WindowNormalization

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "window_run.py")
MIX_MODES = ["token-mean", "seq-mean-token-sum-norm"]
ALGORITHMS = "grpo:all,grpo:duplicate,grpo:dynamic,reinforceplusplus,raft,mix_chord:" + "+".join(MIX_MODES)
ALGORITHMS += ",on_policy_distill,on_policy_distill:dense,multi_step_grpo:turns+seq-mean-token-mean,gigpo"
ALGORITHMS += ",ppo:default+shared"
MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


# The control that normalizes each micro-batch by itself: only the runs that
# test_modes_differ_and_local_normalization_does_not_match compares.
LOCAL_CONTROL = "grpo:token-mean+seq-mean-token-sum-norm,reinforceplusplus,raft"


def run_window_script(out, model, teacher, batch, accumulation, processes=1, *extra, algorithms=None):
    """The window script's results (`scripts/window_run.py`) of every algorithm of `algorithms` (default
    `ALGORITHMS`), trained with the given micro-batch, accumulation steps and processes (torchrun, gloo)."""
    launcher = [sys.executable] if processes == 1 else [sys.executable, "-m", "torch.distributed.run"]
    if processes > 1:
        launcher += ["--standalone", "--nproc_per_node", str(processes)]
    command = [*launcher, SCRIPT, out, "--model", model, "--teacher", teacher]
    command += ["--batch", str(batch), "--accumulation", str(accumulation)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command += ["--algorithms", algorithms or ALGORITHMS, *extra]
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return torch.load(out)


@pytest.fixture(scope="module")
def runs(one_process_window_runs, random_tiny_model, tiny_model, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("window")
    model, teacher = random_tiny_model, tiny_model  # the teacher: the pretrained toy model, same tokenizer
    with ThreadPoolExecutor(2) as pool:  # the one-process control beside the two-process run
        two = pool.submit(run_window_script, str(tmp / "c.pt"), model, teacher, 4, 2, 2)
        local = pool.submit(
            run_window_script, str(tmp / "d.pt"), model, teacher, 4, 4, 1, "--local", algorithms=LOCAL_CONTROL
        )
        # "1x1" and "1x4" are shared with test_distributed_engines.py
        return {**one_process_window_runs, "2x2": two.result(), "local": local.result()}


KEYS = [f"grpo/{mode}" for mode in MODES] + ["grpo/duplicate", "grpo/dynamic", "reinforceplusplus/default"]
KEYS += ["raft/default"]
KEYS += [f"mix_chord/{mode}" for mode in MIX_MODES] + ["on_policy_distill/default", "on_policy_distill/dense"]
KEYS += ["multi_step_grpo/turns", "multi_step_grpo/seq-mean-token-mean", "gigpo/default", "ppo/default", "ppo/shared"]
DISTILL_METRICS = ("kl/mean", "kl/std", "advantages/mean")
DENSE_METRICS = ("distill/divergence",)


def window_metrics(key: str) -> tuple[str, ...]:
    """The metrics beyond the loss's own that the run of `key` logs per window."""
    if key.startswith("mix"):
        return MIX_METRICS
    if key.startswith("on_policy"):
        return DENSE_METRICS if key.endswith("/dense") else DISTILL_METRICS
    if key.startswith("gigpo"):  # the anchor groups span groups held by different processes
        return GIGPO_METRICS
    if key.startswith("ppo"):  # the critic: its value loss over the window, and its values in the second step's GAE
        return ("vf_loss", "critic/returns", "critic/values")
    return ()


GIGPO_METRICS = ("advantage/gigpo/anchor_groups_total", "advantage/gigpo/mean_abs_A_S", "turns/per_completion")


MIX_METRICS = ("usual/pg_loss", "usual/pg_clipfrac", "usual/ppo_kl", "expert/sft_phi_loss", "mu", "entropy_loss")


@pytest.mark.parametrize("key", KEYS)
def test_same_update_for_every_split(runs, key, float_tolerance):
    reference = runs["1x1"][key]["update"]
    assert reference.norm() > 1e-2
    tokens = runs["1x1"][key]["logs"][1]["num_tokens"]  # both steps': the float32 sums run over them
    # the update (p + Δ) − p: weights up to 1 (random_tiny_model's RMSNorm weights) plus the update
    tol = float_tolerance(torch.float32, tokens, 1 + reference.abs().max())
    for split in ("1x4", "2x2"):
        torch.testing.assert_close(runs[split][key]["update"], reference, **tol, msg=f"{split} {key}")
    # The logged window values agree too (step 2 has a KL term).
    extra = window_metrics(key)
    reference_model = trl_ext.get_algorithm(key.split("/")[0]).use_reference  # else no KL term (beta = 0)
    kl = ("kl",) if reference_model else ()
    tol = float_tolerance(torch.float32, tokens)  # token means of terms of order one (advantage × ratio, exp(Δ), ...)
    for name in ("policy_loss", *kl, "entropy", "reward", *extra):
        values = [runs[split][key]["logs"][1][name] for split in ("1x1", "1x4", "2x2")]
        assert values == pytest.approx([values[0]] * 3, rel=tol["rtol"], abs=tol["atol"]), name
    assert runs["1x1"][key]["logs"][1].get("kl", 0.0) > 0 or not reference_model
    if key == "grpo/duplicate":  # two of the four groups are copies in every split, rows taken across processes
        for split in ("1x1", "1x4", "2x2"):
            assert [e["advantages/duplicated_frac"] for e in runs[split][key]["logs"]] == [0.5, 0.5], split
        assert not torch.allclose(reference, runs["1x1"]["grpo/token-mean"]["update"], rtol=1e-3)
    if key == "grpo/dynamic":  # prompt 1's group left twice per step in every split; a second round filled in
        for split in ("1x1", "1x4", "2x2"):
            logs = runs[split][key]["logs"]
            counts = [(e["dynamic_sampling/rounds"], e["dynamic_sampling/groups_dropped"]) for e in logs]
            assert counts == [(2.0, 2.0), (2.0, 2.0)], split
            assert all(e["rewards/overlong_penalty/mean"] < 0 for e in logs), split
    if key.startswith("mix"):  # both parts contribute, and μ follows the step
        logs = runs["1x1"][key]["logs"]
        assert logs[0]["usual/pg_loss"] != 0 and logs[0]["expert/sft_phi_loss"] > 0
        assert [entry["mu"] for entry in logs] == pytest.approx([0.6, 0.4])


def test_modes_differ_and_local_normalization_does_not_match(runs):
    updates = [runs["1x1"][f"grpo/{mode}"]["update"] for mode in MODES]
    for i in range(len(updates)):
        for j in range(i + 1, len(updates)):
            assert not torch.allclose(updates[i], updates[j], rtol=1e-3), (MODES[i], MODES[j])
    # Per-micro-batch token means weight the micro-batches equally, not their tokens: a different gradient.
    for key in ("grpo/token-mean", "grpo/seq-mean-token-sum-norm", "reinforceplusplus/default", "raft/default"):
        local, window = runs["local"][key]["update"], runs["1x1"][key]["update"]
        assert (local - window).abs().max() > 100 * (runs["1x4"][key]["update"] - window).abs().max() + 1e-6, key


def test_turns_as_samples_weighs_turns_not_completions(runs):
    # The same completions (most of two turns): a turn's token mean per sample is another gradient than a
    # completion's, and the window counts turns (23 of them in 16 completions) instead of completions.
    turns, completions = (runs["1x1"][f"multi_step_grpo/{mode}"] for mode in ("turns", "seq-mean-token-mean"))
    assert not torch.allclose(turns["update"], completions["update"], rtol=1e-3)
    assert turns["logs"][0]["turns/per_completion"] == completions["logs"][0]["turns/per_completion"] == 23 / 16


class _TwoProcessMetrics(WindowNormalization):
    """Process 0 of two: `gather` returns this process's window values and process 1's (`other`)."""

    kinds: ClassVar[dict[str, str]] = {"loss": SHARE, "ratio": MEAN, "low_min": MIN, "high_max": MAX}

    def __init__(self, other: list[float]):
        self.other = other

        def gather(values):
            return torch.cat([values, torch.tensor(self.other)])

        self.accelerator = SimpleNamespace(num_processes=2, sync_gradients=False, device="cpu", gather=gather)
        self.logged = {"train": defaultdict(list), "eval": defaultdict(list)}

    def metric_log(self, mode: str) -> dict[str, list[float]]:
        return self.logged[mode]

    def metric_kinds(self) -> dict[str, str]:
        return self.kinds


def test_window_metrics_combine_by_kind_over_micro_batches_and_processes():
    """SHARE: summed over the window and the processes; MEAN: averaged; MIN / MAX: each process's window average,
    then the smallest / largest. Process 1's window sums (two micro-batches) are given."""
    trainer = _TwoProcessMetrics(other=[0.3 + 0.4, 0.1 + 0.1, 0.0 + 0.2, 0.5 + 0.7])
    first = {"loss": 0.1, "ratio": 0.5, "low_min": 0.2, "high_max": 0.1}
    second = {"loss": 0.2, "ratio": 0.3, "low_min": 0.4, "high_max": 0.3}
    assert trainer._log_loss_metrics("train", {k: torch.tensor(v) for k, v in first.items()}) == {}  # mid-window
    trainer.accelerator.sync_gradients = True
    logged = trainer._log_loss_metrics("train", {k: torch.tensor(v) for k, v in second.items()})
    expected = {"loss": 1.0, "ratio": (0.8 + 0.2) / 4, "low_min": min(0.6, 0.2) / 2, "high_max": max(0.4, 1.2) / 2}
    assert logged == pytest.approx(expected)
    assert {k: v[-1] for k, v in trainer.logged["train"].items()} == pytest.approx(expected)
    # In evaluation every batch is logged, and a share is averaged like a value.
    trainer.other = [0.3, 0.1, 0.0, 0.5]  # process 1's batch
    logged = trainer._log_loss_metrics("eval", {k: torch.tensor(v) for k, v in first.items()})
    assert logged == pytest.approx({"loss": 0.2, "ratio": 0.3, "low_min": 0.0, "high_max": 0.5})
    with pytest.raises(ValueError, match=r"metric\(s\) 'other' have no declared kind"):
        trainer._log_loss_metrics("eval", {"other": torch.tensor(1.0)})
