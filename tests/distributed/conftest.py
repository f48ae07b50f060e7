"""The multi-process tests' shared references: the window script's one-process runs, made once per session (by the
first xdist worker that needs them)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from session_builds import built_once


@pytest.fixture(scope="session")
def one_process_window_runs(random_tiny_model, tiny_model, tmp_path_factory) -> dict:
    """The window script's two one-process splits of every algorithm of `test_window_normalization.ALGORITHMS`:
    1 × 1 step of 16 rows and 1 × 4 accumulation steps of 4, which the torchrun and the DeepSpeed splits are compared
    with (the teacher: the pretrained toy model, same tokenizer)."""
    from test_window_normalization import run_window_script

    splits = {"1x1": (16, 1), "1x4": (4, 4)}

    def build(folder) -> dict:
        done = folder / ".built"
        if done.is_file():
            return {split: torch.load(folder / f"{split}.pt") for split in splits}
        with ThreadPoolExecutor(len(splits)) as pool:  # two one-thread processes: one core each
            futures = {
                split: pool.submit(
                    run_window_script, str(folder / f"{split}.pt"), random_tiny_model, tiny_model, *sizes
                )
                for split, sizes in splits.items()
            }
            runs = {split: future.result() for split, future in futures.items()}
        done.touch()
        return runs

    return built_once(tmp_path_factory, "window_one_process", build)
