"""trl_ext: Trinity-RFT's reinforcement fine-tuning algorithms for Hugging Face TRL.

The loss library (`trl_ext.losses`), the advantage estimators (`trl_ext.advantages`) and the
algorithm table (`get_algorithm`) are pure torch: importing them does not import trl. The trainers
and their configs (`trl_ext.SAPOTrainer`, `trl_ext.SAPOConfig`, ...) are imported on first access.
"""

from typing import Any

from .algorithms import ALGORITHMS, AlgorithmSpec, Paper, get_algorithm, register_algorithm

__version__ = "0.1.0.dev0"


def __getattr__(name: str) -> Any:
    # Trainers import trl / transformers: load them lazily so `import trl_ext` needs only torch. Every algorithm's
    # config and trainer (`SAPOConfig`, `SAPOTrainer`, ...) is here, built from its record.
    from . import trainers

    if name in _trainer_exports():
        return getattr(trainers, name)
    raise AttributeError(f"module 'trl_ext' has no attribute {name!r}")


def _trainer_exports() -> list[str]:
    from .trainers import algorithm_class_names

    return ["GRPOFamilyConfig", "GRPOFamilyTrainer", *algorithm_class_names()]


def __dir__() -> list[str]:
    return sorted([*globals(), *_trainer_exports()])


__all__ = [
    "ALGORITHMS",
    "AlgorithmSpec",
    "Paper",
    "__version__",
    "get_algorithm",
    "register_algorithm",
    *_trainer_exports(),
]
