"""sPPO: PPO with a log-space trust region on the policy gradient (Trinity-RFT `sppo`).

Paper: Vaswani et al. 2022 (AISTATS), "A general class of surrogate functions for stable and efficient
reinforcement learning" (arXiv 2108.05828), as Trinity-RFT's `sppo_loss_fn` cites it. The surrogate is linear in
the log-ratio and tokens whose (detached) ratio leaves the symmetric-in-log band are dropped:

    keep = 1/(1 + ε) ≤ sg(r) ≤ 1 + ε,   L = −A · (lp − old) · keep

Inside the band the gradient is exactly A·∇lp.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ..components import MEAN, SHARE, Argument
from .base import PolicyLoss, loss_agg_mode_argument, register_policy_loss
from .inputs import Metrics


@register_policy_loss("sppo")
class SPPOPolicyLoss(PolicyLoss):
    """sPPO. Metrics: `pg_clipfrac` (share of valid tokens outside the band), `pg_loss`.

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages` and the window counts. NaN / ±inf
    in `logprob`, `old_logprob` or `advantages` at a valid position make the loss NaN; at masked positions they
    are ignored.
    """

    arguments = (
        Argument(
            "epsilon",
            0.3,
            "Trust region of sPPO: a token contributes only while 1/(1+ε) ≤ r ≤ 1+ε.",
            gt=0,
            config_name="sppo_epsilon",
        ),
        loss_agg_mode_argument("token-mean"),
    )
    metrics: ClassVar[dict[str, str]] = {"pg_clipfrac": MEAN, "pg_loss": SHARE}

    def __call__(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        delta = b.select(logprob - b.check("old_logprob", old_logprob))
        with torch.no_grad():
            ratio = torch.exp(delta)
            outside = (ratio < 1.0 / (1.0 + self.epsilon)) | (ratio > 1.0 + self.epsilon)
            coef = torch.where(outside, 0.0, -b.advantages(advantages))
        loss = b.aggregate(coef * delta, self.loss_agg_mode)
        with torch.no_grad():
            metrics = {"pg_clipfrac": b.mean(outside), "pg_loss": loss.detach()}
        return loss, metrics
