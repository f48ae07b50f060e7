"""The standalone example scripts (`examples/scripts/`): each runs offline on the toy defaults through its `main(argv)`
with the smallest settings, trains, logs its algorithm's metrics and saves; each docstring names its own launch."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re

import pytest
from safetensors.torch import load_file
from trainer_helpers import logged

from trl_ext.toy import DEFAULT_TRAINING, toy_dataset, toy_expert_dataset

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "examples", "scripts")
NAMES = ["distillation", "gigpo", "losses_in_a_torch_loop", "mix_chord", "sapo"]
# one optimizer step with a learning rate from the start (the toy defaults warm up from 0 over 20 steps)
TINY = ["--max_steps", "1", "--warmup_steps", "0", "--per_device_train_batch_size", "8", "--num_generations", "4"]
TINY += ["--logging_steps", "1", "--save_strategy", "no"]


def script(name: str):
    """The example script `examples/scripts/<name>.py` as a module (its `main(argv)` is the command line's)."""
    spec = importlib.util.spec_from_file_location(f"example_script_{name}", os.path.join(SCRIPTS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_jsonl(path, rows) -> str:
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return str(path)


def weights_changed(saved_dir, initial_dir) -> bool:
    saved = load_file(os.path.join(saved_dir, "model.safetensors"))
    initial = load_file(os.path.join(initial_dir, "model.safetensors"))
    return saved.keys() == initial.keys() and any(not saved[k].equal(initial[k]) for k in saved)


@pytest.mark.parametrize("name", NAMES)
def test_docstring_names_the_scripts_own_launch_and_public_api(name):
    with open(os.path.join(SCRIPTS, f"{name}.py")) as f:
        source = f.read()
    docstring = ast.get_docstring(ast.parse(source))
    launches = re.findall(r"^\s*(?:python|accelerate launch) (\S+)", docstring, flags=re.MULTILINE)
    assert launches and set(launches) == {f"examples/scripts/{name}.py"}
    assert "trl_ext.scripts" not in source and "from trl_ext" in source  # the public API, not the family scripts
    assert re.search(r"^def main\(argv=None\)", source, flags=re.MULTILINE)


def test_every_script_is_tested():
    assert sorted(f[:-3] for f in os.listdir(SCRIPTS) if f.endswith(".py")) == NAMES


def test_sapo_trains_the_toy_and_saves(toy_cache, tiny_model, tmp_path):
    trainer = script("sapo").main(["--output_dir", str(tmp_path), *TINY])
    assert type(trainer).__name__ == "SAPOTrainer" and trainer.state.global_step == 1
    assert trainer.model.config._name_or_path == tiny_model and trainer.args.use_cpu and not trainer.args.bf16
    assert logged(trainer, "sapo_loss") and len(logged(trainer, "rewards/repeat_reward/mean")) == 1
    assert weights_changed(tmp_path, tiny_model)


def test_sapo_toy_defaults_under_the_config_file_and_flags(toy_cache, tmp_path):
    parse_args = script("sapo").parse_args
    _, args, model_args = parse_args([])
    assert (args.learning_rate, args.num_generations) == (DEFAULT_TRAINING["learning_rate"], 16)
    assert args.output_dir == "outputs/example-sapo" and args.tau_neg == 1.05
    config = tmp_path / "sapo.yaml"
    config.write_text("learning_rate: 0.02\ntau_neg: 1.5\nnum_generations: 4\n")
    _, args, _ = parse_args(["--config", str(config), "--num_generations", "2"])
    assert (args.learning_rate, args.tau_neg, args.num_generations) == (0.02, 1.5, 2)  # flags > file > toy
    _, args, model_args = parse_args(["--model_name_or_path", "some/model", "--output_dir", str(tmp_path)])
    assert model_args.model_name_or_path == "some/model" and args.learning_rate == 1e-6  # TRL's default
    config.write_text("model_name_or_path: some/model\ntau_neg: 1.5\n")  # a model named by the file: no toy either
    _, args, model_args = parse_args(["--config", str(config), "--output_dir", str(tmp_path)])
    assert (model_args.model_name_or_path, args.learning_rate, args.num_generations) == ("some/model", 1e-6, 8)


def test_sapo_on_a_jsonl_dataset_with_lora(toy_cache, tmp_path):
    rows = toy_dataset(16).to_list()
    data = write_jsonl(tmp_path / "prompts.jsonl", rows)
    argv = ["--output_dir", str(tmp_path / "out"), *TINY, "--dataset_name", data, "--use_peft", "--lora_r", "4"]
    trainer = script("sapo").main([*argv, "--lora_target_modules", "q_proj", "v_proj"])
    assert len(trainer.train_dataset) == 16 and trainer.state.global_step == 1
    assert type(trainer.model).__name__ == "PeftModelForCausalLM"
    assert os.path.isfile(tmp_path / "out" / "adapter_model.safetensors")
    with pytest.raises(ValueError, match=r"--dataset_name .*missing \['target'\]"):
        script("sapo").main(["--dataset_name", write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "x"}])])


