"""The cross-field rules of the RL configs (`trl_ext.trainers.core.config_rules.RULES`), each from its own row of the
table: its example is refused on every config it is tested on, naming the config class, and the example with the
rule's fix builds."""

from __future__ import annotations

import pytest
from async_helpers import async_config
from trainer_helpers import cpu_config

import trl_ext
from trl_ext.trainers.core.config_rules import ASYNC, RULES, SYNC, rules_for

CASES = [(rule, name) for rule in RULES for name in rule.tested_on]


def _build(name: str, output_dir: str, overrides: dict):
    if name == "AsyncGRPOConfig":
        return async_config(output_dir, **overrides)
    return cpu_config(getattr(trl_ext, name), output_dir, **overrides)


@pytest.mark.parametrize(("rule", "name"), CASES, ids=[f"{rule.name}-{name}" for rule, name in CASES])
def test_the_example_breaks_the_rule_and_the_fix_builds(rule, name, tmp_path):
    with pytest.raises(ValueError, match=rule.message) as error:
        _build(name, str(tmp_path), rule.example)
    assert str(error.value).startswith(f"{name}: ")
    config = _build(name, str(tmp_path), {**rule.example, **rule.fix})
    assert rule.applies(config)
    rule.check(config)


def test_the_table_is_well_formed():
    names = [rule.name for rule in RULES]
    assert len(set(names)) == len(names)
    for rule in RULES:
        assert rule.tested_on and rule.fields and set(rule.fix) <= set(rule.fields) | set(rule.example), rule.name
        assert rule.check.__name__ == rule.name  # the rule is its named function
        mros = [{cls.__name__ for cls in getattr(trl_ext, name).__mro__} for name in rule.tested_on]
        assert all(any(target in mro for mro in mros) for target in rule.applies_to), rule.name


def test_the_sync_and_async_configs_share_their_common_rules(tmp_path):
    sync = cpu_config(trl_ext.GRPOConfig, str(tmp_path))
    asynchronous = async_config(str(tmp_path))
    shared = [rule for rule in RULES if {SYNC, ASYNC} <= set(rule.applies_to)]
    assert {rule.name for rule in shared} >= {"entropy_bonus_needs_entropy_term", "turns_as_samples_needs_seq_mean"}
    for rule in shared:
        assert rule in rules_for(sync, rule.stage) and rule in rules_for(asynchronous, rule.stage)
