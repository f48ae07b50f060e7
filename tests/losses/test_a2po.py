"""A*-PO (`trl_ext.losses.a2po`, `trl_ext.advantages.a2po`) against TRL 1.16's `trl.experimental.a2po`.

* The loss: on the same prepared batch (prompt and completion ids, the completion mask cut at the first EOS, the
  reference's summed log-probs, rewards and V*), `A2POTrainer.compute_loss` of TRL and the port (fed the per-token
  log-probs of the same logits, `trl_ext.A2POTrainer.completion_logps`) give the same loss, gradient and metrics, for
  several β₂, float32 and float64, with and without `logits_to_keep`.
* Closed forms: one sequence by hand; a row without a valid token; `[B]` and `[B, T]` reference log-probs and
  advantages; the window shares of two micro-batches add up to the whole batch (and differ from TRL's mean of
  per-micro-batch means when the micro-batches differ in size: the pinned deliberate difference).
* V*: `optimal_value` is the mean reward as β₁ → ∞, the largest as β₁ → 0 (with its closed-form correction), the
  binary-reward closed form in between, finite for any reward scale; bad inputs are errors naming the argument.
  (TRL's `_estimate_optimal_values` on stubbed rewards: tests/trainers/test_a2po_trainer.py.)
"""

from __future__ import annotations

import math
from collections import defaultdict
from types import MethodType, SimpleNamespace

import pytest
import torch
from trl.experimental.a2po import A2POTrainer as TRLA2POTrainer

from trl_ext.advantages.a2po import optimal_value
from trl_ext.losses import get_policy_loss
from trl_ext.trainers.a2po.trainer import A2POTrainer

# ================================================================================================
# The loss against TRL's compute_loss
# ================================================================================================

VOCAB, PROMPT, WIDTH, EOS = 11, 3, 6, 2


class FixedLogits(torch.nn.Module):
    """A "model" whose logits are a parameter: TRL's and the port's forward read the same values, and the gradient
    of each loss with respect to the logits is compared."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(logits.clone())

    def forward(self, input_ids, attention_mask, logits_to_keep=None):
        assert input_ids.shape == self.logits.shape[:2] and attention_mask.shape == input_ids.shape
        return SimpleNamespace(logits=self.logits if logits_to_keep is None else self.logits[:, -logits_to_keep:])


def prepared_batch(rows: int = 5, seed: int = 0, dtype=torch.float32) -> tuple[torch.Tensor, dict]:
    """Logits and a batch as TRL's `_prepare_inputs` makes it: left-padded prompts, completions whose mask ends at the
    first EOS (rows ending at position 0, mid-way and never), binary rewards, V* and the reference's summed
    log-probs."""
    g = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(3, VOCAB, (rows, PROMPT), generator=g)
    prompt_mask = torch.ones(rows, PROMPT, dtype=torch.long)
    prompt_mask[1, 0] = 0  # left padding
    completion = torch.randint(3, VOCAB, (rows, WIDTH), generator=g)
    eos_at = [0, 3, None, 5, 1][:rows] + [None] * max(rows - 5, 0)
    for row, at in enumerate(eos_at):
        if at is not None:
            completion[row, at] = EOS
    positions = torch.arange(WIDTH).expand(rows, -1)
    ends = torch.tensor([WIDTH if at is None else at for at in eos_at]).unsqueeze(1)
    completion_mask = (positions <= ends).long()
    logits = torch.randn(rows, PROMPT + WIDTH, VOCAB, generator=g, dtype=dtype)
    batch = {
        "input_ids": torch.cat([prompt_ids, completion], dim=1),
        "attention_mask": torch.cat([prompt_mask, completion_mask], dim=1),
        "logits_to_keep": WIDTH,
        "ref_logps": -(torch.rand(rows, generator=g, dtype=dtype) * 8 + 1),
        "rewards": torch.randint(0, 2, (rows,), generator=g).to(dtype),
        "v_star": torch.rand(rows, generator=g, dtype=dtype),
    }
    return logits, batch


def keys_of(takes_logits_to_keep: bool) -> set[str]:
    return {"input_ids", "attention_mask", *(["logits_to_keep"] if takes_logits_to_keep else [])}


def trl_loss(logits: torch.Tensor, batch: dict, beta2: float, takes_logits_to_keep: bool):
    """TRL's `A2POTrainer.compute_loss` (and its `_get_sequence_logps`) on a stand-in trainer holding what they read."""
    model = FixedLogits(logits)
    trainer = SimpleNamespace(
        model=model,
        args=SimpleNamespace(beta2=beta2),
        model_kwarg_keys=keys_of(takes_logits_to_keep),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )
    trainer._get_sequence_logps = MethodType(TRLA2POTrainer._get_sequence_logps, trainer)
    loss = TRLA2POTrainer.compute_loss(trainer, model, batch)
    loss.backward()
    metrics = {key: values[0] for key, values in trainer._metrics["train"].items()}
    return loss.detach(), model.logits.grad, metrics


