"""MIX and MIX-CHORD: RL on rollouts and SFT on expert demonstrations in one batch (Trinity-RFT).

CHORD: Zhang et al. 2025, "On-Policy RL Meets Off-Policy Experts: Harmonizing Supervised Fine-Tuning
and Reinforcement Learning via Dynamic Weighting" (arXiv 2508.11408).

Rows with `expert_mask` False ("usual" rollouts) get the rollout loss — the dual-clip PPO loss by default, or any
other policy loss given as `rollout_loss` (CHORD with SAPO: `get_policy_loss("mix_chord",
rollout_loss=get_policy_loss("sapo"))`) — expert rows an SFT loss (`sft`; CHORD's φ-weighted `sft_phi` by default in
`mix_chord`), blended by μ:

    loss = (1 − μ) · RL(usual rows) + μ · SFT(expert rows)

`mix` keeps μ fixed; `mix_chord` schedules it by the global `step`: linear warm-up to μ_peak over W steps,
then a cosine decay to μ_valley over D steps, then μ_valley.

Each part is normalized over its *own* rows, in one of two ways:

* Window normalization (what the trainers use, docs/design.md §2.6): given the optimizer window's counts —
  `global_valid_toks` / `global_valid_seqs` over all rows and `expert_valid_toks` / `expert_valid_seqs` over
  the expert rows — each part aggregates over its rows of the whole window (usual = all − expert), and the
  result is this micro-batch's share of the window's loss. The parts' metrics become shares too: loss
  metrics as returned by the part, the others (clip fractions, ...) weighted by the micro-batch's share of
  the part's window tokens, so that summing over the window gives their token-weighted mean.
* The reference's per-micro-batch weighting (without window counts): each part is the mean over its rows of
  the micro-batch, scaled by its row count n and a weight w set by the reference's batch geometry, so that
  it averages over its own batch across the reference's gradient-accumulation steps:

      w = (ppo_mini_batch_size // ppo_micro_batch_size_per_gpu) / (train_batch_size_<type> // ngpus_trainer)
      w = (ppo_mini_batch_size // ngpus_trainer) / (B · (train_batch_size_<type> // ngpus_trainer))   [use_dynamic_bsz]
      loss = (1 − μ) · n_usual·w_usual·rl + μ · n_expert·w_expert·sft

  The parts' metrics are scaled like their losses.

An empty part contributes 0. Metrics are the parts' metrics prefixed `usual/` and `expert/`, and `loss`
(plus `mu` for `mix_chord`). Unlike the reference, which omits a part's metrics when it has no rows, they
are always present (0 for an empty part): omitting them would need a host sync. With a `rollout_loss`, the
`usual/` metrics are that loss's (`usual/sapo_loss`, `usual/avg_soft_gate`, ...): an instance's `metrics` lists
them. Its MIN / MAX metrics, if any, are combined like MEAN ones (a token-weighted mean over the window). The
rollout loss sees the micro-batch with the expert rows masked out rather than removed (removing them would need a
host sync), so a metric it averages over all rows of its batch (gspo's `ppo_kl_seq`) counts the expert rows as 0.

The rollout part reads what its loss declares (`inputs()`): MIX's `inputs()` on an instance adds the rollout loss's
inputs beyond MIX's own (e.g. `importance_sampling_ratio`), and passes them on, with the window counts of the
rollout rows (or, with the reference's weighting, the micro-batch's rollout rows' counts). It cannot be a mixing loss,
nor a loss that reads the expert split (`expert_mask`, `expert_valid_*`), other window counts than
`global_valid_toks` / `global_valid_seqs` / `normalizer`, or preference pairs (`dpo`).
"""

from __future__ import annotations

import inspect
import math
import numbers
import types
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import torch

from .._validation import check_number, declared_inputs
from ..components import MEAN, SHARE, Argument
from .aggregation import EPS, LOSS_AGG_MODES, part_windows
from .base import PolicyLoss, loss_agg_mode_argument, register_policy_loss, resolve_clip_range
from .dpo import DPOLoss
from .inputs import EXPERT_WINDOW_INPUTS, WINDOW_INPUTS, Metrics, check_float, check_window_inputs, scalar
from .ppo import SEQUENCE_MASKING_METRICS, PPOPolicyLoss
from .sft import SFTLoss, SFTPhiLoss

