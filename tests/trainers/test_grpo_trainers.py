"""The GRPO-family trainers on the tiny offline model: every algorithm trains, logs its loss's metrics, works
with LoRA and wandb, and its advantages and masks are the algorithm's."""

from __future__ import annotations

import glob
import json
import math
import os
import time

import pytest
import torch
from trainer_helpers import algorithm_classes, changed, cpu_config, kl_and_entropy, length_reward, logged, snapshot

import trl_ext
from trl_ext.losses import get_policy_loss
from trl_ext.toy import build_tokenizer, toy_dataset, toy_reward

ALGORITHMS = list(algorithm_classes("grpo"))


def make_trainer(algorithm, model, output_dir, reward_funcs=toy_reward, dataset=None, **overrides):
    spec = trl_ext.get_algorithm(algorithm)
    return spec.trainer_class(
        model=model,
        reward_funcs=reward_funcs,
        args=cpu_config(spec.config_class, output_dir, **overrides),
        train_dataset=dataset if dataset is not None else toy_dataset(32),
        processing_class=build_tokenizer(),
    )


def test_every_grpo_family_algorithm_has_a_trainer_and_config():
    expected = {"grpo", "gspo", "cispo", "sapo", "topr", "sppo", "rec", "opmd", "asymre", "reinforceplusplus"}
    expected |= {"rloo", "raft", "m2po", "multi_step_grpo", "gigpo", "dapo", "grpo_verl"}
    expected |= {"gpg", "geo_mean", "dro", "clip_cov", "kl_cov", "dppo_tv", "dppo_kl"}  # verl 0.9's losses
    expected |= {"vespo", "luspo"}  # TRL 1.16's loss types
    assert set(ALGORITHMS) == expected
    for name in ALGORITHMS:
        spec = trl_ext.get_algorithm(name)
        assert spec.has_trainer
        assert spec.trainer_class is algorithm_classes("grpo", trainers=True)[name]
        assert spec.config_class is algorithm_classes("grpo")[name]
        assert issubclass(spec.trainer_class, __import__("trl").GRPOTrainer)
        assert getattr(trl_ext, spec.trainer_class.__name__) is spec.trainer_class
        assert getattr(trl_ext, spec.config_class.__name__) is spec.config_class


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_algorithm_trains_and_logs_its_loss_metrics(algorithm, tiny_model, tmp_path):
    reference = trl_ext.get_algorithm(algorithm).use_reference  # without a reference model: no KL term
    beta = 0.02 if reference else 0.0
    trainer = make_trainer(algorithm, tiny_model, str(tmp_path), **kl_and_entropy(algorithm, beta, 0.001))
    before = snapshot(trainer.model)
    trainer.train()
    assert len(changed(before, trainer.model)) == len(before)  # every parameter moved (full fine-tuning)
    loss_fn = trainer.args.components.policy_loss
    assert type(trainer.policy_loss_fn) is type(loss_fn)
    assert type(loss_fn) is type(get_policy_loss(trl_ext.get_algorithm(algorithm).policy_loss_fn))
    last = [entry for entry in trainer.state.log_history if "policy_loss" in entry][-1]
    # The loss's own metrics (Trinity-RFT names), plus the policy loss, KL and entropy, reach TRL's logs.
    _, metrics = loss_fn(
        logprob=torch.zeros(2, 3),
        old_logprob=torch.zeros(2, 3),
        action_mask=torch.ones(2, 3),
        advantages=torch.tensor([1.0, -1.0]),
    )
    kl = ["kl", "kl_coef"] if reference else []
    for name in [*metrics, "policy_loss", *kl, "entropy", "entropy_loss", "reward"]:
        assert name in last and math.isfinite(last[name]), (name, last)
    assert last.get("kl_coef", 0.0) == pytest.approx(beta)
    assert last["entropy"] > 0


