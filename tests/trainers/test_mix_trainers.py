"""MIX / MIX-CHORD trainers: expert demonstrations mixed into the GRPO-family batches (tiny model, CPU)."""

from __future__ import annotations

import json
import logging
import os
import shutil

import pytest
import torch
from datasets import Dataset
from trainer_helpers import CPU, changed, cpu_config, length_reward, logged, snapshot

import trl_ext
from trl_ext import GRPOConfig, GRPOTrainer, MIXCHORDConfig, MIXCHORDTrainer, MIXConfig, MIXTrainer
from trl_ext.toy import FAST_TRAINING, build_tokenizer, toy_dataset, toy_expert_dataset, toy_reward


def _trainer(tiny_model, tmp_path, cls=MIXTrainer, expert=None, dataset=None, reward=length_reward, **overrides):
    return cls(
        model=tiny_model,
        reward_funcs=reward,
        args=cpu_config(cls.config_class, str(tmp_path), **overrides),
        train_dataset=dataset if dataset is not None else toy_dataset(32),
        expert_dataset=expert if expert is not None else toy_expert_dataset(32),
        processing_class=build_tokenizer(),
    )


def _generation_batch(trainer):
    """One generation batch as the loss sees it (buffered micro-batches concatenated)."""
    trainer.model.train()
    batch = next(iter(trainer.get_train_dataloader()))
    trainer._step = 0
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    trainer._prepare_inputs(batch)
    buffered = trainer._buffered_inputs
    return {k: torch.cat([b[k] for b in buffered]) for k in buffered[0] if buffered[0][k].dim() > 0}, batch


def test_algorithms_are_attached(tiny_model):
    for name, trainer, config in (("mix", MIXTrainer, MIXConfig), ("mix_chord", MIXCHORDTrainer, MIXCHORDConfig)):
        spec = trl_ext.get_algorithm(name)
        assert spec.trainer_class is trainer and spec.config_class is config
        assert issubclass(trainer, __import__("trl").GRPOTrainer)
    args = MIXConfig(output_dir="unused", **CPU)
    assert (args.expert_data_ratio, args.entropy_loss_fn, args.reference_weighting) == (0.5, "mix", False)
    assert args.components.policy_loss.mu == 0.1
    chord = MIXCHORDConfig(output_dir="unused", **CPU).components.policy_loss
    assert (chord.mu_peak, chord.mu_valley, chord.enable_phi_function) == (0.1, 0.1, True)


def test_batch_mixes_rollouts_and_expert_rows(tiny_model, tmp_path):
    expert = toy_expert_dataset(32)
    trainer = _trainer(tiny_model, tmp_path, expert=expert, beta=0.1)
    batch, prompts = _generation_batch(trainer)
    # 8 rows: ceil(0.5 × 8) = 4 demonstrations + 1 prompt group of 4 rollouts; the dataloader yields the rollouts only
    assert len(prompts) == 4 and len({str(p["prompt"]) for p in prompts}) == 1
    is_expert = batch["expert_mask"]
    assert is_expert.shape == (8,) and int(is_expert.sum()) == 4
    assert torch.all(batch["advantages"][is_expert] == 0)
    # The expert rows are the stream's first 4 demonstrations, tokenized like the prompts, completion + EOS.
    tok = build_tokenizer()
    order = trl_ext.trainers.mix.expert_data.ExpertStream(32, seed=0).take(4)
    expected = set()
    for i in order:
        row = expert[i]
        expected.add((tuple(tok(row["prompt"])["input_ids"]), (*tok(row["completion"])["input_ids"], tok.eos_token_id)))
    got = set()
    for r in is_expert.nonzero().flatten().tolist():
        p = batch["prompt_ids"][r][batch["prompt_mask"][r].bool()]
        c = batch["completion_ids"][r][batch["completion_mask"][r].bool()]
        got.add((tuple(p.tolist()), tuple(c.tolist())))
    assert got == expected
    # Their reference log-probs were computed (beta > 0): at step 0 the policy is the reference.
    trainer.model.eval()
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    with torch.no_grad():
        logps = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, batch["completion_ids"].size(1))[0]
    valid = batch["completion_mask"].bool() & is_expert.unsqueeze(1)
    torch.testing.assert_close(batch["ref_per_token_logps"][valid], logps[valid], rtol=1e-4, atol=1e-5)


