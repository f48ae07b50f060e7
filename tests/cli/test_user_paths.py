"""What a user of the scripts meets first: evaluation on the embedded default, a missing dataset split, the toy defaults
under a `--config` recipe, the start-of-run summary, and a run without warnings."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from trainer_helpers import logged

from trl_ext.scripts import dpo, grpo
from trl_ext.toy import DEFAULT_TRAINING, DPO_TRAINING

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAPO_RECIPE = os.path.join(ROOT, "configs", "sapo.yaml")
QUICK = ["--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations", "4", "--logging_steps", "1"]
QUICK += ["--save_strategy", "no"]


@pytest.mark.parametrize("algorithm", ["sapo", "mix"])
def test_eval_on_the_embedded_default(toy_cache, tmp_path, algorithm):
    """`--eval_strategy steps` works on the toy task: a held-out "test" split, and an eval batch that holds whole
    groups (the toy's per_device_eval_batch_size 128, a multiple of num_generations)."""
    argv = ["--output_dir", str(tmp_path), *QUICK, "--eval_strategy", "steps", "--eval_steps", "1"]
    trainer = grpo.main(algorithm, argv)
    assert len(logged(trainer, "eval_reward")) == 2 and len(trainer.eval_dataset) == 64
    assert trainer.args.per_device_eval_batch_size == DEFAULT_TRAINING["per_device_eval_batch_size"]


def test_eval_batch_of_the_toy_defaults_holds_whole_groups(toy_cache):
    argv = ["--eval_strategy", "steps", "--eval_steps", "10"]  # the toy defaults alone: 16 generations
    args = grpo.make_parser("sapo", argv).parse_args_and_config(argv)[1]  # TRL's GRPOConfig check passes
    assert args.per_device_eval_batch_size % args.num_generations == 0 and args.num_generations == 16


def _prompts_without_test_split(tmp_path) -> str:
    folder = tmp_path / "prompts"
    folder.mkdir()
    rows = [{"prompt": "Repeat the letter a:", "chosen": " a a", "rejected": " b b"}] * 4
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(folder)


@pytest.mark.parametrize("script", ["sapo", "mix", "dpo"])
def test_missing_test_split_is_named_before_the_model_loads(tmp_path, script):
    data = _prompts_without_test_split(tmp_path)
    # a model that cannot load (an empty directory): loading it first would be another error
    (tmp_path / "empty-model").mkdir()
    argv = ["--output_dir", str(tmp_path / "out"), "--model_name_or_path", str(tmp_path / "empty-model")]
    argv += ["--dataset_name", data, "--eval_strategy", "steps"]
    if script == "mix":
        argv += ["--expert_dataset_name", data]
    expected = r"--dataset_test_split 'test': the dataset .*prompts has no split 'test' \(its splits: 'train'\)"
    with pytest.raises(ValueError, match=expected + r".*--eval_strategy no"):
        dpo.main(argv) if script == "dpo" else grpo.main(script, argv)
    with pytest.raises(ValueError, match=r"--dataset_train_split 'training': .* \(its splits: 'train'\)"):
        argv = [*argv, "--dataset_train_split", "training", "--eval_strategy", "no"]
        dpo.main(argv) if script == "dpo" else grpo.main(script, argv)


@pytest.mark.parametrize("script", ["sft", "cpt", "dpo"])
def test_the_users_data_without_a_test_split_trains_without_evaluation(toy_cache, tmp_path, script, capsys):
    """The toy defaults of SFT, CPT and DPO evaluate on a "test" split; a user's dataset without one trains without
    evaluation (the summary says why) instead of stopping. Asked for on the command line, evaluation still needs it."""
    from trl_ext.scripts import cpt, sft

    folder = tmp_path / "data"
    folder.mkdir()
    row = {
        "sft": {"prompt": "Repeat the letter a:", "completion": " a a"},
        "cpt": {"text": "Repeat the letter a: a a"},
        "dpo": {"prompt": "Repeat the letter a:", "chosen": " a a", "rejected": " b b"},
    }[script]
    (folder / "train.jsonl").write_text((json.dumps(row) + "\n") * 16)
    main = {"sft": sft.main, "cpt": cpt.main, "dpo": dpo.main}[script]
    argv = ["--output_dir", str(tmp_path / "out"), "--dataset_name", str(folder), "--max_steps", "1"]
    argv += ["--save_strategy", "no", "--per_device_train_batch_size", "4"]
    trainer = main(argv)
    assert trainer.state.global_step == 1 and trainer.eval_dataset is None
    assert trainer.args.eval_strategy == "no" and not any("eval_loss" in entry for entry in trainer.state.log_history)
    assert "no 'test' split: evaluation off" in " ".join(capsys.readouterr().out.split())  # the summary wraps
    with pytest.raises(ValueError, match=r"--dataset_test_split 'test': .* has no split 'test'"):
        main([*argv, "--eval_strategy", "steps"])


def _parsed(algorithm: str, argv: list[str]):
    return grpo.make_parser(algorithm, argv).parse_args_and_config(argv)[1]


def test_toy_defaults_apply_under_the_config_file(toy_cache, tiny_model):
    """Command line > --config file > toy defaults > TRL's defaults on the toy model (no model named, or the toy's
    path); a real model gets TRL's defaults."""
    # configs/sapo.yaml sets learning_rate 1e-6, num_generations 8, max_completion_length 1024, temperature 1.0 and
    # the algorithm's fields; the other toy defaults stay
    for argv in (["--config", SAPO_RECIPE], ["--config", SAPO_RECIPE, "--model_name_or_path", tiny_model]):
        args = _parsed("sapo", argv)
        assert (args.learning_rate, args.num_generations, args.max_completion_length) == (1e-6, 8, 1024)  # the file
        assert args.warmup_steps == 20 and args.max_grad_norm == 0.2 and args.max_steps == 200  # the toy's
        assert args.per_device_train_batch_size == 128 and args.output_dir == "outputs/sapo-tiny"
        assert args.tau_neg == 1.05 and args.loss_agg_mode == "seq-mean-token-mean"
        assert not args.activation_checkpointing
    args = _parsed("sapo", ["--config", SAPO_RECIPE, "--learning_rate", "5e-4", "--max_steps=7"])  # the command line
    assert args.learning_rate == 5e-4 and args.max_steps == 7 and args.num_generations == 8
    args = _parsed("sapo", ["--model_name_or_path", tiny_model])  # the toy's path, no recipe: all toy defaults
    assert all(getattr(args, key) == value for key, value in DEFAULT_TRAINING.items())
    args = _parsed("sapo", ["--config", SAPO_RECIPE, "--model_name_or_path", "Qwen/Qwen2.5-0.5B-Instruct"])
    assert args.learning_rate == 1e-6 and args.warmup_steps == 0 and args.max_grad_norm == 1.0  # TRL's
    assert args.per_device_train_batch_size == 8 and args.max_steps == -1 and args.activation_checkpointing
    argv = ["--config", os.path.join(ROOT, "configs", "dpo.yaml"), "--model_name_or_path", tiny_model]
    dpo_args = dpo.make_parser("dpo", argv).parse_args_and_config(argv)[1]
    assert dpo_args.max_steps == DPO_TRAINING["max_steps"] and dpo_args.eval_strategy == "steps"


def test_summary_before_training(toy_cache, tmp_path, capsys):
    argv = ["--config", SAPO_RECIPE, "--output_dir", str(tmp_path), *QUICK, "--max_completion_length", "8"]
    grpo.main("sapo", [*argv, "--tau_neg", "1.1"])
    out = capsys.readouterr().out
    summary = out[out.index("trl_ext sapo: SAPOTrainer / SAPOConfig, 1 process(es) on cpu") :]
    summary = summary[: summary.index("\n  output      ")].splitlines()
    assert len(summary) <= 15, summary
    text = re.sub(r"\s+", " ", "\n".join(summary))  # lines are wrapped at 118 characters
    assert re.search(r"model +tiny-qwen2-v2 \(trl_ext's toy model, .*\): [\d,]+ parameters", text)
    assert "learning_rate 1e-06 (linear, warmup 20 steps), max_grad_norm 0.2" in text  # the recipe's, the toy's
    assert "8 completions per device x 1 accumulation step(s) x 1 process(es) = 8 completions per optimizer" in text
    assert "8 completions per generation batch = 2 prompts x num_generations 4; max_completion_length 8" in text
    assert "max_steps 2; logging every 1 steps; eval off" in text
    settings = "sapo settings: tau_neg=1.1 (default 1.05), loss_agg_mode='seq-mean-token-mean' (default 'token-mean')"
    assert settings in text
    assert "toy defaults (trl_ext.toy.DEFAULT_TRAINING" in text and "warmup_steps=20, max_grad_norm=0.2" in text
    recipe = re.search(r"overridden by --config \S*sapo.yaml: (.*?) overridden by the command line", text)
    assert recipe and "learning_rate=1e-06 (toy 0.001)" in recipe.group(1)
    assert "temperature=1.0 (toy 1.0)" in recipe.group(1)
    assert "max_completion_length=8 (toy 8)" in text.split("overridden by the command line")[1]
    after = " ".join(out[out.index("\n  output      ") :].split())  # the warning, below the summary
    assert re.search(r"Warning: \S*sapo.yaml is a recipe for a real model; on the toy model its settings may", after)


def test_short_run_prints_no_warnings(toy_cache, tmp_path):
    """A launched example: no warning (accelerate's launcher notice needs an accelerate config, here the shipped
    single-device one; the README says so)."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]
    command += [os.path.join(ROOT, "configs", "accelerate", "single_device.yaml")]
    command += [os.path.join(ROOT, "examples", "train_sapo.py"), "--output_dir", str(tmp_path), "--max_steps", "2"]
    command += ["--eval_strategy", "steps", "--eval_steps", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    output = (result.stdout + result.stderr).replace(str(tmp_path), "<output_dir>")  # its name has "warn" in it
    assert "'eval_reward'" in output and "Trained sapo for 2 steps" in output
    warnings = [line for line in re.split(r"[\r\n]", output) if "warn" in line.lower()]
    assert not warnings, warnings
