"""The GOLD trainer (trl_ext.GOLDTrainer / GOLDConfig): TRL's experimental GOLDTrainer with the ported losses
(`trl_ext.losses.gold`), one optimizer step against TRL's from the same weights (one tokenizer and two), the checks
made before any model loads, and the offline script (tiny models, CPU). The losses option by option against TRL's
are in tests/losses/test_gold.py."""

from __future__ import annotations

import warnings

import pytest
import torch
from datasets import Dataset
from trainer_helpers import CPU, build_cross_tokenizer, changed, logged, snapshot

import trl_ext
from trl_ext import GOLDConfig, GOLDTrainer
from trl_ext.losses.gold import ULDLoss
from trl_ext.toy import build_model, build_tokenizer, toy_expert_dataset

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental.gold import GOLDConfig as TRLGOLDConfig
    from trl.experimental.gold import GOLDTrainer as TRLGOLDTrainer
    from trl.experimental.gold.gold_trainer import ULDLoss as TRLULDLoss

MISSING_MODEL = "/nonexistent/model"  # loading it would fail: an error about the data proves the model never loaded
STEP = {
    **CPU,
    "per_device_train_batch_size": 4,
    "max_steps": 1,
    "max_length": 64,
    "max_completion_length": 8,
    "optim": "sgd",
    "learning_rate": 1.0,
    "max_grad_norm": 0.0,
}
"""One plain SGD step on 4 demonstrations: the update is the gradient itself."""


def _config(cls, out, **overrides):
    return cls(**{**STEP, "output_dir": str(out), **overrides})


@pytest.fixture(scope="module")
def cross_teacher(tmp_path_factory) -> str:
    """An untrained tiny Qwen2 with another tokenizer than the student's (`build_cross_tokenizer`)."""
    path = tmp_path_factory.mktemp("cross_teacher")
    tokenizer = build_cross_tokenizer()
    build_model(tokenizer, seed=1).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def test_record_family_and_classes():
    spec = trl_ext.get_algorithm("gold")
    assert (spec.schema, spec.trainer, spec.policy_loss_fn, spec.advantage_fn) == ("sft", "gold", None, None)
    assert spec.loss_name == spec.family.objective == "trl_ext.losses.gold.ULDLoss"
    assert spec.paper.arxiv == "2402.12030" and spec.family.script == "gold"
    assert (spec.config_class, spec.trainer_class) == (GOLDConfig, GOLDTrainer)
    assert issubclass(GOLDTrainer, TRLGOLDTrainer) and issubclass(GOLDConfig, TRLGOLDConfig)
    assert GOLDConfig.algorithm == GOLDTrainer.algorithm == "gold"
    from trl_ext.scripts import script_for

    assert script_for("gold").__name__ == "trl_ext.scripts.gold"


def _one_step(trainer_class, config_class, student, teacher, out, **overrides):
    trainer = trainer_class(
        model=student,
        teacher_model=teacher,
        args=_config(config_class, out, **overrides),
        train_dataset=toy_expert_dataset(8),
        processing_class=build_tokenizer(),
    )
    before = snapshot(trainer.model)
    trainer.train()
    assert changed(before, trainer.model)
    return trainer


def _assert_same_step(theirs, ours, keys=("loss",)):
    for (name, a), b in zip(theirs.model.named_parameters(), ours.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7, msg=name)
    for key in keys:
        assert logged(ours, key) == pytest.approx(logged(theirs, key), rel=1e-5), key
        assert logged(ours, key), key


LOSSES = {
    "jsd": {"beta": 0.3, "temperature": 0.7},
    "jsd-accumulated": {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2},
    "uld": {"use_uld_loss": True, "uld_token_merge_strategy": "bayesian", "uld_crossentropy_weight": 0.3},
    "uld-hybrid": {"use_uld_loss": True, "uld_use_hybrid_loss": True, "beta": 0.2},
}


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_one_off_policy_step_equals_trls(loss, random_tiny_model, random_teacher, tmp_path):
    """lmbda=0: the dataset's completions. The same first SGD update and logged losses as TRL's GOLDTrainer (also
    with the window split into two accumulated micro-batches: HF's `num_items_in_batch` normalizes the JSD)."""
    settings = {"lmbda": 0.0, **LOSSES[loss]}
    theirs = _one_step(TRLGOLDTrainer, TRLGOLDConfig, random_tiny_model, random_teacher, tmp_path / "trl", **settings)
    ours = _one_step(GOLDTrainer, GOLDConfig, random_tiny_model, random_teacher, tmp_path / "ours", **settings)
    uses_uld = settings.get("use_uld_loss", False)
    assert isinstance(ours.uld_loss_fn, ULDLoss) if uses_uld else ours.uld_loss_fn is None
    assert isinstance(theirs.uld_loss_fn, TRLULDLoss) if uses_uld else theirs.uld_loss_fn is None
    keys = ("loss", "off_policy_loss", *(("matched_loss", "unmatched_loss") if "hybrid" in loss else ()))
    _assert_same_step(theirs, ours, keys)


