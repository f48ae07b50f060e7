"""Bad input to the GRPO-family trainers: a clear error naming the field or the sample, before any weight
changes."""

from __future__ import annotations

import pytest
import trl
from datasets import Dataset
from trainer_helpers import cpu_config, snapshot

import trl_ext
from trl_ext.toy import build_tokenizer, toy_dataset, toy_reward


def sapo_args(tmp_path, **overrides):
    return cpu_config(trl_ext.SAPOConfig, str(tmp_path), **overrides)


def test_missing_reward_function(tiny_model, tmp_path):
    for reward_funcs in (None, []):
        with pytest.raises(ValueError, match="SAPOTrainer: No reward source provided; reward_funcs is required"):
            trl_ext.SAPOTrainer(model=tiny_model, reward_funcs=reward_funcs, args=sapo_args(tmp_path))


def test_dataset_without_prompt_column(tiny_model, tmp_path):
    dataset = Dataset.from_dict({"question": ["a", "b"], "answer": ["x", "y"]})
    with pytest.raises(ValueError, match=r"train_dataset has no 'prompt' column \(columns: 'question', 'answer'\)"):
        trl_ext.SAPOTrainer(model=tiny_model, reward_funcs=toy_reward, args=sapo_args(tmp_path), train_dataset=dataset)
    with pytest.raises(ValueError, match=r"eval_dataset\['val'\] has no 'prompt' column"):
        trl_ext.SAPOTrainer(
            model=tiny_model,
            reward_funcs=toy_reward,
            args=sapo_args(tmp_path),
            train_dataset=toy_dataset(8),
            eval_dataset={"val": dataset},
        )


def test_config_of_another_algorithm_or_another_trl_trainer(tiny_model, tmp_path):
    # TRL's own trl.GRPOConfig is converted instead (tests/trainers/test_trl_config_conversion.py)
    other_trl = trl.SFTConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    for args in (cpu_config(trl_ext.GSPOConfig, str(tmp_path)), other_trl):
        name = f"{type(args).__module__.split('.')[0]}.{type(args).__name__}"
        with pytest.raises(TypeError, match=f"SAPOTrainer: args must be a trl_ext.SAPOConfig .* got {name}"):
            trl_ext.SAPOTrainer(model=tiny_model, reward_funcs=toy_reward, args=args, train_dataset=toy_dataset(8))


def test_group_of_one(tmp_path):
    with pytest.raises(ValueError, match="at least 2 generations per prompt"):
        sapo_args(tmp_path, num_generations=1)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (float("nan"), r"every reward function returned None or NaN for sample 5"),
        (float("inf"), r"reward function 'flaky_reward' returned inf for sample 5"),
        (float("-inf"), r"reward function 'flaky_reward' returned -inf for sample 5"),
        (None, r"every reward function returned None or NaN for sample 5"),
    ],
)
def test_non_finite_reward_fails_before_any_update(bad, message, tiny_model, tmp_path):
    def flaky_reward(completions, **kwargs):
        return [bad if i == 5 else 0.5 for i in range(len(completions))]

    trainer = trl_ext.SAPOTrainer(
        model=tiny_model,
        reward_funcs=flaky_reward,
        args=sapo_args(tmp_path),
        train_dataset=toy_dataset(8),
        processing_class=build_tokenizer(),
    )
    before = snapshot(trainer.model)
    with pytest.raises(ValueError, match=message) as err:
        trainer.train()
    assert "prompt 'Repeat the letter" in str(err.value)  # the sample is shown
    assert all((p.detach() == before[n]).all() for n, p in trainer.model.named_parameters())
    assert trainer.state.global_step == 0


def test_none_from_one_function_is_fine_when_another_scores_the_sample(tiny_model, tmp_path):
    def partial(completions, **kwargs):
        return [None if i % 2 else 1.0 for i in range(len(completions))]

    trainer = trl_ext.SAPOTrainer(
        model=tiny_model,
        reward_funcs=[partial, toy_reward],
        args=sapo_args(tmp_path, max_steps=1),
        train_dataset=toy_dataset(8),
        processing_class=build_tokenizer(),
    )
    trainer.train()
    assert trainer.state.global_step == 1
