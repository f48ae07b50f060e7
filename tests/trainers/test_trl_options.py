"""A `trl.GRPOConfig` user's options, unchanged, after the one-line import swap.

1. `trl_ext.GRPOTrainer` with TRL's own loss selection (`loss_type`, `epsilon`, `delta`, ...) and TRL's options that
   do not select the loss (`scale_rewards`, GDPO's aggregation, `top_entropy_quantile`, `off_policy_mask_threshold`,
   the entropy bonus and its adaptive control, `use_bias_correction_kl`) makes the same updates as
   `trl.GRPOTrainer` given the very same settings, step by step.
2. Every algorithm trainer (SAPO, CISPO, MIX, distillation, ...) accepts the options orthogonal to its loss, and
   each option has its effect there.
3. `steps_per_generation` that is not a multiple of the accumulation steps: windows that span two generation
   batches are normalized over exactly their own tokens.

SGD without gradient clipping makes the update −lr × gradient, so a gradient difference shows directly.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
import trl
from trainer_helpers import cpu_config, length_reward, logged, snapshot, toy_trainer, train_update

import trl_ext
from trl_ext.losses.trl_grpo import TRL_LOSS_TYPES, TRLGRPOLoss
from trl_ext.toy import build_tokenizer, toy_dataset, toy_expert_dataset

SGD = {
    "optim": "sgd",
    "learning_rate": 0.05,
    "max_grad_norm": 0.0,
    "lr_scheduler_type": "constant",
    "per_device_train_batch_size": 16,
    "max_steps": 2,
}


def vowel_reward(completions, **kwargs) -> list[float]:
    """A second objective for multi-reward options: the share of vowels."""
    return [sum(ch in "aeiou" for ch in c) / max(len(c), 1) for c in completions]


def _train(trainer_class, config, model_path, reward_funcs=length_reward):
    trainer = toy_trainer(trainer_class, config, model_path, reward_funcs)
    return trainer, train_update(trainer)


# id -> the TRL settings (identical for both trainers)
TRL_CASES = {
    **{loss_type: {"loss_type": loss_type} for loss_type in TRL_LOSS_TYPES},
    "luspo-sequence": {"loss_type": "luspo", "importance_sampling_level": "sequence"},
    "grpo-sequence-clip-higher": {
        "loss_type": "grpo",
        "importance_sampling_level": "sequence",
        "epsilon": 3e-4,
        "epsilon_high": 4e-4,
    },
    "dapo-delta-2-iterations": {"loss_type": "dapo", "delta": 1.5, "num_iterations": 2},
    "sapo-temperatures-2-iterations": {
        "loss_type": "sapo",
        "sapo_temperature_pos": 2.0,
        "sapo_temperature_neg": 3.0,
        "num_iterations": 2,
    },
    "cispo-2-iterations": {"loss_type": "cispo", "epsilon_high": 1.05, "num_iterations": 2},
    "vespo-2-iterations": {"loss_type": "vespo", "vespo_k_pos": 1.0, "num_iterations": 2},
    "bias-corrected-kl": {"loss_type": "dapo", "beta": 0.05, "use_bias_correction_kl": True, "num_iterations": 2},
    "kl-grpo": {"loss_type": "grpo", "beta": 0.05},
    "scale-rewards-batch": {"loss_type": "dapo", "scale_rewards": "batch"},
    "scale-rewards-none": {"loss_type": "dr_grpo", "scale_rewards": False},
    "gdpo": {"loss_type": "dapo", "multi_objective_aggregation": "normalize_then_sum", "reward_weights": [1.0, 2.0]},
    "top-entropy-quantile": {"loss_type": "dapo", "top_entropy_quantile": 0.2, "entropy_coef": 0.1},
    "off-policy-mask": {"loss_type": "grpo", "off_policy_mask_threshold": 1e-3, "num_iterations": 2},
    "entropy-bonus-grpo": {"loss_type": "grpo", "entropy_coef": 0.1},
    "adaptive-entropy": {
        "loss_type": "dapo",
        "use_adaptive_entropy": True,
        "entropy_coef": 0.05,
        "entropy_target": 0.0,  # every step's entropy is above: the bonus is off and the coefficient decreases
        "entropy_coef_delta": 0.01,
    },
    "accumulation-dapo": {"loss_type": "dapo", "gradient_accumulation_steps": 2, "per_device_train_batch_size": 8},
    "accumulation-grpo": {"loss_type": "grpo", "gradient_accumulation_steps": 2, "per_device_train_batch_size": 8},
}


@pytest.mark.parametrize("case", list(TRL_CASES))
def test_trl_settings_make_trls_update(case, tiny_model, tmp_path, float_tolerance):
    settings = {**SGD, **TRL_CASES[case]}
    rewards = [length_reward, vowel_reward] if "reward_weights" in settings else length_reward
    ours, ours_update = _train(
        trl_ext.GRPOTrainer, cpu_config(trl_ext.GRPOConfig, str(tmp_path / "ours"), **settings), tiny_model, rewards
    )
    assert ours.args.uses_trl_loss and isinstance(ours.policy_loss_fn, TRLGRPOLoss)
    theirs, theirs_update = _train(
        trl.GRPOTrainer, cpu_config(trl.GRPOConfig, str(tmp_path / "trl"), **settings), tiny_model, rewards
    )
    # Same samples and rewards (same seed, same generation) ...
    assert logged(ours, "reward") == logged(theirs, "reward")
    # ... the same metrics TRL logs for the options ...
    # (the masks of top_entropy_quantile / off_policy_mask_threshold zero the advantages of the tokens they drop,
    # so trl_ext's clip fractions count only the tokens that train)
    masked = "off_policy_mask_threshold" in settings or "top_entropy_quantile" in settings
    clip_ratios = ("clip_ratio/low_mean", "clip_ratio/low_min", "clip_ratio/high_mean", "clip_ratio/high_max")
    # float32 token means of terms of order one (ratios, clip indicators, exp(Δ)) over the run's tokens
    tol = float_tolerance(torch.float32, logged(theirs, "num_tokens")[-1])
    for key in ("entropy_coef", "clip_ratio/region_mean", *clip_ratios, "cispo_clip_ratio", "vespo/phi_seq_mean", "kl"):
        if logged(theirs, key) and not (masked and key.startswith("clip_ratio")):
            assert logged(ours, key) == pytest.approx(logged(theirs, key), rel=tol["rtol"], abs=tol["atol"]), key
    if "use_adaptive_entropy" in settings:
        assert ours.loss_step.entropy.coef == pytest.approx(theirs.entropy_coef) == pytest.approx(0.03)
    # ... and the same updates of every parameter.
    total = torch.cat([u.flatten() for u in theirs_update.values()])
    assert total.norm() > 1e-4
    for name, update in ours_update.items():
        torch.testing.assert_close(update, theirs_update[name], rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def test_trl_clip_extremes_are_over_sequences_with_tokens():
    """`clip_ratio/low_min` / `high_max`: the smallest / largest per-sequence share of clipped tokens (TRL's), over
    the sequences that have a token; NaN without any."""
    loss = TRLGRPOLoss(loss_type="dapo", epsilon=0.2)
    mask = torch.tensor([[1, 1], [1, 0], [0, 0]])
    ratios = torch.tensor([[0.5, 1.0], [0.5, 1.0], [0.5, 0.5]])  # the first token of each sequence is clipped
    for sign, key, expected in ((-1.0, "clip_ratio/low_min", 0.5), (1.0, "clip_ratio/high_max", 0.0)):
        _, metrics = loss(
            logprob=ratios.log(), old_logprob=torch.zeros(3, 2), action_mask=mask, advantages=torch.full((3,), sign)
        )
        assert metrics[key].item() == pytest.approx(expected), key  # rows: 1/2, 1/1 (the empty one left out)
    _, metrics = loss(
        logprob=torch.full((3, 2), 2.0).log(), old_logprob=torch.zeros(3, 2), action_mask=mask, advantages=torch.ones(3)
    )
    assert metrics["clip_ratio/high_max"].item() == 1.0 and metrics["clip_ratio/low_min"].item() == 0.0
    _, metrics = loss(
        logprob=ratios.log(), old_logprob=torch.zeros(3, 2), action_mask=mask * 0, advantages=-torch.ones(3)
    )
    assert torch.isnan(metrics["clip_ratio/low_min"]) and torch.isnan(metrics["clip_ratio/high_max"])


# ---------------------------------------------------------------------------------------------------------------
# 2. The options orthogonal to the loss, in the algorithm trainers
# ---------------------------------------------------------------------------------------------------------------

ORTHOGONAL = {
    "scale_rewards": {"scale_rewards": "none"},
    "gdpo": {"multi_objective_aggregation": "normalize_then_sum"},
    "top_entropy_quantile": {"top_entropy_quantile": 0.25},
    "off_policy_mask": {"off_policy_mask_threshold": -1e9},  # drops every negative-advantage sequence
    "adaptive_entropy": {
        "use_adaptive_entropy": True,
        "entropy_loss_fn": "default",
        "entropy_target": 100.0,
        "entropy_coef_delta": 0.01,
    },
    "bias_corrected_kl": {"beta": 0.05, "kl_loss_fn": "k3", "use_bias_correction_kl": True, "num_iterations": 2},
    "mask_truncated": {"mask_truncated_completions": True},
}


def _algorithm_run(algorithm, tmp_path, tiny_model, teacher, **settings):
    spec = trl_ext.get_algorithm(algorithm)
    config = cpu_config(spec.config_class, str(tmp_path), **{**SGD, "per_device_train_batch_size": 8, **settings})
    kwargs = {}
    if spec.trainer == "mix":
        kwargs["expert_dataset"] = toy_expert_dataset(16)
    if spec.trainer == "distill":
        kwargs["teacher_model"] = teacher
    trainer = spec.trainer_class(
        model=tiny_model,
        reward_funcs=[length_reward, vowel_reward],
        args=config,
        train_dataset=toy_dataset(32),
        processing_class=build_tokenizer(),
        **kwargs,
    )
    before = snapshot(trainer.model)
    trainer.train()
    update = torch.cat([(p.detach() - before[n]).flatten() for n, p in trainer.model.named_parameters()])
    return trainer, update


@pytest.mark.parametrize("option", list(ORTHOGONAL))
@pytest.mark.parametrize("algorithm", ["sapo", "cispo", "mix_chord", "on_policy_distill"])
def test_orthogonal_options_compose_with_every_algorithm(
    algorithm, option, tiny_model, tiny_teacher, tmp_path, float_tolerance
):
    settings = ORTHOGONAL[option]
    if "beta" in settings and not trl_ext.get_algorithm(algorithm).use_reference:  # no reference model: no KL term
        with pytest.raises(ValueError, match="adds a KL term to a reference model"):
            cpu_config(trl_ext.get_algorithm(algorithm).config_class, str(tmp_path), **settings)
        return
    if option == "scale_rewards" and trl_ext.get_algorithm(algorithm).advantage_fn != "grpo":
        with pytest.raises(ValueError, match="does not divide by a reward std"):
            cpu_config(trl_ext.get_algorithm(algorithm).config_class, str(tmp_path), **settings)
        return
    trainer, update = _algorithm_run(algorithm, tmp_path / "with", tiny_model, tiny_teacher, **settings)
    assert torch.isfinite(update).all()
    if option == "adaptive_entropy":  # entropy below the target at every step: +delta per optimizer step
        assert trainer.loss_step.entropy.coef == pytest.approx(0.01 * trainer.state.global_step)
        assert logged(trainer, "entropy_coef")[-1] == pytest.approx(trainer.loss_step.entropy.coef)
        return
    distill_rewards = option == "gdpo" and algorithm == "on_policy_distill"  # rewards only logged (reward_weight 0)
    if option in ("top_entropy_quantile", "off_policy_mask", "bias_corrected_kl", "gdpo") and not distill_rewards:
        # the option changes the update (same seed, same samples)
        plain = {k: v for k, v in settings.items() if k in ("num_iterations", "beta", "kl_loss_fn")}
        if option == "bias_corrected_kl":
            plain["use_bias_correction_kl"] = False
        _, reference = _algorithm_run(algorithm, tmp_path / "without", tiny_model, tiny_teacher, **plain)
        # by more than float32 rounding: sums over the run's tokens, of the weights (up to max |p|) plus the update
        weights = max(p.abs().max() for p in trainer.model.parameters())
        tol = float_tolerance(torch.float32, logged(trainer, "num_tokens")[-1], weights + reference.abs().max())
        assert not torch.allclose(update, reference, rtol=1e-3, atol=tol["atol"]), option


@pytest.mark.parametrize(
    ("trainer_class", "config_class"),
    [
        (trl.GRPOTrainer, trl.GRPOConfig),
        (trl_ext.SAPOTrainer, trl_ext.SAPOConfig),
        (trl_ext.GRPOTrainer, trl_ext.GRPOConfig),
    ],
    ids=["trl", "sapo", "trl_ext-grpo"],
)
def test_use_liger_kernel_is_trls_layer_kernel_switch(trainer_class, config_class, tiny_model, tmp_path):
    """TRL 1.16 applies Liger's layer kernels (not a fused loss) when training starts, with the fused linear
    cross-entropy off: every trainer accepts the switch and hands it to TRL unchanged."""
    config = cpu_config(config_class, str(tmp_path), use_liger_kernel=True, max_steps=1)
    with pytest.warns(FutureWarning, match="use_liger_kernel=True` is deprecated"):
        trainer = toy_trainer(trainer_class, config, tiny_model, rows=8)
    assert trainer.args.liger_kernel_config == {"fused_linear_cross_entropy": False}
    if importlib.util.find_spec("liger_kernel") is None:  # the CPU test machines: HF Trainer asks for the package
        with pytest.raises(ImportError, match="pip install liger-kernel"):
            trainer.train()


# ---------------------------------------------------------------------------------------------------------------
# 3. steps_per_generation not a multiple of the accumulation steps: exact window counts
# ---------------------------------------------------------------------------------------------------------------


def test_windows_spanning_generation_batches_count_their_own_tokens(tiny_model, tmp_path):
    """3 micro-batches per generation, 2 per optimizer window: every other window spans two generation batches.
    Each window's `global_valid_toks` / `global_valid_seqs` must be those of exactly its own micro-batches."""
    config = cpu_config(
        trl_ext.SAPOConfig,
        str(tmp_path),
        **{
            **SGD,
            "per_device_train_batch_size": 4,
            "gradient_accumulation_steps": 2,
            "steps_per_generation": 3,
            "max_steps": 3,
        },
    )
    seen = []

    class Spy(trl_ext.SAPOTrainer):
        def _compute_loss(self, model, inputs):
            mask = inputs["completion_mask"]
            seen.append(
                (
                    mask.sum().item(),
                    mask.size(0),
                    inputs["global_valid_toks"].item(),
                    inputs["global_valid_seqs"].item(),
                )
            )
            return super()._compute_loss(model, inputs)

    trainer = Spy(
        model=tiny_model,
        reward_funcs=length_reward,
        args=config,
        train_dataset=toy_dataset(32),
        processing_class=build_tokenizer(),
    )
    trainer.train()
    assert len(seen) == 6  # 3 optimizer steps × 2 micro-batches, over two generation batches
    for first, second in zip(seen[::2], seen[1::2], strict=True):
        assert first[2] == second[2] == first[0] + second[0]
        assert first[3] == second[3] == first[1] + second[1] == 8
    assert len({window[2] for window in seen[::2]}) > 1  # the windows differ (the check is not vacuous)
