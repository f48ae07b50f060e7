"""DAPO's dynamic sampling on TRL's generation: uniform prompt groups leave, more prompts fill the batch.

Paper: Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (arXiv 2503.14476), §3.2
"Dynamic Sampling". A prompt group whose rewards all agree (every completion right, or every one wrong) has zero
group-relative advantage: it adds nothing to the gradient but still counts in the loss's normalization, so the
effective batch shrinks as the policy improves. With `dynamic_sampling=True` a GRPO-family trainer generates its
generation batch as usual, drops those groups, and generates for more prompts until the batch again holds as many
prompt groups as it was built for; the surplus of the last round is discarded (the order is kept: earlier rounds
first, verl's `dapo_ray_trainer`). The trained batch then has exactly the usual size, so the window normalization,
the micro-batch split and the 2-processes = 1-process equivalence hold unchanged.

* The groups are judged on the task reward (the weighted reward functions, before `overlong_buffer`'s length
  penalty, which would otherwise make an all-correct group look informative): verl's `filter_groups.metric=acc`.
* Extra prompts come from a second, independently shuffled pass over the training dataset (the same sampler as
  TRL's, seed + 1), so the training loop's epochs and steps are untouched; every process draws the same prompts.
* After `dynamic_sampling_max_rounds` generation rounds (the first included) without enough informative groups,
  `dynamic_sampling_at_cap` decides. `train` (the default): the batch is trained with the informative groups found
  and, to fill it, the earliest uniform groups drawn, as GRPO without dynamic sampling would train them (their
  advantage is 0: they add no policy gradient); the trainer warns once with the counts, and every capped batch is
  counted in `dynamic_sampling/capped` and `dynamic_sampling/groups_filled`. A run whose groups turn uniform late in
  training (the policy solves most prompts) goes on instead of stopping. `raise`: the trainer raises, naming the
  setting, as verl does when `max_num_gen_batches` is reached.
* Logged per generation batch: `dynamic_sampling/rounds`, `dynamic_sampling/prompts_drawn` (prompts generated for,
  all rounds), `dynamic_sampling/groups_dropped` (uniform groups), `dynamic_sampling/groups_surplus` (informative
  groups left over), `dynamic_sampling/capped` (1 when the rounds ran out) and `dynamic_sampling/groups_filled`
  (uniform groups trained to fill a capped batch).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import IterableDataset
from trl.trainer.utils import RepeatSampler

from ..._validation import check_bool, check_choice, check_number
from ..core.arguments import _help

AT_CAP = ("train", "raise")
"""`dynamic_sampling_at_cap`'s values (see the module docstring)."""


@dataclass
class DynamicSamplingArguments:
    """The dynamic-sampling fields of the GRPO-family configs (see the module docstring)."""

    dynamic_sampling: bool = field(
        default=False,
        metadata=_help(
            "DAPO's dynamic sampling (arXiv 2503.14476 §3.2): drop the prompt groups whose task rewards all agree "
            "and generate for more prompts until the generation batch is full again (logged under "
            "`dynamic_sampling/`). Needs num_generations >= 2."
        ),
    )
    dynamic_sampling_max_rounds: int = field(
        default=10,
        metadata=_help(
            "The most generation rounds (the first included) dynamic sampling may take to fill one generation "
            "batch (verl's `max_num_gen_batches`); what happens then: `dynamic_sampling_at_cap`."
        ),
    )
    dynamic_sampling_at_cap: str = field(
        default="train",
        metadata=_help(
            "When `dynamic_sampling_max_rounds` rounds do not fill a generation batch: `train` trains it with the "
            "informative groups found, filled up with uniform ones (advantage 0, as without dynamic sampling), warns "
            "once and counts it in `dynamic_sampling/capped`; `raise` stops the run with an error, as verl does.",
            choices=list(AT_CAP),
        ),
    )

    def _check_dynamic_sampling(self) -> None:
        """Each dynamic-sampling field on its own (what it needs of the others: `config_rules`)."""
        owner = type(self).__name__
        check_bool(owner, "dynamic_sampling", self.dynamic_sampling)
        check_number(owner, "dynamic_sampling_max_rounds", self.dynamic_sampling_max_rounds, ge=1, integer=True)
        check_choice(owner, "dynamic_sampling_at_cap", self.dynamic_sampling_at_cap, AT_CAP)


