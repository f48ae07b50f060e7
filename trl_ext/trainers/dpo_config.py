"""Config of the DPO trainer: `trl.DPOConfig` plus the ported loss's arguments and the reference's KL term.

TRL's fields keep TRL's meaning: `beta` is DPO's temperature (as in TRL and Trinity-RFT), `label_smoothing`
the probability that a preference label is flipped. The KL term of Trinity-RFT's DPO algorithm gets its own
fields, `kl_loss_fn` and `kl_coef` (`kl_loss_fn="none"` turns it off, whatever the default coefficient). TRL
options that select or reshape TRL's own DPO loss are rejected, naming the field: a value other than the one that
describes the ported loss (`loss_type`, `loss_weights`, `ld_alpha`, `f_divergence_type`), any value at all for
the parameters of TRL losses the port never computes (`f_alpha_divergence_coef`, `discopop_tau`), and the
switches `use_weighting` / `use_liger_kernel` turned on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

from trl import DPOConfig as TRLDPOConfig

from .._validation import check_choice, check_number
from ..losses import get_kl_fn, get_policy_loss
from ..losses.kl import KL_FNS
from .arguments import algorithm_arguments
from .devices import check_hardware
from .grpo_config import UnsetTRLFields, build_named, document_parameters, resolve_kl_coefficient, trl_defaults

_DPO_DEFAULTS = trl_defaults(TRLDPOConfig)

# TRL fields that configure TRL's own DPO loss: (the values that describe the ported loss, why the others do not
# apply). An explicit value equal to what the port computes is accepted (`loss_type="sigmoid"` is exactly the
# ported loss, `ld_alpha=1.0` is TRL's "no length weighting"), any other is an error.
_PORTED_VALUES: dict[str, tuple[tuple[Any, ...], str]] = {
    "loss_type": (
        ("sigmoid", ["sigmoid"]),
        "the trl_ext DPO trainer computes the ported sigmoid `dpo` loss (label_smoothing gives cDPO); use "
        "trl.DPOTrainer for TRL's other loss types",
    ),
    "loss_weights": ((None, [1.0]), "there is one loss, of weight 1; add the KL term with `kl_coef`"),
    "ld_alpha": (
        (None, 1.0),
        "LD-DPO length desensitization is TRL's; the ported loss sums every completion token (ld_alpha=1.0)",
    ),
    "f_divergence_type": (("reverse_kl",), "the ported loss is the reverse-KL (standard) DPO"),
}
# Parameters of TRL losses the port never computes: redeclared with default None, an error when set at all.
_TRL_LOSS_PARAMETERS: dict[str, str] = {
    "f_alpha_divergence_coef": "the α of f_divergence_type='alpha_divergence'; the ported loss is the reverse-KL "
    "(standard) DPO",
    "discopop_tau": "the τ of TRL's DiscoPOP loss type; the ported loss is the sigmoid DPO loss",
}
# Switches whose default turns a TRL feature off: only turning them on is an error.
_TRL_SWITCHES: dict[str, str] = {
    "use_weighting": "WPO weighting is TRL's; the ported loss weights every pair equally",
    "use_liger_kernel": "Liger's fused DPO loss would replace the ported loss",
}
_UNUSED_TRL_FIELDS: dict[str, str] = {
    **{name: why for name, (_, why) in _PORTED_VALUES.items()},
    **_TRL_LOSS_PARAMETERS,
    **_TRL_SWITCHES,
}


def _is(value: Any, allowed: Any) -> bool:
    """`value == allowed`, with bools told apart from numbers (`[True]` is not the weight list `[1.0]`)."""
    if isinstance(allowed, list):
        return isinstance(value, (list, tuple)) and len(value) == len(allowed) and all(map(_is, value, allowed))
    if allowed is None or isinstance(value, bool) != isinstance(allowed, bool):
        return value is allowed
    return isinstance(value, (str, int, float)) and value == allowed


def _unused_parameter(name: str) -> Any:
    return field(
        default=None,
        metadata={
            "help": f"Not used by trl_ext's DPO trainer: {_TRL_LOSS_PARAMETERS[name]} (trl.DPOConfig's default "
            f"{_DPO_DEFAULTS[name]!r}); setting it, even to that default, is an error."
        },
    )


@dataclass
class _TRLDPOFields(UnsetTRLFields, TRLDPOConfig):
    """`trl.DPOConfig` with the parameters of TRL's other losses unset (None), so that giving one is detectable.

    A base of its own: `trl-ext list` and the model card show a config's fields whose default differs from its
    base's, and these are not settings of the algorithm."""

    unset_trl_fields: ClassVar[dict[str, Any]] = {name: _DPO_DEFAULTS[name] for name in _TRL_LOSS_PARAMETERS}

    f_alpha_divergence_coef: float | None = _unused_parameter("f_alpha_divergence_coef")
    discopop_tau: float | None = _unused_parameter("discopop_tau")