def test_trains_and_logs_both_parts(tiny_model, tmp_path):
    trainer = _trainer(tiny_model, tmp_path, cls=MIXCHORDTrainer, mu_warmup_steps=2, mu_peak=0.5, max_steps=3)
    before = snapshot(trainer.model)
    trainer.train()
    assert changed(before, trainer.model)
    assert logged(trainer, "mu") == pytest.approx([0.0, 0.25, 0.1])  # step 0, 1 of the warm-up, then the valley
    for name in ("usual/pg_loss", "usual/pg_clipfrac", "usual/ppo_kl", "expert/sft_phi_loss", "policy_loss"):
        assert len(logged(trainer, name)) == 3, name
    assert all(v > 0 for v in logged(trainer, "expert/sft_phi_loss"))


def test_no_expert_rows_is_the_ppo_part_scaled_by_one_minus_mu(tiny_model, tmp_path, float_tolerance):
    """expert_data_ratio=0: no expert dataset needed, and with SGD the update is (1 − μ) × GRPO's on the same
    rollouts (same seed)."""
    sgd = {"optim": "sgd", "lr_scheduler_type": "constant", "max_grad_norm": 0.0, "max_steps": 1, "learning_rate": 0.1}
    grpo = GRPOTrainer(
        model=tiny_model,
        reward_funcs=length_reward,
        args=cpu_config(GRPOConfig, str(tmp_path / "grpo"), **sgd),
        train_dataset=toy_dataset(32),
        processing_class=build_tokenizer(),
    )
    before = snapshot(grpo.model)
    grpo.train()
    grpo_update = torch.cat([(p.detach() - before[n]).flatten() for n, p in grpo.model.named_parameters()])
    mix = MIXTrainer(
        model=tiny_model,
        reward_funcs=length_reward,
        args=cpu_config(MIXConfig, str(tmp_path / "mix"), expert_data_ratio=0.0, mu=0.25, **sgd),
        train_dataset=toy_dataset(32),
        processing_class=build_tokenizer(),
    )
    mix.train()
    mix_update = torch.cat([(p.detach() - before[n]).flatten() for n, p in mix.model.named_parameters()])
    assert grpo_update.norm() > 1e-3
    # the update (p + Δ) − p: float32 sums over the step's tokens, of the weights (up to max |p|) plus the update
    weights = max(p.abs().max() for p in mix.model.parameters())
    tol = float_tolerance(torch.float32, logged(mix, "num_tokens")[-1], weights + grpo_update.abs().max())
    torch.testing.assert_close(mix_update, 0.75 * grpo_update, **tol)
    assert logged(mix, "expert/sft_loss") == [0.0]


def test_all_expert_batch_generates_nothing(tiny_model, tmp_path):
    def never(**kwargs):
        raise AssertionError("no completion should be scored")

    trainer = _trainer(tiny_model, tmp_path, reward=never, expert_data_ratio=1.0, mu=1.0, max_steps=2)
    batch, _ = _generation_batch(trainer)
    assert bool(batch["expert_mask"].all()) and batch["expert_mask"].numel() == 8
    trainer = _trainer(tiny_model, tmp_path, reward=never, expert_data_ratio=1.0, mu=1.0, max_steps=2)
    before = snapshot(trainer.model)
    trainer.train()
    assert changed(before, trainer.model)
    assert logged(trainer, "usual/pg_loss") == [0.0, 0.0]
    assert logged(trainer, "policy_loss") == pytest.approx(logged(trainer, "expert/sft_loss"))


def test_expert_data_cycles_when_exhausted_and_says_so_once(tiny_model, tmp_path, caplog):
    expert = toy_expert_dataset(6)
    trainer = _trainer(tiny_model, tmp_path, expert=expert, max_steps=3)
    drawn = []
    take = trainer._expert_stream.take
    trainer._expert_stream.take = lambda n: drawn.extend(take(n)) or drawn[-n:]
    with caplog.at_level(logging.WARNING, logger="trl_ext"):
        trainer.train()
    assert len(drawn) == 12 and sorted(drawn) == sorted(list(range(6)) * 2)  # two full passes, each a permutation
    assert sorted(drawn[:6]) == list(range(6)) and drawn[:6] != drawn[6:]
    notes = [r for r in caplog.records if "exhausted" in r.getMessage()]
    assert len(notes) == 1 and "all 6 demonstrations" in notes[0].getMessage()


