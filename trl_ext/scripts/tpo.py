"""Train trl_ext's TPO trainer with TRL's command-line conventions (the code behind `examples/train_tpo.py`).

    accelerate launch examples/train_tpo.py                                    # the offline tiny default
    accelerate launch examples/train_tpo.py --config configs/tpo.yaml \\
        --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --dataset_name <triple-preference dataset>

Arguments are parsed by `trl.TrlParser` into TRL's `ScriptArguments` (`--dataset_name`, `--dataset_train_split`,
...), `trl_ext.TPOConfig` (every flag of TRL's `TPOConfig`: `--loss_type`, `--beta`, `--tpo_alpha`, ...),
`trl.ModelConfig` and `trl.DatasetMixtureConfig`; `--config recipe.yaml` sets any of them. A user dataset without
`chosen`, `rejected` and `reference` columns is an error naming the flag and its columns, before the model loads.

Without `--model_name_or_path`, the script trains the package's embedded default: the tiny offline model of
`trl_ext.toy` on the toy task's triples (`toy_triple_dataset`: the prompt's letter repeated is chosen, another letter
rejected, and an expert demonstration of the prompt's letter the reference), evaluating on held-out triples (the
`--dataset_test_split` split, default "test"). The toy defaults (`TPO_TRAINING`), the run summary and the usage
errors are `DatasetScript`'s (`_dataset_script.py`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from datasets import Dataset

from ..toy import DPO_TRAINING, toy_expert_dataset, toy_preference_dataset
from ._dataset_script import DatasetScript

TPO_TRAINING: dict[str, Any] = {**DPO_TRAINING, "beta": 0.1}
"""`TPOConfig` keyword arguments of the TPO toy run on `toy_triple_dataset`: the DPO toy run's, with β = 0.1 (TRL's
0.01 suits long completions; the toy's have 2 to 6 tokens). The held-out preference accuracy goes from ~0.5 to 1."""


def toy_triple_dataset(num_triples: int = 512, seed: int = 0, conversational: bool = False) -> Dataset:
    """`num_triples` rows of the toy task for TPO, built offline: `prompt`, `chosen` (the prompt's letter repeated 2 to
    6 times) and `rejected` (another letter, as often) from `toy_preference_dataset`, `reference` (the gold
    completion: the prompt's letter repeated, an independently drawn length) from `toy_expert_dataset`, and `target`.
    Letters are balanced and shuffled with `seed`; use another seed for held-out triples. `conversational=True` gives
    conversational rows, as the two datasets do."""
    pairs = toy_preference_dataset(num_triples, seed=seed, conversational=conversational)
    demos = toy_expert_dataset(num_triples, seed=seed + 1, conversational=conversational)
    by_letter: dict[str, list[Any]] = defaultdict(list)  # each letter's demonstrations, in order
    for letter, completion in zip(demos["target"], demos["completion"], strict=True):
        by_letter[letter].append(completion)
    # both datasets balance the letters over the same number of rows: each pair takes its letter's next demonstration
    queues = {letter: iter(completions) for letter, completions in by_letter.items()}
    references = [next(queues[letter]) for letter in pairs["target"]]
    return pairs.add_column("reference", references)


SCRIPT = DatasetScript(
    algorithm="tpo",
    toy_data=toy_triple_dataset,
    toy_training=TPO_TRAINING,
    toy_training_name="trl_ext.scripts.tpo.TPO_TRAINING",
    data_description="the toy task's triples (trl_ext.scripts.tpo.toy_triple_dataset)",
)
make_parser, train, main = SCRIPT.make_parser, SCRIPT.train, SCRIPT.main
