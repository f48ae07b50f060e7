"""A default the user did not set, told apart from the same value given: a config field's dataclass default that
its `__post_init__` may replace (a coefficient switched off by another field, TRL's loss selector, a count worked out
from another field) and the run summary does not list as a change. Each marker compares, prints and computes as its
value, so the help text, the docstrings, `trl-ext list` and `dataclasses.fields(...)` show the real default."""

from __future__ import annotations

from typing import Any


class DocumentedDefault(float):
    """A float field's documented default, told apart from the same value set explicitly (`kl_coef=0.001`).

    A coefficient whose term can be switched off by another field (`kl_loss_fn="none"`) takes this as its dataclass
    default: the config resolves it to a plain float in `__post_init__`, and only an explicitly set non-zero value
    contradicts the switch. It compares, prints and computes as the float itself, so the help text, the docstring,
    `trl-ext list` and `dataclasses.fields(...)` show the real default.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return float.__repr__(self)

    __str__ = __repr__


class _DocumentedDefaultStr(str):
    """`DocumentedDefault` for a string value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str.__repr__(self)


class _DocumentedDefaultInt(int):
    """`DocumentedDefault` for a count a config works out itself (`overlong_buffer=None`: a fifth of the length)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return int.__repr__(self)

    __str__ = __repr__


def documented_default(value: Any, integer: bool = False) -> Any:
    """`value` marked as a default the user did not set (None stays None); `integer`: an int stays an int."""
    if isinstance(value, str):
        return _DocumentedDefaultStr(value)
    if integer and isinstance(value, int) and not isinstance(value, bool):
        return _DocumentedDefaultInt(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return DocumentedDefault(value)
    if value is None:
        return None
    raise TypeError(f"no documented-default marker for {value!r}")


def is_documented_default(value: Any) -> bool:
    """True when a field holds a default the user did not set (`documented_default`)."""
    return isinstance(value, (DocumentedDefault, _DocumentedDefaultStr, _DocumentedDefaultInt))
