"""The IW-OPD trainer: TRL's experimental `IWOPDTrainer` with trl_ext's loss port (tiny models, CPU), against TRL's.

* One optimizer step of `trl_ext.IWOPDTrainer` and of TRL's `IWOPDTrainer` from the same weights, data and seed gives
  the same loss and parameters: through the whole training loop where TRL's normalization is right (off-policy
  rows, one accumulation step; a teacher server's JSD), and at the loss step on the same generated completions for
  IW-OPD (TRL handed the count of the completions' tokens).
* TRL's teacher-server path runs offline through the subclass: TRL's own vLLM client answered by a stub server
  (`StubVLLMServer`, vLLM's response format, scored by a local teacher).
* The deliberate difference is pinned: trl_ext divides by the window's generated completion tokens (prompt-only data
  trains; the update does not depend on the accumulation steps), where TRL's count of the dataloader's labels gives a
  non-finite loss on prompt-only rows and an update that shrinks with the accumulation steps.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import warnings
from typing import ClassVar

import pytest
import torch
from datasets import Dataset
from trainer_helpers import CPU, logged, snapshot
from transformers import AutoModelForCausalLM

import trl_ext
from trl_ext.families import get_family
from trl_ext.losses.iw_opd import IWOPDObjective
from trl_ext.toy import build_tokenizer, toy_expert_dataset

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    from trl.experimental import iw_opd as trl_iw_opd
    from trl.generation import vllm_client

from trl_ext import IWOPDConfig, IWOPDTrainer


def prompts(rows: int = 16) -> Dataset:
    """Toy prompts as chat messages (the student completes them)."""
    demos = toy_expert_dataset(rows, conversational=True)
    return Dataset.from_dict({"messages": demos["prompt"]})


def demonstrations(rows: int = 16) -> Dataset:
    """Toy prompts with the assistant's answer (trained on directly at the off-policy steps)."""
    demos = toy_expert_dataset(rows, conversational=True)
    return Dataset.from_dict({"messages": [p + c for p, c in zip(demos["prompt"], demos["completion"], strict=True)]})


def settings(out, **overrides) -> dict:
    return {
        **CPU,
        "output_dir": str(out),
        "per_device_train_batch_size": 4,
        "max_completion_length": 6,
        "max_length": 48,
        "max_steps": 1,
        "learning_rate": 1e-2,
        **overrides,
    }


def build(trainer_class, config_class, student, teacher, out, dataset, **overrides):
    return trainer_class(
        model=student,
        teacher_model=teacher,
        args=config_class(**settings(out, **overrides)),
        train_dataset=dataset,
        processing_class=build_tokenizer(),
    )


def sgd(trainer):
    """An SGD optimizer at the config's learning rate: a step's update is the gradient, scaled."""
    return torch.optim.SGD(trainer.model.parameters(), lr=trainer.args.learning_rate)


# --------------------------------------------------------------------------------------------------- the record


def test_attached_to_the_algorithm_table():
    spec = trl_ext.get_algorithm("iw_opd")
    assert spec.trainer_class is IWOPDTrainer and spec.config_class is IWOPDConfig
    assert issubclass(IWOPDTrainer, trl_iw_opd.IWOPDTrainer) and issubclass(IWOPDConfig, trl_iw_opd.IWOPDConfig)
    assert spec.policy_loss_fn is None and spec.paper.arxiv == "2606.22600" and spec.display_name == "IW-OPD"
    family = get_family("iw_opd")
    module, name = family.objective.rsplit(".", 1)
    assert getattr(importlib.import_module(module), name) is IWOPDObjective and family.script == "iw_opd"
    # every field keeps TRL's default; the loss is built from the fields of the same names
    trl_defaults = {f.name: f.default for f in dataclasses.fields(trl_iw_opd.IWOPDConfig)}
    ours = {f.name: f.default for f in dataclasses.fields(IWOPDConfig)}
    assert ours == trl_defaults
    objective = IWOPDConfig(output_dir="unused", **CPU, iw_opd_gamma=2.0, temperature=0.5).objective()
    assert (objective.distillation_objective, objective.iw_opd_gamma, objective.temperature) == ("iw_opd", 2.0, 0.5)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"beta": 1.5}, r"beta=1.5 is not valid; must be in \[0, 1\]"),
        ({"temperature": 0.0}, r"temperature=0.0 is not valid; must be > 0"),
        ({"loss_top_k": -1}, r"loss_top_k=-1 is not valid; must be an integer >= 0"),
        ({"distillation_objective": "kl"}, r"distillation_objective='kl' is not valid; must be one of 'iw_opd', 'jsd'"),
        ({"reverse_kl_top_1_mode": "argmax"}, r"reverse_kl_top_1_mode='argmax' is not valid with .*'iw_opd'"),
        ({"iw_opd_gamma": -1.0}, r"iw_opd_gamma=-1.0 is not valid; must be >= 0"),
        (
            {"distillation_objective": "jsd", "beta": 0.5, "loss_top_k": 4, "use_teacher_server": True},
            r"loss_top_k=4 is not valid with a teacher server and beta=0.5; must be 1",
        ),
    ],
)
def test_bad_config(overrides, message):
    """Errors at construction, naming the config, the field and what it may be (before TRL's own checks)."""
    with pytest.raises(ValueError, match=rf"^IWOPDConfig \(loss[^)]*\): IWOPDObjective: {message}"):
        IWOPDConfig(output_dir="unused", **{**CPU, "teacher_model_server_url": "http://stub", **overrides})


