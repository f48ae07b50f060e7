"""The equivalence anchor of the asynchronous trainer: with staleness 0 and the same samples, its update equals the
synchronous GRPO trainer's for the same loss and estimator.

Eight samples (two groups of four) with random completions and sampler log-probs μ = the model's own plus noise (so
that the ratios differ from 1 and the clips act) are handed to both trainers as each receives its batches: the
synchronous one as TRL's padded micro-batch (prompts left-padded, μ as `old_per_token_logps`), the asynchronous one
as TRL's packed tree row (shared prompts forwarded once, trl_ext's tree attention on CPU). Both start from the same
weights; the gradients of one micro-batch are compared (cosine ≥ 0.9999, and the losses).
"""

from __future__ import annotations

import pytest
import torch
from async_helpers import (
    StubTransfer,
    StubWorker,
    async_config,
    async_update,
    gradient,
    make_samples,
    packed_batch,
    padded_grpo_inputs,
    stub_trainer,
)
from trainer_helpers import cpu_config, toy_trainer
from transformers import AutoModelForCausalLM
from trl.trainer.utils import add_fused_lm_head

from trl_ext import GRPOConfig, GRPOTrainer
from trl_ext.advantages import get_advantage_fn
from trl_ext.algorithms import get_algorithm
from trl_ext.async_rollout import GroupScorer
from trl_ext.toy import build_tokenizer, toy_dataset, toy_reward
from trl_ext.trainers.asynchronous.forms import async_config_class
from trl_ext.trainers.asynchronous.packed_rows import PackedRow

CASES = {
    "ppo": {},
    "ppo/seq-mean-token-mean": {"policy_loss_fn_args": {"loss_agg_mode": "seq-mean-token-mean"}},
    "sapo": {"policy_loss_fn": "sapo"},
    "gspo": {"policy_loss_fn": "gspo"},
    "cispo": {"policy_loss_fn": "cispo"},
    "m2po": {"policy_loss_fn": "m2po", "policy_loss_fn_args": {"m2_threshold": 0.01}},
    "decoupled_ppo": {"policy_loss_fn": "decoupled_ppo", "policy_loss_fn_args": {"behave_imp_weight_cap": 1.2}},
    "ppo+kl+entropy": {"beta": 0.04, "kl_loss_fn": "k3", "entropy_coef": 0.01},
    # the loss step's options: one step, so every trainer that feeds their inputs has them
    "top_entropy_quantile": {"top_entropy_quantile": 0.5, "entropy_coef": 0.01},
    "off_policy_mask": {"off_policy_mask_threshold": 0.02},
    "bias_corrected_kl": {"beta": 0.04, "kl_loss_fn": "k3", "use_bias_correction_kl": True},
    "adaptive_kl": {"beta": 0.04, "kl_loss_fn": "k3", "adaptive_kl": True, "target_kl": 1e-4, "kl_horizon": 10},
    "adaptive_entropy": {
        "entropy_coef": 0.01,
        "use_adaptive_entropy": True,
        "entropy_target": 100.0,  # below the target: the coefficient grows by delta at the step
        "entropy_coef_delta": 0.005,
    },
}
TRINITY = {"advantage_epsilon": 1e-6, "std_unbiased": True, "group_of_one": "reward"}
"""The asynchronous config's settings for Trinity-RFT's GRPO advantage (its defaults are TRL's asynchronous worker's);
with the `ppo` loss also its dual clip, `clip_ratio_c=3.0`: the synchronous trainer's objective."""
STEP_OPTIONS = ("top_entropy_quantile", "off_policy_mask", "bias_corrected_kl", "adaptive_kl", "adaptive_entropy")
"""The cases of the loss step's options: each also changes the update or the coefficients (the anchor can fail)."""
REWARDS = torch.tensor([1.0, 0.0, 0.5, 0.0, 0.0, 0.0, 1.0, 1.0])
GROUPS = [0, 0, 0, 0, 1, 1, 1, 1]


