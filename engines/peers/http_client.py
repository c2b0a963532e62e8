"""Replay a trace against any OpenAI-compatible server (vLLM, `transformers serve`, ours) and time every token.

`server_info` probes the server first (GET /v1/models: is it up, what does it
serve, what does its `Server` header say) and raises `EndpointUnreachable`,
one line, when it cannot be reached at all. `replay_http` then releases each
request at its trace arrival on the replay's clock from one asyncio event
loop (httpx's AsyncClient: keep-alive connections, at most
`max_concurrency` requests in flight, the rest waiting client-side),
streams the answer and stamps each chunk that carries output. A request's
`sent_s` is when it left the client: its wait for a free slot under
`max_concurrency` (sent_s - arrival) is the client's queue, reported apart
from the server's latency (vllm_result.json's `queue_times`). Warm-up
requests (`warmup_requests`) go first and are not counted. Whatever goes
wrong with one request (refused, an error status, a read timeout, a stream
cut short, an error event) becomes that request's `Measured.error`, never
retried; the replay itself never hangs and never raises for it.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
import http.client
import json
import logging
import os
import socket
import ssl
import time
from urllib.parse import urlsplit

from tqdm import tqdm

from pagedbench.engines.peers.http_config import ENDPOINTS, HttpBackendConfig
from pagedbench.engines.peers.sse import DONE, aread_data, one_line, parse_chunk
from pagedbench.engines.peers.timeline import Measured
from pagedbench.engines.real.vocab import first_outside
from pagedbench.workloads.request import Request
from pagedbench.workloads.tokenizer import BpeTokenizer, HfTokenizer, load_tokenizer

__all__ = ["EndpointUnreachable", "HttpBackendConfig", "replay_http", "server_info"]

HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream", "Accept-Encoding": "identity",
           "User-Agent": "pagedbench"}      # identity: a stream's chunks are timed as they arrive, not inflated
KEEPALIVE_EXPIRY_S = 3.0    # below uvicorn's 5 s keep-alive, so an idle connection is dropped here first
log = logging.getLogger("pagedbench")
logging.getLogger("httpx").setLevel(logging.WARNING)   # not one INFO line per request
API_KEY_ENV = "OPENAI_API_KEY"   # the key sent when backend.api_key is null, as OpenAI's clients and vLLM's bench
ERROR_BODY_BYTES = 4096     # read of a non-2xx body, of which the error keeps the first 200 characters


class EndpointUnreachable(Exception):
    """The server cannot be reached at all (or names no model to use); the message is one line."""


def server_info(cfg: HttpBackendConfig) -> dict:
    """What the server says about itself: {"url", "server" (its Server header), "models" (ids), "model" (the one
    the replay uses: cfg.model, else the first listed)}. Raises EndpointUnreachable when it cannot be reached,
    or when no model is configured and none can be listed."""
    phase, conn = "connect", None
    try:
        conn = _connect(cfg)
        phase = "headers"
        conn.request("GET", cfg.base_path + "/v1/models",
                     headers={k: v for k, v in request_headers(cfg).items() if k != "Content-Type"})
        response = conn.getresponse()
        status, server, body = response.status, response.getheader("Server"), response.read()
    except (OSError, http.client.HTTPException) as err:
        hint = "is the url right?" if isinstance(err, socket.gaierror) else "is the server running?"
        raise EndpointUnreachable(f"cannot reach {cfg.url} ({_describe(err, phase, cfg)}): {hint}") from None
    finally:
        if conn is not None:
            conn.close()
    models, problem = [], None
    if 200 <= status < 300:
        try:
            models = [m["id"] for m in json.loads(body)["data"]]
        except (ValueError, KeyError, TypeError):
            problem = f"an unreadable model list: {one_line(body, 80)}"
    else:
        problem = f"HTTP {status}: {one_line(body)}"
    model = cfg.model or (models[0] if models else None)
    if model is None:
        raise EndpointUnreachable(f"GET {cfg.url}/v1/models gave {problem or 'no model'}: set backend.model")
    return {"url": cfg.url, "server": server, "models": models, "model": model, "models_error": problem}


def replay_http(requests: list[Request], cfg: HttpBackendConfig, progress: bool | None = None,
                model: str | None = None) -> tuple[list[Measured], float]:
    """Send every request at its arrival, stream its answer, and return what was measured (in id order) with
    the replay's wall seconds. `model`: the id to ask for (a caller that probed the server already passes
    `server_info`'s); None: `cfg.model`, else the server is asked for it first (EndpointUnreachable if it
    cannot be reached). Prompts are decoded and bodies built before the clock starts."""
    for r in requests:
        if r.width > 1:
            raise ValueError(f"request {r.id}: n={r.n} beam_width={r.beam_width}: parallel sampling and beam "
                             f"search are not supported over HTTP")
    model = model or cfg.model or server_info(cfg)["model"]
    bodies = _bodies(requests, cfg, model)
    return asyncio.run(_replay(requests, bodies, cfg, progress))


async def _replay(requests: list[Request], bodies: list[bytes], cfg: HttpBackendConfig,
                  progress: bool | None) -> tuple[list[Measured], float]:
    import httpx

    parts = urlsplit(cfg.url)
    url = f"{parts.scheme}://{parts.netloc}{cfg.base_path}{ENDPOINTS[cfg.endpoint]}"
    measured = [Measured(r) for r in requests]
    order = sorted(range(len(requests)), key=lambda i: (requests[i].arrival_s, requests[i].id))
    gate = asyncio.Semaphore(cfg.max_concurrency) if cfg.max_concurrency else None
    limits = httpx.Limits(max_connections=cfg.max_concurrency, max_keepalive_connections=cfg.max_concurrency or 256,
                          keepalive_expiry=KEEPALIVE_EXPIRY_S)
    timeout = httpx.Timeout(cfg.read_timeout_s, connect=cfg.connect_timeout_s, pool=None)
    bar = tqdm(total=len(requests), unit="req", desc="requests", leave=False,
               disable=None if progress is None else not progress)
    async with httpx.AsyncClient(headers=request_headers(cfg), limits=limits, timeout=timeout) as client:
        for n in range(cfg.warmup_requests if requests else 0):    # not counted: a throwaway Measured each
            warm = Measured(requests[order[0]])
            await _send(client, warm, bodies[order[0]], url, cfg, lambda: 0.0)
            if warm.error is not None:
                log.warning("warm-up request %d of %d failed: %s", n + 1, cfg.warmup_requests, warm.error)
        start = time.perf_counter()

        def clock() -> float:
            """The replay's clock: seconds since the replay started."""
            return time.perf_counter() - start

        async def one(i: int) -> None:
            if gate is None:
                await sent(i)
            else:
                async with gate:
                    await sent(i)

        async def sent(i: int) -> None:
            measured[i].sent_s = clock()
            await _send(client, measured[i], bodies[i], url, cfg, clock)
            bar.update(1)

        tasks = []
        try:
            for i in order:
                delay = requests[i].arrival_s - clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(i)))
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            bar.close()
        wall_s = clock()
    return sorted(measured, key=lambda m: m.request.id), wall_s


