"""GPG: Group Policy Gradient (verl `gpg`).

Paper: Chu et al. 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning" (AMAP,
arXiv 2504.02546). GPG drops PPO's surrogate altogether (no ratio, no clip, no KL, no critic): the loss is the
plain policy gradient on the group-relative advantages of the `gpg` advantage estimator
(`trl_ext.advantages.gpg`), with w the optional importance-sampling correction (`importance_sampling_ratio`,
verl's `rollout_is_weights`; 1 when not given):

    L = −A · lp · w,   loss = agg(L)

Ports verl 0.9.1 `compute_policy_loss_gpg`: `old_logprob` is not read, and the aggregation is `loss_agg_mode`
(verl's actor default `token-mean`).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ..components import SHARE
from .base import PolicyLoss, loss_agg_mode_argument, register_policy_loss
from .inputs import Metrics


@register_policy_loss("gpg")
class GPGPolicyLoss(PolicyLoss):
    """GPG: L = −A·lp·w, aggregated by `loss_agg_mode`. Metric: `pg_loss` (verl returns none).

    Inputs (`inputs()`): `logprob`, `action_mask`, `advantages` (`[B]`, `[B, 1]` or `[B, T]`),
    `importance_sampling_ratio` (optional, `[B, T]` or `[B, 1]`) and the window counts. NaN / ±inf in `logprob`,
    `advantages` or `importance_sampling_ratio` at a valid position make the loss NaN; at masked positions they are
    ignored.
    """

    arguments = (loss_agg_mode_argument("token-mean"),)
    metrics: ClassVar[dict[str, str]] = {"pg_loss": SHARE}

    def __call__(
        self,
        logprob: torch.Tensor,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        importance_sampling_ratio: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        weights = b.token_weights(importance_sampling_ratio)
        coef = -b.advantages(advantages)  # [B, 1] or [B, T]
        if weights is not None:
            coef = coef * weights
        loss = b.aggregate(coef * b.select(logprob), self.loss_agg_mode)
        return loss, {"pg_loss": loss.detach()}
