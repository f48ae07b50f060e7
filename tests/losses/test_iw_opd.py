"""IW-OPD's loss port (`trl_ext.losses.iw_opd`) against TRL 1.16's `IWOPDTrainer` loss code, the oracle.

TRL's `compute_loss` runs on a bare `IWOPDTrainer` (its loss attributes set, no `__init__`) with two tiny language
models, so every branch of TRL's dispatch is compared as TRL takes it: IW-OPD (γ, ε, temperature, the sampler's
log-probs, `num_items_in_batch`), the whole-vocabulary and top-k generalized JSD (β, k, the tail, the temperature),
the top-1 path with its reverse-token modes, and the teacher-server paths through TRL's own
`_get_teacher_token_logprobs_from_server` with a stub of TRL's vLLM client. Each case compares the loss and the
student's gradients. Then TRL's static `generalized_jsd_loss` with every reduction, closed forms, and the errors.
"""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from trl.experimental.iw_opd import IWOPDTrainer as TRLIWOPDTrainer

from trl_ext.losses.iw_opd import (
    IWOPDObjective,
    ServedTeacher,
    generalized_jsd_loss,
    iw_opd_loss,
    iw_opd_weights,
    tail_bucket,
)

VOCAB = 13


class TinyLM(torch.nn.Module):
    """A causal-LM stand-in: logits from an embedding and a linear head (enough for gradients to compare)."""

    def __init__(self, seed: int, vocab: int = VOCAB, hidden: int = 8):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.embed = torch.nn.Parameter(torch.randn(vocab, hidden, generator=generator, dtype=torch.float64))
        self.head = torch.nn.Parameter(torch.randn(hidden, vocab, generator=generator, dtype=torch.float64))

    def forward(self, input_ids, attention_mask=None):
        return SimpleNamespace(logits=1.5 * self.embed[input_ids] @ self.head)


def sequence_batch(seed: int = 0, rows: int = 4, prompt: int = 3, completion: int = 5, rollout: bool = False) -> dict:
    """Left-padded prompts and right-padded completions of different lengths (one row without a completion token),
    in TRL's on-policy layout (`_build_sequence_batch`), with vLLM-style rollout log-probs if asked."""
    generator = torch.Generator().manual_seed(seed)
    prompt_lengths = torch.randint(1, prompt + 1, (rows,), generator=generator)
    completion_lengths = torch.randint(1, completion + 1, (rows,), generator=generator)
    completion_lengths[-1] = 0
    input_ids = torch.randint(2, VOCAB, (rows, prompt + completion), generator=generator)
    positions = torch.arange(prompt + completion).unsqueeze(0)
    prompt_mask = (positions < prompt) & (positions >= prompt - prompt_lengths.unsqueeze(1))
    completion_mask = (positions >= prompt) & (positions < prompt + completion_lengths.unsqueeze(1))
    input_ids = torch.where(prompt_mask | completion_mask, input_ids, 0)
    inputs = {
        "input_ids": input_ids,
        "attention_mask": (prompt_mask | completion_mask).long(),
        "labels": torch.where(completion_mask, input_ids, -100),
        "prompts": input_ids[:, :prompt],
        "prompt_attention_mask": prompt_mask[:, :prompt].long(),
    }
    if rollout:
        noise = -torch.rand(rows, prompt + completion, generator=generator, dtype=torch.float64) * 3
        inputs["rollout_logprobs"] = torch.where(completion_mask, noise, 0.0)
    return inputs


