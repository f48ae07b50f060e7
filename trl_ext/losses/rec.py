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

from typing import ClassVar

import torch

from ..components import MEAN, SHARE, Argument
from .base import PolicyLoss, register_policy_loss
from .inputs import Metrics

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

    arguments = (
        Argument(
            "epsilon_low",
            0.2,
            "Lower clip ε_l (ratio ≥ 1 − ε_l), in (0, 1].",
            gt=0,
            le=1,
            config_name="rec_epsilon_low",
        ),
        Argument("epsilon_high", 0.2, "Upper clip ε_h (ratio ≤ 1 + ε_h), > 0.", gt=0, config_name="rec_epsilon_high"),
        Argument(
            "epsilon_low_prime",
            0.6,
            "`ring` mode: negative-side outer bound ε'_l, in (0, 1].",
            gt=0,
            le=1,
            config_name="rec_epsilon_low_prime",
        ),
        Argument(
            "epsilon_high_prime",
            2.0,
            "`ring` mode: outer bound ε'_h, > 0.",
            gt=0,
            config_name="rec_epsilon_high_prime",
        ),
        Argument(
            "clip_mode",
            "none",
            "Which tokens are kept: `none`, `two-side`, `one-side`, `gspo-one-side` (on the sequence ratio), `ring`.",
            choices=CLIP_MODES,
            config_name="rec_clip_mode",
        ),
        Argument(
            "weight",
            "none",
            "Advantage reweighting: `none`, `importance_sampling` (A·r), `gspo_importance_sampling` "
            "(A·sequence ratio; needs `rec_clip_mode='gspo-one-side'`), `advantage` (A·exp(A/temp)).",
            choices=WEIGHTS,
            config_name="rec_weight",
        ),
        Argument(
            "regularizer",
            "none",
            "Regularizer: `none`, `forward-kl` (−coef·lp), `k2` (coef·(lp − old)²).",
            choices=REGULARIZERS,
            config_name="rec_regularizer",
        ),
        Argument(
            "regularizer_coef",
            0.0,
            "Coefficient of `rec_regularizer`, ≥ 0.",
            ge=0,
            config_name="rec_regularizer_coef",
        ),
        Argument("temp", 1.0, "Temperature of `rec_weight='advantage'`, > 0.", gt=0, config_name="rec_temp"),
    )
    metrics: ClassVar[dict[str, str]] = {"pg_clipfrac": MEAN, "pg_loss": SHARE}

    window_inputs = ("global_valid_toks", "global_valid_seqs")

    def check_arguments(self) -> None:
        if self.weight == "gspo_importance_sampling" and self.clip_mode != "gspo-one-side":
            raise ValueError(
                f"rec: weight='gspo_importance_sampling' needs clip_mode='gspo-one-side' (got {self.clip_mode!r}): "
                "the sequence ratio it weights by is the one gspo-one-side clips on"
            )

    @property
    def loss_agg_mode(self) -> str:
        """REC's aggregation, fixed by `clip_mode`: the sequence mean of token means for `gspo-one-side`, else the
        token mean."""
        return "seq-mean-token-mean" if self.clip_mode == "gspo-one-side" else "token-mean"

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
        if self.regularizer == "forward-kl":
            coef = coef - self.regularizer_coef  # (coef − c)·lp
        if self.regularizer == "k2":
            pg_losses = coef * lp + self.regularizer_coef * b.select(logprob - old).square()
            loss = b.aggregate(pg_losses, self.loss_agg_mode)
        else:
            loss = b.aggregate(coef * lp, self.loss_agg_mode)
        if clipfrac is None:  # clip_mode "none" keeps every token
            clipfrac = torch.zeros((), dtype=loss.dtype, device=loss.device)
        metrics = {"pg_clipfrac": clipfrac, "pg_loss": loss.detach()}
        return loss, metrics
