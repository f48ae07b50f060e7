"""verl 0.9's rollout correction (`trl_ext.rollout_correction`): the combined call (weights, rejection and the
off-policy metrics, named as verl logs them), non-finite values, batches without valid tokens and number masks; every
bad setting and input a ValueError naming it; the port needing only torch."""

from __future__ import annotations

import math

import pytest
import torch
from test_rollout_correction_rejection import expected_kept
from test_rollout_correction_weights import VALID, approx, batch, log_ratio, mean, values

from trl_ext.rollout_correction import (
    ROLLOUT_IS_LEVELS,
    RolloutCorrection,
    compute_offpolicy_metrics,
    compute_rollout_correction_and_rejection_mask,
    compute_rollout_correction_weights,
    compute_rollout_rejection_mask,
)

# ---------------------------------------------------------------------------------------------------------------
# 3. The combined call, the off-policy metrics, the input rules
# ---------------------------------------------------------------------------------------------------------------

IS_METRICS = {
    "rollout_is_mean",
    "rollout_is_max",
    "rollout_is_min",
    "rollout_is_std",
    "rollout_is_eff_sample_size",
    "rollout_is_ratio_fraction_high",
    "rollout_is_ratio_fraction_low",
    "rollout_is_seq_mean",
    "rollout_is_seq_std",
    "rollout_is_seq_max",
    "rollout_is_seq_min",
    "rollout_is_seq_max_deviation",
    "rollout_is_seq_fraction_high",
    "rollout_is_seq_fraction_low",
}
RS_METRICS = {
    "mean",
    "max",
    "min",
    "std",
    "fraction_high",
    "fraction_low",
    "seq_mean",
    "seq_std",
    "seq_max",
    "seq_min",
    "seq_max_deviation",
    "seq_fraction_high",
    "masked_fraction",
    "seq_masked_fraction",
}
OFF_POLICY_METRICS = {
    "training_ppl",
    "training_log_ppl",
    "rollout_ppl",
    "rollout_log_ppl",
    "kl",
    "k3_kl",
    "log_ppl_diff",
    "log_ppl_abs_diff",
    "log_ppl_diff_max",
    "log_ppl_diff_min",
    "ppl_ratio",
    "chi2_token",
    "chi2_seq",
}


def test_combined_call_names_its_metrics_as_verl_logs_them():
    old, rollout, mask = batch()
    weights, kept, metrics = compute_rollout_correction_and_rejection_mask(
        old, rollout, mask, "token", "0.5_2.6", True, "seq_mean_k1", 2.0
    )
    alone, _ = compute_rollout_correction_weights(log_ratio(), mask, "token", "0.5_2.6", True)
    torch.testing.assert_close(weights, alone)
    assert kept.tolist() == expected_kept("seq_mean_k1", 2.0)
    k1 = {f"rollout_rs_seq_mean_k1_{name}" for name in [*RS_METRICS, "seq_fraction_low"]}
    expected = IS_METRICS | {"rollout_is_oob_ratio", "rollout_is_batch_norm_factor"} | k1 | OFF_POLICY_METRICS
    expected |= {"rollout_rs_masked_fraction", "rollout_rs_seq_masked_fraction"}
    assert set(metrics) == {f"rollout_corr/{name}" for name in expected}
    assert all(v.dim() == 0 and math.isfinite(v.item()) for v in metrics.values())  # NaN at masked positions stays
    _, _, plain = compute_rollout_correction_and_rejection_mask(old, rollout, mask)  # no weights, no rejection
    assert set(plain) == {f"rollout_corr/{name}" for name in OFF_POLICY_METRICS}
    k2 = RolloutCorrection(rollout_rs="seq_max_k2", rollout_rs_threshold=0.7)(old, rollout, mask)[2]
    assert "rollout_corr/rollout_rs_seq_max_k2_seq_fraction_low" not in k2  # only k1 criteria have a lower bound


