"""SDFT (SDFTTrainer / SDFTConfig): TRL's experimental SDFTTrainer with the ported self-distillation loss. One
optimizer step of TRL's trainer and of trl_ext's from the same weights and seed (the same rollouts) gives the same loss,
metrics and parameters, for each mode and teacher; the served-teacher loss equals TRL's on the same served values; the
config's checks name the field; the record and the model card."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from trainer_helpers import CPU, logged, served_teacher, snapshot
from transformers import AutoModelForCausalLM
from trl.experimental.sdft import SDFTConfig as TRLSDFTConfig
from trl.experimental.sdft import SDFTTrainer as TRLSDFTTrainer

import trl_ext
from trl_ext.toy import build_tokenizer, toy_expert_dataset
from trl_ext.trainers.sdft.config import SDFTConfig
from trl_ext.trainers.sdft.trainer import SDFTTrainer


def demonstrations(rows: int = 8) -> Dataset:
    demos = toy_expert_dataset(rows)
    return Dataset.from_dict({"prompt": demos["prompt"], "privileged_context": demos["completion"]})


def settings(out, **overrides) -> dict:
    return {
        **CPU,
        "output_dir": str(out),
        "per_device_train_batch_size": 4,
        "num_generations": 2,
        "max_completion_length": 6,
        "max_steps": 1,
        "optim": "sgd",
        "learning_rate": 1.0,
        "max_grad_norm": 0.0,
        "distillation_topk": 5,
        **overrides,
    }


def trained(trainer_class, config_class, model: str, out, **overrides):
    trainer = trainer_class(
        model=model,
        args=config_class(**settings(out, **overrides)),
        train_dataset=demonstrations(),
        processing_class=build_tokenizer(),
    )
    trainer.train()
    return trainer


def test_record_family_and_classes():
    spec = trl_ext.get_algorithm("sdft")
    assert (spec.trainer, spec.policy_loss_fn, spec.advantage_fn, spec.schema) == ("sdft", None, None, "experience")
    assert spec.loss_name == "trl_ext.losses.self_distillation.SelfDistillationLoss"
    assert spec.paper.arxiv == "2601.19897" and spec.family.script == "sdft" and spec.family.components == ()
    assert (
        (spec.config_class, spec.trainer_class)
        == (SDFTConfig, SDFTTrainer)
        == (trl_ext.SDFTConfig, trl_ext.SDFTTrainer)
    )
    assert issubclass(SDFTTrainer, TRLSDFTTrainer) and issubclass(SDFTConfig, TRLSDFTConfig)


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # TRL's defaults: top-k (5 here) with α = 0.5, the initial model as the teacher
        {"distillation_mode": "full_logits", "distillation_alpha": 0.0, "teacher_model_kind": "live"},
        {"distillation_mode": "sampled_token", "distillation_alpha": 1.0, "num_loss_tokens_to_skip": 2},
        {"distillation_add_tail": True, "teacher_model_kind": "ema", "max_steps": 2, "steps_per_generation": 2},
    ],
    ids=["topk-base", "full-live", "sampled-skip", "tail-ema-reused-batch"],
)
def test_optimizer_steps_equal_trls(random_tiny_model, tmp_path, overrides):
    """The same seed draws the same rollouts in both trainers; SGD with lr 1 makes the update the gradient itself.
    The last case trains two steps on one generation batch: the second reuses it with the rollout log-probs, so the
    clipped importance weight acts, and the EMA teacher moves between them."""
    theirs = trained(TRLSDFTTrainer, TRLSDFTConfig, random_tiny_model, tmp_path / "trl", **overrides)
    before = snapshot(AutoModelForCausalLM.from_pretrained(random_tiny_model))
    ours = trained(SDFTTrainer, SDFTConfig, random_tiny_model, tmp_path / "ours", **overrides)
    assert logged(ours, "loss") == pytest.approx(logged(theirs, "loss"), rel=1e-4, abs=1e-7)
    for name in ("self_distillation/distillation_loss", "sdft/distillation_loss", "completions/mean_length"):
        assert logged(ours, name) == pytest.approx(logged(theirs, name), rel=1e-4, abs=1e-7), name
    moved = False
    for (name, a), b in zip(theirs.model.named_parameters(), ours.model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
        moved |= not torch.equal(b, before[name])
    assert moved


def test_trls_config_is_converted(random_tiny_model, tmp_path):
    trainer = SDFTTrainer(
        model=random_tiny_model,
        args=TRLSDFTConfig(**settings(tmp_path, distillation_alpha=1.0)),
        train_dataset=demonstrations(),
        processing_class=build_tokenizer(),
    )
    assert isinstance(trainer.args, SDFTConfig) and trainer.distillation_loss_fn.distillation_alpha == 1.0
    assert trainer.distillation_loss_fn.distillation_topk == 5


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("distillation_mode", "topk", r"distillation_mode='topk' is not valid; must be one of 'sampled_token'"),
        ("distillation_alpha", -0.1, r"distillation_alpha=-0.1 is not valid; must be in \[0, 1\]"),
        ("distillation_topk", None, r"distillation_topk=None is not valid; must be an integer >= 1"),
        ("distillation_is_clip", -1.0, r"distillation_is_clip=-1.0 is not valid; must be > 0 or None"),
        ("teacher_model_kind", "frozen", r"teacher_model_kind='frozen' is not valid; must be one of 'base', 'live'"),
        ("teacher_update_rate", 0.0, r"teacher_update_rate=0.0 is not valid; must be in \(0, 1\]"),
        ("teacher_sync_steps", 0, r"teacher_sync_steps=0 is not valid; must be an integer >= 1"),
        ("num_loss_tokens_to_skip", -1, r"num_loss_tokens_to_skip=-1 is not valid; must be an integer >= 0"),
    ],
)
def test_bad_settings_are_refused_when_the_config_is_built(tmp_path, field, value, match):
    with pytest.raises(ValueError, match=rf"^SDFTConfig: {match}"):
        SDFTConfig(**settings(tmp_path, **{field: value}))
    if field in ("teacher_model_kind", "distillation_topk", "distillation_alpha"):  # the deliberate difference:
        TRLSDFTConfig(**settings(tmp_path, **{field: value}))  # TRL's config lets these through
    with pytest.raises(ValueError, match=r"^SDFTConfig: distillation_alpha=0.5 is not valid with distillation_mode="):
        SDFTConfig(**settings(tmp_path, distillation_mode="sampled_token"))  # TRL's rule; α = 0.5 by default


@pytest.mark.parametrize(
    "overrides",
    [
        {"distillation_mode": "sampled_token", "distillation_alpha": 1.0},
        {"distillation_mode": "topk_logits", "distillation_alpha": 0.5, "distillation_topk": 4},
        {"distillation_mode": "topk_logits", "distillation_alpha": 0.0, "distillation_add_tail": True,
         "num_loss_tokens_to_skip": 1},
    ],
)  # fmt: skip
def test_the_served_teacher_loss_equals_trls(random_tiny_model, tmp_path, overrides):
    """`use_teacher_server` needs a vLLM server; the loss of what it serves is compared here: both trainers' served-
    teacher method on one batch, the server's answer given. Equal loss, metrics and gradients."""
    common = settings(tmp_path, teacher_model_kind="live", **overrides)
    trainers = {
        "trl": TRLSDFTTrainer(random_tiny_model, TRLSDFTConfig(**common), demonstrations(),
                              processing_class=build_tokenizer()),
        "ours": SDFTTrainer(random_tiny_model, SDFTConfig(**common), demonstrations(),
                            processing_class=build_tokenizer()),
    }  # fmt: skip
    for trainer in trainers.values():
        trainer.model.train()  # TRL's metrics of a training step
    torch.manual_seed(0)
    inputs = trainers["trl"]._prepare_inputs(list(demonstrations()))
    served = served_teacher(trainers["trl"], inputs, overrides.get("distillation_topk", 1))
    results = {}
    for name, trainer in trainers.items():
        trainer._get_teacher_token_logprobs_from_server = lambda batch, width: served
        trainer.model.zero_grad()
        loss = trainer._compute_server_distillation_loss(trainer.model, inputs)
        loss.backward()
        grads = [p.grad.clone() for p in trainer.model.parameters()]
        results[name] = (loss.detach(), grads, dict(trainer._metrics["train"]))
    torch.testing.assert_close(results["ours"][0], results["trl"][0])
    for ours, theirs in zip(results["ours"][1], results["trl"][1], strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
    for key in (
        "self_distillation/distillation_loss",
        "sdft/distillation_loss",
        "self_distillation/server_logprob_abs_diff",
    ):
        assert results["ours"][2][key] == pytest.approx(results["trl"][2][key], rel=1e-4, abs=1e-8), key


def test_the_model_card_names_sdft_and_its_paper(random_tiny_model, tmp_path):
    trainer = trained(SDFTTrainer, SDFTConfig, random_tiny_model, tmp_path, max_steps=1)
    trainer.save_model(str(tmp_path / "saved"))
    card = (tmp_path / "saved" / "README.md").read_text()
    assert "SDFT (trl_ext)" in card and "2601.19897" in card and "Self-Distillation Enables Continual Learning" in card


def test_script_trains_the_toy_demonstrations(toy_cache, tiny_model, tmp_path):
    """The offline default: the toy model, its demonstrations as privileged context, the rollouts' toy reward logged."""
    from trl_ext.scripts.sdft import main

    trainer = main(["--output_dir", str(tmp_path), "--max_steps", "2", "--logging_steps", "1"])
    assert type(trainer) is SDFTTrainer and trainer.model.config._name_or_path == tiny_model
    assert trainer.args.teacher_prompt_template == "{prompt}{privileged_context}" and trainer.state.global_step == 2
    assert len(logged(trainer, "reward")) == 2 and all(0 <= r <= 1 for r in logged(trainer, "reward"))
    assert (tmp_path / "model.safetensors").is_file()


def test_script_learns_the_toy_task(toy_cache, tiny_model, tmp_path):
    """~11 s: the rollouts' toy reward rises from the untrained ~0.1 (measured 0.08 -> 0.53 over 30 steps)."""
    from trl_ext.scripts.sdft import main

    trainer = main(["--output_dir", str(tmp_path), "--max_steps", "30", "--save_strategy", "no"])
    rewards = logged(trainer, "reward")
    assert rewards[0] < 0.25 and max(rewards[-2:]) > rewards[0] + 0.2


def test_script_refuses_rows_without_privileged_context_before_the_model_loads(toy_cache, tmp_path):
    import json

    from trl_ext.scripts._common import UsageError
    from trl_ext.scripts.sdft import main

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps({"prompt": "Repeat the letter a:"}) + "\n" for _ in range(4)))
    (tmp_path / "empty-model").mkdir()  # a model that cannot load: the data's error must come first
    argv = ["--output_dir", str(tmp_path / "out"), "--dataset_name", str(data), "--model_name_or_path"]
    with pytest.raises(UsageError, match=r"the train split has no 'privileged_context' column \(its columns: 'prompt'\)"
                                         r"; SDFT needs 'prompt' and 'privileged_context' columns"):  # fmt: skip
        main([*argv, str(tmp_path / "empty-model")])
