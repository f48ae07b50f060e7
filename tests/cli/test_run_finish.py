"""The end of a training script's run: resuming (`--resume_from_checkpoint`), the closing line, the training curves
(`trl_ext/scripts/finish.py`, `curves.py`) and the noise the scripts silence or explain (`noise.py`, the critic's
value head: `trl_ext/trainers/critic/new_head.py`)."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import warnings
from types import SimpleNamespace

import pytest

from trl_ext.scripts.curves import logged_keys, plot_training_curves
from trl_ext.scripts.finish import (
    ResumePoint,
    asynchronous_clause,
    loss_metrics,
    main_metric,
    overwrite_notice,
    progress,
    resolve_checkpoint,
    resume_point,
    save_curves,
    steps_trained,
)
from trl_ext.scripts.grpo import main
from trl_ext.scripts.noise import ENVIRONMENT_FACTORY_NOTICE, noise_notes, quiet_known_warnings

QUICK = ["--per_device_train_batch_size", "8", "--num_generations", "4", "--logging_steps", "1"]
PNG = b"\x89PNG\r\n\x1a\n"


def _history(rewards, every=1):
    """A fake `trainer.state.log_history`: a training log per `every` steps, an evaluation, the run's summary."""
    logs = [
        {"loss": 0.5 / (i + 1), "reward": r, "sapo_loss": -r / 10, "learning_rate": 1e-3, "step": (i + 1) * every}
        for i, r in enumerate(rewards)
    ]
    last = logs[-1]["step"] if logs else 0
    return [*logs, {"eval_reward": 0.4, "step": last}, {"train_loss": 0.3, "train_runtime": 1.0, "step": last}]


# ---------------------------------------------------------------------------------------------- closing line


def test_progress_is_the_first_and_last_logged_value():
    history = _history([0.1, 0.5, 0.98], every=5)
    assert progress(history, "reward") == "reward 0.10 -> 0.98 over steps 5-15"
    assert progress(history, "reward", since_step=5) == "reward 0.50 -> 0.98 over steps 10-15"  # a resumed run's own
    assert progress(history, "reward", since_step=10) == "reward 0.98 at step 15"
    assert progress(history, "loss") == "loss 0.50 -> 0.17 over steps 5-15"  # not the summary's train_loss
    assert progress(_history([0.001234, 0.0]), "reward") == "reward 0.00123 -> 0 over steps 1-2"
    assert progress(_history([]), "reward", logging_steps=500) == "no reward logged (logging_steps 500)"
    assert progress(_history([]), "loss") == "no loss logged"


def test_main_metric_is_the_reward_for_generating_families_else_the_loss():
    assert main_metric(_history([0.1, 0.2]), "experience") == "reward"
    assert main_metric(_history([0.1, 0.2]), "dpo") == "loss"
    assert main_metric(_history([0.1, 0.2]), "sft") == "loss"
    assert main_metric([{"loss": 1.0, "step": 1}], "experience") == "loss"  # nothing scored the rollouts


def test_steps_trained_counts_the_steps_of_this_run():
    resumed = ResumePoint("outputs/sapo-tiny/checkpoint-4", 4, 10)
    assert resumed.line() == "Resuming from outputs/sapo-tiny/checkpoint-4 (step 4 of 10)"
    assert ResumePoint("ckpt", 4, None).line() == "Resuming from ckpt (step 4)"
    assert steps_trained("sapo", 10, resumed) == "Trained sapo for 6 steps (steps 5-10, resumed from step 4)"
    assert steps_trained("sapo", 5, resumed) == "Trained sapo for 1 steps (step 5, resumed from step 4)"
    assert steps_trained("sapo", 4, resumed) == "Trained sapo for 0 steps (resumed from step 4)"
    assert steps_trained("sapo", 200, None) == "Trained sapo for 200 steps"


def test_loss_metrics_are_the_algorithms_own():
    from trl_ext.losses import get_policy_loss

    def trainer(loss):
        return SimpleNamespace(policy_loss_fn=get_policy_loss(loss))

    assert loss_metrics(trainer("sapo")) == ["sapo_loss", "vf_loss"]
    assert loss_metrics(trainer("ppo")) == ["pg_loss", "vf_loss"]
    assert loss_metrics(trainer("dpo")) == ["dpo_loss", "vf_loss"]
    assert loss_metrics(SimpleNamespace()) == ["policy_loss", "vf_loss"]  # no policy loss of its own
    mix = loss_metrics(trainer("mix"))
    assert "usual/pg_loss" in mix and "expert/sft_loss" in mix and "loss" not in mix


# ---------------------------------------------------------------------------------------------- curves


