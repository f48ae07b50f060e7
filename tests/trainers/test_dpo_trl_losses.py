"""TRL's DPO loss options in trl_ext: `TRLDPOLoss` (pure torch) and `trl_ext.DPOTrainer` against `trl.DPOTrainer`.

* Loss level: at its defaults `TRLDPOLoss` is the `dpo` loss; every loss type is a sum of window shares (two
  micro-batches with the window's counts add up to the whole batch, value and gradient); empty batches give 0;
  masked NaN never leaks; the inputs each option needs are asked for by name.
* Trainer level: one SGD step of `trl_ext.DPOTrainer` and of `trl.DPOTrainer` with the same seed, data and reference
  (a second random model, so that the log-ratios are not 0) gives the same loss, metrics and update, for every
  `loss_type`, lists with `loss_weights`, every f-divergence, LD-DPO, WPO and DiscoPOP's τ (gradient accumulation 1);
  with the window normalization, 2 accumulation steps of 4 pairs give TRL's update on one batch of 8.
"""

from __future__ import annotations

import random

import pytest
import torch
import trl
from datasets import Dataset
from trainer_helpers import CPU, logged
from transformers import AutoModelForCausalLM

from trl_ext import DPOConfig, DPOTrainer
from trl_ext.losses import get_policy_loss
from trl_ext.losses.dpo import DPO_LOSS_TYPES, TRLDPOLoss, f_divergence_score
from trl_ext.toy import build_tokenizer, toy_preference_dataset

# ================================================================================================
# Loss level
# ================================================================================================


def _pairs_batch(pairs: int = 6, cols: int = 7, seed: int = 0, dtype=torch.float64) -> dict:
    """Interleaved (chosen, rejected) rows of different lengths (1 to `cols` tokens), log-probs near a reference."""
    g = torch.Generator().manual_seed(seed)
    rows = 2 * pairs
    lp = -(torch.rand(rows, cols, generator=g, dtype=dtype) * 2.0 + 0.05)
    lengths = torch.randint(1, cols + 1, (rows,), generator=g)
    return {
        "logprob": lp,
        "ref_logprob": lp + 0.3 * torch.randn(rows, cols, generator=g, dtype=dtype),
        "log_sum_sq_probs": -(torch.rand(rows, cols, generator=g, dtype=dtype) + 1.0),
        "action_mask": torch.arange(cols).unsqueeze(0) < lengths.unsqueeze(1),
    }


def _run(fn, batch: dict, **extra):
    lp = batch["logprob"].detach().clone().requires_grad_(True)
    inputs = {**batch, "logprob": lp, **extra}
    loss, metrics = fn(**{k: v for k, v in inputs.items() if k in fn.inputs()})
    loss.backward()
    return loss.detach(), lp.grad, metrics


# Every loss type (with the ε it reads), and the options, each on its own.
LOSS_CASES = {
    **{t: {"loss_type": t} for t in DPO_LOSS_TYPES},
    "exo_pair": {"loss_type": "exo_pair", "label_smoothing": 0.1},
    "robust": {"loss_type": "robust", "label_smoothing": 0.1},
    "aot": {"loss_type": "aot", "label_smoothing": 0.1},
    "mpo": {"loss_type": ["sigmoid", "bco_pair", "sft"], "loss_weights": [0.8, 0.2, 1.0]},
    "forward_kl": {"loss_type": ["ipo", "discopop"], "f_divergence_type": "forward_kl"},
    "js_divergence": {"f_divergence_type": "js_divergence"},
    "alpha_divergence": {"loss_type": "sigmoid_norm", "f_divergence_type": "alpha_divergence"},
    "ld_alpha": {"loss_type": ["sigmoid", "apo_zero"], "ld_alpha": 0.5},
    "wpo": {"loss_type": ["hinge", "nca_pair"], "use_weighting": True, "beta": 0.5},
}


def test_at_its_defaults_it_is_the_dpo_loss():
    batch = _pairs_batch()
    for kwargs in ({}, {"beta": 0.3, "label_smoothing": 0.2}):
        ours = _run(TRLDPOLoss(**kwargs), batch)
        dpo = _run(get_policy_loss("dpo", **kwargs), batch)
        torch.testing.assert_close(ours[:2], dpo[:2], rtol=0, atol=0)
        assert {k: v.item() for k, v in ours[2].items()} == {k: v.item() for k, v in dpo[2].items()}
    assert TRLDPOLoss.name == "dpo" and set(TRLDPOLoss.metrics) == set(get_policy_loss("dpo").metrics)


