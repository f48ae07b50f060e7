"""trl_ext: Trinity-RFT's reinforcement fine-tuning algorithms for Hugging Face TRL.

The loss library (`trl_ext.losses`), the advantage estimators (`trl_ext.advantages`) and the
algorithm table (`get_algorithm`) are pure torch: importing them does not import trl. The trainers
and their configs (`trl_ext.SAPOTrainer`, `trl_ext.SAPOConfig`, ...) are imported on first access.
"""

from typing import Any

from .algorithms import ALGORITHMS, AlgorithmSpec, get_algorithm

__version__ = "0.1.0.dev0"

_TRAINER_EXPORTS = (
    "GRPOFamilyConfig",
    "GRPOFamilyTrainer",
    "GRPOConfig",
    "GRPOTrainer",
    "GSPOConfig",
    "GSPOTrainer",
    "CISPOConfig",
    "CISPOTrainer",
    "SAPOConfig",
    "SAPOTrainer",
    "TOPRConfig",
    "TOPRTrainer",
    "SPPOConfig",
    "SPPOTrainer",
    "RECConfig",
    "RECTrainer",
    "OPMDConfig",
    "OPMDTrainer",
    "AsymREConfig",
    "AsymRETrainer",
    "ReinforcePlusPlusConfig",
    "ReinforcePlusPlusTrainer",
    "RLOOConfig",
    "RLOOTrainer",
    "RAFTConfig",
    "RAFTTrainer",
    "MIXConfig",
    "MIXTrainer",
    "MIXCHORDConfig",
    "MIXCHORDTrainer",
    "OnPolicyDistillConfig",
    "OnPolicyDistillTrainer",
    "DPOConfig",
    "DPOTrainer",
)


def __getattr__(name: str) -> Any:
    # Trainers import trl / transformers: load them lazily so `import trl_ext` needs only torch.
    if name in _TRAINER_EXPORTS:
        from . import trainers

        return getattr(trainers, name)
    raise AttributeError(f"module 'trl_ext' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_TRAINER_EXPORTS])


__all__ = ["ALGORITHMS", "AlgorithmSpec", "__version__", "get_algorithm", *_TRAINER_EXPORTS]