def test_one_on_policy_step_equals_trls(random_tiny_model, random_teacher, tmp_path):
    """lmbda=1: the student samples the completions (the same seed: the same samples), their byte offsets derived
    from the sampled tokens for ULD."""
    settings = {"lmbda": 1.0, "use_uld_loss": True, "uld_use_hybrid_loss": True}
    theirs = _one_step(TRLGOLDTrainer, TRLGOLDConfig, random_tiny_model, random_teacher, tmp_path / "trl", **settings)
    ours = _one_step(GOLDTrainer, GOLDConfig, random_tiny_model, random_teacher, tmp_path / "ours", **settings)
    _assert_same_step(theirs, ours, ("loss", "on_policy_loss"))


def test_one_step_across_tokenizers_equals_trls(random_tiny_model, cross_teacher, tmp_path):
    """A teacher with another tokenizer: TRL re-tokenizes the text for it; the byte-aligned hybrid ULD port gives
    TRL's update."""
    settings = {"lmbda": 0.0, "use_uld_loss": True, "uld_use_hybrid_loss": True}
    theirs = _one_step(TRLGOLDTrainer, TRLGOLDConfig, random_tiny_model, cross_teacher, tmp_path / "trl", **settings)
    ours = _one_step(GOLDTrainer, GOLDConfig, random_tiny_model, cross_teacher, tmp_path / "ours", **settings)
    assert ours.teacher_tokenizer.get_vocab() != ours.processing_class.get_vocab()
    shared = len(ours.uld_loss_fn.overlap.teacher_ids)
    assert 0 < shared < len(ours.teacher_tokenizer)  # a partial overlap: both hybrid parts are trained
    assert logged(ours, "unmatched_loss")[0] > 0 and logged(ours, "matched_loss")[0] > 0
    _assert_same_step(theirs, ours, ("loss", "off_policy_loss", "matched_loss", "unmatched_loss"))


# ---- checks before the model loads ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"lmbda": 1.5}, r"lmbda=1.5 is not valid; must be in \[0, 1\]"),
        ({"temperature": 0.0}, r"temperature=0.0 is not valid; must be > 0"),
        ({"top_p": 0.0}, r"top_p=0.0 is not valid; must be in \(0, 1\]"),
        ({"top_k": -1}, r"top_k=-1 is not valid; must be an integer >= 0"),
        ({"max_completion_length": 0}, r"max_completion_length=0 is not valid; must be an integer >= 1"),
        ({"use_uld_loss": True, "uld_token_merge_strategy": "first"},
         r"uld_token_merge_strategy='first' is not valid; must be one of 'observed', 'bayesian'"),
        ({"use_uld_loss": True, "uld_teacher_temperature": 0.0},
         r"uld_teacher_temperature=0.0 is not valid; must be a finite number > 0"),
        ({"use_uld_loss": True, "uld_use_hybrid_loss": True, "uld_hybrid_matched_weight": 0.5},
         r"uld_hybrid_matched_weight=0.5 and uld_hybrid_unmatched_weight=None are not valid together"),
    ],
)  # fmt: skip
def test_bad_config(overrides, match, tmp_path):
    with pytest.raises(ValueError, match=rf"^GOLDConfig: {match}"):
        _config(GOLDConfig, tmp_path, **overrides)


def test_uld_fields_are_checked_only_when_uld_trains(tmp_path):
    """As in TRL: with `use_uld_loss=False` the ULD fields are unused and unchecked."""
    config = _config(GOLDConfig, tmp_path, uld_token_merge_strategy="first")
    assert config.policy_loss_name == "trl_ext.losses.gold.generalized_jsd_loss"
    assert _config(GOLDConfig, tmp_path, use_uld_loss=True).policy_loss_name == "trl_ext.losses.gold.ULDLoss"


def test_seq_kd_is_refused_where_trl_ignores_it(tmp_path):
    """Deliberate difference: TRL 1.16's GOLDConfig accepts `seq_kd=True` and its trainer never reads it (no teacher
    sampling happens); trl_ext refuses it, naming the field."""
    assert _config(TRLGOLDConfig, tmp_path, seq_kd=True).seq_kd is True
    with pytest.raises(ValueError, match=r"^GOLDConfig: seq_kd=True is not valid; must be False: TRL 1.16's"):
        _config(GOLDConfig, tmp_path, seq_kd=True)


