"""The multi-process tests' shared references: the window script's one-process runs, made once per session."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest


@pytest.fixture(scope="session")
def one_process_window_runs(random_tiny_model, tiny_model, tmp_path_factory) -> dict:
    """The window script's two one-process splits of every algorithm of `test_window_normalization.ALGORITHMS`:
    1 × 1 step of 16 rows and 1 × 4 accumulation steps of 4, which the torchrun and the DeepSpeed splits are compared
    with (the teacher: the pretrained toy model, same tokenizer)."""
    from test_window_normalization import run_window_script

    tmp = tmp_path_factory.mktemp("window_one_process")
    splits = {"1x1": (16, 1), "1x4": (4, 4)}
    with ThreadPoolExecutor(len(splits)) as pool:  # two one-thread processes: one core each
        futures = {
            split: pool.submit(run_window_script, str(tmp / f"{split}.pt"), random_tiny_model, tiny_model, *sizes)
            for split, sizes in splits.items()
        }
        return {split: future.result() for split, future in futures.items()}
