"""Weight transfer from the trainer to an in-machine rollout process through shared CPU memory.

TRL's `AsyncGRPOTrainer` publishes its policy through a `WeightTransferProtocol` (`init_weight_transfer`, `pause`,
`send_weights(iter of (name, tensor))`, `resume`, `destroy`); its default streams the weights into a vLLM server
over NCCL. `LocalWeightTransfer` is the offline counterpart for a rollout worker that runs a transformers model in a
child process on the same machine (`TransformersRolloutWorker`, which creates it):

* `send_weights` copies each parameter ONCE, into a CPU buffer in shared memory (`torch` shared storage, allocated
  on first use in the rollout model's dtype and reused by every later send); a buffer is handed to the child once
  (through a queue), after which both processes see the same memory. The buffers are written under an inter-process
  lock, which the child also holds while it copies them into its model, so it never reads a half-written version.
* Versions: send `k` (counted from 1) publishes version `k`, or `v + 1` when the trainer last announced version `v`
  (`note_model_version`, from `update_model_version`; so a resumed run's numbering continues its checkpoint's). The
  trainer announces `k` right after send `k`, so the two agree. The child stamps every sample with the version it
  last applied, which is race-free: the number travels with the weights, not with `update_model_version`.
* Errors surface where they can be told: a name the rollout model does not have, or a shape that differs from the
  model's, raises `ValueError` in `send_weights`, naming the parameter (checked against the model's parameter
  manifest, read from its config on the meta device, with no weights loaded); a failure while the child applies
  the weights fails the child, and the worker's `check_health` reports it.
* `pause()`: generation need not stop for a transfer here, since the child applies weights only between batches and
  under the lock, and a sample in flight keeps the version of the weights that generated it; so by default
  (`pause_during_sync=False`) `pause()` and `resume()` return at once and the trainer does not wait for the child's
  batch (measured on the toy: waiting cost 0.05 s of a 0.15 s step). With `pause_during_sync=True` (vLLM's
  behaviour) `pause()` asks the child to finish its current batch (generation and log-probs; samples already
  generated may still be scored and enqueued) and waits for it to acknowledge; `resume()` releases it. A child that
  is not running (not started or not ready yet, dead, failed) has nothing to pause, so `pause()` returns at once.

`WeightReceiver` is the child's end (picklable: spawn arguments only).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["LocalWeightTransfer", "WeightReceiver", "parameter_manifest"]


def parameter_manifest(model_path: str, dtype: torch.dtype) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """`{name: (shape, dtype)}` of every parameter of the causal LM at `model_path` (tied names included), built on
    the meta device from its config: no weight is loaded."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return {name: (tuple(p.shape), p.dtype) for name, p in model.named_parameters(remove_duplicate=False)}


@dataclass
class WeightReceiver:
    """The rollout child's end of a `LocalWeightTransfer` (built by `LocalWeightTransfer.receiver()`)."""

    lock: Any
    published: Any
    buffer_messages: Any
    buffers_queue: Any
    pause_flag: Any
    pause_seq: Any
    ack_seq: Any

    def __post_init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}
        self._received = 0

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    @property
    def published_version(self) -> int:
        """The version of the weights in the shared buffers (0: none sent yet)."""
        return int(self.published.value)

    def pause_requested(self) -> bool:
        return self.pause_flag.is_set()

    def acknowledge_pause(self) -> None:
        """Tell `pause()` the child is at a pause point: not generating, and it checks `pause_requested()` before it
        generates again."""
        self.ack_seq.value = self.pause_seq.value

    def apply(self, params: dict[str, torch.nn.Parameter], timeout_s: float = 60.0) -> int:
        """Copy the newest weights into `params` (the model's `named_parameters(remove_duplicate=False)`); return
        their version. Raises `RuntimeError` naming the parameter that cannot be copied."""
        with self.lock:
            deadline = time.monotonic() + timeout_s
            while self._received < self.buffer_messages.value:
                try:
                    self._buffers.update(self.buffers_queue.get(timeout=max(0.01, deadline - time.monotonic())))
                except queue.Empty:
                    raise RuntimeError(
                        f"WeightReceiver.apply: the shared weight buffers did not arrive within {timeout_s}s"
                    ) from None
                self._received += 1
            version = int(self.published.value)
            with torch.no_grad():
                for name, buffer in self._buffers.items():
                    param = params.get(name)
                    if param is None:
                        raise RuntimeError(f"WeightReceiver.apply: the rollout model has no parameter {name!r}")
                    if param.shape != buffer.shape:
                        raise RuntimeError(
                            f"WeightReceiver.apply: parameter {name!r} has shape {tuple(param.shape)} in the rollout "
                            f"model but {tuple(buffer.shape)} was sent"
                        )
                    param.copy_(buffer)
        return version


