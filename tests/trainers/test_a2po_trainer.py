"""A*-PO's trainer (trl_ext.A2POTrainer / A2POConfig) against TRL 1.16's `trl.experimental.a2po.A2POTrainer`.

* V*: TRL's `_estimate_optimal_values` (the trainer keeps it) on stubbed rewards is `optimal_value` of the rewards it
  was given, prompt by prompt.
* The loss on a batch TRL's `_prepare_inputs` made: trl_ext's `compute_loss` gives TRL's loss and gradient.
* One optimizer step (SGD, so the update is proportional to the gradient) of each trainer from the same weights and
  seed, stage 1 included: the same V*, the same logged loss and metrics, the same updated parameters; with one
  micro-batch per step and with two of equal size (where the window normalization is TRL's mean of means).
* The records and the config's checks; bad arguments are errors naming the field, before the model loads.
* The script (`examples/train_a2po.py`): a short run's summary and model card; the toy run's reward rises (slow).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from datasets import Dataset
from trainer_helpers import CPU, logged, snapshot
from trl.experimental.a2po import A2POConfig as TRLA2POConfig
from trl.experimental.a2po import A2POTrainer as TRLA2POTrainer

import trl_ext
from trl_ext.advantages.a2po import optimal_value
from trl_ext.scripts import script_for
from trl_ext.toy import LETTERS, repeat_letter_reward, toy_dataset
from trl_ext.trainers.a2po.config import A2POConfig
from trl_ext.trainers.a2po.trainer import A2POTrainer
from trl_ext.trainers.core.config_conversion import convert_config

MISSING_MODEL = "/nonexistent/model"  # loading it would fail: an error about the arguments proves it never loaded
STEP = {
    **CPU,
    "per_device_train_batch_size": 8,
    "max_steps": 1,
    "max_completion_length": 6,
    "num_value_samples": 4,
    "beta2": 0.1,
    "filter_all_incorrect": False,
    "optim": "sgd",
    "learning_rate": 0.5,
    "lr_scheduler_type": "constant",
}


def _prompts(rows: int = 8) -> Dataset:
    return toy_dataset(rows)


def _trainers(tiny_model, tmp_path, rows: int = 8, **overrides):
    """TRL's and trl_ext's trainer on the same weights, data and settings."""
    settings = {**STEP, **overrides}
    made = []
    for name, (config, trainer) in {"trl": (TRLA2POConfig, TRLA2POTrainer), "ext": (A2POConfig, A2POTrainer)}.items():
        args = config(output_dir=str(tmp_path / name), **settings)
        made.append(trainer(tiny_model, repeat_letter_reward, args=args, train_dataset=_prompts(rows)))
    return made


# ================================================================================================
# V*: TRL's estimate on stubbed rewards
# ================================================================================================


def test_trls_v_star_on_stubbed_rewards_is_optimal_value(tiny_model, tmp_path):
    """Six distinct prompts in batches of 4 and 2, N = 4 samples each, rewards (binary and graded) handed out by a
    stub of `_calculate_rewards`: every prompt's V* is `optimal_value` of its four rewards."""
    args = A2POConfig(output_dir=str(tmp_path), **{**STEP, "per_device_train_batch_size": 4, "beta1": 0.3})
    dataset = Dataset.from_dict({"prompt": [f"Repeat the letter {c}:" for c in LETTERS[:6]]})
    trainer = A2POTrainer(tiny_model, repeat_letter_reward, args=args, train_dataset=dataset)
    assert A2POTrainer._estimate_optimal_values is TRLA2POTrainer._estimate_optimal_values  # stage 1 is TRL's
    table = torch.tensor(
        [[0, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1], [0.5, 0.2, 1, 0], [1, 0, 0, 0], [-0.3, 0.7, 0.1, 0.9]]
    )
    handed: list[torch.Tensor] = []

    def stub_rewards(prompts, completions, **kwargs):
        assert len(prompts) == len(completions) == 4 * len(set(prompts))  # N samples per prompt, prompt-major
        rewards = table[len(handed) * 4 : len(handed) * 4 + len(prompts) // 4].reshape(-1)
        handed.append(rewards)
        return rewards

    trainer._calculate_rewards = stub_rewards
    trainer._estimate_optimal_values()
    assert [len(r) for r in handed] == [16, 8]
    expected = optimal_value(table, 0.3)
    for row, letter in enumerate(LETTERS[:6]):
        assert trainer._optimal_values[f"Repeat the letter {letter}:"] == pytest.approx(expected[row].item(), abs=0)


# ================================================================================================
# The loss on a prepared batch, and one optimizer step
# ================================================================================================


def test_compute_loss_on_a_prepared_batch_is_trls(tiny_model, tmp_path):
    trl, ext = _trainers(tiny_model, tmp_path)
    torch.manual_seed(0)
    batch = trl._prepare_inputs(list(_prompts()))  # stage 1 on first use, then one completion per prompt
    assert batch["rewards"].shape == (8,) and batch["ref_logps"].shape == (8,)
    losses, grads = [], []
    for trainer in (trl, ext):
        trainer.model.train()
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in trainer.model.parameters()])
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-6, atol=0)
    for got, want in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-8)
    assert ext.metric_log("train")["a2po_loss"] == [pytest.approx(losses[0].item(), rel=1e-6)]


