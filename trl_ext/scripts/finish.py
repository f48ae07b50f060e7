"""The end of a training script's run: where a resumed run starts, the training, and the closing line.

* `train_and_finish`: the summary, the training (resumed where asked), the saved model, the closing line, and the
  teardown on every rank together.
* `resume_point`: `--resume_from_checkpoint DIR`, or `True` for the last `checkpoint-<step>` folder of `output_dir`
  (as `transformers.Trainer` resolves it), checked before the model loads; the run says where it resumes from
  (`Resuming from outputs/sapo-tiny/checkpoint-4 (step 4 of 10)`).
* `closing_line`: the steps this run trained (a resumed run's own, not the total), how the main metric moved (the
  reward for the algorithms that generate, the loss for DPO / SFT: first logged value -> last), where the model was
  saved and the training curves drawn (`curves.py`), in one line:
  `Trained sapo for 6 steps (steps 5-10, resumed from step 4) on 1 process(es): reward 0.10 -> 0.98 over steps
  5-10; model saved to outputs/sapo-tiny; curves in outputs/sapo-tiny/training_curves.png`. An asynchronous run's
  line adds the trained staleness, the samples dropped and the share of time spent waiting for rollouts
  (`asynchronous_clause`).
  A resumed run's curves show the checkpoint's logs too, the resume marked; its metric moves over its own steps.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.trainer_utils import get_last_checkpoint

from ..algorithms import get_algorithm
from ._common import UsageError
from .curves import CURVES_FILE, plot_training_curves, series
from .noise import noise_notes, quiet_known_warnings

TRAINER_STATE_FILE = "trainer_state.json"  # transformers' TRAINER_STATE_NAME: every checkpoint of a Trainer has it
_TRUE, _FALSE = ("true", "yes"), ("false", "no", "")


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a run resumes from, the optimizer step it saved, and the run's planned length (None when
    unknown)."""

    checkpoint: str
    step: int
    max_steps: int | None

    def line(self) -> str:
        """`Resuming from <checkpoint> (step 4 of 10)`."""
        of = f" of {self.max_steps}" if self.max_steps else ""
        return f"Resuming from {self.checkpoint} (step {self.step}{of})"


def resolve_checkpoint(value: str | bool | None, output_dir: str) -> str | None:
    """The checkpoint folder `--resume_from_checkpoint value` names: None for no value or false; for true (`True`,
    as the flag's text or a bool) the last `checkpoint-<step>` folder of `output_dir`; else `value`, which must be a
    checkpoint folder (it has `trainer_state.json`). Anything else is a `UsageError` naming the flag."""
    if value is None or value is False or (isinstance(value, str) and value.strip().lower() in _FALSE):
        return None
    allowed = "give a checkpoint folder (<output_dir>/checkpoint-<step>) or True (the last one in --output_dir)"
    if value is True or (isinstance(value, str) and value.strip().lower() in _TRUE):
        last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
        if last is None:
            raise UsageError(
                f"--resume_from_checkpoint {value}: --output_dir {output_dir} has no checkpoint-<step> folder to "
                f"resume from; {allowed}"
            )
        return last
    if not os.path.isdir(value):
        raise UsageError(f"--resume_from_checkpoint {value}: no such folder; {allowed}")
    if not os.path.isfile(os.path.join(value, TRAINER_STATE_FILE)):
        raise UsageError(
            f"--resume_from_checkpoint {value}: not a training checkpoint (no {TRAINER_STATE_FILE}); {allowed}"
        )
    return value


def resume_point(training_args) -> ResumePoint | None:
    """Resolve `training_args.resume_from_checkpoint` (`resolve_checkpoint`) in place, to the folder the trainer
    loads, and read the step it saved; None when the run does not resume. Call it before the model loads: a wrong
    value is a `UsageError`."""
    checkpoint = resolve_checkpoint(training_args.resume_from_checkpoint, training_args.output_dir)
    training_args.resume_from_checkpoint = checkpoint
    if checkpoint is None:
        return None
    with open(os.path.join(checkpoint, TRAINER_STATE_FILE)) as f:
        state = json.load(f)
    max_steps = training_args.max_steps if training_args.max_steps > 0 else state.get("max_steps")
    return ResumePoint(checkpoint, int(state.get("global_step", 0)), max_steps)


