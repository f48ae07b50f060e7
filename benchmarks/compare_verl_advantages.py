"""Dev-only: the advantage estimators, KL controllers and the other non-policy-loss names of `trl_ext.compat.verl`
against the real verl 0.9 `core_algos` (run by `compare_verl.py`, which loads verl and prints the summary).

Inputs are float64: groups of one, an all-equal group (float32-exact rewards: verl's vectorized GRPO keeps its group
statistics in float32), rows without a valid token and masks with gaps (multi-turn); the index is a numpy array of
string uids, a numpy int array, or an integer tensor. verl's loop estimators hash a tensor's elements by identity
(every row its own group), so they get the same ids as a numpy array; the vectorized ones get the tensor itself.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import torch

GROUPS = [0, 0, 0, 1, 1, 2, 3, 3, 3, 4, 5, 5]  # 2 and 4: groups of one; 3: all-equal rewards
PAIRED = [0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 4, 4]  # every group >= 2 rows (pass@k)
INDEX_KINDS = ("uid", "int", "tensor")


def index_of(groups: list[int], kind: str):
    """`(ours, verl's loop versions, verl's vectorized versions)` of the group ids."""
    uids = np.array([f"uid-{g}" for g in groups], dtype=object)
    if kind == "uid":
        return uids, uids, uids
    ints = np.asarray(groups, dtype=np.int64)
    if kind == "int":
        return ints, ints, ints
    tensor = torch.tensor(groups)
    return tensor, ints, tensor


def advantage_batch(seed: int, groups: list[int] = GROUPS, length: int = 9) -> dict:
    g = torch.Generator().manual_seed(seed)
    n = len(groups)
    lengths = torch.randint(2, length + 1, (n,), generator=g)
    mask = (torch.arange(length) < lengths.unsqueeze(-1)).to(torch.float64)
    mask[1, 2:4] = 0.0  # an observation span
    mask[6, 1] = 0.0
    if 3 in groups:
        mask[10, :] = 0.0  # a row without a valid token (in a group of two)
    rewards = torch.randn(n, length, generator=g, dtype=torch.float64) * mask
    equal = [i for i, x in enumerate(groups) if x == 3]
    rewards[equal] = 0.0
    rewards[equal, 0] = 0.75  # float32-exact, equal sums
    old_log_probs = torch.log(torch.rand(n, length, generator=g, dtype=torch.float64) * 0.9 + 0.05)
    pi = old_log_probs.exp()
    return {
        "token_level_rewards": rewards,
        "response_mask": mask,
        "old_log_probs": old_log_probs,
        "sum_pi_squared": pi**2 + torch.rand(n, length, generator=g, dtype=torch.float64) * (1 - pi) ** 2,
        "rollout_is_weights": torch.rand(n, length, generator=g, dtype=torch.float64) * 2,
        "reward_baselines": torch.randn(n, generator=g, dtype=torch.float64),
        "components": np.round(np.random.default_rng(seed).normal(size=(n, 2)), 3),
    }


def compare_advantages(core, ours, compare, config_stub, data_proto_stub, random_batch, with_grad) -> None:
    """Every comparison; `compare(label, run)` with `run(seed) -> (verl's, ours)`."""
    registry = (sorted(core.ADV_ESTIMATOR_REGISTRY), sorted(ours.ADV_ESTIMATOR_REGISTRY))
    enum = ([(e.name, e.value) for e in core.AdvantageEstimator], [(e.name, e.value) for e in ours.AdvantageEstimator])
    compare("AdvantageEstimator + ADV_ESTIMATOR_REGISTRY names", lambda s: (0.0, float(registry[0] != registry[1])))
    compare("AdvantageEstimator members", lambda s: (0.0, float(enum[0] != enum[1])))

    def outcome(name, kind, vectorized=False, groups=GROUPS, **kw):
        def run(seed):
            d = advantage_batch(seed, groups)
            mine, loop, vec = index_of(groups, kind)
            theirs = vec if vectorized else loop
            args = (d["token_level_rewards"], d["response_mask"])
            return [getattr(m, name)(args[0].clone(), args[1], i, **kw) for m, i in ((core, theirs), (ours, mine))]

        return run

    for kind, norm in itertools.product(INDEX_KINDS, (True, False)):
        for name, vec in (("compute_grpo_outcome_advantage", False), ("compute_grpo_vectorized_outcome_advantage", 1)):
            compare(f"{name} norm={norm} [{kind}]", outcome(name, kind, vec, norm_adv_by_std_in_grpo=norm))
    for kind in INDEX_KINDS:
        compare(f"compute_rloo_outcome_advantage [{kind}]", outcome("compute_rloo_outcome_advantage", kind))
        compare(f"compute_rloo_vectorized_outcome_advantage [{kind}]",
                outcome("compute_rloo_vectorized_outcome_advantage", kind, True))  # fmt: skip
        compare(f"compute_opo_outcome_advantage [{kind}]", outcome("compute_opo_outcome_advantage", kind))
        name = "compute_reinforce_plus_plus_baseline_outcome_advantage"
        compare(f"{name} [{kind}]", outcome(name, kind))
        for norm in (True, False):
            compare(f"compute_grpo_passk_outcome_advantage norm={norm} [{kind}]",
                    outcome("compute_grpo_passk_outcome_advantage", kind, groups=PAIRED,
                            config={"norm_adv_by_std_in_grpo": norm}))  # fmt: skip
        for norm in (True, False):
            compare(f"compute_gdpo_outcome_advantage token rewards norm={norm} [{kind}]",
                    outcome("compute_gdpo_outcome_advantage", kind, norm_adv_by_std_in_grpo=norm))  # fmt: skip

    for kind, weights in itertools.product(INDEX_KINDS, (None, [1.0, 0.5])):

        def run(seed, kind=kind, weights=weights):
            d = advantage_batch(seed)
            n, length = d["response_mask"].shape
            lengths = torch.arange(n) % length + 1
            response = (torch.arange(length) < lengths.unsqueeze(-1)).long()
            batch = {"prompts": torch.zeros(n, 3, dtype=torch.long), "attention_mask": torch.cat(
                [torch.ones(n, 3, dtype=torch.long), response], dim=1)}  # fmt: skip
            components = {"format": d["components"][:, 0], "accuracy": list(d["components"][:, 1])}
            config = {"gdpo_reward_keys": ["format", "accuracy"], "gdpo_reward_weights": weights}
            mine, loop, _ = index_of(GROUPS, kind)
            out = []
            for m, i in ((core, loop), (ours, mine)):
                out.append(m.compute_gdpo_outcome_advantage(
                    d["token_level_rewards"], d["response_mask"], i, config=config, non_tensor_batch=components,
                    batch=batch))  # fmt: skip
            return out

        compare(f"compute_gdpo_outcome_advantage reward keys weights={weights} [{kind}]", run)

    for gamma in (1.0, 0.9):

        def run(seed, gamma=gamma):
            d = advantage_batch(seed)
            return [
                m.compute_reinforce_plus_plus_outcome_advantage(
                    d["token_level_rewards"], d["response_mask"], config=SimpleNamespace(gamma=gamma)
                )
                for m in (core, ours)
            ]

        compare(f"compute_reinforce_plus_plus_outcome_advantage gamma={gamma}", run)

    def remax(seed):
        d = advantage_batch(seed)
        keys = ("token_level_rewards", "reward_baselines", "response_mask")
        return [m.compute_remax_outcome_advantage(*(d[k] for k in keys)) for m in (core, ours)]

    compare("compute_remax_outcome_advantage", remax)

    otb_names = ("compute_optimal_token_baseline_advantage", "compute_multi_turn_optimal_token_baseline_advantage")
    for name, kind, weighted, tail in itertools.product(otb_names, INDEX_KINDS, (False, True), (True, False)):

        def run(seed, name=name, kind=kind, weighted=weighted, tail=tail):
            d = advantage_batch(seed)
            mine, loop, _ = index_of(GROUPS, kind)
            keys = ("token_level_rewards", "response_mask")
            extra = {"rollout_is_weights": d["rollout_is_weights"] if weighted else None, "handle_zero_tail": tail}
            return [
                getattr(m, name)(*(d[k] for k in keys), i, d["old_log_probs"], d["sum_pi_squared"], **extra)
                for m, i in ((core, loop), (ours, mine))
            ]

        compare(f"{name} [{kind}]{' +rollout_is' if weighted else ''} zero_tail={tail}", run)

    compare_kl_and_losses(core, ours, compare, config_stub, data_proto_stub, random_batch, with_grad)


def compare_kl_and_losses(core, ours, compare, config_stub, data_proto_stub, random_batch, with_grad) -> None:
    for name in ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"):

        def run(seed, name=name):
            d = random_batch(seed)
            return [
                with_grad(lambda x, m=m: m.kl_penalty_forward(x["log_prob"], x["ref_log_prob"], name), d)
                for m in (core, ours)
            ]

        compare(f"kl_penalty_forward {name}", run)

    def rewards(seed):
        d = random_batch(seed)
        return [m.compute_rewards(d["loss_mat"], d["old_log_prob"], d["ref_log_prob"], 0.05) for m in (core, ours)]

    compare("compute_rewards", rewards)

    def controllers(seed):
        g = torch.Generator().manual_seed(seed)
        kls = (torch.rand(6, generator=g, dtype=torch.float64) * 0.2).tolist()
        out = []
        for m in (core, ours):
            values = []
            for settings in ({"type": "adaptive", "kl_coef": 0.1, "target_kl": 0.05, "horizon": 300},
                             {"type": "fixed", "kl_coef": 0.1}):  # fmt: skip
                controller = m.get_kl_controller(config_stub(settings))
                for kl in kls:
                    controller.update(kl, n_steps=64)
                    values.append(float(controller.value))
            out.append(torch.tensor(values, dtype=torch.float64))
        return out

    compare("get_kl_controller adaptive / fixed (6 updates)", controllers)

    for mode in ours.AGG_LOSS_MODES:

        def run(seed, mode=mode):
            d = random_batch(seed)
            g = torch.Generator().manual_seed(400 + seed)
            d["logits"] = torch.randn(*d["response_mask"].shape, 11, generator=g, dtype=torch.float64) * 3
            return [
                with_grad(lambda x, m=m: m.compute_entropy_loss(x["logits"], x["response_mask"], mode), d, "logits")
                for m in (core, ours)
            ]

        compare(f"compute_entropy_loss {mode}", run)

    info = {"dp_size": 4, "batch_num_tokens": 150, "global_batch_size": 30, "loss_scale_factor": 64}
    for mode, weighted, global_info in itertools.product(ours.AGG_LOSS_MODES, (False, True), (False, True)):

        def run(seed, mode=mode, weighted=weighted, global_info=global_info):
            d = random_batch(seed)
            config = config_stub(global_batch_info=dict(info) if global_info else {})
            weights = d["rollout_is_weights"] if weighted else None
            keys = ("old_log_prob", "log_prob", "advantages", "response_mask")
            return [
                with_grad(
                    lambda x, m=m: m.compute_policy_loss_reinforce(*(x[k] for k in keys), mode, config, weights), d
                )
                for m in (core, ours)
            ]

        compare(f"compute_policy_loss_reinforce {mode}{' +rollout_is' if weighted else ''}"
                f"{' [global]' if global_info else ''}", run)  # fmt: skip

    bypass_settings = {
        "ppo_clip": {"loss_type": "ppo_clip"},
        "ppo_clip token-IS": {"loss_type": "ppo_clip", "rollout_is": "token", "rollout_is_threshold": 2.0},
        "reinforce token-IS": {"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": 2.0},
        "reinforce seq-IS rs": {
            "loss_type": "reinforce",
            "rollout_is": "sequence",
            "rollout_is_threshold": 5.0,
            "rollout_rs": "token_k1",
            "rollout_rs_threshold": "0.5_2.0",
        },
    }
    for (label, settings), mode in itertools.product(bypass_settings.items(), ("token-mean", "seq-mean-token-sum")):

        def run(seed, settings=settings, mode=mode):
            d = random_batch(seed)
            d["response_mask"][:, 0] = 1.0  # no empty row (sequence metrics: rows with a valid token)
            config = config_stub(
                clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, global_batch_info={},
                policy_loss=config_stub(rollout_correction=dict(settings)),
            )  # fmt: skip
            keys = ("old_log_prob", "log_prob", "advantages", "response_mask")
            return [
                with_grad(lambda x, m=m: m.get_policy_loss_fn("bypass_mode")(*(x[k] for k in keys), mode, config), d)
                for m in (core, ours)
            ]

        compare(f"policy_loss bypass_mode {label} {mode}", run)

    class TensorDictStub(dict):
        """A dict that takes a `batch_size` attribute (verl sets it on the resampled TensorDict)."""

    for method, power in (("pow", 2.0), ("pow", 0.5), ("max_min", 2.0), ("max_random", 2.0)):

        def run(seed, method=method, power=power):
            d = random_batch(seed)
            n = d["loss_mat"].shape[0]
            scores = torch.round(d["loss_mat"], decimals=1)
            scores[:2] = scores[:2].max() + 1  # a tie at the max
            batch = TensorDictStub(token_level_scores=scores, responses=torch.arange(n * 2).reshape(n, 2))
            batch.batch_size = [n]
            data = data_proto_stub(
                batch, {"uid": np.arange(n).astype(str), "tags": list(range(n))}, {"rows": list(range(n)), "step": 3}
            )
            out = []
            for m in (core, ours):
                torch.manual_seed(500 + seed)
                r = m.compute_pf_ppo_reweight_data(data, method, power)
                same = r.meta_info["step"] == 3 and r.batch.batch_size == [n] and data.batch is batch
                rows = [r.non_tensor_batch["uid"].astype(int), r.non_tensor_batch["tags"], r.meta_info["rows"]]
                out.append((r.batch["token_level_scores"], r.batch["responses"], *map(torch.tensor, rows), float(same)))
            return out

        compare(f"compute_pf_ppo_reweight_data {method} pow={power}", run)
