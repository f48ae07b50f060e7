"""What trl_ext's config classes (the GRPO family's, DPO's, SFT's) share: TRL's field defaults, the checks of text,
keyword-dict and KL-coefficient fields (a bad value is a ValueError naming the config class, the field, the value and
what it may be), a component built with its errors named after the config's fields (`build_named`), and the TRL-style
parameter list of a config's docstring (`document_parameters`)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ...losses.kl import KL_FNS
from .documented_defaults import is_documented_default

try:  # how TrainingArguments converts the values of the JSON dicts it parses ("true" -> True, "1" -> 1)
    from transformers.training_args import _convert_str_dict
except ImportError:  # pragma: no cover - a private helper of transformers

    def _convert_str_dict(passed_value: dict) -> dict:
        return passed_value


def build_named(owner: str, what: str, build, renames: dict[str, str] | None = None):
    """`build()`, with a component's ValueError re-raised naming the config class (`owner`) and the config's field
    names (`renames`: config field -> component argument)."""
    try:
        return build()
    except ValueError as err:
        message = str(err)
        for config_name, argument in (renames or {}).items():
            message = message.replace(f" {argument}=", f" {config_name}=")
        raise ValueError(f"{owner} ({what}): {message}") from None


def trl_defaults(config_class: type) -> dict[str, Any]:
    """The field defaults of a TRL config class (default factories called)."""
    return {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(config_class)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }


def resolve_kl_coefficient(owner: str, kl_loss_fn: str, name: str, value: Any) -> float:
    """The effective KL coefficient of field `name`: 0 with `kl_loss_fn="none"` (an explicit non-zero value is then
    an error), else the value (a plain float in place of the documented default)."""
    if kl_loss_fn == "none":
        if not is_documented_default(value) and value != 0:
            raise ValueError(
                f"{owner}: {name}={value!r} adds a KL term but kl_loss_fn='none' turns it off; choose an estimator "
                f"with kl_loss_fn (one of {', '.join(repr(k) for k in sorted(KL_FNS) if k != 'none')}) or set "
                f"{name}=0 (or leave it unset)"
            )
        return 0.0
    return float(value) if is_documented_default(value) else value


def check_text(owner: str, name: str, value: Any, *, allow_none: bool = True) -> Any:
    """A non-empty string (or None)."""
    if value is None and allow_none:
        return value
    if not isinstance(value, str) or not value.strip():
        rule = "a non-empty string" + (" or None" if allow_none else "")
        raise ValueError(f"{owner}: {name}={value!r} is not valid; must be {rule}")
    return value


def check_kwargs(owner: str, name: str, value: Any) -> dict[str, Any] | None:
    """None, a dict with string keys, or (from the command line) a JSON object string, returned parsed."""
    rule = """must be a dict (a JSON object on the command line, e.g. '{"dtype": "bfloat16"}') or None"""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"{owner}: {name}={value!r} {rule}; it is not valid JSON ({err})") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"{owner}: {name}={value!r} {rule}")
        value = _convert_str_dict(parsed)  # as TrainingArguments converts its own JSON dict fields
    if value is not None and not (isinstance(value, dict) and all(isinstance(k, str) for k in value)):
        raise ValueError(f"{owner}: {name}={value!r} {rule}, with string keys")
    return value


def document_parameters(cls: type, base: type, closing: str) -> type:
    """Append a TRL-style parameter list of `cls`'s fields that `base` does not have to its docstring, then
    `closing` (where the other parameters come from)."""
    shared = {f.name for f in dataclasses.fields(base)}
    own = [f for f in dataclasses.fields(cls) if f.name not in shared]
    lines = ["", "    Parameters specific to this algorithm:", ""]
    for f in own:
        default = getattr(cls, f.name, f.default)
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        lines.append(f"        {f.name} (`{kind}`, *optional*, defaults to `{default!r}`):")
        lines.append(f"            {f.metadata['help']}")
    lines += ["", f"    {closing}"]
    cls.__doc__ = (cls.__doc__ or "").rstrip() + "\n" + "\n".join(lines) + "\n"
    return cls
