"""Forward+backward time and peak memory of `trl_ext.losses` vs straightforward reference-style code.

Run (from the repository root, with the package installed)::

    python benchmarks/losses.py                      # all losses, B=64, T=8192, float32, CPU
    python benchmarks/losses.py --device cuda --dtype bfloat16 --repeats 30
    python benchmarks/losses.py --losses ppo,gspo,mix_chord --batch 16 --seq 2048

For every policy loss in `trl_ext.losses.POLICY_LOSSES` (default hyperparameters, plus a `rec/one-side`
variant), the KL loss term (`k2`, `low_var_kl`) and the entropy bonus, the script compares

* **ours**: the `trl_ext` callable, and
* **plain**: the same formula written the way the reference code (Trinity-RFT / verl) writes it
  (`benchmarks/plain_losses.py`).

Both must give the same loss (asserted with `torch.allclose`, rtol 1e-4 / atol 1e-6 in float32, looser
in bfloat16) and the same metrics (same tolerance). All cases are checked before any timing and a
mismatch raises; otherwise the script exits 0 whatever the numbers: it is a report.

Inputs: logprob = -|randn|·0.5 (a leaf requiring grad), old = logprob + 0.05·randn, ref = logprob +
0.02·randn, per-sequence advantages `[B]` ~ randn, a right-padded mask with row lengths uniform in
[T/4, T], `expert_mask` on odd rows, `step` = 10, entropy = |randn| (a second leaf), prox = logprob + 0.03·randn
(decoupled_ppo's proximal policy).

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
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from plain_losses import (  # benchmarks/: the script's own folder
    plain_a2po,
    plain_cispo,
    plain_clip_cov,
    plain_decoupled_ppo,
    plain_dpo,
    plain_dppo,
    plain_dro,
    plain_entropy,
    plain_geo_mean,
    plain_gpg,
    plain_gspo,
    plain_importance_sampling,
    plain_k2,
    plain_kl_cov,
    plain_kl_loss,
    plain_low_var_kl,
    plain_luspo,
    plain_m2po,
    plain_mix,
    plain_opmd,
    plain_ppo,
    plain_rec,
    plain_sapo,
    plain_sft,
    plain_sft_is,
    plain_sft_phi,
    plain_sppo,
    plain_topr,
    plain_tpo,
    plain_vespo,
)
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from trl_ext.losses import POLICY_LOSSES, get_entropy_fn, get_kl_fn, get_policy_loss

MiB = 2.0**20
WARMUP = 3


def seeded(fn: Callable) -> Callable:
    """`fn` after `torch.manual_seed(0)`: clip_cov draws its dropped tokens from torch's global generator, so ours and
    the plain code (verl's `torch.randperm`) drop the same ones."""

    def call(**batch: Any):
        torch.manual_seed(0)
        return fn(**batch)

    return call


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
    "decoupled_ppo": (partial(ours_loss, "decoupled_ppo"), plain_decoupled_ppo),
    # a cap that about a fifth of this batch's behaviour weights exceed (the default 5.0 masks none): both sides mask
    "decoupled_ppo/cap": (
        partial(ours_loss, "decoupled_ppo", behave_imp_weight_cap=1.05),
        partial(plain_decoupled_ppo, cap=1.05),
    ),
    # TRL 1.16's losses, as TRL's GRPOTrainer / experimental trainers write them
    "vespo": (partial(ours_loss, "vespo"), plain_vespo),
    "luspo": (partial(ours_loss, "luspo"), plain_luspo),
    "a2po": (partial(ours_loss, "a2po"), plain_a2po),
    "tpo": (partial(ours_loss, "tpo"), plain_tpo),
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
        "prox_logprob": logprob + 0.03 * torch.randn(batch, seq, generator=g),  # drawn last: the others unchanged
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
