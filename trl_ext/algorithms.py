"""The algorithm table: Trinity-RFT's algorithms with their flags and default components.

    from trl_ext import get_algorithm
    spec = get_algorithm("sapo")
    spec.policy_loss_fn, spec.advantage_fn, spec.kl_loss_fn, spec.entropy_loss_fn  # 'sapo', 'grpo', 'none', 'none'
    spec.trainer_class                                                             # the TRL trainer

The flags (`use_critic`, `use_reference`, `compute_advantage_in_trainer`, `can_balance_batch`,
`schema`) and default components are those of Trinity-RFT's `trinity.algorithm.algorithm` table and
its `default_config()`; `repeat_times` is the group size (TRL's `num_generations`). Trainer and config
classes are attached by `trl_ext.trainers` (imported lazily, so this module needs no trl); until an
algorithm has one, asking for it raises an error that says so.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

_TRAINERS: dict[str, tuple[str, str]] = {}
"""name -> ("module:ConfigClass", "module:TrainerClass"), filled by `register_trainer`."""


def register_trainer(name: str, config_class: str, trainer_class: str) -> None:
    """Attach a config and a trainer class (as `"module:Class"` import paths) to algorithm `name`."""
    get_algorithm(name)
    _TRAINERS[name] = (config_class, trainer_class)


def _import(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Paper:
    """An algorithm's paper: the one citation its model cards, `trl-ext list` and the docs use."""

    title: str
    arxiv: str

    def __str__(self) -> str:
        return f"{self.title} (arXiv {self.arxiv})"

    @property
    def year(self) -> int:
        return 2000 + int(self.arxiv[:2])


@dataclass(frozen=True)
class AlgorithmSpec:
    """One row of the algorithm table."""

    name: str
    description: str
    paper: Paper | None
    use_critic: bool
    use_reference: bool
    compute_advantage_in_trainer: bool
    can_balance_batch: bool
    schema: str
    policy_loss_fn: str
    advantage_fn: str | None
    kl_loss_fn: str
    kl_penalty_fn: str
    entropy_loss_fn: str
    repeat_times: int
    sample_strategy: str = "default"

    @property
    def has_trainer(self) -> bool:
        return self.name in _TRAINERS

    @property
    def config_class(self) -> type:
        return _import(self._trainer_paths()[0])

    @property
    def trainer_class(self) -> type:
        return _import(self._trainer_paths()[1])

    @property
    def class_names(self) -> tuple[str, str]:
        """The names of the config and the trainer class, `("SAPOConfig", "SAPOTrainer")`, without importing them."""
        config, trainer = self._trainer_paths()
        return config.rpartition(":")[2], trainer.rpartition(":")[2]

    def _trainer_paths(self) -> tuple[str, str]:
        if self.name not in _TRAINERS:
            with_trainer = ", ".join(sorted(_TRAINERS)) or "none yet"
            raise NotImplementedError(
                f"algorithm {self.name!r} has no trainer yet: its losses are available through "
                f"trl_ext.losses.get_policy_loss({self.policy_loss_fn!r}); algorithms with a trainer: {with_trainer}"
            )
        return _TRAINERS[self.name]

    def default_config(self) -> dict[str, Any]:
        """The reference's `default_config()`: the algorithm's default components."""
        return {
            "repeat_times": self.repeat_times,
            "sample_strategy": self.sample_strategy,
            "policy_loss_fn": self.policy_loss_fn,
            "advantage_fn": self.advantage_fn,
            "kl_penalty_fn": self.kl_penalty_fn,
            "kl_loss_fn": self.kl_loss_fn,
            "entropy_loss_fn": self.entropy_loss_fn,
        }


def _spec(
    name: str,
    description: str,
    paper: Paper | None,
    *,
    flags: str,
    schema: str = "experience",
    policy: str,
    advantage: str | None,
    kl_loss: str,
    entropy: str,
    repeat: int,
    sample: str = "default",
) -> AlgorithmSpec:
    # flags: four letters for use_critic, use_reference, compute_advantage_in_trainer, can_balance_batch
    critic, reference, adv_in_trainer, balance = (c == "T" for c in flags)
    return AlgorithmSpec(
        name=name,
        description=description,
        paper=paper,
        use_critic=critic,
        use_reference=reference,
        compute_advantage_in_trainer=adv_in_trainer,
        can_balance_batch=balance,
        schema=schema,
        policy_loss_fn=policy,
        advantage_fn=advantage,
        kl_loss_fn=kl_loss,
        kl_penalty_fn="none",
        entropy_loss_fn=entropy,
        repeat_times=repeat,
        sample_strategy=sample,
    )


