"""Clip_B and Clip_V: GRPO advantages with an entropy-based token filter (arXiv 2602.03392).

Ports Trinity-RFT 0.6.0 `ClipBAdvantageFn` (`clipb_advantage.py`) and `ClipVAdvantageFn` (`clipv_advantage.py`).
Both compute `grpo_verl`'s advantages (GRPO on the summed token rewards, broadcast over `response_mask`) and then
remove some negative-advantage tokens from the loss (`AdvantageResult.token_keep`; the reference removes them from
its `response_mask`).  With `p = exp(logprobs)` and `H` the entropy of each response token, the signal is

    S = p * (H + logprobs)

and the statistics are the masked mean and POPULATION variance over every valid token of the batch (`n` =
the number of valid tokens, at least 1).  They are taken in float32 as in the reference, or in float64 when an
input is float64.  Non-finite `logprobs` / `entropy` / `necs` at a valid token are an error; values outside
`response_mask` are ignored.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from ..components import MEAN, Argument
from .base import AdvantageResult, GroupIds, check_token_values, register_advantage
from .broadcast import GRPOVerlAdvantage, _BroadcastAdvantageFn

STD_FLOOR = 1e-12
"""Below this std of the signal, no token is filtered (the reference's `stdS.item() < 1e-12`)."""


def _masked_moments(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and population variance of `values` over `mask` (dividing by max(#mask, 1)); `values` is 0 outside."""
    n = mask.sum().clamp(min=1).to(values.dtype)
    mean = values.sum() / n
    var = torch.where(mask, (values - mean) ** 2, 0.0).sum() / n
    return mean, var


def _fraction_clipped(kept: torch.Tensor, among: torch.Tensor) -> float:
    """`1 - #(kept & among) / max(#among, 1)`."""
    return 1.0 - int((kept & among).sum()) / max(int(among.sum()), 1)


class _TokenFilterAdvantageFn(_BroadcastAdvantageFn):
    """GRPO advantages (`grpo_verl`) plus the signal `S` of the valid tokens."""

    metrics: ClassVar[dict[str, str]] = {"frac_clipped": MEAN, "frac_clipped_pos": MEAN, "frac_clipped_neg": MEAN}

    _advantages = GRPOVerlAdvantage._advantages

    def _signal(self, mask: torch.Tensor, **tensors: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """`S` (0 outside `mask`) and the validated `tensors`, all in the statistics' dtype."""
        checked = {name: check_token_values(self.name, name, value, mask) for name, value in tensors.items()}
        dtype = torch.float32
        for value in checked.values():
            dtype = torch.promote_types(dtype, value.dtype)
        checked = {name: value.to(dtype) for name, value in checked.items()}
        logprobs, entropy = checked["logprobs"], checked["entropy"]
        return torch.where(mask, logprobs.exp() * (entropy + logprobs), 0.0), checked

    def _result(self, advantages: torch.Tensor, mask: torch.Tensor, keep: torch.Tensor, **extra: float):
        token_keep = mask & keep
        metrics = {
            "frac_clipped": _fraction_clipped(token_keep, mask),
            "frac_clipped_pos": _fraction_clipped(token_keep, mask & (advantages > 0)),
            "frac_clipped_neg": _fraction_clipped(token_keep, mask & (advantages < 0)),
            **extra,
        }
        rows = torch.ones(mask.shape[0], dtype=torch.bool, device=mask.device)
        return AdvantageResult(advantages, rows, token_keep=token_keep, metrics=metrics)


EPSILON = Argument(
    "epsilon", 1e-6, "ε of GRPO's (R − mean)/(std + ε) (unbiased group std).", gt=0, config_name="advantage_epsilon"
)


@register_advantage("clipb")
class ClipBAdvantage(_TokenFilterAdvantageFn):
    """Clip_B: GRPO advantages; every positive- and zero-advantage token is kept, and a negative-advantage token
    is removed from the loss when its signal is far below the batch mean: kept iff `S - E[S] >= -mu * std(S)`.

    `compute(rewards [N] or [N, T] (summed over the row), group_ids, *, response_mask, logprobs, entropy)`:
    `logprobs` the sampling policy's log-prob of each sampled token (the reference reads its
    `rollout_log_probs`), `entropy` the per-token entropy.  When `std(S) < 1e-12` every token is kept.  Returns
    `[N, T]` advantages, `token_keep` (the reference's filtered response mask) and the metrics `frac_clipped`,
    `frac_clipped_pos`, `frac_clipped_neg` (the fraction of all / positive / negative-advantage valid tokens
    removed), `ES` (the mean of S) and `varS` (its population variance).
    """

    metrics: ClassVar[dict[str, str]] = {**_TokenFilterAdvantageFn.metrics, "ES": MEAN, "varS": MEAN}

    arguments = (
        EPSILON,
        Argument(
            "mu",
            2.5,
            "Clip_B: a negative-advantage token leaves the loss when its p·(H + log p) is more than mu batch stds "
            "below the batch mean.",
            ge=0,
            config_name="clip_mu",
        ),
    )

    @torch.no_grad()
    def compute(
        self,
        rewards: torch.Tensor,
        group_ids: GroupIds,
        *,
        response_mask: torch.Tensor,
        logprobs: torch.Tensor,
        entropy: torch.Tensor,
    ) -> AdvantageResult:
        advantages, mask = self._token_advantages(rewards, group_ids, response_mask)
        signal, _ = self._signal(mask, logprobs=logprobs, entropy=entropy)
        mean, var = _masked_moments(signal, mask)
        std = var.sqrt()
        if std.item() < STD_FLOOR:
            keep = torch.ones_like(mask)
        else:
            keep = (advantages >= 0) | (signal - mean >= -(self.mu * std))
        return self._result(advantages, mask, keep, ES=mean.item(), varS=var.item())


@register_advantage("clipv")
class ClipVAdvantage(_TokenFilterAdvantageFn):
    """Clip_V: GRPO advantages; with `D = necs - S` (NOT centred), a token whose advantage is not positive is
    removed from the loss when `D > mu * std(D)`, and the removals are capped at a fraction `max_frac` of the
    valid tokens.

    Exactly as the reference (`ClipVAdvantageFn`), with `n` the number of valid tokens:

    1. `std(D) < 1e-12`: every token is kept.
    2. Else a token is kept iff its advantage is `> 0` or `D <= mu * std(D)`: zero-advantage tokens are
       filtered like negative ones here (unlike Clip_B).
    3. If the fraction of valid tokens removed (in float32, as the reference) is above `max_frac`, let `K =
       max(int(max_frac * n), 1)`; if more than `K` NEGATIVE-advantage valid tokens were removed, only the `K`
       with the largest `D` stay removed (ties: the first in row-major order; `torch.topk` leaves them
       unspecified) and the other negative ones are kept again.  Zero-advantage tokens removed in step 2 stay
       removed, so the cap bounds the negative-advantage removals only.

    `compute(rewards [N] or [N, T] (summed over the row), group_ids, *, response_mask, logprobs, entropy, necs)`
    (the reference reads `old_log_probs`, the training engine's log-probs of the sampled tokens, as `logprobs`).
    Metrics: `frac_clipped`, `frac_clipped_pos`, `frac_clipped_neg` (as Clip_B) and `stdD`.

    The defaults are the reference's `default_args()` (which its config uses): `mu` 8.5; its constructor says 2.0.
    """

    metrics: ClassVar[dict[str, str]] = {**_TokenFilterAdvantageFn.metrics, "stdD": MEAN}

    arguments = (
        EPSILON,
        Argument(
            "mu",
            8.5,
            "Clip_V: a token with a non-positive advantage leaves the loss when necs − p·(H + log p) exceeds mu batch "
            "stds (the reference's default_args; its constructor says 2.0).",
            ge=0,
            config_name="clip_mu",
        ),
        Argument(
            "max_frac",
            1e-4,
            "Clip_V: at most this fraction of the valid tokens is removed for a negative advantage (the most "
            "violating ones).",
            ge=0,
            le=1,
        ),
    )

    @torch.no_grad()
    def compute(
        self,
        rewards: torch.Tensor,
        group_ids: GroupIds,
        *,
        response_mask: torch.Tensor,
        logprobs: torch.Tensor,
        entropy: torch.Tensor,
        necs: torch.Tensor,
    ) -> AdvantageResult:
        advantages, mask = self._token_advantages(rewards, group_ids, response_mask)
        signal, checked = self._signal(mask, logprobs=logprobs, entropy=entropy, necs=necs)
        gap = torch.where(mask, checked["necs"] - signal, 0.0)
        _, var = _masked_moments(gap, mask)
        std = var.sqrt()
        if std.item() < STD_FLOOR:
            return self._result(advantages, mask, torch.ones_like(mask), stdD=std.item())
        keep_negative = gap <= self.mu * std
        keep = (advantages > 0) | keep_negative
        total = max(int(mask.sum()), 1)
        removed = int((mask & ~keep).sum())
        fraction = (torch.tensor(removed, dtype=torch.float32) / torch.tensor(total, dtype=torch.float32)).item()
        if fraction > self.max_frac:
            cap = max(int(self.max_frac * total), 1)
            negative_removed = (advantages < 0) & mask & ~keep_negative
            if int(negative_removed.sum()) > cap:
                scores = gap.masked_fill(~negative_removed, -math.inf).flatten()
                top = torch.argsort(scores, descending=True, stable=True)[:cap]
                limited = torch.zeros_like(negative_removed).flatten()
                limited[top] = True
                keep = (keep | negative_removed) & ~limited.view_as(keep)
        return self._result(advantages, mask, keep, stdD=std.item())
