"""Dev-only: compare `trl_ext.compat.verl` with the real verl 0.9 `core_algos` on random inputs.

    python benchmarks/compare_verl.py [--verl-path DIR]

DIR holds the `verl/` package (an unzipped wheel: `pip download "verl>=0.9,<0.10" --no-deps` then unzip); by default
an installed verl is located (not imported). Only verl's `core_algos.py`, `rollout_corr_helper.py` and
`utils/{torch_functional,import_utils,groupwise}.py` are loaded, by path; the rest of verl and its heavy dependencies
(ray, tensordict, transformers, omegaconf, ...) are replaced by stubs in `sys.modules`. Prints the max abs difference
of every function / mode / name (loss, gradient wrt log_prob, metrics) and exits 1 if one exceeds 1e-6. The advantage
estimators, KL controllers and the other `core_algos` functions are compared by `compare_verl_advantages.py`
(called at the end of `main`).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import sys
import types
import warnings
from pathlib import Path

import torch

TOL = 1e-6


# --------------------------------------------------------------------------------------------------
# Loading verl's core_algos with stubs
# --------------------------------------------------------------------------------------------------


class ActorConfigStub(dict):
    """Stands in for verl's ActorConfig (a Mapping with attribute access) in the `isinstance` checks."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError as error:
            raise AttributeError(key) from error


class DataProtoStub:
    """Stands in for verl's DataProto: `.batch` (a dict of tensors), `.non_tensor_batch`, `.meta_info`."""

    def __init__(self, batch=None, non_tensor_batch=None, meta_info=None):
        self.batch, self.non_tensor_batch, self.meta_info = batch or {}, non_tensor_batch or {}, meta_info or {}

    @classmethod
    def from_dict(cls, tensors=None, non_tensors=None, meta_info=None):
        return cls(dict(tensors or {}), dict(non_tensors or {}), dict(meta_info or {}))


def _stub(name: str, **attrs) -> types.ModuleType:
    """A module `name` whose missing attributes are dummy classes (for imports that are only type annotations)."""
    module = types.ModuleType(name)
    module.__path__ = []  # a package, so that submodules can be stubbed too
    module.__dict__.update(attrs)
    module.__getattr__ = lambda attr: type(attr, (), {})
    _register(name, module)
    return module


def _register(name: str, module: types.ModuleType) -> None:
    """Put `module` in sys.modules and on its parent package (`import a.b as x` reads the attribute)."""
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    _register(name, module)
    spec.loader.exec_module(module)
    return module


def load_core_algos(verl_path: str | None) -> tuple[types.ModuleType, str]:
    if verl_path is None:
        spec = importlib.util.find_spec("verl")
        if spec is None or not spec.submodule_search_locations:
            sys.exit("verl not found: pass --verl-path DIR (DIR/verl/trainer/ppo/core_algos.py)")
        root = Path(next(iter(spec.submodule_search_locations)))
    else:
        root = Path(verl_path) / "verl"
    version = (root / "version" / "version").read_text().strip() if (root / "version" / "version").exists() else "?"
    for dep in ("ray", "tensordict", "transformers", "omegaconf", "numpy"):
        if importlib.util.find_spec(dep) is None:
            _stub(dep)
    for name in ("verl", "verl.trainer", "verl.trainer.ppo", "verl.workers"):
        _stub(name)
    utils = _stub("verl.utils")
    _stub("verl.utils.device", get_device_name=lambda: "cpu", get_torch_device=lambda: torch.cpu)
    _stub("verl.trainer.config", AlgoConfig=type("AlgoConfig", (), {}))
    _stub("verl.workers.config", ActorConfig=ActorConfigStub)
    _stub("verl.protocol", DataProto=DataProtoStub)
    _stub("verl.trainer.config.algorithm")
    _stub("verl.workers.config.actor")
    _load("verl.utils.import_utils", root / "utils" / "import_utils.py")
    _load("verl.utils.torch_functional", root / "utils" / "torch_functional.py")
    groupwise = _load("verl.utils.groupwise", root / "utils" / "groupwise.py")
    utils.as_torch_index, utils.group_mean_std = groupwise.as_torch_index, groupwise.group_mean_std
    _load("verl.trainer.ppo.rollout_corr_helper", root / "trainer" / "ppo" / "rollout_corr_helper.py")
    return _load("verl.trainer.ppo.core_algos", root / "trainer" / "ppo" / "core_algos.py"), version


