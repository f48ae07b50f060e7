"""The loss step of every RL trainer: from the model's per-token log-probs to the scalar the optimizer sees.

A trainer's adapter turns its micro-batch into a `StepBatch` (TRL's padded rows, the asynchronous trainer's unpacked
tree rows) and calls its `LossStep`, which reads top to bottom:

1. corrections on the advantages: the sampler's importance weights (vLLM's, verl's rollout correction) when the loss
   does not read them itself, TRL's `top_entropy_quantile` token selection, DeepSeek-V3.2's off-policy sequence mask
   (a loss that selects over the whole window, M2PO, gets the window's selection as its `window_selected` input);
2. each model turn as a sample (`turns_as_samples`);
3. the policy loss, handed the inputs it declares;
4. the KL term β·agg(KL) (bias-corrected with `use_bias_correction_kl`; β adapted once per optimizer step);
5. the entropy bonus (TRL's fixed or adaptive coefficient);
6. the trainer's own terms (a value loss, ...), the process scaling, the MoE router's auxiliary loss;
7. the metrics, combined once per optimizer step over the window (`WindowNormalization.window_loss`, the end of
   the DPO and SFT trainers' loss steps too).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from ...losses import aggregate_loss
from .turns import turn_samples

PolicyTerm = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]
"""`(mode, **inputs) -> (loss, metrics)`: the policy loss on one micro-batch (a trainer may wrap the default)."""
TrainerTerms = Callable[[str, "StepBatch", dict[str, Any], torch.Tensor, dict[str, Any]], torch.Tensor]
"""`(mode, batch, window, loss, metrics) -> loss`: a trainer's own terms added to the loss (a critic's value loss)."""


@dataclasses.dataclass
class StepBatch:
    """One micro-batch as the loss step reads it: `[B, T]` tensors on the completion tokens.

    Attributes:
        logprob: π's log-probs of the sampled tokens (differentiable).
        entropy: π's per-token entropies.
        mask: The loss tokens (bool).
        advantages: `[B]` or `[B, T]`.
        old_logprob: π_old (None: π itself, detached: one update per batch).
        sampling_logprob: The sampler's log-probs, which the off-policy mask compares π with (None: π_old).
        ref_logprob: The reference model's log-probs (the KL term).
        importance_sampling_ratio: The sampler's per-token importance weights (vLLM's, the rollout correction's).
        aux_loss: The MoE router's auxiliary loss of the forward pass.
        loss_inputs: Further inputs a loss may declare (`expert_mask`, `prox_logprob`, `teacher_logprob`, ...).
        source: The trainer's own micro-batch, for its own terms.
        turns: The model turns of the rows (`core.turns.Turns`) where `mask` does not delimit them (the asynchronous
            trainer's rows hold the trained tokens only), for `turns_as_samples`; None: the runs of `mask`.
    """

    logprob: torch.Tensor
    entropy: torch.Tensor
    mask: torch.Tensor
    advantages: torch.Tensor
    old_logprob: torch.Tensor | None = None
    sampling_logprob: torch.Tensor | None = None
    ref_logprob: torch.Tensor | None = None
    importance_sampling_ratio: torch.Tensor | None = None
    aux_loss: torch.Tensor | None = None
    loss_inputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    source: dict[str, Any] = dataclasses.field(default_factory=dict)
    turns: Any = None


@dataclasses.dataclass
class EntropyControl:
    """The entropy bonus's coefficient, fixed or adapted as TRL's `use_adaptive_entropy` does: applied only while
    the previous optimizer step's entropy was at or below `target`, moved by `delta` within [`low`, `high`] once per
    optimizer step from the window's token-mean entropy over all processes."""

    coef: float
    adaptive: bool = False
    target: float = 0.0
    delta: float = 0.0
    low: float = 0.0
    high: float = 0.0
    last_world_entropy: float = float("inf")
    window_stats: torch.Tensor | None = None

    @classmethod
    def from_args(cls, args: Any) -> EntropyControl:
        if not args.use_adaptive_entropy:
            return cls(coef=args.entropy_coef)
        return cls(
            coef=args.entropy_coef,
            adaptive=True,
            target=args.entropy_target,
            delta=args.entropy_coef_delta,
            low=args.entropy_coef_min,
            high=args.entropy_coef_max,
        )

    @property
    def enabled(self) -> bool:
        return self.coef != 0.0 or self.adaptive

    def applied(self) -> float:
        return self.coef if not self.adaptive or self.last_world_entropy <= self.target else 0.0

    def observe(self, entropy: torch.Tensor, mask: torch.Tensor, sync: bool, reduce: Callable) -> None:
        """Add a training micro-batch's entropies; at the optimizer step (`sync`) move the coefficient."""
        stats = torch.stack([torch.where(mask, entropy.detach(), 0).sum(), mask.sum().float()])
        self.window_stats = stats if self.window_stats is None else self.window_stats + stats
        if not sync:
            return
        total, tokens = reduce(self.window_stats).tolist()
        self.last_world_entropy = total / max(tokens, 1.0)
        if self.last_world_entropy <= self.target:
            self.coef = min(self.coef + self.delta, self.high)
        else:
            self.coef = max(self.coef - self.delta, self.low)
        self.window_stats = None


class LossStep:
    """The loss step of one trainer (see the module docstring).

    Args:
        host: The trainer: its `accelerator`, `current_gradient_accumulation_steps`, `state.global_step` and the
            window (`window_loss`: the process scaling, the router aux loss, the metrics).
        components: The config's trained parts (`Components`): policy loss, KL term, entropy bonus, aggregations.
        args: The config: `beta`'s adaptation, `top_entropy_quantile`, `off_policy_mask_threshold`,
            `use_bias_correction_kl`, the entropy coefficient's control, `turns_as_samples`, `max_completion_length`.
        policy_term: The policy loss on a micro-batch (default: the policy loss on the inputs it declares).
        trainer_terms: The trainer's own terms (default: none).
    """

    def __init__(
        self,
        host: Any,
        components: Any,
        args: Any,
        policy_term: PolicyTerm | None = None,
        trainer_terms: TrainerTerms | None = None,
    ):
        self.host = host
        self.policy_loss_fn = components.policy_loss
        self.kl_fn = components.kl_fn
        self.entropy_fn = components.entropy_fn
        self.loss_agg_mode = components.loss_agg_mode
        self.entropy_loss_agg_mode = components.entropy_loss_agg_mode
        self.entropy = EntropyControl.from_args(args)
        self.top_entropy_quantile = args.top_entropy_quantile
        self.off_policy_mask_threshold = args.off_policy_mask_threshold
        self.use_bias_correction_kl = bool(args.use_bias_correction_kl)
        self.turns_as_samples = bool(args.turns_as_samples)
        self.max_completion_length = args.max_completion_length
        self.logs_trl_kl = bool(getattr(args, "uses_trl_loss", False)) and self.loss_agg_mode != "token-mean"
        self.policy_term = policy_term or self.policy_loss
        self.trainer_terms = trainer_terms

    @property
    def beta(self) -> float:
        """The KL coefficient now (adapted once per optimizer step with `adaptive_kl`)."""
        return self.kl_fn.kl_coef if self.kl_fn.name != "none" else 0.0

    def policy_loss(self, mode: str, **inputs: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The policy loss on the inputs it declares (`inputs()`); None inputs are left out."""
        return self.policy_loss_fn(**read_declared(self.policy_loss_fn, inputs))

    def __call__(self, batch: StepBatch, window: dict[str, Any], mode: str) -> torch.Tensor:
        """The micro-batch's loss, scaled for the processes (its share of the window's loss), its metrics logged."""
        host = self.host
        logps, mask = batch.logprob, batch.mask.bool()
        old = logps.detach() if batch.old_logprob is None else batch.old_logprob
        advantages, ratio = batch.advantages, batch.importance_sampling_ratio
        if ratio is not None and "importance_sampling_ratio" not in self.policy_loss_fn.inputs():
            advantages, ratio = per_token(advantages) * ratio, None
        entropy_mask = None
        if self.top_entropy_quantile < 1.0:  # the policy gradient on the highest-entropy tokens only (TRL)
            entropy_mask = self.high_entropy_mask(batch.entropy.detach(), mask)
            advantages = per_token(advantages) * entropy_mask
        if self.off_policy_mask_threshold is not None:  # DeepSeek-V3.2's off-policy sequence mask (TRL)
            sampler = old if batch.sampling_logprob is None else batch.sampling_logprob
            keep = off_policy_mask(per_token(batch.advantages), logps, sampler, mask, self.off_policy_mask_threshold)
            advantages = per_token(advantages) * keep
        entropies, ref = batch.entropy, batch.ref_logprob
        if self.turns_as_samples:  # one row per model turn, on its tokens: turn r is row r of every tensor
            rows, mask = turn_samples(mask, batch.turns)
            logps, old, entropies, advantages = logps[rows], old[rows], entropies[rows], advantages[rows]
            ref, ratio, entropy_mask = (x if x is None else x[rows] for x in (ref, ratio, entropy_mask))
        if "global_valid_seqs" in window:  # Dr. GRPO's `seq-mean-token-sum-norm`: sequences × the length limit
            window = {**window, "normalizer": window["global_valid_seqs"] * self.max_completion_length}

        step_inputs = {**batch.loss_inputs, "step": host.state.global_step}
        policy_loss, loss_metrics = self.policy_term(
            mode,
            logprob=logps,
            old_logprob=old,
            action_mask=mask,
            advantages=advantages,
            ref_logprob=ref,
            importance_sampling_ratio=ratio,
            **step_inputs,
            **window,
        )
        loss = policy_loss
        metrics = {**loss_metrics, "policy_loss": policy_loss.detach()}
        if self.beta != 0.0:
            loss = loss + self.kl_term(logps, ref, old, mask, window, metrics)
        if self.entropy.enabled:
            loss = loss - self.entropy_bonus(mode, entropies, mask, entropy_mask, step_inputs, window, metrics)
        metrics["entropy"] = aggregate_loss(
            entropies.detach(), mask, "token-mean", global_valid_toks=window.get("global_valid_toks")
        )
        if self.trainer_terms is not None:
            loss = self.trainer_terms(mode, batch, window, loss, metrics)
        loss, logged = host.window_loss(loss, metrics, mode, batch.aux_loss)
        if logged and mode == "train" and self.kl_fn.adaptive:  # the optimizer step: adapt β to the window's KL
            self.kl_fn.update_kl_coef(logged["kl"], batch_size=int(window["global_valid_seqs"].item()))
        return loss

    # ---- the terms ------------------------------------------------------------------------------------------------

    def kl_term(self, logps, ref, old, mask, window, metrics) -> torch.Tensor:
        """β·agg(KL(π‖π_ref)) with the policy loss's aggregation, each token weighted by π/π_old with
        `use_bias_correction_kl`; logs `kl` (TRL's token mean with TRL's own loss) and `kl_coef`."""
        weights = self.importance_ratio(logps, old, mask) if self.use_bias_correction_kl else None
        kl_loss, kl_metrics = self.kl_fn.calculate_kl_loss(
            logps, ref, mask, self.loss_agg_mode, old_logprob=old, token_weights=weights, **window
        )
        metrics["kl"], metrics["kl_coef"] = kl_metrics["kl_loss"], kl_metrics["kl_coef"]
        if self.logs_trl_kl:
            kl = self.kl_fn.calculate_kl(logps.detach(), ref, old)
            kl = kl if weights is None else kl * weights.detach()
            metrics["kl"] = aggregate_loss(
                torch.where(mask, kl, 0), mask, "token-mean", global_valid_toks=window.get("global_valid_toks")
            )
        return kl_loss

    def importance_ratio(self, logps: torch.Tensor, old: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """π/π_old per token `[B, T]` (per sequence `[B, 1]` for a loss whose `importance_sampling_level` is
        `sequence`), differentiable: the bias-corrected KL's weight, as TRL's."""
        log_ratio = torch.where(mask, logps - old, 0)
        if getattr(self.policy_loss_fn, "importance_sampling_level", "token") == "sequence":
            log_ratio = (log_ratio.sum(-1) / mask.sum(-1).clamp(min=1)).unsqueeze(-1)
        return torch.exp(log_ratio)

    def entropy_bonus(self, mode, entropies, mask, entropy_mask, step_inputs, window, metrics) -> torch.Tensor:
        """coef·agg(entropy), subtracted from the loss. With `top_entropy_quantile` the bonus acts on the same
        tokens as the policy gradient, as each micro-batch's token mean over them, averaged over the window (TRL)."""
        host = self.host
        effective = mask if entropy_mask is None else mask & entropy_mask
        counts = window
        if entropy_mask is not None:
            scale = host.current_gradient_accumulation_steps * host.accelerator.num_processes if mode == "train" else 1
            counts = {**window, "global_valid_toks": effective.sum().float().clamp(min=1.0) * scale}
        self.entropy_fn.entropy_coef = self.entropy.applied()
        bonus, entropy_metrics = self.entropy_fn(
            entropies, effective, self.entropy_loss_agg_mode, expert_mask=step_inputs.get("expert_mask"), **counts
        )
        metrics.update(entropy_metrics)
        if mode == "train":
            sync = host.accelerator.sync_gradients
            if self.entropy.adaptive:
                self.entropy.observe(entropies, effective, sync, lambda x: host.accelerator.reduce(x, reduction="sum"))
            if sync:
                host.metric_log(mode)["entropy_coef"].append(self.entropy.coef)
        return bonus

    def high_entropy_mask(self, entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """TRL's `get_high_entropy_mask`: the tokens whose entropy is at or above the (1 − `top_entropy_quantile`)
        quantile of every process's loss tokens."""
        accelerator = self.host.accelerator
        pad = -1e9  # entropies are never negative: a sentinel no real value equals
        local = entropies[mask].float()
        gathered = accelerator.gather(accelerator.pad_across_processes(local, dim=0, pad_index=pad))
        gathered = gathered[gathered != pad]
        if gathered.numel() == 0:
            return torch.zeros_like(mask)
        threshold = torch.quantile(gathered, 1 - self.top_entropy_quantile)
        return (entropies * mask.float() >= threshold) & mask

    # ---- checkpoints ----------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs: the adapted KL and entropy coefficients."""
        state: dict[str, Any] = {"kl_coef": self.kl_fn.kl_coef} if self.kl_fn.adaptive else {}
        if self.entropy.adaptive:
            state["entropy_coef"] = self.entropy.coef
            state["last_world_entropy"] = self.entropy.last_world_entropy
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.kl_fn.adaptive and "kl_coef" in state:
            self.kl_fn.kl_coef = state["kl_coef"]
        if self.entropy.adaptive and "entropy_coef" in state:
            self.entropy.coef = state["entropy_coef"]
            self.entropy.last_world_entropy = state["last_world_entropy"]


def step_part(name: str) -> property:
    """A trainer attribute that is its loss step's part `name` (`policy_loss_fn`, `kl_fn`, `entropy_fn`)."""
    return property(
        lambda trainer: getattr(trainer.loss_step, name),
        lambda trainer, value: setattr(trainer.loss_step, name, value),
        doc=f"The loss step's `{name}`.",
    )


def read_declared(component: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """The `inputs` that `component` declares it reads (`inputs()`), without the None ones."""
    return {name: inputs[name] for name in component.inputs() if inputs.get(name) is not None}


def per_token(advantages: torch.Tensor) -> torch.Tensor:
    """Advantages `[B]` as a column `[B, 1]` (`[B, T]` unchanged), to multiply by per-token factors."""
    return advantages if advantages.dim() == 2 else advantages.unsqueeze(1)


def off_policy_mask(
    advantages: torch.Tensor, logps: torch.Tensor, sampler: torch.Tensor, mask: torch.Tensor, threshold: float
) -> torch.Tensor:
    """DeepSeek-V3.2's off-policy sequence mask, as TRL's `get_off_policy_mask`: `[B, 1]`, 0 for a sequence with a
    negative advantage whose mean KL(sampler‖π) over its loss tokens exceeds `threshold` (an unscored NaN token gives
    no evidence)."""
    kl = torch.nan_to_num(sampler - logps.detach(), nan=0.0)
    weights = mask.to(kl.dtype)
    mean_kl = (kl * weights).sum(1, keepdim=True) / weights.sum(1, keepdim=True).clamp(min=1.0)
    return ((advantages >= 0) | (mean_kl <= threshold)).to(kl.dtype)
