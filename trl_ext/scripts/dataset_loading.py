"""The training scripts' datasets, checked before the model loads: `--dataset_name` (a Hub id, a local directory, or a
local .jsonl / .json / .csv / .parquet file), `--datasets` (TRL's mixture) and `--expert_dataset_name` loaded as a
user expects, the train and test splits selected, and the columns that the family's TRL trainer reads checked.

Each mistake is a one-line `UsageError` naming the flag: a path that does not exist (instead of `datasets` calling
it an invalid Hub repo id), a split or a column that the dataset lacks (instead of a traceback from inside the
trainer, after the model has loaded)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from ._common import UsageError

DATA_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
"""The `datasets` builder that reads a local data file, by its extension (what `load_dataset(builder,
data_files=path)` needs: `load_dataset(path)` takes a file path for a Hub id)."""


def _hub_offline() -> bool:
    from datasets import config

    return bool(config.HF_HUB_OFFLINE)


def only_local(name: str) -> bool:
    """Whether `name` can only be a local path, never a Hub dataset id (`name` or `namespace/name`): it starts with
    `.`, `/` or `~`, holds a backslash or more than one `/`, or ends with a data file's extension."""
    return (
        name.startswith((".", "/", "~"))
        or "\\" in name
        or name.count("/") > 1
        or os.path.splitext(name)[1].lower() in DATA_FILE_BUILDERS
    )


def _not_found(flag: str, name: str, error: BaseException | None = None) -> UsageError:
    """The one-line error for a dataset that is neither a local path nor a Hub dataset that can be loaded."""
    where = os.path.abspath(os.path.expanduser(name))
    if only_local(name):
        return UsageError(
            f"{flag} {name}: no such file or directory ({where} does not exist; a local path, so it was not looked "
            "up on the Hub)"
        )
    if _hub_offline():
        hub = "nor a Hub dataset in the local cache (HF_HUB_OFFLINE is set, so the Hub was not asked)"
    else:
        hub = f"nor a Hub dataset that can be read ({' '.join(str(error).split())})"
    return UsageError(f"{flag} {name}: no such local directory ({where}), {hub}")


def load_named_dataset(
    name: str, flag: str, config: str | None = None, split: str | None = None, streaming: bool = False
):
    """The dataset that `flag name` names, as a user expects it loaded: a local data file with the `datasets` builder
    of its extension (`DATA_FILE_BUILDERS`; its rows are the split "train"), a local directory as
    `load_dataset(directory)` reads it (`train.jsonl`, `test.jsonl`, ... are its splits), anything else as a Hub id.
    `split`: that split only (one the dataset lacks is a `UsageError`), else every split (a `DatasetDict`)."""
    from datasets import load_dataset
    from datasets.exceptions import DatasetGenerationError

    path = os.path.expanduser(name)
    if os.path.isfile(path):
        builder = DATA_FILE_BUILDERS.get(os.path.splitext(path)[1].lower())
        if builder is None:
            raise UsageError(
                f"{flag} {name}: a file, but not a data file the scripts read (by its extension: "
                f"{', '.join(DATA_FILE_BUILDERS)}); give such a file, a directory of them, or a Hub dataset id"
            )
        if config is not None:
            raise UsageError(f"{flag} {name}: a local {builder} file has no configurations, but {config!r} was named")
        source: dict[str, Any] = {"path": builder, "data_files": path}
    else:
        if not os.path.isdir(path) and only_local(name):
            raise _not_found(flag, name)
        source = {"path": path, "name": config}
    try:
        return load_dataset(**source, split=split, streaming=streaming)
    except (FileNotFoundError, ConnectionError) as error:  # datasets' DatasetNotFoundError is a FileNotFoundError
        if os.path.isdir(path):  # a directory without data files
            raise UsageError(f"{flag} {name}: {' '.join(str(error).split())}") from error
        raise _not_found(flag, name, error) from error
    except DatasetGenerationError as error:  # a file it cannot parse, files of different columns, ...
        cause = " ".join(str(error.__cause__ or error).split())
        raise UsageError(f"{flag} {name}: datasets could not read it ({cause})") from error
    except ValueError as error:
        if split is not None and str(error).startswith("Unknown split"):
            raise UsageError(f"{flag} {name}: no split {split!r} ({error})") from error
        raise


def _mixture_entry(entry: Any) -> Any:
    """A `--datasets` entry whose `path` is a local data file read with its extension's builder (`datasets` takes a
    file path for a Hub id); a local path that does not exist is a `UsageError`."""
    path = os.path.expanduser(entry.path)
    builder = DATA_FILE_BUILDERS.get(os.path.splitext(path)[1].lower())
    if os.path.isfile(path) and builder is not None and entry.data_files is None:
        return dataclasses.replace(entry, path=builder, data_files=path)
    if not os.path.exists(path) and only_local(entry.path):
        raise _not_found("--datasets: path", entry.path)
    return entry


