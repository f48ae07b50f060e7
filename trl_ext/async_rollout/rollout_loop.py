"""The child side of `TransformersRolloutWorker`: the generation loop in its spawned process.

`child_main` scrubs the process's environment and runs `RolloutLoop`, which applies the newest weights between
batches, generates whole groups with transformers, computes the sampling log-probs with one forward pass of the same
weights, scores each group (`GroupScorer`) and puts the samples on the shared queue, ticking the heartbeat and naming
its stage as it goes (see `worker.py` for the whole protocol). What the parent and the child share is `Channels`.

With ReMax (`GroupScorer.needs_greedy_baseline`) each batch also takes one greedy `generate` call (`do_sample=False`;
the same weights, `max_completion_length`, eos and `repetition_penalty`) for its prompts, one completion each; the
scorer scores those (`GroupScorer.baseline_rewards`) and stamps each group's samples with its prompt's (`score`'s
`baseline`).

The groups are the dataset's rows in per-epoch orders (`dataset_order`), from `start_group_id` on (0, or a resumed
run's position); each batch's sampling is seeded from the seed and its first group id (`batch_seed`), so a resumed
child draws what an uninterrupted one draws for the same weights and groups.
"""

from __future__ import annotations

import math
import os
import queue
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import GenerationConfig
from trl.experimental.async_grpo.async_rollout_worker import _CHILD_ENV_TO_STRIP, RolloutSample

from .episodes import EpisodeRunner
from .scoring import GroupScorer
from .weights import WeightReceiver

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""The rollout model's dtypes, by the names `dtype=` takes."""

STAGE_BYTES = 256


@dataclass
class Channels:
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
        self.stage.value = text.encode("utf-8", "replace")[: STAGE_BYTES - 1]
        self.heartbeat.value = time.time()

    def get_stage(self) -> str:
        return self.stage.value.decode("utf-8", "replace")


def dataset_order(seed: int, epoch: int, size: int) -> np.ndarray:
    """The dataset's row order in `epoch` (a permutation seeded from `seed` and the epoch)."""
    return np.random.default_rng([seed, epoch]).permutation(size)


def batch_seed(seed: int, first_group_id: int) -> int:
    """The torch seed of the `generate` call whose first group is `first_group_id`: a batch's draws depend on the
    run's seed and its groups, not on how many batches the process generated before it."""
    state = np.random.SeedSequence([seed & 0xFFFFFFFF, int(first_group_id), _SAMPLING_STREAM]).generate_state(2)
    return int(state[0]) << 31 ^ int(state[1])


_SAMPLING_STREAM = 0x5A3D  # keeps the sampling seeds apart from the other streams seeded from (seed, an id)


def prompt_token_ids(tokenizer: Any, prompt: Any, chat_template_kwargs: dict[str, Any] | None = None) -> list[int]:
    """The token ids the worker generates after: a text prompt tokenized as is, a conversation (a list of messages)
    through the chat template with the generation prompt."""
    if isinstance(prompt, str):
        return list(tokenizer(text=prompt)["input_ids"])
    if _is_conversational(prompt):
        ids = tokenizer.apply_chat_template(
            prompt, add_generation_prompt=True, tokenize=True, return_dict=True, **(chat_template_kwargs or {})
        )["input_ids"]
        return list(ids[0] if ids and isinstance(ids[0], list) else ids)
    raise ValueError(
        f"TransformersRolloutWorker: a dataset prompt must be a string or a list of messages, got {prompt!r}"
    )


def _is_conversational(prompt: Any) -> bool:
    return isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m for m in prompt)


def _reward_columns(rows: list[dict[str, Any]], repeat: int) -> dict[str, list[Any]]:
    """The dataset's other columns of `rows`, each row's value `repeat` times, as the reward functions take them."""
    names = [k for k in rows[0] if k not in ("prompt", "completion", "completion_ids")]
    return {k: [row[k] for row in rows for _ in range(repeat)] for k in names}


def child_main(config: dict[str, Any], channels: Channels, receiver: WeightReceiver) -> None:
    """The child process: scrub the environment (TRL's `_CHILD_ENV_TO_STRIP`; no CUDA unless `device` asks for it),
    run the loop, report a failure (stage, exception, traceback) through `channels`."""
    for key in _CHILD_ENV_TO_STRIP:
        os.environ.pop(key, None)
    device = config["device"]
    if device is None or not str(device).startswith("cuda"):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        os.environ["HIP_VISIBLE_DEVICES"] = ""
    try:
        RolloutLoop(config, channels, receiver).run()
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