def test_trl_config_is_converted(random_tiny_model, random_teacher, tmp_path):
    args = trl_iw_opd.IWOPDConfig(**settings(tmp_path, iw_opd_gamma=1.5, max_steps=3))
    trainer = IWOPDTrainer(model=random_tiny_model, teacher_model=random_teacher, args=args, train_dataset=prompts(8))
    assert type(trainer.args) is IWOPDConfig and trainer.args.iw_opd_gamma == 1.5 and trainer.args.max_steps == 3
    assert trainer.loss_objective.iw_opd_gamma == 1.5


def test_the_teacher_named_by_the_config(random_tiny_model, random_teacher, tmp_path):
    """TRL's trainer reads only its `teacher_model` argument; trl_ext's also the config's field, and refuses to start
    without any teacher (TRL's fails at the first loss)."""
    args = IWOPDConfig(**settings(tmp_path, teacher_model_name_or_path=random_teacher))
    trainer = IWOPDTrainer(model=random_tiny_model, args=args, train_dataset=prompts(4))
    assert trainer.teacher_model.config._name_or_path == random_teacher
    with pytest.raises(ValueError, match=r"^IWOPDTrainer: no teacher: pass teacher_model, set args.teacher_model_name"):
        IWOPDTrainer(model=random_tiny_model, args=IWOPDConfig(**settings(tmp_path)), train_dataset=prompts(4))


# ------------------------------------------------------------------------------------------- parity with TRL


def train_one_step(trainer_class, config_class, student, teacher, out, dataset, **overrides):
    trainer = build(trainer_class, config_class, student, teacher, out, dataset, **overrides)
    trainer.optimizer = sgd(trainer)
    trainer.train()
    return trainer


@pytest.mark.parametrize(
    "options",
    [
        {"beta": 0.0, "loss_top_k": 0},
        {"beta": 0.5, "loss_top_k": 1},
        {"beta": 1.0, "loss_top_k": 3, "loss_add_tail": False, "temperature": 0.8},
    ],
    ids=str,
)
def test_one_off_policy_step_matches_trl(random_tiny_model, random_teacher, tmp_path, float_tolerance, options):
    """The whole training loop, `lmbda=0` (the dataset's completions), one accumulation step: TRL's count of the
    batch's labels is the tokens trained, so the two updates are equal."""
    options = {"distillation_objective": "jsd", "lmbda": 0.0, **options}
    trainers = [
        train_one_step(cls, cfg, random_tiny_model, random_teacher, tmp_path / name, demonstrations(4), **options)
        for name, cls, cfg in [
            ("trl", trl_iw_opd.IWOPDTrainer, trl_iw_opd.IWOPDConfig),
            ("ext", IWOPDTrainer, IWOPDConfig),
        ]
    ]
    trl, ours = trainers
    tolerance = float_tolerance(torch.float32, n_terms=1e4)
    assert logged(ours, "loss")[0] == pytest.approx(logged(trl, "loss")[0], rel=tolerance["rtol"], abs=1e-6)
    assert logged(ours, "off_policy_loss") == logged(trl, "off_policy_loss")
    for (name, p), q in zip(trl.model.named_parameters(), ours.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)