def _sync_gradient(trainer, samples, advantages, pad, reference=None) -> tuple[torch.Tensor, float]:
    inputs = padded_grpo_inputs(samples, advantages, pad)
    if trainer.beta != 0:  # the reference's log-probs (by default the trained model's own), detached
        with torch.no_grad():
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
            mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
            inputs["ref_per_token_logps"], *_ = trainer._get_per_token_logps_and_entropies(
                reference or trainer.model, ids, mask, inputs["completion_ids"].size(1)
            )
    inputs.update(trainer.count_window([inputs]))
    trainer.current_gradient_accumulation_steps = 1  # as the training loop sets it
    trainer.model.train()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    return gradient(trainer.model), float(loss.detach())


def _perturbed_reference(model_path: str, asynchronous) -> torch.nn.Module:
    """The initial weights plus seeded noise, as the asynchronous trainer's reference and as a plain model with TRL's
    fused head for the synchronous one."""
    reference = AutoModelForCausalLM.from_pretrained(model_path)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    asynchronous.ref_model.load_state_dict(reference.state_dict())
    add_fused_lm_head(reference, temperature=1.0)
    return reference.eval()


def _async_gradient(trainer, samples, advantages, pad) -> tuple[torch.Tensor, float]:
    batch = packed_batch(samples, advantages, pad)
    trainer.current_gradient_accumulation_steps = 1  # as the training loop sets it
    trainer.model.train()
    trainer.model_version = 1
    trainer._get_num_items_in_batch([batch], trainer.accelerator.device)
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    return gradient(trainer.model), float(loss.detach())


@pytest.mark.parametrize("case", list(CASES))
def test_the_async_update_equals_the_sync_update_at_staleness_zero(case, random_tiny_model, tmp_path):
    overrides = CASES[case]
    sync = toy_trainer(GRPOTrainer, cpu_config(GRPOConfig, str(tmp_path / "sync"), **overrides), random_tiny_model)
    trinity = {**TRINITY, **({} if "policy_loss_fn" in overrides else {"clip_ratio_c": 3.0})}
    asynchronous = stub_trainer(random_tiny_model, async_config(str(tmp_path / "async"), **overrides, **trinity))
    tokenizer = build_tokenizer()
    samples = make_samples(tokenizer, sync.model, seed=3)

    # the same estimator: the synchronous trainer's on the batch, the worker's scorer on each group
    expected = sync.advantage_fn(REWARDS, torch.tensor(GROUPS))
    args = asynchronous.args
    scorer = GroupScorer(toy_reward, advantage_fn=args.advantage_fn_name, advantage_fn_args=args.advantage_kwargs())
    per_group = [scorer._advantages(REWARDS[g * 4 : g * 4 + 4].double().numpy(), [[0]] * 4, g) for g in (0, 1)]
    worker_advantages = torch.cat([result.advantages.float() for result in per_group])
    torch.testing.assert_close(worker_advantages, expected.float(), rtol=1e-6, atol=1e-6)

    # a reference other than the trained weights, so that the KL term and its gradient are not 0
    reference = _perturbed_reference(random_tiny_model, asynchronous) if sync.beta != 0 else None
    g_sync, loss_sync = _sync_gradient(sync, samples, expected, tokenizer.pad_token_id, reference)
    g_async, loss_async = _async_gradient(asynchronous, samples, worker_advantages, tokenizer.pad_token_id)
    assert g_sync.norm() > 0
    cosine = torch.nn.functional.cosine_similarity(g_sync, g_async, dim=0)
    assert cosine >= 0.9999, (case, float(cosine))
    torch.testing.assert_close(g_async.norm(), g_sync.norm(), rtol=1e-3, atol=0)
    assert loss_async == pytest.approx(loss_sync, rel=1e-4, abs=1e-6)
    # the coefficients the step adapts at the optimizer step (`adaptive_kl`, `use_adaptive_entropy`) move alike
    assert asynchronous.loss_step.beta == pytest.approx(sync.loss_step.beta, rel=1e-5)
    assert asynchronous.loss_step.entropy.coef == pytest.approx(sync.loss_step.entropy.coef, rel=1e-6)
    if case in STEP_OPTIONS:
        config = cpu_config(GRPOConfig, str(tmp_path / "plain"), beta=overrides.get("beta", 0.0), kl_loss_fn="k3")
        plain = toy_trainer(GRPOTrainer, config, random_tiny_model)
        g_plain, _ = _sync_gradient(plain, samples, expected, tokenizer.pad_token_id, reference)
        moved = {
            "adaptive_kl": sync.loss_step.beta != pytest.approx(0.04),
            "adaptive_entropy": sync.loss_step.entropy.coef == pytest.approx(0.015),
        }
        # the option moves the update by more than the two trainers differ
        changed = (g_sync - g_plain).norm() > 10 * (g_sync - g_async).norm()
        assert moved.get(case, changed), case


