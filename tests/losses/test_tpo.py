"""The TPO loss (`trl_ext.losses.tpo`, registered as `tpo`) against TRL 1.16's own computation.

* TRL as the oracle: TRL's `TPOTrainer._compute_loss`, run on random logits of a batch made by TRL's own collator,
  gives the loss, the gradient with respect to the logits and the reward metrics that the port gives on the same
  logits' log-probs, for every `loss_type`, `tpo_alpha` (0 included: TRL's batch then has no reference rows), `beta`,
  `label_smoothing` and `tpo_l_gamma`.
* A closed form for one triple, by hand; the rows' layout (any place of the reference rows); window shares that add
  up to the whole batch; the deliberate difference (no reference tokens: 0, where TRL's NLL is NaN); errors that
  name the field and its allowed values.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from trl.experimental.tpo import TPOTrainer as TRLTPOTrainer
from trl.experimental.tpo.tpo_trainer import DataCollatorForTriplePreference

from trl_ext.losses import get_policy_loss
from trl_ext.losses.tpo import TPO_LOSS_TYPES, TPOLoss

VOCAB = 11


# ================================================================================================
# TRL as the oracle
# ================================================================================================


def _trl_batch(triples: int, include_reference: bool, seed: int) -> dict[str, torch.Tensor]:
    """A batch of TRL's collator: prompts of 1-4 tokens, completions of 1-5 (each of the three its own length)."""
    rng = random.Random(seed)
    ids = lambda n: [rng.randrange(1, VOCAB) for _ in range(n)]  # noqa: E731
    examples = [
        {
            "prompt_ids": ids(rng.randint(1, 4)),
            "chosen_ids": ids(rng.randint(1, 5)),
            "rejected_ids": ids(rng.randint(1, 5)),
            "reference_ids": ids(rng.randint(1, 5)),
        }
        for _ in range(triples)
    ]
    return DataCollatorForTriplePreference(pad_token_id=0, include_reference=include_reference)(examples)


def _trl_loss(logits: torch.Tensor, batch: dict, options: dict) -> tuple[torch.Tensor, dict[str, float]]:
    """TRL's `TPOTrainer._compute_loss` on a model that returns `logits`: its loss and its logged metrics."""
    trainer = SimpleNamespace(
        model=SimpleNamespace(training=True),
        accelerator=SimpleNamespace(gather_for_metrics=lambda x: x, gather=lambda x: x),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _total_train_tokens=0,
        _tp_size=1,
        **{"loss_type": "sigmoid", "beta": 0.01, "label_smoothing": 0.0, "tpo_alpha": 1.0, "tpo_l_gamma": 0.5},
    )
    vars(trainer).update(options)
    loss = TRLTPOTrainer._compute_loss(trainer, lambda **_: SimpleNamespace(logits=logits), batch, False)
    return loss, {name: values[0] for name, values in trainer._metrics["train"].items()}


