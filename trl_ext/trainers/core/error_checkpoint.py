"""A run that stops on an error keeps its work: the trainer saves a checkpoint before the error propagates.

HF's `Trainer` saves only at its `save_steps`: a reward function, a dataset row or an out-of-memory error that
stops a run between two saves loses every step since the last one (all of them with `save_strategy="no"`). Every
trl_ext trainer's `train` (`SavesOnError`) therefore catches an error raised after at least one optimizer step,
saves the state the run has reached as HF saves a checkpoint, `output_dir/checkpoint-<step>` (weights, optimizer,
scheduler, RNG states, the trainer state and trl_ext's own state, the callbacks' `on_save` included), writes the
error's traceback beside it (`ERROR_FILE`), and re-raises the error with a note naming the folder and how to resume:
`trainer.train(resume_from_checkpoint=folder)`, or `--resume_from_checkpoint folder` (or `true`, the last
checkpoint) on the command line. The step that failed is not in the checkpoint: its micro-batches, generation or
gradients are lost with it, and the resumed run trains that step again from the same data.

What is saved and when:

* the checkpoint holds the state after the last completed optimizer step, `state.global_step`, the random number
  generators' included (`StepEndRNG` keeps them at each step's end: the failed step drew from them since), so the
  checkpoint is the one `save_steps` would have written at that step and a resumed run trains exactly the steps the
  uninterrupted run would have; an error before the
  first step saves nothing (there is nothing to lose), and an error at a step whose checkpoint exists (the periodic
  save just wrote it, or the run resumed from it) keeps that one;
* only a single-process run saves on an error. In a multi-process run a checkpoint is a collective operation (HF
  sums the FLOs across processes; DeepSpeed and FSDP gather the sharded state), and the other processes, blocked in
  their own step, would never join it: the run would hang instead of stopping. There the note names the last
  periodic checkpoint, and `save_steps` bounds the work an error can lose;
* `KeyboardInterrupt` is not an error of the run: an interrupted run stops at once, as HF's does.
"""

from __future__ import annotations

import os
import random
import sys
import traceback
from typing import Any

import numpy as np
import torch
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

ERROR_FILE = "trl_ext_error.txt"
"""The traceback of the error that stopped the run, in the checkpoint saved on it."""


def resume_hint(folder: str) -> str:
    return f"trainer.train(resume_from_checkpoint={folder!r}) or --resume_from_checkpoint {folder}"


class StepEndRNG(TrainerCallback):
    """The random number generators' states at the end of the last optimizer step (Python's, NumPy's, torch's on
    the CPU and on every CUDA device: the ones HF's checkpoint saves), and `restore` to put them back."""

    def __init__(self) -> None:
        self.states: dict[str, Any] | None = None

    def on_step_end(self, args, state, control, **kwargs):
        self.states = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.get_rng_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self.states["cuda"] = torch.cuda.get_rng_state_all()

    def restore(self) -> None:
        if self.states is None:
            return
        random.setstate(self.states["python"])
        np.random.set_state(self.states["numpy"])
        torch.set_rng_state(self.states["cpu"])
        if "cuda" in self.states:
            torch.cuda.set_rng_state_all(self.states["cuda"])


class SavesOnError:
    """Mixin for a trl_ext trainer (above the TRL trainer in its bases): `train` saves a checkpoint when an error
    stops it after training has begun (see the module docstring). The trainer supplies `save_checkpoint_now`."""

    def train(self, *args, **kwargs):
        if not any(isinstance(c, StepEndRNG) for c in self.callback_handler.callbacks):
            self.add_callback(StepEndRNG())
        try:
            return super().train(*args, **kwargs)
        except Exception as error:
            note = self._keep_the_work(error)
            if note:
                error.add_note(note)
            raise

    def _keep_the_work(self, error: Exception) -> str | None:
        """Save the run's state on `error` where it can be saved; the note to add to the error (None: nothing
        trained, nothing to say)."""
        step = self.state.global_step
        if step == 0:
            return None
        output_dir = self.args.output_dir
        folder = os.path.join(output_dir, f"{PREFIX_CHECKPOINT_DIR}-{step}")
        stopped = f"trl_ext: training stopped on this error after step {step} of {self.state.max_steps}"
        if self.accelerator.num_processes > 1:
            last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
            kept = f"the last checkpoint is {last}: resume with {resume_hint(last)}" if last else "no checkpoint"
            return (
                f"{stopped}; a multi-process run saves no checkpoint on an error (the other processes cannot join "
                f"the save), {kept}. save_steps bounds what an error loses."
            )
        if not os.path.isdir(folder):
            print(f"trl_ext: an error stopped the run after step {step}; saving its state to {folder}", file=sys.stderr)
            next(c for c in self.callback_handler.callbacks if isinstance(c, StepEndRNG)).restore()
            self.save_checkpoint_now()
            with open(os.path.join(folder, ERROR_FILE), "w", encoding="utf-8") as f:
                f.write("".join(traceback.format_exception(error)))
        return f"{stopped}; its state is saved in {folder}: resume with {resume_hint(folder)}"
