"""verl 0.9.1's `verl.trainer.ppo.core_algos` API over trl_ext's losses and estimators (pure torch; verl is not
imported), so `trl_ext.compat.verl.<name>` is verl's `core_algos.<name>`.

    from trl_ext.compat.verl import agg_loss, get_adv_estimator_fn, get_policy_loss_fn, kl_penalty

Names, signatures, defaults and return types are verl's:

* Aggregation: `agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None,
  global_batch_size=None, loss_scale_factor=None)` over `AGG_LOSS_MODES`, with verl's global-batch scaling
  (`agg_weights`).
* Policy losses: `compute_policy_loss` (deprecated dual-clip PPO) `-> (pg_loss, pg_clipfrac, ppo_kl,
  pg_clipfrac_lower)`; `POLICY_LOSS_REGISTRY` / `register_policy_loss` / `get_policy_loss_fn` with `vanilla`, `gspo`,
  `sapo`, `cispo`, `gpg`, `geo_mean`, `dro`, `clip_cov`, `kl_cov`, `dppo_tv`, `dppo_kl` and `bypass_mode`, each
  `fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights) -> (pg_loss,
  metrics)` (metrics: floats; `config` an object or a mapping, read as verl reads it); the unregistered
  `compute_policy_loss_reinforce`; `compute_entropy_loss(logits, response_mask, loss_agg_mode)`;
  `compute_value_loss(...) -> (vf_loss, vf_clipfrac)`.
* KL: `kl_penalty` (`KL_PENALTIES`, with the straight-through `+` variants), `kl_penalty_forward`, `compute_rewards`
  (the in-reward k1 penalty), `AdaptiveKLController` / `FixedKLController` (`.value`, `.update(current_kl, n_steps)`)
  and `get_kl_controller(kl_ctrl)`.
* Advantage estimators, each `-> (advantages, returns)` `[B, T]`, registered under `AdvantageEstimator`'s 14 names in
  `ADV_ESTIMATOR_REGISTRY` (`register_adv_est`, `get_adv_estimator_fn`): `compute_gae_advantage_return`,
  `compute_grpo_outcome_advantage`, `compute_grpo_vectorized_outcome_advantage`, `compute_rloo_outcome_advantage`,
  `compute_rloo_vectorized_outcome_advantage`, `compute_opo_outcome_advantage`,
  `compute_grpo_passk_outcome_advantage`, `compute_gdpo_outcome_advantage`, `compute_gpg_outcome_advantage`,
  `compute_reinforce_plus_plus_outcome_advantage`, `compute_reinforce_plus_plus_baseline_outcome_advantage`,
  `compute_remax_outcome_advantage`, `compute_optimal_token_baseline_advantage`,
  `compute_multi_turn_optimal_token_baseline_advantage`. `index` is verl's uid array (numpy), a list or an integer
  tensor; a missing required input is a TypeError naming the function and the input.
* `compute_pf_ppo_reweight_data(data, reweight_method, weight_pow)`: PF-PPO's resampling of a DataProto-like batch.

Each submodule's docstring gives its formulas and where it differs from verl.
"""

from .advantages import compute_gae_advantage_return, compute_gpg_outcome_advantage, compute_value_loss
from .aggregation import AGG_LOSS_MODES, agg_loss, agg_weights
from .entropy import compute_entropy_loss, entropy_from_logits
from .estimators import ADV_ESTIMATOR_REGISTRY, AdvantageEstimator, get_adv_estimator_fn, register_adv_est
from .kl import (
    KL_CONTROLLER_TYPES,
    KL_PENALTIES,
    AdaptiveKLController,
    FixedKLController,
    compute_rewards,
    get_kl_controller,
    kl_penalty,
    kl_penalty_forward,
)
from .outcome_advantages import (
    compute_gdpo_outcome_advantage,
    compute_grpo_outcome_advantage,
    compute_grpo_passk_outcome_advantage,
    compute_grpo_vectorized_outcome_advantage,
    compute_opo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_rloo_outcome_advantage,
    compute_rloo_vectorized_outcome_advantage,
)
from .pf_ppo import PF_PPO_REWEIGHT_METHODS, compute_pf_ppo_reweight_data
from .policy_losses import (
    compute_policy_loss,
    compute_policy_loss_cispo,
    compute_policy_loss_clip_cov,
    compute_policy_loss_dppo_kl,
    compute_policy_loss_dppo_tv,
    compute_policy_loss_dro,
    compute_policy_loss_geo_mean,
    compute_policy_loss_gpg,
    compute_policy_loss_gspo,
    compute_policy_loss_kl_cov,
    compute_policy_loss_sapo,
    compute_policy_loss_vanilla,
)
from .registry import POLICY_LOSS_REGISTRY, get_policy_loss_fn, register_policy_loss
from .rollout_losses import BYPASS_LOSS_TYPES, compute_policy_loss_bypass_mode, compute_policy_loss_reinforce
from .token_advantages import (
    compute_multi_turn_optimal_token_baseline_advantage,
    compute_optimal_token_baseline_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
)

__all__ = [
    "ADV_ESTIMATOR_REGISTRY",
    "AGG_LOSS_MODES",
    "BYPASS_LOSS_TYPES",
    "KL_CONTROLLER_TYPES",
    "KL_PENALTIES",
    "PF_PPO_REWEIGHT_METHODS",
    "POLICY_LOSS_REGISTRY",
    "AdaptiveKLController",
    "AdvantageEstimator",
    "FixedKLController",
    "agg_loss",
    "agg_weights",
    "compute_entropy_loss",
    "compute_gae_advantage_return",
    "compute_gdpo_outcome_advantage",
    "compute_gpg_outcome_advantage",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_grpo_vectorized_outcome_advantage",
    "compute_multi_turn_optimal_token_baseline_advantage",
    "compute_opo_outcome_advantage",
    "compute_optimal_token_baseline_advantage",
    "compute_pf_ppo_reweight_data",
    "compute_policy_loss",
    "compute_policy_loss_bypass_mode",
    "compute_policy_loss_cispo",
    "compute_policy_loss_clip_cov",
    "compute_policy_loss_dppo_kl",
    "compute_policy_loss_dppo_tv",
    "compute_policy_loss_dro",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_gpg",
    "compute_policy_loss_gspo",
    "compute_policy_loss_kl_cov",
    "compute_policy_loss_reinforce",
    "compute_policy_loss_sapo",
    "compute_policy_loss_vanilla",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_rewards",
    "compute_rloo_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "compute_value_loss",
    "entropy_from_logits",
    "get_adv_estimator_fn",
    "get_kl_controller",
    "get_policy_loss_fn",
    "kl_penalty",
    "kl_penalty_forward",
    "register_adv_est",
    "register_policy_loss",
]
