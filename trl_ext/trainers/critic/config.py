"""The critic PPO family's config (`CriticFamilyConfig`): a value model (or a value head on the policy's backbone)
trained beside the policy, whose values make the GAE advantages."""

from __future__ import annotations

from dataclasses import dataclass

from ..._validation import check_bool, check_number
from ...losses.value import check_cliprange_value
from ..core.arguments import CriticArguments
from ..core.config_fields import check_kwargs, check_text
from ..grpo.config import GRPOFamilyConfig

SHARED_BACKBONE_VF_COEF = 0.1  # vf_coef of TRL's former PPOTrainer, whose value head sat on the policy's backbone


@dataclass
class CriticFamilyConfig(CriticArguments, GRPOFamilyConfig):
    """Base of the critic PPO config: a value model trained beside the policy, whose values make the GAE advantages
    (`advantage_fn="ppo"`). Groups of one are allowed (`num_generations=1`, the reference's `repeat_times`), for an
    advantage function that does not compare the samples of a group."""

    def __post_init__(self) -> None:
        # TRL's GRPOConfig requires two generations per prompt (its advantage is group-relative); critic PPO's is not.
        # TRL's checks run with a stand-in group of 2; whether the advantage takes groups of one is checked after.
        given = (self.num_generations, self.num_generations_eval)
        stand_in = self.num_generations == 1
        if stand_in:
            self.num_generations = 2
            self.num_generations_eval = 2 if self.num_generations_eval in (None, 1) else self.num_generations_eval
        try:
            super().__post_init__()
        finally:
            if stand_in:
                self.num_generations, self.num_generations_eval = given
        self._check_group_size()

    def _check_fields(self) -> None:
        super()._check_fields()
        check_critic_fields(self)

    def _check_group_size(self) -> None:
        advantage = self.components.advantage_fn
        if self.num_generations == 1 and getattr(advantage, "uses_groups", True):
            raise ValueError(
                f"{type(self).__name__}: num_generations=1 gives every prompt a group of one, but advantage_fn="
                f"{self.advantage_fn_name!r} compares the samples of a group; use num_generations >= 2 or an "
                "advantage that does not need groups (ppo, reinforce, reinforceplusplus)"
            )

    @property
    def critic_lr(self) -> float:
        """The critic optimizer's learning rate (`critic_learning_rate`, else `learning_rate`)."""
        return self.learning_rate if self.critic_learning_rate is None else self.critic_learning_rate

    def composition(self) -> dict[str, str]:
        parts = super().composition()
        if self.shared_backbone:
            critic = f"a value head on the policy's backbone, vf_coef {self.vf_coef:g}"
        else:
            critic = (
                f"value model {self.value_model_name_or_path or 'initialized from the policy'}, learning rate "
                f"{self.critic_lr:g}"
            )
        parts["critic"] = (
            f"{critic}, cliprange_value {self.cliprange_value:g}, warm-up {self.critic_warmup_steps} steps"
        )
        return parts


def check_critic_fields(config: CriticArguments) -> None:
    """Check the critic's fields (`CriticArguments`) of a config, naming the config and the field; a shared
    backbone's `vf_coef` defaults to `SHARED_BACKBONE_VF_COEF` (the synchronous and asynchronous configs' check)."""
    owner = type(config).__name__
    check_cliprange_value(owner, config.cliprange_value)
    check_number(owner, "critic_learning_rate", config.critic_learning_rate, ge=0, allow_none=True)
    check_number(owner, "critic_warmup_steps", config.critic_warmup_steps, ge=0, integer=True)
    check_text(owner, "value_model_name_or_path", config.value_model_name_or_path)
    config.value_model_init_kwargs = check_kwargs(owner, "value_model_init_kwargs", config.value_model_init_kwargs)
    check_bool(owner, "shared_backbone", config.shared_backbone)
    check_number(owner, "vf_coef", config.vf_coef, ge=0, allow_none=True)
    if config.shared_backbone and config.vf_coef is None:  # (with a separate value model vf_coef stays unset)
        config.vf_coef = SHARED_BACKBONE_VF_COEF
