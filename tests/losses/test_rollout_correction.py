"""verl 0.9's rollout correction (`trl_ext.rollout_correction`): each importance-sampling mode, batch normalization,
every rejection criterion and the metrics against closed forms; every bad setting named; and in the trainer, the
weights applied exactly once (TRL's own vLLM correction is replaced, not stacked) and rejected tokens out of the loss
and the window's counts, on a faked vLLM rollout (a `rollout_func` returning the sampler's log-probs)."""

from __future__ import annotations

import math
import types

import pytest
import torch
from trainer_helpers import CPU, length_reward

import trl_ext
from trl_ext.rollout_correction import (
    ROLLOUT_IS_LEVELS,
    ROLLOUT_RS_OPTIONS,
    RolloutCorrection,
    compute_offpolicy_metrics,
    compute_rollout_correction_and_rejection_mask,
    compute_rollout_correction_weights,
    compute_rollout_rejection_mask,
)
from trl_ext.toy import build_tokenizer, toy_dataset

# r = π_old / π_rollout per token; row 0's last token is padding (masked, its log-probs NaN).
R = [[0.6, 3.0, 7.0], [1.5, 2.5, 4.0]]
MASK = [[True, True, False], [True, True, True]]
VALID = [[r for r, m in zip(row, mask_row, strict=True) if m] for row, mask_row in zip(R, MASK, strict=True)]


def batch():
    """(old, rollout, mask) with log π_old − log π_rollout = log R at the valid tokens, NaN at the masked one."""
    old = torch.full((2, 3), -1.0)
    rollout = old - torch.tensor(R).log()
    old[0, 2] = rollout[0, 2] = math.nan
    return old, rollout, torch.tensor(MASK)


def log_ratio():
    return torch.where(torch.tensor(MASK), torch.tensor(R).log(), math.nan)


def mean(xs):
    return sum(xs) / len(xs)


def values(metrics):
    return {name: value.item() for name, value in metrics.items()}


