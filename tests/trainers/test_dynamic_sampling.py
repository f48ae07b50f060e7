"""DAPO's dynamic sampling and overlong reward shaping in the GRPO-family trainers (arXiv 2503.14476 §3.2, §3.4).

The completions come from a deterministic `rollout_func` and the rewards from the prompt and the completion, so the
test knows which prompt groups are uniform, which prompts each generation round draws (the training loop's sampler
and the extra-prompt stream, both unshuffled here) and every completion's length: it asserts the exact batch the
advantage function sees, the logged counts, the length penalties, and the errors. (The window normalization and the
2-processes = 1-process update with both options on: tests/distributed/test_window_normalization.py, `grpo:dynamic`.)
"""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset, IterableDataset
from trainer_helpers import CPU, logged

from trl_ext import GiGPOConfig, GRPOConfig, GRPOTrainer, MIXConfig, MIXTrainer, OnPolicyDistillConfig, PPOTrainer
from trl_ext.advantages.overlong import overlong_penalty
from trl_ext.toy import toy_expert_dataset

GROUP = 4
UNIFORM = {1, 2, 5}  # the prompts whose four completions all get reward 1.0
EOS = 0


def completion(prompt: int, k: int) -> list[int]:
    return [10 + (prompt * 31 + k * 17 + 7 * t) % 200 for t in range(2 + (5 * prompt + 3 * k) % 7)]  # 2..8 tokens


def rollout(prompts, trainer):
    return {
        "prompt_ids": [[20, 30, 40 + int(p.split()[-1])] for p in prompts],
        "completion_ids": [completion(int(p.split()[-1]), i % GROUP) for i, p in enumerate(prompts)],
        "logprobs": [[0.0] * len(completion(int(p.split()[-1]), i % GROUP)) for i, p in enumerate(prompts)],
    }


def task_reward(prompts, completion_ids, **kwargs):
    pairs = zip(prompts, completion_ids, strict=True)
    return [1.0 if int(p.split()[-1]) in UNIFORM else len(ids) / 10 for p, ids in pairs]


def config(tmp_path, config_class=GRPOConfig, **overrides):
    settings = {
        **CPU,
        "output_dir": str(tmp_path),
        "per_device_train_batch_size": 8,  # two prompt groups per generation batch
        "num_generations": GROUP,
        "max_completion_length": 8,
        "max_steps": 2,
        "learning_rate": 1e-3,
        "shuffle_dataset": False,  # the training loop and the extra-prompt stream both draw 0, 1, 2, ...
        "dynamic_sampling": True,
        **overrides,
    }
    return config_class(**settings)


def train(model, tmp_path, reward=task_reward, trainer_class=GRPOTrainer, **overrides):
    dataset = Dataset.from_dict({"prompt": [f"prompt {i}" for i in range(8)]})
    args = config(tmp_path, trainer_class.config_class, **overrides)
    trainer = trainer_class(model=model, reward_funcs=reward, args=args, train_dataset=dataset, rollout_func=rollout)
    return trainer, recorded_rewards(trainer)


def recorded_rewards(trainer) -> list[torch.Tensor]:
    """The rewards of every generation batch the trainer computes advantages on, in order."""
    seen, compute = [], trainer._compute_advantages

    def record(rewards, group_ids, output):
        seen.append(rewards.clone())
        return compute(rewards, group_ids, output)

    trainer._compute_advantages = record
    return seen


def expected_rewards(prompts: list[int], penalty: bool = False) -> torch.Tensor:
    values = []
    for p in prompts:
        for k in range(GROUP):
            length = len(completion(p, k))
            value = 1.0 if p in UNIFORM else length / 10
            values.append(value + (min(0.0, (8 - 4 - length) / 4) if penalty else 0.0))
    return torch.tensor(values)


def test_uniform_groups_are_replaced_by_groups_of_extra_prompts(random_tiny_model, tmp_path):
    trainer, seen = train(random_tiny_model, tmp_path)
    trainer.train()
    # Step 1: the loop draws prompts 0, 1; group 1 is uniform, so the extra stream draws 0, 1: its group 0 fills the
    # batch. Step 2: the loop draws 2, 3 (2 uniform), the stream 2, 3: the batch is prompt 3's group twice.
    assert [tuple(r.shape) for r in seen] == [(8,), (8,)]
    torch.testing.assert_close(seen[0], expected_rewards([0, 0]))
    torch.testing.assert_close(seen[1], expected_rewards([3, 3]))
    assert logged(trainer, "dynamic_sampling/rounds") == [2.0, 2.0]
    assert logged(trainer, "dynamic_sampling/prompts_drawn") == [4.0, 4.0]
    assert logged(trainer, "dynamic_sampling/groups_dropped") == [2.0, 2.0]
    assert logged(trainer, "dynamic_sampling/groups_surplus") == [0.0, 0.0]


