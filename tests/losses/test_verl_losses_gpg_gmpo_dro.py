"""verl 0.9.1's `gpg`, `geo_mean` (GMPO) and `dro` policy losses and its `gpg` advantage, against closed forms.

Every expected value here is recomputed token by token in plain Python (`math`, lists) from the formulas in the
losses' docstrings, with the derivatives worked out by hand; nothing is read back from `trl_ext.losses`. The verl-compat
entry points are checked the same way (benchmarks/compare_verl.py compares them with the real verl).
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trl_ext.advantages import get_advantage_fn
from trl_ext.compat import verl
from trl_ext.losses import LOSS_AGG_MODES, POLICY_LOSSES, get_policy_loss

D = torch.float64
EPS = 1e-8
NAN = math.nan

# 4 rows of 5 tokens: row 2 is empty, row 3 has leading padding. Masked positions hold NaN in every input.
MASK = [
    [1, 1, 1, 0, 0],
    [1, 1, 1, 1, 1],
    [0, 0, 0, 0, 0],
    [0, 1, 1, 1, 0],
]
OLD = [
    [-1.0, -0.5, -2.0, NAN, NAN],
    [-0.3, -1.2, -0.7, -0.9, -2.5],
    [NAN, NAN, NAN, NAN, NAN],
    [NAN, -1.1, -0.4, -0.6, NAN],
]
# Δ = lp − old: both clip sides hit (±0.5 beyond ±0.2), small ones inside
DELTA = [
    [0.5, -0.1, 0.05, 0.0, 0.0],
    [-0.5, 0.1, 0.3, -0.05, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, -0.3, 0.15, 0.4, 0.0],
]
ADV = [  # per token, with zeros (sign 0) at valid positions
    [1.0, 1.0, 0.0, NAN, NAN],
    [-2.0, -2.0, 0.5, -2.0, -2.0],
    [NAN, NAN, NAN, NAN, NAN],
    [NAN, 1.5, -1.0, 1.5, NAN],
]
WEIGHTS = [  # rollout importance-sampling correction
    [0.9, 1.2, 0.5, NAN, NAN],
    [1.1, 0.7, 1.3, 0.95, 2.0],
    [NAN, NAN, NAN, NAN, NAN],
    [NAN, 0.6, 1.4, 1.0, NAN],
]
B, T = 4, 5


def lp_list() -> list[list[float]]:
    return [[OLD[i][t] + DELTA[i][t] for t in range(T)] for i in range(B)]


def tensors(with_weights: bool = False) -> dict:
    inputs = {
        "logprob": torch.tensor(lp_list(), dtype=D),
        "old_logprob": torch.tensor(OLD, dtype=D),
        "action_mask": torch.tensor(MASK, dtype=torch.bool),
        "advantages": torch.tensor(ADV, dtype=D),
    }
    if with_weights:
        inputs["importance_sampling_ratio"] = torch.tensor(WEIGHTS, dtype=D)
    return inputs


def valid(i: int, t: int) -> bool:
    return MASK[i][t] == 1


def n_row(i: int) -> int:
    return sum(MASK[i])


N_TOK = sum(map(sum, MASK))


def call(name: str, inputs: dict, **kwargs) -> tuple[float, list[list[float]], dict]:
    """Loss, gradient wrt logprob (as lists) and metrics (floats)."""
    lp = inputs["logprob"].clone().requires_grad_(True)
    loss, metrics = get_policy_loss(name, **kwargs)(**{**inputs, "logprob": lp})
    (grad,) = torch.autograd.grad(loss, lp)
    return loss.item(), grad.tolist(), {k: v.item() for k, v in metrics.items()}


def assert_grad(actual: list[list[float]], expected: list[list[float]]) -> None:
    for i in range(B):
        for t in range(T):
            assert actual[i][t] == pytest.approx(expected[i][t], abs=1e-12), (i, t)


# ------------------------------------------------------------------------------------------------ aggregation


def agg_coef(mode: str, i: int) -> float:
    """The weight of a valid token of row i in trl_ext's local aggregation (all B rows count, empty ones too)."""
    return {
        "token-mean": 1.0 / (N_TOK + EPS),
        "token-sum": 1.0,
        "seq-mean-token-sum": 1.0 / B,
        "seq-mean-token-mean": 1.0 / (n_row(i) + EPS) / B,
        "seq-mean-token-sum-norm": 1.0 / (T + EPS),
    }[mode]