def approx(x):
    return pytest.approx(x, rel=1e-5, abs=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# 1. Importance-sampling weights
# ---------------------------------------------------------------------------------------------------------------


def test_token_tis_weights_and_metrics():
    weights, metrics = compute_rollout_correction_weights(log_ratio(), torch.tensor(MASK), "token", 2.0)
    expected = [[0.6, 2.0, 0.0], [1.5, 2.0, 2.0]]  # min(r, 2), 0 at the masked token
    torch.testing.assert_close(weights, torch.tensor(expected))
    w = [0.6, 2.0, 1.5, 2.0, 2.0]
    m = values(metrics)
    assert m["rollout_is_mean"] == approx(mean(w))
    assert m["rollout_is_max"] == approx(2.0) and m["rollout_is_min"] == approx(0.6)
    assert m["rollout_is_ratio_fraction_high"] == approx(3 / 5)  # raw 3, 2.5, 4 above 2
    assert m["rollout_is_ratio_fraction_low"] == approx(0.0)  # none below 1/2
    assert m["rollout_is_std"] == approx(math.sqrt(mean([x * x for x in w]) - mean(w) ** 2))
    assert m["rollout_is_eff_sample_size"] == approx(mean(w) ** 2 / mean([x * x for x in w]))
    rows = [(0.6 + 2.0) / 2, (1.5 + 2.0 + 2.0) / 3]
    assert m["rollout_is_seq_mean"] == approx(mean(rows))
    assert m["rollout_is_seq_std"] == approx(abs(rows[0] - rows[1]) / math.sqrt(2))  # n − 1
    assert m["rollout_is_seq_max"] == approx(rows[1]) and m["rollout_is_seq_min"] == approx(rows[0])
    assert m["rollout_is_seq_max_deviation"] == approx(rows[1] - 1)
    assert m["rollout_is_seq_fraction_high"] == approx(1 / 2)  # raw row means 1.8 and 2.67
    assert m["rollout_is_seq_fraction_low"] == approx(0.0)
    assert "rollout_is_oob_ratio" not in m and "rollout_is_batch_norm_factor" not in m


def test_token_icepop_masks_weights_outside_the_bounds():
    weights, metrics = compute_rollout_correction_weights(log_ratio(), torch.tensor(MASK), "token", "0.7_2.6")
    torch.testing.assert_close(weights, torch.tensor([[0.0, 0.0, 0.0], [1.5, 2.5, 0.0]]))
    m = values(metrics)
    assert m["rollout_is_oob_ratio"] == approx(3 / 5)  # 0.6, 3 and 4
    assert m["rollout_is_ratio_fraction_low"] == approx(1 / 5)  # below L = 0.7, not 1/U
    assert m["rollout_is_min"] == approx(0.0)
    # the window test must not hide a NaN: NaN is neither inside [L, U] nor outside (zeroed), it stays NaN
    broken = log_ratio()
    broken[1, 1] = math.nan
    weights, metrics = compute_rollout_correction_weights(broken, torch.tensor(MASK), "token", "0.7_2.6")
    assert weights[torch.tensor(MASK)].isnan().all() and weights[0, 2] == 0
    assert math.isnan(metrics["rollout_is_oob_ratio"].item()) and math.isnan(metrics["rollout_is_mean"].item())


def test_sequence_weights_are_the_truncated_product():
    weights, metrics = compute_rollout_correction_weights(log_ratio(), torch.tensor(MASK), "sequence", 2.0)
    # Π r: 0.6·3 = 1.8 and 1.5·2.5·4 = 15, truncated at 2, on every valid token of the row
    torch.testing.assert_close(weights, torch.tensor([[1.8, 1.8, 0.0], [2.0, 2.0, 2.0]]))
    m = values(metrics)
    assert m["rollout_is_max"] == approx(15.0) and m["rollout_is_min"] == approx(1.8)  # from the log-space sums
    assert m["rollout_is_ratio_fraction_high"] == approx(1 / 2)
    assert m["rollout_is_mean"] == approx((2 * 1.8 + 3 * 2.0) / 5)

    sequence_icepop, _ = compute_rollout_correction_weights(log_ratio(), torch.tensor(MASK), "sequence", "0.5_5")
    torch.testing.assert_close(sequence_icepop, torch.tensor([[1.8, 1.8, 0.0], [0.0, 0.0, 0.0]]))


@pytest.mark.parametrize(
    ("level", "expected_mean"),
    [("token", (0.6 + 2.0 + 1.5 + 2.0 + 2.0) / 5), ("sequence", (1.8 + 2.0) / 2)],  # sequences weigh the same
)
def test_batch_normalization_gives_mean_one(level, expected_mean):
    raw, _ = compute_rollout_correction_weights(log_ratio(), torch.tensor(MASK), level, 2.0)
    weights, metrics = compute_rollout_correction_weights(log_ratio(), torch.tensor(MASK), level, 2.0, True)
    torch.testing.assert_close(weights, raw / expected_mean)
    assert metrics["rollout_is_batch_norm_factor"].item() == approx(expected_mean)
    assert metrics["rollout_is_mean"].item() == approx(raw[torch.tensor(MASK)].mean().item())  # before normalizing

    zero, zero_metrics = compute_rollout_correction_weights(
        torch.full((1, 2), 5.0), torch.ones(1, 2, dtype=torch.bool), level, "0.1_0.2", True
    )
    assert torch.equal(zero, torch.zeros(1, 2)) and zero_metrics["rollout_is_batch_norm_factor"].item() == 1.0


# ---------------------------------------------------------------------------------------------------------------
# 2. Rejection
# ---------------------------------------------------------------------------------------------------------------

THRESHOLDS = {
    "token_k1": "0.5_2",
    "token_k2": 0.5,
    "token_k3": 0.5,
    "seq_sum_k1": "0.1_1",
    "seq_sum_k2": 1.0,
    "seq_sum_k3": 1.5,
    "seq_mean_k1": 2.0,  # a single U means [1/U, U]
    "seq_mean_k2": 0.4,
    "seq_mean_k3": 0.6,
    "seq_max_k2": 0.7,
    "seq_max_k3": 1.0,
}


def expected_kept(option: str, threshold) -> list[list[bool]]:
    """verl's rule by hand: per token k1 = −log r (on π_rollout/π_old), k2 = ½(log r)², k3 = r − 1 − log r."""
    if option.endswith("k1"):
        lower, upper = map(float, threshold.split("_")) if isinstance(threshold, str) else (1 / threshold, threshold)
        passes = lambda v: math.log(lower) <= v <= math.log(upper)  # noqa: E731
    else:
        passes = lambda v: v <= threshold  # noqa: E731
    k = {"k1": lambda r: -math.log(r), "k2": lambda r: 0.5 * math.log(r) ** 2, "k3": lambda r: r - 1 - math.log(r)}
    kept = []
    for row, mask_row in zip(VALID, MASK, strict=True):
        stats = [k[option[-2:]](r) for r in row]
        if option.startswith("token"):
            flags = iter([passes(v) for v in stats])
        else:
            how = {"sum": sum, "mean": mean, "max": max}[option.split("_")[1]]
            flags = iter([passes(how(stats))] * len(stats))
        kept.append([next(flags) if m else False for m in mask_row])
    return kept


def test_the_criteria_are_verls():
    assert set(ROLLOUT_RS_OPTIONS) == set(THRESHOLDS)  # exactly verl's SUPPORTED_ROLLOUT_RS_OPTIONS


@pytest.mark.parametrize("option", list(THRESHOLDS))
def test_each_criterion_rejects_as_verl(option):
    threshold = THRESHOLDS[option]
    kept, metrics = compute_rollout_rejection_mask(log_ratio(), torch.tensor(MASK), option, threshold)
    expected = expected_kept(option, threshold)
    flat = [k for row, mask_row in zip(expected, MASK, strict=True) for k, m in zip(row, mask_row, strict=True) if m]
    assert True in flat and False in flat  # the threshold splits this batch
    assert kept.dtype == torch.bool and kept.tolist() == expected
    m = values(metrics)
    assert m[f"rollout_rs_{option}_masked_fraction"] == approx(flat.count(False) / 5)
    rejected_rows = [
        any(m and not k for k, m in zip(row, mr, strict=True)) for row, mr in zip(expected, MASK, strict=True)
    ]
    assert m[f"rollout_rs_{option}_seq_masked_fraction"] == approx(mean(rejected_rows))
    assert m["rollout_rs_masked_fraction"] == m[f"rollout_rs_{option}_masked_fraction"]


def test_sequence_criterion_metrics():
    _, metrics = compute_rollout_rejection_mask(log_ratio(), torch.tensor(MASK), "seq_sum_k1", "0.1_1")
    v = [-math.log(0.6 * 3.0), -math.log(1.5 * 2.5 * 4.0)]  # each row's Σ k1
    m = values(metrics)
    p = "rollout_rs_seq_sum_k1_"
    assert m[p + "mean"] == approx((2 * v[0] + 3 * v[1]) / 5)  # the row value on each of its tokens
    assert m[p + "max"] == approx(v[0]) and m[p + "min"] == approx(v[1])
    assert m[p + "fraction_high"] == approx(0.0) and m[p + "fraction_low"] == approx(1 / 2)  # log 0.1 > v[1]
    assert m[p + "seq_mean"] == approx(mean(v)) and m[p + "seq_max_deviation"] == approx(abs(v[1]))
    assert m[p + "seq_std"] == approx(abs(v[0] - v[1]) / math.sqrt(2))
    assert m[p + "seq_fraction_low"] == approx(1 / 2)
    clamped = [v[0]] * 2 + [math.log(0.1)] * 3  # clamped to [log L, log U] for the std
    assert m[p + "std"] == approx(math.sqrt(mean([x * x for x in clamped]) - mean(clamped) ** 2))


def test_several_criteria_must_all_pass_with_one_threshold_each():
    kept, metrics = compute_rollout_rejection_mask(
        log_ratio(), torch.tensor(MASK), "token_k2, seq_max_k3,token_k2", "0.5, 1.0"
    )
    both = [
        [a and b for a, b in zip(x, y, strict=True)]
        for x, y in zip(expected_kept("token_k2", 0.5), expected_kept("seq_max_k3", 1.0), strict=True)
    ]
    assert kept.tolist() == both
    assert {"rollout_rs_token_k2_mean", "rollout_rs_seq_max_k3_mean"} <= set(metrics)
    shared, _ = compute_rollout_rejection_mask(log_ratio(), torch.tensor(MASK), "token_k2,seq_max_k3", 0.5)
    assert shared.tolist() == [
        [a and b for a, b in zip(x, y, strict=True)]
        for x, y in zip(expected_kept("token_k2", 0.5), expected_kept("seq_max_k3", 0.5), strict=True)
    ]


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


# ---------------------------------------------------------------------------------------------------------------
# 5. The config: verl's field names, vLLM's log-probs, TRL's own correction replaced
# ---------------------------------------------------------------------------------------------------------------


def vllm_config(tmp_path, config_class=None, **kwargs):
    settings = {**CPU, "output_dir": str(tmp_path), "per_device_train_batch_size": 8, "num_generations": 4}
    return (config_class or trl_ext.GRPOConfig)(**settings, use_vllm=True, **kwargs)


def test_config_fields_reach_the_correction(tmp_path):
    config = vllm_config(
        tmp_path,
        rollout_is="sequence",
        rollout_is_threshold="0.5_5.0",
        rollout_rs="seq_mean_k1",
        rollout_rs_threshold=2,
    )
    correction = config.build_rollout_correction()
    assert correction.is_bounds == (5.0, 0.5) and correction.rs_bounds == {"seq_mean_k1": (0.5, 2.0)}
    assert config.composition()["rollout correction"] == (
        "sequence-level IS weights, IcePop in [0.5, 5]; rejection seq_mean_k1 π_rollout/π_old in [0.5, 2]"
    )
    assert config.vllm_importance_sampling_correction is False  # replaced by rollout_is


def test_rejection_alone_keeps_trls_correction(tmp_path):
    config = vllm_config(tmp_path, config_class=trl_ext.SAPOConfig, rollout_rs="token_k3", rollout_rs_threshold=0.1)
    assert config.vllm_importance_sampling_correction is True


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"use_vllm": False, "rollout_is": "token"}, r"rollout_is='token' corrects .* TRL has only from vLLM "),
        (
            {"use_vllm": False, "rollout_rs": "token_k2", "rollout_rs_threshold": 1},
            r"rollout_rs='token_k2' corrects .*; set use_vllm=True or leave rollout_rs unset",
        ),
        (
            {"rollout_is": "token", "vllm_importance_sampling_mode": "token_truncate"},
            r"vllm_importance_sampling_mode='token_truncate' configures TRL's vLLM importance-sampling correction",
        ),
        ({"rollout_is": "token", "vllm_importance_sampling_clip_max": 5.0}, r"vllm_importance_sampling_clip_max=5.0"),
        ({"rollout_is": "sequence", "loss_type": "vespo"}, r"rollout_is='sequence' .* but loss_type='vespo'"),
        (
            {"rollout_rs": "token_k2", "rollout_rs_threshold": 1, "turns_as_samples": True},
            r"rollout_rs='token_k2' rejects single tokens, which would split the model turns",
        ),
        ({"rollout_rs": "seq_mean_k5", "rollout_rs_threshold": 1}, r"rollout_rs='seq_mean_k5' is not valid"),
    ],
)
def test_config_refuses_what_cannot_train(tmp_path, kwargs, message):
    settings = {"use_vllm": True, **kwargs}
    if settings.pop("turns_as_samples", False):
        settings.update(turns_as_samples=True, loss_agg_mode="seq-mean-token-mean")
    with pytest.raises(ValueError, match=f"^GRPOConfig: {message}"):
        trl_ext.GRPOConfig(
            **CPU, output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, **settings
        )


