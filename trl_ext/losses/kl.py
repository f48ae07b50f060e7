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

from typing import Any

import torch

from .base import (
    LOSS_AGG_MODES,
    WINDOW_INPUTS,
    MaskedBatch,
    Metrics,
    build_from_registry,
    check_bool,
    check_inputs,
    check_loss_agg_mode,
    check_number,
    declared_inputs,
    masked_batch,
    scalar,
)


class KLFn:
    """Base class: subclasses implement `kl_from_log_ratio(d, log_ratio_old=None)`."""

    name = ""
    uses_old_logprob = False  # corrected_k3: the estimator reads old_logprob

    def __init__(
        self,
        kl_coef: float = 0.001,
        adaptive: bool = False,
        target_kl: float | None = None,
        horizon: float | None = None,
    ) -> None:
        check_number(self.name, "kl_coef", kl_coef, ge=0)
        check_bool(self.name, "adaptive", adaptive)
        if adaptive:
            if target_kl is None or horizon is None:
                raise ValueError(f"{self.name}: adaptive=True needs target_kl and horizon (both > 0)")
            check_number(self.name, "target_kl", target_kl, gt=0)
            check_number(self.name, "horizon", horizon, gt=0)
        self.kl_coef = float(kl_coef)
        self.adaptive = adaptive
        self.target_kl = target_kl
        self.horizon = horizon

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {"kl_coef": 0.001, "adaptive": False, "target_kl": None, "horizon": None}

    @classmethod
    def inputs(cls) -> tuple[str, ...]:
        """The keywords `calculate_kl_loss` reads: its named parameters and the window counts."""
        return declared_inputs(cls.calculate_kl_loss, WINDOW_INPUTS)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kl_coef={self.kl_coef!r}, adaptive={self.adaptive!r})"

    def calculate_kl(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, old_logprob: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Per-token KL estimate `[B, T]` (unmasked)."""
        return self.kl_from_log_ratio(ref_logprob - logprob, None if old_logprob is None else logprob - old_logprob)

    def kl_from_log_ratio(self, d: torch.Tensor, log_ratio_old: torch.Tensor | None = None) -> torch.Tensor:
        """The estimator in terms of d = ref − lp (and lp − old for corrected_k3)."""
        raise NotImplementedError

    def calculate_kl_loss(
        self,
        logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        old_logprob: torch.Tensor | None = None,
        **window: Any,
    ) -> tuple[torch.Tensor, Metrics]:
        """`(kl_coef · agg(KL), {"kl_loss": agg(KL), "kl_coef": kl_coef})`; `window` takes the
        optional `global_valid_toks` / `global_valid_seqs` / `normalizer` of `aggregate_loss` (the other
        documented batch keys are ignored, any other keyword is a ValueError).

        NaN / ±inf in `logprob`, `ref_logprob` (or, for `corrected_k3`, `old_logprob`) at a valid position make
        the loss NaN — also where `low_var_kl`'s clamps would make it finite; at masked positions they are
        ignored. A non-bool `response_mask` must hold only 0 and 1 (checked: one device sync)."""
        check_loss_agg_mode(self.name, loss_agg_mode)
        b = masked_batch(self.name, self.inputs(), logprob, response_mask, window, mask_name="response_mask")
        d = b.select(b.check("ref_logprob", ref_logprob) - logprob)
        log_ratio = None
        if old_logprob is not None and self.uses_old_logprob:
            log_ratio = b.select(logprob - b.check("old_logprob", old_logprob))
        kl_loss = b.aggregate(self.kl_from_log_ratio(d, log_ratio), loss_agg_mode)  # 0 at masked positions
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
        (mean over rows of the per-row token mean). Runs once per batch, outside the loss."""
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


class NoKL(KLFn):
    name = "none"

    def kl_from_log_ratio(self, d, log_ratio_old=None):
        return torch.zeros_like(d)

    def calculate_kl_loss(
        self, logprob, ref_logprob, response_mask, loss_agg_mode="token-mean", old_logprob=None, **window
    ):
        check_loss_agg_mode(self.name, loss_agg_mode)
        check_inputs(self.name, self.inputs(), window)
        return logprob.new_zeros(()), {}


class K1(KLFn):
    name = "k1"

    def kl_from_log_ratio(self, d, log_ratio_old=None):
        return -d


class K2(KLFn):
    name = "k2"

    def kl_from_log_ratio(self, d, log_ratio_old=None):
        return 0.5 * d.square()


class K3(KLFn):
    name = "k3"

    def kl_from_log_ratio(self, d, log_ratio_old=None):
        return torch.exp(d) - 1.0 - d


class LowVarKL(KLFn):
    name = "low_var_kl"

    def kl_from_log_ratio(self, d, log_ratio_old=None):
        d = d.clamp(-20.0, 20.0)
        return (torch.exp(d) - d - 1.0).clamp(-10.0, 10.0)


class AbsKL(KLFn):
    name = "abs"

    def kl_from_log_ratio(self, d, log_ratio_old=None):
        return d.abs()


class CorrectedK3(KLFn):
    name = "corrected_k3"
    uses_old_logprob = True

    def kl_from_log_ratio(self, d, log_ratio_old=None):
        k3 = torch.exp(d) - 1.0 - d
        if log_ratio_old is None:
            return k3
        return torch.exp(log_ratio_old).clamp(0.0, 2.0) * k3


KL_FNS: dict[str, type[KLFn]] = {
    "none": NoKL,
    "k1": K1,
    "kl": K1,
    "k2": K2,
    "mse": K2,
    "k3": K3,
    "low_var_kl": LowVarKL,
    "abs": AbsKL,
    "corrected_k3": CorrectedK3,
}
"""KL estimators by name (`kl` and `mse` are verl's names for k1 and k2)."""


def get_kl_fn(
    name: str,
    kl_coef: float = 0.001,
    adaptive: bool = False,
    target_kl: float | None = None,
    horizon: float | None = None,
) -> KLFn:
    """The KL estimator `name` with its coefficient and (optional) adaptive controller."""
    return build_from_registry(
        "KL function",
        KL_FNS,
        name,
        {"kl_coef": kl_coef, "adaptive": adaptive, "target_kl": target_kl, "horizon": horizon},
    )


__all__ = ["KL_FNS", "LOSS_AGG_MODES", "KLFn", "get_kl_fn"]
