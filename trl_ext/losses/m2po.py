"""M2PO: Second-Moment Trust Policy Optimization (Trinity-RFT `m2po`).

Paper: Zheng et al. 2025, "Prosperity before Collapse: How Far Can Off-Policy RL Reach with Stale Data on LLMs?"
(arXiv 2510.01161), ported from Trinity-RFT's `trinity/algorithm/policy_loss_fn/m2po_policy_loss.py` (main branch,
not in 0.6.0). Trained on stale rollouts, the importance ratio r = π/π_old has heavy tails; instead of clipping every
token, M2PO bounds the *second moment* of the log-ratio over the tokens that PPO's clip would constrain and masks only
the largest outliers (Algorithm 1 of the paper):

    log r = lp − old
    T     = valid tokens with (A > 0 and log r > 0) or (A < 0 and log r < 0)     (PPO's active trust region)
    M2    = mean over T of (log r)²
    if M2 > τ: sort T by (log r)², ascending (stable: among equal values the later token is masked first), and keep
               the k smallest, k the largest prefix whose mean of (log r)² is ≤ τ; mask the rest of T
    L     = −A · exp(clamp(log r, ±c)) on the kept tokens, 0 on the masked ones, then `agg` over *all* valid tokens

Masked tokens stay in the denominator (the paper's footnote 2: normalize by every valid token). The clamp only keeps
the forward value finite: it is a straight-through clamp (log r + sg(clamp(log r) − log r)), so a kept token beyond
±c still gets the gradient −A·e^{±c}·∇lp, as in the reference. The mask itself is not differentiated. The
reference accepts only `loss_agg_mode="token-mean"`: every mode works here, each counting the masked tokens as valid
ones; token-mean is the default and the paper's.

Where the selection runs: the reference selects over one complete optimizer mini-batch (a pre-pass over all its
micro-batches before the first backward). A trl_ext loss sees one micro-batch at a time, so the selection here runs
over the micro-batch it is called on; with `gradient_accumulation_steps=1` on one process (the recipe) that *is* the
optimizer batch. `m2po_mask` is the selection alone, for a trainer that runs it over a whole window first.
"""

from __future__ import annotations

import math
import struct
from typing import ClassVar

import torch

from ..components import MEAN, SHARE, Argument
from .base import PolicyLoss, loss_agg_mode_argument, register_policy_loss
from .inputs import Metrics, check_mask, shape_of

M2PO_METRICS = {
    "m2po/m2_before": MEAN,
    "m2po/m2_after": MEAN,
    "m2po/masked_fraction": MEAN,
    "m2po/trust_region_fraction": MEAN,
}
"""The statistics of the selection (the reference's names, without verl's `actor/` prefix)."""

_FLOAT32_MAX = torch.finfo(torch.float32).max


def _largest_at_most(value: float, dtype: torch.dtype) -> float:
    """The largest number of `dtype` (float32 or float64) that is ≤ `value`, as a Python float (no tensor, no sync):
    `x <= it` for a tensor `x` of `dtype` is then exactly `x <= value` as the reference compares (each float32
    `.item()` with the Python threshold), although torch rounds a Python scalar to the tensor's dtype first (0.1 rounds
    *up* in float32)."""
    if dtype == torch.float64:
        return value
    try:
        rounded = struct.unpack("<f", struct.pack("<f", value))[0]  # to the nearest float32
    except OverflowError:  # beyond float32's range
        return _FLOAT32_MAX if value > 0 else -math.inf
    if rounded > value:  # one float32 step down
        bits = struct.unpack("<I", struct.pack("<f", rounded))[0]
        rounded = struct.unpack("<f", struct.pack("<I", bits - 1 if rounded > 0 else bits + 1))[0]
    return rounded


