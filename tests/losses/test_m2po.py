"""M2PO (`trl_ext.losses.m2po`, the `m2po` record, `M2POConfig` / `M2POTrainer`).

The expected values are hand-computed or come from a plain-Python port of the reference (Trinity-RFT main,
`trinity/algorithm/policy_loss_fn/m2po_policy_loss.py`), which shares no code with `trl_ext.losses`.
"""

from __future__ import annotations

import dataclasses
import math
import random

import plain_reference as ref
import pytest
import torch
from trainer_helpers import cpu_config, logged, toy_trainer

import trl_ext
from trl_ext.losses import EPS, LOSS_AGG_MODES, M2POPolicyLoss, get_policy_loss, m2po_mask
from trl_ext.losses import m2po as m2po_module
from trl_ext.losses.m2po import M2PO_METRICS

E = math.exp


def run(lp, old, adv, mask=None, **kwargs):
    """Loss, gradient (flattened) and metrics of `m2po` on float64 nested lists; `adv` per token or per row."""
    lp = torch.tensor(lp, dtype=torch.float64, requires_grad=True)
    mask = torch.ones_like(lp, dtype=torch.bool) if mask is None else torch.tensor(mask, dtype=torch.bool)
    window = {k: kwargs.pop(k) for k in ("global_valid_toks", "global_valid_seqs", "normalizer") if k in kwargs}
    loss, metrics = get_policy_loss("m2po", **kwargs)(
        logprob=lp,
        old_logprob=torch.tensor(old, dtype=torch.float64),
        action_mask=mask,
        advantages=torch.tensor(adv, dtype=torch.float64),
        **window,
    )
    loss.backward()
    return loss.item(), lp.grad.flatten().tolist(), {k: v.item() for k, v in metrics.items()}


def zeros_like(rows):
    return [[0.0] * len(row) for row in rows]


# ==================================================================================================
# Hand-computed examples
# ==================================================================================================


def test_masks_the_largest_trust_region_token_by_hand():
    # (log r)² = .01, .04, .09 (A > 0, r > 1: all in the trust region), mean .0467 > τ = .04. Sorted prefix means
    # .01, .025, .0467: the first two are ≤ τ, so the largest (.09) is masked. Kept: −A·e^{log r}, over 3 tokens.
    lp = [[0.1, 0.2, 0.3]]
    loss, grad, metrics = run(lp, zeros_like(lp), [[1.0, 1.0, 1.0]])
    assert loss == pytest.approx(-(E(0.1) + E(0.2)) / 3)
    assert grad == pytest.approx([-E(0.1) / 3, -E(0.2) / 3, 0.0])
    assert metrics == pytest.approx(
        {
            "pg_loss": -(E(0.1) + E(0.2)) / 3,
            "ppo_kl": -0.2,
            "ratio/mean": (E(0.1) + E(0.2) + E(0.3)) / 3,  # over every valid token, masked ones included
            "m2po/m2_before": (0.01 + 0.04 + 0.09) / 3,
            "m2po/m2_after": 0.025,
            "m2po/masked_fraction": 1 / 3,
            "m2po/trust_region_fraction": 1.0,
        }
    )


def test_only_the_trust_region_quadrants_are_constrained_by_hand():
    # log r = 1, −1, 1, −1, 2 with A = −1, 1, 1, −1, 0: only (A > 0, r > 1) and (A < 0, r < 1) are in the trust region
    # (tokens 3 and 4, (log r)² = 1 each > τ = 0.1: both masked); A = 0 never is. The others keep −A·e^{log r}.
    lp = [[1.0, -1.0, 1.0, -1.0, 2.0]]
    loss, grad, metrics = run(lp, zeros_like(lp), [[-1.0, 1.0, 1.0, -1.0, 0.0]], m2_threshold=0.1)
    assert loss == pytest.approx((E(1) - E(-1)) / 5)
    assert grad == pytest.approx([E(1) / 5, -E(-1) / 5, 0.0, 0.0, 0.0])
    assert metrics["m2po/trust_region_fraction"] == pytest.approx(2 / 5)
    assert metrics["m2po/masked_fraction"] == pytest.approx(2 / 5)
    assert (metrics["m2po/m2_before"], metrics["m2po/m2_after"]) == (pytest.approx(1.0), 0.0)


