"""The DPO trainer's window normalization across processes: 2 processes × 2 pairs per step (torchrun, gloo) make the
update and the window metrics of 1 process × 4 pairs (`scripts/dpo_run.py`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.slow  # two-process runs of one family (the slow tier: pytest -m slow)

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "dpo_run.py")


def test_two_processes_match_one(random_tiny_model, tmp_path, float_tolerance):
    """2 processes × 2 pairs per step = 1 process × 4 pairs (torchrun, gloo): same update, same window metrics. The
    two runs are launched side by side (three one-thread processes)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    launches = {}
    for name, launcher, batch in [
        ("1x4", [sys.executable], 4),
        ("2x2", [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"], 2),
    ]:
        out = str(tmp_path / f"{name}.pt")
        command = [*launcher, SCRIPT, out, "--model", random_tiny_model, "--batch", str(batch)]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        launches[name] = (process, out)
    outs = {}
    for name, (process, out) in launches.items():
        stdout, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stdout[-3000:] + stderr[-3000:]
        outs[name] = torch.load(out)
    assert outs["1x4"]["update"].norm() > 1e-3
    logs, update = outs["1x4"]["logs"], outs["1x4"]["update"]
    # float32 sums over the step's tokens, of weights up to 1 (the RMSNorm weights) plus the update
    torch.testing.assert_close(
        outs["2x2"]["update"], update, **float_tolerance(torch.float32, logs["num_tokens"], 1 + update.abs().max())
    )
    # the metrics are made of the sequences' summed log-probs
    tol = float_tolerance(
        torch.float32, logs["num_tokens"], max(abs(logs["logps/chosen"]), abs(logs["logps/rejected"]))
    )
    for key in ("dpo_loss", "kl", "chosen_reward", "accuracy_mean"):
        assert outs["2x2"]["logs"][key] == pytest.approx(logs[key], rel=tol["rtol"], abs=tol["atol"]), key
