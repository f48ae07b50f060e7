"""KL estimators between the policy and the reference model, with an adaptive coefficient.

Trinity-RFT's `kl_fn` (names as there; verl's `kl` = k1 and `mse` = k2 too). Estimators of
KL(π_θ ‖ π_ref) on tokens sampled from the policy (Schulman 2020, "Approximating KL Divergence",
http://joschu.net/blog/kl-approx.html). With d = ref − lp:

    k1           lp − ref
    k2           ½ (lp − ref)²
    k3           eᵈ − 1 − d
    low_var_kl   clamp(e^{d'} − d' − 1, ±10), d' = clamp(d, ±20)            (verl)
    abs          |lp − ref|
    corrected_k3 clamp(e^{lp − old}, 0, 2) · k3  (k3 when no old_logprob; DeepSeek-V3.2's
                 importance-corrected, unbiased estimator under off-policy sampling)
    none         0

`calculate_kl_loss` is the KL-loss term kl_coef·agg(KL) added to the policy loss;
`apply_kl_penalty_to_reward` is the in-reward penalty (Trinity's `kl_penalty_fn`). The adaptive
controller (Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences",
arXiv 1909.08593) updates the coefficient once per batch:

    coef ← coef · (1 + clip(kl/target − 1, −0.2, 0.2) · batch_size/horizon)
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from .._validation import declared_inputs
from ..components import MEAN, SHARE, Argument, Component, Registry
from .aggregation import LOSS_AGG_MODES, check_loss_agg_mode
from .inputs import WINDOW_INPUTS, Metrics, check_inputs, scalar
from .masked_batch import MaskedBatch, masked_batch


class KLFn(Component):
    """Base class of the KL estimators (build one with `get_kl_fn`, whose arguments are the constructor's).

    `calculate_kl_loss` is the KL-loss term added to the policy loss, `apply_kl_penalty_to_reward` the in-reward
    penalty, `calculate_kl` the unmasked per-token estimate. Subclasses implement `kl_from_log_ratio(d,
    log_ratio_old=None)`. Metrics of `calculate_kl_loss`: `kl_loss` (agg(KL), a window share like the loss) and
    `kl_coef`."""

    arguments = (
        Argument(
            "kl_coef",
            0.001,
            "Coefficient of the KL term: kl_coef·agg(KL) is added to the loss (`calculate_kl_loss`), or "
            "kl_coef·KL subtracted from the token rewards (`apply_kl_penalty_to_reward`).",
            ge=0,
            in_config=False,  # a trainer family's own field: TRL's `beta` in the GRPO family, `kl_coef` in DPO
        ),
        Argument(
            "adaptive",
            False,
            "Adapt the KL coefficient after every batch (in a trainer: every optimizer step) with the adaptive KL "
            "controller (Ziegler et al. 2019): coef ← coef·(1 + clip(KL/target_kl − 1, ±0.2)·sequences/horizon), "
            "from a coefficient > 0. Needs `target_kl` and the horizon.",
            config_name="adaptive_kl",
        ),
        Argument("target_kl", None, "Target KL (> 0) of the adaptive KL controller.", type=float, gt=0),
        Argument(
            "horizon",
            None,
            "Horizon of the adaptive KL controller, in sequences (an integer > 0).",
            type=int,
            gt=0,
            config_name="kl_horizon",
        ),
    )
    metrics: ClassVar[dict[str, str]] = {"kl_loss": SHARE, "kl_coef": MEAN}

    uses_old_logprob = False  # corrected_k3: the estimator reads old_logprob

    def check_arguments(self) -> None:
        if self.adaptive and (self.target_kl is None or self.horizon is None):
            raise ValueError(f"{self.name}: adaptive=True needs target_kl and horizon (both > 0)")
        self.kl_coef = float(self.kl_coef)

    @classmethod
    def inputs(cls) -> tuple[str, ...]:
        """The keywords `calculate_kl_loss` reads: its named parameters and the window counts."""
        return declared_inputs(cls.calculate_kl_loss, WINDOW_INPUTS)

    def calculate_kl(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, old_logprob: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Per-token KL estimate `[B, T]` (unmasked)."""
        return self.kl_from_log_ratio(ref_logprob - logprob, None if old_logprob is None else logprob - old_logprob)

    def kl_from_log_ratio(self, d: torch.Tensor, log_ratio_old: torch.Tensor | None = None) -> torch.Tensor:
        """The estimator in terms of d = ref − lp (and lp − old for corrected_k3)."""
        raise NotImplementedError

    def loss_terms(
        self, b: MaskedBatch, logprob: torch.Tensor, ref_logprob: torch.Tensor, log_ratio_old: torch.Tensor | None
    ) -> tuple[torch.Tensor, float]:
        """The per-token KL of the loss (0 at masked positions) and a factor applied after the (linear) aggregation:
        `kl_from_log_ratio` of the selected d = ref − lp, and 1."""
        d = b.select(ref_logprob - logprob)
        return self.kl_from_log_ratio(d, log_ratio_old), 1.0

    @staticmethod
    def _selected_gap(b: MaskedBatch, logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
        """The selected lp − ref = −d, for the estimators written in it (no negation in the backward pass)."""
        return b.select(logprob - ref_logprob)

    def calculate_kl_loss(
        self,
        logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        old_logprob: torch.Tensor | None = None,
        token_weights: torch.Tensor | None = None,
        **window: Any,
    ) -> tuple[torch.Tensor, Metrics]:
        """The KL-loss term `kl_coef · agg(w·KL)` added to the policy loss (`none`: a 0 loss and no metrics).

        NaN / ±inf in `logprob`, `ref_logprob` (or, for `corrected_k3`, `old_logprob`) at a valid position make
        the loss NaN — also where `low_var_kl`'s clamps would make it finite; at masked positions they are
        ignored.

        Args:
            logprob: `[B, T]` log-probs of the policy.
            ref_logprob: `[B, T]` log-probs of the reference model.
            response_mask: `[B, T]`, bool or 0/1 (a non-bool mask is checked: one device sync).
            loss_agg_mode: One of `LOSS_AGG_MODES` (see `aggregate_loss`).
            old_logprob: `[B, T]` log-probs of the sampling policy, read by `corrected_k3` only.
            token_weights: w, `[B, T]` or `[B, 1]` (default 1): weighs each token's KL, e.g. by the importance
                ratio π/π_old (TRL's `use_bias_correction_kl`); gradients flow through it.
            **window: The optional `global_valid_toks` / `global_valid_seqs` / `normalizer` of `aggregate_loss`;
                the other documented batch keys are ignored.

        Returns:
            loss: `kl_coef · agg(w·KL)`, 0-dim.
            metrics: `{"kl_loss": agg(w·KL), "kl_coef": kl_coef}`, detached 0-dim tensors.

        Raises:
            ValueError: An unknown `loss_agg_mode` or keyword (one that is not a documented batch key), or an input
                of the wrong shape or dtype, or a mask holding values other than 0 and 1.
        """
        check_loss_agg_mode(self.name, loss_agg_mode)
        b = masked_batch(self.name, self.inputs(), logprob, response_mask, window, mask_name="response_mask")
        ref = b.check("ref_logprob", ref_logprob)
        log_ratio = None
        if old_logprob is not None and self.uses_old_logprob:
            log_ratio = b.select(logprob - b.check("old_logprob", old_logprob))
        kl, scale = self.loss_terms(b, logprob, ref, log_ratio)
        if token_weights is not None:
            kl = b.select((kl * token_weights).expand(b.shape))
        kl_loss = b.aggregate(kl, loss_agg_mode)  # 0 at masked positions
        if scale != 1.0:
            kl_loss = kl_loss * scale
        metrics = {
            "kl_loss": kl_loss.detach(),
            "kl_coef": scalar(self.kl_coef, kl_loss),
        }
        return kl_loss * self.kl_coef, metrics

    def apply_kl_penalty_to_reward(
        self,
        token_level_scores: torch.Tensor,
        logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, Metrics]:
        """Token rewards − kl_coef·KL; updates an adaptive coefficient with the batch's mean KL
        (mean over rows of the per-row token mean). Runs once per batch, outside the loss.

        Args:
            token_level_scores: `[B, T]` token rewards.
            logprob: `[B, T]` log-probs of the policy.
            ref_logprob: `[B, T]` log-probs of the reference model.
            response_mask: `[B, T]`, bool or 0/1; the KL is 0 at masked positions.

        Returns:
            rewards: The `[B, T]` penalized token rewards (no gradient).
            metrics: `kl` (the batch's mean KL) and `kl_coef` (the coefficient applied, before the adaptive update).
        """
        b = MaskedBatch(self.name, logprob, response_mask, mask_name="response_mask")
        with torch.no_grad():
            kl = self.kl_from_log_ratio(b.select(b.check("ref_logprob", ref_logprob) - logprob))
            rewards = b.check("token_level_scores", token_level_scores) - self.kl_coef * kl
            current_kl = b.mean_over_rows(b.row_mean(kl))
        metrics = {"kl": current_kl, "kl_coef": torch.tensor(self.kl_coef)}
        if self.adaptive:
            self.update_kl_coef(current_kl, batch_size=b.shape[0])
        return rewards, metrics

    def update_kl_coef(self, current_kl: float | torch.Tensor, batch_size: int) -> None:
        """Adaptive controller step (a no-op unless `adaptive`)."""
        if not self.adaptive:
            return
        error = min(max(float(current_kl) / self.target_kl - 1.0, -0.2), 0.2)
        self.kl_coef *= 1.0 + error * batch_size / self.horizon


KL_FNS = Registry("KL function", KLFn)
"""KL estimators by name (`kl` and `mse` are verl's names for k1 and k2)."""


@KL_FNS.register("none")
class NoKL(KLFn):
    """No KL term: a 0 loss and no metrics."""

    metrics: ClassVar[dict[str, str]] = {}

    def kl_from_log_ratio(self, d, log_ratio_old=None):
        return torch.zeros_like(d)

    def calculate_kl_loss(
        self,
        logprob,
        ref_logprob,
        response_mask,
        loss_agg_mode="token-mean",
        old_logprob=None,
        token_weights=None,
        **window,
    ):
        check_loss_agg_mode(self.name, loss_agg_mode)
        check_inputs(self.name, self.inputs(), window)
        return logprob.new_zeros(()), {}


@KL_FNS.register("k1")  # the outermost name is the class's `name`
@KL_FNS.register("kl")
class K1(KLFn):
    def kl_from_log_ratio(self, d, log_ratio_old=None):
        return -d

    def loss_terms(self, b, logprob, ref_logprob, log_ratio_old):
        return self._selected_gap(b, logprob, ref_logprob), 1.0  # −d = lp − ref


@KL_FNS.register("k2")
@KL_FNS.register("mse")
class K2(KLFn):
    def kl_from_log_ratio(self, d, log_ratio_old=None):
        return 0.5 * d.square()

    def loss_terms(self, b, logprob, ref_logprob, log_ratio_old):
        return self._selected_gap(b, logprob, ref_logprob).square(), 0.5  # ½·(lp − ref)², the ½ after aggregating


@KL_FNS.register("k3")
class K3(KLFn):
    def kl_from_log_ratio(self, d, log_ratio_old=None):
        return torch.exp(d) - 1.0 - d


@KL_FNS.register("low_var_kl")
class LowVarKL(KLFn):
    def kl_from_log_ratio(self, d, log_ratio_old=None):
        if torch.is_grad_enabled() and d.requires_grad:
            return _LowVarKL.apply(d)
        return _LowVarKL.value(d)[0]


class _LowVarKL(torch.autograd.Function):
    """low_var_kl with a short backward pass: the reference's operations in its order forward, and the gradient that
    autograd would compute through them, bit for bit, in three passes over `[B, T]` (autograd's chain through two
    clamps, the difference and the exp takes about ten, and keeps three `[B, T]` tensors where this keeps e^{d'} and
    one bool mask).

    With d' = clamp(d, ±20), k = e^{d'} − d' − 1 ≥ 0 and KL = clamp(k, ±10), autograd's gradient is
    g·e^{d'} − g where both clamps pass it (inside their closed intervals) and 0 elsewhere (NaN included). Where
    k ≤ 10, |d| ≤ 20 too (k > 10 below d ≈ −11 and above d ≈ 2.6; at d = ±20, k is 19 and e^20 − 21), so the one
    test k ≤ 10 (false at NaN) decides both."""

    @staticmethod
    def value(d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(KL, k, e^{d'})."""
        clamped = d.clamp(-20.0, 20.0)
        exp = torch.exp(clamped)
        k = (exp - clamped).sub_(1.0)
        return k.clamp(-10.0, 10.0), k, exp

    @staticmethod
    def forward(ctx: Any, d: torch.Tensor) -> torch.Tensor:
        kl, k, exp = _LowVarKL.value(d)
        ctx.save_for_backward(exp, k <= 10.0)
        return kl

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        exp, passed = ctx.saved_tensors
        return torch.where(passed, (grad * exp).sub_(grad), 0.0)


@KL_FNS.register("abs")
class AbsKL(KLFn):
    def kl_from_log_ratio(self, d, log_ratio_old=None):
        return d.abs()

    def loss_terms(self, b, logprob, ref_logprob, log_ratio_old):
        return self._selected_gap(b, logprob, ref_logprob).abs(), 1.0  # |d| = |lp − ref|


@KL_FNS.register("corrected_k3")
class CorrectedK3(KLFn):
    uses_old_logprob = True

    def kl_from_log_ratio(self, d, log_ratio_old=None):
        k3 = torch.exp(d) - 1.0 - d
        if log_ratio_old is None:
            return k3
        return torch.exp(log_ratio_old).clamp(0.0, 2.0) * k3


def get_kl_fn(
    name: str,
    kl_coef: float = 0.001,
    adaptive: bool = False,
    target_kl: float | None = None,
    horizon: int | None = None,
) -> KLFn:
    """The KL estimator `name` with its coefficient and (optional) adaptive controller.

    Args:
        name: One of `KL_FNS`: `k1` (alias `kl`), `k2` (alias `mse`), `k3`, `low_var_kl`, `abs`, `corrected_k3`,
            `none` (the formulas are in the module docstring).
        kl_coef: Coefficient of the KL term (>= 0).
        adaptive: Adapt the coefficient after every batch with the adaptive KL controller (Ziegler et al. 2019).
        target_kl: Target KL (> 0) of the adaptive controller; required with `adaptive`.
        horizon: Horizon of the adaptive controller, in sequences (an integer > 0); required with `adaptive`.

    Returns:
        The estimator: `calculate_kl_loss` gives the KL-loss term, `apply_kl_penalty_to_reward` the in-reward penalty.

    Raises:
        ValueError: An unknown name (listing the valid ones), an invalid value (naming the argument), or
            `adaptive=True` without `target_kl` and `horizon`.
    """
    return KL_FNS.build(name, kl_coef=kl_coef, adaptive=adaptive, target_kl=target_kl, horizon=horizon)


__all__ = ["KL_FNS", "LOSS_AGG_MODES", "KLFn", "get_kl_fn"]
