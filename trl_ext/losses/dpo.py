"""DPO (Trinity-RFT `dpo`) and the preference losses of TRL 1.16's `DPOTrainer`.

Rows come interleaved (chosen, rejected, chosen, rejected, ...): pair p is rows 2p and 2p + 1. Per pair, with m the
action mask, lp / ref the policy's / reference's per-token log-probs and n_c, n_r the completions' lengths (valid
tokens, at least 1):

    S_c, S_r    = Σ_t m·lp over the chosen / rejected completion (the summed log-probs); S_ref likewise
    ρ_c, ρ_r    = S_c − S_c,ref,  S_r − S_r,ref              (log-ratios to the reference; β·ρ are the implicit rewards)
    u_c, u_r    = f′(ρ_c), f′(ρ_r)                           (f-divergence scores; u = ρ for the reverse KL of DPO)
    Δ = u_c − u_r,   Δ̄ = u_c/n_c − u_r/n_r                   (score difference, length-normalized difference)
    σ_ε(x)      = −(1 − ε)·log σ(x) − ε·log σ(−x)            (logistic loss with labels flipped with probability ε)

`dpo` (`DPOLoss`, registered): the sigmoid DPO loss σ_ε(βΔ) of Rafailov et al. 2023, "Direct Preference
Optimization: Your Language Model is Secretly a Reward Model" (arXiv 2305.18290), ε = `label_smoothing` giving
conservative DPO (Mitchell 2023, "A note on DPO with noisy preferences"); loss = mean over pairs. Deliberate
difference from the reference: Trinity-RFT sums the log-ratios of all pairs in the batch into one z (right only for a
single pair); here every pair has its own.

`TRLDPOLoss` (a sibling of `dpo`, not registered: the trainer's loss) adds every loss option of TRL 1.16's
`DPOTrainer`, with TRL's semantics: `loss_type` (one name or a list, summed with `loss_weights` λ_k, MPO-style):

    sigmoid       σ_ε(βΔ)                                              DPO, arXiv 2305.18290 (ε > 0: cDPO)
    hinge         max(0, 1 − βΔ)                                       SLiC-HF, Zhao et al. 2023, arXiv 2305.10425
    ipo           (Δ̄ − 1/(2β))²                                        IPO, Azar et al. 2023, arXiv 2310.12036
    exo_pair      q·(log q − log(1 − ε)) + (1 − q)·(log(1 − q) − log ε),  q = σ(βΔ) (the KL of the pair's
                  softmax to the target (1 − ε, ε); ε > 0)             EXO, Ji et al. 2024, arXiv 2402.00856
    nca_pair      −log σ(βρ_c) − ½·log σ(−βρ_c) − ½·log σ(−βρ_r)       NCA, Chen et al. 2024, arXiv 2402.05369
    robust        (−(1 − ε)·log σ(βΔ) + ε·log σ(−βΔ)) / (1 − 2ε)       rDPO, Chowdhury et al. 2024, arXiv 2403.00409
    bco_pair      −log σ(βρ_c) − log σ(−βρ_r)                          BCO, Jung et al. 2024, arXiv 2404.04656
    sppo_hard     (ρ_c − 1/(2β))² + (ρ_r + 1/(2β))²                    SPPO (hard labels), Wu et al. 2024, 2405.00675
    aot           σ_ε(β·(sort(S_c − S_r)_p − sort(S_c,ref − S_r,ref)_p))   AOT, Melnyk et al. 2024, 2406.05882
    aot_unpaired  σ_ε(β·(sort(ρ_c)_p − sort(ρ_r)_p))                   AOT (unpaired)
    apo_zero      1 − σ(βρ_c) + σ(βρ_r)                                APO, D'Oosterlinck et al. 2024, 2408.06266
    apo_down      σ(βρ_c) + 1 − σ(β(ρ_c − ρ_r))                        APO
    discopop      (1 − w)·(−log σ(βΔ)) + w·e^{−βΔ},  w = σ(βΔ/τ)       DiscoPOP, Lu et al. 2024, arXiv 2406.08414
    sigmoid_norm  −log σ(βΔ̄)                                           length-normalized DPO (Tülu 3, 2411.15124)
    sft           token level: −(Σ of lp over the chosen tokens) / their number: the NLL of the chosen completions
                  (RPO, Pang et al. 2024, arXiv 2404.19733; combined as in MPO, arXiv 2411.10442)

The sorts of `aot` / `aot_unpaired` run over the pairs of the batch (ascending), as in TRL. The f-divergence of f-DPO
(Wang et al. 2023, "Beyond Reverse KL", arXiv 2309.16240; `f_divergence_type`) replaces ρ by its score u = f′(e^ρ):
`reverse_kl` ρ, `forward_kl` 1 − e^{−ρ}, `js_divergence` log 2 + log σ(ρ), `alpha_divergence` (e^{(α−1)ρ} − 1)/(α − 1)
(ρ at α = 1; the exponent capped at 80, 11 in float16, and computed in at least float32); it applies to the loss types
built on Δ only (`F_DIVERGENCE_LOSS_TYPES`). LD-DPO (Liu et al. 2024, arXiv 2409.06411; `ld_alpha` α) sums the tokens
of each pair's longer completion beyond the shorter one's length with weight α, for the policy and the reference.
WPO (Zhou et al. 2024, arXiv 2406.11827; `use_weighting`) multiplies each pair's ℓ by w_c·w_r, w = exp(mean over the
completion of lp − log Σ_v π(v)²), without gradient. The loss is

    L = Σ_k λ_k · mean over pairs of ℓ_k        (the `sft` term: its token mean over the chosen completions)

Deliberate difference from TRL 1.16: its `sigmoid` ignores `label_smoothing`; here it is conservative DPO, as in
Trinity-RFT (and the `dpo` loss), so the two agree when ε = 0. n counts the scored tokens (`action_mask`); TRL's `ipo`
/ `sigmoid_norm` count the completion mask before the one-token shift, which differs only for a completion that starts
the sequence (an empty prompt).

Window normalization (docs/design.md §2.6): with the window's `global_valid_seqs` (rows, i.e. 2 × pairs, of every
micro-batch of the optimizer step on every process) a mean over pairs becomes this batch's sum over the window's
pairs, and with `chosen_valid_toks` (the window's chosen completion tokens) the `sft` term this batch's token sum over
the window's tokens: the shares of the window's micro-batches add up to the window's loss, however it is split. TRL
averages per micro-batch (and over processes), so the update equals TRL's when every micro-batch holds the same number
of pairs (and, for `sft`, of chosen tokens) — with gradient_accumulation_steps=1 on one process in particular. `aot` /
`aot_unpaired` sort within each micro-batch, so their window loss still depends on the split (as in TRL).

`ref_logprob` is per token `[N, T]`, or the per-row sums S_ref `[N]` (as TRL precomputes them, `ld_alpha`-weighted).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
from collections.abc import Sequence
from functools import cached_property
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from ..components import MEAN, SHARE, Argument
from .base import PolicyLoss, register_policy_loss
from .inputs import Metrics, check_window_input
from .masked_batch import MaskedBatch

DPO_LOSS_TYPES = (
    "sigmoid",
    "hinge",
    "ipo",
    "exo_pair",
    "nca_pair",
    "robust",
    "bco_pair",
    "sppo_hard",
    "aot",
    "aot_unpaired",
    "apo_zero",
    "apo_down",
    "discopop",
    "sft",
    "sigmoid_norm",
)
"""Every `loss_type` of TRL 1.16's `DPOTrainer`."""

