"""On-policy distillation, asynchronously: the teacher scores the worker's samples on TRL's packed rows.

The synchronous distillation trainer (`trainers/distill/trainer.py`; Agarwal et al. 2024, arXiv 2306.13649;
Thinking Machines, "On-Policy Distillation", 2025) has the teacher score each generation batch and trains on

    A_t = kl_coef · (log π_teacher(y_t) − log μ(y_t))  +  reward_weight · Â_i

(the `on_policy_distill` estimator; `jsd` likewise reads the teacher's and the sampler's log-probs). Asynchronously
the same advantage is made in two places: the worker computes the task term reward_weight·Â_i per group (`GroupScorer`
with `reward_weight`, Â from `reward_advantage_fn`) and stamps it as the sample's advantage; the trainer forwards
the teacher on each micro-batch's packed row once per optimizer window (`PackedTeacher`, tree attention and TRL's
fused log-prob head at the sampling temperature, no gradients) and runs the distillation estimator over the window
(`window_pass.window_estimate`) on the teacher's log-probs, the sampler's μ and the trained tokens, adding the
stamped task term. μ is the sampler's log-prob, as in the synchronous trainer (its `old_per_token_logps`).

`AsyncDistillConfig` is the base of the distillation records' asynchronous forms (`AsyncOnPolicyDistillConfig`,
`AsyncJSDConfig`): `AsyncGRPOConfig` with the synchronous family's teacher fields (`TeacherArguments`, checked by the
same `check_teacher_fields`). The dense modes (`teacher_top_k` ≠ 0) are refused by name: their divergence needs the
teacher's top-k (or hidden states) beside the student's own in the loss pass, which the packed-row loss does not
compute. So are the served teachers (`teacher_model_server_url`, `teacher_server_urls`): a server scores token
sequences, but the teacher here scores TRL's packed prefix-tree rows, which carry no per-sample sequence and none of
the dataset's columns (`teacher_id`); asking a server belongs in the rollout worker, where TRL's asynchronous
distillation asks it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from transformers import AutoTokenizer
from trl.experimental.async_grpo.async_grpo_trainer import TREE_ATTENTION
from trl.trainer.utils import add_fused_lm_head, create_model_from_path

from ..core.arguments import TeacherArguments
from ..distill.config import ServedTeacherArguments, check_teacher_fields
from ..distill.model_parts import compare_vocabularies, output_rows
from .config import AsyncGRPOConfig
from .packed_rows import PackedRow

logger = logging.getLogger(__name__)


@dataclass
class AsyncDistillConfig(ServedTeacherArguments, TeacherArguments, AsyncGRPOConfig):
    """The base of the distillation algorithms' asynchronous configs: `AsyncGRPOConfig` with the teacher (see the
    module docstring)."""

    has_teacher: ClassVar[bool] = True
    _VALID_DICT_FIELDS: ClassVar[list[str]] = [*AsyncGRPOConfig._VALID_DICT_FIELDS, "teacher_model_init_kwargs"]

    def __post_init__(self) -> None:
        check_teacher_fields(self)
        if self.teacher_top_k != 0:
            raise ValueError(
                f"{type(self).__name__}: teacher_top_k={self.teacher_top_k} asks for the dense divergence, which the "
                "asynchronous trainer does not compute (it needs the teacher's top-k beside the student's own in the "
                "loss pass on the packed rows); set teacher_top_k=0 (the sampled-token advantage) or train "
                "synchronously"
            )
        for name in ("teacher_model_server_url", "teacher_server_urls"):
            if getattr(self, name) is not None:
                raise ValueError(
                    f"{type(self).__name__}: {name}={getattr(self, name)!r} asks a vLLM server for the teacher's "
                    "log-probs, which the asynchronous trainer cannot do (its teacher scores TRL's packed rows, which "
                    "hold no per-sample sequence nor the dataset's teacher_id column); use a local teacher "
                    "(teacher_model_name_or_path) or train synchronously"
                )
        super().__post_init__()

    def use_toy_task(self) -> None:
        super().use_toy_task()
        if self.teacher_model_name_or_path is None:
            from ...toy import tiny_teacher_path

            self.teacher_model_name_or_path = tiny_teacher_path()  # the toy student's teacher


class PackedTeacher:
    """A frozen teacher forwarded on TRL's packed rows: its log-probs of the trained tokens (module docstring)."""

    def __init__(self, model: torch.nn.Module, vocab_rows: int, device: torch.device):
        self.model, self.vocab_rows, self.device = model, vocab_rows, device

    @classmethod
    def load(
        cls, owner: str, source: Any, args: AsyncDistillConfig, tokenizer: Any, device: torch.device, temperature: float
    ) -> PackedTeacher:
        """Load the teacher from `source` (a path or Hub id) for tree attention, check that it shares the student's
        tokenizer and covers its vocabulary, freeze it and add TRL's fused log-prob head at `temperature`.

        Raises:
            TypeError: `source` is a loaded model (the packed rows need the model loaded with TRL's tree attention).
            ValueError: The teacher's tokenizer differs from the student's, or its output layer is smaller than the
                student's tokenizer.
        """
        if not isinstance(source, str | os.PathLike):
            raise TypeError(
                f"{owner}: teacher_model must be a path or Hub id for asynchronous training (got "
                f"{type(source).__name__}): the teacher is loaded with TRL's tree attention to score the packed rows"
            )
        source = os.fspath(source)
        student = getattr(tokenizer, "tokenizer", tokenizer)
        try:
            teacher_tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=args.trust_remote_code)
        except (OSError, ValueError) as err:
            logger.warning("%s: cannot load the teacher's tokenizer from %r (%s); only its vocabulary size is checked",
                           owner, source, err)  # fmt: skip
        else:
            compare_vocabularies(owner, student.get_vocab(), teacher_tokenizer.get_vocab(), source)
        init = dict(args.teacher_model_init_kwargs or {})
        init.setdefault("dtype", args.dtype)
        init.setdefault("trust_remote_code", args.trust_remote_code)
        model = create_model_from_path(source, device_map=None, attn_implementation=TREE_ATTENTION, **init)
        rows = output_rows(model)
        if rows < len(student):
            raise ValueError(
                f"{owner}: the teacher's output layer has {rows} rows but the student's tokenizer has {len(student)} "
                "tokens, so the teacher cannot score every token the student emits; use a teacher of the student's "
                "tokenizer and vocabulary"
            )
        add_fused_lm_head(model, temperature=temperature, outputs=("log_probs",))
        model.requires_grad_(False).eval()
        placed = torch.device(args.teacher_device) if args.teacher_device is not None else device
        return cls(model.to(placed), rows, placed)

    @torch.no_grad()
    def log_probs(self, row: PackedRow) -> tuple[torch.Tensor, torch.Tensor]:
        """`(log-probs [M] float32, scorable [M] bool)` of the row's trained tokens, on the row's device: ids beyond
        the teacher's vocabulary (a student with extra embedding rows) are not scorable."""
        home = row.token_index.device
        kwargs = {key: value.to(self.device) if torch.is_tensor(value) else value
                  for key, value in row.forward_kwargs.items()}  # fmt: skip
        labels = kwargs["shift_labels"]
        scorable = labels.flatten()[row.token_index.to(self.device)] < self.vocab_rows
        kwargs["input_ids"] = kwargs["input_ids"].clamp(max=self.vocab_rows - 1)
        kwargs["shift_labels"] = torch.where(labels >= self.vocab_rows, self.vocab_rows - 1, labels)
        out = self.model(**kwargs, fused_lm_head=True)
        logps = out.log_probs.flatten()[row.token_index.to(self.device)]
        return logps.to(home, torch.float32), scorable.to(home)


__all__ = ["AsyncDistillConfig", "PackedTeacher"]
