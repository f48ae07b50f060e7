"""One record per algorithm: a loss and an algorithm defined outside trl_ext, through the public API only, get a
generated config (fields from the loss's argument specs), a generated trainer that trains, package exports, `trl-ext
list` and model-card entries. The built-in algorithms' classes come from their records the same way."""

from __future__ import annotations

import dataclasses
import os
import pickle
from typing import ClassVar

import pytest
import torch
from trainer_helpers import changed, cpu_config, length_reward, logged, snapshot

import trl_ext
from trl_ext import ALGORITHMS, Paper, get_algorithm, register_algorithm
from trl_ext.components import MEAN, SHARE, Argument
from trl_ext.losses import POLICY_LOSSES, PolicyLoss, register_policy_loss
from trl_ext.toy import build_tokenizer, toy_dataset

NAME = "capped_pg"


class CappedPolicyGradient(PolicyLoss):
    """L = −A·min(r, max_ratio), token mean: a policy gradient whose ratio is capped from above (defined here, as a
    user would, with the public API)."""

    arguments = (
        Argument("max_ratio", 2.0, "Upper cap of the importance ratio r = π/π_old.", gt=1),
        Argument("loss_agg_mode", "token-mean", "How the per-token loss is reduced.", choices=("token-mean",)),
    )
    metrics: ClassVar[dict[str, str]] = {"capped_pg_loss": SHARE, "capped_frac": MEAN}

    def __call__(self, logprob, old_logprob, action_mask, advantages, **kwargs):
        batch = self.masked_batch(logprob, action_mask, kwargs)
        adv = batch.advantages(advantages)
        ratio = torch.exp(batch.select(logprob - batch.check("old_logprob", old_logprob)).clamp(-20, 20))
        loss = batch.aggregate(batch.select(-adv * ratio.clamp(max=self.max_ratio)), self.loss_agg_mode)
        return loss, {"capped_pg_loss": loss.detach(), "capped_frac": batch.valid_mean(ratio > self.max_ratio)}


@pytest.fixture(scope="module")
def outside_algorithm():
    """Register the loss and an algorithm record for it (GRPO's advantages and flags), and remove both after."""
    register_policy_loss(NAME)(CappedPolicyGradient)
    spec = register_algorithm(
        dataclasses.replace(
            get_algorithm("grpo"),
            name=NAME,
            description="Capped-ratio policy gradient with group-normalized advantages.",
            paper=Paper("A test algorithm", "2501.00001"),
            policy_loss_fn=NAME,
            class_prefix="CappedPG",
            display_name="Capped PG",
            details="",
            trl_losses=False,
        )
    )
    yield spec
    del ALGORITHMS[NAME], POLICY_LOSSES[NAME]


def test_the_outside_algorithm_gets_a_config_from_its_loss_and_advantage_specs(outside_algorithm):
    config_class = outside_algorithm.config_class
    assert config_class.__name__ == "CappedPGConfig" and config_class.algorithm == NAME
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    assert fields["max_ratio"].default == 2.0
    assert fields["max_ratio"].metadata["help"] == "Upper cap of the importance ratio r = π/π_old."
    assert fields["advantage_epsilon"].default == 1e-6  # GRPO's advantage arguments, by their config names
    assert "Capped-ratio policy gradient" in config_class.__doc__ and "max_ratio (`float`" in config_class.__doc__
    with pytest.raises(ValueError, match=r"CappedPGConfig \(policy loss\): capped_pg: max_ratio=0.5 is not valid"):
        cpu_config(config_class, "unused", max_ratio=0.5)
    with pytest.raises(ValueError, match=r"CappedPGConfig: loss_type='dapo' is a trl\.GRPOConfig field"):
        cpu_config(config_class, "unused", loss_type="dapo")


def test_the_outside_algorithm_trains_with_its_generated_trainer(outside_algorithm, random_tiny_model, tmp_path):
    trainer_class = outside_algorithm.trainer_class
    assert trainer_class.__name__ == "CappedPGTrainer" and trainer_class.config_class is outside_algorithm.config_class
    assert trl_ext.CappedPGTrainer is trainer_class and trl_ext.CappedPGConfig is trainer_class.config_class
    config = cpu_config(trainer_class.config_class, "unused", max_ratio=1.5)
    assert pickle.loads(pickle.dumps(config)).max_ratio == 1.5  # HF checkpoints pickle the config
    assert isinstance(trainer_class.__mro__[1], type) and issubclass(trainer_class, trl_ext.GRPOFamilyTrainer)
    trainer = trainer_class(
        model=random_tiny_model,
        reward_funcs=length_reward,
        args=cpu_config(
            trainer_class.config_class, str(tmp_path), max_ratio=1.5, max_steps=2, save_strategy="steps", save_steps=2
        ),
        train_dataset=toy_dataset(32),
        processing_class=build_tokenizer(),
    )
    assert isinstance(trainer.policy_loss_fn, CappedPolicyGradient) and trainer.policy_loss_fn.max_ratio == 1.5
    before = snapshot(trainer.model)
    trainer.train()
    assert changed(before, trainer.model)
    losses, fractions = logged(trainer, "capped_pg_loss"), logged(trainer, "capped_frac")
    assert len(losses) == 2 and len(fractions) == 2
    assert all(0.0 <= f <= 1.0 for f in fractions)
    assert logged(trainer, "policy_loss") == pytest.approx(losses)  # the declared SHARE metric is the window's loss
    card = open(os.path.join(str(tmp_path), "README.md"), encoding="utf-8").read()  # written with the checkpoint
    assert "Capped PG" in card and "A test algorithm" in card and "`max_ratio` | `1.5`" in card