class StubTeacherClient:
    """TRL's `VLLMClient.get_sequence_logprobs` answered by a local model, as a vLLM server scores a sequence: for each
    completion token the top-k log-probs sorted by rank and the sampled token's log-prob."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.requests = []

    def get_sequence_logprobs(self, sequences, prompt_lengths, top_logprobs=100, temperature=1.0, **kwargs):
        self.requests.append({"top_logprobs": top_logprobs, "temperature": temperature})
        result = {"logprobs": [], "logprob_token_ids": [], "actual_logprobs": [], "actual_token_ids": []}
        for sequence, start in zip(sequences, prompt_lengths, strict=True):
            with torch.no_grad():
                logits = self.model(torch.tensor([sequence])).logits[0].float()
            log_probs = torch.log_softmax(logits / temperature, dim=-1)[start - 1 : len(sequence) - 1]
            values, ids = log_probs.topk(top_logprobs, dim=-1)
            actual = log_probs.gather(-1, torch.tensor(sequence[start:]).unsqueeze(-1))
            result["logprobs"].append(values.tolist())
            result["logprob_token_ids"].append(ids.tolist())
            result["actual_logprobs"].append(actual.tolist())
            result["actual_token_ids"].append([[token] for token in sequence[start:]])
        return result


def trl_trainer(teacher: torch.nn.Module, served: bool = False, **options) -> TRLIWOPDTrainer:
    """A bare `trl.experimental.iw_opd.IWOPDTrainer` (no `__init__`) holding what its loss step reads."""
    trainer = TRLIWOPDTrainer.__new__(TRLIWOPDTrainer)
    objective = IWOPDObjective(**options)  # the options, at the config's defaults where not given
    for name in IWOPDObjective.OPTIONS:
        setattr(trainer, name, getattr(objective, name))
    trainer.lmbda = 1.0
    trainer.use_teacher_server = served
    trainer.teacher_client = StubTeacherClient(teacher) if served else None
    trainer.teacher_model = None if served else teacher
    trainer._local_teacher_tokenizer_matches_student = True
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    trainer.model = SimpleNamespace(training=True)
    return trainer


def prompt_length(inputs: dict) -> int:
    """The earliest completion start of the batch (TRL's `_compute_prompt_length`)."""
    completion = (inputs["labels"] != -100).sum(dim=1)
    return int((inputs["attention_mask"].sum(dim=1) - completion).min())


def trl_result(student, teacher, inputs, served=False, num_items=None, **options):
    student.zero_grad()
    trainer = trl_trainer(teacher, served, **options)
    loss = trainer.compute_loss(student, inputs, num_items_in_batch=num_items)
    loss.backward()
    metrics = {key: values[0] for key, values in trainer._metrics["train"].items()}
    return loss.detach(), [p.grad.clone() for p in student.parameters()], metrics, trainer


def trl_ext_result(student, teacher, inputs, served_by=None, normalizer=None, **options):
    student.zero_grad()
    objective = IWOPDObjective(**options)
    start = prompt_length(inputs)
    mask = inputs["labels"][:, start:] != -100
    completion_ids = inputs["input_ids"][:, start:]
    rollout = inputs.get("rollout_logprobs")
    rollout = None if rollout is None else rollout[:, start:]
    student_logits = student(inputs["input_ids"]).logits[:, start - 1 : -1]
    if served_by is None:
        teacher_logits = teacher(inputs["input_ids"]).logits[:, start - 1 : -1]
        output = objective.local(student_logits, teacher_logits, completion_ids, mask, rollout, normalizer)
    else:  # the teacher's log-probs as TRL's trainer fetches them from its server
        served = ServedTeacher(**served_by._get_teacher_token_logprobs_from_server(inputs, start))
        output = objective.served(student_logits, completion_ids, mask, served, rollout, normalizer)
    output.loss.backward()
    metrics = {key: value.item() for key, value in output.metrics.items()}
    return output.loss.detach(), [p.grad.clone() for p in student.parameters()], metrics


def assert_same(trl, ours, rtol=1e-9):
    """Equal loss, gradients and metrics (`rtol`: float64's, or float32's where a server's log-probs enter)."""
    torch.testing.assert_close(ours[0], trl[0], rtol=rtol, atol=rtol)
    for ours_grad, trl_grad in zip(ours[1], trl[1], strict=True):
        torch.testing.assert_close(ours_grad, trl_grad, rtol=rtol, atol=rtol)
    assert ours[2].keys() == trl[2].keys()
    for key, value in trl[2].items():
        assert ours[2][key] == pytest.approx(value, rel=rtol, abs=rtol), key


IW_OPD_CASES = [
    {},
    {"iw_opd_gamma": 0.0},
    {"iw_opd_gamma": 2.0, "temperature": 0.7},
    {"iw_opd_epsilon": 50.0},  # every row's total discrepancy is below ε: the floor decides the weights
    {"iw_opd_gamma": 1.0, "beta": 0.0, "loss_top_k": 0},  # the JSD's options do not enter IW-OPD
]


@pytest.mark.parametrize("options", IW_OPD_CASES, ids=str)
@pytest.mark.parametrize("rollout", [False, True], ids=["student-sampler", "rollout-logprobs"])
@pytest.mark.parametrize("num_items", [None, 11])
def test_iw_opd_local_teacher_matches_trl(options, rollout, num_items):
    student, teacher, inputs = TinyLM(0), TinyLM(1), sequence_batch(rollout=rollout)
    trl = trl_result(student, teacher, inputs, num_items=num_items, **options)
    assert trl[0].isfinite() and trl[2]["iw_opd/max_weight"] <= 1 + options.get("iw_opd_gamma", 0.5) + 1e-12
    assert_same(trl, trl_ext_result(student, teacher, inputs, normalizer=num_items, **options))


JSD_CASES = [
    {"beta": beta, "loss_top_k": k, "loss_add_tail": tail}
    for beta in (0.0, 0.3, 0.5, 1.0)
    for k in (0, 1, 3, VOCAB)
    for tail in (True, False)
]
JSD_CASES += [
    {"beta": 0.5, "loss_top_k": 1, "reverse_kl_top_1_mode": "argmax"},
    {"beta": 1.0, "loss_top_k": 1, "reverse_kl_top_1_mode": "argmax", "loss_add_tail": False},
    {"beta": 0.5, "loss_top_k": 2, "temperature": 0.6},
    {"beta": 0.0, "loss_top_k": 0, "temperature": 1.7},
]


@pytest.mark.parametrize("options", JSD_CASES, ids=str)
@pytest.mark.parametrize("num_items", [None, 11])
def test_jsd_local_teacher_matches_trl(options, num_items):
    options = {"distillation_objective": "jsd", **options}
    student, teacher, inputs = TinyLM(0), TinyLM(1), sequence_batch(seed=3)
    assert_same(
        trl_result(student, teacher, inputs, num_items=num_items, **options),
        trl_ext_result(student, teacher, inputs, normalizer=num_items, **options),
    )


SERVED_CASES = [
    {"distillation_objective": "iw_opd"},
    {"distillation_objective": "iw_opd", "iw_opd_gamma": 1.5, "temperature": 0.8},
    *(
        {"distillation_objective": "jsd", "beta": 0.0, "loss_top_k": k, "loss_add_tail": t}
        for k in (1, 4)
        for t in (1, 0)
    ),
    *(
        {"distillation_objective": "jsd", "beta": b, "loss_top_k": 1, "loss_add_tail": t}
        for b in (0.5, 1.0)
        for t in (1, 0)
    ),
]


@pytest.mark.parametrize("options", SERVED_CASES, ids=str)
@pytest.mark.parametrize("rollout", [False, True], ids=["student-sampler", "rollout-logprobs"])
def test_teacher_server_paths_match_trl(options, rollout):
    """TRL's server path with a stub of its vLLM client (TRL's own request building and tensor alignment); the JSD
    paths normalize per micro-batch in TRL (`num_items_in_batch` is ignored there), so the port gets no normalizer
    for them. The served log-probs are float32 (TRL's tensors), which TRL mixes into float64 arithmetic op by op and
    trl_ext casts first: float32's tolerance."""
    options = {name: bool(v) if name == "loss_add_tail" else v for name, v in options.items()}
    student, teacher, inputs = TinyLM(0), TinyLM(1), sequence_batch(seed=5, rollout=rollout)
    num_items = 11 if options["distillation_objective"] == "iw_opd" else None
    trl = trl_result(student, teacher, inputs, served=True, num_items=num_items, **options)
    assert trl[3].teacher_client.requests[0]["top_logprobs"] == trl[3].loss_top_k
    ours = trl_ext_result(student, teacher, inputs, served_by=trl[3], normalizer=num_items, **options)
    assert_same(trl, ours, rtol=1e-6)


@pytest.mark.parametrize("reduction", ["batchmean", "sum", "mean", "none"])
@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize(("beta", "top_k", "tail"), [(0.5, 0, True), (0.0, 2, True), (1.0, 3, False), (0.4, 2, False)])
def test_static_generalized_jsd_loss_matches_trl(reduction, masked, beta, top_k, tail):
    """TRL's static `generalized_jsd_loss` with each reduction, with and without labels. `none`: trl_ext gives the
    per-token divergence, TRL each (token, support element)'s term; their sums over the support agree."""
    generator = torch.Generator().manual_seed(7)
    student = torch.randn(3, 4, VOCAB, generator=generator, dtype=torch.float64, requires_grad=True)
    teacher = torch.randn(3, 4, VOCAB, generator=generator, dtype=torch.float64)
    labels = torch.where(torch.rand(3, 4, generator=generator) < 0.6, 1, -100) if masked else None
    kwargs = {"beta": beta, "temperature": 0.9, "reduction": reduction, "top_k": top_k, "add_tail": tail}
    trl = TRLIWOPDTrainer.generalized_jsd_loss(student, teacher, labels=labels, **kwargs)
    mask = None if labels is None else labels != -100
    ours = generalized_jsd_loss(student, teacher, mask, **kwargs)
    if reduction == "none":
        trl = trl.sum(-1)
    torch.testing.assert_close(ours, trl, rtol=1e-9, atol=1e-12)
    (trl_grad,) = torch.autograd.grad(trl.sum(), student)
    (ours_grad,) = torch.autograd.grad(ours.sum(), student)
    torch.testing.assert_close(ours_grad, trl_grad, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------------------------------------- closed forms


def test_iw_opd_closed_form():
    """One row of three tokens: a = τ − ℓ = [1, −2, 1], so |a| = [1, 2, 1], D = 4, D_<t = [0, 1, 3] and with γ = 0.5
    w = 1 + 0.5·(1 − [0, 1/4, 3/4]) = [1.5, 1.375, 1.125]; L = −Σ w·a·ℓ / 3, ∂L/∂ℓ = −w·a / 3."""
    student = torch.tensor([[-1.0, -0.5, -2.0, -9.0]], dtype=torch.float64, requires_grad=True)
    teacher = torch.tensor([[0.0, -2.5, -1.0, math.nan]], dtype=torch.float64)  # the NaN is past the completion
    mask = torch.tensor([[True, True, True, False]])
    loss, terms = iw_opd_loss(student, teacher, mask, iw_opd_gamma=0.5)
    weight, advantage = torch.tensor([1.5, 1.375, 1.125]), torch.tensor([1.0, -2.0, 1.0])
    expected = -(weight * advantage * torch.tensor([-1.0, -0.5, -2.0])).sum() / 3
    assert loss.item() == pytest.approx(expected.item())
    torch.testing.assert_close(terms.weight[0, :3].float(), weight)
    loss.backward()
    torch.testing.assert_close(student.grad[0].float(), torch.cat([-weight * advantage / 3, torch.zeros(1)]))
    # the weights of a row without discrepancy are 1 + γ (the floor ε keeps 0 / 0 away)
    assert iw_opd_weights(torch.zeros(1, 3), 0.5, 1e-8).tolist() == [[1.5, 1.5, 1.5]]


def test_top_1_forward_kl_closed_form():
    """β = 0, k = 1 with the tail: the two categories are the teacher's top token and the rest. Student p = 1/2,
    teacher p = 0.8 there: KL = 0.8·ln(0.8/0.5) + 0.2·ln(0.2/0.5); renormalized over one token it is 0."""
    student = torch.log(torch.tensor([[[0.5, 0.3, 0.2]]], dtype=torch.float64))
    teacher = torch.log(torch.tensor([[[0.8, 0.15, 0.05]]], dtype=torch.float64))
    expected = 0.8 * math.log(0.8 / 0.5) + 0.2 * math.log(0.2 / 0.5)
    assert generalized_jsd_loss(student, teacher, beta=0.0, top_k=1).item() == pytest.approx(expected)
    assert generalized_jsd_loss(student, teacher, beta=0.0, top_k=1, add_tail=False).item() == pytest.approx(0.0)


def test_the_tail_is_clamped_below_one():
    """TRL's bucket: a support holding all the mass still leaves the tail log(1 − e^(−1e-7)) ≈ log(1e-7)."""
    log_probs = torch.tensor([[0.0, -math.inf]])
    with_tail, mask = tail_bucket(log_probs, torch.tensor([[True, False]]))
    assert with_tail[0, 2].item() == pytest.approx(math.log(1e-7), rel=1e-6) and mask.tolist() == [[True, False, True]]


# ---------------------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"distillation_objective": "kl"}, r"distillation_objective='kl' is not valid; must be one of 'iw_opd', 'jsd'"),
        ({"beta": 1.5}, r"beta=1.5 is not valid; must be in \[0, 1\]"),
        ({"temperature": 0.0}, r"temperature=0.0 is not valid; must be > 0"),
        ({"loss_top_k": -1}, r"loss_top_k=-1 is not valid; must be an integer >= 0"),
        ({"loss_top_k": 1.5}, r"loss_top_k=1.5 is not valid; must be an integer >= 0"),
        ({"loss_add_tail": 1}, r"loss_add_tail=1 is not valid; must be True or False"),
        ({"reverse_kl_top_1_mode": "max"}, r"reverse_kl_top_1_mode='max' is not valid; must be one of 'sampled'"),
        ({"reverse_kl_top_1_mode": "argmax"}, r"reverse_kl_top_1_mode='argmax' is not valid with .*'iw_opd'"),
        ({"iw_opd_gamma": -0.1}, r"iw_opd_gamma=-0.1 is not valid; must be >= 0"),
        ({"iw_opd_epsilon": 0.0}, r"iw_opd_epsilon=0.0 is not valid; must be > 0"),
    ],
)
def test_bad_options_name_the_field(options, message):
    with pytest.raises(ValueError, match=rf"^IWOPDObjective: {message}"):
        IWOPDObjective(**options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"distillation_objective": "jsd", "reverse_kl_top_1_mode": "argmax"}, r"reverse_kl_top_1_mode='argmax'"),
        ({"distillation_objective": "jsd", "beta": 0.0, "loss_top_k": 0}, r"loss_top_k=0 is not valid with a teacher"),
        ({"distillation_objective": "jsd", "beta": 0.5, "loss_top_k": 2}, r"loss_top_k=2 is not valid .*must be 1"),
    ],
)
def test_options_a_teacher_server_cannot_serve(options, message):
    with pytest.raises(ValueError, match=rf"^IWOPDObjective: {message}"):
        IWOPDObjective(**options).check_served()


