"""DeepSpeed ZeRO-2 and ZeRO-3 on CPU: 2 processes, gloo, fp32, launched by `accelerate launch` with
configs/accelerate/deepspeed_zero{2,3}_cpu.yaml.

* The window test's 16 fixed completions (tests/distributed/scripts/window_run.py: under ZeRO-3 every algorithm and
  mode of test_window_normalization, under ZeRO-2 the GRPO modes and critic PPO; `ENGINE_ALGORITHMS`) trained as 2
  processes × 2 accumulation steps under each engine give the same two updates and logged window values as 1 process
  × 1 step with 4× the batch and 1 process × 4 steps (plain runs). Measured (SGD, fp32): max |Δupdate| 1.2e-7 for
  updates of up to 6e-2 (one ulp of the RMSNorm weights, 1, that the update is added to), at most 2% of the window
  test's tolerance (conftest's `float_tolerance`: 4·eps·√tokens × (1 + max |update|) ≈ 8e-6), as for the plain 1 × 4
  run, so that tolerance is kept. Under ZeRO-3 the reference model and the distillation teacher are partitioned too.
* The SAPO example trains 3 steps on 2 processes under ZeRO-3 (the partitioned case; ZeRO-2's engines train in the
  window runs above), shards its optimizer state and parameters over both processes, logs finite losses and rewards,
  and saves the gathered model.
* Critic PPO: its separate critic is a second engine at the policy's stage (the window runs above, under both
  stages), and under ZeRO-3, where both models are partitioned, 2 steps of its example resumed from the first step's
  checkpoint end with the same policy and critic as without the stop.

Not here, FSDP2: accelerate (1.15) never enables FSDP on CPU. `AcceleratorState` sets `DistributedType.FSDP` only
when the process group's type is a GPU-like one (MULTI_GPU, MULTI_XPU, ...), not MULTI_CPU, so a
`distributed_type: FSDP` config on CPU silently trains with DDP (torch's `fully_shard` itself works with gloo).

In the slow tier (`pytest -m slow`). Needs deepspeed (skipped without it):
`DS_BUILD_OPS=0 pip install --no-build-isolation deepspeed==0.19.8`, and a C++ compiler: DeepSpeed builds its CPU
shared-memory all-reduce op on first use (~45 s once, cached under ~/.cache/torch_extensions; the `deepspeed` fixture
builds it before the runs). About 165 s alone on 2 cores with the op built: ~30-50 s per engine, ~20 s for the shared
one-process references, ~16 s for the example and ~43 s for the PPO resume.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch
from test_window_normalization import ALGORITHMS as WINDOW_ALGORITHMS
from test_window_normalization import KEYS as WINDOW_KEYS
from test_window_normalization import window_metrics
from trainer_helpers import free_port

import trl_ext

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "distributed", "scripts", "window_run.py")
# ZeRO-3 (parameters partitioned: the policy, the reference model, the teacher, the critic) trains every window
# algorithm but dynamic sampling, which moves rows before the engine sees them (the torchrun split covers it); ZeRO-2
# (only the optimizer state sharded, the models whole on each process) the GRPO modes and critic PPO, whose critic is
# a second engine beside the policy's.
ALGORITHMS = ",".join(entry for entry in WINDOW_ALGORITHMS.split(",") if entry != "grpo:dynamic")
KEYS = [key for key in WINDOW_KEYS if key != "grpo/dynamic"]
ENGINE_ALGORITHMS = {"zero2": "grpo:all,ppo:default+shared", "zero3": ALGORITHMS}
ENGINES = {"zero2": 2, "zero3": 3}  # name -> ZeRO stage; config configs/accelerate/deepspeed_<name>_cpu.yaml


def _config(engine: str) -> str:
    return os.path.join(ROOT, "configs", "accelerate", f"deepspeed_{engine}_cpu.yaml")


def _env() -> dict[str, str]:
    """CPU even where CUDA exists (DeepSpeed would pick its CUDA accelerator and the examples use_cpu=False)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    return {**env, "CUDA_VISIBLE_DEVICES": "", "DS_ACCELERATOR": "cpu"}


