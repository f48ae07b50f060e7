"""The teachers of on-policy distillation: a local model, a model served by vLLM, and a per-row router over several.

Every teacher answers one question about a generation batch: at each completion position to score, what are its
log-prob of the sampled token and (dense modes, `teacher_top_k` ≠ 0) its top-k ids, log-probs and tail log-mass, or
(`teacher_top_k=-1`) its last hidden states. All at the sampling temperature, without gradients.

* `LocalTeacher`: a frozen model loaded in the trainer's processes (`teacher_model` / `teacher_model_name_or_path`),
  scoring through TRL's fused log-prob head, or its backbone and output layer in the dense modes.
* `ServedTeacher`: a vLLM server (`teacher_model_server_url`, as TRL's `ServerDistillationConfig`; or an entry of
  `teacher_server_urls`, as TRL's `AsyncDistillationConfig`), asked through TRL's `VLLMClient.get_sequence_logprobs`:
  a teacher-forced request on the student's token ids (`prompt_logprobs`, `max_tokens=1`) that returns each
  completion token's log-prob and the top-k log-probs at its position. The tail log-mass is log(1 − Σ top-k p),
  computed in float64 from those k numbers (the server sends nothing else). The whole-vocabulary mode
  (`teacher_top_k=-1`) needs hidden states, which a server does not return.
* `TeacherRouter`: the teachers by `teacher_id`. One teacher scores every row; with several, each dataset row's
  `teacher_id` column names its teacher (MOPD, multi-teacher on-policy distillation, as TRL's asynchronous
  distillation routes rows), each teacher scores its own rows, and the results are put back in row order.

Every teacher must use the student's tokenizer: it scores the student's token ids, and its top-k ids index the
student's vocabulary.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from trl.models import prepare_deepspeed, prepare_fsdp
from trl.models.utils import _ForwardRedirection
from trl.trainer.utils import add_fused_lm_head, create_model_from_path

from ...losses.distillation import teacher_top_k
from .model_parts import (
    check_dense_teacher,
    check_teacher_tokenizer,
    last_hidden_state,
    output_layer,
    output_rows,
    student_tokenizer,
)

TEACHER_ID_COLUMN = "teacher_id"
"""The dataset column that names each row's teacher when there are several (TRL's asynchronous distillation's)."""

SINGLE_TEACHER = "default"
"""The `teacher_id` of a teacher that is not named (one local teacher, or `teacher_model_server_url`)."""


# ---- the batch a teacher scores and what it returns ----------------------------------------------------------------


@dataclass(frozen=True)
class TeacherBatch:
    """Completions to score: prompts (left-padded) and completions (right-padded) as TRL's generation lays them out,
    the positions to score (`mask`, the loss mask) and the rows a local teacher forwards at a time."""

    prompt_ids: torch.Tensor  # [B, P]
    prompt_mask: torch.Tensor  # [B, P]
    completion_ids: torch.Tensor  # [B, T]
    completion_mask: torch.Tensor  # [B, T]
    mask: torch.Tensor  # [B, T] bool
    batch_size: int

    @classmethod
    def of(cls, output: Mapping[str, Any], mask: torch.Tensor, batch_size: int) -> TeacherBatch:
        keys = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
        return cls(*(output[key] for key in keys), mask, batch_size)

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)

    def rows(self, index: torch.Tensor) -> TeacherBatch:
        """The batch of rows `index` only."""
        return TeacherBatch(
            self.prompt_ids[index], self.prompt_mask[index], self.completion_ids[index],
            self.completion_mask[index], self.mask[index], self.batch_size,
        )  # fmt: skip

    def sequences(self) -> tuple[list[list[int]], list[int]]:
        """Each row without its padding, as a server request takes it: the prompt tokens, then the completion up to
        its last token in `completion_mask`; and the prompt lengths."""
        sequences, prompt_lengths = [], []
        for prompt, prompt_mask, completion, completion_mask in zip(
            self.prompt_ids.tolist(), self.prompt_mask.tolist(), self.completion_ids.tolist(),
            self.completion_mask.tolist(), strict=True,
        ):  # fmt: skip
            prompt = [token for token, keep in zip(prompt, prompt_mask, strict=True) if keep]
            length = max((t + 1 for t, keep in enumerate(completion_mask) if keep), default=0)
            sequences.append(prompt + completion[:length])
            prompt_lengths.append(len(prompt))
        return sequences, prompt_lengths