def test_threshold_edge_by_hand():
    lp, adv = [[0.5, 0.5, 1.0]], [[1.0, 1.0, 1.0]]  # (log r)² = .25, .25, 1: exact in binary
    # τ = .25: mean .5 > τ; prefix means .25, .25, .5 → the two at exactly τ are kept, the 1 is masked.
    loss, grad, metrics = run(lp, zeros_like(lp), adv, m2_threshold=0.25)
    assert loss == pytest.approx(-2 * E(0.5) / 3)
    assert grad == pytest.approx([-E(0.5) / 3, -E(0.5) / 3, 0.0])
    assert metrics["m2po/m2_after"] == 0.25
    # τ just below .25: already the first prefix mean is above it, so every trust-region token is masked.
    loss, grad, metrics = run(lp, zeros_like(lp), adv, m2_threshold=math.nextafter(0.25, 0.0))
    assert (loss, grad) == (0.0, [0.0, 0.0, 0.0])
    assert (metrics["m2po/masked_fraction"], metrics["m2po/m2_after"]) == (1.0, 0.0)
    # A mean of exactly τ is not above it: nothing is masked.
    loss, grad, metrics = run([[0.5, 0.5]], [[0.0, 0.0]], [[1.0, 1.0]], m2_threshold=0.25)
    assert loss == pytest.approx(-E(0.5)) and grad == pytest.approx([-E(0.5) / 2] * 2)
    assert metrics["m2po/masked_fraction"] == 0.0 and metrics["m2po/m2_after"] == metrics["m2po/m2_before"] == 0.25


def test_threshold_compares_exactly_in_float32():
    """The reference compares each float32 value (`.item()`) with the Python threshold; torch would round a Python
    scalar to float32 first, so that .25 ≤ .25 − 1e-12 (which rounds to .25) would wrongly hold."""
    log_ratio, adv, mask = torch.tensor([[0.5]]), torch.tensor([[1.0]]), torch.tensor([[True]])
    assert m2po_mask(log_ratio, adv, mask, 0.25)[0].tolist() == [[True]]
    assert m2po_mask(log_ratio, adv, mask, 0.25 - 1e-12)[0].tolist() == [[False]]
    # 0.1 rounds *up* in float32: (log r)² = float32(0.1) = 0.10000000149 is above the threshold 0.1
    log_ratio = torch.tensor([[0.3162277638912201]])
    assert (log_ratio**2).item() == torch.tensor(0.1).item() > 0.1  # the premise
    assert m2po_mask(log_ratio, adv, mask, 0.1)[0].tolist() == [[False]]
    assert m2po_mask(log_ratio, adv, mask, 0.10000000149011612)[0].tolist() == [[True]]


def test_log_ratio_clip_is_a_straight_through_clamp():
    # log r = 25 with A = −1: not in the trust region (A < 0, r > 1). Value −A·e^20 (clamped), gradient −A·e^20 too:
    # the clamp only keeps the value finite, the kept token still gets its gradient (the reference's stable ratio).
    loss, grad, metrics = run([[25.0]], [[0.0]], [[-1.0]])
    assert (loss, grad) == (pytest.approx(E(20)), [pytest.approx(E(20))])
    assert (metrics["ppo_kl"], metrics["ratio/mean"]) == (pytest.approx(-20.0), pytest.approx(E(20)))
    loss, grad, _ = run([[-25.0]], [[0.0]], [[1.0]])  # A > 0, r < 1: not in the trust region either
    assert (loss, grad) == (pytest.approx(-E(-20)), [pytest.approx(-E(-20))])
    loss, grad, _ = run([[3.0], [0.5]], [[0.0], [0.0]], [[-1.0], [-1.0]], log_ratio_clip=2.0)
    assert loss == pytest.approx((E(2) + E(0.5)) / 2)
    assert grad == pytest.approx([E(2) / 2, E(0.5) / 2])


