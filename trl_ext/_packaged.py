"""The YAML files shipped in the package (`trl_ext/configs/`, the repository's `configs/` links to it): the algorithms'
recipes, which `--config NAME` reads, and the accelerate configs, which `trl-ext train --accelerate_config NAME`
launches with. Pure Python (no torch or trl import)."""

from __future__ import annotations

import os

CONFIGS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
"""`trl_ext/configs`: one recipe per algorithm, `<algorithm>.yaml`."""

ACCELERATE_DIR = os.path.join(CONFIGS_DIR, "accelerate")
"""`trl_ext/configs/accelerate`: single device, DDP, DeepSpeed ZeRO-2 / ZeRO-3 (GPU and CPU), FSDP2."""

ACCELERATE_ALIASES = {
    # the names of TRL's packaged accelerate configs (`trl <command> --accelerate_config NAME`) that ours match
    "single_gpu": "single_device",
    "zero2": "deepspeed_zero2",
    "zero3": "deepspeed_zero3",
    "fsdp2": "fsdp",
    # and the CPU variants, by the same pattern
    "zero2_cpu": "deepspeed_zero2_cpu",
    "zero3_cpu": "deepspeed_zero3_cpu",
}
"""Short names of the packaged accelerate configs, besides their file stems (`multi_gpu`, `deepspeed_zero3`, ...)."""


def _stems(directory: str) -> list[str]:
    return sorted(name[: -len(".yaml")] for name in os.listdir(directory) if name.endswith(".yaml"))


def recipe_names() -> list[str]:
    """The packaged recipes' names (`sapo`, `dpo`, ...), which `--config` takes in place of a file."""
    return _stems(CONFIGS_DIR)


def accelerate_config_names() -> list[str]:
    """The packaged accelerate configs' names (their file stems, then the aliases), which `--accelerate_config` takes in
    place of a file."""
    return [*_stems(ACCELERATE_DIR), *ACCELERATE_ALIASES]


def _is_name(value: str) -> bool:
    return "/" not in value and os.sep not in value and not value.endswith((".yaml", ".yml"))


def find_recipe(value: str) -> str | None:
    """The file `--config value` reads: `value` when it is a file (a file wins over a name), else the packaged recipe
    named `value` (a bare name: no path separator, no `.yaml`); None when it is neither."""
    if os.path.isfile(value):
        return value
    path = os.path.join(CONFIGS_DIR, f"{value}.yaml")
    return path if _is_name(value) and os.path.isfile(path) else None


def find_accelerate_config(value: str) -> str | None:
    """The accelerate config file `--accelerate_config value` names: `value` when it is a file, else the packaged
    config with that stem or alias (`zero3` -> `deepspeed_zero3.yaml`); None when it is neither."""
    if os.path.isfile(value):
        return value
    if not _is_name(value):
        return None
    path = os.path.join(ACCELERATE_DIR, f"{ACCELERATE_ALIASES.get(value, value)}.yaml")
    return path if os.path.isfile(path) else None
