"""The self-distillation loss of SDFT and SDPO (`trl_ext.losses.self_distillation`) against TRL 1.16's own code: its
`loss_utils` functions, and the loss methods of `SDFTTrainer` / `SDPOTrainer` called on a stand-in trainer (no model),
for every mode, α, tail, clip, mask and policy `loss_type`: equal values and gradients. Plus closed forms and the
errors on bad settings and inputs."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from trl.experimental.sdft import loss_utils as trl_loss
from trl.experimental.sdft.sdft_trainer import DistillationLogits as SDFTLogits
from trl.experimental.sdft.sdft_trainer import SDFTTrainer as TRLSDFTTrainer
from trl.experimental.sdpo import loss_utils as trl_sdpo_loss
from trl.experimental.sdpo.sdpo_trainer import DistillationLogits as SDPOLogits
from trl.experimental.sdpo.sdpo_trainer import SDPOTrainer as TRLSDPOTrainer

from trl_ext.losses.distillation import generalized_jsd
from trl_ext.losses.self_distillation import (
    SDPOLoss,
    SelfDistillationLoss,
    add_tail_bucket,
    clipped_importance_weight,
    full_logit_divergence,
    sampled_token_divergence,
    sdpo_policy_loss,
    teacher_support_divergence,
    token_logprobs,
    topk_logit_divergence,
)

B, T, V = 3, 5, 11
ALPHAS = (0.0, 0.3, 0.5, 1.0)


def logits(seed: int, scale: float = 2.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(B, T, V, generator=generator, dtype=torch.float64) * scale).requires_grad_()


def batch(seed: int = 0, empty_row: bool = True) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + seed)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[0, 3:] = 0
    if empty_row:
        mask[2] = 0  # a completion without a token in the loss
    return {
        "completion_ids": torch.randint(0, V, (B, T), generator=generator),
        "completion_mask": mask,
        "old": torch.randn(B, T, generator=generator, dtype=torch.float64) - 2.5,
        "advantages": torch.randn(B, generator=generator, dtype=torch.float64),
    }


def assert_same(port: torch.Tensor, trl: torch.Tensor, inputs: list[torch.Tensor]) -> None:
    """Equal values, and equal gradients with respect to every input that requires one."""
    torch.testing.assert_close(port, trl)
    weights = torch.randn(port.shape, generator=torch.Generator().manual_seed(7), dtype=port.dtype)
    grads_port = torch.autograd.grad((port * weights).sum(), inputs, retain_graph=True, allow_unused=True)
    grads_trl = torch.autograd.grad((trl * weights).sum(), inputs, retain_graph=True, allow_unused=True)
    for ours, theirs in zip(grads_port, grads_trl, strict=True):
        torch.testing.assert_close(ours, theirs)


# ---- TRL's loss_utils, function by function --------------------------------------------------------------------


def test_sdft_and_sdpo_ship_the_same_loss_utils():
    """One port serves both: TRL's two copies are the same functions (by source)."""
    import inspect

    assert inspect.getsource(trl_loss) == inspect.getsource(trl_sdpo_loss)


@pytest.mark.parametrize("alpha", ALPHAS)
def test_the_divergence_is_trls_compute_divergence(alpha):
    student, teacher = logits(0).log_softmax(-1), logits(1).log_softmax(-1)
    assert_same(
        generalized_jsd(student, teacher, alpha),
        trl_loss.compute_divergence(student, teacher, alpha),
        [student, teacher],
    )


def test_the_tail_bucket_is_trls():
    top = torch.topk(logits(0).log_softmax(-1), 4, dim=-1).values
    assert_same(add_tail_bucket(top), trl_loss.add_tail_bucket(top), [top])
    whole = logits(1).log_softmax(-1)  # the whole vocabulary captured: TRL's clamp keeps a tail of ~1e-7
    assert_same(add_tail_bucket(whole), trl_loss.add_tail_bucket(whole), [whole])
    assert add_tail_bucket(whole)[..., -1].exp().max().item() == pytest.approx(1e-7, rel=1e-3)


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("add_tail", [False, True])
@pytest.mark.parametrize("topk", [1, 4, V])
def test_the_topk_divergence_is_trls(alpha, add_tail, topk):
    student, teacher = logits(0), logits(1)
    trl = trl_loss.compute_topk_self_distillation_loss(
        student, teacher, distillation_topk=topk, distillation_alpha=alpha, distillation_add_tail=add_tail
    )
    assert_same(topk_logit_divergence(student, teacher, topk, alpha, add_tail), trl, [student])


