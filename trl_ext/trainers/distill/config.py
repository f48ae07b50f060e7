"""The on-policy distillation family's config (`DistillFamilyConfig`): the teacher (local, served by vLLM, or several
routed per row), the dense or sampled-token distillation term and the optional task-reward term."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar
from urllib.parse import urlparse

from ..._validation import check_choice, check_number
from ...advantages import ADVANTAGE_FNS, get_advantage_fn
from ...algorithms import get_algorithm
from ..core.arguments import _REWARD_ADVANTAGE_FNS, TeacherArguments, _help
from ..core.composition import set_arguments
from ..core.config_fields import check_kwargs, check_text
from ..core.devices import check_device
from ..grpo.config import GRPOFamilyConfig


@dataclass
class ServedTeacherArguments:
    """Teachers served by vLLM, with TRL's names: one (`ServerDistillationConfig.teacher_model_server_url`) or several
    by `teacher_id` (`AsyncDistillationConfig.teacher_server_urls`)."""

    teacher_model_server_url: str | None = field(
        default=None,
        metadata=_help(
            "Base URL of a vLLM server serving the teacher (e.g. `http://localhost:8001`), as TRL's "
            "`ServerDistillationConfig`: it scores every completion instead of a local teacher, in both the "
            "sampled-token and the top-k mode (not `teacher_top_k=-1`). Start it with `vllm serve <teacher> "
            "--logprobs-mode processed_logprobs` (and `--max-logprobs -1` for `teacher_top_k` > 20); the trainer asks "
            "it through TRL's `VLLMClient` (vLLM installed) and waits `vllm_server_timeout` seconds for it."
        ),
    )
    teacher_server_urls: dict[str, str] | str | None = field(
        default=None,
        metadata=_help(
            "vLLM servers serving teachers, by `teacher_id`, as TRL's `AsyncDistillationConfig` (a JSON object on "
            'the command line, e.g. `{"math": "http://localhost:8002", "code": "http://localhost:8003"}`), each '
            "served as for `teacher_model_server_url`. One entry scores every completion; with several, each dataset "
            "row's `teacher_id` column names the teacher of its completions (multi-teacher on-policy distillation). "
            "The trainer's `teacher_model` may add local teachers by `teacher_id` (`{teacher_id: path or model}`)."
        ),
    )

    @property
    def served_teachers(self) -> dict[str, str]:
        """The served teachers' URLs by `teacher_id` (`teacher_model_server_url` is `"default"`); empty without."""
        if self.teacher_model_server_url is not None:
            return {"default": self.teacher_model_server_url}
        return dict(self.teacher_server_urls or {})


@dataclass
class DistillFamilyConfig(ServedTeacherArguments, TeacherArguments, GRPOFamilyConfig):
    """Base of the on-policy distillation config: the teacher (local, served, or several by `teacher_id`) and the
    optional task-reward term (its policy loss is `ppo` by default, `importance_sampling` is Tinker's; any loss
    composes)."""

    _VALID_DICT_FIELDS: ClassVar[list[str]] = [
        *GRPOFamilyConfig._VALID_DICT_FIELDS,
        "teacher_model_init_kwargs",
        "teacher_server_urls",
    ]

    def _check_fields(self) -> None:
        super()._check_fields()
        check_teacher_fields(self)
        check_served_teacher_fields(self)

    @property
    def dense_distillation(self) -> bool:
        """True when the distillation term is the dense divergence (`teacher_top_k` ≠ 0)."""
        return self.teacher_top_k != 0

    @property
    def sampled_token_advantage(self) -> bool:
        """True when the advantage function's sampled-token distillation advantage is trained on: always with
        `teacher_top_k=0`; in a dense mode only when `advantage_fn` composes another one (e.g. `jsd`), which is then
        added to the dense term (the algorithm's own estimator is what the dense term replaces)."""
        return not self.dense_distillation or self.advantage_fn != get_algorithm(self.algorithm).advantage_fn

    def _check_pairing(self) -> None:
        super()._check_pairing()
        if self.dense_distillation and not self.sampled_token_advantage:
            own = ADVANTAGE_FNS[self.advantage_fn]
            unused = {**set_arguments(self, own), **(self.advantage_fn_args or {})}
            unused.pop("kl_coef", None)  # scales the dense term
            if unused:
                name, value = next(iter(unused.items()))
                raise ValueError(
                    f"{type(self).__name__}: {name}={value!r} configures the sampled-token advantage "
                    f"{self.advantage_fn!r}, which teacher_top_k={self.teacher_top_k} replaces by the dense "
                    "divergence; leave it unset, or set teacher_top_k=0"
                )
        if self.kl_penalty_fn != "none":  # reached only by a record with a reference model
            raise ValueError(
                f"{type(self).__name__}: kl_penalty_fn={self.kl_penalty_fn!r} subtracts a KL from the rewards, but the "
                "distillation advantage is computed from teacher log-probs, not rewards; use beta with kl_loss_fn "
                "(the KL in the loss) instead"
            )

    def composition(self) -> dict[str, str]:
        parts = super().composition()
        if self.dense_distillation:
            support = "the whole vocabulary" if self.teacher_top_k == -1 else f"the teacher's top-{self.teacher_top_k}"
            parts["distillation"] = f"dense, jsd_beta {self.jsd_beta:g} over {support}, kl_coef {self.kl_coef:g}"
            if not self.sampled_token_advantage:
                parts["advantage"] = f"- (the dense divergence replaces {self.advantage_fn})"
            else:
                parts["advantage"] += ", added to the dense divergence"
        else:
            parts["distillation"] = "sampled-token, the advantage"
        return parts

    def use_toy_task(self) -> None:
        if self.teacher_model_name_or_path is None and not self.served_teachers:
            from ...toy import tiny_teacher_path

            self.teacher_model_name_or_path = tiny_teacher_path()  # the toy student's teacher

    def build_reward_advantage_fn(self):
        """The advantage of the task-reward term (scaled by `reward_weight` in the trainer)."""
        return get_advantage_fn(self.reward_advantage_fn)


