"""The OpenAI-compatible server (FastAPI under uvicorn) over our engines on the real backend (tiny model, cpu),
through stdlib http.client and the openai package: one chunk per token and the same tokens as the engine's offline
run, text and chat prompts, concurrency, every bad request a 400, the API key, /metrics parsed by
prometheus_client, vLLM's other endpoints, a request without max_tokens, a rejected request, a client that hangs
up (its KV blocks freed), shutdown mid-stream, and serve.py end to end.

Every engine in one process shares the attention hook's iteration context, so two engines never run at once:
offline references run while the servers are idle, and a test that leaves a request running waits for it.
"""
from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from dataclasses import replace
import http.client
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import yaml

from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import ContiguousEngineConfig, PagedEngineConfig, SchedulerLimits
from pagedbench.engines.peers.sse import parse_chunk
from pagedbench.engines.run_record import RunRecord
from pagedbench.engines.loop import run_engine
from pagedbench.engines.real.build import RealBackendConfig, build_real, load_real_model
from pagedbench.engines.sequence import Status
from pagedbench.engines.serving.online_loop import Inbox, serve_loop
from pagedbench.engines.serving.asgi_server import VERSION, EngineService, build_app, uvicorn_config
from pagedbench.engines.serving.token_text import TokenText
from pagedbench.engines.specs.model import ModelSpec
from pagedbench.paths import CONF, ROOT
from tests.engines.conftest import UnitExecutor, make_request
from pagedbench.workloads.request import Request

SPEC = ModelSpec.from_dict(yaml.safe_load((CONF / "model" / "tiny.yaml").read_text()))
BACKEND = RealBackendConfig(device="cpu", dtype="float32", kernels="torch", kv_budget_mib=4.0)   # 512 slots
LIMITS = SchedulerLimits(max_num_seqs=16, max_num_batched_tokens=256, max_seq_len=128)
ENGINES = {"static": ContiguousEngineConfig("static"), "orca": ContiguousEngineConfig("orca", reservation="oracle"),
           "paged": PagedEngineConfig(swap_space=0.001)}
PROMPT = [1000 + 37 * i for i in range(12)]


@pytest.fixture(scope="module")
def loaded():
    return load_real_model(BACKEND, SPEC)


class Running:
    """A service and its app under uvicorn on a free port, in a thread of this process."""

    def __init__(self, service: EngineService, api_key: str | None = None):
        import uvicorn

        self.service = service
        self.backend, self.record = service.backend, service.record
        sock = socket.create_server(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        service.start()
        self.server = uvicorn.Server(uvicorn_config(build_app(service, api_key)))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.01)

    def shutdown(self) -> None:
        """As SIGTERM: open streams end with a reason, then the server stops."""
        self.service.stop()
        self.server.should_exit = True
        self.thread.join(15)
        assert not self.thread.is_alive()


@contextmanager
def running(loaded, engine: str, budget_mib: float = 4.0, keep_record: bool = False, api_key: str | None = None):
    backend = build_real(replace(BACKEND, kv_budget_mib=budget_mib), SPEC, ENGINES[engine], LIMITS, loaded=loaded)
    server = Running(EngineService(backend, SPEC.name, ENGINES[engine].label, "cl100k_base",
                                   max_seq_len=LIMITS.max_seq_len, keep_record=keep_record), api_key)
    try:
        yield server
    finally:
        server.shutdown()


# mutmut ties a mutant to the tests that call its function: one app built per module would tie every mutant
# of `build_app` (its handlers included) to the module's first test alone. Under mutmut each test builds its own.
PER_TEST = "MUTANT_UNDER_TEST" in os.environ


@pytest.fixture(scope="function" if PER_TEST else "module")
def paged(loaded):
    with running(loaded, "paged") as server:
        yield server


