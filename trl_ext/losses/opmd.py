"""OPMD: online policy mirror descent (Trinity-RFT `opmd`).

Origin: Kimi Team 2025, "Kimi k1.5: Scaling Reinforcement Learning with LLMs" (arXiv 2501.12599),
re-derived as regularized REINFORCE in Yao, Chen et al. 2025, "Group-Relative REINFORCE Is Secretly an
Off-Policy Algorithm" (arXiv 2509.24203). With the `opmd` advantage (reward minus a group baseline):

    L = −A · lp,   loss = agg(L) / (1 + τ)

The 1/(1 + τ) comes from the mirror-descent regularizer (w.r.t. the current policy); `old_logprob` is
not used.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ..components import SHARE, Argument
from .base import PolicyLoss, loss_agg_mode_argument, register_policy_loss
from .inputs import Metrics


@register_policy_loss("opmd")
class OPMDPolicyLoss(PolicyLoss):
    """OPMD. Metric: `opmd_loss`.

    Inputs (`inputs()`): `logprob`, `action_mask`, `advantages` and the window counts. NaN / ±inf in `logprob`
    or `advantages` at a valid position make the loss NaN; at masked positions they are ignored.
    """

    arguments = (
        Argument("tau", 1.0, "Mirror-descent regularization τ: the loss −A·lp is divided by (1 + τ).", ge=0),
        loss_agg_mode_argument("token-mean"),
    )
    metrics: ClassVar[dict[str, str]] = {"opmd_loss": SHARE}

    def __call__(
        self, logprob: torch.Tensor, action_mask: torch.Tensor, advantages: torch.Tensor, **kwargs
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        coef = -b.advantages(advantages)  # [B, 1] or [B, T]; the selected log-prob is 0 at masked positions
        loss = b.aggregate(coef * b.select(logprob), self.loss_agg_mode) / (1.0 + self.tau)
        return loss, {"opmd_loss": loss.detach()}