def request_headers(cfg: HttpBackendConfig, environ: dict | None = None) -> dict[str, str]:
    """Every request's headers: ours, `cfg.headers`, and the API key as a bearer token (`cfg.api_key`, else
    $OPENAI_API_KEY; read here, so the key never lands in the run's saved config)."""
    headers = {**HEADERS, **cfg.headers}
    key = cfg.api_key or (os.environ if environ is None else environ).get(API_KEY_ENV)
    if key and not any(k.lower() == "authorization" for k in cfg.headers):
        headers["Authorization"] = f"Bearer {key}"
    return headers


async def _send(client, m: Measured, body: bytes, url: str, cfg: HttpBackendConfig,
                clock: Callable[[], float]) -> None:
    """Send one request and read its stream into `m`; every failure ends as `m.error`, nothing is raised."""
    phase = "send"
    try:
        async with client.stream("POST", url, content=body) as response:
            if not 200 <= response.status_code < 300:
                data = b""
                async for part in response.aiter_bytes():
                    data += part
                    if len(data) >= ERROR_BODY_BYTES:
                        break
                m.error = f"HTTP {response.status_code}: {one_line(data[:ERROR_BODY_BYTES])}"
                return
            phase = "stream"
            done, finished, usage, events = False, False, None, 0
            try:
                async for data in aread_data(response.aiter_bytes()):
                    if done:            # read to the body's end: a connection is kept alive only when drained
                        continue
                    now = clock()
                    events += 1
                    if data.strip() == DONE:
                        done = True
                        continue
                    chunk = parse_chunk(data)
                    if chunk.error is not None:
                        m.error = f"error event: {chunk.error}"
                        return
                    if chunk.usage is not None:
                        usage = chunk.usage
                    finished = finished or chunk.finished
                    if chunk.carries_output:
                        m.token_times_s.append(now)
            except Exception:
                if not done:            # after [DONE] the request is complete: a failed drain only costs the
                    raise               # connection
            # A stream that ends whole (its last chunk read, not cut) after a finish_reason is complete too:
            # transformers serve sends no [DONE]. One cut short raised above, one that ends whole with no
            # finish_reason is an error.
            if not done and not finished:
                kind = response.headers.get("Content-Type", "")
                m.error = (f"the server did not stream (Content-Type {kind})" if events == 0 and
                           "event-stream" not in kind
                           else f"stream ended without [DONE] after {len(m.token_times_s)} tokens (server died?)")
                return
        usage = usage or {}
        completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
        m.output_tokens = completion if isinstance(completion, int) else len(m.token_times_s)
        m.prompt_tokens = prompt if isinstance(prompt, int) else None
    except Exception as err:  # noqa: BLE001 - one request's failure is recorded, never raised
        m.error = _describe_async(err, phase, cfg, len(m.token_times_s))


