"""TRL's own GRPO losses (`trl.GRPOConfig.loss_type`), ported so that `trl_ext.GRPOTrainer` trains them exactly.

TRL 1.16 `GRPOTrainer._compute_loss`, per token, with r = exp(w), w the log importance weight:
`importance_sampling_level="token"`: w = lp − old; `"sequence"` (GSPO's ratio, Zheng et al. 2025, arXiv 2507.18071):
w = the row's token mean of lp − old, one value per sequence (differentiable through every token of the row).

    grpo, bnpo, dr_grpo, dapo, luspo   L = −min(r'·A, clamp(r, 1 − ε, 1 + ε_high)·A),  r' = min(r, δ) with `delta`
                                       (two-sided clipping, INTELLECT-2, arXiv 2505.07291), else r' = r
    cispo                              L = −sg(min(r, ε_high))·A·lp     (ε_high absolute: TRL's default 5.0 in
                                       its recipe; MiniMax-M1, arXiv 2506.13585)
    sapo                               L = −σ(τ(r − 1))·4/τ·A,  τ = τ_pos where A > 0 else τ_neg (arXiv 2511.20347)
    vespo                              L = −sg(φ)·A·lp, φ = e^λ·W^k·e^{−λW} per sequence, W = exp(Σ_t (lp − old))
                                       (× the vLLM sampling correction), k / λ by the sign of A (arXiv 2602.10693)

With the vLLM importance-sampling correction (`importance_sampling_ratio`), L is multiplied by it, except for
`vespo`, whose φ includes it. Aggregation (`aggregation(loss_type)`), with the window counts of docs/design.md §2.6:

    grpo, sapo           seq-mean-token-mean          (Shao et al. 2024, arXiv 2402.03300)
    bnpo, dapo, cispo,   token-mean                   (DAPO, Yu et al. 2025, arXiv 2503.14476)
    vespo
    dr_grpo              Σ / (sequences · max_completion_length)   (Dr. GRPO, Liu et al. 2025, arXiv 2503.20783)
    luspo                seq-mean-token-sum           (length-unbiased sequence policy optimization)

Under window normalization these equal TRL's update for every loss type when the micro-batches of a window hold
the same number of rows and `steps_per_generation` equals `gradient_accumulation_steps` (TRL's defaults), except
`bnpo`: TRL normalizes each micro-batch by its own token count (its documentation says results depend on the
local batch size); here every token of the window weighs the same, so `bnpo` equals `dapo`.

Metrics (TRL's names, token means over the micro-batch; one value per sequence at the sequence level):
`clip_ratio/low_mean`, `clip_ratio/high_mean`, `clip_ratio/region_mean` (the clipped losses),
`cispo_clip_ratio`, `vespo/phi_seq_mean`; `clip_ratio/low_min` / `clip_ratio/high_max` are the low / high clip
fractions again, combined over processes by min / max (TRL's takes the min / max per micro-batch, then averages;
on one process both are the mean).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from ..components import MAX, MEAN, MIN, Argument
from .base import PolicyLoss
from .inputs import Metrics
from .luspo import clipped_objective, log_importance_weight
from .masked_batch import MaskedBatch
from .vespo import gamma_weights, read_sampling_ratio, row_or_token_mean

TRL_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo")
"""TRL 1.16's `loss_type` values."""

_AGGREGATION = {
    "grpo": "seq-mean-token-mean",
    "sapo": "seq-mean-token-mean",
    "bnpo": "token-mean",
    "dapo": "token-mean",
    "cispo": "token-mean",
    "vespo": "token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
    "luspo": "seq-mean-token-sum",
}
_CLIPPED = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")


def aggregation(loss_type: str) -> str:
    """The `loss_agg_mode` of TRL's `loss_type` (the KL term is aggregated the same way)."""
    return _AGGREGATION[loss_type]


