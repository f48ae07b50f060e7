"""The asynchronous trainer's optimizer window over processes (docs/design.md §2.6): one optimizer step on the same 8
samples gives the same update on 1 process and on 2 (torchrun, gloo, CPU), the same samples per step either way.

TRL's `FixedCountBatcher` packs `per_device_train_batch_size × num_processes` samples into one prefix-tree row per
process (a group's samples stay together; with two groups of four and two processes each row holds one group) and
accelerate's dispatcher sends row i to process i. trl_ext normalizes every micro-batch's loss by the window's counts
(summed over the micro-batches and all-reduced over the processes) and scales it by the number of processes (DDP
averages gradients), so with SGD at learning rate 1 the update is −∇ of the window's loss whatever the split:
token-mean, seq-mean-token-mean and seq-mean-token-sum; 1 process × 1 micro-batch of 8 against 2 × 1 of 4, and
1 × 2 of 4 against 2 × 2 of 2 (`/ga2`); M2PO's second-moment selection and verl's truncated, batch-normalized
importance weights (`rollout_is="token"`), both computed over the whole window (all processes) before its first
micro-batch; and groups of 5 and 3 samples (`/uneven`: the processes hold different numbers of samples). A
token-level estimator (REINFORCE++, whitened over the window's tokens) and critic PPO (GAE from the critic's values
over the window, and the critic's own optimizer step, its gradient averaged over the processes) run over the whole
window too: their updates, the critic's included, are the same on 1 and 2 processes. So is MIX's: each process's
row gets its share of the window's demonstrations (the same 8 drawn either way) and each part of the mixing loss is
normalized over its rows of the whole window; on-policy distillation's (the teacher forwarded on each process's
row, the estimator over the window); and GiGPO's on multi-turn episodes (the per-turn estimator over the window's
model turns, the processes' turn tables of different widths; with `turns_as_samples` each turn a sample of the
window's count).

The comparison can fail: a control that normalizes over each process's own window (its counts not all-reduced)
gives another update on 2 processes, and the three aggregations give three different updates.

Processes may hold different numbers of samples (`/uneven`: groups of 5 and 3), and AReaL's log-linear proximal
policy reads the trainer's version on every process (`decoupled_ppo/loglinear`): both were defects found here (the
window's rows taken at the wrong offset of the gathered batch; TRL's version counted on the main process only).
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

pytestmark = pytest.mark.slow  # two-process runs of one family (the slow tier: pytest -m slow)

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "async_run.py")
MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
SAME = [*MODES, "token-mean/ga2", "seq-mean-token-sum/ga2", "m2po", "m2po/ga2", "rollout_is", "rollout_is/ga2"]
SAME += ["token-mean/uneven", "m2po/uneven", "rollout_is/uneven", "decoupled_ppo/loglinear"]
SAME += ["reinforceplusplus", "reinforceplusplus/uneven", "critic", "critic/ga2", "mix", "mix/ga2"]
SAME += ["distill", "distill/uneven", "gigpo", "gigpo/uneven", "gigpo/turns"]
CONFIGS = [*SAME, "token-mean/local"]


def run_script(out: str, model: str, processes: int) -> dict:
    """The script's results for every configuration of `CONFIGS` on `processes` processes (torchrun, gloo)."""
    launcher = [sys.executable]
    if processes > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    command = [*launcher, SCRIPT, out, "--model", model, "--configs", ",".join(CONFIGS)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # a timeout: TRL's queue dataset polls an empty queue forever
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return torch.load(out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    from trl_ext.toy import build_model, build_tokenizer

    tmp = tmp_path_factory.mktemp("async_window")
    model, tokenizer = str(tmp / "model"), build_tokenizer()
    build_model(tokenizer, seed=0).save_pretrained(model)  # untrained: only the updates are compared
    tokenizer.save_pretrained(model)
    with ThreadPoolExecutor(2) as pool:  # the one-process run beside the two-process one
        futures = {n: pool.submit(run_script, str(tmp / f"{n}.pt"), model, n) for n in (1, 2)}
        return {n: future.result() for n, future in futures.items()}


def flat(update: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([update[name].flatten() for name in sorted(update)])


def assert_same_update(one: dict, two: dict, key: str) -> None:
    assert one["update"].keys() == two["update"].keys()
    for name, reference in one["update"].items():
        torch.testing.assert_close(
            two["update"][name], reference, rtol=1e-4, atol=1e-6, msg=lambda m, at=f"{key} {name}": f"{at}: {m}"
        )
    cosine = torch.nn.functional.cosine_similarity(flat(one["update"]), flat(two["update"]), dim=0)
    assert cosine >= 0.9999, (key, float(cosine))


@pytest.mark.parametrize("key", SAME)
def test_two_processes_give_the_one_process_update(runs, key):
    one, two = runs[1][key], runs[2][key]
    # distillation's advantages are kl_coef·(log π_teacher − log μ), with μ the teacher's own log-probs plus noise
    assert flat(one["update"]).norm() > (0.05 if key.startswith("distill") else 0.5)
    assert_same_update(one, two, key)
    # the window's loss, a share summed over micro-batches and processes, is logged alike
    assert two["logs"]["policy_loss"] == pytest.approx(one["logs"]["policy_loss"], rel=1e-5, abs=1e-7)
    # TRL's split, not forced: the samples of each micro-batch, per process
    accumulation = 2 if key.endswith("/ga2") else 1
    assert one["rows"] == [[8 // accumulation] * accumulation]
    split = [[3], [5]] if key.endswith("/uneven") else [[4 // accumulation] * accumulation] * 2
    assert sorted(two["rows"]) == split
    if key.startswith("m2po"):  # the selection acts, over the window: the same fraction on both splits
        assert 0 < one["logs"]["m2po/masked_fraction"] < 1
        assert two["logs"]["m2po/masked_fraction"] == pytest.approx(one["logs"]["m2po/masked_fraction"])
    if key.startswith("critic"):  # the critic's own step: its gradient averaged over the processes by hand
        assert flat(one["critic_update"]).norm() > 0 and flat(one["critic_gradient"]).norm() > 0
        for name, reference in one["critic_gradient"].items():
            torch.testing.assert_close(two["critic_gradient"][name], reference, rtol=1e-4, atol=1e-6)
    if key.startswith("rollout_is"):  # weights truncated at 2 and normalized by their mean over the window
        logs = one["logs"]
        assert logs["rollout_corr/rollout_is_ratio_fraction_high"] > 0
        assert abs(logs["rollout_corr/rollout_is_batch_norm_factor"] - 1) > 0.05
        factor = two["logs"]["rollout_corr/rollout_is_batch_norm_factor"]
        assert factor == pytest.approx(logs["rollout_corr/rollout_is_batch_norm_factor"], rel=1e-5)


def test_the_comparison_can_fail(runs):
    one = runs[1]
    # normalized over each process's own window: on one process the plain token mean, on two another gradient
    assert_same_update(one["token-mean"], one["token-mean/local"], "local on one process")
    local = flat(runs[2]["token-mean/local"]["update"]) - flat(one["token-mean"]["update"])
    window = flat(runs[2]["token-mean"]["update"]) - flat(one["token-mean"]["update"])
    assert local.abs().max() > 1000 * window.abs().max() + 1e-4
    updates = [flat(one[mode]["update"]) for mode in MODES]
    for i in range(len(MODES)):
        for j in range(i + 1, len(MODES)):
            assert not torch.allclose(updates[i], updates[j], rtol=1e-3, atol=1e-5), (MODES[i], MODES[j])