@pytest.mark.parametrize(
    "geometry",
    [{}, {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2}],
    ids=["one-micro-batch", "two-micro-batches"],
)
def test_one_optimizer_step_equals_trls(tiny_model, tmp_path, geometry):
    trl, ext = _trainers(tiny_model, tmp_path, **geometry)
    before = snapshot(trl.model)
    assert all(torch.equal(before[n], p) for n, p in ext.model.named_parameters())
    for trainer in (trl, ext):
        torch.manual_seed(0)
        trainer.train()
    assert ext._optimal_values == trl._optimal_values  # the same reference samples: the same V*
    for key in ("loss", "reward", "v_star", "implicit_reward", "advantage"):
        assert logged(ext, key) == pytest.approx(logged(trl, key), rel=1e-5, abs=1e-7), key
    assert logged(ext, "a2po_loss") == pytest.approx(logged(trl, "loss"), rel=1e-5)
    moved = 0
    for (name, got), want in zip(ext.model.named_parameters(), trl.model.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7, msg=name)
        moved += not torch.equal(before[name], want)
    assert moved > 0


# ================================================================================================
# Records, config, arguments
# ================================================================================================


def test_record_family_and_classes():
    spec = trl_ext.get_algorithm("a2po")
    assert (spec.schema, spec.trainer, spec.policy_loss_fn, spec.advantage_fn) == ("experience", "a2po", "a2po", None)
    assert (spec.config_class, spec.trainer_class) == (A2POConfig, A2POTrainer) == (trl_ext.A2POConfig,
                                                                                       trl_ext.A2POTrainer)  # fmt: skip
    assert issubclass(A2POTrainer, TRLA2POTrainer) and issubclass(A2POConfig, TRLA2POConfig)
    assert A2POTrainer.algorithm == A2POConfig.algorithm == "a2po"
    assert spec.paper.arxiv == "2505.20686"
    assert spec.family.script == "a2po" and script_for("a2po").__name__ == "trl_ext.scripts.a2po"


