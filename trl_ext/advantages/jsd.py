"""Jensen-Shannon on-policy distillation advantages: `A_t = -kl_coef * JSD_beta(t)` per response token.

Ports Trinity-RFT 0.6.0 `JSDAdvantage` (`trinity/algorithm/advantage_fn/jsd_advantage.py`, aligned with ms-swift's
generalized JSD; Agarwal et al. 2024, "On-Policy Distillation of Language Models: Learning from Self-Generated
Mistakes", arXiv 2306.13649).  With `s` / `t` the student's (sampling) and teacher's log-prob of the sampled token,
each divided by `temperature`, and `beta = lambda_coef`::

    beta = 0:      JSD = s - t                               (KL(student || teacher) at the sampled token)
    beta = 1:      JSD = t - s                               (KL(teacher || student))
    otherwise:     m = logsumexp(s + log(1 - beta), t + log(beta))
                   JSD = beta * (t - m) + (1 - beta) * (s - m)

Like the reference, the two ends are special cases: the mixture formula tends to 0 (not `s - t`) as `beta -> 0`
and to 0 as `beta -> 1`.

Deliberate difference (`form`, default `"gradient"`). The reference's advantage is `-kl_coef * JSD_t` with the
per-token value above (`form="reference"` computes exactly that). For 0 < beta < 1 that value is never positive
(Jensen: `beta*t + (1 - beta)*s <= m`), so every advantage is >= 0 and grows with the student-teacher gap: the policy
gradient then moves the student AWAY from the teacher (on the toy task the student collapses: mean JSD 0.96 -> 6.8,
reward 0.10 -> 0.12). By default the advantage is instead the per-token policy-gradient weight of the divergence,
from d JSD_beta / d p_student(x) = (1 - beta) * log(p_student(x) / M(x)) (the mixture terms cancel):

    beta = 0:      A = -kl_coef * (s - t)                    (KL(student || teacher): the reference's, unchanged)
    beta = 1:      A = kl_coef * exp(t - s)                  (KL(teacher || student) = -E_teacher[log p_student])
    otherwise:     A = -kl_coef * (1 - beta) * (s - m)

so that E_student[A * grad log p_student] = -kl_coef * grad JSD_beta at each position (tokens the teacher prefers get
A > 0). The metrics `jsd/*` stay the reference's per-token values.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ..components import MEAN, Argument
from .base import AdvantageFn, AdvantageResult, as_float_tensor, check_mask, nonfinite_message, register_advantage


@register_advantage("jsd")
class JSDAdvantage(AdvantageFn):
    """`A_t = -kl_coef * w_t` on `response_mask`, exactly 0 elsewhere (values there, even NaN / -inf, are
    ignored), `w_t` the per-token policy-gradient weight of `JSD_t` (`form="gradient"`, default) or the reference's
    `JSD_t` itself (`form="reference"`); see the module docstring.

    `compute(rewards=None, group_ids=None, *, teacher_logprob, old_logprob, response_mask)`, all `[N, T]`:
    `old_logprob` is the student's (sampling policy's) log-prob of each sampled token.  `rewards` and
    `group_ids` are unused.  `chunk_size` computes the valid tokens `chunk_size` at a time (memory only: the
    values do not change).  Metrics (the reference's): `jsd/mean` and `jsd/std` the mean and unbiased std over the
    samples of each sample's summed JSD (std 0 for a single sample), `advantages/mean` the mean over the samples of
    each sample's summed advantage; an empty batch gives 0.
    """

    token_level = True

    metrics: ClassVar[dict[str, str]] = {"jsd/mean": MEAN, "jsd/std": MEAN, "advantages/mean": MEAN}

    arguments = (
        Argument(
            "lambda_coef",
            0.5,
            "JSD mixture weight β: β·KL(teacher‖M) + (1 − β)·KL(student‖M), M = β·teacher + (1 − β)·student; 0 gives "
            "KL(student‖teacher), 1 KL(teacher‖student), 0.5 the symmetric JSD.",
            ge=0,
            le=1,
        ),
        Argument(
            "kl_coef",
            1.0,
            "Scale of the per-token advantage −kl_coef·JSD (0 gives zero advantages; a negative scale would reward "
            "moving away from the teacher and is refused).",
            ge=0,
        ),
        Argument(
            "temperature",
            1.0,
            "Both log-probs are divided by this before the JSD (the reference's log_probs / T).",
            gt=0,
            config_name="jsd_temperature",
        ),
        Argument(
            "form",
            "gradient",
            "`gradient`: the advantage is the per-token policy-gradient weight of −kl_coef·JSD_β, which moves the "
            "student towards the teacher; `reference`: Trinity-RFT 0.6.0's −kl_coef·(per-token JSD value), which "
            "for 0 < β < 1 is never negative and moves the student away (see the module docstring).",
            choices=("gradient", "reference"),
            config_name="jsd_form",
        ),
        Argument(
            "chunk_size",
            None,
            "Compute the JSD of the valid tokens this many at a time (peak memory only); None: all at once.",
            type=int,
            ge=1,
        ),
    )

    @torch.no_grad()
    def compute(
        self,
        rewards: Any = None,
        group_ids: Any = None,
        *,
        teacher_logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> AdvantageResult:
        teacher = as_float_tensor(self.name, "teacher_logprob", teacher_logprob)
        student = as_float_tensor(self.name, "old_logprob", old_logprob).to(teacher.device)
        mask_shape = tuple(torch.as_tensor(response_mask).shape)
        if teacher.shape != student.shape or teacher.dim() != 2 or mask_shape != tuple(teacher.shape):
            raise ValueError(
                f"{self.name}: teacher_logprob {tuple(teacher.shape)}, old_logprob {tuple(student.shape)} and "
                f"response_mask {mask_shape} must all have one shape [N, T]"
            )
        valid = check_mask(self.name, "response_mask", response_mask, teacher.shape, teacher.device)
        for name, value in (("teacher_logprob", teacher), ("old_logprob", student)):
            msg = nonfinite_message(name, value, where=valid)
            if msg:
                raise ValueError(f"{self.name}: {msg}; log-probs must be finite where response_mask is 1")
        dtype = torch.promote_types(teacher.dtype, student.dtype)
        s, t = student.to(dtype)[valid], teacher.to(dtype)[valid]
        if self.temperature != 1.0:
            s, t = s / self.temperature, t / self.temperature
        jsd_valid, weight_valid = torch.empty_like(s), torch.empty_like(s)
        step = self.chunk_size or max(s.numel(), 1)
        for start in range(0, s.numel(), step):
            chunk = slice(start, start + step)
            jsd_valid[chunk], weight_valid[chunk] = self._jsd(s[chunk], t[chunk])
        jsd = torch.zeros(teacher.shape, dtype=dtype, device=teacher.device)
        jsd[valid] = jsd_valid
        weight = torch.zeros_like(jsd)
        weight[valid] = weight_valid
        advantages = torch.where(valid, -self.kl_coef * weight, 0.0)

        n = teacher.shape[0]
        jsd_sums, advantage_sums = jsd.sum(-1), advantages.sum(-1)
        metrics = {
            "jsd/mean": jsd_sums.mean().item() if n else 0.0,
            "jsd/std": jsd_sums.std().item() if n > 1 else 0.0,
            "advantages/mean": advantage_sums.mean().item() if n else 0.0,
        }
        keep = torch.ones(n, dtype=torch.bool, device=teacher.device)
        return AdvantageResult(advantages, keep, metrics=metrics)

    def _jsd(self, s: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The reference's per-token JSD value and the weight whose negative is the advantage (the value itself
        for `form="reference"`, else the gradient weight; see the module docstring)."""
        beta = self.lambda_coef
        if beta == 0:
            return s - t, s - t
        if beta == 1:
            return t - s, (t - s if self.form == "reference" else -torch.exp(t - s))
        beta_t = torch.tensor(beta, dtype=s.dtype, device=s.device)
        mixture = torch.logsumexp(torch.stack([s + torch.log1p(-beta_t), t + torch.log(beta_t)]), dim=0)
        value = beta_t * (t - mixture) + (1 - beta_t) * (s - mixture)
        return value, (value if self.form == "reference" else (1 - beta_t) * (s - mixture))