def test_plot_draws_the_main_metric_the_losses_and_the_learning_rate(tmp_path):
    path = str(tmp_path / "curves.png")
    drawn = plot_training_curves(_history([0.1, 0.5, 0.9]), path, "trl_ext sapo", "reward", ["sapo_loss", "vf_loss"], 2)
    assert drawn == ["reward", "eval_reward", "sapo_loss", "learning_rate"]  # vf_loss: not logged
    with open(path, "rb") as f:
        assert f.read(8) == PNG
    mix = [{"usual/pg_loss": 0.1, "expert/sft_loss": 2.0, "loss": 1.0, "step": 1}]
    assert logged_keys(mix, ["pg_loss", "sft_loss"]) == ["usual/pg_loss", "expert/sft_loss"]
    assert plot_training_curves(mix, path, "mix", "loss", ["pg_loss", "sft_loss"]) == [
        "loss",
        "usual/pg_loss",
        "expert/sft_loss",
    ]
    sft = [{"loss": 2.0 / step, "sft_loss": 2.0 / step, "learning_rate": 1e-3, "step": step} for step in (1, 2, 3)]
    assert plot_training_curves(sft, path, "cpt", "loss", ["sft_loss"]) == ["loss", "learning_rate"]  # no repeat
    sft[1]["sft_loss"] = 0.5  # a loss metric that differs from the main one somewhere keeps its panel
    assert plot_training_curves(sft, path, "cpt", "loss", ["sft_loss"]) == ["loss", "sft_loss", "learning_rate"]
    asynchronous = [
        {"reward": 0.1 * step, "trained_staleness_mean": 0.5, "trained_staleness_max": 1.0, "step": step,
         "perf/trained_tok_s_wall_clock": 900.0 + step}
        for step in (1, 2, 3)
    ]  # fmt: skip
    assert plot_training_curves(asynchronous, path, "async sapo", "reward") == [
        "reward", "trained_staleness_mean", "trained_staleness_max", "perf/trained_tok_s_wall_clock",
    ]  # fmt: skip
    without_throughput = [{k: v for k, v in entry.items() if not k.startswith("perf/")} for entry in asynchronous]
    assert plot_training_curves(without_throughput, path, "async", "reward")[-1] == "trained_staleness_max"
    empty = str(tmp_path / "empty.png")
    assert plot_training_curves([{"train_runtime": 1.0, "step": 0}], empty, "t", "reward") == []
    assert not os.path.exists(empty)


def test_curves_without_matplotlib_say_how_to_get_it(tmp_path, monkeypatch):
    trainer = SimpleNamespace(args=SimpleNamespace(output_dir=str(tmp_path)), state=SimpleNamespace(log_history=[]))
    assert save_curves(trainer, "sapo", "reward", None) == "no training curves (nothing logged)"
    trainer.state.log_history = _history([0.1, 0.2])
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # an import of it fails
    assert save_curves(trainer, "sapo", "reward", None) == (
        "no training curves: matplotlib is missing (pip install matplotlib)"
    )


# ---------------------------------------------------------------------------------------------- resuming


def _checkpoint(folder, step, max_steps=10):
    os.makedirs(folder)
    with open(os.path.join(folder, "trainer_state.json"), "w") as f:
        json.dump({"global_step": step, "max_steps": max_steps}, f)
    return str(folder)


def test_resume_resolves_true_to_the_last_checkpoint(tmp_path):
    _checkpoint(tmp_path / "checkpoint-2", 2)
    last = _checkpoint(tmp_path / "checkpoint-10", 10)
    for value in (True, "True", "true"):
        assert resolve_checkpoint(value, str(tmp_path)) == last
    for value in (None, False, "False", "false", ""):
        assert resolve_checkpoint(value, str(tmp_path)) is None
    assert resolve_checkpoint(last, "elsewhere") == last

    args = SimpleNamespace(resume_from_checkpoint="True", output_dir=str(tmp_path), max_steps=-1)
    assert resume_point(args) == ResumePoint(last, 10, 10)  # the planned length: the checkpoint's
    assert args.resume_from_checkpoint == last  # what the trainer loads
    args = SimpleNamespace(resume_from_checkpoint=str(tmp_path / "checkpoint-2"), output_dir="o", max_steps=20)
    assert resume_point(args) == ResumePoint(str(tmp_path / "checkpoint-2"), 2, 20)
    assert resume_point(SimpleNamespace(resume_from_checkpoint=None, output_dir="o", max_steps=5)) is None


