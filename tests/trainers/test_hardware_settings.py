"""Hardware settings that cannot work are errors when the config is built, before any model is loaded, naming the
setting: a device (`teacher_device`, a `device_map` in `*_init_kwargs`) that this machine does not have, bf16 where
it is unsupported, and a launcher mixed precision (`accelerate launch`'s config) that disagrees with bf16 / fp16."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from trainer_helpers import CPU

import trl_ext
from trl_ext.trainers.core.devices import check_device, check_device_map

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
MISSING_GPU = f"cuda:{GPUS}"  # one past the last GPU: no such device whether this machine has GPUs or not
MISSING = r"(does not exist: this machine has \d+ cuda device|names a cuda device, but cuda is not available)"


def _sapo(tmp_path, **overrides):
    return trl_ext.SAPOConfig(**{**CPU, "output_dir": str(tmp_path), **overrides})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (MISSING_GPU, rf"teacher_device='{MISSING_GPU}' {MISSING}"),
        ("gpu7", r"teacher_device='gpu7' is not a device; must be a device of this machine such as 'cpu', 'cuda'"),
        (3.5, r"teacher_device=3.5 is not a device"),
    ],
)
def test_teacher_device_must_exist(tmp_path, value, message):
    with pytest.raises(ValueError, match=rf"OnPolicyDistillConfig: {message}"):
        trl_ext.OnPolicyDistillConfig(**CPU, output_dir=str(tmp_path), teacher_device=value)
    assert trl_ext.OnPolicyDistillConfig(**CPU, output_dir=str(tmp_path), teacher_device="cpu").teacher_device == "cpu"


@pytest.mark.parametrize(
    ("device_map", "message"),
    [
        (MISSING_GPU, rf"model_init_kwargs\['device_map'\]='{MISSING_GPU}' {MISSING}"),
        ({"": MISSING_GPU}, rf"model_init_kwargs\['device_map'\]\[''\]='{MISSING_GPU}' {MISSING}"),
        ({"model": "cpu", "lm_head": GPUS}, rf"model_init_kwargs\['device_map'\]\['lm_head'\]={GPUS} {MISSING}"),
        ("everywhere", r"model_init_kwargs\['device_map'\]='everywhere' is not valid; must be one of 'auto', "),
    ],
)
def test_device_map_must_name_devices_of_this_machine(tmp_path, device_map, message):
    for config_class in (trl_ext.SAPOConfig, trl_ext.MIXCHORDConfig, trl_ext.DPOConfig):
        with pytest.raises(ValueError, match=rf"{config_class.__name__}: {message}"):
            config_class(**CPU, output_dir=str(tmp_path), model_init_kwargs={"device_map": device_map})
    with pytest.raises(ValueError, match=rf"OnPolicyDistillConfig: teacher_{message}"):
        kwargs = {"device_map": device_map}
        trl_ext.OnPolicyDistillConfig(**CPU, output_dir=str(tmp_path), teacher_model_init_kwargs=kwargs)


def test_device_maps_that_exist_are_accepted(tmp_path):
    for device_map in ("auto", "sequential", "cpu", {"": "cpu"}, {"model": "cpu", "lm_head": "disk"}, None):
        config = _sapo(tmp_path, model_init_kwargs={"device_map": device_map})
        assert config.model_init_kwargs["device_map"] == device_map
    # from the command line: a JSON string, parsed by TrainingArguments, then checked
    with pytest.raises(ValueError, match=rf"model_init_kwargs\['device_map'\]='{MISSING_GPU}'"):
        _sapo(tmp_path, model_init_kwargs=f'{{"device_map": "{MISSING_GPU}"}}')
    check_device("owner", "name", "meta")
    check_device_map("owner", "name", {"a": "cpu", "b": "meta", "c": "disk"})
    with pytest.raises(ValueError, match=r"owner: name='disk' is not a device"):
        check_device("owner", "name", "disk")  # only a device_map may offload to disk


@pytest.mark.skipif(torch.cuda.is_available(), reason="bf16 is supported by this machine's GPU")
def test_bf16_on_a_missing_gpu_is_an_error_at_construction(tmp_path):
    """Without use_cpu=True and without a GPU, bf16 cannot run (transformers' own check, at construction)."""
    with pytest.raises(ValueError, match=r"doesn't support bf16/gpu"):
        _sapo(tmp_path, use_cpu=False, bf16=True)
    assert _sapo(tmp_path, use_cpu=True, bf16=True).bf16  # torch runs bf16 on CPU


@pytest.mark.parametrize(
    ("launcher", "precision", "message"),
    [
        ("bf16", {"bf16": False}, r"launched with mixed_precision='bf16' .* bf16=False, fp16=False \(full precision\)"),
        ("fp16", {"bf16": True}, r"launched with mixed_precision='fp16' .* set fp16=True and bf16=False in the"),
        ("fp8", {"bf16": True}, r"launched with mixed_precision='fp8' .* Make them agree: set the accelerate config's"),
    ],
)
def test_launcher_mixed_precision_must_agree(tmp_path, monkeypatch, launcher, precision, message):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", launcher)
    for config_class in (trl_ext.SAPOConfig, trl_ext.DPOConfig):
        with pytest.raises(ValueError, match=rf"{config_class.__name__}: accelerate was {message}"):
            config_class(**{**CPU, **precision}, output_dir=str(tmp_path))


@pytest.mark.parametrize(("launcher", "bf16"), [("no", True), ("no", False), ("bf16", True)])
def test_launcher_mixed_precision_that_agrees_or_defers(tmp_path, monkeypatch, launcher, bf16):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", launcher)
    config = _sapo(tmp_path, bf16=bf16)
    assert config.mixed_precision == ("bf16" if bf16 else "no")


def test_launched_example_with_disagreeing_precision_fails_before_loading(toy_cache, tmp_path):
    """The user path: `accelerate launch --mixed_precision fp16` on an example whose arguments say bf16=False (the
    CPU default) exits with the error, naming both settings, before the model loads."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]
    command += [os.path.join(ROOT, "configs", "accelerate", "single_device.yaml"), "--mixed_precision", "fp16"]
    command += [os.path.join(ROOT, "examples", "train_sapo.py"), "--output_dir", str(tmp_path), "--max_steps", "1"]
    command += ["--use_cpu", "true", "--bf16", "false"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode != 0
    assert "accelerate was launched with mixed_precision='fp16'" in result.stderr
    assert "bf16=False, fp16=False" in result.stderr
    assert "Loading" not in result.stdout + result.stderr and not os.listdir(tmp_path)