def number(value: float) -> str:
    """A metric for the closing line: two decimals in [0.01, 1000), three significant digits otherwise."""
    return f"{value:.2f}" if 0.01 <= abs(value) < 1000 else f"{value:.3g}"


def main_metric(log_history: Sequence[dict[str, Any]], schema: str) -> str:
    """The metric the closing line and the first panel of the curves follow: the mean `reward` for a family that
    generates (schema `experience`) when it was logged, else the training `loss`."""
    return "reward" if schema == "experience" and series(log_history, "reward") else "loss"


def loss_metrics(trainer) -> list[str]:
    """The algorithm's loss metrics: its policy loss's own (`sapo_loss`, `pg_loss`, `dpo_loss`, MIX's parts), else
    the trainer's `policy_loss`; and the critic's `vf_loss`."""
    from ..components import SHARE

    metrics = getattr(getattr(trainer, "policy_loss_fn", None), "metrics", {})
    names = [name for name, kind in metrics.items() if kind == SHARE and name.endswith("loss") and name != "loss"]
    return [*(names or ["policy_loss"]), "vf_loss"]


def progress(log_history: Sequence[dict[str, Any]], key: str, since_step: int = 0, logging_steps=None) -> str:
    """`reward 0.10 -> 0.98 over steps 5-200` (the first and last values logged after `since_step`), `reward 0.38
    at step 1`, or `no reward logged` (with the logging interval, the likely reason)."""
    points = series(log_history, key, since_step)
    if not points:
        return f"no {key} logged" + (f" (logging_steps {logging_steps:g})" if logging_steps else "")
    (first_step, first), (last_step, last) = points[0], points[-1]
    if len(points) == 1:
        return f"{key} {number(first)} at step {first_step}"
    return f"{key} {number(first)} -> {number(last)} over steps {first_step}-{last_step}"


def steps_trained(name: str, global_step: int, resumed: ResumePoint | None) -> str:
    """`Trained sapo for 6 steps (steps 5-10, resumed from step 4)`: the steps this run trained."""
    start = resumed.step if resumed is not None else 0
    trained = global_step - start
    text = f"Trained {name} for {trained} steps"
    if resumed is not None:
        span = {0: "", 1: f"step {global_step}, "}.get(trained, f"steps {start + 1}-{global_step}, ")
        text += f" ({span}resumed from step {start})"
    return text


def save_curves(trainer, name: str, primary: str, resumed: ResumePoint | None) -> str:
    """Draw the curves into `<output_dir>/training_curves.png` (call it on the main process); what the closing line
    says about them."""
    path = os.path.join(trainer.args.output_dir, CURVES_FILE)
    try:
        drawn = plot_training_curves(
            trainer.state.log_history,
            path,
            f"trl_ext {name}: {os.path.basename(os.path.normpath(trainer.args.output_dir))}",
            primary,
            loss_metrics(trainer),
            resumed.step if resumed is not None else None,
        )
    except ImportError:
        return "no training curves: matplotlib is missing (pip install matplotlib)"
    except OSError as error:
        return f"no training curves ({path}: {error.strerror or error})"
    return f"curves in {path}" if drawn else "no training curves (nothing logged)"


