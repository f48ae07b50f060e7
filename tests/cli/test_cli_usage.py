"""What a new user meets with the command line: `trl-ext train --help` and an algorithm's full help, one-line usage
errors (exit status 2, before any model loads), the plain `TrainingArguments` checks, the toy datasets on disk for
TRL's own scripts, the recipes and accelerate configs shipped in the wheel and named by `--config NAME` /
`--accelerate_config NAME`."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
from datasets import load_dataset

import trl_ext
from trl_ext._packaged import ACCELERATE_DIR, CONFIGS_DIR, accelerate_config_names, recipe_names
from trl_ext.cli import accelerate_launch_args, main
from trl_ext.scripts import dpo, grpo
from trl_ext.scripts._common import UsageError
from trl_ext.toy import (
    TEST_PROMPTS,
    TEST_SEED,
    toy_expert_dataset,
    toy_preference_dataset,
    toy_splits,
    write_toy_datasets,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAINABLE = [name for name, spec in trl_ext.ALGORITHMS.items() if spec.has_trainer]
CPU = {"use_cpu": True, "bf16": False, "report_to": "none", "activation_checkpointing": False}


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **extra}


# ------------------------------------------------------------------------------------------------------- help


def test_train_help_lists_the_algorithms(capsys):
    assert main(["train", "--help"]) is None  # exit status 0, no --algorithm needed
    out = capsys.readouterr().out
    listed = re.sub(r"\s+", " ", out.split("--algorithm NAME  one of ", 1)[1].split("trl-ext train --algorithm")[0])
    assert listed.strip().split(", ") == TRAINABLE
    assert "trl-ext train --algorithm NAME --help  prints every flag of that algorithm" in out
    assert "sapo" in out.split("--config FILE_OR_NAME")[1] and "zero3" in out.split("--accelerate_config")[-1]
    with pytest.raises(SystemExit) as exit_info:  # the top-level help still works, and names every command
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert all(command in out for command in ("train", "list", "env", "toy-data"))


@pytest.mark.parametrize(("algorithm", "own_flag"), [("sapo", "--tau_neg"), ("dpo", "--kl_coef")])
def test_algorithm_help_prints_every_flag(capsys, algorithm, own_flag):
    assert main(["train", "--algorithm", algorithm, "--help"]) is None
    out = capsys.readouterr().out
    assert out.startswith(f"usage: trl-ext train --algorithm {algorithm} [-h]")
    for flag in (own_flag, "--learning_rate", "--dataset_name", "--model_name_or_path", "--use_peft"):
        assert f"\n  {flag} " in out, flag  # the algorithm's, TRL's config, script, model flags
    assert "name of a packaged recipe: a2po, asymre" in re.sub(r"\s+", " ", out)  # the --config epilog


# ----------------------------------------------------------------------------------------------- usage errors

SAPO_HELP = "(see trl-ext train --algorithm sapo --help)"
TRAIN_HELP = "(see trl-ext train --help)"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--algorithm", "sapo", "--lr", "3"], f"unrecognized arguments: --lr 3 {SAPO_HELP}"),
        (["--algorithm", "sapo", "--learning_rate", "abc"], "--learning_rate/--learning-rate: invalid float value"),
        (["--algorithm", "sapo", "--eval_strategy", "bogus"], "invalid choice: 'bogus' (choose from 'no', 'steps'"),
        (["--algorithm", "sapo", "--tau_neg"], f"argument --tau_neg/--tau-neg: expected one argument {SAPO_HELP}"),
        (["--algorithm", "sapo", "--learning_rate=-1e-3"], "SAPOConfig: learning_rate=-0.001 is not valid; must be >="),
        (["--algorithm", "dpo", "--adam_beta2=1"], "DPOConfig: adam_beta2=1.0 is not valid; must be in [0, 1)"),
        (
            ["--algorithm", "sapo", "--config", "no-such-recipe"],
            "--config no-such-recipe: no such file, nor a packaged",
        ),
        (["--algorithm", "sapo", "--config"], "argument --config: expected one argument"),
        (["--algorithm", "sapo", "--accelerate_config", "zero9"], "--accelerate_config zero9: no such file, nor a"),
        (
            ["--algorithm", "nope"],
            f"--algorithm 'nope' has no trainer; choose one of {', '.join(TRAINABLE)} {TRAIN_HELP}",
        ),
        (["--lr", "3"], f"the following arguments are required: --algorithm {TRAIN_HELP}"),
    ],
)
def test_usage_error_is_one_line(capsys, tmp_path, argv, expected):
    """A usage mistake prints one line naming it and how to get help, exit status 2. The model named is an empty
    directory: loading it first would be another error."""
    (tmp_path / "empty-model").mkdir()
    argv = ["train", *argv, "--model_name_or_path", str(tmp_path / "empty-model")]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("trl-ext train: error: "), err
    algorithm = argv[2] if argv[1] == "--algorithm" and argv[2] in TRAINABLE else None
    assert expected in err
    assert err.endswith(f" (see trl-ext train --algorithm {algorithm} --help)\n" if algorithm else f" {TRAIN_HELP}\n")


def test_other_commands_errors_are_one_line(capsys):
    for argv, expected in (
        (["frobnicate"], "trl-ext: error: argument command: invalid choice: 'frobnicate'"),
        (["env", "--verbose"], "trl-ext: error: unrecognized arguments: --verbose (see trl-ext --help)"),
        (["toy-data"], "trl-ext toy-data: error: the following arguments are required: directory"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith(expected), (argv, err)


def test_console_script_and_example_usage_errors(tmp_path):
    """The installed command and an example script: one line, exit status 2, and no model loaded (the toy model's
    cache, pointed at an empty folder, stays empty: the toy model was neither built nor read)."""
    script = shutil.which("trl-ext", path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip("the trl-ext console script is not installed")
    cache = tmp_path / "cache"
    cache.mkdir()
    env = _env(TRL_EXT_CACHE=str(cache))
    run = subprocess.run(
        [script, "train", "--algorithm", "sapo", "--learning_rate=-1e-3"], capture_output=True, text=True, env=env
    )
    assert run.returncode == 2, run.stderr[-3000:]
    lines = [line for line in run.stderr.splitlines() if "real_accelerator.py" not in line]  # DeepSpeed's import notice
    assert lines == [
        "trl-ext train: error: SAPOConfig: learning_rate=-0.001 is not valid; must be >= 0 (the optimizer's step size) "
        "(see trl-ext train --algorithm sapo --help)"
    ]
    assert not os.listdir(cache) and "Trained" not in run.stdout
    example = os.path.join(ROOT, "examples", "train_sapo.py")
    run = subprocess.run([sys.executable, example, "--bad", "1"], capture_output=True, text=True, env=env)
    lines = [line for line in run.stderr.splitlines() if "real_accelerator.py" not in line]
    assert run.returncode == 2 and lines == [
        f"train_sapo.py: error: unrecognized arguments: --bad 1 (see python {example} --help)"
    ], run.stderr[-3000:]
    assert not os.listdir(cache)


def test_programmatic_forms_raise_usage_errors():
    """`trl_ext.cli.train` and the scripts' `main(argv)` raise (a `ValueError`), not exit."""
    with pytest.raises(UsageError, match=r"^argument --learning_rate/--learning-rate: invalid float value: 'abc'$"):
        grpo.main("sapo", ["--learning_rate", "abc"])
    with pytest.raises(UsageError, match=r"^unrecognized arguments: --lr 3$"):  # no abbreviation: not a prefix match
        dpo.main(["--lr", "3"])
    with pytest.raises(UsageError, match=r"^unrecognized arguments: --learn 0.5$"):  # would have set learning_rate
        grpo.main("sapo", ["--learn", "0.5"])


