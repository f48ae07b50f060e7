"""Each GRPO-family algorithm's asynchronous form (`trl_ext.async_config_class`, `AsyncSAPOConfig`, ...): the same
fields and defaults as its synchronous config, the same trained parts, and `--asynchronous true` on the command line."""

from __future__ import annotations

import dataclasses
import math
import pickle
import statistics

import pytest
from trainer_helpers import CPU

import trl_ext
from trl_ext.cli import train as cli_train
from trl_ext.scripts._common import UsageError
from trl_ext.trainers.asynchronous.forms import async_algorithms, async_config_class

FORMS = [name for name, reason in async_algorithms().items() if reason is None]
AGENTS = ("gigpo", "multi_step_grpo")
"""The multi-turn agents: they learn the toy lookup task with tools (`test_async_agents.py`), not the letter task."""


def test_every_algorithm_that_generates_has_an_asynchronous_form():
    status = async_algorithms()
    # all but TRL's experimental trainers, each a family of its own that says why it is synchronous only
    synchronous = {name for name, spec in trl_ext.ALGORITHMS.items() if spec.family and spec.family.synchronous_only}
    assert {name for name, reason in status.items() if reason is not None} == synchronous
    assert synchronous == {"a2po", "iw_opd", "online_dpo", "sdft", "sdpo"}
    assert len(FORMS) == 31 and {"sapo", "grpo", *AGENTS} <= set(FORMS) and "async_grpo" not in status


OPTIONS = {"output_dir": "out", **CPU, "max_steps": 1}


@pytest.mark.parametrize("algorithm", FORMS)
def test_the_asynchronous_form_trains_the_synchronous_configs_parts(algorithm):
    """Same record fields under the same names and defaults, and the same built loss and estimator (their repr: the
    class and every argument); GRPO's form is TRL's asynchronous objective (`AsyncGRPOConfig`)."""
    spec = trl_ext.get_algorithm(algorithm)
    form = async_config_class(algorithm)
    assert issubclass(form, trl_ext.AsyncGRPOConfig) and getattr(trl_ext, form.__name__) is form
    if algorithm == "grpo":
        assert form is trl_ext.AsyncGRPOConfig
        return
    assert form.__name__ == "Async" + spec.config_class.__name__
    sync_fields = {f.name: f.default for f in dataclasses.fields(spec.config_class)}
    form_fields = {f.name: f.default for f in dataclasses.fields(form) if f.name in form.__dataclass_fields__}
    for name, _, _ in trl_ext.trainers.core.arguments.algorithm_fields(algorithm):
        if name != "kl_penalty_fn":  # the worker has no reference model: no KL in the reward
            assert form_fields[name] == sync_fields[name], name
    asynchronous = form(**OPTIONS, rollout_backend="transformers", token_budget=0)
    synchronous = spec.config_class(**OPTIONS)
    assert repr(asynchronous.components.policy_loss) == repr(synchronous.components.policy_loss)
    assert repr(asynchronous.components.advantage_fn) == repr(synchronous.components.advantage_fn)
    restored = pickle.loads(pickle.dumps(asynchronous))  # a checkpoint's training_args.bin
    assert type(restored) is form and repr(restored.components.policy_loss) == repr(asynchronous.components.policy_loss)


def test_a_record_field_reaches_the_loss_and_a_bad_one_is_refused_by_name():
    config = trl_ext.AsyncSAPOConfig(output_dir="out", **CPU, tau_pos=2.0, tau_neg=2.5, token_budget=0)
    assert (config.components.policy_loss.tau_pos, config.components.policy_loss.tau_neg) == (2.0, 2.5)
    with pytest.raises(ValueError, match="tau_neg"):
        trl_ext.AsyncSAPOConfig(output_dir="out", **CPU, tau_pos=2.0, tau_neg=1.0, token_budget=0)