F_DIVERGENCES = ("reverse_kl", "forward_kl", "js_divergence", "alpha_divergence")
"""The f-divergences of f-DPO (`f_divergence_type`)."""

F_DIVERGENCE_LOSS_TYPES = ("sigmoid", "sigmoid_norm", "hinge", "ipo", "exo_pair", "robust", "discopop", "sft")
"""The loss types an f-divergence other than `reverse_kl` applies to: those built on the score difference Δ, where
the β·log Z(x) term of the f-DPO reparameterization cancels (the others have no f-divergence generalization)."""

_SORTING_LOSS_TYPES = ("aot", "aot_unpaired")

LIST_OPTION_DEFAULTS: dict[str, Any] = {"loss_type": "sigmoid", "loss_weights": None}
"""TRL's list-valued loss options (arguments of `TRLDPOLoss`, outside the `Argument` specs, which are scalars)."""

TRL_OPTIONS = (
    Argument(
        "f_divergence_type",
        "reverse_kl",
        "f-DPO's divergence to the reference (Wang et al. 2023, arXiv 2309.16240): each log-ratio ρ becomes the "
        "score f′(e^ρ): `reverse_kl` ρ (DPO), `forward_kl` 1 − e^{−ρ}, `js_divergence` log 2 + log σ(ρ), "
        "`alpha_divergence` (e^{(α−1)ρ} − 1)/(α − 1). Other than `reverse_kl` only with the loss types built on "
        "the chosen − rejected score difference: " + ", ".join(f"`{t}`" for t in F_DIVERGENCE_LOSS_TYPES) + ".",
        choices=F_DIVERGENCES,
    ),
    Argument(
        "f_alpha_divergence_coef",
        0.5,
        "α of `f_divergence_type='alpha_divergence'` (α = 1 is the reverse KL).",
    ),
    Argument(
        "ld_alpha",
        None,
        "LD-DPO's α (Liu et al. 2024, arXiv 2409.06411): the summed log-probs of a pair weight the tokens of the "
        "longer completion beyond the shorter one's length by α, for the policy and the reference. None (or 1.0) "
        "weights every token 1; 0 keeps the shared length only.",
        type=float,
        ge=0,
        le=1,
    ),
    Argument(
        "use_weighting",
        False,
        "WPO (Zhou et al. 2024, arXiv 2406.11827): multiply each pair's loss by w_c·w_r, w = exp(mean over the "
        "completion of log π(y_t) − log Σ_v π(v)²), without gradient. Not with `aot` / `aot_unpaired` (they sort "
        "the pairs; TRL refuses them too) nor `sft` (TRL 1.16 fails on it; what it means to compute, the "
        "micro-batch's token-mean SFT loss times its mean pair weight, has no window-normalized form).",
    ),
    Argument(
        "discopop_tau",
        0.05,
        "τ of DiscoPOP's mixing weight w = σ(βΔ/τ) between the logistic and the exponential loss (Lu et al. 2024, "
        "arXiv 2406.08414).",
        gt=0,
    ),
)
"""The scalar loss options of TRL's `DPOTrainer` beyond `beta` and `label_smoothing` (arguments of `TRLDPOLoss`)."""