def _ours(logits: torch.Tensor, batch: dict, options: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The port on the same logits: per-token log-probs of the next tokens, TRL's blocks [chosen; rejected;
    reference] laid out as triples of consecutive rows with the reference rows flagged (the documented order)."""
    logps = logits[:, :-1].log_softmax(-1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    mask = batch["completion_mask"][:, 1:].bool()
    branches = 3 if options.get("tpo_alpha", 1.0) != 0 else 2
    triples = logps.shape[0] // branches
    order = torch.arange(branches * triples).view(branches, triples).t().reshape(-1)
    reference = (torch.arange(branches) == 2).repeat(triples)
    return TPOLoss(**options)(logprob=logps[order], action_mask=mask[order], expert_mask=reference)


ORACLE_CASES = {
    **{f"{t}": {"loss_type": t} for t in TPO_LOSS_TYPES},
    **{f"{t}-no-nll": {"loss_type": t, "tpo_alpha": 0.0} for t in TPO_LOSS_TYPES},
    "sigmoid-options": {"beta": 0.5, "label_smoothing": 0.2, "tpo_alpha": 0.3},
    "hinge-beta": {"loss_type": "hinge", "beta": 2.0, "tpo_alpha": 2.5},
    "ipo-beta": {"loss_type": "ipo", "beta": 0.3, "tpo_alpha": 0.7},
    "tpo-l-options": {"loss_type": "tpo-l", "beta": 0.8, "label_smoothing": 0.1, "tpo_l_gamma": 1.3},
    "tpo-l-negative-margin": {"loss_type": "tpo-l", "beta": 2.0, "tpo_l_gamma": -0.4, "tpo_alpha": 0.0},
}


@pytest.mark.parametrize("case", list(ORACLE_CASES))
def test_equals_trls_compute_loss(case):
    """Value, gradient with respect to the logits, and TRL's reward metrics, for each option (float64)."""
    options = ORACLE_CASES[case]
    batch = _trl_batch(5, include_reference=options.get("tpo_alpha", 1.0) != 0, seed=len(case))
    gen = torch.Generator().manual_seed(len(case))
    logits = (3.0 * torch.randn(*batch["input_ids"].shape, VOCAB, generator=gen, dtype=torch.float64)).requires_grad_()
    theirs, trl_metrics = _trl_loss(logits, batch, options)
    (trl_grad,) = torch.autograd.grad(theirs, logits)
    ours, metrics = _ours(logits, batch, options)
    (grad,) = torch.autograd.grad(ours, logits)
    # the NLL's token mean divides by (count + 1e-8), as the `sft` loss it is: a relative 1e-9 at these counts
    torch.testing.assert_close(ours, theirs, rtol=1e-8, atol=1e-12)
    torch.testing.assert_close(grad, trl_grad, rtol=1e-8, atol=1e-12)
    assert trl_grad.abs().sum() > 0
    for trl_name, name in [
        ("rewards/chosen", "chosen_reward"),
        ("rewards/rejected", "rejected_reward"),
        ("rewards/accuracies", "accuracy_mean"),
    ]:
        # (TRL's accuracy is a float32 mean)
        assert metrics[name].item() == pytest.approx(trl_metrics[trl_name], rel=1e-7, abs=1e-12), name
    assert metrics["tpo_loss"].item() == pytest.approx(theirs.item(), rel=1e-8)
    alpha = options.get("tpo_alpha", 1.0)
    total = metrics["preference_loss"] + alpha * metrics["nll_loss"]
    assert total.item() == pytest.approx(theirs.item(), rel=1e-8)


# ================================================================================================
# Closed form, layout, window
# ================================================================================================


def _triple(values: list[list[float]], lengths: list[int]) -> dict[str, torch.Tensor]:
    lp = torch.tensor(values, dtype=torch.float64)
    mask = torch.arange(lp.shape[1]) < torch.tensor(lengths).unsqueeze(1)
    return {"logprob": lp, "action_mask": mask, "expert_mask": torch.tensor([False, False, True])}


def test_one_triple_by_hand():
    """Chosen S_c = −1 (1 token), rejected S_r = −4 (2 tokens), reference −0.5 and −1.5 (2 tokens), β = 0.5."""
    batch = _triple([[-1.0, 9.0], [-1.0, -3.0], [-0.5, -1.5]], [1, 2, 2])
    nll = (0.5 + 1.5) / 2
    softplus = lambda x: math.log1p(math.exp(-x))  # noqa: E731  # −log σ(x)
    expected = {  # (Δ = 3, Δ̄ = −1 − (−2) = 1)
        "sigmoid": softplus(0.5 * 3),
        "hinge": 0.0,  # max(0, 1 − 0.5·3)
        "ipo": (1 - 1 / (2 * 0.5)) ** 2,  # (Δ̄ − 1/(2β))² = 0
        "tpo-l": softplus(0.5 * (1 - 0.2 / 0.5)),  # γ = 0.2
    }
    for loss_type, pair in expected.items():
        fn = get_policy_loss("tpo", loss_type=loss_type, beta=0.5, tpo_l_gamma=0.2, tpo_alpha=2.0)
        loss, metrics = fn(**batch)
        # (the NLL's token mean divides by 2 + 1e-8)
        assert loss.item() == pytest.approx(pair + 2.0 * nll, rel=1e-8, abs=1e-15), loss_type
        assert metrics["nll_loss"].item() == pytest.approx(nll, rel=1e-8)
        assert metrics["accuracy_mean"].item() == 1.0
        normalized = loss_type in ("ipo", "tpo-l")
        assert metrics["chosen_reward"].item() == pytest.approx(0.5 * -1.0)
        assert metrics["rejected_reward"].item() == pytest.approx(0.5 * (-2.0 if normalized else -4.0))
    # label smoothing ε: −(1 − ε)·log σ(βΔ) − ε·log σ(−βΔ)
    loss, _ = get_policy_loss("tpo", beta=0.5, label_smoothing=0.25, tpo_alpha=0.0)(**batch)
    z = torch.tensor(1.5, dtype=torch.float64)
    assert loss.item() == pytest.approx((-0.75 * F.logsigmoid(z) - 0.25 * F.logsigmoid(-z)).item(), rel=1e-12)


