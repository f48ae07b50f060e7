"""SDPO (SDPOTrainer / SDPOConfig): TRL's experimental SDPOTrainer with the ported objective. One optimizer step of
TRL's trainer and of trl_ext's from the same weights and seed (the same rollouts, rewards and reprompts) gives the same
loss, metrics and parameters, for the pure distillation, the blend and the policy loss alone; the served-teacher loss
equals TRL's; the config's checks name the field; the record; the offline script."""

from __future__ import annotations

import pytest
import torch
from trainer_helpers import CPU, length_reward, logged, served_teacher, snapshot
from transformers import AutoModelForCausalLM
from trl.experimental.sdpo import SDPOConfig as TRLSDPOConfig
from trl.experimental.sdpo import SDPOTrainer as TRLSDPOTrainer

import trl_ext
from trl_ext.toy import build_tokenizer, toy_dataset
from trl_ext.trainers.sdpo.config import SDPOConfig
from trl_ext.trainers.sdpo.trainer import SDPOTrainer

# The toy model's reprompt: the prompt followed by the successful sibling's answer (TRL's templates add English
# instructions the tiny model has never read). `length_reward` (completion length mod 5) varies within groups, and a
# reward of 2 counts as success, so most completions get a teacher.
TOY_REPROMPT = {
    "reprompt_template": "{prompt}{solution}{feedback}",
    "solution_template": "{successful_previous_attempt}",
    "success_reward_threshold": 2.0,
}


def settings(out, **overrides) -> dict:
    return {
        **CPU,
        "output_dir": str(out),
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 8,
        "max_steps": 1,
        "optim": "sgd",
        "learning_rate": 1.0,
        "max_grad_norm": 0.0,
        **TOY_REPROMPT,
        **overrides,
    }


def trained(trainer_class, config_class, model: str, out, **overrides):
    trainer = trainer_class(
        model=model,
        reward_funcs=length_reward,
        args=config_class(**settings(out, **overrides)),
        train_dataset=toy_dataset(16),
        processing_class=build_tokenizer(),
    )
    trainer.train()
    return trainer


def test_record_family_and_classes():
    spec = trl_ext.get_algorithm("sdpo")
    assert (spec.trainer, spec.policy_loss_fn, spec.advantage_fn, spec.schema) == ("sdpo", None, None, "experience")
    assert spec.loss_name == "trl_ext.losses.self_distillation.SDPOLoss"
    assert spec.paper.arxiv == "2601.20802" and spec.family.script == "sdpo" and spec.family.components == ()
    assert (
        (spec.config_class, spec.trainer_class)
        == (SDPOConfig, SDPOTrainer)
        == (trl_ext.SDPOConfig, trl_ext.SDPOTrainer)
    )
    assert issubclass(SDPOTrainer, TRLSDPOTrainer) and issubclass(SDPOConfig, TRLSDPOConfig)


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # TRL's defaults: pure distillation, sampled-token reverse KL, EMA teacher
        {"distillation_weight": 0.5, "loss_type": "grpo", "teacher_model_kind": "base"},
        {"distillation_weight": 0.0, "loss_type": "dr_grpo", "importance_sampling_level": "sequence",
         "steps_per_generation": 2, "max_steps": 2, "epsilon_high": 0.28},
        {"distillation_mode": "topk_logits", "distillation_alpha": 0.5, "distillation_topk": 5,
         "distillation_add_tail": True, "distillation_weight": 0.3, "steps_per_generation": 2, "max_steps": 2},
    ],
    ids=["distill-ema", "blend-grpo-base", "policy-dr_grpo-sequence-reused", "topk-tail-blend-reused"],
)  # fmt: skip
def test_optimizer_steps_equal_trls(random_tiny_model, tmp_path, overrides):
    """The same seed draws the same rollouts, rewards and teacher prompts in both trainers; SGD with lr 1 makes the
    update the gradient. The reused cases train two steps on one generation batch (the rollout log-probs in the
    policy ratio and the distillation's importance weight)."""
    theirs = trained(TRLSDPOTrainer, TRLSDPOConfig, random_tiny_model, tmp_path / "trl", **overrides)
    before = snapshot(AutoModelForCausalLM.from_pretrained(random_tiny_model))
    ours = trained(SDPOTrainer, SDPOConfig, random_tiny_model, tmp_path / "ours", **overrides)
    assert logged(ours, "self_distillation/reprompt_sample_fraction") == logged(
        theirs, "self_distillation/reprompt_sample_fraction"
    )
    assert max(logged(ours, "self_distillation/reprompt_sample_fraction")) > 0  # teachers were built
    assert logged(ours, "loss") == pytest.approx(logged(theirs, "loss"), rel=1e-4, abs=1e-7)
    names = ["self_distillation/reward_mean"]
    weight = overrides.get("distillation_weight", 1.0)
    names += ["self_distillation/policy_loss"] if weight < 1 else []
    names += ["self_distillation/distillation_loss", "sdpo/distillation_loss"] if weight > 0 else []
    for name in names:
        assert logged(ours, name) == pytest.approx(logged(theirs, name), rel=1e-4, abs=1e-7), name
    assert logged(ours, "reward") == logged(ours, "self_distillation/reward_mean") and not logged(theirs, "reward")
    moved = False
    for (name, a), b in zip(theirs.model.named_parameters(), ours.model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
        moved |= not torch.equal(b, before[name])
    assert moved


def test_trls_config_is_converted(random_tiny_model, tmp_path):
    trainer = SDPOTrainer(
        model=random_tiny_model,
        reward_funcs=length_reward,
        args=TRLSDPOConfig(**settings(tmp_path, distillation_weight=0.25, loss_type="bnpo")),
        train_dataset=toy_dataset(8),
        processing_class=build_tokenizer(),
    )
    assert isinstance(trainer.args, SDPOConfig)
    assert (trainer.objective.distillation_weight, trainer.objective.policy.loss_type) == (0.25, "bnpo")


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("distillation_weight", 1.5, r"distillation_weight=1.5 is not valid; must be in \[0, 1\]"),
        ("distillation_mode", "full", r"distillation_mode='full' is not valid; must be one of"),
        ("distillation_alpha", 0.5, r"distillation_alpha=0.5 is not valid with distillation_mode='sampled_token'"),
        ("loss_type", "cispo", r"loss_type='cispo' is not valid; must be one of 'grpo', 'bnpo', 'dr_grpo', 'dapo'"),
        ("importance_sampling_level", "seq", r"importance_sampling_level='seq' is not valid; must be one of 'token'"),
        ("epsilon", -0.1, r"epsilon=-0.1 is not valid; must be >= 0"),
        ("scale_rewards", "std", r"scale_rewards='std' is not valid; must be one of 'group', 'batch', 'none'"),
        ("teacher_model_kind", "frozen", r"teacher_model_kind='frozen' is not valid"),
        ("max_reprompt_len", 0, r"max_reprompt_len=0 is not valid; must be an integer >= 1"),
        ("reprompt_template", "{prompt}{answer}",
         r"reprompt_template='\{prompt\}\{answer\}' is not valid; must be a format string whose only placeholders are "
         r"\{prompt\}, \{solution\}"),
    ],
)  # fmt: skip
def test_bad_settings_are_refused_when_the_config_is_built(tmp_path, field, value, match):
    with pytest.raises(ValueError, match=rf"^SDPOConfig: {match}"):
        SDPOConfig(**settings(tmp_path, **{field: value}))
    if field in ("importance_sampling_level", "scale_rewards", "reprompt_template", "loss_type"):
        TRLSDPOConfig(**settings(tmp_path, **{field: value}))  # the deliberate difference: TRL lets them through