def per_token_closed_form(name: str, i: int, t: int, beta: float, weighted: bool) -> tuple[float, float]:
    """(L, dL/dlp) of one valid token for gpg / dro."""
    lp, a, d = OLD[i][t] + DELTA[i][t], ADV[i][t], DELTA[i][t]
    w = WEIGHTS[i][t] if weighted else 1.0
    if name == "gpg":
        return -a * lp * w, -a * w
    return -(a * lp - 0.5 * beta * d * d) * w, (-a + beta * d) * w


@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "is-ratio"])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("name", ["gpg", "dro"])
def test_gpg_dro_closed_form(name, mode, weighted):
    beta = 0.7
    kwargs = {"loss_agg_mode": mode, **({"dro_beta": beta} if name == "dro" else {})}
    loss, grad, metrics = call(name, tensors(weighted), **kwargs)
    expected, expected_grad = 0.0, [[0.0] * T for _ in range(B)]
    for i in range(B):
        for t in range(T):
            if valid(i, t):
                value, slope = per_token_closed_form(name, i, t, beta, weighted)
                expected += agg_coef(mode, i) * value
                expected_grad[i][t] = agg_coef(mode, i) * slope
    assert loss == pytest.approx(expected, rel=1e-12)
    assert_grad(grad, expected_grad)
    assert metrics["pg_loss"] == loss
    if name == "dro":
        kl = -sum(DELTA[i][t] for i in range(B) for t in range(T) if valid(i, t)) / (N_TOK + EPS)
        assert set(metrics) == {"pg_loss", "ppo_kl"} and metrics["ppo_kl"] == pytest.approx(kl, rel=1e-12)
    else:
        assert set(metrics) == {"pg_loss"}


def test_gpg_and_dro_by_hand():
    # GPG, one token: L = −A·lp = −2·log(0.5); gradient −A = −2
    one = {"action_mask": torch.ones(1, 1, dtype=torch.bool), "advantages": torch.tensor([2.0], dtype=D)}
    loss, grad, _ = call("gpg", {**one, "logprob": torch.tensor([[math.log(0.5)]], dtype=D)})
    assert (loss, grad) == (pytest.approx(-2 * math.log(0.5)), [[pytest.approx(-2.0)]])
    # DRO, β = 0.5, A = 1, π/π_old = 2: L = −(log 0.5 − ¼·log²2), gradient −1 + ½·log 2 (the penalty pulls back)
    dro = {**one, "advantages": torch.tensor([1.0], dtype=D), "old_logprob": torch.tensor([[math.log(0.25)]], dtype=D)}
    loss, grad, metrics = call("dro", {**dro, "logprob": torch.tensor([[math.log(0.5)]], dtype=D)}, dro_beta=0.5)
    assert loss == pytest.approx(-(math.log(0.5) - 0.25 * math.log(2) ** 2))
    assert grad == [[pytest.approx(-1 + 0.5 * math.log(2))]]
    assert metrics["ppo_kl"] == pytest.approx(-math.log(2))
    # A = 0: only the penalty, ½β·Δ², remains (DRO's loss is not proportional to A)
    loss, grad, _ = call(
        "dro", {**dro, "advantages": torch.zeros(1, dtype=D), "logprob": torch.tensor([[math.log(0.5)]], dtype=D)}
    )
    assert loss == pytest.approx(0.5 * 0.05 * math.log(2) ** 2)  # the default β = 0.05
    assert grad == [[pytest.approx(0.05 * math.log(2))]]


