"""The figures of `gpu_report.py`'s runs, and their Markdown and JSON forms.

Per side of a row (trl_ext, TRL): the median step time, tokens per second and peak CUDA memory over all its measured
runs. Per row: the ratios trl_ext / TRL, a 95% bootstrap interval of the step-time ratio, the verdicts against the
row's targets and, for the rows broken down into parts, the median seconds of each part. `row_figures` computes one
dictionary per row; the table, the target lines, the step parts and the JSON are all read from it, so the Markdown
and the JSON never disagree.
"""

from __future__ import annotations

import random
import statistics
from typing import Any


def ratio_interval(ours: list[float], theirs: list[float], resamples: int = 2000) -> tuple[float, float]:
    """A 95% bootstrap interval of median(ours) / median(theirs), resampling the step times of each side: a ratio
    whose interval holds 1.00 is not told apart from TRL's by this run."""
    rng = random.Random(0)
    ratios = sorted(
        statistics.median(rng.choices(ours, k=len(ours))) / statistics.median(rng.choices(theirs, k=len(theirs)))
        for _ in range(resamples)
    )
    return ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1]


def side_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One side's figures over its runs: the measured step times, their median, tokens per second over them and
    the peak memory in GiB (None without the CUDA allocator)."""
    times = [t for r in runs for t in r["times"]]
    peak = max(r["peak"] for r in runs)
    return {
        "runs": len(runs),
        "step_times_s": times,
        "step_s": statistics.median(times),
        "tokens_per_s": sum(r["tokens"] for r in runs) / sum(times),
        "peak_gib": peak or None,
    }


def _verdict(low: float, high: float, target: float) -> str:
    """A time ratio is met when its whole interval lies at or below the target, missed when it lies above."""
    return "met" if high <= target else "missed" if low > target else "not told apart"


def row_figures(
    ours: list[dict[str, Any]], theirs: list[dict[str, Any]], target: tuple[float, float] | None
) -> dict[str, Any]:
    """A row's figures from its trl_ext runs and its TRL runs; `target`: (step time ratio, peak memory ratio) at most,
    or None."""
    mine, other = side_figures(ours), side_figures(theirs)
    time_ratio = mine["step_s"] / other["step_s"]
    low, high = ratio_interval(mine["step_times_s"], other["step_times_s"])
    memory_ratio = mine["peak_gib"] / other["peak_gib"] if mine["peak_gib"] and other["peak_gib"] else None
    figures: dict[str, Any] = {
        "trl_ext": mine,
        "trl": other,
        "time_ratio": time_ratio,
        "time_ratio_interval": [low, high],
        "tokens_per_s_ratio": mine["tokens_per_s"] / other["tokens_per_s"],
        "memory_ratio": memory_ratio,
        "target": None,
        "parts": None,
    }
    if target is not None:
        time_target, memory_target = target
        figures["target"] = {
            "time_ratio": time_target,
            "memory_ratio": memory_target,
            "time": _verdict(low, high, time_target),
            "memory": "not measured" if memory_ratio is None else "met" if memory_ratio <= memory_target else "missed",
        }
    per_step = [[p for r in runs for p in r["parts"]] for runs in (ours, theirs)]
    if all(per_step):
        figures["parts"] = {
            part: [statistics.median(p[part] for p in side) for side in per_step] for part in per_step[0][0]
        }
    return figures


def table(figures: dict[str, dict[str, Any]]) -> list[str]:
    """The report's table: one line per row of `figures`."""
    lines = [
        "| row | step s trl_ext | step s TRL | time ratio | 95% interval | tokens/s trl_ext | tokens/s TRL "
        "| tokens/s ratio | peak GiB trl_ext | peak GiB TRL | memory ratio |",
        "|---|---:|---:|---:|:---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row, f in figures.items():
        ours, theirs = f["trl_ext"], f["trl"]
        low, high = f["time_ratio_interval"]
        peaks = "n/a | n/a | n/a"  # no CUDA allocator
        if f["memory_ratio"] is not None:
            peaks = f"{ours['peak_gib']:.2f} | {theirs['peak_gib']:.2f} | {f['memory_ratio']:.3f}"
        lines.append(
            f"| {row} | {ours['step_s']:.3f} | {theirs['step_s']:.3f} | {f['time_ratio']:.3f} | {low:.2f}-{high:.2f} "
            f"| {ours['tokens_per_s']:,.0f} | {theirs['tokens_per_s']:,.0f} | {f['tokens_per_s_ratio']:.3f} | {peaks} |"
        )
    return lines


def target_lines(figures: dict[str, dict[str, Any]], notes: dict[str, str]) -> list[str]:
    """Each row's time and memory ratios against its targets, or without a target (then `notes[row]`, if any, says
    what it runs against); nothing without rows."""
    lines = ["Targets (ratios trl_ext / TRL):", ""] if figures else []
    for row, f in figures.items():
        low, high = f["time_ratio_interval"]
        time = f"step time {f['time_ratio']:.3f} (95% interval {low:.2f}-{high:.2f})"
        memory = "peak memory n/a (no CUDA allocator)"
        if f["memory_ratio"] is not None:
            memory = f"peak memory {f['memory_ratio']:.3f}"
        target = f["target"]
        if target is None:
            note = f" ({notes[row]})" if row in notes else ""
            lines.append(f"- {row}: {time}, {memory}: no target{note}")
            continue
        lines.append(
            f"- {row}: {time}, target <= {target['time_ratio']:.2f}: {target['time']}; {memory}, target <= "
            f"{target['memory_ratio']:.2f}: {target['memory']}"
        )
    return lines


def part_lines(figures: dict[str, dict[str, Any]], names: dict[str, tuple[str, str]]) -> list[str]:
    """For each row broken down into parts: the median seconds of each part per step, both sides (`names[row]`: the
    two sides' names in the table's header)."""
    lines = []
    for row, f in figures.items():
        if f["parts"] is None:
            continue
        ours, theirs = names.get(row, ("trl_ext", "TRL"))
        lines += [f"Step parts of `{row}` (median seconds per step):", ""]
        lines += [f"| part | {ours} | {theirs} | difference |", "|---|---:|---:|---:|"]
        for part, (a, b) in f["parts"].items():
            lines.append(f"| {part} | {a:.3f} | {b:.3f} | {a - b:+.3f} |")
        lines.append("")
    return lines
