"""Config of the Online DPO trainer: TRL's experimental `OnlineDPOConfig`, its loss options checked when it is built.

Every field of `trl.experimental.online_dpo.OnlineDPOConfig` keeps TRL's meaning. The loss's are `loss_type`
(`sigmoid`, `ipo`) and `beta` (one number, or a list: the β of each epoch, the last one for the epochs after), with
`label_smoothing`, the one field trl_ext adds (the `dpo` loss's conservative DPO, 0 by default: TRL's loss): the
arguments of `trl_ext.losses.online_dpo.OnlineDPOLoss`. `missing_eos_penalty` is subtracted from the reward of a
completion without an EOS token before the two completions of a prompt are ranked.
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

with warnings.catch_warnings():  # TRL's notice on importing its experimental package (docs/algorithms says it)
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.online_dpo import OnlineDPOConfig as TRLOnlineDPOConfig

from ..._validation import check_number
from ...losses.online_dpo import OnlineDPOLoss
from ..core.config_fields import build_named
from ..core.devices import check_hardware
from ..core.resolved import Components, ResolvedComponents


@dataclass
class OnlineDPOConfig(ResolvedComponents, TRLOnlineDPOConfig):
    r"""
    Configuration of [`trl_ext.OnlineDPOTrainer`]: TRL's experimental Online DPO (Guo et al. 2024, "Direct Language
    Model Alignment from Online AI Feedback", arXiv 2402.04792). The policy samples two completions of each prompt,
    the reward functions rank them (`missing_eos_penalty` lowers the reward of a completion that never ends), and
    the ranked pair trains a DPO loss against the reference model: per pair, with Δ the difference of the chosen and
    the rejected completion's summed log-ratios to the reference, `loss_type='sigmoid'` −log σ(βΔ) (DPO) or `'ipo'`
    (Δ − 1/(2β))² (IPO on the summed log-ratios, as TRL's online trainer computes it), averaged over the pairs of the
    micro-batch (`trl_ext.losses.online_dpo`).

    Every field of TRL's `OnlineDPOConfig` keeps TRL's default and meaning. trl_ext adds `label_smoothing` ε, the
    `dpo` loss's: `sigmoid` becomes conservative DPO, −(1 − ε)·log σ(βΔ) − ε·log σ(−βΔ), for reward rankings that
    may be wrong; its default 0 is TRL's loss. Checked when the config is built (TRL checks `loss_type` only in the
    first training step, and the others not at all): `loss_type` is `sigmoid` or `ipo`; `beta` is a number > 0 or a
    non-empty list of them (one per epoch); `label_smoothing` is in [0, 0.5), and 0 with `ipo`;
    `missing_eos_penalty` is None or a number >= 0 (TRL subtracts it from the reward: a negative one would reward a
    completion without an EOS); `max_new_tokens` is an integer >= 1. A bad value is a ValueError naming the field
    and what it may be.
    """

    algorithm: ClassVar[str] = "online_dpo"

    label_smoothing: float = field(
        default=OnlineDPOLoss.argument("label_smoothing").default,
        metadata={"help": OnlineDPOLoss.argument("label_smoothing").help},
    )

    def __post_init__(self) -> None:
        owner = type(self).__name__
        super().__post_init__()  # TRL turns a one-element list of β into the number
        self.beta = _check_betas(owner, self.beta)
        check_number(owner, "missing_eos_penalty", self.missing_eos_penalty, ge=0, allow_none=True)
        check_number(owner, "max_new_tokens", self.max_new_tokens, ge=1, integer=True)
        _ = self.components  # a bad loss option fails here, naming the field
        check_hardware(self)

    @property
    def betas(self) -> tuple[float, ...]:
        """β of each epoch (`beta` as a tuple): the i-th trains epoch i, the last one every epoch after."""
        return tuple(self.beta) if isinstance(self.beta, list) else (self.beta,)

    def epoch_losses(self) -> tuple[OnlineDPOLoss, ...]:
        """The loss of each epoch (`betas`), built from the fields (a bad value: a ValueError naming the field)."""
        owner = type(self).__name__
        options = {"loss_type": self.loss_type, "label_smoothing": self.label_smoothing}
        return tuple(
            build_named(owner, "policy loss", lambda beta=beta: OnlineDPOLoss(beta=beta, **options))
            for beta in self.betas
        )

    def resolve_components(self) -> Components:
        """The first epoch's loss (`epoch_losses` gives every epoch's)."""
        return Components(policy_loss=self.epoch_losses()[0])


def _check_betas(owner: str, value: Any) -> float | list[float]:
    """`beta` as TRL keeps it (a number, or a list of two or more numbers), each a finite number > 0."""
    if isinstance(value, tuple):
        value = list(value)
    items = value if isinstance(value, list) else [value]
    valid = bool(items) and all(
        isinstance(b, numbers.Real) and not isinstance(b, bool) and math.isfinite(b) and b > 0 for b in items
    )
    if not valid:
        raise ValueError(
            f"{owner}: beta={value!r} is not valid; must be a finite number > 0, or a non-empty list of them (the β "
            "of each epoch, the last one for the epochs after)"
        )
    return [float(b) for b in items] if len(items) > 1 else float(items[0])
