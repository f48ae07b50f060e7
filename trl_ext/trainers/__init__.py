"""TRL adapters: the trainer families' config and trainer classes, and each algorithm's.

The family bases are written by hand (`GRPOFamilyConfig` / `GRPOFamilyTrainer`, `MIXFamilyConfig`, ...; DPO's, SFT's and
CPT's classes, the single algorithm of their families); the built-in algorithms' classes (`SAPOConfig`,
`SAPOTrainer`, ...) are class statements generated from their records (`grpo_algorithms.py`, see `classes.py`), and
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

from .async_config import AsyncGRPOConfig
from .async_trainer import AsyncGRPOTrainer
from .classes import algorithm_class_names, algorithm_classes, document_written_classes
from .cpt_trainer import CPTConfig, CPTTrainer
from .critic_config import CriticFamilyConfig
from .critic_trainer import CriticFamilyTrainer
from .distill_config import DistillFamilyConfig
from .distill_trainer import DistillFamilyTrainer
from .dpo_config import DPOConfig
from .dpo_trainer import DPOTrainer
from .family_classes import register_family_classes
from .grpo_algorithms import *  # noqa: F403 - the generated classes, listed in its __all__
from .grpo_algorithms import __all__ as _ALGORITHM_CLASSES
from .grpo_config import GRPOFamilyConfig
from .grpo_trainer import GRPOFamilyTrainer
from .mix_config import MIXFamilyConfig
from .mix_trainer import MIXFamilyTrainer
from .sft_config import SFTConfig
from .sft_trainer import SFTTrainer

register_family_classes("grpo", GRPOFamilyConfig, GRPOFamilyTrainer, settings_base=GRPOFamilyConfig)
register_family_classes("mix", MIXFamilyConfig, MIXFamilyTrainer, settings_base=GRPOFamilyConfig)
register_family_classes("distill", DistillFamilyConfig, DistillFamilyTrainer, settings_base=GRPOFamilyConfig)
register_family_classes("critic", CriticFamilyConfig, CriticFamilyTrainer, settings_base=GRPOFamilyConfig)
register_family_classes("dpo", DPOConfig, DPOTrainer, settings_base=TRLDPOConfig)
register_family_classes("sft", SFTConfig, SFTTrainer, settings_base=TRLSFTConfig)
register_family_classes("cpt", CPTConfig, CPTTrainer, settings_base=TRLSFTConfig)
register_family_classes("async", AsyncGRPOConfig, AsyncGRPOTrainer, settings_base=TRLAsyncGRPOConfig)
document_written_classes()

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
