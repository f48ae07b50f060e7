"""verl 0.9's rollout correction: importance-sampling weights and rejection masks for the sampler–trainer gap.

A port of `verl/trainer/ppo/rollout_corr_helper.py` (verl 0.9.1; its config is `algorithm.rollout_correction`,
`RolloutCorrectionConfig`), pure torch. The completions are sampled by one policy (vLLM, in its precision and with
its kernels: π_rollout) and trained as if sampled by another (the trained model's log-probs at generation time:
π_old). The correction reweights or drops the tokens where the two disagree (Liu, Li, Fu, Wang, Liu, Shen 2025, "When
Speed Kills Stability: Demystifying RL Collapse from the Training-Inference Mismatch", https://richardli.xyz/rl-collapse).

Per token, ℓ = log π_old − log π_rollout (verl's `log_ratio`, log r); m is the response mask.

**Importance sampling** (`rollout_is`; the weight multiplies the token's policy loss, verl's `rollout_is_weights`):

    token      w_t = exp(clamp(ℓ_t, ±20))
    sequence   w_t = exp(clamp(Σ_valid ℓ, ±20)) on every token of the row

then `rollout_is_threshold`: a number U (or a number-like string, e.g. "2.0") truncates, w ← min(w, U) (TIS); a string
"L_U" masks, w ← w where L ≤ w ≤ U, else 0 (IcePop). `rollout_is_batch_normalize` divides by the weights' mean over the
batch (the valid tokens' mean for `token`, the mean over sequences of each sequence's weight for `sequence`; no change
when that mean is ≤ 1e-8). The weights are detached and 0 at masked positions.

**Rejection** (`rollout_rs`: one criterion or a comma-separated list, all of which must pass; a rejected token leaves
the response mask). From ℓ clamped to ±20, per token k1 = −ℓ, k2 = ½ℓ², k3 = e^ℓ − 1 − ℓ, and the criteria

    token_k1, token_k2, token_k3            the token's own value: rejects the token
    seq_sum_k1, seq_sum_k2, seq_sum_k3      the sum over the row's valid tokens: rejects the whole row
    seq_mean_k1, seq_mean_k2, seq_mean_k3   the mean over the row's valid tokens: rejects the whole row
    seq_max_k2, seq_max_k3                  the max over the row's valid tokens: rejects the whole row

`rollout_rs_threshold` gives one threshold per criterion (comma-separated, or one for all): for a k1 criterion a
string "L_U" keeps log L ≤ value ≤ log U (a single number U means L = 1/U); k1 = −ℓ = log(π_rollout / π_old), as verl
defines it, so the bounds are on π_rollout / π_old (the single-number form is symmetric, the same either way). For k2 /
k3 a single number U > 0 keeps value ≤ U.

**Metrics** (verl's names; `compute_rollout_correction_and_rejection_mask` prefixes them with `rollout_corr/`):

* IS: `rollout_is_mean`, `rollout_is_max`, `rollout_is_min`, `rollout_is_std`, `rollout_is_eff_sample_size`,
  `rollout_is_ratio_fraction_high` / `_low` (raw weights beyond U / below L, L = 1/U with TIS), `rollout_is_seq_mean`,
  `_seq_std`, `_seq_max`, `_seq_min`, `_seq_max_deviation` (of each sequence's mean weight, from 1),
  `rollout_is_seq_fraction_high` / `_low`, and `rollout_is_oob_ratio` (IcePop), `rollout_is_batch_norm_factor`
  (batch normalization). Computed before batch normalization; std and ESS on the weights clamped to [0, U].
* Rejection, per criterion C: `rollout_rs_C_mean`, `_max`, `_min`, `_std`, `_fraction_high`, `_fraction_low`,
  `_seq_mean`, `_seq_std`, `_seq_max`, `_seq_min`, `_seq_max_deviation`, `_seq_fraction_high`, `_seq_fraction_low`
  (k1), `_masked_fraction`, `_seq_masked_fraction`; overall `rollout_rs_masked_fraction`,
  `rollout_rs_seq_masked_fraction`.
* Off-policy diagnostics (always): `training_ppl`, `training_log_ppl`, `rollout_ppl`, `rollout_log_ppl`, `kl`
  (mean of log π_rollout − log π_old), `k3_kl`, `log_ppl_diff`, `log_ppl_abs_diff`, `log_ppl_diff_max`,
  `log_ppl_diff_min`, `ppl_ratio`, `chi2_token`, `chi2_seq`.

Where this port differs from verl, deliberately:

* Metrics are detached 0-dim tensors and nothing waits for the device with a bool mask (verl calls `.item()` per
  metric); a number mask holding only 0 and 1 is accepted at the cost of one check.
* Sequence statistics (the `_seq_*` metrics, the sequence-level fractions, max / min, perplexities and `chi2_seq`) are
  over the rows with at least one valid token; verl's include rows without any in some of them.
* An empty batch, or one without a valid token, gives weights 0, an all-False mask and metrics 0 (verl raises), and
  the effective sample size is 0 when every weight is 0 (verl divides by zero).
* NaN or ±inf in a log-prob at a valid position makes every weight (TIS or IcePop), every statistic of the weights
  and divergences and every share of ratios beyond a bound NaN and rejects every token (the rule of `trl_ext.losses`:
  a broken input is never silently turned into a finite correction); at masked positions it never reaches anything.
* Settings are checked when given (`RolloutCorrection`), each error naming its setting: thresholds must be finite,
  booleans are errors, and a setting that would do nothing (`rollout_rs_threshold` without `rollout_rs`, ...) too.
* verl's `bypass_mode` / `loss_type` (π_rollout used as π_old) are not settings here (`bypass_mode` is a policy
  loss of `trl_ext.compat.verl`): the trainer's π_old is the trained policy's own log-probs.
"""

from .computation import EPS, SAFETY_BOUND, Metrics
from .functions import (
    compute_offpolicy_metrics,
    compute_rollout_correction_and_rejection_mask,
    compute_rollout_correction_weights,
    compute_rollout_rejection_mask,
)
from .settings import (
    DEFAULT_IS_THRESHOLD,
    METRIC_PREFIX,
    ROLLOUT_IS_LEVELS,
    ROLLOUT_RS_OPTIONS,
    RolloutCorrection,
    parse_rollout_is_threshold,
    parse_rollout_rs,
    parse_rollout_rs_thresholds,
)

__all__ = [
    "DEFAULT_IS_THRESHOLD",
    "EPS",
    "METRIC_PREFIX",
    "ROLLOUT_IS_LEVELS",
    "ROLLOUT_RS_OPTIONS",
    "SAFETY_BOUND",
    "Metrics",
    "RolloutCorrection",
    "compute_offpolicy_metrics",
    "compute_rollout_correction_and_rejection_mask",
    "compute_rollout_correction_weights",
    "compute_rollout_rejection_mask",
    "parse_rollout_is_threshold",
    "parse_rollout_rs",
    "parse_rollout_rs_thresholds",
]
