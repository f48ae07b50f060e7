"""Every field TRL's `AsyncGRPOConfig` adds to `TrainingArguments` is checked by `trl_ext.AsyncGRPOConfig`: a bad value
is a ValueError naming the config class, the field and the value; TRL's defaults and typical values pass; and a field
a TRL upgrade adds fails `test_every_trl_async_field_has_a_check` until it gets a rule."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from async_helpers import async_config
from transformers import TrainingArguments
from trl.experimental.async_grpo import AsyncGRPOConfig as TRLAsyncGRPOConfig

from trl_ext.trainers.asynchronous.trl_field_checks import TRL_ASYNC_FIELD_CHECKS

CHECKED_IN_CONFIG = {"max_staleness", "weight_sync_steps", "epsilon", "epsilon_high"}
"""TRL's fields that `AsyncGRPOConfig.__post_init__` checks itself (the table must not check them twice)."""

TRL_FIELDS = {f.name for f in dataclasses.fields(TRLAsyncGRPOConfig)} - {
    f.name for f in dataclasses.fields(TrainingArguments)
}
NAN, INF = float("nan"), float("inf")

BAD_VALUES: dict[str, list] = {
    "model_init_kwargs": ["dtype=bfloat16", "[1]", "{not json", 5, ["dtype"], {1: "x"}],
    "dtype": ["bogus", "fp8", None, 32],
    "trust_remote_code": ["yes", 1, None],
    "router_aux_loss_coef": [-0.1, "0.1", NAN],
    "num_generations": [0, 2.0, True, "4"],
    "max_completion_length": [0, -1, 8.5, None],
    "temperature": [0.0, -1.0, INF, "1.0", None],
    "top_p": [0.0, 1.5, NAN, None],
    "top_k": [-2, 1.5, True, None],
    "min_p": [-0.1, 1.1, "0.1"],
    "repetition_penalty": [0.0, -1.0, INF],
    "chat_template_kwargs": ["enable_thinking", 3, ["x"]],
    "max_tool_calling_iterations": [-1, 2.5, "3"],
    "fork_threshold_tokens": [[1], -1, 1.5, None],
    "vllm_server_base_url": ["", "localhost:8000", "ftp://host", "http://", None],
    "vllm_server_timeout": [0, -1.0, NAN, None],
    "request_timeout": [NAN, 0, 2.5, "600"],
    "weight_sync_timeout": [2.5, 0, None],
    "token_budget": [True, 1.5, "4096", INF],
    "max_inflight_tasks": ["8", 0, -2, 1.5, True],
    "queue_maxsize": [-INF, -1, 2.5],
    "heartbeat_stale_after_s": [None, 0, -1.0, NAN],
    "log_completions": ["true", 1, None],
    "num_completions_to_print": [0, -1, 2.5],
    # checked by the config itself (`CHECKED_IN_CONFIG`), here so that every field of TRL's has a bad value
    "max_staleness": [1.5, "4"],
    "weight_sync_steps": [True, 0],
    "epsilon": [0.3],
    "epsilon_high": [0.28],
}


def _value_pattern(name: str, value) -> str:
    text = "nan" if isinstance(value, float) and math.isnan(value) else repr(value)
    return rf"^AsyncGRPOConfig: {re.escape(f'{name}={text}')} "


def _cases():
    for name, values in BAD_VALUES.items():
        for value in values:
            yield pytest.param({name: value}, _value_pattern(name, value), id=f"{name}={value!r}")
    # trl_ext's own kl_loss_fn, unused with beta=0, is refused all the same (as GRPOConfig refuses it)
    yield pytest.param({"kl_loss_fn": "bogus", "beta": 0}, _value_pattern("kl_loss_fn", "bogus"), id="kl_loss_fn")