def test_sequence_level_inputs_equal_their_broadcast():
    """[B] advantages and a [B, 1] importance-sampling ratio equal the same values on every token."""
    inputs = tensors()
    row_adv = torch.tensor([0.5, -1.0, 2.0, 1.5], dtype=D)
    row_w = torch.tensor([[0.8], [1.3], [0.4], [1.1]], dtype=D)
    token = {
        **inputs,
        "advantages": row_adv.unsqueeze(-1).expand(B, T),
        "importance_sampling_ratio": row_w.expand(B, T),
    }
    rows = {**inputs, "advantages": row_adv, "importance_sampling_ratio": row_w}
    for name, kwargs in (("gpg", {}), ("dro", {"loss_agg_mode": "seq-mean-token-mean"}), ("geo_mean", {})):
        loss_t, grad_t, metrics_t = call(name, token, **kwargs)
        loss_r, grad_r, metrics_r = call(name, rows, **kwargs)
        assert loss_r == pytest.approx(loss_t, rel=1e-12), name
        assert_grad(grad_r, grad_t)
        assert metrics_r == pytest.approx(metrics_t, rel=1e-12)


# ------------------------------------------------------------------------------------------------ GMPO


def gmpo_closed_form(low: float, high: float, weighted: bool, seqs: float | None = None):
    """(loss, gradient, metrics) of GMPO, row by row."""
    loss, grad = 0.0, [[0.0] * T for _ in range(B)]
    clip_hi = clip_lo = 0
    for i in range(B):
        n = n_row(i)
        clipped_sum, adv_sum, log_w_sum, slopes = 0.0, 0.0, 0.0, [0.0] * T
        for t in range(T):
            if not valid(i, t):
                continue
            d, a = DELTA[i][t], ADV[i][t]
            if a > 0:
                clipped, slopes[t] = (high, 0.0) if d > high else (d, 1.0)
            elif a < 0:
                clipped, slopes[t] = (-low, 0.0) if d < -low else (d, 1.0)
            else:
                clipped = 0.0
            clipped_sum += clipped
            adv_sum += a
            log_w_sum += math.log(WEIGHTS[i][t] + 1e-10)
            outside = d > high or d < -low
            clip_hi += outside and a > 0
            clip_lo += outside and a < 0
        ratio = math.exp(clipped_sum / (n + EPS))
        row_adv = adv_sum / (n + EPS)
        w = math.exp(log_w_sum / (n + EPS)) if weighted else 1.0
        divisor = B if seqs is None else seqs
        loss += -row_adv * ratio * w / divisor
        for t in range(T):  # d/dlp_t of −Ā·exp(mean Δ')·w = −Ā·R·w·(dΔ'_t/dΔ_t)/n
            grad[i][t] = -row_adv * ratio * w * slopes[t] / (n + EPS) / divisor
    metrics = {
        "pg_loss": loss,
        "pg_clipfrac": clip_hi / (N_TOK + EPS),
        "pg_clipfrac_lower": clip_lo / (N_TOK + EPS),
        "ppo_kl": -sum(DELTA[i][t] for i in range(B) for t in range(T) if valid(i, t)) / (N_TOK + EPS),
    }
    return loss, grad, metrics


@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "is-ratio"])
@pytest.mark.parametrize(
    ("kwargs", "low", "high"),
    [({}, 0.2, 0.2), ({"clip_range_low": 0.1, "clip_range_high": 0.35}, 0.1, 0.35), ({"clip_range": 0.45}, 0.45, 0.45)],
    ids=["default", "asymmetric", "wide"],
)
def test_geo_mean_closed_form(kwargs, low, high, weighted):
    loss, grad, metrics = call("geo_mean", tensors(weighted), **kwargs)
    expected, expected_grad, expected_metrics = gmpo_closed_form(low, high, weighted)
    assert loss == pytest.approx(expected, rel=1e-12)
    assert_grad(grad, expected_grad)
    assert metrics == pytest.approx(expected_metrics, rel=1e-12)
    assert expected_metrics["pg_clipfrac"] > 0 and expected_metrics["pg_clipfrac_lower"] > 0  # both sides hit


