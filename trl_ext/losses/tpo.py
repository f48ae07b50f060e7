"""TPO: a reference-free preference loss on (chosen, rejected) pairs plus the NLL of a gold reference completion.

Saeidi et al. 2024, "Triple Preference Optimization: Achieving Better Alignment using a Single Step Optimization"
(arXiv 2405.16681), as TRL 1.16's `trl.experimental.tpo.TPOTrainer` computes it. Each example is a triple: a prompt's
chosen, rejected and reference (gold) completion.

Rows. `expert_mask` (`[N]`) marks the reference rows, the gold completions (the expert demonstrations of the batch);
the other rows are the preference rows, whose 1st and 2nd form the first (chosen, rejected) pair, the 3rd and 4th the
second, and so on, in row order. `trl_ext.TPOTrainer` lays each triple out as three consecutive rows, chosen,
rejected, reference (`expert_mask` False, False, True); with `tpo_alpha` 0 TRL drops the reference rows and each pair
is two rows. An odd number of preference rows is an error (a device-side assert, as no value is read on the host).

With m the action mask, lp the policy's per-token log-probs and n a row's valid tokens (at least 1), per pair

    S         = Σ_t m·lp           the completion's summed log-prob (`sigmoid`, `hinge`)
    S̄         = S / n              its length-normalized log-prob (`ipo`, `tpo-l`)
    Δ, Δ̄      = S_c − S_r,  S̄_c − S̄_r
    σ_ε(x)    = −(1 − ε)·log σ(x) − ε·log σ(−x)

    sigmoid   σ_ε(βΔ)              TPO, the paper's loss (ε > 0: labels flipped with probability ε)
    hinge     max(0, 1 − βΔ)       SLiC, Zhao et al. 2023, arXiv 2305.10425
    ipo       (Δ̄ − 1/(2β))²        IPO, Azar et al. 2023, arXiv 2310.12036 (TRL length-normalizes, as its DPO's `ipo`)
    tpo-l     σ_ε(β·(Δ̄ − γ/β))     TPO-L, the paper's length-normalized variant with a target reward margin γ

    L = mean over pairs of ℓ  +  α · NLL,    NLL = −(Σ of lp over the reference rows' valid tokens) / their number

with β = `beta`, ε = `label_smoothing` (read by `sigmoid` and `tpo-l`; TRL warns and ignores it for `hinge` and
`ipo`, as here), α = `tpo_alpha`, γ = `tpo_l_gamma`. There is no reference *model*: the implicit reward is β·S (β·S̄
for `ipo` / `tpo-l`), so `sigmoid`, `hinge` and `ipo` are the pair losses of `dpo` (`DPOLoss`, whose computation this
loss reuses) with the reference's log-probs at 0. The NLL term is the `sft` loss (`SFTLoss`, token mean) on the
reference rows: TRL's cross-entropy over the reference completions' tokens (which TRL computes from the logits), up to
the ε = 1e-8 that every trl_ext token mean adds to its count.

Window normalization (docs/design.md §2.6). Given the optimizer window's counts `global_valid_seqs` (its rows),
`expert_valid_seqs` (its reference rows) and `expert_valid_toks` (the reference rows' valid tokens), all three, the
mean over pairs becomes this batch's sum over the window's (`global_valid_seqs` − `expert_valid_seqs`) / 2 pairs and
the NLL this batch's token sum over `expert_valid_toks`: the micro-batches' shares add up to the window's loss. TRL
averages each micro-batch; the two agree when the window is one micro-batch.

Differences from TRL 1.16: a batch without reference tokens gives an NLL of 0 (TRL's cross-entropy over no tokens is
NaN); `label_smoothing` must lie in [0, 0.5), as `dpo`'s (TRL accepts any value, ε ≥ 0.5 inverting the preference).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from ..components import MEAN, SHARE, Argument
from .aggregation import window_count
from .base import register_policy_loss
from .dpo import DPOLoss
from .inputs import Metrics, check_window_inputs
from .masked_batch import MaskedBatch
from .sft import SFTLoss

TPO_LOSS_TYPES = ("sigmoid", "hinge", "ipo", "tpo-l")
"""Every `loss_type` of TRL 1.16's `TPOConfig`."""

LENGTH_NORMALIZED_LOSS_TYPES = ("ipo", "tpo-l")
"""The loss types on the length-normalized log-probs S̄ = S / n (TRL's choice, SimPO-style); the others sum."""

_WINDOW_COUNTS = ("global_valid_seqs", "expert_valid_seqs", "expert_valid_toks")


