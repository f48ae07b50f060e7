"""Each algorithm's config and trainer class: written out as source for the built-in algorithms, built at run time
for a record registered later.

    from trl_ext.trainers import algorithm_classes
    SAPOConfig, SAPOTrainer = algorithm_classes("sapo")   # also trl_ext.SAPOConfig, get_algorithm("sapo").config_class

A config is a dataclass over its family's config base with the fields `algorithm_fields(name)` derives from the
record (the KL estimator's and group size's defaults, the loss's and the advantage's arguments); its docstring is
the record's description, paper and details plus a TRL-style parameter list. The trainer is the family's trainer
with that config. (The family's classes are the ones its trainers registered, `family_classes.py`.)

The records never import this module: `AlgorithmSpec.config_class` / `trainer_class` call `algorithm_classes`
through the package, `trl_ext/__init__.py`, which is above both and loads the trainers on first use.

The built-in algorithms' classes are class statements in `grpo/algorithms.py` (so that `grep`, an IDE and a type
checker find them, with their fields), and `trl_ext/__init__.py` names them for type checkers. Both are generated
from the records by this module, `python -m trl_ext.trainers.core.generate`, and
`tests/trainers/test_generated_classes.py` fails when either is out of date. A record registered with
`register_algorithm` gets the same classes, built here.
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
from functools import cache
from typing import Any

from ...algorithms import ALGORITHMS, AlgorithmSpec, get_algorithm
from ..grpo import algorithms as grpo_algorithms
from .arguments import algorithm_fields
from .config_conversion import trl_config_of
from .family_classes import get_family_classes

WIDTH = 120
"""The module of the built-in algorithms' class statements (written by `trl_ext.trainers.core.generate`)."""


def _type_name(kind: Any) -> str:
    return kind if isinstance(kind, str) else str(kind) if getattr(kind, "__args__", None) else kind.__name__


def _annotation(cls: type, name: str) -> Any:
    """The declared type of field `name` (its class's annotation: `HfArgumentParser` rewrites `Field.type` in place,
    e.g. `str | None` to `str`, once a parser is built on the class)."""
    return next(inspect.get_annotations(c)[name] for c in cls.__mro__ if name in inspect.get_annotations(c))


def _paragraph(text: str, indent: str = "    ") -> list[str]:
    wrap = textwrap.TextWrapper(WIDTH, indent, indent, break_long_words=False, break_on_hyphens=False)
    return wrap.wrap(text)


def config_summary(spec: AlgorithmSpec) -> list[str]:
    """The first paragraph of the config's docstring: what the algorithm is, its paper and details."""
    _, trainer_name = spec.class_names
    cited = f" Paper: {spec.paper}." if spec.paper else ""
    intro = f"Configuration of [`{trainer_name}`]: {spec.description}{cited}"
    if spec.details:
        intro += f" {spec.details}"
    return ["", *_paragraph(intro)]


def config_docstring(spec: AlgorithmSpec) -> str:
    """The config's docstring: what the algorithm is, its paper and details, then its own parameters (the fields it
    has beyond the family's shared settings, `settings_base`) with their types, defaults and help."""
    lines = [*config_summary(spec), "", "    Parameters specific to this algorithm:", ""]
    classes = get_family_classes(spec.trainer)
    shared = {f.name for f in dataclasses.fields(classes.settings_base)}
    own = {name: (kind, value) for name, kind, value in algorithm_fields(spec.name, classes.config_base)}
    base = classes.config_base
    for f in dataclasses.fields(base):  # the family's own fields (MIX's expert data, the teacher, ...)
        if f.name not in shared and f.name not in own:
            own[f.name] = (_annotation(base, f.name), f)
    for name, (kind, value) in own.items():
        default = value.default
        lines.append(f"        {name} (`{_type_name(kind)}`, *optional*, defaults to `{default!r}`):")
        lines += _paragraph(value.metadata["help"], " " * 12)
    closing = f"Every other parameter is `{classes.settings_base.__name__}`'s."
    lines += ["", *_paragraph(closing), ""]
    return "\n".join(lines) + "    "


def trainer_docstring(spec: AlgorithmSpec) -> str:
    config_name, _ = spec.class_names
    base = spec.family.class_names[1]
    named = spec.description.split(":")[0] in (spec.display_name, spec.name)  # "CISPO: clipped ...": named already
    text = f"{'' if named else spec.display_name + ': '}{spec.description} (config: `{config_name}`)."
    opening = '    """'  # the summary's first line follows the quotes
    wrap = textwrap.TextWrapper(WIDTH, " " * len(opening), "    ", break_long_words=False, break_on_hyphens=False)
    summary = wrap.wrap(text)
    trl_config = trl_config_of(get_family_classes(spec.trainer).config_base).__name__
    closing = (
        f"The `{base}` of this algorithm: its constructor is `{base}`'s, which documents every argument; `args` is a "
        f"`{config_name}`, or TRL's `trl.{trl_config}` / a `transformers.TrainingArguments`, converted to one."
    )
    return "\n".join([summary[0].lstrip(), *summary[1:], "", *_paragraph(closing)]) + "\n    "


def build_classes(spec: AlgorithmSpec) -> tuple[type, type]:
    """The config and trainer class of a record registered at run time (the built-in ones are written out)."""
    family = get_family_classes(spec.trainer)
    config_name, trainer_name = spec.class_names
    namespace = {"__module__": __name__, "__qualname__": config_name, "__doc__": config_docstring(spec)}
    namespace["algorithm"] = spec.name  # a class attribute (not annotated: not a field)
    config = dataclasses.make_dataclass(
        config_name, algorithm_fields(spec.name, family.config_base), bases=(family.config_base,), namespace=namespace
    )
    trainer = type(
        trainer_name,
        (family.trainer_base,),
        {"__module__": __name__, "__qualname__": trainer_name, "__doc__": trainer_docstring(spec),
         "config_class": config},
    )  # fmt: skip
    globals().update({config_name: config, trainer_name: trainer})  # where pickle finds them (checkpoints)
    return config, trainer


@cache
def algorithm_classes(name: str) -> tuple[type, type]:
    """`(config class, trainer class)` of algorithm `name`: the family's own classes where it has one algorithm
    (DPO, SFT), the written-out classes of a built-in algorithm, or classes built from a record registered later."""
    spec = get_algorithm(name)
    config_name, trainer_name = spec.class_names  # an algorithm without a trainer raises NotImplementedError here
    if not spec.family.per_algorithm_classes:
        family = get_family_classes(spec.trainer)
        return family.config_base, family.trainer_base
    if hasattr(grpo_algorithms, config_name):
        return getattr(grpo_algorithms, config_name), getattr(grpo_algorithms, trainer_name)
    return build_classes(spec)


def algorithm_class_names() -> list[str]:
    """The config and trainer class names of every algorithm with a trainer, in record order."""
    return [n for spec in ALGORITHMS.values() if spec.has_trainer for n in spec.class_names]
