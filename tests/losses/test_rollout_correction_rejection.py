"""verl 0.9's rollout correction (`trl_ext.rollout_correction`), rejection: every criterion and its metrics against
verl's rule written out by hand, several criteria with one threshold each or one shared."""

from __future__ import annotations

import math

import pytest
import torch
from test_rollout_correction_weights import MASK, VALID, approx, log_ratio, mean, values

from trl_ext.rollout_correction import ROLLOUT_RS_OPTIONS, compute_rollout_rejection_mask

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
