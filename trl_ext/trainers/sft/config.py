"""Config of the SFT trainer: `trl.SFTConfig` plus the choice of Trinity-RFT's supervised loss.

Every `trl.SFTConfig` field keeps TRL's meaning (data preparation, packing, `completion_only_loss`,
`assistant_only_loss`, `padding_free`, ...). The loss is `sft_loss_fn` (`sft`, `sft_is` or `sft_phi`,
`trl_ext.losses.sft`), with its arguments `cutoff_prob` and `loss_agg_mode` declared once by the loss components
(`config_field`). TRL's own selector `loss_type` is still accepted: `nll` is `sft`, `dft` is `sft_is`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

from trl import SFTConfig as TRLSFTConfig

from ..._validation import check_choice, check_number
from ...losses import get_kl_fn, get_policy_loss
from ...losses.aggregation import LOSS_AGG_MODES
from ...losses.sft import SFTLoss, SFTPhiLoss
from ..core.arguments import config_field
from ..core.config_fields import build_named, document_parameters
from ..core.devices import check_hardware
from ..core.documented_defaults import _DocumentedDefaultStr, documented_default, is_documented_default
from ..core.resolved import Components, ResolvedComponents

SFT_LOSS_FNS = ("sft", "sft_is", "sft_phi")
"""The supervised losses an `SFTConfig` can select (`sft_loss_fn`)."""

TRL_LOSS_TYPES = {"nll": "sft", "dft": "sft_is", "chunked_nll": "sft"}
"""TRL's `loss_type` -> the same loss in trl_ext (`chunked_nll` is TRL's deprecated alias of `nll`)."""

_TRL_EQUIVALENT = {"sft": "nll", "sft_is": "dft", "sft_phi": "nll"}
"""The `loss_type` value TRL's own code reads once the config is built (it only checks that it is `nll` or `dft`;
the trainer's loss is `sft_loss_fn`'s). `sft_phi` has no TRL counterpart: it holds `nll`, marked as not given."""


class _UnsetChoice(_DocumentedDefaultStr):
    """A string field's default, told apart from the same value given (`documented_default`), also on the command
    line: argparse passes a string default through the field's type, `str`, and `str()` of this marker is the marker
    itself. So `--loss_type dft` alone selects `sft_is`, while `--loss_type dft --sft_loss_fn sft` is a conflict."""

    __slots__ = ()

    def __str__(self) -> str:
        return self


@dataclass
class SFTConfig(ResolvedComponents, TRLSFTConfig):
    r"""
    Configuration of [`trl_ext.SFTTrainer`]: supervised fine-tuning with `trl.SFTTrainer`'s data pipeline and one of
    Trinity-RFT's supervised losses, normalized over the optimizer window (all micro-batches of one optimizer step, on
    every process), see [`trl_ext.SFTTrainer`].

    With lp the log-probability of a trained token, p = e^lp and sg the stop-gradient:

    * `sft`: −lp, the negative log-likelihood (TRL's `loss_type="nll"`).
    * `sft_is`: −lp·sg(p), exactly TRL's `loss_type="dft"`: Dynamic Fine-Tuning (Wu et al. 2025, "On the
      Generalization of SFT: A Reinforcement Learning Perspective with Reward Rectification", arXiv 2508.05629),
      Trinity-RFT's SFT-IS.
    * `sft_phi`: CHORD-φ (Zhang et al. 2025, "On-Policy RL Meets Off-Policy Experts: Harmonizing Supervised
      Fine-Tuning and Reinforcement Learning via Dynamic Weighting", arXiv 2508.11408), −lp'·sg(p(1 − p)) with
      lp' = min(lp, log `cutoff_prob`): tokens predicted with a probability above the cutoff get no gradient.

    Every `trl.SFTConfig` field keeps TRL's meaning. TRL's loss selector `loss_type` defaults to None here and is
    accepted for TRL configs: `nll` (and its deprecated alias `chunked_nll`) selects `sft_loss_fn="sft"`, `dft`
    selects `"sft_is"`; together with an `sft_loss_fn` other than its default and the one it names, it is an error
    naming both. Once the config is built `loss_type` holds the TRL value TRL's own code reads (`nll` or `dft`;
    `nll` for `sft_phi`), marked as not given when it was not, and `to_dict` then leaves it out.

    Checked when the config is built: `sft_loss_fn` one of `sft`, `sft_is`, `sft_phi`; `cutoff_prob` in [0, 1] (in
    (0, 1] for `sft_phi`, whose log would be −inf at 0), and only with `sft_phi` when it is not 1 (another loss
    would silently ignore it); `loss_agg_mode` one of the four modes, the `seq-mean-*` ones only on per-sequence
    rows (not with `packing=True` or `padding_free=True`, where a row holds several sequences) and
    `seq-mean-token-sum-norm` only with a `max_length` (its normalizer is sequences × `max_length`, Dr. GRPO's
    constant). `label_smoothing_factor` > 0 is refused: TRL computes label smoothing from the full `[B, T, V]`
    logits, while these losses are computed on the fused LM head's per-token log-probs.
    """

    algorithm: ClassVar[str] = "sft"

    sft_loss_fn: str = field(
        default=_UnsetChoice("sft"),
        metadata={
            "help": "Supervised loss on the trained tokens (lp: their log-probability, p = e^lp, sg: stop-gradient): "
            "`sft` = −lp (TRL's `nll`); `sft_is` = −lp·sg(p) (exactly TRL's `dft`, DFT arXiv 2508.05629, "
            "Trinity-RFT's SFT-IS); `sft_phi` = CHORD-φ, −lp'·sg(p(1−p)) with lp' = min(lp, log `cutoff_prob`) "
            "(arXiv 2508.11408).",
            "choices": list(SFT_LOSS_FNS),
        },
    )
    cutoff_prob: float = config_field(SFTPhiLoss, "cutoff_prob")
    loss_agg_mode: str = config_field(SFTLoss, "loss_agg_mode")
    loss_type: str | None = field(
        default=None,
        metadata={
            "help": "TRL's loss selector, accepted for TRL configs: `nll` (or its deprecated alias `chunked_nll`) "
            "means `sft_loss_fn='sft'`, `dft` means `sft_loss_fn='sft_is'`. Default None: `sft_loss_fn` decides.",
            "choices": list(TRL_LOSS_TYPES),
        },
    )

    def __post_init__(self) -> None:
        owner = type(self).__name__
        # before `_resolve_loss_type`, which looks the value up in a dict (a list there is a TypeError, not its name)
        check_choice(owner, "sft_loss_fn", self.sft_loss_fn, SFT_LOSS_FNS)
        self._resolve_loss_type(owner)
        check_number(owner, "cutoff_prob", self.cutoff_prob, ge=0, le=1)
        if self.sft_loss_fn != "sft_phi" and self.cutoff_prob != 1:
            raise ValueError(
                f"{owner}: cutoff_prob={self.cutoff_prob!r} only applies to sft_loss_fn='sft_phi' (CHORD-φ's "
                f"probability cutoff), but sft_loss_fn={self.sft_loss_fn!r} would silently ignore it; set "
                "sft_loss_fn='sft_phi' or leave cutoff_prob at 1"
            )
        self._check_loss_agg_mode(owner)
        if self.label_smoothing_factor > 0:
            raise ValueError(
                f"{owner}: label_smoothing_factor={self.label_smoothing_factor!r} is not supported; must be 0. TRL "
                "computes label smoothing from the full [B, T, V] logits (an extra forward pass), while "
                f"sft_loss_fn={self.sft_loss_fn!r} is computed on the fused LM head's per-token log-probs"
            )
        super().__post_init__()
        _ = self.components  # built once, here, from the final fields: the loss's checks (cutoff_prob) fail now
        check_hardware(self)

    def _resolve_loss_type(self, owner: str) -> None:
        """TRL's `loss_type`, when given, selects `sft_loss_fn` (an `sft_loss_fn` that names another loss is an
        error); it then holds the TRL value TRL's own code reads."""
        if self.loss_type is None or is_documented_default(self.loss_type):
            self.loss_type = documented_default(_TRL_EQUIVALENT.get(self.sft_loss_fn, "nll"))
            return
        check_choice(owner, "loss_type", self.loss_type, tuple(TRL_LOSS_TYPES))
        named = TRL_LOSS_TYPES[self.loss_type]
        if not is_documented_default(self.sft_loss_fn) and self.sft_loss_fn != named:
            raise ValueError(
                f"{owner}: loss_type={self.loss_type!r} (TRL's loss selector) means sft_loss_fn={named!r}, but "
                f"sft_loss_fn={self.sft_loss_fn!r} was given too; set only one of them"
            )
        # chosen through loss_type: still marked as not given, so that a copy with another loss_type is accepted
        self.sft_loss_fn = _UnsetChoice(named)

    def _check_loss_agg_mode(self, owner: str) -> None:
        check_choice(owner, "loss_agg_mode", self.loss_agg_mode, LOSS_AGG_MODES)
        if not self.loss_agg_mode.startswith("seq-mean"):
            return
        if self.packing or self.padding_free:
            setting = "packing=True" if self.packing else "padding_free=True"
            raise ValueError(
                f"{owner}: loss_agg_mode={self.loss_agg_mode!r} averages over sequences, one per row, but {setting} "
                "puts several sequences in one row (so the mean would be over packed rows, not sequences); use "
                "loss_agg_mode='token-mean', or turn packing and padding_free off"
            )
        if self.loss_agg_mode == "seq-mean-token-sum-norm" and self.max_length is None:
            raise ValueError(
                f"{owner}: loss_agg_mode='seq-mean-token-sum-norm' divides by sequences × max_length (Dr. GRPO's "
                "constant normalizer), but max_length=None; set max_length"
            )

    def policy_loss_kwargs(self) -> dict[str, Any]:
        """The arguments of the configured loss, from the config's fields."""
        kwargs: dict[str, Any] = {"loss_agg_mode": str(self.loss_agg_mode)}
        if self.sft_loss_fn == "sft_phi":
            kwargs["cutoff_prob"] = self.cutoff_prob
        return kwargs

    @property
    def policy_loss_name(self) -> str:
        """The `trl_ext.losses` name of the loss this config trains (the model card names it)."""
        return str(self.sft_loss_fn)

    def resolve_components(self) -> Components:
        """The trainer's loss: `sft_loss_fn` built with its arguments (a bad value is a ValueError naming the
        config). SFT has no KL term."""
        name = str(self.sft_loss_fn)
        build = partial(get_policy_loss, name, **self.policy_loss_kwargs())
        return Components(policy_loss=build_named(type(self).__name__, "policy loss", build), kl_fn=get_kl_fn("none"))

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        if is_documented_default(self.loss_type):  # TRL's loss selector, not given: the dict re-loads without it
            d.pop("loss_type", None)
        return d


document_parameters(SFTConfig, TRLSFTConfig, "Every other parameter is `trl.SFTConfig`'s.")
