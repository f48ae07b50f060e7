"""Dense on-policy distillation (`teacher_top_k` ≠ 0): the trainer's loss against TRL's, composition, bad input."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from trainer_helpers import CPU, changed, cpu_config, length_reward, logged, snapshot
from transformers import AutoModelForCausalLM
from trl.trainer.distillation_trainer import _chunked_divergence_loss

from trl_ext import OnPolicyDistillConfig, OnPolicyDistillTrainer
from trl_ext.advantages import get_advantage_fn
from trl_ext.toy import FAST_TRAINING, build_tokenizer, toy_dataset, toy_reward


def _trainer(student, teacher, tmp_path, reward=None, trainer_kwargs=None, **overrides):
    """The trainer on the toy prompts; `overrides` go to the config, `trainer_kwargs` to the trainer."""
    return OnPolicyDistillTrainer(
        model=student,
        teacher_model=teacher,
        reward_funcs=reward,
        args=cpu_config(OnPolicyDistillConfig, str(tmp_path), **overrides),
        train_dataset=toy_dataset(32),
        processing_class=build_tokenizer(),
        **(trainer_kwargs or {}),
    )


def _batch(trainer, seed: int = 0):
    """One generation batch (2 prompts × 4 completions), sampled with a fixed seed."""
    trainer.model.train()
    rows = [trainer.train_dataset[i] for i in range(2) for _ in range(trainer.num_generations)]
    torch.manual_seed(seed)
    return trainer._generate_and_score_completions(rows)


def _loss_and_head_grad(trainer, batch):
    """The micro-batch loss of `batch` alone (evaluation counts: its own tokens) and the gradient it gives the
    student's output layer."""
    trainer.model.eval()
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, batch)
    loss.backward()
    return loss.detach(), trainer.model.get_output_embeddings().weight.grad.clone()


def _hidden(path_or_model, batch) -> torch.Tensor:
    """Plain HF forward: the last hidden states that predict the completion tokens."""
    model = AutoModelForCausalLM.from_pretrained(path_or_model) if isinstance(path_or_model, str) else path_or_model
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    width = batch["completion_ids"].size(1)
    hidden = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1]
    return hidden[:, -width - 1 : -1], model


# ---- the config ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"teacher_top_k": -2}, r"teacher_top_k=-2 is not valid; must be an integer >= -1"),
        ({"teacher_top_k": 2.5}, r"teacher_top_k=2.5 is not valid; must be an integer"),
        ({"teacher_top_k": 4, "jsd_beta": 1.5}, r"jsd_beta=1.5 is not valid; must be in \[0, 1\]"),
        ({"teacher_top_k": 4, "jsd_beta": -0.1}, r"jsd_beta=-0.1 is not valid"),
        ({"jsd_beta": 0.5}, r"jsd_beta=0.5 sets the dense divergence, but teacher_top_k=0"),
        ({"teacher_top_k": 4, "distill_baseline": "group"}, r"distill_baseline='group' configures the sampled-token"),
    ],
)
def test_bad_config(overrides, message):
    with pytest.raises(ValueError, match=message):
        OnPolicyDistillConfig(output_dir="unused", **CPU, **overrides)


def test_parts_say_what_trains():
    dense = OnPolicyDistillConfig(output_dir="unused", teacher_top_k=32, **CPU).composition()
    assert dense["distillation"] == "dense, jsd_beta 1 over the teacher's top-32, kl_coef 1"
    assert dense["advantage"] == "- (the dense divergence replaces on_policy_distill)"
    both = OnPolicyDistillConfig(output_dir="unused", teacher_top_k=-1, jsd_beta=0.5, advantage_fn="jsd", **CPU)
    assert both.composition()["distillation"] == "dense, jsd_beta 0.5 over the whole vocabulary, kl_coef 1"
    assert both.composition()["advantage"].endswith("added to the dense divergence") and both.sampled_token_advantage
    assert OnPolicyDistillConfig(output_dir="unused", **CPU).composition()["distillation"].startswith("sampled-token")


