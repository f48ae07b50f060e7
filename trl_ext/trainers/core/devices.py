"""Checks of the hardware settings of a config, run when the config is built (before any model is loaded).

* a device (`teacher_device`) or a `device_map` (in `model_init_kwargs`, `teacher_model_init_kwargs`, ...) must name a
  device that exists on this machine: `cuda:3` on a 2-GPU machine would otherwise fail deep inside
  `from_pretrained`, after the student has been loaded;
* the mixed precision that `accelerate launch` was given (its config's `mixed_precision`, passed to the program as
  `ACCELERATE_MIXED_PRECISION`) must agree with the training arguments' `bf16` / `fp16`: transformers silently
  lets one override the other, so a run would train in a precision the user did not ask for.

`check_hardware` first checks the plain `TrainingArguments` values (`check_training_arguments`): a negative learning
rate or a batch size of 0 would otherwise load the model and fail in torch's optimizer or the data loader.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ..._validation import check_number

DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")
"""`device_map` values that let accelerate place the model (transformers' `from_pretrained`)."""

_ANYWHERE = ("cpu", "meta", "disk")


def _available(kind: str) -> tuple[bool, int]:
    """Whether the accelerator type `kind` (cuda, xpu, mps, npu, ...) is usable here, and how many devices it has."""
    backend = getattr(torch, kind, None)
    if backend is None or not hasattr(backend, "is_available"):
        return False, 0
    available = bool(backend.is_available())
    count = backend.device_count() if hasattr(backend, "device_count") else 1
    return available, int(count) if available else 0


def _accelerator_type() -> str:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return accelerator.current_accelerator().type
    return "cuda"


def check_device(owner: str, name: str, value: Any, *, allow_disk: bool = False) -> Any:
    """`value` (a device name, index or `torch.device`) names a device that exists here; return it unchanged."""
    rule = "a device of this machine such as 'cpu', 'cuda' or 'cuda:0'"
    try:
        if isinstance(value, bool) or not isinstance(value, (str, int, torch.device)):
            raise TypeError
        if allow_disk and value == "disk":
            return value
        # an index is a device of the machine's accelerator (transformers' `device_map` convention)
        device = torch.device(_accelerator_type(), value) if isinstance(value, int) else torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{owner}: {name}={value!r} is not a device; must be {rule}") from None
    if device.type in _ANYWHERE:
        return value
    available, count = _available(device.type)
    if not available:
        raise ValueError(
            f"{owner}: {name}={value!r} names a {device.type} device, but {device.type} is not available on this "
            f"machine; must be {rule}"
        )
    if device.index is not None and device.index >= count:
        ids = ", ".join(f"'{device.type}:{i}'" for i in range(count))
        raise ValueError(
            f"{owner}: {name}={value!r} does not exist: this machine has {count} {device.type} device(s) ({ids})"
        )
    return value


def check_device_map(owner: str, name: str, device_map: Any) -> None:
    """A `device_map` (None, a placement strategy, a device, or a dict of module -> device) that names only
    devices of this machine."""
    if device_map is None or (isinstance(device_map, str) and device_map in DEVICE_MAP_STRATEGIES):
        return
    if isinstance(device_map, dict):
        for module, device in device_map.items():
            check_device(owner, f"{name}[{module!r}]", device, allow_disk=True)
        return
    if isinstance(device_map, str) and device_map not in _ANYWHERE:
        try:
            torch.device(device_map)
        except RuntimeError:
            raise ValueError(
                f"{owner}: {name}={device_map!r} is not valid; must be one of "
                f"{', '.join(map(repr, DEVICE_MAP_STRATEGIES))}, a device, or a dict of module name -> device"
            ) from None
    check_device(owner, name, device_map)


def _strategy(value: Any) -> str:
    return getattr(value, "value", value)


def check_training_arguments(config: Any) -> None:
    """The plain `transformers.TrainingArguments` values of a training config that cannot work, each named with its
    allowed range: `learning_rate` and `weight_decay` >= 0, `adam_beta1` / `adam_beta2` in [0, 1), `adam_epsilon` > 0,
    `max_grad_norm` >= 0 or None, `warmup_ratio` >= 0 (where the field exists), `num_train_epochs` > 0 unless
    `max_steps` > 0, the batch sizes and `gradient_accumulation_steps` integers >= 1, `logging_steps` / `save_steps` /
    `eval_steps` > 0 when their strategy is "steps", `seed` (and `data_seed`) an integer in [0, 2**32) (numpy's
    seeds). Raises `ValueError("<ConfigClass>: <field>=<value> is not valid; must be <rule> (<what it is>)")`.

    transformers' own `__post_init__` already refuses a negative `warmup_steps` (by name), `logging_steps=0` with the
    "steps" strategy and fractional step counts > 1; those are not repeated here."""
    owner = type(config).__name__

    def check(name: str, hint: str, **bounds: Any) -> None:
        try:
            check_number(owner, name, getattr(config, name), **bounds)
        except ValueError as error:
            raise ValueError(f"{error} ({hint})") from None

    check("learning_rate", "the optimizer's step size", ge=0)
    check("weight_decay", "the optimizer's decoupled weight decay", ge=0)
    check("adam_beta1", "Adam's first-moment decay", ge=0, lt=1)
    check("adam_beta2", "Adam's second-moment decay", ge=0, lt=1)
    check("adam_epsilon", "Adam's denominator term", gt=0)
    check("max_grad_norm", "the gradient-clipping norm; 0 or None turns clipping off", ge=0, allow_none=True)
    if hasattr(config, "warmup_ratio"):  # transformers < 5; 5 takes a fraction in warmup_steps
        check("warmup_ratio", "the fraction of the steps spent warming up", ge=0, le=1)
    check("max_steps", "the number of optimizer steps; -1 trains num_train_epochs epochs", integer=True)
    if config.max_steps <= 0:
        check("num_train_epochs", "the number of epochs to train, used when max_steps is not > 0", gt=0)
    check("per_device_train_batch_size", "the training samples per device and micro-batch", ge=1, integer=True)
    check("per_device_eval_batch_size", "the evaluation samples per device and batch", ge=1, integer=True)
    check("gradient_accumulation_steps", "the micro-batches per optimizer step", ge=1, integer=True)
    intervals = {"logging": "log", "save": "save a checkpoint", "eval": "evaluate"}
    for kind, action in intervals.items():
        if _strategy(getattr(config, f"{kind}_strategy", "no")) == "steps":
            hint = f"{action} every that many steps, or that fraction of the run if < 1, when {kind}_strategy='steps'"
            check(f"{kind}_steps", hint, gt=0)
    for name, hint in (("seed", "the run's random seed"), ("data_seed", "the data sampler's seed; None uses seed")):
        check(name, hint, ge=0, integer=True, allow_none=name == "data_seed")
        value = getattr(config, name)
        if value is not None and value >= 2**32:
            raise ValueError(
                f"{owner}: {name}={value!r} is not valid; must be an integer in [0, 2**32) ({hint}, "
                "which numpy's seeding takes)"
            )


def check_hardware(config: Any) -> None:
    """A training config's settings that `TrainingArguments` lets through, once its fields are parsed: the plain
    training values (`check_training_arguments`), the launcher's mixed precision agrees with `bf16` / `fp16`, and the
    `device_map` of every `*_init_kwargs` field names only devices of this machine."""
    check_training_arguments(config)
    owner = type(config).__name__
    check_mixed_precision(owner, config)
    for name in config._VALID_DICT_FIELDS:
        kwargs = getattr(config, name, None)
        if name.endswith("_init_kwargs") and isinstance(kwargs, dict) and "device_map" in kwargs:
            check_device_map(owner, f"{name}['device_map']", kwargs["device_map"])


def check_mixed_precision(owner: str, config: Any) -> None:
    """The launcher's mixed precision (`accelerate launch`'s config or `--mixed_precision`) agrees with `bf16` /
    `fp16`. An unset launcher value, or 'no', leaves the choice to the training arguments."""
    launcher = os.environ.get("ACCELERATE_MIXED_PRECISION", "no").lower()
    wanted = "fp16" if config.fp16 else "bf16" if config.bf16 else "no"
    if launcher in ("", "no") or launcher == wanted:
        return
    settings = {"bf16": "bf16=True", "fp16": "fp16=True and bf16=False"}
    fix = f"set {settings[launcher]} in the training arguments, or " if launcher in settings else ""
    raise ValueError(
        f"{owner}: accelerate was launched with mixed_precision={launcher!r} (its config file or --mixed_precision, "
        f"passed as ACCELERATE_MIXED_PRECISION), but the training arguments ask for bf16={config.bf16}, "
        f"fp16={config.fp16} ({'full precision' if wanted == 'no' else wanted}), and transformers would silently "
        f"train in one of the two. Make them agree: {fix}set the accelerate config's mixed_precision to {wanted!r} "
        "(or 'no', to let the training arguments decide)"
    )
