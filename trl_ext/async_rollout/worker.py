"""An offline rollout worker for TRL's `AsyncGRPOTrainer`: transformers generation on CPU, in its own process.

TRL 1.16's asynchronous GRPO (`trl.experimental.async_grpo`) trains on `RolloutSample`s that a rollout worker
(`RolloutWorkerProtocol`) puts on a queue while the trainer steps; its own worker (`AsyncRolloutWorker`) asks a vLLM
server for completions. `TransformersRolloutWorker` is the offline default: a spawned child process loads the model
with transformers and loops

1. apply the newest weights the trainer sent (`LocalWeightTransfer`, between batches only), or wait while paused;
2. draw `generation_batch_size / num_generations` prompts (the dataset cycled, shuffled per epoch with `seed`; one
   group id per prompt, 0, 1, 2, ..., group `g` being prompt `g mod len(dataset)` of epoch `g // len(dataset)`'s
   order) and generate `num_generations` completions of each with HF `generate` (sampling with `temperature`,
   `top_p`, `top_k`, `min_p`, `repetition_penalty`; `max_completion_length` new tokens; eos from the tokenizer and
   the generation config), torch's RNG seeded before each call from `seed` and the batch's first group id, so that
   a batch's completions depend on its weights and its groups only, not on how much was generated before;
3. compute the sampling log-probs with one forward pass of the same weights:
   `old_log_probs_t = log_softmax(logits_{t-1} / temperature)[token_t]` on the completion tokens, 0 on the prompt
   (the quantity TRL's fused head trains on, so the two agree when the weights are equal);
4. score each group (`GroupScorer`: rewards, then a trl_ext advantage estimator; with ReMax also one greedy
   completion per prompt, generated with the same weights, whose reward is the group's baseline), and put the kept
   samples on `rollout_buffer` (blocking while it is full: backpressure), each stamped with the version of the
   weights that generated it (`model_version`, the number `LocalWeightTransfer` gave the weights it applied);
5. push one metrics dict per batch on `metrics_queue` (keys reduced by TRL's `_reduce_metric`: `*_total` summed,
   `*_max` / `*_min` extrema, `(num, den)` pairs rates, the rest averaged).

The trainer's order is respected: `weight_transfer.init_weight_transfer()`, a first sync (pause, send, resume,
`update_model_version(1)`), then `start()`; the child generates only after it applied the first weights.

Resuming: `start_at(group_id)` before `start()` makes the child begin at that group id (the first one a checkpoint's
run had not trained, `trainer.asynchronous.resume`), and `update_model_version(v)` before the first sync numbers the
sent weights on from `v`; the child's draws then are those an uninterrupted worker makes for the same weights and
groups.

Liveness: the child ticks a heartbeat (wall clock) at every stage and at least every `heartbeat_interval_s` while it
waits, and names its current stage; on an exception it reports the stage, the exception and its traceback before it
exits. `check_health(stale_after_s)` raises `RuntimeError` naming the worker (class and pid), with that report, or
with the last stage when the child died without reporting (killed) or its heartbeat is older than `stale_after_s`
(hung, e.g. in a reward function).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import time
import warnings
from typing import Any

from .._validation import check_bool, check_number
from .episodes import check_episode_setup, probe_environments
from .rollout_loop import DTYPES, STAGE_BYTES, Channels, child_main
from .scoring import GroupScorer
from .weights import LocalWeightTransfer

__all__ = ["DTYPES", "TransformersRolloutWorker"]


class TransformersRolloutWorker:
    """`RolloutWorkerProtocol` for TRL's `AsyncGRPOTrainer`: transformers generation in a spawned child process (see
    the module docstring). Pass it as `rollout_worker=` and `worker.weight_transfer` as `weight_transfer=`.

    Args:
        model_path: The policy checkpoint the child loads (a directory or a cached model id; the trainer then sends
            its weights before the first batch).
        dataset: A `datasets.Dataset` with a `prompt` column (text, or a list of messages); the other columns are
            passed to the reward functions (one value per completion), as in TRL.
        processing_class: The tokenizer (prompts are tokenized as TRL's GRPOTrainer does; padding is done here).
        scorer: The `GroupScorer` (reward functions and advantage estimator).
        num_generations: Completions per prompt (one group).
        max_completion_length: Maximum new tokens per completion.
        temperature / top_p / top_k / min_p / repetition_penalty: Sampling settings (`top_k=0`, `min_p=None`: off).
        generation_batch_size: Completions per `generate` call, a multiple of `num_generations` (default
            `num_generations`: one prompt per call).
        queue_maxsize: Maximum samples waiting in `rollout_buffer` (generation blocks while it is full); 0: unbounded.
        seed: Seeds the dataset order, the child's torch RNG before each `generate` call (with the batch's first
            group id) and the scorer's per-group generators' base.
        num_threads: torch threads in the child.
        dtype: The child model's dtype: one of `DTYPES`.
        device: Where the child runs the model (default CPU, with `CUDA_VISIBLE_DEVICES=""`); `"cuda:N"` keeps the
            GPUs visible.
        heartbeat_interval_s: The longest the child waits (paused, waiting for weights, on a full buffer) between
            heartbeats and checks for stop / pause.
        chat_template_kwargs: Extra keyword arguments of `apply_chat_template` for conversational prompts.
        start_timeout_s: How long `start()` waits for the child to load the model.
        pause_during_sync: Whether a weight sync stops generation until it is done (vLLM's behaviour); default False:
            the child applies weights between batches, so it keeps generating while they are copied.
        pause_timeout_s: How long `weight_transfer.pause()` waits for the child to finish its batch.
        tools: Tools the model may call (picklable callables with docstrings, as TRL's): each completion becomes a
            multi-turn episode (`episodes.py`); the prompts must be conversational.
        environment_factory: As TRL's: a picklable callable (or a dict of them by the rows' `environment` field)
            making one environment per episode, reset on the row, whose public methods are tools.
        max_tool_calling_iterations: The most rounds of tool calls per episode (None: no limit).
    """

    def __init__(
        self,
        *,
        model_path: str,
        dataset: Any,
        processing_class: Any,
        scorer: GroupScorer,
        num_generations: int,
        max_completion_length: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float | None = None,
        repetition_penalty: float = 1.0,
        generation_batch_size: int | None = None,
        queue_maxsize: int = 1024,
        seed: int = 0,
        num_threads: int = 1,
        dtype: str = "float32",
        device: str | None = None,
        heartbeat_interval_s: float = 0.1,
        chat_template_kwargs: dict[str, Any] | None = None,
        start_timeout_s: float = 300.0,
        pause_during_sync: bool = False,
        pause_timeout_s: float = 600.0,
        tools: list[Any] | None = None,
        environment_factory: Any = None,
        max_tool_calling_iterations: int | None = None,
    ):
        name = type(self).__name__
        if not isinstance(model_path, str | os.PathLike):
            raise TypeError(f"{name}: model_path must be a str (a directory or a model id), got {type(model_path)}")
        if not isinstance(scorer, GroupScorer):
            raise TypeError(f"{name}: scorer must be a GroupScorer, got {type(scorer).__name__}")
        if not scorer.reward_funcs:
            raise ValueError(f"{name}: the scorer has no reward functions; pass reward_funcs to the GroupScorer")
        if not hasattr(dataset, "column_names") or "prompt" not in dataset.column_names:
            raise ValueError(f"{name}: dataset must be a datasets.Dataset with a 'prompt' column")
        if len(dataset) == 0:
            raise ValueError(f"{name}: dataset is empty")
        check_number(name, "num_generations", num_generations, ge=1, integer=True)
        check_number(name, "max_completion_length", max_completion_length, ge=1, integer=True)
        generation_batch_size = num_generations if generation_batch_size is None else generation_batch_size
        check_number(name, "generation_batch_size", generation_batch_size, ge=1, integer=True)
        if generation_batch_size % num_generations:
            raise ValueError(
                f"{name}: generation_batch_size={generation_batch_size} is not valid; must be a multiple of "
                f"num_generations={num_generations}"
            )
        check_number(name, "queue_maxsize", queue_maxsize, ge=0, integer=True)
        check_number(name, "num_threads", num_threads, ge=1, integer=True)
        check_number(name, "top_k", top_k, ge=-1, integer=True)  # 0 and -1 (vLLM's spelling): off
        check_number(name, "seed", seed, integer=True)
        check_number(name, "temperature", temperature, gt=0)
        check_number(name, "top_p", top_p, gt=0, le=1)
        check_number(name, "repetition_penalty", repetition_penalty, gt=0)
        check_number(name, "heartbeat_interval_s", heartbeat_interval_s, gt=0)
        check_number(name, "start_timeout_s", start_timeout_s, gt=0)
        check_number(name, "pause_timeout_s", pause_timeout_s, gt=0)
        check_bool(name, "pause_during_sync", pause_during_sync)
        if min_p is not None and min_p != 0:  # 0: off, as in vLLM
            check_number(name, "min_p", min_p, gt=0, le=1)
        if dtype not in DTYPES:
            raise ValueError(f"{name}: dtype={dtype!r} is not valid; must be one of {', '.join(map(repr, DTYPES))}")
        if device is not None and not isinstance(device, str):
            raise TypeError(f"{name}: device must be a str like 'cpu' or 'cuda:0', or None")
        if tools or environment_factory is not None:
            check_episode_setup(name, processing_class, dataset, scorer, tools, max_tool_calling_iterations)
            probe_environments(name, environment_factory)

        self.scorer = scorer
        self.num_generations = num_generations
        self.start_timeout_s = float(start_timeout_s)
        ctx = mp.get_context("spawn")
        self._ctx = ctx
        self.rollout_buffer = ctx.Queue(maxsize=queue_maxsize)
        # Bounded and never waited on by the child: a trainer that stops draining cannot block generation.
        self.metrics_queue = ctx.Queue(maxsize=4096)
        self._channels = Channels(
            rollout_buffer=self.rollout_buffer,
            metrics_queue=self.metrics_queue,
            stop_event=ctx.Event(),
            ready_event=ctx.Event(),
            failed_event=ctx.Event(),
            error_queue=ctx.Queue(maxsize=1),
            heartbeat=ctx.Value("d", 0.0, lock=False),
            stage=ctx.Array("c", STAGE_BYTES),
        )
        self._config = dict(
            model_path=str(model_path),
            dataset=dataset,
            processing_class=processing_class,
            scorer=scorer,
            num_generations=num_generations,
            max_completion_length=max_completion_length,
            temperature=float(temperature),
            top_p=float(top_p),
            top_k=max(top_k, 0),
            min_p=min_p or None,
            repetition_penalty=float(repetition_penalty),
            generation_batch_size=generation_batch_size,
            seed=seed,
            num_threads=num_threads,
            dtype=dtype,
            device=device,
            heartbeat_interval_s=float(heartbeat_interval_s),
            chat_template_kwargs=dict(chat_template_kwargs or {}),
            start_group_id=0,
            tools=list(tools or []),
            environment_factory=environment_factory,
            max_tool_calling_iterations=max_tool_calling_iterations,
        )
        self.weight_transfer = LocalWeightTransfer(
            model_path=str(model_path),
            dtype=DTYPES[dtype],
            mp_context=ctx,
            pause_during_sync=pause_during_sync,
            pause_timeout_s=pause_timeout_s,
            owner=name,
        )
        self.weight_transfer.attach(self._child_running, self._describe)
        self._process: Any = None
        self._stopped = False
        self._failure: str | None = None
        self._model_version = 0

    # -- RolloutWorkerProtocol ------------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The child's process id (None before `start()`)."""
        return self._process.pid if self._process is not None else None

    @property
    def stage(self) -> str:
        """The child's current (or last) stage, e.g. `"generating groups 4-5 with weights v2"`, `"paused"`."""
        return self._channels.get_stage()

    @property
    def model_version(self) -> int:
        """The policy version the trainer last announced (`update_model_version`)."""
        return self._model_version

    def update_model_version(self, model_version: int) -> None:
        """Record the trainer's live policy version. Samples are stamped with the version of the weights that
        generated them (numbered by `weight_transfer`), not with this one; the next send is numbered after it."""
        self._model_version = int(model_version)
        self.weight_transfer.note_model_version(self._model_version)

    @property
    def start_group_id(self) -> int:
        """The group id the child begins at (0, or what `start_at` set)."""
        return self._config["start_group_id"]

    def start_at(self, group_id: int) -> None:
        """Begin the child's dataset iteration at `group_id` (a resumed run's position: the group its checkpoint's
        run would have trained next) instead of 0; the group ids, the epochs' orders and the per-batch seeds are the
        ones an uninterrupted worker has there. Only before `start()`.

        Raises:
            ValueError: `group_id` is not an integer >= 0.
            RuntimeError: The child has started already.
        """
        check_number(type(self).__name__, "group_id", group_id, ge=0, integer=True)
        if self._process is not None or self._stopped:
            raise RuntimeError(
                f"{self._label()}: start_at({group_id}) after start() or stop(); the child's position is fixed"
            )
        self._config["start_group_id"] = int(group_id)

    def start(self) -> None:
        """Spawn the child and wait until it has loaded the model (it then waits for the first weights).

        Raises:
            TypeError: Something the child needs cannot be pickled (named).
            RuntimeError: The child failed or exited while loading, or did not load within `start_timeout_s`; the
                worker was stopped already.
        """
        if self._stopped:
            raise RuntimeError(f"{self._label()}: start() after stop(); a stopped worker cannot restart")
        if self._process is not None:
            warnings.warn(f"{self._label()}: start() called twice; ignored", stacklevel=2)
            return
        self.scorer.check_picklable()
        for key, value in self._config.items():
            try:
                pickle.dumps(value)
            except Exception as e:
                raise TypeError(
                    f"{type(self).__name__}: {key} cannot be pickled for the spawned rollout process ({e})"
                ) from e
        self._channels.heartbeat.value = time.time()
        self._channels.set_stage("starting")
        process = self._ctx.Process(
            target=child_main,
            args=(self._config, self._channels, self.weight_transfer.receiver()),
            name="trl-ext-rollout-worker",
            daemon=True,
        )
        process.start()
        self._process = process
        deadline = time.monotonic() + self.start_timeout_s
        while not self._channels.ready_event.wait(0.05):
            if self._channels.failed_event.is_set() or not process.is_alive():
                self.check_health(float("inf"))
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"{self._label()}: the rollout child did not load the model within start_timeout_s="
                    f"{self.start_timeout_s}s (last stage: {self._channels.get_stage()!r})"
                )
        self._channels.heartbeat.value = time.time()

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the child: ask it to exit, join it up to `timeout_s`, then terminate (and kill) it. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        process = self._process
        if process is None:
            return
        self._channels.stop_event.set()
        process.join(timeout_s)
        if process.is_alive():
            process.terminate()
            process.join(5)
        if process.is_alive():
            process.kill()
            process.join(5)

    def check_health(self, stale_after_s: float) -> None:
        """Raise `RuntimeError` if the child failed (its stage, exception and traceback), died without reporting,
        or its heartbeat is older than `stale_after_s` seconds (its last stage and the heartbeat's age)."""
        name = self._label()
        if self._process is None:
            raise RuntimeError(f"{name}: check_health: the worker was not started (call start())")
        if self._channels.failed_event.is_set():
            raise RuntimeError(self._failure_message())
        if self._stopped:
            raise RuntimeError(f"{name}: check_health: the worker was stopped")
        if not self._process.is_alive():
            raise RuntimeError(
                f"{name}: the rollout child exited without reporting an error (exitcode={self._process.exitcode}, "
                f"killed?); last stage: {self._channels.get_stage()!r}"
            )
        age = time.time() - self._channels.heartbeat.value
        if age > stale_after_s:
            raise RuntimeError(
                f"{name}: the rollout child's heartbeat is stale ({age:.1f}s old > stale_after_s={stale_after_s}s; "
                f"hung?); last stage: {self._channels.get_stage()!r}"
            )

    # -- helpers ----------------------------------------------------------------------------------------------------

    def _label(self) -> str:
        pid = self._process.pid if self._process is not None else None
        return f"{type(self).__name__}(pid={pid})"

    def _child_running(self) -> bool:
        process = self._process
        return (
            process is not None
            and not self._stopped
            and self._channels.ready_event.is_set()
            and not self._channels.failed_event.is_set()
            and process.is_alive()
        )

    def _describe(self) -> str:
        age = time.time() - self._channels.heartbeat.value
        return f"{self._label()} at {self._channels.get_stage()!r}, heartbeat {age:.1f}s ago"

    def _failure_message(self) -> str:
        if self._failure is None:
            try:
                stage, kind, message, tb = self._channels.error_queue.get(timeout=5.0)
                self._failure = (
                    f"{self._label()}: the rollout child failed while {stage}: {kind}: {message}\n"
                    f"Child traceback:\n{tb}"
                )
            except queue.Empty:
                return f"{self._label()}: the rollout child failed (no report received); last stage: " + repr(
                    self._channels.get_stage()
                )
        return self._failure
