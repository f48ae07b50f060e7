"""A user's first hour with the training scripts: their own environment (never with the toy's reward or rows), their
own dataset (a local file, a path that does not exist, a missing column), a misspelled flag or algorithm, and an
algorithm's help. Each mistake is one line naming the flag, exit status 2 from the command line, before the model
loads (`tests/cli/test_cli_usage.py` holds the other usage errors)."""

from __future__ import annotations

import json
import os
import sys
import types

import datasets
import pytest
from trl.scripts.utils import DatasetConfig

from trl_ext import toy, toy_agent
from trl_ext.cli import main
from trl_ext.scripts import dpo, grpo, sft
from trl_ext.scripts._common import UsageError, rollout_sources
from trl_ext.scripts.dataset_loading import (
    DPO_COLUMNS,
    GRPO_COLUMNS,
    check_columns,
    load_named_dataset,
    load_user_dataset,
    required_columns,
    sft_columns,
)

ENVIRONMENTS = '''
from trl_ext.toy_agent import LookupEnvironment


class Calc:
    def reset(self, **row):
        self.total = 0

    def add(self, x: int) -> str:
        """
        Add a number to the total.

        Args:
            x: The number.
        """
        self.total += x
        return str(self.total)


class Rewarded(Calc):
    def get_reward(self) -> float:
        return float(self.total == 3)


class NoTools:
    def reset(self, **row):
        pass

    def get_reward(self) -> float:  # not a tool
        return 0.0

    def _helper(self):  # private: not a tool
        pass


class NoReset:
    def add(self, x: int) -> str:
        return str(x)


class NeedsSize(Calc):
    def __init__(self, size):
        self.size = size


class ToyLookup(LookupEnvironment):
    pass


def make_calc():
    return Calc()


NOT_CALLABLE = 3


def solved(completions, **kwargs):
    return [0.0 for _ in completions]
'''


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """`first_hour_envs` (the environments and reward above) importable, the working directory `tmp_path`."""
    (tmp_path / "first_hour_envs.py").write_text(ENVIRONMENTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("first_hour_envs", None)


@pytest.fixture
def no_model(tmp_path) -> list[str]:
    """A model that cannot load (an empty directory): loading it before the checks would be another error."""
    (tmp_path / "empty-model").mkdir()
    return ["--model_name_or_path", str(tmp_path / "empty-model")]


def _jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _chat_prompts(tmp_path) -> str:
    rows = [{"prompt": [{"role": "user", "content": f"add {i}"}], "x": i} for i in range(4)]
    return _jsonl(tmp_path / "chat.jsonl", rows)


def _one_line_exit(capsys, run) -> str:
    """Run `run()`, expect exit status 2 and one line on stderr; return it."""
    with pytest.raises(SystemExit) as exit_info:
        run()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    return err.rstrip("\n")


# ------------------------------------------------------------------------------------------------ environments

CONTRACT = (
    "TRL's environment_factory makes one instance per rollout (calling it with no arguments), calls its reset(**row) "
    "with the rollout's dataset row, and offers the model its public methods (typed, with a docstring) as tools"
)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("NoTools", "NoTools has no tools (public methods besides reset and get_reward); " + CONTRACT),
        ("NoReset", "NoReset has no reset method; " + CONTRACT),
        ("NeedsSize", "cannot be called with no arguments (missing a required argument: 'size'); " + CONTRACT),
        ("NOT_CALLABLE", "not a class or a function (a int)"),
    ],
)
def test_environment_that_trl_cannot_use_is_refused(user_code, no_model, name, message):
    path = f"first_hour_envs.{name}"
    with pytest.raises(UsageError) as error:
        grpo.main("gigpo", ["--environment_factory", path, *no_model])
    assert str(error.value) == f"--environment_factory {path}: {message}"


def test_environment_classes_and_factories_are_read_as_trl_reads_them(user_code):
    import first_hour_envs as envs

    assert grpo.environment_class(envs.Calc, "first_hour_envs.Calc") is envs.Calc
    assert grpo.environment_class(envs.make_calc, "first_hour_envs.make_calc") is envs.Calc  # a factory function
    assert grpo.environment_class(envs.Rewarded, "x") is envs.Rewarded  # tools besides get_reward