def check_dynamic_sampling_dataset(owner: str, args: Any, train_dataset: Any) -> None:
    """Before the model loads: dynamic sampling draws extra prompts by index, which an iterable dataset lacks."""
    if getattr(args, "dynamic_sampling", False) and isinstance(train_dataset, IterableDataset):
        raise ValueError(
            f"{owner}: dynamic_sampling=True draws extra prompts from the training dataset by index, which an "
            "IterableDataset does not allow; pass a map-style dataset or set dynamic_sampling=False"
        )


class DynamicSampler:
    """A GRPO-family trainer's dynamic sampling (`sample`): its generation batch refilled after uniform groups
    leave, through the trainer's `_generate_round` (one TRL generation and reward pass) and `_take_rows`."""

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.warned = False  # the warning at the cap, once per trainer
        self._prompt_loader = None
        self._prompt_iterator = None

    def sample(self, inputs: list[dict[str, Any]]):
        """`(output, rewards_per_func, overlong, table_rows)` of a generation batch of informative groups only.

        `output` is the local part of a batch as TRL's `trl_generate_and_score` returns it, the rewards
        `[N, F]` (all processes) and the overlong penalties `[N]` (or None) its rows'; `table_rows` gives each row's
        position in the last round (whose samples TRL's completions table shows), -1 for a row of an earlier round.
        """
        trainer = self.trainer
        group_size = trainer.num_generations
        n_local = len(inputs)
        needed = n_local * trainer.accelerator.num_processes // group_size
        weights = trainer.reward_weights
        rounds, picks, uniform_groups, dropped = [], [], [], 0
        batch = inputs
        for round_index in range(trainer.args.dynamic_sampling_max_rounds):
            output, rewards_per_func, overlong = trainer._generate_round(batch)
            rounds.append((output, rewards_per_func, overlong))
            task = (rewards_per_func * weights.to(rewards_per_func.device)).nansum(dim=1).view(-1, group_size)
            uniform = task.amax(dim=1) == task.amin(dim=1)
            dropped += int(uniform.sum())
            picks += [(round_index, int(g)) for g in (~uniform).nonzero().flatten().tolist()]
            uniform_groups += [(round_index, int(g)) for g in uniform.nonzero().flatten().tolist()]
            if len(picks) >= needed:
                break
            batch = self._next_prompt_batch(n_local)
        filled = max(needed - len(picks), 0)
        if filled:
            self._at_cap(len(picks), needed, len(rounds))
            picks = sorted(picks + uniform_groups[:filled])  # the batch in generation order
        metrics = trainer.metric_log("train")
        metrics["dynamic_sampling/capped"].append(float(filled > 0))
        metrics["dynamic_sampling/groups_filled"].append(float(filled))
        metrics["dynamic_sampling/rounds"].append(float(len(rounds)))
        metrics["dynamic_sampling/prompts_drawn"].append(float(len(rounds) * needed))
        metrics["dynamic_sampling/groups_dropped"].append(float(dropped))
        metrics["dynamic_sampling/groups_surplus"].append(float(len(picks) - needed))
        if len(rounds) == 1:  # nothing dropped: TRL's batch as it is
            return output, rewards_per_func, overlong, None

        round_of = torch.tensor([r for r, _ in picks[:needed]]).repeat_interleave(group_size)
        row_of = torch.tensor([g for _, g in picks[:needed]]).repeat_interleave(group_size) * group_size
        row_of += torch.arange(group_size).repeat(needed)
        merged = _concatenate([out for out, _, _ in rounds], trainer.text_tokenizer.pad_token_id)
        # Global row `row` of round `r` is, in the gathered concatenation of every process's rounds, at
        # process (row // n_local), round r, position row % n_local.
        source = (row_of // n_local) * (len(rounds) * n_local) + round_of * n_local + row_of % n_local
        device = rewards_per_func.device
        output = trainer._take_rows(merged, source.to(device), n_local=n_local, purpose="dynamic_sampling")
        round_of, row_of = round_of.to(device), row_of.to(device)
        rewards_per_func = torch.stack([r for _, r, _ in rounds])[round_of, row_of]
        if overlong is not None:
            overlong = torch.stack([o for _, _, o in rounds])[round_of, row_of]
        table_rows = torch.where(round_of == len(rounds) - 1, row_of, -1)
        return output, rewards_per_func, overlong, table_rows

    def _at_cap(self, found: int, needed: int, rounds: int) -> None:
        """The rounds ran out with `found` of the `needed` informative groups: raise or warn (once), as
        `dynamic_sampling_at_cap` says."""
        trainer = self.trainer
        owner, cap = type(trainer).__name__, trainer.args.dynamic_sampling_max_rounds
        counts = (
            f"dynamic sampling found {found} of the {needed} prompt groups a generation batch needs after "
            f"dynamic_sampling_max_rounds={cap} rounds ({rounds * needed} prompts): the rewards of every other group "
            "agreed (all completions scored the same), which gives GRPO no signal"
        )
        if trainer.args.dynamic_sampling_at_cap == "raise":
            raise RuntimeError(
                f"{owner}: {counts}; raise dynamic_sampling_max_rounds, use prompts or rewards on which the model's "
                "completions differ, set dynamic_sampling_at_cap='train' to train such batches, or "
                "dynamic_sampling=False"
            )
        if not self.warned:
            self.warned = True
            warnings.warn(
                f"{owner} at step {trainer.state.global_step + 1}: {counts}. This batch trains the {found} found "
                f"and {needed - found} uniform groups (advantage 0, as without dynamic sampling), and so will every "
                "batch that reaches the cap (warned once; counted in dynamic_sampling/capped and "
                "dynamic_sampling/groups_filled). More rounds: dynamic_sampling_max_rounds; stop instead: "
                "dynamic_sampling_at_cap='raise'.",
                stacklevel=2,
            )

    def _next_prompt_batch(self, n_local: int) -> list[dict[str, Any]]:
        """The next `n_local` prompt rows of this process from the extra-prompt stream (whole groups; a new shuffled
        pass when one ends): as many as the training loop's batch of this generation round (the rollout rows only,
        where MIX mixes expert rows in)."""
        trainer = self.trainer
        if self._prompt_loader is None:
            sampler = RepeatSampler(
                data_source=trainer.train_dataset,
                mini_repeat_count=trainer.num_generations,
                batch_size=n_local * trainer.accelerator.num_processes // trainer.num_generations,
                repeat_count=1,
                shuffle=trainer.shuffle_dataset,
                seed=trainer.args.seed + 1,  # another order than the training loop's
            )
            self._prompt_loader = trainer.dataloader(
                dataset=trainer.train_dataset,
                description="Dynamic sampling",
                batch_size=n_local,
                sampler_fn=lambda _: sampler,
                is_training=True,
            )
        for _ in range(2):
            if self._prompt_iterator is None:
                self._prompt_iterator = iter(self._prompt_loader)
            try:
                return next(self._prompt_iterator)
            except StopIteration:
                self._prompt_iterator = None
        raise RuntimeError(f"{type(trainer).__name__}: dynamic sampling got no prompts from the training dataset")


def _concatenate(outputs: list[dict[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """The row-aligned tensors of several local generation outputs, one after the other (padded to a common width:
    prompts on the left, completions on the right, as TRL pads them); other values are the first output's."""
    merged = dict(outputs[0])
    for key, first in outputs[0].items():
        if not isinstance(first, torch.Tensor) or first.dim() == 0:
            continue
        values = [out[key] for out in outputs]
        if first.dim() > 1:
            width = max(v.size(1) for v in values)
            fill = 1 if key == "importance_sampling_ratio" else 0
            fill = pad_token_id if key.endswith("_ids") else fill
            left = key.startswith("prompt")
            values = [_pad(v, width, fill, left) for v in values]
        merged[key] = torch.cat(values)
    return merged


def _pad(value: torch.Tensor, width: int, fill: float, left: bool) -> torch.Tensor:
    missing = width - value.size(1)
    if missing == 0:
        return value
    padding = value.new_full((value.size(0), missing, *value.shape[2:]), fill)
    return torch.cat([padding, value] if left else [value, padding], dim=1)
