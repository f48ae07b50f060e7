"""`GRPOFamilyTrainer`: a `trl.GRPOTrainer` whose advantages and loss are a trl_ext algorithm's; generation,
rewards, PEFT, DeepSpeed / FSDP, logging and checkpoints stay TRL's (its points of contact: `trl_adapter.py`)."""

from __future__ import annotations

import json
import os
from typing import Any, ClassVar

import torch
import trl
from accelerate.utils import is_peft_model
from transformers import TrainingArguments
from trl.models import prepare_deepspeed, prepare_fsdp
from trl.trainer.utils import add_fused_lm_head, create_model_from_path, disable_dropout_in_model, get_config_model_id

from ..core.config_conversion import trainer_config
from ..core.loss_step import LossStep, StepBatch, step_part
from ..core.turns import segment_turns
from ..core.window import WindowNormalization
from .config import GRPOFamilyConfig
from .dynamic_sampling import DynamicSampler, check_dynamic_sampling_dataset
from .multi_turn import MultiTurnAdvantages
from .scoring import _MULTIMODAL_KEYS, GRPOScoring, _loss_mask
from .trl_adapter import GRPOAdapter

_STATE_FILE = "trl_ext_state.json"


class GRPOFamilyTrainer(GRPOScoring, MultiTurnAdvantages, WindowNormalization, GRPOAdapter):
    """A `trl.GRPOTrainer` whose advantages and loss are a trl_ext algorithm's.

    Use an algorithm's trainer (`SAPOTrainer`, `GSPOTrainer`, ...: built from its record by
    `trl_ext.trainers.algorithm_classes`) with its config (`SAPOConfig`, ...) or TRL's `trl.GRPOConfig` (converted);
    the constructor takes `trl.GRPOTrainer`'s arguments.
    """

    config_class: ClassVar[type[GRPOFamilyConfig]] = GRPOFamilyConfig
    _tag_names: ClassVar[list[str]] = ["trl", "trl_ext", "grpo"]
    policy_loss_fn = step_part("policy_loss_fn")
    kl_fn = step_part("kl_fn")
    entropy_fn = step_part("entropy_fn")

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: GRPOFamilyConfig | TrainingArguments | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        **kwargs: Any,
    ):
        """Check the arguments, then build the `trl.GRPOTrainer` with the algorithm's config.

        The arguments are `trl.GRPOTrainer`'s (TRL's documentation describes each); below is what trl_ext adds.

        Args:
            model (str | PreTrainedModel): The policy, as in TRL: a path / Hub id (loaded with `args.model_init_kwargs`)
                or a model.
            reward_funcs (RewardFunc | list[RewardFunc] | None): A reward function, a reward model (path / Hub id or
                model) or a list of them, as in TRL; required unless `environment_factory` is given (its environments
                may score the completions). A non-finite reward stops training with an error naming the function and the
                sample.
            args: The algorithm's config (`config_class`, e.g. `SAPOConfig`), used as is. TRL's `trl.GRPOConfig` or a
                `transformers.TrainingArguments` is converted to one (`trl_ext.trainers.core.config_conversion`): its
                fields that differ from TRL's defaults are carried over, the others take the algorithm's defaults. None:
                the algorithm's defaults, with `output_dir="<model name>-<algorithm>"`.
            train_dataset (Dataset | IterableDataset | None): The prompts, as in TRL: a dataset with a `prompt` column
                (checked before the model loads) unless `environment_factory` provides them.
            eval_dataset (Dataset | IterableDataset | dict[str, Dataset] | None): Evaluation prompts (a dataset or a
                dict of them), checked like `train_dataset`.
            processing_class (PreTrainedTokenizerBase | ProcessorMixin | None): The tokenizer or processor, as in TRL
                (default: the model's).
            **kwargs: The rest of `trl.GRPOTrainer`'s arguments, passed on: `reward_processing_classes`, `callbacks`,
                `optimizers`, `quantization_config`, `peft_config` (LoRA on the policy, as in TRL) and the multi-turn
                rollouts, `tools`, `environment_factory` (one environment per rollout; GiGPO and multi-step GRPO read
                each turn's `state_key` and `turn_rewards` from it, see `trl_ext.trainers.grpo.multi_turn`) and
                `rollout_func`.

        Raises:
            TypeError: `args` is another algorithm's config, another TRL trainer's config, or not a `TrainingArguments`.
            ValueError: No reward source; a dataset without a `prompt` column; a converted field the algorithm refuses,
                e.g. TRL's `loss_type` or `epsilon` set on a `trl.GRPOConfig` for an algorithm other than GRPO (the
                message names the trl_ext field to use); an advantage function that scores a greedy completion (ReMax)
                with `tools`, `environment_factory` or `rollout_func`.
        """
        algorithm = self.config_class.algorithm
        args = self._resolve_args(model, args)
        funcs = reward_funcs if isinstance(reward_funcs, list) else [] if reward_funcs is None else [reward_funcs]
        environment = kwargs.get("environment_factory") is not None  # it may own the rewards and the prompts
        if not funcs and not environment:
            raise ValueError(
                f"{type(self).__name__}: No reward source provided; reward_funcs is required: pass a reward function, "
                "a list of them, or a reward model (id/path or PreTrainedModel), or an environment_factory whose "
                "environments score the completions; got none"
            )
        for split, dataset in (("train_dataset", train_dataset), ("eval_dataset", eval_dataset)):
            for key, data in dataset.items() if isinstance(dataset, dict) else [(None, dataset)]:
                if not environment:
                    _check_prompt_column(type(self).__name__, split if key is None else f"{split}[{key!r}]", data)

        check_dynamic_sampling_dataset(type(self).__name__, args, train_dataset)
        components = args.components.for_trainer()
        if "reward_baselines" in components.advantage_fn.needed_inputs():
            for name in ("rollout_func", "tools", "environment_factory"):
                if kwargs.get(name):
                    raise ValueError(
                        f"{type(self).__name__}: advantage_fn={args.advantage_fn_name!r} compares each reward with the "
                        f"reward of a greedy completion of the prompt from TRL's single-turn generation, which "
                        f"cannot be made with {name}; drop {name} or choose another advantage function"
                    )

        reward_reference = args.kl_penalty_fn != "none" and args.beta == 0  # TRL builds a reference for beta != 0
        if reward_reference and args.sync_ref_model:
            raise ValueError(
                f"{type(self).__name__}: sync_ref_model=True updates TRL's reference model, which TRL builds only for "
                f"beta != 0, but beta=0 with kl_penalty_fn={args.kl_penalty_fn!r} (the KL in the reward); set "
                "sync_ref_model=False, or put the KL in the loss (beta > 0)"
            )
        super().__init__(model, reward_funcs, args, train_dataset, eval_dataset, processing_class, **kwargs)
        if reward_reference and not is_peft_model(self.model):  # PEFT: the policy with its adapter off
            self.ref_model = reference_model(self, kwargs.get("quantization_config"))

        self.algorithm = algorithm
        self.advantage_fn = components.advantage_fn
        self.kl_penalty_fn = components.kl_penalty_fn
        self.loss_step = LossStep(
            self,
            components,
            args,
            policy_term=lambda mode, **inputs: self._policy_loss(mode, **inputs),
            trainer_terms=lambda *terms: self._add_trainer_terms(*terms),
        )
        self.rollout_correction = args.build_rollout_correction()
        self.dynamic_sampler = DynamicSampler(self)
        self._gathered_rewards: torch.Tensor | None = None
        self._window_batches: list[Any] | None = None  # the raw batches of the next optimizer window
        self._window_queue: list[dict[str, Any]] = []  # its prepared micro-batches, with the window's counts

    @classmethod
    def _resolve_args(cls, model, args: Any) -> GRPOFamilyConfig:
        """`args` as the algorithm's config: itself, its defaults when None, or converted from TRL's config."""
        return trainer_config(cls.__name__, model, args, cls.config_class, cls.config_class.algorithm)

    # ---- optimizer-window normalization ----------------------------------------------------------------------

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """The training loop fetches an optimizer window's batches before its first micro-batch runs: keep them, so
        that the window's counts can be taken when it starts (`_start_window`)."""
        batches, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        self._window_batches = list(batches)
        return batches, num_items

    def next_micro_batch(self, generation_batch):
        if not self.model.training:
            return self.trl_prepare_inputs(generation_batch)
        if not self._window_queue:
            self._start_window(generation_batch)
        return self._window_queue.pop(0)

    def _start_window(self, generation_batch) -> None:
        """Prepare every micro-batch of the optimizer window that starts now with TRL's `trl_prepare_inputs` (which
        generates whenever a micro-batch starts a new generation batch: a window may span several when
        `steps_per_generation` is not a multiple of the accumulation steps; the weights do not change within a
        window, so generating early samples from the same policy), then count the window's tokens and rows over
        every micro-batch and process (docs/design.md §2.6), and queue the micro-batches with the counts."""
        batches = self._window_batches or [generation_batch]
        self._window_batches = None
        start, prepared = self.generation_step, []
        try:
            for offset, batch in enumerate(batches):
                self.generation_step = start + offset
                prepared.append(self.trl_prepare_inputs(batch))
        finally:
            self.generation_step = start
        window = self.count_window(prepared)
        self._window_queue = [{**inputs, **window} for inputs in prepared]

    def micro_batch_counts(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """What a micro-batch adds to the window's counts (`global_valid_toks` tokens, `global_valid_seqs` rows)."""
        mask = _loss_mask(batch)
        if self.args.turns_as_samples:  # each model turn is a sample of the seq-mean aggregations
            rows = segment_turns(mask).count.sum().float()
        else:
            rows = torch.full((), float(mask.size(0)), device=mask.device)  # filled on the device: no host sync
        return {"global_valid_toks": mask.sum().float(), "global_valid_seqs": rows}

    def _window_kwargs(self, inputs: dict[str, Any], mode: str) -> dict[str, Any]:
        """The counts the losses aggregate by: the window's in training, the micro-batch's own in eval."""
        return {name: inputs[name] for name in self._window} if mode == "train" else self.micro_batch_counts(inputs)

    # ---- the loss --------------------------------------------------------------------------------------------

    def micro_batch_loss(self, model, inputs):
        """TRL's fused log-prob pass on the micro-batch, then the loss step (`trl_ext.trainers.core.loss_step`)."""
        mode = "train" if self.model.training else "eval"
        logps, entropies, aux_loss = self.policy_log_probs(model, inputs)
        batch = StepBatch(
            logprob=logps,
            entropy=entropies,
            mask=_loss_mask(inputs).bool(),
            advantages=inputs["advantages"],
            old_logprob=inputs.get("old_per_token_logps"),
            sampling_logprob=inputs.get("sampling_per_token_logps"),
            ref_logprob=inputs.get("ref_per_token_logps"),
            importance_sampling_ratio=inputs.get("importance_sampling_ratio"),  # vLLM's / the rollout correction's
            aux_loss=aux_loss if self.aux_loss_enabled else None,
            loss_inputs={"expert_mask": inputs.get("expert_mask")},
            source=inputs,
        )
        loss = self.loss_step(batch, self._window_kwargs(inputs, mode), mode)
        self.beta = self.loss_step.beta  # TRL's generation reads it (reference log-probs)
        return loss

    def policy_log_probs(self, model, inputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The policy's per-token log-probs, entropies and router aux loss on the micro-batch: TRL's fused pass (a
        family may compute them otherwise: distillation's dense modes)."""
        completion_ids = inputs["completion_ids"]
        return self.log_probs_and_entropies(
            model,
            torch.cat([inputs["prompt_ids"], completion_ids], dim=1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1),
            completion_ids.size(1),
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **{key: inputs.get(key) for key in _MULTIMODAL_KEYS},
        )

    def _add_trainer_terms(
        self, mode: str, batch: StepBatch, window: dict[str, Any], loss: torch.Tensor, metrics: dict[str, Any]
    ) -> torch.Tensor:
        """The micro-batch's loss with the trainer's own terms (none here; the critic's value loss in critic PPO),
        their metrics added to `metrics` (declared in `trainer_metrics`)."""
        return loss

    def _policy_loss(self, mode: str, **inputs: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The algorithm's policy loss on one micro-batch: its share of the window's loss, and its metrics (a family
        may weigh it otherwise: MIX's reference weighting, distillation's dense term)."""
        return self.loss_step.policy_loss(mode, **inputs)

    # ---- checkpoints: the state trl_ext adds to TRL's (`trl_ext_state.json`) ---------------------------------------

    def _checkpoint_state(self) -> dict[str, Any]:
        """What a resumed run needs beyond TRL's checkpoint: the adapted KL and entropy coefficients."""
        state = self.loss_step.state_dict()
        if self.kl_penalty_fn is not None and self.kl_penalty_fn.adaptive:
            state["kl_penalty_coef"] = self.kl_penalty_fn.kl_coef
        return state

    def _restore_checkpoint_state(self, state: dict[str, Any]) -> None:
        self.loss_step.load_state_dict(state)
        self.beta = self.loss_step.beta
        if self.kl_penalty_fn is not None and "kl_penalty_coef" in state:
            self.kl_penalty_fn.kl_coef = state["kl_penalty_coef"]

    def save_trl_ext_state(self, folder: str) -> None:
        state = self._checkpoint_state()
        if state and self.args.should_save:
            with open(os.path.join(folder, _STATE_FILE), "w") as f:
                json.dump(state, f)

    def load_trl_ext_state(self, folder: str) -> None:
        path = os.path.join(folder, _STATE_FILE)
        if os.path.exists(path):
            with open(path) as f:
                self._restore_checkpoint_state(json.load(f))


def reference_model(trainer: trl.GRPOTrainer, quantization_config: Any = None) -> torch.nn.Module:
    """A frozen copy of the initial policy for the KL penalty on the rewards, built, loaded and wrapped as TRL builds
    its own reference model for beta != 0 (TRL's fused log-prob head; DeepSpeed, FSDP or accelerate)."""
    args, policy = trainer.args, trainer.model
    kwargs = dict(args.model_init_kwargs or {})
    if quantization_config is not None:
        kwargs["quantization_config"] = quantization_config
    if args.distributed_state.distributed_type in ("MULTI_GPU", "DEEPSPEED"):
        kwargs["device_map"] = None
    kwargs.setdefault("trust_remote_code", args.trust_remote_code)
    kwargs.setdefault("dtype", policy.dtype)
    kwargs.setdefault("attn_implementation", policy.config._attn_implementation)
    reference = create_model_from_path(get_config_model_id(policy.config), **kwargs)
    if args.disable_dropout:
        disable_dropout_in_model(reference)
    add_fused_lm_head(reference, temperature=trainer.temperature, cast_lm_head_to_fp32=args.cast_lm_head_to_fp32)
    if trainer.is_deepspeed_enabled:
        return prepare_deepspeed(reference, trainer.accelerator)
    if trainer.is_fsdp_enabled:
        return prepare_fsdp(reference, trainer.accelerator)
    return trainer.accelerator.prepare_model(reference, evaluation_mode=True)


def _check_prompt_column(owner: str, split: str, dataset: Any) -> None:
    if dataset is None:
        return
    columns = getattr(dataset, "column_names", None)
    if columns is None and getattr(dataset, "features", None) is not None:
        columns = list(dataset.features)
    if columns is not None and "prompt" not in columns:
        raise ValueError(
            f"{owner}: {split} has no 'prompt' column (columns: {', '.join(map(repr, columns)) or 'none'}); "
            "rename the column holding the prompts to 'prompt', e.g. dataset.rename_column('question', 'prompt')"
        )