def test_no_form_is_an_error_naming_why():
    assert trl_ext.AsyncGiGPOConfig is async_config_class("gigpo")
    assert not hasattr(trl_ext, "AsyncDPOConfig")
    with pytest.raises(ValueError, match="dpo has no asynchronous form: it trains on a fixed dataset"):
        async_config_class("dpo")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--algorithm", "dpo", "--asynchronous", "true"], "dpo has no asynchronous form: it trains on a fixed"),
        (["--algorithm", "sapo", "--asynchronous", "maybe"], "--asynchronous: 'maybe' is not a boolean"),
        (["--algorithm", "sapo", "--asynchronous=sometimes"], "--asynchronous: 'sometimes' is not a boolean"),
    ],
)
def test_asynchronous_usage_errors(argv, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        cli_train(argv[1], argv[2:])


def test_the_asynchronous_flag_from_a_config_file_is_refused(tmp_path, toy_cache):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("asynchronous: true\n")
    with pytest.raises(UsageError, match="set it on the command line"):
        cli_train("sapo", ["--config", str(recipe), "--output_dir", str(tmp_path / "out"), "--max_steps", "1"])


def test_cli_trains_sapo_asynchronously_on_the_toy(toy_cache, tmp_path, capsys):
    """`trl-ext train --algorithm sapo --asynchronous true`: AsyncGRPOTrainer on AsyncSAPOConfig with the toy's
    defaults (the transformers worker), SAPO's flags parsed, its loss logged; a plain run's output is not reused."""
    out = tmp_path / "out"
    argv = ["--asynchronous", "true", "--output_dir", str(out), "--max_steps", "3", "--tau_neg", "1.5"]
    argv += ["--per_device_train_batch_size", "8", "--num_generations", "4", "--logging_steps", "1"]
    argv += ["--save_strategy", "no", "--report_to", "none"]
    trainer = cli_train("sapo", argv)
    assert type(trainer) is trl_ext.AsyncGRPOTrainer and type(trainer.args) is trl_ext.AsyncSAPOConfig
    assert trainer.args.rollout_backend == "transformers" and trainer.args.tau_neg == 1.5
    assert trainer.loss_step.policy_loss_fn.tau_neg == 1.5
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["step"] for entry in logs] == [1, 2, 3]
    assert all(math.isfinite(entry["sapo_loss"]) and "trained_staleness_mean" in entry for entry in logs)
    printed = capsys.readouterr().out
    assert "AsyncGRPOTrainer / AsyncSAPOConfig" in printed and "tau_neg=1.5" in printed
    assert (out / "model.safetensors").is_file()


def test_the_default_output_dir_of_an_asynchronous_run_is_its_own(toy_cache):
    from trl_ext.scripts.grpo import make_parser

    for argv, expected in (([], "outputs/sapo-tiny"), (["--asynchronous", "true"], "outputs/sapo-async-tiny")):
        parser = make_parser("sapo", argv)
        assert parser.parse_args_and_config(argv)[1].output_dir == expected