@pytest.mark.parametrize("alpha", ALPHAS)
def test_the_full_divergence_is_trls(alpha):
    student, teacher = logits(0), logits(1)
    trl = trl_loss.compute_full_logit_self_distillation_loss(student, teacher, distillation_alpha=alpha)
    assert_same(full_logit_divergence(student, teacher, alpha), trl, [student])


def test_the_sampled_token_loss_is_trls():
    student, teacher, ids = logits(0), logits(1), batch()["completion_ids"]
    trl = trl_loss.compute_sampled_token_self_distillation_loss(student, teacher, ids, distillation_alpha=1.0)
    port = sampled_token_divergence(token_logprobs(student, ids), token_logprobs(teacher, ids))
    assert_same(port, trl, [student])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_token_logprobs_are_trls_selective_log_softmax(dtype):
    from trl.trainer.utils import selective_log_softmax

    values, ids = logits(0).detach().to(dtype), batch()["completion_ids"]
    torch.testing.assert_close(token_logprobs(values, ids), selective_log_softmax(values, ids))


@pytest.mark.parametrize("clip", [0.5, 2.0])
def test_the_importance_weight_is_trls_clipping(clip):
    student = (batch()["old"] + torch.linspace(-30, 30, B * T, dtype=torch.float64).view(B, T)).requires_grad_()
    per_token = logits(0).sum(-1)
    old = batch()["old"]
    trl = trl_loss.apply_importance_sampling_clipping(per_token, student, old, clip)
    assert_same(per_token * clipped_importance_weight(student, old, clip), trl, [per_token, student])


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("add_tail", [False, True])
def test_the_teacher_support_divergence_is_trls_served_teacher_form(alpha, add_tail):
    """The served teacher's top-k path of TRL's `_compute_server_distillation_loss`, as written there."""
    student, teacher_logits = logits(0), logits(1).detach()
    ids = torch.topk(teacher_logits, 4, dim=-1).indices
    teacher_top = teacher_logits.log_softmax(-1).gather(-1, ids)
    valid = batch()["completion_mask"].bool()
    teacher_top = torch.where(valid.unsqueeze(-1), teacher_top, -math.inf)  # the server's -inf sentinels
    keep = valid.unsqueeze(-1)
    s = torch.where(keep, torch.gather(torch.log_softmax(student, dim=-1), -1, ids), 0.0)
    t = torch.where(keep, teacher_top, 0.0)
    if add_tail:
        s, t = trl_loss.add_tail_bucket(s), trl_loss.add_tail_bucket(t)
    else:
        s, t = s - torch.logsumexp(s, -1, keepdim=True), t - torch.logsumexp(t, -1, keepdim=True)
    trl = trl_loss.compute_divergence(s, t, alpha)
    port = teacher_support_divergence(student, teacher_top, ids, valid, alpha, add_tail)
    assert_same(port, trl, [student])


# ---- the whole loss against TRL's trainer methods ------------------------------------------------------------------


def trl_stand_in(**args) -> SimpleNamespace:
    """What TRL's loss methods read of the trainer, without a model: its args, metric lists and accelerator."""
    metrics = {"train": {}, "eval": {}}

    def log(mode, value):
        metrics[mode].setdefault("distillation_loss", []).append(value)

    return SimpleNamespace(
        args=SimpleNamespace(**args),
        _metrics={"train": _Lists(), "eval": _Lists()},
        _log_self_distillation_metric=log,
        logged=metrics,
        accelerator=SimpleNamespace(gather=lambda x: x.reshape(-1)),
        model=SimpleNamespace(training=True),
    )


