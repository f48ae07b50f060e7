"""DPO: Direct Preference Optimization (Trinity-RFT `dpo`).

Paper: Rafailov et al. 2023, "Direct Preference Optimization: Your Language Model is Secretly a Reward
Model" (arXiv 2305.18290); label smoothing as conservative DPO (Mitchell 2023, "A note on DPO with
noisy preferences"). Rows come interleaved (chosen, rejected, chosen, rejected, ...). Per pair, with
S = Σ_t m·lp and S_ref = Σ_t m·ref:

    z    = (S_c − S_c,ref) − (S_r − S_r,ref)
    loss = mean over pairs of −(1 − ls)·log σ(βz) − ls·log σ(−βz)

This is TRL's `loss_type="sigmoid"`. Deliberate difference: the reference sums the log-ratios of all
pairs in the batch into one z (right only for a single pair); here every pair has its own z.
`ref_logprob` is per token `[N, T]`, or the per-row sums S_ref `[N]` (as TRL precomputes them).
With the window's `global_valid_seqs` (rows, i.e. 2 × pairs) the loss is this batch's share of the
mean over the window's pairs.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F

from ..components import MEAN, SHARE, Argument
from .base import Metrics, PolicyLoss, register_policy_loss


@register_policy_loss("dpo")
class DPOLoss(PolicyLoss):
    """Sigmoid DPO. Metrics: `chosen_reward` (β·mean(S_c − S_c,ref)), `rejected_reward`,
    `accuracy_mean` (share of pairs with z > 0), `dpo_loss`.

    Inputs (`inputs()`): `logprob`, `ref_logprob` (`[N, T]` or the per-row sums `[N]`), `action_mask` and the
    window's `global_valid_seqs`. NaN / ±inf in `logprob` or `ref_logprob` at a valid position (for `[N]` sums:
    in a row with a valid token) make the loss NaN; at masked positions they are ignored. No pairs give 0."""

    arguments = (
        Argument(
            "beta", 0.1, "Temperature β of the sigmoid loss −log σ(β·z): how far from the reference it may go.", gt=0
        ),
        Argument(
            "label_smoothing",
            0.0,
            "Assumed probability ls that a preference label is flipped (conservative DPO): the loss becomes "
            "−(1 − ls)·log σ(βz) − ls·log σ(−βz).",
            ge=0,
            lt=0.5,
        ),
    )
    metrics: ClassVar[dict[str, str]] = {
        "chosen_reward": MEAN,
        "rejected_reward": MEAN,
        "accuracy_mean": MEAN,
        "dpo_loss": SHARE,
    }

    window_inputs = ("global_valid_seqs",)

    def __call__(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, action_mask: torch.Tensor, **kwargs
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        if b.shape[0] % 2:
            raise ValueError(
                f"dpo: logprob has {b.shape[0]} rows; expected an even number (chosen, rejected interleaved)"
            )
        ref = ref_logprob.detach() if isinstance(ref_logprob, torch.Tensor) else ref_logprob
        if isinstance(ref, torch.Tensor) and ref.dim() == 1:
            ref_sum = torch.where(b.row_tok > 0, b.row_values(ref, "ref_logprob"), 0)
        else:
            ref_sum = b.select(b.check("ref_logprob", ref)).sum(-1)
        log_ratio = b.select(logprob).sum(-1) - ref_sum
        chosen, rejected = log_ratio[0::2], log_ratio[1::2]
        z = self.beta * (chosen - rejected)
        losses = -(1.0 - self.label_smoothing) * F.logsigmoid(z)
        if self.label_smoothing:
            losses = losses - self.label_smoothing * F.logsigmoid(-z)
        if b.global_valid_seqs is None:
            loss = b.mean_over_rows(losses)
        else:
            rows = b.global_valid_seqs  # the window's rows: 2 per pair (at least one pair, so that 0 rows give 0)
            rows = rows.clamp(min=2) if isinstance(rows, torch.Tensor) else max(rows, 2)
            loss = losses.sum() / (rows / 2)
        loss = b.guard(loss)
        with torch.no_grad():
            metrics = {
                "chosen_reward": self.beta * b.mean_over_rows(chosen),
                "rejected_reward": self.beta * b.mean_over_rows(rejected),
                "accuracy_mean": b.mean_over_rows((chosen > rejected).float()),
                "dpo_loss": loss.detach(),
            }
        return loss, metrics