# ------------------------------------------------------------------------------------ TrainingArguments checks

BAD_VALUES = [
    ({"learning_rate": -1e-3}, "learning_rate=-0.001 is not valid; must be >= 0 (the optimizer's step size)"),
    ({"learning_rate": math.nan}, "learning_rate=nan is not valid; must be finite and >= 0"),
    ({"weight_decay": -0.1}, "weight_decay=-0.1 is not valid; must be >= 0"),
    ({"adam_beta1": 1.0}, "adam_beta1=1.0 is not valid; must be in [0, 1)"),
    ({"adam_beta2": -0.1}, "adam_beta2=-0.1 is not valid; must be in [0, 1)"),
    ({"adam_epsilon": 0.0}, "adam_epsilon=0.0 is not valid; must be > 0"),
    ({"max_grad_norm": -1.0}, "max_grad_norm=-1.0 is not valid; must be >= 0 or None"),
    ({"num_train_epochs": 0, "max_steps": -1}, "num_train_epochs=0 is not valid; must be > 0"),
    ({"per_device_train_batch_size": 0}, "per_device_train_batch_size=0 is not valid; must be an integer >= 1"),
    ({"per_device_eval_batch_size": 0}, "per_device_eval_batch_size=0 is not valid; must be an integer >= 1"),
    ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps=0 is not valid; must be an integer >= 1"),
    ({"logging_steps": -1}, "logging_steps=-1 is not valid; must be > 0"),
    ({"save_strategy": "steps", "save_steps": 0}, "save_steps=0 is not valid; must be > 0"),
    ({"eval_strategy": "steps", "eval_steps": -2}, "eval_steps=-2 is not valid; must be > 0"),
    ({"seed": -1}, "seed=-1 is not valid; must be an integer >= 0"),
    ({"seed": 2**32}, "seed=4294967296 is not valid; must be an integer in [0, 2**32)"),
    ({"data_seed": -1}, "data_seed=-1 is not valid; must be an integer >= 0 or None"),
]


