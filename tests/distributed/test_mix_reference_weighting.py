"""MIX-CHORD with the reference's per-micro-batch weighting (a batch-geometry argument set) on 2 processes: the same 4
micro-batches trained as 1 process × 4 accumulation steps and as 2 processes × 2 steps (torchrun, gloo, CPU; each
process takes 2 of them) give the same two updates, with ppo, sapo, gspo and cispo on the rollout rows.

That weighting is per micro-batch (each part's mean over its rows of the micro-batch times n·w), so unlike window
normalization it depends on which rows share a micro-batch: `window_run.py --fixed-micro-batches` interleaves each
process's rollouts and expert rows instead of TRL's random shuffle, which makes micro-batch j of process p hold the
same rows in both splits. The trainer scales the loss by 1 / (accumulation steps × processes); a control run without
the processes' factor (`--no-process-scale`, with sapo) doubles the 2-process gradient: the comparison can fail. Two
iterations per generation, so that the second step's ratios differ from 1 and the rollout losses differ."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

pytestmark = pytest.mark.slow  # two-process runs of one family (the slow tier: pytest -m slow)

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "window_run.py")
ROLLOUT_LOSSES = {  # the rollout loss's class, and its loss metric as the mix logs it
    "ppo": ("PPOPolicyLoss", "usual/pg_loss"),
    "sapo": ("SAPOPolicyLoss", "usual/sapo_loss"),
    "gspo": ("GSPOPolicyLoss", "usual/ppo_kl_seq"),
    "cispo": ("CISPOPolicyLoss", "usual/cispo_loss"),
}
ALGORITHMS = "mix_chord:" + "+".join(f"reference-{name}" for name in ROLLOUT_LOSSES)
CONTROL = "mix_chord:reference-sapo"


def _run(out, model, batch, accumulation, processes=1, *extra, algorithms=ALGORITHMS):
    launcher = [sys.executable] if processes == 1 else [sys.executable, "-m", "torch.distributed.run"]
    if processes > 1:
        launcher += ["--standalone", "--nproc_per_node", str(processes)]
    command = [*launcher, SCRIPT, out, "--model", model, "--batch", str(batch), "--accumulation", str(accumulation)]
    command += ["--algorithms", algorithms, "--fixed-micro-batches", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return torch.load(out)


@pytest.fixture(scope="module")
def runs(random_tiny_model, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mix_reference")
    with ThreadPoolExecutor(2) as pool:  # the one-process run beside the first two-process one
        one = pool.submit(_run, str(tmp / "a.pt"), random_tiny_model, 4, 4)
        two = pool.submit(_run, str(tmp / "b.pt"), random_tiny_model, 4, 2, 2)
        runs = {"1x4": one.result(), "2x2": two.result()}
    # the factor does not depend on the rollout loss: one is enough for the control
    runs["control"] = _run(str(tmp / "c.pt"), random_tiny_model, 4, 2, 2, "--no-process-scale", algorithms=CONTROL)
    return runs


def _tolerance(run, float_tolerance):
    update = run["update"]
    tokens = 2 * run["logs"][0]["num_tokens"]  # both steps train on the first step's generation
    # the update (p + Δ) − p: weights up to 1 (random_tiny_model's RMSNorm weights) plus the update
    return float_tolerance(torch.float32, tokens, 1 + update.abs().max()), float_tolerance(torch.float32, tokens)


@pytest.mark.parametrize("name", sorted(ROLLOUT_LOSSES))
def test_same_update_on_one_and_two_processes(runs, name, float_tolerance):
    key = f"mix_chord/reference-{name}"
    one, two = runs["1x4"][key], runs["2x2"][key]
    cls, metric = ROLLOUT_LOSSES[name]
    for run in (one, two):  # what trained: the reference's weighting, with the rollout loss composed in
        assert run["reference_weighting"] is True
        assert run["policy_loss"].startswith(f"MIXCHORDPolicyLoss(rollout_loss={cls}("), run["policy_loss"]
    assert one["engine"]["num_processes"] == 1 and two["engine"]["num_processes"] == 2
    reference = one["update"]
    assert reference.norm() > 1e-2
    tol, value_tol = _tolerance(one, float_tolerance)
    torch.testing.assert_close(two["update"], reference, **tol)
    for step in (0, 1):  # the logged window values agree too
        for logged in ("policy_loss", metric, "expert/sft_phi_loss", "mu"):
            values = [one["logs"][step][logged], two["logs"][step][logged]]
            assert values[1] == pytest.approx(values[0], rel=value_tol["rtol"], abs=value_tol["atol"]), (step, logged)
    assert [entry["mu"] for entry in one["logs"]] == pytest.approx([0.6, 0.4])
    if name != "ppo":  # the rollout loss reached the trainer: off-policy (step 2) it trains differently from ppo
        other = runs["1x4"]["mix_chord/reference-ppo"]["update"]
        assert (reference - other).abs().max() > 100 * (tol["atol"] + tol["rtol"] * reference.abs().max())


def test_without_the_process_factor_two_processes_differ(runs, float_tolerance):
    """The control: scaling by 1 / accumulation steps only makes the 2-process gradient twice the 1-process one."""
    key = CONTROL.replace(":", "/")
    reference, control = runs["1x4"][key]["update"], runs["control"][key]["update"]
    tol, _ = _tolerance(runs["1x4"][key], float_tolerance)
    bound = tol["atol"] + tol["rtol"] * reference.abs().max()
    assert (control - reference).abs().max() > 100 * bound
    first = runs["1x4"][key]["logs"][0]["policy_loss"]
    assert runs["control"][key]["logs"][0]["policy_loss"] == pytest.approx(2 * first, rel=1e-5)