def test_mix_chord_blends_the_demonstrations_by_the_mu_schedule(toy_cache, tmp_path):
    demonstrations = write_jsonl(tmp_path / "demos.jsonl", toy_expert_dataset(16).to_list())
    argv = ["--output_dir", str(tmp_path), *TINY, "--mu_warmup_steps", "0", "--mu_decay_steps", "10"]
    trainer = script("mix_chord").main([*argv, "--mu_peak", "0.4", "--expert_dataset_name", demonstrations])
    assert type(trainer).__name__ == "MIXCHORDTrainer" and trainer.state.global_step == 1
    assert len(trainer._expert_rows) == 16  # the given demonstrations, with the script's own prompts
    mu, sft, pg = (logged(trainer, key)[0] for key in ("mu", "expert/sft_phi_loss", "usual/pg_loss"))
    assert mu == pytest.approx(0.4) and sft > 0  # step 0, no warm-up: mu_peak
    assert logged(trainer, "loss")[0] == pytest.approx(mu * sft + (1 - mu) * pg, rel=1e-4)
    assert os.path.isfile(tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="--expert_dataset_name is required"):
        script("mix_chord").main(["--dataset_name", "my/prompts"])  # before anything loads


def test_distillation_uses_the_toy_teacher(toy_cache, tiny_teacher, tiny_model, tmp_path):
    trainer = script("distillation").main(["--output_dir", str(tmp_path), *TINY])
    assert type(trainer).__name__ == "OnPolicyDistillTrainer" and trainer.state.global_step == 1
    assert trainer.teacher_model.config._name_or_path == tiny_teacher
    assert not any(p.requires_grad for p in trainer.teacher_model.parameters())
    assert logged(trainer, "kl/mean")[0] > 0 and logged(trainer, "rewards/repeat_reward/mean")  # reward: logged only
    assert weights_changed(tmp_path, tiny_model)
    with pytest.raises(ValueError, match="--teacher_model_name_or_path is required"):
        script("distillation").main(["--model_name_or_path", tiny_model])


def test_gigpo_environment_and_reward():
    module = script("gigpo")
    env = module.SecretBoxes()
    env.reset(box="C", secret="7", prompt=[])
    assert env.state_key == ("start", "C")
    assert env.lookup("b") == "no such box" and env.state_key == ("looked_up", "B", "no such box")
    answer = [{"role": "assistant", "content": " 7"}]
    assert module.lookup_reward([answer], [env]) == [0.0]  # the right digit, without opening the box
    assert env.lookup("c") == "7" and module.lookup_reward([answer], [env]) == [1.0]
    call = [{"role": "assistant", "content": "", "tool_calls": [{"name": "lookup"}]}]
    assert module.lookup_reward([call], [env]) == [0.0]  # ended on a tool call


def test_gigpo_trains_the_toy_agent(toy_cache, tiny_agent, tmp_path):
    module = script("gigpo")
    argv = ["--output_dir", str(tmp_path), "--max_steps", "1", "--per_device_train_batch_size", "16"]
    trainer = module.main([*argv, "--logging_steps", "1", "--save_strategy", "no"])
    assert type(trainer).__name__ == "GiGPOTrainer" and trainer.model.config._name_or_path == tiny_agent
    assert [tool.__name__ for tool in trainer.tools] == ["lookup"]
    assert all(type(env).__name__ == "SecretBoxes" for env in trainer.environments)
    assert logged(trainer, "rewards/lookup_reward/mean") and logged(trainer, "turns/per_completion")[0] > 1
    assert logged(trainer, "advantage/gigpo/anchor_group_hit_ratio")[0] > 0
    assert os.path.isfile(tmp_path / "model.safetensors")
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": [{"role": "user", "content": "?"}], "box": "A"}])
    with pytest.raises(ValueError, match=r"--dataset_name: needs the columns prompt, box and secret; missing \['sec"):
        module.main(["--dataset_name", bad])


def test_torch_loop_raises_the_reward(toy_cache, capsys):
    rewards = script("losses_in_a_torch_loop").main(["--steps", "12", "--seed", "0"])
    assert len(rewards) == 12 and rewards[0] < 0.3
    assert sum(rewards[-4:]) / 4 > sum(rewards[:4]) / 4 + 0.1  # ~0.11 -> ~0.3 (~0.95 after 30 steps)
    assert "sapo_loss" in capsys.readouterr().out


def test_torch_loop_with_other_components(toy_cache, capsys):
    loop = script("losses_in_a_torch_loop").main
    argv = ["--steps", "1", "--prompts_per_step", "2", "--policy_loss", "cispo", "--advantage", "rloo"]
    assert len(loop([*argv, "--kl_coef", "0.01"])) == 1
    out = capsys.readouterr().out
    assert "cispo_loss" in out and "sapo_loss" not in out
    assert "kl_loss" in out and "kl_coef 0.010" in out
    with pytest.raises(ValueError, match=r"unknown policy loss 'nope'; valid names: .*sapo"):
        loop(["--policy_loss", "nope"])
