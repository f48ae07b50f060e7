"""Components: how a policy loss, an advantage estimator, a KL or an entropy term declares itself.

Pure Python. A component class states each fact about itself once, and everything else is derived:

* `arguments`: its hyperparameters as `Argument` specs (name, type, default, allowed values, help text). The
  constructor takes them as keywords and validates each from its spec (`check_arguments` adds the rules that
  relate several arguments); `default_args()`, the signature `help()` shows, the training configs' fields (with
  TRL-style help metadata and docstrings) and `trl-ext list` are read from them.
* `inputs()`: the batch keys it reads (the named parameters of its call); a trainer hands it exactly those.
* `metrics`: every metric it returns, with how the metric combines over an optimizer window: `SHARE` (the
  micro-batch's share of a window aggregate, summed over micro-batches and processes: the loss terms), `MEAN`
  (a value of the micro-batch, averaged: ratios, fractions), or `MIN` / `MAX` (averaged over the window's
  micro-batches on each process, then the smallest / largest process's value: TRL's `clip_ratio/low_min`, ...).

Each kind has one `Registry` (`POLICY_LOSSES`, `ADVANTAGE_FNS`, `KL_FNS`, `ENTROPY_FNS`): `@REGISTRY.register(name)`
adds a class, `REGISTRY.build(name, **kwargs)` instantiates one with errors that list the valid names and arguments.

    from trl_ext.components import Argument, MEAN, SHARE
    from trl_ext.losses import PolicyLoss, register_policy_loss

    @register_policy_loss("my_pg")
    class MyPolicyGradient(PolicyLoss):
        arguments = (Argument("scale", 1.0, "Multiplies the loss.", gt=0),)
        metrics: ClassVar[dict[str, str]] = {"pg_loss": SHARE}
        ...
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, ClassVar

from ._validation import check_bool, check_choice, check_number, number_rule

SHARE = "share"
"""A metric that is the micro-batch's share of a window aggregate (a loss term): summed over the window."""
MEAN = "mean"
"""A metric that is a value of the micro-batch (a ratio, a fraction, a mean): averaged over the window."""
MIN = "min"
"""A value of the micro-batch, averaged over the window on each process; the smallest process's average is logged."""
MAX = "max"
"""A value of the micro-batch, averaged over the window on each process; the largest process's average is logged."""
METRIC_KINDS = (SHARE, MEAN, MIN, MAX)


@dataclass(frozen=True)
class Argument:
    """One hyperparameter of a component.

    `type` is inferred from `default` when not given (`bool`, `int`, `float`, `str`); `optional=True` also allows
    None (a None default implies it). Numbers are checked against `gt` / `ge` / `lt` / `le`, strings against
    `choices`. `config_name` is the argument's field name in a training config where its own name would collide
    with a TRL field or be ambiguous there (`epsilon` -> `sppo_epsilon`).

    How a training config passes the argument on (by default: always, with the config field's value):
    `config_unset=True` makes the config field default to None, passed on only when set (MIX's reference batch
    geometry: unset means window normalization); `config_when_set=True` keeps the default in the config field but
    passes the argument on only when the user set it, so that the component sees it as not given (`given`): GSPO's
    clip bounds fall back to `clip_range` when not given. `in_config=False` keeps an argument out of
    training configs where a trainer family sets it from a field of its own (the KL term's `kl_coef`: TRL's `beta`).
    """

    name: str
    default: Any
    help: str
    type: type | None = None
    optional: bool = False
    choices: tuple[str, ...] = ()
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    config_name: str = ""
    config_unset: bool = False
    config_when_set: bool = False
    in_config: bool = True

    def __post_init__(self) -> None:
        kind = self.type
        if kind is None:
            if self.default is None:
                raise ValueError(f"argument {self.name!r}: a None default needs an explicit type")
            kind = type(self.default)
        if kind not in (bool, int, float, str):
            raise ValueError(f"argument {self.name!r}: type must be bool, int, float or str, got {kind!r}")
        object.__setattr__(self, "type", kind)
        object.__setattr__(self, "choices", tuple(self.choices))
        if self.default is None:
            object.__setattr__(self, "optional", True)
        self.check("argument spec", self.default)  # the default itself must be allowed

    @property
    def field_name(self) -> str:
        """The argument's name in a training config."""
        return self.config_name or self.name

    @property
    def annotation(self) -> str:
        """The type as a config field annotation: `float`, `str | None`, ..."""
        return self.type.__name__ + (" | None" if self.optional else "")

    @property
    def rule(self) -> str:
        """What a value may be, in words (for help texts)."""
        if self.choices:
            text = "one of " + ", ".join(f"`{c}`" for c in self.choices)
        elif self.type is bool:
            text = "True or False"
        elif self.type is str:
            text = "a string"
        else:
            text = number_rule(self.gt, self.ge, self.lt, self.le, integer=self.type is int)
        return text + (" or None" if self.optional else "")

    def check(self, owner: str, value: Any, name: str = "") -> Any:
        """`value` if this argument allows it, else a ValueError naming `owner`, the argument (as `name`, e.g. its
        config field, when given) and the rule."""
        name = name or self.name
        if value is None and self.optional:
            return value
        if self.choices:
            return check_choice(owner, name, value, (*self.choices, None) if self.optional else self.choices)
        if self.type is bool:
            return check_bool(owner, name, value)
        if self.type is str:
            if not isinstance(value, str):
                raise ValueError(f"{owner}: {name}={value!r} is not valid; must be {self.rule}")
            return value
        bounds = {"gt": self.gt, "ge": self.ge, "lt": self.lt, "le": self.le}
        return check_number(owner, name, value, integer=self.type is int, allow_none=self.optional, **bounds)


