"""Composition: any policy loss × any advantage × KL in the loss or in the reward, on every GRPO-family config.

A composed config makes exactly the update of the built-in algorithm with the same parts (trained side by side,
parameter by parameter); the flat fields keep configuring the algorithm's own parts; every mistake is refused at
construction, naming the field; KL in the reward follows the reference (score on the last completion token minus
coef·KL(old ‖ ref) per loss token, the sum for per-sample estimators).
"""

# ruff: noqa: E501  (the table of refused compositions: one line per case)
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import trl
from trainer_helpers import CPU, algorithm_classes, cpu_config, logged, toy_trainer, train_update

import trl_ext
from trl_ext.advantages import ADVANTAGE_FNS
from trl_ext.losses import POLICY_LOSSES, get_kl_fn
from trl_ext.trainers.grpo.trainer import GRPOFamilyTrainer

GRPO_CONFIGS = algorithm_classes("grpo")


def _config(config_class, **overrides):
    return config_class(output_dir="unused", **CPU, **overrides)


def _built(config):
    return repr(config.components.policy_loss), repr(config.components.advantage_fn)


@pytest.mark.parametrize("target", sorted(GRPO_CONFIGS))
@pytest.mark.parametrize("base", ["grpo", "sapo", "rloo", "gspo"])
def test_any_config_composes_any_algorithms_parts(base, target):
    """`<Base>Config(policy_loss_fn=<target's>, advantage_fn=<target's>)` builds exactly `<Target>Config()`'s loss
    and advantage function (the composed parts take their own defaults, not the base's fields); a target's paper
    settings (DAPO's clip-higher) are its config's defaults, not its parts'."""
    spec = trl_ext.get_algorithm(target)
    composed = _config(GRPO_CONFIGS[base], policy_loss_fn=spec.policy_loss_fn, advantage_fn=spec.advantage_fn)
    parts = {**POLICY_LOSSES[spec.policy_loss_fn].default_args(), **ADVANTAGE_FNS[spec.advantage_fn].default_args()}
    # the target's own defaults (DAPO's paper settings, VESPO's TRL ε) set back to the parts' defaults, by field name
    fields = {a.name: a.field_name for c in (POLICY_LOSSES[spec.policy_loss_fn], ADVANTAGE_FNS[spec.advantage_fn])
              for a in c.arguments}  # fmt: skip
    own = (*spec.paper_settings, *spec.argument_defaults)
    papers = {fields.get(name, name): parts[name] for name, _ in own if name in parts}
    assert _built(composed) == _built(_config(GRPO_CONFIGS[target], **papers))


@pytest.mark.parametrize(
    "composed, builtin",
    [
        ((trl_ext.GRPOConfig, {"policy_loss_fn": "sapo"}), (trl_ext.SAPOConfig, {})),
        ((trl_ext.SAPOConfig, {"advantage_fn": "rloo"}), (trl_ext.RLOOConfig, {"policy_loss_fn": "sapo"})),
        (
            (trl_ext.GRPOConfig, {"policy_loss_fn": "cispo", "policy_loss_fn_args": {"clip_range_high": 0.5}}),
            (trl_ext.CISPOConfig, {"clip_range_high": 0.5}),
        ),
    ],
    ids=["grpo+sapo=sapo", "sapo+rloo=rloo+sapo", "grpo+cispo(args)=cispo(field)"],
)
def test_composed_config_makes_the_builtin_update(composed, builtin, tiny_model, tmp_path):
    """Trained side by side from the same seed: every parameter's update is identical (the same computation)."""
    updates = []
    for config_class, overrides in (composed, builtin):
        torch.manual_seed(0)
        config = cpu_config(config_class, str(tmp_path / config_class.__name__), **overrides)
        trainer = toy_trainer(
            config_class.trainer_class
            if hasattr(config_class, "trainer_class")
            else getattr(trl_ext, config_class.__name__.replace("Config", "Trainer")),
            config,
            tiny_model,
        )
        updates.append(train_update(trainer))
    first, second = updates
    assert max(u.abs().max().item() for u in first.values()) > 1e-4  # something trained
    for name in first:
        assert torch.equal(first[name], second[name]), name