def load_user_dataset(script_args, dataset_args):
    """The dataset named by `--datasets` (a mixture, as TRL's `get_dataset` loads it) or `--dataset_name`
    (`load_named_dataset`); None if neither."""
    if dataset_args.datasets:
        from trl import get_dataset

        mixture = dataclasses.replace(dataset_args, datasets=[_mixture_entry(d) for d in dataset_args.datasets])
        try:
            return get_dataset(mixture)
        except ValueError as error:  # TRL's checks of the mixture (`fraction`, ...)
            raise UsageError(f"--datasets: {error}") from error
    if script_args.dataset_name:
        return load_named_dataset(
            script_args.dataset_name,
            "--dataset_name",
            config=script_args.dataset_config,
            streaming=script_args.dataset_streaming,
        )
    return None


def select_splits(dataset, script_args, dataset_args, training_args, optional_test: bool = False):
    """The train split, the test split when evaluation is on (`--eval_strategy`) and a note on the evaluation (None,
    or why it is off): a loaded dataset indexed as `trl` scripts index it. A missing train split is a `UsageError`
    naming the flag and the splits that exist, and so is a missing test split that the user asked to evaluate on; with
    `optional_test` (evaluation on by the toy's defaults, not asked for) a dataset without the test split trains
    without evaluation (`eval_strategy` set to "no"), which the note says."""
    mixture = bool(dataset_args is not None and dataset_args.datasets)
    source = "the --datasets mixture" if mixture else f"the dataset {script_args.dataset_name or '(embedded toy)'}"

    def split(name: str, flag: str, hint: str):
        if name in dataset:
            return dataset[name]
        raise UsageError(
            f"{flag} {name!r}: {source} has no split {name!r} (its splits: {', '.join(map(repr, dataset))}); {hint}"
        )

    train = split(script_args.dataset_train_split, "--dataset_train_split", "pass --dataset_train_split SPLIT")
    if training_args.eval_strategy == "no":
        return train, None, None
    test = script_args.dataset_test_split
    if optional_test and test not in dataset:
        from transformers.trainer_utils import IntervalStrategy

        training_args.eval_strategy, training_args.do_eval = IntervalStrategy.NO, False
        note = f"no {test!r} split: evaluation off (--dataset_test_split SPLIT and --eval_strategy steps evaluate)"
        return train, None, note
    hint = "pass --dataset_test_split SPLIT"
    hint += ", or set test_split_size in the mixture" if mixture else ""
    evaluation = split(test, "--dataset_test_split", f"{hint}, or --eval_strategy no")
    return train, evaluation, None


# ----------------------------------------------------------------------------------------------------- columns


@dataclasses.dataclass(frozen=True)
class RequiredColumns:
    """The columns a family's TRL trainer reads from a row: all of the columns of one of `choices` (`('prompt',)`, or
    `('messages',)` or `('prompt', 'completion')`, ...), described to the user as `needs`."""

    reader: str  # who reads them: "GRPO-family algorithms"
    choices: tuple[tuple[str, ...], ...]
    needs: str  # what the error says they need, and why

    def missing(self, columns: list[str]) -> str | None:
        """What `columns` lack ("no 'prompt' column", ...), or None when one of the choices is complete."""
        if any(set(choice) <= set(columns) for choice in self.choices):
            return None
        if len(self.choices) == 1:
            absent = [c for c in self.choices[0] if c not in columns]
            return f"no {' or '.join(map(repr, absent))} column{'s' if len(absent) > 1 else ''}"
        return f"none of the columns {self.reader} read{'' if self.reader.endswith('s') else 's'}"

    def check(self, dataset, split: str, source: str) -> None:
        """A `UsageError` when the split lacks the columns: `--dataset_name X: the train split has no 'prompt' column
        (its columns: ...); GRPO-family algorithms need ...`. A streamed dataset of unknown columns passes."""
        columns = getattr(dataset, "column_names", None)
        if columns is None:
            return
        missing = self.missing(list(columns))
        if missing is not None:
            found = ", ".join(map(repr, columns)) or "none"
            raise UsageError(f"{source}: the {split} split has {missing} (its columns: {found}); {self.needs}")


