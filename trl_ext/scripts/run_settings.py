"""The run summary's settings line: what the run trains with beyond the family's defaults.

    dapo settings: the paper's clip_range_high=0.28, clip_ratio_c=None, dynamic_sampling=True, overlong_buffer=1
      (max_completion_length / 5); changed: dynamic_sampling_max_rounds=30 (default 10)

* `the paper's`: the algorithm's paper settings (its record's `paper_settings`) the run keeps, where they differ
  from the family's defaults (DAPO's clip-higher, dynamic sampling and overlong shaping);
* then every setting the command line or a `--config` recipe changed from the config's default: the algorithm's own
  fields (`trl-ext list NAME`'s) and the settings trl_ext's family config adds to TRL's (`family_settings`:
  `dynamic_sampling`, `overlong_buffer`, the rollout correction, ...), except those the summary shows elsewhere.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Sequence
from typing import Any

from ..algorithms import get_algorithm


def shown_value(value: Any) -> str:
    """A config value as the summary prints it; an enum as its value (`'steps'`, not `<IntervalStrategy...>`)."""
    return repr(getattr(value, "value", value))


def family_settings(config_class: type, algorithm: str) -> list[dataclasses.Field]:
    """The fields trl_ext's family config adds to TRL's config (none for DPO and SFT, whose settings are TRL's)."""
    from ..trainers.core.config_conversion import trl_config_of
    from ..trainers.core.family_classes import get_family_classes
    from ..trainers.core.model_card import config_family

    classes = get_family_classes(config_family(config_class, algorithm).name)
    trl_config = trl_config_of(classes.settings_base)
    trl_fields = {f.name for f in dataclasses.fields(trl_config)} if trl_config else set()
    return [f for f in dataclasses.fields(classes.settings_base) if f.name not in trl_fields]


def _is_default(value: Any, default: Any) -> bool:
    from ..trainers.core.documented_defaults import is_documented_default

    return value == default or is_documented_default(value)  # a value the config worked out itself


def algorithm_overrides(args: Any, algorithm: str, shown: Sequence[str] = ()) -> list[str]:
    """`name=value (default d)` for each of the algorithm's own config fields and its family's settings that differ
    from the config's default, except those in `shown`."""
    from ..trainers.core.model_card import algorithm_fields, field_default

    defaults = {f.name: field_default(f) for f in dataclasses.fields(type(args))}
    names = [f.name for f in algorithm_fields(type(args), algorithm)]
    names += [f.name for f in family_settings(type(args), algorithm) if f.name not in names]
    return [
        f"{name}={shown_value(getattr(args, name))} (default {shown_value(defaults[name])})"
        for name in names
        if name not in shown and not _is_default(getattr(args, name), defaults[name])
    ]


def paper_settings_kept(args: Any, algorithm: str) -> list[str]:
    """`name=value` for each paper setting of the algorithm's record that the run keeps."""
    from ..trainers.grpo.overlong_reward import PAPER_LENGTH_TO_BUFFER

    defaults = {f.name: f.default for f in dataclasses.fields(type(args))}
    kept = []
    for name, _ in get_algorithm(algorithm).paper_settings:
        value = getattr(args, name, None)
        if name in defaults and _is_default(value, defaults[name]):
            automatic = f" (max_completion_length / {PAPER_LENGTH_TO_BUFFER})" if name == "overlong_buffer" else ""
            kept.append(f"{name}={shown_value(value)}{automatic}")
    return kept


def settings_lines(args: Any, algorithm: str, shown: Sequence[str] = (), width: int = 118) -> list[str]:
    """The summary's settings line, wrapped (see the module docstring)."""
    paper, changed = paper_settings_kept(args, algorithm), algorithm_overrides(args, algorithm, shown)
    parts = [f"the paper's {', '.join(paper)}"] if paper else []
    if changed:
        parts.append(("changed: " if paper else "") + ", ".join(changed))
    text = f"  {algorithm} settings: " + ("; ".join(parts) or "the algorithm's defaults")
    return textwrap.wrap(text, width=width, subsequent_indent="      ")
