"""Call-time shape checks of every loss (docs/design.md §2.1-§2.2): wrong input shapes are errors at call time, not
silent broadcasts; [B] and [B, 1] advantages equal the same values repeated over T. On the batch of
test_validation_masked.py.
"""

from __future__ import annotations

import pytest
import torch
from test_validation_masked import MASK, B, T, make_batch, run_loss

from trl_ext.losses import POLICY_LOSSES, get_policy_loss

# --------------------------------------------------------------------------------------------------
# Call-time shape errors
# --------------------------------------------------------------------------------------------------

USES_OLD = [
    "ppo",
    "gspo",
    "cispo",
    "sapo",
    "topr",
    "sppo",
    "rec",
    "importance_sampling",
    "mix",
    "mix_chord",
    "m2po",
    "decoupled_ppo",
]
USES_OLD += ["geo_mean", "dro"]
USES_OLD += ["clip_cov", "kl_cov", "dppo_tv", "dppo_kl"]
USES_OLD += ["vespo", "luspo"]
USES_ADVANTAGES = [*USES_OLD, "opmd", "gpg", "a2po"]
ALL_NAMES = sorted(POLICY_LOSSES)
ADV_SHAPE_RE = r"advantages has shape \(.*\); expected \[B\], \[B, 1\] or \[B, T\] with B=4, T=5"


def call(name, **overrides):
    kwargs = {"mu_warmup_steps": 2} if name == "mix_chord" else {}
    batch = {**make_batch(), **overrides}
    return get_policy_loss(name, **kwargs)(**batch)


def test_shape_lists_are_complete():
    assert set(USES_ADVANTAGES) | {"sft", "sft_is", "sft_phi", "dpo", "tpo"} == set(POLICY_LOSSES)


@pytest.mark.parametrize("name", USES_OLD)
@pytest.mark.parametrize("shape", [(B, T - 1), (B + 1, T), (B * T,), (B, T, 1)])
def test_old_logprob_wrong_shape(name, shape):
    with pytest.raises(ValueError, match=r"old_logprob has shape \(.*\) but logprob has shape \(4, 5\)"):
        call(name, old_logprob=torch.zeros(shape, dtype=torch.float64))


@pytest.mark.parametrize("name", [n for n in USES_OLD if n != "ppo"])
def test_old_logprob_missing(name):
    with pytest.raises(ValueError, match=r"old_logprob has shape NoneType"):
        call(name, old_logprob=None)


def test_ppo_fallback_ignores_old_logprob():
    loss, _ = get_policy_loss("ppo", fallback_to_policy_gradient=True)(**{**make_batch(), "old_logprob": None})
    assert torch.isfinite(loss)
    with pytest.raises(ValueError, match=r"old_logprob has shape NoneType"):
        call("ppo", old_logprob=None)


@pytest.mark.parametrize("name", USES_ADVANTAGES)
@pytest.mark.parametrize("shape", [(B + 1,), (B - 1,), (B, T + 1), (B, 2), (B + 1, T), (B, T, 1), (1, T), ()])
def test_advantages_wrong_shape(name, shape):
    with pytest.raises(ValueError, match=ADV_SHAPE_RE):
        call(name, advantages=torch.ones(shape, dtype=torch.float64))


@pytest.mark.parametrize("name", USES_ADVANTAGES)
def test_advantages_not_a_tensor(name):
    with pytest.raises(ValueError, match=r"advantages has shape float"):
        call(name, advantages=1.0)


@pytest.mark.parametrize("name", USES_ADVANTAGES)
def test_per_sequence_advantages_broadcast(name):
    """[B] and [B, 1] advantages equal the same values repeated over T."""
    batch = make_batch()
    per_row = torch.tensor([0.5, -1.0, 2.0, -0.25], dtype=torch.float64)
    kwargs = {"mu_warmup_steps": 2} if name == "mix_chord" else {}
    if name == "clip_cov":  # every candidate dropped: the same tokens on every call (no random draw decides)
        kwargs = {"clip_cov_ratio": 1.0, "clip_cov_lb": 0.0}
    want, _, _ = run_loss(name, kwargs, batch)
    ref, ref_grad, _ = run_loss(name, kwargs, {**batch, "advantages": per_row.unsqueeze(-1).expand(B, T).clone()})
    for adv in (per_row, per_row.unsqueeze(-1)):
        got, grad, _ = run_loss(name, kwargs, {**batch, "advantages": adv})
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=0)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=0)
    assert not torch.equal(ref, want)  # different advantages do change the loss


@pytest.mark.parametrize("name", ALL_NAMES)
@pytest.mark.parametrize("shape", [(T,), (B, T, 1), ()])
def test_logprob_not_2d(name, shape):
    with pytest.raises(ValueError, match=r"logprob must be a \[B, T\] tensor, got shape"):
        call(name, logprob=torch.zeros(shape, dtype=torch.float64))


@pytest.mark.parametrize("name", ALL_NAMES)
def test_action_mask_wrong_shape(name):
    with pytest.raises(ValueError, match=r"action_mask has shape \(4, 4\) but logprob has shape \(4, 5\)"):
        call(name, action_mask=MASK[:, :4])


def test_dpo_ref_logprob_wrong_shape():
    with pytest.raises(ValueError, match=r"ref_logprob has shape \(4, 3\) but logprob has shape \(4, 5\)"):
        call("dpo", ref_logprob=torch.zeros(B, 3, dtype=torch.float64))


@pytest.mark.parametrize("name", ["mix", "mix_chord"])
@pytest.mark.parametrize(
    "expert_mask",
    [torch.tensor([True, False, True]), torch.ones(B + 1, dtype=torch.bool), torch.ones(B, 1, dtype=torch.bool), None],
    ids=["short", "long", "2d", "missing"],
)
def test_mix_expert_mask_wrong(name, expert_mask):
    with pytest.raises(ValueError, match=r"expert_mask must be a \[B\] tensor with B=4"):
        call(name, expert_mask=expert_mask)


@pytest.mark.parametrize("rows", [1, 3, 5])
def test_dpo_odd_rows(rows):
    batch = {
        "logprob": torch.zeros(rows, T),
        "ref_logprob": torch.zeros(rows, T),
        "action_mask": torch.ones(rows, T),
    }
    with pytest.raises(ValueError, match=rf"dpo: logprob has {rows} rows; expected an even number"):
        get_policy_loss("dpo")(**batch)


def test_mix_chord_needs_step():
    with pytest.raises(ValueError, match=r"mix_chord: `step` .* is required"):
        call("mix_chord", step=None)


def test_mix_chord_bad_step_shape():
    with pytest.raises(ValueError, match=r"step must be an int or a \[B\] tensor, got shape \(4, 1\)"):
        call("mix_chord", step=torch.full((B, 1), 3))
    with pytest.raises(ValueError, match=r"got shape \(0,\)"):
        call("mix_chord", step=torch.zeros(0, dtype=torch.long))


def test_mix_chord_step_values_differ():
    # torch._assert_async raises RuntimeError synchronously on CPU (asynchronously on CUDA)
    with pytest.raises((RuntimeError, ValueError), match="step"):
        call("mix_chord", step=torch.tensor([3, 3, 4, 3]))


def test_mix_chord_step_int_equals_tensor():
    a, _ = call("mix_chord", step=3)
    b, _ = call("mix_chord", step=torch.full((B,), 3))
    torch.testing.assert_close(a, b, rtol=1e-6, atol=0)
