"""`trl-ext train --accelerate_config ...`: a usage error is trl_ext's one line, never followed by the launcher's
traceback (accelerate's `CalledProcessError`, torch elastic's `ChildFailedError`); a real error in the processes still
shows their traceback."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

import pytest
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from trl_ext.cli import failed_run_status, main

LAUNCHER_NOISE = ("Traceback", "CalledProcessError", "ChildFailedError", "FAILED", "failed (exitcode", "closing signal")


def _trl_ext(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    script = shutil.which("trl-ext", path=os.path.dirname(sys.executable))
    command = [script] if script else [sys.executable, "-m", "trl_ext.cli"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([*command, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def _failure(rank: int, exitcode: int) -> ProcessFailure:
    return ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=exitcode, error_file="<N/A>")


def test_a_misspelt_flag_is_one_line():
    """The subprocess, as a user runs it: trl_ext's line on stderr, nothing else, exit status 2."""
    run = _trl_ext("train", "--algorithm", "sapo", "--accelerate_config", "multi_gpu", "--num_processes", "1",
                   "--bad_flag", "1")  # fmt: skip
    assert run.returncode == 2, run.stderr[-3000:]
    assert run.stderr.count("\n") == 1 and not any(noise in run.stderr for noise in LAUNCHER_NOISE)
    assert "unrecognized arguments: --bad_flag (neither a flag of the sapo script nor of accelerate" in run.stderr


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--model_name_or_path", "no/such/model"], "--model_name_or_path no/such/model: no such model directory"),
        (["--resume_from_checkpoint", "no_checkpoint"], "--resume_from_checkpoint no_checkpoint: no such folder"),
    ],
)
def test_the_model_and_checkpoint_are_checked_before_launching(flags, error, tmp_path, monkeypatch, capfd):
    """What the scripts check before anything loads is checked once, in `trl-ext train`'s own process: one line, and
    no process started (accelerate's launcher is never called)."""
    monkeypatch.chdir(tmp_path)

    def launched(args):
        raise AssertionError("accelerate launch was called")

    monkeypatch.setattr("accelerate.commands.launch.launch_command", launched)
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--algorithm", "sapo", "--accelerate_config", "multi_gpu", "--num_processes", "2", *flags])
    err = capfd.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith("trl-ext train: error: " + error)


def test_processes_that_exit_with_a_usage_error_end_the_run_quietly(monkeypatch, capfd, caplog):
    """The processes printed the usage error's line (exit status 2; the others stopped by the launcher's SIGTERM):
    `trl-ext train` adds nothing, neither torch elastic's traceback nor its failure logs, and exits with status 2."""
    elastic = logging.getLogger("torch.distributed.elastic.multiprocessing.api")

    def launch_command(args):
        elastic.error("failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s", 2, 0, 1000, sys.executable)
        elastic.warning("Sending process %s closing signal %s", 1001, "SIGTERM")
        elastic.warning("another warning")
        raise ChildFailedError("trl_ext.cli", {0: _failure(0, 2), 1: _failure(1, -15)})

    monkeypatch.setattr("accelerate.commands.launch.launch_command", launch_command)
    with caplog.at_level(logging.INFO), pytest.raises(SystemExit) as exit_info:
        main(["train", "--algorithm", "sapo", "--accelerate_config", "multi_gpu", "--num_processes", "2"])
    assert exit_info.value.code == 2 and capfd.readouterr().err == ""
    assert [record.getMessage() for record in caplog.records if record.name == elastic.name] == ["another warning"]
    assert not elastic.filters  # only while launching


def test_a_failed_run_keeps_the_launchers_summary_without_its_traceback(capsys):
    """A real error: the processes printed their tracebacks; `trl-ext train` prints torch elastic's summary of the
    failed processes (rank, exit status, signal) and exits with the first failure's status."""
    error = ChildFailedError("trl_ext.cli", {0: _failure(0, 1), 1: _failure(1, -15)})
    assert failed_run_status(error) == 1
    err = capsys.readouterr().err
    assert "trl_ext.cli FAILED" in err and "exitcode  : 1" in err and "SIGTERM" in err and "Traceback" not in err
    assert failed_run_status(ChildFailedError("trl_ext.cli", {0: _failure(0, -9)})) == 1  # killed: status 1
    assert "SIGKILL" in capsys.readouterr().err
    assert failed_run_status(ChildFailedError("trl_ext.cli", {0: _failure(0, 3)})) == 3
    assert failed_run_status(RuntimeError("not the launcher's")) is None


@pytest.mark.slow
def test_a_usage_error_in_the_processes_is_their_line_only(tmp_path):
    """A usage error that only the processes find (the dataset is loaded there) under the launcher: their line, then
    nothing; a real error still shows the process's traceback."""
    missing = tmp_path / "missing"
    run = _trl_ext("train", "--algorithm", "sapo", "--accelerate_config", "multi_gpu", "--num_processes", "1",
                   "--dataset_name", str(missing), cwd=str(tmp_path))  # fmt: skip
    assert run.returncode == 2, run.stderr[-3000:]
    assert f"trl-ext train: error: --dataset_name {missing}: no such file or directory" in run.stderr
    assert not any(noise in run.stderr for noise in LAUNCHER_NOISE), run.stderr[-3000:]
    (tmp_path / "boom.py").write_text("def reward(completions, **kwargs):\n    raise RuntimeError('boom')\n")
    run = _trl_ext("train", "--algorithm", "sapo", "--accelerate_config", "multi_gpu", "--num_processes", "1",
                   "--reward_funcs", "boom.reward", "--output_dir", str(tmp_path / "out"), "--max_steps", "1",
                   "--per_device_train_batch_size", "8", "--num_generations", "4", "--save_strategy", "no",
                   cwd=str(tmp_path))  # fmt: skip
    assert run.returncode == 1 and "RuntimeError: boom" in run.stderr and "Traceback" in run.stderr
    assert "trl_ext.cli FAILED" in run.stderr and "raise ChildFailedError" not in run.stderr  # no launcher frames