class _Lists(dict):
    def __missing__(self, key):
        self[key] = []
        return self[key]


SDFT_CASES = [
    *[("topk_logits", alpha, tail, topk) for alpha in ALPHAS for tail in (False, True) for topk in (1, 4)],
    *[("full_logits", alpha, False, None) for alpha in ALPHAS],
    ("sampled_token", 1.0, False, None),
]


@pytest.mark.parametrize(("mode", "alpha", "add_tail", "topk"), SDFT_CASES)
@pytest.mark.parametrize("clip", [None, 2.0])
@pytest.mark.parametrize("with_old", [False, True])
@pytest.mark.parametrize("skip", [0, 2])
def test_the_sdft_loss_is_trls(mode, alpha, add_tail, topk, clip, with_old, skip):
    """`SelfDistillationLoss` against `SDFTTrainer._compute_self_distillation_loss` (the loss mask skipping the first
    `skip` tokens, as TRL's `num_loss_tokens_to_skip` builds it)."""
    data = batch()
    student, teacher = logits(0), logits(1).detach()
    mask = data["completion_mask"] * (torch.arange(T) >= skip).long()
    settings = dict(
        distillation_mode=mode,
        distillation_alpha=alpha,
        distillation_topk=topk,
        distillation_add_tail=add_tail,
        distillation_is_clip=clip,
    )
    stand_in = trl_stand_in(**settings)
    inputs = {"old_per_token_logps": data["old"]} if with_old else {}
    trl = TRLSDFTTrainer._compute_self_distillation_loss(
        stand_in, SimpleNamespace(training=True), inputs, SDFTLogits(data["completion_ids"], mask, student, teacher)
    )
    port = SelfDistillationLoss(**settings)(
        student, teacher, data["completion_ids"], mask, data["old"] if with_old else None
    )
    assert_same(port.loss, trl, [student])
    assert port.token_mean.item() == pytest.approx(stand_in.logged["train"]["distillation_loss"][0], rel=1e-12)


def test_an_empty_loss_mask_gives_trls_zero_and_zero_gradients():
    data = batch()
    student, teacher = logits(0), logits(1).detach()
    mask = torch.zeros(B, T, dtype=torch.long)
    trl = TRLSDFTTrainer._compute_self_distillation_loss(
        trl_stand_in(distillation_mode="full_logits", distillation_alpha=0.5, distillation_is_clip=None),
        SimpleNamespace(training=True),
        {},
        SDFTLogits(data["completion_ids"], mask, student, teacher),
    )
    port = SelfDistillationLoss("full_logits", 0.5, None, False, None)(student, teacher, data["completion_ids"], mask)
    assert port.loss.item() == trl.item() == 0.0 and port.token_mean.item() == 0.0
    assert_same(port.loss, trl, [student])


SDPO_POLICY = dict(importance_sampling_level="token", epsilon=0.2, epsilon_high=0.28, loss_type="dapo")


def sdpo_stand_in(**settings) -> SimpleNamespace:
    """A stand-in for `SDPOTrainer.compute_loss` and the two loss methods it calls, with its forward passes given."""
    stand_in = trl_stand_in(**settings)
    stand_in.importance_sampling_level = settings["importance_sampling_level"]
    stand_in.epsilon_low, stand_in.epsilon_high = settings["epsilon"], settings["epsilon_high"]
    stand_in.loss_type, stand_in.max_completion_length = settings["loss_type"], settings["max_completion_length"]
    stand_in.use_teacher_server, stand_in.current_gradient_accumulation_steps = False, 1
    stand_in.teacher_model = None
    stand_in._compute_policy_loss = lambda *a: TRLSDPOTrainer._compute_policy_loss(stand_in, *a)
    stand_in._compute_self_distillation_loss = lambda *a: TRLSDPOTrainer._compute_self_distillation_loss(stand_in, *a)
    return stand_in


