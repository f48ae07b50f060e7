"""On-policy distillation trainer: teacher log-probs as per-token advantages (tiny student and teacher, CPU)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch
from trainer_helpers import CPU, changed, cpu_config, length_reward, logged, snapshot
from transformers import AutoModelForCausalLM

import trl_ext
from trl_ext import GRPOConfig, GRPOTrainer, OnPolicyDistillConfig, OnPolicyDistillTrainer
from trl_ext.toy import FAST_TRAINING, build_tokenizer, toy_dataset, toy_reward
from trl_ext.trainers.distill.teachers import TeacherBatch


def _trainer(student, teacher, tmp_path, reward=None, dataset=None, **overrides):
    return OnPolicyDistillTrainer(
        model=student,
        teacher_model=teacher,
        reward_funcs=reward,
        args=cpu_config(OnPolicyDistillConfig, str(tmp_path), **overrides),
        train_dataset=dataset if dataset is not None else toy_dataset(32),
        processing_class=build_tokenizer(),
    )


def _one_generation_batch(trainer, prompts: int = 2):
    """Score one generation batch (`prompts` prompts × num_generations) as training would."""
    trainer.model.train()
    rows = [trainer.train_dataset[i] for i in range(prompts) for _ in range(trainer.num_generations)]
    return trainer._generate_and_score_completions(rows)


def _plain_logps(model_path: str, output: dict) -> torch.Tensor:
    """Log-probs of the sampled completion tokens under the model at `model_path`: one plain forward, full
    log-softmax (independent of TRL's fused path)."""
    model = AutoModelForCausalLM.from_pretrained(model_path).eval()
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    width = output["completion_ids"].size(1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, -width - 1 : -1].double()
    return torch.log_softmax(logits, -1).gather(-1, output["completion_ids"].unsqueeze(-1)).squeeze(-1)


class RecordingReward:
    """A reward function that remembers what it returned (length_reward: varies within almost every group)."""

    __name__ = "recorded_length_reward"

    def __init__(self):
        self.calls: list[list[float]] = []

    def __call__(self, completions, **kwargs):
        rewards = length_reward(completions)
        self.calls.append(rewards)
        return rewards


# ---- the algorithm and its config --------------------------------------------------------------------------------


def test_attached_to_the_algorithm_table():
    spec = trl_ext.get_algorithm("on_policy_distill")
    assert spec.trainer_class is OnPolicyDistillTrainer and spec.config_class is OnPolicyDistillConfig
    args = OnPolicyDistillConfig(output_dir="unused", **CPU)
    assert (args.kl_coef, args.distill_baseline, args.reward_weight, args.policy_loss_fn) == (1.0, "none", 0.0, "ppo")
    assert args.components.policy_loss.name == "ppo" and args.components.advantage_fn.name == "on_policy_distill"
    unclipped = OnPolicyDistillConfig(output_dir="unused", policy_loss_fn="importance_sampling", **CPU)
    assert unclipped.components.policy_loss.name == "importance_sampling"
    assert (
        "teacher_model_name_or_path" in OnPolicyDistillConfig.__doc__
        and "reward_weight" in OnPolicyDistillConfig.__doc__
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"policy_loss_fn": "nope"}, r"policy_loss_fn='nope' is not valid; must be one of .*'cispo', "),
        (
            {"policy_loss_fn": "mix"},
            r"policy_loss_fn='mix' cannot train in the distill family's trainer: it needs `expert_mask`",
        ),
        (
            {"distill_baseline": "mean"},
            r"distill_baseline='mean' is not valid; must be one of 'none', 'batch', 'group'",
        ),
        ({"reward_weight": -0.5}, r"reward_weight=-0.5 is not valid; must be >= 0"),
        ({"reward_advantage_fn": "opmd"}, r"reward_advantage_fn='opmd' is not valid; must be one of 'grpo', 'rloo'"),
        ({"kl_coef": -1.0}, r"kl_coef=-1.0 is not valid; must be >= 0"),
        ({"teacher_device": "gpu7"}, r"teacher_device='gpu7' is not a device"),
        (
            {"policy_loss_fn": "importance_sampling", "clip_range": 0.3},
            r"clip_range=0.3 is an argument of the on_policy_distill algorithm's 'ppo', but "
            r"policy_loss_fn='importance_sampling' replaces it and does not take it",
        ),
        ({"teacher_model_init_kwargs": "dtype=bfloat16"}, r"teacher_model_init_kwargs='dtype=bfloat16' must be a dict"),
        ({"loss_type": "bnpo"}, r"loss_type='bnpo' is a trl.GRPOConfig field"),
    ],
)
def test_bad_config(overrides, message):
    with pytest.raises(ValueError, match=message):
        OnPolicyDistillConfig(output_dir="unused", **{**CPU, **overrides})