@pytest.fixture(scope="module")
def deepspeed() -> None:
    """Skip without an importable deepspeed; build its CPU all-reduce op once (a C++ compiler is needed)."""
    reason = "needs deepspeed: DS_BUILD_OPS=0 pip install --no-build-isolation deepspeed==0.19.8"
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip(reason)
    check = subprocess.run([sys.executable, "-c", "import deepspeed"], capture_output=True, text=True, env=_env())
    if check.returncode != 0:
        pytest.skip(f"{reason} (import deepspeed: {(check.stderr.strip().splitlines() or ['failed'])[-1]})")
    build = "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load()"
    result = subprocess.run([sys.executable, "-c", build], capture_output=True, text=True, env=_env(), timeout=900)
    assert result.returncode == 0, "building DeepSpeed's CPU shared-memory op failed:\n" + result.stderr[-3000:]


def _window_run(out: str, model: str, teacher: str, batch: int, accumulation: int, algorithms: str, engine: str):
    """The window script on 2 processes under the DeepSpeed `engine` (accelerate launch)."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", _config(engine)]
    command += ["--num_processes", "2", "--main_process_port", str(free_port())]
    command += [SCRIPT, out, "--model", model, "--teacher", teacher, "--algorithms", algorithms]
    command += ["--batch", str(batch), "--accumulation", str(accumulation)]
    return subprocess.run(command, capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=600)


def _load(result: subprocess.CompletedProcess, out: str) -> dict:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return torch.load(out)


@pytest.fixture(scope="module")
def references(deepspeed, one_process_window_runs) -> dict:
    """The plain one-process runs (1 × 1 step with the whole window, 1 × 4 accumulation steps), shared with
    test_window_normalization.py."""
    return one_process_window_runs


@pytest.fixture(scope="module", params=list(ENGINES))
def engine_run(request, deepspeed, random_tiny_model, tiny_model, tmp_path_factory):
    """(engine, results) of 2 processes × 2 accumulation steps under the engine (under ZeRO-3 the reference model
    and the distillation teacher are partitioned too)."""
    engine = request.param
    out = str(tmp_path_factory.mktemp(engine) / "2x2.pt")
    return engine, _load(_window_run(out, random_tiny_model, tiny_model, 4, 2, ENGINE_ALGORITHMS[engine], engine), out)


def test_deepspeed_really_ran(engine_run):
    """Each trainer was a 2-process DeepSpeedEngine at the config's ZeRO stage (no silent fallback to DDP)."""
    engine, results = engine_run
    expected = {"distributed_type": "DistributedType.DEEPSPEED", "num_processes": 2, "wrapped": "DeepSpeedEngine"}
    for key, result in results.items():
        expected_here = {**expected, "zero_stage": ENGINES[engine]}
        if key == "ppo/default":  # the separate critic: a second engine at the same stage
            expected_here.update(critic="DeepSpeedEngine", critic_zero_stage=ENGINES[engine])
        assert result["engine"] == expected_here, key


@pytest.mark.parametrize("key", KEYS)
def test_same_update_as_one_process(references, engine_run, key, float_tolerance):
    engine, results = engine_run
    if key not in results:
        pytest.skip(f"{engine} trains {ENGINE_ALGORITHMS[engine]} (every algorithm: zero3)")
    reference = references["1x1"][key]["update"]
    assert reference.norm() > 1e-2
    tokens = references["1x1"][key]["logs"][1]["num_tokens"]  # both steps': the float32 sums run over them
    # the update (p + Δ) − p: weights up to 1 (random_tiny_model's RMSNorm weights) plus the update
    tol = float_tolerance(torch.float32, tokens, 1 + reference.abs().max())
    for split, update in (("1x4", references["1x4"][key]["update"]), (f"{engine} 2x2", results[key]["update"])):
        torch.testing.assert_close(update, reference, **tol, msg=f"{split} {key}")
    extra = window_metrics(key)
    tol = float_tolerance(torch.float32, tokens)  # token means of terms of order one (advantage × ratio, exp(Δ), ...)
    kl = ("kl",) if trl_ext.get_algorithm(key.split("/")[0]).use_reference else ()  # no reference model: no KL
    for name in ("policy_loss", *kl, "entropy", "reward", *extra):
        values = [references[s][key]["logs"][1][name] for s in ("1x1", "1x4")] + [results[key]["logs"][1][name]]
        assert values == pytest.approx([values[0]] * 3, rel=tol["rtol"], abs=tol["atol"]), name
    if key == "grpo/duplicate":  # groups copied across the two processes
        assert [e["advantages/duplicated_frac"] for e in results[key]["logs"]] == [0.5, 0.5]
    if key.startswith("mix"):
        assert [entry["mu"] for entry in results[key]["logs"]] == pytest.approx([0.6, 0.4])