def _expert_logprob(trainer) -> float:
    """Mean log-prob of the expert completion tokens under the trainer's model."""
    total, count = 0.0, 0
    model = trainer.model.eval()
    with torch.no_grad():
        for p, c in trainer._expert_rows:
            logits = model(torch.tensor([p + c])).logits[0, len(p) - 1 : -1]
            total += torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(c).unsqueeze(1)).sum().item()
            count += len(c)
    return total / count


def test_sft_part_raises_the_log_prob_of_expert_completions(tiny_model, tmp_path):
    """20 steps on 8 demonstrations: the SFT part alone (μ = 1) raises their mean token log-prob (measured
    -0.87 -> -0.60); the RL part alone (μ = 0, a length reward) does not (-0.87 -> -1.99)."""
    expert = toy_expert_dataset(8)
    results = {}
    for mu in (0.0, 1.0):
        trainer = _trainer(tiny_model, tmp_path / str(mu), expert=expert, mu=mu, max_steps=20, logging_steps=5)
        start = _expert_logprob(trainer)
        trainer.train()
        results[mu] = _expert_logprob(trainer) - start
    assert results[1.0] > 0.15, results
    assert results[1.0] > results[0.0] + 0.5, results


def test_toy_reward_rises_faster_with_expert_data(tiny_model, tmp_path):
    """Same seed, same prompts: a quarter of every batch as demonstrations (μ 0.5) vs rollouts only."""
    settings = {**FAST_TRAINING, "max_steps": 40, "logging_steps": 2}
    rewards = {}
    for ratio in (0.0, 0.25):
        trainer = MIXTrainer(
            model=tiny_model,
            reward_funcs=toy_reward,
            args=MIXConfig(
                output_dir=str(tmp_path / str(ratio)),
                **{**CPU, **settings},
                expert_data_ratio=ratio,
                mu=0.5,
            ),
            train_dataset=toy_dataset(),
            expert_dataset=toy_expert_dataset(),
            processing_class=build_tokenizer(),
        )
        trainer.train()
        rewards[ratio] = logged(trainer, "reward")
    late = {ratio: sum(r[-5:]) / 5 for ratio, r in rewards.items()}
    assert late[0.25] > late[0.0] + 0.2, rewards


def test_resume_ends_with_the_same_weights(tiny_model, tmp_path, float_tolerance):
    """Stopped at step 2 (its checkpoint) and resumed: the same weights as the uninterrupted 4-step run, with μ's
    schedule and the expert stream (6 demonstrations, 4 per step: it cycles) picking up where they were."""

    def run(out, resume=None):
        trainer = _trainer(
            tiny_model,
            out,
            cls=MIXCHORDTrainer,
            expert=toy_expert_dataset(6),
            max_steps=4,
            save_strategy="steps",
            save_steps=2,
            mu_warmup_steps=1,
            mu_decay_steps=3,
            mu_peak=0.8,
            mu_valley=0.2,
            beta=0.05,
        )
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    full = run(tmp_path / "full")
    state = json.load(open(os.path.join(tmp_path / "full", "checkpoint-2", "trl_ext_state.json")))
    assert state == {"expert_rows_drawn": 8}
    resumed = run(tmp_path / "resumed", resume=str(tmp_path / "full" / "checkpoint-2"))
    assert resumed._expert_stream.position == full._expert_stream.position == 16
    for (name, a), b in zip(full.model.named_parameters(), resumed.model.parameters(), strict=True):
        # the same float32 operations replayed: a few ulps of the weights at most
        torch.testing.assert_close(a, b, **float_tolerance(torch.float32, magnitude=a.abs().max()), msg=name)
    assert logged(resumed, "mu") == pytest.approx(logged(full, "mu"))  # the history up to step 2 comes back too
    # Control: resumed without the stream position, the run draws other demonstrations and ends elsewhere.
    lost = tmp_path / "lost" / "checkpoint-2"
    shutil.copytree(tmp_path / "full" / "checkpoint-2", lost)
    os.remove(lost / "trl_ext_state.json")
    other = run(tmp_path / "other", resume=str(lost))
    assert other._expert_stream.position == 8
    pairs = zip(full.model.parameters(), other.model.parameters(), strict=True)
    assert any(not torch.allclose(a, b, atol=1e-6) for a, b in pairs)


