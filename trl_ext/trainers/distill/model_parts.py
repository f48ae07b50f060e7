"""The parts of a causal LM that on-policy distillation reads, and the checks of a teacher model against the student.

The dense modes (`teacher_top_k` ≠ 0) run a model's backbone (`last_hidden_state`) and project its hidden states
through the output layer themselves (`output_layer`, with the model's logit post-processing), so that no
`[B, T, V]` logits tensor exists; a teacher must share the student's tokenizer (`compare_vocabularies`) and cover
its vocabulary (`output_rows`).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from accelerate.utils import is_peft_model
from transformers import AutoTokenizer
from trl.trainer.utils import maybe_gather_lm_head_ctx

from ...losses.distillation import OutputLayer

logger = logging.getLogger(__name__)


def student_tokenizer(trainer: Any) -> Any:
    return getattr(trainer.processing_class, "tokenizer", trainer.processing_class)


def check_teacher_tokenizer(owner: str, student: Any, source: str | None, trust_remote_code: bool) -> None:
    """The teacher scores the student's token ids, so it must use the student's tokenizer: compared when the
    teacher's can be loaded from `source` (its path, Hub id or served model name)."""
    teacher_tokenizer = None
    if source:
        try:
            teacher_tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as err:
            logger.warning("%s: cannot load the teacher's tokenizer from %r (%s)", owner, source, err)
    if teacher_tokenizer is None:
        logger.warning(
            "%s: the teacher's tokenizer is unknown, so it is not compared with the student's; the teacher must use "
            "the student's tokenizer (pass the teacher as a path to check it)",
            owner,
        )
        return
    compare_vocabularies(owner, student.get_vocab(), teacher_tokenizer.get_vocab(), source)


def check_dense_teacher(owner: str, teacher: torch.nn.Module, k: int, student_rows: int) -> None:
    """A dense mode (`teacher_top_k` ≠ 0) reads the teacher's hidden states and output layer, and compares the
    teacher's top-k with the student's vocabulary (the whole vocabulary with -1)."""
    base = causal_lm(teacher)
    if getattr(base, "base_model", base) is base:
        raise ValueError(
            f"{owner}: teacher_top_k={k} needs the teacher's hidden states and output layer, but this teacher "
            f"({type(base).__name__}) exposes no backbone (`base_model`); only its sampled-token log-probs can be "
            "used: set teacher_top_k=0"
        )
    rows = output_rows(teacher)
    if k > rows:
        raise ValueError(
            f"{owner}: teacher_top_k={k} is larger than the teacher's vocabulary ({rows} tokens); use at most {rows}, "
            "or -1 for the whole vocabulary"
        )
    if k == -1 and student_rows != rows:
        raise ValueError(
            f"{owner}: teacher_top_k=-1 compares the whole vocabularies, but the student's output layer has "
            f"{student_rows} rows and the teacher's {rows}; use a teacher of the student's vocabulary size, or "
            "teacher_top_k > 0 (the rows beyond the teacher's fall in the tail)"
        )


def compare_vocabularies(owner: str, student: dict[str, int], teacher: dict[str, int], source: str) -> None:
    if student == teacher:
        return
    differing = sorted(token for token in student.keys() | teacher.keys() if student.get(token) != teacher.get(token))
    examples = ", ".join(f"{t!r}: student {student.get(t)} / teacher {teacher.get(t)}" for t in differing[:3])
    raise ValueError(
        f"{owner}: the teacher's tokenizer ({source}) differs from the student's ({len(teacher)} vs {len(student)} "
        f"tokens, {len(differing)} tokens with different ids, e.g. {examples}); on-policy distillation scores the "
        "student's token ids with the teacher, so both must share one tokenizer"
    )


def causal_lm(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a PEFT wrapper (or the model itself)."""
    return model.base_model.model if is_peft_model(model) else model


def last_hidden_state(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int
) -> torch.Tensor:
    """The backbone's last hidden states that predict the last `logits_to_keep` tokens, `[B, logits_to_keep, H]`
    (the position before each token: the output layer is not run)."""
    backbone = causal_lm(model).base_model
    hidden = backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    return hidden[:, :-1][:, -logits_to_keep:]


def output_layer(model: torch.nn.Module) -> OutputLayer:
    """The model's output layer with its logit post-processing, read as TRL reads it (`logit_scale`, Muse Glimmer's
    `output_multiplier`, Falcon-H1's `lm_head_multiplier`, Granite's / HyperCLOVA X's `logits_scaling`, Gemma's
    `final_logit_softcapping`); a ZeRO-3 partitioned weight is gathered around each use, an FSDP2 one once."""
    head = causal_lm(model).get_output_embeddings()
    config = causal_lm(model).config.get_text_config()
    scale = getattr(config, "logit_scale", None)
    for name in ("output_multiplier", "lm_head_multiplier"):
        scale = getattr(config, name, None) if scale is None else scale
    if scale is None and getattr(config, "logits_scaling", None) is not None:
        scale = config.logits_scaling if config.model_type == "hyperclovax" else 1 / config.logits_scaling
    weight, bias = head.weight, head.bias
    if isinstance(weight, torch.distributed.tensor.DTensor):
        weight = weight.full_tensor()
        bias = bias.full_tensor() if bias is not None else None
    return OutputLayer(
        weight,
        bias,
        1.0 if scale is None else float(scale),
        getattr(config, "final_logit_softcapping", None),
        gathered=lambda: maybe_gather_lm_head_ctx(head.weight, head.bias),
        rows=output_rows(causal_lm(model)),
    )


def output_rows(model: torch.nn.Module) -> int:
    """Rows of the model's output layer (its vocabulary), also when DeepSpeed ZeRO-3 has partitioned the weight (its
    local shape is then empty and `ds_shape` holds the full one)."""
    weight = model.get_output_embeddings().weight
    return int(getattr(weight, "ds_shape", weight.shape)[0])