GEOMETRY_HELP = (
    "The reference's batch geometry (Trinity-RFT fills it from its config). Leave all six unset (None) for "
    "window normalization: each part is averaged over its own rows of the optimizer window. Setting any of them "
    "switches to the reference's per-micro-batch weighting n·w (see `trl_ext.losses.mix`), with the reference's "
    "defaults (1, False) for the ones left unset."
)

ROLLOUT_PART_HELP = " (Of the default PPO part: with a `rollout_loss`, set that loss's own arguments instead.)"

MIXING_ARGUMENTS = (
    Argument("clip_range", 0.2, "PPO clip ε of the rollout part." + ROLLOUT_PART_HELP, optional=True, ge=0),
    Argument(
        "clip_range_low", None, "Lower clip ε_low; defaults to `clip_range`." + ROLLOUT_PART_HELP, type=float, ge=0
    ),
    Argument(
        "clip_range_high", None, "Upper clip ε_high; defaults to `clip_range`." + ROLLOUT_PART_HELP, type=float, ge=0
    ),
    Argument("use_dynamic_bsz", False, GEOMETRY_HELP, config_unset=True),
    *(
        Argument(name, 1, "Reference geometry: see `use_dynamic_bsz`.", ge=1, config_unset=True)
        for name in (
            "ppo_mini_batch_size",
            "ppo_micro_batch_size_per_gpu",
            "ngpus_trainer",
            "train_batch_size_usual",
            "train_batch_size_expert",
        )
    ),
    loss_agg_mode_argument("token-mean"),
    Argument(
        "sft_loss_agg_mode",
        None,
        "Aggregation of the SFT part (expert rows); defaults to `loss_agg_mode`.",
        type=str,
        choices=LOSS_AGG_MODES,
    ),
    Argument(
        "grpo_loss_agg_mode",
        None,
        "Aggregation of the PPO part (rollouts); defaults to `loss_agg_mode`. (With a `rollout_loss`, that loss's "
        "own `loss_agg_mode` applies instead.)",
        type=str,
        choices=LOSS_AGG_MODES,
    ),
)
"""The arguments MIX and MIX-CHORD share (after their μ arguments): the PPO part's ε, the reference's batch
geometry, which sets the per-micro-batch weights (module docstring), and the aggregation of both parts
(`sft_loss_agg_mode` / `grpo_loss_agg_mode` override `loss_agg_mode` per part)."""

ROLLOUT_PART_ARGUMENTS = ("clip_range", "clip_range_low", "clip_range_high", "grpo_loss_agg_mode")
"""The arguments that build the default PPO rollout part: with a `rollout_loss` they must stay at their defaults."""

_EXPERT_INPUTS = ("expert_mask", *EXPERT_WINDOW_INPUTS)


def check_rollout_loss(owner: str, loss: Any) -> None:
    """`loss` can be MIX's rollout part: a policy loss instance, not a mixing loss, that reads nothing MIX cannot give
    it (a ValueError names the input)."""
    if isinstance(loss, type) or not isinstance(loss, PolicyLoss):
        hint = f" (get_policy_loss({loss!r}, ...))" if isinstance(loss, str) else ""
        raise ValueError(
            f"{owner}: rollout_loss must be a policy loss instance{hint}, e.g. "
            f"rollout_loss=get_policy_loss('sapo'); got {loss!r}"
        )
    name = loss.name or type(loss).__name__
    if isinstance(loss, MIXPolicyLoss):
        raise ValueError(
            f"{owner}: rollout_loss={name!r} is a mixing loss; the rollout part must be a loss of the rollout rows "
            "alone (ppo, sapo, gspo, cispo, ...)"
        )
    inputs = loss.inputs()
    for key in inputs:
        if key in _EXPERT_INPUTS:
            raise ValueError(
                f"{owner}: rollout_loss={name!r} reads `{key}`, which the rollout part cannot give (it sees only the "
                "rollout rows); use a loss of the rollout rows alone (ppo, sapo, gspo, cispo, ...)"
            )
        if key in getattr(loss, "window_inputs", ()) and key not in WINDOW_INPUTS:
            raise ValueError(
                f"{owner}: rollout_loss={name!r} reads the window count `{key}`, which {owner} does not compute for "
                f"its rollout rows (it gives {', '.join(WINDOW_INPUTS)})"
            )
    if isinstance(loss, DPOLoss):
        raise ValueError(
            f"{owner}: rollout_loss={name!r} needs `ref_logprob` and `logprob` of preference pairs, which {owner}'s "
            "rollout rows are not; use a policy loss (ppo, sapo, gspo, cispo, ...), or train dpo with DPOConfig"
        )


