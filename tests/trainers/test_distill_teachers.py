"""Served and several teachers of on-policy distillation (`trl_ext.trainers.distill.teachers`), offline.

A stub vLLM server (an in-process HTTP server) answers exactly the requests of TRL's `VLLMClient` that the served
teacher makes (`/health`, `/v1/models`, `/v1/completions` with `prompt_logprobs`), in vLLM's JSON, from a toy model
run locally: a run with the served teacher must then equal the run with the same model as a local teacher.
"""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from trainer_helpers import CPU, cpu_config, free_port, logged
from transformers import AutoModelForCausalLM
from trl.import_utils import is_vllm_available

from trl_ext import OnPolicyDistillConfig, OnPolicyDistillTrainer
from trl_ext.toy import build_tokenizer, toy_dataset
from trl_ext.trainers.distill.teachers import ServedTeacher, TeacherBatch, top_k_tail_logprob

TEMPERATURE = 0.8  # not 1: the server must score at the sampling temperature it is sent


class StubVLLMServer:
    """vLLM's OpenAI-compatible server, as far as TRL's `VLLMClient` scoring uses it, backed by the model at `path`.

    `/v1/completions` with `max_tokens=1` and `prompt_logprobs=k` on token-id prompts returns, for every prompt token
    but the first, its `k` most likely tokens (ranks 1..k) plus the prompt token itself (with its true rank), at the
    request's temperature: what vLLM reports with `--logprobs-mode processed_logprobs`. `omit_sampled=True` leaves
    the prompt token out when it is not in the top-k (a server that does not report it)."""

    def __init__(self, path: str, omit_sampled: bool = False):
        self.model = AutoModelForCausalLM.from_pretrained(path).eval()
        self.name, self.omit_sampled, self.requests = path, omit_sampled, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def answer(self, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/health":
                    self.answer({})
                elif self.path == "/v1/models":
                    self.answer({"object": "list", "data": [{"id": server.name, "max_model_len": 256}]})
                else:
                    self.send_error(404)

            def do_POST(self):
                if self.path != "/v1/completions":
                    self.send_error(404)
                    return
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(request)
                choices = [
                    {"index": i, "text": "", "finish_reason": "length", "prompt_logprobs": server.score(ids, request)}
                    for i, ids in enumerate(request["prompt"])
                ]
                self.answer({"object": "text_completion", "model": request["model"], "choices": choices})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @torch.no_grad()
    def score(self, sequence: list[int], request: dict) -> list[dict | None]:
        k, temperature = request["prompt_logprobs"], request["temperature"]
        logits = self.model(input_ids=torch.tensor([sequence])).logits[0].float()
        logps = torch.log_softmax(logits / temperature, dim=-1)
        positions: list[dict | None] = [None]
        for i in range(1, len(sequence)):
            dist, token = logps[i - 1], sequence[i]
            values, ids = dist.topk(k) if k > 0 else (dist[:0], dist[:0].long())
            entries = {
                str(t): {"logprob": v, "rank": r + 1, "decoded_token": ""}
                for r, (t, v) in enumerate(zip(ids.tolist(), values.tolist(), strict=True))
            }
            if str(token) not in entries and not self.omit_sampled:
                rank = int((dist > dist[token]).sum()) + 1
                entries[str(token)] = {"logprob": dist[token].item(), "rank": rank, "decoded_token": ""}
            positions.append(entries)
        return positions

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def teacher_server(tiny_teacher):
    server = StubVLLMServer(tiny_teacher)
    yield server
    server.close()


@pytest.fixture(scope="module")
def student_server(tiny_model):
    """The toy student served: a second teacher that differs from the first."""
    server = StubVLLMServer(tiny_model)
    yield server
    server.close()


@pytest.fixture
def vllm_client(monkeypatch):
    """Let TRL's `VLLMClient` be built without vLLM installed: it checks for vLLM only for its weight-sync
    (NCCL) features, which scoring does not use; the stub server stands in for vLLM."""
    monkeypatch.setattr("trl.generation.vllm_client.is_vllm_available", lambda *args, **kwargs: True)


def _trainer(student, tmp_path, teacher=None, dataset=None, **overrides):
    settings = {"temperature": TEMPERATURE, "max_steps": 1, "optim": "sgd", "learning_rate": 0.5, **overrides}
    return OnPolicyDistillTrainer(
        model=student,
        teacher_model=teacher,
        args=cpu_config(OnPolicyDistillConfig, str(tmp_path), **settings),
        train_dataset=dataset if dataset is not None else toy_dataset(32),
        processing_class=build_tokenizer(),
    )


def _batch(trainer, seed: int = 0):
    """One generation batch (2 prompts × 4 completions) sampled with a fixed seed, and its rows."""
    trainer.model.train()
    rows = [trainer.train_dataset[i] for i in range(2) for _ in range(trainer.num_generations)]
    torch.manual_seed(seed)
    return trainer._generate_and_score_completions(rows), rows


def _scores(trainer, batch, rows, top_k: int):
    """What the trainer's teachers answer for `batch` (its sampled tokens' log-probs and, with top_k, top-k data)."""
    index = trainer.teachers.row_index(rows) if trainer.teachers.routes else None
    mask = batch["completion_mask"].bool()
    return trainer.teachers.score(TeacherBatch.of(batch, mask, 8), index, top_k, True, trainer.temperature), mask


def _plain(path: str, batch, k: int = 4):
    """Plain HF forward of the model at `path` on the batch, at TEMPERATURE: `(sampled-token log-probs [B, T], top-k
    log-probs [B, T, k], top-k ids [B, T, k])`."""
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    width = batch["completion_ids"].size(1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, -width - 1 : -1].double()
    logps = torch.log_softmax(logits / TEMPERATURE, -1)
    values, top = logps.topk(k, dim=-1)
    return logps.gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1), values, top


