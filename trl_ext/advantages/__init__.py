"""Advantage estimators ported from Trinity-RFT / verl for Hugging Face TRL.

Usage:

    from trl_ext.advantages import get_advantage_fn

    fn = get_advantage_fn("grpo", epsilon=1e-6)
    advantages = fn(rewards, group_ids)             # [N]
    result = fn.compute(rewards, group_ids)         # AdvantageResult(advantages, keep, source)

Registered names (`ADVANTAGE_FNS`): `grpo`, `rloo`, `reinforce`, `opmd`, `asymre`, `rec`,
`step_wise_grpo`, `gigpo` (per-step rows of multi-turn runs), `raft` (RAFT's best-of-group selection) (group
estimators, `[N]`) and
`ppo` (GAE from a critic's `values`, with the critic's targets in `AdvantageResult.returns`), `reinforceplusplus`,
`remax`, `on_policy_distill`, `jsd`, `clipb`, `clipv`, `grpo_verl`, `opmd_verl`, `asymre_verl`, `gpg` (verl's
GPG) (token-level, `[N, T]`).

From verl 0.9.1: `grpo_passk` (Pass@k: only each group's best sample) and `opo` (length-weighted group baseline)
(group estimators, `[N]`); `gdpo` (GRPO per reward component, weighted sum, whitened),
`reinforce_plus_plus_baseline` (group-centred outcome, whitened) and `optimal_token_baseline` (per-token
variance-weighted group baseline; `multi_turn=True`: verl's `tir_optimal_token_baseline`) (token-level, `[N, T]`).
Each module also exposes its math as a pure function (`gdpo_advantages`, `grpo_passk_advantages`, `opo_advantages`,
`reinforce_plus_plus_baseline_advantages`, `optimal_token_baseline`, `multi_turn_optimal_token_baseline`).

An estimator subclasses `AdvantageFn`, declares its hyperparameters as `arguments` (`Argument` specs, see
`trl_ext.components`) and is registered with `@register_advantage(name)`.

`keep` marks the rows an estimator keeps; `source` (None unless GRPO's `duplicate_experiences` copied
groups) maps each output row to the input sample it is a copy of; `token_keep` marks the tokens a token filter
(`clipb`, `clipv`) keeps in the loss; `metrics` holds the reference's advantage metrics (see `AdvantageResult`).
`fn.needed_inputs()` names the inputs an instance reads given its arguments (a subset of `inputs()`).
"""

from ..components import Argument
from .base import ADVANTAGE_FNS, AdvantageFn, AdvantageResult, get_advantage_fn, register_advantage
from .broadcast import AsymREVerlAdvantage, GRPOVerlAdvantage, OPMDVerlAdvantage
from .clip import ClipBAdvantage, ClipVAdvantage
from .gae import GAEAdvantage
from .gdpo import GDPOAdvantage
from .gigpo import GiGPOAdvantage
from .gpg import GPGAdvantage
from .group import (
    AsymREAdvantage,
    GRPOAdvantage,
    OPMDAdvantage,
    RAFTSelection,
    RECAdvantage,
    ReinforceAdvantage,
    RLOOAdvantage,
    StepWiseGRPOAdvantage,
)
from .jsd import JSDAdvantage
from .on_policy_distill import OnPolicyDistillAdvantage
from .opo import OPOAdvantage
from .optimal_token_baseline import OptimalTokenBaselineAdvantage
from .passk import GRPOPassKAdvantage
from .reinforce_plus_plus import ReinforcePlusPlusAdvantage, ReinforcePlusPlusBaselineAdvantage
from .remax import REMAXAdvantage

__all__ = [
    "ADVANTAGE_FNS",
    "AdvantageFn",
    "AdvantageResult",
    "Argument",
    "AsymREAdvantage",
    "AsymREVerlAdvantage",
    "ClipBAdvantage",
    "ClipVAdvantage",
    "GAEAdvantage",
    "GDPOAdvantage",
    "GPGAdvantage",
    "GRPOAdvantage",
    "GRPOPassKAdvantage",
    "GRPOVerlAdvantage",
    "GiGPOAdvantage",
    "JSDAdvantage",
    "OPMDAdvantage",
    "OPMDVerlAdvantage",
    "OPOAdvantage",
    "OnPolicyDistillAdvantage",
    "OptimalTokenBaselineAdvantage",
    "RAFTSelection",
    "RECAdvantage",
    "REMAXAdvantage",
    "RLOOAdvantage",
    "ReinforceAdvantage",
    "ReinforcePlusPlusAdvantage",
    "ReinforcePlusPlusBaselineAdvantage",
    "StepWiseGRPOAdvantage",
    "get_advantage_fn",
    "register_advantage",
]
