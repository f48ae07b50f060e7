"""The reference-style implementations that `benchmarks/losses.py` times trl_ext's losses against.

Each follows the reference code (Trinity-RFT / verl): broadcasting, `masked_mean(x, m) = (x*m).sum() / (m.sum() +
1e-8)` recomputed for every metric, ratio / clamp / max / where in the obvious order, metrics turned into floats with
`.item()`, boolean row indexing (`logprob[~expert_mask]`) for `mix` / `mix_chord`, per-row sums for `dpo`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

EPS = 1e-8


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


def plain_decoupled_ppo(logprob, old_logprob, prox_logprob, action_mask, advantages, clip=0.2, cap=5.0, **_):
    """AReaL's `ppo_actor_loss_fn` (token level, `behave_imp_weight_mode="token_mask"`, no dual clip), written out:
    the PPO clip on π_θ/π_prox, times the behaviour weight π_prox/μ zeroed above the cap, over all valid tokens."""
    adv = advantages.unsqueeze(-1).expand_as(logprob)
    valid = action_mask.bool()
    ratio = torch.where(valid, torch.exp(logprob - prox_logprob), 0)
    pg_loss1 = -adv * ratio
    pg_loss2 = -adv * torch.clamp(ratio, 1.0 - clip, 1.0 + clip)
    clip_mask = pg_loss1.detach() < pg_loss2.detach()
    pg_losses = torch.max(pg_loss1, pg_loss2)
    behave_kl = prox_logprob - old_logprob
    raw_weight = behave_kl.exp()
    behave_weight = torch.where(valid, torch.where(raw_weight > cap, 0.0, raw_weight), 0.0)
    behave_mask = (behave_weight > 0) & valid
    n_behave = behave_mask.sum() + EPS
    pg_loss = masked_mean(pg_losses * behave_weight, action_mask)
    metrics = {
        "pg_clipfrac": masked_mean((clip_mask & valid).float(), action_mask).item(),
        "pg_clipfrac_lower": 0.0,
        "ppo_kl": masked_mean(prox_logprob - logprob, action_mask).item(),
        "pg_loss": pg_loss.detach().item(),
        "decoupled/behave_weight_mean": (behave_weight.sum() / n_behave).item(),
        "decoupled/behave_weight_max": torch.where(valid, raw_weight, 0.0).max().item(),
        "decoupled/behave_masked_fraction": masked_mean((raw_weight > cap).float(), action_mask).item(),
        "decoupled/behave_approx_kl": (torch.where(behave_mask, behave_kl, 0.0).sum() / n_behave).item(),
    }
    return pg_loss, metrics


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


def plain_entropy(entropy, action_mask, entropy_coef=0.01, **_):
    entropy_loss = masked_mean(entropy, action_mask)
    return entropy_loss * entropy_coef, {"entropy_loss": entropy_loss.item()}


def plain_vespo(logprob, old_logprob, action_mask, advantages, k=(2.0, 3.0), lam=(3.0, 2.0), **_):
    """TRL 1.16's `loss_type="vespo"`: −sg(φ(W))·A·lp, token mean (its `get_gamma_weights`, written out)."""
    adv = advantages.unsqueeze(-1)
    log_ratio = torch.clamp(logprob.detach() - old_logprob, -20.0, 20.0)
    log_w = torch.clamp((log_ratio * action_mask).sum(-1, keepdim=True), math.log(1e-8), 20.0)
    k_seq = torch.where(adv >= 0, k[0], k[1])
    lam_seq = torch.where(adv >= 0, lam[0], lam[1])
    phi = torch.exp(lam_seq + k_seq * log_w - lam_seq * torch.exp(log_w))
    pg_loss = plain_agg(-phi * adv * logprob, action_mask)
    return pg_loss, {"vespo/phi_seq_mean": phi.mean().item(), "pg_loss": pg_loss.detach().item()}


def plain_luspo(logprob, old_logprob, action_mask, advantages, clip_low=3e-4, clip_high=4e-4, **_):
    """TRL 1.16's `loss_type="luspo"` with the sequence-level ratio: the clipped surrogate, Σ over each sequence's
    tokens, mean over sequences."""
    adv = advantages.unsqueeze(-1)
    seq_log_ratio = ((logprob - old_logprob) * action_mask).sum(-1) / action_mask.sum(-1).clamp(min=1.0)
    ratio = torch.exp(seq_log_ratio).unsqueeze(-1)
    pg_losses = -torch.min(ratio * adv, torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv)
    pg_loss = (pg_losses * action_mask).sum(-1).mean()
    low = ((ratio < 1.0 - clip_low) & (adv < 0)).float()
    high = ((ratio > 1.0 + clip_high) & (adv > 0)).float()
    metrics = {
        "clip_ratio/low_mean": low.mean().item(),
        "clip_ratio/high_mean": high.mean().item(),
        "clip_ratio/region_mean": torch.maximum(low, high).mean().item(),
        "pg_loss": pg_loss.detach().item(),
    }
    return pg_loss, metrics


def plain_a2po(logprob, ref_logprob, action_mask, advantages, beta2=1e-3, **_):
    """TRL 1.16's `A2POTrainer.compute_loss`: (β₂·log π/π_ref − A)² per sequence, mean over the rows."""
    implicit_reward = beta2 * ((logprob - ref_logprob.detach()) * action_mask).sum(-1)
    loss = ((implicit_reward - advantages) ** 2).mean()
    metrics = {
        "a2po_loss": loss.detach().item(),
        "implicit_reward": implicit_reward.detach().mean().item(),
        "advantage": advantages.mean().item(),
    }
    return loss, metrics


def plain_tpo(logprob, action_mask, expert_mask, beta=0.01, alpha=1.0, **_):
    """TRL 1.16's `TPOTrainer` (`sigmoid`): −log σ(β·(S_c − S_r)) over the (chosen, rejected) pairs of the rows that
    are not references, plus α·the NLL of the reference rows (the `expert_mask` rows)."""
    sums = (logprob * action_mask).sum(-1)
    pairs = sums[~expert_mask]
    chosen, rejected = pairs[0::2], pairs[1::2]
    preference = -F.logsigmoid(beta * (chosen - rejected)).mean()
    nll = masked_mean(-logprob[expert_mask], action_mask[expert_mask])
    loss = preference + alpha * nll
    metrics = {
        "chosen_reward": (beta * chosen.detach()).mean().item(),
        "rejected_reward": (beta * rejected.detach()).mean().item(),
        "accuracy_mean": (chosen > rejected).float().mean().item(),
        "preference_loss": preference.detach().item(),
        "nll_loss": nll.detach().item(),
        "tpo_loss": loss.detach().item(),
    }
    return loss, metrics