# ---- one served teacher equals the same model as a local teacher -----------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [{}, {"teacher_top_k": 4}, {"teacher_top_k": 4, "jsd_beta": 0.5, "advantage_fn": "jsd"}],
    ids=["sampled-token", "top-k", "top-k+jsd-advantage"],
)
def test_a_served_teacher_trains_as_the_local_one(tiny_model, tiny_teacher, teacher_server, vllm_client, tmp_path,
                                                  settings):  # fmt: skip
    """Same seed, same student: the served teacher's log-probs, top-k, advantages, loss, gradient and first update
    are the local teacher's (to float32 tolerance: two forwards of one model)."""
    local = _trainer(tiny_model, tmp_path / "local", teacher=tiny_teacher, **settings)
    served = _trainer(tiny_model, tmp_path / "served", teacher_model_server_url=teacher_server.url, **settings)
    assert served.teacher_model is None and type(served.teachers.teachers["default"]) is ServedTeacher
    k = settings.get("teacher_top_k", 0)

    (local_batch, rows), (served_batch, _) = _batch(local), _batch(served)
    assert torch.equal(local_batch["completion_ids"], served_batch["completion_ids"])
    (expected, mask), (got, _) = _scores(local, local_batch, rows, k), _scores(served, served_batch, rows, k)
    torch.testing.assert_close(got.logprob[mask], expected.logprob[mask], atol=2e-5, rtol=1e-5)
    request = teacher_server.requests[-1]
    assert request["temperature"] == TEMPERATURE and request["max_tokens"] == 1
    assert request["prompt_logprobs"] == max(k, 1)
    if k:
        assert torch.equal(got.columns["teacher_top_k_ids"][mask], expected.columns["teacher_top_k_ids"][mask])
        for name in ("teacher_top_k_logprobs", "teacher_tail_logprob"):
            torch.testing.assert_close(got.columns[name][mask], expected.columns[name][mask], atol=2e-5, rtol=1e-4)
        for name in ("teacher_top_k_ids", "teacher_top_k_logprobs", "teacher_tail_logprob"):
            assert served_batch[name].shape == local_batch[name].shape
        plain, _, top = _plain(tiny_teacher, served_batch)
        assert torch.equal(served_batch["teacher_top_k_ids"][mask], top[mask])
        torch.testing.assert_close(got.logprob[mask].double(), plain[mask], atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(served_batch["advantages"], local_batch["advantages"], atol=2e-5, rtol=1e-5)
    if k == 0 or "advantage_fn" in settings:
        assert served_batch["advantages"].abs().sum() > 0.1  # a real signal, not two zeros

    losses = []
    for trainer, batch in ((local, local_batch), (served, served_batch)):
        trainer.model.eval()
        trainer.model.zero_grad()
        loss = trainer._compute_loss(trainer.model, batch)
        loss.backward()
        losses.append((loss.detach(), trainer.model.get_output_embeddings().weight.grad.clone()))
    torch.testing.assert_close(losses[1][0], losses[0][0], atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(losses[1][1], losses[0][1], atol=1e-6, rtol=1e-4)
    assert losses[0][0].abs() > 1e-4 or losses[0][1].abs().max() > 1e-4

    for trainer in (local, served):
        torch.manual_seed(1)  # the same samples in both runs
        trainer.train()
    for (name, a), b in zip(local.model.named_parameters(), served.model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6, msg=name)
    if k == 0:
        assert logged(served, "kl/mean") == pytest.approx(logged(local, "kl/mean"), abs=1e-5)
    else:
        assert logged(served, "distill/divergence") == pytest.approx(logged(local, "distill/divergence"), rel=1e-4)


def test_the_tail_from_the_top_k_alone():
    """A server sends only the top-k: the tail is log(1 − Σ p_top-k), at least TRL's floor 1e-7 (a peaked teacher
    whose top-k sum rounds to 1), −inf when the top-k is the whole vocabulary."""
    logps = torch.log_softmax(torch.tensor([[2.0, 1.0, 0.5, -1.0], [0.0, 0.0, 0.0, 0.0], [40.0, 0.0, 0.0, 0.0]]), -1)
    top = logps.topk(2, dim=-1).values
    expected = torch.log(logps.double().exp().sort(-1, descending=True).values[:, 2:].sum(-1))
    tail = top_k_tail_logprob(top, vocab_size=4)
    torch.testing.assert_close(tail[:2], expected[:2])
    assert expected[2] < math.log(1e-7) and tail[2].item() == pytest.approx(math.log(1e-7))
    assert top_k_tail_logprob(logps, vocab_size=4).isneginf().all()
    assert torch.isfinite(top_k_tail_logprob(logps, vocab_size=5)).all()  # a student with a padded vocabulary


# ---- several teachers, each row scored by its own ------------------------------------------------------------------


def _two_teacher_dataset():
    data = toy_dataset(32)
    return data.add_column("teacher_id", ["a", "b"] * 16)


@pytest.mark.parametrize(
    ("kind", "top_k"), [("served", 0), ("served", 4), ("local", 0), ("mixed", 4)]
)  # fmt: skip
def test_each_row_is_scored_by_its_teacher(tiny_model, tiny_teacher, teacher_server, student_server, vllm_client,
                                           tmp_path, kind, top_k):  # fmt: skip
    """Teacher "a" is the toy teacher, "b" the toy student itself: rows with teacher_id "a" get the teacher's
    log-probs (and top-k), rows with "b" the student's, and their distillation advantage is 0 (on-policy, a teacher
    equal to the student)."""
    teachers = {
        "served": ({}, {"a": teacher_server.url, "b": student_server.url}),
        "local": ({"a": tiny_teacher, "b": tiny_model}, None),
        "mixed": ({"a": tiny_teacher}, {"b": student_server.url}),
    }[kind]
    local, served = teachers
    trainer = _trainer(
        tiny_model, tmp_path, teacher=local or None, dataset=_two_teacher_dataset(), teacher_server_urls=served,
        teacher_top_k=top_k, advantage_fn="on_policy_distill" if top_k == 0 else "jsd",
    )  # fmt: skip
    assert trainer.teachers.routes and trainer.teachers.ids == ["a", "b"] and trainer.teacher_model is None
    batch, rows = _batch(trainer)
    assert "teacher_index" not in batch  # used, then dropped
    scores, mask = _scores(trainer, batch, rows, top_k)
    is_a = torch.tensor([row["teacher_id"] == "a" for row in rows])
    assert is_a.tolist() == [True] * 4 + [False] * 4
    for teacher_id, path, rows_of in (("a", tiny_teacher, is_a), ("b", tiny_model, ~is_a)):
        plain, values, top = _plain(path, batch)
        at = mask & rows_of[:, None]
        torch.testing.assert_close(scores.logprob[at].double(), plain[at], atol=2e-5, rtol=1e-5, msg=teacher_id)
        if top_k:
            assert torch.equal(batch["teacher_top_k_ids"][at], top[at]), teacher_id
            torch.testing.assert_close(batch["teacher_top_k_logprobs"][at].double(), values[at], atol=2e-5, rtol=1e-5)
    student, _, _ = _plain(tiny_model, batch)
    if top_k == 0:  # on_policy_distill: kl_coef·(log π_teacher − log π_old), π_old the student
        expected = torch.where(mask & is_a[:, None], _plain(tiny_teacher, batch)[0] - student, 0.0)
        torch.testing.assert_close(batch["advantages"].double(), expected, atol=5e-5, rtol=1e-5)
    assert batch["advantages"][~is_a].abs().max() < 1e-4 and batch["advantages"][is_a].abs().max() > 0.1
    trainer.train()  # the routed batch trains
    assert len(logged(trainer, "distill/divergence" if top_k else "kl/mean")) == 1


# ---- bad input -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"teacher_model_server_url": "localhost:8001"}, r"teacher_model_server_url='localhost:8001' is not valid; "
         r"must be an http\(s\) URL of a vLLM server"),
        ({"teacher_server_urls": {}}, r"teacher_server_urls=\{\} names no teacher"),
        ({"teacher_server_urls": {"a": "ftp://x"}}, r"teacher_server_urls\['a'\]='ftp://x' is not valid"),
        ({"teacher_server_urls": '{"a": "http://h:1"'}, r"teacher_server_urls=.* it is not valid JSON"),
        ({"teacher_model_server_url": "http://h:1", "teacher_server_urls": {"a": "http://h:2"}},
         r"both give served teachers; set one"),
        ({"teacher_server_urls": {"a": "http://h:1"}, "teacher_model_name_or_path": "some/teacher"},
         r"two teachers given: teacher_model_name_or_path='some/teacher' and the served teacher_server_urls"),
        ({"teacher_model_server_url": "http://h:1", "teacher_top_k": -1},
         r"teacher_top_k=-1 .* which a served teacher does not return"),
    ],
)  # fmt: skip
def test_bad_served_teacher_config(overrides, message):
    with pytest.raises(ValueError, match=message):
        OnPolicyDistillConfig(output_dir="unused", **{**CPU, **overrides})