def test_critic_ppo_scores_the_refilled_batch(random_tiny_model, tmp_path):
    trainer, seen = train(random_tiny_model, tmp_path, trainer_class=PPOTrainer, max_steps=1)
    trainer.train()
    torch.testing.assert_close(seen[0], expected_rewards([0, 0]))  # as GRPO's first step
    assert logged(trainer, "dynamic_sampling/rounds") == [2.0] and logged(trainer, "critic/values")


def test_without_uniform_groups_one_round_and_the_plain_batch(random_tiny_model, tmp_path):
    def graded(prompts, completion_ids, **kwargs):
        return [len(ids) / 10 for ids in completion_ids]

    trainer, seen = train(random_tiny_model, tmp_path, reward=graded, max_steps=1)
    trainer.train()
    torch.testing.assert_close(seen[0], torch.tensor([len(completion(p, k)) / 10 for p in (0, 1) for k in range(4)]))
    assert logged(trainer, "dynamic_sampling/rounds") == [1.0]
    assert logged(trainer, "dynamic_sampling/groups_dropped") == [0.0]


def test_overlong_penalty_joins_the_rewards_but_not_the_uniformity_test(random_tiny_model, tmp_path):
    trainer, seen = train(random_tiny_model, tmp_path, overlong_buffer=4, max_steps=1)
    trainer.train()
    # Prompt 1's rewards differ once penalized by length, but its task rewards agree: it is still dropped.
    torch.testing.assert_close(seen[0], expected_rewards([0, 0], penalty=True))
    assert logged(trainer, "dynamic_sampling/groups_dropped") == [2.0]
    penalties = expected_rewards([0, 0], penalty=True) - expected_rewards([0, 0])
    assert penalties.min() < 0  # the completions reach into the buffer
    assert logged(trainer, "rewards/overlong_penalty/mean") == [pytest.approx(penalties.mean().item())]


def test_mix_refills_its_rollout_rows_and_keeps_its_expert_rows(random_tiny_model, tmp_path):
    # 8 rows per generation batch, half of them expert rows: one rollout group per batch. Step 1 draws prompt 0
    # (informative); step 2 draws prompt 1 (uniform), so the extra stream's first prompt (0) replaces it.
    args = MIXConfig(**{**CPU, "output_dir": str(tmp_path)}, per_device_train_batch_size=8, num_generations=GROUP,
                     max_completion_length=8, max_steps=2, learning_rate=1e-3, shuffle_dataset=False,
                     dynamic_sampling=True, expert_data_ratio=0.5)  # fmt: skip
    trainer = MIXTrainer(model=random_tiny_model, reward_funcs=task_reward, args=args, rollout_func=rollout,
                         train_dataset=Dataset.from_dict({"prompt": [f"prompt {i}" for i in range(8)]}),
                         expert_dataset=toy_expert_dataset(16))  # fmt: skip
    seen = recorded_rewards(trainer)
    trainer.train()
    torch.testing.assert_close(seen[0], expected_rewards([0]))
    torch.testing.assert_close(seen[1], expected_rewards([0]))
    assert logged(trainer, "dynamic_sampling/rounds") == [1.0, 2.0]
    assert all(value > 0 for value in logged(trainer, "expert/sft_loss"))  # the expert rows still train


def constant(completion_ids, **kwargs):
    return [1.0] * len(completion_ids)


def test_a_batch_that_cannot_be_filled_trains_with_uniform_groups_and_warns_once(random_tiny_model, tmp_path):
    """At the cap (`dynamic_sampling_at_cap="train"`, the default) the run goes on: each batch trains the groups it
    drew first (all uniform here: advantage 0, as without dynamic sampling), with one warning for the run."""
    trainer, seen = train(random_tiny_model, tmp_path, reward=constant, dynamic_sampling_max_rounds=3)
    with pytest.warns(UserWarning, match=r"found 0 of the 2 prompt groups .*_max_rounds=3 rounds \(6 prompts\)") as w:
        trainer.train()
    assert sum("dynamic sampling found" in str(warning.message) for warning in w) == 1  # once, not per batch
    assert trainer.state.global_step == 2
    assert len(seen) == 2 and all(torch.equal(rewards, torch.ones(8)) for rewards in seen)
    assert logged(trainer, "dynamic_sampling/capped") == [1.0, 1.0]
    assert logged(trainer, "dynamic_sampling/groups_filled") == [2.0, 2.0]
    assert logged(trainer, "dynamic_sampling/rounds") == [3.0, 3.0]


