"""Checks of the hardware settings of a config, run when the config is built (before any model is loaded).

* a device (`teacher_device`) or a `device_map` (in `model_init_kwargs`, `teacher_model_init_kwargs`, ...) must name a
  device that exists on this machine: `cuda:3` on a 2-GPU machine would otherwise fail deep inside
  `from_pretrained`, after the student has been loaded;
* the mixed precision that `accelerate launch` was given (its config's `mixed_precision`, passed to the program as
  `ACCELERATE_MIXED_PRECISION`) must agree with the training arguments' `bf16` / `fp16`: transformers silently
  lets one override the other, so a run would train in a precision the user did not ask for.
"""

from __future__ import annotations

import os
from typing import Any

import torch

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


def check_hardware(config: Any) -> None:
    """A training config's hardware settings, once its fields are parsed: the launcher's mixed precision agrees with
    `bf16` / `fp16`, and the `device_map` of every `*_init_kwargs` field names only devices of this machine."""
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