def test_served_teacher_config_from_the_command_line():
    args = OnPolicyDistillConfig(output_dir="unused", teacher_server_urls='{"math": "http://h:8002"}', **CPU)
    assert args.served_teachers == {"math": "http://h:8002"} and args.teacher_model_name_or_path is None
    single = OnPolicyDistillConfig(output_dir="unused", teacher_model_server_url="http://h:8001", **CPU)
    assert single.served_teachers == {"default": "http://h:8001"}
    single.use_toy_task()
    assert single.teacher_model_name_or_path is None  # the served teacher stays the only one


def test_rows_that_name_no_teacher(tiny_model, tiny_teacher, teacher_server, vllm_client, tmp_path):
    urls = {"a": teacher_server.url}
    two = {"a": tiny_teacher, "b": tiny_model}
    with pytest.raises(ValueError, match=r"teacher_id='c' names no teacher; must be one of 'a', 'b'"):
        _trainer(tiny_model, tmp_path, teacher=two, dataset=_two_teacher_dataset().map(lambda r: {"teacher_id": "c"}))
    with pytest.raises(ValueError, match=r"train_dataset has no 'teacher_id' column.* \('a', 'b'\)"):
        _trainer(tiny_model, tmp_path, teacher={"a": tiny_teacher}, teacher_server_urls={"b": teacher_server.url})
    trainer = _trainer(tiny_model, tmp_path, teacher=two, dataset=_two_teacher_dataset())
    with pytest.raises(ValueError, match=r"teacher_id=None names no teacher; must be one of 'a', 'b'"):
        trainer.teachers.row_index([{"prompt": "x"}])  # a streamed row: checked when it comes
    with pytest.raises(ValueError, match=r"teacher_id 'a' names both a local teacher .* and a served one"):
        _trainer(tiny_model, tmp_path, teacher={"a": tiny_teacher}, teacher_server_urls=urls)
    with pytest.raises(ValueError, match=r"two teachers given: teacher_model=.* and the served teacher_server_urls"):
        _trainer(tiny_model, tmp_path, teacher=tiny_teacher, teacher_server_urls=urls)
    with pytest.raises(ValueError, match=r"teacher_device='cpu' configures a local teacher, but every teacher is"):
        _trainer(tiny_model, tmp_path, teacher_server_urls=urls, teacher_device="cpu")
    with pytest.raises(ValueError, match=r"teacher_top_k=-1 .* needs one teacher, but 2 are given"):
        _trainer(tiny_model, tmp_path, teacher=two, dataset=_two_teacher_dataset(), teacher_top_k=-1)
    with pytest.raises(TypeError, match=r"teacher_model\['b'\] must be a path, a Hub id or a PreTrainedModel"):
        _trainer(tiny_model, tmp_path, teacher={"a": tiny_teacher, "b": 3}, dataset=_two_teacher_dataset())
    # One teacher scores every row, whatever its teacher_id (as TRL's asynchronous distillation).
    one = _trainer(tiny_model, tmp_path, teacher_server_urls=urls, dataset=_two_teacher_dataset())
    assert not one.teachers.routes and _batch(one)[0]["advantages"].abs().sum() > 0


