"""DRO: Direct Reward Optimization with a quadratic log-ratio penalty (verl `dro`).

Papers: Richemond et al. 2024, "Offline Regularised Reinforcement Learning for Large Language Models Alignment"
(DRO, arXiv 2405.19107), and its policy-gradient form in Kimi Team 2025, "Kimi k1.5: Scaling Reinforcement
Learning with LLMs" (arXiv 2501.12599), as verl (PR #7245) and Tinker's `dro` loss write it: a policy gradient on
the log-probs with an ℓ2 penalty on the log-ratio to the sampling policy instead of a clip. With Δ = lp − old and w
the optional importance-sampling correction (`importance_sampling_ratio`, verl's `rollout_is_weights`; 1 when not
given):

    L = −(A · lp − ½ β · Δ²) · w,   loss = agg(L)

The gradient wrt lp is (−A + β·Δ)·w: the penalty pulls the policy back towards the sampling policy at every valid
token, advantage 0 included (L is not proportional to A). Ports verl 0.9.1 `compute_policy_loss_dro`; verl has no
default β (`policy_loss.dro_beta` must be set > 0): the default here is 0.05, the value of verl's usage example (PR
#7245) and of Tinker's DRO documentation.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ..components import MEAN, SHARE, Argument
from .base import PolicyLoss, loss_agg_mode_argument, register_policy_loss
from .inputs import Metrics


@register_policy_loss("dro")
class DROPolicyLoss(PolicyLoss):
    """DRO: L = −(A·lp − ½β·(lp − old)²)·w, aggregated by `loss_agg_mode`. Metrics: `pg_loss`, `ppo_kl` (token
    mean of −(lp − old), verl's `actor/ppo_kl`).

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages` (`[B]`, `[B, 1]` or `[B, T]`),
    `importance_sampling_ratio` (optional, `[B, T]` or `[B, 1]`: L is not proportional to A, so the correction
    cannot be folded into the advantages) and the window counts. NaN / ±inf in `logprob`, `old_logprob`,
    `advantages` or `importance_sampling_ratio` at a valid position make the loss NaN; at masked positions they are
    ignored.
    """

    arguments = (
        Argument(
            "dro_beta",
            0.05,
            "Weight β > 0 of the quadratic log-ratio penalty ½β·(log π/π_old)² (verl's `policy_loss.dro_beta`, which "
            "has no default; 0.05 is verl's usage example and Tinker's).",
            gt=0,
        ),
        loss_agg_mode_argument("token-mean"),
    )
    metrics: ClassVar[dict[str, str]] = {"pg_loss": SHARE, "ppo_kl": MEAN}

    def __call__(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        importance_sampling_ratio: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        adv = b.advantages(advantages)
        weights = b.token_weights(importance_sampling_ratio)
        lp = b.select(logprob)
        log_ratio = b.select(logprob - b.check("old_logprob", old_logprob))
        # −(A·lp − β/2·log_ratio²) in two passes
        per_token = torch.addcmul(lp * -adv, log_ratio, log_ratio, value=0.5 * self.dro_beta)
        if weights is not None:
            per_token = per_token * weights
        loss = b.aggregate(per_token, self.loss_agg_mode)  # 0 at masked positions
        with torch.no_grad():
            metrics = {"pg_loss": loss.detach(), "ppo_kl": -b.mean(log_ratio.detach())}
        return loss, metrics