def test_off_policy_metrics():
    old, rollout, mask = batch()
    m = values(compute_offpolicy_metrics(old, rollout, mask))
    logs = [[math.log(r) for r in row] for row in VALID]  # log π_old − log π_rollout; log π_old = −1
    assert m["kl"] == approx(mean([-x for row in logs for x in row]))
    assert m["k3_kl"] == approx(mean([r - 1 - math.log(r) for row in VALID for r in row]))
    assert m["training_ppl"] == approx(math.e) and m["training_log_ppl"] == approx(1.0)
    rollout_log_ppl = [1 + mean(row) for row in logs]  # −mean(log π_rollout) per row
    assert m["rollout_log_ppl"] == approx(mean(rollout_log_ppl))
    assert m["rollout_ppl"] == approx(mean([math.exp(x) for x in rollout_log_ppl]))
    diff = [-mean(row) for row in logs]
    assert m["log_ppl_diff"] == approx(mean(diff)) and m["log_ppl_diff_min"] == approx(min(diff))
    assert m["ppl_ratio"] == approx(mean([math.exp(d) for d in diff]))
    assert m["chi2_token"] == approx(mean([r * r for row in VALID for r in row]) - 1)
    assert m["chi2_seq"] == approx(mean([math.prod(row) ** 2 for row in VALID]) - 1)


