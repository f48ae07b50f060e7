"""A family whose loss is its TRL trainer's own objective (`TrainerFamily.objective`) composes no parts, its records
name no policy loss, and a family may name its own script (`TrainerFamily.script`)."""

from __future__ import annotations

import pytest

from trl_ext import ALGORITHMS, AlgorithmSpec, Paper, get_algorithm
from trl_ext.families import FAMILIES, TrainerFamily, register_family
from trl_ext.scripts import SCHEMA_SCRIPTS, script_for

OBJECTIVE = "trl_ext.losses.distillation.dense_divergence"


@pytest.fixture
def objective_family():
    family = register_family(
        TrainerFamily(
            "objective_test",
            "A TRL trainer whose own loss is ported.",
            class_names=("ObjectiveTestConfig", "ObjectiveTestTrainer"),
            components=(),
            schema="sft",
            per_algorithm_classes=False,
            objective=OBJECTIVE,
            script="cpt",
        )
    )
    yield family
    del FAMILIES["objective_test"]
    ALGORITHMS.pop("objective_test", None)


def _record(**overrides) -> AlgorithmSpec:
    fields = dict(
        name="objective_test",
        description="A test record.",
        paper=Paper("A test", "2501.00002"),
        policy_loss_fn=None,
        advantage_fn=None,
        kl_loss_fn="none",
        entropy_loss_fn="none",
        use_reference=False,
        repeat_times=1,
        trainer="objective_test",
    )
    return AlgorithmSpec(**{**fields, **overrides})


def test_a_record_of_an_objective_family_names_the_objective_as_its_loss(objective_family):
    spec = _record()
    assert spec.policy_loss_fn is None and spec.loss_name == OBJECTIVE
    assert get_algorithm("sapo").loss_name == "sapo"


def test_a_record_of_an_objective_family_refuses_a_policy_loss(objective_family):
    with pytest.raises(ValueError, match=r"policy_loss_fn='sft' is not valid .* must be None: its loss is the family"):
        _record(policy_loss_fn="sft")


def test_a_record_of_a_composing_family_needs_a_policy_loss():
    with pytest.raises(ValueError, match=r"policy_loss_fn=None is not valid .*'sft'; must be a policy loss's name"):
        _record(trainer="sft")


@pytest.mark.parametrize(
    ("components", "objective", "message"),
    [
        (("policy_loss_fn",), OBJECTIVE, r"components=\('policy_loss_fn',\) is not valid with objective="),
        ((), "", r"components=\(\) is not valid; must include 'policy_loss_fn'"),
    ],
)
def test_a_family_has_either_parts_or_an_objective(components, objective, message):
    with pytest.raises(ValueError, match=message):
        TrainerFamily("bad", "d", ("BadConfig", "BadTrainer"), components, "sft", objective=objective)


def test_the_script_is_the_familys_own_else_its_datas(objective_family):
    ALGORITHMS["objective_test"] = _record()
    assert script_for("objective_test").__name__ == "trl_ext.scripts.cpt"  # its own, not sft's
    assert script_for("dpo").__name__ == f"trl_ext.scripts.{SCHEMA_SCRIPTS['dpo']}"
    assert script_for("sapo").__name__ == "trl_ext.scripts.grpo"
