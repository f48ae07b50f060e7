"""An independent reference for the loss tests: every loss in plain Python `math`, no torch.

Each loss is written token by token from docs/design.md §2.3 with its closed-form derivative, so a test can
compare both the value and the gradient of `trl_ext.losses` against numbers that share no code with
it. Inputs are nested lists `[B][T]`; masked tokens contribute nothing (their value is never read, so
NaN there is fine). `loss(...)` returns `(value, grad, metrics)` with `grad[b][t] = ∂loss/∂logprob[b][t]`.
"""

from __future__ import annotations

import math

EPS = 1e-8


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def clamp(x: float, low: float, high: float) -> float:
    return min(max(x, low), high)


def valid(mask):
    return [(b, t) for b, row in enumerate(mask) for t, m in enumerate(row) if m]


def n_valid(mask) -> int:
    return sum(1 for row in mask for m in row if m)


def token_mean(values: dict, mask) -> float:
    """values: {(b, t): x} over valid tokens."""
    return sum(values.values()) / (n_valid(mask) + EPS)


def agg_weights(mask, mode: str, normalizer: float | None = None) -> dict:
    """∂aggregate/∂ℓ[b][t] for every valid token: the aggregate is Σ w·ℓ."""
    rows, cols = len(mask), len(mask[0])
    n = n_valid(mask)
    weights = {}
    for b, t in valid(mask):
        if mode == "token-mean":
            weights[b, t] = 1.0 / (n + EPS)
        elif mode == "token-sum":
            weights[b, t] = 1.0
        elif mode == "seq-mean-token-mean":
            weights[b, t] = 1.0 / (sum(1 for m in mask[b] if m) + EPS) / rows
        elif mode == "seq-mean-token-sum":
            weights[b, t] = 1.0 / rows
        elif mode == "seq-mean-token-sum-norm":
            weights[b, t] = 1.0 / ((cols if normalizer is None else normalizer) + EPS)
        else:
            raise ValueError(mode)
    return weights


def combine(ell: dict, dell: dict, mask, mode: str, scale: float = 1.0):
    w = agg_weights(mask, mode)
    value = scale * sum(w[k] * ell[k] for k in ell)
    grad = [[0.0] * len(mask[0]) for _ in mask]
    for (b, t), d in dell.items():
        grad[b][t] = scale * w[b, t] * d
    return value, grad


# ------------------------------------------------------------------------------------------------
# Clipped surrogates
# ------------------------------------------------------------------------------------------------


def _clipped(a: float, r: float, dr: float, low: float, high: float):
    """max(−a·r, −a·clip(r)) and its derivative wrt lp given dr = ∂r/∂lp; also whether L2 > L1."""
    l1, l2 = -a * r, -a * clamp(r, 1 - low, 1 + high)
    in_range = 1 - low <= r <= 1 + high
    if l1 > l2:
        return l1, -a * dr, False
    if l2 > l1:
        return l2, (-a * dr if in_range else 0.0), True
    return l1, -a * dr, False


def ppo(lp, old, mask, adv, clip_low=0.2, clip_high=0.2, c=3.0, mode="token-mean", seq_mask_delta=None):
    ell, dell, clipfrac, lower, kls = {}, {}, 0, 0, {}
    for b, t in valid(mask):
        x = lp[b][t] - old[b][t]
        d = clamp(x, -20, 20)
        r = math.exp(d)
        dr = r if -20 < x < 20 else 0.0
        a = adv[b][t]
        C, dC, was_clipped = _clipped(a, r, dr, clip_low, clip_high)
        clipfrac += was_clipped
        value, grad = C, dC
        if a < 0:
            l3 = -a * c
            lower += C > l3
            if l3 < C:
                value, grad = l3, 0.0
        ell[b, t], dell[b, t], kls[b, t] = value, grad, -d
    metrics = {"pg_clipfrac": clipfrac / (n_valid(mask) + EPS), "pg_clipfrac_lower": lower / (n_valid(mask) + EPS)}
    metrics["ppo_kl"] = token_mean(kls, mask)
    if seq_mask_delta is not None:
        masked_rows = set()
        seq_kls = []
        for b, row in enumerate(mask):
            n = sum(1 for m in row if m)
            seq_kl = sum(kls[b, t] for t, m in enumerate(row) if m) / (n + EPS)
            seq_kls.append(seq_kl)
            if seq_kl > seq_mask_delta:
                masked_rows.add(b)
        for b, t in list(ell):
            if b in masked_rows and adv[b][t] < 0:
                ell[b, t], dell[b, t] = 0.0, 0.0
        # positions with A < 0 in masked rows, padding included, over the valid-token count
        count = sum(1 for b in masked_rows for t in range(len(mask[0])) if adv[b][t] < 0)
        metrics["seq_mask/masked_tokens"] = count / (n_valid(mask) + EPS)
        metrics["seq_mask/mean_sequence_kl"] = sum(seq_kls) / len(seq_kls)
    value, grad = combine(ell, dell, mask, mode)
    metrics["pg_loss"] = value
    return value, grad, metrics


