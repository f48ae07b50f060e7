"""Every config's defaults are its record's: each component-name field (`policy_loss_fn`, `advantage_fn`,
`kl_loss_fn`, `kl_penalty_fn`, `entropy_loss_fn`) holds the record's choice, and each field of a component's
arguments the argument's default (or the record's own, `argument_defaults`), for every registered algorithm with a
trainer."""

from __future__ import annotations

import pytest
from trainer_helpers import CPU

import trl_ext
from trl_ext.advantages import ADVANTAGE_FNS
from trl_ext.losses import POLICY_LOSSES
from trl_ext.losses.kl import KLFn
from trl_ext.trainers.core.arguments import config_arguments

COMPONENT_FIELDS = ("policy_loss_fn", "advantage_fn", "kl_loss_fn", "kl_penalty_fn", "entropy_loss_fn")
WITH_CONFIG = [name for name, spec in trl_ext.ALGORITHMS.items() if spec.has_trainer]
WITHOUT_ENTROPY = [  # the configs with an entropy term whose record has none
    name
    for name in WITH_CONFIG
    if trl_ext.get_algorithm(name).entropy_loss_fn == "none"
    and "entropy_loss_fn" in trl_ext.get_algorithm(name).family.components
]


@pytest.mark.parametrize("name", WITH_CONFIG)
def test_config_defaults_are_the_records(name, tmp_path):
    spec = trl_ext.get_algorithm(name)
    config = spec.config_class(output_dir=str(tmp_path), **CPU)
    chosen = {kind: getattr(config, kind) for kind in COMPONENT_FIELDS if hasattr(config, kind)}
    assert chosen == {kind: getattr(spec, kind) for kind in chosen}
    # a family whose loss is its TRL trainer's own objective composes no parts: no component fields
    components = [POLICY_LOSSES[spec.policy_loss_fn]] if spec.policy_loss_fn is not None else []
    if spec.advantage_fn is not None:
        components.append(ADVANTAGE_FNS[spec.advantage_fn])
    if spec.family.kl_coef_field == "beta":  # the KL term of `beta`: its arguments are the config's fields
        components.append(KLFn)
    own = {**dict(spec.argument_defaults), **dict(spec.paper_settings)}  # the record's own defaults
    for component in components:
        for argument in config_arguments(component):
            expected = None if argument.config_unset else own.get(argument.name, argument.default)
            assert getattr(config, argument.field_name) == expected, (component.__name__, argument.name)
    arguments = {a.name for c in components for a in config_arguments(c)}
    assert dict(spec.argument_defaults).keys() <= arguments
    for name, value in spec.paper_settings:  # the rest: family settings at the paper's default
        if name not in arguments:
            expected = spec.config_class.__dataclass_fields__[name].default
            assert expected == value, name


@pytest.mark.parametrize("name", WITHOUT_ENTROPY)
def test_an_entropy_bonus_needs_an_entropy_term_where_the_record_has_none(name, tmp_path):
    """`JSDConfig(entropy_coef=0.01)`: the record's `entropy_loss_fn='none'` refuses the bonus at construction, naming
    both fields; choosing the term adds it."""
    config_class = trl_ext.get_algorithm(name).config_class
    settings = {"output_dir": str(tmp_path), **CPU}
    with pytest.raises(ValueError, match=rf"^{config_class.__name__}: entropy_coef=0.01 .* entropy_loss_fn='none'"):
        config_class(**settings, entropy_coef=0.01)
    config = config_class(**settings, entropy_coef=0.01, entropy_loss_fn="default")
    assert config.components.entropy_fn.entropy_coef == 0.01
