"""The `trl-ext` command: train (the example scripts' flags), list, env."""

from __future__ import annotations

import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import time

import pytest
from trainer_helpers import logged

import trl_ext
from trl_ext.cli import main, train
from trl_ext.families import FAMILIES
from trl_ext.trainers.core.model_card import algorithm_fields, field_default

QUICK = ["--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations", "4", "--logging_steps", "1"]
QUICK += ["--save_strategy", "no"]


def test_list_groups_algorithms_by_family_and_fits_a_terminal(capsys):
    main(["list"])
    out = capsys.readouterr().out
    lines = out.rstrip("\n").splitlines()
    # a row each, a header per family (one line: `TrainerFamily.description`), the composable parts' block
    assert max(map(len, lines)) <= 118 and len(lines) <= len(trl_ext.ALGORITHMS) + len(FAMILIES) + 12
    headers = {line.split(":")[0]: i for i, line in enumerate(lines) if not line.startswith(" ")}
    for name, spec in trl_ext.ALGORITHMS.items():
        rows = [i for i, line in enumerate(lines) if line.split()[:1] == [name]]
        if not spec.has_trainer:  # never listed as trainable: only in the closing line of records without a trainer
            assert not rows and name in lines[headers["no trainer yet (losses in trl_ext.losses)"]], name
            continue
        (row,) = rows
        family = max((i, f) for f, i in headers.items() if i < row)[1]
        assert family == spec.trainer, name
        assert lines[row].split()[1] == spec.class_names[1], name
        assert spec.paper is None or spec.paper.arxiv in lines[row], name
    assert lines[-1] == "An algorithm's settings and defaults: trl-ext list ALGORITHM"


def test_list_imports_neither_trl_nor_transformers():
    """`trl-ext list` reads the argument dataclasses (`trl_ext.trainers.core.arguments`), not the configs: it costs the
    import of torch, not that of trl / transformers (several seconds)."""
    heavy = "sorted(m for m in ('trl', 'transformers', 'accelerate', 'datasets') if m in sys.modules)"
    script = f"import sys, trl_ext.cli; trl_ext.cli.list_algorithms(); print({heavy})"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


TRAINABLE = [name for name, spec in trl_ext.ALGORITHMS.items() if spec.has_trainer]


@pytest.mark.parametrize("name", TRAINABLE)
def test_list_algorithm_shows_the_settings_of_the_real_config(name, capsys):
    """`trl-ext list NAME` shows the algorithm's classes and every one of its settings (`algorithm_fields`, as the
    model card shows them) with its default."""
    spec = trl_ext.get_algorithm(name)
    main(["list", name])
    out = capsys.readouterr().out
    assert f"trl_ext.{spec.class_names[1]} / trl_ext.{spec.class_names[0]} ({spec.trainer} family)" in out
    settings = out.split("settings    ")[1].replace("\n", " ")
    for f in algorithm_fields(spec.config_class, name):
        assert f"{f.name}={field_default(f)!r}" in settings, f.name


def test_listed_dpo_loss_defaults_are_trl_defaults(capsys):
    """DPO's settings include TRL's fields that are its loss's arguments, with `trl.DPOConfig`'s defaults."""
    import trl

    trl_defaults = {f.name: f.default for f in dataclasses.fields(trl.DPOConfig)}
    main(["list", "dpo"])
    out = capsys.readouterr().out.replace("\n", " ")
    for name in ("beta", "label_smoothing"):
        assert f"{name}={trl_defaults[name]!r}" in out
    assert "kl_coef=0.001" in out


@pytest.fixture
def record_without_trainer(monkeypatch) -> str:
    """A record whose losses exist but which has no trainer (every built-in algorithm has one)."""
    spec = dataclasses.replace(trl_ext.get_algorithm("grpo"), name="pg_only", trainer=None, class_prefix="PGOnly")
    monkeypatch.setitem(trl_ext.ALGORITHMS, "pg_only", spec)
    return "pg_only"


def test_list_of_a_record_without_trainer_says_so(capsys, record_without_trainer):
    main(["list", record_without_trainer])
    assert "trainer     none yet: its loss is trl_ext.losses.get_policy_loss('ppo')" in capsys.readouterr().out