# --------------------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------------------


def random_batch(seed: int, batch: int = 8, length: int = 12, dtype=torch.float64) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, length + 1, (batch,), generator=g)
    lengths[0] = length  # one full row; lengths may be 0 (an empty row)
    mask = (torch.arange(length) < lengths.unsqueeze(-1)).to(dtype)
    old = -torch.rand(batch, length, generator=g, dtype=dtype) * 3
    log_prob = old + torch.randn(batch, length, generator=g, dtype=dtype) * 0.6  # ratios well beyond both clips
    log_prob[1, :3] = old[1, :3] + torch.tensor([2.0, -2.0, 1.5], dtype=dtype)  # dual clip (r > 3) and big ratios
    advantages = torch.randn(batch, 1, generator=g, dtype=dtype).expand(batch, length).clone()
    advantages[1] = -1.0
    advantages[2, :2] = 0.0
    return {
        "old_log_prob": old,
        "log_prob": log_prob,
        "advantages": advantages,
        "response_mask": mask,
        "ref_log_prob": old + torch.randn(batch, length, generator=g, dtype=dtype),
        "rollout_is_weights": torch.rand(batch, length, generator=g, dtype=dtype) * 2,
        "loss_mat": torch.randn(batch, length, generator=g, dtype=dtype),
    }