def _random_rows(rows: int, cols: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    lp = -(torch.rand(rows, cols, generator=gen, dtype=torch.float64) * 2 + 0.05)
    lengths = torch.randint(1, cols + 1, (rows,), generator=gen)
    return lp, torch.arange(cols) < lengths.unsqueeze(1)


@pytest.mark.parametrize("loss_type", TPO_LOSS_TYPES)
def test_the_reference_rows_may_stand_anywhere(loss_type):
    """Triples (c, r, g) as consecutive rows, or the pairs first and the reference rows after, or interleaved
    otherwise: the preference rows pair up in order and the loss, its gradient and metrics are the same."""
    fn = get_policy_loss("tpo", loss_type=loss_type, beta=0.4, tpo_alpha=0.6, label_smoothing=0.1)
    lp, mask = _random_rows(9)
    triples = torch.tensor([False, False, True] * 3)
    layouts = {
        "pairs then references": [0, 1, 3, 4, 6, 7, 2, 5, 8],
        "references first": [2, 5, 8, 0, 1, 3, 4, 6, 7],
        "mixed": [0, 2, 1, 5, 3, 4, 8, 6, 7],
    }

    def run(rows):
        leaf = lp.clone().requires_grad_(True)
        loss, metrics = fn(logprob=leaf[rows], action_mask=mask[rows], expert_mask=triples[rows])
        loss.backward()
        return loss.detach(), leaf.grad, metrics

    want, want_grad, want_metrics = run(list(range(9)))
    for name, rows in layouts.items():
        got, grad, metrics = run(rows)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14, msg=name)
        torch.testing.assert_close(grad, want_grad, rtol=1e-12, atol=1e-14, msg=name)
        for key, value in want_metrics.items():
            torch.testing.assert_close(metrics[key], value, rtol=1e-12, atol=1e-14, msg=f"{name}: {key}")


