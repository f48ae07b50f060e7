"""The SFT trainer: trl.SFTTrainer with Trinity-RFT's `sft`, `sft_is`, `sft_phi` losses, normalized over the optimizer
window (tiny model, CPU)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os

import pytest
import torch
import trl
from datasets import Dataset
from trainer_helpers import CPU, logged, snapshot, train_update
from transformers import AutoModelForCausalLM

from trl_ext.losses.sft import SFTISLoss, SFTLoss, SFTPhiLoss
from trl_ext.toy import build_tokenizer, toy_expert_dataset
from trl_ext.trainers.sft.config import SFTConfig
from trl_ext.trainers.sft.trainer import SFTTrainer

EPS32 = torch.finfo(torch.float32).eps  # 2^-23: float32's relative resolution

# SGD with a constant learning rate and no clipping: an update is exactly −lr · gradient, so updates compare directly
SGD = {"optim": "sgd", "lr_scheduler_type": "constant", "max_grad_norm": 0.0, "train_sampling_strategy": "sequential"}


def _config(cls, out, **overrides):
    settings = {**CPU, "output_dir": str(out), "per_device_train_batch_size": 4, "max_steps": 1, "learning_rate": 1e-3}
    return cls(**{**settings, **overrides})


def _trainer(model, out, dataset=None, trainer_class=SFTTrainer, config_class=SFTConfig, tokenizer=None, **overrides):
    return trainer_class(
        model=model,
        args=_config(config_class, out, **overrides),
        train_dataset=dataset if dataset is not None else toy_expert_dataset(16),
        processing_class=tokenizer or build_tokenizer(),
    )


def _trained_tokens(batch) -> int:
    """The positions a causal LM is trained on: labels after the shift that are not -100."""
    return int((batch["labels"][:, 1:] != -100).sum())


def _micro_batches(trainer, count: int) -> list[dict]:
    """The first `count` micro-batches of the (sequential) training dataloader."""
    loader = iter(trainer.get_train_dataloader())
    return [next(loader) for _ in range(count)]


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[n] - b[n]).abs().max().item() for n in a)


def _largest(updates: dict[str, torch.Tensor]) -> float:
    return max(u.abs().max().item() for u in updates.values())


# ---------------------------------------------------------------------------------------------------------------------
# The config
# ---------------------------------------------------------------------------------------------------------------------


def test_config_fields_and_losses():
    assert issubclass(SFTConfig, trl.SFTConfig) and issubclass(SFTTrainer, trl.SFTTrainer)
    assert SFTConfig.algorithm == "sft"
    fields = {f.name: f for f in dataclasses.fields(SFTConfig)}
    # the shared arguments are the loss components' (default and help stated once, there)
    assert fields["cutoff_prob"].default == SFTPhiLoss.argument("cutoff_prob").default == 1.0
    assert fields["cutoff_prob"].metadata["help"] == SFTPhiLoss.argument("cutoff_prob").help
    assert fields["loss_agg_mode"].default == SFTLoss.argument("loss_agg_mode").default == "token-mean"
    assert fields["sft_loss_fn"].default == "sft" and fields["sft_loss_fn"].metadata["choices"] == [
        "sft",
        "sft_is",
        "sft_phi",
    ]
    assert fields["loss_type"].default is None
    for name in ("sft_loss_fn", "cutoff_prob", "loss_agg_mode"):
        assert f"{name} (`" in SFTConfig.__doc__
    assert "2508.05629" in SFTConfig.__doc__ and "2508.11408" in SFTConfig.__doc__

    args = SFTConfig(output_dir="unused", **CPU)
    assert (args.sft_loss_fn, args.cutoff_prob, args.loss_agg_mode, args.loss_type) == ("sft", 1.0, "token-mean", "nll")
    assert type(args.components.policy_loss) is SFTLoss
    assert "loss_type" not in args.to_dict()  # TRL's selector was not given: the dict re-loads without it
    saved = json.loads(json.dumps(args.to_dict()))
    assert SFTConfig(output_dir="unused", **CPU, sft_loss_fn=saved["sft_loss_fn"]).loss_type == "nll"
    phi = SFTConfig(
        output_dir="unused", sft_loss_fn="sft_phi", cutoff_prob=0.5, loss_agg_mode="seq-mean-token-mean", **CPU
    )
    loss = phi.components.policy_loss
    assert type(loss) is SFTPhiLoss and (loss.cutoff_prob, loss.loss_agg_mode) == (0.5, "seq-mean-token-mean")
    assert phi.loss_type == "nll"  # what TRL's own code reads (it only checks nll / dft)


@pytest.mark.parametrize(("loss_type", "expected"), [("nll", SFTLoss), ("dft", SFTISLoss), ("chunked_nll", SFTLoss)])
def test_trl_loss_type_selects_the_same_loss(loss_type, expected):
    with pytest.warns(FutureWarning) if loss_type == "chunked_nll" else contextlib.nullcontext():
        args = SFTConfig(output_dir="unused", loss_type=loss_type, **CPU)
    assert type(args.components.policy_loss) is expected and args.loss_type in ("nll", "dft")
    assert args.to_dict()["loss_type"] == args.loss_type  # given: kept
    saved = json.loads(json.dumps(args.to_dict()))  # the loss fields of the logged dict re-load
    again = SFTConfig(output_dir="unused", **CPU, **{k: saved[k] for k in ("loss_type", "sft_loss_fn", "cutoff_prob")})
    assert again.sft_loss_fn == args.sft_loss_fn
    # a copy with another TRL loss_type follows it (sft_loss_fn was not chosen by the user)
    assert dataclasses.replace(args, loss_type="dft").sft_loss_fn == "sft_is"


def test_command_line_flags():
    parser = trl.TrlParser((SFTConfig,))
    flags = ["--output_dir", "unused", "--use_cpu", "--bf16", "false", "--report_to", "none"]
    (args,) = parser.parse_args_into_dataclasses([*flags, "--sft_loss_fn", "sft_phi", "--cutoff_prob", "0.9"])
    loss = args.components.policy_loss
    assert type(loss) is SFTPhiLoss and loss.cutoff_prob == 0.9 and args.loss_type == "nll"
    (args,) = parser.parse_args_into_dataclasses([*flags, "--loss_type", "dft"])  # a TRL command line
    assert args.sft_loss_fn == "sft_is" and type(args.components.policy_loss) is SFTISLoss
    with pytest.raises(ValueError, match=r"loss_type='dft'.*sft_loss_fn='sft'"):
        parser.parse_args_into_dataclasses([*flags, "--loss_type", "dft", "--sft_loss_fn", "sft"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"sft_loss_fn": "nll"},
            r"SFTConfig: sft_loss_fn='nll' is not valid; must be one of 'sft', 'sft_is', 'sft_phi'",
        ),
        (
            {"sft_loss_fn": "sft_phi", "cutoff_prob": 1.5},
            r"SFTConfig: cutoff_prob=1.5 is not valid; must be in \[0, 1\]",
        ),
        (
            {"sft_loss_fn": "sft_phi", "cutoff_prob": -0.1},
            r"SFTConfig: cutoff_prob=-0.1 is not valid; must be in \[0, 1\]",
        ),
        (
            {"sft_loss_fn": "sft_phi", "cutoff_prob": 0.0},
            r"SFTConfig \(policy loss\): sft_phi: cutoff_prob=0.0 .*\(0, 1\]",
        ),
        (
            {"cutoff_prob": 0.9},
            r"SFTConfig: cutoff_prob=0.9 only applies to sft_loss_fn='sft_phi'.*'sft' would silently",
        ),
        ({"sft_loss_fn": "sft_is", "cutoff_prob": 0.5}, r"cutoff_prob=0.5 only applies to sft_loss_fn='sft_phi'"),
        (
            {"loss_type": "dft", "sft_loss_fn": "sft"},
            r"loss_type='dft' .* means sft_loss_fn='sft_is', but sft_loss_fn='sft'",
        ),
        (
            {"loss_type": "nll", "sft_loss_fn": "sft_phi"},
            r"loss_type='nll' .*sft_loss_fn='sft', but sft_loss_fn='sft_phi'",
        ),
        ({"loss_type": "dft", "sft_loss_fn": "sft_phi"}, r"loss_type='dft' .*but sft_loss_fn='sft_phi' was given too"),
        ({"loss_type": "kto"}, r"SFTConfig: loss_type='kto' is not valid; must be one of 'nll', 'dft', 'chunked_nll'"),
        # an unhashable value is named too (it reached a dict lookup first: TypeError: unhashable type)
        ({"sft_loss_fn": ["sft"]}, r"^SFTConfig: sft_loss_fn=\['sft'\] is not valid; must be one of 'sft', 'sft_is', "),
        ({"sft_loss_fn": {"sft": 1}}, r"^SFTConfig: sft_loss_fn=\{'sft': 1\} is not valid; must be one of 'sft', "),
        ({"sft_loss_fn": {"sft_is"}}, r"^SFTConfig: sft_loss_fn=\{'sft_is'\} is not valid; must be one of 'sft', "),
        ({"loss_type": ["dft"]}, r"^SFTConfig: loss_type=\['dft'\] is not valid; must be one of 'nll', 'dft'"),
        ({"loss_agg_mode": "mean"}, r"SFTConfig: loss_agg_mode='mean' is not valid; must be one of 'token-mean'"),
        (
            {"loss_agg_mode": "seq-mean-token-mean", "packing": True},
            r"loss_agg_mode='seq-mean-token-mean' .*packing=True",
        ),
        ({"loss_agg_mode": "seq-mean-token-sum", "padding_free": True}, r"'seq-mean-token-sum' .*padding_free=True"),
        ({"loss_agg_mode": "seq-mean-token-sum-norm", "max_length": None}, r"sequences × max_length.*max_length=None"),
        (
            {"label_smoothing_factor": 0.1},
            r"SFTConfig: label_smoothing_factor=0.1 is not supported.*\[B, T, V\] logits",
        ),
    ],
)
def test_bad_config(overrides, message):
    with pytest.raises(ValueError, match=message):
        SFTConfig(output_dir="unused", **CPU, **overrides)


# ---------------------------------------------------------------------------------------------------------------------
# Bad trainer input: refused by name, before the model loads where the input is known then
# ---------------------------------------------------------------------------------------------------------------------

MISSING_MODEL = "/nonexistent/sft-model"  # loading it would fail: the errors below come first


def test_bad_trainer_input(tmp_path):
    args = _config(SFTConfig, tmp_path)
    data = toy_expert_dataset(4)
    with pytest.raises(TypeError, match=r"SFTTrainer: args must be a trl_ext.SFTConfig .*got trl.DPOConfig"):
        SFTTrainer(MISSING_MODEL, args=_config(trl.DPOConfig, tmp_path), train_dataset=data)
    with pytest.raises(ValueError, match=r"SFTTrainer: compute_loss_func is not supported: the loss is .*sft_loss_fn"):
        SFTTrainer(MISSING_MODEL, args=args, train_dataset=data, compute_loss_func=lambda *a, **k: 0)
    questions = Dataset.from_dict({"question": ["Repeat the letter a:"] * 4})
    columns = (
        r"has columns 'question', but SFT needs one of: 'text' .*'messages'.*'prompt' and 'completion'.*'input_ids'"
    )
    with pytest.raises(ValueError, match=r"SFTTrainer: the train_dataset " + columns):
        SFTTrainer(MISSING_MODEL, args=args, train_dataset=questions)
    with pytest.raises(ValueError, match=r"the eval_dataset\['held_out'\] " + columns):
        SFTTrainer(MISSING_MODEL, args=args, train_dataset=data, eval_dataset={"held_out": questions})
    renamed = _config(SFTConfig, tmp_path, dataset_text_field="question")  # the column TRL is told to read is fine
    with pytest.raises(OSError):  # ... so the missing model is what fails
        SFTTrainer(MISSING_MODEL, args=renamed, train_dataset=questions)
    skip = _config(SFTConfig, tmp_path, dataset_kwargs={"skip_prepare_dataset": True})
    with pytest.raises(ValueError, match=r"skip_prepare_dataset.*untokenized, and TRL's collator needs 'input_ids'"):
        SFTTrainer(MISSING_MODEL, args=skip, train_dataset=data)


# ---------------------------------------------------------------------------------------------------------------------
# The same update as trl.SFTTrainer's nll / dft
# ---------------------------------------------------------------------------------------------------------------------


def _parity_tolerance(trainer, updates: dict[str, torch.Tensor], steps: int) -> float:
    """Both trainers sum the same float32 per-token terms, possibly in another order. Each gradient entry is a sum of
    at most n = (trained tokens of the run) × (hidden size) products, whose rounding error is at most n·ε₃₂ relative to
    the largest update (ε₃₂ = 2^-23), compounded over `steps` SGD steps."""
    tokens = sum(_trained_tokens(batch) for batch in trainer.get_train_dataloader())
    n = tokens * trainer.model.config.hidden_size
    return steps * n * EPS32 * _largest(updates)


@pytest.mark.parametrize(
    ("ours", "theirs", "options"),
    [
        ({}, {"loss_type": "nll"}, {}),
        ({"sft_loss_fn": "sft_is"}, {"loss_type": "dft"}, {}),
        ({"loss_type": "nll"}, {"loss_type": "nll"}, {"packing": True, "max_length": 24}),
        ({}, {"loss_type": "nll"}, {"padding_free": True, "max_length": None}),
    ],
    ids=["sft=nll", "sft_is=dft", "packing", "padding_free"],
)
@pytest.mark.parametrize("accumulation", [1, 2])
def test_same_update_as_trl(random_tiny_model, tmp_path, ours, theirs, options, accumulation):
    settings = {
        **SGD,
        **options,
        "learning_rate": 1.0,
        "per_device_train_batch_size": 3,
        "gradient_accumulation_steps": accumulation,
        "max_steps": 3,
    }
    data = toy_expert_dataset(24)
    trainer = _trainer(random_tiny_model, tmp_path / "ours", data, **settings, **ours)
    reference = _trainer(random_tiny_model, tmp_path / "trl", data, trl.SFTTrainer, trl.SFTConfig, **settings, **theirs)
    if accumulation == 2:  # TRL's nll divides by HF's num_items_in_batch, the window's tokens, not each micro-batch's
        counts = [_trained_tokens(batch) for batch in _micro_batches(trainer, 2)]
        assert counts[0] != counts[1], counts
    update, expected = train_update(trainer), train_update(reference)
    tolerance = _parity_tolerance(trainer, expected, settings["max_steps"])
    assert tolerance < 0.01 * _largest(expected)  # a 1% error in the normalization would fail
    diff = _max_diff(update, expected)
    print(f"parity max|Δθ − Δθ_TRL| = {diff:.3g} (tolerance {tolerance:.3g}, largest update {_largest(expected):.3g})")
    assert diff <= tolerance, (diff, tolerance)
    name = {"sft": "sft_loss", "sft_is": "sft_is_loss"}[trainer.args.sft_loss_fn]
    assert logged(trainer, "loss") == pytest.approx(logged(reference, "loss"), rel=1e-6)
    assert logged(trainer, name) == pytest.approx(logged(trainer, "loss"), rel=1e-6)
    assert logged(trainer, "num_tokens") == logged(reference, "num_tokens")
    if accumulation == 1:  # one micro-batch per step: TRL's micro-batch means are the window's
        for metric in ("entropy", "mean_token_accuracy"):
            assert logged(trainer, metric) == pytest.approx(logged(reference, metric), rel=1e-5, abs=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# sft_phi against its closed form
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cutoff_prob", [1.0, 0.6])
def test_sft_phi_closed_form(tiny_model, tmp_path, cutoff_prob):
    lr, rows = 0.5, 8
    trainer = _trainer(
        tiny_model,
        tmp_path,
        toy_expert_dataset(rows),
        **SGD,
        learning_rate=lr,
        per_device_train_batch_size=rows,
        sft_loss_fn="sft_phi",
        cutoff_prob=cutoff_prob,
    )
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(rows)])  # the one batch of the step

    # by hand, in plain torch: L = −Σ_t min(lp_t, log c) · sg(p_t (1 − p_t)) / Σ_t 1 over the trained tokens
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    labels = batch["labels"][:, 1:]
    mask = labels != -100
    lp = torch.log_softmax(logits.float(), -1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    p = lp.detach().exp()
    clipped = lp.clamp(max=math.log(cutoff_prob)) if cutoff_prob < 1 else lp
    loss = -(clipped * p * (1 - p))[mask].sum() / mask.sum()
    loss.backward()
    expected = {name: -lr * param.grad for name, param in model.named_parameters()}
    if cutoff_prob < 1:  # the cutoff matters: some trained tokens are above it, some below
        assert 0 < int((p[mask] > cutoff_prob).sum()) < int(mask.sum())

    update = train_update(trainer)
    # the fused head's chunked log-softmax vs torch's: each log-prob is a logsumexp over the vocabulary, and each
    # gradient entry a sum over the tokens: n = tokens × vocabulary terms, each rounded at float32's ε
    tolerance = int(mask.sum()) * model.config.vocab_size * EPS32 * _largest(expected)
    assert tolerance < 0.01 * _largest(expected)
    diff = _max_diff(update, expected)
    print(f"sft_phi closed form max|Δθ − Δθ_hand| = {diff:.3g} (tolerance {tolerance:.3g})")
    assert diff <= tolerance, (diff, tolerance)
    assert logged(trainer, "sft_phi_loss")[0] == pytest.approx(loss.item(), rel=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# Window normalization: the update does not depend on how the window is split into micro-batches
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_window_split_does_not_change_the_update(random_tiny_model, tmp_path, loss_agg_mode):
    common = {**SGD, "learning_rate": 1.0, "max_steps": 2, "sft_loss_fn": "sft_phi", "loss_agg_mode": loss_agg_mode}
    data = toy_expert_dataset(16)
    split = _trainer(
        random_tiny_model,
        tmp_path / "split",
        data,
        per_device_train_batch_size=3,
        gradient_accumulation_steps=2,
        **common,
    )
    whole = _trainer(random_tiny_model, tmp_path / "whole", data, per_device_train_batch_size=6, **common)
    counts = [_trained_tokens(batch) for batch in _micro_batches(split, 2)]
    assert counts[0] != counts[1], counts  # micro-batches of unequal token counts
    update, expected = train_update(split), train_update(whole)
    tolerance = _parity_tolerance(whole, expected, common["max_steps"])
    assert tolerance < 0.01 * _largest(expected)
    diff = _max_diff(update, expected)
    print(f"window split max|Δθ − Δθ_whole| = {diff:.3g} (tolerance {tolerance:.3g})")
    assert diff <= tolerance, (diff, tolerance)
    assert logged(split, "sft_phi_loss") == pytest.approx(logged(whole, "sft_phi_loss"), rel=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# TRL's options
# ---------------------------------------------------------------------------------------------------------------------


def test_moe_aux_loss_as_trl_adds_it(tiny_moe, tmp_path):
    settings = {**SGD, "learning_rate": 1.0, "per_device_train_batch_size": 3, "gradient_accumulation_steps": 2}
    data = toy_expert_dataset(12)
    trainer = _trainer(tiny_moe, tmp_path / "ours", data, max_steps=2, **settings)
    reference = _trainer(tiny_moe, tmp_path / "trl", data, trl.SFTTrainer, trl.SFTConfig, max_steps=2, **settings)
    assert trainer.aux_loss_enabled and trainer.router_aux_loss_coef == 0.01
    update, expected = train_update(trainer), train_update(reference)
    tolerance = _parity_tolerance(trainer, expected, 2)
    assert _max_diff(update, expected) <= tolerance, (_max_diff(update, expected), tolerance)
    assert logged(trainer, "aux_loss") == pytest.approx(logged(reference, "aux_loss"), rel=1e-5)
    assert logged(trainer, "loss") == pytest.approx(logged(reference, "loss"), rel=1e-6)


def test_completion_only_loss_trains_the_completion_tokens(random_tiny_model, tmp_path):
    data = toy_expert_dataset(8)
    tokenizer = build_tokenizer()
    completion = [len(tokenizer(c + tokenizer.eos_token)["input_ids"]) for c in data["completion"]]
    whole = [
        len(tokenizer(p + c + tokenizer.eos_token)["input_ids"])
        for p, c in zip(data["prompt"], data["completion"], strict=True)
    ]
    for only, expected in ((None, sum(completion)), (True, sum(completion)), (False, sum(whole) - len(whole))):
        trainer = _trainer(
            random_tiny_model,
            tmp_path / str(only),
            data,
            completion_only_loss=only,
            per_device_train_batch_size=8,
            train_sampling_strategy="sequential",
        )
        (batch,) = _micro_batches(trainer, 1)
        counts = trainer.micro_batch_counts(batch)
        assert int(counts["global_valid_toks"]) == expected  # prompt tokens are not trained (unless asked)
        assert int(counts["global_valid_seqs"]) == 8 and int(counts["input_tokens"]) == sum(whole)
        with torch.no_grad():  # exactly the positions the fused LM head scores
            outputs = trainer.model(**batch, fused_lm_head=True)
        assert int(outputs.label_mask.sum()) == expected


def test_packing_and_padding_free_count_the_fused_heads_positions(random_tiny_model, tmp_path):
    data = toy_expert_dataset(12)
    for options in ({"packing": True, "max_length": 32}, {"padding_free": True, "max_length": None}):
        trainer = _trainer(
            random_tiny_model,
            tmp_path / str(len(options)),
            data,
            per_device_train_batch_size=4,
            train_sampling_strategy="sequential",
            **options,
        )
        (batch,) = _micro_batches(trainer, 1)
        assert "position_ids" in batch and "attention_mask" not in batch  # padding-free rows
        counts = trainer.micro_batch_counts(batch)
        with torch.no_grad():
            outputs = trainer.model(**batch, fused_lm_head=True)
        assert int(counts["global_valid_toks"]) == int(outputs.label_mask.sum())
        # TRL's prompt-completion default trains the completion tokens only, never a target across a boundary
        assert int(counts["global_valid_toks"]) < batch["input_ids"].numel() - 1
        trainer.train()
        assert all(math.isfinite(v) for v in logged(trainer, "sft_loss"))


GENERATION_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_assistant_only_loss(random_tiny_model, tmp_path):
    demos = toy_expert_dataset(8, conversational=True)
    conversations = Dataset.from_dict(
        {"messages": [p + c for p, c in zip(demos["prompt"], demos["completion"], strict=True)]}
    )
    # the toy tokenizer's template has no {% generation %} markers and TRL cannot patch it: TRL refuses it by name
    with pytest.raises(ValueError, match=r"generation"):
        _trainer(random_tiny_model, tmp_path / "toy", conversations, assistant_only_loss=True)
    tokenizer = build_tokenizer()
    tokenizer.chat_template = GENERATION_TEMPLATE
    trainer = _trainer(
        random_tiny_model,
        tmp_path / "marked",
        conversations,
        tokenizer=tokenizer,
        assistant_only_loss=True,
        per_device_train_batch_size=8,
        train_sampling_strategy="sequential",
    )
    (batch,) = _micro_batches(trainer, 1)
    assistant = sum(len(tokenizer(m[-1]["content"] + "<|im_end|>")["input_ids"]) for m in conversations["messages"])
    counts = trainer.micro_batch_counts(batch)
    assert int(counts["global_valid_toks"]) == assistant < int(counts["input_tokens"])
    trainer.train()
    assert math.isfinite(logged(trainer, "sft_loss")[0])


def test_peft_trains_only_the_adapter(random_tiny_model, tmp_path):
    from peft import LoraConfig

    trainer = SFTTrainer(
        model=random_tiny_model,
        args=_config(SFTConfig, tmp_path, max_steps=2, learning_rate=1e-2, sft_loss_fn="sft_phi", cutoff_prob=0.9),
        train_dataset=toy_expert_dataset(16),
        processing_class=build_tokenizer(),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0),
    )
    before = snapshot(trainer.model)
    trainer.train()
    changed = {n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p.detach())}
    assert changed and all("lora_" in n for n in changed)
    assert {n for n in changed if "lora_B" in n}  # LoRA's B starts at 0: it moved, so the adapter trained
    assert math.isfinite(logged(trainer, "sft_phi_loss")[-1])


def test_resume_from_checkpoint_gives_the_uninterrupted_run(random_tiny_model, tmp_path):
    settings = {
        "max_steps": 4,
        "per_device_train_batch_size": 3,
        "gradient_accumulation_steps": 2,
        "learning_rate": 1e-2,
        "sft_loss_fn": "sft_phi",
        "save_strategy": "steps",
        "save_steps": 2,
    }
    data = toy_expert_dataset(24)
    straight = _trainer(random_tiny_model, tmp_path / "straight", data, **settings)
    straight.train()
    resumed = _trainer(random_tiny_model, tmp_path / "resumed", data, **settings)
    resumed.train(resume_from_checkpoint=str(tmp_path / "straight" / "checkpoint-2"))
    assert resumed.state.global_step == 4
    diff = _max_diff(snapshot(resumed.model), snapshot(straight.model))
    assert diff == 0.0, diff  # the same computations, replayed from the saved optimizer, scheduler and RNG states


def test_logged_metrics_and_evaluation(random_tiny_model, tmp_path):
    trainer = SFTTrainer(
        model=random_tiny_model,
        args=_config(
            SFTConfig,
            tmp_path,
            max_steps=2,
            gradient_accumulation_steps=2,
            eval_strategy="steps",
            eval_steps=2,
            per_device_eval_batch_size=4,
        ),
        train_dataset=toy_expert_dataset(16),
        eval_dataset=toy_expert_dataset(8, seed=1),
        processing_class=build_tokenizer(),
        compute_metrics=lambda prediction: {"rows": float(len(prediction.label_ids))},  # needs the logits
    )
    with pytest.warns(FutureWarning, match="return_outputs=True"):
        trainer.train()
    train = [e for e in trainer.state.log_history if "loss" in e]
    assert len(train) == 2
    for entry in train:
        for name in ("sft_loss", "entropy", "mean_token_accuracy", "num_tokens"):
            assert math.isfinite(entry[name]), (name, entry)
        assert entry["sft_loss"] == pytest.approx(entry["loss"], rel=1e-6)
        assert 0 <= entry["mean_token_accuracy"] <= 1 and entry["entropy"] > 0
    assert train[1]["num_tokens"] > train[0]["num_tokens"] > 0
    (evaluation,) = [e for e in trainer.state.log_history if "eval_loss" in e]
    assert evaluation["eval_rows"] == 8
    for name in ("eval_sft_loss", "eval_entropy", "eval_mean_token_accuracy"):
        assert math.isfinite(evaluation[name])
    assert evaluation["eval_sft_loss"] == pytest.approx(evaluation["eval_loss"], rel=1e-6)  # 2 full eval batches


def test_report_to_wandb_offline(random_tiny_model, tmp_path, monkeypatch):
    import glob

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_PROJECT", "trl-ext-test")
    trainer = _trainer(random_tiny_model, tmp_path / "out", max_steps=2, report_to="wandb")
    trainer.train()
    import wandb

    # this run's folder (wandb keeps the settings of the process's first run, so WANDB_DIR may be an earlier test's)
    assert wandb.run is not None and wandb.run.settings.mode == "offline"
    folder = os.path.dirname(wandb.run.dir)
    wandb.finish()
    assert len(glob.glob(os.path.join(folder, "run-*.wandb"))) == 1
    assert len(logged(trainer, "sft_loss")) == 2


def test_loss_falls_on_the_toy_demonstrations(tiny_model, tmp_path):
    trainer = _trainer(
        tiny_model,
        tmp_path,
        toy_expert_dataset(256),
        max_steps=30,
        per_device_train_batch_size=16,
        learning_rate=1e-3,
        warmup_steps=3,
    )
    trainer.train()
    losses = logged(trainer, "sft_loss")
    assert len(losses) == 30
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.75 * first, (first, last)


def test_script_trains_the_toy_model(toy_cache, tmp_path):
    """`python examples/train_sft.py` with no arguments: the toy model on the toy demonstrations, the toy's settings
    (`trl_ext.toy.SFT_TRAINING`: 60 steps, a held-out evaluation every 20)."""
    from trl_ext.scripts.sft import main

    out = str(tmp_path / "out")
    trainer = main(["--output_dir", out, "--report_to", "none", "--save_strategy", "no"])
    assert isinstance(trainer, SFTTrainer) and trainer.args.sft_loss_fn == "sft"
    assert trainer.args.learning_rate == 1e-3 and trainer.args.max_steps == 60  # the toy's defaults
    losses, held_out = logged(trainer, "loss"), logged(trainer, "eval_loss")
    assert len(losses) == 12 and len(held_out) == 3
    assert sum(losses[-3:]) / 3 < 0.7 * sum(losses[:3]) / 3, losses
    assert held_out[-1] < 0.7 * held_out[0], held_out
    assert os.path.isfile(os.path.join(out, "model.safetensors"))


def test_sft_is_registered_like_every_family(tmp_path, capsys):
    """`get_algorithm("sft")` serves the SFT classes, `trl-ext train --algorithm sft` trains through the family's
    script (its run summary names the family's unit and length), and the model card names the loss chosen."""
    import trl_ext
    from trl_ext.cli import main

    spec = trl_ext.get_algorithm("sft")
    assert (spec.config_class, spec.trainer_class) == (trl_ext.SFTConfig, trl_ext.SFTTrainer)
    assert spec.family.name == "sft" and spec.schema == "sft" and not spec.use_reference
    out = str(tmp_path / "run")
    main(["train", "--algorithm", "sft", "--max_steps", "2", "--sft_loss_fn", "sft_phi", "--output_dir", out,
          "--save_strategy", "no", "--eval_strategy", "no", "--report_to", "none"])  # fmt: skip
    printed = capsys.readouterr().out
    assert "trl_ext sft: SFTTrainer / SFTConfig" in printed
    assert "sequences per device" in printed and "max_length" in printed
    assert "sft settings: sft_loss_fn='sft_phi' (default 'sft')" in " ".join(printed.split())
    assert "loss_type" not in printed  # resolved by the config, not the user's setting
    card = open(f"{out}/README.md", encoding="utf-8").read()
    assert "## trl_ext" in card and "| policy loss | `sft_phi` |" in card and "| `sft_loss_fn` | `'sft_phi'` |" in card
