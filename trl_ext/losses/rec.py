"""REC: REINFORCE with off-policy corrections (Trinity-RFT `rec`).

Paper: Yao, Chen et al. 2025, "Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm:
Demystifying Some Myths About GRPO and Its Friends" (arXiv 2509.24203). REINFORCE whose (detached)
importance ratio only decides which tokens take part, plus optional weighting and regularization:

    r̄ = sg(exp(lp − old)),   ŝ = per-row exp(sg(mean over the mask of (lp − old)))
    keep (clip_mode):
      none           all tokens
      two-side       1 − ε_low ≤ r̄ ≤ 1 + ε_high
      one-side       (r̄ ≤ 1 + ε_high ∧ A ≥ 0) ∨ (A ≤ 0 ∧ r̄ ≥ 1 − ε_low)
      gspo-one-side  the same test on ŝ
      ring           two-side ∨ (A ≥ 0 ∧ r̄ ≤ 1 − ε'_low) ∨ (A ≤ 0 ∧ r̄ ≥ 1 + ε'_high)
    weight:  none | importance_sampling A ← A·r̄ | gspo_importance_sampling A ← A·ŝ |
             advantage A ← A·exp(A/temp)   (the paper's RED-Weight)
    L = −A · lp · keep;   regularizer forward-kl: L −= coef·lp;   k2: L += coef·(lp − old)²

The loss is the token mean (the sequence mean of token means for `gspo-one-side`).

Deliberate differences from the reference: the constructor defaults are the reference's
`default_args()` (its `__init__` says ε' = 0.4 / 0.4); `gspo_importance_sampling` with a clip mode
other than `gspo-one-side` is a configuration error (the reference crashes at call time).
"""

from __future__ import annotations

import torch

from .base import (
    Metrics,
    PolicyLoss,
    check_choice,
    check_number,
    register_policy_loss,
)

CLIP_MODES = ("none", "one-side", "two-side", "ring", "gspo-one-side")
WEIGHTS = ("none", "importance_sampling", "gspo_importance_sampling", "advantage")
REGULARIZERS = ("none", "k2", "forward-kl")


@register_policy_loss("rec")
class RECPolicyLoss(PolicyLoss):
    """REC. Metrics: `pg_clipfrac` (share of valid tokens not kept), `pg_loss`.

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages` and the window's
    `global_valid_toks` / `global_valid_seqs` (REC aggregates by token mean, or sequence mean for
    `gspo-one-side`: no `normalizer`). NaN / ±inf in `logprob`, `old_logprob` or `advantages` at a valid
    position make the loss NaN; at masked positions they are ignored.
    """

    window_shares = ("pg_loss",)

    window_inputs = ("global_valid_toks", "global_valid_seqs")

    def __init__(
        self,
        backend: str = "verl",
        epsilon_low: float = 0.2,
        epsilon_high: float = 0.2,
        epsilon_low_prime: float = 0.6,
        epsilon_high_prime: float = 2.0,
        clip_mode: str = "none",
        weight: str = "none",
        regularizer: str = "none",
        regularizer_coef: float = 0.0,
        temp: float = 1.0,
    ) -> None:
        super().__init__(backend)
        check_number(self.name, "epsilon_low", epsilon_low, gt=0, le=1)
        check_number(self.name, "epsilon_high", epsilon_high, gt=0)
        check_number(self.name, "epsilon_low_prime", epsilon_low_prime, gt=0, le=1)
        check_number(self.name, "epsilon_high_prime", epsilon_high_prime, gt=0)
        check_choice(self.name, "clip_mode", clip_mode, CLIP_MODES)
        check_choice(self.name, "weight", weight, WEIGHTS)
        check_choice(self.name, "regularizer", regularizer, REGULARIZERS)
        check_number(self.name, "regularizer_coef", regularizer_coef, ge=0)
        check_number(self.name, "temp", temp, gt=0)
        if weight == "gspo_importance_sampling" and clip_mode != "gspo-one-side":
            raise ValueError(
                f"rec: weight='gspo_importance_sampling' needs clip_mode='gspo-one-side' (got {clip_mode!r}): "
                "the sequence ratio it weights by is the one gspo-one-side clips on"
            )
        self.epsilon_low = epsilon_low
        self.epsilon_high = epsilon_high
        self.epsilon_low_prime = epsilon_low_prime
        self.epsilon_high_prime = epsilon_high_prime
        self.clip_mode = clip_mode
        self.weight = weight
        self.regularizer = regularizer
        self.regularizer_coef = regularizer_coef
        self.temp = temp

    def _keep(self, ratio: torch.Tensor, seq_ratio: torch.Tensor | None, adv: torch.Tensor) -> torch.Tensor | None:
        low, high = 1.0 - self.epsilon_low, 1.0 + self.epsilon_high
        if self.clip_mode == "none":
            return None
        if self.clip_mode == "two-side":
            return (ratio >= low) & (ratio <= high)
        if self.clip_mode == "one-side":
            return ((ratio <= high) & (adv >= 0)) | ((adv <= 0) & (ratio >= low))
        if self.clip_mode == "gspo-one-side":
            return ((seq_ratio <= high) & (adv >= 0)) | ((adv <= 0) & (seq_ratio >= low))
        in_band = (ratio >= low) & (ratio <= high)  # ring
        return (
            in_band
            | ((adv >= 0) & (ratio <= 1.0 - self.epsilon_low_prime))
            | ((adv <= 0) & (ratio >= 1.0 + self.epsilon_high_prime))
        )

    def __call__(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        old = b.check("old_logprob", old_logprob)
        lp = b.select(logprob)
        with torch.no_grad():
            adv = b.advantages(advantages)
            delta = b.select(logprob.detach() - old)
            ratio = torch.exp(delta)
            seq_ratio = None
            if self.clip_mode == "gspo-one-side":
                seq_ratio = torch.exp(b.row_mean(delta)).unsqueeze(-1)
            keep = self._keep(ratio, seq_ratio, adv)
            if self.weight == "importance_sampling":
                adv = adv * ratio
            elif self.weight == "gspo_importance_sampling":
                adv = adv * seq_ratio
            elif self.weight == "advantage":
                adv = adv * torch.exp(adv / self.temp)
            coef = -adv if keep is None else torch.where(keep, -adv, 0.0)
            clipfrac = None if keep is None else b.valid_mean(~keep)
        pg_losses = coef * lp
        if self.regularizer == "forward-kl":
            pg_losses = pg_losses - self.regularizer_coef * lp
        elif self.regularizer == "k2":
            pg_losses = pg_losses + self.regularizer_coef * b.select(logprob - old).square()
        mode = "seq-mean-token-mean" if self.clip_mode == "gspo-one-side" else "token-mean"
        loss = b.aggregate(pg_losses, mode)
        if clipfrac is None:  # clip_mode "none" keeps every token
            clipfrac = torch.zeros((), dtype=loss.dtype, device=loss.device)
        metrics = {"pg_clipfrac": clipfrac, "pg_loss": loss.detach()}
        return loss, metrics