def test_environment_error_from_the_command_line_is_one_line(user_code, capsys, monkeypatch):
    cache = user_code / "cache"  # the toy model's cache stays empty: nothing was built or loaded
    cache.mkdir()
    monkeypatch.setenv("TRL_EXT_CACHE", str(cache))
    argv = ["train", "--algorithm", "multi_step_grpo", "--environment_factory", "first_hour_envs.NoTools"]
    line = _one_line_exit(capsys, lambda: main(argv))
    assert line == (
        "trl-ext train: error: --environment_factory first_hour_envs.NoTools: NoTools has no tools (public methods "
        f"besides reset and get_reward); {CONTRACT} (see trl-ext train --algorithm multi_step_grpo --help)"
    )
    assert not os.listdir(cache)


NEEDS_DATA = (
    "without --dataset_name its rows would be {rows}: pass --dataset_name with your task's rows (each is passed to "
    "reset(**row); a 'prompt' column of chat messages, or reset() returns the prompt)"
)
NEEDS_REWARD = (
    "its rollouts have no reward: pass --reward_funcs (TRL's reward names, or a dotted path such as "
    "my_rewards.solved) or give it a get_reward() method (the toy task's reward only scores the toy task, with its "
    "trl_ext.toy_agent.LookupEnvironment)"
)


@pytest.mark.parametrize("algorithm", ["gigpo", "multi_step_grpo", "sapo"])
def test_user_environment_needs_its_own_data_and_reward(user_code, no_model, algorithm):
    """The toy defaults (no --dataset_name) kept the toy's rows and its lookup_reward, which then failed inside
    trl_ext.toy_agent (`'Calc' object has no attribute 'found'`): now a usage error asking for what is missing."""
    agent = algorithm != "sapo"
    rows = "the toy lookup task's (for its LookupEnvironment)" if agent else 'the toy "repeat the letter" task\'s'
    start = "--environment_factory first_hour_envs.Calc: "
    argv = ["--environment_factory", "first_hour_envs.Calc", *no_model]
    with pytest.raises(UsageError) as error:
        grpo.main(algorithm, argv)
    assert str(error.value) == start + NEEDS_DATA.format(rows=rows) + "; and " + NEEDS_REWARD
    with pytest.raises(UsageError) as error:  # the data given: the reward is still missing
        grpo.main(algorithm, [*argv, "--dataset_name", _chat_prompts(user_code)])
    assert str(error.value) == start + NEEDS_REWARD
    with pytest.raises(UsageError) as error:  # the reward given: the data is still missing
        grpo.main(algorithm, [*argv, "--reward_funcs", "first_hour_envs.solved"])
    assert str(error.value) == start + NEEDS_DATA.format(rows=rows)


def test_which_environment_runs_on_the_toy_task_and_with_which_reward(user_code):
    import first_hour_envs as envs

    args = types.SimpleNamespace(reward_funcs=None, reward_model_name_or_path=None)
    check = grpo.check_environment_task
    check("e.ToyLookup", envs.ToyLookup, toy_task=True, agent=True, script_args=args)  # the toy's: its task, reward
    check("e.Rewarded", envs.Rewarded, toy_task=False, agent=False, script_args=args)  # get_reward: TRL's own reward
    with pytest.raises(UsageError, match=r"^--environment_factory e.ToyLookup: without --dataset_name its rows would"):
        check("e.ToyLookup", envs.ToyLookup, toy_task=True, agent=False, script_args=args)  # the letter task's rows
    rewards = grpo.reward_funcs_for
    assert rewards(args, envs.ToyLookup, toy_task=False) == [toy_agent.lookup_reward]
    assert rewards(args, toy_agent.LookupEnvironment, toy_task=True) == [toy_agent.lookup_reward]
    assert rewards(args, None, toy_task=True) == [toy.toy_reward]
    assert rewards(args, envs.Rewarded, toy_task=False) == []  # TRL adds get_reward itself
    assert rewards(args, None, toy_task=False) == []
    given = types.SimpleNamespace(reward_funcs=["first_hour_envs.solved"], reward_model_name_or_path=None)
    assert rewards(given, envs.ToyLookup, toy_task=True) == [envs.solved]  # --reward_funcs always wins


