"""TRL adapters: `trl.GRPOTrainer` subclasses (and their configs) for the trl_ext algorithms."""

from __future__ import annotations

import importlib
from typing import Any

# Where each export lives. Loaded on first access (PEP 562), so that importing a light submodule
# (`trl_ext.trainers.arguments`, `trl_ext.trainers.model_card`) does not import trl and every trainer.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "distill_trainer": ("DISTILL_TRAINERS", "OnPolicyDistillTrainer"),
    "dpo_config": ("DPOConfig",),
    "dpo_trainer": ("DPOTrainer",),
    "grpo_config": (
        "GRPO_FAMILY_CONFIGS", "MIX_CONFIGS", "TRAINER_CONFIGS", "AsymREConfig", "CISPOConfig", "GRPOConfig",
        "GRPOFamilyConfig", "GSPOConfig", "MIXCHORDConfig", "MIXConfig", "MIXFamilyConfig", "OnPolicyDistillConfig",
        "OPMDConfig", "RAFTConfig", "RECConfig", "ReinforcePlusPlusConfig", "RLOOConfig", "SAPOConfig", "SPPOConfig",
        "TOPRConfig",
    ),
    "grpo_trainer": (
        "GRPO_FAMILY_TRAINERS", "AsymRETrainer", "CISPOTrainer", "GRPOFamilyTrainer", "GRPOTrainer", "GSPOTrainer",
        "OPMDTrainer", "RAFTTrainer", "RECTrainer", "ReinforcePlusPlusTrainer", "RLOOTrainer", "SAPOTrainer",
        "SPPOTrainer", "TOPRTrainer",
    ),
    "mix_trainer": ("MIX_TRAINERS", "MIXCHORDTrainer", "MIXFamilyTrainer", "MIXTrainer"),
}  # fmt: skip
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    if name == "TRAINERS":  # every trainer by algorithm name (the keys of `TRAINER_CONFIGS`)
        from .distill_trainer import DISTILL_TRAINERS
        from .grpo_trainer import GRPO_FAMILY_TRAINERS
        from .mix_trainer import MIX_TRAINERS

        value = {**GRPO_FAMILY_TRAINERS, **MIX_TRAINERS, **DISTILL_TRAINERS}
    elif name in _MODULE_OF:
        value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # cached: later accesses do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "DISTILL_TRAINERS",
    "GRPO_FAMILY_CONFIGS",
    "GRPO_FAMILY_TRAINERS",
    "MIX_CONFIGS",
    "MIX_TRAINERS",
    "TRAINERS",
    "TRAINER_CONFIGS",
    "AsymREConfig",
    "AsymRETrainer",
    "CISPOConfig",
    "CISPOTrainer",
    "DPOConfig",
    "DPOTrainer",
    "GRPOConfig",
    "GRPOFamilyConfig",
    "GRPOFamilyTrainer",
    "GRPOTrainer",
    "GSPOConfig",
    "GSPOTrainer",
    "MIXCHORDConfig",
    "MIXCHORDTrainer",
    "MIXConfig",
    "MIXFamilyConfig",
    "MIXFamilyTrainer",
    "MIXTrainer",
    "OPMDConfig",
    "OPMDTrainer",
    "OnPolicyDistillConfig",
    "OnPolicyDistillTrainer",
    "RAFTConfig",
    "RAFTTrainer",
    "RECConfig",
    "RECTrainer",
    "RLOOConfig",
    "RLOOTrainer",
    "ReinforcePlusPlusConfig",
    "ReinforcePlusPlusTrainer",
    "SAPOConfig",
    "SAPOTrainer",
    "SPPOConfig",
    "SPPOTrainer",
    "TOPRConfig",
    "TOPRTrainer",
]
