"""The server with its engine in a process of its own (`EngineProcess`, serve.py's default): the same tokens as the
engine's offline run and as the in-process service, sampling and log-probabilities carried across, aborts and
metrics, a stop mid-stream, a builder or an engine that fails, and a child that never outlives its server.

Each server here spawns a child that imports torch and builds the tiny model (about 7 s each on a 2-core CPU); the
tests that need a server of their own beyond the paged one are marked slow.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from functools import partial
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from pagedbench.engines.real.build import build_real, load_real_model
from pagedbench.engines.serving.asgi_server import EngineService
from pagedbench.engines.serving.engine_process import EngineFailed, EngineProcess
from pagedbench.paths import ROOT
from tests.serving.test_asgi_server import (BACKEND, ENGINES, LIMITS, PROMPT, SPEC, Running, call, events,
                                            finished_count, offline_tokens, open_stream, stream, token_chunks)


def tiny_backend(engine: str, budget_mib: float = 4.0, fail: str | None = None):
    """The tests' real backend (built in the child); `fail`: every step raises RuntimeError(fail)."""
    backend = build_real(replace(BACKEND, kv_budget_mib=budget_mib), SPEC, ENGINES[engine], LIMITS)
    if fail is not None:
        def execute(batch):
            raise RuntimeError(fail)
        backend.executor.execute = execute
    return backend


def bad_setting():
    raise ValueError("backend.kv_budget_mib is too small for one request")


def broken_build():
    raise KeyError("no such model")


@contextmanager
def in_process(engine: str = "paged", **kwargs):
    service = EngineProcess(partial(tiny_backend, engine, **kwargs), SPEC.name, ENGINES[engine].label,
                            "cl100k_base", max_seq_len=LIMITS.max_seq_len, ready_timeout_s=120)
    server = Running(service)
    try:
        yield server
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def paged():
    with in_process("paged") as server:
        yield server


def metric(server: Running, name: str, **labels) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = call(server.port, "GET", "/metrics")[2].decode()
    return next(s.value for family in text_string_to_metric_families(text) for s in family.samples
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize("engine", [pytest.param("static", marks=pytest.mark.slow),
                                    pytest.param("orca", marks=pytest.mark.slow), "paged"])
def test_each_engine_in_its_own_process_streams_its_offline_tokens(engine):
    expected = offline_tokens(load_real_model(BACKEND, SPEC), engine, PROMPT, 12)
    with in_process(engine) as server:
        assert server.service.healthy and server.service._process.is_alive()
        evs = stream(server.port, {"prompt": PROMPT, "max_tokens": 12, "return_token_ids": True, "temperature": 0})
        process = server.service._process
    chunks = token_chunks(evs)
    assert [c["choices"][0]["token_ids"] for c in chunks] == [[t] for t in expected]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 11 + ["length"]
    assert not process.is_alive() and process.exitcode == 0     # stopped with its server, not killed


def test_samples_and_logprobs_are_the_in_process_service_s(paged):
    """A seeded request for two samples with log-probabilities: the same choices from the engine's process as
    from the in-process service (the sampling goes with the request, the log-probabilities come back)."""
    body = {"prompt": PROMPT, "max_tokens": 5, "n": 2, "seed": 7, "temperature": 0.9, "logprobs": 2}
    ours = json.loads(call(paged.port, "POST", "/v1/completions", body)[2])
    reference = Running(EngineService(tiny_backend("paged"), SPEC.name, "paged", "cl100k_base",
                                      max_seq_len=LIMITS.max_seq_len))
    try:
        theirs = json.loads(call(reference.port, "POST", "/v1/completions", body)[2])
    finally:
        reference.shutdown()
    assert len(ours["choices"]) == 2 and ours["choices"][0]["logprobs"]["top_logprobs"]
    assert ours["choices"] == theirs["choices"] and ours["usage"] == theirs["usage"]


def test_concurrent_streams_and_metrics_count_what_was_served(paged):
    from concurrent.futures import ThreadPoolExecutor

    before = metric(paged, "vllm:generation_tokens_total")
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda n: stream(paged.port, {"prompt": PROMPT[: 4 + n], "max_tokens": n}),
                                range(1, 9)))
    assert [len(token_chunks(evs)) for evs in results] == list(range(1, 9))
    assert all(evs[-1] == "[DONE]" for evs in results)
    assert metric(paged, "vllm:generation_tokens_total") - before == sum(range(1, 9))
    assert metric(paged, "vllm:num_requests_running") == 0 and metric(paged, "vllm:kv_cache_usage_perc") == 0
    assert metric(paged, "pagedbench:kv_cache_slots", category="free") > 0