def test_environment_prompts_are_chat_messages_or_none(user_code, no_model, monkeypatch):
    """TRL's tool loop reads a prompt as chat messages (a text prompt failed in the first generation); a row without
    a prompt is TRL 1.16's environment-owned prompt (an empty user turn that reset()'s string completes)."""
    text = _jsonl(user_code / "text.jsonl", [{"prompt": "add 1", "x": 1}])
    argv = ["--environment_factory", "first_hour_envs.Rewarded", "--dataset_name", text, *no_model]
    with pytest.raises(UsageError) as error:
        grpo.main("gigpo", argv)
    assert str(error.value) == (
        f"--dataset_name {text}: the train split's prompts are not chat messages (row 0: 'add 1'); with "
        "--environment_factory, TRL's tool loop needs each prompt, as chat messages: a list such as "
        '[{"role": "user", "content": "..."}]'
    )

    class DataChecked(Exception):
        pass

    def stop(*args):  # the step after the data checks, before the trainer (and its model) is built
        raise DataChecked

    monkeypatch.setattr(grpo, "set_model_init_kwargs", stop)
    for rows in ([{"x": 1}], [{"prompt": [{"role": "user", "content": "add 1"}], "x": 1}]):
        argv[3] = _jsonl(user_code / "rows.jsonl", rows)
        with pytest.raises(DataChecked):
            grpo.main("gigpo", argv)


def test_user_environment_run_names_its_environment_and_reward(user_code, tiny_agent, toy_cache, capsys):
    """One optimizer step of a user environment on the toy agent model (the toy model whose chat template renders
    tool calls): the user's reward, not the toy's, and the summary names both."""
    argv = ["--environment_factory", "first_hour_envs.Calc", "--dataset_name", _chat_prompts(user_code)]
    argv += ["--reward_funcs", "first_hour_envs.solved", "--output_dir", str(user_code / "out"), "--max_steps", "1"]
    argv += ["--per_device_train_batch_size", "4", "--num_generations", "2", "--max_completion_length", "12"]
    argv += ["--save_strategy", "no", "--report_to", "none"]
    trainer = grpo.main("gigpo", argv)
    assert trainer.reward_func_names == ["solved"] and trainer.state.global_step == 1
    assert trainer.model.name_or_path == tiny_agent
    summary = " ".join(capsys.readouterr().out.split())
    assert "chat.jsonl: 4 train rows; reward solved; environment first_hour_envs.Calc (one per rollout; tools add)" in (
        summary
    )


def test_summary_names_the_rewards_and_the_environment(user_code):
    import first_hour_envs as envs

    trainer = types.SimpleNamespace(reward_func_names=["toy_reward"])
    assert rollout_sources(trainer) == "; reward toy_reward"
    trainer = types.SimpleNamespace(
        reward_func_names=["lookup_reward"],
        environment_factories={None: toy_agent.LookupEnvironment},
        tools=[toy_agent.LookupEnvironment().lookup],
    )
    assert rollout_sources(trainer) == (
        "; reward lookup_reward; environment trl_ext.toy_agent.LookupEnvironment (one per rollout; tools lookup)"
    )
    trainer = types.SimpleNamespace(reward_func_names=[], environment_factories={None: envs.make_calc}, tools=[])
    expected = "; reward none; environment first_hour_envs.make_calc (one per rollout; tools none)"
    assert rollout_sources(trainer) == expected
    assert rollout_sources(types.SimpleNamespace()) == ""  # DPO, SFT: no rollouts


# ---------------------------------------------------------------------------------------------------- datasets


def test_missing_local_dataset_is_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """From the example script (`python examples/train_sapo.py`, here in-process): one line, exit status 2, and the
    toy model's cache stays empty (nothing was built or loaded)."""
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("TRL_EXT_CACHE", str(cache))
    monkeypatch.setattr(sys, "argv", ["examples/train_sapo.py", "--dataset_name", "./my_data.jsonl"])
    line = _one_line_exit(capsys, lambda: grpo.main("sapo"))
    assert line == (
        f"train_sapo.py: error: --dataset_name ./my_data.jsonl: no such file or directory ({tmp_path}/my_data.jsonl "
        "does not exist; a local path, so it was not looked up on the Hub) (see python examples/train_sapo.py --help)"
    )
    assert not os.listdir(cache)


