"""The algorithm record and its registry: `AlgorithmSpec` (one algorithm: its paper, default components, trainer
family and Trinity-RFT's flags), `Paper`, `ALGORITHMS`, `get_algorithm` and `register_algorithm`.

The built-in records are `trl_ext.algorithms`'s table, which fills `ALGORITHMS` when `trl_ext` is imported; a record
added later is one `register_algorithm(AlgorithmSpec(...))`. Pure Python: the config and trainer classes are loaded on
first use (`provide_classes`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .families import FAMILIES, TrainerFamily, get_family

ClassSource = Callable[[str], tuple[type, type]]
"""What gives an algorithm's `(config class, trainer class)` by its name (`trl_ext.trainers.algorithm_classes`)."""

_class_source: ClassSource | None = None


def provide_classes(source: ClassSource) -> None:
    """Set where `AlgorithmSpec.config_class` / `trainer_class` get an algorithm's classes: a function that loads
    the trainers on first use (so `import trl_ext` still needs only torch)."""
    global _class_source
    _class_source = source


@dataclass(frozen=True)
class Paper:
    """An algorithm's paper: the one citation its model cards, `trl-ext list` and the docs use.

    `str(paper)` is `"<title> (arXiv <arxiv>)"`; `year` is read off the arXiv id (`"2402.03300"` -> 2024).

    Attributes:
        title: The paper's title.
        arxiv: Its arXiv id, `YYMM.NNNNN`.
    """

    title: str
    arxiv: str

    def __str__(self) -> str:
        return f"{self.title} (arXiv {self.arxiv})"

    @property
    def year(self) -> int:
        """The year of the arXiv id (its first two digits, 20YY)."""
        return 2000 + int(self.arxiv[:2])


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm's record (frozen; `register_algorithm` adds one).

    `schema` and `sample_strategy` are the family's. (Trinity-RFT's `compute_advantage_in_trainer` and
    `can_balance_batch` say where its explorer / trainer split computes advantages and whether its batches may be
    re-balanced over data-parallel ranks; a TRL trainer computes every advantage after generation, in one process
    group, so they would mean nothing here and are not recorded.) Its config and trainer classes are
    `config_class` / `trainer_class` (the trainers' package is imported on first use, `provide_classes`).

    Attributes:
        name: The algorithm's name (`get_algorithm`, `trl-ext train --algorithm`).
        description: One line, shown in `trl-ext list`, the model cards and the config's docstring.
        paper: Its paper, or None.
        policy_loss_fn: The default policy loss (a `trl_ext.losses.POLICY_LOSSES` name); None for a family whose loss
            is its trainer's own objective (`TrainerFamily.objective`, named by `loss_name`).
        advantage_fn: The default advantage estimator (an `ADVANTAGE_FNS` name), None where the family takes none.
        kl_loss_fn: The default KL-loss estimator (a `KL_FNS` name; `none`: no KL term).
        entropy_loss_fn: The default entropy term (an `ENTROPY_FNS` name; `none`: no bonus).
        use_reference: Trinity-RFT's flag: it may have a KL term to a reference model (without it the config refuses
            a KL coefficient, and no reference model is loaded).
        repeat_times: Trinity-RFT's default group size (an integer >= 1): the config's `num_generations`.
        use_critic: Trinity-RFT's flag: it trains a value model (only a family with a critic can take it).
        kl_penalty_fn: The in-reward KL penalty of the reference's `default_config()` (a `KL_FNS` name; `none`).
        trainer: Its trainer family (a `trl_ext.families` name), None for a record without a trainer yet (its
            losses are in `trl_ext.losses`).
        class_prefix: Names the classes (`SAPO` -> `SAPOConfig`, `SAPOTrainer`); default: the upper-case name.
        display_name: The algorithm's name in model cards; default: the upper-case name.
        details: Appended to the config's docstring (what the description leaves out, e.g. TRL's equivalent
            settings).
        trl_losses: The config also accepts TRL's own loss selection (`loss_type`, `epsilon`, ...) and then trains
            TRL's loss (`trl_ext.losses.trl_grpo`): the algorithm that `trl.GRPOTrainer` users swap in.
        argument_defaults: `(argument name, value)` pairs: the algorithm's own defaults for arguments of its policy
            loss or advantage where they differ from the component's (asynchronous GRPO's are TRL's objective).
        paper_settings: `(config field, value)` pairs: the settings of the algorithm's paper that the reference's
            record leaves at its components' and its family's defaults (DAPO's clip-higher, dynamic sampling and
            overlong shaping). They are the config's defaults, while the flags above stay the reference's (parity
            with Trinity-RFT's table); each names an argument of the policy loss or advantage, or a field of the
            family's config.

    Raises:
        ValueError: An unknown `trainer` family (naming the registered ones), an `advantage_fn` for a family that
            takes none, a `policy_loss_fn` for a family with an objective (or None for one without), `use_critic`
            for a family without a critic, or `repeat_times` not an integer >= 1.
    """

    name: str
    description: str
    paper: Paper | None
    policy_loss_fn: str | None
    advantage_fn: str | None
    kl_loss_fn: str
    entropy_loss_fn: str
    use_reference: bool
    repeat_times: int
    use_critic: bool = False
    kl_penalty_fn: str = "none"
    trainer: str | None = "grpo"
    class_prefix: str = ""
    display_name: str = ""
    details: str = ""
    trl_losses: bool = False
    argument_defaults: tuple[tuple[str, Any], ...] = ()
    paper_settings: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.trainer is not None:
            family = get_family(self.trainer)  # an unknown family is a ValueError naming the registered ones
            if self.advantage_fn is not None and "advantage_fn" not in family.components:
                raise ValueError(
                    f"algorithm {self.name!r}: advantage_fn={self.advantage_fn!r}, but trainer family "
                    f"{self.trainer!r} takes no advantage function (its components: {', '.join(family.components)})"
                )
            if (self.policy_loss_fn is None) != bool(family.objective):
                wanted = "None: its loss is the family's objective" if family.objective else "a policy loss's name"
                raise ValueError(
                    f"algorithm {self.name!r}: policy_loss_fn={self.policy_loss_fn!r} is not valid for trainer family "
                    f"{self.trainer!r}; must be {wanted}"
                )
            if self.use_critic and not family.uses_critic:
                raise ValueError(
                    f"algorithm {self.name!r}: use_critic=True needs a trainer family that trains a value model; "
                    f"trainer={self.trainer!r} does not (families with a critic: "
                    f"{', '.join(n for n, f in FAMILIES.items() if f.uses_critic) or 'none yet'})"
                )
        if isinstance(self.repeat_times, bool) or not isinstance(self.repeat_times, int) or self.repeat_times < 1:
            raise ValueError(f"algorithm {self.name!r}: repeat_times={self.repeat_times!r} must be an integer >= 1")
        if not self.class_prefix:
            object.__setattr__(self, "class_prefix", self.name.upper())
        if not self.display_name:
            object.__setattr__(self, "display_name", self.name.upper())

    @property
    def family(self) -> TrainerFamily | None:
        """The record of the trainer family that trains it (None without a trainer)."""
        return None if self.trainer is None else get_family(self.trainer)

    @property
    def loss_name(self) -> str:
        """What it trains: its policy loss's name, or its family's objective (`trl_ext.losses.gkd.gkd_loss`)."""
        if self.policy_loss_fn is None:
            return self.family.objective if self.family else "none"
        return self.policy_loss_fn

    @property
    def schema(self) -> str:
        """The data it trains on (Trinity-RFT's `schema`): its family's; `experience` for a record without one."""
        return self.family.schema if self.family else "experience"

    @property
    def sample_strategy(self) -> str:
        """Trinity-RFT's `sample_strategy`: its family's (`mix` where expert rows are mixed into the batch)."""
        return self.family.sample_strategy if self.family is not None else "default"

    @property
    def has_trainer(self) -> bool:
        """Whether the record names a trainer family (else its losses are only in `trl_ext.losses`)."""
        return self.trainer is not None

    @property
    def class_names(self) -> tuple[str, str]:
        """The names of the config and the trainer class, `("SAPOConfig", "SAPOTrainer")`, without building them."""
        family = self._require_trainer()
        if not family.per_algorithm_classes:
            return family.class_names
        return f"{self.class_prefix}Config", f"{self.class_prefix}Trainer"

    @property
    def config_class(self) -> type:
        """The config class (`SAPOConfig`); NotImplementedError for a record without a trainer."""
        return self._classes()[0]

    @property
    def trainer_class(self) -> type:
        """The trainer class (`SAPOTrainer`); NotImplementedError for a record without a trainer."""
        return self._classes()[1]

    def _classes(self) -> tuple[type, type]:
        self._require_trainer()
        if _class_source is None:  # only while trl_ext/__init__.py is still importing this module
            raise RuntimeError("no source of algorithm classes yet: trl_ext/__init__.py calls provide_classes")
        return _class_source(self.name)

    def _require_trainer(self) -> TrainerFamily:
        if self.trainer is None:
            with_trainer = ", ".join(name for name, spec in ALGORITHMS.items() if spec.has_trainer)
            raise NotImplementedError(
                f"algorithm {self.name!r} has no trainer yet: its losses are available through "
                f"trl_ext.losses.get_policy_loss({self.policy_loss_fn!r}); algorithms with a trainer: {with_trainer}"
            )
        return get_family(self.trainer)

    def default_config(self) -> dict[str, Any]:
        """The reference's `default_config()`: the algorithm's default components."""
        return {
            "repeat_times": self.repeat_times,
            "sample_strategy": self.sample_strategy,
            "policy_loss_fn": self.policy_loss_fn,
            "advantage_fn": self.advantage_fn,
            "kl_penalty_fn": self.kl_penalty_fn,
            "kl_loss_fn": self.kl_loss_fn,
            "entropy_loss_fn": self.entropy_loss_fn,
        }


ALGORITHMS: dict[str, AlgorithmSpec] = {}
"""Every registered record by name: the built-in ones (`trl_ext.algorithms`) and those `register_algorithm` adds."""


def get_algorithm(name: str) -> AlgorithmSpec:
    """The record of algorithm `name`.

    Args:
        name: A registered algorithm (`ALGORITHMS`).

    Returns:
        Its record.

    Raises:
        ValueError: An unknown name (listing the valid ones).
    """
    try:
        return ALGORITHMS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown algorithm {name!r}; valid names: {', '.join(ALGORITHMS)}") from None


def register_algorithm(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Add an algorithm record (e.g. one that trains a loss registered outside trl_ext with `register_policy_loss`).

    Its config and trainer classes are then `spec.config_class` / `spec.trainer_class`, also exported as
    `trl_ext.<class_prefix>Config` / `<class_prefix>Trainer`.

    Args:
        spec: The record. Its components must be registered and its name and class names unused.

    Returns:
        `spec` itself.

    Raises:
        TypeError: `spec` is not an `AlgorithmSpec`.
        ValueError: The name is registered already; the class names name another algorithm's classes (set
            `class_prefix`); the trainer family has one algorithm with its own classes; or a component
            (`policy_loss_fn`, `advantage_fn`, `kl_loss_fn`, `entropy_loss_fn`) is not registered.
    """
    from .advantages import ADVANTAGE_FNS
    from .losses import ENTROPY_FNS, KL_FNS, POLICY_LOSSES

    if not isinstance(spec, AlgorithmSpec):
        raise TypeError(f"register_algorithm takes an AlgorithmSpec, got {spec!r}")
    if spec.name in ALGORITHMS:
        raise ValueError(f"algorithm {spec.name!r} is already registered")
    if spec.has_trainer and not spec.family.per_algorithm_classes:
        raise ValueError(
            f"algorithm {spec.name!r}: trainer family {spec.trainer!r} trains one algorithm with its own classes "
            f"({', '.join(spec.family.class_names)}); families that take more: "
            f"{', '.join(n for n, f in FAMILIES.items() if f.per_algorithm_classes)}"
        )
    if spec.has_trainer:
        taken = {n: s.name for s in ALGORITHMS.values() if s.has_trainer for n in s.class_names}
        clash = [n for n in spec.class_names if n in taken]
        if clash:
            raise ValueError(
                f"algorithm {spec.name!r}: class name(s) {', '.join(clash)} already name algorithm "
                f"{taken[clash[0]]!r}'s classes; set class_prefix"
            )
    for kind, registry, value in [
        ("policy_loss_fn", POLICY_LOSSES, spec.policy_loss_fn),
        ("advantage_fn", ADVANTAGE_FNS, spec.advantage_fn),
        ("kl_loss_fn", KL_FNS, spec.kl_loss_fn),
        ("entropy_loss_fn", ENTROPY_FNS, spec.entropy_loss_fn),
    ]:
        if value is not None and value not in registry:
            raise ValueError(
                f"algorithm {spec.name!r}: {kind}={value!r} is not registered; registered: "
                f"{', '.join(sorted(registry))}"
            )
    ALGORITHMS[spec.name] = spec
    return spec
