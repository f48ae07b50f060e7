"""Model cards that name the trl_ext algorithm, its loss settings and the paper to cite.

TRL writes `README.md` (its `lm_model_card.md` template: base model, dataset, framework versions, "This model was
trained with {name}, a method introduced in {paper}", the BibTeX to cite) when a checkpoint is saved and on
`push_to_hub`. The trainers give TRL the algorithm's name and paper instead of GRPO's (`paper`, `display_name`);
`AlgorithmModelCard` appends a section with the algorithm, its trainer, loss, advantage and every algorithm setting
of the run, and also writes the card on a user's `trainer.save_model(...)`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from typing import Any

from ...algorithms import get_algorithm
from ...families import TrainerFamily, get_family
from .family_classes import get_family_classes

_UNNAMED_BASE = "[None](https://huggingface.co/None)"  # TRL's template for a base model it does not name


def paper(algorithm: str) -> dict[str, str]:
    """TRL's `_paper` dict (title, arXiv id, BibTeX citation) of `algorithm`, from its record's `paper`."""
    cited = get_algorithm(algorithm).paper
    if cited is None:  # TRL's card then cites no method paper (as trl.SFTTrainer's)
        return {}
    citation = (
        f"@article{{{algorithm}{cited.year},\n    title   = {{{{{cited.title}}}}},\n"
        f"    journal = {{arXiv preprint arXiv:{cited.arxiv}}},\n    year    = {cited.year},\n}}"
    )
    return {"title": cited.title, "id": cited.arxiv, "citation": citation}


def display_name(algorithm: str) -> str:
    return get_algorithm(algorithm).display_name


def field_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else None


def config_family(config_class: type, algorithm: str) -> TrainerFamily:
    """The family whose trainer trains `config_class`: its `trainer_family` (an asynchronous form), else the one
    algorithm `algorithm`'s record names."""
    name = getattr(config_class, "trainer_family", None)
    return get_family(name) if name else get_algorithm(algorithm).family


def algorithm_fields(config_class: type, algorithm: str) -> list[dataclasses.Field]:
    """The config's algorithm settings: the fields it has beyond its family's shared settings (`settings_base`; for
    an asynchronous form, `AsyncSAPOConfig`, its family's config, `AsyncGRPOConfig`), the shared fields whose default
    it changes, and the TRL fields that its loss reads (DPO's `beta`)."""
    family = config_family(config_class, algorithm)
    classes = get_family_classes(family.name)
    form = family is not get_algorithm(algorithm).family  # an asynchronous form: what it adds to the family's config
    base = classes.config_base if form else classes.settings_base
    inherited = {f.name: field_default(f) for f in dataclasses.fields(base)}
    keep = family.loss_fields_from_trl
    return [
        f
        for f in dataclasses.fields(config_class)
        if f.name not in inherited or inherited[f.name] != field_default(f) or f.name in keep
    ]


class AlgorithmModelCard:
    """Mixin for the trl_ext trainers (before the TRL trainer in the bases; needs `self.algorithm`)."""

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)
        if not self.is_world_process_zero():
            return
        path = os.path.join(self.args.output_dir, "README.md")
        with open(path, encoding="utf-8") as f:
            card = f.read()
        base = self._local_base_model()
        if base is not None:  # TRL names Hub ids only: a local model was "a fine-tuned version of [None](...)"
            card = card.replace(_UNNAMED_BASE, base)
        with open(path, "w", encoding="utf-8") as f:
            f.write(card + "\n" + self._algorithm_section())

    def _local_base_model(self) -> str | None:
        """How the card names a base model loaded from a local directory (TRL leaves it unnamed, as `None`): the
        directory's name, and for trl_ext's toy models where they come from. None for a Hub id (TRL links it)."""
        path = getattr(getattr(self.model, "config", None), "_name_or_path", "") or ""
        if not path or not os.path.isdir(path):
            return None
        from ...toy import MODEL_VERSION, TEACHER_VERSION

        name = os.path.basename(os.path.normpath(path))
        toy = {
            MODEL_VERSION: "trl_ext's offline toy model, `trl_ext.toy.tiny_model_path()`",
            TEACHER_VERSION: "trl_ext's offline toy teacher, `trl_ext.toy.tiny_teacher_path()`",
        }
        return f"`{name}` ({toy.get(name, 'a local model')})"

    def _algorithm_section(self) -> str:
        spec = get_algorithm(self.algorithm)
        args = self.args
        cited = spec.paper
        rows = [
            ("algorithm", f"`{self.algorithm}`: {spec.description}"),
            ("trainer / config", f"`trl_ext.{type(self).__name__}` / `trl_ext.{type(args).__name__}`"),
        ]
        if hasattr(args, "composition"):  # the trained parts (a composed one says so)
            rows += [(part, re.sub(r"^(\w+)", r"`\1`", text)) for part, text in args.composition().items()]
        else:
            rows += [
                ("policy loss", f"`{getattr(args, 'policy_loss_name', spec.loss_name)}`"),
                ("advantage", f"`{spec.advantage_fn}`" if spec.advantage_fn else "—"),
            ]
        if spec.family.kl_coef_field is not None and not hasattr(args, "composition"):
            coefficient = getattr(args, spec.family.kl_coef_field)
            rows.append(("KL term", f"`{args.kl_loss_fn}`, coefficient {coefficient}"))
        rows += [(f"`{f.name}`", f"`{getattr(args, f.name)!r}`") for f in algorithm_fields(type(args), self.algorithm)]
        table = "\n".join(f"| {name} | {value} |" for name, value in rows)
        source = ""
        if cited is not None:
            source = (
                f", from [{cited.title}](https://huggingface.co/papers/{cited.arxiv}) (arXiv {cited.arxiv}); the "
                "citation is above"
            )
        return (
            "## trl_ext\n\n"
            f"Trained with trl_ext's {display_name(self.algorithm)} trainer on TRL{source}."
            "\n\n| setting | value |\n|---|---|\n" + table + "\n"
        )

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        super().save_model(output_dir, _internal_call)
        if _internal_call:  # checkpoints and push_to_hub write the card themselves
            return
        target = output_dir or self.args.output_dir
        self.create_model_card(model_name=os.path.basename(os.path.normpath(target)))
        card = os.path.join(self.args.output_dir, "README.md")
        if self.is_world_process_zero() and os.path.abspath(target) != os.path.abspath(self.args.output_dir):
            shutil.copyfile(card, os.path.join(target, "README.md"))
