"""trl_ext's estimators inside TRL's own rollout worker (the vLLM path): the rows TRL scored get the estimator's
advantages, per conversation (a forked conversation's rows share one), and dropped conversations leave the queue."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker, RolloutSample, _AsyncRolloutLoop

from trl_ext.async_rollout import GroupScorer
from trl_ext.async_rollout.trl_loop import (
    TRLExtRolloutLoop,
    refuse_worker_made_inputs,
    rescore_samples,
    use_trl_ext_scoring,
)
from trl_ext.toy import toy_reward


def _rows(rewards: list[float], rows_per_conversation: list[int]) -> list[RolloutSample]:
    samples = []
    for reward, rows in zip(rewards, rows_per_conversation, strict=True):
        for _ in range(rows):
            samples.append(
                RolloutSample(
                    prompt="p",
                    completion="c",
                    input_ids=np.array([1, 2, 3]),
                    completion_mask=np.array([0, 1, 1]),
                    old_log_probs=np.zeros(3, dtype=np.float32),
                    advantage=123.0,  # TRL's GRPO advantage, to be replaced
                    model_version=1,
                    group_id=7,
                    metrics={"reward": reward},
                )
            )
    return samples


def _rloo(rewards: np.ndarray) -> np.ndarray:
    n = len(rewards)
    return np.array([r - (rewards.sum() - r) / (n - 1) for r in rewards])


def test_each_conversation_gets_the_estimators_advantage_on_every_row():
    rewards, rows = [1.0, 0.0, 0.5, 0.0], [1, 3, 1, 2]
    scorer = GroupScorer(toy_reward, advantage_fn="rloo")
    out = rescore_samples(_rows(rewards, rows), rows, [[5]] * 4, 7, scorer)
    expected = np.repeat(_rloo(np.array(rewards)), rows)
    np.testing.assert_allclose([s.advantage for s in out], expected, rtol=1e-6, atol=1e-7)


def test_an_unscorable_conversation_gets_zero_and_the_others_are_scored_without_it():
    rewards, rows = [1.0, float("nan"), 0.0, 0.5], [2, 1, 1, 1]
    scorer = GroupScorer(toy_reward, advantage_fn="rloo")
    out = rescore_samples(_rows(rewards, rows), rows, [[5]] * 4, 7, scorer)
    scored = _rloo(np.array([1.0, 0.0, 0.5]))
    np.testing.assert_allclose([s.advantage for s in out], [scored[0], scored[0], 0.0, scored[1], scored[2]], atol=1e-7)


def test_a_dropped_group_leaves_the_queue():
    rows = [1, 2, 1]
    scorer = GroupScorer(toy_reward, advantage_fn="grpo", advantage_fn_args={"std_threshold": 0.0})
    assert rescore_samples(_rows([1.0, 1.0, 1.0], rows), rows, [[5]] * 3, 7, scorer) == []


def test_rows_that_do_not_match_the_conversations_are_refused():
    scorer = GroupScorer(toy_reward)
    with pytest.raises(ValueError, match="3 rows for conversations of \\[1, 1\\] rows"):
        rescore_samples(_rows([1.0, 0.0, 1.0], [1, 1, 1]), [1, 1], [[5]] * 2, 7, scorer)


def test_trls_loop_scores_with_the_estimator(monkeypatch):
    rows = [2, 1, 1]
    samples = _rows([0.0, 1.0, 1.0], rows)

    async def trl_score(self, group):
        return samples

    monkeypatch.setattr(_AsyncRolloutLoop, "_score_group", trl_score)
    loop = object.__new__(TRLExtRolloutLoop)
    loop.group_scorer = GroupScorer(toy_reward, advantage_fn="rloo")
    group = SimpleNamespace(completions_sequences=[[0, 1], [0], [0]], completions_ids=[[5]] * 3, group_id=7)
    out = asyncio.run(loop._score_group(group))
    np.testing.assert_allclose([s.advantage for s in out], np.repeat(_rloo(np.array([0.0, 1.0, 1.0])), rows), atol=1e-7)


def test_trls_worker_is_pointed_at_the_loop_and_others_are_left_alone():
    worker = object.__new__(AsyncRolloutWorker)  # TRL's worker needs vLLM to be built; only its hook is used here
    worker._loop_kwargs = {}
    scorer = GroupScorer(toy_reward)
    use_trl_ext_scoring(worker, scorer)
    assert worker._loop_cls is TRLExtRolloutLoop and worker._loop_kwargs["group_scorer"] is scorer
    other = SimpleNamespace()
    use_trl_ext_scoring(other, scorer)
    assert vars(other) == {}


@pytest.mark.parametrize("estimator", ["remax", "gigpo", "step_wise_grpo"])
def test_worker_made_inputs_are_refused_where_trls_worker_would_score_them(estimator):
    """TRL's vLLM worker makes no greedy completion and records no turns: ReMax and the per-turn estimators are
    refused with it (the default worker of rollout_backend='vllm', or one passed in), accepted with trl_ext's worker
    or a custom one."""
    scorer = GroupScorer(toy_reward, advantage_fn=estimator)
    trl_worker = object.__new__(AsyncRolloutWorker)
    for worker, backend in ((None, "vllm"), (trl_worker, "transformers")):
        with pytest.raises(ValueError, match=rf"Owner: advantage_fn='{estimator}' .* TRL's vLLM rollout worker does"):
            refuse_worker_made_inputs("Owner", scorer, worker, backend)
    refuse_worker_made_inputs("Owner", scorer, None, "transformers")
    refuse_worker_made_inputs("Owner", scorer, SimpleNamespace(), "vllm")  # a custom worker: its own business
    refuse_worker_made_inputs("Owner", GroupScorer(toy_reward, advantage_fn="reinforceplusplus"), None, "vllm")
