"""The Online DPO loss (`trl_ext.losses.online_dpo.OnlineDPOLoss`) against TRL 1.16's `OnlineDPOTrainer`, whose loss
is inline in its `training_step`: the oracle runs that method itself on given log-probs and rewards
(`online_dpo_oracle.run_step`) and reads the loss it back-propagates."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from online_dpo_oracle import ranked_interleaved, run_step, sampled_batch
from trl.experimental.online_dpo import OnlineDPOTrainer as TRLOnlineDPOTrainer

from trl_ext.losses import get_policy_loss
from trl_ext.losses.dpo import TRLDPOLoss
from trl_ext.losses.online_dpo import ONLINE_DPO_LOSS_TYPES, OnlineDPOLoss

BETAS = (0.05, 0.1, 0.5, 2.0)


def ours(batch: dict[str, torch.Tensor], beta: float, loss_type: str, **window):
    order = ranked_interleaved(batch["rewards"])
    policy = batch["policy"].clone().requires_grad_(True)
    loss, metrics = OnlineDPOLoss(beta=beta, loss_type=loss_type)(
        logprob=policy[order], ref_logprob=batch["ref"][order], action_mask=batch["mask"][order], **window
    )
    loss.backward()
    return loss.detach(), policy.grad, metrics


@pytest.mark.parametrize("loss_type", ONLINE_DPO_LOSS_TYPES)
@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("seed", [0, 1])
def test_equals_trls_online_dpo_loss(loss_type, beta, seed):
    """Value and gradient of every policy log-prob, and the implicit rewards TRL logs."""
    batch = sampled_batch(seed=seed)
    theirs = run_step(TRLOnlineDPOTrainer, batch, beta, loss_type)
    our_loss, our_grad, metrics = ours(batch, beta, loss_type)
    torch.testing.assert_close(our_loss, theirs.loss)
    torch.testing.assert_close(our_grad, theirs.grad)
    stats = theirs.stats
    assert our_loss.item() != 0 and our_grad.abs().sum() > 0
    assert math.isclose(metrics["chosen_reward"].item(), stats["rewards/chosen"][0], rel_tol=1e-6)
    assert math.isclose(metrics["rejected_reward"].item(), stats["rewards/rejected"][0], rel_tol=1e-6)
    assert math.isclose(metrics["accuracy_mean"].item(), stats["rewards/accuracies"][0], rel_tol=1e-6)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_sigmoid_is_the_dpo_loss(label_smoothing):
    """`sigmoid` is the registered `dpo` loss (conservative DPO with label_smoothing > 0, which TRL's online trainer
    lacks): the same value, gradient and metrics."""
    batch = sampled_batch(seed=3)
    order = ranked_interleaved(batch["rewards"])
    inputs = {"ref_logprob": batch["ref"][order], "action_mask": batch["mask"][order]}
    a = batch["policy"][order].clone().requires_grad_(True)
    b = batch["policy"][order].clone().requires_grad_(True)
    online, online_metrics = OnlineDPOLoss(beta=0.3, label_smoothing=label_smoothing)(logprob=a, **inputs)
    dpo, dpo_metrics = get_policy_loss("dpo", beta=0.3, label_smoothing=label_smoothing)(logprob=b, **inputs)
    (online + dpo).backward()
    assert torch.equal(online, dpo) and torch.equal(a.grad, b.grad)
    assert online_metrics.keys() == dpo_metrics.keys()
    assert all(torch.equal(online_metrics[k], dpo_metrics[k]) for k in dpo_metrics)


def test_ipo_squares_the_summed_log_ratios_unlike_offline_dpo():
    """TRL's offline `ipo` (`TRLDPOLoss`) divides each log-ratio by its completion's length; Online DPO's does not."""
    batch = sampled_batch(seed=4)
    order = ranked_interleaved(batch["rewards"])
    inputs = {
        "logprob": batch["policy"][order],
        "ref_logprob": batch["ref"][order],
        "action_mask": batch["mask"][order],
    }
    online, _ = OnlineDPOLoss(beta=0.1, loss_type="ipo")(**inputs)
    offline, _ = TRLDPOLoss(beta=0.1, loss_type="ipo")(**inputs)
    ratio = ((batch["policy"] - batch["ref"]) * batch["mask"]).sum(-1)[order]
    length = batch["mask"].sum(-1)[order]
    delta, normalized = ratio[0::2] - ratio[1::2], ratio[0::2] / length[0::2] - ratio[1::2] / length[1::2]
    torch.testing.assert_close(online, ((delta - 5.0) ** 2).mean())
    torch.testing.assert_close(offline, ((normalized - 5.0) ** 2).mean())
    assert not torch.isclose(online, offline)


