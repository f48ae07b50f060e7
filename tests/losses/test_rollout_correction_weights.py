"""verl 0.9's rollout correction (`trl_ext.rollout_correction`), the importance-sampling weights: each level (token,
sequence) and bound (TIS, IcePop) and batch normalization, the weights and their metrics against closed forms. The
batch and helpers defined here serve the other test_rollout_correction_*.py modules."""

from __future__ import annotations

import math

import pytest
import torch

from trl_ext.rollout_correction import compute_rollout_correction_weights

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