class RolloutLoop:
    """The child's generate / log-prob / score / enqueue loop (see the module docstring)."""

    def __init__(self, config: dict[str, Any], channels: Channels, receiver: WeightReceiver):
        from transformers import AutoModelForCausalLM
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
        self.model.generation_config = self.sampling_config = GenerationConfig(
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
        self.greedy_config = GenerationConfig(  # ReMax's baseline: the same one without sampling
            do_sample=False,
            repetition_penalty=config["repetition_penalty"],
            max_new_tokens=config["max_completion_length"],
            eos_token_id=eos,
            pad_token_id=self.pad_id,
        )
        self.episodes = None  # multi-turn episodes with tools (`episodes.py`)
        if config.get("tools") or config.get("environment_factory") is not None:
            self.episodes = EpisodeRunner(
                owner="TransformersRolloutWorker",
                tokenizer=self.tokenizer,
                tools=config.get("tools"),
                environment_factory=config.get("environment_factory"),
                max_tool_calling_iterations=config.get("max_tool_calling_iterations"),
                max_completion_length=config["max_completion_length"],
                max_model_len=getattr(model.config, "max_position_embeddings", None) or 2**31,
                chat_template_kwargs=config["chat_template_kwargs"],
            )
            self.tokenizer = self.episodes.tokenizer
        self.rows = self._iter_rows()
        self.pending: dict[str, Any] = {}
        channels.ready_event.set()

    def _iter_rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """`(group_id, row)` from `start_group_id` on: group `g` is row `g mod len(dataset)` of epoch
        `g // len(dataset)`'s order."""
        dataset, seed = self.config["dataset"], self.config["seed"]
        group_id = self.config.get("start_group_id", 0)
        epoch, offset = divmod(group_id, len(dataset))
        while True:
            for index in dataset_order(seed, epoch, len(dataset))[offset:]:
                yield group_id, dataset[int(index)]
                group_id += 1
            epoch, offset = epoch + 1, 0

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
        return prompt_token_ids(self.tokenizer, prompt, self.config["chat_template_kwargs"])

    @torch.no_grad()
    def _generate_batch(
        self, prompt_ids: list[list[int]], config: Any
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One completion per prompt (left-padded batch) with generation config `config`: `(sequences, attention of
        the prompts, completion tokens, completion lengths up to and including their first eos)`."""
        batch, width = len(prompt_ids), max(map(len, prompt_ids))
        input_ids = torch.full((batch, width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((batch, width), dtype=torch.long)
        for b, ids in enumerate(prompt_ids):
            input_ids[b, width - len(ids) :] = torch.tensor(ids)
            attention[b, width - len(ids) :] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        self.model.generation_config = config  # the model's config is the base that generate() completes
        try:
            sequences = self.model.generate(input_ids=input_ids, attention_mask=attention)
        finally:
            self.model.generation_config = self.sampling_config
        completion = sequences[:, width:]
        is_eos = torch.isin(completion, self.eos_ids)
        first_eos = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, completion.shape[1])
        return sequences, attention, completion, first_eos

    def _greedy(self, prompt_ids: list[list[int]]) -> list[list[int]]:
        """ReMax's greedy completion of each prompt, with the weights the batch was sampled with."""
        t0 = time.perf_counter()
        _, _, completion, lengths = self._generate_batch(prompt_ids, self.greedy_config)
        self.pending["rollout/greedy_generate_s"] = time.perf_counter() - t0
        return [completion[b, :length].tolist() for b, length in enumerate(lengths.tolist())]

    @torch.no_grad()
    def _sample(self, prompt_ids: list[list[int]], label: str) -> tuple[list[list[int]], list[list[float]]]:
        """Sample one completion per prompt (left-padded batch); return the completions (up to and including their
        eos) and their tokens' log_softmax(logits / temperature) under the same weights."""
        t0 = time.perf_counter()
        _, _, completion, first_eos = self._generate_batch(prompt_ids, self.sampling_config)
        self.pending["rollout/generate_s"] = time.perf_counter() - t0
        completions = [completion[b, :length].tolist() for b, length in enumerate(first_eos.tolist())]
        self.channels.set_stage(f"computing the log-probs of {label}")
        return completions, self._log_probs(prompt_ids, completions)

    @torch.no_grad()
    def _generate_turns(self, inputs: list[list[int]], budgets: list[int]) -> list[list[int]]:
        """One sampled turn after each input (an episode so far), each up to its first eos and its budget."""
        config = GenerationConfig(**{**self.sampling_config.to_dict(), "max_new_tokens": max(budgets)})
        _, _, completion, first_eos = self._generate_batch(inputs, config)
        lengths = torch.minimum(first_eos.cpu(), torch.tensor(budgets)).tolist()
        return [completion[b, :length].tolist() for b, length in enumerate(lengths)]

    @torch.no_grad()
    def _log_probs(self, prompt_ids: list[list[int]], completions: list[list[int]]) -> list[list[float]]:
        """Each completion token's log_softmax(logits / temperature) after its prompt and the completion before it,
        one forward pass over the batch (prompts left-padded, completions right-padded) with the current weights."""
        t0 = time.perf_counter()
        batch, width, steps = len(prompt_ids), max(map(len, prompt_ids)), max(map(len, completions))
        sequences = torch.full((batch, width + steps), self.pad_id, dtype=torch.long)
        mask = torch.zeros((batch, width + steps), dtype=torch.long)
        for b, (prompt, completion) in enumerate(zip(prompt_ids, completions, strict=True)):
            sequences[b, width - len(prompt) : width + len(completion)] = torch.tensor(prompt + completion)
            mask[b, width - len(prompt) : width + len(completion)] = 1
        sequences, mask = sequences.to(self.device), mask.to(self.device)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = self.model(
            input_ids=sequences, attention_mask=mask, position_ids=position_ids, logits_to_keep=steps + 1
        ).logits[:, :-1]
        log_probs = torch.log_softmax(logits.float() / self.temperature, dim=-1)
        token_log_probs = log_probs.gather(-1, sequences[:, width:].unsqueeze(-1)).squeeze(-1)
        self.pending["rollout/logprob_s"] = time.perf_counter() - t0
        return [token_log_probs[b, : len(c)].tolist() for b, c in enumerate(completions)]

    @torch.no_grad()
    def _run_episodes(self, rows: list[dict[str, Any]], label: str) -> tuple[list[Any], list[list[float]], list[dict]]:
        """The batch's multi-turn episodes (`episodes.py`), `num_generations` per row, with their log-probs and
        the metrics each sample carries for a per-turn estimator."""
        runner = self.episodes
        episodes = runner.begin(rows, self.num_generations)
        t0 = time.perf_counter()
        recorder = runner.run(episodes, self._generate_turns)
        self.pending["rollout/generate_s"] = time.perf_counter() - t0
        self.channels.set_stage(f"computing the log-probs of {label}")
        log_probs = self._log_probs([e.prompt_ids for e in episodes], [e.completion_ids for e in episodes])
        log_probs = [
            [lp * m for lp, m in zip(lps, e.model_mask, strict=True)]
            for lps, e in zip(log_probs, episodes, strict=True)
        ]
        stamps = runner.finish(episodes, recorder, self.scorer.per_turn)
        n = float(len(episodes))
        self.pending.update({
            "rollout/tool_calls_total": float(sum(e.tool_calls for e in episodes)),
            "rollout/tool_failures_total": float(sum(e.tool_failures for e in episodes)),
            "rollout/turns_mean": (float(sum(e.turns for e in episodes)), n),
            "rollout/tool_loop_exhausted_ratio": (float(sum(e.exhausted for e in episodes)), n),
        })  # fmt: skip
        return episodes, log_probs, stamps

    def _rollout_batch(self, version: int) -> None:
        num_groups = self.config["generation_batch_size"] // self.num_generations
        groups = [next(self.rows) for _ in range(num_groups)]
        first, last = groups[0][0], groups[-1][0]
        label = f"groups {first}-{last} with weights v{version}"
        self.channels.set_stage(f"generating {label}")
        torch.manual_seed(batch_seed(self.config["seed"], first))  # the child is its own process: nothing else draws
        episodes, stamps = None, None
        if self.episodes is None:
            prompt_ids = [self._prompt_ids(row["prompt"]) for _, row in groups]
            repeated = [ids for ids in prompt_ids for _ in range(self.num_generations)]
            completions, log_probs = self._sample(repeated, label)
        else:  # multi-turn episodes with tools: each has its own prompt (its environment's observation)
            episodes, log_probs, stamps = self._run_episodes([row for _, row in groups], label)
            repeated = [e.prompt_ids for e in episodes]
            completions = [e.completion_ids for e in episodes]
        baselines = (
            self._baselines([row for _, row in groups], prompt_ids, label)
            if self.scorer.needs_greedy_baseline
            else None
        )
        lengths = [len(c) for c in completions]
        eos = set(self.eos_ids.tolist())
        clipped = sum(1 for c in completions if c[-1] not in eos)

        t_score, enqueued, dropped, unscorable, uniform, estimator_metrics = 0.0, 0, 0, 0, 0, {}
        scored_rewards: list[float] = []  # every scorable sample's, trained or not
        for g, (group_id, row) in enumerate(groups):
            span = range(g * self.num_generations, (g + 1) * self.num_generations)
            self.channels.set_stage(f"scoring group {group_id}")
            t0 = time.perf_counter()
            texts = [self.tokenizer.decode(completions[i], skip_special_tokens=True) for i in span]
            conversational = _is_conversational(row["prompt"])
            reward_kwargs = _reward_columns([row], self.num_generations)
            if episodes is None:
                prompts = [row["prompt"]] * self.num_generations
                messages = [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts
            else:
                prompts, messages = [episodes[i].prompt for i in span], [episodes[i].completion for i in span]
                if self.episodes.has_environments:
                    reward_kwargs["environments"] = [episodes[i].environment for i in span]
            score = self.scorer.score(
                prompts=prompts,
                completions=messages,
                completion_ids=[completions[i] for i in span],
                group_id=group_id,
                reward_kwargs=reward_kwargs,
                baseline=None if baselines is None else float(baselines[g]),
            )
            t_score += time.perf_counter() - t0
            unscorable += int(score.metrics["unscorable"])
            uniform += int(score.metrics["uniform_group"])
            scored_rewards += [float(r) for r in score.rewards if not math.isnan(r)]
            for key, value in score.metrics.items():
                if key.startswith("advantage/") or key == "overlong_penalty":
                    estimator_metrics.setdefault(f"rollout/{key}", []).append(value)
            self.channels.set_stage(f"enqueueing group {group_id}")
            for k, i in enumerate(span):
                if not score.keep[k]:
                    dropped += 1
                    continue
                prompt_len, completion = len(repeated[i]), completions[i]
                trained = [1] * len(completion) if episodes is None else episodes[i].model_mask
                sample = RolloutSample(
                    prompt=prompts[k],
                    completion=messages[k],
                    input_ids=np.asarray(repeated[i] + completion, dtype=np.int64),
                    completion_mask=np.asarray([0] * prompt_len + trained, dtype=np.int64),
                    old_log_probs=np.asarray([0.0] * prompt_len + log_probs[i], dtype=np.float32),
                    advantage=float(score.advantages[k]),
                    model_version=version,
                    group_id=group_id,
                    metrics={**score.sample_metrics(k), **(stamps[i] if stamps else {})},
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
            "rollout/uniform_groups_total": float(uniform),  # dropped by dynamic sampling
            "rollout/weights_version_max": float(version),
            **{key: sum(values) / len(values) for key, values in estimator_metrics.items()},
        }
        if scored_rewards:  # the generating policy's reward over every scored sample (TRL's `reward`: the trained ones)
            metrics["rollout/reward_mean"] = (float(sum(scored_rewards)), float(len(scored_rewards)))
        self.pending = {}
        try:
            self.channels.metrics_queue.put_nowait(metrics)
        except queue.Full:
            pass  # never block generation on metrics

    def _baselines(self, rows: list[dict[str, Any]], prompt_ids: list[list[int]], label: str) -> np.ndarray:
        """ReMax's baseline of each group `[G]`: the reward of its prompt's greedy completion (module docstring)."""
        self.channels.set_stage(f"generating the greedy completions of {label}")
        greedy = self._greedy(prompt_ids)
        self.channels.set_stage(f"scoring the greedy completions of {label}")
        texts = [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in greedy]
        baselines, unscorable = self.scorer.baseline_rewards(
            prompts=[row["prompt"] for row in rows],
            completions=[
                [{"role": "assistant", "content": text}] if _is_conversational(row["prompt"]) else text
                for row, text in zip(rows, texts, strict=True)
            ],
            completion_ids=greedy,
            reward_kwargs=_reward_columns(rows, 1),
        )
        self.pending["rollout/greedy_baseline_mean"] = (float(baselines.sum()), float(baselines.size))
        self.pending["rollout/greedy_unscorable_total"] = float(unscorable.sum())
        return baselines

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