def test_geo_mean_by_hand():
    # one row, A = 1, Δ = (log 2, 0): Δ' = (0.2, 0) → R = e^0.1, loss −e^0.1; only token 2 has a gradient, −e^0.1/2
    inputs = {
        "logprob": torch.tensor([[math.log(2.0), 0.0]], dtype=D),
        "old_logprob": torch.zeros(1, 2, dtype=D),
        "action_mask": torch.ones(1, 2, dtype=torch.bool),
        "advantages": torch.tensor([1.0], dtype=D),
    }
    loss, grad, metrics = call("geo_mean", inputs)
    assert loss == pytest.approx(-math.exp(0.1))
    assert grad == [[0.0, pytest.approx(-math.exp(0.1) / 2)]]
    assert (metrics["pg_clipfrac"], metrics["pg_clipfrac_lower"]) == (pytest.approx(0.5), 0.0)
    # A = −1: the upper side is not clipped (Δ' = Δ), R = √2, loss √2, gradient √2/2 on both tokens; verl still
    # counts token 1 (Δ outside [−0.2, 0.2]) in pg_clipfrac_lower
    loss, grad, metrics = call("geo_mean", {**inputs, "advantages": torch.tensor([-1.0], dtype=D)})
    assert loss == pytest.approx(math.sqrt(2))
    assert grad == [[pytest.approx(math.sqrt(2) / 2)] * 2]
    assert (metrics["pg_clipfrac"], metrics["pg_clipfrac_lower"]) == (0.0, pytest.approx(0.5))


def test_geo_mean_has_no_loss_agg_mode():
    assert "loss_agg_mode" not in POLICY_LOSSES["geo_mean"].default_args()
    assert POLICY_LOSSES["geo_mean"].inputs()[-1] == "global_valid_seqs"  # its only window count


# ------------------------------------------------------------------------------------------------ window shares


WINDOW_LOSSES = [
    *[("gpg", {"loss_agg_mode": mode}) for mode in LOSS_AGG_MODES],
    *[("dro", {"loss_agg_mode": mode, "dro_beta": 0.4}) for mode in LOSS_AGG_MODES],
    ("geo_mean", {}),
    ("geo_mean", {"clip_range_low": 0.1, "clip_range_high": 0.3}),
]