def test_resume_refuses_what_is_not_a_checkpoint(tmp_path):
    with pytest.raises(ValueError, match=r"--resume_from_checkpoint .*nowhere: no such folder; give a checkpoint"):
        resolve_checkpoint(str(tmp_path / "nowhere"), str(tmp_path))
    with pytest.raises(ValueError, match=r"--resume_from_checkpoint True: --output_dir .* has no checkpoint-<step>"):
        resolve_checkpoint("True", str(tmp_path))
    with pytest.raises(ValueError, match="has no checkpoint-<step> folder"):
        resolve_checkpoint(True, str(tmp_path / "not_created"))
    with pytest.raises(ValueError, match=r"not a training checkpoint \(no trainer_state.json\)"):
        resolve_checkpoint(str(tmp_path), str(tmp_path))


@pytest.mark.parametrize("script", ["grpo", "dpo"])
def test_a_wrong_resume_fails_before_the_model_loads(tmp_path, monkeypatch, script):
    from trl_ext import toy
    from trl_ext.scripts import dpo

    monkeypatch.setattr(toy, "tiny_model_path", lambda *a, **k: pytest.fail("the model was looked up"))
    argv = ["--output_dir", str(tmp_path), "--resume_from_checkpoint", str(tmp_path / "missing")]
    with pytest.raises(ValueError, match=r"--resume_from_checkpoint .*missing: no such folder"):
        main("sapo", argv) if script == "grpo" else dpo.main(argv)


def test_a_resumed_run_says_where_it_resumed_and_counts_its_own_steps(toy_cache, tmp_path, capsys):
    output = str(tmp_path)
    main("sapo", ["--output_dir", output, *QUICK, "--max_steps", "1", "--save_strategy", "steps", "--save_steps", "1"])
    first = capsys.readouterr().out
    assert re.search(
        rf"^Trained sapo for 1 steps on 1 process\(es\): reward \S+ at step 1; model saved to {re.escape(output)}; "
        rf"curves in {re.escape(os.path.join(output, 'training_curves.png'))}$",
        first,
        re.MULTILINE,
    ), first[-2000:]

    trainer = main("sapo", ["--output_dir", output, *QUICK, "--max_steps", "2", "--resume_from_checkpoint", "True"])
    out = capsys.readouterr().out
    assert trainer.state.global_step == 2
    checkpoint = os.path.join(output, "checkpoint-1")
    assert f"Resuming from {checkpoint} (step 1 of 2)" in out
    assert re.search(r"^Trained sapo for 1 steps \(step 2, resumed from step 1\) on 1 process\(es\): reward \S+ at "
                     r"step 2; model saved to ", out, re.MULTILINE), out[-2000:]  # fmt: skip
    with open(os.path.join(output, "training_curves.png"), "rb") as f:
        assert f.read(8) == PNG


# ---------------------------------------------------------------------------------------------- noise


def noisy_reward(completions, **kwargs):
    """The toy task's reward, with a warning of its own (a user's, which the scripts must not silence)."""
    from trl_ext.toy import toy_reward

    warnings.warn("a warning of the user's reward function", UserWarning, stacklevel=1)
    return toy_reward(completions=completions, **kwargs)


def _messages(caught) -> str:
    return "\n".join(f"{w.category.__name__}: {w.message}" for w in caught)


