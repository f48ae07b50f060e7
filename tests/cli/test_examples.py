"""The example scripts: the embedded default, TRL's flags through TrlParser / ModelConfig, `--config` recipes,
LoRA, and a 2-process `accelerate launch` on CPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from trainer_helpers import ROLLOUT_FAMILIES, algorithm_classes, free_port, logged

from trl_ext.scripts.grpo import main
from trl_ext.toy import DEFAULT_TRAINING

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUICK = ["--max_steps", "2", "--per_device_train_batch_size", "8", "--num_generations", "4", "--logging_steps", "1"]
QUICK += ["--save_strategy", "no"]


def test_one_example_per_algorithm_sharing_the_script():
    for algorithm in algorithm_classes(*ROLLOUT_FAMILIES):
        with open(os.path.join(ROOT, "examples", f"train_{algorithm}.py")) as f:
            source = f.read()
        assert "from trl_ext.scripts.grpo import main" in source and f'main("{algorithm}")' in source
    with open(os.path.join(ROOT, "examples", "train_dpo.py")) as f:
        assert "from trl_ext.scripts.dpo import main" in f.read()


def test_dpo_example_trains_the_toy_pairs(toy_cache, tiny_model, tmp_path):
    from trl_ext.scripts.dpo import main as dpo_main

    trainer = dpo_main(["--output_dir", str(tmp_path), "--max_steps", "20", "--eval_steps", "20", "--kl_coef", "0.01"])
    assert type(trainer).__module__ == "trl_ext.trainers.dpo.trainer" and trainer.kl_fn.kl_coef == 0.01
    assert trainer.model.config._name_or_path == tiny_model and trainer.args.use_cpu
    accuracy = logged(trainer, "eval_accuracy_mean")  # held-out pairs (trl_ext.toy.toy_preference_dataset seed 99)
    assert len(accuracy) == 1 and accuracy[0] > 0.6
    assert os.path.isfile(os.path.join(str(tmp_path), "model.safetensors"))


def test_default_run_uses_the_toy_and_saves(toy_cache, tiny_model, tmp_path):
    trainer = main("sapo", ["--output_dir", str(tmp_path), *QUICK])
    assert trainer.state.global_step == 2
    assert trainer.args.learning_rate == DEFAULT_TRAINING["learning_rate"] and not trainer.args.bf16  # toy, CPU
    assert trainer.model.config._name_or_path == tiny_model
    assert logged(trainer, "sapo_loss") and logged(trainer, "rewards/repeat_letter_reward/mean")
    assert os.path.isfile(os.path.join(str(tmp_path), "model.safetensors"))


@pytest.mark.parametrize("algorithm", ["mix", "mix_chord"])
def test_mix_examples_use_the_embedded_demonstrations(toy_cache, tiny_model, tmp_path, algorithm):
    trainer = main(algorithm, ["--output_dir", str(tmp_path), *QUICK, "--expert_data_ratio", "0.5"])
    assert trainer.state.global_step == 2 and len(trainer._expert_rows) == 256  # trl_ext.toy.toy_expert_dataset()
    assert logged(trainer, "usual/pg_loss") and all(
        v > 0 for v in logged(trainer, "expert/" + ("sft_loss" if algorithm == "mix" else "sft_phi_loss"))
    )


def test_mix_recipe_and_a_user_dataset_needs_demonstrations(toy_cache, tiny_model, tmp_path):
    argv = ["--config", os.path.join(ROOT, "configs", "mix_chord.yaml"), "--output_dir", str(tmp_path)]
    argv += ["--model_name_or_path", tiny_model]
    parsed = __import__("trl_ext.scripts.grpo", fromlist=["make_parser"]).make_parser("mix_chord", argv)
    args = parsed.parse_args_and_config(argv)[1]
    assert (args.mu_warmup_steps, args.mu_decay_steps, args.mu_peak, args.mu_valley) == (200, 400, 0.5, 0.02)
    assert args.expert_data_ratio == 0.2 and args.expert_rows_per_generation == 64  # of 320 rows: 32 prompts × 8
    with pytest.raises(ValueError, match="--expert_dataset_name is required"):
        main("mix", ["--output_dir", str(tmp_path), *QUICK, "--dataset_name", "trl-lib/unused"])


def test_distillation_example_uses_the_embedded_teacher(toy_cache, tiny_model, tiny_teacher, tmp_path):
    trainer = main("on_policy_distill", ["--output_dir", str(tmp_path), *QUICK, "--kl_coef", "0.5"])
    assert trainer.args.teacher_model_name_or_path == tiny_teacher  # trl_ext.toy.tiny_teacher_path()
    assert trainer.args.distill_baseline == "none" and trainer.advantage_fn.kl_coef == 0.5  # the reference estimator
    assert logged(trainer, "kl/mean") and logged(trainer, "rewards/repeat_letter_reward/mean")  # logged, not trained on
    with pytest.raises(ValueError, match="a teacher is required"):
        main("on_policy_distill", ["--output_dir", str(tmp_path), *QUICK, "--model_name_or_path", tiny_model])


def test_distillation_example_with_the_teachers_top_k(toy_cache, tiny_model, tiny_teacher, tmp_path):
    argv = ["--output_dir", str(tmp_path), *QUICK, "--teacher_top_k", "32", "--jsd_beta", "0.5"]
    trainer = main("on_policy_distill", argv)
    assert (trainer.args.teacher_top_k, trainer.args.jsd_beta) == (32, 0.5)
    divergence = logged(trainer, "distill/divergence")
    assert len(divergence) == 2 and all(0 < value < 10 for value in divergence)
    assert not logged(trainer, "kl/mean")  # the sampled-token estimate is not computed in a dense mode


@pytest.mark.parametrize("algorithm", ["multi_step_grpo", "gigpo"])
def test_multi_turn_examples_use_the_embedded_agent(toy_cache, tiny_agent, tmp_path, algorithm):
    from trl_ext.toy_agent import AGENT_TRAINING, LookupEnvironment

    trainer = main(algorithm, ["--output_dir", str(tmp_path), "--max_steps", "2", "--save_strategy", "no"])
    assert trainer.model.config._name_or_path == tiny_agent
    assert trainer.args.max_tool_calling_iterations == AGENT_TRAINING["max_tool_calling_iterations"]
    assert all(isinstance(env, LookupEnvironment) for env in trainer.environments)
    assert [tool.__name__ for tool in trainer.tools] == ["lookup"]
    assert logged(trainer, "rewards/lookup_reward/mean") and logged(trainer, "turns/per_completion")[0] > 1
    if algorithm == "gigpo":
        assert logged(trainer, "advantage/gigpo/anchor_groups_size_gt1")[0] > 0


def test_the_agent_example_trains_asynchronously_with_its_environment(toy_cache, tiny_agent, tmp_path):
    """`examples/train_gigpo.py --asynchronous true`: GiGPO's asynchronous form on the embedded agent, its episodes
    run with the toy's environment in trl_ext's rollout worker, the per-turn advantages over the window."""
    import trl_ext
    from trl_ext.toy_agent import LookupEnvironment

    argv = ["--asynchronous", "true", "--output_dir", str(tmp_path), "--max_steps", "2", "--save_strategy", "no"]
    trainer = main("gigpo", argv)
    assert type(trainer) is trl_ext.AsyncGRPOTrainer and type(trainer.args) is trl_ext.AsyncGiGPOConfig
    assert trainer.rollout_worker._config["environment_factory"] is LookupEnvironment
    assert trainer.group_scorer.per_turn and trainer.state.global_step == 2
    assert logged(trainer, "rollout/tool_calls_total")[0] > 0 and logged(trainer, "turns/per_completion")[0] > 1
    assert logged(trainer, "advantage/gigpo/anchor_groups_size_gt1")[0] > 0


def test_ppo_example_trains_a_critic(toy_cache, tiny_model, tmp_path):
    trainer = main("ppo", ["--output_dir", str(tmp_path), *QUICK, "--critic_learning_rate", "0.01"])
    assert type(trainer) is __import__("trl_ext").PPOTrainer and trainer.state.global_step == 2
    assert trainer.critic_optimizer.param_groups[0]["initial_lr"] == 0.01
    assert logged(trainer, "vf_loss") and logged(trainer, "critic/explained_variance")


def test_environment_factory_flag(toy_cache, tiny_agent, tmp_path):
    argv = ["--output_dir", str(tmp_path), "--max_steps", "1", "--save_strategy", "no"]
    argv += ["--environment_factory", "trl_ext.toy_agent.LookupEnvironment"]
    trainer = main("gigpo", argv)
    assert trainer.environment_factories == {None: __import__("trl_ext.toy_agent").toy_agent.LookupEnvironment}
    for name, message in [("nowhere", "is not a dotted import path"), ("no_module.Env", "cannot load 'no_module.Env'")]:
        with pytest.raises(ValueError, match=f"--environment_factory: .*{message}"):
            main("gigpo", [*argv[:2], "--environment_factory", name])


def test_recipe_and_command_line_flags(toy_cache, tiny_model, tmp_path):
    argv = ["--config", os.path.join(ROOT, "configs", "sapo.yaml"), "--output_dir", str(tmp_path), *QUICK]
    argv += ["--model_name_or_path", tiny_model, "--max_completion_length", "8"]
    argv += ["--tau_neg", "1.3"]
    trainer = main("sapo", argv)
    args = trainer.args
    assert args.loss_agg_mode == "seq-mean-token-mean" and args.learning_rate == 1e-6  # from the recipe
    assert args.tau_neg == 1.3 and trainer.policy_loss_fn.tau_neg == 1.3  # the command line wins
    assert args.max_completion_length == 8


def test_m2po_recipe_trains_on_stale_rollouts(toy_cache, tiny_model, tmp_path):
    argv = ["--config", os.path.join(ROOT, "configs", "m2po.yaml"), "--output_dir", str(tmp_path), *QUICK]
    argv += ["--model_name_or_path", tiny_model, "--max_completion_length", "8", "--m2_threshold", "0.01"]
    trainer = main("m2po", argv)
    args = trainer.args
    assert (args.steps_per_generation, args.gradient_accumulation_steps) == (4, 1)  # stale rollouts, from the recipe
    assert (args.learning_rate, args.log_ratio_clip, args.loss_agg_mode, args.beta) == (1e-6, 20.0, "token-mean", 0.0)
    assert args.m2_threshold == 0.01 and trainer.policy_loss_fn.m2_threshold == 0.01  # the command line wins
    assert trainer.state.global_step == 2
    for name in ("pg_loss", "m2po/m2_before", "m2po/m2_after", "m2po/masked_fraction", "m2po/trust_region_fraction"):
        assert len(logged(trainer, name)) == 2, name


UNIFORM_REWARD = "def solved(completions, **kwargs):\n    return [1.0] * len(completions)\n"


def test_dapo_example_trains_through_the_dynamic_sampling_cap(toy_cache, tmp_path, monkeypatch):
    """Every group uniform: each batch reaches the cap, and the run trains on (one warning) instead of stopping."""
    (tmp_path / "uniform_rewards.py").write_text(UNIFORM_REWARD)
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["--output_dir", str(tmp_path / "out"), *QUICK, "--dynamic_sampling", "True"]
    argv += ["--dynamic_sampling_max_rounds", "2", "--reward_funcs", "uniform_rewards.solved"]
    with pytest.warns(UserWarning, match=r"found 0 of the 2 prompt groups") as caught:
        trainer = main("dapo", argv)
    assert sum("dynamic sampling found" in str(w.message) for w in caught) == 1
    assert trainer.state.global_step == 2 and os.path.isfile(tmp_path / "out" / "model.safetensors")
    assert logged(trainer, "dynamic_sampling/capped") == [1.0, 1.0]
    assert logged(trainer, "dynamic_sampling/groups_filled") == [2.0, 2.0]


@pytest.mark.slow
def test_the_dapo_example_finishes_on_the_tiny_default(toy_cache, tmp_path):
    """The whole example, as the first hour runs it (about 2 minutes): the toy's groups turn uniform as the policy
    learns, and dynamic sampling at its cap trains on."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1"]
    command += [os.path.join(ROOT, "examples", "train_dapo.py"), "--output_dir", str(tmp_path), "--dynamic_sampling"]
    command += ["True", "--report_to", "none"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    out = " ".join(run.stdout.split())
    assert "dapo settings: the paper's clip_range_high=0.28, clip_ratio_c=None, dynamic_sampling=True" in out
    learned = re.search(r"Trained dapo for 200 steps on 1 process\(es\): reward ([\d.]+) -> ([\d.]+)", out)
    assert learned and float(learned[2]) > float(learned[1]) + 0.5, out[-500:]


def test_lora_flags(toy_cache, tmp_path):
    argv = ["--output_dir", str(tmp_path), *QUICK, "--use_peft", "--lora_r", "4", "--lora_alpha", "8"]
    argv += ["--lora_target_modules", "q_proj", "v_proj"]
    trainer = main("grpo", argv)
    assert type(trainer.model).__name__.startswith("Peft")
    assert trainer.model.peft_config["default"].r == 4
    assert os.path.isfile(os.path.join(str(tmp_path), "adapter_config.json"))


def test_unknown_reward_function_name(toy_cache, tmp_path):
    with pytest.raises(ValueError, match="--reward_funcs: cannot load 'exactness'"):
        main("sapo", ["--output_dir", str(tmp_path), *QUICK, "--reward_funcs", "exactness"])


def test_two_processes_with_accelerate_launch(toy_cache, tmp_path):
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]
    command += [os.path.join(ROOT, "configs", "accelerate", "multi_gpu.yaml"), "--num_processes", "2"]
    command += ["--main_process_port", str(free_port())]
    command += [os.path.join(ROOT, "examples", "train_sapo.py"), "--output_dir", str(tmp_path), *QUICK]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)  # no CI hang
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Trained sapo for 2 steps on 2 process(es)" in result.stdout
    assert "find_unused_parameters=True" not in result.stderr  # the toy's default: DDP's search (and warning) off
    assert os.path.isfile(os.path.join(str(tmp_path), "model.safetensors"))