def test_teacher_init_kwargs_from_the_command_line():
    args = OnPolicyDistillConfig(output_dir="unused", teacher_model_init_kwargs='{"dtype": "bfloat16"}', **CPU)
    assert args.teacher_model_init_kwargs == {"dtype": "bfloat16"}


# ---- the advantage -------------------------------------------------------------------------------------------------


def test_advantage_is_the_formula_on_known_logprobs(tiny_model, tiny_teacher, tmp_path):
    reward = RecordingReward()
    trainer = _trainer(tiny_model, tiny_teacher, tmp_path, reward=reward, kl_coef=0.5, reward_weight=0.3)
    output = _one_generation_batch(trainer)
    mask = output["completion_mask"].double()
    teacher, student = _plain_logps(tiny_teacher, output), _plain_logps(tiny_model, output)
    # The task term: reward_weight × GRPO advantage of the recorded rewards, (R − group mean)/(group std + 1e-6).
    rewards = torch.tensor(reward.calls[-1], dtype=torch.float64).view(-1, 4)
    grpo = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)).view(-1, 1)
    expected = (0.5 * (teacher - student) + 0.3 * grpo) * mask
    assert output["advantages"].shape == mask.shape
    torch.testing.assert_close(output["advantages"].double(), expected, atol=2e-5, rtol=1e-5)
    assert rewards.std(1).min() > 0  # the reward term is not trivially zero

    metrics = trainer._metrics["train"]
    tokens = mask.sum()
    kl = ((student - teacher) * mask).sum() / tokens
    kl_std = (((student - teacher - kl) * mask) ** 2).sum().div(tokens - 1).sqrt()
    assert metrics["kl/mean"][-1] == pytest.approx(kl.item(), abs=1e-5)
    assert metrics["kl/std"][-1] == pytest.approx(kl_std.item(), abs=1e-5)
    assert metrics["advantages/mean"][-1] == pytest.approx((expected.sum() / tokens).item(), abs=1e-5)
    # The completions table shows our per-sample advantages (token means), not TRL's.
    per_sample = (expected.sum(1) / mask.sum(1)).tolist()
    assert list(trainer._logs["advantages"])[-8:] == pytest.approx(per_sample, abs=1e-5)


def test_pure_distillation_needs_no_reward_function(tiny_model, tiny_teacher, tmp_path):
    trainer = _trainer(tiny_model, tiny_teacher, tmp_path, distill_baseline="group")
    output = _one_generation_batch(trainer)
    mask = output["completion_mask"].double()
    raw = (_plain_logps(tiny_teacher, output) - _plain_logps(tiny_model, output)) * mask
    # The group baseline: each position minus the mean over the group's valid tokens at that position.
    groups, group_mask = raw.view(2, 4, -1), mask.view(2, 4, -1)
    baseline = groups.sum(1, keepdim=True) / group_mask.sum(1, keepdim=True).clamp(min=1)
    expected = ((groups - baseline) * group_mask).view_as(raw)
    torch.testing.assert_close(output["advantages"].double(), expected, atol=2e-5, rtol=1e-5)
    trainer.train()
    assert logged(trainer, "rewards/no_task_reward/mean") == [0.0, 0.0]
    assert all(np.isfinite(logged(trainer, "kl/mean")))


def test_off_policy_batches_use_the_sampling_logprobs(tiny_model, tiny_teacher, tmp_path):
    # steps_per_generation > gradient_accumulation_steps: TRL computes old_per_token_logps, the advantage uses them.
    trainer = _trainer(tiny_model, tiny_teacher, tmp_path, steps_per_generation=2, per_device_train_batch_size=4)
    output = _one_generation_batch(trainer)
    assert "old_per_token_logps" in output
    old, mask = output["old_per_token_logps"].double(), output["completion_mask"]
    torch.testing.assert_close(old * mask, _plain_logps(tiny_model, output) * mask, atol=2e-5, rtol=1e-5)
    expected = (_plain_logps(tiny_teacher, output) - old) * mask
    torch.testing.assert_close(output["advantages"].double(), expected, atol=2e-5, rtol=1e-5)