@pytest.mark.parametrize("name", ["my_data.jsonl", "~/no/such/data", "data/train/part.csv", "./prompts"])
def test_a_path_that_does_not_exist_is_named_as_one(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as error:
        load_named_dataset(name, "--dataset_name")
    where = os.path.abspath(os.path.expanduser(name))
    assert str(error.value) == (
        f"--dataset_name {name}: no such file or directory ({where} does not exist; a local path, so it was not "
        "looked up on the Hub)"
    )


def test_hub_like_name_that_is_neither_here_nor_cached(tmp_path, capsys, monkeypatch):
    if not datasets.config.HF_HUB_OFFLINE:
        pytest.skip("the message for a run without HF_HUB_OFFLINE asks the Hub")
    monkeypatch.chdir(tmp_path)
    argv = ["train", "--algorithm", "dpo", "--dataset_name", "does/not_exist"]
    line = _one_line_exit(capsys, lambda: main(argv))
    assert line == (
        f"trl-ext train: error: --dataset_name does/not_exist: no such local directory ({tmp_path}/does/not_exist), "
        "nor a Hub dataset in the local cache (HF_HUB_OFFLINE is set, so the Hub was not asked) (see trl-ext train "
        "--algorithm dpo --help)"
    )


ROWS = [{"prompt": "Repeat the letter a:", "target": "a"}, {"prompt": "Repeat the letter b:", "target": "b"}]


@pytest.mark.parametrize("extension", ["jsonl", "json", "csv", "parquet"])
def test_local_data_files_load_with_their_builder(tmp_path, extension):
    path = tmp_path / f"prompts.{extension}"
    table = datasets.Dataset.from_list(ROWS)
    if extension == "json":
        path.write_text(json.dumps(ROWS))  # a JSON array
    else:
        {"jsonl": table.to_json, "csv": table.to_csv, "parquet": table.to_parquet}[extension](str(path))
    path = str(path)
    loaded = load_named_dataset(path, "--dataset_name")
    assert list(loaded) == ["train"] and [dict(row) for row in loaded["train"]] == ROWS
    assert [dict(row) for row in load_named_dataset(path, "--x", split="train")] == ROWS  # one split, as MIX's expert
    with pytest.raises(UsageError, match=r"^--x \S+: no split 'test' \(Unknown split \"test\""):
        load_named_dataset(path, "--x", split="test")


def test_dataset_files_the_scripts_cannot_read_are_named(tmp_path):
    (tmp_path / "notes.txt").write_text("hello\n")
    with pytest.raises(UsageError) as error:
        load_named_dataset(str(tmp_path / "notes.txt"), "--dataset_name")
    assert str(error.value) == (
        f"--dataset_name {tmp_path}/notes.txt: a file, but not a data file the scripts read (by its extension: "
        ".jsonl, .json, .csv, .parquet); give such a file, a directory of them, or a Hub dataset id"
    )
    data = _jsonl(tmp_path / "p.jsonl", ROWS)
    with pytest.raises(UsageError, match=r"^--dataset_name \S+p.jsonl: a local json file has no configurations, but"):
        load_named_dataset(data, "--dataset_name", config="main")
    (tmp_path / "empty").mkdir()  # a directory without data files
    with pytest.raises(UsageError, match=r"^--dataset_name \S+empty: The directory at \S+empty doesn't contain any"):
        load_named_dataset(str(tmp_path / "empty"), "--dataset_name")


def test_mixture_entries_read_local_files_and_name_missing_ones(tmp_path):
    from trl import DatasetMixtureConfig

    data = _jsonl(tmp_path / "p.jsonl", ROWS)
    mixture = DatasetMixtureConfig(datasets=[DatasetConfig(path=data)])
    loaded = load_user_dataset(types.SimpleNamespace(dataset_name=None), mixture)
    assert [dict(row) for row in loaded["train"]] == ROWS
    mixture = DatasetMixtureConfig(datasets=[DatasetConfig(path=data), DatasetConfig(path="./gone.jsonl")])
    with pytest.raises(UsageError, match=r"^--datasets: path ./gone.jsonl: no such file or directory \("):
        load_user_dataset(types.SimpleNamespace(dataset_name=None), mixture)


def test_missing_expert_dataset_is_named(tmp_path, no_model):
    prompts = _jsonl(tmp_path / "prompts.jsonl", ROWS)
    with pytest.raises(UsageError) as error:
        grpo.main("mix", ["--dataset_name", prompts, "--expert_dataset_name", "./experts.jsonl", *no_model])
    assert str(error.value).startswith("--expert_dataset_name ./experts.jsonl: no such file or directory (")


def test_dataset_without_the_family_columns_is_one_line(tmp_path, no_model):
    questions = _jsonl(tmp_path / "questions.jsonl", [{"question": "What is 1 + 1?", "answer": "2"}])
    with pytest.raises(UsageError) as error:
        grpo.main("sapo", ["--dataset_name", questions, *no_model])
    assert str(error.value) == (
        f"--dataset_name {questions}: the train split has no 'prompt' column (its columns: 'question', 'answer'); "
        "GRPO-family algorithms need a 'prompt' column (the text, or the chat messages, that the policy completes; "
        "the other columns go to the reward functions)"
    )
    pairs = _jsonl(tmp_path / "pairs.jsonl", [{"prompt": "Q", "chosen": "A"}])
    with pytest.raises(UsageError) as error:
        dpo.main(["--dataset_name", pairs, *no_model])
    assert str(error.value) == (
        f"--dataset_name {pairs}: the train split has no 'rejected' column (its columns: 'prompt', 'chosen'); "
        f"{DPO_COLUMNS.needs}"
    )
    with pytest.raises(UsageError) as error:
        sft.main(["--dataset_name", questions, *no_model])
    assert str(error.value).startswith(
        f"--dataset_name {questions}: the train split has none of the columns SFT reads (its columns: 'question', "
        "'answer'); SFT needs a 'messages' column (chat messages), a 'text' column (plain text; --dataset_text_field"
    )
    splits = [("train", datasets.Dataset.from_list(ROWS)), ("eval", datasets.Dataset.from_list([{"question": "q"}]))]
    with pytest.raises(UsageError, match=r"^src: the eval split has no 'prompt' column \(its columns: 'question'\);"):
        check_columns("sapo", None, splits, "src")  # the test split is checked too
    folder = tmp_path / "splits"  # a directory whose files do not share their columns
    folder.mkdir()
    _jsonl(folder / "train.jsonl", ROWS)
    _jsonl(folder / "test.jsonl", [{"question": "q"}])
    with pytest.raises(UsageError, match=r"^--dataset_name \S+splits: datasets could not read it \(Couldn't cast"):
        grpo.main("sapo", ["--dataset_name", str(folder), *no_model])


def test_columns_each_family_reads():
    """TRL 1.16's rules: GRPO reads `prompt`; DPOTrainer `chosen` and `rejected` (an implicit prompt is extracted);
    SFTTrainer `messages`, ShareGPT's `conversations`, the `dataset_text_field`, `prompt` + `completion`, or
    `input_ids`, unless told to skip its preparation."""
    assert GRPO_COLUMNS.missing(["prompt", "target"]) is None and GRPO_COLUMNS.missing(["question"]) is not None
    assert DPO_COLUMNS.missing(["chosen", "rejected"]) is None  # no prompt: TRL extracts the shared beginning
    assert DPO_COLUMNS.missing(["prompt"]) == "no 'chosen' or 'rejected' columns"
    text = sft_columns("text")
    for columns in (["messages"], ["conversations"], ["text"], ["prompt", "completion"], ["input_ids"]):
        assert text.missing(columns) is None, columns
    assert text.missing(["prompt"]) == "none of the columns SFT reads"
    assert sft_columns("body").missing(["body"]) is None and sft_columns("body").missing(["text"]) is not None
    args = types.SimpleNamespace(dataset_text_field="text", dataset_kwargs={"skip_prepare_dataset": True})
    assert required_columns("sft", args) is None  # the user prepares the dataset
    args.dataset_kwargs = None
    assert required_columns("sft", args) == text and required_columns("dpo", args) is DPO_COLUMNS
    assert required_columns("mix", args) is GRPO_COLUMNS and required_columns("ppo", args) is GRPO_COLUMNS


# ---------------------------------------------------------------------------------------------- misspellings


def test_misspelled_flag_suggests_the_closest():
    with pytest.raises(UsageError) as error:
        grpo.main("sapo", ["--tau_postive", "1.1"])
    assert str(error.value) == "unrecognized arguments: --tau_postive 1.1 (did you mean --tau_pos?)"
    with pytest.raises(UsageError) as error:
        dpo.main(["--kl-coeff=0.1", "--lerning_rate", "3", "--zzz", "1"])
    assert str(error.value) == (
        "unrecognized arguments: --kl-coeff=0.1 --lerning_rate 3 --zzz 1 (did you mean --kl_coef for --kl-coeff, "
        "--learning_rate for --lerning_rate?)"
    )


def test_misspelled_config_key_and_reward_suggest_the_closest(tmp_path, no_model):
    (tmp_path / "recipe.yaml").write_text("tau_postive: 1.1\n")
    with pytest.raises(UsageError) as error:
        grpo.main("sapo", ["--config", str(tmp_path / "recipe.yaml")])
    expected = ": unknown keys tau_postive (no flag of this script takes them; did you mean tau_pos?)"
    assert str(error.value).endswith(expected)
    argv = ["--reward_funcs", "accuracy_rewrd", "--dataset_name", _jsonl(tmp_path / "p.jsonl", ROWS), *no_model]
    with pytest.raises(UsageError, match=r"^--reward_funcs: cannot load 'accuracy_rewrd' \(did you mean accuracy_"):
        grpo.main("sapo", argv)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--algorithm", "sapo", "--tau_postive", "1"],
            "unrecognized arguments: --tau_postive 1 (did you mean --tau_pos?) "
            "(see trl-ext train --algorithm sapo --help)",
        ),
        (["--algorithm", "sapoo"], "--algorithm 'sapoo' has no trainer (did you mean sapo?); choose one of sft, ppo"),
        (["--algorithm", "gigp0", "--help"], "--algorithm 'gigp0' has no trainer (did you mean gigpo?); choose one of"),
    ],
)
def test_misspellings_from_the_command_line(capsys, argv, expected):
    line = _one_line_exit(capsys, lambda: main(["train", *argv]))
    assert line.startswith(f"trl-ext train: error: {expected}"), line


