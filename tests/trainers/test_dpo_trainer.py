"""The DPO trainer: trl.DPOTrainer with trl_ext's DPO loss and the KL term (tiny model, CPU). TRL's loss options, one
by one against trl.DPOTrainer, are in test_dpo_trl_losses.py; 2 processes against 1, in
tests/distributed/test_dpo_window.py."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import trl
from trainer_helpers import CPU, changed, logged, snapshot
from transformers import AutoModelForCausalLM

import trl_ext
from trl_ext import DPOConfig, DPOTrainer
from trl_ext.losses.dpo import TRLDPOLoss
from trl_ext.toy import build_tokenizer, toy_preference_dataset


def _config(cls, out, **overrides):
    settings = {**CPU, "output_dir": str(out), "per_device_train_batch_size": 4, "max_steps": 1, "learning_rate": 1e-3}
    return cls(**{**settings, **overrides})


def _trainer(model, out, dataset=None, **overrides):
    return DPOTrainer(
        model=model,
        args=_config(DPOConfig, out, **overrides),
        train_dataset=dataset if dataset is not None else toy_preference_dataset(16),
        processing_class=build_tokenizer(),
    )


def test_attached_to_the_algorithm_table():
    spec = trl_ext.get_algorithm("dpo")
    assert spec.trainer_class is DPOTrainer and spec.config_class is DPOConfig
    assert issubclass(DPOTrainer, trl.DPOTrainer) and issubclass(DPOConfig, trl.DPOConfig)
    args = DPOConfig(output_dir="unused", **CPU)
    assert (args.beta, args.label_smoothing, args.kl_loss_fn, args.kl_coef) == (0.1, 0.0, "k2", 0.001)
    loss, kl = args.components.policy_loss, args.components.kl_fn
    assert type(loss) is TRLDPOLoss and loss.name == "dpo" and (kl.name, kl.kl_coef) == ("k2", 0.001)
    # every loss option is a trl.DPOConfig field with TRL's default, and the loss's default
    trl_defaults = {f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                    for f in dataclasses.fields(trl.DPOConfig)}  # fmt: skip
    assert loss.args == {**{name: trl_defaults[name] for name in TRLDPOLoss.default_args()}, "loss_weights": [1.0]}
    assert DPOConfig(output_dir="unused", kl_coef=0.0, **CPU).components.kl_fn.name == "none"
    options = {"loss_type": ["ipo", "sft"], "loss_weights": [1.0, 0.5], "ld_alpha": 0.5, "discopop_tau": 0.1}
    built = DPOConfig(output_dir="unused", **CPU, **options).components.policy_loss
    assert built.args == {**TRLDPOLoss.default_args(), **options}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"loss_type": "dpo"}, r"loss_type='dpo' is not valid; must be one of 'sigmoid', 'hinge', .*'sigmoid_norm'"),
        ({"loss_type": ["ipo", "sft"], "loss_weights": [1.0]}, r"loss_weights=\[1.0\] has 1 weight\(s\) but loss_type"),
        ({"loss_weights": [True]}, r"loss_weights=\[True\] is not valid"),
        ({"loss_type": "bco_pair", "f_divergence_type": "forward_kl"}, r"f_divergence_type='forward_kl' only applies"),
        ({"f_divergence_type": "kl"}, r"f_divergence_type='kl' is not valid; must be one of 'reverse_kl'"),
        ({"f_alpha_divergence_coef": float("nan")}, r"f_alpha_divergence_coef=nan is not valid"),
        ({"ld_alpha": -0.5}, r"ld_alpha=-0.5 is not valid; must be in \[0, 1\] or None"),
        ({"use_weighting": True, "loss_type": "aot_unpaired"}, r"use_weighting=True does not .*'aot_unpaired'"),
        ({"use_weighting": True, "loss_type": ["sigmoid", "sft"]}, r"use_weighting=True does not apply to .*'sft'"),
        ({"use_weighting": 1}, r"use_weighting=1 is not valid; must be True or False"),
        ({"discopop_tau": 0.0}, r"discopop_tau=0.0 is not valid; must be > 0"),
        ({"loss_type": "exo_pair"}, r"'exo_pair' needs label_smoothing > 0"),
        ({"label_smoothing": 0.5}, r"label_smoothing=0.5 is not valid; must be in \[0, 0.5\)"),
        ({"beta": 0.0}, r"beta=0.0 is not valid; must be > 0"),
        ({"kl_coef": -0.1}, r"kl_coef=-0.1 is not valid; must be >= 0"),
        ({"kl_loss_fn": "k9"}, r"kl_loss_fn|k9"),
        ({"kl_loss_fn": "none", "kl_coef": 0.001}, r"kl_coef=0.001 adds a KL term but kl_loss_fn='none'"),
        ({"precompute_ref_log_probs": True, "kl_coef": 0.001}, r"kl_coef=0.001 .*precompute_ref_log_probs=True"),
    ],
)
def test_bad_config(overrides, message):
    """Errors at construction, naming the config, the field and what it may be."""
    with pytest.raises(ValueError, match=rf"^DPOConfig\b.*{message}"):
        DPOConfig(output_dir="unused", **{**CPU, **overrides})


def test_loss_weights_of_another_length_are_an_error_in_trl_too():
    with pytest.raises(ValueError, match="`loss_weights` must have the same length as `loss_type`"):
        trl.DPOConfig(output_dir="unused", **CPU, loss_type=["ipo", "sft"], loss_weights=[1.0])


def test_precomputed_reference_with_the_default_config(random_tiny_model, tmp_path):
    """`precompute_ref_log_probs=True` alone trains: the KL term (it needs per-token reference log-probs) is off unless
    kl_coef is set, and setting it is the error above. kl_loss_fn='none' or kl_coef=0 are accepted as well."""
    args = _config(DPOConfig, tmp_path, precompute_ref_log_probs=True)
    assert args.kl_coef == 0.0 and type(args.kl_coef) is float and args.components.kl_fn.name == "none"
    for explicit in ({"kl_coef": 0.0}, {"kl_loss_fn": "none"}):
        assert _config(DPOConfig, tmp_path, precompute_ref_log_probs=True, **explicit).components.kl_fn.name == "none"
    trainer = DPOTrainer(
        model=random_tiny_model, args=args, train_dataset=toy_preference_dataset(8), processing_class=build_tokenizer()
    )
    assert trainer.ref_model is None and "ref_chosen_logps" in trainer.train_dataset.column_names
    trainer.train()
    assert trainer.state.global_step == 1 and logged(trainer, "dpo_loss") and not logged(trainer, "kl")


def test_loss_options_on_the_command_line():
    parser = trl.TrlParser((DPOConfig,))
    base = ["--output_dir", "unused", "--use_cpu", "--bf16", "false", "--report_to", "none"]
    (config,) = parser.parse_args_and_config([*base, "--loss_type", "ipo", "sft", "--loss_weights", "1", "0.5"])
    loss = config.components.policy_loss
    assert (loss.loss_type, loss.loss_weights) == (("ipo", "sft"), (1.0, 0.5))
    (config,) = parser.parse_args_and_config([*base, "--precompute_ref_log_probs", "true"])
    assert config.kl_coef == 0.0
    with pytest.raises(ValueError, match=r"DPOConfig: kl_coef=0.001 .*precompute_ref_log_probs=True"):
        parser.parse_args_and_config([*base, "--precompute_ref_log_probs", "true", "--kl_coef", "0.001"])


def test_wrong_config_class(random_tiny_model, tmp_path):
    with pytest.raises(TypeError, match=r"args must be a trl_ext.DPOConfig .*got trl.SFTConfig"):
        DPOTrainer(
            model=random_tiny_model,
            args=_config(trl.SFTConfig, tmp_path),  # TRL's trl.DPOConfig is converted (test_trl_config_conversion)
            train_dataset=toy_preference_dataset(8),
            processing_class=build_tokenizer(),
        )


@pytest.mark.parametrize("precompute", [False, True])
def test_first_update_equals_trl_sigmoid_dpo(random_tiny_model, tmp_path, precompute):
    """Label smoothing 0, KL off: the ported loss is TRL's sigmoid DPO, so one SGD step moves every parameter the
    same way, with the reference live or precomputed."""
    common = dict(optim="sgd", learning_rate=1.0, precompute_ref_log_probs=precompute, max_grad_norm=0.0)
    kl_off = {} if precompute else {"kl_coef": 0.0}  # precomputed: off by default
    dataset = toy_preference_dataset(16)
    theirs = trl.DPOTrainer(
        model=random_tiny_model,
        args=_config(trl.DPOConfig, tmp_path / "trl", **common),
        train_dataset=dataset,
        processing_class=build_tokenizer(),
    )
    before = snapshot(theirs.model)
    theirs.train()
    ours = _trainer(random_tiny_model, tmp_path / "ours", dataset=dataset, **kl_off, **common)
    ours.train()
    assert changed(before, theirs.model)
    for (name, a), b in zip(theirs.model.named_parameters(), ours.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    # The metrics agree too (TRL's names on the left).
    for theirs_name, ours_name in [
        ("rewards/chosen", "chosen_reward"),
        ("rewards/rejected", "rejected_reward"),
        ("rewards/accuracies", "accuracy_mean"),
        ("loss", "dpo_loss"),
        ("rewards/margins", "rewards/margins"),
        ("logps/chosen", "logps/chosen"),
        ("num_tokens", "num_tokens"),
    ]:
        assert logged(ours, ours_name) == pytest.approx(logged(theirs, theirs_name), rel=1e-4, abs=1e-6), ours_name


def test_label_smoothing_and_kl_change_the_update(random_tiny_model, tmp_path):
    dataset = toy_preference_dataset(16)
    runs = {}
    variants = {"plain": {"kl_coef": 0.0}, "ls": {"kl_coef": 0.0, "label_smoothing": 0.2}, "kl": {"kl_coef": 5.0}}
    for name, overrides in variants.items():
        trainer = _trainer(
            random_tiny_model, tmp_path / name, dataset=dataset, optim="sgd", learning_rate=1.0, max_steps=2,
            **overrides,
        )  # fmt: skip
        trainer.train()
        runs[name] = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    assert (runs["plain"] - runs["ls"]).abs().max() > 1e-4 and (runs["plain"] - runs["kl"]).abs().max() > 1e-4
    assert logged(trainer, "kl")[0] == 0.0 and logged(trainer, "kl")[1] > 0  # step 1 is at the reference
    assert logged(trainer, "kl_coef") == [5.0, 5.0]


def test_gradient_accumulation_is_normalized_per_pair_over_the_window(random_tiny_model, tmp_path, float_tolerance):
    """6 pairs in one optimizer step, as 1 × 6 or as 4 + 2 (accumulation, uneven last micro-batch): the same update
    with window normalization; TRL's per-micro-batch means weight the 2 pairs like the 4 and differ."""
    dataset = toy_preference_dataset(6)
    common = dict(optim="sgd", learning_rate=1.0, max_grad_norm=0.0, kl_coef=1.0, max_steps=1, num_train_epochs=1)
    one = _trainer(random_tiny_model, tmp_path / "one", dataset=dataset, per_device_train_batch_size=6, **common)
    one.train()
    split = _trainer(
        random_tiny_model, tmp_path / "split", dataset=dataset, per_device_train_batch_size=4,
        gradient_accumulation_steps=2, **common,
    )  # fmt: skip
    split.train()
    tokens = logged(one, "num_tokens")[-1]  # the float32 sums run over the step's tokens
    for (name, a), b in zip(one.model.named_parameters(), split.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, **float_tolerance(torch.float32, tokens, a.abs().max()), msg=name)
    assert logged(split, "dpo_loss") == pytest.approx(logged(one, "dpo_loss"), rel=1e-5)
    tol = float_tolerance(torch.float32, tokens)  # k3's terms exp(Δ) and 1 + Δ are ≈ 1 before they cancel
    assert logged(split, "kl") == pytest.approx(logged(one, "kl"), rel=tol["rtol"], abs=tol["atol"])
    trl_split = trl.DPOTrainer(
        model=random_tiny_model,
        args=_config(trl.DPOConfig, tmp_path / "trl", per_device_train_batch_size=4, gradient_accumulation_steps=2,
                     optim="sgd", learning_rate=1.0, max_grad_norm=0.0, max_steps=1),
        train_dataset=dataset,
        processing_class=build_tokenizer(),
    )  # fmt: skip
    trl_split.train()
    pairs = zip(one.model.parameters(), trl_split.model.parameters(), strict=True)
    assert any(not torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in pairs)