class LocalWeightTransfer:
    """`WeightTransferProtocol` for a rollout worker running in a child process of this machine (see the module
    docstring). Created by the worker (`worker.weight_transfer`), which attaches the child's liveness to it.

    Args:
        model_path: The rollout model (its config gives the parameter manifest `send_weights` checks against).
        dtype: The rollout model's dtype (the buffers' dtype; sent tensors are converted).
        mp_context: The multiprocessing context the child is spawned with.
        pause_during_sync: Whether `pause()` stops generation until `resume()` (see the module docstring).
        pause_timeout_s: How long `pause()` waits for the child to reach a pause point before raising.
        owner: The name used in error messages (the worker's).
    """

    def __init__(
        self,
        *,
        model_path: str,
        dtype: torch.dtype,
        mp_context: Any,
        pause_during_sync: bool = False,
        pause_timeout_s: float = 600.0,
        owner: str = "LocalWeightTransfer",
    ):
        self.model_path = model_path
        self.pause_during_sync = pause_during_sync
        self.dtype = dtype
        self.pause_timeout_s = pause_timeout_s
        self.owner = owner
        self._lock = mp_context.Lock()
        self._published = mp_context.Value("q", 0, lock=False)
        self._buffer_messages = mp_context.Value("q", 0, lock=False)
        self._buffers_queue = mp_context.Queue()
        # A worker that never starts never reads the queue: exiting must not wait to flush it.
        self._buffers_queue.cancel_join_thread()
        self._pause_flag = mp_context.Event()
        self._pause_seq = mp_context.Value("q", 0, lock=False)
        self._ack_seq = mp_context.Value("q", 0, lock=False)
        self._manifest: dict[str, tuple[tuple[int, ...], torch.dtype]] | None = None
        self._buffers: dict[str, torch.Tensor] = {}
        self._shared: set[str] = set()
        self._version = 0
        self._announced = 0
        self._is_running: Callable[[], bool] = lambda: False
        self._describe: Callable[[], str] = lambda: "not started"

    # -- wiring (worker side) -------------------------------------------------------------------------------------

    def receiver(self) -> WeightReceiver:
        """The child's end: the shared lock, counters, queue and pause flags."""
        return WeightReceiver(
            self._lock,
            self._published,
            self._buffer_messages,
            self._buffers_queue,
            self._pause_flag,
            self._pause_seq,
            self._ack_seq,
        )

    def attach(self, is_running: Callable[[], bool], describe: Callable[[], str]) -> None:
        """Let `pause()` / `send_weights` see whether the child runs (`is_running`: started, ready, alive, not
        failed) and name its last stage in errors (`describe`)."""
        self._is_running = is_running
        self._describe = describe

    def note_model_version(self, version: int) -> None:
        """The trainer's announced policy version (`update_model_version`): the next send publishes at least
        `version + 1`."""
        self._announced = int(version)

    @property
    def version(self) -> int:
        """The version of the last successful send (0: none)."""
        return self._version

    # -- WeightTransferProtocol -----------------------------------------------------------------------------------

    def init_weight_transfer(self) -> None:
        """Read the rollout model's parameter manifest (names, shapes) once."""
        if self._manifest is None:
            self._manifest = parameter_manifest(self.model_path, self.dtype)

    def pause(self) -> None:
        """With `pause_during_sync`, ask the child to finish its current batch, and wait until it is paused (see the
        module docstring); else nothing."""
        if not self.pause_during_sync:
            return
        # The sequence number moves before the flag is set: a child that sees the flag acknowledges at least `seq`.
        seq = self._pause_seq.value + 1
        self._pause_seq.value = seq
        self._pause_flag.set()
        deadline = time.monotonic() + self.pause_timeout_s
        while self._ack_seq.value < seq:
            if not self._is_running():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.owner}: pause() timed out after {self.pause_timeout_s}s waiting for the rollout child to "
                    f"finish its batch (last stage: {self._describe()})"
                )
            time.sleep(0.005)

    def resume(self) -> None:
        """Release the child paused by `pause()`."""
        self._pause_flag.clear()

    def send_weights(self, iterator: Iterator[tuple[str, torch.Tensor]]) -> None:
        """Copy the `(name, tensor)` pairs into the shared buffers and publish them as the next version.

        Raises:
            ValueError: A name the rollout model does not have, a shape that differs from the model's, a value that
                is not a tensor, or an empty iterator.
            RuntimeError: The child died holding the transfer lock.
        """
        self.init_weight_transfer()
        manifest = self._manifest
        self._acquire()
        try:
            count = 0
            for name, tensor in iterator:
                if not isinstance(tensor, torch.Tensor):
                    raise ValueError(
                        f"{self.owner}: send_weights got {type(tensor).__name__} for parameter {name!r}; must be a "
                        "torch.Tensor"
                    )
                if name not in manifest:
                    known = ", ".join(list(manifest)[:4])
                    raise ValueError(
                        f"{self.owner}: send_weights got parameter {name!r}, which the rollout model "
                        f"({self.model_path}) does not have (its parameters are named like {known}, ...)"
                    )
                shape = manifest[name][0]
                if tuple(tensor.shape) != shape:
                    raise ValueError(
                        f"{self.owner}: send_weights got parameter {name!r} with shape {tuple(tensor.shape)}; the "
                        f"rollout model's is {shape}"
                    )
                buffer = self._buffers.get(name)
                if buffer is None:
                    buffer = torch.empty(shape, dtype=manifest[name][1]).share_memory_()
                    self._buffers[name] = buffer
                buffer.copy_(tensor.detach())
                count += 1
            if count == 0:
                raise ValueError(f"{self.owner}: send_weights got an empty iterator; expected (name, tensor) pairs")
            new = {name: buffer for name, buffer in self._buffers.items() if name not in self._shared}
            if new:
                self._buffers_queue.put(new)
                self._shared.update(new)
                self._buffer_messages.value += 1
            self._version = max(self._version, self._announced) + 1
            self._published.value = self._version
        finally:
            self._lock.release()

    def destroy(self) -> None:
        """Release the shared buffers (after the worker stopped)."""
        self._buffers.clear()
        self._shared.clear()

    def _acquire(self) -> None:
        while not self._lock.acquire(timeout=1.0):
            if not self._is_running():
                raise RuntimeError(
                    f"{self.owner}: send_weights cannot take the weight-transfer lock: the rollout child stopped "
                    f"while applying weights (last stage: {self._describe()})"
                )