# ---- training --------------------------------------------------------------------------------------------------------


def _reverse_kl(student_path_or_model, teacher_path: str, prompts: int = 32, samples: int = 4) -> float:
    """Exact per-token reverse KL, sum_v s(v) (log s(v) − log t(v)), averaged over the completion tokens of the
    student's own samples (plain HF generate and forward passes, independent of the trainer)."""
    tokenizer = build_tokenizer()
    student = (
        AutoModelForCausalLM.from_pretrained(student_path_or_model)
        if isinstance(student_path_or_model, str)
        else student_path_or_model
    ).eval()
    teacher = AutoModelForCausalLM.from_pretrained(teacher_path).eval()
    dataset = toy_dataset(prompts, seed=7)
    enc = tokenizer([p for p in dataset["prompt"] for _ in range(samples)], return_tensors="pt", padding=True)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        out = student.generate(**enc, do_sample=True, max_new_tokens=8, pad_token_id=tokenizer.pad_token_id)
        width = out.size(1) - enc["input_ids"].size(1)
        completion = out[:, -width:]
        is_eos = completion == tokenizer.eos_token_id
        ends = torch.where(is_eos.any(1), is_eos.float().argmax(1), torch.full((len(out),), width))
        mask = (torch.arange(width)[None] <= ends[:, None]).double()
        attention = torch.cat([enc["attention_mask"], mask.long()], dim=1)
        s = torch.log_softmax(student(input_ids=out, attention_mask=attention).logits[:, -width - 1 : -1].double(), -1)
        t = torch.log_softmax(teacher(input_ids=out, attention_mask=attention).logits[:, -width - 1 : -1].double(), -1)
    kl = (s.exp() * (s - t)).sum(-1)
    return ((kl * mask).sum() / mask.sum()).item()


def test_reverse_kl_to_the_teacher_falls(tiny_model, tiny_teacher, tmp_path):
    """Pure distillation (no reward in the advantages) of the toy student, which repeats a random letter, towards
    the toy teacher, which repeats the prompt's: the reverse KL falls and the task reward rises with it."""
    args = OnPolicyDistillConfig(
        output_dir=str(tmp_path), distill_baseline="group", **{**CPU, **FAST_TRAINING, "logging_steps": 5}
    )
    trainer = OnPolicyDistillTrainer(
        model=tiny_model, teacher_model=tiny_teacher, reward_funcs=toy_reward, args=args, train_dataset=toy_dataset()
    )
    before = _reverse_kl(tiny_model, tiny_teacher)
    trainer.train()
    after = _reverse_kl(trainer.model, tiny_teacher)
    kl, reward = logged(trainer, "kl/mean"), logged(trainer, "reward")
    print(f"exact reverse KL {before:.3f} -> {after:.3f}; logged kl/mean {kl[:3]} -> {kl[-3:]}; reward {reward}")
    assert after < 0.25 * before
    assert np.mean(kl[-4:]) < 0.25 * np.mean(kl[:2])
    assert np.mean(reward[:2]) < 0.2 and np.mean(reward[-4:]) > 0.7  # the teacher's skill, learned without rewards


def test_with_reward_weight_and_no_kl_it_is_grpo(random_tiny_model, tiny_teacher, tmp_path):
    """kl_coef=0, reward_weight=1: the advantage is exactly GRPO's (on every token), so the first update equals
    trl_ext.GRPOTrainer's with the same PPO loss and seed."""
    common = dict(max_steps=1, optim="sgd", learning_rate=0.5)
    grpo = GRPOTrainer(
        model=random_tiny_model,
        reward_funcs=length_reward,
        args=cpu_config(GRPOConfig, str(tmp_path / "grpo"), **common),
        train_dataset=toy_dataset(32),
        processing_class=build_tokenizer(),
    )
    before = snapshot(grpo.model)
    grpo.train()
    distill = _trainer(
        random_tiny_model,
        tiny_teacher,
        tmp_path / "distill",
        reward=length_reward,
        kl_coef=0.0,
        reward_weight=1.0,
        **common,
    )
    distill.train()
    assert changed(before, grpo.model)
    for (name, a), b in zip(grpo.model.named_parameters(), distill.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)


