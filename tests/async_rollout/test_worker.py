"""`TransformersRolloutWorker` + `LocalWeightTransfer` end to end on the toy model (a spawned CPU child each): the
samples' fields, their log-probs against an independent recompute under the weights of the version they carry, their
advantages against GRPO's closed form, pause / resume, and the failures `check_health` must report (a reward
function that raises: tests/trainers/test_async_trainer.py, through the trainer)."""

from __future__ import annotations

import os
import queue
import signal
import time

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_ext.async_rollout import GroupScorer, TransformersRolloutWorker
from trl_ext.toy import repeat_letter_reward, tiny_model_path, toy_dataset

NUM_GENERATIONS = 4
DEADLINE_S = 60.0


def slow_reward(completions, **kwargs):
    time.sleep(60)
    return [0.0] * len(completions)


@pytest.fixture(scope="module")
def toy():
    path = tiny_model_path()
    return path, AutoTokenizer.from_pretrained(path)


def _worker(toy, reward=repeat_letter_reward, dataset=None, **kwargs) -> TransformersRolloutWorker:
    path, tokenizer = toy
    options = dict(num_generations=NUM_GENERATIONS, max_completion_length=8, generation_batch_size=8, seed=0)
    options.update(kwargs)
    return TransformersRolloutWorker(
        model_path=path,
        dataset=toy_dataset(16) if dataset is None else dataset,
        processing_class=tokenizer,
        scorer=GroupScorer(reward),
        **options,
    )


def _sync(worker, model, version):
    """What AsyncGRPOTrainer does on a weight sync."""
    transfer = worker.weight_transfer
    transfer.pause()
    transfer.send_weights((name, p.detach()) for name, p in model.named_parameters())
    transfer.resume()
    worker.update_model_version(version)


def _get(worker, timeout=DEADLINE_S):
    try:
        return worker.rollout_buffer.get(timeout=timeout)
    except queue.Empty:
        worker.check_health(float("inf"))  # a child failure explains the empty queue
        raise


def _recomputed_log_probs(model, input_ids: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """log_softmax(logits / T) of each token given its prefix, on the unpadded sequence alone (0 for token 0)."""
    ids = torch.as_tensor(input_ids)[None]
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float() / temperature
    lp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]
    return np.concatenate([[0.0], lp.numpy()])


def _check_sample(sample, tokenizer, model, version, temperature=1.0):
    n = len(sample.input_ids)
    assert sample.input_ids.dtype == np.int64 and sample.completion_mask.dtype == np.int64
    assert sample.old_log_probs.dtype == np.float32
    assert sample.completion_mask.shape == sample.old_log_probs.shape == (n,)
    prompt_ids = tokenizer(text=sample.prompt)["input_ids"]
    p = len(prompt_ids)
    np.testing.assert_array_equal(sample.input_ids[:p], prompt_ids)
    np.testing.assert_array_equal(sample.completion_mask, [0] * p + [1] * (n - p))
    assert 1 <= n - p <= 8
    completion_ids = sample.input_ids[p:].tolist()
    eos = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")}
    assert all(t not in eos for t in completion_ids[:-1])  # the completion stops at its first eos
    assert sample.completion == tokenizer.decode(completion_ids, skip_special_tokens=True)
    assert (sample.old_log_probs[:p] == 0).all()
    np.testing.assert_allclose(
        sample.old_log_probs[p:], _recomputed_log_probs(model, sample.input_ids, temperature)[p:], rtol=0, atol=1e-5
    )
    assert sample.model_version == version
    target = sample.prompt.split("letter ")[1][0]
    reward = repeat_letter_reward([sample.completion], target=[target])[0]
    assert sample.metrics == {"reward": reward, "reward_std": sample.metrics["reward_std"], **_func(reward)}
    assert sample.enqueued_at is not None and abs(time.time() - sample.enqueued_at) < DEADLINE_S


def _func(reward):
    return {"rewards/repeat_letter_reward": reward}


def _check_group(samples):
    """The group's advantages are GRPO's (R - mean) / (std + 1e-6) (unbiased std) of its rewards."""
    assert len(samples) == NUM_GENERATIONS and len({s.group_id for s in samples}) == 1
    rewards = np.array([s.metrics["reward"] for s in samples])
    expected = (rewards - rewards.mean()) / (rewards.std(ddof=1) + 1e-6)
    np.testing.assert_allclose([s.advantage for s in samples], expected, rtol=1e-6, atol=1e-6)
    assert samples[0].metrics["reward_std"] == pytest.approx(rewards.std())