# Two rows, T = 3, the last position of row 1 masked (NaN there). Row 0: A = 1, log r = .1, .2, .3 (trust region);
# row 1: A = −1, log r = −.4 (trust region), .2 (not). Trust (log r)² = .01, .04, .09, .16, mean .075 > τ = .04;
# prefix means .01, .025, .0467, .075 → .09 (row 0, t 2) and .16 (row 1, t 0) are masked. Kept per-token losses:
# row 0: −e^.1, −e^.2, 0; row 1: 0, +e^.2.
MODES_LP = [[0.1, 0.2, 0.3], [-0.4, 0.2, math.nan]]
MODES_MASK = [[True, True, True], [True, True, False]]
MODES_ADV = [1.0, -1.0]  # per row
MODES_EXPECTED = {  # (loss, gradient)
    "token-mean": (-E(0.1) / 5, [-E(0.1) / 5, -E(0.2) / 5, 0, 0, E(0.2) / 5, 0]),
    "token-sum": (-E(0.1), [-E(0.1), -E(0.2), 0, 0, E(0.2), 0]),  # Σ
    "seq-mean-token-mean": (
        ((-E(0.1) - E(0.2)) / 3 + E(0.2) / 2) / 2,
        [-E(0.1) / 6, -E(0.2) / 6, 0, 0, E(0.2) / 4, 0],
    ),
    "seq-mean-token-sum": (-E(0.1) / 2, [-E(0.1) / 2, -E(0.2) / 2, 0, 0, E(0.2) / 2, 0]),
    "seq-mean-token-sum-norm": (-E(0.1) / 3, [-E(0.1) / 3, -E(0.2) / 3, 0, 0, E(0.2) / 3, 0]),  # Σ / T
}


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_every_aggregation_by_hand(mode):
    """Masked tokens stay in every denominator (footnote 2 of the paper: normalized over all valid tokens)."""
    loss, grad, metrics = run(MODES_LP, zeros_like(MODES_LP), MODES_ADV, MODES_MASK, loss_agg_mode=mode)
    expected_loss, expected_grad = MODES_EXPECTED[mode]
    assert loss == pytest.approx(expected_loss) and metrics["pg_loss"] == loss
    assert grad == pytest.approx(expected_grad)
    assert metrics["m2po/masked_fraction"] == pytest.approx(2 / 5)
    assert metrics["m2po/trust_region_fraction"] == pytest.approx(4 / 5)
    assert metrics["m2po/m2_before"] == pytest.approx(0.075)
    assert metrics["m2po/m2_after"] == pytest.approx(0.025)
    assert set(LOSS_AGG_MODES) == set(MODES_EXPECTED)


def test_masked_positions_with_nan_are_ignored_and_valid_nan_poisons():
    clean = run([[0.1, 0.2, 0.0]], [[0.0, 0.0, 0.0]], [[1.0, 1.0, 0.0]], [[True, True, False]])
    nan = math.nan
    dirty = run([[0.1, 0.2, nan]], [[0.0, 0.0, nan]], [[1.0, 1.0, nan]], [[True, True, False]])
    assert dirty == clean and all(math.isfinite(v) for v in dirty[2].values())
    assert clean[0] == pytest.approx(-(E(0.1) + E(0.2)) / 2)  # the masked position is in no denominator
    for name in ("logprob", "old_logprob", "advantages"):
        inputs = {
            "logprob": torch.tensor([[0.1, 0.2]]),
            "old_logprob": torch.zeros(1, 2),
            "advantages": torch.ones(1, 2),
        }
        inputs[name][0, 1] = nan
        loss, _ = get_policy_loss("m2po")(action_mask=torch.ones(1, 2, dtype=torch.bool), **inputs)
        assert math.isnan(loss.item()), name


def test_per_sequence_advantages_equal_the_per_token_broadcast():
    g = torch.Generator().manual_seed(3)
    lp, old = torch.randn(4, 5, generator=g, dtype=torch.float64), torch.randn(4, 5, generator=g, dtype=torch.float64)
    mask = torch.rand(4, 5, generator=g) > 0.3
    adv = torch.randn(4, generator=g, dtype=torch.float64)
    fn = get_policy_loss("m2po", m2_threshold=0.3)
    by_row = fn(logprob=lp, old_logprob=old, action_mask=mask, advantages=adv)
    by_token = fn(logprob=lp, old_logprob=old, action_mask=mask, advantages=adv.unsqueeze(-1).expand(4, 5))
    assert by_row[0].item() == pytest.approx(by_token[0].item(), rel=1e-12)
    assert {k: v.item() for k, v in by_row[1].items()} == pytest.approx({k: v.item() for k, v in by_token[1].items()})
    assert by_row[1]["m2po/masked_fraction"] > 0  # the threshold bites