def generated_window(trainer):
    """The first generation batch of `trainer`'s dataloader, completed by the student (TRL's buffering)."""
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    torch.manual_seed(0)
    return trainer._prepare_inputs(batch)


def loss_step(trainer, inputs, num_items=None):
    """One SGD step of `trainer` on prepared `inputs`; its loss."""
    trainer.model.train()
    optimizer = sgd(trainer)
    loss = trainer.compute_loss(trainer.model, inputs, num_items_in_batch=num_items)
    loss.backward()
    optimizer.step()
    return loss.detach()


@pytest.mark.parametrize("served", [False, True], ids=["local-teacher", "teacher-server"])
@pytest.mark.parametrize("gamma", [0.5, 2.0])
def test_iw_opd_step_matches_trl_on_the_same_completions(random_tiny_model, random_teacher, tmp_path, served, gamma,
                                                         stub_server):  # fmt: skip
    """IW-OPD at the loss step: the same student completions (generated once, by trl_ext's trainer), TRL handed
    their token count as `num_items_in_batch` (its count when it is right), one SGD step each: the same loss and
    parameters."""
    options = {"iw_opd_gamma": gamma, "use_teacher_server": served}
    if served:
        options["teacher_model_server_url"] = "http://stub"
    teacher = None if served else random_teacher
    ours = build(IWOPDTrainer, IWOPDConfig, random_tiny_model, teacher, tmp_path / "ext", prompts(8), **options)
    trl = build(trl_iw_opd.IWOPDTrainer, trl_iw_opd.IWOPDConfig, random_tiny_model, teacher, tmp_path / "trl",
                prompts(8), **options)  # fmt: skip
    inputs = generated_window(ours)
    tokens = (inputs["labels"] != -100).sum()
    assert tokens > 0 and ours._window["global_valid_toks"] == tokens  # counted on the generated completions
    assert loss_step(trl, inputs, num_items=tokens) == pytest.approx(loss_step(ours, inputs).item(), rel=1e-6)
    assert (
        trl._metrics["train"].keys() == ours._metrics["train"].keys() and "iw_opd/mean_weight" in trl._metrics["train"]
    )
    for (name, p), q in zip(trl.model.named_parameters(), ours.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7, msg=name)


def test_served_jsd_trains_as_trl(random_tiny_model, tmp_path, stub_server):
    """TRL's teacher-server path through the subclass, the whole loop: the student's completions of prompt-only rows
    scored by the (stub) server; TRL averages the micro-batch there, which one accumulation step makes the window."""
    options = {"distillation_objective": "jsd", "beta": 0.0, "loss_top_k": 2, "use_teacher_server": True,
               "teacher_model_server_url": "http://stub"}  # fmt: skip
    trl, ours = (
        train_one_step(cls, cfg, random_tiny_model, None, tmp_path / name, prompts(8), **options)
        for name, cls, cfg in [
            ("trl", trl_iw_opd.IWOPDTrainer, trl_iw_opd.IWOPDConfig),
            ("ext", IWOPDTrainer, IWOPDConfig),
        ]
    )
    assert stub_server.requests and all(r["prompt_logprobs"] == 2 for r in stub_server.requests)
    assert logged(ours, "loss")[0] == pytest.approx(logged(trl, "loss")[0], rel=1e-5)
    assert logged(ours, "completions/on_policy_mean_length") == logged(trl, "completions/on_policy_mean_length")
    for (name, p), q in zip(trl.model.named_parameters(), ours.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)


# ------------------------------------------------------------------------------------- the pinned difference