@pytest.mark.parametrize(("values", "message"), BAD_VALUES, ids=[next(iter(v)) for v, _ in BAD_VALUES])
@pytest.mark.parametrize("config", ["SAPOConfig", "DPOConfig"])
def test_training_arguments_that_cannot_work_are_refused(tmp_path, config, values, message):
    config_class = getattr(trl_ext, config)
    with pytest.raises(ValueError, match=f"^{re.escape(f'{config}: {message}')}"):
        config_class(output_dir=str(tmp_path), **CPU, **values)


@pytest.mark.parametrize(
    "values",
    [
        {"learning_rate": 0.0, "weight_decay": 0.0, "adam_beta1": 0.0, "max_grad_norm": 0.0},
        {"max_grad_norm": None, "seed": 0, "data_seed": 2**32 - 1},
        {"num_train_epochs": 0, "max_steps": 5},  # max_steps decides
        {"save_strategy": "no", "save_steps": -1, "logging_strategy": "no", "logging_steps": -1},  # unused
        {"logging_steps": 0.5, "eval_strategy": "steps", "eval_steps": 0.25},  # fractions of the run
    ],
)
def test_training_arguments_at_their_limits_are_accepted(tmp_path, values):
    for config_class in (trl_ext.SAPOConfig, trl_ext.DPOConfig):
        config = config_class(output_dir=str(tmp_path), **CPU, **values)
        assert all(
            getattr(config, k) == v or getattr(getattr(config, k), "value", None) == v for k, v in values.items()
        )


# ------------------------------------------------------------------------------------------ toy data on disk


def _rows(dataset) -> list[dict]:
    return [dict(row) for row in dataset]


@pytest.mark.parametrize("conversational", [False, True])
def test_toy_datasets_written_for_trl_scripts(tmp_path, conversational):
    written = write_toy_datasets(str(tmp_path), conversational=conversational)
    expected = {
        "prompts": dict(toy_splits(conversational=conversational)),
        "sft": {
            "train": toy_expert_dataset(conversational=conversational),
            "test": toy_expert_dataset(TEST_PROMPTS, seed=TEST_SEED, conversational=conversational),
        },
        "preference": {
            "train": toy_preference_dataset(conversational=conversational),
            "test": toy_preference_dataset(TEST_PROMPTS, seed=TEST_SEED, conversational=conversational),
        },
    }
    assert list(written) == ["prompts", "sft", "preference"]
    columns = {"prompts": ["prompt", "target"], "sft": ["prompt", "completion", "target"]}
    columns["preference"] = ["prompt", "chosen", "rejected", "target"]
    for name, splits in expected.items():
        path, counts = written[name]
        assert path == str(tmp_path / name) and sorted(os.listdir(path)) == ["test.jsonl", "train.jsonl"]
        loaded = load_dataset(path)  # what TRL's scripts do with --dataset_name PATH
        assert set(loaded) == {"train", "test"} and counts == {"train": len(splits["train"]), "test": 64}
        for split, dataset in splits.items():
            assert loaded[split].column_names == columns[name] == dataset.column_names
            assert loaded[split].num_rows == dataset.num_rows and _rows(loaded[split]) == _rows(dataset), (name, split)
    assert written["prompts"][1]["train"] == 1024 and written["sft"][1]["train"] == 256
    assert written["preference"][1]["train"] == 512