# ==================================================================================================
# Window normalization: each micro-batch's loss is its share of the window's
# ==================================================================================================


def _window_counts(mask: torch.Tensor, cols: int) -> dict:
    return {
        "global_valid_toks": mask.sum().double(),
        "global_valid_seqs": torch.tensor(float(mask.shape[0]), dtype=torch.float64),
        "normalizer": torch.tensor(float(mask.shape[0] * cols), dtype=torch.float64),
    }


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batch_shares_add_up_to_the_window_loss(mode):
    # log r = lp (old = 0). Trust-region (log r)²: row 0 (A > 0) .01, .16; row 1 (A < 0) .25; row 2 (A > 0) .01,
    # .16, .49; row 3 (A < 0) .04. τ = .05 masks .16, .25, .16, .49 in the whole batch (prefix means .01, .01, .02,
    # .055, ...), and the same tokens in its halves (rows 0-1: .01 | .16, .25; rows 2-3: .01, .04 | .16, .49).
    lp = [[0.1, 0.4, -0.3, 0.0], [0.2, -0.5, 0.6, 9.0], [0.1, 0.4, 0.7, 0.0], [-0.2, 0.3, 0.6, 0.0]]
    lp = torch.tensor(lp, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    fn = get_policy_loss("m2po", m2_threshold=0.05, loss_agg_mode=mode)
    old = torch.zeros_like(lp)
    whole_lp = lp.clone().requires_grad_(True)
    whole, whole_metrics = fn(logprob=whole_lp, old_logprob=old, action_mask=mask, advantages=adv, normalizer=16.0)
    whole.backward()
    counts = _window_counts(mask, 4)
    shares, grads, masked = [], [], []
    for rows in (slice(0, 2), slice(2, 4)):
        part_lp = lp[rows].clone().requires_grad_(True)
        share, metrics = fn(
            logprob=part_lp, old_logprob=old[rows], action_mask=mask[rows], advantages=adv[rows], **counts
        )
        share.backward()
        shares.append(share)
        grads.append(part_lp.grad)
        masked.append(metrics["m2po/masked_fraction"] * mask[rows].sum())
    assert [m.item() for m in masked] == pytest.approx([2.0, 2.0])
    assert whole_metrics["m2po/masked_fraction"].item() == pytest.approx(4 / mask.sum().item())
    torch.testing.assert_close(sum(shares), whole.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.cat(grads), whole_lp.grad, rtol=1e-12, atol=1e-12)


def test_the_selection_runs_over_the_micro_batch_it_is_given():
    """The reference selects once over the optimizer batch (its test `full_batch_mask_is_not_recomputed_per_
    microbatch`); a loss call selects over its own batch, which is the optimizer batch with one micro-batch per step."""
    log_ratio = torch.sqrt(torch.tensor([[0.01, 0.09, 0.05]]))
    adv, mask = torch.ones_like(log_ratio), torch.ones_like(log_ratio, dtype=torch.bool)
    assert m2po_mask(log_ratio, adv, mask, 0.04)[0].tolist() == [[True, False, True]]  # the whole batch
    halves = [m2po_mask(log_ratio[:, s], adv[:, s], mask[:, s], 0.04)[0] for s in (slice(0, 2), slice(2, 3))]
    assert torch.cat(halves, dim=1).tolist() == [[True, False, False]]  # each part by itself


# ==================================================================================================
# Parity with a plain-Python port of the reference
# ==================================================================================================


def reference_m2po(lp, old, mask, adv, m2_threshold=0.04, log_ratio_clip=20.0, mode="token-mean"):
    """Trinity-RFT main's M2PO (`_compute_m2po_mask` + `M2POPolicyLossFn.__call__`) token by token, in Python floats:
    (value, ∂value/∂lp, metrics). The selection is the reference's: a stable ascending sort of the trust-region
    (log r)², keep the longest prefix with mean ≤ τ when the mean of all of them is above τ."""
    rows, cols = len(lp), len(lp[0])
    tokens = [(b, t) for b in range(rows) for t in range(cols) if mask[b][t]]  # row-major, as the reference flattens
    lr = {k: lp[k[0]][k[1]] - old[k[0]][k[1]] for k in tokens}
    a = {k: adv[k[0]][k[1]] for k in tokens}
    trust = [k for k in tokens if (a[k] > 0 and lr[k] > 0) or (a[k] < 0 and lr[k] < 0)]
    m2 = {k: lr[k] ** 2 for k in trust}
    before = sum(m2[k] for k in trust) / len(trust) if trust else 0.0
    masked = set()
    if trust and before > m2_threshold:
        ordered = sorted(trust, key=lambda k: m2[k])  # stable: ties keep their order
        total, keep_count = 0.0, 0
        for i, k in enumerate(ordered):
            total += m2[k]
            keep_count += total / (i + 1) <= m2_threshold
        masked = set(ordered[keep_count:])
    kept_trust = [k for k in trust if k not in masked]
    ratio = {k: math.exp(ref.clamp(lr[k], -log_ratio_clip, log_ratio_clip)) for k in tokens}
    ell = {k: (0.0 if k in masked else -a[k] * ratio[k]) for k in tokens}
    dell = {k: (0.0 if k in masked else -a[k] * ratio[k]) for k in tokens}  # straight-through: d/dlp e^{lr} = e^lr
    value, grad = ref.combine(ell, dell, mask, mode)
    n = len(tokens)
    metrics = {
        "pg_loss": value,
        "ppo_kl": -sum(ref.clamp(lr[k], -log_ratio_clip, log_ratio_clip) for k in tokens) / (n + EPS),
        "ratio/mean": sum(ratio.values()) / (n + EPS),
        "m2po/m2_before": before,
        "m2po/m2_after": sum(m2[k] for k in kept_trust) / len(kept_trust) if kept_trust else 0.0,
        "m2po/masked_fraction": len(masked) / n if n else 0.0,
        "m2po/trust_region_fraction": len(trust) / n if n else 0.0,
    }
    return value, grad, metrics


def algorithm_one_mask(lr, adv, mask, m2_threshold):
    """The paper's Algorithm 1 as a loop: drop the largest (log r)² of the trust region while their mean is above τ."""
    active = [
        (b, t)
        for b in range(len(lr))
        for t in range(len(lr[0]))
        if mask[b][t] and ((adv[b][t] > 0 and lr[b][t] > 0) or (adv[b][t] < 0 and lr[b][t] < 0))
    ]
    keep = [list(row) for row in mask]
    while active and sum(lr[b][t] ** 2 for b, t in active) / len(active) > m2_threshold:
        largest = max(active, key=lambda k: lr[k[0]][k[1]] ** 2)
        active.remove(largest)
        keep[largest[0]][largest[1]] = False
    return keep


def random_case(seed: int) -> dict:
    """A random batch (per-token or per-row advantages, holes in the mask) and M2PO arguments."""
    rng = random.Random(seed)
    rows, cols = rng.randint(2, 6), rng.randint(3, 9)
    scale = rng.choice([0.15, 0.4, 1.0])
    lp = [[-rng.random() * 2 for _ in range(cols)] for _ in range(rows)]
    old = [[x + rng.gauss(0, scale) for x in row] for row in lp]
    if seed % 2:
        adv = [[rng.gauss(0, 1)] * cols for _ in range(rows)]  # per sequence, as GRPO's
    else:
        adv = [[rng.gauss(0, 1) for _ in range(cols)] for _ in range(rows)]
    mask = [[rng.random() > 0.25 for _ in range(cols)] for _ in range(rows)]
    threshold = rng.choice([0.005, 0.02, 0.04]) * scale / 0.15
    return {"lp": lp, "old": old, "adv": adv, "mask": mask, "m2_threshold": threshold, "clip": rng.choice([20.0, 0.3])}


SEEDS = range(8)


def test_random_cases_mask_some_but_not_all_of_the_trust_region():
    partial = 0
    for seed in SEEDS:
        c = random_case(seed)
        metrics = reference_m2po(c["lp"], c["old"], c["mask"], c["adv"], c["m2_threshold"], c["clip"])[2]
        partial += 0 < metrics["m2po/masked_fraction"] < metrics["m2po/trust_region_fraction"]
    assert partial >= 6


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_matches_the_plain_reference(seed, mode):
    c = random_case(seed)
    lp, old, adv, mask, threshold, clip = c["lp"], c["old"], c["adv"], c["mask"], c["m2_threshold"], c["clip"]
    expected, expected_grad, expected_metrics = reference_m2po(lp, old, mask, adv, threshold, clip, mode)
    loss, grad, metrics = run(lp, old, adv, mask, m2_threshold=threshold, log_ratio_clip=clip, loss_agg_mode=mode)
    assert loss == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert grad == pytest.approx([g for row in expected_grad for g in row], rel=1e-9, abs=1e-12)
    assert metrics == pytest.approx(expected_metrics, rel=1e-9, abs=1e-12)
    # the selection is also the paper's loop (random data has no ties)
    lr = [[lp[b][t] - old[b][t] for t in range(len(lp[0]))] for b in range(len(lp))]
    keep, _ = m2po_mask(torch.tensor(lr), torch.tensor(adv), torch.tensor(mask), threshold)
    assert keep.tolist() == algorithm_one_mask(lr, adv, mask, threshold)


def test_ties_mask_the_later_token_first_as_the_reference_sort():
    # (log r)² .09, .09, .01, .09 with τ = .05: stably sorted .01, .09 (t 0), .09 (t 1), .09 (t 3), prefix means .01,
    # .05, .063, .07 → keep .01 and the first .09, mask t 1 and t 3. (The paper's loop, taking the first largest
    # each time, would mask t 0 and t 1 instead: the same count, other tokens.)
    lr = torch.tensor([[0.3, 0.3, 0.1, 0.3]], dtype=torch.float64)
    keep, stats = m2po_mask(lr, torch.ones_like(lr), torch.ones_like(lr, dtype=torch.bool), 0.05)
    assert keep.tolist() == [[True, False, True, False]]
    assert stats["m2po/m2_after"].item() == pytest.approx(0.05)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_host_path_selects_what_the_sync_free_device_path_selects(dtype, monkeypatch):
    """On CPU tensors the selection reads M2 (free there) to skip the sort, and sorts only the trust region; the
    accelerator path sorts every token without a host read. Both mask the same tokens, ties included."""
    generator = torch.Generator().manual_seed(0)
    dropped_some = kept_all = 0
    for case in range(40):
        rows, cols = 6, 50
        lr = torch.randn(rows, cols, generator=generator, dtype=dtype) * (0.05 if case % 4 == 0 else 0.4)
        if case % 3 == 0:  # ties: few distinct values
            lr = (lr * 4).round() / 4
        adv = torch.randn(rows, 1, generator=generator, dtype=dtype)
        mask = torch.rand(rows, cols, generator=generator) > 0.2
        threshold = [0.04, 0.01, 0.2][case % 3]
        host, host_stats = m2po_mask(lr, adv, mask, threshold)
        with monkeypatch.context() as patch:
            patch.setattr(m2po_module, "_dropped_on_host", m2po_module._dropped_on_device)
            device, device_stats = m2po_mask(lr, adv, mask, threshold)
        assert torch.equal(host, device), case
        assert all(torch.equal(host_stats[k], device_stats[k]) for k in host_stats), case
        dropped_some += bool((mask & ~host).any())
        kept_all += bool(torch.equal(host, mask))
    assert dropped_some >= 10 and kept_all >= 5  # both branches of the host path ran


# ==================================================================================================
# Arguments and inputs
# ==================================================================================================


def test_defaults_and_metrics_are_the_references():
    assert M2POPolicyLoss.default_args() == {
        "m2_threshold": 0.04,
        "loss_agg_mode": "token-mean",
        "log_ratio_clip": 20.0,
    }
    assert trl_ext.losses.POLICY_LOSSES["m2po"] is M2POPolicyLoss
    assert M2POPolicyLoss.inputs() == (
        "logprob",
        "old_logprob",
        "action_mask",
        "advantages",
        "window_selected",
        "global_valid_toks",
        "global_valid_seqs",
        "normalizer",
    )
    assert M2POPolicyLoss.metrics == {
        "pg_loss": "share",
        "ppo_kl": "mean",
        "ratio/mean": "mean",
        "m2po/m2_before": "mean",
        "m2po/m2_after": "mean",
        "m2po/masked_fraction": "mean",
        "m2po/trust_region_fraction": "mean",
    }


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("m2_threshold", -0.01),
        ("m2_threshold", math.nan),
        ("m2_threshold", math.inf),
        ("m2_threshold", "0.04"),
        ("m2_threshold", True),
        ("m2_threshold", None),
        ("log_ratio_clip", 0.0),
        ("log_ratio_clip", -1.0),
        ("log_ratio_clip", math.inf),
        ("log_ratio_clip", math.nan),
        ("log_ratio_clip", None),
        ("loss_agg_mode", "mean"),
        ("loss_agg_mode", None),
    ],
)
def test_bad_argument_is_a_value_error_naming_it(argument, value):
    with pytest.raises(ValueError, match=rf"^m2po: {argument}={value!r} is not valid; must be "):
        get_policy_loss("m2po", **{argument: value})