def gspo(lp, old, mask, adv, clip_low=3e-4, clip_high=4e-4, mode="seq-mean-token-mean"):
    ell, dell, clipfrac, kls, seq = {}, {}, 0, {}, []
    for b, row in enumerate(mask):
        ts = [t for t, m in enumerate(row) if m]
        s = sum(lp[b][t] - old[b][t] for t in ts) / (len(ts) + EPS)
        seq.append(-s)
        r = math.exp(s)
        for t in ts:
            value, grad, was_clipped = _clipped(adv[b][t], r, r, clip_low, clip_high)
            ell[b, t], dell[b, t] = value, grad
            clipfrac += was_clipped
            kls[b, t] = -(lp[b][t] - old[b][t])
    value, grad = combine(ell, dell, mask, mode)
    metrics = {
        "pg_clipfrac": clipfrac / (n_valid(mask) + EPS),
        "ppo_kl": token_mean(kls, mask),
        "ppo_kl_seq": sum(seq) / len(seq),
        "pg_loss": value,
    }
    return value, grad, metrics


# ------------------------------------------------------------------------------------------------
# REINFORCE-style losses
# ------------------------------------------------------------------------------------------------


def cispo(lp, old, mask, adv, clip_low=1.0, clip_high=0.28, mask_clip=None, mode="token-mean"):
    ell, dell, kls, unmasked = {}, {}, {}, 0
    for b, t in valid(mask):
        a, r = adv[b][t], math.exp(lp[b][t] - old[b][t])
        w = clamp(r, 1 - clip_low, 1 + clip_high)
        keep = 1.0
        if mask_clip is not None:
            m_low, m_high = mask_clip
            if (r > 1 + m_high and a > 0) or (r < 1 - m_low and a < 0):
                keep = 0.0
        unmasked += keep
        ell[b, t], dell[b, t] = -a * w * keep * lp[b][t], -a * w * keep
        kls[b, t] = -(lp[b][t] - old[b][t])
    value, grad = combine(ell, dell, mask, mode)
    metrics = {"cispo_loss": value, "ppo_kl": token_mean(kls, mask), "unmasked_frac": unmasked / (n_valid(mask) + EPS)}
    return value, grad, metrics


def sapo(lp, old, mask, adv, tau_pos=1.0, tau_neg=1.05, detach_gate=False, mode="token-mean"):
    ell, dell, kls, gates, ratios, pos = {}, {}, {}, {}, {}, 0
    for b, t in valid(mask):
        a = adv[b][t]
        x = lp[b][t] - old[b][t]
        d = clamp(x, -20, 20)
        r = math.exp(d)
        tau = tau_pos if a > 0 else tau_neg
        sig = sigmoid(tau * (r - 1))
        gate = sig * 4 / tau
        if detach_gate:
            ell[b, t], dell[b, t] = -a * gate * lp[b][t], -a * gate
        else:
            dr = r if -20 < x < 20 else 0.0
            ell[b, t], dell[b, t] = -a * gate, -a * 4 * sig * (1 - sig) * dr
        kls[b, t], gates[b, t], ratios[b, t] = -d, gate, r
        pos += a > 0
    value, grad = combine(ell, dell, mask, mode)
    metrics = {
        "sapo_loss": value,
        "ppo_kl": token_mean(kls, mask),
        "avg_soft_gate": token_mean(gates, mask),
        "avg_ratio": token_mean(ratios, mask),
        "pos_adv_frac": pos / (n_valid(mask) + EPS),
    }
    return value, grad, metrics