class Component:
    """Base of every component kind: arguments from `arguments`, validated at construction (see the module doc)."""

    name: ClassVar[str] = ""
    arguments: ClassVar[tuple[Argument, ...]] = ()
    metrics: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names = [a.name for a in cls.arguments]
        if len(set(names)) != len(names):
            raise TypeError(f"{cls.__name__}: duplicate argument names in {names}")
        bad = {k: v for k, v in cls.metrics.items() if v not in METRIC_KINDS}
        if bad:
            raise TypeError(f"{cls.__name__}: metric kinds must be one of {METRIC_KINDS}, got {bad}")
        params = cls._leading_parameters()
        params += [
            inspect.Parameter(a.name, inspect.Parameter.KEYWORD_ONLY, default=a.default, annotation=a.annotation)
            for a in cls.arguments
        ]
        cls.__signature__ = inspect.Signature(params)  # what inspect.signature(cls), help() and IDEs show

    @classmethod
    def _leading_parameters(cls) -> list[inspect.Parameter]:
        """Parameters before the arguments (a policy loss's `backend`)."""
        return []

    def __init__(self, **kwargs: Any) -> None:
        valid = {a.name: a for a in self.arguments}
        unknown = [k for k in kwargs if k not in valid]
        if unknown:
            raise ValueError(
                f"{self.name}: unknown argument(s) {', '.join(map(repr, unknown))}; valid arguments: "
                f"{', '.join(valid) or 'none'}"
            )
        for name, spec in valid.items():
            setattr(self, name, spec.check(self.name, kwargs.get(name, spec.default)))
        self.given = frozenset(kwargs)
        """The arguments passed explicitly (the others hold their defaults)."""
        self.check_arguments()

    def check_arguments(self) -> None:
        """The rules that relate several arguments (each argument's own rule is in its spec)."""

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        """Every argument's default, by name."""
        return {a.name: a.default for a in cls.arguments}

    @classmethod
    def argument(cls, name: str) -> Argument:
        """The spec of argument `name`."""
        return next(a for a in cls.arguments if a.name == name)

    @property
    def args(self) -> dict[str, Any]:
        """The arguments this instance was built with."""
        return {a.name: getattr(self, a.name) for a in self.arguments}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.args.items())})"


class Registry(dict):
    """The components of one kind by name: `@REGISTRY.register(name)` adds a class, `REGISTRY.build(name, **kwargs)`
    builds one."""

    def __init__(self, kind: str, base: type) -> None:
        super().__init__()
        self.kind = kind
        self.base = base

    def register(self, name: str):
        """Class decorator: store the class under `name` and set its `name` (a duplicate name is an error).

        Args:
            name: The registry name.

        Returns:
            (Callable[[type], type]): The decorator, which returns the class itself.

        Raises:
            TypeError: The decorated class is not a subclass of the registry's `base`.
            ValueError: `name` is already registered.
        """

        def decorator(cls: type) -> type:
            if not (isinstance(cls, type) and issubclass(cls, self.base)):
                raise TypeError(f"a {self.kind} must subclass {self.base.__name__}, got {cls!r}")
            if name in self:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            cls.name = name
            self[name] = cls
            return cls

        return decorator

    def build(self, name: Any, **kwargs: Any) -> Any:
        """An instance of the class registered as `name`, built with `kwargs`.

        Args:
            name: The registry name.
            **kwargs: The component's arguments (its `arguments`; the others keep their defaults).

        Returns:
            The component.

        Raises:
            ValueError: An unknown name (listing the valid ones), an unknown argument (listing the valid ones) or an
                invalid value (naming the argument and its rule).
        """
        if not isinstance(name, str) or name not in self:
            raise ValueError(f"unknown {self.kind} {name!r}; valid names: {', '.join(sorted(self))}")
        return self[name](**kwargs)