def test_a_trl_config_is_converted(tmp_path):
    trl_args = TRLA2POConfig(output_dir=str(tmp_path), beta2=0.2, beta1=1.5, num_value_samples=3, use_cpu=True)
    args = A2POConfig(output_dir=str(tmp_path), beta2=0.2, beta1=1.5, num_value_samples=3, use_cpu=True)
    converted = convert_config("A2POTrainer", trl_args, A2POConfig)
    assert isinstance(converted, A2POConfig)
    assert (converted.beta1, converted.beta2, converted.num_value_samples) == (1.5, 0.2, 3)
    assert converted.components.policy_loss.beta2 == 0.2 == args.components.policy_loss.beta2
    assert dataclasses.asdict(converted)["beta2"] == 0.2


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("beta1", 0.0, r"A2POConfig: beta1=0\.0 is not valid; must be > 0$"),
        ("beta1", math.nan, r"beta1=nan is not valid"),
        ("beta2", 0.0, r"A2POConfig \(policy loss\): a2po: beta2=0\.0 is not valid; must be > 0"),
        ("num_value_samples", 0, r"num_value_samples=0 is not valid; must be an integer >= 1"),
        ("num_value_samples", 2.5, r"num_value_samples=2\.5 is not valid; must be an integer >= 1"),
        ("temperature", 0.0, r"A2POConfig: temperature=0\.0 is not valid; must be > 0$"),
        ("reward_weights", [1.0, math.inf], r"reward_weights=\[1\.0, inf\] is not valid; must be None"),
        ("reward_weights", [], r"reward_weights=\[\] is not valid"),
    ],
)
def test_bad_config_values_name_the_field(field, value, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        A2POConfig(output_dir=str(tmp_path), use_cpu=True, **{field: value})


def test_bad_reward_arguments_are_refused_before_the_model_loads(tmp_path):
    args = A2POConfig(output_dir=str(tmp_path), use_cpu=True)
    with pytest.raises(ValueError, match=r"A2POTrainer: reward_funcs holds 'org/reward-model', which is not callable"):
        A2POTrainer(MISSING_MODEL, "org/reward-model", args=args, train_dataset=_prompts())
    with pytest.raises(ValueError, match=r"A2POTrainer: reward_funcs is empty"):
        A2POTrainer(MISSING_MODEL, [], args=args, train_dataset=_prompts())
    weighted = A2POConfig(output_dir=str(tmp_path), use_cpu=True, reward_weights=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"reward_weights=\[1\.0, 2\.0\] has 2 weight\(s\) for 1 reward function"):
        A2POTrainer(MISSING_MODEL, repeat_letter_reward, args=weighted, train_dataset=_prompts())
    with pytest.raises(TypeError, match=r"args must be a trl_ext\.A2POConfig"):
        A2POTrainer(
            MISSING_MODEL,
            repeat_letter_reward,
            args=trl_ext.DPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False),
        )


# ================================================================================================
# The script
# ================================================================================================


def test_the_script_trains_a_few_steps_and_writes_the_card(toy_cache, tmp_path, capsys):
    from trl_ext.scripts.a2po import main

    out = tmp_path / "run"
    argv = ["--output_dir", str(out), "--max_steps", "2", "--logging_steps", "1", "--save_strategy", "no"]
    settings = ["--per_device_train_batch_size", "64", "--per_device_eval_batch_size", "32", "--num_value_samples", "2"]
    trainer = main([*argv, *settings, "--eval_strategy", "steps", "--eval_steps", "2"])
    printed = capsys.readouterr().out
    assert "trl_ext a2po: A2POTrainer / A2POConfig" in printed
    assert "generation  1 completion per prompt; stage 1: num_value_samples 2" in printed
    assert "Trained a2po for 2 steps" in printed
    assert trainer.state.global_step == 2 and len(logged(trainer, "a2po_loss")) == 2
    evaluated = trainer.state.log_history[-2]  # the held-out split, V* estimated for its prompts too
    assert {"eval_loss", "eval_a2po_loss", "eval_reward", "eval_v_star"} <= set(evaluated)
    assert evaluated["eval_loss"] == pytest.approx(evaluated["eval_a2po_loss"], rel=1e-6)
    card = (out / "README.md").read_text()
    assert "trl_ext's A2PO trainer" in card and "| policy loss | `a2po` |" in card and "`beta2` | `0.1`" in card


def test_the_script_refuses_what_trls_trainer_cannot_take(toy_cache, tmp_path):
    from trl_ext.scripts._common import UsageError
    from trl_ext.scripts.a2po import main

    argv = ["--output_dir", str(tmp_path)]
    with pytest.raises(UsageError, match=r"--reward_model_name_or_path: not supported by the a2po trainer"):
        main([*argv, "--reward_model_name_or_path", "org/rm"])
    with pytest.raises(UsageError, match=r"--use_peft: not supported by the a2po trainer"):
        main([*argv, "--use_peft"])
    with pytest.raises(UsageError, match=r"--asynchronous true: a2po has no asynchronous form: A\*-PO estimates V\*"):
        main([*argv, "--asynchronous", "true"])
    with pytest.raises(UsageError, match=r"--reward_funcs is required with your dataset"):
        main([*argv, "--dataset_name", str(tmp_path / "data.jsonl")])


@pytest.mark.slow
def test_the_toy_run_raises_the_reward(toy_cache, tmp_path):
    """The example's toy run (`A2PO_TRAINING`, 100 steps): the reward of the untrained model (~1/8) rises."""
    from trl_ext.scripts.a2po import main

    trainer = main(["--output_dir", str(tmp_path), "--save_strategy", "no"])
    rewards = logged(trainer, "reward")
    assert sum(rewards[:2]) / 2 < 0.3
    assert sum(rewards[-3:]) / 3 > 0.6, rewards
