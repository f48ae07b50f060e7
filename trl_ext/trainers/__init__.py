"""TRL adapters: the trainer families' config and trainer classes, and each algorithm's.

The family bases are written by hand (`GRPOFamilyConfig` / `GRPOFamilyTrainer`, `MIXFamilyConfig`, ...; DPO's, SFT's and
CPT's classes, the single algorithm of their families); the built-in algorithms' classes (`SAPOConfig`,
`SAPOTrainer`, ...) are class statements generated from their records (`grpo/algorithms.py`, see `core/classes.py`), and
a record registered later gets classes built from it (`algorithm_classes`). Importing this package imports trl and
registers each family's classes (`family_classes.py`): the records below name them and never import them.
`trl_ext` itself loads this package on first access to a class.
"""

from __future__ import annotations

from trl import DPOConfig as TRLDPOConfig
from trl import SFTConfig as TRLSFTConfig

# trl_ext.async_rollout imports TRL's experimental package without TRL's notice: before anything else imports it
from .. import async_rollout  # noqa: F401  # isort: skip
from trl.experimental.async_grpo import AsyncGRPOConfig as TRLAsyncGRPOConfig  # isort: skip

from .asynchronous.config import AsyncGRPOConfig
from .asynchronous.trainer import AsyncGRPOTrainer
from .core.classes import algorithm_class_names, algorithm_classes
from .core.family_classes import register_family_classes
from .critic.config import CriticFamilyConfig
from .critic.trainer import CriticFamilyTrainer
from .distill.config import DistillFamilyConfig
from .distill.trainer import DistillFamilyTrainer
from .dpo.config import DPOConfig
from .dpo.trainer import DPOTrainer
from .grpo.algorithms import *  # noqa: F403 - the generated classes, listed in its __all__
from .grpo.algorithms import __all__ as _ALGORITHM_CLASSES
from .grpo.config import GRPOFamilyConfig
from .grpo.trainer import GRPOFamilyTrainer
from .mix.config import MIXFamilyConfig
from .mix.trainer import MIXFamilyTrainer
from .sft.config import SFTConfig
from .sft.cpt import CPTConfig, CPTTrainer
from .sft.trainer import SFTTrainer

register_family_classes("grpo", GRPOFamilyConfig, GRPOFamilyTrainer, settings_base=GRPOFamilyConfig)
register_family_classes("mix", MIXFamilyConfig, MIXFamilyTrainer, settings_base=GRPOFamilyConfig)
register_family_classes("distill", DistillFamilyConfig, DistillFamilyTrainer, settings_base=GRPOFamilyConfig)
register_family_classes("critic", CriticFamilyConfig, CriticFamilyTrainer, settings_base=GRPOFamilyConfig)
register_family_classes("dpo", DPOConfig, DPOTrainer, settings_base=TRLDPOConfig)
register_family_classes("sft", SFTConfig, SFTTrainer, settings_base=TRLSFTConfig)
register_family_classes("cpt", CPTConfig, CPTTrainer, settings_base=TRLSFTConfig)
register_family_classes("async", AsyncGRPOConfig, AsyncGRPOTrainer, settings_base=TRLAsyncGRPOConfig)

__all__ = [
    "AsyncGRPOConfig",
    "AsyncGRPOTrainer",
    "CPTConfig",
    "CPTTrainer",
    "DPOConfig",
    "DPOTrainer",
    "DistillFamilyConfig",
    "DistillFamilyTrainer",
    "GRPOFamilyConfig",
    "GRPOFamilyTrainer",
    "MIXFamilyConfig",
    "MIXFamilyTrainer",
    "SFTConfig",
    "SFTTrainer",
    "algorithm_class_names",
    "algorithm_classes",
    *_ALGORITHM_CLASSES,
]