def check_teacher_fields(config: TeacherArguments) -> None:
    """The teacher's and the task-reward term's fields (`TeacherArguments`), each against its rule, naming it: shared
    by the synchronous and the asynchronous distillation configs."""
    owner = type(config).__name__
    check_choice(owner, "reward_advantage_fn", config.reward_advantage_fn, _REWARD_ADVANTAGE_FNS)
    check_number(owner, "reward_weight", config.reward_weight, ge=0)
    check_text(owner, "teacher_model_name_or_path", config.teacher_model_name_or_path)
    # parsed here (not by TrainingArguments) so that bad JSON is reported with the field's name
    config.teacher_model_init_kwargs = check_kwargs(
        owner, "teacher_model_init_kwargs", config.teacher_model_init_kwargs
    )
    if config.teacher_device is not None:
        check_device(owner, "teacher_device", config.teacher_device)
    check_number(owner, "teacher_top_k", config.teacher_top_k, ge=-1, integer=True)
    check_number(owner, "jsd_beta", config.jsd_beta, ge=0, le=1)


def check_served_teacher_fields(config: ServedTeacherArguments) -> None:
    """The served teachers' fields: URLs, at most one way of naming them, no local teacher beside an unnamed served
    one, and no whole-vocabulary mode (a server returns log-probs, not hidden states)."""
    owner = type(config).__name__
    single, several = config.teacher_model_server_url, config.teacher_server_urls
    check_text(owner, "teacher_model_server_url", single)
    check_url(owner, "teacher_model_server_url", single)
    config.teacher_server_urls = several = check_kwargs(owner, "teacher_server_urls", several)
    if several is not None:
        if not several:
            raise ValueError(
                f"{owner}: teacher_server_urls={{}} names no teacher; give at least one {{teacher_id: url}}, or None"
            )
        for teacher_id, url in several.items():
            check_text(owner, "teacher_server_urls' teacher_id", teacher_id, allow_none=False)
            check_url(owner, f"teacher_server_urls[{teacher_id!r}]", url)
    if single is not None and several is not None:
        raise ValueError(
            f"{owner}: teacher_model_server_url={single!r} and teacher_server_urls={several!r} both give served "
            "teachers; set one (teacher_server_urls={'default': url} is teacher_model_server_url=url)"
        )
    if config.served_teachers and config.teacher_model_name_or_path is not None:
        served = "teacher_model_server_url" if single is not None else "teacher_server_urls"
        raise ValueError(
            f"{owner}: two teachers given: teacher_model_name_or_path={config.teacher_model_name_or_path!r} and the "
            f"served {served}; set one, or name each teacher for the per-row routing (the trainer's "
            "teacher_model={teacher_id: path} beside teacher_server_urls={teacher_id: url})"
        )
    if config.served_teachers and config.teacher_top_k == -1:
        raise ValueError(
            f"{owner}: teacher_top_k=-1 compares the whole vocabularies from the teacher's hidden states, which a "
            "served teacher does not return (only log-probs); use teacher_top_k > 0 (its top-k) or 0 (the sampled "
            "token's log-prob)"
        )


def check_url(owner: str, name: str, url: object) -> None:
    """None, or an http(s) URL with a host (what TRL's `VLLMClient` takes as `base_url`)."""
    if url is None:
        return
    parsed = urlparse(url) if isinstance(url, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(
            f"{owner}: {name}={url!r} is not valid; must be an http(s) URL of a vLLM server, e.g. "
            "'http://localhost:8001'"
        )
