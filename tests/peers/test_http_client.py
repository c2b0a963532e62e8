"""The HTTP peer against a fake OpenAI-compatible server on 127.0.0.1: arrival-time replay, token timing,
usage counts, bounded concurrency, every failure mode (one request fails, the rest finish), request bodies."""
from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import json
import socket
import threading
import time

import pytest

from pagedbench.engines.peers.http_client import EndpointUnreachable, replay_http, server_info
from pagedbench.engines.peers.http_config import HttpBackendConfig
from pagedbench.engines.peers.sse import parse_chunk, read_data
from pagedbench.engines.peers.timeline import to_sequence
from pagedbench.engines.sequence import Status
from pagedbench.workloads.request import Request
from pagedbench.workloads.tokenizer import load_tokenizer

# What the fake server does with a completions request, chosen by the prompt's first token id.
NORMAL, NO_USAGE, MERGED, CUT, STALL, ERROR_EVENT, NO_DONE, JSON_ONLY, CUT_AFTER_DONE = 1, 2, 3, 4, 5, 6, 7, 8, 9
LONG_422 = "field required: " + "x" * 500


class FakeServer(ThreadingHTTPServer):
    """Streams one token per chunk (after `token_delay_s`), then usage and [DONE]; records what it got."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.token_delay_s = 0.0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.bodies: list[dict] = []
        self.paths: list[str] = []
        self.received_s: dict[int, float] = {}   # a request's first prompt token after the mode -> perf_counter
        self.headers: list[dict] = []            # each POST's headers
        self.ports: list[int] = []               # each POST's client port: one per connection
        self.active = self.max_active = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request, client_address) -> None:
        pass   # clients that time out and hang up are part of the tests


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeOpenAI/1.0"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "fake-model"}, {"id": "other"}]})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        s: FakeServer = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body.get("prompt", "")
        with s.lock:
            s.bodies.append(body)
            s.paths.append(self.path)
            s.headers.append({k.lower(): v for k, v in self.headers.items()})
            s.ports.append(self.client_address[1])
            if isinstance(prompt, list) and len(prompt) > 1:
                s.received_s[prompt[1]] = time.perf_counter()
            s.active += 1
            s.max_active = max(s.max_active, s.active)
        self._left = False
        try:
            mode = prompt[0] if isinstance(prompt, list) else NORMAL
            if mode in (500, 422):
                self._leave()
                self._json(mode, {"error": {"message": LONG_422 if mode == 422 else "internal"}})
            elif mode == JSON_ONLY:
                self._leave()
                self._json(200, {"choices": [{"text": "whole answer"}]})
            else:
                self._stream(body, mode, chat=self.path.endswith("/chat/completions"))
        finally:
            self._leave()

    def _leave(self) -> None:
        """Count this request out before its last byte goes, so the client cannot start the next one first."""
        if not self._left:
            self._left = True
            with self.server.lock:
                self.server.active -= 1

    def _stream(self, body: dict, mode: int, chat: bool) -> None:
        s: FakeServer = self.server
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if chat:
            self._event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        n = body["max_completion_tokens"] if chat else body["max_tokens"]
        for i in range(n // 2 if mode == MERGED else n):
            time.sleep(s.token_delay_s)
            if mode == CUT and i == 2:
                self.close_connection = True
                return   # the socket closes without the chunked body's end: the server died
            if mode == STALL and i == 1:
                s.stop.wait(5.0)
                return
            if mode == ERROR_EVENT and i == 1:
                self._event({"error": {"message": "boom", "code": 500}})
                break
            piece = "tt" if mode == MERGED else "t"
            self._event({"choices": [{"index": 0, "delta": {"content": piece}} if chat else
                                     {"index": 0, "text": piece}]})
        prompt = body.get("prompt") or body["messages"][0]["content"]
        if body.get("stream_options", {}).get("include_usage") and mode not in (NO_USAGE, ERROR_EVENT):
            self._event({"choices": [], "usage": {"prompt_tokens": len(prompt), "completion_tokens": n}})
        self._leave()
        if mode != NO_DONE:
            self._write(b"data: [DONE]\n\n")
        if mode == CUT_AFTER_DONE:
            self.close_connection = True
            return   # [DONE] sent, then the connection closes before the chunked body's end
        self.wfile.write(b"0\r\n\r\n")

    def _event(self, obj: dict) -> None:
        self._write(f"data: {json.dumps(obj)}\n\n".encode())

    def _write(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def _json(self, status: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    s = FakeServer()
    thread = threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield s
    finally:
        s.stop.set()
        s.shutdown()
        s.server_close()
        thread.join(timeout=5)


def req(i: int, arrival: float = 0.0, mode: int = NORMAL, out: int = 4, n: int = 1) -> Request:
    """Prompt (mode, i, 10, 10): the server picks its behaviour by the first token and records arrival by the second."""
    return Request(id=i, arrival_s=arrival, prompt_token_ids=(mode, i, 10, 10), output_len=out, n=n)


def config(url: str, **kw) -> HttpBackendConfig:
    kw = {"model": "m", "connect_timeout_s": 1.0, "read_timeout_s": 2.0, **kw}
    return HttpBackendConfig(url=url, **kw)


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_server_info_reports_header_and_models(server):
    info = server_info(config(server.url, model=None))
    assert info["server"].startswith("FakeOpenAI/1.0")
    assert info["models"] == ["fake-model", "other"] and info["model"] == "fake-model"
    assert server_info(config(server.url, model="mine"))["model"] == "mine"


def test_replay_sends_at_arrival_and_times_every_token(server):
    server.token_delay_s = 0.005
    arrivals, outs = [0.2, 0.0, 0.3, 0.1], [3, 5, 4, 6]
    requests = [req(i, a, out=o) for i, (a, o) in enumerate(zip(arrivals, outs))]
    before = time.perf_counter()   # at or before the replay's clock starts
    measured, wall_s = replay_http(requests, config(server.url, model=None), progress=False)
    assert [m.request.id for m in measured] == [0, 1, 2, 3] and wall_s >= 0.3
    for m in measured:
        assert m.error is None
        assert m.request.arrival_s <= m.sent_s < m.request.arrival_s + 0.2
        assert len(m.token_times_s) == m.output_tokens == m.request.output_len
        assert m.sent_s < m.token_times_s[0] and m.token_times_s == sorted(set(m.token_times_s))
        assert m.prompt_tokens == 4
    # The server got none before its arrival, and each about its arrival after the first one. The upper bound is
    # read from the first request's receipt, not from `before`: between the two the replay decodes the prompts and
    # sends its warm-up request, which on a loaded machine took over 0.3 s.
    first = server.received_s[arrivals.index(0.0)]
    for i, arrival in enumerate(arrivals):
        assert arrival <= server.received_s[i] - before
        assert server.received_s[i] - first < arrival + 0.5
    assert {b["model"] for b in server.bodies} == {"fake-model"}


def test_output_tokens_come_from_usage_else_from_chunks(server):
    measured, _ = replay_http([req(0, mode=MERGED, out=6), req(1, mode=NO_USAGE, out=5)],
                              config(server.url), progress=False)
    merged, no_usage = measured
    assert len(merged.token_times_s) == 3 and merged.output_tokens == 6 and merged.prompt_tokens == 4
    assert len(no_usage.token_times_s) == no_usage.output_tokens == 5 and no_usage.prompt_tokens is None


@pytest.mark.parametrize("max_concurrency", [2, None])
def test_concurrency_bound_holds(server, max_concurrency):
    server.token_delay_s = 0.01
    measured, _ = replay_http([req(i, out=5) for i in range(6)], config(server.url, max_concurrency=max_concurrency),
                              progress=False)
    assert all(m.error is None for m in measured)
    if max_concurrency is None:
        assert server.max_active > 2
    else:
        assert server.max_active == 2
        assert sorted(m.sent_s for m in measured)[-1] >= 2 * 0.04   # the last pair waited for two rounds


@pytest.mark.parametrize("mode, expected", [
    (500, "HTTP 500: "), (422, "HTTP 422: "), (CUT, "connection closed mid-stream after 2 tokens"),
    (STALL, "read timeout: nothing for 0.3 s after 1 tokens"), (ERROR_EVENT, "error event: 500: boom"),
    (NO_DONE, "stream ended without [DONE] after 4 tokens"), (JSON_ONLY, "did not stream"),
])
def test_a_failure_fails_its_request_only(server, mode, expected):
    requests = [req(0), req(1, mode=mode), req(2, arrival=0.05)]
    start = time.perf_counter()
    measured, _ = replay_http(requests, config(server.url, read_timeout_s=0.3), progress=False)
    assert time.perf_counter() - start < 2.0
    ok0, failed, ok2 = measured
    assert ok0.error is None and ok2.error is None and ok2.output_tokens == 4
    assert expected in failed.error and "\n" not in failed.error
    if mode == 422:
        assert "field required: xxx" in failed.error and len(failed.error) <= len("HTTP 422: ") + 200


def test_a_stream_cut_after_done_is_complete(server):
    """What breaks while the body is drained after [DONE] costs the connection, not the finished request."""
    measured, _ = replay_http([req(0, mode=CUT_AFTER_DONE), req(1, arrival=0.05)], config(server.url),
                              progress=False)
    assert [(m.error, m.output_tokens, len(m.token_times_s)) for m in measured] == [(None, 4, 4), (None, 4, 4)]


def test_unreachable_server(server):
    url = f"http://127.0.0.1:{unused_port()}"
    with pytest.raises(EndpointUnreachable, match=r"^cannot reach http://127\.0\.0\.1:\d+ \(connection refused\): "
                                                  r"is the server running\?$"):
        server_info(config(url))
    start = time.perf_counter()
    measured, _ = replay_http([req(i) for i in range(5)], config(url), progress=False)
    assert time.perf_counter() - start < 2.0
    assert [m.error for m in measured] == ["connection refused"] * 5
    with pytest.raises(EndpointUnreachable, match="connection refused"):
        replay_http([req(0)], config(url, model=None), progress=False)   # no model to ask for


def test_completions_body_with_token_prompt(server):
    cfg = config(server.url, extra_body={"top_p": 0.5}, temperature=0.7)
    replay_http([req(0, out=3)], cfg, progress=False)
    replay_http([req(1, out=2)], config(server.url, ignore_eos=False), progress=False)
    with_eos, without = server.bodies
    assert server.paths == ["/v1/completions"] * 2
    assert with_eos == {"model": "m", "prompt": [NORMAL, 0, 10, 10], "max_tokens": 3, "temperature": 0.7,
                        "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True, "top_p": 0.5}
    assert "ignore_eos" not in without and without["max_tokens"] == 2


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_text_prompt_and_chat_body(server, endpoint):
    text = "hello world, how are you today?"
    ids = tuple(load_tokenizer("cl100k_base").encode(text))
    cfg = config(server.url, endpoint=endpoint, prompt="text", tokenizer="cl100k_base")
    measured, _ = replay_http([Request(id=0, arrival_s=0.0, prompt_token_ids=ids, output_len=3)], cfg,
                              progress=False)
    (body,) = server.bodies
    assert measured[0].error is None and len(measured[0].token_times_s) == 3   # chat's role chunk carries nothing
    if endpoint == "chat":
        assert server.paths == ["/v1/chat/completions"] and "prompt" not in body
        assert body["messages"] == [{"role": "user", "content": text}]
    else:
        assert server.paths == ["/v1/completions"] and body["prompt"] == text
    asked = "max_completion_tokens" if endpoint == "chat" else "max_tokens"     # as vLLM's client asks
    assert body[asked] == 3 and body["ignore_eos"] is True and set(body) & {"max_tokens",
                                                                            "max_completion_tokens"} == {asked}


def test_measured_requests_become_sequences(server):
    measured, _ = replay_http([req(0, out=3), req(1, mode=500)], config(server.url), progress=False)
    done, failed = (to_sequence(m) for m in measured)
    assert done.status is Status.FINISHED and done.generated == 3 and done.finish_s == done.token_times_s[-1]
    assert done.admitted_s == measured[0].sent_s
    assert failed.status is Status.FAILED and failed.rejected_reason.startswith("HTTP 500: ")


def test_width_above_one_is_refused():
    with pytest.raises(ValueError, match="request 7: n=2 .* not supported over HTTP"):
        replay_http([req(7, n=2)], config("http://127.0.0.1:1"), progress=False)


@pytest.mark.parametrize("change, message", [
    ({"url": "127.0.0.1:8000"}, "must start with http:// or https://"),
    ({"url": "ftp://host"}, "must start with http:// or https://"),
    ({"url": "http://"}, "has no host"),
    ({"url": "http://host:99999"}, "invalid port"),
    ({"url": "http://host:8000/v1"}, "without /v1"),
    ({"endpoint": "embeddings"}, "backend.endpoint must be one of"),
    ({"model": ""}, "backend.model must be None or a non-empty string"),
    ({"prompt": "ids"}, "backend.prompt must be one of"),
    ({"prompt": "text"}, "backend.tokenizer is needed"),
    ({"endpoint": "chat"}, "backend.tokenizer is needed"),
    ({"ignore_eos": "yes"}, "backend.ignore_eos must be true or false"),
    ({"extra_body": {"stream": False}}, "must not set ['stream']"),
    ({"extra_body": {"seed": object()}}, "plain JSON values"),
    ({"max_concurrency": 0}, "backend.max_concurrency must be None or an integer >= 1"),
    ({"connect_timeout_s": 0}, "backend.connect_timeout_s must be a number > 0"),
    ({"read_timeout_s": -1}, "backend.read_timeout_s must be a number > 0"),
    ({"temperature": -0.5}, "backend.temperature must be a number >= 0"),
    ({"colour": "red"}, "unknown backend key(s) ['colour']"),
])
def test_config_validation(change, message):
    with pytest.raises(ValueError) as err:
        HttpBackendConfig.from_dict({"url": "http://127.0.0.1:8000", **change})
    assert message in str(err.value)


def test_config_defaults_and_required_url():
    cfg = HttpBackendConfig.from_dict({"url": "https://example.com:8443/"})
    assert (cfg.name, cfg.url, cfg.endpoint, cfg.prompt, cfg.ignore_eos, cfg.max_concurrency) == \
        ("http", "https://example.com:8443", "completions", "tokens", True, None)
    with pytest.raises(ValueError, match=r"missing required key\(s\) \['url'\]"):
        HttpBackendConfig.from_dict({})


def test_sse_events_and_chunks():
    lines = [b": keep-alive\n", b"event: message\n", b"data: {\"a\":\n", b"data: 1}\r\n", b"\n", b"data:[DONE]"]
    assert list(read_data(lines)) == ['{"a":\n1}', "[DONE]"]
    assert parse_chunk('{"choices": [{"text": ""}], "usage": {"completion_tokens": 2}}').usage == \
        {"completion_tokens": 2}
    assert parse_chunk('{"choices": [{"text": "", "finish_reason": null}]}').carries_output   # held-back text
    assert not parse_chunk('{"choices": [{"text": "", "finish_reason": "stop"}]}').carries_output
    assert not parse_chunk('{"choices": [{"delta": {"role": "assistant", "content": ""}}]}').carries_output
    assert parse_chunk('{"choices": [{"delta": {"content": ""}, "finish_reason": null}]}').carries_output
    assert not parse_chunk('{"choices": [{"delta": {}, "finish_reason": "length"}]}').carries_output
    assert not parse_chunk('{"choices": [], "usage": {"completion_tokens": 3}}').carries_output
    assert parse_chunk('{"choices": [{"text": "", "token_ids": [5]}]}').carries_output
    assert parse_chunk('{"object": "error", "message": "too long"}').error == "too long"
    assert parse_chunk('{"error": "plain"}').error == "plain"
    with pytest.raises(ValueError, match="bad event"):
        parse_chunk("{not json")


def test_an_api_key_and_headers_go_with_every_request_and_warm_ups_are_not_counted(server):
    cfg = config(server.url, api_key="k3y", headers={"X-Trace": "t1"}, warmup_requests=2)
    measured, _ = replay_http([req(i, arrival=0.01 * i) for i in range(3)], cfg, progress=False)
    assert len(server.bodies) == 5 and [m.error for m in measured] == [None] * 3     # 2 warm-ups, uncounted
    assert all(h["authorization"] == "Bearer k3y" and h["x-trace"] == "t1" for h in server.headers)
    assert all(m.sent_s >= m.request.arrival_s for m in measured)       # the clock starts after the warm-ups


def test_one_event_loop_on_kept_alive_connections(server):
    """No thread per request, and a connection serves request after request (keep-alive)."""
    before = threading.active_count()
    seen = []
    watcher = threading.Thread(target=lambda: [seen.append(threading.active_count()) or time.sleep(0.005)
                                                for _ in range(100)], daemon=True)
    watcher.start()
    measured, _ = replay_http([req(i, arrival=0.02 * i, out=2) for i in range(20)], config(server.url, max_concurrency=1),
                              progress=False)
    watcher.join()
    assert all(m.error is None for m in measured)
    assert len(set(server.ports)) == 1                  # one connection, kept alive, for all 20 requests
    assert max(seen) <= before + 1 + 2                  # the watcher, the server's handler: no pool of senders


@pytest.mark.parametrize("change, message", [
    ({"api_key": ""}, "backend.api_key must be None or a non-empty string"),
    ({"headers": {"X": 1}}, "backend.headers must map header names to strings"),
    ({"warmup_requests": -1}, "backend.warmup_requests must be an integer >= 0"),
])
def test_client_settings_validation(change, message):
    with pytest.raises(ValueError) as err:
        HttpBackendConfig.from_dict({"url": "http://127.0.0.1:8000", **change})
    assert message in str(err.value)


def test_without_a_configured_key_the_client_sends_openai_api_key_and_a_header_wins():
    from pagedbench.engines.peers.http_client import request_headers

    cfg = HttpBackendConfig(url="http://127.0.0.1:1")
    assert request_headers(cfg, {"OPENAI_API_KEY": "env-key"})["Authorization"] == "Bearer env-key"
    assert "Authorization" not in request_headers(cfg, {})
    assert request_headers(HttpBackendConfig(url="http://127.0.0.1:1", api_key="cfg"),
                           {"OPENAI_API_KEY": "env-key"})["Authorization"] == "Bearer cfg"
    given = HttpBackendConfig(url="http://127.0.0.1:1", headers={"authorization": "Basic x"})
    assert "Authorization" not in request_headers(given, {"OPENAI_API_KEY": "env-key"})