def test_list_answers_quickly():
    """The installed `trl-ext list` answers in about the time torch takes to import (it used to import trl and
    transformers: ~10 s more here). Each run is paired with an `import torch` run just before it, and the median of
    the 5 differences is bounded, so that a slow machine, or one whose load changes during the test (the other test
    worker), does not decide it; the differences are printed (`pytest -s`)."""
    script = os.path.join(os.path.dirname(sys.executable), "trl-ext")
    if not os.path.isfile(script):
        pytest.skip("the trl-ext console script is not installed")

    def seconds(command: list[str]) -> float:
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        return time.perf_counter() - start

    extra = [seconds([script, "list"]) - seconds([sys.executable, "-c", "import torch"]) for _ in range(5)]
    print(f"trl-ext list minus import torch: {', '.join(f'{x:.2f}' for x in extra)} s")
    assert statistics.median(extra) < 1.5, extra


def test_env_reports_versions_and_devices(capsys):
    main(["env"])
    out = capsys.readouterr().out
    import torch
    import trl

    assert f"trl_ext: {trl_ext.__version__}" in out and f"trl: {trl.__version__}" in out
    assert f"torch: {torch.__version__}" in out and "devices: " in out


def test_train_runs_the_example_scripts(toy_cache, tiny_model, tmp_path, capsys):
    trainer = train("sapo", ["--output_dir", str(tmp_path / "sapo"), *QUICK, "--tau_neg", "1.2"])
    assert type(trainer) is trl_ext.SAPOTrainer and trainer.state.global_step == 2
    assert trainer.policy_loss_fn.tau_neg == 1.2 and logged(trainer, "sapo_loss")
    dpo = train("dpo", ["--output_dir", str(tmp_path / "dpo"), "--max_steps", "2"])
    assert type(dpo) is trl_ext.DPOTrainer and dpo.state.global_step == 2
    # main() is the console script: it returns None (exit status 0), not the trainer
    assert main(["train", "--algorithm", "dpo", "--output_dir", str(tmp_path / "main"), "--max_steps", "1"]) is None
    assert "Trained dpo for 1 steps" in capsys.readouterr().out


def test_bad_commands(capsys, record_without_trainer):
    with pytest.raises(SystemExit):
        main(["train", "--algorithm", record_without_trainer])
    assert "--algorithm 'pg_only' has no trainer; choose one of sft, ppo, grpo, " in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["frobnicate"])
    with pytest.raises(SystemExit):
        main(["list", "--verbose"])
    assert "unrecognized arguments: --verbose" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # a flag no dataclass has: a one-line error, status 2, no traceback
        main(["train", "--algorithm", "sapo", "--tau_negative", "1.1"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("trl-ext train: error: ") and "--tau_negative" in err and "Traceback" not in err
    with pytest.raises(ValueError, match="--tau_negative"):  # the programmatic form raises
        train("sapo", ["--tau_negative", "1.1"])


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, **kwargs)


def test_console_script_exit_status(toy_cache, tmp_path):
    """The installed `trl-ext` exits 0 after a run (its entry point returned the trainer: exit status 1); `python -m
    trl_ext.cli` too; errors exit non-zero with the message on stderr (`list` and `env`: the next test)."""
    script = shutil.which("trl-ext") or shutil.which("trl-ext", path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip("the trl-ext console script is not installed")
    quick = ["--max_steps", "1", "--per_device_train_batch_size", "8", "--num_generations", "4"]
    quick += ["--save_strategy", "no"]
    run = _run([script, "train", "--algorithm", "sapo", "--output_dir", str(tmp_path / "out"), *quick])
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Trained sapo for 1 steps" in run.stdout and os.path.isfile(tmp_path / "out" / "model.safetensors")
    module = _run([sys.executable, "-m", "trl_ext.cli", "list"])
    assert module.returncode == 0 and "  sapo               SAPOTrainer" in module.stdout, module.stderr[-2000:]
    bad_algorithm = _run([script, "train", "--algorithm", "nope"])
    assert bad_algorithm.returncode != 0 and "nope" in bad_algorithm.stderr
    bad_flag = _run([script, "train", "--algorithm", "sapo", "--tau_negative", "1.1"])
    assert bad_flag.returncode == 2 and "trl-ext train: error: " in bad_flag.stderr
    assert "--tau_negative" in bad_flag.stderr
    assert "Traceback" not in bad_flag.stderr


def test_console_script_is_installed():
    script = os.path.join(os.path.dirname(sys.executable), "trl-ext")
    result = subprocess.run([script, "list"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "  sapo               SAPOTrainer" in result.stdout
    module = subprocess.run([sys.executable, "-m", "trl_ext", "env"], capture_output=True, text=True, timeout=300)
    assert module.returncode == 0 and "trl_ext: " in module.stdout