def test_pairs_without_reference_rows_are_the_preference_term():
    lp, mask = _random_rows(9, seed=2)
    triples = torch.tensor([False, False, True] * 3)
    pairs = ~triples
    for alpha in (0.0, 1.0):
        fn = get_policy_loss("tpo", beta=0.3, tpo_alpha=alpha)
        with_references, metrics = fn(logprob=lp, action_mask=mask, expert_mask=triples)
        alone, alone_metrics = fn(logprob=lp[pairs], action_mask=mask[pairs], expert_mask=triples[pairs])
        torch.testing.assert_close(alone, metrics["preference_loss"], rtol=1e-12, atol=0)
        assert alone_metrics["nll_loss"].item() == 0.0
        expected = metrics["preference_loss"] + alpha * metrics["nll_loss"]
        torch.testing.assert_close(with_references, expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("loss_type", TPO_LOSS_TYPES)
def test_window_shares_add_up_to_the_whole_batch(loss_type):
    """Three micro-batches (1, 3 and 2 triples) with the window's counts: their losses and gradients add up to the
    whole batch's."""
    fn = get_policy_loss("tpo", loss_type=loss_type, beta=0.7, tpo_alpha=0.5)
    lp, mask = _random_rows(18, seed=4)
    reference = torch.tensor([False, False, True] * 6)
    whole = lp.clone().requires_grad_(True)
    whole_loss, _ = fn(logprob=whole, action_mask=mask, expert_mask=reference)
    whole_loss.backward()
    window = {
        "global_valid_seqs": torch.tensor(18.0),
        "expert_valid_seqs": 6,
        "expert_valid_toks": (mask & reference[:, None]).sum().float(),
    }
    parts = lp.clone().requires_grad_(True)
    total = sum(
        fn(logprob=parts[rows], action_mask=mask[rows], expert_mask=reference[rows], **window)[0]
        for rows in (slice(0, 3), slice(3, 12), slice(12, 18))
    )
    total.backward()
    torch.testing.assert_close(total, whole_loss.detach(), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(parts.grad, whole.grad, rtol=1e-12, atol=1e-14)


def test_no_reference_tokens_give_an_nll_of_0_where_trl_gives_nan():
    """The deliberate difference from TRL: reference completions with no token after the one-token shift (TRL's
    cross-entropy over no tokens is NaN, and so is its loss)."""
    batch = _trl_batch(2, include_reference=True, seed=1)
    batch["completion_mask"][4:] = 0  # the reference block: no completion tokens
    logits = torch.randn(*batch["input_ids"].shape, VOCAB, dtype=torch.float64, requires_grad=True)
    theirs, _ = _trl_loss(logits, batch, {})
    ours, metrics = _ours(logits, batch, {})
    assert math.isnan(theirs.item())
    assert metrics["nll_loss"].item() == 0.0 and ours.item() == pytest.approx(metrics["preference_loss"].item())


# ================================================================================================
# Errors
# ================================================================================================


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"loss_type": "dpo"},
            r"^tpo: loss_type='dpo' is not valid; must be one of 'sigmoid', 'hinge', 'ipo', 'tpo-l'",
        ),
        ({"beta": 0.0}, r"^tpo: beta=0.0 is not valid; must be > 0$"),
        ({"label_smoothing": 0.5}, r"^tpo: label_smoothing=0.5 is not valid; must be in \[0, 0.5\)$"),
        ({"tpo_alpha": -1.0}, r"^tpo: tpo_alpha=-1.0 is not valid; must be >= 0$"),
        ({"tpo_l_gamma": math.inf}, r"^tpo: tpo_l_gamma=inf is not valid; must be a finite number$"),
        ({"tpo_alpha": True}, r"^tpo: tpo_alpha=True is not valid"),
        ({"gamma": 0.5}, r"^tpo: unknown argument\(s\) 'gamma'; valid arguments: loss_type, beta, label_smoothing"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_policy_loss("tpo", **kwargs)


def test_bad_inputs_name_the_field():
    lp, mask = _random_rows(6)
    triples = torch.tensor([False, False, True] * 2)
    fn = get_policy_loss("tpo")
    with pytest.raises(ValueError, match=r"^tpo: expert_mask must be a \[B\] tensor with B=6, got \(5,\)$"):
        fn(logprob=lp, action_mask=mask, expert_mask=triples[:5])
    with pytest.raises(ValueError, match=r"expert_mask must be boolean or contain only 0 and 1; found 2 at \[1\]"):
        fn(logprob=lp, action_mask=mask, expert_mask=torch.tensor([0, 2, 1, 0, 0, 1]))
    with pytest.raises(
        ValueError,
        match=r"^tpo: window normalization needs global_valid_seqs, expert_valid_seqs and expert_valid_toks together; "
        r"expert_valid_seqs, expert_valid_toks missing",
    ):
        fn(logprob=lp, action_mask=mask, expert_mask=triples, global_valid_seqs=6)
    with pytest.raises(ValueError, match=r"^tpo: expert_valid_toks=-1 is not valid; must be a finite number >= 0"):
        fn(logprob=lp, action_mask=mask, expert_mask=triples, global_valid_seqs=6, expert_valid_seqs=2,
           expert_valid_toks=-1)  # fmt: skip
    # an odd number of preference rows: one chosen row has no rejected row (a device-side assert)
    with pytest.raises(RuntimeError, match=r"^tpo: expert_mask leaves an odd number of preference rows"):
        fn(logprob=lp, action_mask=mask, expert_mask=torch.tensor([False, False, True, False, True, True]))


def test_the_loss_reads_the_reference_rows_from_expert_mask_only():
    assert TPOLoss.inputs() == (
        "logprob",
        "action_mask",
        "expert_mask",
        "global_valid_seqs",
        "expert_valid_seqs",
        "expert_valid_toks",
    )
    assert TPOLoss.default_args() == {
        "loss_type": "sigmoid",
        "beta": 0.01,
        "label_smoothing": 0.0,
        "tpo_alpha": 1.0,
        "tpo_l_gamma": 0.5,
    }