def test_dapos_dynamic_sampling_and_overlong_shaping_reach_the_workers_scorer(tiny_model, tmp_path):
    from async_helpers import stub_trainer

    config = trl_ext.AsyncDAPOConfig(
        output_dir=str(tmp_path), **CPU, token_budget=0, dynamic_sampling=True, overlong_buffer=4,
        overlong_penalty_factor=0.5, max_completion_length=8,
    )  # fmt: skip
    scorer = stub_trainer(tiny_model, config).group_scorer
    assert scorer.drop_uniform_groups and scorer.overlong == (8, 4, 0.5)
    paper = stub_trainer(tiny_model, trl_ext.AsyncDAPOConfig(output_dir=str(tmp_path), **CPU, token_budget=0))
    length = paper.args.max_completion_length  # the paper's defaults: both on, the buffer a fifth of the length
    assert paper.group_scorer.drop_uniform_groups and paper.group_scorer.overlong == (length, length // 5, 1.0)
    off = {"dynamic_sampling": False, "overlong_buffer": 0}
    off = trl_ext.AsyncDAPOConfig(output_dir=str(tmp_path), **CPU, token_budget=0, **off)
    plain = stub_trainer(tiny_model, off)
    assert not plain.group_scorer.drop_uniform_groups and plain.group_scorer.overlong is None
    with pytest.raises(ValueError, match=r"dynamic_sampling=True drops the prompt groups .* num_generations=1"):
        trl_ext.AsyncDAPOConfig(output_dir="out", **CPU, token_budget=0, dynamic_sampling=True, num_generations=1)


ASYNC_RUN = {
    **CPU, "learning_rate": 1e-3, "per_device_train_batch_size": 64, "num_generations": 16, "max_completion_length": 8,
    "max_steps": 60, "warmup_steps": 2, "max_grad_norm": 0.2, "logging_steps": 1,
}  # fmt: skip
"""test_async_trainer's learning run (TRL's constant learning rate after 2 warm-up steps), 60 steps instead of 40:
GSPO's sequence clip (3e-4) and DRO's and KL-Cov's penalties learn more slowly from stale samples (measured alone,
2026-11-29, max_staleness 1: 40 steps gained +0.15 to +0.29 for these three, 60 steps +0.58 to +0.76)."""

ON_POLICY_ONLY = ("opmd", "sppo")
"""Learns the toy asynchronously only at max_staleness=0, and slowly: OPMD's loss, −A·log π/(1 + τ), has no importance
ratio to correct a stale sample (measured alone, 2026-11-29: 60 steps at max_staleness 1 gave 0.10 -> 0.07 and 0.10 ->
0.13; at max_staleness 0, 0.12 -> 0.54 alone but 0.12 -> 0.30 beside the slow tier's other runs, and 100 steps
0.12 -> 0.78; AsymRE, the same loss with its own baseline, 0.11 -> 0.77 in 60 steps at max_staleness 1). Trained
100 steps here. SPPO, whose loss regresses the log-ratio against the sampler μ, learned at max_staleness 1 when run
alone (2026-11-29: 0.15 -> 0.54 in 60 steps) but not beside other runs (0.13 -> 0.125 in the slow tier, 0.13 -> 0.05
beside OPMD): at max_staleness 0 (100 steps) it learned in both settings."""

SLOWER = ("gpg", "on_policy_distill", "jsd")
"""Learn the toy asynchronously more slowly, trained 100 steps (measured alone, 2026-11-29, max_staleness 1: GPG 0.13
-> 0.30 in 60 steps, 0.13 -> 0.80 in 100; on-policy distillation from the toy teacher 0.14 -> 0.35 in 60 steps, the
synchronous trainer's pace: its docs report 0.09 -> 0.90 in 100)."""

DAPO_ON = {"dynamic_sampling": True, "overlong_buffer": 4, "clip_range_high": 0.28}
"""DAPO's techniques on (configs/dapo.yaml's choices, the buffer scaled to the toy's 8 tokens)."""


@pytest.mark.slow  # ~30 s an algorithm
@pytest.mark.parametrize(
    ("algorithm", "settings"), [*((name, {}) for name in FORMS if name not in AGENTS), ("dapo", DAPO_ON)]
)
def test_every_asynchronous_form_learns_the_toy(algorithm, settings, tiny_model, tiny_teacher, tmp_path):
    """60 steps of 64 completions on the transformers worker (`ASYNC_RUN`), samples up to one version stale (none for
    `ON_POLICY_ONLY`): the reward rises from the toy model's ~0.1 by the synchronous learning tests' margin. With
    DAPO's dynamic sampling the worker drops uniform groups (counted) and training goes on."""
    from trl_ext.toy import build_tokenizer, toy_dataset, toy_expert_dataset, toy_reward

    run = {**ASYNC_RUN, **settings, **({"max_steps": 100} if algorithm in (*ON_POLICY_ONLY, *SLOWER) else {})}
    config = async_config_class(algorithm)(
        output_dir=str(tmp_path), **run, rollout_backend="transformers", token_budget=0,
        max_staleness=0 if algorithm in ON_POLICY_ONLY else 1,
    )  # fmt: skip
    trainer = trl_ext.AsyncGRPOTrainer(
        model=tiny_model, reward_funcs=toy_reward, args=config, train_dataset=toy_dataset(256),
        processing_class=build_tokenizer(), teacher_model=tiny_teacher if config.has_teacher else None,
        **({"expert_dataset": toy_expert_dataset()} if config.has_experts else {}),
    )  # fmt: skip
    trainer.train()
    # the generated samples' reward (`rollout/reward_mean`: every scored sample; TRL's `reward` is the trained
    # samples', which RAFT's filter and dynamic sampling select)
    rewards = [entry["rollout/reward_mean"] for entry in trainer.state.log_history if "rollout/reward_mean" in entry]
    first, last = statistics.mean(rewards[:5]), statistics.mean(rewards[-5:])
    assert last > first + 0.2, (first, last, [round(r, 2) for r in rewards])
    assert trainer.state.global_step == run["max_steps"]
    if settings.get("dynamic_sampling"):
        dropped = sum(entry.get("rollout/uniform_groups_total", 0) for entry in trainer.state.log_history)
        assert dropped > 0


def test_trls_two_step_callbacks_are_added_without_the_duplicate_notice(tiny_model, tmp_path, capfd):
    from async_helpers import stub_trainer

    trainer = stub_trainer(tiny_model, trl_ext.AsyncSAPOConfig(output_dir=str(tmp_path), **CPU, token_budget=0))
    from trl.experimental.async_grpo.async_grpo_trainer import StepIntervalCallback

    intervals = [c for c in trainer.callback_handler.callbacks if isinstance(c, StepIntervalCallback)]
    assert len(intervals) == 2  # the weight sync and the step metrics, both kept
    assert "but there is already one" not in capfd.readouterr().err


def test_a_pickled_asynchronous_config_loads_in_a_process_that_never_built_its_class(tmp_path):
    """A checkpoint's `training_args.bin` holds the config: pickle finds `AsyncSAPOConfig` through the forms
    module's `__getattr__`, which builds it there."""
    import subprocess
    import sys

    saved = tmp_path / "args.pkl"
    saved.write_bytes(pickle.dumps(trl_ext.AsyncSAPOConfig(output_dir="out", **CPU, token_budget=0, tau_neg=1.5)))
    code = f"import pickle; c = pickle.load(open({str(saved)!r}, 'rb')); print(type(c).__name__, c.tau_neg)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-2:] == ["AsyncSAPOConfig", "1.5"]  # after a logger's line (wandb offline)