def m2po_mask(
    log_ratio: torch.Tensor, advantages: torch.Tensor, action_mask: torch.Tensor, m2_threshold: float
) -> tuple[torch.Tensor, Metrics]:
    """M2PO's token selection (Algorithm 1) over one batch, without a device sync: on an accelerator every token is
    sorted whether or not any needs masking; on CPU tensors, where reading a value is no sync, the selection reads M2
    and, as the reference, sorts only the trust region and only when M2 > τ (the same tokens either way).

    Args:
        log_ratio: `[B, T]` log(π/π_old), finite at the valid positions of `action_mask` (any value elsewhere).
        advantages: `[B, T]`, or `[B, 1]` per sequence.
        action_mask: `[B, T]` bool, the valid tokens.
        m2_threshold: τ ≥ 0.

    Returns:
        `keep` (`[B, T]` bool: the valid tokens that are not masked) and the selection's statistics as 0-dim tensors:
        `m2po/m2_before` / `m2po/m2_after` (mean (log r)² over the trust-region tokens before / after masking, 0 when
        there are none), `m2po/masked_fraction` and `m2po/trust_region_fraction` (shares of the valid tokens).
    """
    with torch.no_grad():
        dtype = torch.promote_types(log_ratio.dtype, torch.float32)  # the reference squares in float32
        at_most = _largest_at_most(float(m2_threshold), dtype)
        lr = log_ratio.detach().to(dtype)  # any value at masked positions: `trust` leaves them out
        # A > 0 with log r > 0, or A < 0 with log r < 0: log r · sign(A) > 0 (False for NaN), one comparison pass.
        trust = action_mask & (lr * advantages.detach().sign() > 0)
        m2 = torch.where(trust, lr.square(), 0)
        n_trust = _count(trust, dtype)
        m2_before = m2.sum() / n_trust.clamp(min=1)
        if m2_before.device.type == "cpu":  # reading a CPU tensor is no device sync: as the reference, sort if needed
            dropped = _dropped_on_host(trust, m2, m2_before, at_most)
        else:
            dropped = _dropped_on_device(trust, m2, m2_before, at_most)
        keep = action_mask & ~dropped
        kept_trust = trust & ~dropped
        n_valid = _count(action_mask, dtype)
        n_kept_trust = _count(kept_trust, dtype)
        stats = {
            "m2po/m2_before": m2_before,
            "m2po/m2_after": (m2 * kept_trust.view(torch.uint8)).sum() / n_kept_trust.clamp(min=1),  # m2 finite
            "m2po/masked_fraction": _count(dropped, dtype) / n_valid.clamp(min=1),
            "m2po/trust_region_fraction": n_trust / n_valid.clamp(min=1),
        }
    return keep, stats


def _dropped_on_device(trust: torch.Tensor, m2: torch.Tensor, m2_before: torch.Tensor, at_most: float) -> torch.Tensor:
    """The masked trust-region tokens, without a host sync: every token is sorted (the others as +inf, after the trust
    region's), whether or not any needs masking."""
    flat = torch.where(trust, m2, math.inf).reshape(-1)
    values, order = _stable_sort(flat)
    prefix_means = values.cumsum(0) / torch.arange(1, flat.numel() + 1, dtype=flat.dtype, device=flat.device)
    keep_count = torch.count_nonzero(prefix_means <= at_most)
    ranks = torch.arange(flat.numel(), device=flat.device)
    beyond = torch.empty_like(flat, dtype=torch.bool).scatter_(0, order, ranks >= keep_count).view(trust.shape)
    return trust & beyond & (m2_before > at_most)


def _dropped_on_host(trust: torch.Tensor, m2: torch.Tensor, m2_before: torch.Tensor, at_most: float) -> torch.Tensor:
    """The masked trust-region tokens of CPU tensors, as the reference finds them: nothing when M2 ≤ τ, else a sort of
    the trust-region values alone (the same stable order, prefix means and count as `_dropped_on_device`)."""
    dropped = torch.zeros_like(trust)
    if not bool(m2_before > at_most):
        return dropped
    where = trust.reshape(-1).nonzero().squeeze(1)  # the trust region's positions, in order
    values, order = _stable_sort(m2.reshape(-1)[where])
    prefix_means = values.cumsum(0) / torch.arange(1, values.numel() + 1, dtype=values.dtype)
    keep_count = int(torch.count_nonzero(prefix_means <= at_most))
    dropped.view(-1)[where[order[keep_count:]]] = True
    return dropped