@pytest.mark.parametrize("threshold", [2.0, "0.5_2.6"], ids=["TIS", "IcePop"])
def test_non_finite_values_propagate_only_from_valid_positions(threshold):
    old, rollout, mask = batch()  # NaN at the masked position: nothing is NaN
    weights, kept, metrics = compute_rollout_correction_and_rejection_mask(
        old, rollout, mask, "sequence", threshold, False, "token_k3", 0.5
    )
    assert torch.isfinite(weights).all() and all(math.isfinite(v.item()) for v in metrics.values())
    rollout[1, 0] = -math.inf  # at a valid position: every weight NaN, every token rejected
    weights, kept, metrics = compute_rollout_correction_and_rejection_mask(
        old, rollout, mask, "token", threshold, False, "token_k3", 0.5
    )
    assert torch.isnan(weights[mask]).all() and torch.equal(weights[~mask], torch.zeros(1))
    assert not kept.any() and math.isnan(metrics["rollout_corr/rollout_is_mean"].item())


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("threshold", [2.0, "0.5_5.0"], ids=["TIS", "IcePop"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "+inf", "-inf"])
@pytest.mark.parametrize("where", ["old", "rollout"])
def test_a_non_finite_log_prob_makes_every_weight_and_statistic_nan(level, threshold, bad, where):
    """TIS and IcePop alike (IcePop's window once zeroed the NaN weights, and its metrics read 0): a NaN / ±inf
    log-prob at a valid position gives NaN weights at every valid position, 0 at the masked ones (whose NaN never
    leaks), and NaN in every importance-sampling metric, the batch-normalization factor included."""
    old = torch.tensor([[-1.0, -0.4, math.nan], [-0.5, -0.7, math.nan]])
    rollout = torch.tensor([[-1.2, -1.0, math.nan], [-0.6, -0.9, math.nan]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    weights, kept, metrics = compute_rollout_correction_and_rejection_mask(old, rollout, mask, level, threshold, True)
    assert torch.isfinite(weights).all() and weights[mask].gt(0).all()  # the batch is fine without the bad value
    (old if where == "old" else rollout)[0, 1] = bad
    weights, kept, metrics = compute_rollout_correction_and_rejection_mask(old, rollout, mask, level, threshold, True)
    assert weights[mask].isnan().all() and torch.equal(weights[~mask], torch.zeros(2))
    assert torch.equal(kept, mask)  # no rejection configured
    is_metrics = {name: v.item() for name, v in metrics.items() if "rollout_is_" in name}
    assert len(is_metrics) >= 15 and all(math.isnan(v) for v in is_metrics.values()), is_metrics


def test_icepop_does_not_turn_a_nan_into_a_zero_weight():
    """The case found: one row, old [−1, NaN], rollout [−1.2, −1.0], IcePop [0.5, 5]: weights [0, 0] and
    `rollout_is_mean` 0 before; NaN now, as with TIS."""
    old, rollout = torch.tensor([[-1.0, math.nan]]), torch.tensor([[-1.2, -1.0]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    for level in ROLLOUT_IS_LEVELS:
        weights, _, metrics = compute_rollout_correction_and_rejection_mask(old, rollout, mask, level, "0.5_5.0")
        assert weights.isnan().all() and math.isnan(metrics["rollout_corr/rollout_is_mean"].item())
        assert math.isnan(metrics["rollout_corr/rollout_is_oob_ratio"].item())


@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (2, 3)])
def test_a_batch_without_valid_tokens_gives_zeros(shape):
    old = torch.zeros(shape)
    weights, kept, metrics = compute_rollout_correction_and_rejection_mask(
        old, old - 1, torch.zeros(shape, dtype=torch.bool), "sequence", "0.5_2", True, "seq_max_k3,token_k1", "1,2"
    )
    assert weights.shape == kept.shape == shape and not weights.any() and not kept.any()
    assert all(v.item() == 0 for name, v in metrics.items() if "norm_factor" not in name)


def test_a_number_mask_is_accepted_and_checked():
    old, rollout, mask = batch()
    weights, _, _ = compute_rollout_correction_and_rejection_mask(old, rollout, mask.float(), "token")
    torch.testing.assert_close(weights, compute_rollout_correction_and_rejection_mask(old, rollout, mask, "token")[0])
    with pytest.raises(ValueError, match=r"response_mask must be boolean or contain only 0 and 1; found 0.5"):
        compute_rollout_correction_and_rejection_mask(old, rollout, torch.full((2, 3), 0.5), "token")


# ---------------------------------------------------------------------------------------------------------------
# 4. Bad settings and inputs: a ValueError naming the setting
# ---------------------------------------------------------------------------------------------------------------

BAD_SETTINGS = [
    ({"rollout_is": "tokens"}, r"rollout_is='tokens' is not valid; must be one of None, 'token', 'sequence'"),
    (
        {"rollout_is": "token", "rollout_is_threshold": "2_0.5"},
        r"rollout_is_threshold='2_0.5' .* lower bound 2 is above",
    ),
    ({"rollout_is": "token", "rollout_is_threshold": 0}, r"rollout_is_threshold=0 is not valid; must be a number > 0"),
    ({"rollout_is": "token", "rollout_is_threshold": -1.5}, r"rollout_is_threshold=-1.5 is not valid"),
    ({"rollout_is": "token", "rollout_is_threshold": math.inf}, r"rollout_is_threshold=inf is not valid"),
    ({"rollout_is": "token", "rollout_is_threshold": math.nan}, r"rollout_is_threshold=nan is not valid"),
    ({"rollout_is": "token", "rollout_is_threshold": "0.5_1_2"}, r"rollout_is_threshold='0.5_1_2' is not valid"),
    ({"rollout_is": "token", "rollout_is_threshold": "two"}, r"rollout_is_threshold='two' is not valid"),
    ({"rollout_is": "token", "rollout_is_threshold": True}, r"rollout_is_threshold=True is not valid"),
    ({"rollout_is": "token", "rollout_is_threshold": None}, r"rollout_is_threshold=None is not valid"),
    ({"rollout_is": "token", "rollout_is_batch_normalize": "yes"}, r"rollout_is_batch_normalize='yes' is not valid"),
    ({"rollout_is_batch_normalize": True}, r"rollout_is_batch_normalize=True .* but rollout_is=None computes none"),
    ({"rollout_is_threshold": 5.0}, r"rollout_is_threshold=5.0 configures .* but rollout_is=None computes none"),
    ({"rollout_rs": "seq_max_k1", "rollout_rs_threshold": 2}, r"rollout_rs='seq_max_k1' is not valid \('seq_max_k1' "),
    (
        {"rollout_rs": "token_k4", "rollout_rs_threshold": 2},
        r"rollout_rs='token_k4' .*; must be one of 'token_k1', 'token_k2', .* 'seq_max_k3', or a comma",
    ),
    ({"rollout_rs": " , ", "rollout_rs_threshold": 2}, r"rollout_rs=' , ' is not valid \(it names no criterion\)"),
    ({"rollout_rs": 3, "rollout_rs_threshold": 2}, r"rollout_rs=3 is not valid"),
    ({"rollout_rs": "token_k1"}, r"rollout_rs_threshold=None is not valid: rollout_rs='token_k1' rejects by a thr"),
    (
        {"rollout_rs": "token_k1", "rollout_rs_threshold": "2_0.5"},
        r"rollout_rs_threshold='2_0.5' .* for 'token_k1': its lower bound 2 is above",
    ),
    ({"rollout_rs": "token_k1", "rollout_rs_threshold": 0.5}, r"rollout_rs_threshold=0.5 .* U must be >= 1"),
    (
        {"rollout_rs": "token_k2", "rollout_rs_threshold": "0.5_2"},
        r"rollout_rs_threshold='0.5_2' .* for 'token_k2': '0.5_2' must be a single",
    ),
    ({"rollout_rs": "seq_sum_k3", "rollout_rs_threshold": -1}, r"rollout_rs_threshold=-1 is not valid for 'seq_sum"),
    ({"rollout_rs": "token_k2", "rollout_rs_threshold": True}, r"rollout_rs_threshold=True is not valid"),
    (
        {"rollout_rs": "token_k2,token_k3,seq_max_k2", "rollout_rs_threshold": "1,2"},
        r"rollout_rs_threshold='1,2' .* gives 2 thresholds for the 3",
    ),
    ({"rollout_rs_threshold": "0.5_2"}, r"rollout_rs_threshold='0.5_2' sets .* but rollout_rs=None rejects nothing"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_SETTINGS)
def test_bad_settings_are_named_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=f"^MyConfig: {message}"):
        RolloutCorrection(**kwargs, owner="MyConfig")


def test_bad_inputs_are_named():
    old, rollout, mask = batch()
    with pytest.raises(ValueError, match=r"rollout_is='token' needs the sampling policy's per-token log-probs"):
        RolloutCorrection("token")(old, None, mask)
    with pytest.raises(ValueError, match=r"rollout_log_prob has shape \(2, 2\) but old_log_prob has shape \(2, 3\)"):
        compute_rollout_correction_and_rejection_mask(old, rollout[:, :2], mask)
    with pytest.raises(ValueError, match=r"response_mask has shape \(3,\) but old_log_prob"):
        compute_rollout_correction_and_rejection_mask(old, rollout, mask[0])
    with pytest.raises(ValueError, match=r"log_ratio must be a floating-point tensor"):
        compute_rollout_correction_weights(torch.ones(2, 3, dtype=torch.long), mask)
    with pytest.raises(ValueError, match=r"log_ratio must be a \[B, T\] tensor, got \(3,\)"):
        compute_rollout_rejection_mask(torch.ones(3), mask[0], "token_k2", 1.0)
    with pytest.raises(ValueError, match=r"compute_rollout_correction_weights: rollout_is=None is not valid"):
        compute_rollout_correction_weights(log_ratio(), mask, None)


def test_the_port_needs_only_torch():
    """`trl_ext.rollout_correction` is pure torch, like `trl_ext.losses` (docs/design.md §1)."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "class Blocker:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('trl', 'transformers', 'accelerate', 'peft', 'datasets'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Blocker())\n"
        "import torch\n"
        "from trl_ext.rollout_correction import compute_rollout_correction_and_rejection_mask as f\n"
        "w, kept, m = f(torch.zeros(2, 3), torch.zeros(2, 3) - 0.1, torch.ones(2, 3, dtype=torch.bool), 'token')\n"
        "assert torch.allclose(w, torch.full((2, 3), 0.1).exp()) and kept.all()\n"
        "print('ISOLATION-OK')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert "ISOLATION-OK" in result.stdout, result.stderr