@pytest.mark.parametrize("splits", [[4], [1, 1, 1, 1], [2, 2], [3, 1]], ids=str)
@pytest.mark.parametrize(
    ("name", "kwargs"), WINDOW_LOSSES, ids=[f"{n}-{'-'.join(map(str, k.values()))}" for n, k in WINDOW_LOSSES]
)
def test_window_shares_sum_to_the_whole_batch_loss(name, kwargs, splits):
    inputs = tensors(with_weights=True)
    fn = get_policy_loss(name, **kwargs)
    full_lp = inputs["logprob"].clone().requires_grad_(True)
    full, _ = fn(**{**inputs, "logprob": full_lp})
    full.backward()
    window = {"global_valid_toks": torch.tensor(float(N_TOK)), "global_valid_seqs": B}
    parts_lp = inputs["logprob"].clone().requires_grad_(True)
    total, start = torch.zeros((), dtype=D), 0
    for size in splits:
        rows = slice(start, start + size)
        part = {k: v[rows] for k, v in inputs.items()}
        share, _ = fn(**{**part, "logprob": parts_lp[rows]}, **{k: window[k] for k in fn.inputs() if k in window})
        total, start = total + share, start + size
    total.backward()
    torch.testing.assert_close(total, full.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(parts_lp.grad, full_lp.grad, rtol=1e-12, atol=1e-12)


def test_geo_mean_window_share_divides_by_global_valid_seqs():
    loss, grad, _ = call("geo_mean", {**tensors(), "global_valid_seqs": 10})
    expected, expected_grad, _ = gmpo_closed_form(0.2, 0.2, False, seqs=10)
    assert loss == pytest.approx(expected, rel=1e-12)
    assert_grad(grad, expected_grad)


# ------------------------------------------------------------------------------------------------ input rules


CASES = [("gpg", {}), ("geo_mean", {}), ("dro", {})]


@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "is-ratio"])
@pytest.mark.parametrize("shape", [(0, T), (B, 0), (0, 0)], ids=["B=0", "T=0", "B=T=0"])
@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_empty_batch_gives_a_finite_zero(name, kwargs, shape, weighted):
    rows, cols = shape
    inputs = {
        "logprob": -torch.rand(rows, cols, dtype=D),
        "old_logprob": -torch.rand(rows, cols, dtype=D),
        "action_mask": torch.ones(rows, cols, dtype=torch.bool),
        "advantages": torch.randn(rows, dtype=D),
    }
    if weighted:
        inputs["importance_sampling_ratio"] = torch.rand(rows, 1, dtype=D)
    for window in ({}, {"global_valid_toks": 0, "global_valid_seqs": 0}):
        fn = get_policy_loss(name, **kwargs)
        lp = inputs["logprob"].clone().requires_grad_(True)
        loss, metrics = fn(**{**inputs, "logprob": lp}, **{k: v for k, v in window.items() if k in fn.inputs()})
        assert loss.dim() == 0 and torch.isfinite(loss) and loss.item() == 0.0
        loss.backward()
        assert lp.grad.shape == lp.shape and torch.count_nonzero(lp.grad) == 0
        assert all(torch.isfinite(v) and v.item() == 0.0 for v in metrics.values())


READS = [
    (name, kwargs, key)
    for name, kwargs in CASES
    for key in ("logprob", "old_logprob", "advantages", "importance_sampling_ratio")
    if not (name == "gpg" and key == "old_logprob")  # gpg does not read old_logprob
]