@dataclass
class DPOConfig(*algorithm_arguments("dpo"), _TRLDPOFields):
    r"""
    Configuration of [`trl_ext.DPOTrainer`]: Direct Preference Optimization (Rafailov et al. 2023, arXiv
    2305.18290) with Trinity-RFT's `dpo` loss, per pair: −(1 − ls)·log σ(βz) − ls·log σ(−βz), z the chosen minus
    the rejected log-ratio to the reference (conservative DPO when `label_smoothing` > 0, Mitchell 2023), plus
    Trinity-RFT's KL term `kl_coef`·token-mean(KL(π‖π_ref)) over the chosen and rejected completion tokens. Both
    are normalized over the optimizer window (pairs and tokens of every accumulation step and process).

    Every `trl.DPOConfig` field keeps TRL's meaning; the TRL loss options the port does not implement are errors
    when set: `loss_type` other than `sigmoid`, `loss_weights` other than `[1.0]`, `ld_alpha` other than 1.0,
    `f_divergence_type` other than `reverse_kl`, `use_weighting` / `use_liger_kernel` turned on, and
    `f_alpha_divergence_coef` / `discopop_tau` set at all.
    """

    algorithm: ClassVar[str] = "dpo"

    label_smoothing: float = field(
        default=0.0,
        metadata={
            "help": "Probability ε ∈ [0, 0.5) that a preference label is flipped: the per-pair loss is "
            "−(1 − ε)·log σ(βz) − ε·log σ(−βz) (conservative DPO, Mitchell 2023; Trinity-RFT's `dpo`)."
        },
    )

    def __post_init__(self) -> None:
        owner = type(self).__name__
        self._check_trl_loss_fields()
        check_choice(owner, "kl_loss_fn", self.kl_loss_fn, sorted(KL_FNS))
        check_number(owner, "kl_coef", self.kl_coef, ge=0)
        self.kl_coef = resolve_kl_coefficient(owner, self.kl_loss_fn, "kl_coef", self.kl_coef)
        self.build_policy_loss()  # a bad beta / label_smoothing / KL argument fails here, naming the field
        self.build_kl_fn()
        super().__post_init__()
        check_hardware(self)
        if self.precompute_ref_log_probs and self.kl_coef != 0:
            raise ValueError(
                f"{owner}: precompute_ref_log_probs=True stores one reference log-prob sum per completion, but the KL "
                f"term (kl_coef={self.kl_coef}) needs the reference's per-token log-probs; set kl_coef=0 (or "
                "kl_loss_fn='none') or precompute_ref_log_probs=False"
            )

    def _unused_field_error(self, name: str, value: Any, rule: str) -> ValueError:
        return ValueError(
            f"{type(self).__name__}: {name}={value!r} is a trl.DPOConfig field that trl_ext's DPO trainer does not "
            f"use ({rule}); {_UNUSED_TRL_FIELDS[name]}"
        )

    def _check_trl_loss_fields(self) -> None:
        """Before TRL's `__post_init__`: the TRL loss options must describe the ported loss; the parameters of TRL's
        other losses must be unset (they then take TRL's defaults, which TRL's code reads)."""
        for name, (allowed, _) in _PORTED_VALUES.items():
            value = getattr(self, name)
            if not any(_is(value, a) for a in allowed):
                raise self._unused_field_error(name, value, f"allowed: {' or '.join(map(repr, allowed))}")
        self.loss_type = list(self.loss_type) if isinstance(self.loss_type, tuple) else self.loss_type
        self._take_trl_defaults()
        for name in _TRL_SWITCHES:
            value = getattr(self, name)
            if value is not False:
                raise self._unused_field_error(name, value, "allowed: False")

    def build_policy_loss(self):
        build = partial(get_policy_loss, "dpo", beta=self.beta, label_smoothing=self.label_smoothing)
        return build_named(type(self).__name__, "policy loss", build)

    def build_kl_fn(self):
        name = self.kl_loss_fn if self.kl_coef != 0 else "none"
        return build_named(type(self).__name__, "KL", partial(get_kl_fn, name, kl_coef=self.kl_coef))


document_parameters(DPOConfig, _TRLDPOFields, "Every other parameter is `trl.DPOConfig`'s.")