def test_prompt_only_rows_train_where_trl_divides_by_zero(random_tiny_model, random_teacher, tmp_path):
    """Prompt-only rows (the on-policy data IW-OPD is for): HF counts the dataloader's labels, none, so TRL's first
    loss is ±inf or NaN and so is its gradient; trl_ext divides by the generated completion tokens."""
    trl, ours = (
        train_one_step(cls, cfg, random_tiny_model, random_teacher, tmp_path / name, prompts(4))
        for name, cls, cfg in [
            ("trl", trl_iw_opd.IWOPDTrainer, trl_iw_opd.IWOPDConfig),
            ("ext", IWOPDTrainer, IWOPDConfig),
        ]
    )
    assert not math.isfinite(logged(trl, "on_policy_loss")[0]) and not math.isfinite(logged(trl, "grad_norm")[0])
    assert math.isfinite(logged(ours, "loss")[0]) and math.isfinite(logged(ours, "grad_norm")[0])
    assert all(torch.isfinite(p).all() for p in ours.model.parameters())


def test_the_update_does_not_depend_on_the_accumulation_steps(
    random_tiny_model, random_teacher, tmp_path, float_tolerance
):
    """8 off-policy rows as 2 accumulation steps of 4 give trl_ext's update on one batch of 8; TRL counts the
    repeated generation batch once per accumulation step, so its loss and update are half of its own on one batch."""
    data = demonstrations(8)
    options = {"distillation_objective": "jsd", "lmbda": 0.0, "beta": 0.5, "loss_top_k": 0}
    before = snapshot(AutoModelForCausalLM.from_pretrained(random_tiny_model))
    # an update measured as (p + Δ) − p in float32 keeps p's rounding: the tolerance of the parameters' size
    tolerance = float_tolerance(torch.float32, magnitude=max(p.abs().max() for p in before.values()))

    def run(cls, cfg, name, batch, steps):
        trainer = train_one_step(
            cls, cfg, random_tiny_model, random_teacher, tmp_path / name, data,
            per_device_train_batch_size=batch, gradient_accumulation_steps=steps, learning_rate=1.0, **options,
        )  # fmt: skip
        update = torch.cat([(p.detach() - before[n]).flatten() for n, p in trainer.model.named_parameters()])
        return logged(trainer, "loss")[0], update

    (ours_loss, ours_one), (ours_two_loss, ours_two) = (
        run(IWOPDTrainer, IWOPDConfig, "e1", 8, 1),
        run(IWOPDTrainer, IWOPDConfig, "e2", 4, 2),
    )
    (trl_loss, trl_one), (trl_two_loss, trl_two) = (
        run(trl_iw_opd.IWOPDTrainer, trl_iw_opd.IWOPDConfig, "t1", 8, 1),
        run(trl_iw_opd.IWOPDTrainer, trl_iw_opd.IWOPDConfig, "t2", 4, 2),
    )
    assert ours_two_loss == pytest.approx(ours_loss, rel=1e-5) and ours_loss == pytest.approx(trl_loss, rel=1e-5)
    assert trl_two_loss == pytest.approx(trl_loss / 2, rel=1e-5)
    torch.testing.assert_close(ours_one, trl_one, **tolerance)
    torch.testing.assert_close(ours_two, ours_one, **tolerance)
    torch.testing.assert_close(trl_two, trl_one / 2, **tolerance)
    assert (ours_two - trl_two).abs().max() > 100 * tolerance["atol"]  # the two differ by more than rounding


# ------------------------------------------------------------------------------------------------ the server


class StubVLLMServer(vllm_client.VLLMClient):
    """TRL's `VLLMClient` talking to no server: its `/v1/completions` requests (TRL's `get_sequence_logprobs`) are
    answered in vLLM's format (`prompt_logprobs`: per position the top-k tokens by rank, and the sampled token) from a
    local teacher, at the request's temperature."""

    teacher_path: ClassVar[str] = ""
    requests: ClassVar[list[dict]] = []

    def __init__(self, base_url=None, connection_timeout=0.0, **kwargs):  # no HTTP session, no health check
        self.base_url, self.model = base_url, "stub-teacher"
        self.teacher = AutoModelForCausalLM.from_pretrained(self.teacher_path).eval()

    def _post(self, url, **kwargs):
        assert url.endswith("/v1/completions"), url
        request = kwargs["json"]
        type(self).requests.append(request)
        choices = []
        for sequence in request["prompt"]:
            with torch.no_grad():
                logits = self.teacher(torch.tensor([sequence])).logits[0]
            log_probs = torch.log_softmax(logits / request["temperature"], dim=-1)
            positions = [None]
            for position in range(1, len(sequence)):
                scores = log_probs[position - 1]
                ranked = scores.argsort(descending=True).tolist()
                entries = {
                    str(token): {"logprob": scores[token].item(), "rank": rank + 1}
                    for rank, token in enumerate(ranked[: request["prompt_logprobs"]])
                }
                actual = sequence[position]
                entries[str(actual)] = {"logprob": scores[actual].item(), "rank": ranked.index(actual) + 1}
                positions.append(entries)
            choices.append({"prompt_logprobs": positions})
        return {"choices": choices}