def test_config_from_the_command_line(tmp_path):
    from trl import TrlParser

    args = ["--output_dir", str(tmp_path), "--use_cpu", "--report_to", "none", "--use_vllm"]
    args += ["--rollout_is", "token", "--rollout_is_threshold", "0.5_3", "--rollout_is_batch_normalize", "true"]
    args += ["--rollout_rs", "token_k1,seq_max_k3", "--rollout_rs_threshold", "0.5_2,0.3"]
    (config,) = TrlParser(trl_ext.GRPOConfig).parse_args_and_config(args)
    correction = config.build_rollout_correction()
    assert correction.is_bounds == (3.0, 0.5) and correction.rollout_is_batch_normalize
    assert correction.rs_bounds == {"token_k1": (0.5, 2.0), "seq_max_k3": (None, 0.3)}


# ---------------------------------------------------------------------------------------------------------------
# 6. The trainer, on a faked vLLM rollout
# ---------------------------------------------------------------------------------------------------------------

LENGTHS = [6, 3, 8, 5, 7, 2, 8, 4]  # completion lengths (the batch's rows), with padding


def fake_vllm_trainer(model_path, tmp_path, config_class=None, **kwargs):
    """A GRPO-family trainer whose config asks for vLLM and whose generation is a `rollout_func` returning fixed
    completions with the sampler's log-probs, as vLLM would (TRL's vLLM code path runs; only the weight sync is a
    stub): this machine has no vLLM. The trainer is built with `use_vllm=False`, then switched on."""
    config = vllm_config(tmp_path, config_class, max_completion_length=8, max_steps=1, learning_rate=1e-3, **kwargs)
    tokenizer = build_tokenizer()
    generator = torch.Generator().manual_seed(0)

    def rollout_func(prompts, trainer):  # the sampler: the model's log-probs, off by N(0, 0.8²) per token
        ids = tokenizer(prompts)["input_ids"]
        completions = [torch.randint(10, 200, (LENGTHS[i % 8],), generator=generator).tolist() for i in range(len(ids))]
        logprobs = []
        with torch.no_grad():
            for prompt, completion in zip(ids, completions, strict=True):
                logits = trainer.model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
                exact = logits.log_softmax(-1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)
                logprobs.append((exact + 0.8 * torch.randn(len(completion), generator=generator)).tolist())
        return {"prompt_ids": ids, "completion_ids": completions, "logprobs": logprobs}

    config.use_vllm = False  # so that TRL does not start a vLLM engine
    trainer = (config_class or trl_ext.GRPOConfig).__name__.replace("Config", "Trainer")
    trainer = getattr(trl_ext, trainer)(
        model=model_path,
        reward_funcs=length_reward,
        args=config,
        train_dataset=toy_dataset(16),
        processing_class=tokenizer,
        rollout_func=rollout_func,
    )
    trainer.use_vllm = True
    trainer.vllm_generation = types.SimpleNamespace(sync_weights=lambda: None)
    trainer._last_loaded_step = -1
    return trainer