@pytest.mark.parametrize("fill", [NAN, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize(("name", "kwargs", "key"), READS, ids=[f"{r[0]}-{r[2]}" for r in READS])
def test_non_finite_at_a_valid_position_gives_nan(name, kwargs, key, fill):
    for at in [(0, 2), (1, 0), (3, 3)]:  # (0, 2): A = 0, where GMPO's clipped log-ratio is 0 whatever Δ
        inputs = tensors(with_weights=True)
        inputs[key] = inputs[key].clone()
        inputs[key][at] = fill
        loss, _ = get_policy_loss(name, **kwargs)(**inputs)
        assert torch.isnan(loss), (at, loss)


def test_gpg_ignores_old_logprob():
    inputs = tensors()
    loss, _ = get_policy_loss("gpg")(**{**inputs, "old_logprob": torch.full((B, T), NAN, dtype=D)})
    assert torch.isfinite(loss)


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_masked_non_finite_values_change_nothing(name, kwargs):
    """The batch already holds NaN at every masked position (and the empty row): the results equal those of a
    batch with finite values there, gradient and metrics included."""
    dirty = tensors(with_weights=True)
    mask = dirty["action_mask"]
    clean = {k: torch.where(mask, v, 0.5) if v.dtype == D else v for k, v in dirty.items()}
    for key in ("logprob", "old_logprob", "advantages", "importance_sampling_ratio"):
        dirty[key] = torch.where(mask, dirty[key], torch.tensor([NAN, math.inf, -math.inf, NAN, NAN], dtype=D))
    loss_c, grad_c, metrics_c = call(name, clean, **kwargs)
    loss_d, grad_d, metrics_d = call(name, dirty, **kwargs)
    assert math.isfinite(loss_d) and loss_d == loss_c
    assert grad_d == grad_c and all(math.isfinite(g) for row in grad_d for g in row)
    assert metrics_d == metrics_c


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("dro", {"dro_beta": 0}, r"^dro: dro_beta=0 is not valid; must be > 0$"),
        ("dro", {"dro_beta": -0.1}, r"^dro: dro_beta=-0\.1 is not valid; must be > 0$"),
        ("dro", {"dro_beta": math.inf}, r"dro_beta=inf is not valid"),
        ("dro", {"dro_beta": None}, r"dro_beta=None is not valid"),
        ("dro", {"loss_agg_mode": "mean"}, r"^dro: loss_agg_mode='mean' is not valid; must be one of "),
        ("gpg", {"loss_agg_mode": "sum"}, r"^gpg: loss_agg_mode='sum' is not valid; must be one of "),
        ("geo_mean", {"clip_range": -0.1}, r"^geo_mean: clip_range=-0\.1 is not valid; must be >= 0"),
        ("geo_mean", {"clip_range_low": -0.2}, r"^geo_mean: clip_range_low=-0\.2 is not valid; must be >= 0"),
        ("geo_mean", {"clip_range_high": -1.0}, r"^geo_mean: clip_range_high=-1\.0 is not valid; must be >= 0"),
        ("geo_mean", {"clip_range": None}, r"^geo_mean: no clip range given"),
        ("geo_mean", {"loss_agg_mode": "token-mean"}, r"^geo_mean: unknown argument\(s\) 'loss_agg_mode'"),
    ],
)
def test_bad_arguments_are_refused_naming_them(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_policy_loss(name, **kwargs)


@pytest.mark.parametrize(
    "bad",
    [torch.ones(B, dtype=D), torch.ones(B, T + 1, dtype=D), torch.ones(B, T, 1, dtype=D), torch.ones(B + 1, 1), "x"],
    ids=["1d", "long", "3d", "rows", "str"],
)
@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_importance_sampling_ratio_shapes(name, kwargs, bad):
    fn = get_policy_loss(name, **kwargs)
    with pytest.raises(ValueError, match=rf"^{name}: importance_sampling_ratio has shape .*expected \[B, T\] or "):
        fn(**tensors(), importance_sampling_ratio=bad)
    assert torch.isfinite(fn(**tensors(), importance_sampling_ratio=torch.ones(B, T))[0])  # float32 is fine


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_integer_importance_sampling_ratio_is_refused(name, kwargs):
    with pytest.raises(ValueError, match="importance_sampling_ratio must be a floating-point tensor"):
        get_policy_loss(name, **kwargs)(**tensors(), importance_sampling_ratio=torch.ones(B, T, dtype=torch.int64))


# ------------------------------------------------------------------------------------------------ verl compat


def verl_batch():
    """verl's inputs: float masks, and finite values everywhere (verl multiplies by the mask)."""
    inputs = tensors(with_weights=True)
    mask = inputs["action_mask"].to(D)
    fix = {k: torch.where(inputs["action_mask"], v, 0.3) for k, v in inputs.items() if v.dtype == D}
    return fix["old_logprob"], fix["logprob"], fix["advantages"], mask, fix["importance_sampling_ratio"]


def verl_agg_coef(mode: str, i: int, info: dict) -> float:
    """verl 0.9.1's `agg_loss` weight of a valid token of row i (global batch info, or the micro-batch's counts:
    tokens, and the NON-empty rows)."""
    dp = info.get("dp_size", 1)
    n_tok = info.get("batch_num_tokens", N_TOK)
    seqs = info.get("global_batch_size", sum(n_row(r) > 0 for r in range(B)))
    scale = info.get("loss_scale_factor", T)
    return {
        "token-mean": dp / n_tok,
        "token-sum": dp,
        "seq-mean-token-sum": dp / seqs,
        "seq-mean-token-mean": dp / seqs / (n_row(i) + EPS),
        "seq-mean-token-sum-norm": dp / seqs / scale,
    }[mode]


INFOS = {"local": {}, "global": {"dp_size": 2, "batch_num_tokens": 30, "global_batch_size": 7, "loss_scale_factor": 9}}


def verl_config(info: dict, **extra) -> dict:
    return {"clip_ratio": 0.2, "clip_ratio_low": 0.1, "clip_ratio_high": 0.3, "global_batch_info": info, **extra}


@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "rollout-is"])
@pytest.mark.parametrize("info", INFOS.values(), ids=INFOS.keys())
@pytest.mark.parametrize("mode", verl.AGG_LOSS_MODES)
@pytest.mark.parametrize("name", ["gpg", "dro"])
def test_verl_gpg_dro_closed_form(name, mode, info, weighted):
    old, lp, adv, mask, w = verl_batch()
    beta = 0.6
    config = verl_config(info, policy_loss={"dro_beta": beta})
    lp = lp.clone().requires_grad_(True)
    loss, metrics = verl.get_policy_loss_fn(name)(old, lp, adv, mask, mode, config, w if weighted else None)
    (grad,) = torch.autograd.grad(loss, lp)
    expected, expected_grad = 0.0, [[0.0] * T for _ in range(B)]
    for i in range(B):
        for t in range(T):
            if valid(i, t):
                value, slope = per_token_closed_form(name, i, t, beta, weighted)
                expected += verl_agg_coef(mode, i, info) * value
                expected_grad[i][t] = verl_agg_coef(mode, i, info) * slope
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    assert_grad(grad.tolist(), expected_grad)
    if name == "gpg":
        assert metrics == {}
    else:
        kl = -sum(DELTA[i][t] for i in range(B) for t in range(T) if valid(i, t)) / (N_TOK + EPS)
        assert metrics.keys() == {"actor/ppo_kl"} and metrics["actor/ppo_kl"] == pytest.approx(kl, rel=1e-12)