def test_importance_sampling_loss_and_evaluation(tiny_model, tiny_teacher, tmp_path):
    trainer = OnPolicyDistillTrainer(
        model=tiny_model,
        teacher_model=tiny_teacher,
        args=cpu_config(
            OnPolicyDistillConfig,
            str(tmp_path),
            policy_loss_fn="importance_sampling",
            eval_strategy="steps",
            eval_steps=2,
            per_device_eval_batch_size=8,
        ),
        train_dataset=toy_dataset(32),
        eval_dataset=toy_dataset(8, seed=3),
        processing_class=build_tokenizer(),
    )
    trainer.train()
    assert trainer.policy_loss_fn.name == "importance_sampling"
    assert logged(trainer, "ratio/mean") == pytest.approx([1.0, 1.0])  # on-policy: every ratio is 1
    assert all(v > 0 for v in logged(trainer, "kl/mean"))
    assert logged(trainer, "pg_loss") == pytest.approx(
        [-a for a in logged(trainer, "advantages/mean")], abs=1e-5
    )  # −A·1, token mean
    assert len(logged(trainer, "eval_kl/mean")) == 1 and logged(trainer, "eval_kl/mean")[0] > 0


def test_lora_student(tiny_model, tiny_teacher, tmp_path):
    from peft import LoraConfig

    trainer = OnPolicyDistillTrainer(
        model=tiny_model,
        teacher_model=tiny_teacher,
        args=cpu_config(OnPolicyDistillConfig, str(tmp_path), learning_rate=1e-2),
        train_dataset=toy_dataset(32),
        processing_class=build_tokenizer(),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
    )
    student_before, teacher_before = snapshot(trainer.model), snapshot(trainer.teacher_model)
    trainer.train()
    moved = changed(student_before, trainer.model)
    assert moved and all("lora_" in name for name in moved)  # the adapter trains, the base stays
    assert not changed(teacher_before, trainer.teacher_model)
    assert not trainer.teacher_model.training
    assert not any(p.requires_grad for p in trainer.teacher_model.parameters())
    assert all(np.isfinite(logged(trainer, "kl/mean")))


# ---- the teacher -----------------------------------------------------------------------------------------------------


def test_teacher_in_its_own_dtype_given_as_a_model_or_in_the_config(tiny_model, tiny_teacher, tmp_path):
    trainer = _trainer(
        tiny_model, None, tmp_path, teacher_model_name_or_path=tiny_teacher,
        teacher_model_init_kwargs={"dtype": "bfloat16"}, teacher_device="cpu",
    )  # fmt: skip
    assert {p.dtype for p in trainer.teacher_model.parameters()} == {torch.bfloat16}
    output = _one_generation_batch(trainer)
    assert output["advantages"].dtype == torch.float32
    raw = (_plain_logps(tiny_teacher, output) - _plain_logps(tiny_model, output)) * output["completion_mask"]
    torch.testing.assert_close(output["advantages"].double(), raw, atol=0.1, rtol=0.05)  # bf16 teacher: close

    loaded = AutoModelForCausalLM.from_pretrained(tiny_teacher)
    trainer = _trainer(tiny_model, loaded, tmp_path)
    assert trainer.teacher_model is loaded and not loaded.training
    output = _one_generation_batch(trainer)
    raw = (_plain_logps(tiny_teacher, output) - _plain_logps(tiny_model, output)) * output["completion_mask"]
    torch.testing.assert_close(output["advantages"].double(), raw, atol=2e-5, rtol=1e-5)


