"""verl 0.9's `verl.trainer.ppo.core_algos` loss API over trl_ext's losses (pure torch; verl is not imported).

    from trl_ext.compat.verl import agg_loss, compute_policy_loss, get_policy_loss_fn, kl_penalty

Names, signatures, defaults and return shapes are verl 0.9.1's:

* `agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None, global_batch_size=None,
  loss_scale_factor=None)`: `token-mean`, `token-sum`, `seq-mean-token-sum`, `seq-mean-token-mean` and
  `seq-mean-token-sum-norm`, with verl's global-batch scaling (see `agg_weights`).
* `compute_policy_loss(...) -> (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)`: the (deprecated in verl)
  dual-clip PPO entry point.
* `get_policy_loss_fn(name)` / `register_policy_loss(name)` / `POLICY_LOSS_REGISTRY`: `vanilla`, `gspo`, `sapo`,
  `cispo`, each `fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
  rollout_is_weights) -> (pg_loss, {"actor/pg_clipfrac": float, "actor/ppo_kl": float,
  "actor/pg_clipfrac_lower": float})`. `config` is an object or a mapping (verl's `ActorConfig` / `DictConfig`);
  it is read as verl reads it: `clip_ratio`, `clip_ratio_low`, `clip_ratio_high`, `clip_ratio_c` (vanilla),
  `tau_pos` / `tau_neg` (sapo) and `global_batch_info` (the keyword arguments of `agg_loss`).
* The same registry also holds `gpg` (metrics `{}`), `geo_mean` (GMPO: verl's three metrics; `loss_agg_mode` and
  `global_batch_info` are ignored, as in verl: the mean over the micro-batch's rows) and `dro` (metrics
  `{"actor/ppo_kl": float}`; reads `policy_loss.dro_beta`, which must be > 0).
* And `clip_cov` / `kl_cov` (arXiv 2505.22617; read `policy_loss.clip_cov_ratio`, `clip_cov_lb`, `clip_cov_ub` /
  `policy_loss.kl_cov_ratio`, `ppo_kl_coef`; metrics `{"actor/pg_clipfrac", "actor/ppo_kl"}` / `{"actor/ppo_kl"}`, the
  latter the mean |lp − old|; clip_cov's random draw uses torch's global CPU generator, as verl's) and `dppo_tv` /
  `dppo_kl` (arXiv 2602.04879; `clip_ratio*` are divergence thresholds, `clip_ratio_c` the importance-ratio
  truncation, default 20.0; verl's three metrics).
* `kl_penalty(logprob, ref_logprob, kl_penalty)`: `kl`/`k1`, `abs`, `mse`/`k2`, `low_var_kl`/`k3` and their
  straight-through `+` variants (value of the estimator, gradient of k2).
* `compute_gpg_outcome_advantage(token_level_rewards, response_mask, index, epsilon=1e-6, f_norm=1.0, alpha=1.0,
  config=None) -> (advantages, returns)`: verl's GPG advantage (trl_ext's `gpg` estimator; `epsilon` and `alpha` are
  unused, as in verl).
* `compute_gae_advantage_return(token_level_rewards, values, response_mask, gamma, lam) -> (advantages, returns)`:
  verl's GAE (`trl_ext.advantages.gae.gae_advantage_return` with verl's skipping of masked positions, then verl's
  `masked_whiten` at every position: the masked positions hold what verl's do).
* `compute_value_loss(vpreds, returns, values, response_mask, cliprange_value, loss_agg_mode="token-mean",
  dp_size=1, batch_num_tokens=None, global_batch_size=None, loss_scale_factor=None) -> (vf_loss, vf_clipfrac)`:
  0.5·`agg_loss` of `trl_ext.losses.value.clipped_value_terms`, clipfrac = masked mean of [L2 > L1].

The modules: `aggregation` (`agg_loss`, `agg_weights`), `registry` (the policy-loss registry and verl's config
reading), `policy_losses` (the losses, and how they reuse trl_ext's), `kl` (`kl_penalty`) and `advantages` (GPG, GAE
and the value loss, and where those differ from verl). Every public name is re-exported here, so
`trl_ext.compat.verl.<name>` is verl's `core_algos.<name>`.
"""

from .advantages import compute_gae_advantage_return, compute_gpg_outcome_advantage, compute_value_loss
from .aggregation import AGG_LOSS_MODES, agg_loss, agg_weights
from .kl import KL_PENALTIES, kl_penalty
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

__all__ = [
    "AGG_LOSS_MODES",
    "KL_PENALTIES",
    "POLICY_LOSS_REGISTRY",
    "agg_loss",
    "agg_weights",
    "compute_gae_advantage_return",
    "compute_gpg_outcome_advantage",
    "compute_policy_loss",
    "compute_policy_loss_cispo",
    "compute_policy_loss_clip_cov",
    "compute_policy_loss_dppo_kl",
    "compute_policy_loss_dppo_tv",
    "compute_policy_loss_dro",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_gpg",
    "compute_policy_loss_gspo",
    "compute_policy_loss_kl_cov",
    "compute_policy_loss_sapo",
    "compute_policy_loss_vanilla",
    "compute_value_loss",
    "get_policy_loss_fn",
    "kl_penalty",
    "register_policy_loss",
]
