"""The training curves of a run, drawn from `trainer.state.log_history` into a PNG at the end of training
(`<output_dir>/training_curves.png`): the reward (the loss for DPO / SFT) with its evaluations, the algorithm's loss
metrics, the learning rate, and for an asynchronous run its staleness and throughput, one panel each against the
optimizer step.

matplotlib draws through its Agg canvas on a `Figure` of its own: no window opens, and pyplot's global state (the
backend of a notebook that trains) is left as it was. The style is `benchmarks/learning_curves.py`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

CURVES_FILE = "training_curves.png"
STALENESS_KEYS = ("trained_staleness_mean", "trained_staleness_max")
"""An asynchronous run's staleness at the optimizer step (the left axis of its panel)."""
THROUGHPUT_KEY = "perf/trained_tok_s_wall_clock"
"""TRL's trained tokens per second of wall-clock time (the right axis of the staleness panel)."""


def series(log_history: Sequence[dict[str, Any]], key: str, since_step: int = 0) -> list[tuple[int, float]]:
    """`(step, value)` of every log entry after `since_step` that holds `key` (a number)."""
    return [
        (int(entry.get("step", 0)), float(entry[key]))
        for entry in log_history
        if isinstance(entry.get(key), (int, float)) and int(entry.get("step", 0)) > since_step
    ]


def logged_keys(log_history: Sequence[dict[str, Any]], names: Sequence[str]) -> list[str]:
    """The logged keys for `names`, in their order: `name` itself, or a part's `<part>/<name>` (MIX logs its rollout
    and expert losses as `usual/pg_loss`, `expert/sft_loss`)."""
    logged = list(dict.fromkeys(key for entry in log_history for key in entry))
    found: list[str] = []
    for name in names:
        found += [key for key in logged if (key == name or key.endswith(f"/{name}")) and key not in found]
    return found


def _repeats(log_history: Sequence[dict[str, Any]], key: str, primary: str) -> bool:
    """Whether `key` is the main metric or logs the same values at the same steps (SFT's `sft_loss` is its `loss`):
    no panel of its own."""
    return key == primary or series(log_history, key) == series(log_history, primary)


def plot_training_curves(
    log_history: Sequence[dict[str, Any]],
    path: str,
    title: str,
    primary: str,
    losses: Sequence[str] = (),
    resumed_at: int | None = None,
) -> list[str]:
    """Draw `primary` (with `eval_<primary>` where logged), the logged keys of `losses` (but those that repeat
    `primary`) and the learning rate, one panel each, into the PNG `path`; `resumed_at` marks the step a resumed run
    started from. Returns the keys drawn (nothing is written when none was logged). Needs matplotlib (a dependency of
    trl_ext)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    panels = [
        (primary, [k for k in (primary, f"eval_{primary}") if series(log_history, k)]),
        ("loss metrics", [k for k in logged_keys(log_history, losses) if not _repeats(log_history, k, primary)][:4]),
        ("learning rate", [k for k in ("learning_rate",) if series(log_history, k)]),
        ("staleness (versions)", [k for k in STALENESS_KEYS if series(log_history, k)]),
    ]
    panels = [(label, keys) for label, keys in panels if keys]
    if not panels:
        return []
    width = 4.6 * len(panels)  # inches
    figure = Figure(figsize=(width, 3.6))
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    twin = False
    for ax, (label, keys) in zip(axes, panels, strict=True):
        for i, key in enumerate(keys):
            steps, values = zip(*series(log_history, key), strict=True)
            evaluation = key.startswith("eval_")
            ax.plot(steps, values, "o--" if evaluation else "-", label=key, color=f"C{i}", linewidth=1.6, markersize=4)
        if keys[0] in STALENESS_KEYS and series(log_history, THROUGHPUT_KEY):  # throughput on the right axis
            steps, values = zip(*series(log_history, THROUGHPUT_KEY), strict=True)
            right = ax.twinx()
            right.plot(steps, values, ":", color="grey", linewidth=1.2, label="trained tokens/s")
            right.set_ylabel("trained tokens/s", fontsize=8)
            right.tick_params(labelsize=8)
            right.legend(fontsize=8, loc="lower right")
            twin = True
        if resumed_at is not None:
            ax.axvline(resumed_at, color="grey", linestyle=":", linewidth=1, label=f"resumed at step {resumed_at}")
        ax.set_xlabel("optimizer step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(keys[0] if len(keys) == 1 else label)
        ax.grid(alpha=0.3)
        if len(keys) > 1 or resumed_at is not None:
            ax.legend(fontsize=8, loc="upper left")
    figure.suptitle(title)
    # fixed margins (in inches at the sides): tight_layout would draw the figure twice, nearly doubling the cost
    right_margin = 0.75 if twin else 0.15  # inches: the twin axis's labels
    figure.subplots_adjust(left=0.8 / width, right=1 - right_margin / width, bottom=0.14, top=0.87, wspace=0.4)
    figure.savefig(path, dpi=110)
    drawn = [key for _, keys in panels for key in keys]
    throughput = set(STALENESS_KEYS) & set(drawn) and series(log_history, THROUGHPUT_KEY)
    return drawn + ([THROUGHPUT_KEY] if throughput else [])