def call(port: int, method: str, path: str, body: dict | None = None, raw: bytes | None = None,
         headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def events(payload: bytes) -> list:
    """The server-sent events of a stream: parsed JSON bodies, and "[DONE]"."""
    blocks = [b for b in payload.decode().split("\n\n") if b.strip()]
    assert all(b.startswith("data: ") for b in blocks), blocks
    return [b[6:] if b[6:] == "[DONE]" else json.loads(b[6:]) for b in blocks]


def stream(port: int, body: dict, path: str = "/v1/completions") -> list:
    status, headers, payload = call(port, "POST", path, {**body, "stream": True})
    assert status == 200, payload
    assert headers["content-type"].startswith("text/event-stream") and headers["cache-control"] == "no-cache"
    return events(payload)


def open_stream(port: int, max_tokens: int = 120) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """A long stream opened and its response begun (status 200), to be read after something happens."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/completions", json.dumps({"prompt": PROMPT[:8], "max_tokens": max_tokens,
                                                        "stream": True}))
    resp = conn.getresponse()
    assert resp.status == 200
    return conn, resp


def token_chunks(evs: list) -> list[dict]:
    """The events a client counts as tokens: one each, those whose choices are not empty."""
    return [e for e in evs if isinstance(e, dict) and e.get("choices")]


def offline_tokens(loaded, engine: str, prompt: list[int], max_tokens: int) -> list[int]:
    backend = build_real(BACKEND, SPEC, ENGINES[engine], LIMITS, loaded=loaded)
    record = run_engine([Request(0, 0.0, tuple(prompt), max_tokens)], backend.scheduler, backend.executor,
                        progress=False)
    return record.sequences[0].output_token_ids


def finished_count(metrics_text: str, reason: str) -> float | None:
    """vllm:request_success_total for `reason` in /metrics text (whatever its other labels), None if absent."""
    from prometheus_client.parser import text_string_to_metric_families

    return next((s.value for family in text_string_to_metric_families(metrics_text) for s in family.samples
                 if s.name == "vllm:request_success_total" and s.labels.get("finished_reason") == reason), None)


def wait_idle(server: Running, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while server.backend.scheduler.has_work():
        assert time.monotonic() < deadline, "the engine never finished its requests"
        time.sleep(0.01)


def test_serve_loop_records_the_iterations_run_engine_records():
    """Every request submitted before the loop starts: the same iterations as the offline loop, preemptions
    and a rejection included; on_tokens once per token, on_done once per request."""
    lengths = [(30, 40), (20, 50), (45, 25), (10, 60), (100, 40)]      # the last exceeds max_seq_len
    engine = PagedEngineConfig(block_size=8, watermark=0.0, preemption="recompute", swap_space=0)
    offline = run_engine([make_request(i, p, o) for i, (p, o) in enumerate(lengths)],
                         build_scheduler(engine, LIMITS, 160, 1), UnitExecutor(), progress=False)
    executor, scheduler = UnitExecutor(), build_scheduler(engine, LIMITS, 160, 1)
    inbox, stop, calls, done = Inbox(executor.now), threading.Event(), Counter(), []
    for p, o in lengths:
        inbox.put(inbox.new_request(list(range(p)), o))

    def on_done(seq):
        done.append((seq.id, seq.status))
        if len(done) == len(lengths):
            stop.set()
    threading.Timer(20, stop.set).start()    # a hang fails below instead of blocking the suite
    record = RunRecord(capacity_slots=scheduler.kv.capacity)
    serve_loop(inbox, scheduler, executor, stop, lambda seq, ids: calls.update([seq.id]), on_done, record=record)
    assert sum(s.preemptions for s in offline.sequences) > 0
    assert record.iterations == offline.iterations
    assert [(s.admitted_s, s.finish_s) for s in record.sequences] == \
        [(s.admitted_s, s.finish_s) for s in offline.sequences]
    assert calls == {i: o for i, (_, o) in enumerate(lengths[:4])}
    assert sorted(done) == [(0, Status.FINISHED), (1, Status.FINISHED), (2, Status.FINISHED),
                            (3, Status.FINISHED), (4, Status.REJECTED)]


def test_an_abort_for_a_request_put_just_before_it_is_not_lost():
    """A client's request goes into the inbox before its abort can be asked for; an abort taken while the
    request was not yet taken from the inbox still drops it (the loop takes the aborts first)."""
    engine = PagedEngineConfig(block_size=8, watermark=0.0, preemption="recompute", swap_space=0)
    executor, scheduler = UnitExecutor(), build_scheduler(engine, LIMITS, 160, 1)
    inbox, stop, tokens, asked = Inbox(executor.now), threading.Event(), Counter(), []
    late = inbox.new_request(list(range(10)), 40)
    first = inbox.new_request(list(range(10)), 5)
    inbox.put(first)

    def aborts() -> list[int]:
        if not asked:                  # between two of the loop's calls: the request arrives, then its abort
            asked.append(late.id)
            inbox.put(late)
            return [late.id]
        return []

    def on_done(seq):
        stop.set()
    threading.Timer(20, stop.set).start()
    record = RunRecord(capacity_slots=scheduler.kv.capacity)
    serve_loop(inbox, scheduler, executor, stop, lambda seq, ids: tokens.update([seq.id]), on_done, record=record,
               aborts=aborts)
    assert sorted((s.id, s.status) for s in record.sequences) == sorted([(first.id, Status.FINISHED),
                                                                         (late.id, Status.FAILED)])
    assert tokens == {first.id: 5} and scheduler.kv.usage()[1] == 0


def test_token_text_decodes_what_it_can_and_gives_empty_text_otherwise():
    text = TokenText("cl100k_base")
    for bad in (-1, 100256, 100277, 10**7):   # negative, a gap in the vocabulary, past its end
        assert text.token_bytes(bad) == b"" and text.decoder().add(bad, final=True) == ""
    phrase = "naïve 🦜 café 龘"
    ids = text.encode(phrase)
    pieces = text.decoder()
    texts = [pieces.add(t, final=i == len(ids) - 1) for i, t in enumerate(ids)]
    assert "".join(texts) == phrase and "" in texts    # 🦜 and 龘 span tokens: whole on their last


def test_models_health_and_the_server_header(paged):
    status, headers, body = call(paged.port, "GET", "/v1/models")
    assert status == 200 and headers["server"] == f"pagedbench/{VERSION} paged"
    models = json.loads(body)
    assert models == {"object": "list", "data": [{
        "id": "pagedbench-paged-tiny", "object": "model", "created": paged.service.created, "owned_by": "pagedbench",
        "root": "pagedbench-paged-tiny", "parent": None, "max_model_len": LIMITS.max_seq_len, "permission": [],
        "engine": "paged"}]}                              # vllm bench serve reads `root` without --model
    assert abs(paged.service.created - time.time()) < 600
    status, _, body = call(paged.port, "GET", "/openapi.json")
    assert status == 200 and json.loads(body)["info"] == {"title": "pagedbench", "version": VERSION}
    for path in ("/docs", "/redoc"):
        assert call(paged.port, "GET", path)[0] == 404
    for path in ("/health", "/ping"):
        assert call(paged.port, "GET", path)[0] == 200
    assert call(paged.port, "POST", "/ping")[0] == 200
    status, _, body = call(paged.port, "GET", "/version")
    assert status == 200 and json.loads(body) == {"version": VERSION}
    status, _, body = call(paged.port, "GET", "/v1/nothing")
    assert status == 404 and json.loads(body)["error"]["message"]
    status, _, body = call(paged.port, "HEAD", "/v1/models")
    assert status == 405


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_each_engine_streams_one_chunk_per_token_equal_to_its_offline_run(loaded, engine):
    expected = offline_tokens(loaded, engine, PROMPT, 12)
    text = TokenText("cl100k_base")
    with running(loaded, engine, keep_record=True) as server:
        evs = stream(server.port, {"prompt": PROMPT, "max_tokens": 12, "stream_options": {"include_usage": True},
                                   "return_token_ids": True, "ignore_eos": True, "temperature": 0,
                                   "model": f"pagedbench-{ENGINES[engine].label}-tiny", "unknown_field": 1})
    chunks = token_chunks(evs)
    assert [c["choices"][0]["token_ids"] for c in chunks] == [[t] for t in expected]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 11 + ["length"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == \
        b"".join(text.token_bytes(t) for t in expected).decode("utf-8", "replace")
    assert {(c["object"], c["model"], c["id"]) for c in chunks} == \
        {("text_completion", f"pagedbench-{ENGINES[engine].label}-tiny", chunks[0]["id"])}
    assert evs[12:] == [{**{k: chunks[0][k] for k in ("id", "object", "created", "model")}, "choices": [],
                         "usage": {"prompt_tokens": 12, "completion_tokens": 12, "total_tokens": 24}}, "[DONE]"]
    (seq,) = server.record.sequences               # the server's record: one prefill, then 11 decode steps
    assert seq.status == Status.FINISHED and seq.output_token_ids == expected
    assert [(r.prefill_seqs, r.decode_seqs) for r in server.record.iterations] == [(1, 0)] + [(0, 1)] * 11


def test_a_text_prompt_streamed_and_whole_gives_the_same_tokens(paged):
    prompt = "The quick brown fox jumps over the lazy dog"
    evs = stream(paged.port, {"prompt": prompt, "max_tokens": 7, "return_token_ids": True, "temperature": 0})
    chunks = token_chunks(evs)
    assert len(chunks) == 7 and evs[-1] == "[DONE]" and "usage" not in evs[-2]   # usage only when asked
    status, _, body = call(paged.port, "POST", "/v1/completions",
                           {"prompt": [prompt], "max_tokens": 7, "stream": False, "return_token_ids": True,
                            "temperature": 0})
    whole = json.loads(body)
    assert status == 200 and whole["object"] == "text_completion"
    (choice,) = whole["choices"]
    assert choice["token_ids"] == [c["choices"][0]["token_ids"][0] for c in chunks]
    assert choice["text"] == "".join(c["choices"][0]["text"] for c in chunks)
    assert choice["finish_reason"] == "length"
    n = len(TokenText("cl100k_base").encode(prompt))
    assert whole["usage"] == {"prompt_tokens": n, "completion_tokens": 7, "total_tokens": n + 7}


def test_chat_streams_deltas_and_answers_whole(paged):
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Hello"}]}]
    evs = stream(paged.port, {"messages": messages, "max_tokens": 5, "stream_options": {"include_usage": True},
                              "temperature": 0}, "/v1/chat/completions")
    role, *chunks = token_chunks(evs)         # as vLLM: the role alone first, then one chunk per token
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert not parse_chunk(json.dumps(role)).carries_output      # so a client times no token by it
    assert len(chunks) == 5 and all(c["object"] == "chat.completion.chunk" for c in chunks + [role])
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert all(set(d) == {"content"} for d in deltas) and chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(parse_chunk(json.dumps(c)).carries_output for c in chunks)
    prompt_tokens = len(TokenText("cl100k_base").encode("Be brief.\nHello"))
    assert evs[-2]["usage"]["prompt_tokens"] == prompt_tokens and evs[-2]["usage"]["completion_tokens"] == 5
    status, _, body = call(paged.port, "POST", "/v1/chat/completions",
                           {"messages": messages, "max_completion_tokens": 5, "temperature": 0})
    whole = json.loads(body)
    assert status == 200 and whole["object"] == "chat.completion"
    assert whole["choices"][0]["message"] == {"role": "assistant",
                                              "content": "".join(d["content"] for d in deltas)}


def test_concurrent_requests_all_complete(paged):
    lengths = [(3, 9), (17, 4), (8, 15), (25, 6), (5, 11), (12, 8)]
    results: dict[int, list] = {}

    def client(i, prompt_len, max_tokens):
        results[i] = stream(paged.port, {"prompt": list(range(i, i + prompt_len)), "max_tokens": max_tokens,
                                         "stream_options": {"include_usage": True}})
    threads = [threading.Thread(target=client, args=(i, p, o)) for i, (p, o) in enumerate(lengths)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == list(range(len(lengths)))
    for i, (p, o) in enumerate(lengths):
        assert len(token_chunks(results[i])) == o and results[i][-1] == "[DONE]"
        assert results[i][-2]["usage"] == {"prompt_tokens": p, "completion_tokens": o, "total_tokens": p + o}


def test_a_burst_of_connections_at_once_is_served_not_reset(paged):
    """A trace's requests arriving together open their connections together: more than the listen backlog of
    socketserver's default (5) must all be accepted."""
    results = streams_at_once(paged.port, 40, prompt_len=2, max_tokens=2, timeout_s=120)
    assert sorted(results) == list(range(40))
    assert all(len(token_chunks(r)) == 2 and r[-1] == "[DONE]" for r in results.values())


def streams_at_once(port: int, clients: int, prompt_len: int, max_tokens: int, timeout_s: float) -> dict[int, list]:
    """`clients` streams started together (a barrier), each on a thread of its own: client i -> its events."""
    results: dict[int, list] = {}
    go = threading.Barrier(clients)

    def client(i):
        go.wait()
        results[i] = stream(port, {"prompt": [i + 1 + k for k in range(prompt_len)], "max_tokens": max_tokens})
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    return results


BAD = {   # body, chat, code, param (vLLM's error names the field at fault)
    "prompt fills the context": ({"prompt": [7] * 128}, None, "context_length_exceeded", "prompt"),
    "logprobs with echo": ({"prompt": PROMPT, "max_tokens": 5, "logprobs": 1, "echo": True}, None,
                           "unsupported_logprobs", "echo"),
    "chat top_logprobs past 20": ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                                   "logprobs": True, "top_logprobs": 21}, "chat", "invalid_request", "top_logprobs"),
    "max_tokens 0": ({"prompt": PROMPT, "max_tokens": 0}, None, "invalid_request", "max_tokens"),
    "max_tokens a string": ({"prompt": PROMPT, "max_tokens": "5"}, None, "invalid_request", "max_tokens"),
    "empty text prompt": ({"prompt": "", "max_tokens": 5}, None, "empty_prompt", "prompt"),
    "empty id prompt": ({"prompt": [], "max_tokens": 5}, None, "empty_prompt", "prompt"),
    "negative token id": ({"prompt": [1, -2], "max_tokens": 5}, None, "invalid_request", "prompt"),
    "two prompts streamed": ({"prompt": ["a", "b"], "max_tokens": 5, "stream": True}, None, "unsupported_parameter",
                             "prompt"),
    "n < 1": ({"prompt": PROMPT, "max_tokens": 5, "n": 0}, None, "invalid_request", "n"),
    "best_of < n": ({"prompt": PROMPT, "max_tokens": 5, "n": 3, "best_of": 2}, None, "invalid_request", "best_of"),
    "best_of > n streamed": ({"prompt": PROMPT, "max_tokens": 5, "best_of": 3, "stream": True}, None,
                             "unsupported_parameter", "best_of"),
    "logprobs past 20": ({"prompt": PROMPT, "max_tokens": 5, "logprobs": 21}, None, "invalid_request", "logprobs"),
    "longer than max_seq_len": ({"prompt": [7] * 100, "max_tokens": 29}, None, "context_length_exceeded",
                                "max_tokens"),
    "stream not a bool": ({"prompt": PROMPT, "max_tokens": 5, "stream": "yes"}, None, "invalid_request", "stream"),
    "no messages": ({"messages": [], "max_tokens": 5}, "chat", "invalid_request", "messages"),
    "temperature below 0": ({"prompt": PROMPT, "temperature": -1}, None, "invalid_request", "temperature"),
    "top_p 0": ({"prompt": PROMPT, "top_p": 0}, None, "invalid_request", "top_p"),
    "an empty stop": ({"prompt": PROMPT, "stop": ["", "x"]}, None, "invalid_request", "stop"),
    "a json schema": ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}},
                      "chat", "unsupported_parameter", "response_format"),
    "tools": ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, "chat",
              "unsupported_parameter", "tools"),
    "a penalty": ({"prompt": PROMPT, "presence_penalty": 0.5}, None, "unsupported_parameter", "presence_penalty"),
    "echo on chat": ({"messages": [{"role": "user", "content": "hi"}], "echo": True}, "chat", "invalid_request",
                     "echo"),
    "malformed JSON": (b'{"prompt": [1, 2', None, "invalid_json", None),
    "not an object": (b"[1, 2]", None, "invalid_request", None),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_request_gets_400_with_a_message(paged, case):
    body, chat, code, param = BAD[case]
    path = "/v1/chat/completions" if chat else "/v1/completions"
    status, headers, payload = call(paged.port, "POST", path, **({"raw": body} if isinstance(body, bytes)
                                                                 else {"body": body}))
    error = json.loads(payload)["error"]
    assert status == 400 and headers["content-type"] == "application/json"
    assert headers["server"] == paged.service.server_header
    assert error["message"] and error["type"] == "invalid_request_error" and error["code"] == code
    assert error["param"] == param and "None" not in error["message"]