@pytest.fixture
def stub_server(random_teacher, monkeypatch):
    """TRL's vLLM client replaced by `StubVLLMServer` (scored by `random_teacher`) for the test's trainers."""
    monkeypatch.setattr(StubVLLMServer, "teacher_path", random_teacher)
    monkeypatch.setattr(StubVLLMServer, "requests", [])
    monkeypatch.setattr(vllm_client, "VLLMClient", StubVLLMServer)
    return StubVLLMServer


def test_model_card_names_iw_opd(random_tiny_model, random_teacher, tmp_path):
    trainer = build(IWOPDTrainer, IWOPDConfig, random_tiny_model, random_teacher, tmp_path, prompts(4), max_steps=1)
    assert trainer._name == "IW-OPD (trl_ext)" and trainer._paper["id"] == "2606.22600"
    trainer.create_model_card()
    card = (tmp_path / "README.md").read_text()
    assert "On the Position Bias of On-Policy Distillation" in card and "`iw_opd`" in card
    assert "`iw_opd (trl_ext.losses.iw_opd.IWOPDObjective)`" in card


# ------------------------------------------------------------------------------------------------ the script


QUICK = ["--max_steps", "3", "--per_device_train_batch_size", "16", "--num_generations", "4", "--logging_steps", "1"]


def test_script_trains_the_toy(toy_cache, tiny_model, tiny_teacher, tmp_path):
    """`examples/train_iw_opd.py`'s `main` on the embedded default, a few steps: the toy student distilled from the
    toy teacher on plain-text prompts, the toy reward measured before training and at each log."""
    from trl_ext.scripts.iw_opd import PlainPromptCollator, main

    trainer = main(["--output_dir", str(tmp_path), *QUICK, "--save_strategy", "no"])
    assert type(trainer) is IWOPDTrainer and trainer.state.global_step == 3 and trainer.args.use_cpu
    assert trainer.model.config._name_or_path == tiny_model and trainer.args.teacher_model_name_or_path == tiny_teacher
    assert isinstance(trainer.data_collator, PlainPromptCollator) and trainer.args.learning_rate == 1e-3
    rewards = [(entry["step"], entry["reward"]) for entry in trainer.state.log_history if "reward" in entry]
    assert [step for step, _ in rewards] == [0, 1, 2, 3] and all(0 <= value <= 1 for _, value in rewards)
    assert logged(trainer, "iw_opd/mean_weight") and (tmp_path / "model.safetensors").is_file()


@pytest.mark.slow
def test_the_example_learns_the_toy(toy_cache, tiny_model, tiny_teacher, tmp_path):
    """The example's run as is (120 steps, ~25 s of training on one CPU thread): the student's toy reward on the
    held-out prompts reaches the teacher's (60 steps reach 0.3-0.8, too unsteady to assert in the default tier)."""
    from trl_ext.scripts.iw_opd import main

    trainer = main(["--output_dir", str(tmp_path), "--save_strategy", "no"])
    rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    assert rewards[0] < 0.3 and min(rewards[-3:]) > 0.8, rewards


def test_script_usage_errors(toy_cache, tiny_model, random_tiny_model, tmp_path):
    from trl_ext.scripts._common import UsageError
    from trl_ext.scripts.iw_opd import main
    from trl_ext.toy import write_toy_datasets

    with pytest.raises(UsageError, match=r"IW-OPD distills a teacher: name it with --teacher_model_name_or_path"):
        main(["--output_dir", str(tmp_path), "--model_name_or_path", random_tiny_model])
    folder, _ = write_toy_datasets(str(tmp_path / "data"))["prompts"]
    with pytest.raises(UsageError, match=r"the train split has no 'messages' column \(its columns: 'prompt', 'target'"):
        main(["--output_dir", str(tmp_path), "--dataset_name", folder])
