"""Things the tests build once per test session, whichever xdist worker asks first (`built_once`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from filelock import FileLock

T = TypeVar("T")
TOY_CACHE = "trl_ext_cache"
"""The session folder of the toy caches (`TRL_EXT_CACHE` of the scripts under the `toy_cache` fixture)."""


def session_root(tmp_path_factory) -> Path:
    """The folder every xdist worker of this test session shares (the workers' own temporary folders lie in it);
    without xdist, the session's temporary folder."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory, name: str, build: Callable[[Path], T], folder: str | None = None) -> T:
    """`build(<session root>/<folder or name>)` once for the whole test session: the first worker to ask builds
    while the others wait on the file lock `<name>.lock`, then find the result; `build` must return at once when the
    folder already holds it (the toy caches do: `trl_ext.toy.cached_model`). Building a toy model takes up to ~45 s
    of CPU, once instead of once per worker."""
    root = session_root(tmp_path_factory)
    with FileLock(str(root / f"{name}.lock")):
        path = root / (folder or name)
        path.mkdir(exist_ok=True)
        return build(path)