def topr(lp, old, mask, adv, threshold=0.0, mode="token-mean"):
    ell, dell, alphas, ratios = {}, {}, {}, {}
    for b, t in valid(mask):
        a, r = adv[b][t], math.exp(lp[b][t] - old[b][t])
        alpha = clamp(r, 0, 1) if a <= threshold else 1.0
        ell[b, t], dell[b, t] = -alpha * a * lp[b][t], -alpha * a
        alphas[b, t], ratios[b, t] = alpha, r
    value, grad = combine(ell, dell, mask, mode)
    return (
        value,
        grad,
        {"topr_loss": value, "avg_alpha": token_mean(alphas, mask), "avg_ratio": token_mean(ratios, mask)},
    )


def sppo(lp, old, mask, adv, epsilon=0.3, mode="token-mean"):
    ell, dell, outside = {}, {}, 0
    for b, t in valid(mask):
        a, x = adv[b][t], lp[b][t] - old[b][t]
        keep = 1 / (1 + epsilon) <= math.exp(x) <= 1 + epsilon
        outside += not keep
        ell[b, t], dell[b, t] = -a * x * keep, -a * keep
    value, grad = combine(ell, dell, mask, mode)
    return value, grad, {"pg_clipfrac": outside / (n_valid(mask) + EPS), "pg_loss": value}


def rec(
    lp,
    old,
    mask,
    adv,
    epsilon_low=0.2,
    epsilon_high=0.2,
    epsilon_low_prime=0.6,
    epsilon_high_prime=2.0,
    clip_mode="none",
    weight="none",
    regularizer="none",
    regularizer_coef=0.0,
    temp=1.0,
):
    ell, dell, dropped = {}, {}, 0
    seq_ratio = {}
    for b, row in enumerate(mask):
        ts = [t for t, m in enumerate(row) if m]
        seq_ratio[b] = math.exp(sum(lp[b][t] - old[b][t] for t in ts) / (len(ts) + EPS))
    low, high = 1 - epsilon_low, 1 + epsilon_high
    for b, t in valid(mask):
        a, x = adv[b][t], lp[b][t] - old[b][t]
        r = math.exp(x)
        if clip_mode == "none":
            keep = True
        elif clip_mode == "two-side":
            keep = low <= r <= high
        elif clip_mode == "one-side":
            keep = (r <= high and a >= 0) or (a <= 0 and r >= low)
        elif clip_mode == "gspo-one-side":
            s = seq_ratio[b]
            keep = (s <= high and a >= 0) or (a <= 0 and s >= low)
        else:  # ring
            keep = (
                (low <= r <= high)
                or (a >= 0 and r <= 1 - epsilon_low_prime)
                or (a <= 0 and r >= 1 + epsilon_high_prime)
            )
        dropped += not keep
        if weight == "importance_sampling":
            a = a * r
        elif weight == "gspo_importance_sampling":
            a = a * seq_ratio[b]
        elif weight == "advantage":
            a = a * math.exp(a / temp)
        value, grad = -a * lp[b][t] * keep, -a * keep
        if regularizer == "forward-kl":
            value, grad = value - regularizer_coef * lp[b][t], grad - regularizer_coef
        elif regularizer == "k2":
            value, grad = value + regularizer_coef * x * x, grad + 2 * regularizer_coef * x
        ell[b, t], dell[b, t] = value, grad
    mode = "seq-mean-token-mean" if clip_mode == "gspo-one-side" else "token-mean"
    value, grad = combine(ell, dell, mask, mode)
    return value, grad, {"pg_clipfrac": dropped / (n_valid(mask) + EPS), "pg_loss": value}


def opmd(lp, mask, adv, tau=1.0, mode="token-mean"):
    ell = {(b, t): -adv[b][t] * lp[b][t] for b, t in valid(mask)}
    dell = {(b, t): -adv[b][t] for b, t in valid(mask)}
    value, grad = combine(ell, dell, mask, mode, scale=1 / (1 + tau))
    return value, grad, {"opmd_loss": value}


