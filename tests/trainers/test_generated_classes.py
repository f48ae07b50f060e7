"""The built-in algorithms' public classes are class statements in the source, kept current with their records.

`trl_ext/trainers/grpo/algorithms.py` and the `TYPE_CHECKING` imports of `trl_ext/__init__.py` are generated from the
algorithm records (`python -m trl_ext.trainers.core.generate`); these tests fail when either is out of date, and check
that a generated class is the class the records describe (the same fields, types, defaults and help as the classes built
for a record registered at run time). (That the records and the trainers do not import each other:
tests/algorithms/test_import_graph.py.)
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re

import pytest

import trl_ext
from trl_ext.trainers.core import generate
from trl_ext.trainers.core.classes import build_classes
from trl_ext.trainers.core.family_classes import get_family_classes, register_family_classes

ROOT = pathlib.Path(trl_ext.__file__).parent
BUILT_IN = [name for name, spec in trl_ext.ALGORITHMS.items() if spec.has_trainer]


def test_generated_module_is_current():
    assert generate.MODULE_PATH.read_text() == generate.render_module(), (
        "trl_ext/trainers/grpo/algorithms.py is out of date: run `python -m trl_ext.trainers.core.generate`"
    )


def test_type_checking_imports_are_current():
    text = generate.PACKAGE_INIT.read_text()
    assert generate.package_init_with_exports(text) == text, (
        "the generated imports of trl_ext/__init__.py are out of date: run `python -m trl_ext.trainers.core.generate`"
    )


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_public_class_is_a_class_statement_grep_finds(name):
    """`grep "class SAPOConfig"` finds it, and `trl_ext/__init__.py` imports it under TYPE_CHECKING (what a type
    checker and an IDE's go-to-definition follow)."""
    spec = trl_ext.get_algorithm(name)
    sources = "\n".join(path.read_text() for path in ROOT.rglob("*.py"))
    init = ast.parse(generate.PACKAGE_INIT.read_text())
    checked = next(node for node in init.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imported = {alias.name for node in ast.walk(checked) if isinstance(node, ast.ImportFrom) for alias in node.names}
    for class_name, cls in zip(spec.class_names, (spec.config_class, spec.trainer_class), strict=True):
        assert re.search(rf"^class {class_name}\(", sources, re.MULTILINE), class_name
        assert class_name in imported, class_name
        assert getattr(trl_ext, class_name) is cls
        assert cls.__module__.startswith("trl_ext.trainers.") and cls.__qualname__ == class_name


@pytest.mark.parametrize("name", [n for n in BUILT_IN if trl_ext.get_algorithm(n).family.per_algorithm_classes])
def test_a_generated_class_is_the_class_its_record_describes(name):
    """The class statement and the classes `register_algorithm` builds at run time from the same record agree field by
    field (name, type, default, help, choices), in docstring and in bases."""
    spec = trl_ext.get_algorithm(name)
    built_config, built_trainer = build_classes(spec)
    written = {f.name: f for f in dataclasses.fields(spec.config_class)}
    built = {f.name: f for f in dataclasses.fields(built_config)}
    assert list(written) == list(built)
    for field_name, field in written.items():
        other = built[field_name]
        assert (field.default, dict(field.metadata)) == (other.default, dict(other.metadata)), field_name
        assert repr(field.default) == repr(other.default), field_name
    # the declared types (`Field.type` is rewritten in place by HfArgumentParser once a parser is built on a class)
    declared = {k: v for k, v in spec.config_class.__annotations__.items() if k != "algorithm"}  # the ClassVar
    assert declared == built_config.__annotations__
    assert spec.config_class.__doc__ == built_config.__doc__
    assert spec.trainer_class.__doc__ == built_trainer.__doc__
    family = get_family_classes(spec.trainer)
    assert spec.config_class.__bases__ == built_config.__bases__ == (family.config_base,)
    assert spec.trainer_class.__bases__ == built_trainer.__bases__ == (family.trainer_base,)
    assert spec.trainer_class.config_class is spec.config_class


def test_help_names_the_fields_types_and_defaults():
    doc = trl_ext.SAPOConfig.__doc__
    assert "Soft Adaptive Policy Optimization (arXiv 2511.20347)" in " ".join(doc.split())
    for line in (
        "tau_pos (`float`, *optional*, defaults to `1.0`):",
        "tau_neg (`float`, *optional*, defaults to `1.05`):",
    ):
        assert line in doc
    doc = trl_ext.MIXCHORDConfig.__doc__
    assert "expert_data_ratio (`float`, *optional*, defaults to `0.5`):" in doc  # the family's own fields too


def test_a_family_is_registered_once_with_every_part():
    from trl_ext.families import TrainerFamily, register_family

    grpo = trl_ext.get_family("grpo")
    with pytest.raises(ValueError, match="trainer family 'grpo' is already registered"):
        register_family(grpo)
    with pytest.raises(ValueError, match="trainer family 'ppo': missing part\\(s\\) description, class_names"):
        dataclasses.replace(grpo, name="ppo", description="", class_names=())
    path = ("trl_ext.trainers.grpo.config:GRPOFamilyConfig",)  # a record names its classes, not where they live
    with pytest.raises(ValueError, match=re.escape(f"class_names={path!r} must be (config class name, trainer class")):
        dataclasses.replace(grpo, name="ppo", class_names=path)
    with pytest.raises(
        ValueError, match="components=\\('advantage_fn',\\) is not valid; must include 'policy_loss_fn'"
    ):
        dataclasses.replace(grpo, name="ppo", components=("advantage_fn",))
    with pytest.raises(ValueError, match="schema='pairs' is not valid; must be one of 'experience', 'dpo', 'sft'"):
        dataclasses.replace(grpo, name="ppo", schema="pairs")
    with pytest.raises(TypeError, match="register_family takes a TrainerFamily"):
        register_family("grpo")
    registered = "grpo, mix, distill, critic, async, dpo, sft, cpt"
    registered += ", online_dpo, sdft, a2po, tpo, gkd, iw_opd, gold, sdpo"  # TRL's experimental trainers
    with pytest.raises(ValueError, match=f"unknown trainer family 'value'; registered: {registered}"):
        trl_ext.get_family("value")
    assert isinstance(grpo, TrainerFamily) and set(trl_ext.FAMILIES) == set(registered.split(", "))


def test_the_trainers_register_each_familys_classes_under_its_names():
    """The record names the classes (`class_names`); the trainers' package registers them, once, under those names."""
    for name, family in trl_ext.FAMILIES.items():
        classes = get_family_classes(name)
        assert (classes.config_base.__name__, classes.trainer_base.__name__) == family.class_names
        assert issubclass(classes.config_base, classes.settings_base)
    assert get_family_classes("mix").settings_base is trl_ext.GRPOFamilyConfig
    grpo = get_family_classes("grpo")
    with pytest.raises(ValueError, match="trainer family 'grpo': its classes are registered already"):
        register_family_classes("grpo", grpo.config_base, grpo.trainer_base, grpo.settings_base)
    with pytest.raises(ValueError, match="unknown trainer family 'value'; registered: grpo, mix"):
        register_family_classes("value", grpo.config_base, grpo.trainer_base, grpo.settings_base)
    with pytest.raises(ValueError, match="unknown trainer family 'value'"):
        get_family_classes("value")


def test_registered_classes_must_be_the_ones_the_record_names(monkeypatch):
    from trl_ext.trainers.core import family_classes

    monkeypatch.delitem(family_classes.FAMILY_CLASSES, "mix")
    with pytest.raises(ValueError, match=r"family 'mix' has no classes registered .*families with classes: grpo,"):
        get_family_classes("mix")
    grpo = get_family_classes("grpo")
    with pytest.raises(
        ValueError,
        match=re.escape(
            "trainer family 'mix': classes GRPOFamilyConfig, GRPOFamilyTrainer are not the ones its record names "
            "(class_names=('MIXFamilyConfig', 'MIXFamilyTrainer'))"
        ),
    ):
        register_family_classes("mix", grpo.config_base, grpo.trainer_base, grpo.settings_base)
    with pytest.raises(ValueError, match="config MIXFamilyConfig does not subclass its settings base DPOConfig"):
        register_family_classes("mix", trl_ext.MIXFamilyConfig, trl_ext.trainers.MIXFamilyTrainer, trl_ext.DPOConfig)
    assert "mix" not in family_classes.FAMILY_CLASSES


def test_a_record_must_fit_its_family():
    """A one-algorithm family (DPO, SFT) takes no second record, and a family without advantages no advantage."""
    sft = trl_ext.get_algorithm("sft")
    with pytest.raises(ValueError, match="trainer family 'sft' trains one algorithm with its own classes"):
        trl_ext.register_algorithm(dataclasses.replace(sft, name="sft2"))
    with pytest.raises(ValueError, match="advantage_fn='grpo', but trainer family 'dpo' takes no advantage function"):
        dataclasses.replace(trl_ext.get_algorithm("dpo"), advantage_fn="grpo")
    assert "sft2" not in trl_ext.ALGORITHMS
