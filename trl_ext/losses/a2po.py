"""A*-PO: policy optimization by regression onto the optimal advantage (TRL 1.16's `trl.experimental.a2po`).

Paper: Brantley, Chen, Gao, Lee, Sun, Zhan and Zhang 2025, "Accelerating RL for LLM Reasoning with Optimal Advantage
Regression" (arXiv 2505.20686). The KL-regularized objective max_π E[r] − β·KL(π‖π_ref) has the optimal policy
π*(y|x) ∝ π_ref(y|x)·exp(r(x, y)/β), whose log-ratio to the reference is the optimal advantage divided by β:
β·log π*(y|x)/π_ref(y|x) = r(x, y) − V*(x), with V*(x) = β·log E_{y∼π_ref}[exp(r(x, y)/β)]. A*-PO estimates V* once,
offline, from `N` reference samples per prompt (`trl_ext.advantages.a2po.optimal_value`, with β₁), then trains on
one on-policy completion per prompt by least squares on that identity (with β₂). Per sequence i, with m the action
mask, lp / ref the policy's / reference's per-token log-probs and A_i = r_i − V*(x_i) (`advantages`):

    ρ_i = Σ_t m·lp − Σ_t m·ref                 (the sequence log-ratio log π(y|x) / π_ref(y|x))
    L_i = (β₂·ρ_i − A_i)²,     loss = mean over the B rows of L_i

exactly TRL 1.16's `A2POTrainer.compute_loss` (and the paper's code, `compute_policy_loss` of its verl fork): no
length normalization, no temperature, no clipping; the mean counts every row. Its metrics are TRL's: `implicit_reward`
(the mean of β₂·ρ_i) and `advantage` (the mean of A_i), with `a2po_loss` the loss itself.

Inputs: `advantages` is one value per sequence, `[B]` or `[B, 1]` (a per-token `[B, T]` advantage is read as its
mean over the row's valid tokens, which is the sequence's value when it is broadcast over the tokens);
`ref_logprob` is per token `[B, T]`, or the per-row sums `[B]` that TRL's trainer computes. A row without a valid
token has ρ_i = A_i = 0 (its loss is 0; it is still counted in the mean, as TRL counts every row). Window
normalization (docs/design.md §2.6): with the window's `global_valid_seqs` the loss is this micro-batch's share
Σ_i L_i / `global_valid_seqs` of the window's mean, so the micro-batches' shares add up to the mean over the
window's rows.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ..components import MEAN, SHARE, Argument
from .base import PolicyLoss, register_policy_loss
from .inputs import Metrics
from .masked_batch import MaskedBatch


@register_policy_loss("a2po")
class A2POPolicyLoss(PolicyLoss):
    """A*-PO's regression (module docstring): per sequence (β₂·log π/π_ref − A)², averaged over the rows. Metrics:
    `a2po_loss`, `implicit_reward` (mean of β₂·log π/π_ref), `advantage` (mean of A).

    Inputs (`inputs()`): `logprob`, `ref_logprob` (`[B, T]`, or the per-row sums `[B]`), `action_mask`,
    `advantages` (`[B]` / `[B, 1]`: r − V*(x) per sequence; `[B, T]` is read as its token mean per row) and the
    window count `global_valid_seqs`. NaN / ±inf in `logprob`, `ref_logprob` or `advantages` at a valid position (for
    `[B]` inputs: in a row with a valid token) make the loss NaN; at masked positions they are ignored. No rows give
    0.
    """

    arguments = (
        Argument(
            "beta2",
            1e-3,
            "β₂: the KL temperature of the regression target, (β₂·log π(y|x)/π_ref(y|x) − (r − V*(x)))². Smaller "
            "β₂ lets the policy move further from the reference (the paper's and TRL's 1e-3).",
            gt=0,
        ),
    )
    metrics: ClassVar[dict[str, str]] = {"a2po_loss": SHARE, "implicit_reward": MEAN, "advantage": MEAN}
    window_inputs: ClassVar[tuple[str, ...]] = ("global_valid_seqs",)

    def __call__(
        self,
        logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        ref = ref_logprob.detach() if isinstance(ref_logprob, torch.Tensor) else ref_logprob
        if isinstance(ref, torch.Tensor) and ref.dim() == 1:
            ref_sum = torch.where(b.row_tok > 0, b.row_values(ref, "ref_logprob"), 0)
        else:
            ref_sum = b.select(b.check("ref_logprob", ref)).sum(-1)
        implicit_reward = self.beta2 * (b.select(logprob).sum(-1) - ref_sum)
        target = self._sequence_advantages(b, advantages)
        loss = b.seq_mean((implicit_reward - target) ** 2)
        with torch.no_grad():
            metrics = {
                "a2po_loss": loss.detach(),
                "implicit_reward": b.mean_over_rows(implicit_reward.detach()),
                "advantage": b.mean_over_rows(target),
            }
        return loss, metrics

    @staticmethod
    def _sequence_advantages(b: MaskedBatch, advantages: Any) -> torch.Tensor:
        """One advantage per row `[B]`, 0 in a row without a valid token: a `[B]` / `[B, 1]` input as it is, a
        `[B, T]` one as its mean over the row's valid tokens."""
        adv = b.advantages(advantages)  # [B, 1] column or [B, T], selected
        if adv.shape[1] == 1:
            return adv.squeeze(-1)
        return adv.sum(-1) / b.row_tok.clamp(min=1).to(adv.dtype)
