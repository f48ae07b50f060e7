"""Forward+backward time and peak memory of `trl_ext.losses` vs straightforward reference-style code.

Run (from the repository root, with the package installed)::

    python benchmarks/losses.py                      # all losses, B=64, T=8192, float32, CPU
    python benchmarks/losses.py --device cuda --dtype bfloat16 --repeats 30
    python benchmarks/losses.py --losses ppo,gspo,mix_chord --batch 16 --seq 2048

For every policy loss in `trl_ext.losses.POLICY_LOSSES` (default hyperparameters, plus a `rec/one-side`
variant), the KL loss term (`k2`, `low_var_kl`) and the entropy bonus, the script compares

* **ours**: the `trl_ext` callable, and
* **plain**: the same formula written the way the reference code (Trinity-RFT / verl) writes it:
  `masked_mean(x, m) = (x*m).sum() / (m.sum() + 1e-8)` recomputed for every metric, ratio / clamp /
  max / where in the obvious order, metrics turned into floats with `.item()`, boolean row indexing
  (`logprob[~expert_mask]`) for `mix` / `mix_chord`, per-row sums for `dpo`.

Both must give the same loss (asserted with `torch.allclose`, rtol 1e-4 / atol 1e-6 in float32, looser
in bfloat16) and the same metrics (same tolerance). All cases are checked before any timing and a
mismatch raises; otherwise the script exits 0 whatever the numbers: it is a report.

Inputs: logprob = -|randn|·0.5 (a leaf requiring grad), old = logprob + 0.05·randn, ref = logprob +
0.02·randn, per-sequence advantages `[B]` ~ randn, a right-padded mask with row lengths uniform in
[T/4, T], `expert_mask` on odd rows, `step` = 10, entropy = |randn| (a second leaf).

Time: one measurement = forward + `loss.backward()` (leaf grads reset to None before, outside the timer;
CUDA synchronized around it). After 3 warm-up rounds the two implementations alternate (ours, plain,
ours, plain, ...) for `--repeats` rounds; the table shows medians. On glibc the script first makes malloc keep freed
memory in the process (`keep_freed_memory`; `--system-malloc` leaves it as it is): otherwise a freed block of a few
MiB goes back to the system and the next allocation of that size page-faults or not by chance, which moved a row by
±0.1 and more between runs, whichever side it hit.

Peak memory (separate runs, after the timing): on CUDA, `torch.cuda.max_memory_allocated` minus the
memory allocated before the run. On CPU there is no allocator peak counter, so `PeakMemoryTracker` (a
`TorchDispatchMode`) records the storage of every op output, follows its liveness with a
`StorageWeakRef` and keeps the maximum over time of the live bytes. Only memory allocated during
forward+backward counts (inputs made before are excluded, and so are outputs that alias an op input:
views, in-place ops). CPU autograd runs the backward on the calling thread and the dispatch mode sees
its ops; `check_tracker` verifies this (and the byte count) at start-up and the header reports it.

Ratios are ours / plain; the summary counts rows whose printed (2-decimal) ratio is <= 1.00.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import math
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from trl_ext.losses import POLICY_LOSSES, get_entropy_fn, get_kl_fn, get_policy_loss

EPS = 1e-8
MiB = 2.0**20
WARMUP = 3

# ==================================================================================================
# Straightforward implementations (the reference's style: broadcasting, masked_mean, .item())
# ==================================================================================================


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / (mask.sum() + EPS)


def plain_agg(x: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean") -> torch.Tensor:
    if mode == "token-mean":
        return masked_mean(x, mask)
    if mode == "seq-mean-token-mean":
        return ((x * mask).sum(-1) / (mask.sum(-1) + EPS)).mean()
    raise ValueError(mode)


def plain_ppo(logprob, old_logprob, action_mask, advantages, clip_low=0.2, clip_high=0.2, clip_c=3.0, **_):
    adv = advantages.unsqueeze(-1)
    negative_approx_kl = torch.clamp(logprob - old_logprob, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, action_mask)
    pg_losses1 = -adv * ratio
    pg_losses2 = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), action_mask)
    pg_losses3 = -adv * clip_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_clipfrac_lower = masked_mean(torch.gt(clip_pg_losses1, pg_losses3) * (adv < 0).float(), action_mask)
    pg_losses = torch.where(adv < 0, clip_pg_losses2, clip_pg_losses1)
    pg_loss = plain_agg(pg_losses, action_mask)
    metrics = {
        "pg_clipfrac": pg_clipfrac.item(),
        "pg_clipfrac_lower": pg_clipfrac_lower.item(),
        "ppo_kl": ppo_kl.item(),
        "pg_loss": pg_loss.detach().item(),
    }
    return pg_loss, metrics


def plain_gspo(logprob, old_logprob, action_mask, advantages, clip_low=3e-4, clip_high=4e-4, **_):
    adv = advantages.unsqueeze(-1)
    negative_approx_kl = logprob - old_logprob
    seq_lengths = torch.sum(action_mask, dim=-1)
    negative_approx_kl_seq = torch.sum(negative_approx_kl * action_mask, dim=-1) / (seq_lengths + EPS)
    log_seq_importance_ratio = logprob - logprob.detach() + negative_approx_kl_seq.detach().unsqueeze(-1)
    seq_importance_ratio = torch.exp(log_seq_importance_ratio)
    pg_losses1 = -adv * seq_importance_ratio
    pg_losses2 = -adv * torch.clamp(seq_importance_ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg_losses = torch.maximum(pg_losses1, pg_losses2)
    pg_loss = plain_agg(pg_losses, action_mask, "seq-mean-token-mean")
    metrics = {
        "pg_clipfrac": masked_mean(torch.gt(pg_losses2, pg_losses1).float(), action_mask).item(),
        "ppo_kl": masked_mean(-negative_approx_kl, action_mask).item(),
        "ppo_kl_seq": (-negative_approx_kl_seq).mean().item(),
        "pg_loss": pg_loss.detach().item(),
    }
    return pg_loss, metrics


def plain_cispo(logprob, old_logprob, action_mask, advantages, clip_low=1.0, clip_high=0.28, **_):
    adv = advantages.unsqueeze(-1)
    ratio = torch.exp(logprob - old_logprob).detach()
    clipped_ratio = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    mask = torch.ones_like(ratio)  # enable_mask_clip=False
    cispo_losses = -adv * clipped_ratio.detach() * mask.detach() * logprob
    cispo_loss = plain_agg(cispo_losses, action_mask)
    metrics = {
        "cispo_loss": cispo_loss.detach().item(),
        "ppo_kl": masked_mean(-(logprob - old_logprob), action_mask).item(),
        "unmasked_frac": masked_mean(mask, action_mask).item(),
    }
    return cispo_loss, metrics


def plain_sapo(logprob, old_logprob, action_mask, advantages, tau_pos=1.0, tau_neg=1.05, **_):
    adv = advantages.unsqueeze(-1)
    negative_approx_kl = torch.clamp(logprob - old_logprob, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    taus = torch.where(adv > 0, tau_pos, tau_neg)
    gates = torch.sigmoid(taus * (ratio - 1.0)) * (4.0 / taus)
    pg_losses = -gates * adv
    pg_loss = plain_agg(pg_losses, action_mask)
    metrics = {
        "sapo_loss": pg_loss.detach().item(),
        "ppo_kl": masked_mean(-negative_approx_kl, action_mask).item(),
        "avg_soft_gate": masked_mean(gates, action_mask).item(),
        "avg_ratio": masked_mean(ratio, action_mask).item(),
        "pos_adv_frac": masked_mean((adv > 0).float(), action_mask).item(),
    }
    return pg_loss, metrics


def plain_topr(logprob, old_logprob, action_mask, advantages, threshold=0.0, **_):
    adv = advantages.unsqueeze(-1)
    ratio = torch.exp(logprob - old_logprob).detach()
    is_positive = adv > threshold
    alpha = torch.where(is_positive, torch.ones_like(ratio), torch.clamp(ratio, 0.0, 1.0))
    topr_losses = -alpha * adv * logprob
    topr_loss = plain_agg(topr_losses, action_mask)
    metrics = {
        "topr_loss": topr_loss.detach().item(),
        "avg_alpha": masked_mean(alpha, action_mask).item(),
        "avg_ratio": masked_mean(ratio, action_mask).item(),
    }
    return topr_loss, metrics


def plain_sppo(logprob, old_logprob, action_mask, advantages, epsilon=0.3, **_):
    adv = advantages.unsqueeze(-1)
    ratio = torch.exp(logprob - old_logprob)
    is_in_range = (ratio >= 1.0 / (1.0 + epsilon)) & (ratio <= 1.0 + epsilon)
    pg_losses = -adv * (logprob - old_logprob) * is_in_range.float()
    pg_loss = plain_agg(pg_losses, action_mask)
    metrics = {"pg_clipfrac": masked_mean((~is_in_range).float(), action_mask).item(), "pg_loss": pg_loss.item()}
    return pg_loss, metrics


def plain_rec(logprob, old_logprob, action_mask, advantages, clip_mode="none", eps_low=0.2, eps_high=0.2, **_):
    adv = advantages.unsqueeze(-1)
    ratio = torch.exp(logprob - old_logprob).detach()
    if clip_mode == "none":
        is_in_range = torch.ones_like(ratio, dtype=torch.bool)
    elif clip_mode == "one-side":
        is_in_range = ((ratio <= 1.0 + eps_high) & (adv >= 0)) | ((adv <= 0) & (ratio >= 1.0 - eps_low))
    else:
        raise ValueError(clip_mode)
    pg_losses = -adv * logprob * is_in_range.float()
    pg_loss = masked_mean(pg_losses, action_mask)
    metrics = {"pg_clipfrac": masked_mean((~is_in_range).float(), action_mask).item(), "pg_loss": pg_loss.item()}
    return pg_loss, metrics


def plain_opmd(logprob, action_mask, advantages, tau=1.0, **_):
    opmd_loss = masked_mean(-advantages.unsqueeze(-1) * logprob, action_mask) / (1.0 + tau)
    return opmd_loss, {"opmd_loss": opmd_loss.detach().item()}


def plain_importance_sampling(logprob, old_logprob, action_mask, advantages, **_):
    negative_approx_kl = torch.clamp(logprob - old_logprob, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    pg_loss = plain_agg(-advantages.unsqueeze(-1) * ratio, action_mask)
    metrics = {
        "pg_loss": pg_loss.detach().item(),
        "ratio/mean": masked_mean(ratio, action_mask).item(),
        "approx_kl": masked_mean(-negative_approx_kl, action_mask).item(),
    }
    return pg_loss, metrics


def plain_sft(logprob, action_mask, **_):
    sft_loss = masked_mean(-logprob, action_mask)
    return sft_loss, {"sft_loss": sft_loss.detach().item()}


def plain_sft_is(logprob, action_mask, **_):
    sft_loss = masked_mean(-logprob * torch.exp(logprob.detach()), action_mask)
    return sft_loss, {"sft_is_loss": sft_loss.detach().item()}


def plain_sft_phi(logprob, action_mask, **_):
    prob = torch.exp(logprob)
    phi = prob * (1.0 - prob)
    sft_loss = masked_mean(-logprob * phi.detach(), action_mask)
    return sft_loss, {"sft_phi_loss": sft_loss.detach().item()}


def plain_mu_schedule(step: int, warmup=0, decay=0, peak=0.1, valley=0.1) -> float:
    if step < warmup:
        return peak * step / warmup
    if step >= warmup + decay:
        return valley
    return valley + (peak - valley) * 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / decay))


def plain_mix(logprob, old_logprob, action_mask, advantages, expert_mask, step=None, sft=plain_sft, chord=False, **_):
    mu = plain_mu_schedule(int(step[0].item())) if chord else 0.1
    weight_usual = weight_expert = 1.0  # default batch geometry: (1 // 1) / (1 // 1)
    n_usual = torch.sum(~expert_mask).item()
    n_expert = torch.sum(expert_mask).item()
    if n_usual > 0:
        grpo_loss, grpo_metrics = plain_ppo(
            logprob[~expert_mask], old_logprob[~expert_mask], action_mask[~expert_mask], advantages[~expert_mask]
        )
        grpo_loss = grpo_loss * n_usual * weight_usual
        grpo_metrics = {k: v * n_usual * weight_usual for k, v in grpo_metrics.items()}
    else:
        grpo_loss, grpo_metrics = torch.tensor(0.0, device=logprob.device), {}
    if n_expert > 0:
        sft_loss, sft_metrics = sft(logprob[expert_mask], action_mask[expert_mask])
        sft_loss = sft_loss * n_expert * weight_expert
        sft_metrics = {k: v * n_expert * weight_expert for k, v in sft_metrics.items()}
    else:
        sft_loss, sft_metrics = torch.tensor(0.0, device=logprob.device), {}
    loss = (1.0 - mu) * grpo_loss + mu * sft_loss
    metrics = {f"usual/{k}": v for k, v in grpo_metrics.items()}
    metrics.update({f"expert/{k}": v for k, v in sft_metrics.items()})
    metrics["loss"] = loss.item()
    if chord:
        metrics["mu"] = mu
    return loss, metrics


def plain_dpo(logprob, ref_logprob, action_mask, beta=0.1, label_smoothing=0.0, **_):
    policy_sums = (logprob * action_mask).sum(-1)
    ref_sums = (ref_logprob * action_mask).sum(-1)
    chosen_ratio = policy_sums[0::2] - ref_sums[0::2]
    rejected_ratio = policy_sums[1::2] - ref_sums[1::2]
    logits = chosen_ratio - rejected_ratio
    losses = -F.logsigmoid(beta * logits) * (1 - label_smoothing) - F.logsigmoid(-beta * logits) * label_smoothing
    loss = losses.mean()
    metrics = {
        "chosen_reward": (beta * chosen_ratio.detach()).mean().item(),
        "rejected_reward": (beta * rejected_ratio.detach()).mean().item(),
        "accuracy_mean": (chosen_ratio > rejected_ratio).float().mean().item(),
        "dpo_loss": loss.detach().item(),
    }
    return loss, metrics


def plain_m2po(logprob, old_logprob, action_mask, advantages, m2_threshold=0.04, log_ratio_clip=20.0, **_):
    """Trinity-RFT main's M2PO, written out: the trust-region tokens' largest (log r)² are masked until their mean is
    at most the threshold; −A·exp(clamp(log r)) (gradient through the clamp) on the kept tokens, over all valid."""
    adv = advantages.unsqueeze(-1).expand_as(logprob)
    log_ratio = logprob - old_logprob
    valid = action_mask.bool()
    trust = valid & (((adv > 0) & (log_ratio > 0)) | ((adv < 0) & (log_ratio < 0)))
    m2 = log_ratio.detach().float().square()
    keep = valid.clone()
    m2_before = m2[trust].mean().item() if trust.any() else 0.0
    if m2_before > m2_threshold:
        values, order = torch.sort(m2[trust], stable=True)
        means = values.cumsum(0) / torch.arange(1, values.numel() + 1, device=values.device)
        dropped = trust.nonzero()[order[int((means <= m2_threshold).sum()) :]]
        keep[dropped[:, 0], dropped[:, 1]] = False
    kept_trust = trust & keep
    clamped = log_ratio.clamp(-log_ratio_clip, log_ratio_clip)
    ratio = torch.exp(log_ratio + (clamped - log_ratio).detach())
    pg_loss = masked_mean(-adv * ratio * keep, action_mask)
    n_valid = valid.sum().clamp(min=1)
    return pg_loss, {
        "pg_loss": pg_loss.detach().item(),
        "ppo_kl": masked_mean(-clamped, action_mask).item(),
        "ratio/mean": masked_mean(ratio.detach(), action_mask).item(),
        "m2po/m2_before": m2_before,
        "m2po/m2_after": m2[kept_trust].mean().item() if kept_trust.any() else 0.0,
        "m2po/masked_fraction": ((valid & ~keep).sum() / n_valid).item(),
        "m2po/trust_region_fraction": (trust.sum() / n_valid).item(),
    }


def plain_k2(logprob, ref_logprob):
    return 0.5 * (logprob - ref_logprob).square()


def plain_low_var_kl(logprob, ref_logprob):
    kl = torch.clamp(ref_logprob - logprob, min=-20, max=20)
    ratio = torch.exp(kl)
    kld = (ratio - kl - 1).contiguous()
    return torch.clamp(kld, min=-10, max=10)


def plain_kl_loss(logprob, ref_logprob, action_mask, estimator=plain_k2, kl_coef=0.001, **_):
    kl = estimator(logprob, ref_logprob)
    kl_loss = masked_mean(kl, action_mask)
    return kl_loss * kl_coef, {"kl_loss": kl_loss.item(), "kl_coef": kl_coef}


def plain_gpg(logprob, action_mask, advantages, **_):
    pg_loss = plain_agg(-logprob * advantages.unsqueeze(-1), action_mask)
    return pg_loss, {"pg_loss": pg_loss.item()}


def plain_geo_mean(logprob, old_logprob, action_mask, advantages, clip_low=0.2, clip_high=0.2, **_):
    adv = advantages.unsqueeze(-1).expand_as(logprob)
    negative_approx_kl = logprob - old_logprob
    ppo_kl = masked_mean(-negative_approx_kl, action_mask)
    sgn = torch.sign(adv)
    clamped = torch.clamp(negative_approx_kl, -clip_low, clip_high)
    kl_min = sgn * torch.min(sgn * negative_approx_kl, sgn * clamped)
    lengths = action_mask.sum(dim=-1)
    ratio = torch.exp((kl_min * action_mask).sum(dim=-1) / (lengths + EPS))
    seq_adv = (adv * action_mask).sum(dim=-1) / (lengths + EPS)
    pg_loss = torch.mean(-seq_adv * ratio)
    clipped = torch.ne(negative_approx_kl, clamped)
    metrics = {
        "pg_loss": pg_loss.item(),
        "pg_clipfrac": masked_mean((clipped * (adv > 0)).float(), action_mask).item(),
        "pg_clipfrac_lower": masked_mean((clipped * (adv < 0)).float(), action_mask).item(),
        "ppo_kl": ppo_kl.item(),
    }
    return pg_loss, metrics


def plain_dro(logprob, old_logprob, action_mask, advantages, beta=0.05, **_):
    log_ratio = logprob - old_logprob
    pg_loss = plain_agg(-(logprob * advantages.unsqueeze(-1) - 0.5 * beta * log_ratio.square()), action_mask)
    return pg_loss, {"pg_loss": pg_loss.item(), "ppo_kl": masked_mean(-log_ratio, action_mask).item()}


def plain_clip_cov(logprob, old_logprob, action_mask, advantages, clip=0.2, ratio=0.0002, lb=1.0, ub=5.0, **_):
    adv = advantages.unsqueeze(-1).expand_as(logprob)
    negative_approx_kl = logprob - old_logprob
    r = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, action_mask)
    pg_losses1 = -adv * r
    pg_losses2 = -adv * torch.clamp(r, 1 - clip, 1 + clip)
    clip_by_origin = (pg_losses2 > pg_losses1) & (action_mask > 0)
    cov_all = (adv - masked_mean(adv, action_mask)) * (logprob - masked_mean(logprob.detach(), action_mask))
    cov_all[action_mask == 0] = -torch.inf
    cov_all[clip_by_origin] = -torch.inf
    clip_num = max(int(ratio * action_mask.sum().item()), 1)
    top_k_idx = (cov_all < ub) & (cov_all > lb) & (action_mask > 0)
    top_k_idx = torch.nonzero(top_k_idx)
    corr = torch.ones_like(adv)
    if len(top_k_idx) > 0:
        perm = torch.randperm(len(top_k_idx))
        top_k_idx = top_k_idx[perm[: min(clip_num, len(top_k_idx))]]
        corr[top_k_idx[:, 0], top_k_idx[:, 1]] = 0
    pg_clipfrac = masked_mean((corr == 0).float(), action_mask)
    pg_loss = plain_agg(torch.maximum(pg_losses1, pg_losses2) * corr, action_mask)
    return pg_loss, {"pg_clipfrac": pg_clipfrac.item(), "ppo_kl": ppo_kl.item(), "pg_loss": pg_loss.item()}


def plain_kl_cov(logprob, old_logprob, action_mask, advantages, ratio=0.0002, coef=0.1, **_):
    adv = advantages.unsqueeze(-1).expand_as(logprob)
    negative_approx_kl = logprob - old_logprob
    abs_kl = negative_approx_kl.abs()
    pg_losses = -adv * torch.exp(negative_approx_kl)
    idx = torch.nonzero(action_mask, as_tuple=True)
    valid_adv, valid_lp = adv[idx], logprob[idx].detach()
    k = max(int(ratio * len(valid_adv)), 1)
    cov = (valid_adv - valid_adv.mean()) * (valid_lp - valid_lp.mean())
    top = torch.topk(cov, k, largest=True).indices
    penalized = torch.zeros_like(pg_losses, dtype=torch.bool)
    penalized[idx[0][top], idx[1][top]] = True
    pg_losses = torch.where(penalized, pg_losses + coef * abs_kl, pg_losses)
    pg_loss = plain_agg(pg_losses, action_mask)
    metrics = {
        "ppo_kl_abs": masked_mean(abs_kl, action_mask).item(),
        "kl_cov_frac": masked_mean(penalized.float(), action_mask).item(),
        "pg_loss": pg_loss.item(),
    }
    return pg_loss, metrics


def plain_dppo(logprob, old_logprob, action_mask, advantages, divergence="tv", clip=0.2, clip_c=3.0, **_):
    adv = advantages.unsqueeze(-1).expand_as(logprob)
    negative_approx_kl = torch.clamp(logprob - old_logprob, -20.0, 20.0)
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, action_mask)
    truncated = torch.clamp(ratio, max=clip_c).detach()
    prob, old_prob = torch.exp(logprob), torch.exp(old_logprob)
    if divergence == "tv":
        positive, negative = (prob - old_prob) <= clip, (prob - old_prob) >= -clip
    else:
        kl = old_prob * (old_logprob - logprob) + (1 - old_prob) * torch.log((1 - old_prob + 1e-8) / (1 - prob + 1e-8))
        positive, negative = (kl <= clip) | (prob <= old_prob), (kl <= clip) | (prob >= old_prob)
    valid = torch.where(adv > 0, positive, negative).detach().float()
    pg_loss = plain_agg(-adv * truncated * logprob * valid, action_mask)
    metrics = {
        "pg_clipfrac": masked_mean(1.0 - valid, action_mask).item(),
        "pg_clipfrac_lower": masked_mean((ratio > clip_c).float() * valid, action_mask).item(),
        "ppo_kl": ppo_kl.item(),
        "pg_loss": pg_loss.item(),
    }
    return pg_loss, metrics


def seeded(fn: Callable) -> Callable:
    """`fn` after `torch.manual_seed(0)`: clip_cov draws its dropped tokens from torch's global generator, so ours and
    the plain code (verl's `torch.randperm`) drop the same ones."""

    def call(**batch: Any):
        torch.manual_seed(0)
        return fn(**batch)

    return call


def plain_entropy(entropy, action_mask, entropy_coef=0.01, **_):
    entropy_loss = masked_mean(entropy, action_mask)
    return entropy_loss * entropy_coef, {"entropy_loss": entropy_loss.item()}


# ==================================================================================================
# Ours, and the table of cases: name -> (make_ours, plain_fn); both take the batch dict as keywords
# ==================================================================================================


def ours_loss(name: str, **kwargs: Any) -> Callable:
    """The policy loss `name`, handed the batch inputs it declares (`inputs()`), as the trainers do."""
    loss_fn = get_policy_loss(name, **kwargs)
    reads = loss_fn.inputs()
    return lambda **batch: loss_fn(**{k: v for k, v in batch.items() if k in reads})


def ours_kl(name: str) -> Callable:
    kl_fn = get_kl_fn(name)
    return lambda logprob, ref_logprob, action_mask, **_: kl_fn.calculate_kl_loss(logprob, ref_logprob, action_mask)


def ours_entropy() -> Callable:
    entropy_fn = get_entropy_fn("default", entropy_coef=0.01)
    return lambda entropy, action_mask, **_: entropy_fn(entropy, action_mask)


CASES: dict[str, tuple[Callable[[], Callable], Callable]] = {
    "ppo": (partial(ours_loss, "ppo"), plain_ppo),
    "gspo": (partial(ours_loss, "gspo"), plain_gspo),
    "cispo": (partial(ours_loss, "cispo"), plain_cispo),
    "sapo": (partial(ours_loss, "sapo"), plain_sapo),
    "topr": (partial(ours_loss, "topr"), plain_topr),
    "sppo": (partial(ours_loss, "sppo"), plain_sppo),
    "m2po": (partial(ours_loss, "m2po"), plain_m2po),
    # a threshold below this batch's M2 (~0.0025): both sides sort and mask (the default's 0.04 masks nothing)
    "m2po/masking": (partial(ours_loss, "m2po", m2_threshold=0.001), partial(plain_m2po, m2_threshold=0.001)),
    "rec": (partial(ours_loss, "rec"), plain_rec),
    "rec/one-side": (partial(ours_loss, "rec", clip_mode="one-side"), partial(plain_rec, clip_mode="one-side")),
    "opmd": (partial(ours_loss, "opmd"), plain_opmd),
    "importance_sampling": (partial(ours_loss, "importance_sampling"), plain_importance_sampling),
    "sft": (partial(ours_loss, "sft"), plain_sft),
    "sft_is": (partial(ours_loss, "sft_is"), plain_sft_is),
    "sft_phi": (partial(ours_loss, "sft_phi"), plain_sft_phi),
    "mix": (partial(ours_loss, "mix"), plain_mix),
    "mix_chord": (partial(ours_loss, "mix_chord"), partial(plain_mix, sft=plain_sft_phi, chord=True)),
    "dpo": (partial(ours_loss, "dpo"), plain_dpo),
    "gpg": (partial(ours_loss, "gpg"), plain_gpg),
    "geo_mean": (partial(ours_loss, "geo_mean"), plain_geo_mean),
    "dro": (partial(ours_loss, "dro"), plain_dro),
    "clip_cov": (lambda: seeded(ours_loss("clip_cov")), seeded(plain_clip_cov)),
    "kl_cov": (partial(ours_loss, "kl_cov"), plain_kl_cov),
    "dppo_tv": (partial(ours_loss, "dppo_tv"), plain_dppo),
    "dppo_kl": (partial(ours_loss, "dppo_kl"), partial(plain_dppo, divergence="kl")),
    "kl/k2": (partial(ours_kl, "k2"), partial(plain_kl_loss, estimator=plain_k2)),
    "kl/low_var_kl": (partial(ours_kl, "low_var_kl"), partial(plain_kl_loss, estimator=plain_low_var_kl)),
    "entropy": (ours_entropy, plain_entropy),
}
assert set(POLICY_LOSSES) <= set(CASES), f"losses without a benchmark case: {set(POLICY_LOSSES) - set(CASES)}"


# ==================================================================================================
# Inputs, checks, measurements
# ==================================================================================================


def make_inputs(batch: int, seq: int, device: str, dtype: torch.dtype, seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    logprob = -torch.randn(batch, seq, generator=g).abs() * 0.5
    lengths = torch.randint(seq // 4, seq + 1, (batch,), generator=g)
    inputs = {
        "logprob": logprob,
        "old_logprob": logprob + 0.05 * torch.randn(batch, seq, generator=g),
        "ref_logprob": logprob + 0.02 * torch.randn(batch, seq, generator=g),
        "advantages": torch.randn(batch, generator=g),
        "entropy": torch.randn(batch, seq, generator=g).abs(),
    }
    inputs = {k: v.to(device=device, dtype=dtype) for k, v in inputs.items()}
    inputs["logprob"].requires_grad_(True)
    inputs["entropy"].requires_grad_(True)
    inputs["action_mask"] = (torch.arange(seq)[None, :] < lengths[:, None]).to(device)
    inputs["expert_mask"] = (torch.arange(batch) % 2 == 1).to(device)
    inputs["step"] = torch.full((batch,), 10, device=device)
    return inputs


def leaves(inputs: dict[str, Any]) -> list[torch.Tensor]:
    return [v for v in inputs.values() if isinstance(v, torch.Tensor) and v.requires_grad]


def fwd_bwd(fn: Callable, inputs: dict[str, Any]) -> tuple[torch.Tensor, dict]:
    loss, metrics = fn(**inputs)
    loss.backward()
    return loss, metrics


def check_same(name: str, ours: Callable, plain: Callable, inputs: dict[str, Any], dtype: torch.dtype) -> None:
    """Raise unless ours and plain give the same loss, metric names and metric values."""
    rtol, atol = (1e-4, 1e-6) if dtype == torch.float32 else (2e-2, 1e-3)
    loss_o, metrics_o = ours(**inputs)
    loss_p, metrics_p = plain(**inputs)
    if not torch.allclose(loss_o.detach().float(), loss_p.detach().float(), rtol=rtol, atol=atol):
        raise AssertionError(f"{name}: loss mismatch, ours {loss_o.item()!r} vs plain {loss_p.item()!r}")
    if set(metrics_o) != set(metrics_p):
        raise AssertionError(f"{name}: metric names differ, ours {sorted(metrics_o)} vs plain {sorted(metrics_p)}")
    for key, value in metrics_p.items():
        a, b = torch.as_tensor(metrics_o[key]).float().cpu(), torch.as_tensor(value).float()
        if not torch.allclose(a, b, rtol=rtol, atol=atol):
            raise AssertionError(f"{name}: metric {key} mismatch, ours {a.item()!r} vs plain {b.item()!r}")


def time_pair(ours: Callable, plain: Callable, inputs: dict[str, Any], repeats: int) -> tuple[float, float]:
    """Median ms of forward+backward, ours and plain interleaved, after WARMUP rounds."""
    cuda = inputs["logprob"].is_cuda
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def once(fn: Callable) -> float:
        for leaf in leaves(inputs):
            leaf.grad = None
        sync()
        start = time.perf_counter()
        fwd_bwd(fn, inputs)
        sync()
        return (time.perf_counter() - start) * 1e3

    times: dict[Callable, list[float]] = {ours: [], plain: []}
    gc.collect()
    for round_ in range(WARMUP + repeats):
        for fn in (ours, plain):
            elapsed = once(fn)
            if round_ >= WARMUP:
                times[fn].append(elapsed)
    return statistics.median(times[ours]), statistics.median(times[plain])


def _storages(tree: Any) -> list[torch.UntypedStorage]:
    return [t.untyped_storage() for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


class PeakMemoryTracker(TorchDispatchMode):
    """Peak bytes of the tensor storages created (and still alive) while the mode is active.

    Every op output's storage is recorded under its data pointer with a weak reference; expired ones
    are dropped at every op, so `current` is the bytes alive now and `peak` its maximum. Outputs that
    share a storage with an op input (views, in-place ops, the pre-existing inputs) are not new memory.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current = self.peak = self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        for ptr in [p for p, (ref, _) in self.live.items() if ref.expired()]:
            self.current -= self.live.pop(ptr)[1]
        aliased = {s.data_ptr() for s in _storages((args, kwargs))}
        for storage in _storages(out):
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes and ptr not in aliased and ptr not in self.live:
                self.live[ptr] = (StorageWeakRef(storage), nbytes)
                self.current += nbytes
        self.peak = max(self.peak, self.current)
        return out


def peak_mib(fn: Callable, inputs: dict[str, Any]) -> float:
    """Peak MiB allocated during one forward+backward of `fn`."""
    for leaf in leaves(inputs):
        leaf.grad = None
    gc.collect()
    if inputs["logprob"].is_cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fwd_bwd(fn, inputs)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / MiB
    with PeakMemoryTracker() as tracker:
        fwd_bwd(fn, inputs)
    return tracker.peak / MiB


def check_tracker() -> str:
    """Verify on a known graph that the CPU tracker sees backward ops and counts bytes right."""
    x = torch.randn(1 << 20, requires_grad=True)  # 4 MiB, made before the mode: not counted
    with PeakMemoryTracker() as tracker:
        y = (x * 2).exp().sum()  # x*2 (4 MiB) and exp (4 MiB, saved for backward) alive together
        forward_ops = tracker.ops
        y.backward()  # grad·exp (4 MiB) with exp still saved, then x.grad (4 MiB) once exp is released
    backward_ops = tracker.ops - forward_ops
    ok = backward_ops > 0 and 8 * MiB <= tracker.peak < 8 * MiB + 4096
    if not ok:
        raise RuntimeError(f"PeakMemoryTracker self-check failed: {backward_ops} backward ops, peak {tracker.peak}")
    return (
        f"TorchDispatchMode live-storage tracker (self-check: sees {backward_ops} backward ops, "
        f"peak {tracker.peak / MiB:.2f} MiB where 8.00 is expected)"
    )


# ==================================================================================================
# Main
# ==================================================================================================


def keep_freed_memory() -> str:
    """On glibc, make malloc keep freed memory in the process (as the CUDA caching allocator does) instead of returning
    blocks of a few MiB to the system, where a later allocation of that size page-faults or not depending on what ran
    before: that, not the losses, decided much of a CPU row's time from one run to the next. Returns what it did."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        set_option = libc.mallopt
    except (OSError, AttributeError):
        return "the system's (not glibc: left as it is)"
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    if set_option(m_mmap_threshold, 32 * 2**20) != 1 or set_option(m_trim_threshold, 2**30) != 1:
        return "glibc, as it is (mallopt refused)"
    return "glibc, freed memory kept in the process (mallopt: mmap threshold 32 MiB, trim threshold 1 GiB)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--losses", default=",".join(CASES), help="comma-separated subset of: " + ", ".join(CASES))
    parser.add_argument(
        "--masks",
        default="bool,float",
        help="the action_mask dtypes to run, comma-separated: bool (what the trainers pass) and / or float (0/1 in the "
        "values' dtype, what Trinity-style callers pass: ours checks it holds only 0 and 1, one sync)",
    )
    parser.add_argument(
        "--system-malloc",
        action="store_true",
        help="leave glibc's malloc as it is (by default the script makes it keep freed memory, for steady CPU timings)",
    )
    args = parser.parse_args()
    allocator = "as it is (--system-malloc)" if args.system_malloc else keep_freed_memory()

    dtype = getattr(torch, args.dtype)
    names = [n.strip() for n in args.losses.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown loss(es) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    memory = "torch.cuda.max_memory_allocated" if args.device == "cuda" else check_tracker()
    inputs = make_inputs(args.batch, args.seq, args.device, dtype)

    print(
        f"# torch {torch.__version__} | device {args.device} | dtype {args.dtype} | B={args.batch} T={args.seq} | "
        f"repeats {args.repeats} (+{WARMUP} warm-up, interleaved, medians) | threads {torch.get_num_threads()}"
    )
    print(f"# peak memory: {memory}")
    print(f"# malloc: {allocator}")
    header = ["loss", "ours ms", "plain ms", "time ratio (ours/plain)", "ours peak MiB", "plain peak MiB", "mem ratio"]
    widths = [28, 9, 9, 23, 13, 14, 9]
    print(" | ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths, strict=True))))
    print("-|-".join("-" * w for w in widths))

    masks = [m.strip() for m in args.masks.split(",") if m.strip()]
    if not masks or set(masks) - {"bool", "float"}:
        parser.error(f"--masks: choose from bool, float; got {args.masks!r}")
    pairs = {name: (CASES[name][0](), CASES[name][1]) for name in names}
    by_mask = {"bool": inputs, "float": {**inputs, "action_mask": inputs["action_mask"].to(dtype)}}
    for mask in masks:  # every value check first: a mismatch raises before any timing
        for name, (ours, plain) in pairs.items():
            check_same(name, ours, plain, by_mask[mask], dtype)

    rows = []
    for mask, (name, (ours, plain)) in ((m, pair) for m in masks for pair in pairs.items()):
        inputs = by_mask[mask]
        name = f"{name} [{mask}]" if len(masks) > 1 else name
        t_ours, t_plain = time_pair(ours, plain, inputs, args.repeats)
        m_ours, m_plain = peak_mib(ours, inputs), peak_mib(plain, inputs)
        t_ratio, m_ratio = round(t_ours / t_plain, 2), round(m_ours / m_plain, 2)
        rows.append((t_ratio, m_ratio))
        cells = [name, f"{t_ours:.2f}", f"{t_plain:.2f}", f"{t_ratio:.2f}", f"{m_ours:.1f}", f"{m_plain:.1f}"]
        cells.append(f"{m_ratio:.2f}")
        print(
            " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        )

    n_time = sum(t <= 1.0 for t, _ in rows)
    n_mem = sum(m <= 1.0 for _, m in rows)
    n_both = sum(t <= 1.0 and m <= 1.0 for t, m in rows)
    print(
        f"# summary: time ratio <= 1.00 for {n_time}/{len(rows)}, mem ratio <= 1.00 for {n_mem}/{len(rows)}, "
        f"both for {n_both}/{len(rows)}"
    )


if __name__ == "__main__":
    main()