def test_a_capped_batch_keeps_the_informative_groups_it_found(random_tiny_model, tmp_path):
    """One round: prompt 0 is informative, prompt 1 uniform; the batch trains both, in generation order."""
    trainer, seen = train(random_tiny_model, tmp_path, dynamic_sampling_max_rounds=1, max_steps=1)
    with pytest.warns(UserWarning, match=r"found 1 of the 2 prompt groups"):
        trainer.train()
    torch.testing.assert_close(seen[0], expected_rewards([0, 1]))
    assert logged(trainer, "dynamic_sampling/groups_filled") == [1.0]


def test_at_cap_raise_stops_training_before_any_update(random_tiny_model, tmp_path):
    """`dynamic_sampling_at_cap="raise"`: verl's behaviour, an error naming the settings."""
    trainer, seen = train(
        random_tiny_model, tmp_path, reward=constant, dynamic_sampling_max_rounds=3, dynamic_sampling_at_cap="raise"
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    with pytest.raises(RuntimeError, match=r"0 of the 2 prompt groups .* dynamic_sampling_max_rounds=3 rounds"):
        trainer.train()
    assert seen == []  # no advantages computed on a partial batch
    assert all(torch.equal(before[n], p) for n, p in trainer.model.named_parameters())


def test_overlong_penalty_closed_form():
    lengths = torch.tensor([0, 12, 13, 16, 20])
    expected = torch.tensor([0.0, 0.0, -1 / 8, -4 / 8, -1.0]) * 0.5
    torch.testing.assert_close(overlong_penalty(lengths, max_length=20, buffer=8, factor=0.5), expected)


def test_overlong_penalty_keeps_falling_beyond_the_maximum_length():
    """verl's formula goes on beyond `max_length` (Trinity-RFT would clamp at −factor): 30 tokens, at most 20, buffer
    5 → −(30 − 15)/5 = −3."""
    penalty = overlong_penalty(torch.tensor([20, 30]), max_length=20, buffer=5, factor=1.0)
    torch.testing.assert_close(penalty, torch.tensor([-1.0, -3.0]))


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda t: GRPOConfig(output_dir=t, overlong_buffer=300, max_completion_length=256),
         r"overlong_buffer=300 is longer than max_completion_length=256"),
        (lambda t: GRPOConfig(output_dir=t, overlong_buffer=-1), r"overlong_buffer=-1 is not valid"),
        (lambda t: GRPOConfig(output_dir=t, dynamic_sampling=True, num_generations=1,
                              per_device_train_batch_size=2), r"dynamic_sampling=True .* num_generations=1"),
        (lambda t: GRPOConfig(output_dir=t, num_generations=0), r"num_generations=0 is not valid; must be an integer"),
        (lambda t: GRPOConfig(output_dir=t, dynamic_sampling_max_rounds=0),
         r"dynamic_sampling_max_rounds=0 is not valid; must be an integer >= 1"),
        (lambda t: GRPOConfig(output_dir=t, dynamic_sampling_at_cap="stop"),
         r"dynamic_sampling_at_cap='stop' .*train.*raise"),
        (lambda t: GiGPOConfig(output_dir=t, dynamic_sampling=True), r"advantage_fn='gigpo'"),
        (lambda t: OnPolicyDistillConfig(output_dir=t, dynamic_sampling=True),
         r"distillation's advantages come from the teacher"),
    ],
)  # fmt: skip
def test_bad_settings_are_refused_by_name(tmp_path, make, match):
    with pytest.raises(ValueError, match=match):
        make(str(tmp_path))


def test_an_iterable_dataset_is_refused_before_the_model_loads(tmp_path):
    stream = IterableDataset.from_generator(lambda: iter([{"prompt": "prompt 0"}]))
    with pytest.raises(ValueError, match=r"dynamic_sampling=True .* IterableDataset"):
        GRPOTrainer(model="no/such-model", reward_funcs=task_reward, args=config(tmp_path), train_dataset=stream)
