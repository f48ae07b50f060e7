"""Online DPO's preference loss: TRL 1.16's `trl.experimental.online_dpo.OnlineDPOTrainer` objective.

Online DPO (Guo et al. 2024, "Direct Language Model Alignment from Online AI Feedback", arXiv 2402.04792) samples two
completions of each prompt from the policy, ranks them with reward functions or a judge, and trains a DPO loss on the
ranked pair. With the notation of `trl_ext.losses.dpo` (rows interleaved chosen, rejected, ...; S the summed
log-probs of a completion over its valid tokens, ρ = S − S_ref its log-ratio to the reference), per pair

    Δ = ρ_c − ρ_r = (S_c − S_r) − (S_c,ref − S_r,ref)

    sigmoid   −(1 − ε)·log σ(βΔ) − ε·log σ(−βΔ)     DPO, Rafailov et al. 2023, arXiv 2305.18290 (ε > 0: cDPO)
    ipo       (Δ − 1/(2β))²                         IPO, Azar et al. 2023, arXiv 2310.12036, on the *summed* ρ

and the loss is the mean over the pairs. `sigmoid` is the `dpo` loss (`DPOLoss`), computed by it; TRL's online
trainer has no label smoothing, so ε = `label_smoothing` defaults to 0 (TRL's loss), and ε > 0 (conservative DPO,
for rankings that may be wrong, e.g. ties) is refused with `ipo`. `ipo` is where Online DPO differs from the `ipo` of
TRL's offline `DPOTrainer` (`TRLDPOLoss`), which divides each completion's log-ratio by its length: TRL's online
trainer squares the summed Δ, and so does this loss. β is one number here; TRL's per-epoch list of β is the
trainer's (one loss per epoch, `trl_ext.OnlineDPOTrainer`).

Metrics are `dpo`'s: `chosen_reward` (β·mean ρ_c), `rejected_reward`, `accuracy_mean` (share of pairs with ρ_c > ρ_r)
and `dpo_loss`. The inputs are `dpo`'s: `logprob`, `ref_logprob` (`[N, T]` or per-row sums `[N]`), `action_mask`, and
the window's `global_valid_seqs` (the mean over pairs becomes this batch's share of the window's mean).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any

import torch

from ..components import Argument
from .dpo import DPOLoss

if TYPE_CHECKING:
    from .dpo import _Pairs

ONLINE_DPO_LOSS_TYPES = ("sigmoid", "ipo")
"""The `loss_type`s of TRL 1.16's `OnlineDPOConfig`."""

LOSS_TYPE = Argument(
    "loss_type",
    "sigmoid",
    "The preference loss of each ranked pair, with Δ = ρ_c − ρ_r the difference of the summed log-ratios: `sigmoid` "
    "−log σ(βΔ) (DPO), `ipo` (Δ − 1/(2β))² (IPO on the summed log-ratios, as TRL's online trainer computes it; TRL's "
    "offline `DPOTrainer` length-normalizes them).",
    choices=ONLINE_DPO_LOSS_TYPES,
)
"""The `loss_type` argument of `OnlineDPOLoss`, kept outside its `arguments` (DPO's loss iterates its loss types)."""


class OnlineDPOLoss(DPOLoss):
    """Online DPO's loss, per ranked pair `sigmoid` −(1 − ε)·log σ(βΔ) − ε·log σ(−βΔ) or `ipo` (Δ − 1/(2β))², mean over
    pairs (module docstring). The `dpo` loss's inputs, metrics and arguments (`beta`, `label_smoothing`), and
    `loss_type` (`ONLINE_DPO_LOSS_TYPES`), checked at construction.

    Its keyword arguments: `loss_type`, `sigmoid` (default) or `ipo`; `beta`, β > 0 (default 0.1);
    `label_smoothing`, ε in [0, 0.5) (default 0, TRL's loss), > 0 only with `sigmoid`; and `backend`, accepted for
    signature compatibility and ignored (as every policy loss's).

    Raises:
        ValueError: An unknown argument or an invalid value, naming the argument and its allowed values.
    """

    arguments = (
        dataclasses.replace(
            DPOLoss.argument("beta"),
            help="β: scales the log-ratios (β·ρ is the implicit reward); larger β keeps the policy closer to the "
            "reference. `ipo` targets the margin 1/(2β) (IPO's τ = β).",
        ),
        dataclasses.replace(
            DPOLoss.argument("label_smoothing"),
            help="ε: the assumed probability that a ranking is wrong (the reward functions prefer the worse "
            "completion, or tie): `sigmoid` becomes conservative DPO, −(1 − ε)·log σ(βΔ) − ε·log σ(−βΔ). 0 is TRL's "
            "online loss, which has no label smoothing; `ipo` takes none.",
        ),
    )

    def __init__(self, backend: str = "verl", **kwargs: Any) -> None:
        given = {LOSS_TYPE.name} & set(kwargs)
        loss_type = LOSS_TYPE.check(self.name, kwargs.pop(LOSS_TYPE.name, LOSS_TYPE.default))
        self.loss_type = (loss_type,)  # the `dpo` loss's tuple of loss types, weighted 1
        super().__init__(backend, **kwargs)
        self.given = self.given | given

    @classmethod
    def _leading_parameters(cls) -> list[inspect.Parameter]:
        loss_type = inspect.Parameter(
            LOSS_TYPE.name, inspect.Parameter.KEYWORD_ONLY, default=LOSS_TYPE.default, annotation="str"
        )
        return [*super()._leading_parameters(), loss_type]

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {LOSS_TYPE.name: LOSS_TYPE.default, **super().default_args()}

    @property
    def args(self) -> dict[str, Any]:
        return {LOSS_TYPE.name: self.loss_type[0], **super().args}

    def check_arguments(self) -> None:
        if self.loss_type == ("ipo",) and self.label_smoothing:
            raise ValueError(
                f"{self.name}: label_smoothing={self.label_smoothing!r} applies to loss_type 'sigmoid' only "
                "(conservative DPO); loss_type 'ipo' takes none: set label_smoothing=0"
            )

    def _pair_loss(self, loss_type: str, q: _Pairs) -> torch.Tensor:
        """ℓ `[P]`: `ipo` on the summed log-ratios; `sigmoid` is the `dpo` loss's."""
        if loss_type == "ipo":
            return (q.chosen_score - q.rejected_score - 1 / (2 * self.beta)) ** 2
        return super()._pair_loss(loss_type, q)