def importance_sampling(lp, old, mask, adv, mode="token-mean"):
    ell, dell, ratios, kls = {}, {}, {}, {}
    for b, t in valid(mask):
        x = lp[b][t] - old[b][t]
        d = clamp(x, -20, 20)
        r = math.exp(d)
        ell[b, t], dell[b, t] = -adv[b][t] * r, -adv[b][t] * (r if -20 < x < 20 else 0.0)
        ratios[b, t], kls[b, t] = r, -d
    value, grad = combine(ell, dell, mask, mode)
    return value, grad, {"pg_loss": value, "ratio/mean": token_mean(ratios, mask), "approx_kl": token_mean(kls, mask)}


def sft(lp, mask, kind="sft", cutoff_prob=1.0, mode="token-mean"):
    ell, dell = {}, {}
    for b, t in valid(mask):
        x = lp[b][t]
        p = math.exp(x)
        if kind == "sft":
            ell[b, t], dell[b, t] = -x, -1.0
        elif kind == "sft_is":
            ell[b, t], dell[b, t] = -x * p, -p
        else:  # sft_phi
            cut = math.log(cutoff_prob) if cutoff_prob < 1 else math.inf
            ell[b, t] = -min(x, cut) * p * (1 - p)
            dell[b, t] = -p * (1 - p) if x < cut else 0.0
    value, grad = combine(ell, dell, mask, mode)
    return value, grad, {f"{kind}_loss": value}


# ------------------------------------------------------------------------------------------------
# MIX, DPO
# ------------------------------------------------------------------------------------------------


def mix(lp, old, mask, adv, expert, mu=0.1, weight_usual=1.0, weight_expert=1.0, sft_kind="sft", mode="token-mean"):
    """(1 − μ)·n_u·w_u·ppo(usual rows) + μ·n_e·w_e·sft(expert rows); each part over its own rows."""
    usual_rows = [b for b in range(len(mask)) if not expert[b]]
    expert_rows = [b for b in range(len(mask)) if expert[b]]
    grad = [[0.0] * len(mask[0]) for _ in mask]
    total = 0.0
    metrics = {}
    for rows, coef, part in [
        (usual_rows, (1 - mu) * len(usual_rows) * weight_usual, "usual"),
        (expert_rows, mu * len(expert_rows) * weight_expert, "expert"),
    ]:
        if not rows:
            continue
        sub = [[mask[b][t] for t in range(len(mask[0]))] for b in rows]
        if part == "usual":
            value, sub_grad, sub_metrics = ppo(
                [lp[b] for b in rows], [old[b] for b in rows], sub, [adv[b] for b in rows], mode=mode
            )
        else:
            value, sub_grad, sub_metrics = sft([lp[b] for b in rows], sub, kind=sft_kind, mode=mode)
        scale = len(rows) * (weight_usual if part == "usual" else weight_expert)
        metrics.update({f"{part}/{k}": v * scale for k, v in sub_metrics.items()})
        total += coef * value
        for i, b in enumerate(rows):
            for t in range(len(mask[0])):
                grad[b][t] += coef * sub_grad[i][t]
    metrics["loss"] = total
    return total, grad, metrics


def dpo(lp, ref, mask, beta=0.1, label_smoothing=0.0):
    sums = [sum(lp[b][t] - ref[b][t] for t, m in enumerate(row) if m) for b, row in enumerate(mask)]
    pairs = len(mask) // 2
    grad = [[0.0] * len(mask[0]) for _ in mask]
    value, correct = 0.0, 0
    for i in range(pairs):
        z = beta * (sums[2 * i] - sums[2 * i + 1])
        value += (-(1 - label_smoothing) * math.log(sigmoid(z)) - label_smoothing * math.log(sigmoid(-z))) / pairs
        dz = (-(1 - label_smoothing) * sigmoid(-z) + label_smoothing * sigmoid(z)) * beta / pairs
        correct += sums[2 * i] > sums[2 * i + 1]
        for t, m in enumerate(mask[2 * i]):
            grad[2 * i][t] = dz if m else 0.0
        for t, m in enumerate(mask[2 * i + 1]):
            grad[2 * i + 1][t] = -dz if m else 0.0
    metrics = {
        "chosen_reward": beta * sum(sums[0::2]) / pairs,
        "rejected_reward": beta * sum(sums[1::2]) / pairs,
        "accuracy_mean": correct / pairs,
        "dpo_loss": value,
    }
    return value, grad, metrics