def test_loss_metric_is_the_window_value_and_loss_adds_kl_and_entropy(tiny_model, tmp_path):
    """`loss` = policy_loss + beta·kl − entropy_coef·entropy_loss, each logged as its window value."""
    trainer = make_trainer(
        "grpo", tiny_model, str(tmp_path), beta=0.5, entropy_coef=0.01, gradient_accumulation_steps=2, max_steps=3
    )
    trainer.train()
    for entry in [e for e in trainer.state.log_history if "policy_loss" in e]:
        expected = entry["policy_loss"] + 0.5 * entry["kl"] - 0.01 * entry["entropy_loss"]
        assert entry["loss"] == pytest.approx(expected, rel=1e-4, abs=1e-6)
        assert entry["entropy_loss"] == pytest.approx(entry["entropy"], rel=1e-5)  # token-mean both


def test_token_level_advantages_and_dropped_samples(tiny_model, tmp_path):
    """REINFORCE++ produces [B, T] advantages; RAFT keeps one completion per group and masks the others."""
    trainer = make_trainer("reinforceplusplus", tiny_model, str(tmp_path / "rpp"), reward_funcs=length_reward)
    batch = trainer._generate_and_score_completions(list(trainer.train_dataset.select(range(8))))
    adv, mask = batch["advantages"], batch["completion_mask"].bool()
    assert adv.shape == mask.shape
    assert adv[mask].mean().abs() < 1e-5 and adv[mask].std() == pytest.approx(1.0, rel=0.05)  # whitened
    assert torch.all(adv[~mask] == 0)

    trainer = make_trainer("raft", tiny_model, str(tmp_path / "raft"), reward_funcs=length_reward)
    trainer.model.train()  # as inside `train()`: metrics go to the "train" logs
    rows = [row for row in trainer.train_dataset.select(range(2)) for _ in range(4)]
    batch = trainer._generate_and_score_completions(rows)
    kept = batch["completion_mask"].sum(1) > 0
    assert kept.view(2, 4).sum(1).tolist() == [1, 1]  # the best of each group of 4
    assert trainer._metrics["train"]["advantages/dropped_frac"][-1] == pytest.approx(0.75)


def test_advantages_are_the_algorithms(tiny_model, tmp_path):
    """The trainer's advantages are the algorithm's estimator on the summed, weighted rewards of each group."""
    seen = {}

    def reward(completions, **kwargs):
        values = [float(len(c) % 5) for c in completions]
        seen["rewards"] = torch.tensor(values)
        return values

    for algorithm, expected in {
        "grpo": lambda r: (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6),
        "rloo": lambda r: r - (r.sum(1, keepdim=True) - r) / (r.shape[1] - 1),
        "topr": lambda r: r,
        "asymre": lambda r: r - (r.mean(1, keepdim=True) - 0.1),
    }.items():
        trainer = make_trainer(algorithm, tiny_model, str(tmp_path / algorithm), reward_funcs=reward)
        rows = [row for row in trainer.train_dataset.select(range(2)) for _ in range(4)]
        batch = trainer._generate_and_score_completions(rows)
        rewards = seen["rewards"].view(2, 4)
        torch.testing.assert_close(batch["advantages"], expected(rewards).flatten(), msg=algorithm)
        assert list(trainer._logs["advantages"])[-8:] == pytest.approx(batch["advantages"].tolist())  # the table


def test_lora_changes_only_the_adapter(tiny_model, tmp_path):
    from peft import LoraConfig

    spec = trl_ext.get_algorithm("sapo")
    trainer = spec.trainer_class(
        model=tiny_model,
        reward_funcs=length_reward,
        args=cpu_config(spec.config_class, str(tmp_path), kl_loss_fn="k2", beta=0.1, max_steps=3, learning_rate=1e-2),
        train_dataset=toy_dataset(32),
        processing_class=build_tokenizer(),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
    )
    assert trainer.ref_model is None  # the reference is the model with the adapter disabled
    before = snapshot(trainer.model)
    trainer.train()
    moved = changed(before, trainer.model)
    assert moved and all("lora_" in name for name in moved)
    assert {n for n in before if "lora_B" in n} <= moved
    assert logged(trainer, "kl")[-1] > 0  # the adapter moved the policy away from the disabled-adapter reference


