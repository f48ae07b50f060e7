"""The Online DPO trainer: TRL's experimental OnlineDPOTrainer with the ported loss (tiny models, CPU). The loss
against TRL's on random inputs is tests/losses/test_online_dpo.py; here TRL's `training_step` and trl_ext's on the same
samples (`online_dpo_oracle`), one optimizer step of both trainers from the same weights and seed, the per-epoch β,
the config's checks and the script."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from online_dpo_oracle import ranked_interleaved, run_step, sampled_batch
from peft import LoraConfig
from trainer_helpers import CPU, changed, length_reward, logged, snapshot
from transformers import AutoModelForCausalLM
from trl.experimental.online_dpo import OnlineDPOConfig as TRLOnlineDPOConfig
from trl.experimental.online_dpo import OnlineDPOTrainer as TRLOnlineDPOTrainer

import trl_ext
from trl_ext import OnlineDPOConfig, OnlineDPOTrainer
from trl_ext.losses.online_dpo import OnlineDPOLoss
from trl_ext.scripts._common import UsageError
from trl_ext.toy import build_tokenizer, repeat_letter_reward, toy_dataset

# TRL's statistics that trl_ext sums over the completions' tokens only (TRL's add the padding after the EOS)
TOKEN_SUMS = ("objective/kl", "objective/entropy", "objective/non_score_reward", "objective/rlhf_reward")


def _settings(**overrides):
    return {
        **CPU,
        "per_device_train_batch_size": 4,
        "max_new_tokens": 6,
        "max_steps": 1,
        "temperature": 1.0,
        **overrides,
    }


def _trainer(trainer_class, config, model, reward=repeat_letter_reward, rows=8, **kwargs):
    return trainer_class(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=toy_dataset(rows),
        processing_class=build_tokenizer(),
        **kwargs,
    )


def test_attached_to_the_algorithm_table():
    spec = trl_ext.get_algorithm("online_dpo")
    assert spec.trainer_class is OnlineDPOTrainer and spec.config_class is OnlineDPOConfig
    assert issubclass(OnlineDPOTrainer, TRLOnlineDPOTrainer) and issubclass(OnlineDPOConfig, TRLOnlineDPOConfig)
    assert (spec.policy_loss_fn, spec.family.script, spec.paper.arxiv) == ("dpo", "online_dpo", "2402.04792")
    assert trl_ext.scripts.script_for("online_dpo").__name__ == "trl_ext.scripts.online_dpo"
    args = OnlineDPOConfig(output_dir="unused", **CPU)
    ours = {f.name for f in dataclasses.fields(OnlineDPOConfig)}
    assert ours - {f.name for f in dataclasses.fields(TRLOnlineDPOConfig)} == {"label_smoothing"}  # the one added
    assert (args.beta, args.betas, args.loss_type, args.missing_eos_penalty) == (0.1, (0.1,), "sigmoid", None)
    loss = args.components.policy_loss
    assert type(loss) is OnlineDPOLoss and loss.args == {"loss_type": "sigmoid", "beta": 0.1, "label_smoothing": 0.0}
    epochs = OnlineDPOConfig(output_dir="unused", **CPU, beta=[0.1, 0.3], label_smoothing=0.1).epoch_losses()
    assert [(fn.beta, fn.label_smoothing) for fn in epochs] == [(0.1, 0.1), (0.3, 0.1)]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"loss_type": "hinge"}, r"loss_type='hinge' is not valid; must be one of 'sigmoid', 'ipo'"),
        ({"beta": 0.0}, r"beta=0.0 is not valid; must be a finite number > 0, or a non-empty list of them"),
        ({"beta": [0.1, -1.0]}, r"beta=\[0.1, -1.0\] is not valid; must be a finite number > 0"),
        ({"beta": []}, r"beta=\[\] is not valid"),
        ({"beta": [float("inf")]}, r"beta=inf is not valid"),
        ({"missing_eos_penalty": -1.0}, r"missing_eos_penalty=-1.0 is not valid; must be >= 0 or None"),
        ({"max_new_tokens": 0}, r"max_new_tokens=0 is not valid; must be an integer >= 1"),
        ({"label_smoothing": 0.5}, r"label_smoothing=0.5 is not valid; must be in \[0, 0.5\)"),
        ({"loss_type": "ipo", "label_smoothing": 0.1}, r"label_smoothing=0.1 applies to loss_type 'sigmoid' only"),
    ],
)
def test_bad_config(overrides, message):
    """Errors at construction, naming the config, the field and what it may be (TRL checks `loss_type` only in the
    first training step, and the others never)."""
    with pytest.raises(ValueError, match=rf"^OnlineDPOConfig\b.*{message}"):
        OnlineDPOConfig(output_dir="unused", **{**CPU, **overrides})


@pytest.mark.parametrize(("loss_type", "beta", "penalty"), [("sigmoid", 0.1, None), ("ipo", 0.5, 1.0)])
@pytest.mark.parametrize("seed", [0, 1])
def test_training_step_equals_trls_on_the_same_samples(loss_type, beta, penalty, seed):
    """TRL's `training_step` and trl_ext's on the same sampled log-probs, EOS and rewards (ties, the missing-EOS
    penalty): the same loss, gradient and statistics, but the token sums, where TRL also adds the padding positions."""
    batch = sampled_batch(seed=seed, eos_rate=0.5)
    theirs = run_step(TRLOnlineDPOTrainer, batch, beta, loss_type, penalty)
    loss_fn = OnlineDPOLoss(beta=beta, loss_type=loss_type)
    ours = run_step(OnlineDPOTrainer, batch, beta, loss_type, penalty, policy_loss_fn=loss_fn)
    torch.testing.assert_close(ours.loss, theirs.loss)
    torch.testing.assert_close(ours.grad, theirs.grad)
    assert ours.grad.abs().sum() > 0
    for key, values in theirs.stats.items():
        if key not in TOKEN_SUMS:
            assert ours.stats[key] == pytest.approx(values, rel=1e-6), key
    assert ours.stats["dpo_loss"] == pytest.approx([theirs.loss.item()])
    assert ours.stats["reward"] == pytest.approx([batch["rewards"].mean().item()])  # before the penalty

    # the deliberate difference: sums over the completion's tokens (TRL's over every position)
    padded = batch["mask"] == 0
    assert padded.any()
    policy, ref, mask = batch["policy"], batch["ref"], batch["mask"].bool()
    for name, values in (("ours", ours.stats), ("TRL's", theirs.stats)):
        keep = mask if name == "ours" else torch.ones_like(mask)
        kl = torch.where(keep, policy - ref, 0).sum(-1)
        assert values["objective/kl"] == pytest.approx([kl.mean().item()]), name
        assert values["objective/entropy"] == pytest.approx([-torch.where(keep, policy, 0).sum(-1).mean().item()])
        assert values["objective/non_score_reward"] == pytest.approx([(-beta * kl).mean().item()]), name
    assert ours.stats["objective/entropy"] != pytest.approx(theirs.stats["objective/entropy"])


def test_ranking_and_penalty():
    """The completion with the higher reward (less `missing_eos_penalty` without an EOS) is chosen; a tie chooses the
    first: `objective/scores_margin` is the mean of the ranked rewards' differences."""
    batch = sampled_batch(prompts=4, seed=2, eos_rate=0.5)
    result = run_step(OnlineDPOTrainer, batch, 0.1, "sigmoid", 2.0, policy_loss_fn=OnlineDPOLoss())
    rewards = batch["rewards"] - 2.0 * ~(batch["completion_ids"] == 0).any(-1)
    order = ranked_interleaved(rewards)
    assert result.stats["objective/scores_margin"] == pytest.approx(
        [(rewards[order[0::2]] - rewards[order[1::2]]).mean().item()]
    )
    assert (rewards[order[0::2]] >= rewards[order[1::2]]).all()