def diff(a, b) -> float:
    if isinstance(a, (tuple, list)):
        return max(diff(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        assert a.keys() == b.keys(), (a.keys(), b.keys())
        return max((diff(a[k], b[k]) for k in a), default=0.0)  # gpg's metrics are {}
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return (a - b).abs().max().item() if a.numel() else 0.0


def with_grad(fn, data: dict, key: str = "log_prob"):
    """`fn(x)`'s outputs and the gradient of its first (scalar) output wrt `data[key]`."""
    x = data[key].clone().requires_grad_(True)
    out = fn({**data, key: x})
    first = out[0] if isinstance(out, tuple) else out
    (grad,) = torch.autograd.grad(first.sum(), x)
    return out, grad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verl-path", help="directory holding the verl/ package (default: an installed verl)")
    args = parser.parse_args()
    core, version = load_core_algos(args.verl_path)
    warnings.filterwarnings("ignore", category=FutureWarning)  # verl's compute_policy_loss is deprecated
    from trl_ext.compat import verl as ours

    print(f"verl {version} core_algos vs trl_ext.compat.verl (float64, max abs diff over 3 seeds)")
    results: list[tuple[str, float]] = []

    def compare(label: str, run) -> None:
        worst = max(diff(*run(seed)) for seed in range(3))
        results.append((label, worst))
        print(f"{'FAIL' if worst > TOL else 'ok  '} {label:<58} {worst:.3g}")

    global_infos = {
        "local": {},
        "global": {"dp_size": 4, "batch_num_tokens": 150, "global_batch_size": 30, "loss_scale_factor": 64},
    }
    for mode, (info_name, info) in itertools.product(ours.AGG_LOSS_MODES, global_infos.items()):

        def run(seed, mode=mode, info=info):
            d = random_batch(seed)
            return [
                with_grad(lambda x, m=m: m.agg_loss(x["loss_mat"], x["response_mask"], mode, **info), d, "loss_mat")
                for m in (core, ours)
            ]

        compare(f"agg_loss {mode} [{info_name}]", run)

    for mode, clips in itertools.product(ours.AGG_LOSS_MODES, [(0.2, None, None), (0.2, 0.1, 0.3)]):

        def run(seed, mode=mode, clips=clips):
            d = random_batch(seed)
            keys = ("old_log_prob", "log_prob", "advantages", "response_mask")
            return [
                with_grad(lambda x, m=m: m.compute_policy_loss(*(x[k] for k in keys), *clips, 3.0, mode), d)
                for m in (core, ours)
            ]

        compare(f"compute_policy_loss {mode} clip={clips}", run)

    names = ("vanilla", "gspo", "sapo", "cispo")
    for name, mode, (info_name, info), weighted in itertools.product(
        names, ours.AGG_LOSS_MODES, global_infos.items(), (False, True)
    ):

        def run(seed, name=name, mode=mode, info=info, weighted=weighted):
            d = random_batch(seed)
            config = ActorConfigStub(
                clip_ratio=0.2, clip_ratio_low=0.15, clip_ratio_high=0.28, clip_ratio_c=3.0, tau_pos=1.0,
                tau_neg=1.05, global_batch_info=dict(info),
            )  # fmt: skip
            weights = d["rollout_is_weights"] if weighted else None
            keys = ("old_log_prob", "log_prob", "advantages", "response_mask")
            return [
                with_grad(lambda x, m=m: m.get_policy_loss_fn(name)(*(x[k] for k in keys), mode, config, weights), d)
                for m in (core, ours)
            ]

        compare(f"policy_loss {name} {mode} [{info_name}]{' +rollout_is' if weighted else ''}", run)

    # gpg / geo_mean / dro, with per-row and per-token advantages (geo_mean takes the sign per token)
    for name, mode, (info_name, info), weighted, token_adv in itertools.product(
        ("gpg", "geo_mean", "dro"), ours.AGG_LOSS_MODES, global_infos.items(), (False, True), (False, True)
    ):

        def run(seed, name=name, mode=mode, info=info, weighted=weighted, token_adv=token_adv):
            d = random_batch(seed)
            if token_adv:
                g = torch.Generator().manual_seed(100 + seed)
                d["advantages"] = torch.randn(d["advantages"].shape, generator=g, dtype=d["advantages"].dtype)
                d["advantages"][0, :3] = 0.0
            config = ActorConfigStub(
                clip_ratio=0.2, clip_ratio_low=0.15, clip_ratio_high=0.28, global_batch_info=dict(info),
                policy_loss=ActorConfigStub(dro_beta=0.3),
            )  # fmt: skip
            weights = d["rollout_is_weights"] if weighted else None
            keys = ("old_log_prob", "log_prob", "advantages", "response_mask")
            return [
                with_grad(lambda x, m=m: m.get_policy_loss_fn(name)(*(x[k] for k in keys), mode, config, weights), d)
                for m in (core, ours)
            ]

        label = f"policy_loss {name} {mode} [{info_name}]{' +rollout_is' if weighted else ''}"
        compare(label + (" token-adv" if token_adv else ""), run)

    for f_norm, rewards_kind in itertools.product((1.0, 0.5), ("scalar", "token")):

        def run(seed, f_norm=f_norm, rewards_kind=rewards_kind):
            d = random_batch(seed)
            g = torch.Generator().manual_seed(200 + seed)
            batch, length = d["response_mask"].shape
            scores = torch.randint(0, 3, (batch,), generator=g).to(torch.float64) * 0.5  # some exact zeros
            if rewards_kind == "token":
                rewards = torch.randn(batch, length, generator=g, dtype=torch.float64) * (scores > 0).unsqueeze(-1)
            else:
                rewards = torch.zeros(batch, length, dtype=torch.float64)
                rewards[:, -1] = scores
            index = [0, 0, 0, 1, 1, 2, 3, 3][:batch]  # group 2: a single sample
            return [
                m.compute_gpg_outcome_advantage(rewards.clone(), d["response_mask"], index, f_norm=f_norm)
                for m in (core, ours)
            ]

        compare(f"gpg_outcome_advantage f_norm={f_norm} {rewards_kind} rewards", run)

    # clip_cov / kl_cov / dppo_tv / dppo_kl; clip_cov's random draw under the same torch.manual_seed on both sides
    cov_dppo_settings = {
        "clip_cov": {
            "verl-defaults": {"policy_loss": ActorConfigStub(clip_cov_ratio=0.0002, clip_cov_lb=1.0, clip_cov_ub=5.0)},
            "ratio=0.1,lb=0": {"policy_loss": ActorConfigStub(clip_cov_ratio=0.1, clip_cov_lb=0.0, clip_cov_ub=5.0)},
        },
        "kl_cov": {
            "verl-defaults": {"policy_loss": ActorConfigStub(kl_cov_ratio=0.0002, ppo_kl_coef=0.1)},
            "ratio=0.1,coef=1": {"policy_loss": ActorConfigStub(kl_cov_ratio=0.1, ppo_kl_coef=1.0)},
        },
        "dppo_tv": {
            "delta=0.2,c=20": {"clip_ratio_low": None, "clip_ratio_high": None},  # no clip_ratio_c: verl's 20.0
            "delta=0.05/0.1,c=3": {"clip_ratio_low": 0.05, "clip_ratio_high": 0.1, "clip_ratio_c": 3.0},
        },
        "dppo_kl": {
            "delta=0.2,c=20": {"clip_ratio_low": None, "clip_ratio_high": None},
            "delta=0.01/0.02,c=3": {"clip_ratio_low": 0.01, "clip_ratio_high": 0.02, "clip_ratio_c": 3.0},
        },
    }
    cov_dppo_cases = [
        (name, label, setting) for name, table in cov_dppo_settings.items() for label, setting in table.items()
    ]
    for (name, label, setting), mode, (info_name, info), weighted, token_adv in itertools.product(
        cov_dppo_cases, ours.AGG_LOSS_MODES, global_infos.items(), (False, True), (False, True)
    ):

        def run(seed, name=name, setting=setting, mode=mode, info=info, weighted=weighted, token_adv=token_adv):
            d = random_batch(seed)
            if token_adv:
                g = torch.Generator().manual_seed(300 + seed)
                d["advantages"] = torch.randn(d["advantages"].shape, generator=g, dtype=d["advantages"].dtype)
            config = ActorConfigStub(
                {"clip_ratio": 0.2, "clip_ratio_low": 0.15, "clip_ratio_high": 0.28, **setting},
                global_batch_info=dict(info),
            )
            weights = d["rollout_is_weights"] if weighted else None
            keys = ("old_log_prob", "log_prob", "advantages", "response_mask")

            def call(x, m):
                torch.manual_seed(1000 + seed)  # the same draw on both sides (clip_cov)
                return m.get_policy_loss_fn(name)(*(x[k] for k in keys), mode, config, weights)

            return [with_grad(lambda x, m=m: call(x, m), d) for m in (core, ours)]

        tags = f"{' +rollout_is' if weighted else ''}{' token-adv' if token_adv else ''}"
        compare(f"policy_loss {name} {label} {mode} [{info_name}]{tags}", run)

    for name in ours.KL_PENALTIES:

        def run(seed, name=name):
            d = random_batch(seed)
            return [
                with_grad(lambda x, m=m: m.kl_penalty(x["log_prob"], x["ref_log_prob"], name), d) for m in (core, ours)
            ]

        compare(f"kl_penalty {name}", run)

    from compare_verl_advantages import compare_advantages

    compare_advantages(core, ours, compare, ActorConfigStub, DataProtoStub, random_batch, with_grad)

    failed = [label for label, worst in results if worst > TOL]
    print(f"{len(results) - len(failed)}/{len(results)} within {TOL:g}; worst {max(w for _, w in results):.3g}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