def asynchronous_clause(history: Sequence[dict[str, Any]]) -> str:
    """An asynchronous run's part of the closing line (empty for the others): the trained staleness (mean over the
    logged steps, max), the samples dropped (too stale when they left the queue; uniform groups of dynamic sampling)
    and the share of the training time the trainer waited for rollouts (`perf/rollout_wait_s` over `perf/step_s`)."""
    means = [entry["trained_staleness_mean"] for entry in history if "trained_staleness_mean" in entry]
    if not means:
        return ""
    worst = max(entry.get("trained_staleness_max", 0.0) for entry in history)
    stale = sum(entry.get("sample/dropped_stale_total", 0.0) for entry in history)
    uniform = sum(entry.get("rollout/uniform_groups_total", 0.0) for entry in history)
    step_s = sum(entry.get("perf/step_s", 0.0) for entry in history)
    wait_s = sum(entry.get("perf/rollout_wait_s", 0.0) for entry in history)
    text = f"; trained staleness mean {sum(means) / len(means):.2f} / max {worst:g}, {stale:g} stale samples dropped"
    if uniform:
        text += f", {uniform:g} uniform groups dropped"
    if step_s > 0:
        text += f", {100 * wait_s / step_s:.0f}% of the training time waiting for rollouts"
    return text


def closing_line(trainer, name: str, resumed: ResumePoint | None, output_dir: str) -> str:
    """The run's last line for algorithm `name` (see the module docstring); on the main process it also draws the
    training curves."""
    history = trainer.state.log_history
    primary = main_metric(history, get_algorithm(name).family.schema)
    since = resumed.step if resumed is not None else 0
    line = (
        f"{steps_trained(name, trainer.state.global_step, resumed)} on {trainer.accelerator.num_processes} "
        f"process(es): {progress(history, primary, since, trainer.args.logging_steps)}{asynchronous_clause(history)}; "
        f"model saved to {output_dir}"
    )
    if trainer.is_world_process_zero():
        line += f"; {save_curves(trainer, name, primary, resumed)}"
    return line


def overwrite_notice(output_dir: str, resumed: ResumePoint | None) -> list[str]:
    """A line saying that this run writes over an earlier run's output (its saved model or checkpoints in
    `output_dir`), when it does not resume from it; nothing otherwise."""
    if resumed is not None or not os.path.isdir(output_dir):
        return []
    found = sorted(
        name
        for name in os.listdir(output_dir)
        if name in ("model.safetensors", "adapter_model.safetensors", TRAINER_STATE_FILE)
        or name.startswith("checkpoint-")
    )
    if not found:
        return []
    shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
    return [
        f"Note: {output_dir} holds an earlier run ({shown}); this run overwrites it. Pass another --output_dir to keep "
        "it, or --resume_from_checkpoint true to continue it."
    ]


def train_and_finish(trainer, name: str, training_args, script_args, summary: str | None = None):
    """Print the summary (with the notes on expected noise, `noise.py`), train (resuming if asked: `resume_point`),
    save, print the closing line (steps, main metric, model, curves), push if asked, and tear down on every rank
    together. The warnings trl_ext knows to be harmless are silenced around the training (`quiet_known_warnings`)."""
    resumed = resume_point(training_args)
    lines = ([summary] if summary else []) + noise_notes(trainer) + ([resumed.line()] if resumed else [])
    lines += overwrite_notice(training_args.output_dir, resumed)
    if lines:
        trainer.accelerator.print("\n".join(lines))
    with quiet_known_warnings():
        trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.accelerator.print(closing_line(trainer, name, resumed, training_args.output_dir))
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=script_args.dataset_name)
    # Every rank reaches the teardown together: a gloo process group torn down while a peer has already exited can
    # block in its destructor (seen once in 2-process CPU runs).
    trainer.accelerator.wait_for_everyone()
    gloo = torch.distributed.is_initialized() and torch.distributed.get_backend() == "gloo"
    if hasattr(trainer, "end"):  # transformers >= 5.18: finish the trackers, destroy the process group
        trainer.end()
    if gloo:
        # torch's gloo backend can deadlock when the caller drops the trainer: the DDP reducer's last reference to
        # the process group joins its worker threads while holding the GIL, and a worker still freeing the last
        # collective's work waits for the GIL to release a Python tensor (native stacks of a 2-process CPU run that
        # hung at exit: ~ProcessGroupGloo -> thread::join / AsyncBarrierWork -> decref_pyobject). A moment with
        # the GIL released lets the workers finish first.
        time.sleep(0.2)
    return trainer