def test_reference_weighting_when_geometry_is_given(tiny_model, tmp_path):
    """With the reference's batch geometry set, each micro-batch's loss is the reference's n·w-weighted MIX loss
    divided by the accumulation steps, and the loss gets no window counts."""
    trainer = _trainer(
        tiny_model,
        tmp_path,
        gradient_accumulation_steps=2,
        per_device_train_batch_size=4,
        ppo_mini_batch_size=8,
        ppo_micro_batch_size_per_gpu=4,
        train_batch_size_usual=4,
        train_batch_size_expert=4,
        mu=0.3,
    )
    assert trainer.args.reference_weighting
    calls = []
    loss_fn = trainer.policy_loss_fn

    def recording(**inputs):
        loss, metrics = loss_fn(**inputs)
        calls.append((inputs, loss.detach()))
        return loss, metrics

    recording.inputs, recording.is_window_share = loss_fn.inputs, loss_fn.is_window_share  # what trainers read
    recording.metrics = loss_fn.metrics
    trainer.policy_loss_fn = recording
    returned = []
    compute = trainer._compute_loss
    trainer._compute_loss = lambda model, inputs: returned.append(compute(model, inputs)) or returned[-1]
    trainer.train()
    assert len(calls) == 4
    for (inputs, reference), loss in zip(calls, returned, strict=True):
        assert "global_valid_toks" not in inputs and "expert_valid_toks" not in inputs
        torch.testing.assert_close(loss.detach(), reference / 2)
        # the reference's weights: w = GA / (train_batch_size / ngpus) = 2 / 4, scale n·w per part
        expected, _ = trl_ext.losses.get_policy_loss(
            "mix",
            mu=0.3,
            ppo_mini_batch_size=8,
            ppo_micro_batch_size_per_gpu=4,
            train_batch_size_usual=4,
            train_batch_size_expert=4,
        )(**{k: v for k, v in inputs.items()})
        torch.testing.assert_close(reference, expected.detach())


def test_conversational_demonstrations_use_the_chat_template(tiny_model, tmp_path):
    tok = build_tokenizer()
    expert = toy_expert_dataset(8, conversational=True)
    trainer = _trainer(tiny_model, tmp_path, expert=expert, dataset=toy_dataset(32, conversational=True))
    end_of_turn = tok.convert_tokens_to_ids("<|im_end|>")
    for row, (p_ids, c_ids) in zip(expert, trainer._expert_rows, strict=True):
        assert p_ids == list(trainer._tokenize_prompts([row["prompt"]])[0][0])
        assert c_ids[-1] == end_of_turn  # the turn ends where generation stops, without the template's newline
        assert tok.decode(c_ids[:-1]) == row["completion"][0]["content"]
    # messages rows give the same tokens
    messages = Dataset.from_list([{"messages": r["prompt"] + r["completion"]} for r in expert])
    other = _trainer(tiny_model, tmp_path, expert=messages, dataset=toy_dataset(32, conversational=True))
    assert other._expert_rows == trainer._expert_rows


def test_long_demonstrations_are_truncated_with_a_warning(tiny_model, tmp_path, caplog):
    expert = Dataset.from_dict(
        {"prompt": ["Repeat the letter a:"] * 4, "completion": [" a" * 20, " a a", " a", " a" * 9]}
    )
    with caplog.at_level(logging.WARNING, logger="trl_ext"):
        trainer = _trainer(tiny_model, tmp_path, expert=expert)
    assert [len(c) for _, c in trainer._expert_rows] == [8, 3, 2, 8]
    assert any("2 of 4 expert completions" in r.getMessage() for r in caplog.records)