def port_loss(logits: torch.Tensor, batch: dict, beta2: float, takes_logits_to_keep: bool, **window):
    """The port: trl_ext's trainer's per-token log-probs of the same forward, then the `a2po` loss."""
    model = FixedLogits(logits)
    trainer = SimpleNamespace(model_kwarg_keys=keys_of(takes_logits_to_keep))
    logprob, mask = A2POTrainer.completion_logps(trainer, model, batch)
    loss, metrics = get_policy_loss("a2po", beta2=beta2)(
        logprob=logprob,
        ref_logprob=batch["ref_logps"],
        action_mask=mask,
        advantages=batch["rewards"] - batch["v_star"],
        **window,
    )
    loss.backward()
    return loss.detach(), model.logits.grad, {key: value.item() for key, value in metrics.items()}


@pytest.mark.parametrize("takes_logits_to_keep", [True, False], ids=["logits_to_keep", "full-logits"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("beta2", [1e-3, 0.1, 2.0])
def test_the_port_is_trls_compute_loss(beta2, dtype, takes_logits_to_keep):
    logits, batch = prepared_batch(dtype=dtype)
    want, want_grad, want_metrics = trl_loss(logits, batch, beta2, takes_logits_to_keep)
    got, got_grad, got_metrics = port_loss(logits, batch, beta2, takes_logits_to_keep)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-6, atol=1e-9)
    assert torch.count_nonzero(want_grad) > 0
    assert got_metrics["implicit_reward"] == pytest.approx(want_metrics["implicit_reward"], rel=1e-6, abs=1e-9)
    assert got_metrics["advantage"] == pytest.approx(want_metrics["advantage"], rel=1e-6, abs=1e-9)
    assert got_metrics["a2po_loss"] == want.item()


def test_the_port_is_trls_compute_loss_with_the_window_count_of_its_batch():
    """Window normalization over a window that is this one batch is TRL's per-batch mean."""
    logits, batch = prepared_batch(rows=4, seed=3)
    want, want_grad, _ = trl_loss(logits, batch, 0.05, True)
    got, got_grad, _ = port_loss(logits, batch, 0.05, True, global_valid_seqs=torch.tensor(4.0))
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-5, atol=1e-9)


# ================================================================================================
# Closed forms and input forms
# ================================================================================================


def run(beta2: float, **batch):
    lp = batch.pop("logprob").clone().requires_grad_(True)
    loss, metrics = get_policy_loss("a2po", beta2=beta2)(logprob=lp, **batch)
    loss.backward()
    return loss.detach(), lp.grad, metrics


