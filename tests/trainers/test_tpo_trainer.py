"""The TPO trainer: TRL's experimental TPOTrainer with trl_ext's TPO loss (tiny model, CPU).

* One SGD step of `trl_ext.TPOTrainer` and of `trl.experimental.tpo.TPOTrainer` from the same weights, data and seed
  gives the same loss, metrics and updated parameters, for every `loss_type` and with `tpo_alpha` 0 (TRL's batch
  then has no reference rows).
* With the window normalization, 2 accumulation steps of 4 + 2 triples give the update of one batch of 6 (TRL's
  per-micro-batch means differ).
* The record, the config's checks, TRL's config converted, the dataset check before the model loads, evaluation on
  chat triples, and the offline script learning the toy task.
"""

from __future__ import annotations

import os

import pytest
import torch
from datasets import Dataset
from trainer_helpers import CPU, changed, logged, snapshot
from transformers import AutoModelForCausalLM
from trl.experimental.tpo import TPOConfig as TRLTPOConfig
from trl.experimental.tpo import TPOTrainer as TRLTPOTrainer

import trl_ext
from trl_ext import TPOConfig, TPOTrainer
from trl_ext.losses.tpo import TPOLoss
from trl_ext.scripts.tpo import toy_triple_dataset
from trl_ext.toy import TEST_PROMPTS, TEST_SEED, build_tokenizer

MISSING_MODEL = "/nonexistent/model"  # loading it would fail: an error about the data proves the model never loaded


def _config(cls, out, **overrides):
    settings = {**CPU, "output_dir": str(out), "per_device_train_batch_size": 4, "max_steps": 1, "learning_rate": 1e-3}
    return cls(**{**settings, **overrides})


def _trainer(cls, config_class, model, out, dataset, **overrides):
    return cls(
        model=model,
        args=_config(config_class, out, **overrides),
        train_dataset=dataset,
        processing_class=build_tokenizer(),
    )


def test_attached_to_the_algorithm_table():
    spec = trl_ext.get_algorithm("tpo")
    assert (spec.trainer_class, spec.config_class) == (TPOTrainer, TPOConfig)
    assert (spec.trainer, spec.policy_loss_fn, spec.advantage_fn, spec.kl_loss_fn) == ("tpo", "tpo", None, "none")
    assert spec.paper.arxiv == "2405.16681" and spec.family.script == "tpo"
    assert (
        issubclass(TPOTrainer, TRLTPOTrainer) and issubclass(TPOConfig, TRLTPOConfig) and TPOTrainer.algorithm == "tpo"
    )
    args = TPOConfig(output_dir="unused", **CPU)
    loss = args.components.policy_loss
    assert type(loss) is TPOLoss and loss.name == "tpo"
    trl_args = TRLTPOConfig(output_dir="unused", **CPU)
    assert loss.args == {name: getattr(trl_args, name) for name in TPOLoss.default_args()}  # TRL's defaults
    options = {"loss_type": "tpo-l", "beta": 0.2, "label_smoothing": 0.1, "tpo_alpha": 0.5, "tpo_l_gamma": 1.0}
    assert TPOConfig(output_dir="unused", **CPU, **options).components.policy_loss.args == options


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"loss_type": "sigmoid_norm"}, r"loss_type='sigmoid_norm' is not valid; must be one of 'sigmoid', 'hinge', "),
        ({"beta": -0.1}, r"beta=-0.1 is not valid; must be > 0"),
        ({"label_smoothing": 0.7}, r"label_smoothing=0.7 is not valid; must be in \[0, 0.5\)"),
        ({"tpo_alpha": -1.0}, r"tpo_alpha=-1.0 is not valid; must be >= 0"),
        ({"tpo_l_gamma": float("nan")}, r"tpo_l_gamma=nan is not valid; must be a finite number"),
    ],
)
def test_bad_config(overrides, message):
    """Errors at construction, naming the config, the field and what it may be (TRL checks none of these)."""
    with pytest.raises(ValueError, match=rf"^TPOConfig \(policy loss\): tpo: {message}"):
        TPOConfig(output_dir="unused", **{**CPU, **overrides})
    TRLTPOConfig(output_dir="unused", **{**CPU, **overrides})  # TRL's config takes it