# ---- the loss --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("beta", [1.0, 0.5, 0.0])
def test_whole_vocabulary_equals_trls_loss(tiny_model, tiny_teacher, tmp_path, beta):
    """teacher_top_k=-1: the loss of a batch (no task reward: the policy term is 0) and its gradient are TRL's
    `_chunked_divergence_loss` on the same completions, from plain forwards of the two models."""
    trainer = _trainer(tiny_model, tiny_teacher, tmp_path, teacher_top_k=-1, jsd_beta=beta)
    batch = _batch(trainer)
    assert "teacher_hidden_states" in batch and "teacher_top_k_ids" not in batch
    loss, grad = _loss_and_head_grad(trainer, batch)

    student = AutoModelForCausalLM.from_pretrained(tiny_model)
    student.load_state_dict(trainer.model.state_dict())
    student_hidden, _ = _hidden(student, batch)
    with torch.no_grad():
        teacher_hidden, teacher = _hidden(tiny_teacher, batch)
    expected, _, tokens = _chunked_divergence_loss(
        student_hidden,
        teacher_hidden,
        student.get_output_embeddings().weight,
        teacher.get_output_embeddings().weight,
        batch["completion_mask"],
        beta,
    )
    expected.backward()
    assert tokens == batch["completion_mask"].sum() and loss > 0.01
    torch.testing.assert_close(loss, expected.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad, student.get_output_embeddings().weight.grad, rtol=1e-4, atol=1e-7)