def test_bad_inputs_are_value_errors_naming_them():
    fn = get_policy_loss("m2po")
    good = {
        "logprob": torch.zeros(2, 3),
        "old_logprob": torch.zeros(2, 3),
        "action_mask": torch.ones(2, 3, dtype=torch.bool),
        "advantages": torch.ones(2),
    }
    with pytest.raises(ValueError, match=r"^m2po: unknown input 'm2po_mask'"):
        fn(**good, m2po_mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"^m2po: old_logprob has shape \(2, 2\)"):
        fn(**{**good, "old_logprob": torch.zeros(2, 2)})
    with pytest.raises(ValueError, match=r"^m2po: advantages must be a floating-point tensor"):
        fn(**{**good, "advantages": torch.ones(2, dtype=torch.long)})
    with pytest.raises(ValueError, match=r"^m2po: action_mask must be boolean or contain only 0 and 1"):
        fn(**{**good, "action_mask": torch.full((2, 3), 0.5)})
    with pytest.raises(ValueError, match=r"^m2po: global_valid_toks=-1 is not valid"):
        fn(**good, global_valid_toks=-1)


@pytest.mark.parametrize("shape", [(0, 3), (2, 0)])
def test_empty_batch_is_a_zero_loss(shape):
    lp = torch.zeros(shape, requires_grad=True)
    loss, metrics = get_policy_loss("m2po")(
        logprob=lp, old_logprob=torch.zeros(shape), action_mask=torch.ones(shape, dtype=torch.bool), advantages=lp
    )
    loss.backward()
    assert loss.item() == 0.0 and torch.count_nonzero(lp.grad) == 0
    assert all(v.item() == 0.0 for v in metrics.values())