def test_sigmoid_with_label_smoothing_is_conservative_dpo():
    """The deliberate difference from TRL 1.16 (whose `sigmoid` ignores ε): −(1 − ε)·log σ(βz) − ε·log σ(−βz)."""
    lp = torch.tensor([[-1.0], [-3.0]], dtype=torch.float64)
    ref = torch.tensor([[-2.0], [-2.0]], dtype=torch.float64)
    loss, _ = TRLDPOLoss(beta=1.0, label_smoothing=0.2)(logprob=lp, ref_logprob=ref, action_mask=lp < 0)
    z = torch.tensor(2.0, dtype=torch.float64)  # (−1 + 2) − (−3 + 2)
    expected = -0.8 * torch.nn.functional.logsigmoid(z) - 0.2 * torch.nn.functional.logsigmoid(-z)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)


def test_loss_types_by_hand():
    """One pair, one token each, ρ_c = 1, ρ_r = −1 (β = 1): values one can check on paper."""
    lp = torch.tensor([[-1.0], [-3.0]], dtype=torch.float64)
    ref = torch.tensor([[-2.0], [-2.0]], dtype=torch.float64)
    s = torch.sigmoid
    one, two = torch.tensor(1.0, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64)
    expected = {
        "hinge": 0.0,  # max(0, 1 − 2)
        "ipo": (2 - 0.5) ** 2,  # (Δ̄ − 1/(2β))², lengths 1
        "nca_pair": -(s(one).log() + 0.5 * s(-one).log() + 0.5 * s(one).log()).item(),
        "bco_pair": -2 * s(one).log().item(),
        "sppo_hard": 2 * 0.5**2,  # (1 − ½)² + (−1 + ½)²
        "apo_zero": (1 - s(one) + s(-one)).item(),
        "apo_down": (s(one) + 1 - s(two)).item(),
        "sigmoid_norm": -s(two).log().item(),
    }
    for loss_type, value in expected.items():
        loss, _ = TRLDPOLoss(beta=1.0, loss_type=loss_type)(logprob=lp, ref_logprob=ref, action_mask=lp < 0)
        assert loss.item() == pytest.approx(value, rel=1e-12, abs=1e-15), loss_type


