"""Command-line entry points shared by `examples/train_<algorithm>.py`: one script per kind of data a trainer family
trains on (`TrainerFamily.schema`), or the family's own (`TrainerFamily.script`), each with
`make_parser(algorithm, argv)`, `train(algorithm, argv)` and `main`."""

from __future__ import annotations

import importlib
from types import ModuleType

from ..algorithms import get_algorithm

SCHEMA_SCRIPTS = {"experience": "grpo", "dpo": "dpo", "sft": "sft", "cpt": "cpt"}
"""The script of each kind of data (`trl_ext.families.SCHEMAS`) for a family without a script of its own."""


def script_for(algorithm: str) -> ModuleType:
    """The script that trains `algorithm` (`trl-ext train`): its family's own (`TrainerFamily.script`), else the one
    for its family's data, `grpo.py` for prompts (`experience`: the trainer generates and scores), `dpo.py` for
    preference pairs, `sft.py` for demonstrations, `cpt.py` for plain text. The scripts import trl: they are imported
    here on first use."""
    spec = get_algorithm(algorithm)
    name = (spec.family.script if spec.family else "") or SCHEMA_SCRIPTS[spec.schema]
    return importlib.import_module(f"{__name__}.{name}")