# ---- bad input: clear errors at construction ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "ratio, match",
    [
        (-0.1, r"expert_data_ratio=-0\.1 is not valid; must be a number in \[0, 1\]"),
        (1.5, r"expert_data_ratio=1\.5 is not valid; must be a number in \[0, 1\]"),
        (0.3, r"ceil\(0\.3 × 8\) = 3 expert .*multiple of num_generations=4.*nearest ratios that fit: 0\.5 \(4 rows\)"),
        (0.9, r"= 8 expert .*leaving 0 rollouts.*at least one group of rollouts must remain"),
    ],
)
def test_bad_expert_data_ratio(ratio, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        cpu_config(MIXConfig, str(tmp_path), expert_data_ratio=ratio)


def test_batch_too_small_for_both_kinds(tmp_path):
    with pytest.raises(ValueError, match=r"cannot hold both kinds.*Raise per_device_train_batch_size"):
        cpu_config(MIXCHORDConfig, str(tmp_path), per_device_train_batch_size=4, expert_data_ratio=0.5)
    cpu_config(MIXCHORDConfig, str(tmp_path), per_device_train_batch_size=4, expert_data_ratio=1.0)  # all expert: fine


@pytest.mark.parametrize(
    "expert, match",
    [
        (None, r"expert_dataset is required: expert_data_ratio=0\.5"),
        (Dataset.from_dict({"question": ["q"], "answer": ["a"]}), r"no usable columns \(found: 'question', 'answer'\)"),
        (
            Dataset.from_dict({"prompt": ["a", "b", "c"], "completion": [" a", "", ""]}),
            r"2 empty completion\(s\) \(rows 1, 2\)",
        ),
        (
            Dataset.from_list([{"messages": [{"role": "user", "content": "hi"}]}]),
            r"row 0: 'messages' must .*ending with the assistant",
        ),
        (
            Dataset.from_dict({"prompt": ["a"], "completion": [[{"role": "assistant", "content": "b"}]]}),
            r"row 0: prompt and completion must both be strings or both",
        ),
        (Dataset.from_dict({"prompt": []}, features=None).add_column("completion", []), r"expert_dataset is empty"),
        (toy_expert_dataset(4).to_iterable_dataset(), r"map-style dataset .*got IterableDataset"),
        (
            toy_expert_dataset(4, conversational=True),
            r"expert_dataset is conversational but the prompts of train_dataset are standard",
        ),
    ],
)
def test_bad_expert_dataset(tiny_model, tmp_path, expert, match):
    args = cpu_config(MIXConfig, str(tmp_path))
    with pytest.raises(ValueError, match=match):
        MIXTrainer(
            model=tiny_model,
            reward_funcs=length_reward,
            args=args,
            train_dataset=toy_dataset(8),
            expert_dataset=expert,
            processing_class=build_tokenizer(),
        )


def test_mixed_formats_are_rejected():
    from trl_ext.trainers.mix.expert_data import load_expert_examples

    rows = [
        {"prompt": "a", "completion": " b"},
        {"prompt": [{"role": "user", "content": "a"}], "completion": [{"role": "assistant", "content": "b"}]},
    ]
    with pytest.raises(ValueError, match=r"mixes conversational and standard rows \(row 0 is standard, row 1"):
        load_expert_examples("X", rows)


def test_checkpoint_mid_generation_block_rewinds_the_stream(tiny_model, tmp_path):
    """steps_per_generation=2 > gradient_accumulation_steps=1: a checkpoint after step 1 is inside the block drawn
    at step 0, which a resumed run regenerates, so it records the block's start (0), not the rows drawn (4)."""
    trainer = _trainer(tiny_model, tmp_path, steps_per_generation=2, max_steps=1, save_strategy="steps", save_steps=1)
    trainer.train()
    assert trainer._expert_stream.position == 8  # 16-row generation batch: 8 demonstrations
    with open(os.path.join(tmp_path, "checkpoint-1", "trl_ext_state.json")) as f:
        assert json.load(f) == {"expert_rows_drawn": 0}


def test_streaming_prompts_and_evaluation(tiny_model, tmp_path):
    """An IterableDataset of prompts yields the rollouts' prompts only; evaluation scores rollouts alone."""
    trainer = _trainer(
        tiny_model, tmp_path, dataset=toy_dataset(32).to_iterable_dataset(), max_steps=2, per_device_eval_batch_size=8
    )
    batch, prompts = _generation_batch(trainer)
    assert len(prompts) == 4 and int(batch["expert_mask"].sum()) == 4
    trainer.train()
    metrics = trainer.evaluate(eval_dataset=toy_dataset(8))
    assert metrics["eval_expert/sft_loss"] == 0.0 and "eval_usual/pg_clipfrac" in metrics
