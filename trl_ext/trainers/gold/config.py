"""Config of the GOLD trainer: TRL's experimental `GOLDConfig`, its distillation and ULD fields checked when the config
is built.

Every field keeps TRL's meaning: `lmbda` (the share of micro-batches whose completions the student samples), `beta`
(the generalized JSD's interpolation, and the hybrid ULD's), `temperature`, `top_p`, `top_k` and
`max_completion_length` (the student's sampling; `temperature` also divides both models' logits in the JSD),
`num_generations`, the teacher's fields (`teacher_model_name_or_path`, which the trl_ext trainer loads when no
`teacher_model` is given, `teacher_model_revision`, `teacher_model_init_kwargs`, `teacher_tokenizer_name_or_path`), the
ULD fields (`use_uld_loss`, `use_extended_uld`, `uld_token_merge_strategy`, `uld_use_hybrid_loss`,
`uld_hybrid_matched_weight`, `uld_hybrid_unmatched_weight`, `uld_crossentropy_weight`, `uld_distillation_weight`,
`uld_student_temperature`, `uld_teacher_temperature`, `uld_skip_student_eos`, `uld_skip_teacher_eos`: the arguments of
`trl_ext.losses.gold.ULDLoss`, same names), vLLM's and the logging fields, and every `trl.SFTConfig` field.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import ClassVar

from trl import SFTConfig as TRLSFTConfig

from ..._validation import check_bool, check_number
from ...losses.gold import ULD_SETTINGS, check_uld_settings
from ..core.config_fields import document_parameters
from ..core.devices import check_hardware

with warnings.catch_warnings():  # TRL's experimental notice is the docs' to give (docs/algorithms/gold.md)
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.gold import GOLDConfig as TRLGOLDConfig


@dataclass
class GOLDConfig(TRLGOLDConfig):
    r"""
    Configuration of [`trl_ext.GOLDTrainer`]: General Online Logit Distillation (Patiño et al. 2025, "Unlocking
    On-Policy Distillation for Any Model Family", a Hugging Face blog post) with the data pipeline and the batch mix
    of TRL's experimental `GOLDTrainer` and trl_ext's ports of its losses (`trl_ext.losses.gold`).

    Each micro-batch of an optimizer window is, with probability `lmbda`, the student's own completions of its
    prompts (sampled at `temperature`, `top_p`, `top_k`, at most `max_completion_length` tokens), else the dataset's
    completions. The loss compares the student's and the teacher's next-token distributions at every completion
    token: with one tokenizer the generalized JSD (`beta`: 0 forward KL, 1 reverse KL; both logits divided by
    `temperature`); with `use_uld_loss=True` Universal Logit Distillation (Boizard et al. 2024, arXiv 2402.12030),
    which needs no shared vocabulary: the teacher re-tokenizes the same text with its own tokenizer
    (`teacher_tokenizer_name_or_path`, default the teacher's), the two tokenizations are aligned by byte offsets
    (`use_extended_uld`), split tokens merged (`uld_token_merge_strategy`), and the sorted probabilities compared
    (with `uld_use_hybrid_loss`, a JSD over the tokens both vocabularies share).

    Checked when the config is built, each error naming the field and what it may be (TRL checks some of these only
    with `use_uld_loss=True`, or not at all): `lmbda` and `beta` in [0, 1], `temperature` > 0, `top_p` in (0, 1],
    `top_k` an integer >= 0, `max_completion_length` an integer >= 1, `disable_dropout` a boolean, `seq_kd` False
    (TRL 1.16's GOLDTrainer stores it and never reads it: a teacher-sampled batch is not implemented), and with
    `use_uld_loss=True` the ULD fields (weights >= 0, temperatures > 0, `uld_token_merge_strategy` `observed` or
    `bayesian`, the two hybrid weights both None or both numbers >= 0).
    """

    algorithm: ClassVar[str] = "gold"

    teacher_model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "Path or Hub id of the teacher, loaded (with teacher_model_init_kwargs) when the trainer is given "
            "no teacher_model; one of the two is required. With use_uld_loss=True the teacher may have another "
            "tokenizer (teacher_tokenizer_name_or_path, default this path); else it must share the student's."
        },
    )

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_number(owner, "lmbda", self.lmbda, ge=0, le=1)
        check_number(owner, "beta", self.beta, ge=0, le=1)
        check_number(owner, "temperature", self.temperature, gt=0)
        check_number(owner, "top_p", self.top_p, gt=0, le=1)
        check_number(owner, "top_k", self.top_k, ge=0, integer=True)
        check_number(owner, "max_completion_length", self.max_completion_length, ge=1, integer=True)
        check_bool(owner, "disable_dropout", self.disable_dropout)
        check_bool(owner, "use_uld_loss", self.use_uld_loss)
        if self.seq_kd is not False:
            raise ValueError(
                f"{owner}: seq_kd={self.seq_kd!r} is not valid; must be False: TRL 1.16's GOLDTrainer stores seq_kd "
                "and never reads it (it trains on the student's samples with probability lmbda, else on the "
                "dataset's completions); for sequence-level KD on a teacher's samples, generate them into the dataset"
            )
        if self.use_uld_loss:
            check_uld_settings(owner, {name: getattr(self, name) for name in ULD_SETTINGS})
        super().__post_init__()
        check_hardware(self)

    @property
    def policy_loss_name(self) -> str:
        """The loss this config trains (the model card's "policy loss"): the ULD loss or the generalized JSD."""
        return "trl_ext.losses.gold.ULDLoss" if self.use_uld_loss else "trl_ext.losses.gold.generalized_jsd_loss"


document_parameters(GOLDConfig, TRLSFTConfig, "Every other parameter is `trl.SFTConfig`'s.")