def test_trls_config_is_converted(random_tiny_model, tmp_path):
    trainer = TPOTrainer(
        model=random_tiny_model,
        args=_config(TRLTPOConfig, tmp_path, loss_type="ipo", beta=0.3, tpo_alpha=0.0),
        train_dataset=toy_triple_dataset(8),
        processing_class=build_tokenizer(),
    )
    assert type(trainer.args) is TPOConfig
    assert trainer.policy_loss_fn.args == {**TPOLoss.default_args(), "loss_type": "ipo", "beta": 0.3, "tpo_alpha": 0.0}
    with pytest.raises(TypeError, match=r"args must be a trl_ext.TPOConfig .*got trl.DPOConfig"):
        import trl

        TPOTrainer(model=random_tiny_model, args=_config(trl.DPOConfig, tmp_path), train_dataset=toy_triple_dataset(8))


UPDATE_CASES = {
    "sigmoid": {"label_smoothing": 0.1},
    "sigmoid-no-nll": {"tpo_alpha": 0.0},
    "hinge": {"loss_type": "hinge", "tpo_alpha": 0.5},
    "ipo": {"loss_type": "ipo", "beta": 0.5},
    "tpo-l": {"loss_type": "tpo-l", "tpo_l_gamma": 0.2, "label_smoothing": 0.2, "tpo_alpha": 2.0},
}


@pytest.mark.parametrize("case", list(UPDATE_CASES))
def test_first_update_equals_trls(random_tiny_model, tmp_path, case):
    """One SGD step from the same weights on the same triples: the same loss, metrics and parameters."""
    common = {"optim": "sgd", "learning_rate": 1.0, "max_grad_norm": 0.0, "beta": 0.1, **UPDATE_CASES[case]}
    dataset = toy_triple_dataset(8, seed=3)
    theirs = _trainer(TRLTPOTrainer, TRLTPOConfig, random_tiny_model, tmp_path / "trl", dataset, **common)
    before = snapshot(theirs.model)
    theirs.train()
    ours = _trainer(TPOTrainer, TPOConfig, random_tiny_model, tmp_path / "ours", dataset, **common)
    ours.train()
    assert changed(before, theirs.model)
    for (name, a), b in zip(theirs.model.named_parameters(), ours.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    assert logged(ours, "tpo_loss") == pytest.approx(logged(theirs, "loss"), rel=1e-5)
    assert logged(ours, "loss") == pytest.approx(logged(theirs, "loss"), rel=1e-5)
    for theirs_name, ours_name in [
        ("rewards/chosen", "chosen_reward"),
        ("rewards/rejected", "rejected_reward"),
        ("rewards/accuracies", "accuracy_mean"),
        *((name, name) for name in ("rewards/margins", "logps/chosen", "logps/rejected", "logits/chosen")),
        *((name, name) for name in ("logits/rejected", "mean_token_accuracy", "entropy", "num_tokens")),
    ]:
        assert logged(ours, ours_name) == pytest.approx(logged(theirs, theirs_name), rel=1e-4, abs=1e-6), ours_name
    assert (logged(ours, "nll_loss")[0] > 0) == (ours.tpo_alpha != 0)


def test_gradient_accumulation_is_normalized_over_the_window(random_tiny_model, tmp_path, float_tolerance):
    """6 triples in one optimizer step, as 1 × 6 or as 4 + 2 (accumulation, an uneven last micro-batch): the same
    update with window normalization; TRL's per-micro-batch means weight the 2 triples like the 4 and differ."""
    dataset = toy_triple_dataset(6, seed=4)
    common = dict(optim="sgd", learning_rate=1.0, max_grad_norm=0.0, beta=0.5, num_train_epochs=1)
    one = _trainer(TPOTrainer, TPOConfig, random_tiny_model, tmp_path / "one", dataset, per_device_train_batch_size=6,
                   **common)  # fmt: skip
    one.train()
    split = dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, **common)
    ours = _trainer(TPOTrainer, TPOConfig, random_tiny_model, tmp_path / "split", dataset, **split)
    ours.train()
    tokens = logged(one, "num_tokens")[-1]
    for (name, a), b in zip(one.model.named_parameters(), ours.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, **float_tolerance(torch.float32, tokens, a.abs().max()), msg=name)
    assert logged(ours, "tpo_loss") == pytest.approx(logged(one, "tpo_loss"), rel=1e-5)
    theirs = _trainer(TRLTPOTrainer, TRLTPOConfig, random_tiny_model, tmp_path / "trl", dataset, **split)
    theirs.train()
    pairs = zip(one.model.parameters(), theirs.model.parameters(), strict=True)
    assert any(not torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in pairs)