def _describe_async(err: Exception, phase: str, cfg: HttpBackendConfig, tokens: int) -> str:
    """One short line for what went wrong with httpx in `phase` (send: before the headers, stream: after)."""
    import httpx

    after = f" after {tokens} tokens" if phase == "stream" else ""
    causes, cause = [], err.__cause__ or err.__context__
    while cause is not None and len(causes) < 8:       # httpx -> httpcore -> OSError -> the socket's error
        causes.append(cause)
        cause = cause.__cause__ or cause.__context__
    if isinstance(err, httpx.ConnectTimeout):
        return f"connect timeout after {cfg.connect_timeout_s:g} s"
    if isinstance(err, httpx.ConnectError):
        text = str(err)
        if any(isinstance(c, ConnectionRefusedError) for c in causes) or "refused" in text.lower():
            return "connection refused"
        if any(isinstance(c, socket.gaierror) for c in causes) or "name or service not known" in text.lower():
            return f"cannot resolve host {urlsplit(cfg.url).hostname}"
        return one_line(f"cannot connect: {text}")
    if isinstance(err, (httpx.ReadTimeout, httpx.WriteTimeout)):
        return f"read timeout: nothing for {cfg.read_timeout_s:g} s{after}"
    if isinstance(err, httpx.RemoteProtocolError):
        if phase == "stream":
            return f"connection closed mid-stream{after} (server died?)"
        return "the server closed the connection without a response"
    if isinstance(err, httpx.ReadError):
        return f"connection reset by the server{after}"
    if isinstance(err, ValueError) and str(err).startswith("bad event"):
        return one_line(str(err))
    return one_line(f"{type(err).__name__}: {err}{after}")