def _preference(model, dataset) -> torch.Tensor:
    """log π(chosen) − log π(rejected) per pair (plain forward passes, summed over the completion tokens)."""
    tokenizer = build_tokenizer()
    margins = []
    for row in dataset:
        totals = []
        for completion in (row["chosen"], row["rejected"]):
            prompt_ids = tokenizer(row["prompt"])["input_ids"]
            ids = prompt_ids + tokenizer(completion)["input_ids"] + [tokenizer.eos_token_id]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
            lp = torch.log_softmax(logits.double(), -1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)
            totals.append(lp[len(prompt_ids) - 1 :].sum())
        margins.append(totals[0] - totals[1])
    return torch.stack(margins)


def test_after_training_the_policy_prefers_held_out_chosen_completions(tiny_model, tmp_path):
    held_out = toy_preference_dataset(64, seed=99)
    before = _preference(AutoModelForCausalLM.from_pretrained(tiny_model).eval(), held_out)
    trainer = _trainer(
        tiny_model, tmp_path, dataset=toy_preference_dataset(512), per_device_train_batch_size=16, max_steps=60,
        learning_rate=1e-3, warmup_steps=5, max_grad_norm=1.0, logging_steps=10,
    )  # fmt: skip
    trainer.train()
    after = _preference(trainer.model.eval(), held_out)
    print(f"held-out preference accuracy {(before > 0).float().mean():.2f} -> {(after > 0).float().mean():.2f}")
    assert (before > 0).float().mean() < 0.7
    assert (after > 0).float().mean() > 0.9 and after.mean() > before.mean() + 1.0
    accuracy = logged(trainer, "accuracy_mean")
    assert accuracy[0] < 0.7 and accuracy[-1] > 0.9


