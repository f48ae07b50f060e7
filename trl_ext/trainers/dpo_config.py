"""Config of the DPO trainer: `trl.DPOConfig` plus the ported loss's arguments and the reference's KL term.

TRL's fields keep TRL's meaning: `beta` is DPO's temperature (as in TRL and Trinity-RFT), `label_smoothing`
the probability that a preference label is flipped. The KL term of Trinity-RFT's DPO algorithm gets its own
fields, `kl_loss_fn` and `kl_coef`. TRL options that select or reshape TRL's own DPO loss (`loss_type`,
`loss_weights`, `ld_alpha`, `f_divergence_type`, `use_weighting`, ...) set to non-default values are rejected,
naming the field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import partial
from typing import ClassVar

from trl import DPOConfig as TRLDPOConfig

from ..losses import get_kl_fn, get_policy_loss
from ..losses.kl import KL_FNS
from .grpo_config import build_named

_DPO_DEFAULTS = {
    f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
    for f in dataclasses.fields(TRLDPOConfig)
    if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
}

# TRL fields that configure TRL's own DPO loss, with why they do not apply.
_UNUSED_TRL_FIELDS: dict[str, str] = {
    "loss_type": "the trl_ext DPO trainer computes the ported sigmoid `dpo` loss (label_smoothing gives cDPO); use "
    "trl.DPOTrainer for TRL's other loss types",
    "loss_weights": "there is one loss; add the KL term with `kl_coef`",
    "ld_alpha": "LD-DPO length desensitization is TRL's; the ported loss sums every completion token",
    "f_divergence_type": "the ported loss is the reverse-KL (standard) DPO",
    "f_alpha_divergence_coef": "the ported loss is the reverse-KL (standard) DPO",
    "use_weighting": "WPO weighting is TRL's; the ported loss weights every pair equally",
    "discopop_tau": "DiscoPOP is TRL's loss type",
    "use_liger_kernel": "Liger's fused DPO loss would replace the ported loss",
}


@dataclass
class DPOConfig(TRLDPOConfig):
    r"""
    Configuration of [`trl_ext.DPOTrainer`]: Direct Preference Optimization (Rafailov et al. 2023, arXiv
    2305.18290) with Trinity-RFT's `dpo` loss, per pair: −(1 − ls)·log σ(βz) − ls·log σ(−βz), z the chosen minus
    the rejected log-ratio to the reference (conservative DPO when `label_smoothing` > 0, Mitchell 2023), plus
    Trinity-RFT's KL term `kl_coef`·token-mean(KL(π‖π_ref)) over the chosen and rejected completion tokens. Both
    are normalized over the optimizer window (pairs and tokens of every accumulation step and process).

    Every `trl.DPOConfig` field keeps TRL's meaning; the TRL loss options the port does not implement
    (`loss_type` other than `sigmoid`, `loss_weights`, `ld_alpha`, `f_divergence_type`, `use_weighting`,
    `discopop_tau`, `use_liger_kernel`) are errors when set.

    Parameters specific to this trainer:

        kl_loss_fn (`str`, *optional*, defaults to `'k2'`):
            KL estimator of the KL term: `k1`, `k2` (½(log r)², Trinity-RFT's DPO default), `k3`, `low_var_kl`,
            `abs`, `corrected_k3`, or `none`.
        kl_coef (`float`, *optional*, defaults to `0.001`):
            Coefficient of the KL term (Trinity-RFT's default); 0 turns it off. It needs per-token reference
            log-probs, so it cannot be combined with `precompute_ref_log_probs=True`.
    """

    algorithm: ClassVar[str] = "dpo"

    label_smoothing: float = field(
        default=0.0,
        metadata={
            "help": "Probability ε ∈ [0, 0.5) that a preference label is flipped: the per-pair loss is "
            "−(1 − ε)·log σ(βz) − ε·log σ(−βz) (conservative DPO, Mitchell 2023; Trinity-RFT's `dpo`)."
        },
    )
    kl_loss_fn: str = field(
        default="k2",
        metadata={
            "help": "KL estimator of the KL term kl_coef·token-mean(KL(π‖π_ref)) over the chosen and rejected "
            "completion tokens: `k1`, `k2` (Trinity-RFT's DPO default), `k3`, `low_var_kl`, `abs`, `corrected_k3`, "
            "or `none`.",
            "choices": sorted(KL_FNS),
        },
    )
    kl_coef: float = field(
        default=0.001,
        metadata={
            "help": "Coefficient of the KL term (Trinity-RFT's default 0.001); 0 turns it off. Needs per-token "
            "reference log-probs, so not with `precompute_ref_log_probs=True`."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        owner = type(self).__name__
        for name, instead in _UNUSED_TRL_FIELDS.items():
            value, default = getattr(self, name), _DPO_DEFAULTS[name]
            if value != default:
                raise ValueError(
                    f"{owner}: {name}={value!r} is a trl.DPOConfig field that trl_ext's DPO trainer does not use "
                    f"(default {default!r}); {instead}"
                )
        if self.kl_coef != 0 and self.kl_loss_fn == "none":
            raise ValueError(
                f"{owner}: kl_coef={self.kl_coef} adds a KL term but kl_loss_fn='none'; choose an estimator with "
                f"kl_loss_fn (one of {', '.join(repr(k) for k in sorted(KL_FNS) if k != 'none')}) or set kl_coef=0"
            )
        if self.precompute_ref_log_probs and self.kl_coef != 0:
            raise ValueError(
                f"{owner}: precompute_ref_log_probs=True stores one reference log-prob sum per completion, but the KL "
                f"term (kl_coef={self.kl_coef}) needs the reference's per-token log-probs; set kl_coef=0 or "
                "precompute_ref_log_probs=False"
            )
        self.build_policy_loss()  # a bad beta / label_smoothing / KL argument fails here, naming the field
        self.build_kl_fn()

    def build_policy_loss(self):
        build = partial(get_policy_loss, "dpo", beta=self.beta, label_smoothing=self.label_smoothing)
        return build_named(type(self).__name__, "policy loss", build)

    def build_kl_fn(self):
        name = self.kl_loss_fn if self.kl_coef != 0 else "none"
        return build_named(type(self).__name__, "KL", partial(get_kl_fn, name, kl_coef=self.kl_coef))
