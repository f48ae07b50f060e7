"""A run that stops on an error keeps its work (`trl_ext.trainers.core.error_checkpoint`): the trainer saves
`checkpoint-<step>` before the error propagates, and a run resumed from it continues as if nothing had happened."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from safetensors.torch import load_file
from trainer_helpers import CPU, cpu_config, length_reward, logged, snapshot, toy_trainer
from transformers import TrainerCallback

from trl_ext import SAPOConfig, SAPOTrainer
from trl_ext.scripts import grpo
from trl_ext.toy import build_tokenizer, toy_expert_dataset
from trl_ext.trainers.core.error_checkpoint import ERROR_FILE
from trl_ext.trainers.sft.config import SFTConfig
from trl_ext.trainers.sft.trainer import SFTTrainer


class RaisesAtStep:
    """`length_reward`, raising on the reward pass of optimizer step `step` (one generation batch per step)."""

    __name__ = "length_reward"

    def __init__(self, step: int) -> None:
        self.step, self.calls = step, 0

    def __call__(self, completions, **kwargs):
        self.calls += 1
        if self.calls == self.step:
            raise RuntimeError(f"the reward server is down (step {self.step})")
        return length_reward(completions)


class Weights(TrainerCallback):
    """The policy's weights after each optimizer step."""

    def __init__(self) -> None:
        self.after: dict[int, dict[str, torch.Tensor]] = {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.after[state.global_step] = snapshot(model)


def _checkpoints(folder) -> list[str]:
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return sorted(name for name in names if name.startswith("checkpoint-"))


def _config(folder, **overrides):
    return cpu_config(SAPOConfig, str(folder), max_steps=8, **overrides)


def test_an_error_mid_run_leaves_a_checkpoint_that_resumes_where_it_stopped(tiny_model, tmp_path):
    weights = Weights()
    failing = toy_trainer(SAPOTrainer, _config(tmp_path / "run"), tiny_model, reward_funcs=RaisesAtStep(5))
    failing.add_callback(weights)
    with pytest.raises(RuntimeError, match=r"the reward server is down \(step 5\)") as error:
        failing.train()
    folder = str(tmp_path / "run" / "checkpoint-4")
    note = "\n".join(error.value.__notes__)
    assert "training stopped on this error after step 4 of 8" in note
    assert f"its state is saved in {folder}: resume with trainer.train(resume_from_checkpoint='{folder}')" in note
    assert _checkpoints(tmp_path / "run") == ["checkpoint-4"]  # save_strategy="no": only the error's checkpoint
    saved = set(os.listdir(folder))
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt", "trainer_state.json", "rng_state.pth"} <= saved
    with open(os.path.join(folder, ERROR_FILE)) as f:
        assert "RuntimeError: the reward server is down (step 5)" in f.read()
    stored = load_file(os.path.join(folder, "model.safetensors"))
    assert all(torch.equal(stored[name], value) for name, value in weights.after[4].items() if name in stored)
    assert set(weights.after) == {1, 2, 3, 4}  # step 5 never finished

    # The same run without the error, and the failed run resumed from its checkpoint, train the same steps 5-8.
    reference = toy_trainer(SAPOTrainer, _config(tmp_path / "reference"), tiny_model)
    reference_weights = Weights()
    reference.add_callback(reference_weights)
    reference.train()
    resumed = toy_trainer(SAPOTrainer, _config(tmp_path / "run"), tiny_model)
    resumed_weights = Weights()
    resumed.add_callback(resumed_weights)
    resumed.train(resume_from_checkpoint=folder)
    assert resumed.state.global_step == 8 and sorted(resumed_weights.after) == [5, 6, 7, 8]
    assert logged(resumed, "loss") == pytest.approx(logged(reference, "loss"), abs=1e-6)  # steps 1-4: the checkpoint's
    for name, value in reference_weights.after[8].items():
        torch.testing.assert_close(resumed_weights.after[8][name], value, rtol=1e-5, atol=1e-6)


def test_an_error_before_the_first_step_saves_nothing(tiny_model, tmp_path):
    trainer = toy_trainer(SAPOTrainer, _config(tmp_path), tiny_model, reward_funcs=RaisesAtStep(1))
    with pytest.raises(RuntimeError, match="the reward server is down") as error:
        trainer.train()
    assert not getattr(error.value, "__notes__", None)
    assert _checkpoints(tmp_path) == []


def test_the_periodic_checkpoint_of_that_step_is_kept(tiny_model, tmp_path):
    """An error right after `save_steps` wrote the step's checkpoint: that checkpoint is the one to resume from."""
    trainer = toy_trainer(
        SAPOTrainer, _config(tmp_path, save_strategy="steps", save_steps=2), tiny_model, reward_funcs=RaisesAtStep(5)
    )
    with pytest.raises(RuntimeError) as error:
        trainer.train()
    assert _checkpoints(tmp_path) == ["checkpoint-2", "checkpoint-4"]
    assert not os.path.exists(tmp_path / "checkpoint-4" / ERROR_FILE)  # the periodic save's, not rewritten
    assert f"its state is saved in {tmp_path / 'checkpoint-4'}" in "\n".join(error.value.__notes__)


class FailsAtStep(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.step:
            raise MemoryError("out of memory")


def test_every_family_saves_on_an_error_sft_too(random_tiny_model, tmp_path):
    """The mixin is every trl_ext trainer's (`TrainerAdapter`): SFT's keeps its work as the GRPO family's does."""
    settings = {"per_device_train_batch_size": 4, "max_steps": 4, "learning_rate": 1e-3}
    trainer = SFTTrainer(
        model=random_tiny_model,
        args=SFTConfig(**{**CPU, "output_dir": str(tmp_path), **settings}),
        train_dataset=toy_expert_dataset(16),
        processing_class=build_tokenizer(),
        callbacks=[FailsAtStep(3)],
    )
    with pytest.raises(MemoryError) as error:
        trainer.train()
    assert _checkpoints(tmp_path) == ["checkpoint-2"]
    assert "after step 2 of 4; its state is saved in" in "\n".join(error.value.__notes__)
    assert "optimizer.pt" in os.listdir(tmp_path / "checkpoint-2")


FLAKY_REWARD = """
from trl_ext.toy import toy_reward

calls = 0


def flaky(completions, **kwargs):
    global calls
    calls += 1
    if calls == 5:
        raise RuntimeError("the reward server is down")
    return toy_reward(completions, **kwargs)
"""


def test_a_script_stopped_by_an_error_resumes_with_resume_true(toy_cache, tmp_path, monkeypatch, capsys):
    (tmp_path / "flaky_rewards.py").write_text(FLAKY_REWARD)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "flaky_rewards", raising=False)
    out = str(tmp_path / "out")
    argv = ["--output_dir", out, "--max_steps", "6", "--per_device_train_batch_size", "8", "--num_generations", "4"]
    argv += ["--logging_steps", "1", "--save_strategy", "no"]
    with pytest.raises(RuntimeError, match="the reward server is down") as error:
        grpo.main("sapo", [*argv, "--reward_funcs", "flaky_rewards.flaky"])
    assert "resume with" in "\n".join(error.value.__notes__)
    assert os.path.isfile(os.path.join(out, "checkpoint-4", "trainer_state.json"))
    capsys.readouterr()
    trainer = grpo.main("sapo", [*argv, "--resume_from_checkpoint", "true"])
    printed = " ".join(capsys.readouterr().out.split())
    assert f"Resuming from {out}/checkpoint-4 (step 4 of 6)" in printed
    assert "Trained sapo for 2 steps (steps 5-6, resumed from step 4)" in printed
    assert trainer.state.global_step == 6


@pytest.mark.slow
def test_an_asynchronous_run_keeps_its_rollout_position_too(toy_cache, tmp_path, monkeypatch, capsys):
    """The reward raises in the rollout worker's process: the trainer saves its checkpoint with the worker's
    dataset position (`trl_ext_rollout_state.json`), and the resumed run goes on from it."""
    (tmp_path / "flaky_rewards.py").write_text(FLAKY_REWARD.replace("calls == 5", "calls == 40"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the worker's spawned process imports the reward too
    out = str(tmp_path / "out")
    argv = ["--asynchronous", "true", "--output_dir", out, "--logging_steps", "1", "--save_strategy", "no"]
    with pytest.raises(RuntimeError, match="the reward server is down") as error:
        grpo.main("sapo", [*argv, "--max_steps", "40", "--reward_funcs", "flaky_rewards.flaky"])
    (folder,) = _checkpoints(out)
    assert f"its state is saved in {out}/{folder}" in "\n".join(error.value.__notes__)
    assert {"trl_ext_rollout_state.json", ERROR_FILE, "optimizer.pt"} <= set(os.listdir(os.path.join(out, folder)))
    step = int(folder.split("-")[1])
    capsys.readouterr()
    trainer = grpo.main("sapo", [*argv, "--max_steps", str(step + 2), "--resume_from_checkpoint", "true"])
    assert trainer.state.global_step == step + 2
    assert f"resumed from step {step}" in " ".join(capsys.readouterr().out.split())