def test_top_k_of_the_whole_vocabulary_equals_full_and_smaller_k_is_below(tiny_model, tiny_teacher, tmp_path):
    vocab = AutoModelForCausalLM.from_pretrained(tiny_teacher).get_output_embeddings().weight.shape[0]
    results = {}
    for k in (-1, vocab, 4):
        trainer = _trainer(tiny_model, tiny_teacher, tmp_path / str(k), teacher_top_k=k, jsd_beta=0.5)
        results[k] = _loss_and_head_grad(trainer, _batch(trainer, seed=3))
    torch.testing.assert_close(results[vocab][0], results[-1][0], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(results[vocab][1], results[-1][1], rtol=1e-4, atol=1e-7)
    assert 0 < results[4][0] < results[-1][0]  # coarse-grained onto 4 + 1 categories: data processing


def test_the_teacher_top_k_is_the_teachers_at_the_sampling_temperature(tiny_model, tiny_teacher, tmp_path):
    trainer = _trainer(tiny_model, tiny_teacher, tmp_path, teacher_top_k=3, temperature=0.7)
    batch = _batch(trainer)
    with torch.no_grad():
        hidden, teacher = _hidden(tiny_teacher, batch)
        logps = torch.log_softmax(teacher.lm_head(hidden).double() / 0.7, -1)
    mask = batch["completion_mask"].bool()
    values, ids = logps.topk(3, dim=-1)
    assert torch.equal(batch["teacher_top_k_ids"][mask], ids[mask])
    torch.testing.assert_close(batch["teacher_top_k_logprobs"][mask].double(), values[mask], atol=1e-5, rtol=0)
    tail = torch.log1p(-values.exp().sum(-1))
    torch.testing.assert_close(batch["teacher_tail_logprob"][mask].double(), tail[mask], atol=1e-4, rtol=1e-4)
    assert batch["advantages"].dim() == 1 and not batch["advantages"].any()  # no task reward, no sampled term


def test_window_normalization_does_not_depend_on_the_split(tiny_model, tiny_teacher, tmp_path):
    """One optimizer step on 16 completions: one micro-batch of 16 or two of 8 give the same update."""
    common = dict(teacher_top_k=4, max_steps=1, optim="sgd", learning_rate=0.5, num_generations=8)
    results = []
    for batch_size, accumulation in ((16, 1), (8, 2)):
        trainer = _trainer(
            tiny_model, tiny_teacher, tmp_path / str(batch_size), per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=accumulation, **common,
        )  # fmt: skip
        trainer.train()
        results.append((trainer.model, logged(trainer, "distill/divergence")))
    (one, divergence_one), (two, divergence_two) = results
    assert divergence_one == pytest.approx(divergence_two, rel=1e-5)
    for (name, a), b in zip(one.named_parameters(), two.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)


# ---- composition -----------------------------------------------------------------------------------------------------


def test_jsd_advantage_and_task_reward_add_to_the_dense_term(tiny_model, tiny_teacher, tmp_path):
    """advantage_fn='jsd' composes: its sampled-token advantage (from the teacher's log-prob of each sampled token,
    read off the same teacher pass) plus reward_weight·Â trains next to the dense top-k term."""
    trainer = _trainer(
        tiny_model, tiny_teacher, tmp_path, reward=length_reward, teacher_top_k=4, advantage_fn="jsd",
        reward_weight=0.5,
    )  # fmt: skip
    batch = _batch(trainer)
    mask = batch["completion_mask"].bool()
    with torch.no_grad():
        student_hidden, student = _hidden(tiny_model, batch)
        teacher_hidden, teacher = _hidden(tiny_teacher, batch)
        labels = batch["completion_ids"].unsqueeze(-1)
        s = torch.log_softmax(student.lm_head(student_hidden).double(), -1).gather(-1, labels).squeeze(-1)
        t = torch.log_softmax(teacher.lm_head(teacher_hidden).double(), -1).gather(-1, labels).squeeze(-1)
    jsd = get_advantage_fn("jsd").compute(teacher_logprob=t, old_logprob=s, response_mask=mask).advantages
    rewards = torch.tensor(list(trainer._logs["rewards"][length_reward.__name__]))  # what the trainer scored
    assert rewards.numel() == 8 and rewards.std() > 0
    grpo = get_advantage_fn("grpo").compute(rewards, torch.arange(8) // 4).advantages
    expected = (jsd + 0.5 * grpo.unsqueeze(1).double()) * mask
    torch.testing.assert_close(batch["advantages"].double(), expected, atol=1e-4, rtol=1e-4)
    trainer.model.eval()
    loss = trainer._compute_loss(trainer.model, batch)
    assert torch.isfinite(loss) and "teacher_top_k_ids" in batch


def test_dense_distillation_learns_the_teachers_skill(tiny_model, tiny_teacher, tmp_path):
    """Pure distillation with the teacher's top-8: the divergence falls and the (logged only) reward rises."""
    args = OnPolicyDistillConfig(
        output_dir=str(tmp_path), teacher_top_k=8, **{**CPU, **FAST_TRAINING, "num_generations": 8, "logging_steps": 5}
    )
    trainer = OnPolicyDistillTrainer(
        model=tiny_model, teacher_model=tiny_teacher, reward_funcs=toy_reward, args=args, train_dataset=toy_dataset()
    )
    trainer.train()
    divergence, reward = logged(trainer, "distill/divergence"), logged(trainer, "reward")
    print(f"divergence {divergence[:2]} -> {divergence[-2:]}; reward {reward}")
    assert np.mean(divergence[-4:]) < 0.2 * np.mean(divergence[:2])
    assert np.mean(reward[:2]) < 0.2 and np.mean(reward[-4:]) > 0.8


def test_lora_student_and_a_bf16_teacher(tiny_model, tiny_teacher, tmp_path):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = _trainer(
        tiny_model, tiny_teacher, tmp_path, trainer_kwargs={"peft_config": lora}, teacher_top_k=-1,
        learning_rate=1e-2, teacher_model_init_kwargs={"dtype": "bfloat16"}, teacher_device="cpu",
    )  # fmt: skip
    student_before, teacher_before = snapshot(trainer.model), snapshot(trainer.teacher_model)
    trainer.train()
    moved = changed(student_before, trainer.model)
    assert moved and all("lora_" in name for name in moved)
    assert not changed(teacher_before, trainer.teacher_model)
    assert all(np.isfinite(logged(trainer, "distill/divergence"))) and logged(trainer, "distill/divergence")[0] > 0


# ---- bad input at construction ---------------------------------------------------------------------------------------


def test_bad_teachers_for_the_dense_modes(tiny_model, tiny_teacher, tmp_path):
    vocab = AutoModelForCausalLM.from_pretrained(tiny_teacher).get_output_embeddings().weight.shape[0]
    with pytest.raises(ValueError, match=rf"teacher_top_k={vocab + 1} is larger than the teacher's vocabulary"):
        _trainer(tiny_model, tiny_teacher, tmp_path, teacher_top_k=vocab + 1)

    student = AutoModelForCausalLM.from_pretrained(tiny_model)
    student.resize_token_embeddings(vocab + 16)
    with pytest.raises(ValueError, match=r"teacher_top_k=-1 compares the whole vocabularies, but the student's"):
        _trainer(student, tiny_teacher, tmp_path, teacher_top_k=-1)
    trainer = _trainer(student, tiny_teacher, tmp_path, teacher_top_k=4)  # top-k: the extra rows fall in the tail
    loss, grad = _loss_and_head_grad(trainer, _batch(trainer))
    assert torch.isfinite(loss) and loss > 0 and torch.isfinite(grad).all()

    no_backbone = AutoModelForCausalLM.from_pretrained(tiny_teacher)
    no_backbone.base_model_prefix = "absent"  # `base_model` is then the model itself: only log-probs come out
    with pytest.raises(ValueError, match=r"teacher_top_k=4 needs the teacher's hidden states .* set teacher_top_k=0"):
        _trainer(tiny_model, no_backbone, tmp_path, teacher_top_k=4)


# ---- bf16 and evaluation ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16-weights", "fp32-weights-autocast"])
@pytest.mark.parametrize("top_k", [8, -1])
def test_trains_in_bf16(random_tiny_model, random_teacher, tmp_path, dtype, top_k):
    """bf16=True with the model in bf16 or in fp32 under autocast: the dense term is finite and every parameter
    moves."""
    trainer = _trainer(
        random_tiny_model, random_teacher, tmp_path, teacher_top_k=top_k, bf16=True, max_steps=2,
        learning_rate=1e-2, model_init_kwargs={"dtype": dtype},
    )  # fmt: skip
    assert trainer.model.dtype == dtype
    before = snapshot(trainer.model)
    trainer.train()
    divergence = logged(trainer, "distill/divergence")
    assert len(divergence) == 2 and all(np.isfinite(divergence)) and divergence[0] > 0
    assert changed(before, trainer.model) == set(before)


def test_evaluation_logs_the_divergence(tiny_model, tiny_teacher, tmp_path):
    trainer = _trainer(
        tiny_model, tiny_teacher, tmp_path, trainer_kwargs={"eval_dataset": toy_dataset(8, seed=3)}, teacher_top_k=4,
        eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=8,
    )  # fmt: skip
    trainer.train()
    evaluated = logged(trainer, "eval_distill/divergence")
    assert len(evaluated) == 1 and 0 < evaluated[0] < 10 and logged(trainer, "eval_loss")[0] > 0


@pytest.mark.parametrize("top_k", [8, -1])
def test_a_teacher_with_another_tokenizer_is_refused_in_every_mode(tiny_model, tiny_teacher, tmp_path, top_k):
    other = str(tmp_path / "other_teacher")
    shutil.copytree(tiny_teacher, other)
    tokenizer = build_tokenizer()
    tokenizer.add_tokens(["<|tool|>"])
    tokenizer.save_pretrained(other)
    with pytest.raises(ValueError, match=r"the teacher's tokenizer .* differs from the student's"):
        _trainer(tiny_model, other, tmp_path, teacher_top_k=top_k)


def test_a_moe_students_router_loss_is_refused(tiny_moe, tmp_path):
    """A MoE student with output_router_logits: the dense pass does not compute the router's load-balancing loss."""
    teacher = AutoModelForCausalLM.from_pretrained(tiny_moe)
    with pytest.raises(ValueError, match=r"teacher_top_k=4 .* without the MoE router's load-balancing loss"):
        _trainer(tiny_moe, teacher, tmp_path, teacher_top_k=4)
    assert _trainer(tiny_moe, teacher, tmp_path).aux_loss_enabled  # the sampled-token mode keeps it


def test_a_teacher_head_elsewhere_is_copied_once_to_the_students_device(tiny_model, tiny_teacher, tmp_path):
    """teacher_top_k=-1 with the teacher on another device: its output layer comes to the student's device once."""
    trainer = _trainer(tiny_model, tiny_teacher, tmp_path, teacher_top_k=-1)
    elsewhere = torch.device("meta")  # any device the teacher is not on
    layer = trainer._teacher_layer(elsewhere)
    assert layer.weight.device == elsewhere and layer.weight.shape == trainer.teacher_model.lm_head.weight.shape
    assert trainer._teacher_layer(elsewhere).weight is layer.weight  # cached, not copied again
    assert trainer._teacher_layer(torch.device("cpu")).weight is trainer.teacher_model.lm_head.weight  # no copy