def test_a_stale_sample_changes_the_update(random_tiny_model, tmp_path):
    """The anchor can fail: the same samples with other sampler log-probs (a staler μ) give another update."""
    asynchronous = stub_trainer(random_tiny_model, async_config(str(tmp_path / "async")))
    tokenizer = build_tokenizer()
    plain = AutoModelForCausalLM.from_pretrained(random_tiny_model)  # the trainer's model attends on packed rows only
    fresh = make_samples(tokenizer, plain, seed=3, noise=0.0)
    stale = make_samples(tokenizer, plain, seed=3, noise=0.5)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, -1.0, 0.5, -0.5])
    g_fresh, _ = _async_gradient(asynchronous, fresh, advantages, tokenizer.pad_token_id)
    g_stale, _ = _async_gradient(asynchronous, stale, advantages, tokenizer.pad_token_id)
    assert torch.nn.functional.cosine_similarity(g_fresh, g_stale, dim=0) < 0.999


def _completion_mask(samples: list[dict]) -> torch.Tensor:
    """`[N, T]`: each sample's completion tokens, left-aligned (the synchronous trainer's `completion_mask`)."""
    lengths = torch.tensor([int(s["completion_mask"].sum()) for s in samples])
    return torch.arange(int(lengths.max())) < lengths[:, None]


@pytest.mark.parametrize("algorithm", ["reinforceplusplus", "grpo_verl", "gpg"])
def test_a_token_level_estimator_runs_over_the_optimizer_window(algorithm, random_tiny_model, tmp_path):
    """The worker stamps each sample's reward (advantage 0); the trainer runs the token-level estimator once over
    the window, here two micro-batches of four samples, as the synchronous trainer runs it over its batch: the same
    advantages, and at staleness 0 the same update as the synchronous trainer's."""
    spec = get_algorithm(algorithm)
    sync = toy_trainer(spec.trainer_class, cpu_config(spec.config_class, str(tmp_path / "sync")), random_tiny_model)
    config = cpu_config(async_config_class(algorithm), str(tmp_path / "async"), token_budget=0)
    asynchronous = stub_trainer(random_tiny_model, config)
    assert asynchronous.window_estimator is not None and asynchronous.group_scorer.estimates_in_window
    tokenizer = build_tokenizer()
    samples = make_samples(tokenizer, sync.model, seed=3)
    mask = _completion_mask(samples)
    rewards = REWARDS.clone()
    rewards[5] = float("nan")  # no reward function scored it: no part in the statistics, advantage 0
    scored = torch.isfinite(rewards)
    expected = torch.zeros(mask.shape)
    estimator = get_advantage_fn(sync.args.advantage_fn_name, **sync.args.advantage_kwargs())
    estimate = estimator.compute(
        rewards[scored], [GROUPS[i] for i in range(8) if scored[i]], response_mask=mask[scored]
    )
    expected[scored] = estimate.advantages.float()
    if algorithm == "reinforceplusplus":  # γ = 1: every token's return is its sample's reward, whitened over tokens
        tokens = mask[scored].sum(1).float()
        returns = rewards[scored]
        mean = (returns * tokens).sum() / tokens.sum()
        var = ((returns - mean) ** 2 * tokens).sum() / (tokens.sum() - 1)
        closed = ((returns - mean) / var.sqrt())[:, None] * mask[scored]
        torch.testing.assert_close(expected[scored], closed, rtol=1e-4, atol=1e-5)

    halves = [packed_batch(samples[i : i + 4], [0.0] * 4, tokenizer.pad_token_id, rewards=rewards[i : i + 4].tolist())
              for i in (0, 4)]  # fmt: skip
    asynchronous.model_version = 1
    asynchronous._get_num_items_in_batch(halves, asynchronous.accelerator.device)
    for half, rows in zip(halves, (slice(0, 4), slice(4, 8)), strict=True):
        grid = PackedRow.from_inputs(half).grid()
        got = grid.scatter(half["window_advantages"][half["token_index"] >= 0])
        torch.testing.assert_close(got, expected[rows, : got.size(1)], rtol=1e-5, atol=1e-6)
    assert not halves[1]["window_advantages"][halves[1]["segment_id"] == 1].any()  # sample 5: unscorable

    # the update: one micro-batch of all eight, against the synchronous trainer's with the same token advantages
    whole = packed_batch(samples, [0.0] * 8, tokenizer.pad_token_id, rewards=rewards.tolist())
    g_async, loss_async = async_update(asynchronous, whole)
    g_sync, loss_sync = _sync_gradient(sync, samples, expected, tokenizer.pad_token_id)
    assert g_sync.norm() > 0
    assert torch.nn.functional.cosine_similarity(g_sync, g_async, dim=0) >= 0.9999
    assert float(loss_async.detach()) == pytest.approx(loss_sync, rel=1e-4, abs=1e-6)