@dataclasses.dataclass(frozen=True)
class _RowPairs:
    """The per-pair quantities DPO's pair losses read, on the rows of the batch: each rejected row holds its pair
    (its own sum and length, and its chosen row's); the other rows hold values no loss keeps."""

    chosen_score: torch.Tensor  # S_c
    rejected_score: torch.Tensor  # S_r
    chosen_length: torch.Tensor  # n_c
    rejected_length: torch.Tensor  # n_r

    def normalized_margin(self) -> torch.Tensor:
        """Δ̄ = S_c / n_c − S_r / n_r."""
        return self.chosen_score / self.chosen_length - self.rejected_score / self.rejected_length


@register_policy_loss("tpo")
class TPOLoss(DPOLoss):
    """TPO's loss: the mean over (chosen, rejected) pairs of `loss_type`'s ℓ plus `tpo_alpha` times the NLL of the
    reference rows (module docstring: the row layout, the formulas and the papers).

    Inputs (`inputs()`): `logprob`, `action_mask` (`[N, T]`), `expert_mask` (`[N]`, bool or 0/1: the reference rows)
    and the window's `global_valid_seqs`, `expert_valid_seqs`, `expert_valid_toks` (all three, or none). NaN / ±inf
    in `logprob` at a valid position make the loss NaN; at masked positions they are ignored. No pairs and no
    reference tokens give 0.

    Metrics: `chosen_reward` / `rejected_reward` (β·mean S_c / S_r, or of S̄ for `ipo` / `tpo-l`: TRL's
    `rewards/chosen` / `rewards/rejected`), `accuracy_mean` (share of pairs with S_c > S_r: TRL's
    `rewards/accuracies`), `preference_loss` (the mean over pairs), `nll_loss` (the reference rows' NLL, unweighted)
    and `tpo_loss` (the whole loss).
    """

    arguments = (
        Argument(
            "loss_type",
            "sigmoid",
            "The pair loss on Δ = S_c − S_r, S a completion's summed log-prob (Δ̄ on S / length): `sigmoid` "
            "−log σ(βΔ) (TPO), `hinge` max(0, 1 − βΔ) (SLiC), `ipo` (Δ̄ − 1/(2β))² (IPO), `tpo-l` −log σ(β(Δ̄ − γ/β)) "
            "(TPO-L, target reward margin γ = `tpo_l_gamma`).",
            choices=TPO_LOSS_TYPES,
        ),
        dataclasses.replace(
            DPOLoss.argument("beta"),
            default=0.01,
            help="β: scales the implicit reward β·log π of each completion (TPO's default 0.01); for `ipo` the "
            "margin is 1/(2β) (IPO's τ = β).",
        ),
        dataclasses.replace(
            DPOLoss.argument("label_smoothing"),
            help="ε: the assumed probability that a preference label is flipped, −(1 − ε)·log σ(x) − ε·log σ(−x) for "
            "`sigmoid` and `tpo-l`; `hinge` and `ipo` do not read it.",
        ),
        Argument(
            "tpo_alpha",
            1.0,
            "α: weight of the negative log-likelihood of the reference (gold) completions, averaged over their "
            "tokens; 0 turns the term off (TRL then leaves the reference rows out of the batch).",
            ge=0,
        ),
        Argument("tpo_l_gamma", 0.5, "γ: the target reward margin of `tpo-l` (the other loss types do not read it)."),
    )
    metrics: ClassVar[dict[str, str]] = {
        "chosen_reward": MEAN,
        "rejected_reward": MEAN,
        "accuracy_mean": MEAN,
        "preference_loss": SHARE,
        "nll_loss": SHARE,
        "tpo_loss": SHARE,
    }
    window_inputs = ()  # the window counts are named parameters of __call__

    def check_arguments(self) -> None:
        self.nll = SFTLoss(loss_agg_mode="token-mean")  # the reference rows' term: TRL's token-mean cross-entropy

    @property
    def length_normalized(self) -> bool:
        """Whether the pair loss reads S̄ = S / n (`ipo`, `tpo-l`) rather than S."""
        return self.loss_type in LENGTH_NORMALIZED_LOSS_TYPES

    def __call__(
        self,
        logprob: torch.Tensor,
        action_mask: torch.Tensor,
        expert_mask: torch.Tensor,
        global_valid_seqs: torch.Tensor | float | None = None,
        expert_valid_seqs: torch.Tensor | float | None = None,
        expert_valid_toks: torch.Tensor | float | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        reference = b.row_flags(expert_mask, "expert_mask")
        window = self._window(global_valid_seqs, expert_valid_seqs, expert_valid_toks, b.count_dtype)
        rejected, chosen_row = self._pairs(reference)
        sums = b.select(logprob).sum(-1)
        lengths = b.row_tok.clamp(min=1)
        pairs = _RowPairs(sums[chosen_row], sums, lengths[chosen_row], lengths)
        if self.loss_type == "tpo-l":
            per_row = self._smoothed_logistic(self.beta * (pairs.normalized_margin() - self.tpo_l_gamma / self.beta))
        else:
            per_row = self._pair_loss(self.loss_type, pairs)
        pair_count = rejected.sum(dtype=b.count_dtype)
        if window is None:
            preference = torch.where(rejected, per_row, 0).sum() / pair_count.clamp(min=1)
        else:
            window_pairs = (window["global_valid_seqs"] - window["expert_valid_seqs"]) / 2
            window_pairs = window_pairs.clamp(min=1) if isinstance(window_pairs, torch.Tensor) else max(window_pairs, 1)
            preference = torch.where(rejected, per_row, 0).sum() / window_pairs
        reference_tokens = b.mask & reference.unsqueeze(-1)
        nll_window = {} if window is None else {"global_valid_toks": window["expert_valid_toks"]}
        nll, _ = self.nll(logprob, reference_tokens, **nll_window)
        loss = b.guard(preference + self.tpo_alpha * nll if self.tpo_alpha else preference)

        with torch.no_grad():
            scores = sums / lengths if self.length_normalized else sums
            chosen, rejected_scores = scores[chosen_row], scores

            def pair_mean(values: torch.Tensor) -> torch.Tensor:
                return torch.where(rejected, values, 0).sum() / pair_count.clamp(min=1)

            metrics = {
                "chosen_reward": self.beta * pair_mean(chosen),
                "rejected_reward": self.beta * pair_mean(rejected_scores),
                "accuracy_mean": pair_mean((chosen > rejected_scores).to(scores.dtype)),
                "preference_loss": preference.detach(),
                "nll_loss": nll.detach(),
                "tpo_loss": loss.detach(),
            }
        return loss, metrics

    def _window(
        self, global_valid_seqs: Any, expert_valid_seqs: Any, expert_valid_toks: Any, dtype: torch.dtype
    ) -> dict | None:
        """The window's counts (numbers, or tensors of `dtype`), or None without them; some but not all is an
        error."""
        given = {"global_valid_seqs": global_valid_seqs, "expert_valid_seqs": expert_valid_seqs}
        given["expert_valid_toks"] = expert_valid_toks
        check_window_inputs(self.name, **given)
        missing = [name for name in _WINDOW_COUNTS if given[name] is None]
        if len(missing) == len(_WINDOW_COUNTS):
            return None
        if missing:
            raise ValueError(
                f"{self.name}: window normalization needs global_valid_seqs, expert_valid_seqs and expert_valid_toks "
                f"together; {', '.join(missing)} missing (give all three, or none for this batch's own means)"
            )
        return {name: window_count(value, dtype) for name, value in given.items()}

    def _pairs(self, reference: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Which rows are a pair's rejected row (`[N]` bool) and, for each row, the previous preference row (`[N]`
        indices): a rejected row's chosen row. No host sync; an odd number of preference rows asserts on the
        device."""
        preference = ~reference
        torch._assert_async(
            preference.sum() % 2 == 0,
            f"{self.name}: expert_mask leaves an odd number of preference rows; the rows it does not mark as "
            "reference rows must be (chosen, rejected) pairs",
        )
        position = torch.cumsum(preference, 0) - 1  # each preference row's place among them: 0, 1, 2, ...
        rejected = preference & (position % 2 == 1)
        rows = torch.arange(reference.shape[0], device=reference.device)
        last = torch.where(preference, rows, -1).cummax(0).values  # the last preference row up to each row
        chosen_row = F.pad(last, (1, 0), value=-1)[:-1].clamp(min=0)  # ... before each row
        return rejected, chosen_row

    def sequence_logps(self, logprob: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
        """Each row's log-prob `[N]` as the pair loss reads it: S, or S̄ = S / n for `ipo` / `tpo-l` (TRL's
        `logps/chosen`, `logps/rejected`)."""
        b = MaskedBatch(self.name, logprob, action_mask)
        sums = b.select(logprob).sum(-1)
        return sums / b.row_tok.clamp(min=1) if self.length_normalized else sums