class TeacherScores(NamedTuple):
    """A teacher's answer for a batch, `[B, T, ...]` tensors on the batch's device, 0 off its mask.

    `columns`: the dense mode's (`teacher_top_k_ids`, `teacher_top_k_logprobs`, `teacher_tail_logprob`, or
    `teacher_hidden_states`), stored in the generation batch for the loss pass; `logprob`: the sampled tokens'
    log-probs (float32, None unless asked for); `valid`: the tokens the teacher can score (None: all of them)."""

    columns: dict[str, torch.Tensor]
    logprob: torch.Tensor | None
    valid: torch.Tensor | None


# ---- a local teacher -----------------------------------------------------------------------------------------------


class LocalTeacher:
    """A frozen teacher model in the trainer's processes (see the module docstring)."""

    def __init__(
        self, trainer: Any, teacher_id: str, model: torch.nn.Module, input_device: torch.device, sharded: bool
    ):
        self.teacher_id, self.model, self.input_device, self.sharded = teacher_id, model, input_device, sharded
        self.log_probs_and_entropies = trainer.log_probs_and_entropies  # TRL's fused log-prob pass
        self.accelerator = trainer.accelerator
        self.vocab_rows = output_rows(model)
        self.student_may_exceed = output_rows(trainer.model) > self.vocab_rows
        self.redirect = _ForwardRedirection()

    @classmethod
    def load(cls, trainer: Any, teacher_id: str, source: str | torch.nn.Module) -> LocalTeacher:
        """Load `source` (a path / Hub id, after its tokenizer is checked; or a model), check its vocabulary, freeze it,
        add TRL's fused log-prob head at the sampling temperature and place it (`teacher_device`, its own
        `device_map`, or sharded like TRL's reference model under DeepSpeed / FSDP)."""
        args, owner = trainer.args, type(trainer).__name__
        check_teacher_tokenizer(
            owner, student_tokenizer(trainer), source if isinstance(source, str) else source.config._name_or_path,
            args.trust_remote_code,
        )  # fmt: skip
        if isinstance(source, str):  # after the tokenizer check: a wrong teacher fails before its weights load
            init = dict(args.teacher_model_init_kwargs or {})
            init.setdefault("dtype", trainer.model.dtype)
            init.setdefault("trust_remote_code", args.trust_remote_code)
            init.setdefault("device_map", None)
            source = create_model_from_path(source, **init)
        teacher = source
        rows, tokens = output_rows(teacher), len(student_tokenizer(trainer))
        if rows < tokens:
            raise ValueError(
                f"{owner}: the teacher's output layer has {rows} rows but the student's tokenizer has {tokens} tokens, "
                "so the teacher cannot score every token the student emits; the teacher must use the student's "
                "tokenizer and vocabulary"
            )
        if args.dense_distillation:
            check_dense_teacher(owner, teacher, args.teacher_top_k, output_rows(trainer.model))
        teacher.eval()
        teacher.requires_grad_(False)
        base = teacher.get_base_model() if hasattr(teacher, "get_base_model") else teacher
        add_fused_lm_head(base, temperature=trainer.temperature)

        spread = len(set((getattr(teacher, "hf_device_map", None) or {}).values())) > 1
        sharded = False
        if args.teacher_device is not None:
            if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
                raise ValueError(
                    f"{owner}: teacher_device={args.teacher_device!r} cannot be combined with DeepSpeed / FSDP, which "
                    "place (and shard) the teacher like the reference model; unset it"
                )
            teacher = teacher.to(torch.device(args.teacher_device))
        elif spread:
            pass  # placed by `device_map` over several devices: leave it there
        elif trainer.is_deepspeed_enabled:
            teacher, sharded = prepare_deepspeed(teacher, trainer.accelerator), True
        elif trainer.is_fsdp_enabled:
            teacher, sharded = prepare_fsdp(teacher, trainer.accelerator), True
        else:
            teacher = trainer.accelerator.prepare_model(teacher, evaluation_mode=True)
        device = (
            torch.device(args.teacher_device) if args.teacher_device is not None
            else base.get_input_embeddings().weight.device if spread else trainer.accelerator.device
        )  # fmt: skip
        return cls(trainer, teacher_id, teacher, device, sharded)

    def score(self, batch: TeacherBatch, top_k: int, sampled: bool, temperature: float) -> TeacherScores:
        if top_k == 0:
            logprob, valid = self.sampled_token_logprobs(batch)
            return TeacherScores({}, logprob, valid)
        return self.dense(batch, top_k, sampled, temperature)

    @torch.no_grad()
    def sampled_token_logprobs(self, batch: TeacherBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The log-probs of the completion tokens (float32, on the batch's device) through TRL's fused head, and the
        mask of the tokens the teacher can score (None: all of them)."""
        input_ids, attention_mask, width = batch.input_ids, batch.attention_mask, batch.completion_ids.size(1)
        valid = None
        if self.student_may_exceed:
            valid = input_ids[:, -width:] < self.vocab_rows
            input_ids = input_ids.clamp(max=self.vocab_rows - 1)
        device = self.input_device
        logps, _, _ = self.log_probs_and_entropies(
            self.model, input_ids.to(device), attention_mask.to(device), width, batch_size=batch.batch_size
        )
        return logps.to(attention_mask.device, torch.float32), valid

    @torch.no_grad()
    def dense(self, batch: TeacherBatch, top_k: int, sampled: bool, temperature: float) -> TeacherScores:
        """One forward per `batch_size` rows: with top-k, the top-k ids / log-probs and tail log-mass at each scored
        position; with the whole vocabulary, the last hidden states (projected chunk by chunk in the loss); and the
        sampled tokens' log-probs when `sampled`."""
        mask, width = batch.mask, batch.completion_ids.size(1)
        input_ids, attention_mask = batch.input_ids, batch.attention_mask
        valid = batch.completion_ids < self.vocab_rows
        labels = batch.completion_ids.clamp(max=self.vocab_rows - 1)
        unwrapped = self.accelerator.unwrap_model(self.model)
        layer = output_layer(unwrapped)
        columns: dict[str, list[torch.Tensor]] = {}
        for start in range(0, input_ids.size(0), batch.batch_size):
            rows = slice(start, start + batch.batch_size)
            hidden = self.redirect(
                self.model, unwrapped, last_hidden_state, unwrapped,
                input_ids[rows].to(self.input_device), attention_mask[rows].to(self.input_device), width,
            )  # fmt: skip
            at = mask[rows].to(hidden.device)
            scored = {}
            if top_k > 0 or sampled:
                top = teacher_top_k(hidden[at], layer, max(top_k, 1), labels[rows].to(hidden.device)[at], temperature)
                if top_k > 0:
                    scored["teacher_top_k_ids"], scored["teacher_top_k_logprobs"] = top.ids, top.logprobs
                    scored["teacher_tail_logprob"] = top.tail_logprob
                if sampled:
                    scored["teacher_logprob"] = top.label_logprob
            if top_k == -1:
                scored["teacher_hidden_states"] = hidden[at]
            for name, value in scored.items():
                full = value.new_zeros((*at.shape, *value.shape[1:]))
                full[at] = value
                columns.setdefault(name, []).append(full.to(mask.device))
        merged = {name: torch.cat(parts) for name, parts in columns.items()}
        logprob = merged.pop("teacher_logprob", None)
        if logprob is None:
            return TeacherScores(merged, None, None)
        return TeacherScores(merged, logprob.float(), None if bool(valid.all()) else valid)


# ---- a served teacher ----------------------------------------------------------------------------------------------


class ServedTeacher:
    """A teacher served by vLLM, asked through TRL's `VLLMClient` (see the module docstring)."""

    def __init__(self, owner: str, teacher_id: str, field: str, client: Any, vocab_rows: int):
        self.owner, self.teacher_id, self.field, self.client = owner, teacher_id, field, client
        self.vocab_rows = vocab_rows  # the student's: a top-k of that many ids leaves no tail

    @classmethod
    def connect(cls, trainer: Any, teacher_id: str, field: str, url: str) -> ServedTeacher:
        """TRL's client of the server at `url` (`field` names it in errors), waiting up to `vllm_server_timeout`
        seconds for it; the served model's tokenizer is compared with the student's when it can be loaded from the
        model's name.

        Raises:
            ImportError: vLLM is not installed where the trainer runs (TRL's client needs it).
            ConnectionError: The server does not answer within `vllm_server_timeout`, or does not serve vLLM's API.
            ValueError: `teacher_top_k` above the student's vocabulary.
        """
        from trl.generation.vllm_client import VLLMClient

        owner, args, timeout = type(trainer).__name__, trainer.args, trainer.args.vllm_server_timeout
        tokenizer = student_tokenizer(trainer)
        if args.teacher_top_k > len(tokenizer):
            raise ValueError(
                f"{owner}: teacher_top_k={args.teacher_top_k} is larger than the vocabulary ({len(tokenizer)} tokens); "
                "use at most that"
            )
        try:
            client = VLLMClient(base_url=url, connection_timeout=timeout)
        except ImportError as err:
            raise ImportError(
                f"{owner}: {field}={url!r} is a served teacher, asked through TRL's VLLMClient, which needs vLLM "
                f"installed where the trainer runs: pip install 'trl[vllm]' ({err})"
            ) from err
        except Exception as err:  # requests' errors, TRL's `Request failed: ...`
            raise ConnectionError(
                f"{owner}: the teacher server {field}={url!r} cannot be reached or is not a vLLM server (waited "
                f"vllm_server_timeout={timeout:g} s): {err}. Start it with `vllm serve <teacher> --logprobs-mode "
                "processed_logprobs`, or fix the URL"
            ) from err
        check_teacher_tokenizer(owner, tokenizer, client.model, args.trust_remote_code)
        return cls(owner, teacher_id, field, client, output_rows(trainer.model))

    @property
    def where(self) -> str:
        return f"the teacher server {self.field}"

    @torch.no_grad()
    def score(self, batch: TeacherBatch, top_k: int, sampled: bool, temperature: float) -> TeacherScores:
        """The sampled tokens' log-probs and (top_k > 0) the top-k with its tail, from one request of every row (the
        whole-vocabulary mode is refused by the config: a server sends no hidden states)."""
        sequences, prompt_lengths = batch.sequences()
        k = max(top_k, 1)
        try:
            answer = self.client.get_sequence_logprobs(
                sequences, prompt_lengths, top_logprobs=k, temperature=temperature
            )
        except Exception as err:
            raise RuntimeError(
                f"{self.owner}: {self.where} failed to score {len(sequences)} completions with top_logprobs={k} "
                f"(above 20, vLLM needs --max-logprobs): {err}"
            ) from err
        rows, width = batch.mask.shape
        sampled_logps = torch.zeros(rows, width, dtype=torch.float64)
        top_logps = torch.zeros(rows, width, k, dtype=torch.float64)
        top_ids = torch.zeros(rows, width, k, dtype=torch.long)
        for row, (actual, values, ids) in enumerate(
            zip(answer["actual_logprobs"], answer["logprobs"], answer["logprob_token_ids"], strict=True)
        ):
            if actual:
                sampled_logps[row, : len(actual)] = torch.tensor(actual, dtype=torch.float64)[:, 0]
                top_logps[row, : len(values)] = torch.tensor(values, dtype=torch.float64)
                top_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        mask = batch.mask.cpu()
        if sampled:
            self.check_finite(sampled_logps[mask], "the log-prob of the sampled token")
        columns = {}
        if top_k > 0:
            self.check_finite(top_logps[mask], f"teacher_top_k={top_k} log-probs (vLLM needs --max-logprobs >= k)")
            tail = top_k_tail_logprob(top_logps, self.vocab_rows)
            columns = {
                "teacher_top_k_ids": torch.where(mask[..., None], top_ids, 0),
                "teacher_top_k_logprobs": torch.where(mask[..., None], top_logps, 0.0).float(),
                "teacher_tail_logprob": torch.where(mask, tail, 0.0).float(),
            }
        device = batch.mask.device
        columns = {name: value.to(device) for name, value in columns.items()}
        logprob = torch.where(mask, sampled_logps, 0.0).float().to(device) if sampled else None
        return TeacherScores(columns, logprob, None)

    def check_finite(self, values: torch.Tensor, what: str) -> None:
        missing = int((~torch.isfinite(values)).reshape(values.shape[0], -1).any(-1).sum())
        if missing:
            raise RuntimeError(
                f"{self.owner}: {self.where} returned no finite value for {what} at {missing} of the "
                f"{values.shape[0]} scored completion tokens; serve the teacher with vLLM, which reports every prompt "
                "token's log-prob"
            )


SERVED_TAIL_FLOOR = 1e-7
"""The least tail mass taken from a server's top-k: TRL's floor (`server_distillation`'s tail bucket). The k log-probs
a server sends are float32 roundings of a float32 log-softmax, whose top entries carry absolute errors of about
1e-7 to 1e-6, so 1 − Σ p does not resolve a smaller mass; a zero tail would make the reverse KL infinite as soon as
the student puts any mass outside the teacher's top-k."""


def top_k_tail_logprob(top_logprobs: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """log(1 − Σ_k exp(top-k log-probs)) over the last dimension, in float64: the teacher's mass outside its top-k when
    only the top-k is known, at least `SERVED_TAIL_FLOOR`; −inf when the top-k is the whole vocabulary (`vocab_size`
    ids), as `losses.distillation.tail_logprob` gives."""
    if top_logprobs.shape[-1] >= vocab_size:
        return torch.full(top_logprobs.shape[:-1], -torch.inf, dtype=torch.float64, device=top_logprobs.device)
    mass = torch.logsumexp(top_logprobs.double(), dim=-1)
    return torch.log(-torch.expm1(mass)).clamp(min=math.log(SERVED_TAIL_FLOOR)).nan_to_num(math.log(SERVED_TAIL_FLOOR))


# ---- several teachers ----------------------------------------------------------------------------------------------


class TeacherRouter:
    """The teachers by `teacher_id` (see the module docstring): one scores every row, several score their rows."""

    def __init__(self, owner: str, teachers: Mapping[str, LocalTeacher | ServedTeacher]):
        self.owner, self.teachers = owner, dict(teachers)
        self.ids = list(self.teachers)
        if len(self.teachers) > 1:
            sharded = [t.teacher_id for t in self.teachers.values() if getattr(t, "sharded", False)]
            if sharded:
                raise ValueError(
                    f"{owner}: the local teacher(s) {sharded} are sharded by DeepSpeed / FSDP, which needs every "
                    "process to forward the same batches, but with several teachers each one scores only the rows "
                    f"whose {TEACHER_ID_COLUMN} names it; serve them (teacher_server_urls) or use one teacher"
                )

    @property
    def routes(self) -> bool:
        """Whether rows are routed by their `teacher_id` (several teachers)."""
        return len(self.teachers) > 1

    @property
    def local_model(self) -> torch.nn.Module | None:
        """The model of the only teacher when it is a local one (else None)."""
        only = next(iter(self.teachers.values())) if len(self.teachers) == 1 else None
        return only.model if isinstance(only, LocalTeacher) else None

    def row_index(self, rows: Sequence[Mapping[str, Any]]) -> torch.Tensor:
        """The index (in `ids`) of each dataset row's teacher, `[len(rows)]`.

        Raises:
            ValueError: A row whose `teacher_id` is missing or names no teacher.
        """
        position = {teacher_id: i for i, teacher_id in enumerate(self.ids)}
        index = []
        for row in rows:
            value = row.get(TEACHER_ID_COLUMN)
            if value not in position:
                raise unknown_teacher(self.owner, value, self.ids)
            index.append(position[value])
        return torch.tensor(index, dtype=torch.long)

    def score(
        self, batch: TeacherBatch, index: torch.Tensor | None, top_k: int, sampled: bool, temperature: float
    ) -> TeacherScores:
        """Each row scored by its teacher (`index`: the `row_index` of the batch's rows; unused with one teacher)."""
        if not self.routes:
            return next(iter(self.teachers.values())).score(batch, top_k, sampled, temperature)
        if index is None:
            raise RuntimeError(f"{self.owner}: several teachers, but the generation batch does not say each row's")
        index = index.to(batch.mask.device)
        columns: dict[str, torch.Tensor] = {}
        logprob = valid = None
        for i, teacher in enumerate(self.teachers.values()):
            rows = (index == i).nonzero().flatten()
            if rows.numel() == 0:
                continue
            part = teacher.score(batch.rows(rows), top_k, sampled, temperature)
            for name, value in part.columns.items():
                if name not in columns:
                    columns[name] = value.new_zeros((index.numel(), *value.shape[1:]))
                columns[name][rows] = value
            if part.logprob is not None:
                logprob = part.logprob.new_zeros(batch.mask.shape) if logprob is None else logprob
                logprob[rows] = part.logprob
            if part.valid is not None:
                valid = torch.ones_like(batch.mask) if valid is None else valid
                valid[rows] = part.valid
        return TeacherScores(columns, logprob, valid)


def unknown_teacher(owner: str, value: Any, ids: Sequence[str]) -> ValueError:
    return ValueError(
        f"{owner}: {TEACHER_ID_COLUMN}={value!r} names no teacher; must be one of {', '.join(map(repr, ids))} (the "
        "keys of teacher_server_urls and of the trainer's teacher_model)"
    )


def check_teacher_column(owner: str, ids: Sequence[str], split: str, dataset: Any) -> None:
    """With several teachers (`ids`), a dataset that lists its columns (not streamed) must have a `teacher_id` column
    naming one of them on every row: checked before training (streamed rows are checked as they come)."""
    if len(ids) < 2 or dataset is None:
        return
    for key, data in dataset.items() if isinstance(dataset, dict) else [(None, dataset)]:
        columns = getattr(data, "column_names", None)
        if columns is None:
            continue
        where = split if key is None else f"{split}[{key!r}]"
        if TEACHER_ID_COLUMN not in columns:
            raise ValueError(
                f"{owner}: {where} has no {TEACHER_ID_COLUMN!r} column, which names the teacher of each row when there "
                f"are several ({', '.join(map(repr, ids))}); add it, or configure one teacher"
            )
        for value in data.unique(TEACHER_ID_COLUMN):
            if value not in ids:
                raise unknown_teacher(owner, value, ids)


# ---- the teachers a trainer is given -------------------------------------------------------------------------------


def teacher_sources(owner: str, model: Any, teacher_model: Any, args: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The local teachers (`{teacher_id: path, Hub id or model}`) and the served ones (`{teacher_id: URL}`) of a
    synchronous distillation trainer, from its `teacher_model` argument and its config.

    `teacher_model` is one teacher or, to name local teachers for the per-row routing, a dict `{teacher_id: path,
    Hub id or model}`; the config's `teacher_model_name_or_path` is one local teacher, `teacher_model_server_url` one
    served teacher and `teacher_server_urls` served teachers by `teacher_id`.

    Raises:
        ValueError: No teacher; an unnamed teacher beside another; a `teacher_id` both local and served; an empty
            dict; a local teacher's field (`teacher_model_init_kwargs`, `teacher_device`) without a local teacher.
        TypeError: A teacher that is not a path, a Hub id or a model.
    """
    served = args.served_teachers
    served_field = "teacher_model_server_url" if args.teacher_model_server_url is not None else "teacher_server_urls"
    if isinstance(teacher_model, Mapping):
        if args.teacher_model_name_or_path is not None:
            raise ValueError(
                f"{owner}: teachers given twice: teacher_model={{...}} (named) and teacher_model_name_or_path="
                f"{args.teacher_model_name_or_path!r}; pass one"
            )
        if not teacher_model:
            raise ValueError(f"{owner}: teacher_model={{}} names no teacher; give at least one {{teacher_id: path}}")
        local = {}
        for teacher_id, source in teacher_model.items():
            if not isinstance(teacher_id, str) or not teacher_id:
                raise ValueError(
                    f"{owner}: teacher_model's keys are teacher ids (non-empty strings), got {teacher_id!r}"
                )
            local[teacher_id] = checked_local_teacher(owner, model, source, f"teacher_model[{teacher_id!r}]")
        both = sorted(local.keys() & served.keys())
        if both:
            raise ValueError(
                f"{owner}: teacher_id {both[0]!r} names both a local teacher (teacher_model) and a served one "
                f"({served_field}); give each teacher its own id"
            )
        if args.teacher_model_init_kwargs and all(not isinstance(s, str) for s in local.values()):
            raise ValueError(
                f"{owner}: teacher_model_init_kwargs={args.teacher_model_init_kwargs!r} only applies to a teacher "
                "given as a path; every teacher_model passed is already loaded"
            )
    elif served:
        unnamed = teacher_model if teacher_model is not None else args.teacher_model_name_or_path
        if unnamed is not None:
            name = "teacher_model" if teacher_model is not None else "teacher_model_name_or_path"
            raise ValueError(
                f"{owner}: two teachers given: {name}={unnamed!r} and the served {served_field}; pass one, or name "
                "each teacher for the per-row routing: teacher_model={teacher_id: path or model} beside "
                "teacher_server_urls={teacher_id: url}"
            )
        local = {}
    else:
        local = {SINGLE_TEACHER: teacher_argument(owner, model, teacher_model, args)}
    if not local:
        for name in ("teacher_model_init_kwargs", "teacher_device"):
            if getattr(args, name):
                raise ValueError(
                    f"{owner}: {name}={getattr(args, name)!r} configures a local teacher, but every teacher is served "
                    f"({served_field}); unset it"
                )
    return local, served


def teacher_argument(owner: str, model: Any, teacher_model: Any, args: Any) -> Any:
    """The one local teacher to load: the trainer's `teacher_model`, else the config's `teacher_model_name_or_path`."""
    if isinstance(teacher_model, Mapping):  # reached by the asynchronous trainer only (`teacher_sources` routes)
        named = ", ".join(f"{teacher_id!r}: ..." for teacher_id in teacher_model)
        raise TypeError(
            f"{owner}: teacher_model={{{named}}} names teachers by teacher_id, which only the synchronous trainer "
            "routes per row (the asynchronous trainer's packed rows do not carry the dataset's teacher_id column); "
            "pass one teacher, or train synchronously"
        )
    configured = args.teacher_model_name_or_path
    if teacher_model is None and configured is None:
        raise ValueError(
            f"{owner}: a teacher is required: pass teacher_model= (a path, Hub id or PreTrainedModel) or set "
            f"{type(args).__name__}.teacher_model_name_or_path"
        )
    if teacher_model is not None and configured is not None and teacher_model != configured:
        raise ValueError(
            f"{owner}: two teachers given: teacher_model={teacher_model!r} and "
            f"teacher_model_name_or_path={configured!r}; pass one"
        )
    teacher = checked_local_teacher(owner, model, teacher_model if teacher_model is not None else configured)
    if isinstance(teacher, torch.nn.Module) and args.teacher_model_init_kwargs:
        raise ValueError(
            f"{owner}: teacher_model_init_kwargs={args.teacher_model_init_kwargs!r} only applies to a teacher given "
            "as a path; the teacher_model passed is already loaded"
        )
    return teacher


def checked_local_teacher(owner: str, model: Any, teacher: Any, label: str = "teacher_model") -> Any:
    """`teacher` (named `label` in errors): a path or Hub id (returned as a string), or a model other than the
    student."""
    if not isinstance(teacher, (str, os.PathLike, torch.nn.Module)):
        raise TypeError(f"{owner}: {label} must be a path, a Hub id or a PreTrainedModel, got {type(teacher)}")
    if isinstance(teacher, torch.nn.Module) and teacher is model:
        raise ValueError(f"{owner}: {label} is the student itself; load a separate copy (the teacher must stay frozen)")
    return os.fspath(teacher) if isinstance(teacher, os.PathLike) else teacher


def build_router(trainer: Any, local: Mapping[str, Any], served: Mapping[str, str]) -> TeacherRouter:
    """Load the local teachers and connect to the served ones (after TRL's init: the devices are known)."""
    owner, args = type(trainer).__name__, trainer.args
    if args.teacher_top_k == -1 and len(local) + len(served) > 1:
        raise ValueError(
            f"{owner}: teacher_top_k=-1 projects the teacher's hidden states through its output layer in the loss, "
            f"which needs one teacher, but {len(local) + len(served)} are given; use teacher_top_k > 0 with several"
        )
    teachers: dict[str, LocalTeacher | ServedTeacher] = {}
    for teacher_id, source in local.items():
        teachers[teacher_id] = LocalTeacher.load(trainer, teacher_id, source)
    for teacher_id, url in served.items():
        field = (
            "teacher_model_server_url" if args.teacher_model_server_url is not None
            else f"teacher_server_urls[{teacher_id!r}]"
        )  # fmt: skip
        teachers[teacher_id] = ServedTeacher.connect(trainer, teacher_id, field, url)
    return TeacherRouter(owner, teachers)