def _count(flags: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The number of True in a bool tensor, as a sum of its uint8 view in `dtype` (no copy; faster than count_nonzero
    on CPU)."""
    return flags.view(torch.uint8).sum(dtype=dtype)


def _stable_sort(flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`torch.sort(flat, stable=True)` of values >= 0 (+inf and NaN included). In float32, as a stable sort of the
    values' int32 bits, which order as the values do for non-negative floats, +inf and then NaN last (the sign bit
    cleared: a NaN may carry one): the same order, ~3× faster on CPU than a stable float sort."""
    if flat.dtype != torch.float32:
        return torch.sort(flat, stable=True)
    bits, order = torch.sort(flat.view(torch.int32) & 0x7FFFFFFF, stable=True)
    return bits.view(torch.float32), order


@register_policy_loss("m2po")
class M2POPolicyLoss(PolicyLoss):
    """M2PO. Metrics: `pg_loss`, `ppo_kl` (token mean of −clamp(log r)), `ratio/mean` (token mean of the clamped
    ratio over all valid tokens) and the selection's `m2po/m2_before`, `m2po/m2_after`, `m2po/masked_fraction`,
    `m2po/trust_region_fraction` (see `m2po_mask`).

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages` and the window counts. NaN / ±inf in
    `logprob`, `old_logprob` or `advantages` at a valid position make the loss NaN (the reference raises instead,
    which costs a host sync); at masked positions they are ignored.
    """

    arguments = (
        Argument(
            "m2_threshold",
            0.04,
            "M2PO's τ: the largest (log r)² of the trust-region tokens (A > 0 with r > 1, A < 0 with r < 1) are "
            "masked until their mean (log r)² is at most τ; 0.04 is the paper's.",
            ge=0,
        ),
        loss_agg_mode_argument("token-mean"),
        Argument(
            "log_ratio_clip",
            20.0,
            "The loss's value uses exp(clamp(log r, ±log_ratio_clip)), with the gradient of the unclamped log-ratio "
            "(a straight-through clamp that only keeps the value finite).",
            gt=0,
        ),
    )
    metrics: ClassVar[dict[str, str]] = {"pg_loss": SHARE, "ppo_kl": MEAN, "ratio/mean": MEAN, **M2PO_METRICS}

    def select_over_window(
        self, log_ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, Metrics]:
        """The selection over a whole optimizer window `[N, T]` (the reference's mini-batch pre-pass), for a trainer
        that hands each micro-batch's share back as `window_selected`."""
        return m2po_mask(log_ratio, advantages, mask, self.m2_threshold)

    def __call__(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        window_selected: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        log_ratio = b.select(logprob - b.check("old_logprob", old_logprob))
        adv = b.advantages(advantages)
        if window_selected is None:
            keep, stats = m2po_mask(log_ratio, adv, b.mask, self.m2_threshold)
        else:  # selected over the whole optimizer window (`select_over_window`), its statistics logged there
            if not isinstance(window_selected, torch.Tensor) or window_selected.shape != log_ratio.shape:
                raise ValueError(
                    f"{self.name}: window_selected must be a bool tensor shaped like logprob {tuple(log_ratio.shape)}; "
                    f"got {shape_of(window_selected)}"
                )
            keep, stats = check_mask(self.name, "window_selected", window_selected).bool() & b.mask, {}
        clamped = log_ratio.detach().clamp(-self.log_ratio_clip, self.log_ratio_clip)
        ratio = torch.exp(log_ratio + (clamped - log_ratio.detach()))  # value e^clamp, gradient of e^{log r} there
        # −A·ratio is finite at every position (a clamped ratio; A, a selected column): multiplying by the 0/1 `keep`
        # equals selecting with it.
        loss = b.aggregate(-adv * ratio * keep.view(torch.uint8), self.loss_agg_mode)
        with torch.no_grad():
            metrics = {
                "pg_loss": loss.detach(),
                "ppo_kl": -b.mean(clamped),
                "ratio/mean": b.valid_mean(ratio),
                **{name: value.to(b.count_dtype) for name, value in stats.items()},
            }
        return loss, metrics