_OPTION_DEFAULTS = {spec.name: spec.default for spec in TRL_OPTIONS}


def f_divergence_score(log_ratio: torch.Tensor, f_divergence_type: str, alpha: float) -> torch.Tensor:
    """The f-DPO score f′(e^ρ) of log-ratios ρ (see the module docstring)."""
    if f_divergence_type == "reverse_kl" or (f_divergence_type == "alpha_divergence" and abs(alpha - 1.0) < 1e-6):
        return log_ratio
    if f_divergence_type == "forward_kl":
        return 1 - torch.exp(-log_ratio)
    if f_divergence_type == "js_divergence":
        return math.log(2) + F.logsigmoid(log_ratio)
    if f_divergence_type == "alpha_divergence":
        exponent = (alpha - 1.0) * log_ratio
        cap = 11.0 if exponent.dtype == torch.float16 else 80.0  # e^cap stays finite in the input's dtype
        wide = exponent.to(torch.promote_types(exponent.dtype, torch.float32)).clamp(max=cap)
        return (torch.exp(wide) - 1.0).to(exponent.dtype) * (1.0 / (alpha - 1.0))
    raise ValueError(f"unknown f_divergence_type {f_divergence_type!r}; valid: {', '.join(F_DIVERGENCES)}")


class _Pairs:
    """Per-pair quantities (`[P]` each) the loss types are built from (notation of the module docstring); the lengths
    and margins, which few loss types read, only when read."""

    def __init__(self, b: MaskedBatch, policy_sum: torch.Tensor, ref_sum: torch.Tensor, score: Any) -> None:
        self.log_ratio = policy_sum - ref_sum
        self._b, self._policy_sum, self._ref_sum = b, policy_sum, ref_sum
        self.chosen_logratio, self.rejected_logratio = self.log_ratio[0::2], self.log_ratio[1::2]  # ρ_c, ρ_r
        self.chosen_score, self.rejected_score = score(self.chosen_logratio), score(self.rejected_logratio)  # u_c, u_r

    @cached_property
    def _length(self) -> torch.Tensor:
        return self._b.row_tok.clamp(min=1)

    @property
    def chosen_length(self) -> torch.Tensor:  # n_c (at least 1)
        return self._length[0::2]

    @property
    def rejected_length(self) -> torch.Tensor:  # n_r
        return self._length[1::2]

    @property
    def policy_margin(self) -> torch.Tensor:  # S_c − S_r
        return self._policy_sum[0::2] - self._policy_sum[1::2]

    @property
    def reference_margin(self) -> torch.Tensor:  # S_c,ref − S_r,ref
        return self._ref_sum[0::2] - self._ref_sum[1::2]