@pytest.mark.parametrize(("overrides", "message"), list(_cases()))
def test_a_bad_value_is_refused_naming_the_field(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        async_config(str(tmp_path), **overrides)


def test_the_message_says_what_is_allowed(tmp_path):
    with pytest.raises(ValueError, match=r"dtype='bogus' is not valid; must be one of 'auto', 'bfloat16', 'float16'"):
        async_config(str(tmp_path), dtype="bogus")
    with pytest.raises(ValueError, match=r"max_inflight_tasks=0 is not valid; must be an integer >= 1, or -1 \(auto\)"):
        async_config(str(tmp_path), max_inflight_tasks=0)
    with pytest.raises(ValueError, match=r"vllm_server_base_url='localhost:8000' .* starting with http:// or https://"):
        async_config(str(tmp_path), vllm_server_base_url="localhost:8000")


def test_trl_defaults_pass(tmp_path):
    trl = TRLAsyncGRPOConfig.__dataclass_fields__
    defaults = {name: trl[name].default for name in TRL_ASYNC_FIELD_CHECKS}
    config = async_config(str(tmp_path), **defaults)
    assert config.token_budget is None and config.max_inflight_tasks == -1 and config.dtype == "float32"


GOOD_VALUES: dict[str, list] = {
    "model_init_kwargs": [None, {"dtype": "bfloat16"}, {}],
    "dtype": ["auto", "bfloat16", "float16", "float32"],
    "trust_remote_code": [True, False],
    "router_aux_loss_coef": [None, 0.0, 0.001],
    "num_generations": [2, 8, np.int64(4)],
    "max_completion_length": [1, 4096, np.int64(16)],
    "temperature": [0.7, 1, 1.5],
    "top_p": [1.0, 0.95, 1],
    "top_k": [-1, 0, 50],
    "min_p": [None, 0.0, 0.05, 1],
    "repetition_penalty": [1.0, 0.9, 1.2],
    "chat_template_kwargs": [None, {"enable_thinking": False}],
    "max_tool_calling_iterations": [None, 0, 5],
    "fork_threshold_tokens": [0, 1024],
    "vllm_server_base_url": ["http://localhost:8000", "https://vllm.example.com:8443/v1"],
    "vllm_server_timeout": [240.0, 10],
    "request_timeout": [600, 30],
    "weight_sync_timeout": [1800, 60],
    "token_budget": [None, 0, -1, 4096],
    "max_inflight_tasks": [-1, 1, 64],
    "queue_maxsize": [0, 1024],
    "heartbeat_stale_after_s": [300.0, 5],
    "log_completions": [True, False],
    "num_completions_to_print": [None, 4],
}


@pytest.mark.parametrize("name", sorted(GOOD_VALUES))
def test_typical_values_pass(tmp_path, name):
    for value in GOOD_VALUES[name]:
        config = async_config(str(tmp_path), **{name: value})
        assert getattr(config, name) == value or (value is None and getattr(config, name) is None)


def test_a_json_dict_string_is_accepted_and_parsed(tmp_path):
    config = async_config(
        str(tmp_path), model_init_kwargs='{"dtype": "bfloat16"}', chat_template_kwargs='{"enable_thinking": "false"}'
    )
    assert config.model_init_kwargs == {"dtype": "bfloat16"}
    assert config.chat_template_kwargs == {"enable_thinking": False}  # converted as TrainingArguments does


def test_every_trl_async_field_has_a_check():
    """A field TRL adds to its AsyncGRPOConfig (an upgrade) is named here until `TRL_ASYNC_FIELD_CHECKS` checks it."""
    assert len(TRL_FIELDS) >= 28, sorted(TRL_FIELDS)
    unchecked = sorted(TRL_FIELDS - set(TRL_ASYNC_FIELD_CHECKS) - CHECKED_IN_CONFIG)
    assert not unchecked, f"TRL's AsyncGRPOConfig fields without a check in trl_field_checks.py: {unchecked}"
    assert not set(TRL_ASYNC_FIELD_CHECKS) - TRL_FIELDS, "the table checks a field TRL's AsyncGRPOConfig lacks"
    assert not set(TRL_ASYNC_FIELD_CHECKS) & CHECKED_IN_CONFIG, "a field checked twice"
    assert set(BAD_VALUES) == TRL_FIELDS, "a field of TRL's without a bad value tested here"
    assert set(GOOD_VALUES) == set(TRL_ASYNC_FIELD_CHECKS)