def test_a_different_part_makes_a_different_update(tiny_model, tmp_path):
    """The control: GRPO's advantage and RLOO's give different updates on the same batches (SAPO's loss would not:
    on-policy its gradient is the policy gradient, as PPO's)."""
    updates = []
    for overrides in ({}, {"advantage_fn": "rloo"}):
        torch.manual_seed(0)
        config = cpu_config(trl_ext.GRPOConfig, str(tmp_path / str(len(updates))), **overrides)
        updates.append(train_update(toy_trainer(trl_ext.GRPOTrainer, config, tiny_model)))
    assert any(not torch.allclose(updates[0][n], updates[1][n], rtol=1e-3, atol=1e-7) for n in updates[0])


def test_flat_fields_configure_the_algorithms_own_parts_and_pass_on_when_taken():
    own = _config(trl_ext.GRPOConfig, clip_range=0.3, policy_loss_fn_args={"clip_ratio_c": 4.0})
    assert (own.components.policy_loss.clip_range, own.components.policy_loss.clip_ratio_c) == (0.3, 4.0)
    # loss_agg_mode is also an argument of sapo: set on the field, it reaches the composed loss
    composed = _config(trl_ext.GRPOConfig, policy_loss_fn="sapo", loss_agg_mode="seq-mean-token-mean")
    assert composed.components.policy_loss.loss_agg_mode == "seq-mean-token-mean"
    assert composed.components.loss_agg_mode == "seq-mean-token-mean"  # the KL / entropy terms follow the trained loss
    # an *_args entry equal to its field is not a contradiction
    same = _config(trl_ext.GRPOConfig, clip_range=0.3, policy_loss_fn_args={"clip_range": 0.3})
    assert same.components.policy_loss.clip_range == 0.3
    # advantage arguments by the component's names (the field is `advantage_epsilon`)
    eps = _config(trl_ext.SAPOConfig, advantage_fn_args={"epsilon": 1e-3})
    assert eps.components.advantage_fn.epsilon == 1e-3


BAD = [
    ({"policy_loss_fn": "nope"}, r"policy_loss_fn='nope' is not valid; must be one of 'a2po', 'cispo'"),
    ({"advantage_fn": "nope"}, r"advantage_fn='nope' is not valid; must be one of "),
    ({"policy_loss_fn": "sapo", "policy_loss_fn_args": {"clip_range": 0.2}}, r"policy_loss_fn_args has 'clip_range', which 'sapo' does not take; its arguments: tau_pos"),
    ({"advantage_fn_args": {"tau": 2.0}}, r"advantage_fn_args has 'tau', which 'grpo' does not take"),
    ({"policy_loss_fn": "sapo", "clip_range": 0.3}, r"clip_range=0.3 is an argument of the grpo algorithm's 'ppo', but policy_loss_fn='sapo' replaces it"),
    ({"advantage_fn": "rloo", "std_threshold": 0.1}, r"std_threshold=0.1 is an argument of the grpo algorithm's 'grpo', but advantage_fn='rloo'"),
    ({"clip_range": 0.3, "policy_loss_fn_args": {"clip_range": 0.25}}, r"clip_range=0.3 and policy_loss_fn_args\['clip_range'\]=0.25 set the same argument"),
    ({"policy_loss_fn_args": {"clip_range": -1.0}}, r"clip_range=-1.0 is not valid"),
    ({"policy_loss_fn_args": "{not json"}, r"policy_loss_fn_args='\{not json' must be a dict"),
    ({"policy_loss_fn": "mix"}, r"policy_loss_fn='mix' cannot train in the grpo family's trainer: it needs `expert_mask`"),
    ({"policy_loss_fn": "dpo"}, r"policy_loss_fn='dpo' cannot train in the grpo family's trainer: it needs `ref_logprob`"),
    ({"advantage_fn": "on_policy_distill"}, r"it needs `teacher_logprob`, a teacher's per-token log-probs, which only the on-policy distillation trainer"),
    ({"advantage_fn": "step_wise_grpo", "turns_as_samples": True}, r"turns_as_samples=True changes only the seq-mean-\* aggregations, but loss_agg_mode is 'token-mean'"),
    ({"loss_type": "dapo", "policy_loss_fn": "sapo"}, r"loss_type selects TRL's own loss and policy_loss_fn='sapo' selects trl_ext's"),
    ({"kl_penalty_fn": "k4"}, r"kl_penalty_fn='k4' is not valid"),
    ({"kl_penalty_fn": "k1", "kl_penalty_fn_args": {"kl_coef": -0.1}}, r"kl_penalty_fn_args\['kl_coef'\]=-0.1 is not valid; must be >= 0"),
    ({"kl_penalty_fn": "k1", "kl_penalty_fn_args": {"adaptive": True}}, r"kl_penalty_fn_args\['adaptive'\]=True needs target_kl and horizon"),
    ({"kl_penalty_fn": "k1", "kl_penalty_fn_args": {"coef": 0.1}}, r"kl_penalty_fn_args has 'coef'; its keys: kl_coef, adaptive, target_kl, horizon"),
    ({"kl_penalty_fn_args": {"kl_coef": 0.1}}, r"kl_penalty_fn='none' applies no KL penalty"),
    ({"scale_rewards": "batch", "advantage_fn": "rloo"}, r"advantage function `rloo` does not divide by a reward std"),
]  # fmt: skip