class TRLGRPOLoss(PolicyLoss):
    """TRL's GRPO loss family, selected by `loss_type` (see the module docstring for the formulas).

    Not one of Trinity-RFT's losses, so not in `POLICY_LOSSES` (whose names are the reference's): build it directly,
    `TRLGRPOLoss(loss_type="grpo")`; `trl_ext.GRPOConfig` does when a TRL loss field is set.

    The arguments are `trl.GRPOConfig`'s fields, with TRL's names and defaults. Inputs: `logprob`, `old_logprob`,
    `action_mask`, `advantages` (`[B]`, `[B, 1]` or `[B, T]`), `importance_sampling_ratio` (vLLM's correction,
    `[B, T]` or `[B, 1]`; optional) and the window counts (`normalizer` for `dr_grpo`: sequences ×
    max_completion_length).
    """

    name = "trl_grpo"
    arguments = (
        Argument("loss_type", "dapo", "TRL's loss: see `trl_ext.losses.trl_grpo`.", choices=TRL_LOSS_TYPES),
        Argument(
            "importance_sampling_level",
            "token",
            "`token`: one ratio per token; `sequence`: the row's mean log-ratio (GSPO).",
            choices=("token", "sequence"),
        ),
        Argument("epsilon", 0.2, "Lower clip ε (and the upper one when `epsilon_high` is None).", ge=0),
        Argument(
            "epsilon_high",
            None,
            "Upper clip ε_high (DAPO's clip-higher); for `cispo` the absolute cap of the ratio.",
            type=float,
            ge=0,
        ),
        Argument("delta", None, "Upper bound δ of the unclipped ratio (two-sided clipping), > 1.", type=float, gt=1),
        Argument("sapo_temperature_pos", 1.0, "SAPO's τ for A > 0.", gt=0),
        Argument("sapo_temperature_neg", 1.05, "SAPO's τ for A ≤ 0.", gt=0),
        Argument("vespo_k_pos", 2.0, "VESPO's k for A ≥ 0."),
        Argument("vespo_lambda_pos", 3.0, "VESPO's λ for A ≥ 0."),
        Argument("vespo_k_neg", 3.0, "VESPO's k for A < 0."),
        Argument("vespo_lambda_neg", 2.0, "VESPO's λ for A < 0."),
    )
    metrics: ClassVar[dict[str, str]] = {
        "clip_ratio/low_mean": MEAN,
        "clip_ratio/low_min": MIN,
        "clip_ratio/high_mean": MEAN,
        "clip_ratio/high_max": MAX,
        "clip_ratio/region_mean": MEAN,
        "cispo_clip_ratio": MEAN,
        "vespo/phi_seq_mean": MEAN,
    }

    @property
    def loss_agg_mode(self) -> str:
        return aggregation(self.loss_type)

    @property
    def epsilon_low(self) -> float:
        return self.epsilon

    @property
    def upper(self) -> float:
        """ε_high (`epsilon_high`, or `epsilon` when it is None)."""
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

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
        sampling_ratio = read_sampling_ratio(self.name, b, importance_sampling_ratio)
        lp = b.select(logprob)
        adv = b.advantages(advantages)
        log_ratio = lp - b.select(b.check("old_logprob", old_logprob))
        ratio = torch.exp(log_importance_weight(b, log_ratio, self.importance_sampling_level))

        metrics: Metrics = {}
        if self.loss_type in _CLIPPED:
            per_token, low, high = clipped_objective(ratio, adv, self.epsilon, self.upper, self.delta)
            with torch.no_grad():
                metrics["clip_ratio/low_mean"] = row_or_token_mean(b, low)
                metrics["clip_ratio/low_min"] = _sequence_extreme(b, low, smallest=True)
                metrics["clip_ratio/high_mean"] = row_or_token_mean(b, high)
                metrics["clip_ratio/high_max"] = _sequence_extreme(b, high, smallest=False)
                metrics["clip_ratio/region_mean"] = row_or_token_mean(b, low | high)
        elif self.loss_type == "cispo":
            per_token = -ratio.clamp(max=self.upper).detach() * adv * lp
            with torch.no_grad():
                metrics["cispo_clip_ratio"] = row_or_token_mean(b, (ratio > self.upper) & (adv > 0))
        elif self.loss_type == "sapo":
            tau = torch.where(adv > 0, self.sapo_temperature_pos, self.sapo_temperature_neg).to(ratio.dtype)
            per_token = -torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau * adv
        else:  # vespo
            k, lam = (self.vespo_k_pos, self.vespo_k_neg), (self.vespo_lambda_pos, self.vespo_lambda_neg)
            phi = gamma_weights(b, log_ratio, adv, sampling_ratio, k, lam)
            per_token = -phi * adv * lp
            metrics["vespo/phi_seq_mean"] = row_or_token_mean(b, phi)
        if sampling_ratio is not None and self.loss_type != "vespo":
            per_token = per_token * sampling_ratio
        per_token = b.select(per_token.expand(b.shape))
        return b.aggregate(per_token, self.loss_agg_mode), metrics


def _sequence_extreme(b: MaskedBatch, x: torch.Tensor, smallest: bool) -> torch.Tensor:
    """TRL's `clip_ratio/low_min` (`smallest`) / `high_max`: the extreme per-sequence token mean of `[B, T]` flags
    (one flag per sequence when `[B, 1]`) over the sequences with a valid token; NaN when there is none."""
    if x.shape[-1] == 1 and b.shape[1] != 1:
        rows = x.float().squeeze(-1)
    else:
        rows = torch.where(b.mask, x, False).float().sum(-1) / b.row_tok.clamp(min=1.0)
    beyond = math.inf if smallest else -math.inf  # no host sync: rows without tokens sit beyond every value
    extreme = torch.where(b.row_tok > 0, rows, beyond)
    extreme = extreme.amin() if smallest else extreme.amax()
    return torch.where(extreme == beyond, math.nan, extreme) if rows.numel() else torch.full((), math.nan)
