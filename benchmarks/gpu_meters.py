"""What `gpu_report.py` measures in each run of a trainer: the wall time of every optimizer step (CUDA synchronized at
both ends), the peak CUDA memory over the measured steps, the tokens the loss ran on and, for the rows broken down
into parts, the time of each part of the step.

Each meter hooks a trainer from outside (a `TrainerCallback`, or a wrapped method of that one instance), so TRL's and
trl_ext's trainers are measured by the same code and neither is changed.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import transformers


class StepMeter(transformers.TrainerCallback):
    """Wall time of each optimizer step after `warmup` (CUDA synchronized) and the peak CUDA memory over them."""

    def __init__(self, warmup: int, cuda: bool) -> None:
        self.warmup, self.cuda = warmup, cuda
        self.times: list[float] = []
        self.peak = 0.0
        self.measuring = False

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def on_step_begin(self, args, state, control, **kwargs):
        self._sync()
        self.measuring = state.global_step >= self.warmup
        if self.measuring and self.cuda and state.global_step == self.warmup:
            torch.cuda.reset_peak_memory_stats()
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self._sync()
        if self.measuring:
            self.times.append(time.perf_counter() - self.start)
            if self.cuda:
                self.peak = torch.cuda.max_memory_allocated() / 2**30


PARTS = {  # a part of the step: the trainer methods whose time is its own (a call's nested timed calls excluded)
    "generation": ("_generate_and_score_completions",),
    "critic": ("_old_values", "_add_trainer_terms", "_step_critic"),
}


class PartMeter:
    """The time of each part (`PARTS`) in every measured step, and the policy's: the rest of the step."""

    def __init__(self, trainer: Any, meter: StepMeter) -> None:
        self.meter = meter
        self.per_step: list[dict[str, float]] = []
        self.current = dict.fromkeys(PARTS, 0.0)
        self.nested: list[float] = []  # per open timed call: the time of the timed calls inside it
        for part, methods in PARTS.items():
            for name in methods:
                if hasattr(trainer, name):
                    setattr(trainer, name, self._timed(part, getattr(trainer, name)))
        trainer.add_callback(self)

    def _timed(self, part: str, method):
        def timed(*args, **kwargs):
            self.meter._sync()
            start = time.perf_counter()
            self.nested.append(0.0)
            try:
                return method(*args, **kwargs)
            finally:
                self.meter._sync()
                total = time.perf_counter() - start
                inside = self.nested.pop()
                if self.nested:
                    self.nested[-1] += total
                if self.meter.measuring:
                    self.current[part] += total - inside

        return timed

    # the callback's hooks: the meter's callback runs first (it was added first), so its step time is there
    def on_step_end(self, args, state, control, **kwargs):
        if self.meter.measuring:
            parts = dict(self.current)
            parts["policy"] = self.meter.times[-1] - sum(parts.values())
            self.per_step.append(parts)
        self.current = dict.fromkeys(PARTS, 0.0)

    def __getattr__(self, name: str):  # every other TrainerCallback hook: nothing
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)


def count_tokens(trainer: Any, meter: StepMeter) -> list[torch.Tensor]:
    """Wrap `compute_loss` to add up the tokens (attention mask) of every measured micro-batch."""
    counted: list[torch.Tensor] = []
    compute_loss = trainer.compute_loss

    def counting(model, inputs, *args, **kwargs):
        if meter.measuring and model.training:
            if "attention_mask" in inputs:  # DPO: chosen and rejected rows
                counted.append(inputs["attention_mask"].sum())
            else:
                counted.append(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum())
        return compute_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = counting
    return counted
