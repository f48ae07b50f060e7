"""Config of the TPO trainer: `trl.experimental.tpo.TPOConfig`, its loss options checked when the config is built.

Every field of TRL's `TPOConfig` keeps TRL's meaning and default. The loss options, `loss_type`, `beta`,
`label_smoothing`, `tpo_alpha` and `tpo_l_gamma`, are the arguments of the trainer's loss, `trl_ext.losses.tpo.TPOLoss`
(same names), which checks them when the config is built: a bad value is a ValueError naming the field and what it
may be (TRL checks none of them).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

with warnings.catch_warnings():
    # TPO stands on TRL's experimental API: its import notice would reach every user of any trl_ext trainer, so it is
    # silenced here as `trl_ext.async_rollout` does; docs/algorithms/tpo.md says it instead.
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.tpo import TPOConfig as TRLTPOConfig

from ...losses.tpo import TPOLoss
from ..core.config_fields import build_named
from ..core.devices import check_hardware
from ..core.resolved import Components, ResolvedComponents


@dataclass
class TPOConfig(ResolvedComponents, TRLTPOConfig):
    r"""
    Configuration of [`trl_ext.TPOTrainer`]: Triple Preference Optimization (Saeidi et al. 2024, arXiv 2405.16681)
    as TRL's experimental `TPOTrainer` trains it, a preference loss on (chosen, rejected) pairs plus the negative
    log-likelihood of a gold reference completion, computed by `trl_ext.losses.tpo.TPOLoss` and normalized over the
    optimizer window (the triples and reference tokens of every accumulation step and process), see
    [`trl_ext.TPOTrainer`].

    Every field is `trl.experimental.tpo.TPOConfig`'s, with TRL's meaning and default (`beta=0.01`,
    `learning_rate=5e-7`, `gradient_checkpointing=True`, `bf16=True` unless `fp16`). The loss options: `loss_type`
    (`sigmoid`, `hinge`, `ipo`, `tpo-l`; `trl_ext.losses.tpo` gives each formula and paper), `beta`,
    `label_smoothing` (read by `sigmoid` and `tpo-l`), `tpo_alpha` (the weight of the reference completions' NLL; 0
    leaves the reference rows out of the batch, as in TRL) and `tpo_l_gamma` (the target margin of `tpo-l`).

    Checked when the config is built (TRL checks none of them): `loss_type` one of the four, `beta` > 0,
    `label_smoothing` in [0, 0.5), `tpo_alpha` >= 0, `tpo_l_gamma` finite.
    """

    algorithm: ClassVar[str] = "tpo"

    def __post_init__(self) -> None:
        # Built before TRL's own post-init, so that a bad loss option fails naming its field.
        _ = self.components
        super().__post_init__()
        check_hardware(self)

    def resolve_components(self) -> Components:
        """The trainer's loss, from the fields of its arguments (same names as TRL's fields)."""
        kwargs = {name: getattr(self, name) for name in TPOLoss.default_args()}
        return Components(policy_loss=build_named(type(self).__name__, "policy loss", partial(TPOLoss, **kwargs)))
