"""FSDP2 and DeepSpeed ZeRO-3 with one process on a GPU, through the shipped accelerate configs: the policy, the
reference model (`beta` > 0) and the distillation teacher are sharded by the engine, and training runs with finite
losses and a KL term that moves off 0. Skipped without CUDA; the DeepSpeed case also without `deepspeed`."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "gpu", "scripts", "engine_run.py")
CONFIGS = {"fsdp2": "fsdp.yaml", "zero3": "deepspeed_zero3.yaml"}


@pytest.mark.parametrize("algorithm", ["sapo", "on_policy_distill", "on_policy_distill:64", "on_policy_distill:-1"])
@pytest.mark.parametrize("engine", sorted(CONFIGS))
def test_engine_shards_reference_and_teacher(engine, algorithm, tiny_model, tiny_teacher, tmp_path):
    """`algorithm:k`: on-policy distillation with teacher_top_k=k (the dense modes gather the sharded output layers)."""
    algorithm, _, top_k = algorithm.partition(":")
    if engine == "zero3" and importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed")
    out = tmp_path / "result.json"
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]
    command += [os.path.join(ROOT, "configs", "accelerate", CONFIGS[engine]), "--num_processes", "1"]
    command += [SCRIPT, str(out), "--algorithm", algorithm, "--model", tiny_model, "--teacher", tiny_teacher]
    command += ["--teacher-top-k", top_k] if top_k else []
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    found = json.loads(out.read_text())
    print(engine, algorithm, found)
    assert found["fsdp" if engine == "fsdp2" else "deepspeed"]
    assert found["policy_sharded"] and found["ref_sharded"]
    if algorithm == "on_policy_distill":
        assert found["teacher_sharded"]
    assert len(found["losses"]) == 3 and all(math.isfinite(v) for v in found["losses"])
    assert found["kl"][0] == 0 and found["kl"][-1] > 0  # the reference is the initial policy
    if top_k:
        assert len(found["divergence"]) == 3 and all(math.isfinite(v) and v > 0 for v in found["divergence"])
