"""The inventory of TRL's private names that trl_ext touches (`trl_ext.trainers.core.trl_private_names`): complete
(a scan of the package finds exactly its names) and current (each exists in the installed TRL)."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pathlib
import re

import pytest
import trl
from trl.experimental.async_grpo import AsyncGRPOTrainer
from trl.experimental.iw_opd import IWOPDTrainer
from trl.experimental.online_dpo import OnlineDPOTrainer
from trl.experimental.sdft import SDFTTrainer
from trl.experimental.sdpo import SDPOTrainer
from trl.experimental.tpo import TPOTrainer

import trl_ext
from trl_ext.trainers.core.trl_private_names import ADAPTER_MODULES, REPLACED_TRL_FUNCTIONS, TRL_PRIVATE_NAMES

TRL_TRAINERS = (
    trl.GRPOTrainer,
    trl.DPOTrainer,
    trl.SFTTrainer,
    AsyncGRPOTrainer,
    OnlineDPOTrainer,
    IWOPDTrainer,
    SDFTTrainer,
    SDPOTrainer,
    TPOTrainer,
)
PACKAGE = pathlib.Path(trl_ext.__file__).parent


@functools.cache
def trl_private_names() -> dict[str, str]:
    """Every private name TRL's trainers define (as class attributes, or `self._x = ...` in their source), with the
    class that defines it first in their method resolution order."""
    names: dict[str, str] = {}
    for trainer in TRL_TRAINERS:
        for klass in trainer.__mro__[:-1]:
            owner = f"{klass.__module__}.{klass.__qualname__}"
            for name in vars(klass):
                if name.startswith("_") and not name.startswith("__"):
                    names.setdefault(name, owner)
            for name in re.findall(r"self\.(_[a-z]\w*)\s*(?::[^=]*)?=", inspect.getsource(klass)):
                names.setdefault(name, owner)
    return names


def touched_in(path: pathlib.Path) -> set[str]:
    """TRL's private names a module reads (`x._name`, `getattr(x, "_name")`) or overrides (in a class body)."""
    used = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            used.add(node.value)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    used.add(item.name)
                elif isinstance(item, ast.Assign):
                    used.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return used & set(trl_private_names())


def used_in_package() -> set[str]:
    return set().union(*(touched_in(path) for path in PACKAGE.rglob("*.py")))


def test_the_inventory_lists_exactly_the_private_trl_names_the_package_touches():
    used = used_in_package()
    assert not used - set(TRL_PRIVATE_NAMES), (
        f"touched but not in the inventory: {sorted(used - set(TRL_PRIVATE_NAMES))}"
    )
    assert not set(TRL_PRIVATE_NAMES) - used, f"listed but no longer touched: {sorted(set(TRL_PRIVATE_NAMES) - used)}"


def test_only_the_adapter_modules_touch_trls_private_names():
    """One adapter module per TRL trainer (and one shared) holds every override and every read."""
    outside = {
        str(path.relative_to(PACKAGE)): sorted(touched_in(path))
        for path in PACKAGE.rglob("*.py")
        if str(path.relative_to(PACKAGE)) not in {*ADAPTER_MODULES, "trainers/core/trl_private_names.py"}
        and touched_in(path)
    }
    assert not outside, f"private TRL names touched outside the adapter modules: {outside}"
    assert all((PACKAGE / module).is_file() for module in ADAPTER_MODULES)


@pytest.mark.parametrize("name", sorted(TRL_PRIVATE_NAMES))
def test_each_private_name_exists_in_the_installed_trl(name):
    assert trl_private_names().get(name) == TRL_PRIVATE_NAMES[name], (
        f"{name}: TRL defines it in {trl_private_names().get(name)}, the inventory says {TRL_PRIVATE_NAMES[name]}"
    )


@pytest.mark.parametrize("path", REPLACED_TRL_FUNCTIONS)
def test_each_replaced_trl_function_exists(path):
    importlib.import_module("trl_ext.trainers.asynchronous.trainer")  # the adapter that replaces it
    module, name = path.rsplit(".", 1)
    function = getattr(importlib.import_module(module), name)
    assert callable(function) and function.__module__.startswith("trl_ext."), path  # replaced once, by trl_ext


def test_the_package_patches_nothing_with_mock():
    """trl_ext is fastened to TRL at named points, never by `unittest.mock` at run time."""
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if re.search(r"\bunittest\b|\bmock\.patch|\bpatch\.object\(", path.read_text())
    ]
    assert not offenders