GRPO_COLUMNS = RequiredColumns(
    "GRPO-family algorithms",
    (("prompt",),),
    "GRPO-family algorithms need a 'prompt' column (the text, or the chat messages, that the policy completes; the "
    "other columns go to the reward functions)",
)
DPO_COLUMNS = RequiredColumns(
    "DPO",
    (("chosen", "rejected"),),
    "DPO needs 'chosen' and 'rejected' columns (the preferred and the dispreferred response, as text or chat "
    "messages); 'prompt' is optional: without it TRL's DPOTrainer takes their common beginning as the prompt",
)
TPO_COLUMNS = RequiredColumns(
    "TPO",
    (("chosen", "rejected", "reference"),),
    "TPO needs 'chosen', 'rejected' and 'reference' columns (the preferred, the dispreferred and the gold response, "
    "as text or chat messages); 'prompt' is optional: without it TRL's TPOTrainer takes their common beginning",
)
CHAT_COLLATOR_COLUMNS = RequiredColumns(
    "GKD",
    (("messages",), ("input_ids",)),
    "GKD needs a 'messages' column (chat messages, the last one the completion: TRL's DataCollatorForChatML) or "
    "tokenized 'input_ids'",
)


def sft_columns(text_field: str) -> RequiredColumns:
    """What TRL's SFTTrainer reads: `messages` (or ShareGPT's `conversations`), the `--dataset_text_field` column,
    `prompt` and `completion`, or tokenized `input_ids`."""
    return RequiredColumns(
        "SFT",
        (("messages",), ("conversations",), (text_field,), ("prompt", "completion"), ("input_ids",)),
        f"SFT needs a 'messages' column (chat messages), a {text_field!r} column (plain text; --dataset_text_field "
        "names it), 'prompt' and 'completion' columns (the loss on the completion only), a 'conversations' column "
        "(ShareGPT from/value messages) or tokenized 'input_ids'",
    )


def cpt_columns(text_field: str) -> RequiredColumns:
    """What continued pretraining reads: the plain-text `--dataset_text_field` column."""
    return RequiredColumns(
        "CPT",
        ((text_field,),),
        f"CPT needs the plain-text column that --dataset_text_field names ({text_field!r}): continued pretraining "
        "trains every token of it",
    )


def required_columns(algorithm: str, training_args) -> RequiredColumns | None:
    """The columns that `algorithm`'s trainer reads from a row (its family's TRL trainer's rule); None where TRL is
    told to take the dataset as it is (SFT's `dataset_kwargs={'skip_prepare_dataset': True}`)."""
    from ..algorithms import get_algorithm

    family = get_algorithm(algorithm).family.name
    if family == "dpo":
        return DPO_COLUMNS
    if family == "tpo":
        return TPO_COLUMNS
    if family == "gkd":
        return CHAT_COLLATOR_COLUMNS
    if family in ("sft", "cpt", "gold"):  # GOLD prepares its rows as trl.SFTTrainer does
        if (getattr(training_args, "dataset_kwargs", None) or {}).get("skip_prepare_dataset"):
            return None
        if family == "cpt":
            return cpt_columns(training_args.dataset_text_field)
        return sft_columns(training_args.dataset_text_field)
    return GRPO_COLUMNS


def check_columns(algorithm: str, training_args, splits: Sequence[tuple[str, Any]], source: str) -> None:
    """Each `(name, split)` of `splits` (the train split, the test split or None) has the columns `algorithm`'s
    trainer reads; else a `UsageError` naming `source` (`--dataset_name DIR`), the split and its columns."""
    required = required_columns(algorithm, training_args)
    for split, dataset in splits:
        if required is not None and dataset is not None:
            required.check(dataset, split, source)


def check_chat_prompts(splits: Sequence[tuple[str, Any]], source: str, reason: str) -> None:
    """The first row of each `(name, split)` of `splits` that has a `prompt` holds it as chat messages (TRL's
    `is_conversational`): TRL's tool loop (`environment_factory`, `reason`) reads a text prompt as messages and fails
    deep in the first generation. A streamed split is not read here."""
    from datasets import Dataset
    from trl.data_utils import is_conversational

    for split, dataset in splits:
        if not (isinstance(dataset, Dataset) and len(dataset) and "prompt" in dataset.column_names):
            continue
        if not is_conversational({"prompt": dataset[0]["prompt"]}):
            row = repr(dataset[0].get("prompt"))
            row = row if len(row) <= 60 else f"{row[:57]}..."
            raise UsageError(
                f"{source}: the {split} split's prompts are not chat messages (row 0: {row}); {reason}, as chat "
                'messages: a list such as [{"role": "user", "content": "..."}]'
            )


def data_source(script_args, dataset_args) -> str:
    """How errors name the user's data: `--dataset_name NAME`, or `--datasets (the mixture)`."""
    if dataset_args is not None and dataset_args.datasets:
        return "--datasets (the mixture)"
    return f"--dataset_name {script_args.dataset_name}"
