"""The Online DPO trainer: TRL's experimental `OnlineDPOTrainer` with trl_ext's port of its loss.

Everything but the loss is TRL's: the two completions sampled per prompt (transformers or vLLM), the log-probs of the
policy and of the reference (a copy of the policy, the given `ref_model`, or PEFT's disabled adapter), the reward
functions (reward models or callables, `reward_weights`), `missing_eos_penalty`, the ranking (the completion with the
higher reward is chosen; a tie chooses the first), logging, checkpointing. TRL runs the whole step inline in
`training_step` (generate, score, rank, loss, statistics, backward) with no method between the log-probs and
`accelerator.backward`, so `training_step` is the one override, the narrowest point where the loss can be replaced:
it calls TRL's own step methods unchanged (`_generate` or `_generate_vllm`, `_forward` for the policy and the
reference, `_calculate_rewards_from_functions`) through three named steps, `rank_pairs`, `pair_loss` and
`record_statistics`, and `pair_loss` computes

    loss = mean over the prompts' ranked pairs of  −log σ(βΔ)  (`sigmoid`)  or  (Δ − 1/(2β))²  (`ipo`)

with `trl_ext.losses.online_dpo.OnlineDPOLoss` (Δ: the chosen minus the rejected completion's summed log-ratio to the
reference), β the epoch's (`beta` may be a list, one per epoch); trl_ext's `label_smoothing` ε > 0 makes `sigmoid`
conservative DPO (0 by default: TRL's loss). The loss is the micro-batch's mean over its pairs and the backward pass
and the returned value are TRL's, so one step updates the parameters exactly as TRL's does.

Metrics are TRL's (`objective/kl`, `objective/entropy`, `objective/non_score_reward`, `objective/rlhf_reward`,
`objective/scores`, `objective/scores_margin`, `rewards/chosen`, `rewards/rejected`, `rewards/margins`,
`rewards/accuracies`, `logps/chosen`, `logps/rejected`, `val/contain_eos_token`, `beta`) plus `reward`, the mean
reward of the completions before the missing-EOS penalty (the rollout trainers' name, which the scripts' closing line
follows), and `dpo_loss`, the loss. Two deliberate differences from TRL 1.16: the KL and entropy statistics (and
`objective/non_score_reward`, `objective/rlhf_reward`) sum over the completions' tokens, where TRL's also add the
padding positions after the EOS (the log-probs of pad tokens); and a list of β is indexed by the epoch in progress,
`int(state.epoch)`, where TRL indexes it by the fractional epoch and fails with a TypeError from the second step on.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from transformers import TrainingArguments
from transformers.training_args import OptimizerNames

with warnings.catch_warnings():  # TRL's notice on importing its experimental package (docs/algorithms says it)
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.data_utils import is_conversational
    from trl.experimental.online_dpo import OnlineDPOTrainer as TRLOnlineDPOTrainer
    from trl.experimental.utils import empty_cache

from ...losses.online_dpo import OnlineDPOLoss
from ..core.config_conversion import trainer_config
from ..core.trl_adapter import TrainerAdapter
from .config import OnlineDPOConfig

TRL_EXT_STATISTICS = ("reward", "dpo_loss")
"""What trl_ext logs beside TRL's statistics: the mean reward before the missing-EOS penalty, and the loss."""


@dataclass
class RankedPairs:
    """One micro-batch's sampled completions, ranked: rows `[chosen of prompt 0 … P−1; rejected of prompt 0 … P−1]`.

    Attributes:
        logprobs: The policy's per-token log-probs of the completions `[2P, T]` (with gradient).
        ref_logprobs: The reference's `[2P, T]` (no gradient).
        completion_mask: The completions' tokens up to their first EOS `[2P, T]` (bool).
        rewards: Each completion's reward `[2P]`, the missing-EOS penalty subtracted (what ranked them).
        raw_rewards: The same before the penalty `[2P]`.
        contain_eos: Whether each completion has an EOS token `[2P]` (bool).
    """

    logprobs: torch.Tensor
    ref_logprobs: torch.Tensor
    completion_mask: torch.Tensor
    rewards: torch.Tensor
    raw_rewards: torch.Tensor
    contain_eos: torch.Tensor

    @property
    def num_pairs(self) -> int:
        return self.logprobs.size(0) // 2