def test_a_client_that_hangs_up_is_aborted_in_the_engine_s_process(paged):
    aborted = finished_count(call(paged.port, "GET", "/metrics")[2].decode(), "abort") or 0.0
    body = json.dumps({"prompt": PROMPT, "max_tokens": 110, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", paged.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        wait_for(lambda: metric(paged, "vllm:kv_cache_usage_perc") > 0)      # its blocks held in the child
    wait_for(lambda: metric(paged, "vllm:num_requests_running") == 0 and metric(paged, "vllm:kv_cache_usage_perc") == 0)
    assert finished_count(call(paged.port, "GET", "/metrics")[2].decode(), "abort") == aborted + 1
    assert len(token_chunks(stream(paged.port, {"prompt": PROMPT, "max_tokens": 3}))) == 3


def test_a_stop_ends_an_open_stream_with_its_reason_and_the_child():
    with in_process("paged") as server:
        conn, resp = open_stream(server.port)
        server.service.stop("going away")
        assert not server.service.healthy and not server.service._process.is_alive()
        evs = events(resp.read())
        conn.close()
        assert call(server.port, "GET", "/health")[0] == 503
    assert evs[-1] == "[DONE]" and evs[-2]["error"]["message"] == "going away"


@pytest.mark.slow
def test_a_builder_s_value_error_is_a_value_error_and_any_other_failure_says_what_failed():
    with pytest.raises(ValueError, match="too small for one request"):
        EngineProcess(bad_setting, SPEC.name, "paged", ready_timeout_s=60).start()
    service = EngineProcess(broken_build, SPEC.name, "paged", ready_timeout_s=60)
    with pytest.raises(EngineFailed, match="failed to start: KeyError: 'no such model'"):
        service.start()
    assert not service._process.is_alive() and not service.healthy


def test_an_engine_that_fails_answers_503_with_its_error():
    with in_process("paged", fail="boom") as server:
        status, _, payload = call(server.port, "POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
        assert status == 503 and json.loads(payload)["error"]["message"] == "RuntimeError: boom"
        server.service.wait(10)
        assert server.service.engine_error == "RuntimeError: boom" and not server.service.healthy
        assert call(server.port, "GET", "/health")[0] == 503


CHILD_OF_A_KILLED_SERVER = """
import functools, sys
from tests.serving.test_engine_process import tiny_backend
from pagedbench.engines.serving.engine_process import EngineProcess
service = EngineProcess(functools.partial(tiny_backend, "paged"), "tiny", "paged", ready_timeout_s=120)
service.start()
print(service._process.pid, flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
def test_the_engine_s_process_ends_when_its_server_is_killed():
    server = subprocess.Popen([sys.executable, "-c", CHILD_OF_A_KILLED_SERVER], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        child = int(server.stdout.readline())
        os.kill(child, 0)                           # alive while its server is
        server.send_signal(signal.SIGKILL)
        server.wait(10)

        def gone() -> bool:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                return True
            try:                                    # a zombie of a dead parent is reaped by init; read its state
                with open(f"/proc/{child}/stat") as f:
                    return f.read().split()[2] == "Z"
            except FileNotFoundError:
                return True
        wait_for(gone, timeout_s=20)
    finally:
        if server.poll() is None:
            server.kill()