# ==================================================================================================
# The record, the generated classes and training on stale rollouts
# ==================================================================================================


def test_record_follows_the_reference_preset():
    spec = trl_ext.get_algorithm("m2po")
    assert spec.default_config() == {
        "repeat_times": 8,
        "sample_strategy": "default",
        "policy_loss_fn": "m2po",
        "advantage_fn": "grpo",
        "kl_penalty_fn": "none",
        "kl_loss_fn": "none",
        "entropy_loss_fn": "none",
    }
    assert (spec.use_reference, spec.use_critic, spec.trainer, spec.schema) == (False, False, "grpo", "experience")
    assert spec.paper == trl_ext.Paper(
        "Prosperity before Collapse: How Far Can Off-Policy RL Reach with Stale Data on LLMs?", "2510.01161"
    )
    assert "steps_per_generation > gradient_accumulation_steps" in spec.details
    assert spec.class_names == ("M2POConfig", "M2POTrainer")


def test_generated_config_and_trainer(tmp_path):
    assert trl_ext.M2POConfig is trl_ext.get_algorithm("m2po").config_class
    assert trl_ext.M2POTrainer is trl_ext.get_algorithm("m2po").trainer_class
    assert trl_ext.M2POTrainer.config_class is trl_ext.M2POConfig
    fields = {f.name: f.default for f in dataclasses.fields(trl_ext.M2POConfig)}
    assert (fields["m2_threshold"], fields["log_ratio_clip"], fields["loss_agg_mode"]) == (0.04, 20.0, "token-mean")
    assert (fields["policy_loss_fn"], fields["advantage_fn"], fields["num_generations"]) == ("m2po", "grpo", 8)
    config = cpu_config(trl_ext.M2POConfig, str(tmp_path), m2_threshold=0.01, log_ratio_clip=5.0)
    assert config.components.policy_loss.args == {
        "m2_threshold": 0.01,
        "loss_agg_mode": "token-mean",
        "log_ratio_clip": 5.0,
    }
    with pytest.raises(ValueError, match=r"m2po: m2_threshold=-1.0 is not valid"):
        cpu_config(trl_ext.M2POConfig, str(tmp_path), m2_threshold=-1.0)
    with pytest.raises(ValueError, match=r"m2po: log_ratio_clip=0.0 is not valid"):
        cpu_config(trl_ext.M2POConfig, str(tmp_path), log_ratio_clip=0.0)


