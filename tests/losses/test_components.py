"""The losses, KL and entropy terms as declarative components (`trl_ext.components`).

* `metrics` lists exactly the metrics a component returns, each a window share (`SHARE`) or a value (`MEAN`).
* The signature (`inspect.signature(cls)`) is `backend` (policy losses) then exactly the arguments, with the
  documented defaults.
* Every argument's own rule (bounds, choices, bool) is enforced at construction, with an error naming the
  component and the argument; an unknown argument is an error listing the valid ones.
* The training-config facts of the arguments (`config_name`, `config_unset`, `config_when_set`).
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from test_defaults import EXPECTED_DEFAULTS  # literal defaults of every policy loss
from test_loss_inputs_declared import CASES, build, make_batch
from test_validation_masked import EXPERT, MASK, B, T

from trl_ext.losses import (
    ENTROPY_FNS,
    KL_FNS,
    LOSS_AGG_MODES,
    MEAN,
    POLICY_LOSSES,
    SHARE,
    Argument,
    KLFn,
)

REGISTRIES = {"policy loss": POLICY_LOSSES, "KL function": KL_FNS, "entropy function": ENTROPY_FNS}
COMPONENTS = [(kind, key) for kind, registry in REGISTRIES.items() for key in sorted(registry)]
COMPONENT_IDS = [f"{kind}:{key}" for kind, key in COMPONENTS]

KL_DEFAULTS = {"kl_coef": 0.001, "adaptive": False, "target_kl": None, "horizon": None}
ENTROPY_DEFAULTS = {"entropy_coef": 0.0}


def component_class(kind: str, key: str) -> type:
    return REGISTRIES[kind][key]


# ==================================================================================================
# metrics: exactly what is returned
# ==================================================================================================

# CASES (every loss, with the options that change what it reads) plus the options that change what it returns.
METRIC_CASES = [*CASES, ("mix_chord-sft", "mix_chord", {"enable_phi_function": False})]


def window_counts(batch: dict) -> dict:
    """The counts of a window that is this one batch."""
    mask, expert = batch["action_mask"], batch["expert_mask"]
    return {
        "global_valid_toks": mask.sum(),
        "global_valid_seqs": mask.shape[0],
        "normalizer": mask.shape[1],
        "expert_valid_toks": (mask & expert.unsqueeze(-1)).sum(),
        "expert_valid_seqs": expert.sum(),
    }


def returned_metrics(name: str, kwargs: dict, windowed: bool) -> tuple[torch.Tensor, dict]:
    fn = build(name, **kwargs)
    batch = make_batch()
    if windowed:
        batch.update(window_counts(batch))
    return fn(**{k: batch[k] for k in fn.inputs() if k in batch})


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_policy_loss_metrics_are_exactly_the_declared_ones(name):
    cls = POLICY_LOSSES[name]
    assert set(cls.metrics.values()) <= {SHARE, MEAN}
    returned: set[str] = set()
    for _, case_name, kwargs in METRIC_CASES:
        if case_name != name:
            continue
        for windowed in (False, True):
            _, metrics = returned_metrics(name, kwargs, windowed)
            assert set(metrics) <= set(cls.metrics), f"undeclared metrics: {set(metrics) - set(cls.metrics)}"
            returned |= set(metrics)
    assert returned == set(cls.metrics), f"declared but never returned: {set(cls.metrics) - returned}"


@pytest.mark.parametrize(("case_id", "name", "kwargs"), METRIC_CASES, ids=[c[0] for c in METRIC_CASES])
@pytest.mark.parametrize("windowed", [False, True], ids=["local", "window"])
def test_the_loss_value_is_a_window_share(case_id, name, kwargs, windowed):
    """The metric that logs the loss value is declared SHARE (it adds up over a window like the loss)."""
    loss, metrics = returned_metrics(name, kwargs, windowed)
    fn = build(name, **kwargs)
    shares = [key for key in metrics if fn.is_window_share(key)]
    assert any(torch.equal(metrics[key], loss.detach()) for key in shares), shares
    assert all(fn.is_window_share(key) == (fn.metrics[key] == SHARE) for key in metrics)


@pytest.mark.parametrize("name", sorted(KL_FNS))
def test_kl_metrics_are_exactly_the_declared_ones(name):
    fn = KL_FNS.build(name)
    batch = make_batch()
    batch = {**batch, "response_mask": batch["action_mask"]}
    loss, metrics = fn.calculate_kl_loss(**{k: batch[k] for k in fn.inputs() if k in batch})
    assert set(metrics) == set(fn.metrics)
    if metrics:
        assert fn.metrics == {"kl_loss": SHARE, "kl_coef": MEAN}
        torch.testing.assert_close(metrics["kl_loss"] * fn.kl_coef, loss)


@pytest.mark.parametrize("name", sorted(ENTROPY_FNS))
def test_entropy_metrics_are_exactly_the_declared_ones(name):
    fn = ENTROPY_FNS.build(name, entropy_coef=0.5)
    batch = {"entropy": torch.rand(B, T, dtype=torch.float64), "action_mask": MASK, "expert_mask": EXPERT}
    bonus, metrics = fn(**{k: batch[k] for k in fn.inputs() if k in batch})
    assert set(metrics) == set(fn.metrics)
    if metrics:
        assert fn.metrics == {"entropy_loss": SHARE}
        torch.testing.assert_close(metrics["entropy_loss"] * 0.5, bonus)


# ==================================================================================================
# Signatures
# ==================================================================================================


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_policy_loss_signature_is_backend_then_the_arguments(name):
    cls = POLICY_LOSSES[name]
    params = list(inspect.signature(cls).parameters.values())
    backend, arguments = params[0], params[1:]
    assert (backend.name, backend.kind, backend.default) == ("backend", backend.POSITIONAL_OR_KEYWORD, "verl")
    if name in ("mix", "mix_chord"):  # the mixing losses also take the rollout part's loss, before the arguments
        leading, arguments = arguments[0], arguments[1:]
        assert (leading.name, leading.kind, leading.default) == ("rollout_loss", leading.KEYWORD_ONLY, None)
    assert [(p.name, p.default) for p in arguments] == list(EXPECTED_DEFAULTS[name].items())
    assert all(p.kind is p.KEYWORD_ONLY for p in arguments)
    # the signature is what the constructor takes
    assert cls("megatron", **EXPECTED_DEFAULTS[name]).args == cls().args
    with pytest.raises(TypeError):
        cls("verl", *EXPECTED_DEFAULTS[name].values())


@pytest.mark.parametrize(("kind", "key"), [c for c in COMPONENTS if c[0] != "policy loss"], ids=str)
def test_kl_and_entropy_signatures_are_the_arguments(kind, key):
    cls = component_class(kind, key)
    expected = KL_DEFAULTS if kind == "KL function" else ENTROPY_DEFAULTS
    params = list(inspect.signature(cls).parameters.values())
    assert [(p.name, p.default) for p in params] == list(expected.items())
    assert all(p.kind is p.KEYWORD_ONLY for p in params)
    assert cls.default_args() == expected


# ==================================================================================================
# Argument rules
# ==================================================================================================


def bad_values(spec: Argument) -> list:
    """Values that break `spec`'s own rule: just past each bound, a non-choice, a non-bool."""
    if spec.choices:
        return ["not-a-choice"]
    if spec.type is bool:
        return ["yes"]
    low = [bound - 1 for bound in (spec.gt, spec.ge) if bound is not None]
    high = [bound + 1 for bound in (spec.lt, spec.le) if bound is not None]
    return low + high


