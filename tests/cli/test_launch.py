"""`accelerate launch --num_processes 2` without `--multi_gpu` starts one process: the scripts warn, naming the flag."""

from __future__ import annotations

import pytest

from trl_ext.scripts.grpo import main
from trl_ext.scripts.launch import ONE_PROCESS_OF_SEVERAL, check_launch

SIMPLE_LAUNCHER = {"ACCELERATE_DYNAMO_BACKEND": "NO", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
"""What accelerate's simple launcher exports for `--num_processes 2` without `--multi_gpu` (and no WORLD_SIZE)."""


def test_one_process_started_of_several_asked_is_a_warning():
    with pytest.warns(UserWarning, match=r"--num_processes.* started one.*--multi_gpu"):
        assert check_launch(SIMPLE_LAUNCHER) == ONE_PROCESS_OF_SEVERAL


@pytest.mark.parametrize(
    "environ",
    [
        {},  # python script.py
        {"ACCELERATE_DYNAMO_BACKEND": "NO"},  # accelerate launch of one process
        {**SIMPLE_LAUNCHER, "WORLD_SIZE": "2", "RANK": "0"},  # --multi_gpu: torchrun's processes
        {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},  # not accelerate's launcher
    ],
)
def test_other_launches_are_quiet(environ, recwarn):
    assert check_launch(environ) is None and not recwarn.list


def test_the_script_warns_before_training(toy_cache, tmp_path, monkeypatch):
    for name, value in SIMPLE_LAUNCHER.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    argv = ["--output_dir", str(tmp_path), "--max_steps", "1", "--per_device_train_batch_size", "8"]
    argv += ["--num_generations", "4", "--save_strategy", "no"]
    with pytest.warns(UserWarning, match=r"--multi_gpu"):
        trainer = main("sapo", argv)
    assert trainer.accelerator.num_processes == 1 and trainer.state.global_step == 1