def hand_logps(trainer, batch):
    """log π(completion token) by a plain forward pass of the model."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    logits = trainer.model(input_ids=ids, attention_mask=attention).logits[:, :-1] / trainer.temperature
    width = batch["completion_ids"].size(1)
    logps = logits[:, -width:].log_softmax(-1)
    return logps.gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)


def gradient(trainer, loss):
    trainer.model.zero_grad()
    loss.backward()
    return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])


@pytest.mark.parametrize("loss_type", [None, "dapo"])  # trl_ext's ppo (folded into A), TRL's loss (declared input)
def test_trainer_applies_the_weights_exactly_once(random_tiny_model, tmp_path, loss_type):
    extra = {} if loss_type is None else {"loss_type": loss_type}
    trainer = fake_vllm_trainer(random_tiny_model, tmp_path, rollout_is="token", rollout_is_threshold=1.5, **extra)
    assert trainer.vllm_importance_sampling_correction is False  # TRL's own correction is off
    rows = [row for row in trainer.train_dataset.select(range(2)) for _ in range(4)]
    batch = trainer._generate_and_score_completions(rows)
    assert "sampling/importance_sampling_ratio/mean" not in trainer._metrics["eval"]  # TRL computed none

    mask = batch["completion_mask"].bool()
    assert mask.sum(1).tolist() == LENGTHS
    old, sampling = batch["old_per_token_logps"], batch["sampling_per_token_logps"]
    weights = torch.where(mask, torch.exp(old - sampling).clamp(max=1.5), 1.0)  # verl's token TIS
    torch.testing.assert_close(batch["importance_sampling_ratio"], weights)
    assert (weights[mask] < 1.5).any() and (weights[mask] == 1.5).any()
    metrics = trainer._metrics["eval"]
    assert metrics["rollout_corr/rollout_is_mean"][-1] == approx(weights[mask].mean().item())
    assert metrics["rollout_corr/kl"][-1] == approx((sampling - old)[mask].mean().item())

    # GRPO's advantages by hand, from the rewards: the correction leaves them alone
    rewards = torch.tensor(length_reward(trainer.processing_class.batch_decode(batch["completion_ids"], True)))
    rewards = rewards.view(2, 4)
    epsilon = 1e-6 if loss_type is None else 1e-4  # trl_ext's grpo advantage / TRL's
    advantages = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + epsilon)
    advantages = advantages.view(-1, 1)
    torch.testing.assert_close(batch["advantages"], advantages.squeeze(1))
    assert advantages.abs().sum() > 0

    # d/dθ of the loss = d/dθ of Σ_valid −A·w·π/π_old / tokens (the PPO clip is inactive on-policy): w once
    trained = gradient(trainer, trainer._compute_loss(trainer.model, batch))

    def by_hand(w):
        ratio = torch.exp(hand_logps(trainer, batch) - old)
        return torch.where(mask, -advantages * w * ratio, 0).sum() / mask.sum()

    torch.testing.assert_close(trained, gradient(trainer, by_hand(weights)), rtol=1e-4, atol=1e-6)
    twice = gradient(trainer, by_hand(weights * weights))
    assert not torch.allclose(trained, twice, rtol=1e-3, atol=1e-6)


def test_trainer_rejects_tokens_out_of_the_loss_and_the_window(random_tiny_model, tmp_path):
    trainer = fake_vllm_trainer(random_tiny_model, tmp_path, rollout_rs="token_k1", rollout_rs_threshold="0.3_3")
    assert trainer.vllm_importance_sampling_correction is True  # rejection composes with TRL's weights
    rows = [row for row in trainer.train_dataset.select(range(2)) for _ in range(4)]
    batch = trainer._generate_and_score_completions(rows)

    mask = batch["completion_mask"].bool()
    assert mask.sum(1).tolist() == LENGTHS  # the attention mask is untouched
    old, sampling = batch["old_per_token_logps"], batch["sampling_per_token_logps"]
    inverse = torch.exp(sampling - old)  # k1 bounds π_rollout / π_old
    kept = mask & (inverse >= 0.3) & (inverse <= 3)
    assert (mask & ~kept).any() and kept.any()
    assert torch.equal(batch["tool_mask"].bool() | ~mask, kept | ~mask)
    assert trainer.micro_batch_counts(batch)["global_valid_toks"].item() == kept.sum().item()
    metrics = trainer._metrics["eval"]
    fraction = metrics["rollout_corr/rollout_rs_token_k1_masked_fraction"][-1]
    assert fraction == approx((mask & ~kept).sum().item() / mask.sum().item())
    assert "sampling/importance_sampling_ratio/mean" in metrics  # TRL's own correction ran

    ratio = batch["importance_sampling_ratio"]  # TRL's sequence-masked ratio [B, 1], applied once
    trained = gradient(trainer, trainer._compute_loss(trainer.model, batch))
    pi_ratio = torch.exp(hand_logps(trainer, batch) - old)
    by_hand = torch.where(kept, -batch["advantages"].unsqueeze(1) * ratio * pi_ratio, 0).sum() / kept.sum()
    torch.testing.assert_close(trained, gradient(trainer, by_hand), rtol=1e-4, atol=1e-6)


def test_training_logs_the_correction_metrics(random_tiny_model, tmp_path):
    trainer = fake_vllm_trainer(
        random_tiny_model,
        tmp_path,
        config_class=trl_ext.SAPOConfig,
        rollout_is="sequence",
        rollout_is_batch_normalize=True,
        rollout_rs="seq_mean_k3",
        rollout_rs_threshold=5.0,
    )
    trainer.train()
    last = [entry for entry in trainer.state.log_history if "rollout_corr/rollout_is_mean" in entry][-1]
    for name in ("rollout_is_batch_norm_factor", "rollout_rs_seq_mean_k3_masked_fraction", "k3_kl", "chi2_seq"):
        assert math.isfinite(last[f"rollout_corr/{name}"]), name


def test_trainer_without_the_samplers_log_probs_names_the_setting(random_tiny_model, tmp_path):
    trainer = fake_vllm_trainer(random_tiny_model, tmp_path, rollout_is="token")
    trainer.use_vllm = False
    trainer.rollout_func = None  # TRL's own generation: no sampler log-probs
    rows = [row for row in trainer.train_dataset.select(range(2)) for _ in range(4)]
    with pytest.raises(ValueError, match=r"GRPOTrainer: rollout_is='token' / rollout_rs=None need the sampler's"):
        trainer._generate_and_score_completions(rows)