def sdpo_losses(settings: dict, data: dict, student, teacher, sd_mask, with_old: bool):
    stand_in = sdpo_stand_in(**settings)
    mask = data["completion_mask"]
    loss_mask = mask if sd_mask is None else mask * sd_mask.unsqueeze(1)
    stand_in._compute_teacher_student_logits = lambda model, teacher_model, inputs: SDPOLogits(
        data["completion_ids"], mask, loss_mask, student, teacher
    )
    stand_in._forward_logits = lambda **kwargs: student
    inputs = {
        "prompt_ids": torch.zeros(B, 2, dtype=torch.long),
        "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": data["completion_ids"],
        "completion_mask": mask,
        "advantages": data["advantages"],
    }
    if sd_mask is not None:
        inputs["self_distillation_mask"] = sd_mask
    if with_old:
        inputs["old_per_token_logps"] = data["old"]
    trl = TRLSDPOTrainer.compute_loss(stand_in, SimpleNamespace(training=True), inputs)
    port = SDPOLoss(
        SelfDistillationLoss(*(settings[k] for k in ("distillation_mode", "distillation_alpha", "distillation_topk",
                                                      "distillation_add_tail", "distillation_is_clip"))),
        sdpo_policy_loss("test", *(settings[k] for k in ("loss_type", "importance_sampling_level", "epsilon",
                                                         "epsilon_high"))),
        settings["distillation_weight"],
        settings["max_completion_length"],
    )(
        student,
        data["completion_ids"],
        mask,
        data["advantages"],
        teacher_logits=teacher,
        self_distillation_mask=sd_mask,
        old_logprobs=data["old"] if with_old else None,
    )  # fmt: skip
    return port, trl, stand_in


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("with_old", [False, True])
@pytest.mark.parametrize("epsilon_high", [0.2, 0.28])
def test_the_sdpo_policy_loss_is_trls(loss_type, level, with_old, epsilon_high):
    """distillation_weight=0: the policy loss alone, through `TRLGRPOLoss`, against `SDPOTrainer._compute_policy_loss`
    (the rollout log-probs far enough from the student's that both clips act)."""
    data = batch()
    data["old"] = token_logprobs(logits(0), data["completion_ids"]).detach() + torch.linspace(-0.6, 0.6, B * T).view(
        B, T
    ).to(torch.float64)
    settings = dict(
        SDPO_POLICY,
        loss_type=loss_type,
        importance_sampling_level=level,
        epsilon_high=epsilon_high,
        distillation_weight=0.0,
        max_completion_length=T + 3,
        distillation_mode="sampled_token",
        distillation_alpha=1.0,
        distillation_topk=None,
        distillation_add_tail=False,
        distillation_is_clip=2.0,
    )
    student = logits(0)
    port, trl, stand_in = sdpo_losses(settings, data, student, None, None, with_old)
    assert port.distillation_loss is None and port.distillation_token_mean is None
    assert_same(port.loss, trl, [student])
    assert port.policy_loss.item() == pytest.approx(stand_in._metrics["train"]["self_distillation/policy_loss"][0])


@pytest.mark.parametrize("weight", [1.0, 0.4])
@pytest.mark.parametrize(("mode", "alpha", "topk"), [("sampled_token", 1.0, None), ("topk_logits", 0.5, 3),
                                                     ("full_logits", 0.0, None)])  # fmt: skip
@pytest.mark.parametrize("with_mask", [False, True])
def test_the_sdpo_objective_is_trls(weight, mode, alpha, topk, with_mask):
    """`SDPOLoss` against `SDPOTrainer.compute_loss` (its forward passes given): pure distillation and the blend, with
    and without the self-distillation mask of the completions that have a teacher context."""
    data = batch(empty_row=False)
    settings = dict(
        SDPO_POLICY,
        distillation_weight=weight,
        max_completion_length=T,
        distillation_mode=mode,
        distillation_alpha=alpha,
        distillation_topk=topk,
        distillation_add_tail=False,
        distillation_is_clip=2.0,
    )
    student, teacher = logits(0), logits(1).detach()
    sd_mask = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64) if with_mask else None
    port, trl, stand_in = sdpo_losses(settings, data, student, teacher, sd_mask, with_old=True)
    assert_same(port.loss, trl, [student])
    assert port.distillation_token_mean.item() == pytest.approx(stand_in.logged["train"]["distillation_loss"][0])
    assert (port.policy_loss is None) == (weight == 1.0)


