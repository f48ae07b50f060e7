"""Model cards: `save_model` (and checkpoints) write a card naming the algorithm, its settings and its paper."""

from __future__ import annotations

import os

import pytest
from trainer_helpers import cpu_config, length_reward

import trl_ext
from trl_ext.cli import describe_algorithm, list_algorithms
from trl_ext.toy import build_tokenizer, toy_dataset, toy_preference_dataset
from trl_ext.trainers.core.model_card import paper


def _card(path) -> str:
    with open(os.path.join(path, "README.md")) as f:
        return f.read()


def test_grpo_family_card_on_save_model_and_checkpoints(tiny_model, tmp_path):
    args = cpu_config(trl_ext.SAPOConfig, str(tmp_path / "run"), tau_neg=1.3, save_strategy="steps", save_steps=2)
    trainer = trl_ext.SAPOTrainer(
        model=tiny_model, reward_funcs=length_reward, args=args, train_dataset=toy_dataset(16),
        processing_class=build_tokenizer(),
    )  # fmt: skip
    trainer.train()
    trainer.save_model(str(tmp_path / "final"))
    card = _card(tmp_path / "final")
    assert "trained with SAPO (trl_ext), a method introduced in [Soft Adaptive Policy Optimization]" in card
    assert "https://huggingface.co/papers/2511.20347" in card and "arXiv:2511.20347" in card  # link and BibTeX
    assert "| trainer / config | `trl_ext.SAPOTrainer` / `trl_ext.SAPOConfig` |" in card
    assert "| policy loss | `sapo` |" in card and "| advantage | `grpo` |" in card
    assert "| `tau_neg` | `1.3` |" in card and "| `tau_pos` | `1.0` |" in card  # the run's values
    assert "## trl_ext" in _card(tmp_path / "run")  # TRL writes the card with each checkpoint; ours extends it
    assert card.count("## trl_ext") == 1


def test_dpo_and_distillation_cards(tiny_model, tmp_path):
    dpo = trl_ext.DPOTrainer(
        model=tiny_model,
        args=trl_ext.DPOConfig(output_dir=str(tmp_path / "dpo"), use_cpu=True, bf16=False, max_steps=1,
                               report_to="none", save_strategy="no", kl_coef=0.05, label_smoothing=0.1),
        train_dataset=toy_preference_dataset(8),
        processing_class=build_tokenizer(),
    )  # fmt: skip
    dpo.train()
    dpo.save_model()
    card = _card(tmp_path / "dpo")
    assert "trained with DPO (trl_ext)" in card and "2305.18290" in card
    assert "| KL term | `k2`, coefficient 0.05 |" in card and "| `label_smoothing` | `0.1` |" in card

    teacher = os.path.join(os.path.dirname(tiny_model), "tiny-qwen2-v2")
    distill = trl_ext.OnPolicyDistillTrainer(
        model=tiny_model,
        teacher_model=teacher,
        args=cpu_config(trl_ext.OnPolicyDistillConfig, str(tmp_path / "opd"), max_steps=1, kl_coef=0.5),
        train_dataset=toy_dataset(8),
        processing_class=build_tokenizer(),
    )
    distill.save_model()
    card = _card(tmp_path / "opd")
    assert "trained with On-policy distillation (trl_ext)" in card and "2306.13649" in card
    assert "| `kl_coef` | `0.5` |" in card and "| policy loss | `ppo` |" in card


TRAINED = sorted(name for name, spec in trl_ext.ALGORITHMS.items() if spec.has_trainer)


@pytest.mark.parametrize("algorithm", [name for name in TRAINED if trl_ext.get_algorithm(name).paper is not None])
def test_every_trainer_has_a_paper(algorithm):
    """The card's citation is the algorithm record's paper (the one place a citation is stated)."""
    cited = trl_ext.get_algorithm(algorithm).paper
    entry = paper(algorithm)
    assert (entry["title"], entry["id"]) == (cited.title, cited.arxiv)
    assert f"year    = {2000 + int(cited.arxiv[:2])}" in entry["citation"]
    assert entry["citation"].startswith(f"@article{{{algorithm}") and entry["id"] in entry["citation"]
    assert f"arXiv {cited.arxiv}" in list_algorithms()  # `trl-ext list` prints the same citation
    assert str(cited) in describe_algorithm(algorithm)


def test_card_names_a_local_base_model(tiny_model, random_tiny_model, tmp_path):
    """TRL names only Hub ids ("a fine-tuned version of [None](https://huggingface.co/None)" for a local model): the
    card names the toy model, and any other local model by its directory."""
    args = cpu_config(trl_ext.SAPOConfig, str(tmp_path / "toy"), max_steps=1)
    trainer = trl_ext.SAPOTrainer(
        model=tiny_model, reward_funcs=length_reward, args=args, train_dataset=toy_dataset(8),
        processing_class=build_tokenizer(),
    )  # fmt: skip
    trainer.train()
    trainer.save_model()
    card = _card(tmp_path / "toy")
    assert "[None]" not in card and "huggingface.co/None" not in card
    toy = "fine-tuned version of `tiny-qwen2-v2` (trl_ext's offline toy model, `trl_ext.toy.tiny_model_path()`)"
    assert toy in card

    local = trl_ext.GRPOTrainer(
        model=random_tiny_model, reward_funcs=length_reward, train_dataset=toy_dataset(8),
        args=cpu_config(trl_ext.GRPOConfig, str(tmp_path / "local")), processing_class=build_tokenizer(),
    )  # fmt: skip
    local.save_model()  # no training needed for the card
    card = _card(tmp_path / "local")
    name = os.path.basename(random_tiny_model)
    assert "[None]" not in card and f"fine-tuned version of `{name}` (a local model)" in card
