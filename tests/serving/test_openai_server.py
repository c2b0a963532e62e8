"""The OpenAI-compatible server over our engines on the real backend (tiny model, cpu), through stdlib http.client:
one chunk per token and the same tokens as the engine's offline run, text and chat prompts, concurrency, every
bad request a 400, a rejected request, a client that hangs up, shutdown mid-stream, and serve.py end to end.

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

from engines.build import build_scheduler
from engines.config import ContiguousEngineConfig, PagedEngineConfig, SchedulerLimits
from engines.run_record import RunRecord
from engines.loop import run_engine
from engines.real.build import RealBackendConfig, build_real, load_real_model
from engines.sequence import Status
from engines.serving.online_loop import Inbox, serve_loop
from engines.serving.openai_server import VERSION, OpenAIServer
from engines.serving.token_text import TokenText
from engines.specs.model import ModelSpec
from paths import CONF, ROOT
from tests.engines.conftest import UnitExecutor, make_request
from workloads.request import Request

SPEC = ModelSpec.from_dict(yaml.safe_load((CONF / "model" / "tiny.yaml").read_text()))
BACKEND = RealBackendConfig(device="cpu", dtype="float32", kernels="torch", kv_budget_mib=4.0)   # 512 slots
LIMITS = SchedulerLimits(max_num_seqs=16, max_num_batched_tokens=256, max_seq_len=128)
ENGINES = {"static": ContiguousEngineConfig("static"), "orca": ContiguousEngineConfig("orca", reservation="oracle"),
           "paged": PagedEngineConfig(swap_space=0.001)}
PROMPT = [1000 + 37 * i for i in range(12)]


@pytest.fixture(scope="module")
def loaded():
    return load_real_model(BACKEND, SPEC)


@contextmanager
def running(loaded, engine: str, budget_mib: float = 4.0, keep_record: bool = False):
    backend = build_real(replace(BACKEND, kv_budget_mib=budget_mib), SPEC, ENGINES[engine], LIMITS, loaded=loaded)
    server = OpenAIServer(backend, SPEC.name, ENGINES[engine].label, "cl100k_base", "127.0.0.1", 0,
                          max_seq_len=LIMITS.max_seq_len, keep_record=keep_record)
    server.start()
    http_thread = threading.Thread(target=server.serve_forever, daemon=True)
    http_thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        http_thread.join(10)
        assert not http_thread.is_alive()


@pytest.fixture(scope="module")
def paged(loaded):
    with running(loaded, "paged") as server:
        yield server


def call(port: int, method: str, path: str, body: dict | None = None, raw: bytes | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data)
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
    assert headers["content-type"] == "text/event-stream"
    return events(payload)


def token_chunks(evs: list) -> list[dict]:
    """The events a client counts as tokens: one each, those whose choices are not empty."""
    return [e for e in evs if isinstance(e, dict) and e.get("choices")]


def offline_tokens(loaded, engine: str, prompt: list[int], max_tokens: int) -> list[int]:
    backend = build_real(BACKEND, SPEC, ENGINES[engine], LIMITS, loaded=loaded)
    record = run_engine([Request(0, 0.0, tuple(prompt), max_tokens)], backend.scheduler, backend.executor,
                        progress=False)
    return record.sequences[0].output_token_ids


def wait_idle(server: OpenAIServer, timeout_s: float = 60.0) -> None:
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
    assert [s.finish_s for s in record.sequences] == [s.finish_s for s in offline.sequences]
    assert calls == {i: o for i, (_, o) in enumerate(lengths[:4])}
    assert sorted(done) == [(0, Status.FINISHED), (1, Status.FINISHED), (2, Status.FINISHED),
                            (3, Status.FINISHED), (4, Status.REJECTED)]


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
    (model,) = json.loads(body)["data"]
    assert model["id"] == "pagedbench-paged-tiny" and model["owned_by"] == "pagedbench"
    assert model["engine"] == "paged" and model["max_model_len"] == LIMITS.max_seq_len
    status, _, body = call(paged.port, "GET", "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    status, _, body = call(paged.port, "GET", "/v1/nothing")
    assert status == 404 and json.loads(body)["error"]["message"]


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_each_engine_streams_one_chunk_per_token_equal_to_its_offline_run(loaded, engine):
    expected = offline_tokens(loaded, engine, PROMPT, 12)
    text = TokenText("cl100k_base")
    with running(loaded, engine, keep_record=True) as server:
        evs = stream(server.port, {"prompt": PROMPT, "max_tokens": 12, "stream_options": {"include_usage": True},
                                   "return_token_ids": True, "ignore_eos": True, "temperature": 0.7,
                                   "model": "whatever", "unknown_field": 1})
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
    evs = stream(paged.port, {"prompt": prompt, "max_tokens": 7, "return_token_ids": True})
    chunks = token_chunks(evs)
    assert len(chunks) == 7 and evs[-1] == "[DONE]" and "usage" not in evs[-2]   # usage only when asked
    status, _, body = call(paged.port, "POST", "/v1/completions",
                           {"prompt": [prompt], "max_tokens": 7, "stream": False, "return_token_ids": True})
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
    evs = stream(paged.port, {"messages": messages, "max_tokens": 5, "stream_options": {"include_usage": True}},
                 "/v1/chat/completions")
    chunks = token_chunks(evs)
    assert len(chunks) == 5 and all(c["object"] == "chat.completion.chunk" for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0]["role"] == "assistant" and all("content" in d for d in deltas)
    assert all("role" not in d for d in deltas[1:]) and chunks[-1]["choices"][0]["finish_reason"] == "length"
    prompt_tokens = len(TokenText("cl100k_base").encode("Be brief.\nHello"))
    assert evs[-2]["usage"]["prompt_tokens"] == prompt_tokens and evs[-2]["usage"]["completion_tokens"] == 5
    status, _, body = call(paged.port, "POST", "/v1/chat/completions",
                           {"messages": messages, "max_completion_tokens": 5})
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
    results: dict[int, list] = {}
    go = threading.Barrier(40)

    def client(i):
        go.wait()
        results[i] = stream(paged.port, {"prompt": [i + 1, i + 2], "max_tokens": 2})
    threads = [threading.Thread(target=client, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(results) == list(range(40))
    assert all(len(token_chunks(r)) == 2 and r[-1] == "[DONE]" for r in results.values())


BAD = {
    "no max_tokens": ({"prompt": PROMPT}, None, "missing_max_tokens"),
    "max_tokens 0": ({"prompt": PROMPT, "max_tokens": 0}, None, "invalid_request"),
    "max_tokens a string": ({"prompt": PROMPT, "max_tokens": "5"}, None, "invalid_request"),
    "empty text prompt": ({"prompt": "", "max_tokens": 5}, None, "empty_prompt"),
    "empty id prompt": ({"prompt": [], "max_tokens": 5}, None, "empty_prompt"),
    "negative token id": ({"prompt": [1, -2], "max_tokens": 5}, None, "invalid_request"),
    "two prompts": ({"prompt": ["a", "b"], "max_tokens": 5}, None, "invalid_request"),
    "n > 1": ({"prompt": PROMPT, "max_tokens": 5, "n": 2}, None, "unsupported_n"),
    "longer than max_seq_len": ({"prompt": [7] * 100, "max_tokens": 29}, None, "context_length_exceeded"),
    "stream not a bool": ({"prompt": PROMPT, "max_tokens": 5, "stream": "yes"}, None, "invalid_request"),
    "no messages": ({"messages": [], "max_tokens": 5}, "chat", "invalid_request"),
    "malformed JSON": (b'{"prompt": [1, 2', None, "invalid_json"),
    "not an object": (b"[1, 2]", None, "invalid_request"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_request_gets_400_with_a_message(paged, case):
    body, chat, code = BAD[case]
    path = "/v1/chat/completions" if chat else "/v1/completions"
    status, headers, payload = call(paged.port, "POST", path, **({"raw": body} if isinstance(body, bytes)
                                                                 else {"body": body}))
    error = json.loads(payload)["error"]
    assert status == 400 and headers["content-type"] == "application/json"
    assert error["message"] and error["type"] == "invalid_request_error" and error["code"] == code


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


def test_a_client_that_hangs_up_mid_stream_leaves_the_server_serving(paged):
    body = json.dumps({"prompt": PROMPT, "max_tokens": 100, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", paged.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")      # headers come with the first token
    assert len(token_chunks(stream(paged.port, {"prompt": PROMPT, "max_tokens": 5}))) == 5
    assert call(paged.port, "GET", "/health")[0] == 200
    wait_idle(paged)                          # the abandoned request runs to its end, unread
    assert call(paged.port, "GET", "/health")[0] == 200


def test_shutdown_mid_stream_ends_the_stream_with_an_error_event(loaded, paged):
    with running(loaded, "paged") as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("POST", "/v1/completions", json.dumps({"prompt": PROMPT[:8], "max_tokens": 120,
                                                            "stream": True}))
        resp = conn.getresponse()
        assert resp.status == 200
        started = time.monotonic()
        server.shutdown()
        assert time.monotonic() - started < 10
        evs = events(resp.read())
        conn.close()
        assert len(token_chunks(evs)) < 120 and evs[-1] == "[DONE]" and "shutting down" in evs[-2]["error"]["message"]
        with pytest.raises(OSError):
            call(server.port, "GET", "/health")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