def test_worker_end_to_end_versions_log_probs_advantages_pause(toy):
    path, tokenizer = toy
    # Every prompt of another length, so each generation batch is left-padded.
    dataset = toy_dataset(16).map(lambda row, i: {"prompt": "Hello " * i + row["prompt"]}, with_indices=True)
    worker = _worker(toy, dataset=dataset, queue_maxsize=12, temperature=0.7, pause_during_sync=True)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    with pytest.raises(RuntimeError, match=r"TransformersRolloutWorker\(pid=None\).*not started"):
        worker.check_health(60)
    try:
        worker.weight_transfer.init_weight_transfer()
        _sync(worker, model, 1)  # before start, as the trainer's train-begin callback does
        assert worker.weight_transfer.version == 1
        worker.start()
        worker.check_health(60)

        groups: dict[int, list] = {}
        while sum(len(g) == NUM_GENERATIONS for g in groups.values()) < 2:
            sample = _get(worker)
            _check_sample(sample, tokenizer, model, version=1, temperature=0.7)
            groups.setdefault(sample.group_id, []).append(sample)
        assert list(groups)[:2] == [0, 1]  # one group id per prompt, in order
        for group in groups.values():
            if len(group) == NUM_GENERATIONS:
                _check_group(group)
        assert len({len(s.input_ids) - int(s.completion_mask.sum()) for g in groups.values() for s in g}) > 1

        # pause(): the child finishes its batch and waits; nothing is generated until resume().
        worker.weight_transfer.pause()
        drained = 0
        while True:
            try:
                assert worker.rollout_buffer.get(timeout=1.0).model_version == 1
                drained += 1
            except queue.Empty:
                break
        assert drained <= 12 + 8  # the full queue + the rest of one batch
        assert worker.stage == "paused"

        # New weights (sharper lm_head): version 2, and log-probs of the new weights.
        scaled = AutoModelForCausalLM.from_pretrained(path).eval()
        with torch.no_grad():
            scaled.lm_head.weight.mul_(1.5)
        worker.weight_transfer.send_weights((n, p.detach()) for n, p in scaled.named_parameters())
        worker.weight_transfer.resume()
        worker.update_model_version(2)
        assert worker.weight_transfer.version == 2 and worker.model_version == 2
        groups = {}
        while sum(len(g) == NUM_GENERATIONS for g in groups.values()) < 1:
            sample = _get(worker)
            _check_sample(sample, tokenizer, scaled, version=2, temperature=0.7)
            old = _recomputed_log_probs(model, sample.input_ids, 0.7)
            assert np.abs(sample.old_log_probs - old)[sample.completion_mask == 1].max() > 1e-3  # not the old ones
            groups.setdefault(sample.group_id, []).append(sample)
        _check_group(next(g for g in groups.values() if len(g) == NUM_GENERATIONS))
        worker.check_health(60)

        metrics = []
        while True:
            try:
                metrics.append(worker.metrics_queue.get(timeout=0.5))
            except queue.Empty:
                break
        assert metrics and max(m["rollout/weights_version_max"] for m in metrics) == 2
        for m in metrics:
            assert m["rollout/samples_total"] + m["rollout/dropped_samples_total"] == 2 * NUM_GENERATIONS
            assert m["rollout/completion_tokens_mean"][1] == 8 and 1 <= m["rollout/completion_tokens_max"] <= 8
            assert m["rollout/generate_s"] > 0
    finally:
        worker.stop()
    assert worker.pid is not None and not _alive(worker.pid)
    worker.stop()  # idempotent
    with pytest.raises(RuntimeError, match="was stopped"):
        worker.check_health(60)


