"""The guides (`docs/guides/`): each guide's offline form runs, and every command a guide shows parses.

* **The offline forms.** A fenced block after `<!-- guide: offline -->` runs, in the page's order, in one temporary
  working directory: a bash block's commands in this process (`trl-ext ...`, `python examples/...`, a one-process
  `accelerate launch`) or, for several processes, as `accelerate launch` itself; a Python block with `exec`, as a
  script (`__name__ == "__main__"`). `<!-- guide: file NAME -->` writes its block to NAME first, and
  `<!-- guide: row PATH -->` is checked against the first row of PATH. The runs are shortened, not changed: the
  commands get a small batch (8 completions in groups of 4) and 2 optimizer steps unless they set `--max_steps`, and
  a Python block sees the toy's `DEFAULT_TRAINING` with the same values. Each guide's test then asserts what its page
  says the run does. The two guides whose runs start processes (two training processes; the asynchronous rollout
  worker) run in the slow tier (`pytest -m slow`); their commands are parsed in the default tier like the others.
* **Every command.** Each command of a bash block is parsed by what it runs, nothing loaded or trained:
  `trl-ext` by its own CLI (its `train` and `--accelerate_config` stop where they would parse the script's flags),
  `accelerate launch` by accelerate's launch parser and then the script's `TrlParser`, `python examples/...` by the
  script's parser, `trl vllm-serve` by TRL's. A misspelt flag, algorithm or config file fails; so does a command this
  test does not know how to check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import io
import json
import os
import re
import shlex
import subprocess
import sys
from typing import Any
from unittest import mock

import pytest
import yaml
from trainer_helpers import free_port, logged

import trl_ext
import trl_ext.cli as cli
from trl_ext.scripts import script_for
from trl_ext.scripts._common import UsageError, captured_parser

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GUIDES_DIR = os.path.join(ROOT, "docs", "guides")
GUIDES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(GUIDES_DIR, "*.md")) if not p.endswith("index.md"))

SMALL_BATCH = ["--per_device_train_batch_size", "8", "--num_generations", "4", "--logging_steps", "1"]
"""What the offline runs add to each training command (the toy's default is 128 completions in groups of 16)."""
SMALL_STEPS = ["--max_steps", "2"]  # unless the command sets --max_steps itself


# ------------------------------------------------------------------------------------------- reading the pages


@dataclasses.dataclass
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: str | None  # "offline", "file NAME", "row PATH", or None


@dataclasses.dataclass
class Command:
    page: str
    line: int
    tokens: list[str]  # without the leading VAR=value assignments

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {shlex.join(self.tokens)}"


def blocks(page: str) -> list[Block]:
    """The fenced blocks of `docs/guides/<page>`, each with the `<!-- guide: ... -->` marker of the last non-blank
    line before it, if any."""
    with open(os.path.join(GUIDES_DIR, page), encoding="utf-8") as f:
        lines = f.read().splitlines()
    found, i, last = [], 0, ""
    while i < len(lines):
        opening = re.match(r"^```(\w*)", lines[i])
        if not opening:
            last = lines[i].strip() or last
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = re.fullmatch(r"<!-- guide: (.+?) -->", last)
        found.append(Block(page, i + 1, opening[1], "\n".join(lines[i + 1 : end]) + "\n", marker and marker[1]))
        i, last = end + 1, ""
    return found


def commands(block: Block) -> list[Command]:
    """The commands of a bash block: lines joined at a trailing backslash, comments dropped, leading environment
    assignments (`CUDA_VISIBLE_DEVICES=0`) left out."""
    out, pending, start = [], "", 0
    for offset, line in enumerate(block.text.splitlines(), start=block.line + 1):
        start = start or offset
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        tokens = shlex.split(pending + line, comments=True)
        while tokens and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", tokens[0]):
            tokens.pop(0)
        if tokens:
            out.append(Command(block.page, start, tokens))
        pending, start = "", 0
    return out


def all_commands() -> list[Command]:
    return [c for page in GUIDES for b in blocks(page) if b.lang == "bash" for c in commands(b)]


# ------------------------------------------------------------------------------------ parsing without running


class CommandRefused(Exception):
    """A command of a guide that its program would refuse (the program's one-line error)."""


def _raise(message: str):
    raise CommandRefused(message)


@contextlib.contextmanager
def _refusals():
    """UsageErrors, argparse's exits and the CLI's one-line errors on stderr as `CommandRefused`."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            yield
    except UsageError as error:
        raise CommandRefused(str(error)) from None
    except SystemExit as exit_:
        if exit_.code:
            raise CommandRefused(stderr.getvalue().strip() or f"exit status {exit_.code}") from None


def parse_training(algorithm: str, argv: list[str]) -> tuple:
    """The dataclasses that `trl-ext train --algorithm ALGORITHM ARGV` would train with: its script's `TrlParser`,
    with the defaults it sets for ARGV, parses ARGV (the configs check their values); nothing loads."""
    with captured_parser() as found:
        ORIGINAL_TRAIN(algorithm, list(argv))
    assert found, f"{algorithm}: the script did not reach its parser"
    return found[0].parse_args_and_config(list(argv))


ORIGINAL_TRAIN = cli.train


def _accelerate_parser():
    from accelerate.commands.launch import launch_command_parser

    parser = launch_command_parser()
    parser.error = _raise
    return parser


def _existing(path: str) -> str:
    return path if os.path.isabs(path) else os.path.join(ROOT, path)


def check_trl_ext(argv: list[str]) -> dict[str, Any]:
    """`trl-ext ARGV` through the CLI's own `main`, with its training and launching stopped at the parse."""
    parsed: dict[str, Any] = {}

    def train(algorithm, rest):
        parsed.update(algorithm=algorithm, args=parse_training(algorithm, rest))

    def launch(algorithm, accelerate_config, rest):
        arguments = cli.accelerate_launch_args(algorithm, accelerate_config, rest)
        launcher = _accelerate_parser().parse_args(arguments)  # accelerate's flags, as `cli.launch` parses them
        entry, script_args = launcher.training_script_args[:3], launcher.training_script_args[3:]
        assert launcher.module and entry == ["train", "--algorithm", algorithm], arguments
        parsed.update(algorithm=algorithm, launcher=launcher, args=parse_training(algorithm, script_args))

    with _refusals(), mock.patch.object(cli, "train", train), mock.patch.object(cli, "launch", launch):
        with mock.patch.object(cli, "toy_data", lambda directory: directory):
            cli.main(list(argv))
    return parsed


def check_script(script: str, argv: list[str]) -> dict[str, Any]:
    """`python examples/train_NAME.py ARGV`: the example exists and trains NAME with its family's script, whose
    parser takes ARGV."""
    match = re.fullmatch(r"examples/train_(\w+)\.py", script)
    if not match or not os.path.isfile(_existing(script)):
        raise CommandRefused(f"{script}: not an example script of this repository")
    algorithm = match[1]
    with open(_existing(script), encoding="utf-8") as f:
        source = f.read()
    family_script = script_for(algorithm).__name__
    assert f"from {family_script} import main" in source, script
    if family_script.endswith(".grpo"):
        assert f'main("{algorithm}")' in source, script
    with _refusals():
        return {"algorithm": algorithm, "args": parse_training(algorithm, argv)}


def check_accelerate_launch(argv: list[str]) -> dict[str, Any]:
    """`accelerate launch ARGV`: accelerate's flags and config file, then the script (or `-m trl_ext.cli`) and its
    flags."""
    launcher = _accelerate_parser().parse_args(list(argv))
    if launcher.config_file and not os.path.isfile(_existing(launcher.config_file)):
        raise CommandRefused(f"--config_file {launcher.config_file}: no such file")
    if launcher.module:
        if launcher.training_script != "trl_ext.cli":
            raise CommandRefused(f"-m {launcher.training_script}: not trl_ext's CLI")
        parsed = check_trl_ext(launcher.training_script_args)
    else:
        parsed = check_script(launcher.training_script, launcher.training_script_args)
    return {**parsed, "launcher": launcher}


def check_vllm_serve(argv: list[str]) -> dict[str, Any]:
    """`trl vllm-serve ARGV` by TRL's parser; strings it does not take (passed on to vLLM unchecked) are refused."""
    from trl.scripts.vllm_serve import make_parser

    parser = make_parser()
    parser.error = _raise
    with _refusals():
        serve_args, unknown = parser.parse_args_and_config(list(argv), return_remaining_strings=True)
    if unknown:
        raise CommandRefused(f"trl vllm-serve: unrecognized arguments: {' '.join(unknown)}")
    return {"serve": serve_args}


def check_command(tokens: list[str]) -> dict[str, Any]:
    """Parse one command of a guide as its program would; `CommandRefused` if the program would refuse it."""
    program, rest = tokens[0], tokens[1:]
    if program == "trl-ext":
        return check_trl_ext(rest)
    if program == "accelerate" and rest[:1] == ["launch"]:
        return check_accelerate_launch(rest[1:])
    if program == "python" and rest and rest[0].endswith(".py"):
        return check_script(rest[0], rest[1:])
    if program == "trl" and rest[:1] == ["vllm-serve"]:
        return check_vllm_serve(rest[1:])
    raise CommandRefused(f"{program}: not a command this test can check (trl-ext, accelerate launch, python "
                         "examples/..., trl vllm-serve)")  # fmt: skip


# ------------------------------------------------------------------------------------------ running offline


@dataclasses.dataclass
class Run:
    command: str
    trainer: Any = None
    out: str = ""


def _script_and_args(tokens: list[str]) -> tuple[list[str], list[str]]:
    """(the command up to and including the training script, the script's flags)."""
    index = next(i for i, token in enumerate(tokens) if token.endswith(".py") or token == "trl_ext.cli")
    return tokens[: index + 1], tokens[index + 1 :]


def _shortened(argv: list[str]) -> list[str]:
    return [*argv, *SMALL_BATCH, *([] if "--max_steps" in argv else SMALL_STEPS)]


def _processes(launcher) -> int:
    if launcher.num_processes:
        return launcher.num_processes
    if launcher.config_file:
        with open(_existing(launcher.config_file)) as f:
            return int(yaml.safe_load(f).get("num_processes", 1))
    return 1


def run_command(tokens: list[str], capsys) -> Run:
    """Run an offline command of a guide, shortened (`_shortened`)."""
    trainers: list = []

    def recording_train(algorithm, argv):
        trainers.append(ORIGINAL_TRAIN(algorithm, argv))
        return trainers[-1]

    program = tokens[0]
    if program == "trl-ext":
        argv = tokens[1:]
        argv = _shortened(argv) if argv[:1] == ["train"] else argv
        assert "--accelerate_config" not in argv, "run several processes with accelerate launch"
        with mock.patch.object(cli, "train", recording_train):
            cli.main(argv)
    elif program == "python" or (program == "accelerate" and _processes(_accelerate_parser().parse_args(
            tokens[2:])) == 1):  # fmt: skip
        head, argv = _script_and_args(tokens)
        algorithm = re.fullmatch(r"examples/train_(\w+)\.py", head[-1])[1]
        trainers.append(script_for(algorithm).train(algorithm, _shortened(argv)))
    else:  # several processes: accelerate launch itself, on a free port, the paths made absolute
        head, argv = _script_and_args(tokens)
        head = [_existing(t) if os.path.exists(_existing(t)) and "/" in t else t for t in head]
        command = [sys.executable, "-m", "accelerate.commands.launch", *head[2:-1]]
        command += ["--main_process_port", str(free_port()), head[-1], *_shortened(argv)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return Run(shlex.join(tokens), None, done.stdout)
    return Run(shlex.join(tokens), trainers[-1] if trainers else None, capsys.readouterr().out)


def run_offline(page: str, capsys, monkeypatch, tmp_path) -> list[Run]:
    """Run the offline blocks of `page` in order, in `tmp_path`; the runs, one per command or Python block."""
    from trl_ext import toy

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # the page's files import from here; sys.path restored after
    small = {"per_device_train_batch_size": 8, "num_generations": 4, "max_steps": 2, "logging_steps": 1}
    monkeypatch.setattr(toy, "DEFAULT_TRAINING", {**toy.DEFAULT_TRAINING, **small})  # the commands' SMALL_* values
    runs: list[Run] = []
    for block in blocks(page):
        marker = block.marker or ""
        if marker.startswith("file "):
            (tmp_path / marker.split(" ", 1)[1]).write_text(block.text)
        elif marker.startswith("row "):
            with open(marker.split(" ", 1)[1]) as f:
                assert json.loads(f.readline()) == json.loads(block.text), f"{page}:{block.line}"
        elif marker == "offline" and block.lang == "bash":
            runs += [run_command(c.tokens, capsys) for c in commands(block)]
        elif marker == "offline" and block.lang == "python":
            namespace: dict[str, Any] = {"__name__": "__main__"}
            exec(compile(block.text, f"{page}:{block.line}", "exec"), namespace)
            runs.append(Run(f"{page}:{block.line}", namespace.get("trainer"), capsys.readouterr().out))
        else:
            assert not marker, f"{page}:{block.line}: unknown marker {marker!r}"
    for name in [n for n, m in sys.modules.items() if getattr(m, "__file__", None) and
                 os.path.dirname(m.__file__) == str(tmp_path)]:  # fmt: skip
        del sys.modules[name]  # the page's own modules (my_rewards), for the next page's run
    return runs


def _weights(trainer) -> dict[str, Any]:
    return {name: p.detach().clone() for name, p in trainer.model.named_parameters()}


# ------------------------------------------------------------------------------------- the guides, offline


def test_own_data_guide(toy_cache, capsys, monkeypatch, tmp_path):
    toy_data, command, python = run_offline("own-data.md", capsys, monkeypatch, tmp_path)
    assert sorted(os.listdir(tmp_path / "toy" / "prompts")) == ["test.jsonl", "train.jsonl"]
    assert re.search(r"^prompts +\S+/toy/prompts +\(train: 1024 rows, test: 64 rows\)", toy_data.out, re.MULTILINE)
    for run in (command, python):
        trainer = run.trainer
        assert type(trainer) is trl_ext.CISPOTrainer and trainer.reward_func_names == ["exact_letter"]
        assert len(trainer.train_dataset) == 1024 and trainer.state.global_step == 2  # the file's rows
        rewards = logged(trainer, "rewards/exact_letter/mean")
        assert len(rewards) == 2 and all(0 <= r <= 1 for r in rewards)
    assert "rewards/exact_letter/mean" in command.out and "Trained cispo for 2 steps" in command.out


def test_lora_guide(toy_cache, capsys, monkeypatch, tmp_path):
    from peft import AutoPeftModelForCausalLM, PeftModel

    (run,) = run_offline("lora-vllm.md", capsys, monkeypatch, tmp_path)
    model = run.trainer.model
    assert isinstance(model, PeftModel) and model.peft_config["default"].r == 8
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    assert re.search(r"model .*: [\d,]+ parameters, [\d,]+ trainable", run.out)  # the summary's model line
    output = tmp_path / "outputs" / "sapo-lora-tiny"
    assert {"adapter_model.safetensors", "adapter_config.json"} <= set(os.listdir(output))
    assert not (output / "model.safetensors").exists()
    loaded = AutoPeftModelForCausalLM.from_pretrained(str(output))  # as the page says to load it
    assert isinstance(loaded, PeftModel) and loaded.peft_config["default"].r == 8


@pytest.mark.slow  # two processes, each importing the stack (~1 minute on 2 cores); the launch itself is also
# tested in the default tier (tests/cli/test_examples.py::test_two_processes_with_accelerate_launch)
def test_multi_gpu_guide(toy_cache, capsys, monkeypatch, tmp_path):
    (run,) = run_offline("multi-gpu.md", capsys, monkeypatch, tmp_path)
    assert re.search(r"^Trained sapo for 2 steps on 2 process\(es\)", run.out, re.MULTILINE), run.out[-2000:]
    assert (tmp_path / "outputs" / "sapo-tiny" / "model.safetensors").is_file()


def test_resume_guide(toy_cache, capsys, monkeypatch, tmp_path):
    first, from_two, last = run_offline("resume.md", capsys, monkeypatch, tmp_path)
    output = tmp_path / "outputs" / "sapo-resume"
    checkpoints = sorted(c for c in os.listdir(output) if c.startswith("checkpoint-"))
    assert checkpoints == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    held = {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"}
    assert held <= set(os.listdir(output / "checkpoint-2"))  # what the page says a checkpoint holds
    assert "Resuming from outputs/sapo-resume/checkpoint-2 (step 2 of 4)" in from_two.out
    assert "Trained sapo for 2 steps (steps 3-4, resumed from step 2)" in from_two.out
    assert from_two.trainer.state.global_step == 4
    full, resumed = _weights(first.trainer), _weights(from_two.trainer)
    assert full.keys() == resumed.keys()
    for name in full:  # the same prompts and completions from the checkpoint on: the first run's weights
        assert full[name].equal(resumed[name]), name
    assert "Resuming from outputs/sapo-resume/checkpoint-4 (step 4 of 6)" in last.out
    assert "Trained sapo for 2 steps (steps 5-6, resumed from step 4)" in last.out
    assert last.trainer.state.global_step == 6


def test_choose_algorithm_guide(toy_cache, capsys, monkeypatch, tmp_path):
    grpo, gspo, listing = run_offline("choose-algorithm.md", capsys, monkeypatch, tmp_path)
    for run, name in ((grpo, "grpo"), (gspo, "gspo")):
        assert type(run.trainer) is trl_ext.get_algorithm(name).trainer_class
        assert (tmp_path / "outputs" / "compare" / name / "training_curves.png").is_file()
        assert re.search(rf"^Trained {name} for 2 steps on 1 process\(es\): reward ", run.out, re.MULTILINE)
    assert listing.trainer is None and listing.out.startswith("gspo: ")
    assert "trl_ext.GSPOTrainer / trl_ext.GSPOConfig" in listing.out and "settings    " in listing.out


@pytest.mark.slow  # the rollout worker's process imports the stack (~30 s on 2 cores)
def test_async_guide(toy_cache, capsys, monkeypatch, tmp_path):
    (run,) = run_offline("async-vllm.md", capsys, monkeypatch, tmp_path)
    trainer = run.trainer
    assert type(trainer) is trl_ext.AsyncGRPOTrainer and type(trainer.args) is trl_ext.AsyncCISPOConfig
    assert trainer.args.max_staleness == 2 and trainer.state.global_step == 2
    assert logged(trainer, "trained_staleness_mean")
    assert re.search(r"trained staleness mean .*stale samples dropped, .* waiting for rollouts", run.out)


OFFLINE_TESTS = {
    "own-data.md": test_own_data_guide,
    "lora-vllm.md": test_lora_guide,
    "multi-gpu.md": test_multi_gpu_guide,
    "resume.md": test_resume_guide,
    "choose-algorithm.md": test_choose_algorithm_guide,
    "async-vllm.md": test_async_guide,
}


def test_every_guide_has_an_offline_form_a_test_and_a_link():
    assert sorted(OFFLINE_TESTS) == GUIDES
    for page in GUIDES:
        assert any(b.marker == "offline" for b in blocks(page)), page
    with open(os.path.join(GUIDES_DIR, "index.md"), encoding="utf-8") as f:
        assert sorted(re.findall(r"\]\(([\w-]+\.md)\)", f.read())) == GUIDES
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        nav = f.read()
    assert all(f"guides/{page}" in nav for page in ["index.md", *GUIDES])


def test_the_multi_gpu_guide_lists_the_packaged_accelerate_configs():
    """The list of configs is the folder's files, and the process counts it states are theirs."""
    with open(os.path.join(GUIDES_DIR, "multi-gpu.md"), encoding="utf-8") as f:
        section = f.read().split("## Which config", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([\w-]+\.yaml)`", section))
    folder = os.path.join(ROOT, "configs", "accelerate")
    assert listed == set(os.listdir(folder))
    processes = {}
    for name in listed:
        with open(os.path.join(folder, name)) as f:
            processes[name] = yaml.safe_load(f)["num_processes"]
    gpu = {n for n in listed if n != "single_device.yaml" and not n.endswith("_cpu.yaml")}
    assert "The GPU configs start 8 processes" in section and {processes[n] for n in gpu} == {8}
    assert "with 2 processes on a CPU" in section and {processes[n] for n in listed if n.endswith("_cpu.yaml")} == {2}
    assert "one process" in section and processes["single_device.yaml"] == 1


# ----------------------------------------------------------------------------------- every command parses

COMMANDS = all_commands()


@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.page}:{c.line}" for c in COMMANDS])
def test_every_command_in_the_guides_parses(command):
    try:
        check_command(command.tokens)
    except CommandRefused as error:
        pytest.fail(f"{command}\n  refused: {error}")


def test_a_vllm_server_serves_the_model_its_trainer_trains_at_its_port():
    """Each page's `trl vllm-serve --model M --port P` has a trainer of M pointed at port P."""
    for page in GUIDES:
        parsed = [check_command(c.tokens) for c in COMMANDS if c.page == page]
        servers = [p["serve"] for p in parsed if "serve" in p]
        trainers = [p["args"] for p in parsed if "args" in p]
        for serve in servers:  # the trainers of a real model that use a server (the offline runs name no model)
            clients = [args for args in trainers if _model(args) and _server_url(args[1])]
            assert clients, f"{page}: no trainer for the server of {serve.model}"
            for args in clients:
                assert _model(args) == serve.model and _server_url(args[1]).endswith(f":{serve.port}"), page


def _model(args: tuple) -> str | None:
    return next(a.model_name_or_path for a in args if hasattr(a, "model_name_or_path"))


def _server_url(training_args) -> str | None:
    """The vLLM server a trainer's config asks for completions: TRL's server mode, or the asynchronous trainer's."""
    if getattr(training_args, "use_vllm", False) and training_args.vllm_mode == "server":
        return training_args.vllm_server_base_url
    asynchronous = isinstance(training_args, trl_ext.AsyncGRPOConfig) and training_args.rollout_backend == "vllm"
    return training_args.vllm_server_base_url if asynchronous else None


@pytest.mark.parametrize(
    ("wrong", "right", "refusal"),
    [
        ("trl-ext train --algorithm sapo --use_peft --lora_rank 16", "trl-ext train --algorithm sapo --use_peft "
         "--lora_r 16", r"unrecognized arguments: --lora_rank 16 \(did you mean"),
        ("trl-ext train --algorithm sapoo", "trl-ext train --algorithm sapo", "'sapoo' has no trainer"),
        ("python examples/train_sapo.py --bf16", "python examples/train_sapo.py --bf16 true",
         "argument --bf16: expected one argument"),
        ("accelerate launch examples/train_cispo.py --use_vlm true", "accelerate launch examples/train_cispo.py "
         "--use_vllm true", "unrecognized arguments: --use_vlm true"),
        ("accelerate launch --config_file configs/accelerate/zero3.yaml examples/train_sapo.py", "accelerate launch "
         "--config_file configs/accelerate/deepspeed_zero3.yaml examples/train_sapo.py", "zero3.yaml: no such file"),
        ("trl-ext train --accelerate_config multi_gpu --num_proceses 2 --algorithm sapo", "trl-ext train "
         "--accelerate_config multi_gpu --num_processes 2 --algorithm sapo", "unrecognized arguments: --num_proceses"),
        ("trl vllm-serve --model Qwen/Qwen3-1.7B --tensor_paralel_size 2", "trl vllm-serve --model Qwen/Qwen3-1.7B "
         "--tensor_parallel_size 2", "unrecognized arguments: --tensor_paralel_size 2"),
        ("pip install trl", None, "not a command this test can check"),
    ],
)  # fmt: skip
def test_the_check_refuses_a_misspelt_command(wrong, right, refusal):
    """The check can fail: each misspelt command is refused with its program's error, and the same command spelt
    right passes."""
    with pytest.raises(CommandRefused, match=refusal):
        check_command(shlex.split(wrong))
    if right is not None:
        check_command(shlex.split(right))