@pytest.mark.parametrize("case", [c for c in LOSS_CASES if c not in ("aot", "aot_unpaired")])
def test_window_shares_add_up_to_the_whole_batch(case):
    """Two micro-batches (2 + 4 pairs) with the window's counts: their losses and gradients add up to the loss and
    gradient of the 6 pairs in one batch (`aot` sorts within a micro-batch, so it is left out, as in TRL)."""
    fn = TRLDPOLoss(**LOSS_CASES[case])
    batch = _pairs_batch()
    mask = batch["action_mask"]
    whole_loss, whole_grad, _ = _run(fn, batch)
    window = {"global_valid_seqs": torch.tensor(12.0), "chosen_valid_toks": mask[0::2].sum().float()}
    split = [_run(fn, {k: v[rows] for k, v in batch.items()}, **window) for rows in (slice(0, 4), slice(4, 12))]
    torch.testing.assert_close(split[0][0] + split[1][0], whole_loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(torch.cat([split[0][1], split[1][1]]), whole_grad, rtol=1e-12, atol=1e-14)
    assert whole_grad.abs().sum() > 0


@pytest.mark.parametrize("case", list(LOSS_CASES))
def test_empty_batches_and_masked_nan(case):
    fn = TRLDPOLoss(**LOSS_CASES[case])
    empty = {k: v[:0] for k, v in _pairs_batch().items()}
    loss, grad, metrics = _run(fn, empty)
    assert loss.item() == 0.0 and grad.shape == (0, 7)
    assert all(torch.isfinite(v) for v in metrics.values())
    batch = _pairs_batch()
    masked = ~batch["action_mask"]
    poisoned = {k: v if k == "action_mask" else v.masked_fill(masked, float("nan")) for k, v in batch.items()}
    clean, dirty = _run(fn, batch), _run(fn, poisoned)
    torch.testing.assert_close(dirty[:2], clean[:2], rtol=0, atol=0)
    assert torch.isfinite(dirty[0])


def test_precomputed_reference_sums_are_the_ld_weighted_sums():
    """`ref_logprob` `[N]` is taken as the reference's summed (`ld_alpha`-weighted) log-probs."""
    batch = _pairs_batch()
    fn = TRLDPOLoss(ld_alpha=0.3, loss_type=["ipo", "aot"])
    per_token = _run(fn, batch)
    sums = fn.sequence_logps(batch["ref_logprob"], batch["action_mask"])
    precomputed = _run(fn, {**batch, "ref_logprob": sums})
    torch.testing.assert_close(precomputed[:2], per_token[:2])
    # LD-DPO by hand: lengths 3 and 5 share 3 tokens; the rejected row's last 2 count α = 0.3.
    lp = torch.tensor([[-1.0, -1.0, -1.0, 0.0, 0.0], [-2.0, -2.0, -2.0, -2.0, -2.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]).bool()
    torch.testing.assert_close(fn.sequence_logps(lp, mask), torch.tensor([-3.0, -6.0 - 0.3 * 4.0], dtype=torch.float64))


def test_f_divergence_scores():
    rho = torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float64)
    torch.testing.assert_close(f_divergence_score(rho, "forward_kl", 0.5), 1 - torch.exp(-rho))
    torch.testing.assert_close(f_divergence_score(rho, "alpha_divergence", 0.5), (torch.exp(-0.5 * rho) - 1) / -0.5)
    assert f_divergence_score(rho, "alpha_divergence", 1.0) is rho  # the limit α → 1 is the reverse KL
    big = torch.tensor([200.0], dtype=torch.float16)  # the exponent is capped where e^x stays finite in float16
    assert f_divergence_score(big, "alpha_divergence", 2.0).item() == pytest.approx(59873.0, rel=1e-3)  # e^11 − 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"loss_type": "dpo"}, r"^dpo: loss_type='dpo' is not valid; must be one of 'sigmoid', 'hinge'"),
        ({"loss_type": []}, r"loss_type=\[\] is not valid"),
        ({"loss_type": ["ipo", "sft"], "loss_weights": [1.0]}, r"loss_weights=\[1.0\] has 1 weight\(s\) but loss_t"),
        ({"loss_weights": [True]}, r"loss_weights=\[True\] is not valid; must be a list of finite numbers"),
        ({"loss_weights": [float("nan")]}, r"loss_weights=\[nan\] is not valid"),
        ({"loss_type": "nca_pair", "f_divergence_type": "js_divergence"}, r"f_divergence_type='js_divergence' only"),
        ({"f_divergence_type": "kl"}, r"f_divergence_type='kl' is not valid; must be one of 'reverse_kl'"),
        ({"loss_type": "aot", "use_weighting": True}, r"use_weighting=True does not apply to loss_type 'aot'"),
        ({"loss_type": ["sigmoid", "sft"], "use_weighting": True}, r"does not apply to loss_type 'sft'"),
        ({"loss_type": "exo_pair"}, r"'exo_pair' needs label_smoothing > 0"),
        ({"ld_alpha": 1.5}, r"ld_alpha=1.5 is not valid; must be in \[0, 1\] or None"),
        ({"discopop_tau": 0.0}, r"discopop_tau=0.0 is not valid; must be > 0"),
        ({"f_alpha_divergence_coef": float("inf")}, r"f_alpha_divergence_coef=inf is not valid"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TRLDPOLoss(**kwargs)


def test_inputs_an_option_needs_are_asked_for_by_name():
    batch = _pairs_batch()
    inputs = {k: v for k, v in batch.items() if k != "log_sum_sq_probs"}
    with pytest.raises(ValueError, match=r"use_weighting=True needs log_sum_sq_probs"):
        TRLDPOLoss(use_weighting=True)(**inputs)
    with pytest.raises(ValueError, match=r"'sft' with window normalization .* needs chosen_valid_toks"):
        TRLDPOLoss(loss_type="sft")(**inputs, global_valid_seqs=12)
    assert TRLDPOLoss.inputs() == (
        "logprob",
        "ref_logprob",
        "action_mask",
        "log_sum_sq_probs",
        "chosen_valid_toks",
        "global_valid_seqs",
    )
    assert TRLDPOLoss(loss_type=("ipo", "sft")).args["loss_type"] == ["ipo", "sft"]
    assert TRLDPOLoss(loss_type="ipo").given == {"loss_type"}


# ================================================================================================
# Trainer level: trl_ext.DPOTrainer vs trl.DPOTrainer, one step
# ================================================================================================

PAIRS = 8


def _uneven_pairs(num_pairs: int, seed: int) -> Dataset:
    """The toy preference pairs with rejected completions of another length (1 to 7 letters) than the chosen ones,
    so that LD-DPO, IPO's and `sigmoid_norm`'s length normalization and `sft`'s token count matter."""
    rng = random.Random(seed)
    pairs = toy_preference_dataset(num_pairs, seed=seed)
    rejected = [" " + " ".join(row["rejected"].split()[:1] * rng.randint(1, 7)) for row in pairs]
    return pairs.remove_columns("rejected").add_column("rejected", rejected)


@pytest.fixture(scope="module")
def pairs() -> Dataset:
    return _uneven_pairs(PAIRS, seed=0)


def _one_step(trainer_class, config_class, out, model, reference, dataset, **overrides):
    """One SGD step (lr 1, no clipping) against `reference`; returns the trainer and the parameter update."""
    settings = {**CPU, "output_dir": str(out), "per_device_train_batch_size": 4, "max_steps": 1}
    settings.update(optim="sgd", learning_rate=1.0, max_grad_norm=0.0, **overrides)
    trainer = trainer_class(
        model=model,
        ref_model=AutoModelForCausalLM.from_pretrained(reference),
        args=config_class(**settings),
        train_dataset=dataset,
        processing_class=build_tokenizer(),
    )
    before = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
    trainer.train()
    return trainer, torch.cat([p.detach().flatten() for p in trainer.model.parameters()]) - before


# TRL's logged metric -> trl_ext's
SAME_METRICS = {
    "loss": "dpo_loss",
    "rewards/chosen": "chosen_reward",
    "rewards/rejected": "rejected_reward",
    "rewards/accuracies": "accuracy_mean",
    "rewards/margins": "rewards/margins",
    "logps/chosen": "logps/chosen",
    "logps/rejected": "logps/rejected",
}

PARITY_CASES = {
    **{t: {"loss_type": t} for t in DPO_LOSS_TYPES},
    "exo_pair": {"loss_type": "exo_pair", "label_smoothing": 1e-3},
    "robust": {"loss_type": "robust", "label_smoothing": 0.1},
    "aot": {"loss_type": "aot", "label_smoothing": 0.1},
    "aot_unpaired": {"loss_type": "aot_unpaired", "label_smoothing": 0.1},
    "two_types": {"loss_type": ["ipo", "sft"], "loss_weights": [1.0, 0.5]},
    "mpo": {"loss_type": ["sigmoid", "bco_pair", "sft"], "loss_weights": [0.8, 0.2, 1.0]},
    "forward_kl": {"f_divergence_type": "forward_kl"},
    "js_divergence": {"loss_type": "sigmoid_norm", "f_divergence_type": "js_divergence"},  # log 2 / n: n matters
    "alpha_divergence": {"loss_type": "ipo", "f_divergence_type": "alpha_divergence", "f_alpha_divergence_coef": 0.3},
    "ld_alpha": {"ld_alpha": 0.5},
    "ld_alpha_precomputed": {"loss_type": "sigmoid_norm", "ld_alpha": 0.5, "precompute_ref_log_probs": True},
    "wpo": {"use_weighting": True},
    "wpo_two_types": {"loss_type": ["ipo", "apo_down"], "use_weighting": True, "beta": 0.5},
    "discopop_tau": {"loss_type": "discopop", "discopop_tau": 0.2},
}


@pytest.mark.parametrize("case", list(PARITY_CASES))
def test_one_step_equals_trl(random_tiny_model, random_teacher, pairs, tmp_path, case, float_tolerance):
    options = PARITY_CASES[case]
    theirs, their_update = _one_step(
        trl.DPOTrainer, trl.DPOConfig, tmp_path / "trl", random_tiny_model, random_teacher, pairs, **options
    )
    # TRL has no KL term: off (with precompute_ref_log_probs that is the default)
    kl_off = {} if options.get("precompute_ref_log_probs") else {"kl_coef": 0.0}
    ours, our_update = _one_step(
        DPOTrainer, DPOConfig, tmp_path / "ours", random_tiny_model, random_teacher, pairs, **options, **kl_off
    )
    assert ours.kl_fn.name == "none"
    assert their_update.norm() > 1e-3
    # float32 sums over the step's tokens, of weights up to 1 (the RMSNorm weights) plus the update
    tokens = logged(theirs, "num_tokens")[-1]
    torch.testing.assert_close(
        our_update, their_update, **float_tolerance(torch.float32, tokens, 1 + their_update.abs().max())
    )
    assert logged(ours, "loss") == pytest.approx(logged(theirs, "loss"), rel=1e-5)
    # every metric is made of the sequences' summed log-probs (the largest logged values)
    tol = float_tolerance(torch.float32, tokens, max(abs(v) for name in SAME_METRICS for v in logged(theirs, name)))
    for their_name, our_name in SAME_METRICS.items():
        assert logged(ours, our_name) == pytest.approx(logged(theirs, their_name), rel=tol["rtol"], abs=tol["atol"]), (
            our_name
        )


def test_two_accumulation_steps_equal_trls_one_batch(
    random_tiny_model, random_teacher, pairs, tmp_path, float_tolerance
):
    """IPO + SFT over 8 pairs: 2 accumulation steps of 4 pairs (window normalization) give the loss and update of TRL's
    single batch of 8; TRL's own 2 × 4 averages each micro-batch's SFT token mean (other token counts) and differs."""
    options = {"loss_type": ["ipo", "sft"], "loss_weights": [1.0, 0.5]}
    one = {"per_device_train_batch_size": PAIRS}
    split = {"per_device_train_batch_size": PAIRS // 2, "gradient_accumulation_steps": 2}

    def step(trainer_class, config_class, name, **overrides):
        out = tmp_path / name
        return _one_step(trainer_class, config_class, out, random_tiny_model, random_teacher, pairs, **overrides)

    theirs, their_one = step(trl.DPOTrainer, trl.DPOConfig, "trl_one", **options, **one)
    ours, our_split = step(DPOTrainer, DPOConfig, "ours_split", **options, **split, kl_coef=0.0)
    # float32 sums over the batch's tokens, of weights up to 1 (the RMSNorm weights) plus the update
    tol = float_tolerance(torch.float32, logged(theirs, "num_tokens")[-1], 1 + their_one.abs().max())
    torch.testing.assert_close(our_split, their_one, **tol)
    assert logged(ours, "dpo_loss") == pytest.approx(logged(theirs, "loss"), rel=1e-5)
    _, their_split = step(trl.DPOTrainer, trl.DPOConfig, "trl_split", **options, **split)
    assert not torch.allclose(their_split, their_one, rtol=1e-3, atol=tol["atol"])  # beyond the tolerance above


def test_evaluation_equals_trl(random_tiny_model, random_teacher, pairs, tmp_path):
    """Evaluation normalizes over each evaluation batch, as TRL does: the same `eval_loss` for IPO + SFT."""
    options = {"loss_type": ["ipo", "sft"], "loss_weights": [1.0, 0.5], "per_device_eval_batch_size": PAIRS}
    runs = [(trl.DPOTrainer, trl.DPOConfig, {}), (DPOTrainer, DPOConfig, {"kl_coef": 0.0})]
    results = []
    for trainer_class, config_class, extra in runs:
        args = config_class(output_dir=str(tmp_path / trainer_class.__module__), **CPU, **options, **extra)
        trainer = trainer_class(
            model=random_tiny_model,
            ref_model=AutoModelForCausalLM.from_pretrained(random_teacher),
            args=args,
            train_dataset=pairs,
            eval_dataset=_uneven_pairs(PAIRS, seed=5),
            processing_class=build_tokenizer(),
        )
        results.append(trainer.evaluate())
    theirs, ours = results
    assert ours["eval_loss"] == pytest.approx(theirs["eval_loss"], rel=1e-5)
    assert ours["eval_dpo_loss"] == pytest.approx(theirs["eval_loss"], rel=1e-5)
    assert ours["eval_logps/chosen"] == pytest.approx(theirs["eval_logps/chosen"], rel=1e-5)