class OnlineDPOTrainer(TrainerAdapter, TRLOnlineDPOTrainer):
    """TRL's experimental `OnlineDPOTrainer` whose loss is trl_ext's port, `OnlineDPOLoss` (config:
    `trl_ext.OnlineDPOConfig`). The constructor takes TRL's arguments; `args` may also be TRL's `OnlineDPOConfig` (or a
    `TrainingArguments`), converted.
    """

    algorithm: ClassVar[str] = "online_dpo"
    config_class: ClassVar[type[OnlineDPOConfig]] = OnlineDPOConfig
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "online-dpo"]

    def __init__(
        self,
        model,
        ref_model=None,
        reward_funcs=None,
        args: OnlineDPOConfig | TrainingArguments | None = None,
        *posargs: Any,
        **kwargs: Any,
    ):
        """Build TRL's `OnlineDPOTrainer` with trl_ext's config, and the loss of each epoch from it.

        The arguments are TRL's `OnlineDPOTrainer`'s (TRL's documentation describes each); below is what trl_ext adds.

        Args:
            model (str | PreTrainedModel): The policy: a path / Hub id or a model.
            ref_model (PreTrainedModel | None): The reference (default: a frozen copy of the policy, or PEFT's disabled
                adapter with `peft_config`).
            reward_funcs: The reward functions that rank the two completions: callables (TRL's reward-function
                signature), reward models or their paths; their weighted sum is the reward.
            args: A `trl_ext.OnlineDPOConfig`, used as is; TRL's `OnlineDPOConfig` or a `TrainingArguments` is
                converted (its fields that differ from TRL's defaults carried over). None: the defaults, with
                `output_dir="<model name>-online-dpo"`.
            *posargs: The rest of TRL's arguments in its order (`data_collator`, `train_dataset`, ...).
            **kwargs: The same by name: `train_dataset` (prompts), `processing_class` (required, as in TRL),
                `reward_processing_classes`, `peft_config`, `callbacks`, `optimizers`, ...

        Raises:
            TypeError: `args` is another trainer's config (trl_ext's or TRL's) or not a `TrainingArguments`.
            ValueError: A converted field `trl_ext.OnlineDPOConfig` refuses (the message names it), and TRL's own
                errors (no reward function, no `processing_class`, ...).
        """
        args = trainer_config(type(self).__name__, model, args, self.config_class, "online-dpo")
        super().__init__(model, ref_model, reward_funcs, args, *posargs, **kwargs)
        self.epoch_losses: tuple[OnlineDPOLoss, ...] = args.epoch_losses()
        self.stats.update({key: [] for key in TRL_EXT_STATISTICS})

    # ---- the epoch's β and loss --------------------------------------------------------------------------------

    @property
    def epoch_index(self) -> int:
        """The epoch in progress, 0 before training, as an index into `epoch_losses` (the last one after it)."""
        return min(int(self.state.epoch or 0), len(self.epoch_losses) - 1)

    @property
    def policy_loss_fn(self) -> OnlineDPOLoss:
        """The loss of the epoch in progress."""
        return self.epoch_losses[self.epoch_index]

    @property
    def beta(self) -> float:
        """β of the epoch in progress (`OnlineDPOConfig.betas`)."""
        return self.policy_loss_fn.beta

    # ---- the step ----------------------------------------------------------------------------------------------

    def training_step(
        self, model: torch.nn.Module, inputs: dict[str, Any], num_items_in_batch: int | None = None
    ) -> torch.Tensor:
        """Sample and rank two completions per prompt (TRL's), the ported loss, TRL's statistics and backward pass.

        Returns:
            The loss, detached, divided by `gradient_accumulation_steps` (the HF loop sums it into the logged loss).
        """
        model.train()
        pairs = self.rank_pairs(model, inputs)
        loss, metrics = self.pair_loss(pairs)
        self.record_statistics(pairs, metrics)
        steps = self.args.torch_empty_cache_steps
        if steps is not None and self.state.global_step % steps == 0:
            empty_cache()
        backward_kwargs = {}
        if self.args.optim in (OptimizerNames.LOMO, OptimizerNames.ADALOMO):  # LOMO steps inside the backward pass
            backward_kwargs["learning_rate"] = self._get_learning_rate()
        self.accelerator.backward(loss, **backward_kwargs)
        return loss.detach() / self.args.gradient_accumulation_steps

    def rank_pairs(self, model: torch.nn.Module, inputs: dict[str, Any]) -> RankedPairs:
        """TRL's generation and scoring: two completions of each prompt, their log-probs under the policy and the
        reference, their rewards (the reward functions' weighted sum, less `missing_eos_penalty` without an EOS), and
        the ranking (the first completion is chosen when its reward is >= the second's)."""
        prompts, images = inputs["prompt"], inputs.get("image")
        if images is not None:
            _add_image_placeholders(prompts)
        vision_inputs = None
        if self.args.use_vllm:
            prompt_ids, prompt_mask, completion_ids, completion_mask = self._generate_vllm(prompts, images)
        else:
            generated = self._generate(model, prompts, images)
            prompt_ids, prompt_mask, completion_ids, completion_mask, vision_inputs = generated
        sequences = (prompt_ids, prompt_mask, completion_ids, completion_mask, vision_inputs)
        eos_ids = torch.tensor(self.eos_token_ids, device=completion_ids.device)
        contain_eos = torch.isin(completion_ids, eos_ids).any(dim=-1)

        logprobs = self._forward(model, *sequences)
        with torch.no_grad():
            if self.ref_model is not None:
                ref_logprobs = self._forward(self.ref_model, *sequences)
            else:  # PEFT: the reference is the policy with its adapter disabled
                with self.model.disable_adapter():
                    ref_logprobs = self._forward(self.model, *sequences)

        completions = self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
        if is_conversational({"prompt": prompts[0]}):
            completions = [[{"role": "assistant", "content": text}] for text in completions]
        columns = {  # the dataset's other columns, for the reward functions: each row's value twice (2 completions)
            key: value * 2 if isinstance(value, (list, tuple)) else value
            for key, value in inputs.items()
            if key != "prompt"
        }
        raw_rewards = self._calculate_rewards_from_functions(
            prompts=2 * prompts,
            completions=completions,
            completion_ids_list=completion_ids.tolist(),
            **columns,
        )
        rewards = raw_rewards.clone()
        if self.args.missing_eos_penalty is not None:
            rewards[~contain_eos] -= self.args.missing_eos_penalty

        size = len(prompts)
        first_chosen = rewards[:size] >= rewards[size:]
        index = torch.arange(size, device=rewards.device)
        chosen = torch.where(first_chosen, index, index + size)
        ranked = torch.cat((chosen, torch.where(first_chosen, index + size, index)))
        return RankedPairs(
            logprobs=logprobs[ranked],
            ref_logprobs=ref_logprobs[ranked],
            completion_mask=completion_mask[ranked].bool(),
            rewards=rewards[ranked],
            raw_rewards=raw_rewards[ranked],
            contain_eos=contain_eos[ranked],
        )

    def pair_loss(self, pairs: RankedPairs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The epoch's `OnlineDPOLoss` on the ranked pairs (handed to it interleaved: chosen, rejected, ...)."""
        size = pairs.num_pairs
        interleave = torch.arange(2 * size, device=pairs.logprobs.device).view(2, size).t().reshape(-1)
        return self.policy_loss_fn(
            logprob=pairs.logprobs[interleave],
            ref_logprob=pairs.ref_logprobs[interleave],
            action_mask=pairs.completion_mask[interleave],
        )

    @torch.no_grad()
    def record_statistics(self, pairs: RankedPairs, metrics: dict[str, torch.Tensor]) -> None:
        """TRL's statistics of the step (gathered over processes as TRL gathers them), and `TRL_EXT_STATISTICS`."""
        gather = self.accelerator.gather_for_metrics
        size, beta = pairs.num_pairs, self.beta
        mask = pairs.completion_mask
        logprobs = pairs.logprobs.detach()
        sums = torch.where(mask, logprobs, 0).sum(-1)
        ref_sums = torch.where(mask, pairs.ref_logprobs, 0).sum(-1)
        kl = sums - ref_sums  # per completion, over its tokens
        non_score_reward = -beta * kl
        implicit = beta * kl  # β·ρ: the implicit rewards of the chosen and rejected completions
        chosen_rewards, rejected_rewards = gather(implicit[:size]), gather(implicit[size:])
        margins = chosen_rewards - rejected_rewards
        values = {
            "objective/kl": gather(kl.mean()).mean(),
            "objective/entropy": gather(-sums.mean()).mean(),
            "objective/non_score_reward": gather(non_score_reward.mean()).mean(),
            "objective/rlhf_reward": gather(pairs.rewards + non_score_reward).mean(),
            "objective/scores": gather(pairs.rewards.mean()).mean(),
            "objective/scores_margin": gather((pairs.rewards[:size] - pairs.rewards[size:]).mean()).mean(),
            "reward": gather(pairs.raw_rewards.mean()).mean(),
            "rewards/chosen": chosen_rewards.mean(),
            "rewards/rejected": rejected_rewards.mean(),
            "rewards/margins": margins.mean(),
            "rewards/accuracies": (margins > 0).float().mean(),
            "logps/chosen": gather(sums[:size]).mean(),
            "logps/rejected": gather(sums[size:]).mean(),
            "val/contain_eos_token": pairs.contain_eos.float().mean(),
            "dpo_loss": gather(metrics["dpo_loss"]).mean(),
        }
        for key, value in values.items():
            self.stats[key].append(value.item())
        self.stats["beta"].append(beta)


def _add_image_placeholders(prompts: list[Any]) -> None:
    """TRL's conversion of conversational prompts with an image (in place): a user turn's text gets an image part
    before it, a system turn's text becomes a text part."""
    for prompt in prompts:
        if not isinstance(prompt, list):
            continue
        for message in prompt:
            if not isinstance(message, dict) or not isinstance(message.get("content"), str):
                continue
            if message.get("role") == "user":
                message["content"] = [{"type": "image"}, {"type": "text", "text": message["content"]}]
            elif message.get("role") == "system":
                message["content"] = [{"type": "text", "text": message["content"]}]
