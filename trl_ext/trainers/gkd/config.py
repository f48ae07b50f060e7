"""Config of the GKD trainer: TRL's experimental `GKDConfig`, its GKD fields checked when the config is built.

Every field keeps TRL's meaning: `lmbda` (the share of batches whose completions the student samples), `beta` (the
generalized JSD's interpolation), `temperature` (the sampling temperature of the on-policy and `seq_kd`
generations), `max_new_tokens`, `seq_kd`, `teacher_model_name_or_path` (which the trl_ext trainer loads when no
`teacher_model` is given), `teacher_model_init_kwargs`, `disable_dropout`, and every `trl.SFTConfig` field.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import ClassVar

from trl import SFTConfig as TRLSFTConfig

from ..._validation import check_bool, check_number
from ..core.config_fields import document_parameters
from ..core.devices import check_hardware

with warnings.catch_warnings():  # TRL's experimental notice is the docs' to give (docs/algorithms/gkd.md)
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.gkd import GKDConfig as TRLGKDConfig


@dataclass
class GKDConfig(TRLGKDConfig):
    r"""
    Configuration of [`trl_ext.GKDTrainer`]: Generalized Knowledge Distillation (Agarwal et al. 2024, "On-Policy
    Distillation of Language Models: Learning from Self-Generated Mistakes", arXiv 2306.13649) with the data pipeline
    and the batch mix of TRL's experimental `GKDTrainer` and trl_ext's port of its loss (`trl_ext.losses.gkd`).

    Each optimizer step's micro-batch is, with probability `lmbda`, the student's own completions of the batch's
    prompts (sampled at `temperature`, at most `max_new_tokens` tokens), else the dataset's completions, or with
    `seq_kd=True` the teacher's samples. The loss is the generalized JSD (`beta`: 0 forward KL, 1 reverse KL) between
    the student's and the teacher's next-token distributions over the whole vocabulary, at every completion token.

    Checked when the config is built, each error naming the field and what it may be (TRL checks only `lmbda` and
    `beta`, and lets a sampling temperature of 0 through to the first generation): `lmbda` and `beta` in [0, 1],
    `temperature` > 0, `max_new_tokens` an integer >= 1, `seq_kd` and `disable_dropout` booleans.
    """

    algorithm: ClassVar[str] = "gkd"

    teacher_model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "Path or Hub id of the teacher, loaded (with teacher_model_init_kwargs) when the trainer is given "
            "no teacher_model; one of the two is required. The teacher must share the student's vocabulary."
        },
    )

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_number(owner, "lmbda", self.lmbda, ge=0, le=1)
        check_number(owner, "beta", self.beta, ge=0, le=1)
        check_number(owner, "temperature", self.temperature, gt=0)
        check_number(owner, "max_new_tokens", self.max_new_tokens, ge=1, integer=True)
        check_bool(owner, "seq_kd", self.seq_kd)
        check_bool(owner, "disable_dropout", self.disable_dropout)
        super().__post_init__()
        check_hardware(self)


document_parameters(GKDConfig, TRLSFTConfig, "Every other parameter is `trl.SFTConfig`'s.")