def test_a_peft_run_is_quiet_but_other_warnings_show(toy_cache, tmp_path):
    argv = ["--output_dir", str(tmp_path), *QUICK, "--max_steps", "1", "--save_strategy", "no"]
    argv += ["--use_peft", "--lora_r", "4", "--reward_funcs", f"{__name__}.noisy_reward"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main("grpo", argv)  # PEFT's wrapping and TRL's generation read `is_gradient_checkpointing`
    assert "is_gradient_checkpointing" not in _messages(caught)
    assert "a warning of the user's reward function" in _messages(caught)


def test_trl_environment_factory_notice_is_silenced_for_trl_ext_only(toy_cache, tiny_agent, tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "0")  # the test session silences TRL's notices
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main("gigpo", ["--output_dir", str(tmp_path), "--max_steps", "1", "--save_strategy", "no"])
        with quiet_known_warnings():  # the filter's scope: the notice attributed to trl_ext, nothing else
            text = "You are using 'environment_factory', which is an experimental feature (a user's call)"
            warnings.warn_explicit(text, UserWarning, "my_training.py", 1, module="my_training")
            warnings.warn("another UserWarning", UserWarning, stacklevel=1)
    notices = [str(w.message) for w in caught if re.match(ENVIRONMENT_FACTORY_NOTICE, str(w.message))]
    assert notices == [text]  # the one attributed to trl_ext's trainer (the script's run): silenced
    assert "another UserWarning" in _messages(caught)


def test_toy_runs_tell_ddp_that_every_parameter_trains(tiny_model, toy_cache):
    from accelerate.utils import DistributedDataParallelKwargs, DistributedType

    from trl_ext.scripts.grpo import make_parser

    def parsed(argv):
        return make_parser("sapo", argv).parse_args_and_config(argv)[1].ddp_find_unused_parameters

    assert parsed([]) is False  # the toy model: DDP's search (and its warning that it found nothing) is off
    assert parsed(["--ddp_find_unused_parameters", "true"]) is True
    assert parsed(["--model_name_or_path", "Qwen/Qwen2.5-0.5B"]) is None  # a real model: transformers decides

    def trainer(processes, find_unused, kind=DistributedType.MULTI_CPU):
        handler = DistributedDataParallelKwargs(find_unused_parameters=find_unused)
        return SimpleNamespace(
            accelerator=SimpleNamespace(num_processes=processes, distributed_type=kind, ddp_handler=handler)
        )

    (note,) = noise_notes(trainer(2, True))  # what no filter reaches is said once, in the run summary
    assert "find_unused_parameters=True" in note and "--ddp_find_unused_parameters false" in note
    assert noise_notes(trainer(2, False)) == noise_notes(trainer(1, True)) == []
    assert noise_notes(trainer(2, True, DistributedType.DEEPSPEED)) == []


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_the_critics_new_value_head_is_loaded_without_a_load_report(tiny_model, tmp_path):
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

    from trl_ext import PPOTrainer
    from trl_ext.trainers.critic.new_head import LOAD_REPORT, from_pretrained_with_new_head

    records = _Records()
    logger = logging.getLogger("transformers.modeling_utils")
    logger.addHandler(records)
    try:
        config = AutoConfig.from_pretrained(tiny_model, num_labels=1)
        AutoModelForTokenClassification.from_pretrained(tiny_model, config=config)
        assert any(LOAD_REPORT in m and "score.weight" in m for m in records.messages)  # transformers' report
        records.messages.clear()

        policy = AutoModelForCausalLM.from_pretrained(tiny_model)  # the critic PPO trainer's loading, on its own
        args = SimpleNamespace(value_model_init_kwargs=None, trust_remote_code=False)
        critic = PPOTrainer._load_value_model(SimpleNamespace(model=policy, args=args), tiny_model)
        assert critic.config.num_labels == 1 and records.messages == []

        broken = tmp_path / "broken"  # a checkpoint that lacks a backbone weight: the report stays
        broken.mkdir()
        weights = load_file(os.path.join(tiny_model, "model.safetensors"))
        save_file({k: v for k, v in weights.items() if k != "model.norm.weight"}, str(broken / "model.safetensors"))
        config.save_pretrained(str(broken))
        from_pretrained_with_new_head(AutoModelForTokenClassification, str(broken), config=config)
        assert len(records.messages) == 1 and "model.norm.weight" in records.messages[0]
    finally:
        logger.removeHandler(records)


def test_an_asynchronous_runs_closing_clause_gives_staleness_drops_and_the_wait_share():
    history = [
        {"reward": 0.1, "trained_staleness_mean": 1.0, "trained_staleness_max": 2.0, "perf/step_s": 1.0,
         "perf/rollout_wait_s": 0.25, "sample/dropped_stale_total": 3.0},
        {"reward": 0.5, "trained_staleness_mean": 0.5, "trained_staleness_max": 1.0, "perf/step_s": 3.0,
         "perf/rollout_wait_s": 0.75, "rollout/uniform_groups_total": 2.0},
        {"train_runtime": 4.0},
    ]  # fmt: skip
    assert asynchronous_clause(history) == (
        "; trained staleness mean 0.75 / max 2, 3 stale samples dropped, 2 uniform groups dropped, 25% of the "
        "training time waiting for rollouts"
    )
    assert asynchronous_clause(_history([0.1, 0.5])) == ""  # a synchronous run's history


def test_a_run_over_an_earlier_runs_output_says_so(tmp_path):
    out = tmp_path / "out"
    assert overwrite_notice(str(out), None) == []  # nothing there yet
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert overwrite_notice(str(out), None) == []  # no earlier run's output
    (out / "model.safetensors").write_bytes(b"")
    (out / "checkpoint-4").mkdir()
    (notice,) = overwrite_notice(str(out), None)
    assert f"{out} holds an earlier run (checkpoint-4, model.safetensors); this run overwrites it" in notice
    assert "--output_dir" in notice and "--resume_from_checkpoint true" in notice
    assert overwrite_notice(str(out), ResumePoint(str(out / "checkpoint-4"), 4, 10)) == []  # it continues that run