# fmt: off
_CHORD = Paper(
    "On-Policy RL Meets Off-Policy Experts: Harmonizing Supervised Fine-Tuning and Reinforcement Learning via "
    "Dynamic Weighting",
    "2508.11408",
)
ALGORITHMS: dict[str, AlgorithmSpec] = {s.name: s for s in [
    _spec("sft", "Supervised fine-tuning (negative log-likelihood).",
          None,
          flags="FFFT", schema="sft", policy="sft", advantage=None, kl_loss="none", entropy="none", repeat=1),
    _spec("ppo", "PPO with a critic and GAE advantages.",
          Paper("Proximal Policy Optimization Algorithms", "1707.06347"),
          flags="TTTT", policy="ppo", advantage="ppo", kl_loss="k2", entropy="default", repeat=1),
    _spec("grpo", "GRPO: group-normalized advantages, dual-clip PPO loss.",
          Paper("DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models", "2402.03300"),
          flags="FTFT", policy="ppo", advantage="grpo", kl_loss="k2", entropy="default", repeat=2),
    _spec("reinforceplusplus", "REINFORCE++: batch-whitened discounted returns, PPO loss.",
          Paper("REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models", "2501.03262"),
          flags="FTTT", policy="ppo", advantage="reinforceplusplus", kl_loss="k2", entropy="default", repeat=2),
    _spec("rloo", "RLOO: leave-one-out baseline, PPO loss.",
          Paper("Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs",
                "2402.14740"),
          flags="FTTT", policy="ppo", advantage="rloo", kl_loss="k2", entropy="default", repeat=2),
    _spec("opmd", "Online policy mirror descent.",
          Paper("Kimi k1.5: Scaling Reinforcement Learning with LLMs", "2501.12599"),
          flags="FTFT", policy="opmd", advantage="opmd", kl_loss="k2", entropy="default", repeat=2),
    _spec("asymre", "AsymRE: REINFORCE with a shifted (asymmetric) group baseline.",
          Paper("Asymmetric REINFORCE for off-Policy Reinforcement Learning", "2506.20520"),
          flags="FFFT", policy="opmd", advantage="asymre", kl_loss="none", entropy="default", repeat=2),
    _spec("dpo", "Direct Preference Optimization on (chosen, rejected) pairs.",
          Paper("Direct Preference Optimization: Your Language Model is Secretly a Reward Model", "2305.18290"),
          flags="FTFF", schema="dpo", policy="dpo", advantage=None, kl_loss="k2", entropy="default", repeat=2),
    _spec("topr", "Tapered Off-Policy REINFORCE.",
          Paper("Tapered Off-Policy REINFORCE: Stable and efficient reinforcement learning for LLMs", "2503.14286"),
          flags="FTFT", policy="topr", advantage="reinforce", kl_loss="none", entropy="none", repeat=2),
    _spec("cispo", "CISPO: clipped, stop-gradient IS weight on a REINFORCE loss.",
          Paper("MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention", "2506.13585"),
          flags="FTFT", policy="cispo", advantage="grpo", kl_loss="none", entropy="none", repeat=2),
    _spec("gspo", "GSPO: sequence-level (length-normalized) importance ratio.",
          Paper("Group Sequence Policy Optimization", "2507.18071"),
          flags="FTFT", policy="gspo", advantage="grpo", kl_loss="none", entropy="none", repeat=2),
    _spec("sapo", "SAPO: soft, temperature-controlled gate instead of hard clipping.",
          Paper("Soft Adaptive Policy Optimization", "2511.20347"),
          flags="FTFT", policy="sapo", advantage="grpo", kl_loss="none", entropy="none", repeat=2),
    _spec("mix", "RL on rollouts plus a fixed share of SFT on expert demonstrations.",
          _CHORD,
          flags="FTFT", policy="mix", advantage="grpo", kl_loss="k2", entropy="mix", repeat=8, sample="mix"),
    _spec("mix_chord", "CHORD: scheduled mix of RL and phi-weighted SFT on expert data.",
          _CHORD,
          flags="FTFT", policy="mix_chord", advantage="grpo", kl_loss="k2", entropy="mix", repeat=8, sample="mix"),
    _spec("raft", "RAFT: SFT on the rewarded rollouts (rejection sampling fine-tuning).",
          Paper("RAFT: Reward rAnked FineTuning for Generative Foundation Model Alignment", "2304.06767"),
          flags="FFFT", policy="sft", advantage=None, kl_loss="none", entropy="none", repeat=1),
    _spec("sppo", "sPPO: policy gradient inside a log-space trust region.",
          Paper("sPPO", "2108.05828"),
          flags="FFFT", policy="sppo", advantage="grpo", kl_loss="none", entropy="none", repeat=2),
    _spec("rec", "REC: REINFORCE with off-policy clipping / weighting / regularization.",
          Paper("Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm", "2509.24203"),
          flags="FTFT", policy="rec", advantage="rec", kl_loss="none", entropy="none", repeat=2),
    _spec("multi_step_grpo", "GRPO over multi-turn runs: run-level advantages on every step.",
          Paper("DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models", "2402.03300"),
          flags="FTFT", policy="ppo", advantage="step_wise_grpo", kl_loss="k2", entropy="default", repeat=8),
    _spec("on_policy_distill", "On-policy distillation: teacher log-probs as per-token advantages.",
          Paper("On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes", "2306.13649"),
          flags="FFTT", policy="ppo", advantage="on_policy_distill", kl_loss="none", entropy="none", repeat=8),
]}
# fmt: on


def get_algorithm(name: str) -> AlgorithmSpec:
    """The table row of algorithm `name`; an unknown name is a ValueError listing the valid ones."""
    try:
        return ALGORITHMS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown algorithm {name!r}; valid names: {', '.join(ALGORITHMS)}") from None


# The trainers, attached by import path so that this module never imports trl.
_GRPO_FAMILY = {
    "grpo": "GRPO", "gspo": "GSPO", "cispo": "CISPO", "sapo": "SAPO", "topr": "TOPR", "sppo": "SPPO", "rec": "REC",
    "opmd": "OPMD", "asymre": "AsymRE", "reinforceplusplus": "ReinforcePlusPlus", "rloo": "RLOO", "raft": "RAFT",
}  # fmt: skip
_GRPO_FAMILY.update({"mix": "MIX", "mix_chord": "MIXCHORD", "on_policy_distill": "OnPolicyDistill"})
_GRPO_FAMILY["dpo"] = "DPO"  # a trl.DPOTrainer subclass, not GRPO-family, attached the same way
for _name, _prefix in _GRPO_FAMILY.items():
    register_trainer(_name, f"trl_ext.trainers:{_prefix}Config", f"trl_ext.trainers:{_prefix}Trainer")