def test_a_request_of_exactly_max_seq_len_is_served(paged):
    assert len(token_chunks(stream(paged.port, {"prompt": [7] * 100, "max_tokens": 28}))) == 28


def test_a_request_the_engine_rejects_gets_400_and_the_next_is_served(loaded, paged):
    with running(loaded, "paged", budget_mib=0.25) as server:         # 32 slots: two blocks of 16
        for stream_it in (True, False):
            status, _, payload = call(server.port, "POST", "/v1/completions",
                                      {"prompt": list(range(30)), "max_tokens": 10, "stream": stream_it})
            error = json.loads(payload)["error"]
            assert status == 400 and error["code"] == "request_rejected" and "blocks" in error["message"]
        assert len(token_chunks(stream(server.port, {"prompt": list(range(10)), "max_tokens": 5}))) == 5


def test_a_client_that_hangs_up_mid_stream_has_its_kv_blocks_freed(loaded):
    with running(loaded, "paged", keep_record=True) as server:
        kv = server.backend.scheduler.kv
        assert kv.usage()[1] == 0
        body = json.dumps({"prompt": PROMPT, "max_tokens": 110, "stream": True}).encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")      # headers come with the first token
            assert kv.usage()[1] > 0                                 # its blocks are held while it streams
        hung_up = time.monotonic()
        wait_idle(server, timeout_s=30)       # dropped long before its 110 tokens: the engine has no work
        to_idle = time.monotonic() - hung_up
        assert kv.usage()[1] == 0 and not server.backend.scheduler.held()
        assert len(server.record.sequences) == 1, "the request left no record"
        (dropped,) = server.record.sequences
        assert dropped.status == Status.FAILED and len(dropped.output_token_ids) < 110    # aborted, not finished
        # Counted as an abort, not as a finish, and freed within seconds of the hang-up.
        text = call(server.port, "GET", "/metrics")[2].decode()
        assert finished_count(text, "abort") == 1.0
        assert finished_count(text, "length") is None
        assert to_idle < 5.0, f"{to_idle:.1f} s from the hang-up to an idle engine"
        assert len(token_chunks(stream(server.port, {"prompt": PROMPT, "max_tokens": 5}))) == 5
        assert call(server.port, "GET", "/health")[0] == 200