def test_remax_runs_over_the_window_against_the_workers_greedy_baselines(random_tiny_model, tmp_path):
    """ReMax: the worker stamps each sample's reward and its group's greedy baseline; over a window of two
    micro-batches the trainer's advantages are `remax`'s on the same rewards, baselines and masks, i.e. (R − b) on
    every trained token (the reward sits on the last one, γ = 1); the unscorable sample gets 0."""
    config = async_config(str(tmp_path), advantage_fn="remax")
    trainer = stub_trainer(random_tiny_model, config)
    assert trainer.group_scorer.needs_greedy_baseline and trainer.window_estimator is not None
    tokenizer = build_tokenizer()
    samples = make_samples(tokenizer, AutoModelForCausalLM.from_pretrained(random_tiny_model), seed=3)
    mask = _completion_mask(samples)
    rewards = REWARDS.clone()
    rewards[5] = float("nan")
    baselines = torch.tensor([0.25 if g == 0 else 0.75 for g in GROUPS], dtype=torch.float64)
    scored = torch.isfinite(rewards)
    expected = torch.zeros(mask.shape)
    estimate = get_advantage_fn("remax").compute(
        rewards[scored], [GROUPS[i] for i in range(8) if scored[i]], response_mask=mask[scored],
        completion_mask=mask[scored], reward_baselines=baselines[scored],
    )  # fmt: skip
    expected[scored] = estimate.advantages.float()
    closed = (rewards[scored] - baselines[scored].float())[:, None] * mask[scored]
    torch.testing.assert_close(expected[scored], closed, rtol=0, atol=1e-6)

    halves = [
        packed_batch(samples[i : i + 4], [0.0] * 4, tokenizer.pad_token_id, rewards=rewards[i : i + 4].tolist(),
                     baselines=baselines[i : i + 4].tolist())
        for i in (0, 4)
    ]  # fmt: skip
    torch.testing.assert_close(halves[0]["sample_baseline"].reshape(-1)[:4], baselines[:4])
    trainer.model_version = 1
    trainer._get_num_items_in_batch(halves, trainer.accelerator.device)
    for half, rows in zip(halves, (slice(0, 4), slice(4, 8)), strict=True):
        grid = PackedRow.from_inputs(half).grid()
        got = grid.scatter(half["window_advantages"][half["token_index"] >= 0])
        torch.testing.assert_close(got, expected[rows, : got.size(1)], rtol=1e-5, atol=1e-6)
    assert not halves[1]["window_advantages"][halves[1]["segment_id"] == 1].any()  # sample 5: unscorable
    unstamped = [packed_batch(samples[:4], [0.0] * 4, tokenizer.pad_token_id, rewards=rewards[:4].tolist())]
    with pytest.raises(RuntimeError, match=r"has no 'sample_baseline'.*ReMax its greedy baseline"):
        trainer._get_num_items_in_batch(unstamped, trainer.accelerator.device)