def _connect(cfg: HttpBackendConfig) -> http.client.HTTPConnection:
    """An open connection to the server: `connect_timeout_s` to connect, then `read_timeout_s` per read."""
    parts = urlsplit(cfg.url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname, parts.port, timeout=cfg.connect_timeout_s)
    try:
        conn.connect()
    except BaseException:
        conn.close()
        raise
    conn.sock.settimeout(cfg.read_timeout_s)
    return conn


def _describe(err: Exception, phase: str, cfg: HttpBackendConfig, tokens: int = 0) -> str:
    """One short line for what went wrong in `phase` (connect, send, headers, stream)."""
    after = f" after {tokens} tokens" if phase == "stream" else ""
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, socket.gaierror):
        return f"cannot resolve host {urlsplit(cfg.url).hostname}"
    if isinstance(err, TimeoutError):
        if phase == "connect":
            return f"connect timeout after {cfg.connect_timeout_s:g} s"
        return f"read timeout: nothing for {cfg.read_timeout_s:g} s{after}"
    if isinstance(err, http.client.IncompleteRead):
        return f"connection closed mid-stream{after} (server died?)"
    if isinstance(err, http.client.RemoteDisconnected):
        return "the server closed the connection without a response"
    if isinstance(err, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        return f"connection reset by the server{after}"
    if isinstance(err, ssl.SSLError):
        return one_line(f"TLS error: {err}")
    if isinstance(err, ValueError) and str(err).startswith("bad event"):
        return one_line(str(err))
    return one_line(f"{type(err).__name__}: {err}{after}")


def _bodies(requests: list[Request], cfg: HttpBackendConfig, model: str) -> list[bytes]:
    """Each request's JSON body: the prompt (token ids, or text), its output length, streaming with usage.
    Token prompts are checked against `cfg.vocab_size` when it is set; otherwise the server judges them (ours
    and vLLM's answer an id outside the vocabulary with a 400, which the run reports as a failed request)."""
    decode = _decoder(cfg.tokenizer) if cfg.sends_text else None
    if decode is None and cfg.vocab_size is not None:      # token prompts: refused here, before any is sent
        for r in requests:
            bad = first_outside(r.prompt_token_ids, cfg.vocab_size)
            if bad is not None:
                raise ValueError(f"request {r.id}: prompt token {bad} is id {r.prompt_token_ids[bad]}, outside the "
                                 f"served model's vocabulary of {cfg.vocab_size} ids (backend.vocab_size); tokenize "
                                 f"the trace with the model's tokenizer, or send text (backend.prompt=text)")
    bodies = []
    for r in requests:
        body: dict = {"model": model}
        if cfg.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": decode(list(r.prompt_token_ids))}]
        else:
            body["prompt"] = decode(list(r.prompt_token_ids)) if decode else list(r.prompt_token_ids)
        # As vLLM's client: chat asks for max_completion_tokens (max_tokens is deprecated there).
        body["max_completion_tokens" if cfg.endpoint == "chat" else "max_tokens"] = r.output_len
        body.update(temperature=cfg.temperature, stream=True, stream_options={"include_usage": True})
        if cfg.ignore_eos:
            body["ignore_eos"] = True
        body.update(cfg.extra_body)
        bodies.append(json.dumps(body).encode())
    return bodies


def _decoder(spec: str) -> Callable[[list[int]], str]:
    """Token ids back to text with the trace's tokenizer. `pagedbench.workloads.tokenizer` only encodes, so this reaches
    the object each tokenizer wraps; special tokens (an HF tokenizer's BOS) are dropped, as the server adds its
    own when it re-tokenizes the text."""
    tokenizer = load_tokenizer(spec)
    if isinstance(tokenizer, BpeTokenizer):
        return tokenizer._load().decode
    if isinstance(tokenizer, HfTokenizer):
        hf = tokenizer._tokenizer
        return lambda ids: hf.decode(ids, skip_special_tokens=True)
    raise ValueError(f"tokenizer {spec!r} cannot decode token ids to text")