@pytest.mark.parametrize("engine", ["zero3"])  # the partitioned case; ZeRO-2's engines run in the window runs above
def test_sapo_example_trains_on_two_processes(deepspeed, toy_cache, tmp_path, engine):
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", _config(engine)]
    command += ["--num_processes", "2", "--main_process_port", str(free_port())]
    command += [os.path.join(ROOT, "examples", "train_sapo.py"), "--output_dir", str(tmp_path)]
    command += ["--max_steps", "3", "--per_device_train_batch_size", "8", "--num_generations", "4"]
    command += ["--logging_steps", "1", "--save_strategy", "steps", "--save_steps", "3", "--report_to", "none"]
    result = subprocess.run(command, capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "Trained sapo for 3 steps on 2 process(es)" in result.stdout
    checkpoint = os.path.join(str(tmp_path), "checkpoint-3")
    # DeepSpeed's checkpoint: the optimizer state sharded over both processes (ZeRO-3: the parameters too)
    shards = sorted(os.path.basename(p) for p in glob.glob(os.path.join(checkpoint, "global_step3", "*.pt")))
    optimizer_shards = [f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt" for rank in (0, 1)]
    assert [s for s in shards if "optim_states" in s] == optimizer_shards, shards
    assert (engine == "zero3") == ("zero_pp_rank_1_mp_rank_00_model_states.pt" in shards), shards
    with open(os.path.join(checkpoint, "trainer_state.json")) as f:
        logs = [entry for entry in json.load(f)["log_history"] if "loss" in entry]
    assert [entry["step"] for entry in logs] == [1, 2, 3]
    for entry in logs:
        for name in ("loss", "sapo_loss", "entropy", "reward", "rewards/repeat_letter_reward/mean", "grad_norm"):
            assert math.isfinite(entry[name]), (name, entry)
    assert any(entry["grad_norm"] > 0 for entry in logs)
    assert os.path.isfile(os.path.join(str(tmp_path), "model.safetensors"))  # ZeRO-3: gathered (zero3_save_16bit_model)


@pytest.mark.parametrize("engine", ["zero3"])  # the partitioned case; ZeRO-2's engines run in the window runs above
def test_ppo_resumes_policy_and_critic_engines(deepspeed, toy_cache, tmp_path, engine, float_tolerance):
    """Critic PPO's example on 2 processes, 2 steps, checkpointed after each: resumed from checkpoint-1, it ends
    with the same policy and critic as the uninterrupted run (each engine's checkpoint restores its weights,
    optimizer and scheduler; under ZeRO-3 both models are partitioned and gathered to be saved)."""

    def run(out: str, *extra: str) -> None:
        command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", _config(engine)]
        command += ["--num_processes", "2", "--main_process_port", str(free_port())]
        command += [os.path.join(ROOT, "examples", "train_ppo.py"), "--output_dir", out, "--max_steps", "2"]
        command += ["--per_device_train_batch_size", "8", "--num_generations", "4", "--report_to", "none"]
        command += ["--save_strategy", "steps", "--save_steps", "1", "--seed", "5", *extra]
        result = subprocess.run(command, capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=600)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]

    from safetensors.torch import load_file

    full, resumed = str(tmp_path / "full"), str(tmp_path / "resumed")
    run(full)
    checkpoint = os.path.join(full, "checkpoint-1")
    assert os.path.isdir(os.path.join(checkpoint, "critic_engine"))  # the critic engine's own checkpoint
    run(resumed, "--resume_from_checkpoint", checkpoint)
    for weights in ("model.safetensors", os.path.join("value_model", "model.safetensors")):
        a, b = load_file(os.path.join(full, weights)), load_file(os.path.join(resumed, weights))
        assert a.keys() == b.keys() and a
        for name in a:
            tol = float_tolerance(torch.float32, magnitude=a[name].abs().max())
            torch.testing.assert_close(b[name], a[name], **tol, msg=f"{weights} {name}")
    # the critic moved (its learning rate is the policy's): resuming restored a trained critic, not a fresh one
    initial = load_file(os.path.join(checkpoint, "value_model", "model.safetensors"))
    final = load_file(os.path.join(full, "value_model", "model.safetensors"))
    assert any(not torch.equal(initial[name], final[name]) for name in initial)