@pytest.mark.parametrize("loss_type", ONLINE_DPO_LOSS_TYPES)
def test_closed_form_of_one_pair(loss_type):
    """Chosen: 2 tokens (log-probs −1, −2; reference −1.5, −1.5); rejected: 1 token and a padded one (−3, ignored
    −100; reference −2). Δ = (−3 + 3) − (−3 + 2) = 1."""
    logprob = torch.tensor([[-1.0, -2.0], [-3.0, -100.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.5], [-2.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    beta = 0.5
    loss, metrics = OnlineDPOLoss(beta=beta, loss_type=loss_type)(logprob=logprob, ref_logprob=ref, action_mask=mask)
    loss.backward()
    if loss_type == "sigmoid":
        expected, slope = math.log1p(math.exp(-0.5)), -beta / (1 + math.exp(0.5))  # −log σ(βΔ), its dℓ/dΔ
    else:
        expected, slope = (1 - 1 / (2 * beta)) ** 2, 2 * (1 - 1 / (2 * beta))  # (Δ − 1/(2β))² = 0 at β = 0.5
    assert math.isclose(loss.item(), expected, abs_tol=1e-7)
    torch.testing.assert_close(logprob.grad, torch.tensor([[slope, slope], [-slope, 0.0]]))
    assert math.isclose(metrics["chosen_reward"].item(), 0.0) and math.isclose(metrics["rejected_reward"].item(), -0.5)
    assert metrics["accuracy_mean"].item() == 1.0


def test_window_shares_add_up_to_the_mean_over_the_window():
    """With the window's `global_valid_seqs` each micro-batch's loss is its share of the mean over the window's
    pairs."""
    batch = sampled_batch(prompts=8, seed=5)
    order = ranked_interleaved(batch["rewards"])
    logprob, ref, mask = batch["policy"][order], batch["ref"][order], batch["mask"][order]
    fn = OnlineDPOLoss(beta=0.2, loss_type="ipo")
    whole, _ = fn(logprob=logprob, ref_logprob=ref, action_mask=mask)
    shares = [
        fn(logprob=logprob[s], ref_logprob=ref[s], action_mask=mask[s], global_valid_seqs=16)[0]
        for s in (slice(0, 6), slice(6, 16))
    ]
    torch.testing.assert_close(sum(shares), whole)


def test_arguments_and_defaults():
    assert OnlineDPOLoss.default_args() == {"loss_type": "sigmoid", "beta": 0.1, "label_smoothing": 0.0}
    fn = OnlineDPOLoss(loss_type="ipo")
    assert fn.args == {"loss_type": "ipo", "beta": 0.1, "label_smoothing": 0.0} and fn.given == {"loss_type"}
    assert fn.name == "dpo"  # the record's policy loss: `dpo`, with Online DPO's loss types
    assert list(OnlineDPOLoss.__signature__.parameters) == ["backend", "loss_type", "beta", "label_smoothing"]
    assert OnlineDPOLoss.inputs() == ("logprob", "ref_logprob", "action_mask", "global_valid_seqs")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"loss_type": "hinge"}, r"loss_type='hinge' is not valid; must be one of 'sigmoid', 'ipo'"),
        ({"loss_type": ["sigmoid"]}, r"loss_type=\['sigmoid'\] is not valid; must be one of 'sigmoid', 'ipo'"),
        ({"beta": 0.0}, r"beta=0.0 is not valid; must be > 0"),
        ({"beta": float("nan")}, r"beta=nan is not valid"),
        ({"label_smoothing": 0.5}, r"label_smoothing=0.5 is not valid; must be in \[0, 0.5\)"),
        ({"loss_type": "ipo", "label_smoothing": 0.1}, r"label_smoothing=0.1 applies to loss_type 'sigmoid' only"),
        ({"kl_coef": 0.1}, r"unknown argument\(s\) 'kl_coef'; valid arguments: beta, label_smoothing"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        OnlineDPOLoss(**kwargs)


def test_bad_inputs():
    logprob = torch.zeros(3, 4)
    with pytest.raises(ValueError, match="logprob has 3 rows; expected an even number"):
        OnlineDPOLoss()(logprob=logprob, ref_logprob=logprob, action_mask=torch.ones(3, 4))
    with pytest.raises(ValueError, match="ref_logprob"):
        OnlineDPOLoss()(logprob=torch.zeros(2, 4), ref_logprob=torch.zeros(2, 3), action_mask=torch.ones(2, 4))


def test_a_nan_at_a_valid_position_makes_the_loss_nan_and_padding_is_ignored():
    logprob = torch.tensor([[-1.0, float("nan")], [-2.0, -1.0]])
    ref = torch.zeros(2, 2)
    padded, _ = OnlineDPOLoss()(logprob=logprob, ref_logprob=ref, action_mask=torch.tensor([[1, 0], [1, 1]]))
    assert math.isclose(padded.item(), -F.logsigmoid(torch.tensor(0.1 * (-1.0 + 3.0))).item(), rel_tol=1e-6)
    valid, _ = OnlineDPOLoss()(logprob=logprob, ref_logprob=ref, action_mask=torch.ones(2, 2))
    assert torch.isnan(valid)