def test_misspelled_algorithm_in_the_programmatic_and_list_forms(capsys):
    from trl_ext.cli import train

    with pytest.raises(UsageError, match=r"^--algorithm 'dpoo' is not an algorithm \(did you mean dpo\?\); choose"):
        train("dpoo", [])
    line = _one_line_exit(capsys, lambda: main(["list", "gspoo"]))
    assert line.startswith("trl-ext list: error: unknown algorithm 'gspoo' (did you mean gspo?); choose one of")


# -------------------------------------------------------------------------------------------------------- help


def _flag_line(lines: list[str], flag: str) -> int:
    return next(i for i, line in enumerate(lines) if line.startswith(f"  {flag} "))


def test_algorithm_help_lists_its_own_flags_first(capsys):
    assert main(["train", "--algorithm", "sapo", "--help"]) is None
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "usage: trl-ext train --algorithm sapo [-h] [--config FILE_OR_NAME] [--FLAG VALUE ...]"
    own = lines.index("sapo settings (trl_ext.SAPOConfig): the algorithm's own:")
    assert own < _flag_line(lines, "--tau_pos") < 60 and _flag_line(lines, "--tau_neg") < 60
    assert _flag_line(lines, "--tau_pos") < _flag_line(lines, "--learning_rate")
    trl = lines.index("trl_ext.SAPOConfig's other flags: TRL's GRPOConfig and transformers' TrainingArguments:")
    assert own < trl < _flag_line(lines, "--learning_rate") and "ModelConfig (trl):" in lines
    assert sum(line.startswith("  --tau_pos ") for line in lines) == 1  # listed once, in its group
    assert main(["train", "--algorithm", "gigpo", "--help"]) is None
    lines = capsys.readouterr().out.splitlines()
    own = lines.index("gigpo settings (trl_ext.GiGPOConfig): the algorithm's own:")
    assert own < _flag_line(lines, "--omega") < _flag_line(lines, "--gamma") < _flag_line(lines, "--learning_rate")
    assert _flag_line(lines, "--omega") < 100


def test_example_script_help_lists_its_own_flags_first(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["examples/train_dpo.py", "--help"])
    with pytest.raises(SystemExit) as exit_info:
        dpo.main()
    assert exit_info.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("usage: train_dpo.py [-h]")
    assert _flag_line(lines, "--kl_coef") < 60 and _flag_line(lines, "--kl_coef") < _flag_line(lines, "--learning_rate")
    monkeypatch.setattr(sys, "argv", ["examples/train_sapo.py", "--help"])
    with pytest.raises(SystemExit):
        grpo.main("sapo")
    lines = capsys.readouterr().out.splitlines()
    assert _flag_line(lines, "--tau_pos") < 60 and _flag_line(lines, "--tau_pos") < _flag_line(lines, "--learning_rate")
