"""Each trainer family's classes, registered by the trainers' package when it is imported.

    from trl_ext.trainers.core.family_classes import get_family_classes
    classes = get_family_classes("grpo")
    classes.config_base, classes.trainer_base   # GRPOFamilyConfig, GRPOFamilyTrainer
    classes.settings_base                       # GRPOFamilyConfig: its fields are no algorithm's own settings

A family's record (`trl_ext.families`) is below its classes: the configs are built on the records, so the record
names its classes (`TrainerFamily.class_names`) and imports none. The classes are registered here, from above:
`trl_ext/trainers/__init__.py` registers the built-in families' classes once it has imported them, and a family
added outside trl_ext registers its own beside its trainer. Importing this module imports the trainers' package
first, so a family's classes are registered by the time anything here is read.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...families import FAMILIES, get_family


@dataclass(frozen=True)
class FamilyClasses:
    """A trainer family's classes.

    Attributes:
        config_base: The family's config: the base of its algorithms' configs, or its single algorithm's config.
        trainer_base: The family's trainer, likewise.
        settings_base: The config class whose fields are not an algorithm's own settings (the model card, the run
            summary, `trl-ext list NAME` and the configs' docstrings list the others): `GRPOFamilyConfig` for the
            families on rollouts, TRL's `DPOConfig` / `SFTConfig` for DPO and SFT.
    """

    config_base: type
    trainer_base: type
    settings_base: type


FAMILY_CLASSES: dict[str, FamilyClasses] = {}


def register_family_classes(family: str, config_base: type, trainer_base: type, settings_base: type) -> FamilyClasses:
    """Register the classes of trainer family `family` (once; its record is registered first).

    Returns:
        The family's `FamilyClasses`.

    Raises:
        ValueError: An unknown family (naming the registered ones), classes registered for it already, a class
            whose name is not the one the record gives (`TrainerFamily.class_names`), or a config that does not
            subclass `settings_base`.
    """
    record = get_family(family)
    if family in FAMILY_CLASSES:
        raise ValueError(f"trainer family {family!r}: its classes are registered already")
    given = (config_base.__name__, trainer_base.__name__)
    if given != record.class_names:
        raise ValueError(
            f"trainer family {family!r}: classes {', '.join(given)} are not the ones its record names "
            f"(class_names={record.class_names!r})"
        )
    if not issubclass(config_base, settings_base):
        raise ValueError(
            f"trainer family {family!r}: config {config_base.__name__} does not subclass its settings base "
            f"{settings_base.__name__}"
        )
    FAMILY_CLASSES[family] = FamilyClasses(config_base, trainer_base, settings_base)
    return FAMILY_CLASSES[family]


def get_family_classes(family: str) -> FamilyClasses:
    """The classes of trainer family `family`.

    Raises:
        ValueError: An unknown family, or one whose classes nobody registered (naming the families that have some).
    """
    get_family(family)  # an unknown family is a ValueError naming the registered ones
    try:
        return FAMILY_CLASSES[family]
    except KeyError:
        with_classes = ", ".join(name for name in FAMILIES if name in FAMILY_CLASSES)
        raise ValueError(
            f"trainer family {family!r} has no classes registered (register_family_classes); families with classes: "
            f"{with_classes or 'none'}"
        ) from None