def test_an_unreachable_server_is_named(tiny_model, vllm_client, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(ConnectionError, match=rf"teacher server teacher_model_server_url='{url}' cannot be reached"):
        _trainer(tiny_model, tmp_path, teacher_model_server_url=url, vllm_server_timeout=0)
    with pytest.raises(ConnectionError, match=r"teacher server teacher_server_urls\['math'\]='http://.*' cannot be"):
        _trainer(tiny_model, tmp_path, teacher_server_urls={"math": url}, vllm_server_timeout=0)


@pytest.mark.skipif(is_vllm_available(), reason="vLLM is installed: TRL's client needs nothing more")
def test_a_served_teacher_without_vllm_installed(tiny_model, teacher_server, tmp_path):
    with pytest.raises(ImportError, match=r"teacher_model_server_url='http://.*' is a served teacher, asked through "
                                          r"TRL's VLLMClient, which needs vLLM installed"):  # fmt: skip
        _trainer(tiny_model, tmp_path, teacher_model_server_url=teacher_server.url)


def test_a_server_that_omits_the_sampled_token(tiny_model, tiny_teacher, vllm_client, tmp_path):
    server = StubVLLMServer(tiny_teacher, omit_sampled=True)
    try:
        trainer = _trainer(tiny_model, tmp_path, teacher_model_server_url=server.url)
        with pytest.raises(RuntimeError, match=r"returned no finite value for the log-prob of the sampled token"):
            _batch(trainer)
    finally:
        server.close()


@pytest.mark.parametrize(
    "served", [{"teacher_model_server_url": "http://h:1"}, {"teacher_server_urls": {"a": "http://h:1"}}]
)
def test_the_asynchronous_form_refuses_served_teachers(served):
    """Its teacher scores TRL's packed rows, which hold no per-sample sequence to send nor the teacher_id column."""
    from trl_ext import async_config_class

    form = async_config_class("on_policy_distill")
    name = next(iter(served))
    with pytest.raises(ValueError, match=rf"{name}=.* asks a vLLM server .* the asynchronous trainer cannot do"):
        form(output_dir="unused", **CPU, rollout_backend="transformers", token_budget=0, **served)


def test_the_asynchronous_form_refuses_several_teachers(tiny_teacher):
    from trl_ext.trainers.distill.teachers import teacher_argument

    args = OnPolicyDistillConfig(output_dir="unused", **CPU)
    with pytest.raises(TypeError, match=r"teacher_model=\{'a': ...\} names teachers by teacher_id.* synchronous"):
        teacher_argument("AsyncGRPOTrainer", None, {"a": tiny_teacher}, args)