def test_missing_teacher_logprobs_and_bad_reduction_are_errors():
    mask = torch.tensor([[True, True, False]])
    teacher = torch.tensor([[-1.0, -math.inf, -math.inf]])
    with pytest.raises(ValueError, match=r"^iw_opd: the teacher's log-probs are missing .* at 1 of the 2 trained"):
        iw_opd_loss(torch.zeros(1, 3), teacher, mask)
    with pytest.raises(ValueError, match=r"reduction='avg' is not valid; must be one of 'batchmean', 'sum'"):
        generalized_jsd_loss(torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), reduction="avg")
    served = ServedTeacher(teacher[:, :2], torch.full((1, 2, 1), -1.0), torch.zeros(1, 2, 1, dtype=torch.long))
    objective = IWOPDObjective(distillation_objective="jsd", beta=1.0)
    with pytest.raises(ValueError, match=r"^jsd: the teacher server's sampled-token log-probs are missing at 1 of"):
        objective.served(torch.zeros(1, 3, 4), torch.zeros(1, 3, dtype=torch.long), mask, served)
    with pytest.raises(ValueError, match=r"^iw_opd: the teacher server returned log-probs for 2 completion tokens"):
        IWOPDObjective().served(
            torch.zeros(1, 3, 4), torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.bool), served
        )