def test_no_teacher_is_an_error_naming_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"^GOLDTrainer: no teacher: pass teacher_model .* teacher_model_name_or_path"):
        GOLDTrainer(MISSING_MODEL, args=_config(GOLDConfig, tmp_path), train_dataset=toy_expert_dataset(4))


def test_a_dataset_without_text_is_refused_before_the_model_loads(tmp_path):
    args = _config(GOLDConfig, tmp_path, teacher_model_name_or_path=MISSING_MODEL)
    bad = Dataset.from_dict({"question": ["a"], "answer": ["b"]})
    with pytest.raises(
        ValueError,
        match=r"^GOLDTrainer: the train_dataset has no column TRL's GOLD preparation "
        r"reads \(its columns: 'question', 'answer'\)",
    ):
        GOLDTrainer(MISSING_MODEL, args=args, train_dataset=bad)  # fmt: skip
    with pytest.raises(ValueError, match=r"the eval_dataset\['held_out'\] has no column"):
        GOLDTrainer(MISSING_MODEL, args=args, train_dataset=toy_expert_dataset(4), eval_dataset={"held_out": bad})


def test_trl_config_is_converted_and_other_configs_refused(random_tiny_model, random_teacher, tmp_path):
    trl_args = _config(TRLGOLDConfig, tmp_path, lmbda=0.25, use_uld_loss=True)
    trainer = GOLDTrainer(
        random_tiny_model, random_teacher, args=trl_args, train_dataset=toy_expert_dataset(4),
        processing_class=build_tokenizer(),
    )  # fmt: skip
    assert type(trainer.args) is GOLDConfig and (trainer.args.lmbda, trainer.args.use_uld_loss) == (0.25, True)
    assert isinstance(trainer.uld_loss_fn, ULDLoss) and trainer.generalized_jsd_loss is not None
    with pytest.raises(TypeError, match="another trl_ext trainer's config"):
        GOLDTrainer(MISSING_MODEL, random_teacher, args=trl_ext.SFTConfig(**CPU, output_dir=str(tmp_path)))


def test_teacher_from_the_config(random_tiny_model, random_teacher, tmp_path):
    args = _config(GOLDConfig, tmp_path, teacher_model_name_or_path=random_teacher)
    trainer = GOLDTrainer(random_tiny_model, args=args, train_dataset=toy_expert_dataset(4))
    assert trainer.teacher_model.config._name_or_path == random_teacher
    assert trainer.algorithm == "gold" and trainer._name == "GOLD (trl_ext)"  # the model card's name


# ---- the script ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_script_distills_the_toy_teacher(toy_cache, tiny_model, tiny_teacher, tmp_path):
    """The embedded default: the toy student learns the teacher's answers (~80 s of CPU time)."""
    from trl_ext.scripts.gold import main

    trainer = main(["--output_dir", str(tmp_path), "--save_strategy", "no", "--eval_strategy", "no"])
    assert type(trainer) is GOLDTrainer and trainer.args.teacher_model_name_or_path == tiny_teacher
    rewards = trainer.toy_task_rewards
    assert rewards["student_before"] < 0.3 and rewards["student_after"] > 0.7 and rewards["teacher"] > 0.7
    losses = logged(trainer, "loss")
    assert losses[-1] < 0.2 * losses[0]


def test_script_trains_a_few_steps(toy_cache, tiny_model, tiny_teacher, tmp_path, capsys):
    """A short off-policy run of the embedded default (16 steps at a higher learning rate, ~25 s): the toy teacher is
    the default, the distillation loss falls, and the toy task's reward of the student's samples, reported before
    and after, rises toward the teacher's."""
    from trl_ext.scripts.gold import main

    argv = ["--output_dir", str(tmp_path), "--save_strategy", "no", "--eval_strategy", "no", "--max_steps", "16"]
    trainer = main([*argv, "--logging_steps", "4", "--learning_rate", "3e-3", "--lmbda", "0.0"])
    assert trainer.args.teacher_model_name_or_path == tiny_teacher and trainer.args.use_uld_loss
    losses = logged(trainer, "loss")
    assert len(losses) == 4 and losses[-1] < 0.2 * losses[0]
    rewards = trainer.toy_task_rewards
    assert rewards["student_before"] < 0.3 and rewards["student_after"] > rewards["student_before"] + 0.4
    assert "Toy task reward of the student's samples on 64 held-out prompts" in capsys.readouterr().out
