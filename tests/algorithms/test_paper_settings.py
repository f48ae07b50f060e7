"""An algorithm's paper settings (`AlgorithmSpec.paper_settings`): DAPOConfig() trains the paper's DAPO while the
record's flags stay Trinity-RFT's, and the run summary shows what differs from the family's defaults."""

from __future__ import annotations

import dataclasses

import pytest

import trl_ext
from trl_ext import get_algorithm
from trl_ext.scripts.run_settings import settings_lines
from trl_ext.trainers.asynchronous.forms import async_config_class
from trl_ext.trainers.core.arguments import paper_setting_field

CPU = {"output_dir": "unused", "use_cpu": True, "report_to": "none"}


def _line(args, algorithm: str) -> str:
    return " ".join(" ".join(settings_lines(args, algorithm)).split())


def test_dapo_config_is_the_papers_method():
    config = trl_ext.DAPOConfig(**CPU, max_completion_length=20480)
    assert (config.clip_range_low, config.clip_range, config.clip_range_high) == (None, 0.2, 0.28)  # low: clip_range
    assert config.clip_ratio_c is None  # no dual clip
    assert config.loss_agg_mode == "token-mean" and config.beta == 0.0 and config.kl_loss_fn == "none"
    assert config.dynamic_sampling is True and config.dynamic_sampling_at_cap == "train"
    assert config.overlong_buffer == 4096 and config.overlong_penalty_factor == 1.0  # the paper's 4096 of 20480
    assert trl_ext.DAPOConfig(**CPU, max_completion_length=8).overlong_buffer == 1  # scaled, at least one token
    assert trl_ext.DAPOConfig(**CPU, overlong_buffer=0).overlong_buffer == 0  # off when asked
    assert trl_ext.DAPOConfig(**CPU, overlong_buffer=64).overlong_buffer == 64


def test_the_record_keeps_trinitys_flags_and_states_the_papers_beside_them():
    spec = get_algorithm("dapo")
    flags = (spec.policy_loss_fn, spec.advantage_fn, spec.kl_loss_fn, spec.use_reference)
    assert flags == ("ppo", "grpo", "none", False)
    assert spec.argument_defaults == ()  # Trinity-RFT's record sets no loss arguments
    assert dict(spec.paper_settings) == {
        "clip_range_high": 0.28, "clip_ratio_c": None, "dynamic_sampling": True, "overlong_buffer": None,
    }  # fmt: skip
    defaults = {f.name: f.default for f in dataclasses.fields(spec.config_class)}
    assert all(defaults[name] == value for name, value in spec.paper_settings)  # every default from the record
    ppo = {f.name: f.default for f in dataclasses.fields(trl_ext.GRPOConfig)}  # GRPO: the same loss, Trinity's args
    assert (ppo["clip_range_high"], ppo["clip_ratio_c"], ppo["dynamic_sampling"], ppo["overlong_buffer"]) == (
        None, 3.0, False, 0,
    )  # fmt: skip


def test_the_asynchronous_form_takes_the_papers_settings_too():
    config = async_config_class("dapo")(**CPU, max_completion_length=40, rollout_backend="transformers")
    assert (config.clip_range_high, config.clip_ratio_c, config.dynamic_sampling) == (0.28, None, True)
    assert config.overlong_buffer == 8


def test_a_paper_setting_that_names_nothing_is_refused_by_name():
    spec = dataclasses.replace(get_algorithm("dapo"), paper_settings=(("dynamic_sampeling", True),))
    with pytest.raises(ValueError, match=r"paper_settings names 'dynamic_sampeling', which is neither an argument"):
        paper_setting_field(spec, trl_ext.GRPOConfig, "dynamic_sampeling", True)


def test_the_summary_shows_the_papers_settings_and_every_change():
    dapo = trl_ext.DAPOConfig(**CPU, max_completion_length=8)
    assert _line(dapo, "dapo") == (
        "dapo settings: the paper's clip_range_high=0.28, clip_ratio_c=None, dynamic_sampling=True, "
        "overlong_buffer=1 (max_completion_length / 5)"
    )
    changed = trl_ext.DAPOConfig(**CPU, max_completion_length=8, dynamic_sampling_max_rounds=30, overlong_buffer=4)
    assert _line(changed, "dapo") == (
        "dapo settings: the paper's clip_range_high=0.28, clip_ratio_c=None, dynamic_sampling=True; "
        "changed: overlong_buffer=4 (default None), dynamic_sampling_max_rounds=30 (default 10)"
    )
    # The family's settings count for every algorithm: SAPO with dynamic sampling says so.
    sapo = trl_ext.SAPOConfig(**CPU, dynamic_sampling=True, overlong_buffer=2, max_completion_length=8)
    assert _line(sapo, "sapo") == (
        "sapo settings: overlong_buffer=2 (default 0), dynamic_sampling=True (default False)"
    )
    assert _line(trl_ext.SAPOConfig(**CPU), "sapo") == "sapo settings: the algorithm's defaults"


def test_trl_ext_list_names_the_papers_settings():
    from trl_ext.cli import describe_algorithm

    text = " ".join(describe_algorithm("dapo").split())
    assert "paper's clip_range_high=0.28, clip_ratio_c=None, dynamic_sampling=True, overlong_buffer=None:" in text
    assert "dynamic_sampling=True" in text.split("settings ")[1]  # and among the config's settings
    assert "paper's" not in describe_algorithm("sapo")
