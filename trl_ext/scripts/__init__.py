"""Command-line entry points shared by `examples/train_<algorithm>.py`: one script per kind of data a trainer family
trains on (`TrainerFamily.schema`), each with `make_parser(algorithm, argv)`, `train(algorithm, argv)` and `main`."""

from __future__ import annotations

from types import ModuleType

from ..algorithms import get_algorithm


def script_for(algorithm: str) -> ModuleType:
    """The script that trains `algorithm` (`trl-ext train`): the one for its family's data, `grpo.py` for prompts
    (`experience`: the trainer generates and scores), `dpo.py` for preference pairs, `sft.py` for demonstrations,
    `cpt.py` for plain text. The scripts import trl: they are imported here on first use."""
    from . import cpt, dpo, grpo, sft

    return {"experience": grpo, "dpo": dpo, "sft": sft, "cpt": cpt}[get_algorithm(algorithm).schema]