def test_wandb_offline_records_the_loss_metrics(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_PROJECT", "trl-ext-test")
    trainer = make_trainer("sapo", tiny_model, str(tmp_path / "out"), report_to="wandb")
    trainer.train()
    import wandb

    wandb.finish()
    runs = glob.glob(os.path.join(str(tmp_path), "wandb", "offline-run-*", "run-*.wandb"))
    assert len(runs) == 1
    history, kinds = wandb_history(runs[0])
    for name in ["sapo_loss", "avg_soft_gate", "pos_adv_frac", "policy_loss", "entropy", "reward"]:
        values = [step[f"train/{name}"] for step in history if f"train/{name}" in step]
        assert values == pytest.approx(logged(trainer, name)), (name, kinds, history)


def wandb_history(path: str, timeout: float = 60.0) -> tuple[list[dict[str, float]], list[str]]:
    """The history rows of an offline `.wandb` file and the types of all its records, read once the run's `exit`
    record is there (wandb's service may still be writing the file when `wandb.finish()` returns; waits at most
    `timeout` seconds). The file is a LevelDB-style log (32 KiB blocks of CRC / length / type framed chunks after a
    7-byte file header) of `wandb_internal_pb2.Record` protobufs."""
    from wandb.proto import wandb_internal_pb2

    deadline = time.monotonic() + timeout
    while True:
        data, pos, pending, rows, kinds = open(path, "rb").read(), 7, b"", [], []
        while pos + 7 <= len(data):
            if 32768 - pos % 32768 < 7:  # no room for a chunk header: the block is padded
                pos += 32768 - pos % 32768
                continue
            length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
            chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
            pending = chunk if kind in (1, 2) else pending + chunk
            if kind in (1, 4):  # FULL or LAST: a complete record
                record = wandb_internal_pb2.Record()
                record.ParseFromString(pending)
                kinds.append(record.WhichOneof("record_type"))
                if kinds[-1] == "history":
                    items = record.history.item
                    rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items})
        if "exit" in kinds or time.monotonic() > deadline:
            return rows, kinds
        time.sleep(0.5)


def test_adaptive_kl_coefficient_moves_and_is_saved_in_checkpoints(tiny_model, tmp_path):
    trainer = make_trainer(
        "grpo",
        tiny_model,
        str(tmp_path),
        beta=0.1,
        adaptive_kl=True,
        target_kl=1e-6,
        kl_horizon=80,
        max_steps=3,
        save_strategy="steps",
        save_steps=3,
    )
    trainer.train()
    coefs, kls = logged(trainer, "kl_coef"), logged(trainer, "kl")
    assert coefs[0] == pytest.approx(0.1) and kls[0] == 0.0  # the first step starts at the reference
    for i in range(2):  # β ← β·(1 + clip(KL/target − 1, ±0.2)·sequences/horizon), 8 sequences per step
        error = min(max(kls[i] / 1e-6 - 1, -0.2), 0.2)
        assert coefs[i + 1] == pytest.approx(coefs[i] * (1 + error * 8 / 80), rel=1e-6)
    assert coefs[1] == pytest.approx(0.1 * 0.98)
    assert trainer.beta == pytest.approx(coefs[2] * (1 + min(max(kls[2] / 1e-6 - 1, -0.2), 0.2) * 8 / 80))
    with open(os.path.join(str(tmp_path), "checkpoint-3", "trl_ext_state.json")) as f:
        assert json.load(f)["kl_coef"] == pytest.approx(trainer.beta)


def test_evaluation_logs_the_loss_metrics(tiny_model, tmp_path):
    trainer = make_trainer("gspo", tiny_model, str(tmp_path), reward_funcs=length_reward, max_steps=1)
    trainer.eval_dataset = toy_dataset(8)
    metrics = trainer.evaluate()
    for name in ("eval_loss", "eval_pg_loss", "eval_ppo_kl_seq", "eval_policy_loss", "eval_entropy", "eval_reward"):
        assert name in metrics and math.isfinite(metrics[name]), (name, metrics)
    assert metrics["eval_loss"] == pytest.approx(metrics["eval_policy_loss"], abs=1e-6)  # beta = 0, no bonus