@pytest.mark.parametrize("column", ["reference", "rejected"])
def test_a_dataset_without_the_triple_columns_is_refused_before_the_model_loads(column, tmp_path):
    rows = toy_triple_dataset(4).remove_columns(column)
    with pytest.raises(ValueError, match=rf"^TPOTrainer: the train_dataset has no '{column}' column \(its columns: "):
        TPOTrainer(MISSING_MODEL, args=_config(TPOConfig, tmp_path), train_dataset=rows)
    with pytest.raises(ValueError, match=r"^TPOTrainer: the eval_dataset\['held_out'\] has no"):
        TPOTrainer(MISSING_MODEL, args=_config(TPOConfig, tmp_path), train_dataset=toy_triple_dataset(4),
                   eval_dataset={"held_out": rows})  # fmt: skip


def test_quantization_config_needs_a_model_path(random_tiny_model, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(random_tiny_model)
    with pytest.raises(ValueError, match=r"^TPOTrainer: quantization_config applies when the model is loaded from"):
        TPOTrainer(model, args=_config(TPOConfig, tmp_path), train_dataset=toy_triple_dataset(4),
                   quantization_config=object())  # fmt: skip
    args = _config(TPOConfig, tmp_path, model_init_kwargs={"quantization_config": "set"})
    with pytest.raises(ValueError, match=r"quantization_config is given both as a trainer argument and in args"):
        TPOTrainer(random_tiny_model, args=args, train_dataset=toy_triple_dataset(4), quantization_config=object())


def test_chat_triples_and_evaluation(tiny_model, tmp_path):
    """Conversational triples go through TRL's chat template; evaluation logs the metrics with the `eval_` prefix,
    over the evaluation batch's own triples, and equals TRL's evaluation loss before training."""
    evaluation = dict(eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=8)
    common = dict(model=tiny_model, processing_class=build_tokenizer())
    data = dict(train_dataset=toy_triple_dataset(8, conversational=True))
    data["eval_dataset"] = toy_triple_dataset(8, seed=5, conversational=True)
    trainer = TPOTrainer(args=_config(TPOConfig, tmp_path / "run", max_steps=2, **evaluation), **common, **data)
    first = trainer.train_dataset[0]
    chat_end = build_tokenizer().convert_tokens_to_ids("<|im_end|>")
    assert all(chat_end in first[key] for key in ("chosen_ids", "rejected_ids", "reference_ids"))
    ours = trainer.evaluate()
    theirs = TRLTPOTrainer(args=_config(TRLTPOConfig, tmp_path / "trl", **evaluation), **common, **data).evaluate()
    assert ours["eval_tpo_loss"] == pytest.approx(theirs["eval_loss"], rel=1e-5)
    assert ours["eval_accuracy_mean"] == pytest.approx(theirs["eval_rewards/accuracies"])
    trainer.train()
    for name in ("eval_tpo_loss", "eval_nll_loss", "eval_chosen_reward", "eval_accuracy_mean", "eval_entropy"):
        assert len(logged(trainer, name)) == 1, name  # at step 2 (train() starts a new log history)
    assert logged(trainer, "eval_tpo_loss")[0] < ours["eval_tpo_loss"]  # 2 steps at learning rate 1e-3


def test_script_learns_within_20_steps_and_writes_the_card(toy_cache, tiny_model, tmp_path):
    """20 steps of the offline default (its learning rate decayed over 20 steps): the held-out preference accuracy
    rises from about a half by more than 0.15 (0.53 -> 0.73 measured); the card names the algorithm, its paper and
    its settings."""
    from trl_ext.scripts.tpo import main

    before = _preference_accuracy(
        AutoModelForCausalLM.from_pretrained(tiny_model).eval(), toy_triple_dataset(TEST_PROMPTS, seed=TEST_SEED)
    )

    argv = ["--output_dir", str(tmp_path), "--max_steps", "20", "--logging_steps", "5", "--eval_steps", "20"]
    argv += ["--tpo_l_gamma", "0.3", "--save_strategy", "no"]  # (read by loss_type tpo-l only)
    trainer = main(argv)
    assert type(trainer) is TPOTrainer and trainer.model.config._name_or_path == tiny_model
    assert trainer.args.beta == 0.1 and trainer.policy_loss_fn.tpo_l_gamma == 0.3  # the toy default; the flag
    accuracy, loss = logged(trainer, "accuracy_mean"), logged(trainer, "tpo_loss")
    assert len(loss) == 4 and loss[-1] < loss[0] and accuracy[-1] > accuracy[0]
    assert before < 0.6 and logged(trainer, "eval_accuracy_mean")[-1] > before + 0.15  # the same held-out triples
    with open(os.path.join(tmp_path, "README.md")) as f:
        card = f.read()
    assert "trained with TPO (trl_ext)" in card and "arXiv:2405.16681" in card
    assert "| policy loss | `tpo` |" in card and "| `tpo_l_gamma` | `0.3` |" in card and "| `beta` | `0.1` |" in card


def test_script_refuses_a_dataset_without_references_before_the_model_loads(toy_cache, tmp_path):
    from trl_ext.scripts._common import UsageError
    from trl_ext.scripts.tpo import main

    data = tmp_path / "data"
    data.mkdir()
    toy_triple_dataset(4).remove_columns("reference").to_json(str(data / "train.jsonl"))
    (tmp_path / "empty-model").mkdir()  # a model that cannot load: the data's error must come first
    argv = ["--output_dir", str(tmp_path / "out"), "--dataset_name", str(data)]
    with pytest.raises(UsageError, match=r"the train split has no 'reference' column \(its columns: 'prompt', "):
        main([*argv, "--model_name_or_path", str(tmp_path / "empty-model")])
    assert not os.path.exists(tmp_path / "out")


def _preference_accuracy(model, dataset: Dataset) -> float:
    """Share of triples whose chosen completion the model finds likelier than the rejected one (plain forward
    passes, summed log-probs over the completion and its EOS)."""
    tokenizer = build_tokenizer()
    wins = []
    for row in dataset:
        totals = []
        for completion in (row["chosen"], row["rejected"]):
            prompt_ids = tokenizer(row["prompt"])["input_ids"]
            ids = prompt_ids + tokenizer(completion)["input_ids"] + [tokenizer.eos_token_id]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].double()
            lp = logits.log_softmax(-1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)
            totals.append(lp[len(prompt_ids) - 1 :].sum())
        wins.append(float(totals[0] > totals[1]))
    return sum(wins) / len(wins)


@pytest.mark.slow
def test_the_script_learns_the_toy_task(toy_cache, tiny_model, tmp_path):
    """The offline default (60 steps): the held-out preference accuracy goes from about a half to 1."""
    from trl_ext.scripts.tpo import main

    held_out = toy_triple_dataset(TEST_PROMPTS, seed=TEST_SEED)
    before = _preference_accuracy(AutoModelForCausalLM.from_pretrained(tiny_model).eval(), held_out)
    trainer = main(["--output_dir", str(tmp_path), "--save_strategy", "no"])
    after = _preference_accuracy(trainer.model.eval(), held_out)
    print(f"held-out preference accuracy {before:.2f} -> {after:.2f}")
    assert before < 0.7 and after == 1.0
    assert logged(trainer, "eval_accuracy_mean")[-1] == 1.0
    nll = logged(trainer, "nll_loss")
    assert nll[-1] < 0.7 * nll[0]  # the reference completions' NLL falls too
