"""Argument checks shared by the losses and the advantage estimators (pure Python).

Every check raises `ValueError("<owner>: <name>=<value> is not valid; must be <rule>")` so that a bad
hyperparameter is reported at construction with the parameter's name and what it may be.
"""

from __future__ import annotations

import inspect
import math
import numbers
from functools import cache
from typing import Any


def number_rule(gt, ge, lt, le, integer: bool) -> str:
    """What `check_number` allows, in words (`an integer >= 1`, `in (0, 1]`, ...)."""
    low = f"({gt:g}" if gt is not None else f"[{ge:g}" if ge is not None else None
    high = f"{lt:g})" if lt is not None else f"{le:g}]" if le is not None else None
    kind = "an integer" if integer else "a finite number"
    if low and high:
        return f"{kind} in {low}, {high}" if integer else f"in {low}, {high}"
    if low:
        return f"{kind + ' ' if integer else ''}{'>' if gt is not None else '>='} {low[1:]}"
    if high:
        return f"{kind + ' ' if integer else ''}{'<' if lt is not None else '<='} {high[:-1]}"
    return kind


def check_number(
    owner: str,
    name: str,
    value: Any,
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    integer: bool = False,
    allow_none: bool = False,
) -> Any:
    """Check that `value` is a finite real (or integer) number within the bounds; return it."""
    if value is None and allow_none:
        return value
    kind = numbers.Integral if integer else numbers.Real
    ok = isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (gt is None or value > gt) and (ge is None or value >= ge)
    ok = ok and (lt is None or value < lt) and (le is None or value <= le)
    if not ok:
        rule = number_rule(gt, ge, lt, le, integer) + (" or None" if allow_none else "")
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isfinite(value):
            rule = f"finite and {rule}" if rule != "a finite number" else rule
        raise ValueError(f"{owner}: {name}={value!r} is not valid; must be {rule}")
    return value


def check_choice(owner: str, name: str, value: Any, choices: tuple | list) -> Any:
    if not any(value is c or (isinstance(value, str) and value == c) for c in choices):
        raise ValueError(f"{owner}: {name}={value!r} is not valid; must be one of {', '.join(map(repr, choices))}")
    return value


def check_bool(owner: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{owner}: {name}={value!r} is not valid; must be True or False")
    return value


@cache
def declared_inputs(func: Any, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The named parameters of `func` (a method: `self` dropped; `*args` / `**kwargs` left out), then `extra`."""
    params = list(inspect.signature(func).parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    named = (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )
    return tuple(dict.fromkeys([*(p.name for p in params if p.kind in named), *extra]))


def required_inputs(component: Any) -> tuple[str, ...]:
    """The inputs a component cannot do without: the named parameters of its `__call__` (its `compute` for an
    advantage function) that have no default."""
    func = getattr(type(component), "compute", None) or type(component).__call__
    params = list(inspect.signature(func).parameters.values())[1:]  # without self
    return tuple(
        p.name
        for p in params
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    )