def test_trains_on_stale_rollouts_and_logs_the_selection(tiny_model, tmp_path):
    """4 optimizer steps on one generation batch (steps_per_generation 4 > gradient_accumulation_steps 1): steps 2-4
    train on completions of an older policy, so their ratios differ from 1 and the small τ masks some tokens."""
    config = cpu_config(
        trl_ext.M2POConfig,
        str(tmp_path),
        max_steps=4,
        steps_per_generation=4,
        gradient_accumulation_steps=1,
        m2_threshold=1e-3,
    )
    trainer = toy_trainer(trl_ext.M2POTrainer, config, tiny_model)
    assert isinstance(trainer.policy_loss_fn, M2POPolicyLoss) and trainer.policy_loss_fn.m2_threshold == 1e-3
    trainer.train()
    assert trainer.state.global_step == 4
    names = ["policy_loss", *M2POPolicyLoss.metrics]
    series = {name: logged(trainer, name) for name in names}
    assert all(len(values) == 4 for values in series.values()), {k: len(v) for k, v in series.items()}
    assert all(math.isfinite(v) for values in series.values() for v in values)
    assert series["policy_loss"] == pytest.approx(series["pg_loss"])  # no KL or entropy term
    # The first step trains on fresh completions (π = π_old: log r ~ 0); later ones on stale ones.
    assert abs(series["ppo_kl"][0]) < 1e-4
    assert min(series["m2po/m2_before"][1:]) > 1e-3 and min(series["m2po/masked_fraction"][1:]) > 0
    # What M2PO guarantees: the kept trust-region tokens' mean (log r)² is within τ, at every step.
    assert all(value <= 1e-3 * (1 + 1e-6) for value in series["m2po/m2_after"])  # (float32 sums)
    for before, after, masked in zip(
        series["m2po/m2_before"], series["m2po/m2_after"], series["m2po/masked_fraction"], strict=True
    ):
        assert (masked > 0) == (before > 1e-3) and after <= before