def test_the_served_teacher_loss_equals_trls(random_tiny_model, tmp_path):
    """Pure distillation with the teacher's log-probs served (`use_teacher_server` needs a vLLM server: both trainers'
    served-teacher method on one batch, the server's answer computed from the teacher), over the completions that have
    a teacher context only."""
    common = settings(tmp_path, teacher_model_kind="live", distillation_mode="topk_logits", distillation_alpha=0.5,
                      distillation_topk=4)  # fmt: skip
    trainers = {
        "trl": TRLSDPOTrainer(random_tiny_model, length_reward, TRLSDPOConfig(**common), toy_dataset(8),
                              processing_class=build_tokenizer()),
        "ours": SDPOTrainer(random_tiny_model, length_reward, SDPOConfig(**common), toy_dataset(8),
                            processing_class=build_tokenizer()),
    }  # fmt: skip
    for trainer in trainers.values():
        trainer.model.train()
    torch.manual_seed(0)
    inputs = trainers["trl"]._prepare_inputs(list(toy_dataset(8)))
    assert 0 < inputs["self_distillation_mask"].sum() < 8  # some completions have a teacher, some do not
    served = served_teacher(trainers["trl"], inputs, 4)
    results = {}
    for name, trainer in trainers.items():
        trainer._get_teacher_token_logprobs_from_server = lambda batch, width: served
        trainer.model.zero_grad()
        loss = trainer._compute_server_distillation_loss(trainer.model, inputs)
        loss.backward()
        results[name] = (loss.detach(), [p.grad.clone() for p in trainer.model.parameters()])
    torch.testing.assert_close(results["ours"][0], results["trl"][0])
    for ours, theirs in zip(results["ours"][1], results["trl"][1], strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)


def test_script_trains_the_toy_task(toy_cache, tiny_model, tmp_path):
    """The offline default: the toy model and task, the toy reward's verdict picking the teachers' solutions."""
    from trl_ext.scripts.sdpo import main

    trainer = main(["--output_dir", str(tmp_path), "--max_steps", "2", "--logging_steps", "1"])
    assert type(trainer) is SDPOTrainer and trainer.model.config._name_or_path == tiny_model
    assert trainer.reward_func_names == ["repeat_letter_reward"] and trainer.state.global_step == 2
    assert logged(trainer, "reward") == logged(trainer, "self_distillation/reward_mean")
    assert (tmp_path / "model.safetensors").is_file()


@pytest.mark.slow
def test_script_learns_the_toy_task(toy_cache, tiny_model, tmp_path):
    """~20 s (the toy run, 60 steps): the rollouts' toy reward rises from the untrained 0.12 (measured: to 0.48)."""
    from trl_ext.scripts.sdpo import main

    trainer = main(["--output_dir", str(tmp_path), "--save_strategy", "no"])
    rewards = logged(trainer, "reward")
    assert rewards[0] < 0.25 and max(rewards[-3:]) > rewards[0] + 0.2


def test_script_needs_a_reward_for_a_user_dataset(toy_cache, tmp_path):
    import json

    from trl_ext.scripts._common import UsageError
    from trl_ext.scripts.sdpo import main

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps({"prompt": "Repeat the letter a:"}) + "\n" for _ in range(8)))
    with pytest.raises(UsageError, match=r"^--reward_funcs is required: SDPO scores its rollouts"):
        main(["--output_dir", str(tmp_path / "out"), "--dataset_name", str(data)])
    assert not (tmp_path / "out").exists()
