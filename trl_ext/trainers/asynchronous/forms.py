"""The asynchronous form of each GRPO-family algorithm: `AsyncSAPOConfig`, ... for `AsyncGRPOTrainer`.

    from trl_ext import AsyncGRPOTrainer, AsyncSAPOConfig        # or async_config_class("sapo")
    args = AsyncSAPOConfig(output_dir="out", tau_pos=2.0, max_staleness=2)
    AsyncGRPOTrainer(model_path, reward_funcs, args=args, train_dataset=prompts).train()

An algorithm's asynchronous config is `AsyncGRPOConfig` (TRL's asynchronous fields, the rollout worker, the
corrections for stale samples) with the fields its synchronous config takes from its record, under the same names and
with the same defaults (`algorithm_fields`: the loss's and the advantage's arguments, the KL estimator, the group
size): `AsyncSAPOConfig(tau_pos=2.0)` trains what `SAPOConfig(tau_pos=2.0)` trains, asynchronously. `trl-ext train
--algorithm sapo --asynchronous true` (and `examples/train_sapo.py --asynchronous true`) builds it from the same flags.
GRPO's own asynchronous form is `AsyncGRPOConfig`, whose defaults are TRL's asynchronous objective (the `async_grpo`
record; Trinity-RFT's GRPO is four settings away, see its docstring).

An algorithm whose parts the asynchronous trainer cannot feed yet has no asynchronous form: `async_config_class`
raises, naming the reason (the config's own error, e.g. a multi-turn estimator, or the family's
`synchronous_only`). The classes are built from the records on first use and cached; this module's `__getattr__`
names them, so a pickled config (a checkpoint's `training_args.bin`) loads in any process.
"""

from __future__ import annotations

import dataclasses
import warnings
from functools import cache

from ...algorithms import ALGORITHMS, get_algorithm
from ..core.arguments import CriticArguments, TeacherArguments, algorithm_fields
from ..mix.config import MIXComposition
from .config import AsyncGRPOConfig
from .critic import AsyncCriticConfig
from .distill import AsyncDistillConfig
from .mix import AsyncMIXFamilyConfig

GRPO_ASYNC_FORM = "async_grpo"
"""The record whose config (`AsyncGRPOConfig`, TRL's asynchronous objective) is GRPO's asynchronous form."""
_NOT_FIELDS = ("kl_penalty_fn",)  # a KL penalty in the reward needs a reference model in the rollout worker: none


def async_config_name(algorithm: str) -> str:
    """The name of algorithm `algorithm`'s asynchronous config: `Async` + its config's (`AsyncSAPOConfig`)."""
    if algorithm in ("grpo", GRPO_ASYNC_FORM):
        return AsyncGRPOConfig.__name__
    return "Async" + get_algorithm(algorithm).class_names[0]


def async_config_class(algorithm: str) -> type[AsyncGRPOConfig]:
    """Algorithm `algorithm`'s asynchronous config class (see the module docstring).

    Raises:
        ValueError: An unknown algorithm (naming the known ones), one that does not generate (DPO, SFT), or one the
            asynchronous trainer cannot train yet (naming why).
    """
    form = _form(algorithm)
    if isinstance(form, str):
        family = get_algorithm(algorithm).family
        yet = " yet" if family is not None and family.schema == "experience" else ""
        raise ValueError(f"{algorithm} has no asynchronous form{yet}: {form}")
    return form


def async_refusal(algorithm: str) -> str | None:
    """Why algorithm `algorithm` has no asynchronous form (None when it has one)."""
    form = _form(algorithm)
    return form if isinstance(form, str) else None


def async_algorithms() -> dict[str, str | None]:
    """Each algorithm that generates (the `experience` families), with None where it trains asynchronously, else the
    reason it does not yet."""
    return {
        spec.name: async_refusal(spec.name)
        for spec in ALGORITHMS.values()
        if spec.has_trainer and spec.family.schema == "experience" and spec.name != GRPO_ASYNC_FORM
    }


@cache
def _form(algorithm: str) -> type[AsyncGRPOConfig] | str:
    """The asynchronous config of `algorithm`, built from its record, or the reason it has none."""
    if algorithm in ("grpo", GRPO_ASYNC_FORM):
        return AsyncGRPOConfig
    spec = get_algorithm(algorithm)
    family = spec.family
    if family is None or family.schema != "experience":
        return (
            "it trains on a fixed dataset (asynchronous training overlaps generation with training; only the "
            "algorithms that generate have it)"
        )
    if family.async_family != "async":
        return family.synchronous_only
    name = async_config_name(algorithm)
    # what the synchronous config adds to the GRPO family's comes along: the teacher (on-policy distillation,
    # `AsyncDistillConfig`), the expert demonstrations and the mixing loss (MIX, `AsyncMIXFamilyConfig`)
    # and the critic (critic PPO, `AsyncCriticConfig`)
    base = (
        AsyncDistillConfig if issubclass(spec.config_class, TeacherArguments)
        else AsyncMIXFamilyConfig if issubclass(spec.config_class, MIXComposition)
        else AsyncCriticConfig if issubclass(spec.config_class, CriticArguments)
        else AsyncGRPOConfig
    )  # fmt: skip
    fields = [entry for entry in algorithm_fields(algorithm, base) if entry[0] not in _NOT_FIELDS]
    doc = (
        f"The asynchronous form of [`{spec.class_names[0]}`] for [`AsyncGRPOTrainer`]: {spec.description} Its "
        f"own fields are {spec.class_names[0]}'s, with the same defaults ({', '.join(f[0] for f in fields)}); every "
        "other field is `AsyncGRPOConfig`'s (and the teacher's, `AsyncDistillConfig`, for a distillation algorithm)."
    )
    namespace = {"__module__": __name__, "__qualname__": name, "__doc__": doc, "algorithm": algorithm}
    config = dataclasses.make_dataclass(name, fields, bases=(base,), namespace=namespace)
    try:  # the parts the worker and the trainer cannot feed are refused by the config itself
        with warnings.catch_warnings():  # transformers' deprecation notices of TRL's defaults: not the user's
            warnings.simplefilter("ignore", FutureWarning)
            config(output_dir="async-form-check", rollout_backend="transformers", token_budget=0, use_cpu=True)
    except ValueError as error:
        return str(error)
    return config


def algorithm_named(name: str) -> str | None:
    """The algorithm whose asynchronous config is named `name` (`AsyncSAPOConfig` -> `sapo`), if any."""
    return next(
        (s.name for s in ALGORITHMS.values() if s.has_trainer and s.family.async_family == "async" and
         async_config_name(s.name) == name),
        None,
    )  # fmt: skip


def __getattr__(name: str) -> type[AsyncGRPOConfig]:
    """`AsyncSAPOConfig`, ... by name, built on first access (also where pickle finds a saved config's class, in a
    process that has not built it yet); an algorithm without a form is an AttributeError saying why."""
    algorithm = algorithm_named(name)
    if algorithm is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return async_config_class(algorithm)
    except ValueError as error:
        raise AttributeError(f"{name}: {error}") from None


__all__ = [
    "GRPO_ASYNC_FORM",
    "algorithm_named",
    "async_algorithms",
    "async_config_class",
    "async_config_name",
    "async_refusal",
]