class _ClassOrInstanceMethod:
    """A method that receives the class when called on the class and the instance when called on an instance
    (MIX's `inputs()`: the class declares its own inputs, an instance adds its rollout loss's)."""

    def __init__(self, func: Callable) -> None:
        self.func = func
        self.__doc__ = func.__doc__

    def __get__(self, obj: Any, owner: type) -> Callable:
        return types.MethodType(self.func, owner if obj is None else obj)


def part_metrics(part: str, names: Iterable[str]) -> dict[str, str]:
    """The metrics `names` of a part's loss as MIX returns them: prefixed `part/`, and window shares like the loss
    (each is weighted by the micro-batch's share of the part's window, or by the reference's per-micro-batch
    weight, so that they add up over the window)."""
    return {f"{part}/{name}": SHARE for name in names}


@register_policy_loss("mix")
class MIXPolicyLoss(PolicyLoss):
    """(1 − μ)·RL on rollouts + μ·SFT on expert rows, with the reference's per-micro-batch weighting. Metrics: `loss`
    and the parts' metrics (`usual/*`, `expert/*`), all window shares.

    `rollout_loss` (keyword): the loss of the rollout rows, any policy loss instance but a mixing one (see
    `check_rollout_loss`), e.g. `get_policy_loss("sapo", tau_pos=1.2)`; None (the default) builds dual-clip PPO from
    `clip_range` / `clip_range_low` / `clip_range_high` / `grpo_loss_agg_mode`, which must then stay at their
    defaults (set the rollout loss's own arguments instead). `loss_agg_mode` then only sets the SFT part's default.

    Inputs (`inputs()`): `logprob`, `old_logprob`, `action_mask`, `advantages`, `expert_mask` (`[B]`, bool or
    0/1), `step` (read by `mix_chord`), the window counts `global_valid_toks` / `global_valid_seqs` /
    `normalizer` and `expert_valid_toks` / `expert_valid_seqs`; on an instance, also whatever else its rollout
    loss reads (`importance_sampling_ratio`, `ref_logprob`, ...). NaN / ±inf at a valid position of `logprob`, or
    of the rollout loss's inputs (`old_logprob`, `advantages`, ...) in a rollout row (expert rows do not read
    them), make the loss NaN; at masked positions they are ignored. An empty batch, or an empty part, contributes 0.
    """

    arguments = (
        Argument("mu", 0.1, "Weight μ ∈ [0, 1] of the SFT part on the expert rows.", ge=0, le=1),
        *MIXING_ARGUMENTS,
    )
    metrics: ClassVar[dict[str, str]] = {
        "loss": SHARE,
        **part_metrics("usual", [name for name in PPOPolicyLoss.metrics if name not in SEQUENCE_MASKING_METRICS]),
        **part_metrics("expert", SFTLoss.metrics),
    }

    schedules_mu = False  # mix_chord: mu follows the step and is logged as `mu`
    window_inputs = ()  # the window counts are named parameters of __call__

    def __init__(self, backend: str = "verl", *, rollout_loss: PolicyLoss | None = None, **kwargs: Any) -> None:
        self.rollout_loss = rollout_loss  # checked by check_arguments, which the base constructor calls
        super().__init__(backend, **kwargs)

    @classmethod
    def _leading_parameters(cls) -> list[inspect.Parameter]:
        rollout = inspect.Parameter(
            "rollout_loss", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="PolicyLoss | None"
        )
        return [*super()._leading_parameters(), rollout]

    @_ClassOrInstanceMethod
    def inputs(self) -> tuple[str, ...]:
        """The keywords this loss reads (see `PolicyLoss.inputs`); on an instance, followed by those of its rollout
        loss that MIX does not read itself (which it passes on)."""
        cls = self if isinstance(self, type) else type(self)
        own = declared_inputs(cls.__call__, cls.window_inputs)
        part = None if isinstance(self, type) else getattr(self, "grpo_loss_fn", None)
        return own if part is None else tuple(dict.fromkeys([*own, *part.inputs()]))

    def check_arguments(self) -> None:
        for name in ("train_batch_size_usual", "train_batch_size_expert"):  # at least one row per GPU
            check_number(self.name, name, getattr(self, name), integer=True, ge=self.ngpus_trainer)
        if self.rollout_loss is None:
            resolve_clip_range(self.name, self.clip_range, self.clip_range_low, self.clip_range_high)  # errors name mix
            self.grpo_loss_fn = PPOPolicyLoss(
                clip_range=self.clip_range,
                clip_range_low=self.clip_range_low,
                clip_range_high=self.clip_range_high,
                loss_agg_mode=self.grpo_loss_agg_mode or self.loss_agg_mode,
            )
            usual = [name for name in PPOPolicyLoss.metrics if name not in SEQUENCE_MASKING_METRICS]
        else:
            check_rollout_loss(self.name, self.rollout_loss)
            rollout = self.rollout_loss.name or type(self.rollout_loss).__name__
            for name in ROLLOUT_PART_ARGUMENTS:
                value, default = getattr(self, name), self.argument(name).default
                if value != default:
                    own = [a.name for a in self.rollout_loss.arguments]
                    counterpart = "loss_agg_mode" if name == "grpo_loss_agg_mode" else name
                    if counterpart in own:
                        where = f"{rollout}'s {counterpart}"
                    else:
                        where = f"{rollout}'s own arguments: {', '.join(own) or 'none'}"
                    raise ValueError(
                        f"{self.name}: {name}={value!r} configures the default PPO rollout part, but rollout_loss="
                        f"{rollout} replaces it; set it on the rollout loss instead ({where}), and leave {name} at "
                        f"its default ({default!r})"
                    )
            self.grpo_loss_fn = self.rollout_loss
            usual = list(self.rollout_loss.metrics)
        self.sft_loss_fn = self._sft_loss(self.sft_loss_agg_mode or self.loss_agg_mode)
        # This instance's metrics: the class's, with its rollout loss's as `usual/*` (trainers read them).
        self.metrics = {
            "loss": SHARE,
            **part_metrics("usual", usual),
            **{k: v for k, v in type(self).metrics.items() if k != "loss" and not k.startswith("usual/")},
        }
        # Per-micro-batch weights (module docstring); with use_dynamic_bsz they are further divided by
        # the micro-batch's row count at call time.
        usual_per_gpu = self.train_batch_size_usual // self.ngpus_trainer
        expert_per_gpu = self.train_batch_size_expert // self.ngpus_trainer
        if self.use_dynamic_bsz:
            experience_per_gpu = self.ppo_mini_batch_size // self.ngpus_trainer
            self._weight_usual = experience_per_gpu / usual_per_gpu
            self._weight_expert = experience_per_gpu / expert_per_gpu
        else:
            gradient_accumulation = self.ppo_mini_batch_size // self.ppo_micro_batch_size_per_gpu
            self._weight_usual = gradient_accumulation / usual_per_gpu
            self._weight_expert = gradient_accumulation / expert_per_gpu

    def __repr__(self) -> str:
        text = super().__repr__()
        if self.rollout_loss is None:
            return text
        head, _, rest = text.partition("(")
        return f"{head}(rollout_loss={self.rollout_loss!r}, {rest}"

    def _sft_loss(self, loss_agg_mode: str) -> PolicyLoss:
        return SFTLoss(loss_agg_mode=loss_agg_mode)

    def current_mu(self, step) -> torch.Tensor | float:
        return self.mu

    def __call__(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        advantages: torch.Tensor,
        expert_mask: torch.Tensor,
        step: torch.Tensor | int | None = None,
        global_valid_toks: torch.Tensor | float | None = None,
        global_valid_seqs: torch.Tensor | float | None = None,
        expert_valid_toks: torch.Tensor | float | None = None,
        expert_valid_seqs: torch.Tensor | float | None = None,
        normalizer: torch.Tensor | float | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, Metrics]:
        b = self.masked_batch(logprob, action_mask, kwargs)
        check_window_inputs(
            self.name,
            global_valid_toks=global_valid_toks,
            global_valid_seqs=global_valid_seqs,
            expert_valid_toks=expert_valid_toks,
            expert_valid_seqs=expert_valid_seqs,
            normalizer=normalizer,
        )
        expert = b.row_flags(expert_mask, "expert_mask")
        part = self.grpo_loss_fn
        part_inputs = part.inputs()
        if "old_logprob" in part_inputs:  # checked here so that errors name this loss, not its rollout part
            b.check("old_logprob", old_logprob)
        if "advantages" in part_inputs:
            check_float(self.name, "advantages", b.broadcast_rows(advantages, "advantages"))
        usual_tokens = b.mask & ~expert.unsqueeze(-1)
        expert_tokens = b.mask & expert.unsqueeze(-1)
        windowed = global_valid_toks is not None
        if windowed:  # each part's window: its own rows of the whole optimizer window (usual = all − expert)
            windows = part_windows(
                self.name, global_valid_toks, global_valid_seqs, expert_valid_toks, expert_valid_seqs, normalizer
            )
        else:
            # The micro-batch is the part's batch: its own rows' counts.
            windows = {
                "usual": {
                    "global_valid_toks": torch.count_nonzero(usual_tokens),
                    "global_valid_seqs": (~expert).sum(dtype=b.count_dtype),
                },
                "expert": {
                    "global_valid_toks": torch.count_nonzero(expert_tokens),
                    "global_valid_seqs": expert.sum(dtype=b.count_dtype),
                },
            }
        # The rollout part reads what it declares: MIX's own inputs, the extra ones MIX passes on (`kwargs`), and
        # the window counts of the rollout rows; its mask leaves out the expert rows.
        given = {"logprob": logprob, "old_logprob": old_logprob, "advantages": advantages, **kwargs}
        if step is not None:
            given["step"] = step
        given.update(windows["usual"])
        ppo_loss, ppo_metrics = part(
            action_mask=usual_tokens, **{k: given[k] for k in part_inputs if k in given and k != "action_mask"}
        )
        sft_loss, sft_metrics = self.sft_loss_fn(logprob, expert_tokens, **windows["expert"])
        if windowed:  # the parts are already window shares
            scale_usual = scale_expert = 1.0
        else:
            per_row = 1.0 / max(expert.shape[0], 1) if self.use_dynamic_bsz else 1.0
            scale_usual = windows["usual"]["global_valid_seqs"] * (self._weight_usual * per_row)
            scale_expert = windows["expert"]["global_valid_seqs"] * (self._weight_expert * per_row)
        mu = self.current_mu(step)
        if isinstance(mu, torch.Tensor):
            mu = mu.to(b.count_dtype)
        loss = (1.0 - mu) * (ppo_loss * scale_usual) + mu * (sft_loss * scale_expert)

        with torch.no_grad():
            metrics = {"loss": loss.detach()}
            for part_name, part_fn, part_values, scale, tokens in (
                ("usual", part, ppo_metrics, scale_usual, usual_tokens),
                ("expert", self.sft_loss_fn, sft_metrics, scale_expert, expert_tokens),
            ):
                count = torch.count_nonzero(tokens)
                if windowed:  # means over this micro-batch's part tokens -> shares of the window's token mean
                    scale = count.to(b.count_dtype) / (windows[part_name]["global_valid_toks"] + EPS)
                for name, value in part_values.items():
                    if part_fn.is_window_share(name):  # a loss term: already a share, or scaled like the loss
                        metrics[f"{part_name}/{name}"] = value if windowed else value * scale
                    else:  # a value of the part's tokens (0 where it has none here, not a mean of nothing)
                        metrics[f"{part_name}/{name}"] = torch.where(count > 0, value, 0) * scale
            if self.schedules_mu:
                metrics["mu"] = mu.detach() if isinstance(mu, torch.Tensor) else scalar(mu, loss)
        return loss, metrics