def test_one_sequence_by_hand():
    """ρ = (−1 − 2) − (−2.5) = −0.5, β₂ρ = −0.1, A = 1 − 0.3: L = (−0.1 − 0.7)² = 0.64 and dL/dlp_t = 2·(−0.8)·β₂
    on each valid token. A second row without a valid token adds 0 but counts in the mean (TRL counts every row)."""
    lp = torch.tensor([[-1.0, -2.0, -7.0], [-1.0, -1.0, -1.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    batch = {"ref_logprob": torch.tensor([-2.5, -9.0], dtype=torch.float64), "action_mask": mask}
    loss, grad, metrics = run(0.2, logprob=lp[:1], advantages=torch.tensor([0.7], dtype=torch.float64),
                              ref_logprob=batch["ref_logprob"][:1], action_mask=mask[:1])  # fmt: skip
    assert loss.item() == pytest.approx(0.64, rel=1e-12)
    torch.testing.assert_close(grad, torch.tensor([[-0.32, -0.32, 0.0]], dtype=torch.float64))
    assert metrics["implicit_reward"].item() == pytest.approx(-0.1, rel=1e-12)
    assert metrics["advantage"].item() == pytest.approx(0.7, rel=1e-12)
    loss, grad, metrics = run(0.2, logprob=lp, advantages=torch.tensor([0.7, 5.0], dtype=torch.float64), **batch)
    assert loss.item() == pytest.approx(0.32, rel=1e-12)
    torch.testing.assert_close(grad, torch.tensor([[-0.16, -0.16, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64))
    assert metrics["advantage"].item() == pytest.approx(0.35, rel=1e-12)  # the empty row's advantage is 0


def _batch(seed: int = 0, rows: int = 4, cols: int = 5) -> dict:
    g = torch.Generator().manual_seed(seed)
    lp = -(torch.rand(rows, cols, generator=g, dtype=torch.float64) * 2 + 0.05)
    lengths = torch.tensor([5, 1, 3, 4][:rows])
    return {
        "logprob": lp,
        "ref_logprob": lp + 0.3 * torch.randn(rows, cols, generator=g, dtype=torch.float64),
        "action_mask": torch.arange(cols) < lengths.unsqueeze(1),
        "advantages": torch.randn(rows, generator=g, dtype=torch.float64),
    }


def test_reference_sums_equal_per_token_reference():
    batch = _batch()
    per_token = run(0.3, **batch)
    sums = torch.where(batch["action_mask"], batch["ref_logprob"], 0).sum(-1)
    per_row = run(0.3, **{**batch, "ref_logprob": sums})
    torch.testing.assert_close(per_row[0], per_token[0], rtol=1e-14, atol=0)
    torch.testing.assert_close(per_row[1], per_token[1], rtol=1e-14, atol=0)


def test_a_per_token_advantage_is_read_as_its_token_mean():
    batch = _batch()
    per_row = run(0.3, **batch)
    broadcast = batch["advantages"].unsqueeze(1).expand_as(batch["logprob"]).clone()
    torch.testing.assert_close(run(0.3, **{**batch, "advantages": broadcast})[0], per_row[0], rtol=1e-14, atol=0)
    varying = broadcast + torch.linspace(-1, 1, 5, dtype=torch.float64)  # a token mean of row 1's one token: +(-1)
    means = torch.where(batch["action_mask"], varying, 0).sum(-1) / batch["action_mask"].sum(-1)
    torch.testing.assert_close(run(0.3, **{**batch, "advantages": varying})[0], run(0.3, **{**batch, "advantages":
                               means})[0], rtol=1e-14, atol=0)  # fmt: skip


def test_window_shares_add_up_to_the_batch_mean_and_differ_from_trls_mean_of_means():
    """Micro-batches of 3 and 1 rows with the window's count (4): their shares add up to the whole batch's mean, value
    and gradient. TRL averages each micro-batch and then the two (its `compute_loss` mean, divided by the
    accumulation steps): with micro-batches of unequal sizes that weighs the single row 3 times as much."""
    batch = _batch()
    whole, whole_grad, _ = run(0.3, **batch)
    window = {"global_valid_seqs": torch.tensor(4.0)}
    parts = [run(0.3, **{k: v[rows] for k, v in batch.items()}, **window) for rows in (slice(0, 3), slice(3, 4))]
    torch.testing.assert_close(parts[0][0] + parts[1][0], whole, rtol=1e-14, atol=0)
    torch.testing.assert_close(torch.cat([parts[0][1], parts[1][1]]), whole_grad, rtol=1e-14, atol=0)
    trl_means = [run(0.3, **{k: v[rows] for k, v in batch.items()})[0] for rows in (slice(0, 3), slice(3, 4))]
    assert abs((trl_means[0] + trl_means[1]) / 2 - whole) > 1e-3


def test_ref_logprob_of_another_shape_is_an_error():
    batch = _batch()
    with pytest.raises(ValueError, match=r"a2po: ref_logprob has shape \(4, 3\) but logprob has shape \(4, 5\)"):
        run(0.3, **{**batch, "ref_logprob": batch["ref_logprob"][:, :3]})
    with pytest.raises(ValueError, match=r"a2po: ref_logprob must be \[B, T\] or \[B\] with B=4, got \(3,\)"):
        run(0.3, **{**batch, "ref_logprob": batch["ref_logprob"][:3, 0]})
    with pytest.raises(ValueError, match=r"a2po: beta2=-0\.1 is not valid; must be > 0"):
        get_policy_loss("a2po", beta2=-0.1)


# ================================================================================================
# V*
# ================================================================================================

REWARDS = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.2, 0.9, -0.5, 0.9]])


def test_large_beta1_gives_the_mean_reward():
    rewards = REWARDS.double()
    torch.testing.assert_close(optimal_value(rewards, 1e7), rewards.mean(1), rtol=0, atol=1e-6)


def test_small_beta1_gives_the_largest_reward():
    """β₁ → 0: V* = max + β₁·log(k/N) + O(e^{−gap/β₁}), k the number of samples at the max."""
    rewards = REWARDS.double()
    beta1 = 1e-3
    top = rewards.max(1).values
    ties = (rewards == top.unsqueeze(1)).sum(1).double()
    torch.testing.assert_close(optimal_value(rewards, beta1), top + beta1 * torch.log(ties / 4), rtol=0, atol=1e-12)
    assert (optimal_value(rewards, 1e-6) - top).abs().max() < 1e-5


@pytest.mark.parametrize("beta1", [0.1, 0.5, 2.0])
def test_binary_rewards_closed_form_and_bounds(beta1):
    """Binary rewards with a share p of ones: V* = β₁·log(1 + p·(e^{1/β₁} − 1)), between the mean and the max."""
    rewards = torch.tensor([[1, 0, 0, 0, 0, 0, 0, 1], [0] * 8, [1] * 8, [1, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.float64)
    p = rewards.mean(1)
    expected = beta1 * torch.log(1 + p * (math.exp(1 / beta1) - 1))
    got = optimal_value(rewards, beta1)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-15)
    assert torch.all(got >= p - 1e-12) and torch.all(got <= rewards.max(1).values + 1e-12)


def test_no_overflow_and_integer_rewards():
    big = torch.tensor([[1000.0, 999.0], [-1000.0, -1000.0]], dtype=torch.float64)
    value = optimal_value(big, 0.01)
    assert torch.isfinite(value).all()
    torch.testing.assert_close(value, torch.tensor([1000.0 + 0.01 * math.log(0.5), -1000.0], dtype=torch.float64))
    integers = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0]])
    torch.testing.assert_close(optimal_value(integers, 0.5), optimal_value(REWARDS[:2], 0.5), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("rewards", "beta1", "message"),
    [
        (REWARDS, 0.0, r"optimal_value: beta1=0\.0 is not valid; must be a finite number > 0"),
        (REWARDS, -1, r"beta1=-1 is not valid"),
        (REWARDS, math.inf, r"beta1=inf is not valid"),
        (REWARDS, True, r"beta1=True is not valid"),
        (REWARDS[0], 0.5, r"rewards must be \[P, N\] .*got shape \(4,\)"),
        (torch.zeros(3, 0), 0.5, r"rewards must be \[P, N\] .*got shape \(3, 0\)"),
        (torch.tensor([[0.0, math.nan]]), 0.5, r"rewards\[0, 1\] is nan; all rewards must be finite"),
        ([["a"]], 0.5, r"rewards must be a numeric tensor"),
    ],
)
def test_bad_v_star_inputs_are_errors_naming_them(rewards, beta1, message):
    with pytest.raises(ValueError, match=message):
        optimal_value(rewards, beta1)
