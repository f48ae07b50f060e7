"""An offline rollout worker for TRL's `AsyncGRPOTrainer`: transformers generation on CPU, in its own process.

TRL 1.16's asynchronous GRPO (`trl.experimental.async_grpo`) trains on `RolloutSample`s that a rollout worker
(`RolloutWorkerProtocol`) puts on a queue while the trainer steps; its own worker (`AsyncRolloutWorker`) asks a vLLM
server for completions. `TransformersRolloutWorker` is the offline default: a spawned child process loads the model
with transformers and loops

1. apply the newest weights the trainer sent (`LocalWeightTransfer`, between batches only), or wait while paused;
2. draw `generation_batch_size / num_generations` prompts (the dataset cycled, shuffled per epoch with `seed`; one
   group id per prompt, 0, 1, 2, ...) and generate `num_generations` completions of each with HF `generate`
   (sampling with `temperature`, `top_p`, `top_k`, `min_p`, `repetition_penalty`; `max_completion_length` new tokens;
   eos from the tokenizer and the generation config);
3. compute the sampling log-probs with one forward pass of the same weights:
   `old_log_probs_t = log_softmax(logits_{t-1} / temperature)[token_t]` on the completion tokens, 0 on the prompt
   (the quantity TRL's fused head trains on, so the two agree when the weights are equal);
4. score each group (`GroupScorer`: rewards, then a trl_ext advantage estimator), and put the kept samples on
   `rollout_buffer` (blocking while it is full: backpressure), each stamped with the version of the weights that
   generated it (`model_version`, the number `LocalWeightTransfer` gave the weights it applied);
5. push one metrics dict per batch on `metrics_queue` (keys reduced by TRL's `_reduce_metric`: `*_total` summed,
   `*_max` / `*_min` extrema, `(num, den)` pairs rates, the rest averaged).

The trainer's order is respected: `weight_transfer.init_weight_transfer()`, a first sync (pause, send, resume,
`update_model_version(1)`), then `start()`; the child generates only after it applied the first weights.

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
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from trl.experimental.async_grpo.async_rollout_worker import _CHILD_ENV_TO_STRIP, RolloutSample

from .._validation import check_number
from .scoring import GroupScorer
from .weights import LocalWeightTransfer, WeightReceiver

__all__ = ["DTYPES", "TransformersRolloutWorker"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""The rollout model's dtypes, by the names `dtype=` takes."""

_STAGE_BYTES = 256


@dataclass
class _Channels:
    """The primitives the parent and the child share (spawn arguments)."""

    rollout_buffer: Any
    metrics_queue: Any
    stop_event: Any
    ready_event: Any
    failed_event: Any
    error_queue: Any
    heartbeat: Any
    stage: Any

    def set_stage(self, text: str) -> None:
        self.stage.value = text.encode("utf-8", "replace")[: _STAGE_BYTES - 1]
        self.heartbeat.value = time.time()

    def get_stage(self) -> str:
        return self.stage.value.decode("utf-8", "replace")


def _is_conversational(prompt: Any) -> bool:
    return isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m for m in prompt)


def _child_main(config: dict[str, Any], channels: _Channels, receiver: WeightReceiver) -> None:
    """The child process: scrub the environment (TRL's `_CHILD_ENV_TO_STRIP`; no CUDA unless `device` asks for it),
    run the loop, report a failure (stage, exception, traceback) through `channels`."""
    for key in _CHILD_ENV_TO_STRIP:
        os.environ.pop(key, None)
    device = config["device"]
    if device is None or not str(device).startswith("cuda"):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        os.environ["HIP_VISIBLE_DEVICES"] = ""
    try:
        _RolloutLoop(config, channels, receiver).run()
    except BaseException as e:
        info = (channels.get_stage(), type(e).__name__, str(e), traceback.format_exc())
        try:
            channels.error_queue.put_nowait(info)
        except Exception:
            pass
        channels.failed_event.set()
        traceback.print_exc()
    finally:
        # Samples or metrics still in this process's queue buffers must not keep it alive (the trainer is gone or
        # stopped reading): exit without flushing them.
        channels.rollout_buffer.cancel_join_thread()
        channels.metrics_queue.cancel_join_thread()


