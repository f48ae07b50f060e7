"""Checks of the fields TRL's `AsyncGRPOConfig` adds to `transformers.TrainingArguments`, which TRL leaves unchecked.

`TRL_ASYNC_FIELD_CHECKS` holds one rule per field, read from TRL's source (`async_grpo_config.py` and how its trainer
and rollout worker use each value); `check_trl_async_fields` applies them, a bad value raising
`ValueError("<Config>: <field>=<value> is not valid; must be ...")`. `max_staleness`, `weight_sync_steps`, `epsilon`
and `epsilon_high` are checked by `AsyncGRPOConfig.__post_init__` itself.
"""

from __future__ import annotations

import numbers
from functools import partial
from typing import Any

from trl.experimental.async_grpo import AsyncGRPOConfig as _TRLAsyncGRPOConfig

from ..._validation import check_bool, check_choice, check_number
from ..core.config_fields import check_kwargs

DTYPES = tuple(_TRLAsyncGRPOConfig.__dataclass_fields__["dtype"].metadata.get("choices", ("auto", "float32")))
"""The dtypes TRL's field offers (its `choices`): `auto`, `bfloat16`, `float16`, `float32`."""
URL_SCHEMES = ("http://", "https://")


def _number(**bounds: Any):
    return partial(check_number, **bounds)


def check_inflight(owner: str, name: str, value: Any) -> Any:
    """`max_inflight_tasks`: -1 (auto: `max(max_staleness, 1)` optimizer steps of samples) or a positive integer; 0
    would leave TRL's rollout loop no slot to generate in."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value == -1:
        return value
    try:
        return check_number(owner, name, value, ge=1, integer=True)
    except ValueError as err:
        raise ValueError(f"{err}, or -1 (auto)") from None


def check_url(owner: str, name: str, value: Any) -> Any:
    """An http(s) URL of the vLLM server, e.g. `http://localhost:8000`."""
    if not (isinstance(value, str) and value.startswith(URL_SCHEMES) and value not in URL_SCHEMES):
        raise ValueError(
            f"{owner}: {name}={value!r} is not valid; must be a URL starting with "
            f"{' or '.join(URL_SCHEMES)}, e.g. 'http://localhost:8000'"
        )
    return value


TRL_ASYNC_FIELD_CHECKS: dict[str, Any] = {
    # the model
    "model_init_kwargs": check_kwargs,  # None, a dict, or a JSON object string (parsed, as TrainingArguments does)
    "dtype": partial(check_choice, choices=DTYPES),
    "trust_remote_code": check_bool,
    "router_aux_loss_coef": _number(ge=0, allow_none=True),  # None: the model config's; 0: off
    # generation
    "num_generations": _number(ge=1, integer=True),
    "max_completion_length": _number(ge=1, integer=True),
    "temperature": _number(gt=0),  # the trainer divides the logits by it
    "top_p": _number(gt=0, le=1),
    "top_k": _number(ge=-1, integer=True),  # 0 (TRL's) and -1 (vLLM's spelling): off
    "min_p": _number(ge=0, le=1, allow_none=True),  # None or 0: off
    "repetition_penalty": _number(gt=0),
    "chat_template_kwargs": check_kwargs,
    "max_tool_calling_iterations": _number(ge=0, integer=True, allow_none=True),  # None: no limit
    "fork_threshold_tokens": _number(ge=0, integer=True),  # 0: every drift forks a row
    # the vLLM server
    "vllm_server_base_url": check_url,
    "vllm_server_timeout": _number(gt=0),
    "request_timeout": _number(ge=1, integer=True),
    "weight_sync_timeout": _number(ge=1, integer=True),
    # batching and the rollout pipeline
    "token_budget": _number(integer=True, allow_none=True),  # None: the server's max_model_len; <= 0: fixed count
    "max_inflight_tasks": check_inflight,
    "queue_maxsize": _number(ge=0, integer=True),  # 0: unbounded
    "heartbeat_stale_after_s": _number(gt=0),
    # logging
    "log_completions": check_bool,
    "num_completions_to_print": _number(ge=1, integer=True, allow_none=True),  # None: all
}
"""Field of TRL's `AsyncGRPOConfig` -> its check, called as `check(owner, field, value)` and returning the value."""


def check_trl_async_fields(config: Any) -> None:
    """Check each field of `TRL_ASYNC_FIELD_CHECKS` on `config` (a JSON dict string is stored parsed)."""
    owner = type(config).__name__
    for name, check in TRL_ASYNC_FIELD_CHECKS.items():
        value = getattr(config, name)
        checked = check(owner, name, value)
        if checked is not value:
            setattr(config, name, checked)