def test_a_window_selection_replaces_the_loss_own():
    """`window_selected` (the selection a trainer made over the whole window, `select_over_window`) is the loss's
    selection: the unselected tokens train nothing, stay counted, and the statistics are left to the window."""
    torch.manual_seed(0)
    logprob = (torch.randn(3, 5) * 0.3 - 1).requires_grad_()
    old = logprob.detach() + torch.randn(3, 5) * 0.5
    mask = torch.ones(3, 5, dtype=torch.bool)
    advantages = torch.tensor([1.0, -1.0, 0.5])
    fn = M2POPolicyLoss(m2_threshold=0.01)
    selected, stats = fn.select_over_window(logprob.detach() - old, advantages.unsqueeze(1).expand(3, 5), mask)
    assert stats["m2po/masked_fraction"] > 0
    own, own_metrics = fn(logprob=logprob, old_logprob=old, action_mask=mask, advantages=advantages)
    given, given_metrics = fn(
        logprob=logprob, old_logprob=old, action_mask=mask, advantages=advantages, window_selected=selected
    )
    torch.testing.assert_close(given, own)  # one micro-batch is the window: the same selection
    assert set(own_metrics) - set(given_metrics) == set(M2PO_METRICS)
    none, _ = fn(logprob=logprob, old_logprob=old, action_mask=mask, advantages=advantages, window_selected=~mask)
    assert none.item() == 0.0
