"""Config of the IW-OPD trainer: TRL's experimental `IWOPDConfig`, its loss options checked when it is built.

Every field is `trl.experimental.iw_opd.IWOPDConfig`'s, with TRL's meaning and default. The loss reads
`distillation_objective`, `beta`, `temperature`, `loss_top_k`, `loss_add_tail`, `reverse_kl_top_1_mode`,
`iw_opd_gamma` and `iw_opd_epsilon` (`trl_ext.losses.iw_opd.IWOPDObjective`, same names), which checks them before
TRL's own checks run: a bad value is a ValueError naming the field and what it may be, including the ones TRL lets
through (`temperature` <= 0, a negative `loss_top_k`) and, with `use_teacher_server=True`, the options a teacher
server cannot serve.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

from ...losses.iw_opd import IWOPDObjective
from ..core.config_fields import build_named
from ..core.devices import check_hardware

with warnings.catch_warnings():
    # TRL's notice on importing its experimental package would reach every user of any trl_ext trainer;
    # docs/algorithms/iw_opd.md says it instead.
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.iw_opd import IWOPDConfig as TRLIWOPDConfig


@dataclass
class IWOPDConfig(TRLIWOPDConfig):
    r"""
    Configuration of [`trl_ext.IWOPDTrainer`]: TRL's experimental IW-OPD trainer (Xie et al. 2026, "On the Position
    Bias of On-Policy Distillation", arXiv 2606.22600) whose loss is trl_ext's port of it
    (`trl_ext.losses.iw_opd.IWOPDObjective`), normalized over the optimizer window.

    Every `trl.experimental.iw_opd.IWOPDConfig` field keeps TRL's meaning and default. With the default
    `distillation_objective="iw_opd"` the student samples its completions (`lmbda=1.0`, which IW-OPD requires) and
    learns from the teacher's log-ratio on each sampled token, weighted by `1 + iw_opd_gamma·(1 − D_<t/D)` (the
    discrepancy accumulated before the token over the row's total, floored at `iw_opd_epsilon`); with `"jsd"` it
    learns the generalized JSD (`beta`: 0 forward KL, 1 reverse KL) over the whole vocabulary (`loss_top_k=0`) or a
    top-k support (`loss_add_tail`, `reverse_kl_top_1_mode`), on the student's completions (share `lmbda`) or the
    dataset's. The teacher is a local model (`teacher_model`, `teacher_model_name_or_path`) or a vLLM server
    (`use_teacher_server`, `teacher_model_server_url`).

    Checked when the config is built, besides TRL's checks: `temperature` > 0, `loss_top_k` an integer >= 0,
    `loss_add_tail` a bool, and each loss option's range and choices, each error naming the field.
    """

    algorithm: ClassVar[str] = "iw_opd"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        # A bad loss option fails here, naming the config and the field (TRL's messages are vaguer, or absent).
        objective = build_named(owner, "loss", self.objective)
        if self.use_teacher_server:
            build_named(owner, "loss with a teacher server", objective.check_served)
        super().__post_init__()
        check_hardware(self)

    def objective(self) -> IWOPDObjective:
        """The trainer's loss, from the fields of the same names."""
        return IWOPDObjective(**{name: getattr(self, name) for name in IWOPDObjective.OPTIONS})

    @property
    def policy_loss_name(self) -> str:
        """What the model card and the run summary name as the loss: the objective trained."""
        return f"{self.distillation_objective} (trl_ext.losses.iw_opd.IWOPDObjective)"
