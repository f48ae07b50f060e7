"""ReMax in the transformers worker's child loop (`RolloutLoop`, run in this process on the toy model): each group's
samples carry the reward of their prompt's greedy completion as their baseline, checked against a greedy completion
made independently (a plain `model.generate(do_sample=False)` on the unpadded prompt) and scored here."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from trainer_helpers import child_loop
from transformers import AutoModelForCausalLM

from trl_ext.advantages.overlong import overlong_penalty
from trl_ext.async_rollout import GroupScorer, TransformersRolloutWorker
from trl_ext.async_rollout.rollout_loop import RolloutLoop
from trl_ext.async_rollout.scoring import WINDOW_BASELINE_KEY, WINDOW_REWARD_KEY
from trl_ext.toy import build_tokenizer, toy_dataset, toy_reward

MAX_LENGTH, BUFFER = 8, 4


def length_reward(completions, completion_ids, **kwargs):
    """A reward that tells completions apart: a tenth of each completion's token count."""
    return [len(ids) / 10 for ids in completion_ids]


def _loop(model: str, dataset) -> RolloutLoop:
    """The worker's child loop in this process (no spawn, plain queues), scoring with ReMax."""
    scorer = GroupScorer(
        [toy_reward, length_reward], reward_weights=[1.0, 2.0], advantage_fn="remax",
        overlong_buffer=BUFFER, overlong_penalty_factor=1.0, max_completion_length=MAX_LENGTH,
    )  # fmt: skip
    worker = TransformersRolloutWorker(
        model_path=model, dataset=dataset, processing_class=build_tokenizer(), scorer=scorer, num_generations=4,
        max_completion_length=MAX_LENGTH, generation_batch_size=12, queue_maxsize=64, seed=5, temperature=1.5,
    )  # fmt: skip
    return child_loop(worker)


def _greedy_baseline(model, tokenizer, prompt, target: str, eos: list[int]) -> float:
    """The prompt's greedy completion, made alone, scored by hand: toy reward + 2 × length / 10 + DAPO's penalty."""
    if isinstance(prompt, str):
        ids = tokenizer(text=prompt)["input_ids"]
    else:
        ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)
        ids = ids["input_ids"]
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]), do_sample=False, max_new_tokens=MAX_LENGTH, eos_token_id=eos,
            pad_token_id=tokenizer.pad_token_id,
        )[0, len(ids) :].tolist()  # fmt: skip
    ends = [i for i, token in enumerate(out) if token in eos]
    completion = out[: ends[0] + 1] if ends else out
    text = tokenizer.decode(completion, skip_special_tokens=True)
    letter = float(toy_reward([text if isinstance(prompt, str) else [{"content": text}]], target=[target])[0])
    penalty = float(overlong_penalty(torch.tensor([len(completion)]), MAX_LENGTH, BUFFER, 1.0)[0])
    return letter + 2.0 * len(completion) / 10 + penalty


@pytest.mark.parametrize("conversational", [False, True])
def test_each_group_carries_its_prompts_greedy_reward(tiny_model, conversational):
    """Three prompts of different lengths (a left-padded greedy batch), four samples each: every sample's baseline is
    its prompt's greedy reward, the samples' advantages are 0 and their rewards ride along for the window."""
    dataset = toy_dataset(3, conversational=conversational)
    dataset = dataset.map(
        lambda row, i: {"prompt": [{"role": "user", "content": "Hi " * i + row["prompt"][0]["content"]}]}
        if conversational else {"prompt": "Hello " * i + row["prompt"]},
        with_indices=True,
    )  # fmt: skip
    loop = _loop(tiny_model, dataset)
    loop._rollout_batch(version=1)
    samples = []
    while not loop.channels.rollout_buffer.empty():
        samples.append(loop.channels.rollout_buffer.get())
    assert len(samples) == 12 and sorted({s.group_id for s in samples}) == [0, 1, 2]

    model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    tokenizer, eos = build_tokenizer(), loop.eos_ids.tolist()
    by_prompt = {str(row["prompt"]): row for row in dataset}
    baselines = []
    for group in range(3):
        members = [s for s in samples if s.group_id == group]
        row = by_prompt[str(members[0].prompt)]
        expected = _greedy_baseline(model, tokenizer, row["prompt"], row["target"], eos)
        baselines.append(expected)
        for sample in members:
            assert sample.metrics[WINDOW_BASELINE_KEY] == pytest.approx(expected, abs=1e-12)
            assert sample.advantage == 0.0
            length = int(sample.completion_mask.sum())
            penalty = float(overlong_penalty(torch.tensor([length]), MAX_LENGTH, BUFFER, 1.0)[0])
            assert sample.metrics[WINDOW_REWARD_KEY] == pytest.approx(sample.metrics["reward"] + penalty, abs=1e-12)
    assert len({s.metrics[WINDOW_REWARD_KEY] for s in samples}) > 1  # the samples differ from one another
    metrics = loop.channels.metrics_queue.get_nowait()
    total, count = metrics["rollout/greedy_baseline_mean"]
    assert count == 3 and total == pytest.approx(float(np.sum(baselines)), abs=1e-9)
    assert metrics["rollout/greedy_unscorable_total"] == 0 and metrics["rollout/greedy_generate_s"] > 0