@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "rollout-is"])
@pytest.mark.parametrize("info", INFOS.values(), ids=INFOS.keys())
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum-norm"])
def test_verl_geo_mean_closed_form(mode, info, weighted):
    """verl ignores loss_agg_mode and global_batch_info: the mean over the micro-batch's rows, empty ones too."""
    old, lp, adv, mask, w = verl_batch()
    lp = lp.clone().requires_grad_(True)
    loss, metrics = verl.compute_policy_loss_geo_mean(
        old, lp, adv, mask, mode, verl_config(info), w if weighted else None
    )
    (grad,) = torch.autograd.grad(loss, lp)
    expected, expected_grad, expected_metrics = gmpo_closed_form(0.1, 0.3, weighted)
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    assert_grad(grad.tolist(), expected_grad)
    assert metrics == pytest.approx(
        {f"actor/{k}": expected_metrics[k] for k in ("pg_clipfrac", "ppo_kl", "pg_clipfrac_lower")}, rel=1e-12
    )
    assert all(isinstance(v, float) for v in metrics.values())


def test_verl_registry_and_config_objects():
    assert verl.get_policy_loss_fn("gpg") is verl.compute_policy_loss_gpg
    assert verl.get_policy_loss_fn("geo_mean") is verl.compute_policy_loss_geo_mean
    assert verl.get_policy_loss_fn("dro") is verl.compute_policy_loss_dro
    old, lp, adv, mask, _ = verl_batch()
    as_dict = verl_config({}, policy_loss={"dro_beta": 0.2})
    as_object = SimpleNamespace(**{**as_dict, "policy_loss": SimpleNamespace(dro_beta=0.2)})
    for name in ("gpg", "geo_mean", "dro"):
        by_dict = verl.get_policy_loss_fn(name)(old, lp, adv, mask, "token-mean", as_dict)
        by_object = verl.get_policy_loss_fn(name)(old, lp, adv, mask, "token-mean", as_object)
        torch.testing.assert_close(by_dict[0], by_object[0])
        assert by_dict[1] == by_object[1]
        with pytest.raises(ValueError, match="config"):
            verl.get_policy_loss_fn(name)(old, lp, adv, mask, "token-mean", None)


