"""Config of the DPO trainer: `trl.DPOConfig` plus the KL term of Trinity-RFT's DPO algorithm.

Every `trl.DPOConfig` field keeps TRL's meaning, its loss options included: `loss_type` (one or a list, with
`loss_weights`), `beta`, `label_smoothing`, `f_divergence_type` / `f_alpha_divergence_coef`, `ld_alpha`,
`use_weighting`, `discopop_tau`. They are the arguments of the trainer's loss, `trl_ext.losses.dpo.TRLDPOLoss` (same
names), which checks them when the config is built: a bad value is a ValueError naming the field and what it may be.
The KL term gets its own fields, `kl_loss_fn` and `kl_coef`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import ClassVar

from trl import DPOConfig as TRLDPOConfig

from ..._validation import check_choice, check_number
from ...losses import get_kl_fn
from ...losses.dpo import TRLDPOLoss
from ...losses.kl import KL_FNS
from ..core.arguments import DPOKLArguments
from ..core.config_fields import build_named, document_parameters, resolve_kl_coefficient
from ..core.devices import check_hardware
from ..core.documented_defaults import is_documented_default
from ..core.resolved import Components, ResolvedComponents


@dataclass
class DPOConfig(ResolvedComponents, DPOKLArguments, TRLDPOConfig):
    r"""
    Configuration of [`trl_ext.DPOTrainer`]: the preference losses of `trl.DPOTrainer` (Direct Preference
    Optimization, Rafailov et al. 2023, arXiv 2305.18290, and its variants) plus Trinity-RFT's KL term
    `kl_coef`·token-mean(KL(π‖π_ref)) over the chosen and rejected completion tokens. Both are normalized over the
    optimizer window (the pairs and tokens of every accumulation step and process), see [`trl_ext.DPOTrainer`].

    Every `trl.DPOConfig` field keeps TRL's meaning. The loss options are those of TRL 1.16, with TRL's formulas
    (`trl_ext.losses.dpo` lists each loss type's formula and paper): `loss_type` (`sigmoid`, `hinge`, `ipo`,
    `exo_pair`, `nca_pair`, `robust`, `bco_pair`, `sppo_hard`, `aot`, `aot_unpaired`, `apo_zero`, `apo_down`,
    `discopop`, `sft`, `sigmoid_norm`, or a list of them weighted by `loss_weights`), `beta`, `label_smoothing`,
    `f_divergence_type` and `f_alpha_divergence_coef` (f-DPO), `ld_alpha` (LD-DPO), `use_weighting` (WPO),
    `discopop_tau`. One deliberate difference: `label_smoothing` ε > 0 makes the `sigmoid` loss conservative DPO,
    −(1 − ε)·log σ(βΔ) − ε·log σ(−βΔ) (Trinity-RFT's `dpo`), where TRL 1.16's `sigmoid` ignores ε.

    Checked when the config is built (TRL checks some of these only when the trainer starts, or not at all): `beta`
    > 0; `label_smoothing` in [0, 0.5), and > 0 with `exo_pair`; `loss_weights` one finite number per loss type;
    `f_divergence_type` other than `reverse_kl` only with the loss types built on the chosen − rejected score
    difference; `ld_alpha` in [0, 1] or None; `discopop_tau` > 0; `use_weighting` not with `aot` / `aot_unpaired`
    (TRL's rule) nor `sft` (TRL 1.16 fails on it, and the micro-batch's SFT token mean times its mean pair weight has
    no window-normalized form).

    The KL term needs the reference's per-token log-probs, which `precompute_ref_log_probs=True` does not keep (it
    stores one sum per completion): with it, the KL term is off unless `kl_coef` is set, and a `kl_coef` > 0 set
    explicitly is an error naming both fields. `kl_loss_fn='none'` (or `kl_coef=0`) turns the KL term off too.
    """

    algorithm: ClassVar[str] = "dpo"

    label_smoothing: float = field(
        default=TRLDPOLoss.argument("label_smoothing").default,
        metadata={"help": TRLDPOLoss.argument("label_smoothing").help},
    )

    def __post_init__(self) -> None:
        owner = type(self).__name__
        if isinstance(self.loss_type, tuple):
            self.loss_type = list(self.loss_type)
        if isinstance(self.loss_weights, tuple):
            self.loss_weights = list(self.loss_weights)
        check_choice(owner, "kl_loss_fn", self.kl_loss_fn, sorted(KL_FNS))
        check_number(owner, "kl_coef", self.kl_coef, ge=0)
        self.kl_coef = self._resolve_kl_coef(owner)
        # Built before TRL's checks, so that a bad loss option fails naming the field (TRL's own message is vaguer);
        # the fields TRL then normalizes make the trainer build the parts once more, from the final values.
        _ = self.components
        super().__post_init__()
        check_hardware(self)

    def _resolve_kl_coef(self, owner: str) -> float:
        """The effective `kl_coef`: 0 with `kl_loss_fn='none'`, and 0 with `precompute_ref_log_probs=True` unless set
        explicitly (then an error: the KL term needs per-token reference log-probs)."""
        unset = is_documented_default(self.kl_coef)
        coef = resolve_kl_coefficient(owner, self.kl_loss_fn, "kl_coef", self.kl_coef)
        if self.precompute_ref_log_probs and coef != 0:
            if not unset:
                raise ValueError(
                    f"{owner}: kl_coef={coef!r} adds the KL term, which needs the reference's per-token log-probs, but "
                    "precompute_ref_log_probs=True keeps only one sum per completion; set kl_coef=0 or leave it unset "
                    "(the KL term is then off), or set precompute_ref_log_probs=False"
                )
            coef = 0.0
        return coef

    def resolve_components(self) -> Components:
        """The trainer's loss, from the fields of its arguments (same names as TRL's fields), and the KL term."""
        owner = type(self).__name__
        kwargs = {name: getattr(self, name) for name in TRLDPOLoss.default_args()}
        kl_name = self.kl_loss_fn if self.kl_coef != 0 else "none"
        return Components(
            policy_loss=build_named(owner, "policy loss", partial(TRLDPOLoss, **kwargs)),
            kl_fn=build_named(owner, "KL", partial(get_kl_fn, kl_name, kl_coef=self.kl_coef)),
        )


document_parameters(DPOConfig, TRLDPOConfig, "Every other parameter is `trl.DPOConfig`'s.")