def test_lora(tiny_model, tmp_path):
    from peft import LoraConfig

    trainer = DPOTrainer(
        model=tiny_model,
        args=_config(DPOConfig, tmp_path, max_steps=2, learning_rate=1e-2),
        train_dataset=toy_preference_dataset(16),
        processing_class=build_tokenizer(),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
    )
    assert trainer.ref_model is None  # the reference is the base model with the adapter disabled
    before = snapshot(trainer.model)
    trainer.train()
    moved = changed(before, trainer.model)
    assert moved and all("lora_" in name for name in moved)
    kl = logged(trainer, "kl")
    assert kl[0] == pytest.approx(0.0, abs=1e-12) and kl[1] > 0  # the disabled adapter is the reference


def test_conversational_pairs_and_evaluation(tiny_model, tmp_path):
    """Conversational preference rows go through TRL's chat-template tokenization; evaluation logs the same metrics
    with the `eval_` prefix, over the evaluation batch's own pairs."""
    evaluation = dict(eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=8)
    trainer = DPOTrainer(
        model=tiny_model,
        args=_config(DPOConfig, tmp_path, max_steps=2, **evaluation),
        train_dataset=toy_preference_dataset(16, conversational=True),
        eval_dataset=toy_preference_dataset(8, seed=5, conversational=True),
        processing_class=build_tokenizer(),
    )
    first = trainer.train_dataset[0]
    chat_end = build_tokenizer().convert_tokens_to_ids("<|im_end|>")
    assert chat_end in first["chosen_ids"] and chat_end in first["rejected_ids"]  # the template's end of turn
    trainer.train()
    for name in ("eval_dpo_loss", "eval_chosen_reward", "eval_accuracy_mean", "eval_kl"):
        assert len(logged(trainer, name)) == 1, name
    assert 0 < logged(trainer, "eval_dpo_loss")[0] < 2

    # Before any training the policy is the reference: every pair's loss is log 2, TRL's value too.
    fresh = {"model": tiny_model, "train_dataset": toy_preference_dataset(8), "processing_class": build_tokenizer()}
    fresh["eval_dataset"] = toy_preference_dataset(8, seed=5)
    ours = DPOTrainer(args=_config(DPOConfig, tmp_path / "a", **evaluation), **fresh).evaluate()
    theirs = trl.DPOTrainer(args=_config(trl.DPOConfig, tmp_path / "b", **evaluation), **fresh).evaluate()
    assert ours["eval_dpo_loss"] == pytest.approx(theirs["eval_loss"]) == pytest.approx(0.693147, abs=1e-5)
