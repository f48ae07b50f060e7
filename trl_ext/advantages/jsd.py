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
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ..components import MEAN, Argument
from .base import AdvantageFn, AdvantageResult, as_float_tensor, check_mask, nonfinite_message, register_advantage


@register_advantage("jsd")
class JSDAdvantage(AdvantageFn):
    """`A_t = -kl_coef * JSD_t` on `response_mask`, exactly 0 elsewhere (values there, even NaN / -inf, are
    ignored); see the module docstring for `JSD_t`.

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
        jsd_valid = torch.empty_like(s)
        step = self.chunk_size or max(s.numel(), 1)
        for start in range(0, s.numel(), step):
            jsd_valid[start : start + step] = self._jsd(s[start : start + step], t[start : start + step])
        jsd = torch.zeros(teacher.shape, dtype=dtype, device=teacher.device)
        jsd[valid] = jsd_valid
        advantages = torch.where(valid, -self.kl_coef * jsd, 0.0)

        n = teacher.shape[0]
        jsd_sums, advantage_sums = jsd.sum(-1), advantages.sum(-1)
        metrics = {
            "jsd/mean": jsd_sums.mean().item() if n else 0.0,
            "jsd/std": jsd_sums.std().item() if n > 1 else 0.0,
            "advantages/mean": advantage_sums.mean().item() if n else 0.0,
        }
        keep = torch.ones(n, dtype=torch.bool, device=teacher.device)
        return AdvantageResult(advantages, keep, metrics=metrics)

    def _jsd(self, s: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        beta = self.lambda_coef
        if beta == 0:
            return s - t
        if beta == 1:
            return t - s
        beta_t = torch.tensor(beta, dtype=s.dtype, device=s.device)
        mixture = torch.logsumexp(torch.stack([s + torch.log1p(-beta_t), t + torch.log(beta_t)]), dim=0)
        return beta_t * (t - mixture) + (1 - beta_t) * (s - mixture)
