"""Train trl_ext's CPT trainer (continued pretraining) with TRL's command-line conventions (the code behind
`examples/train_cpt.py`).

    accelerate launch examples/train_cpt.py                                    # the offline tiny default
    accelerate launch examples/train_cpt.py --config configs/cpt.yaml \\
        --model_name_or_path Qwen/Qwen2.5-0.5B --dataset_name <plain-text dataset> --dataset_text_field text

Arguments are parsed by `trl.TrlParser` into TRL's `ScriptArguments`, `trl_ext.CPTConfig` (every `trl.SFTConfig` flag
plus `--sft_loss_fn`, `--cutoff_prob` and `--loss_agg_mode`), `trl.ModelConfig` and `trl.DatasetMixtureConfig`, as
`trl sft` does; `--config recipe.yaml` sets any of them.

Without `--model_name_or_path`, the script trains the package's embedded default: the tiny offline model of
`trl_ext.toy` on the toy task as plain text (`toy_text_dataset`: "Repeat the letter c: c c c", one row each),
evaluating on held-out rows (the `--dataset_test_split` split, default "test"). A user dataset without the
`--dataset_text_field` column (default `text`), or with a prompt-completion or chat column, is an error naming the flag
and the dataset's columns, before the model loads. The toy defaults (`CPT_TRAINING`), the run summary and the other
usage errors are `DatasetScript`'s (`_dataset_script.py`).
"""

from __future__ import annotations

from typing import Any

from datasets import Dataset

from ..toy import SFT_TRAINING, toy_expert_dataset
from ._dataset_script import DatasetScript

CPT_TRAINING: dict[str, Any] = dict(SFT_TRAINING)
"""`CPTConfig` keyword arguments of the CPT toy run on `toy_text_dataset`: the SFT toy run's."""


def toy_text_dataset(num_rows: int = 256, seed: int = 0) -> Dataset:
    """The toy task as plain text: `num_rows` rows of one column `text`, each a prompt and its correct answer
    ("Repeat the letter c: c c c", `trl_ext.toy.toy_expert_dataset`'s rows joined), letters balanced and shuffled with
    `seed`. Built offline. The letter after "letter" is random (no model can predict it); the answer's letters can
    be learnt from the prompt."""
    demos = toy_expert_dataset(num_rows, seed=seed)
    return Dataset.from_dict({"text": [p + c for p, c in zip(demos["prompt"], demos["completion"], strict=True)]})


SCRIPT = DatasetScript(
    algorithm="cpt",
    toy_data=toy_text_dataset,
    toy_training=CPT_TRAINING,
    toy_training_name="trl_ext.scripts.cpt.CPT_TRAINING",
    data_description="the toy task as plain text (trl_ext.scripts.cpt.toy_text_dataset)",
)
make_parser, train, main = SCRIPT.make_parser, SCRIPT.train, SCRIPT.main