def test_the_app_s_lifespan_starts_and_stops_a_service_not_started(loaded):
    """Under any ASGI server (here Starlette's test client), the app starts its service and stops it."""
    from starlette.testclient import TestClient

    backend = build_real(BACKEND, SPEC, ENGINES["paged"], LIMITS, loaded=loaded)
    service = EngineService(backend, SPEC.name, "paged", "cl100k_base", max_seq_len=LIMITS.max_seq_len)
    with TestClient(build_app(service)) as client:
        assert service.healthy
        response = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2})
        assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 2
    assert not service.healthy and not service._engine.is_alive()


HAN = [b"\xe6", b"\x97", b"\xa5"]      # the UTF-8 bytes of one character, a token each


def test_a_character_split_across_tokens_is_whole_in_the_text_and_a_cut_one_replaced(loaded):
    """Every output token made to carry a third of one character: four tokens are the character and a cut
    one; streamed, the cut is replaced on the last token's chunk; whole, the same text."""
    with running(loaded, "paged") as server:
        calls = iter(range(10**6))
        server.service.text.token_bytes = lambda token: HAN[next(calls) % 3]
        chunks = token_chunks(stream(server.port, {"prompt": PROMPT, "max_tokens": 4}))
        assert [c["choices"][0]["text"] for c in chunks] == ["", "", "\u65e5", "\ufffd"]
        calls = iter(range(10**6))
        server.service.text.token_bytes = lambda token: HAN[next(calls) % 3]
        status, _, body = call(server.port, "POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 4})
        assert status == 200 and json.loads(body)["choices"][0]["text"] == "\u65e5\ufffd"


def hang_up_after_sending(port: int, body: dict, wait_s: float = 0.0, until=None) -> None:
    """Send a completions request on a raw socket, then close it without reading its answer: once `until()` holds
    (if given), then `wait_s` later."""
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
        deadline = time.monotonic() + 30
        while until is not None and not until():
            assert time.monotonic() < deadline, "the condition to hang up on never held"
            time.sleep(0.001)
        time.sleep(wait_s)


def test_a_client_that_leaves_before_its_first_token_is_aborted(loaded):
    """Before a response exists the server watches for the disconnect itself: a streamed request still waiting
    for memory never runs, and a whole (unstreamed) one stops at once instead of running to max_tokens."""
    with running(loaded, "orca", budget_mib=0.25, keep_record=True) as server:     # 32 slots: one reservation
        ahead: list = []
        first = threading.Thread(target=lambda: ahead.append(stream(server.port, {"prompt": [1, 2],
                                                                                  "max_tokens": 29})))
        first.start()
        deadline = time.monotonic() + 30
        while not server.backend.scheduler.held():          # the first reserves 31 slots while it runs
            assert time.monotonic() < deadline
            time.sleep(0.005)
        # the second (30 slots) waits for memory: hang up as soon as it is queued, while the first still runs (a
        # fixed wait let a fast machine finish the first, admit the second and run it before the hang-up)
        hang_up_after_sending(server.port, {"prompt": list(range(2, 12)), "max_tokens": 20, "stream": True},
                              until=lambda: bool(server.backend.scheduler.waiting))
        first.join(60)
        wait_idle(server)
        assert len(token_chunks(ahead[0])) == 29
        _, waiting = server.record.sequences
        assert waiting.status == Status.FAILED and "went away" in waiting.rejected_reason
        assert waiting.output_token_ids == [] and server.backend.scheduler.kv.usage()[1] == 0
        text = call(server.port, "GET", "/metrics")[2].decode()
        assert finished_count(text, "abort") == 1.0
        assert finished_count(text, "length") == 1.0
    with running(loaded, "paged", keep_record=True) as server:
        hang_up_after_sending(server.port, {"prompt": list(range(3, 13)), "stream": False}, wait_s=0.02)   # 118 tokens
        wait_idle(server)
        (whole,) = server.record.sequences
        assert whole.status == Status.FAILED and len(whole.output_token_ids) < 118
        assert server.backend.scheduler.kv.usage()[1] == 0


def test_a_stop_asked_by_a_signal_takes_no_lock(loaded):
    """SIGTERM's handler runs on the engine's thread, maybe inside a callback holding the service's lock: it
    only sets flags, and the loop ends the open streams."""
    with running(loaded, "paged") as server:
        conn, resp = open_stream(server.port)
        with server.service._lock:               # as if the signal landed inside `_on_done`
            asker = threading.Thread(target=server.service.request_stop)
            asker.start()
            asker.join(5)
            assert not asker.is_alive()
        server.service.wait(10)
        evs = events(resp.read())
        conn.close()
        assert evs[-1] == "[DONE]" and "shutting down" in evs[-2]["error"]["message"]
        assert call(server.port, "GET", "/health")[0] == 503


def test_shutdown_mid_stream_ends_the_stream_with_an_error_event(loaded, paged):
    with running(loaded, "paged") as server:
        conn, resp = open_stream(server.port)
        started = time.monotonic()
        server.shutdown()
        assert time.monotonic() - started < 10
        evs = events(resp.read())
        conn.close()
        assert len(token_chunks(evs)) < 120 and evs[-1] == "[DONE]"
        assert evs[-2] == {"error": {"message": "the server is shutting down", "type": "server_error", "param": None,
                                     "code": "engine_error"}}
        with pytest.raises(OSError):
            call(server.port, "GET", "/health")


def test_while_stopping_a_request_gets_503_and_health_turns_503(loaded):
    with running(loaded, "paged") as server:
        server.service.stop()                 # the engine stopped, the socket still open
        status, headers, payload = call(server.port, "POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
        assert status == 503 and headers["server"] == server.service.server_header
        assert json.loads(payload) == {"error": {"message": "the server is shutting down", "type": "server_error",
                                                 "param": None, "code": "unavailable"}}
        assert call(server.port, "GET", "/health")[0] == 503


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_runs_the_engine_on_this_thread_until_sigterm_and_restores_the_handlers(loaded):
    """`serve` in this process (serve.py's own test runs it in a subprocess): bound on a free port, the web
    server on its own named thread, the engine on this one; SIGTERM stops both and puts the handlers back."""
    from pagedbench.engines.serving.asgi_server import serve

    backend = build_real(BACKEND, SPEC, ENGINES["paged"], LIMITS, loaded=loaded)
    service = EngineService(backend, SPEC.name, "paged", "cl100k_base", max_seq_len=LIMITS.max_seq_len)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    bound, seen = [], {}

    def client(url: str) -> None:
        try:
            seen["threads"] = {t.name for t in threading.enumerate()}
            seen["engine"] = threading.current_thread() is not threading.main_thread() and service._started
            seen["chunks"] = token_chunks(stream(int(url.rsplit(":", 1)[1]), {"prompt": PROMPT, "max_tokens": 3}))
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_bound(url: str) -> None:
        bound.append(url)
        threading.Thread(target=client, args=(url,)).start()

    serve(build_app(service), service, "127.0.0.1", 0, on_bound=on_bound)
    (url,) = bound
    assert url.startswith("http://127.0.0.1:") and int(url.rsplit(":", 1)[1]) > 0
    assert "pagedbench-http" in seen["threads"] and seen["engine"]
    assert len(seen["chunks"]) == 3 and seen["chunks"][0]["model"] == "pagedbench-paged-tiny"
    assert not service.healthy and service.engine_error is None
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
    assert not any(t.name == "pagedbench-http" and t.is_alive() for t in threading.enumerate())
    with pytest.raises(OSError):
        call(int(url.rsplit(":", 1)[1]), "GET", "/health")


@pytest.mark.slow
def test_serve_py_serves_a_request_and_stops_on_sigterm(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "serve.py", "engine=paged", f"serve.port={port}",
                             f"hydra.run.dir={tmp_path}"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    seen = []
    try:
        deadline = time.monotonic() + 120
        while not any(line.startswith("serving ") for line in seen):
            assert proc.poll() is None, "".join(seen)
            assert time.monotonic() < deadline, "".join(seen)
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                pass
        assert f"serving paged on http://127.0.0.1:{port}\n" in seen
        chunks = token_chunks(stream(port, {"prompt": "Hello", "max_tokens": 4}))
        assert len(chunks) == 4 and chunks[0]["model"] == "pagedbench-paged-tiny"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_api_key_guards_the_v1_routes(loaded):
    with running(loaded, "paged", api_key="s3cret") as server:
        body = {"prompt": PROMPT, "max_tokens": 2}
        status, headers, payload = call(server.port, "POST", "/v1/completions", body)
        error = json.loads(payload)["error"]
        assert headers["server"] == server.service.server_header          # set by the guard's own answer
        assert status == 401 and error["type"] == "authentication_error" and error["code"] == "invalid_api_key"
        assert call(server.port, "GET", "/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
        # The key is compared as it is: one that differs only in case is another key.
        assert call(server.port, "GET", "/v1/models", headers={"Authorization": "Bearer S3CRET"})[0] == 401
        assert call(server.port, "GET", "/v1/models", headers={"Authorization": "Bearer s3cre"})[0] == 401
        assert call(server.port, "GET", "/v1/models", headers={"Authorization": "Bearer s3crets"})[0] == 401
        assert call(server.port, "GET", "/v1/models", headers={"Authorization": "bearer s3cret"})[0] == 200
        status, _, payload = call(server.port, "POST", "/v1/completions", body,
                                  headers={"Authorization": "Bearer s3cret"})
        assert status == 200 and json.loads(payload)["usage"]["completion_tokens"] == 2
        assert call(server.port, "GET", "/health")[0] == 200          # vLLM guards /v1 only


def test_metrics_are_prometheus_text_that_counts_what_was_served(loaded):
    from prometheus_client.parser import text_string_to_metric_families

    with running(loaded, "paged") as server:
        for n in (3, 5):
            stream(server.port, {"prompt": PROMPT, "max_tokens": n})
        wait_idle(server)
        status, headers, payload = call(server.port, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    served = {"model_name": server.service.model_id, "engine": "paged"}   # on every sample, as vLLM labels them
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(payload.decode()) for s in family.samples}
    value = lambda name, **labels: samples[(name, tuple(sorted((labels | served).items())))]   # noqa: E731
    assert value("vllm:generation_tokens_total") == 8 and value("vllm:prompt_tokens_total") == 2 * len(PROMPT)
    assert value("vllm:request_success_total", finished_reason="length") == 2
    assert value("vllm:num_requests_running") == value("vllm:num_requests_waiting") == 0
    assert value("vllm:kv_cache_usage_perc") == 0 and value("vllm:num_preemptions_total") == 0
    assert value("pagedbench:kv_cache_slots", category="free") == server.backend.scheduler.kv.capacity
    assert value("vllm:time_to_first_token_seconds_count") == value("vllm:e2e_request_latency_seconds_count") == 2
    assert value("vllm:inter_token_latency_seconds_count") == (3 - 1) + (5 - 1)
    for histogram in ("time_to_first_token", "inter_token_latency", "e2e_request_latency"):
        assert 0 < value(f"vllm:{histogram}_seconds_sum") < 60, histogram      # times, not clock readings


def test_a_request_without_max_tokens_gets_the_rest_of_the_context(paged):
    """As guidellm sends it when its data has no output lengths: vLLM fills the context."""
    prompt = list(range(1, 121))                                  # 128 - 120 = 8 tokens left
    evs = stream(paged.port, {"prompt": prompt, "stream_options": {"include_usage": True}})
    assert len(token_chunks(evs)) == 8 and evs[-2]["usage"]["completion_tokens"] == 8


def test_tokenize_and_detokenize_round_trip(paged):
    status, _, body = call(paged.port, "POST", "/tokenize", {"prompt": "hello world"})
    tokens = json.loads(body)
    assert status == 200 and tokens["tokens"] == TokenText("cl100k_base").encode("hello world")
    assert tokens["count"] == 2 and tokens["max_model_len"] == LIMITS.max_seq_len
    status, _, body = call(paged.port, "POST", "/detokenize", {"tokens": tokens["tokens"]})
    assert status == 200 and json.loads(body) == {"prompt": "hello world"}
    status, _, body = call(paged.port, "POST", "/tokenize", {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and json.loads(body)["count"] == 1
    assert call(paged.port, "POST", "/detokenize", {"tokens": [-1]})[0] == 400
    assert call(paged.port, "POST", "/tokenize", {"nothing": 1})[0] == 400


def test_a_chunked_request_body_is_read_whole(paged):
    body = json.dumps({"prompt": PROMPT, "max_tokens": 3}).encode()
    half = len(body) // 2
    with socket.create_connection(("127.0.0.1", paged.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                     + b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (half, body[:half], len(body) - half, body[half:]))
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200") and b'"completion_tokens":3' in reply


def test_a_body_of_exactly_the_limit_is_read_and_one_byte_more_is_refused(paged):
    from pagedbench.engines.serving.asgi_server import MAX_BODY_BYTES

    body = json.dumps({"prompt": PROMPT, "max_tokens": 1}).encode()
    exact = body + b" " * (MAX_BODY_BYTES - len(body))          # JSON allows trailing whitespace
    status, _, payload = call(paged.port, "POST", "/v1/completions", raw=exact)
    assert status == 200 and json.loads(payload)["usage"]["completion_tokens"] == 1
    status, _, payload = call(paged.port, "POST", "/v1/completions", raw=exact + b" ")
    assert status == 400 and str(MAX_BODY_BYTES) in json.loads(payload)["error"]["message"]


def failing(server: "Running", message: str = "boom") -> None:
    """The engine's next step raises RuntimeError(message)."""
    def execute(batch):
        raise RuntimeError(message)
    server.backend.executor.execute = execute


def test_an_engine_that_fails_answers_503_with_its_error_and_health_turns_503(loaded, caplog):
    with running(loaded, "paged") as server:
        failing(server)
        status, headers, payload = call(server.port, "POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
        assert status == 503 and headers["server"] == server.service.server_header
        assert json.loads(payload) == {"error": {"message": "RuntimeError: boom", "type": "server_error",
                                                 "param": None, "code": "engine_error"}}
        server.service.wait(10)
        assert server.service.engine_error == "RuntimeError: boom" and not server.service.healthy
        status, _, payload = call(server.port, "GET", "/health")
        assert status == 503 and json.loads(payload)["error"] == {"message": "RuntimeError: boom",
                                                                   "type": "server_error", "param": None,
                                                                   "code": "unavailable"}
    assert "the engine thread stopped" in [r.getMessage() for r in caplog.records]


def test_a_stop_with_a_reason_ends_an_open_stream_with_that_reason(loaded):
    with running(loaded, "paged") as server:
        conn, resp = open_stream(server.port)
        server.service.stop("going away")
        assert not server.service.healthy and not server.service._engine.is_alive()
        evs = events(resp.read())
        conn.close()
    assert evs[-1] == "[DONE]" and evs[-2]["error"]["message"] == "going away"


def test_serve_stops_the_server_when_the_engine_fails(loaded):
    from pagedbench.engines.serving.asgi_server import serve

    backend = build_real(BACKEND, SPEC, ENGINES["paged"], LIMITS, loaded=loaded)
    service = EngineService(backend, SPEC.name, "paged", "cl100k_base", max_seq_len=LIMITS.max_seq_len)

    def execute(batch):
        raise RuntimeError("broken")
    backend.executor.execute = execute
    answers = []

    def on_bound(url: str) -> None:
        port = int(url.rsplit(":", 1)[1])
        threading.Thread(target=lambda: answers.append(call(port, "POST", "/v1/completions",
                                                            {"prompt": PROMPT, "max_tokens": 2}))).start()
    started = time.monotonic()
    serve(build_app(service), service, "127.0.0.1", 0, on_bound=on_bound)
    assert time.monotonic() - started < 10             # the server stopped with the engine, not at a timeout
    assert service.engine_error == "RuntimeError: broken"
    assert not any(t.name == "pagedbench-http" and t.is_alive() for t in threading.enumerate())
    deadline = time.monotonic() + 10
    while not answers and time.monotonic() < deadline:
        time.sleep(0.01)
    assert answers and answers[0][0] == 503


def test_the_openai_package_streams_from_it(paged):
    import openai

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{paged.port}/v1", api_key="unused", max_retries=0)
    chunks = list(client.completions.create(model="pagedbench-paged-tiny", prompt="Hello", max_tokens=4,
                                            stream=True, stream_options={"include_usage": True}))
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == [None, None, None, "length"]
    assert chunks[-1].usage.completion_tokens == 4
    chat = client.chat.completions.create(model="pagedbench-paged-tiny", max_completion_tokens=3,
                                          messages=[{"role": "user", "content": "Hi"}])
    assert chat.usage.completion_tokens == 3 and chat.choices[0].message.role == "assistant"
    assert [m.id for m in client.models.list()] == ["pagedbench-paged-tiny"]


@pytest.mark.slow
def test_200_concurrent_streams_are_all_served(loaded):
    with running(loaded, "paged", budget_mib=8.0) as server:
        results = streams_at_once(server.port, 200, prompt_len=3, max_tokens=4, timeout_s=300)
        assert sorted(results) == list(range(200))
        assert all(len(token_chunks(r)) == 4 and r[-1] == "[DONE]" for r in results.values())


@pytest.mark.slow
def test_1000_requests_in_a_row_leak_no_memory_and_no_thread(loaded):
    with running(loaded, "paged") as server:
        kv = server.backend.scheduler.kv
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)     # keep-alive, as clients do
        threads = None
        for i in range(1000):
            conn.request("POST", "/v1/completions", json.dumps({"prompt": [i % 50000 + 1], "max_tokens": 1}))
            resp = conn.getresponse()
            assert resp.status == 200 and json.loads(resp.read())["usage"]["completion_tokens"] == 1
            if i == 99:
                threads = threading.active_count()
        conn.close()
        wait_idle(server)
        assert kv.usage() == (0, 0) and not server.service._streams
        assert threading.active_count() <= threads


def test_a_prompt_id_outside_the_model_s_vocabulary_gets_a_400_that_names_it(paged):
    assert paged.service.vocab_size == SPEC.vocab_size == 50272
    status, _, payload = call(paged.port, "POST", "/v1/completions", {"prompt": [1, 50272], "max_tokens": 2})
    assert status == 400
    error = json.loads(payload)["error"]
    assert error["code"] == "invalid_token_id" and "prompt token 1 is id 50272" in error["message"]
    status, _, _ = call(paged.port, "POST", "/v1/completions", {"prompt": [1, 50271], "max_tokens": 2})
    assert status == 200


def test_served_model_names_answer_and_any_other_model_is_vllms_404(loaded):
    from starlette.testclient import TestClient

    backend = build_real(BACKEND, SPEC, ENGINES["paged"], LIMITS, loaded=loaded)
    service = EngineService(backend, SPEC.name, "paged", "cl100k_base", max_seq_len=LIMITS.max_seq_len,
                            served_model_names=["opt-test", "alias"])
    with TestClient(build_app(service)) as client:
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["opt-test", "alias"]
        for model in ("opt-test", "alias", None):   # a body without a model gets the first name, as vLLM's
            body = {"prompt": PROMPT, "max_tokens": 2} | ({"model": model} if model else {})
            response = client.post("/v1/completions", json=body)
            assert response.status_code == 200 and response.json()["model"] == "opt-test"
        response = client.post("/v1/chat/completions", json={"model": "gpt-4", "max_tokens": 2,
                                                              "messages": [{"role": "user", "content": "hi"}]})
        assert response.status_code == 404
        assert response.json()["error"] == {"message": "The model `gpt-4` does not exist.", "type": "NotFoundError",
                                            "param": "model", "code": "model_not_found"}
        response = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2, "model": 7})
        assert response.status_code == 400 and response.json()["error"]["param"] == "model"