@pytest.mark.parametrize("overrides, message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_composition_is_refused_at_construction(overrides, message):
    with pytest.raises(ValueError, match=message):
        _config(trl_ext.GRPOConfig, **overrides)


def test_no_reference_model_no_kl_in_the_reward():
    with pytest.raises(ValueError, match=r"kl_penalty_fn='k1' adds a KL term to a reference model, but the asymre"):
        _config(trl_ext.AsymREConfig, kl_penalty_fn="k1")
    with pytest.raises(ValueError, match=r"kl_penalty_fn='k2' adds a KL term to a reference model, but the on_p"):
        _config(trl_ext.OnPolicyDistillConfig, kl_penalty_fn="k2")


def test_args_from_the_command_line_and_yaml(tmp_path):
    """The *_args dicts are JSON objects on the command line and mappings in a YAML recipe."""
    from trl import TrlParser

    parser = TrlParser([trl_ext.GRPOConfig])
    (args,) = parser.parse_args_and_config(
        [
            "--output_dir", str(tmp_path), "--use_cpu", "true", "--bf16", "false",
            "--policy_loss_fn", "sapo", "--policy_loss_fn_args", json.dumps({"tau_pos": 1.5, "tau_neg": 2.0}),
            "--kl_penalty_fn", "k2", "--kl_penalty_fn_args", '{"kl_coef": 0.01}',
        ]
    )  # fmt: skip
    loss = args.components.policy_loss
    assert (type(loss).__name__, loss.tau_pos, loss.tau_neg) == ("SAPOPolicyLoss", 1.5, 2.0)
    assert args.components.kl_penalty_fn.kl_coef == 0.01
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"output_dir: {tmp_path}\nuse_cpu: true\nbf16: false\nadvantage_fn: opmd\n"
        "advantage_fn_args:\n  opmd_baseline: logavgexp\n  tau: 0.5\n"
    )
    (args,) = TrlParser([trl_ext.SAPOConfig]).parse_args_and_config(["--config", str(recipe)])
    fn = args.components.advantage_fn
    assert (fn.name, fn.opmd_baseline, fn.tau) == ("opmd", "logavgexp", 0.5)


def test_composition_is_named_in_summary_parts():
    parts = _config(
        trl_ext.SAPOConfig, advantage_fn="rloo", kl_penalty_fn="k1", kl_loss_fn="k2", beta=0.01
    ).composition()
    assert parts["policy loss"] == "sapo"
    assert parts["advantage"] == "rloo, composed (the algorithm's: grpo)"
    assert parts["KL in the reward"] == "k1, coefficient 0.001"
    assert parts["KL in the loss"] == "k2, beta 0.01"


# ---- KL in the reward ----------------------------------------------------------------------------------------------


class _Appender(dict):
    def __missing__(self, key):
        self[key] = []
        return self[key]


def _penalty_host(kl_fn):
    """What `_penalized_rewards` reads of a trainer."""
    metrics = {"train": _Appender(), "eval": _Appender()}
    host = SimpleNamespace(kl_penalty_fn=kl_fn, model=SimpleNamespace(training=True), metric_log=metrics.__getitem__)
    return host, metrics


