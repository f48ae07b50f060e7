"""Each algorithm's config and trainer class, built from its record on first use.

    from trl_ext.trainers import algorithm_classes
    SAPOConfig, SAPOTrainer = algorithm_classes("sapo")   # also trl_ext.SAPOConfig, get_algorithm("sapo").config_class

The config is a dataclass over the record's trainer family's config base and the argument dataclasses
`algorithm_arguments(name)` generates from the record's loss and advantage specs; its docstring is the record's
description, paper and details, plus the parameter list. The trainer is the family's trainer with that config. Both
live in `trl_ext.trainers` under the record's class names (so they pickle and show in `help()` like hand-written
classes). DPO's family has one algorithm and keeps its hand-written `DPOConfig` / `DPOTrainer`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache

from ..algorithms import get_algorithm
from .arguments import algorithm_arguments, documented_default
from .distill_trainer import DistillFamilyTrainer
from .dpo_config import DPOConfig
from .dpo_trainer import DPOTrainer
from .grpo_config import DistillFamilyConfig, GRPOFamilyConfig, MIXFamilyConfig, document_parameters
from .grpo_trainer import GRPOFamilyTrainer
from .mix_trainer import MIXFamilyTrainer

FAMILY_BASES: dict[str, tuple[type, type]] = {
    "grpo": (GRPOFamilyConfig, GRPOFamilyTrainer),
    "mix": (MIXFamilyConfig, MIXFamilyTrainer),
    "distill": (DistillFamilyConfig, DistillFamilyTrainer),
}
"""Trainer family -> (config base, trainer base) of the families whose algorithms get built classes."""


@cache
def algorithm_classes(name: str) -> tuple[type, type]:
    """`(config class, trainer class)` of algorithm `name`, built from its record (once)."""
    spec = get_algorithm(name)
    spec.class_names  # noqa: B018 - an algorithm without a trainer raises NotImplementedError here
    if spec.trainer == "dpo":
        return DPOConfig, DPOTrainer
    config_base, trainer_base = FAMILY_BASES[spec.trainer]
    config_name, trainer_name = spec.class_names
    cited = f" Paper: {spec.paper}." if spec.paper else ""
    config_doc = f"\n    Configuration of [`{trainer_name}`]: {spec.description}{cited}"
    if spec.details:
        config_doc += f" {spec.details}"
    namespace = {"__module__": __package__, "__qualname__": config_name, "__doc__": config_doc, "algorithm": name}
    kl_field = config_base.__dataclass_fields__["kl_loss_fn"]  # the record's estimator as the field's default
    # marked as not given, so that TRL's own loss can default to TRL's estimator (`GRPOFamilyConfig.uses_trl_loss`)
    namespace["kl_loss_fn"] = dataclasses.field(
        default=documented_default(spec.kl_estimator), metadata=kl_field.metadata
    )
    namespace["__annotations__"] = {"kl_loss_fn": kl_field.type}
    config = dataclass(type(config_name, (*algorithm_arguments(name), config_base), namespace))
    closing = "Every other parameter is `trl.GRPOConfig`'s, plus `GRPOFamilyConfig`'s KL / entropy fields."
    config = document_parameters(config, GRPOFamilyConfig, closing)
    trainer_doc = f"{spec.display_name}: {spec.description} (config: `{config_name}`).\n\n    {trainer_base.__doc__}"
    trainer = type(
        trainer_name,
        (trainer_base,),
        {"__module__": __package__, "__qualname__": trainer_name, "__doc__": trainer_doc, "config_class": config},
    )
    return config, trainer