BAD_ARGUMENTS = [
    (kind, key, spec.name, value)
    for kind, key in COMPONENTS
    for spec in component_class(kind, key).arguments
    for value in bad_values(spec)
]


def test_bad_arguments_cover_every_rule():
    ruled = {
        (kind, key, spec.name)
        for kind, key in COMPONENTS
        for spec in component_class(kind, key).arguments
        if spec.choices or spec.type is bool or {spec.gt, spec.ge, spec.lt, spec.le} != {None}
    }
    assert {case[:3] for case in BAD_ARGUMENTS} == ruled
    assert len(BAD_ARGUMENTS) > 60


@pytest.mark.parametrize(("kind", "key", "argument", "value"), BAD_ARGUMENTS, ids=str)
def test_an_argument_outside_its_rule_is_an_error_naming_it(kind, key, argument, value):
    owner = component_class(kind, key).name
    with pytest.raises(
        ValueError, match=rf"^{re.escape(owner)}: {argument}={re.escape(repr(value))} is not valid; must"
    ):
        REGISTRIES[kind].build(key, **{argument: value})


@pytest.mark.parametrize(("kind", "key"), COMPONENTS, ids=COMPONENT_IDS)
def test_unknown_argument_lists_the_valid_ones(kind, key):
    cls = component_class(kind, key)
    with pytest.raises(ValueError, match=rf"^{re.escape(cls.name)}: unknown argument\(s\) 'not_an_argument'; ") as info:
        REGISTRIES[kind].build(key, not_an_argument=1)
    listed = str(info.value).split("valid arguments: ", 1)[1]
    assert listed.split(", ") == [spec.name for spec in cls.arguments]


@pytest.mark.parametrize(("kind", "key"), COMPONENTS, ids=COMPONENT_IDS)
def test_every_aggregation_argument_takes_the_loss_agg_modes(kind, key):
    for spec in component_class(kind, key).arguments:
        if spec.name.endswith("loss_agg_mode"):
            assert spec.choices == LOSS_AGG_MODES
            assert spec.optional == (spec.name != "loss_agg_mode")


# ==================================================================================================
# What the training configs read
# ==================================================================================================

MIX_GEOMETRY = (
    "use_dynamic_bsz",
    "ppo_mini_batch_size",
    "ppo_micro_batch_size_per_gpu",
    "ngpus_trainer",
    "train_batch_size_usual",
    "train_batch_size_expert",
)


def expected_config_names(kind: str, cls: type) -> dict[str, str]:
    """The config field names that differ from the argument names (where they would collide with TRL's)."""
    if kind == "policy loss" and cls.name == "sppo":
        return {"epsilon": "sppo_epsilon"}
    if kind == "policy loss" and cls.name == "rec":
        return {spec.name: f"rec_{spec.name}" for spec in cls.arguments}
    if issubclass(cls, KLFn):
        return {"adaptive": "adaptive_kl", "horizon": "kl_horizon"}
    return {}


@pytest.mark.parametrize(("kind", "key"), COMPONENTS, ids=COMPONENT_IDS)
def test_config_facts(kind, key):
    cls = component_class(kind, key)
    renames = expected_config_names(kind, cls)
    policy_loss = cls.name if kind == "policy loss" else None
    assert {spec.name: spec.field_name for spec in cls.arguments} == {
        spec.name: renames.get(spec.name, spec.name) for spec in cls.arguments
    }
    unset = {spec.name for spec in cls.arguments if spec.config_unset}
    assert unset == (set(MIX_GEOMETRY) if policy_loss in ("mix", "mix_chord") else set())
    when_set = {spec.name for spec in cls.arguments if spec.config_when_set}
    assert when_set == ({"clip_range_low", "clip_range_high"} if policy_loss == "gspo" else set())
    assert all(spec.help.strip() for spec in cls.arguments)