class _RolloutLoop:
    """The child's generate / log-prob / score / enqueue loop (see the module docstring)."""

    def __init__(self, config: dict[str, Any], channels: _Channels, receiver: WeightReceiver):
        from transformers import AutoModelForCausalLM, GenerationConfig
        from transformers.utils import logging as hf_logging

        self.config = config
        self.channels = channels
        self.receiver = receiver
        self.scorer: GroupScorer = config["scorer"]
        self.tokenizer = config["processing_class"]
        self.num_generations = config["num_generations"]
        self.temperature = config["temperature"]
        self.interval = config["heartbeat_interval_s"]
        channels.set_stage("loading the model")
        torch.set_num_threads(config["num_threads"])
        torch.manual_seed(config["seed"])
        hf_logging.disable_progress_bar()
        self.device = torch.device(config["device"] or "cpu")
        model = AutoModelForCausalLM.from_pretrained(config["model_path"], dtype=DTYPES[config["dtype"]])
        self.model = model.to(self.device).eval()
        self.params = dict(self.model.named_parameters(remove_duplicate=False))
        eos = model.generation_config.eos_token_id
        eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in eos:
            eos.append(self.tokenizer.eos_token_id)
        if not eos:
            raise ValueError("TransformersRolloutWorker: neither the tokenizer nor the generation config has an eos")
        self.eos_ids = torch.tensor(eos, device=self.device)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos[0]
        # The model's own sampling defaults (e.g. a checkpoint's top_k=20) must not leak in: this config replaces it.
        self.model.generation_config = GenerationConfig(
            do_sample=True,
            temperature=config["temperature"],
            top_p=config["top_p"],
            top_k=config["top_k"],
            min_p=config["min_p"],
            repetition_penalty=config["repetition_penalty"],
            max_new_tokens=config["max_completion_length"],
            eos_token_id=eos,
            pad_token_id=self.pad_id,
        )
        self.rows = self._iter_rows()
        self.pending: dict[str, Any] = {}
        channels.ready_event.set()

    def _iter_rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        dataset, seed = self.config["dataset"], self.config["seed"]
        group_id, epoch = 0, 0
        while True:
            for index in np.random.default_rng([seed, epoch]).permutation(len(dataset)):
                yield group_id, dataset[int(index)]
                group_id += 1
            epoch += 1

    def _stopped(self) -> bool:
        return self.channels.stop_event.is_set()

    def run(self) -> None:
        applied = 0
        while not self._stopped():
            self.channels.heartbeat.value = time.time()
            if self.receiver.pause_requested():
                self.receiver.acknowledge_pause()
                self.channels.set_stage("paused")
                self.channels.stop_event.wait(self.interval)
                continue
            if self.receiver.published_version > applied:
                self.channels.set_stage(f"applying weights v{self.receiver.published_version}")
                t0 = time.perf_counter()
                applied = self.receiver.apply(self.params)
                self.pending["rollout/weight_apply_s"] = time.perf_counter() - t0
                continue  # check for a pause / stop again before generating
            if applied == 0:
                self.channels.set_stage("waiting for the first weights")
                self.channels.stop_event.wait(self.interval)
                continue
            self._rollout_batch(applied)

    def _prompt_ids(self, prompt: Any) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer(text=prompt)["input_ids"])
        if _is_conversational(prompt):
            ids = self.tokenizer.apply_chat_template(
                prompt,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
                **(self.config["chat_template_kwargs"] or {}),
            )["input_ids"]
            return list(ids[0] if ids and isinstance(ids[0], list) else ids)
        raise ValueError(
            f"TransformersRolloutWorker: a dataset prompt must be a string or a list of messages, got {prompt!r}"
        )

    @torch.no_grad()
    def _generate(self, prompt_ids: list[list[int]], label: str) -> tuple[list[list[int]], list[list[float]]]:
        """Sample one completion per prompt (left-padded batch); return the completions (up to and including their
        eos) and their tokens' log_softmax(logits / temperature) under the same weights."""
        batch, width = len(prompt_ids), max(map(len, prompt_ids))
        input_ids = torch.full((batch, width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((batch, width), dtype=torch.long)
        for b, ids in enumerate(prompt_ids):
            input_ids[b, width - len(ids) :] = torch.tensor(ids)
            attention[b, width - len(ids) :] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        t0 = time.perf_counter()
        sequences = self.model.generate(input_ids=input_ids, attention_mask=attention)
        self.pending["rollout/generate_s"] = time.perf_counter() - t0
        completion = sequences[:, width:]
        steps = completion.shape[1]
        is_eos = torch.isin(completion, self.eos_ids)
        first_eos = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, steps)
        completion_mask = (torch.arange(steps, device=self.device) < first_eos[:, None]).long()

        self.channels.set_stage(f"computing the log-probs of {label}")
        t0 = time.perf_counter()
        mask = torch.cat([attention, completion_mask], dim=1)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = self.model(
            input_ids=sequences, attention_mask=mask, position_ids=position_ids, logits_to_keep=steps + 1
        ).logits[:, :-1]
        log_probs = torch.log_softmax(logits.float() / self.temperature, dim=-1)
        token_log_probs = log_probs.gather(-1, completion.unsqueeze(-1)).squeeze(-1)
        self.pending["rollout/logprob_s"] = time.perf_counter() - t0
        lengths = first_eos.tolist()
        completions = [completion[b, : lengths[b]].tolist() for b in range(batch)]
        return completions, [token_log_probs[b, : lengths[b]].tolist() for b in range(batch)]

    def _rollout_batch(self, version: int) -> None:
        num_groups = self.config["generation_batch_size"] // self.num_generations
        groups = [next(self.rows) for _ in range(num_groups)]
        first, last = groups[0][0], groups[-1][0]
        label = f"groups {first}-{last} with weights v{version}"
        self.channels.set_stage(f"generating {label}")
        prompt_ids = [self._prompt_ids(row["prompt"]) for _, row in groups]
        repeated = [ids for ids in prompt_ids for _ in range(self.num_generations)]
        completions, log_probs = self._generate(repeated, label)
        lengths = [len(c) for c in completions]
        eos = set(self.eos_ids.tolist())
        clipped = sum(1 for c in completions if c[-1] not in eos)

        t_score, enqueued, dropped, unscorable, estimator_metrics = 0.0, 0, 0, 0, {}
        for g, (group_id, row) in enumerate(groups):
            span = range(g * self.num_generations, (g + 1) * self.num_generations)
            self.channels.set_stage(f"scoring group {group_id}")
            t0 = time.perf_counter()
            texts = [self.tokenizer.decode(completions[i], skip_special_tokens=True) for i in span]
            conversational = _is_conversational(row["prompt"])
            score = self.scorer.score(
                prompts=[row["prompt"]] * self.num_generations,
                completions=[[{"role": "assistant", "content": t}] for t in texts] if conversational else texts,
                completion_ids=[completions[i] for i in span],
                group_id=group_id,
                reward_kwargs={
                    k: [v] * self.num_generations
                    for k, v in row.items()
                    if k not in ("prompt", "completion", "completion_ids")
                },
            )
            t_score += time.perf_counter() - t0
            unscorable += int(score.metrics["unscorable"])
            for key, value in score.metrics.items():
                if key.startswith("advantages/"):
                    estimator_metrics.setdefault(f"rollout/{key}", []).append(value)
            self.channels.set_stage(f"enqueueing group {group_id}")
            for k, i in enumerate(span):
                if not score.keep[k]:
                    dropped += 1
                    continue
                prompt_len, completion = len(repeated[i]), completions[i]
                sample = RolloutSample(
                    prompt=row["prompt"],
                    completion=texts[k] if not conversational else [{"role": "assistant", "content": texts[k]}],
                    input_ids=np.asarray(repeated[i] + completion, dtype=np.int64),
                    completion_mask=np.asarray([0] * prompt_len + [1] * len(completion), dtype=np.int64),
                    old_log_probs=np.asarray([0.0] * prompt_len + log_probs[i], dtype=np.float32),
                    advantage=float(score.advantages[k]),
                    model_version=version,
                    group_id=group_id,
                    metrics=score.sample_metrics(k),
                )
                if not self._put(sample):
                    return
                enqueued += 1

        metrics = {
            **self.pending,
            "rollout/score_s": t_score,
            "rollout/completion_tokens_mean": (float(sum(lengths)), float(len(lengths))),
            "rollout/completion_tokens_max": float(max(lengths)),
            "rollout/completion_tokens_min": float(min(lengths)),
            "rollout/clipped_ratio": (float(clipped), float(len(lengths))),
            "rollout/generated_tok_s": (float(sum(lengths)), self.pending["rollout/generate_s"]),
            "rollout/groups_total": float(num_groups),
            "rollout/samples_total": float(enqueued),
            "rollout/dropped_samples_total": float(dropped),
            "rollout/unscorable_samples_total": float(unscorable),
            "rollout/weights_version_max": float(version),
            **{key: sum(values) / len(values) for key, values in estimator_metrics.items()},
        }
        self.pending = {}
        try:
            self.channels.metrics_queue.put_nowait(metrics)
        except queue.Full:
            pass  # never block generation on metrics

    def _put(self, sample: RolloutSample) -> bool:
        """Put `sample` on the rollout buffer, waiting while it is full (ticking the heartbeat, acknowledging a
        pause: no generation happens here); False when stopped meanwhile."""
        blocked_at = None
        while True:
            sample.enqueued_at = time.time()
            try:
                self.channels.rollout_buffer.put(sample, timeout=self.interval)
                break
            except queue.Full:
                if self._stopped():
                    return False
                if self.receiver.pause_requested():
                    self.receiver.acknowledge_pause()
                self.channels.heartbeat.value = time.time()
                blocked_at = blocked_at or time.perf_counter()
        if blocked_at is not None:
            self.pending["rollout/backpressure_s"] = (
                self.pending.get("rollout/backpressure_s", 0.0) + time.perf_counter() - blocked_at
            )
        return True


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
        seed: Seeds the child's torch RNG, the dataset order and the scorer's per-group generators' base.
        num_threads: torch threads in the child.
        dtype: The child model's dtype: one of `DTYPES`.
        device: Where the child runs the model (default CPU, with `CUDA_VISIBLE_DEVICES=""`); `"cuda:N"` keeps the
            GPUs visible.
        heartbeat_interval_s: The longest the child waits (paused, waiting for weights, on a full buffer) between
            heartbeats and checks for stop / pause.
        chat_template_kwargs: Extra keyword arguments of `apply_chat_template` for conversational prompts.
        start_timeout_s: How long `start()` waits for the child to load the model.
        pause_timeout_s: How long `weight_transfer.pause()` waits for the child to finish its batch.
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
        pause_timeout_s: float = 600.0,
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
        if min_p is not None and min_p != 0:  # 0: off, as in vLLM
            check_number(name, "min_p", min_p, gt=0, le=1)
        if dtype not in DTYPES:
            raise ValueError(f"{name}: dtype={dtype!r} is not valid; must be one of {', '.join(map(repr, DTYPES))}")
        if device is not None and not isinstance(device, str):
            raise TypeError(f"{name}: device must be a str like 'cpu' or 'cuda:0', or None")

        self.scorer = scorer
        self.num_generations = num_generations
        self.start_timeout_s = float(start_timeout_s)
        ctx = mp.get_context("spawn")
        self._ctx = ctx
        self.rollout_buffer = ctx.Queue(maxsize=queue_maxsize)
        # Bounded and never waited on by the child: a trainer that stops draining cannot block generation.
        self.metrics_queue = ctx.Queue(maxsize=4096)
        self._channels = _Channels(
            rollout_buffer=self.rollout_buffer,
            metrics_queue=self.metrics_queue,
            stop_event=ctx.Event(),
            ready_event=ctx.Event(),
            failed_event=ctx.Event(),
            error_queue=ctx.Queue(maxsize=1),
            heartbeat=ctx.Value("d", 0.0, lock=False),
            stage=ctx.Array("c", _STAGE_BYTES),
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
        )
        self.weight_transfer = LocalWeightTransfer(
            model_path=str(model_path), dtype=DTYPES[dtype], mp_context=ctx, pause_timeout_s=pause_timeout_s, owner=name
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

    def start(self) -> None:
        """Spawn the child and wait until it has loaded the model (it then waits for the first weights).

        Raises:
            TypeError: Something the child needs cannot be pickled (named).
            RuntimeError: The child failed or exited while loading, or did not load within `start_timeout_s`; the
                worker was stopped already.
        """
        if self._stopped:
            raise RuntimeError(f"{self._name()}: start() after stop(); a stopped worker cannot restart")
        if self._process is not None:
            warnings.warn(f"{self._name()}: start() called twice; ignored", stacklevel=2)
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
            target=_child_main,
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
                    f"{self._name()}: the rollout child did not load the model within start_timeout_s="
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
        name = self._name()
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

    def _name(self) -> str:
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
        return f"{self._name()} at {self._channels.get_stage()!r}, heartbeat {age:.1f}s ago"

    def _failure_message(self) -> str:
        if self._failure is None:
            try:
                stage, kind, message, tb = self._channels.error_queue.get(timeout=5.0)
                self._failure = (
                    f"{self._name()}: the rollout child failed while {stage}: {kind}: {message}\nChild traceback:\n{tb}"
                )
            except queue.Empty:
                return f"{self._name()}: the rollout child failed (no report received); last stage: " + repr(
                    self._channels.get_stage()
                )
        return self._failure
