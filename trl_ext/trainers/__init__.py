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
from trl.experimental.a2po import A2POConfig as TRLA2POConfig  # isort: skip
from trl.experimental.gkd import GKDConfig as TRLGKDConfig  # isort: skip
from trl.experimental.gold import GOLDConfig as TRLGOLDConfig  # isort: skip
from trl.experimental.iw_opd import IWOPDConfig as TRLIWOPDConfig  # isort: skip
from trl.experimental.online_dpo import OnlineDPOConfig as TRLOnlineDPOConfig  # isort: skip
from trl.experimental.sdft import SDFTConfig as TRLSDFTConfig  # isort: skip
from trl.experimental.sdpo import SDPOConfig as TRLSDPOConfig  # isort: skip
from trl.experimental.tpo import TPOConfig as TRLTPOConfig  # isort: skip

from .a2po.config import A2POConfig
from .a2po.trainer import A2POTrainer
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
from .gkd.config import GKDConfig
from .gkd.trainer import GKDTrainer
from .gold.config import GOLDConfig
from .gold.trainer import GOLDTrainer
from .grpo.algorithms import *  # noqa: F403 - the generated classes, listed in its __all__
from .grpo.algorithms import __all__ as _ALGORITHM_CLASSES
from .grpo.config import GRPOFamilyConfig
from .grpo.trainer import GRPOFamilyTrainer
from .iw_opd.config import IWOPDConfig
from .iw_opd.trainer import IWOPDTrainer
from .mix.config import MIXFamilyConfig
from .mix.trainer import MIXFamilyTrainer
from .online_dpo.config import OnlineDPOConfig
from .online_dpo.trainer import OnlineDPOTrainer
from .sdft.config import SDFTConfig
from .sdft.trainer import SDFTTrainer
from .sdpo.config import SDPOConfig
from .sdpo.trainer import SDPOTrainer
from .sft.config import SFTConfig
from .sft.cpt import CPTConfig, CPTTrainer
from .sft.trainer import SFTTrainer
from .tpo.config import TPOConfig
from .tpo.trainer import TPOTrainer

register_family_classes("grpo", GRPOFamilyConfig, GRPOFamilyTrainer, settings_base=GRPOFamilyConfig)
register_family_classes("mix", MIXFamilyConfig, MIXFamilyTrainer, settings_base=GRPOFamilyConfig)
register_family_classes("distill", DistillFamilyConfig, DistillFamilyTrainer, settings_base=GRPOFamilyConfig)
register_family_classes("critic", CriticFamilyConfig, CriticFamilyTrainer, settings_base=GRPOFamilyConfig)
register_family_classes("dpo", DPOConfig, DPOTrainer, settings_base=TRLDPOConfig)
register_family_classes("sft", SFTConfig, SFTTrainer, settings_base=TRLSFTConfig)
register_family_classes("cpt", CPTConfig, CPTTrainer, settings_base=TRLSFTConfig)
register_family_classes("async", AsyncGRPOConfig, AsyncGRPOTrainer, settings_base=TRLAsyncGRPOConfig)
register_family_classes("gkd", GKDConfig, GKDTrainer, settings_base=TRLGKDConfig)
register_family_classes("gold", GOLDConfig, GOLDTrainer, settings_base=TRLGOLDConfig)
register_family_classes("iw_opd", IWOPDConfig, IWOPDTrainer, settings_base=TRLIWOPDConfig)
register_family_classes("a2po", A2POConfig, A2POTrainer, settings_base=TRLA2POConfig)
register_family_classes("online_dpo", OnlineDPOConfig, OnlineDPOTrainer, settings_base=TRLOnlineDPOConfig)
register_family_classes("sdft", SDFTConfig, SDFTTrainer, settings_base=TRLSDFTConfig)
register_family_classes("sdpo", SDPOConfig, SDPOTrainer, settings_base=TRLSDPOConfig)
register_family_classes("tpo", TPOConfig, TPOTrainer, settings_base=TRLTPOConfig)

__all__ = [
    "A2POConfig",
    "A2POTrainer",
    "AsyncGRPOConfig",
    "AsyncGRPOTrainer",
    "CPTConfig",
    "CPTTrainer",
    "DPOConfig",
    "DPOTrainer",
    "DistillFamilyConfig",
    "DistillFamilyTrainer",
    "GKDConfig",
    "GKDTrainer",
    "GOLDConfig",
    "GOLDTrainer",
    "GRPOFamilyConfig",
    "GRPOFamilyTrainer",
    "IWOPDConfig",
    "IWOPDTrainer",
    "MIXFamilyConfig",
    "MIXFamilyTrainer",
    "OnlineDPOConfig",
    "OnlineDPOTrainer",
    "SDFTConfig",
    "SDFTTrainer",
    "SDPOConfig",
    "SDPOTrainer",
    "SFTConfig",
    "SFTTrainer",
    "TPOConfig",
    "TPOTrainer",
    "algorithm_class_names",
    "algorithm_classes",
    *_ALGORITHM_CLASSES,
]