@register_policy_loss("dpo")
class DPOLoss(PolicyLoss):
    """Sigmoid DPO, per pair σ_ε(βΔ) (module docstring). Metrics: `chosen_reward` (β·mean(ρ_c)), `rejected_reward`,
    `accuracy_mean` (share of pairs with ρ_c > ρ_r), `dpo_loss`.

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

    # TRL's loss options (the arguments of `TRLDPOLoss`) at their defaults, which describe the `dpo` loss
    loss_type: tuple[str, ...] = (LIST_OPTION_DEFAULTS["loss_type"],)
    loss_weights: tuple[float, ...] = (1.0,)
    f_divergence_type: str = _OPTION_DEFAULTS["f_divergence_type"]
    f_alpha_divergence_coef: float = _OPTION_DEFAULTS["f_alpha_divergence_coef"]
    ld_alpha: float | None = _OPTION_DEFAULTS["ld_alpha"]
    use_weighting: bool = _OPTION_DEFAULTS["use_weighting"]
    discopop_tau: float = _OPTION_DEFAULTS["discopop_tau"]

    def __call__(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, action_mask: torch.Tensor, **kwargs
    ) -> tuple[torch.Tensor, Metrics]:
        return self._loss(logprob, ref_logprob, action_mask, kwargs)

    # ---- the computation (shared with TRLDPOLoss) -----------------------------------------------------------

    def _loss(
        self,
        logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        kwargs: dict[str, Any],
        log_sum_sq_probs: torch.Tensor | None = None,
        chosen_valid_toks: torch.Tensor | float | None = None,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        if b.shape[0] % 2:
            raise ValueError(
                f"{self.name}: logprob has {b.shape[0]} rows; expected an even number (chosen, rejected interleaved)"
            )
        check_window_input(self.name, "chosen_valid_toks", chosen_valid_toks)
        ref = ref_logprob.detach() if isinstance(ref_logprob, torch.Tensor) else ref_logprob
        if isinstance(ref, torch.Tensor) and ref.dim() == 1:
            ref_sum = torch.where(b.row_tok > 0, b.row_values(ref, "ref_logprob"), 0)
        else:
            ref_sum = self._sequence_sums(b, b.check("ref_logprob", ref))
        policy_sum = self._sequence_sums(b, logprob)
        pairs = _Pairs(
            b,
            policy_sum,
            ref_sum,
            lambda ratio: f_divergence_score(ratio, self.f_divergence_type, self.f_alpha_divergence_coef),
        )
        chosen, rejected = pairs.chosen_logratio, pairs.rejected_logratio
        weights = self._wpo_weights(b, logprob, log_sum_sq_probs) if self.use_weighting else None

        loss = None
        for loss_type, loss_weight in zip(self.loss_type, self.loss_weights, strict=True):
            if loss_type == "sft":
                term = self._sft(b, logprob, chosen_valid_toks)
            else:
                per_pair = self._pair_loss(loss_type, pairs)
                term = self._pair_mean(b, per_pair if weights is None else per_pair * weights)
            term = term if loss_weight == 1.0 else term * loss_weight
            loss = term if loss is None else loss + term
        loss = b.guard(loss)
        with torch.no_grad():
            metrics = {
                "chosen_reward": self.beta * b.mean_over_rows(chosen),
                "rejected_reward": self.beta * b.mean_over_rows(rejected),
                "accuracy_mean": b.mean_over_rows((chosen > rejected).float()),
                "dpo_loss": loss.detach(),
            }
        return loss, metrics

    def sequence_logps(self, logprob: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
        """The summed log-probs S of each row `[N]` of interleaved pairs, `ld_alpha`-weighted (TRL's `logps/*`)."""
        b = MaskedBatch(self.name, logprob, action_mask)
        return self._sequence_sums(b, logprob)

    def _sequence_sums(self, b: MaskedBatch, x: torch.Tensor) -> torch.Tensor:
        """Per-row sums of a watched input x over the valid positions: plain, or LD-DPO's shared part + α·the tail
        beyond the shorter completion of the pair."""
        if self.ld_alpha is None:
            return b.select(x).sum(-1)
        values = b.select(x)
        position = torch.cumsum(b.mask, dim=-1)  # 1, 2, ... over each row's valid tokens
        lengths = torch.count_nonzero(b.mask, dim=-1)
        shared = torch.minimum(lengths[0::2], lengths[1::2]).repeat_interleave(2).unsqueeze(-1)
        head = torch.where(position <= shared, values, 0).sum(-1)
        tail = torch.where(position > shared, values, 0).sum(-1)
        return head + self.ld_alpha * tail

    def _wpo_weights(
        self, b: MaskedBatch, logprob: torch.Tensor, log_sum_sq_probs: torch.Tensor | None
    ) -> torch.Tensor:
        """WPO's pair weights w_c·w_r `[P]`, w = exp(mean over the completion of lp − log Σ_v π(v)²), no gradient."""
        if log_sum_sq_probs is None:
            raise ValueError(
                f"{self.name}: use_weighting=True needs log_sum_sq_probs (log Σ_v π(v)² per token, [B, T], as TRL's "
                "fused LM head computes it)"
            )
        with torch.no_grad():
            aligned = b.select(logprob) - b.select(b.check("log_sum_sq_probs", log_sum_sq_probs))
            row = torch.exp(aligned.sum(-1) / b.row_tok.clamp(min=1))
        return row[0::2] * row[1::2]

    def _pair_mean(self, b: MaskedBatch, per_pair: torch.Tensor) -> torch.Tensor:
        """The mean over pairs (no pairs: 0), or with the window's `global_valid_seqs` this batch's share of the mean
        over the window's pairs."""
        if b.global_valid_seqs is None:
            return b.mean_over_rows(per_pair)
        rows = b.global_valid_seqs  # the window's rows: 2 per pair (at least one pair, so that 0 rows give 0)
        rows = rows.clamp(min=2) if isinstance(rows, torch.Tensor) else max(rows, 2)
        return per_pair.sum() / (rows / 2)

    def _sft(self, b: MaskedBatch, logprob: torch.Tensor, chosen_valid_toks: Any) -> torch.Tensor:
        """−Σ over the chosen tokens of lp / their number (this batch's, or the window's `chosen_valid_toks`)."""
        total = b.select(logprob)[0::2].sum()
        if chosen_valid_toks is None:
            if b.global_valid_seqs is not None:
                raise ValueError(
                    f"{self.name}: loss_type 'sft' with window normalization (global_valid_seqs) needs "
                    "chosen_valid_toks, the window's number of chosen completion tokens"
                )
            count = torch.count_nonzero(b.mask[0::2]).to(b.count_dtype)
        else:
            count = (
                chosen_valid_toks.to(b.count_dtype)
                if isinstance(chosen_valid_toks, torch.Tensor)
                else chosen_valid_toks
            )
        count = count.clamp(min=1) if isinstance(count, torch.Tensor) else max(float(count), 1.0)
        return -total / count

    def _pair_loss(self, loss_type: str, q: _Pairs) -> torch.Tensor:
        """ℓ `[P]` of `loss_type` (the table of the module docstring)."""
        beta, eps = self.beta, self.label_smoothing
        delta = q.chosen_score - q.rejected_score
        if loss_type == "sigmoid":
            return self._smoothed_logistic(beta * delta)
        if loss_type == "hinge":
            return torch.relu(1 - beta * delta)
        if loss_type in ("ipo", "sigmoid_norm"):
            normalized = q.chosen_score / q.chosen_length - q.rejected_score / q.rejected_length
            return (normalized - 1 / (2 * beta)) ** 2 if loss_type == "ipo" else -F.logsigmoid(beta * normalized)
        if loss_type == "exo_pair":
            z = beta * delta
            chosen_term = torch.sigmoid(z) * (F.logsigmoid(z) - math.log1p(-eps))
            return chosen_term + torch.sigmoid(-z) * (F.logsigmoid(-z) - math.log(eps))
        if loss_type == "robust":
            z = beta * delta
            return (-(1 - eps) * F.logsigmoid(z) + eps * F.logsigmoid(-z)) / (1 - 2 * eps)
        if loss_type == "discopop":
            z = beta * delta
            mix = torch.sigmoid(z / self.discopop_tau)
            return -F.logsigmoid(z) * (1 - mix) + torch.exp(-z) * mix
        chosen, rejected = beta * q.chosen_logratio, beta * q.rejected_logratio
        if loss_type == "nca_pair":
            return -F.logsigmoid(chosen) - 0.5 * F.logsigmoid(-chosen) - 0.5 * F.logsigmoid(-rejected)
        if loss_type == "bco_pair":
            return -F.logsigmoid(chosen) - F.logsigmoid(-rejected)
        if loss_type == "sppo_hard":
            return (q.chosen_logratio - 0.5 / beta) ** 2 + (q.rejected_logratio + 0.5 / beta) ** 2
        if loss_type == "apo_zero":
            return 1 - torch.sigmoid(chosen) + torch.sigmoid(rejected)
        if loss_type == "apo_down":
            return torch.sigmoid(chosen) + 1 - torch.sigmoid(beta * (q.chosen_logratio - q.rejected_logratio))
        if loss_type == "aot":
            sorted_margin = torch.sort(q.policy_margin, dim=0).values - torch.sort(q.reference_margin, dim=0).values
            return self._smoothed_logistic(beta * sorted_margin, always=True)
        if loss_type == "aot_unpaired":
            sorted_margin = torch.sort(q.chosen_logratio, dim=0).values - torch.sort(q.rejected_logratio, dim=0).values
            return self._smoothed_logistic(beta * sorted_margin, always=True)
        raise ValueError(f"{self.name}: unknown loss_type {loss_type!r}; valid: {', '.join(DPO_LOSS_TYPES)}")

    def _smoothed_logistic(self, z: torch.Tensor, always: bool = False) -> torch.Tensor:
        """σ_ε(z) = −(1 − ε)·log σ(z) − ε·log σ(−z) (the ε term skipped at ε = 0 unless `always`)."""
        loss = -(1.0 - self.label_smoothing) * F.logsigmoid(z)
        if self.label_smoothing or always:
            loss = loss - self.label_smoothing * F.logsigmoid(-z)
        return loss


class TRLDPOLoss(DPOLoss):
    """The `dpo` loss with every loss option of TRL 1.16's `DPOTrainer` as an argument (module docstring: the loss
    types, f-divergences, LD-DPO, WPO and their papers). At its defaults it is the `dpo` loss.

    `loss_type` is one of `DPO_LOSS_TYPES` or a non-empty list of them; `loss_weights` one weight per loss type
    (None: 1 each). The other arguments are typed `Argument` specs, checked at construction with the rules that relate
    them (`check_arguments`). Inputs beyond `dpo`'s: `log_sum_sq_probs` (`[N, T]`, log Σ_v π(v)² per token; only with
    `use_weighting`) and the window's `chosen_valid_toks` (only with the `sft` loss type under window normalization).
    Metrics are `dpo`'s (`dpo_loss` is the whole loss, every loss type summed)."""

    arguments = (
        dataclasses.replace(
            DPOLoss.argument("beta"),
            help="β: scales the log-ratios (β·ρ is the implicit reward); larger β keeps the policy closer to the "
            "reference. `ipo` / `sppo_hard` target the margin 1/(2β) (IPO's τ = β).",
        ),
        dataclasses.replace(
            DPOLoss.argument("label_smoothing"),
            help="ε: the assumed probability that a preference label is flipped. `sigmoid`, `aot`, `aot_unpaired`: "
            "−(1 − ε)·log σ(x) − ε·log σ(−x) (conservative DPO; TRL 1.16's `sigmoid` ignores ε); `robust`: rDPO's "
            "unbiased (−(1 − ε)·log σ(βΔ) + ε·log σ(−βΔ))/(1 − 2ε); `exo_pair`: the target distribution "
            "(1 − ε, ε), ε > 0. The other loss types do not read it.",
        ),
        *TRL_OPTIONS,
    )

    def __init__(self, backend: str = "verl", **kwargs: Any) -> None:
        given = {name for name in LIST_OPTION_DEFAULTS if name in kwargs}
        loss_type = kwargs.pop("loss_type", LIST_OPTION_DEFAULTS["loss_type"])
        loss_weights = kwargs.pop("loss_weights", LIST_OPTION_DEFAULTS["loss_weights"])
        self.loss_type = self._check_loss_type(loss_type)
        self.loss_weights = self._check_loss_weights(loss_weights, len(self.loss_type))
        super().__init__(backend, **kwargs)
        self.given = self.given | given

    @classmethod
    def _leading_parameters(cls) -> list[inspect.Parameter]:
        annotations = {"loss_type": "str | Sequence[str]", "loss_weights": "Sequence[float] | None"}
        return [
            *super()._leading_parameters(),
            *(
                inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotations[name])
                for name, default in LIST_OPTION_DEFAULTS.items()
            ),
        ]

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        return {**LIST_OPTION_DEFAULTS, **super().default_args()}

    @property
    def args(self) -> dict[str, Any]:
        return {"loss_type": list(self.loss_type), "loss_weights": list(self.loss_weights), **super().args}

    def _check_loss_type(self, value: Any) -> tuple[str, ...]:
        names = (value,) if isinstance(value, str) else value
        if not (
            isinstance(names, Sequence)
            and not isinstance(names, str)
            and names
            and all(isinstance(n, str) and n in DPO_LOSS_TYPES for n in names)
        ):
            raise ValueError(
                f"{self.name}: loss_type={value!r} is not valid; must be one of "
                f"{', '.join(map(repr, DPO_LOSS_TYPES))}, or a non-empty list of them"
            )
        return tuple(names)

    def _check_loss_weights(self, value: Any, count: int) -> tuple[float, ...]:
        if value is None:
            return (1.0,) * count
        is_number = lambda w: isinstance(w, numbers.Real) and not isinstance(w, bool) and math.isfinite(w)  # noqa: E731
        if not (isinstance(value, Sequence) and not isinstance(value, str) and all(map(is_number, value))):
            raise ValueError(
                f"{self.name}: loss_weights={value!r} is not valid; must be a list of finite numbers, one per loss "
                "type, or None (weight 1 each)"
            )
        if len(value) != count:
            raise ValueError(
                f"{self.name}: loss_weights={list(value)!r} has {len(value)} weight(s) but loss_type="
                f"{list(self.loss_type)!r} has {count} loss type(s); give one weight per loss type (or None: 1 each)"
            )
        return tuple(float(w) for w in value)

    def check_arguments(self) -> None:
        types = set(self.loss_type)
        if self.f_divergence_type != "reverse_kl" and not types <= set(F_DIVERGENCE_LOSS_TYPES):
            others = sorted(types - set(F_DIVERGENCE_LOSS_TYPES))
            raise ValueError(
                f"{self.name}: f_divergence_type={self.f_divergence_type!r} only applies to the loss types built on "
                f"the chosen − rejected score difference ({', '.join(F_DIVERGENCE_LOSS_TYPES)}); loss_type has "
                f"{', '.join(map(repr, others))}; use f_divergence_type='reverse_kl' with these"
            )
        if self.use_weighting and types & {*_SORTING_LOSS_TYPES, "sft"}:
            refused = sorted(types & {*_SORTING_LOSS_TYPES, "sft"})
            raise ValueError(
                f"{self.name}: use_weighting=True does not apply to loss_type {', '.join(map(repr, refused))} "
                "(`aot` / `aot_unpaired` sort the pairs, misaligning the weights; `sft` has no window-normalized "
                "weighted form); set use_weighting=False or drop these loss types"
            )
        if "exo_pair" in types and self.label_smoothing == 0:
            raise ValueError(
                f"{self.name}: loss_type 'exo_pair' needs label_smoothing > 0 (its target is (1 − ε, ε); the EXO "
                "paper recommends 1e-3), got label_smoothing=0.0"
            )

    def __call__(
        self,
        logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        log_sum_sq_probs: torch.Tensor | None = None,
        chosen_valid_toks: torch.Tensor | float | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        return self._loss(logprob, ref_logprob, action_mask, kwargs, log_sum_sq_probs, chosen_valid_toks)