def test_toy_data_command(toy_cache, tiny_model, tmp_path, capsys):
    assert main(["toy-data", str(tmp_path / "toy")]) is None
    out = capsys.readouterr().out
    for name, rows in (("prompts", 1024), ("sft", 256), ("preference", 512)):
        path = tmp_path / "toy" / name
        assert f"{path}  (train: {rows} rows, test: 64 rows)" in out and (path / "train.jsonl").is_file()
    assert f"model      {tiny_model}  (trl_ext.toy.tiny_model_path()" in out  # the toy model's path on disk
    assert f"trl grpo --model_name_or_path {tiny_model}" in out and "--reward_funcs trl_ext.toy.toy_reward" in out
    assert f"--dataset_name {tmp_path / 'toy' / 'preference'}" in out


# ------------------------------------------------------------------------------- packaged recipes and configs


def test_wheel_ships_the_recipes_accelerate_configs_and_py_typed(tmp_path):
    """A wheel built from the sources holds every recipe, accelerate config and the py.typed marker; unpacked (as
    pip installs it, away from the repository) a recipe and an accelerate config resolve by name."""
    source = tmp_path / "src"  # a copy: the build writes build/ and *.egg-info next to the sources
    shutil.copytree(os.path.join(ROOT, "trl_ext"), source / "trl_ext", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), source / name)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w"]
    build = subprocess.run([*command, str(tmp_path / "w"), str(source)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = (tmp_path / "w").glob("trl_ext-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "site")
    assert "trl_ext/py.typed" in names
    recipes = sorted(f for f in os.listdir(CONFIGS_DIR) if f.endswith(".yaml"))
    accelerate = sorted(os.listdir(ACCELERATE_DIR))
    assert len(recipes) >= 16 and len(accelerate) == 7
    assert {f"trl_ext/configs/{f}" for f in recipes} | {f"trl_ext/configs/accelerate/{f}" for f in accelerate} <= names
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); from trl_ext import _packaged as p; "
        "print(p.__file__); print(p.find_recipe('sapo')); print(p.find_accelerate_config('zero3'))"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "site")], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    module, recipe, zero3 = run.stdout.split()
    site = str(tmp_path / "site" / "trl_ext")
    assert module == os.path.join(site, "_packaged.py")
    assert recipe == os.path.join(site, "configs", "sapo.yaml") and os.path.isfile(recipe)
    assert zero3 == os.path.join(site, "configs", "accelerate", "deepspeed_zero3.yaml") and os.path.isfile(zero3)


def test_repository_configs_link_to_the_package():
    assert os.path.islink(os.path.join(ROOT, "configs")) and os.readlink(os.path.join(ROOT, "configs")) == os.path.join(
        "trl_ext", "configs"
    )
    assert os.path.samefile(os.path.join(ROOT, "configs", "sapo.yaml"), os.path.join(CONFIGS_DIR, "sapo.yaml"))


def test_config_name_reads_the_packaged_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no sapo file here
    packaged = os.path.join(CONFIGS_DIR, "sapo.yaml")
    assert "sapo" in recipe_names() and "dpo" in recipe_names()
    for argv in (["--config", "sapo"], ["--config=sapo"]):
        parser, toy = grpo._parser("sapo", argv)
        args = parser.parse_args_and_config(argv)[1]
        assert (args.learning_rate, args.num_generations, args.max_completion_length) == (1e-6, 8, 1024)
        assert toy.sources["learning_rate"] == f"--config {packaged}"  # the pre-parse read the same file
    args = dpo.make_parser("dpo", ["--config", "dpo"]).parse_args_and_config(["--config", "dpo"])[1]
    assert (args.kl_coef, args.learning_rate, args.gradient_accumulation_steps) == (0.001, 5e-7, 8)  # configs/dpo.yaml
    (tmp_path / "sapo").write_text("learning_rate: 0.5\n")  # a file of that name wins over the packaged recipe
    assert (
        grpo.make_parser("sapo", ["--config", "sapo"]).parse_args_and_config(["--config", "sapo"])[1].learning_rate
        == 0.5
    )
    for missing in ("sapo.yaml", "configs/sapo.yaml", "sapoo"):  # a path, or an unknown name: not a packaged recipe
        with pytest.raises(
            UsageError,
            match=rf"^--config {re.escape(missing)}: no such file, nor a packaged recipe; "
            r"give a YAML file or one of a2po, asymre, async_grpo, cispo, clip_cov, cpt, dapo, dpo, .*sapo",
        ):
            grpo.main("sapo", ["--config", missing])
    (tmp_path / "bad.yaml").write_text("tau_neg: 1.1\nnot_a_flag: 3\n")
    with pytest.raises(UsageError, match=r"^--config bad.yaml: unknown keys not_a_flag \(no flag of this script"):
        grpo.main("sapo", ["--config", "bad.yaml"])