def test_the_outside_algorithm_is_listed(outside_algorithm):
    from trl_ext.cli import list_algorithms

    listing = list_algorithms()
    line = next(line for line in listing.splitlines() if line.strip().startswith(NAME))
    assert line.split() == [NAME, "CappedPGTrainer", NAME, "/", "grpo", "arXiv", "2501.00001"]
    from trl_ext.cli import describe_algorithm

    assert "max_ratio=2.0" in describe_algorithm(NAME)
    assert "CappedPGTrainer" in trl_ext.__all__ or "CappedPGTrainer" in dir(trl_ext)


def test_register_algorithm_rejects_duplicates_and_unknown_components(outside_algorithm):
    with pytest.raises(ValueError, match=f"algorithm '{NAME}' is already registered"):
        register_algorithm(outside_algorithm)
    with pytest.raises(ValueError, match="policy_loss_fn='no_such_loss' is not registered"):
        register_algorithm(
            dataclasses.replace(outside_algorithm, name="other", policy_loss_fn="no_such_loss", class_prefix="Other")
        )
    with pytest.raises(ValueError, match="CappedPGConfig, CappedPGTrainer already name algorithm 'capped_pg'"):
        register_algorithm(dataclasses.replace(outside_algorithm, name="other"))
    families = "grpo, mix, distill, critic, async, dpo, sft, cpt"
    with pytest.raises(ValueError, match=f"unknown trainer family 'ppo'; registered: {families}"):
        dataclasses.replace(outside_algorithm, trainer="ppo")
    with pytest.raises(ValueError, match="policy loss 'capped_pg' is already registered"):
        register_policy_loss(NAME)(CappedPolicyGradient)
    assert "other" not in ALGORITHMS


@pytest.mark.parametrize("name", [n for n, s in ALGORITHMS.items() if s.trainer in ("grpo", "mix", "distill")])
def test_builtin_configs_are_built_from_their_records(name):
    """Every built-in GRPO-family config has exactly the record's loss and advantage argument fields (by their
    config names, with the specs' defaults) on top of its family's base."""
    from trl_ext.advantages import ADVANTAGE_FNS
    from trl_ext.losses.kl import KLFn
    from trl_ext.trainers.core.arguments import algorithm_fields, config_arguments
    from trl_ext.trainers.core.family_classes import get_family_classes

    spec = get_algorithm(name)
    config_class = spec.config_class
    assert config_class.__name__ == spec.class_names[0] and config_class.algorithm == name
    base_fields = {f.name for f in dataclasses.fields(get_family_classes(spec.trainer).config_base)}
    own = {f.name: f for f in dataclasses.fields(config_class)}
    papers = dict(spec.paper_settings)  # DAPO: the paper's settings, beside Trinity-RFT's record
    own_defaults = {**dict(spec.argument_defaults), **papers}  # the record's own defaults (VESPO: TRL's ε)
    for component in [POLICY_LOSSES[spec.policy_loss_fn], ADVANTAGE_FNS.get(spec.advantage_fn), KLFn]:
        for argument in config_arguments(component) if component else ():
            field = own[argument.field_name]
            if argument.config_unset:
                assert field.default is None, argument
            else:
                assert field.default == own_defaults.get(argument.name, argument.default), argument
            assert field.metadata["help"].startswith(argument.help), argument
    assert set(own) == base_fields | {field_name for field_name, _, _ in algorithm_fields(name)}
    for field_name in papers.keys() & base_fields:  # a family setting: the base's field, the paper's default
        assert own[field_name].default == papers[field_name] and "the DAPO paper's" in own[field_name].metadata["help"]
    assert str(spec.paper) in " ".join(config_class.__doc__.split())  # wrapped to the line width
    assert own["kl_loss_fn"].default == spec.kl_loss_fn


def test_kl_fields_come_from_the_kl_specs():
    """The KL term's config fields are its `Argument` specs (type, default, range), named by their config names;
    its coefficient is the family's own field (TRL's `beta`, DPO's `kl_coef`)."""
    import trl_ext
    from trl_ext.losses.kl import KL_FNS, KLFn
    from trl_ext.trainers.core.arguments import config_arguments

    generated = [spec.field_name for spec in config_arguments(KLFn)]
    assert generated == ["adaptive_kl", "target_kl", "kl_horizon"]
    fields = {f.name: f for f in dataclasses.fields(trl_ext.SAPOConfig)}
    # (HfArgumentParser rewrites an Optional field's type to the bare type once a parser is built on the class)
    assert fields["kl_horizon"].type in (int, int | None) and fields["target_kl"].type in (float, float | None)
    assert (
        fields["kl_loss_fn"].metadata["choices"]
        == sorted(KL_FNS)
        == trl_ext.DPOConfig.__dataclass_fields__["kl_loss_fn"].metadata["choices"]
    )
    assert not set(generated) & {f.name for f in dataclasses.fields(trl_ext.DPOConfig)}  # DPO: no adaptive KL
    # validation from the spec, reported by the config field's name
    with pytest.raises(ValueError, match=r"SAPOConfig: kl_horizon=1000.5 is not valid; must be an integer > 0"):
        trl_ext.SAPOConfig(output_dir="out", use_cpu=True, kl_horizon=1000.5)
    config = trl_ext.SAPOConfig(
        output_dir="out", use_cpu=True, kl_loss_fn="k2", beta=0.1, adaptive_kl=True, target_kl=0.05, kl_horizon=300
    )
    kl = config.components.kl_fn
    assert (kl.kl_coef, kl.adaptive, kl.target_kl, kl.horizon) == (0.1, True, 0.05, 300)