def test_a_non_finite_value_at_a_masked_position_stays_out_unlike_trls():
    """The one deliberate difference: masked positions are selected out (`where`), not multiplied by 0, so a NaN teacher
    logit at a padding position leaves the loss and its gradient finite; TRL's `per_token_loss * loss_mask` is NaN."""
    data = batch()
    student, teacher = logits(0), logits(1).detach().clone()
    teacher[0, 4] = math.nan  # completion 0 ends at position 3
    mask = data["completion_mask"]
    trl = TRLSDFTTrainer._compute_self_distillation_loss(
        trl_stand_in(distillation_mode="full_logits", distillation_alpha=0.5, distillation_is_clip=None),
        SimpleNamespace(training=True),
        {},
        SDFTLogits(data["completion_ids"], mask, student, teacher),
    )
    port = SelfDistillationLoss("full_logits", 0.5, None, False, None)(student, teacher, data["completion_ids"], mask)
    assert math.isnan(trl.item()) and math.isfinite(port.loss.item())
    clean = teacher.clone()
    clean[0, 4] = 0.0
    expected = SelfDistillationLoss("full_logits", 0.5, None, False, None)(student, clean, data["completion_ids"], mask)
    assert_same(port.loss, expected.loss, [student])


# ---- closed forms ------------------------------------------------------------------------------------------------


def test_closed_form_reverse_kl_forward_kl_and_jsd_on_two_tokens():
    """p_s = (1/2, 1/2), p_t = (3/4, 1/4): KL(p_s‖p_t) = ½·ln(4/3), KL(p_t‖p_s) = ¾·ln(3/2) + ¼·ln(1/2); α = ½:
    m = (5/8, 3/8), ½·KL(p_t‖m) + ½·KL(p_s‖m)."""
    student = torch.zeros(1, 1, 2, dtype=torch.float64)
    teacher = torch.tensor([[[math.log(3.0), 0.0]]], dtype=torch.float64)
    assert full_logit_divergence(student, teacher, 1.0).item() == pytest.approx(0.5 * math.log(4 / 3))
    assert full_logit_divergence(student, teacher, 0.0).item() == pytest.approx(
        0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    )
    kl_t_m = 0.75 * math.log(0.75 / 0.625) + 0.25 * math.log(0.25 / 0.375)
    kl_s_m = 0.5 * math.log(0.5 / 0.625) + 0.5 * math.log(0.5 / 0.375)
    assert full_logit_divergence(student, teacher, 0.5).item() == pytest.approx(0.5 * kl_t_m + 0.5 * kl_s_m)


def test_closed_form_topk_with_tail_and_renormalized():
    """V = 3, p_s = (1/2, 1/4, 1/4), p_t = (1/4, 1/4, 1/2), k = 1 (the student's top token, index 0): with the tail
    the categories are (p_0, 1 − p_0): reverse KL ½·ln 2 + ½·ln(2/3); renormalized, one category each: 0."""
    student = torch.log(torch.tensor([[[0.5, 0.25, 0.25]]], dtype=torch.float64))
    teacher = torch.log(torch.tensor([[[0.25, 0.25, 0.5]]], dtype=torch.float64))
    with_tail = topk_logit_divergence(student, teacher, 1, 1.0, True).item()
    assert with_tail == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(0.5 / 0.75))
    assert topk_logit_divergence(student, teacher, 1, 1.0, False).item() == pytest.approx(0.0, abs=1e-15)