def test_student_with_a_larger_output_layer(tiny_model, tiny_teacher, tmp_path):
    """Same tokenizer, but the student's embedding is padded beyond the teacher's (as Qwen2.5 sizes differ): ids the
    teacher cannot score are masked out of the distillation advantage."""
    student = AutoModelForCausalLM.from_pretrained(tiny_model)
    rows = student.get_output_embeddings().weight.shape[0]
    student.resize_token_embeddings(rows + 16)
    trainer = _trainer(student, tiny_teacher, tmp_path)
    teacher = trainer.teachers.teachers["default"]
    assert teacher.student_may_exceed and teacher.vocab_rows == rows
    prompt, completion = torch.tensor([[5, 6]]), torch.tensor([[7, rows + 3, 8]])
    batch = TeacherBatch(prompt, torch.ones_like(prompt), completion, torch.ones_like(completion),
                         torch.ones_like(completion, dtype=torch.bool), batch_size=1)  # fmt: skip
    logps, valid = teacher.sampled_token_logprobs(batch)
    assert valid.tolist() == [[True, False, True]] and torch.isfinite(logps).all()
    trainer.train()
    assert all(np.isfinite(logged(trainer, "kl/mean")))


def test_teacher_errors(tiny_model, tiny_teacher, tmp_path):
    with pytest.raises(ValueError, match=r"a teacher is required: pass teacher_model="):
        _trainer(tiny_model, None, tmp_path)
    with pytest.raises(ValueError, match=r"two teachers given"):
        _trainer(tiny_model, tiny_teacher, tmp_path, teacher_model_name_or_path=str(tmp_path))
    student = AutoModelForCausalLM.from_pretrained(tiny_model)
    with pytest.raises(ValueError, match=r"teacher_model is the student itself"):
        _trainer(student, student, tmp_path)
    with pytest.raises(ValueError, match=r"teacher_model_init_kwargs=.* only applies to a teacher given as a path"):
        _trainer(tiny_model, student, tmp_path, teacher_model_init_kwargs={"dtype": "bfloat16"})
    with pytest.raises(TypeError, match=r"teacher_model must be a path, a Hub id or a PreTrainedModel"):
        _trainer(tiny_model, 3, tmp_path)
    with pytest.raises(ValueError, match=r"reward_weight=0.5 blends task rewards .* no reward_funcs"):
        _trainer(tiny_model, tiny_teacher, tmp_path, reward_weight=0.5)


def test_teacher_with_another_tokenizer_is_rejected(tiny_model, tiny_teacher, tmp_path):
    other = str(tmp_path / "other_teacher")
    shutil.copytree(tiny_teacher, other)
    tokenizer = build_tokenizer()
    tokenizer.add_tokens(["<|tool|>"])  # one more token: the ids no longer match the student's tokenizer
    tokenizer.save_pretrained(other)
    os.remove(os.path.join(other, "model.safetensors"))  # the tokenizer check comes before the weights load
    with pytest.raises(ValueError, match=r"the teacher's tokenizer .* differs from the student's .*'<\|tool\|>'"):
        _trainer(tiny_model, other, tmp_path)

    small = str(tmp_path / "small_teacher")
    model = AutoModelForCausalLM.from_pretrained(tiny_teacher)
    model.resize_token_embeddings(100)
    model.save_pretrained(small)
    build_tokenizer().save_pretrained(small)
    with pytest.raises(ValueError, match=r"the teacher's output layer has 100 rows but the student's tokenizer has"):
        _trainer(tiny_model, small, tmp_path)
    assert os.path.isdir(small)


def test_checkpoints_hold_the_student_only_and_resume_exactly(tiny_model, tiny_teacher, tmp_path, float_tolerance):
    """The teacher is not trained, so it is not checkpointed; a run resumed from checkpoint-2 reloads it from its
    path and ends with the weights of the uninterrupted 4-step run."""

    def run(out, resume=None):
        trainer = _trainer(
            tiny_model, tiny_teacher, out, reward=length_reward, reward_weight=0.5, max_steps=4,
            save_strategy="steps", save_steps=2,
        )  # fmt: skip
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    full = run(tmp_path / "full")
    checkpoint = tmp_path / "full" / "checkpoint-2"
    weights = [f for f in os.listdir(checkpoint) if f.endswith(".safetensors")]
    assert weights == ["model.safetensors"] and not os.path.exists(checkpoint / "trl_ext_state.json")
    resumed = run(tmp_path / "resumed", resume=str(checkpoint))
    for (name, a), b in zip(full.model.named_parameters(), resumed.model.parameters(), strict=True):
        # the same float32 operations replayed: a few ulps of the weights at most
        torch.testing.assert_close(a, b, **float_tolerance(torch.float32, magnitude=a.abs().max()), msg=name)
    assert logged(resumed, "kl/mean") == pytest.approx(logged(full, "kl/mean"))
