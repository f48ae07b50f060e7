"""TRL adapters: the trainers (and their configs) of the trl_ext algorithms.

Each algorithm's `<Prefix>Config` / `<Prefix>Trainer` (`SAPOConfig`, `SAPOTrainer`, ...) is built from its record
(`trl_ext.algorithms`) on first access by `algorithm_classes`; the family bases (`GRPOFamilyConfig`,
`GRPOFamilyTrainer`, `MIXFamilyConfig`, ...) and DPO's classes are written by hand. Everything is loaded on first
access (PEP 562), so that importing a light submodule (`trl_ext.trainers.arguments`, `trl_ext.trainers.model_card`)
does not import trl.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..algorithms import ALGORITHMS

# Where each hand-written export lives.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "classes": ("algorithm_classes",),
    "distill_trainer": ("DistillFamilyTrainer",),
    "dpo_config": ("DPOConfig",),
    "dpo_trainer": ("DPOTrainer",),
    "grpo_config": ("DistillFamilyConfig", "GRPOFamilyConfig", "MIXFamilyConfig"),
    "grpo_trainer": ("GRPOFamilyTrainer",),
    "mix_trainer": ("MIXFamilyTrainer",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

_FAMILY_TABLES: dict[str, tuple[tuple[str, ...], int]] = {
    "GRPO_FAMILY_CONFIGS": (("grpo",), 0),
    "MIX_CONFIGS": (("mix",), 0),
    "TRAINER_CONFIGS": (("grpo", "mix", "distill"), 0),
    "GRPO_FAMILY_TRAINERS": (("grpo",), 1),
    "MIX_TRAINERS": (("mix",), 1),
    "DISTILL_TRAINERS": (("distill",), 1),
    "TRAINERS": (("grpo", "mix", "distill"), 1),
}
"""The algorithm -> class tables: which trainer families each holds, and whether configs (0) or trainers (1).
Computed on each access from the records, so that an algorithm registered later is in them."""


def _algorithm_class(name: str) -> type | None:
    for spec in ALGORITHMS.values():
        if spec.has_trainer and name in spec.class_names:
            from .classes import algorithm_classes

            return algorithm_classes(spec.name)[spec.class_names.index(name)]
    return None


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
        globals()[name] = value  # cached: later accesses do not come here
        return value
    if name in _FAMILY_TABLES:
        from .classes import algorithm_classes

        families, index = _FAMILY_TABLES[name]
        return {n: algorithm_classes(n)[index] for n, spec in ALGORITHMS.items() if spec.trainer in families}
    value = _algorithm_class(name)
    if value is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return value


def algorithm_class_names() -> list[str]:
    """The config and trainer class names of every algorithm with a trainer, in record order."""
    return [n for spec in ALGORITHMS.values() if spec.has_trainer for n in spec.class_names]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *algorithm_class_names()})


__all__ = [*_FAMILY_TABLES, *sorted(_MODULE_OF), *algorithm_class_names()]