def test_kl_penalty_places_the_score_and_subtracts_the_kl_as_the_reference():
    """Rows of different lengths, a tool-output gap inside the completion: the score sits on the last completion
    token, the KL counts on the loss tokens only; per-sample estimators get score − coef·Σ KL."""
    torch.manual_seed(0)
    old, ref = torch.randn(3, 5, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)
    completion = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)
    loss_mask = completion.clone()
    loss_mask[2, 1] = False  # a tool output inside the third completion
    rewards = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)
    gathered = {"completion_mask": completion, "response_mask": loss_mask, "logprobs": old, "ref_logprobs": ref}
    host, metrics = _penalty_host(get_kl_fn("k1", kl_coef=0.1))
    tokens = GRPOFamilyTrainer._penalized_rewards(host, rewards, gathered, takes_tokens=True)
    kl = (old - ref) * loss_mask
    expected = -0.1 * kl
    for row, last in enumerate([4, 2, 3]):
        expected[row, last] += rewards[row]
    torch.testing.assert_close(tokens, expected)
    summed = GRPOFamilyTrainer._penalized_rewards(host, rewards, gathered, takes_tokens=False)
    torch.testing.assert_close(summed, rewards - 0.1 * kl.sum(1))
    row_means = kl.sum(1) / loss_mask.sum(1)
    assert metrics["train"]["advantage/kl"][0] == pytest.approx(row_means.mean().item())
    assert metrics["train"]["advantage/kl_coef"] == [0.1, 0.1]


def test_adaptive_kl_penalty_moves_the_coefficient_in_training_only():
    old, ref = torch.zeros(2, 3), torch.full((2, 3), -1.0)  # k1 = 1 everywhere: above the target
    mask = torch.ones(2, 3, dtype=torch.bool)
    gathered = {"completion_mask": mask, "response_mask": mask, "logprobs": old, "ref_logprobs": ref}
    fn = get_kl_fn("k1", kl_coef=0.1, adaptive=True, target_kl=0.5, horizon=10)
    host, _ = _penalty_host(fn)
    GRPOFamilyTrainer._penalized_rewards(host, torch.zeros(2), gathered, takes_tokens=False)
    assert fn.kl_coef == pytest.approx(0.1 * (1 + 0.2 * 2 / 10))  # error clipped at +0.2, 2 sequences
    host.model.training = False
    GRPOFamilyTrainer._penalized_rewards(host, torch.zeros(2), gathered, takes_tokens=False)
    assert fn.kl_coef == pytest.approx(0.1 * (1 + 0.2 * 2 / 10))


@pytest.mark.parametrize("config_class", [trl_ext.GRPOConfig, trl_ext.ReinforcePlusPlusConfig])
def test_kl_in_the_reward_trains_with_a_reference_model_and_no_kl_term(config_class, tiny_model, tmp_path, monkeypatch):
    config = cpu_config(config_class, str(tmp_path), kl_penalty_fn="k2", kl_penalty_fn_args={"kl_coef": 0.05})
    seen = []  # TRL's constructor sees the config as the user made it: the reference is built explicitly
    trl_init = trl.GRPOTrainer.__init__
    monkeypatch.setattr(
        trl.GRPOTrainer, "__init__", lambda self, *a, **k: seen.append(a[2].beta) or trl_init(self, *a, **k)
    )
    trainer = toy_trainer(getattr(trl_ext, config_class.__name__.replace("Config", "Trainer")), config, tiny_model)
    assert seen == [0.0]
    assert trainer.ref_model is not None and trainer.beta == 0.0 and config.beta == 0.0
    trainer.train()
    kls = logged(trainer, "advantage/kl")
    assert len(kls) == 2 and kls[0] == 0.0 < kls[1]  # the policy starts at the reference, then moves
    assert logged(trainer, "advantage/kl_coef") == [0.05, 0.05]
    assert "kl" not in trainer.state.log_history[0]  # no KL term in the loss


def test_kl_in_the_reward_refuses_sync_ref_model(tiny_model, tmp_path):
    config = cpu_config(trl_ext.GRPOConfig, str(tmp_path), kl_penalty_fn="k2", sync_ref_model=True)
    with pytest.raises(ValueError, match=r"sync_ref_model=True updates TRL's reference model, which TRL builds only"):
        toy_trainer(trl_ext.GRPOTrainer, config, tiny_model)


def test_distillation_with_a_reference_model_refuses_kl_in_the_reward():
    """A distillation record that keeps a reference model still cannot take the KL penalty: its advantage is computed
    from teacher log-probs, so the penalty would be silently ignored."""
    import dataclasses

    from trl_ext.algorithms import ALGORITHMS

    spec = trl_ext.register_algorithm(
        dataclasses.replace(
            trl_ext.get_algorithm("on_policy_distill"), name="distill_with_ref", use_reference=True,
            class_prefix="DistillWithRef",
        )
    )  # fmt: skip
    try:
        with pytest.raises(ValueError, match=r"kl_penalty_fn='k1' subtracts a KL from the rewards, but the distill"):
            _config(spec.config_class, kl_penalty_fn="k1")
    finally:
        del ALGORITHMS["distill_with_ref"]
