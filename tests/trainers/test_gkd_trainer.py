"""The GKD trainer (GKDTrainer / GKDConfig): TRL's experimental GKDTrainer with the ported loss. One SGD step against
TRL's trainer on every path of its batch mix (dataset completions, the student's own, the teacher's, accumulated), the
checks before the model loads, and the offline script (tiny student and teacher, CPU)."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
import trl
from trainer_helpers import CPU, logged

import trl_ext
from trl_ext import GKDConfig, GKDTrainer
from trl_ext.losses.gkd import gkd_loss
from trl_ext.scripts._common import UsageError
from trl_ext.scripts.gkd import GKD_TRAINING, toy_chat_dataset, toy_greedy_reward
from trl_ext.toy import TEST_PROMPTS, TEST_SEED, build_tokenizer, toy_expert_dataset

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.gkd import GKDConfig as TRLGKDConfig
    from trl.experimental.gkd import GKDTrainer as TRLGKDTrainer

MISSING_MODEL = "/nonexistent/model"  # loading it would fail: an error about the data proves the model never loaded


def _config(config_class, out, **overrides):
    settings = {**CPU, "output_dir": str(out), "per_device_train_batch_size": 4, "max_steps": 1, "max_new_tokens": 6}
    return config_class(**{**settings, **overrides})


def _one_step(trainer_class, config_class, out, student, teacher, **overrides):
    """One SGD step (lr 1, no clipping) on 8 toy chat rows; returns the trainer and the parameter update."""
    args = _config(config_class, out, optim="sgd", learning_rate=1.0, max_grad_norm=0.0, **overrides)
    trainer = trainer_class(
        model=student,
        teacher_model=teacher,
        args=args,
        train_dataset=toy_chat_dataset(8),
        processing_class=build_tokenizer(),
    )
    before = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
    trainer.train()
    return trainer, torch.cat([p.detach().flatten() for p in trainer.model.parameters()]) - before


def test_record_family_and_classes():
    spec = trl_ext.get_algorithm("gkd")
    assert (spec.trainer, spec.schema, spec.policy_loss_fn, spec.advantage_fn) == ("gkd", "sft", None, None)
    assert spec.loss_name == "trl_ext.losses.gkd.gkd_loss" and spec.paper.arxiv == "2306.13649"
    assert (spec.config_class, spec.trainer_class) == (GKDConfig, GKDTrainer)
    assert issubclass(GKDTrainer, TRLGKDTrainer) and issubclass(GKDConfig, TRLGKDConfig)
    assert GKDTrainer.generalized_jsd_loss is gkd_loss and TRLGKDTrainer.generalized_jsd_loss is not gkd_loss
    assert spec.family.script == "gkd" and trl_ext.scripts.script_for("gkd").SCRIPT.algorithm == "gkd"
    args = GKDConfig(output_dir="unused", **CPU)  # TRL's defaults
    assert (args.lmbda, args.beta, args.temperature, args.max_new_tokens, args.seq_kd) == (0.5, 0.5, 0.9, 128, False)


@pytest.mark.parametrize(
    "overrides",
    [
        {"lmbda": 0.0},
        {"lmbda": 1.0},
        {"lmbda": 0.0, "seq_kd": True},
        {"lmbda": 0.0, "gradient_accumulation_steps": 2, "beta": 0.0},
        {"lmbda": 1.0, "beta": 1.0, "temperature": 0.7},
    ],
    ids=["dataset", "on-policy", "seq_kd", "accumulated-forward-kl", "on-policy-reverse-kl"],
)
def test_first_update_equals_trl(random_tiny_model, random_teacher, tmp_path, overrides):
    """The same seed draws the same batch mix and the same samples (the student's with `lmbda=1`, the teacher's with
    `seq_kd`): the loss and every parameter's update are TRL's."""
    theirs, theirs_update = _one_step(
        TRLGKDTrainer, TRLGKDConfig, tmp_path / "trl", random_tiny_model, random_teacher, **overrides
    )
    ours, ours_update = _one_step(
        GKDTrainer, GKDConfig, tmp_path / "ours", random_tiny_model, random_teacher, **overrides
    )
    assert theirs_update.abs().max() > 1e-4
    torch.testing.assert_close(ours_update, theirs_update, rtol=1e-5, atol=1e-7)
    assert logged(ours, "loss") == pytest.approx(logged(theirs, "loss"), rel=1e-5)


def test_the_student_completes_the_batch_with_probability_lmbda(random_tiny_model, random_teacher, tmp_path):
    """`lmbda=1` trains on the student's samples, `lmbda=0` on the dataset's completions: other losses, other updates
    (so the on-policy comparison with TRL above compares generated batches)."""
    on_policy, on_policy_update = _one_step(
        GKDTrainer, GKDConfig, tmp_path / "on", random_tiny_model, random_teacher, lmbda=1.0
    )
    dataset, dataset_update = _one_step(GKDTrainer, GKDConfig, tmp_path / "off", random_tiny_model, random_teacher)
    assert logged(on_policy, "loss") != pytest.approx(logged(dataset, "loss"), rel=1e-3)
    assert not torch.allclose(on_policy_update, dataset_update, rtol=1e-3, atol=1e-6)


def test_the_teacher_comes_from_the_config(random_tiny_model, random_teacher, tmp_path):
    args = _config(GKDConfig, tmp_path, teacher_model_name_or_path=random_teacher)
    trainer = GKDTrainer(random_tiny_model, args=args, train_dataset=toy_chat_dataset(4))  # tokenizer: the student's
    assert trainer.teacher_model.config._name_or_path == random_teacher and trainer.algorithm == "gkd"
    assert trainer.processing_class.pad_token == build_tokenizer().pad_token
    assert trainer._name == "GKD (trl_ext)" and trainer._paper["id"] == "2306.13649"
    with pytest.raises(ValueError, match=r"^GKDTrainer: no teacher: pass teacher_model .* or set "
                                         r"teacher_model_name_or_path"):  # fmt: skip
        GKDTrainer(MISSING_MODEL, args=_config(GKDConfig, tmp_path), train_dataset=toy_chat_dataset(4))


@pytest.mark.parametrize("conversational", [False, True])
def test_rows_the_collator_cannot_read_are_refused_before_the_model_loads(conversational, tmp_path):
    rows = toy_expert_dataset(4, conversational=conversational)
    with pytest.raises(ValueError, match=r"^GKDTrainer: the train_dataset has no 'messages' or 'input_ids' column "
                                         r"\(its columns: 'prompt', 'completion', 'target'\)"):  # fmt: skip
        GKDTrainer(MISSING_MODEL, MISSING_MODEL, args=_config(GKDConfig, tmp_path), train_dataset=rows)
    with pytest.raises(ValueError, match=r"the eval_dataset\['held_out'\] has no 'messages'"):
        GKDTrainer(MISSING_MODEL, MISSING_MODEL, args=_config(GKDConfig, tmp_path), train_dataset=toy_chat_dataset(4),
                   eval_dataset={"held_out": rows})  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"lmbda": 1.5}, r"GKDConfig: lmbda=1.5 is not valid; must be in \[0, 1\]"),
        ({"beta": -0.5}, r"GKDConfig: beta=-0.5 is not valid; must be in \[0, 1\]"),
        ({"temperature": 0.0}, r"GKDConfig: temperature=0.0 is not valid; must be > 0"),
        ({"max_new_tokens": 0}, r"GKDConfig: max_new_tokens=0 is not valid; must be an integer >= 1"),
        ({"seq_kd": "yes"}, r"GKDConfig: seq_kd='yes' is not valid; must be True or False"),
    ],
)
def test_bad_config(overrides, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        _config(GKDConfig, tmp_path, **overrides)


def test_trls_config_is_converted_and_other_configs_refused(random_tiny_model, random_teacher, tmp_path):
    args = _config(TRLGKDConfig, tmp_path, lmbda=0.25, beta=0.1, max_new_tokens=5)
    trainer = GKDTrainer(random_tiny_model, random_teacher, args=args, train_dataset=toy_chat_dataset(4))
    assert type(trainer.args) is GKDConfig
    assert (trainer.args.lmbda, trainer.args.beta, trainer.args.max_new_tokens) == (0.25, 0.1, 5)
    assert (trainer.lmbda, trainer.beta) == (0.25, 0.1)
    with pytest.raises(TypeError, match="the config of another TRL trainer"):
        GKDTrainer(MISSING_MODEL, args=trl.SFTConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False))


def test_toy_chat_dataset():
    rows = toy_chat_dataset(16, seed=3)
    assert rows["messages"] == toy_chat_dataset(16, seed=3)["messages"] and len(rows) == 16
    for messages, letter in zip(rows["messages"], rows["target"], strict=True):
        assert [m["role"] for m in messages] == ["user", "assistant"]
        assert messages[0]["content"] == f"Repeat the letter {letter}:"
        assert set(messages[1]["content"].split()) == {letter}


def test_script_refuses_rows_without_messages(toy_cache, tiny_teacher, tmp_path):
    from trl_ext.scripts.gkd import main

    folder = tmp_path / "data"
    folder.mkdir()
    with open(folder / "train.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in toy_expert_dataset(4))
    refused = r"the train split has none of the columns GKD reads .*GKD needs a 'messages' column"
    with pytest.raises(UsageError, match=refused):
        main(["--output_dir", str(tmp_path / "out"), "--dataset_name", str(folder)])


def test_script_distills_the_toy_teacher_a_few_steps(toy_cache, tiny_model, tiny_teacher, tmp_path):
    """The toy run's defaults, 20 steps: the toy teacher is the default teacher, and the held-out divergence from it
    (`eval_loss`, measured before training too) falls."""
    from trl_ext.scripts.gkd import main

    trainer = main(["--output_dir", str(tmp_path), "--max_steps", "20", "--eval_steps", "20", "--save_strategy", "no"])
    assert type(trainer) is GKDTrainer and trainer.model.config._name_or_path == tiny_model
    assert trainer.args.teacher_model_name_or_path == tiny_teacher
    assert trainer.teacher_model.config._name_or_path == tiny_teacher
    held_out = logged(trainer, "eval_loss")
    assert len(held_out) == 2 and held_out[1] < 0.8 * held_out[0]


@pytest.mark.slow
def test_script_distills_the_toy_teacher(toy_cache, tiny_model, tiny_teacher, tmp_path):
    """The full toy run (`GKD_TRAINING`, ~30 s of training): the student, which repeats a letter unrelated to the
    prompt (greedy toy reward 1/8), answers as the teacher does (reward ~1), and its held-out divergence from the
    teacher falls several-fold."""
    from transformers import AutoModelForCausalLM

    from trl_ext.scripts.gkd import main

    held_out_rows = toy_chat_dataset(TEST_PROMPTS, seed=TEST_SEED)
    tokenizer = build_tokenizer()
    before = toy_greedy_reward(AutoModelForCausalLM.from_pretrained(tiny_model), tokenizer, held_out_rows)
    trainer = main(["--output_dir", str(tmp_path), "--save_strategy", "no"])
    after = toy_greedy_reward(trainer.model, tokenizer, held_out_rows)
    teacher = toy_greedy_reward(AutoModelForCausalLM.from_pretrained(tiny_teacher), tokenizer, held_out_rows)
    assert trainer.state.global_step == GKD_TRAINING["max_steps"]
    assert before < 0.3 and teacher == 1.0 and after >= 0.9
    held_out = logged(trainer, "eval_loss")
    assert held_out[-1] < 0.3 * held_out[0]
