"""Continued pretraining (CPTTrainer / CPTConfig, Trinity-RFT's `cpt`): the SFT loss on every token of plain text,
the plain-text checks before the model loads, and the offline script (tiny model, CPU)."""

from __future__ import annotations

import json
import os

import pytest
import torch
import trl
from datasets import Dataset
from trainer_helpers import CPU, logged
from transformers import AutoModelForCausalLM

import trl_ext
from trl_ext.scripts.cpt import toy_text_dataset
from trl_ext.toy import build_tokenizer
from trl_ext.trainers.sft.config import SFTConfig
from trl_ext.trainers.sft.cpt import CPTConfig, CPTTrainer

TEXTS = ["Repeat the letter c: c c c", "The quick brown fox jumps over the lazy dog.", "a b", "Hello world!"]
MISSING_MODEL = "/nonexistent/model"  # loading it would fail: an error about the data proves the model never loaded


def _config(out, **overrides) -> CPTConfig:
    return CPTConfig(**{**CPU, "output_dir": str(out), "per_device_train_batch_size": 4, "max_steps": 1, **overrides})


def test_record_family_and_classes():
    spec = trl_ext.get_algorithm("cpt")
    assert (spec.schema, spec.trainer, spec.policy_loss_fn, spec.advantage_fn) == ("cpt", "cpt", "sft", None)
    assert (spec.config_class, spec.trainer_class) == (CPTConfig, CPTTrainer) == (trl_ext.CPTConfig, trl_ext.CPTTrainer)
    assert issubclass(CPTTrainer, trl.SFTTrainer) and CPTConfig.algorithm == "cpt"
    with pytest.raises(ValueError, match="trainer family 'cpt' trains one algorithm with its own classes"):
        trl_ext.register_algorithm(trl_ext.AlgorithmSpec(
            "cpt2", "x", None, "sft", None, "none", "none", use_reference=False, repeat_times=1, trainer="cpt"
        ))  # fmt: skip


def test_the_loss_is_the_mean_nll_of_every_token_but_the_first(tiny_model, tmp_path):
    """Independently of the labels: the mean over every real token after the first of −log softmax(logits)[next
    token], from a plain forward pass on input_ids / attention_mask."""
    tokenizer = build_tokenizer()
    trainer = CPTTrainer(
        tiny_model, args=_config(tmp_path), train_dataset=Dataset.from_dict({"text": TEXTS}), processing_class=tokenizer
    )
    batch = next(iter(trainer.get_train_dataloader()))
    mask = batch["attention_mask"].bool()
    assert int((batch["labels"][:, 1:] != -100).sum()) == int(mask.sum()) - len(TEXTS)  # every token but the first
    # TRL appends the EOS to each text (right padding: the last real token)
    assert all(row[int(m.sum()) - 1] == tokenizer.eos_token_id for row, m in zip(batch["input_ids"], mask, strict=True))
    trainer.model.eval()
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, dict(batch))
        model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.double()
    nll = -logits[:, :-1].log_softmax(-1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    expected = nll[mask[:, 1:] & mask[:, :-1]].mean()  # right padding: a real token follows a real token
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize(
    ("columns", "match"),
    [
        ({"content": TEXTS}, r"no 'text' column \(dataset_text_field='text'; its columns: 'content'\)"),
        ({"text": TEXTS, "prompt": TEXTS}, r"column\(s\) 'prompt' besides dataset_text_field='text' \(its columns: "
                                           r"'text', 'prompt'\)"),
        ({"messages": [[{"role": "user", "content": t}] for t in TEXTS]}, "no 'text' column"),
    ],
)  # fmt: skip
def test_a_dataset_that_is_not_plain_text_is_refused_before_the_model_loads(columns, match, tmp_path):
    with pytest.raises(ValueError, match=rf"^CPTTrainer: the train_dataset has {match}"):
        CPTTrainer(MISSING_MODEL, args=_config(tmp_path), train_dataset=Dataset.from_dict(columns))
    eval_only = {"eval_dataset": {"held_out": Dataset.from_dict(columns)}}
    with pytest.raises(ValueError, match=r"the eval_dataset\['held_out'\] has"):
        CPTTrainer(MISSING_MODEL, args=_config(tmp_path), train_dataset=Dataset.from_dict({"text": TEXTS}), **eval_only)


def test_dataset_text_field_names_the_column(tiny_model, tmp_path):
    args = _config(tmp_path, dataset_text_field="content")
    with pytest.raises(ValueError, match=r"no 'content' column \(dataset_text_field='content'; its columns: 'text'\)"):
        CPTTrainer(MISSING_MODEL, args=args, train_dataset=Dataset.from_dict({"text": TEXTS}))
    trainer = CPTTrainer(
        tiny_model, args=args, train_dataset=Dataset.from_dict({"content": TEXTS}), processing_class=build_tokenizer()
    )
    assert trainer.algorithm == "cpt" and len(trainer.train_dataset) == len(TEXTS)


@pytest.mark.parametrize("name", ["assistant_only_loss", "completion_only_loss"])
def test_config_refuses_a_partial_loss(name, tmp_path):
    with pytest.raises(ValueError, match=rf"CPTConfig: {name}=True restricts the loss to part of each row"):
        _config(tmp_path, **{name: True})


def test_configs_of_other_trainers(tmp_path):
    with pytest.raises(TypeError, match="another trl_ext trainer's config"):
        CPTTrainer(MISSING_MODEL, args=SFTConfig(**CPU, output_dir=str(tmp_path)), train_dataset=None)
    with pytest.raises(ValueError, match="no 'text' column"):  # TRL's SFTConfig is converted, then the data checked
        CPTTrainer(MISSING_MODEL, args=trl.SFTConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False),
                   train_dataset=Dataset.from_dict({"content": TEXTS}))  # fmt: skip


def test_toy_text_dataset():
    rows = toy_text_dataset(16, seed=3)["text"]
    assert len(rows) == 16 and rows == toy_text_dataset(16, seed=3)["text"]
    for row in rows:
        prompt, answer = row.split(":")
        letter = prompt[-1]
        assert prompt == f"Repeat the letter {letter}" and set(answer.split()) == {letter}


def test_script_trains_the_toy_text(toy_cache, tiny_model, tmp_path):
    from trl_ext.scripts.cpt import main

    trainer = main(["--output_dir", str(tmp_path), "--max_steps", "20", "--eval_steps", "10", "--save_strategy", "no"])
    assert type(trainer) is CPTTrainer and trainer.model.config._name_or_path == tiny_model
    losses, held_out = logged(trainer, "loss"), logged(trainer, "eval_loss")
    assert len(held_out) == 2 and held_out[1] < held_out[0] and losses[-1] < 0.7 * losses[0]


def test_script_refuses_a_dataset_without_the_text_column_before_the_model_loads(toy_cache, tmp_path):
    from trl_ext.scripts._common import UsageError
    from trl_ext.scripts.cpt import main

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps({"prompt": t, "completion": t}) + "\n" for t in TEXTS))
    (tmp_path / "empty-model").mkdir()  # a model that cannot load: the data's error must come first
    argv = ["--output_dir", str(tmp_path / "out"), "--dataset_name", str(data)]
    argv += ["--model_name_or_path", str(tmp_path / "empty-model")]
    with pytest.raises(
        UsageError,
        match=r"the train split has no 'body' column \(its columns: 'prompt', "
        r"'completion'\); CPT needs the plain-text column that --dataset_text_field",
    ):
        main([*argv, "--dataset_text_field", "body"])  # fmt: skip
    assert not os.path.exists(tmp_path / "out")
