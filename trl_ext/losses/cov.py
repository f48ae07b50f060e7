"""Clip-Cov and KL-Cov: entropy control through the covariance of advantage and log-prob (verl `clip_cov`, `kl_cov`).

Paper: Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models"
(arXiv 2505.22617). The policy entropy falls in proportion to the covariance between a token's log-prob and its
advantage, so both losses act on a few tokens of a micro-batch with a high centred product

    cov = (A − mean A) · (sg(lp) − mean sg(lp))          means over the micro-batch's valid tokens

(`clip_cov` takes mean A and mean lp as verl's `masked_mean`, Σ / (n + 1e-8) with n + 1e-8 in the mask's dtype when
it is floating-point and in torch's default dtype, float32, otherwise, where it rounds to n: with a bool mask, equal
advantages centre to exactly 0 whatever the values' dtype, as in verl; `kl_cov` the plain means). With
Δ = lp − old (not clamped, as in verl) and r = e^Δ:

Clip-Cov (`clip_cov`): PPO's clipped surrogate (no dual clip), with a random few high-covariance tokens dropped:

    L1 = −A·r,   L2 = −A·clamp(r, 1 − ε_low, 1 + ε_high),   L = max(L1, L2) · (1 − D)

D = 1 on k = min(max(⌊ρ·n⌋, 1), |C|) tokens drawn uniformly without replacement from the candidates
C = {valid tokens with L2 ≤ L1 (not clipped by PPO) and lb < cov < ub}; ρ = `clip_cov_ratio`, n = number of valid
tokens. The draw is verl's: the candidates in row-major order, `torch.randperm(|C|)` on the CPU, the first k of the
permutation; no draw when C is empty. By default it uses torch's global CPU generator, so under the same
`torch.manual_seed` trl_ext drops the very tokens verl drops; with `selection_seed` the loss draws from its own CPU
generator, seeded once with that value and advanced by each call: reproducible whatever else uses torch's generator
(which it leaves alone), and its draws are the ones verl makes right after `torch.manual_seed(selection_seed)`. The
draw needs |C| on the host (the size of the candidates' `nonzero`, as verl's): one device sync per call (unavoidable
for verl's draw).

KL-Cov (`kl_cov`): the plain importance-weighted policy gradient, with a |Δ| penalty on the top tokens by covariance:

    L = −A·r + β·|Δ| · P,     P = 1 on the k = max(⌊κ·n⌋, 1) valid tokens with the largest cov (0 without tokens)

κ = `kl_cov_ratio`, β = `ppo_kl_coef`. The top k are taken on the device without a host sync (a stable descending
sort, ranks compared with k as a tensor; ⌊κ·n⌋ in float64, as verl's Python arithmetic): the same tokens as verl's
`torch.topk` except for ties at the k-th largest covariance, which are broken toward the earlier position in
row-major order (verl's CPU `topk` picks an implementation-defined one among them).

Both select over the valid tokens of the micro-batch they are given, as verl does per micro-batch (window
normalization only changes the aggregation). A per-token `importance_sampling_ratio` (`[B, T]` or `[B, 1]`)
multiplies L after the selection, as verl's `rollout_is_weights`.

Metrics (verl's, plus the loss): `clip_cov`: `pg_clipfrac` (share of valid tokens dropped, D = 1), `ppo_kl` (token
mean of −Δ), `pg_loss`; `kl_cov`: `ppo_kl_abs` (token mean of |Δ|: verl logs it as `actor/ppo_kl`), `kl_cov_frac`
(share of valid tokens penalized, P = 1), `pg_loss`.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from ..components import MEAN, SHARE, Argument
from .aggregation import EPS
from .base import PolicyLoss, loss_agg_mode_argument, register_policy_loss, resolve_clip_range
from .inputs import Metrics
from .masked_batch import MaskedBatch


class _CovPolicyLoss(PolicyLoss):
    """The covariance losses: common input handling; `per_token_loss` is the subclass's."""

    def per_token_loss(
        self, b: MaskedBatch, delta: torch.Tensor, adv: torch.Tensor, cov: torch.Tensor, metrics: Metrics
    ) -> torch.Tensor:
        """The `[B, T]` loss from Δ (selected, with gradient), the advantages and cov (detached; any value at
        padding: read it at valid tokens only)."""
        raise NotImplementedError

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
        adv = b.advantages(advantages)
        weights = b.token_weights(importance_sampling_ratio)
        delta = b.select(logprob - b.check("old_logprob", old_logprob), covers=(logprob, old_logprob))
        with torch.no_grad():
            # (A − mean A)·(lp − mean lp), token by token as verl (the same values, the same means): the per-row
            # factor times the `[B, T]` one. Only the valid tokens' values are read.
            lp = b.select(logprob.detach())
            mean_adv = self.mean(b, b.select(adv.expand(b.shape)), action_mask)
            cov = (adv - mean_adv) * (lp - self.mean(b, lp, action_mask))
        metrics: Metrics = {}
        per_token = self.per_token_loss(b, delta, adv, cov, metrics)
        if weights is not None:
            per_token = per_token * weights
        loss = b.aggregate(b.select(per_token), self.loss_agg_mode)
        metrics["pg_loss"] = loss.detach()
        return loss, metrics

    def mean(self, b: MaskedBatch, x: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
        """The mean of x (0 at padding) over the valid tokens, as the loss's verl function takes it (`action_mask` is
        the mask as given: its dtype decides verl's)."""
        raise NotImplementedError


@register_policy_loss("clip_cov")
class ClipCovPolicyLoss(_CovPolicyLoss):
    """Clip-Cov (see the module docstring). Metrics: `pg_clipfrac`, `ppo_kl`, `pg_loss`.

    `clip_range_low` / `clip_range_high` fall back to the symmetric `clip_range`; an instance holds the resolved
    bounds. One device sync per call (the random draw needs the candidate count on the host).

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages`, `importance_sampling_ratio`
    (optional, multiplies the per-token loss after the selection) and the window counts. NaN / ±inf in any of them
    at a valid position make the loss NaN; at masked positions they are ignored.
    """

    deterministic = False  # the random draw of the tokens to drop

    arguments = (
        Argument(
            "clip_range",
            0.2,
            "PPO clip ε, used for both sides unless `clip_range_low`/`_high` are set (verl's `clip_ratio`).",
            optional=True,
            ge=0,
        ),
        Argument(
            "clip_range_low",
            None,
            "Lower clip ε_low: the ratio is clipped at 1 − ε_low (verl's `clip_ratio_low`). Defaults to `clip_range`.",
            type=float,
            ge=0,
        ),
        Argument(
            "clip_range_high",
            None,
            "Upper clip ε_high: the ratio is clipped at 1 + ε_high (verl's `clip_ratio_high`). Defaults to "
            "`clip_range`.",
            type=float,
            ge=0,
        ),
        Argument(
            "clip_cov_ratio",
            0.0002,
            "Share ρ of the micro-batch's valid tokens whose gradient is dropped: max(⌊ρ·n⌋, 1) tokens, drawn at "
            "random among the candidates (covariance in (clip_cov_lb, clip_cov_ub), not clipped by PPO).",
            gt=0,
            le=1,
        ),
        Argument("clip_cov_lb", 1.0, "Lower bound (exclusive) of a candidate's covariance.", type=float),
        Argument("clip_cov_ub", 5.0, "Upper bound (exclusive) of a candidate's covariance.", type=float),
        Argument(
            "selection_seed",
            None,
            "Seed of the loss's own CPU generator for the random draw (seeded once, advanced by each call; its draws "
            "are verl's after `torch.manual_seed(selection_seed)`). None: torch's global CPU generator, as verl.",
            type=int,
            ge=0,
        ),
        loss_agg_mode_argument("token-mean"),
    )
    metrics: ClassVar[dict[str, str]] = {"pg_clipfrac": MEAN, "ppo_kl": MEAN, "pg_loss": SHARE}

    def __init__(self, backend: str = "verl", **kwargs) -> None:
        super().__init__(backend, **kwargs)
        seed = self.selection_seed
        self._generator = None if seed is None else torch.Generator().manual_seed(seed)  # None: the global one

    def check_arguments(self) -> None:
        self.clip_range_low, self.clip_range_high = resolve_clip_range(
            self.name, self.clip_range, self.clip_range_low, self.clip_range_high
        )
        if self.clip_cov_lb > self.clip_cov_ub:
            raise ValueError(
                f"clip_cov: clip_cov_lb={self.clip_cov_lb!r} is not valid; must be <= clip_cov_ub={self.clip_cov_ub!r}"
            )

    def mean(self, b: MaskedBatch, x: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
        """verl's `masked_mean(x, mask)` = Σ x·m / (Σ m + 1e-8) in verl's dtypes, so that cov is verl's to the bit
        (a candidate needs cov > lb: a cov of exactly 0 is none at lb = 0, and any rounding would make it one). A bool
        or integer mask's count is an integer, and + 1e-8 makes it torch's default dtype (float32), where n + 1e-8
        rounds to n: equal advantages then centre to exactly 0, also in float64. A floating-point mask keeps its
        dtype, and x·m has the promoted one. The count is `n_tok` (exact below 2^24 tokens) cast to that dtype."""
        if action_mask.is_floating_point():
            count_dtype, sum_dtype = action_mask.dtype, torch.promote_types(x.dtype, action_mask.dtype)
        else:
            count_dtype, sum_dtype = torch.get_default_dtype(), x.dtype
        return x.to(sum_dtype).sum() / (b.n_tok.to(count_dtype) + EPS)

    def per_token_loss(self, b, delta, adv, cov, metrics):
        ratio = torch.exp(delta)
        unclipped = -adv * ratio
        clipped = -adv * ratio.clamp(1.0 - self.clip_range_low, 1.0 + self.clip_range_high)
        with torch.no_grad():
            candidates = b.mask & (clipped <= unclipped) & (cov > self.clip_cov_lb) & (cov < self.clip_cov_ub)
            positions, kept, n_dropped = self.draw(b, candidates)
            metrics["pg_clipfrac"] = n_dropped.to(b.count_dtype) / (b.n_tok + EPS)
            metrics["ppo_kl"] = -b.mean(delta.detach())
        loss = torch.maximum(unclipped, clipped)
        if positions.numel() == 0:
            return loss
        # × (1 − D) rather than where(): as verl, an overflowing (inf) loss at a dropped token stays NaN
        return _MultiplyAt.apply(loss, positions, kept.to(loss.dtype))

    def draw(self, b: MaskedBatch, candidates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """verl's random choice of k = max(⌊ρ·n⌋, 1) of the `candidates` (all of them if fewer): the candidates'
        flat positions in row-major order (verl's `nonzero` order), 0 where the i-th is dropped (1 where kept), and
        the number dropped. The candidates' count is the one host sync (the size of `nonzero`'s result)."""
        positions = candidates.view(-1).nonzero().squeeze(-1)
        n_candidates = positions.numel()
        k = torch.floor(b.n_tok.to(torch.float64) * self.clip_cov_ratio).clamp(min=1.0)  # verl: max(int(ρ·n), 1)
        if n_candidates == 0:
            return positions, positions.new_ones(0), k.new_zeros(())
        # verl drops the candidates at the first k places of `torch.randperm(|C|)` (drawn on the CPU): candidate i
        # is dropped if its place in the permutation is below k.
        order = torch.randperm(n_candidates, generator=self._generator)
        place = torch.empty_like(order)
        place[order] = torch.arange(n_candidates)
        kept = place.to(positions.device) >= k
        return positions, kept, k.clamp(max=n_candidates)


class _MultiplyAt(torch.autograd.Function):
    """x with x[i] (flat index) multiplied by factor[i] at the given positions, in place; the gradient likewise."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, positions: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
        ctx.mark_dirty(x)
        ctx.save_for_backward(positions, factor)
        return _MultiplyAt.multiply(x, positions, factor)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        grad = grad.clone(memory_format=torch.contiguous_format)
        return _MultiplyAt.multiply(grad, *ctx.saved_tensors), None, None

    @staticmethod
    def multiply(x: torch.Tensor, positions: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
        flat = x.view(-1)
        flat[positions] = flat[positions] * factor
        return x


@register_policy_loss("kl_cov")
class KLCovPolicyLoss(_CovPolicyLoss):
    """KL-Cov (see the module docstring). Metrics: `ppo_kl_abs`, `kl_cov_frac`, `pg_loss`. No host sync.

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages`, `importance_sampling_ratio`
    (optional, multiplies the per-token loss after the selection) and the window counts. NaN / ±inf in any of them
    at a valid position make the loss NaN; at masked positions they are ignored.
    """

    arguments = (
        Argument(
            "kl_cov_ratio",
            0.0002,
            "Share κ of the micro-batch's valid tokens that get the |log-ratio| penalty: the max(⌊κ·n⌋, 1) with the "
            "largest covariance.",
            gt=0,
            le=1,
        ),
        Argument(
            "ppo_kl_coef",
            0.1,
            "Coefficient β of the |lp − old| penalty on the selected tokens (verl's PolicyLossConfig default; verl's "
            "loss itself falls back to 1.0 when the config holds None).",
            ge=0,
        ),
        loss_agg_mode_argument("token-mean"),
    )
    metrics: ClassVar[dict[str, str]] = {"ppo_kl_abs": MEAN, "kl_cov_frac": MEAN, "pg_loss": SHARE}

    def mean(self, b: MaskedBatch, x: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
        return x.sum() / b.n_tok.clamp(min=1.0)  # the plain mean, as verl's

    def per_token_loss(self, b, delta, adv, cov, metrics):
        with torch.no_grad():
            penalized = self.top(b, cov)
            metrics["ppo_kl_abs"] = b.mean(delta.detach().abs())
            metrics["kl_cov_frac"] = b.mean(penalized)
        policy_gradient = -adv * torch.exp(delta)
        return torch.where(penalized, policy_gradient + self.ppo_kl_coef * delta.abs(), policy_gradient)

    def top(self, b: MaskedBatch, cov: torch.Tensor) -> torch.Tensor:
        """Bool `[B, T]`: the max(⌊κ·n⌋, 1) valid tokens with the largest `cov` (earlier position first among
        ties), none without valid tokens. No host sync."""
        flat = torch.where(b.mask, cov, -math.inf).flatten()
        if flat.numel() == 0:
            return b.mask
        n_valid = torch.count_nonzero(b.mask).to(torch.float64)
        k = torch.floor(n_valid * self.kl_cov_ratio).clamp(min=1.0).to(torch.int64)  # <= k_max: n <= B·T
        # The k-th largest value t from the top k_max (the largest k can be: a static bound, no sync), then every
        # value above t and, among the values equal to t, the earliest ones in row-major order up to k in all: the
        # stable order of a full sort at the cost of a partial one.
        k_max = min(max(math.floor(flat.numel() * self.kl_cov_ratio), 1), flat.numel())
        top = torch.topk(flat, k_max, sorted=True).values
        threshold = top.gather(0, (k - 1).reshape(1)).squeeze(0)
        above = flat > threshold
        tied = flat == threshold
        room = k - torch.count_nonzero(above)
        chosen = above | (tied & (torch.cumsum(tied, 0) <= room))
        return b.mask & chosen.view(b.shape)