@pytest.mark.parametrize("algorithm", ["on_policy_distill", "jsd"])
def test_distillation_scores_the_packed_rows_with_the_teacher(algorithm, random_tiny_model, random_teacher, tmp_path):
    """The teacher (another model) forwarded on the packed rows gives, over a window of two micro-batches, the
    advantages of the distillation estimator on the teacher's and the sampler's log-probs of the same tokens from a
    plain forward of each; the worker's task term (reward_weight·Â) is added on every token; the update equals the
    synchronous distillation trainer's with the same advantages."""
    from trl_ext import AsyncGRPOTrainer

    spec = get_algorithm(algorithm)
    config = cpu_config(async_config_class(algorithm), str(tmp_path / "async"), token_budget=0, reward_weight=0.5)
    tokenizer = build_tokenizer()
    asynchronous = AsyncGRPOTrainer(
        model=random_tiny_model, reward_funcs=toy_reward, args=config, train_dataset=toy_dataset(16),
        processing_class=tokenizer, rollout_worker=StubWorker(), weight_transfer=StubTransfer(),
        teacher_model=random_teacher,
    )  # fmt: skip
    assert asynchronous.teacher is not None and asynchronous.group_scorer.reward_weight == 0.5
    student = AutoModelForCausalLM.from_pretrained(random_tiny_model)
    samples = make_samples(tokenizer, student, seed=3)
    mask = _completion_mask(samples)
    teacher = AutoModelForCausalLM.from_pretrained(random_teacher)

    def completion_log_probs(sample, model) -> torch.Tensor:  # log_softmax(logits_{t-1})[y_t] of the completion
        ids = torch.tensor(sample["input_ids"])
        with torch.no_grad():
            logps = torch.log_softmax(model(ids[None]).logits[0].float(), -1)
        start = sample["prompt_len"]
        return logps[start - 1 : -1].gather(1, ids[start:, None])[:, 0]

    def grid(values: list[torch.Tensor]) -> torch.Tensor:
        out = torch.zeros(mask.shape)
        for i, v in enumerate(values):
            out[i, : v.numel()] = v
        return out

    teacher_lp = grid([completion_log_probs(s, teacher) for s in samples])
    sampler = grid([torch.tensor(s["old_log_probs"][s["prompt_len"] :]) for s in samples])
    estimator = get_advantage_fn(config.advantage_fn_name, **config.advantage_kwargs())
    declared = estimator.inputs()
    inputs = {"teacher_logprob": teacher_lp, "old_logprob": sampler, "response_mask": mask}
    if "teacher_valid_mask" in declared:
        inputs["teacher_valid_mask"] = mask
    distill = estimator.compute(None, GROUPS, **{k: v for k, v in inputs.items() if k in declared}).advantages
    task = 0.5 * torch.tensor([1.0, -1.0, 0.5, 0.0, -0.5, 0.25, 1.0, -1.25])  # what the worker stamped: w·Â
    expected = (distill.float() + task[:, None]) * mask
    assert distill.abs().sum() > 0

    halves = [packed_batch(samples[i : i + 4], task[i : i + 4].tolist(), tokenizer.pad_token_id, rewards=[0.0] * 4)
              for i in (0, 4)]  # fmt: skip
    asynchronous.model_version = 1
    asynchronous._get_num_items_in_batch(halves, asynchronous.accelerator.device)
    for half, rows in zip(halves, (slice(0, 4), slice(4, 8)), strict=True):
        got = PackedRow.from_inputs(half).grid().scatter(half["window_advantages"][half["token_index"] >= 0])
        torch.testing.assert_close(got, expected[rows, : got.size(1)], rtol=1e-4, atol=1e-4)
    kl = asynchronous.metric_log("train")["kl/mean"]
    assert kl[-1] == pytest.approx(float(((sampler - teacher_lp) * mask).sum() / mask.sum()), rel=1e-4)

    sync_config = cpu_config(spec.config_class, str(tmp_path / "sync"), teacher_model_name_or_path=random_teacher)
    sync = toy_trainer(spec.trainer_class, sync_config, random_tiny_model)
    whole = packed_batch(samples, task.tolist(), tokenizer.pad_token_id, rewards=[0.0] * 8)
    g_async, _ = async_update(asynchronous, whole)
    g_sync, _ = _sync_gradient(sync, samples, expected, tokenizer.pad_token_id)
    assert torch.nn.functional.cosine_similarity(g_sync, g_async, dim=0) >= 0.9999