def test_accelerate_launch_arguments(tmp_path):
    """`--accelerate_config NAME` resolves a packaged config (file stems and TRL's short names), and the flags the
    script does not take go to `accelerate launch`, before the module, as TRL's CLI splits them."""
    argv = ["--num_processes", "2", "--max_steps", "1", "--config", "sapo", "--main_process_port", "29555"]
    argv += ["--tau_neg", "1.1"]
    expected_script = ["-m", "trl_ext.cli", "train", "--algorithm", "sapo", "--max_steps", "1", "--config", "sapo"]
    zero3 = os.path.join(ACCELERATE_DIR, "deepspeed_zero3.yaml")
    assert accelerate_launch_args("sapo", "zero3", argv) == [
        "--config_file", zero3, "--num_processes", "2", "--main_process_port", "29555", *expected_script,
        "--tau_neg", "1.1",
    ]  # fmt: skip
    for name, stem in (("deepspeed_zero3", "deepspeed_zero3"), ("zero2", "deepspeed_zero2"), ("fsdp", "fsdp"),
                       ("fsdp2", "fsdp"), ("multi_gpu", "multi_gpu"), ("single_gpu", "single_device"),
                       ("zero3_cpu", "deepspeed_zero3_cpu")):  # fmt: skip
        assert accelerate_launch_args("dpo", name, [])[:2] == [
            "--config_file",
            os.path.join(ACCELERATE_DIR, f"{stem}.yaml"),
        ]
    assert set(accelerate_config_names()) >= {"single_device", "multi_gpu", "zero2", "zero3", "fsdp", "fsdp2"}
    own = tmp_path / "mine.yaml"
    own.write_text("distributed_type: 'NO'\n")
    assert accelerate_launch_args("dpo", str(own), ["--max_steps", "1"]) == [
        "--config_file", str(own), "-m", "trl_ext.cli", "train", "--algorithm", "dpo", "--max_steps", "1",
    ]  # fmt: skip
    with pytest.raises(UsageError, match=r"^--accelerate_config zero1: no such file, nor a packaged accelerate config"):
        accelerate_launch_args("sapo", "zero1", [])
    with pytest.raises(UsageError, match=r"SAPOConfig: learning_rate=-0\.001 is not valid"):  # before launching
        accelerate_launch_args("sapo", "zero3", ["--learning_rate=-1e-3"])


def test_accelerate_config_launches_a_run(toy_cache, tmp_path, monkeypatch, capfd):
    """One real launch: `trl-ext train --accelerate_config single_device ...` runs `accelerate launch` (one process)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    output = tmp_path / "out"
    argv = ["train", "--accelerate_config", "single_device", "--algorithm", "sapo", "--output_dir", str(output)]
    argv += [
        "--max_steps",
        "1",
        "--per_device_train_batch_size",
        "8",
        "--num_generations",
        "4",
        "--save_strategy",
        "no",
    ]
    assert main(argv) is None
    out = capfd.readouterr().out
    assert "Trained sapo for 1 steps on 1 process(es)" in out and (output / "model.safetensors").is_file()
    with pytest.raises(SystemExit) as exit_info:  # a flag neither the script nor accelerate takes: one line
        main(["train", "--accelerate_config", "single_device", "--algorithm", "sapo", "--foo", "2"])
    err = capfd.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "unrecognized arguments: --foo (neither a flag of the sapo script nor of accelerate launch)" in err