def test_closed_form_sequence_mean_and_sampled_token_gradient():
    """Two completions, token losses (1, 3 | 5, masked): the loss is the mean of the completions' token means, (2 +
    5)/2 = 3.5; the sampled-token loss's gradient in log p_s is log p_s − log p_t (+ 0 through the stopped factor)."""
    loss = SelfDistillationLoss("full_logits", 1.0, None, False, None)
    per_token = torch.tensor([[1.0, 3.0], [5.0, 7.0]])
    mask = torch.tensor([[True, True], [True, False]])
    from trl_ext.losses.self_distillation import completion_mean

    assert completion_mean(per_token, mask).item() == pytest.approx(3.5)
    student = torch.tensor([-1.0], requires_grad=True)
    sampled_token_divergence(student, torch.tensor([-3.0])).sum().backward()
    assert student.grad.item() == pytest.approx(2.0)
    assert loss.distillation_is_clip is None


# ---- errors --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"distillation_mode": "topk"}, r"distillation_mode='topk' is not valid; must be one of 'sampled_token', "
                                        r"'full_logits', 'topk_logits'"),
        ({"distillation_alpha": 1.5}, r"distillation_alpha=1.5 is not valid; must be in \[0, 1\]"),
        ({"distillation_mode": "sampled_token", "distillation_alpha": 0.5},
         r"distillation_alpha=0.5 is not valid with distillation_mode='sampled_token'; must be 1.0"),
        ({"distillation_topk": None}, r"distillation_topk=None is not valid; must be an integer >= 1"),
        ({"distillation_topk": 0}, r"distillation_topk=0 is not valid"),
        ({"distillation_is_clip": 0.0}, r"distillation_is_clip=0.0 is not valid; must be > 0 or None"),
        ({"distillation_add_tail": 1}, r"distillation_add_tail=1 is not valid; must be True or False"),
    ],
)  # fmt: skip
def test_bad_settings_are_refused_naming_the_field(settings, match):
    with pytest.raises(ValueError, match=rf"^SelfDistillationLoss: {match}"):
        SelfDistillationLoss(**settings)


def test_bad_inputs_are_refused_naming_them():
    loss, data = SelfDistillationLoss(distillation_topk=4), batch()
    student = logits(0)
    with pytest.raises(ValueError, match=r"teacher_logits has shape \(3, 5, 7\) but student_logits has shape"):
        loss(student, student[..., :7], data["completion_ids"], data["completion_mask"])
    with pytest.raises(ValueError, match=r"loss_mask must be \[B, T\] = \[3, 5\], got shape \(3, 4\)"):
        loss(student, student, data["completion_ids"], data["completion_mask"][:, :4])
    with pytest.raises(ValueError, match=r"distillation_topk=100 is not valid for a vocabulary of 11 tokens"):
        SelfDistillationLoss()(student, student, data["completion_ids"], data["completion_mask"])
    with pytest.raises(ValueError, match=r"loss_mask .*0 and 1"):
        loss(student, student, data["completion_ids"], data["completion_mask"] * 2)


def test_bad_sdpo_settings_are_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"^SDPOConfig: loss_type='cispo' is not valid; must be one of 'grpo', "):
        sdpo_policy_loss("SDPOConfig", "cispo", "token", 0.2, None)
    with pytest.raises(ValueError, match=r"^SDPOConfig: importance_sampling_level='seq' is not valid"):
        sdpo_policy_loss("SDPOConfig", "dapo", "seq", 0.2, None)
    policy = sdpo_policy_loss("x", "dapo", "token", 0.2, None)
    with pytest.raises(ValueError, match=r"^SDPOLoss: distillation_weight=1.5 is not valid; must be in \[0, 1\]"):
        SDPOLoss(SelfDistillationLoss(), policy, 1.5)
    with pytest.raises(ValueError, match=r"^SDPOLoss: max_completion_length=None is not valid"):
        SDPOLoss(SelfDistillationLoss(), sdpo_policy_loss("x", "dr_grpo", "token", 0.2, None), 0.5)
    data = batch()
    with pytest.raises(ValueError, match=r"teacher_logits is required with distillation_weight=0.5"):
        SDPOLoss(SelfDistillationLoss(distillation_topk=3), policy, 0.5)(
            logits(0), data["completion_ids"], data["completion_mask"], data["advantages"]
        )
