"""A model the scripts cannot load is one line, said before anything loads and quickly (issue: an unreachable Hub
model used to take ~30 s of retries and a ~75-line traceback)."""

from __future__ import annotations

import time

import httpx2 as httpx  # huggingface_hub's HTTP client
import pytest
from huggingface_hub.errors import RepositoryNotFoundError

from trl_ext.cli import main as cli_main
from trl_ext.scripts import model_source
from trl_ext.scripts.grpo import main as grpo_main


def test_a_local_model_directory_and_the_default_pass(tmp_path):
    model_source.check_model_source(None)  # the embedded default
    model_source.check_model_source(str(tmp_path))


def test_a_local_path_that_does_not_exist_is_not_looked_up_on_the_hub(tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.HfApi.model_info", lambda *a, **k: pytest.fail("the Hub was asked"))
    for name in (str(tmp_path / "missing"), "./missing", "~/models/missing"):
        with pytest.raises(ValueError, match=rf"--model_name_or_path {name}: no such model directory .* not looked up"):
            model_source.check_model_source(name)


def test_offline_and_not_in_the_cache(monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("huggingface_hub.HfApi.model_info", lambda *a, **k: pytest.fail("the Hub was asked"))
    with pytest.raises(ValueError, match=r"no-org/no-model: not a local directory, and not in the local Hugging Face "
                                         r"cache \(HF_HUB_OFFLINE is set.*`hf download no-org/no-model`"):  # fmt: skip
        model_source.check_model_source("no-org/no-model")


def test_a_cached_model_is_not_asked_for(monkeypatch):
    monkeypatch.setattr("huggingface_hub.try_to_load_from_cache", lambda repo, name: f"/cache/{repo}/{name}")
    monkeypatch.setattr("huggingface_hub.HfApi.model_info", lambda *a, **k: pytest.fail("the Hub was asked"))
    model_source.check_model_source("org/cached-model")


def _raising(error):
    def model_info(self, name, timeout=None):
        assert timeout == model_source.HUB_TIMEOUT_S
        raise error

    return model_info


def test_the_hub_unreachable_or_without_the_model(monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.HfApi.model_info", _raising(ConnectionError("Name or service not known")))
    with pytest.raises(ValueError, match=r"org/model: .* the Hub could not be reached \(Name or service not known\); "
                                         r"pass a local directory.*HF_HUB_OFFLINE=1"):  # fmt: skip
        model_source.check_model_source("org/model")
    request = httpx.Request("GET", "https://huggingface.co/api/models/org/model")
    missing = RepositoryNotFoundError("Repository Not Found", response=httpx.Response(404, request=request))
    monkeypatch.setattr("huggingface_hub.HfApi.model_info", _raising(missing))
    with pytest.raises(ValueError, match=r"org/model: no such local directory, and no such model on the Hub"):
        model_source.check_model_source("org/model")


def test_the_scripts_say_it_in_one_line_before_loading_anything(monkeypatch, capsys, toy_cache):
    """From the script and from `trl-ext train`: one line (exit status 2 on the command line), in well under the
    ~30 s transformers takes to give up, on this machine where the Hub cannot be reached."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"--model_name_or_path no-org/no-such-model: "):
        grpo_main("sapo", ["--model_name_or_path", "no-org/no-such-model", "--max_steps", "1"])
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["train", "--algorithm", "sapo", "--model_name_or_path", "no-org/no-such-model"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and "no-org/no-such-model" in err[0], err  # the error, and at most the help hint
    assert time.perf_counter() - start < 2 * model_source.HUB_TIMEOUT_S + 5
