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
from .inputs import Metrics, check_float
from .masked_batch import MaskedBatch

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
_LOG_EPS = math.log(1e-8)  # VESPO's lower clamp of log W


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
        if importance_sampling_ratio is not None:  # [B, T] or [B, 1] (sequence-level correction)
            b.broadcast_rows(importance_sampling_ratio, "importance_sampling_ratio")
            if importance_sampling_ratio.dim() != 2:
                raise ValueError(f"{self.name}: importance_sampling_ratio must be [B, T] or [B, 1]")
            b.read(check_float(self.name, "importance_sampling_ratio", importance_sampling_ratio))
        lp = b.select(logprob)
        adv = b.advantages(advantages)
        log_ratio = lp - b.select(b.check("old_logprob", old_logprob))
        if self.importance_sampling_level == "sequence":
            weight = (log_ratio.sum(-1) / b.row_tok.clamp(min=1.0)).unsqueeze(-1)  # [B, 1]
        else:
            weight = log_ratio
        ratio = torch.exp(weight)

        metrics: Metrics = {}
        if self.loss_type in _CLIPPED:
            clipped = ratio.clamp(1.0 - self.epsilon, 1.0 + self.upper)
            unclipped = ratio if self.delta is None else ratio.clamp(max=self.delta)
            per_token = -torch.min(unclipped * adv, clipped * adv)
            with torch.no_grad():
                low = (unclipped < 1.0 - self.epsilon) & (adv < 0)
                high = (unclipped > 1.0 + self.upper) & (adv > 0)
                metrics["clip_ratio/low_mean"] = _mean(b, low)
                metrics["clip_ratio/low_min"] = _sequence_extreme(b, low, smallest=True)
                metrics["clip_ratio/high_mean"] = _mean(b, high)
                metrics["clip_ratio/high_max"] = _sequence_extreme(b, high, smallest=False)
                metrics["clip_ratio/region_mean"] = _mean(b, low | high)
        elif self.loss_type == "cispo":
            per_token = -ratio.clamp(max=self.upper).detach() * adv * lp
            with torch.no_grad():
                metrics["cispo_clip_ratio"] = _mean(b, (ratio > self.upper) & (adv > 0))
        elif self.loss_type == "sapo":
            tau = torch.where(adv > 0, self.sapo_temperature_pos, self.sapo_temperature_neg).to(ratio.dtype)
            per_token = -torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau * adv
        else:  # vespo
            phi = self._gamma_weights(b, adv, log_ratio, importance_sampling_ratio)
            per_token = -phi * adv * lp
            metrics["vespo/phi_seq_mean"] = _mean(b, phi)
        if importance_sampling_ratio is not None and self.loss_type != "vespo":
            per_token = per_token * importance_sampling_ratio
        per_token = b.select(per_token.expand(b.shape))
        return b.aggregate(per_token, self.loss_agg_mode), metrics

    @torch.no_grad()
    def _gamma_weights(
        self, b: MaskedBatch, adv: torch.Tensor, log_ratio: torch.Tensor, sampling_ratio: torch.Tensor | None
    ) -> torch.Tensor:
        """VESPO's φ(W) = exp(λ + k·log W − λ·W) per sequence `[B, 1]` (0 where it overflows)."""
        log_w = b.select(log_ratio.clamp(-20.0, 20.0)).sum(-1, keepdim=True)
        if sampling_ratio is not None:
            log_is = torch.log(sampling_ratio).clamp(_LOG_EPS, 20.0)
            log_w = log_w + log_is.sum(-1, keepdim=True)
        log_w = log_w.clamp(_LOG_EPS, 20.0)
        positive = adv >= 0
        k = torch.where(positive, self.vespo_k_pos, self.vespo_k_neg).to(log_w.dtype)
        lam = torch.where(positive, self.vespo_lambda_pos, self.vespo_lambda_neg).clamp(min=1e-4).to(log_w.dtype)
        phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w))
        return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


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


def _mean(b: MaskedBatch, x: torch.Tensor) -> torch.Tensor:
    """TRL's metric mean: over the valid tokens of a `[B, T]` value, over the rows of a `[B, 1]` one."""
    if x.shape[-1] == 1 and b.shape[1] != 1:
        return b.mean_over_rows(x.float().squeeze(-1))
    return b.valid_mean(x.expand(b.shape))