def test_conversational_prompts_and_a_killed_child(toy):
    path, tokenizer = toy
    worker = _worker(toy, dataset=toy_dataset(8, conversational=True))
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    try:
        _sync(worker, model, 1)
        worker.start()
        sample = _get(worker)
        # A child killed without a word (OOM killer, kill -9) is reported too.
        os.kill(worker.pid, signal.SIGKILL)
        error = _wait_for_error(worker, stale_after_s=300)
        assert f"TransformersRolloutWorker(pid={worker.pid})" in str(error)
        assert "exited without reporting an error" in str(error) and "last stage" in str(error)
    finally:
        worker.stop()
    prompt_ids = tokenizer.apply_chat_template(sample.prompt, add_generation_prompt=True, tokenize=True)
    prompt_ids = prompt_ids if isinstance(prompt_ids, list) else prompt_ids["input_ids"]
    p = len(prompt_ids)
    np.testing.assert_array_equal(sample.input_ids[:p], prompt_ids)
    completion_text = tokenizer.decode(sample.input_ids[p:].tolist(), skip_special_tokens=True)
    assert sample.completion == [{"role": "assistant", "content": completion_text}]
    target = sample.prompt[0]["content"].split("letter ")[1][0]
    assert sample.metrics["reward"] == repeat_letter_reward([completion_text], target=[target])[0]
    np.testing.assert_allclose(sample.old_log_probs[p:], _recomputed_log_probs(model, sample.input_ids)[p:], atol=1e-5)


def test_a_hung_child_goes_stale_and_stop_terminates_it(toy):
    worker = _worker(toy, reward=slow_reward, heartbeat_interval_s=0.05)
    model = AutoModelForCausalLM.from_pretrained(toy[0])
    try:
        _sync(worker, model, 1)
        worker.start()
        worker.check_health(60)
        # The child blocks inside the reward function (60 s): its heartbeat stops.
        error = _wait_for_error(worker, stale_after_s=1.0)
        assert f"TransformersRolloutWorker(pid={worker.pid})" in str(error)
        assert "heartbeat is stale" in str(error) and "scoring group 0" in str(error)
    finally:
        t0 = time.monotonic()
        worker.stop(timeout_s=1.0)  # the child ignores the stop event while it sleeps: terminated
        assert time.monotonic() - t0 < 10
    assert not _alive(worker.pid)


def test_send_weights_names_bad_parameters_and_continues_the_trainer_numbering(toy):
    worker = _worker(toy)  # never started: the transfer checks against the model's manifest
    transfer = worker.weight_transfer
    with pytest.raises(ValueError, match=r"parameter 'model\.no_such\.weight', which the rollout model"):
        transfer.send_weights(iter([("model.no_such.weight", torch.zeros(2))]))
    with pytest.raises(ValueError, match=r"parameter 'lm_head.weight' with shape \(3, 64\).*\(\d+, 64\)"):
        transfer.send_weights(iter([("lm_head.weight", torch.zeros(3, 64))]))
    assert transfer.version == 0  # failed sends publish nothing
    worker.update_model_version(7)  # e.g. a trainer resumed from a checkpoint at version 7
    model = AutoModelForCausalLM.from_pretrained(toy[0])
    transfer.pause()  # no child running: returns at once
    transfer.send_weights((n, p.detach().to(torch.bfloat16)) for n, p in model.named_parameters())
    transfer.resume()
    assert transfer.version == 8
    worker.stop()  # never started: a no-op


def test_constructor_refusals(toy):
    with pytest.raises(ValueError, match="generation_batch_size=6 is not valid; must be a multiple of num_gen"):
        _worker(toy, generation_batch_size=6)
    with pytest.raises(ValueError, match="dtype='fp8' is not valid; must be one of 'float32', 'bfloat16'"):
        _worker(toy, dtype="fp8")
    with pytest.raises(ValueError, match=r"temperature=0\.0 is not valid"):
        _worker(toy, temperature=0.0)
    with pytest.raises(ValueError, match="top_k=-2 is not valid"):
        _worker(toy, top_k=-2)
    with pytest.raises(ValueError, match="no reward functions"):
        _worker(toy, reward=[])
    with pytest.raises(ValueError, match="'prompt' column"):
        _worker(toy, dataset=toy_dataset(4).rename_column("prompt", "question"))


def _wait_for_error(worker, stale_after_s: float) -> RuntimeError:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            worker.check_health(stale_after_s)
        except RuntimeError as error:
            return error
        time.sleep(0.1)
    raise AssertionError(f"check_health did not raise within {DEADLINE_S}s (stage: {worker.stage})")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is not alive
        return f.read().split()[2] != "Z"