@pytest.mark.parametrize("policy_loss", [None, {}, {"dro_beta": None}, {"dro_beta": 0.0}, {"dro_beta": -1}])
def test_verl_dro_needs_a_positive_dro_beta(policy_loss):
    old, lp, adv, mask, _ = verl_batch()
    config = verl_config({}, **({} if policy_loss is None else {"policy_loss": policy_loss}))
    with pytest.raises(ValueError, match=re.escape("policy_loss.dro_beta must be a positive value")):
        verl.compute_policy_loss_dro(old, lp, adv, mask, "token-mean", config)


# ------------------------------------------------------------------------------------------------ gpg advantage


def gpg_advantage_closed_form(scores: list[float], groups: list, f_norm: float) -> list[float]:
    members: dict = {}
    for s, g in zip(scores, groups, strict=True):
        members.setdefault(g, []).append(s)
    alpha = len(scores) / max(sum(s != 0 for s in scores), 1)
    means = {g: (sum(v) / len(v) if len(v) > 1 else 0.0) for g, v in members.items()}
    return [alpha * (s - means[g]) / f_norm for s, g in zip(scores, groups, strict=True)]


GROUPS = ["a", "a", "a", "b", "b", "c", "d", "d"]  # "c": a group of one (mean 0)
SCORES = [1.0, 0.0, 0.5, 0.0, 0.0, 2.0, -1.0, 1.0]  # 5 of 8 non-zero: α = 8/5


@pytest.mark.parametrize("f_norm", [1.0, 0.25])
def test_gpg_advantage_closed_form(f_norm):
    mask = torch.ones(8, 4, dtype=torch.bool)
    mask[1, 2:] = False
    mask[4] = False  # an empty response: its advantage row is 0
    rewards = torch.zeros(8, 4, dtype=D)
    rewards[:, 0] = torch.tensor(SCORES, dtype=D) - 0.25
    rewards[:, 3] = 0.25  # token rewards are summed over the whole row, as verl does
    expected = gpg_advantage_closed_form(SCORES, GROUPS, f_norm)
    assert 8 / 5 * (1.0 - 0.5) / f_norm == pytest.approx(expected[0])  # the formula, read off once
    fn = get_advantage_fn("gpg", f_norm=f_norm)
    assert fn.token_level and fn.needed_inputs() == ("response_mask",)
    advantages = fn(rewards, GROUPS, response_mask=mask)
    want = torch.tensor(expected, dtype=D).unsqueeze(-1) * mask
    torch.testing.assert_close(advantages, want, rtol=1e-12, atol=1e-12)
    # scalar rewards [N] give the same
    torch.testing.assert_close(fn(torch.tensor(SCORES, dtype=D), GROUPS, response_mask=mask), want)
    # verl's entry point: numpy index, a float mask, (advantages, returns) the same tensor
    adv, returns = verl.compute_gpg_outcome_advantage(
        rewards, mask.to(D), np.array(GROUPS, dtype=object), f_norm=f_norm
    )
    torch.testing.assert_close(adv, want, rtol=1e-12, atol=1e-12)
    assert returns is adv
    # verl's epsilon and alpha are accepted and have no effect
    other, _ = verl.compute_gpg_outcome_advantage(rewards, mask.to(D), GROUPS, epsilon=0.5, f_norm=f_norm, alpha=9.0)
    torch.testing.assert_close(other, adv)


def test_gpg_advantage_all_zero_rewards_and_bad_f_norm():
    mask = torch.ones(4, 3, dtype=torch.bool)
    zero = get_advantage_fn("gpg")(torch.zeros(4, dtype=D), [0, 0, 1, 1], response_mask=mask)
    assert torch.equal(zero, torch.zeros(4, 3, dtype=D))  # α = 4/max(0, 1), every centred score 0
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match=rf"^gpg: f_norm={bad} is not valid; must be > 0$"):
            get_advantage_fn("gpg", f_norm=bad)
    with pytest.raises(ValueError, match="f_norm"):
        verl.compute_gpg_outcome_advantage(torch.zeros(4, 3), mask.float(), [0, 0, 1, 1], f_norm=0.0)