def test_vllm_importance_sampling_ratio_weights_the_advantages(tiny_model, tmp_path):
    """TRL's truncated / masked IS correction multiplies each token's loss; the trainer folds it into the
    advantages, which is the same for losses linear in the advantage."""
    trainer = make_trainer("grpo", tiny_model, str(tmp_path), reward_funcs=length_reward)
    rows = [row for row in trainer.train_dataset.select(range(2)) for _ in range(4)]
    batch = trainer._generate_and_score_completions(rows)
    assert batch["advantages"].abs().sum() > 0
    ratio = torch.rand(batch["completion_ids"].shape, generator=torch.Generator().manual_seed(0)) * 2
    weighted = trainer._compute_loss(trainer.model, {**batch, "importance_sampling_ratio": ratio})
    folded = trainer._compute_loss(trainer.model, {**batch, "advantages": batch["advantages"].unsqueeze(1) * ratio})
    plain = trainer._compute_loss(trainer.model, batch)
    torch.testing.assert_close(weighted, folded)
    assert not torch.allclose(weighted, plain)


def test_one_collective_per_optimizer_step_for_counts_and_one_for_metrics(tiny_model, tmp_path):
    """No per-micro-batch host sync for the loss metrics: with 4 accumulation steps, the window's counts take one
    all-reduce per optimizer step (the run's only ones), and the loss steps one gather of the metrics."""
    trainer = make_trainer(
        "grpo",
        tiny_model,
        str(tmp_path),
        reward_funcs=length_reward,
        beta=0.1,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=4,
    )
    calls, in_loss_step = [], []
    accelerator, compute_loss = trainer.accelerator, trainer._compute_loss

    def counted(name, collective):
        return lambda tensor, **kw: calls.append((name, bool(in_loss_step))) or collective(tensor, **kw)

    def loss_step(*args, **kwargs):
        in_loss_step.append(True)
        try:
            return compute_loss(*args, **kwargs)
        finally:
            in_loss_step.clear()

    accelerator.reduce = counted("reduce", accelerator.reduce)
    accelerator.gather = counted("gather", accelerator.gather)
    trainer._compute_loss = loss_step
    trainer.train()
    steps = trainer.state.global_step
    assert steps == 2
    assert [call for call in calls if call[0] == "reduce"] == [("reduce", False)] * steps  # the window counts
    assert [call for call in calls if call[1]] == [("gather", True)] * steps  # the loss metrics
    assert len(logged(trainer, "policy_loss")) == 2 and len(logged(trainer, "kl")) == 2


@pytest.mark.parametrize("algorithm", ["sapo", "opmd"])
def test_the_loss_is_handed_exactly_the_inputs_it_declares(algorithm, random_tiny_model, tmp_path):
    """The trainer passes a loss what its `inputs()` names and nothing else (no `ref_logprob` to SAPO, no
    `old_logprob` to OPMD, no MIX keys), window counts included."""
    trainer = make_trainer(
        algorithm,
        random_tiny_model,
        str(tmp_path),
        reward_funcs=length_reward,
        **kl_and_entropy(algorithm, 0.1),
        max_steps=1,
    )
    loss_fn, given = trainer.policy_loss_fn, []

    def recording(**inputs):
        given.append(set(inputs))
        return loss_fn(**inputs)

    recording.inputs, recording.is_window_share, recording.metrics = (
        loss_fn.inputs,
        loss_fn.is_window_share,
        loss_fn.metrics,
    )
    trainer.policy_loss_fn = recording
    trainer.train()
    assert given and all(keys == set(loss_fn.inputs()) for keys in given)
    assert "ref_logprob" not in given[0] and "step" not in given[0]