def _reference(path):
    return AutoModelForCausalLM.from_pretrained(path)


@pytest.mark.parametrize(
    ("loss_type", "beta", "penalty", "trl_config"),
    [("sigmoid", 0.1, None, False), ("ipo", 0.5, 1.0, True)],
)
def test_one_optimizer_step_equals_trls(tiny_model, random_tiny_model, tmp_path, loss_type, beta, penalty, trl_config):
    """From the same weights and seed, TRL's trainer and trl_ext's sample the same completions and take the same SGD
    step: equal loss and parameters. The reference is another model, so the log-ratios are not 0. With `trl_config`,
    trl_ext's trainer gets TRL's own config (converted)."""
    settings = _settings(
        optim="sgd", learning_rate=1.0, max_grad_norm=0.0, loss_type=loss_type, beta=beta, missing_eos_penalty=penalty
    )
    theirs = _trainer(
        TRLOnlineDPOTrainer,
        TRLOnlineDPOConfig(output_dir=str(tmp_path / "trl"), **settings),
        tiny_model,
        reward=length_reward,
        ref_model=_reference(random_tiny_model),
    )
    before = snapshot(theirs.model)
    theirs.train()
    config_class = TRLOnlineDPOConfig if trl_config else OnlineDPOConfig
    ours = _trainer(
        OnlineDPOTrainer,
        config_class(output_dir=str(tmp_path / "ours"), **settings),
        tiny_model,
        reward=length_reward,
        ref_model=_reference(random_tiny_model),
    )
    assert type(ours.args) is OnlineDPOConfig and (ours.args.loss_type, ours.args.beta) == (loss_type, beta)
    ours.train()
    assert changed(before, theirs.model)
    for (name, a), b in zip(theirs.model.named_parameters(), ours.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    (their_log,), (our_log,) = theirs.state.log_history[:1], ours.state.log_history[:1]
    assert our_log["loss"] == their_log["loss"] and our_log["loss"] > 0
    for key in ("rewards/chosen", "rewards/rejected", "logps/chosen", "objective/scores", "objective/scores_margin"):
        assert our_log[key] == pytest.approx(their_log[key], rel=1e-5, abs=1e-7), key
    assert our_log["rewards/chosen"] != 0  # the reference differs from the policy


def test_peft_reference_is_the_disabled_adapter(tiny_model, tmp_path):
    """With a LoRA adapter and no reference model, the reference is the policy with its adapter disabled, as in TRL:
    one step equals TRL's."""
    lora = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.0}
    settings = _settings(optim="sgd", learning_rate=1.0, max_grad_norm=0.0, max_steps=2)
    runs = []
    for trainer_class, config_class in ((TRLOnlineDPOTrainer, TRLOnlineDPOConfig), (OnlineDPOTrainer, OnlineDPOConfig)):
        trainer = _trainer(
            trainer_class,
            config_class(output_dir=str(tmp_path / trainer_class.__module__), **settings),
            tiny_model,
            reward=length_reward,
            peft_config=LoraConfig(**lora),
        )
        assert trainer.ref_model is None
        trainer.train()
        runs.append(trainer)
    theirs, ours = runs
    for (name, a), b in zip(theirs.model.named_parameters(), ours.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    assert logged(ours, "loss") == logged(theirs, "loss")
    assert logged(ours, "rewards/chosen")[-1] != 0  # the second step: the adapter moved away from the reference


def test_beta_per_epoch(random_tiny_model, tmp_path):
    """A list of β trains epoch i with its i-th β and the epochs after the list with the last. TRL 1.16 indexes the list
    by the fractional epoch: its second step fails."""
    settings = _settings(per_device_train_batch_size=2, max_steps=-1, num_train_epochs=3, beta=[0.1, 0.4])
    ours = _trainer(
        OnlineDPOTrainer, OnlineDPOConfig(output_dir=str(tmp_path / "ours"), **settings), random_tiny_model, rows=4
    )
    ours.train()
    assert logged(ours, "beta") == [0.1, 0.1, 0.4, 0.4, 0.4, 0.4]
    assert ours.beta == ours.policy_loss_fn.beta == 0.4 and ours.epoch_index == 1
    theirs = _trainer(
        TRLOnlineDPOTrainer, TRLOnlineDPOConfig(output_dir=str(tmp_path / "trl"), **settings), random_tiny_model, rows=4
    )
    with pytest.raises(TypeError, match="list indices must be integers"):
        theirs.train()
    assert theirs.state.global_step == 1


def test_wrong_config_class(random_tiny_model, tmp_path):
    import trl

    with pytest.raises(TypeError, match=r"args must be a trl_ext.OnlineDPOConfig .*got trl.DPOConfig"):
        _trainer(OnlineDPOTrainer, trl.DPOConfig(output_dir=str(tmp_path), **CPU), random_tiny_model)


# ---- the script ----------------------------------------------------------------------------------------------------


def test_script_trains_the_toy_and_saves(toy_cache, tiny_model, tmp_path):
    from trl_ext.scripts.online_dpo import ONLINE_DPO_TRAINING, main

    quick = ["--max_steps", "2", "--per_device_train_batch_size", "8", "--logging_steps", "1", "--save_strategy", "no"]
    trainer = main(["--output_dir", str(tmp_path), *quick])
    assert type(trainer) is OnlineDPOTrainer and trainer.state.global_step == 2
    assert trainer.model.config._name_or_path == tiny_model and trainer.args.use_cpu
    assert trainer.args.beta == ONLINE_DPO_TRAINING["beta"] and trainer.reward_func_names == ["repeat_letter_reward"]
    assert len(logged(trainer, "reward")) == 2 and len(logged(trainer, "dpo_loss")) == 2
    assert os.path.isfile(os.path.join(str(tmp_path), "model.safetensors"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--eval_strategy", "steps"], r"--eval_strategy steps: TRL's OnlineDPOTrainer has no evaluation loop"),
        (["--reward_funcs", "nope"], r"--reward_funcs: cannot load 'nope'"),
        (
            ["--reward_model_path", "a/rm", "--reward_model_name_or_path", "b/rm"],
            r"--reward_model_path a/rm and --reward_model_name_or_path b/rm name different reward models",
        ),
        (["--loss_type", "hinge"], r"invalid choice: 'hinge'"),
    ],
)
def test_script_usage_errors(toy_cache, tmp_path, argv, message):
    from trl_ext.scripts.online_dpo import main

    with pytest.raises(UsageError, match=message):
        main(["--output_dir", str(tmp_path), *argv])


def test_script_needs_a_prompt_column(toy_cache, tmp_path):
    from trl_ext.scripts.online_dpo import main

    path = tmp_path / "data.jsonl"
    path.write_text('{"text": "a"}\n{"text": "b"}\n')
    with pytest.raises(UsageError, match=r"the train split has no 'prompt' column \(its columns: 'text'\)"):
        main(["--output_dir", str(tmp_path / "out"), "--dataset_name", str(path), "--reward_funcs", "accuracy_reward"])


@pytest.mark.slow
def test_the_toy_run_raises_the_reward(toy_cache, tiny_model, tmp_path):
    """The embedded default, shortened to 60 steps: the mean reward of the sampled completions rises from ~0.1."""
    from trl_ext.scripts.online_dpo import main

    trainer = main(["--output_dir", str(tmp_path), "--max_steps", "60", "--save_strategy", "no"])
    reward = logged(trainer, "reward")
    assert reward[0] < 0.2 and max(reward[-3:]) > reward[0] + 0.25, reward
