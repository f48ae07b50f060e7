"""The GPU suite (`pytest -m gpu`): every test here is marked `gpu` and skipped without CUDA."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU (the GPU suite: pytest -m gpu on a GPU machine)")
    for item in items:
        if "/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(skip)