def mu_schedule(step, mu_warmup_steps: int, mu_decay_steps: int, mu_peak: float, mu_valley: float):
    """CHORD's μ at `step` (int or tensor): linear warm-up, cosine decay, then the valley."""
    if isinstance(step, torch.Tensor):
        step = step.to(torch.float64)
        warmup = mu_peak * step / max(mu_warmup_steps, 1)
        progress = (step - mu_warmup_steps) / max(mu_decay_steps, 1)
        decay = mu_valley + (mu_peak - mu_valley) * 0.5 * (1.0 + torch.cos(math.pi * progress))
        mu = torch.where(
            step < mu_warmup_steps,
            warmup,
            torch.where(step >= mu_warmup_steps + mu_decay_steps, mu_valley, decay),
        )
        return mu
    if step < mu_warmup_steps:
        return mu_peak * step / mu_warmup_steps
    if step >= mu_warmup_steps + mu_decay_steps:
        return mu_valley
    progress = (step - mu_warmup_steps) / mu_decay_steps
    return mu_valley + (mu_peak - mu_valley) * 0.5 * (1.0 + math.cos(math.pi * progress))


@register_policy_loss("mix_chord")
class MIXCHORDPolicyLoss(MIXPolicyLoss):
    """MIX with CHORD's μ schedule and (by default) the φ-weighted SFT part. Extra metric: `mu`.

    Requires `step` at call time: the global optimizer step, an int or a `[B]` tensor of equal values.
    """

    arguments = (
        Argument("mu_warmup_steps", 0, "μ rises linearly from 0 to `mu_peak` over this many optimizer steps.", ge=0),
        Argument(
            "mu_decay_steps",
            0,
            "Then μ decays from `mu_peak` to `mu_valley` over this many steps (cosine), and stays there.",
            ge=0,
        ),
        Argument("mu_peak", 0.1, "μ at the end of the warm-up.", ge=0, le=1),
        Argument("mu_valley", 0.1, "μ after the decay (CHORD's floor).", ge=0, le=1),
        Argument(
            "enable_phi_function",
            True,
            "CHORD-φ: weight each expert token's NLL by sg(p(1 − p)), p the policy's probability of the token; "
            "False uses plain SFT.",
        ),
        *MIXING_ARGUMENTS,
    )
    metrics: ClassVar[dict[str, str]] = {
        **MIXPolicyLoss.metrics,
        **part_metrics("expert", SFTPhiLoss.metrics),
        "mu": MEAN,
    }

    schedules_mu = True
    mu = None  # scheduled by the step: see current_mu

    def _sft_loss(self, loss_agg_mode: str) -> PolicyLoss:
        return (SFTPhiLoss if self.enable_phi_function else SFTLoss)(loss_agg_mode=loss_agg_mode)

    def current_mu(self, step) -> torch.Tensor | float:
        if step is None:
            raise ValueError("mix_chord: `step` (the global training step) is required to schedule mu")
        if isinstance(step, torch.Tensor):
            if step.dim() > 1 or step.numel() == 0:
                raise ValueError(f"mix_chord: step must be an int or a [B] tensor, got shape {tuple(step.shape)}")
            if step.dtype == torch.bool or step.dtype.is_complex:
                raise ValueError(f"mix_chord: step must be an int or a [B] tensor of numbers, got dtype {step.dtype}")
            if step.dim() == 1:
                torch._assert_async((step == step[0]).all(), "mix_chord: step differs within the batch")
                step = step[0]
        elif not isinstance(step, numbers.Integral) or isinstance(step, bool):
            raise ValueError(f"mix_chord: step must be an int or a [B] tensor, got {step!r}")
        return mu_schedule(step, self.mu_warmup_steps, self.mu_decay_steps, self.mu_peak, self.mu_valley)
