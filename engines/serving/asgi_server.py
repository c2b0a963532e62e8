"""An OpenAI-compatible server over one of our engines, on ASGI: a FastAPI app under uvicorn, as vLLM's.

    service = EngineService(backend, "tiny", "paged", tokenizer="cl100k_base", max_seq_len=2048)
    app = build_app(service, api_key=None)
    serve(app, service, host="127.0.0.1", port=8000)     # until SIGTERM / SIGINT

One engine thread (`online_loop.serve_loop`) owns the scheduler and the executor; the event loop only parses,
queues and writes. Each request's tokens reach its response through an asyncio queue that the engine thread
feeds with `loop.call_soon_threadsafe`, once a step for all of the step's events; a response writes every
token that is ready in one event-stream write. `engine_process.EngineProcess` (what serve.py runs by default)
is the same service with its engine in a process of its own. Endpoints, as vLLM's OpenAI server's:

- POST /v1/completions and /v1/chat/completions, streamed (server-sent events, `data: [DONE]` last; with
  `stream_options.include_usage` a usage chunk with `"choices": []` before it; a chat stream opens with a
  chunk that only names the role) or whole. A response ends when the engine says the request finished.
  Our engines generate exactly `max_tokens` (EOS is never a stop: `ignore_eos` is implied), so
  finish_reason is "length"; without `max_tokens` (`max_completion_tokens` for chat) a request gets the
  rest of the context, `max_seq_len` - its prompt, as vLLM gives it. `n` choices (and `best_of` samples)
  run as one group of parallel samples, streamed as chunks per choice `index`; `logprobs` come from the
  model's logits (refused with a 400 on a backend that has none).
- GET /v1/models (each model's `root`, as `vllm bench serve` reads it), /health, /ping, /version;
  POST /tokenize and /detokenize (the server's tokenizer).
- GET /metrics: Prometheus text (`prometheus_client`): running, waiting and swapped requests, KV usage
  and the KV split by category (ours: token states, reservation, internal and external fragmentation,
  free), preemptions, prompt and generation tokens, finished requests, and TTFT, ITL and end-to-end
  histograms, under vLLM's names where vLLM has one (`vllm:num_requests_running`, ...).

Errors are vLLM's JSON (`{"error": {"message", "type", "param", "code"}}`): 400 for a bad body, 401
without one of the API keys (`Authorization: Bearer KEY`; serve.api_key, one or a list, and $VLLM_API_KEY)
when one is set, 404 for no route, 503 while the
server stops or after its engine failed. A client that goes away, before its first token or mid-stream, has
its request aborted: the engine frees its KV blocks before its next step (the host blocks of one swapped
out; static batching runs a running member to its batch's end). On SIGTERM the server takes no new request
(503), ends every open stream with an error event that says why and `[DONE]`, and exits.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
import importlib.metadata
import json
import logging
import sys
import threading
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from pagedbench.engines.protocols import Backend
from pagedbench.engines.run_record import IterationRow, RunRecord
from pagedbench.engines.sequence import Sequence, Status
from pagedbench.engines.serving.auth import KeyCheck, api_keys
from pagedbench.engines.serving.choices import ChoiceOutput, best
from pagedbench.engines.serving.metrics import Metrics, phases_of
from pagedbench.engines.serving.online_loop import Inbox, serve_loop
from pagedbench.engines.serving.openai_api import BadRequest, ParsedRequest, Reply, error_body, parse_body
from pagedbench.engines.serving.token_text import TokenText

log = logging.getLogger("pagedbench")
MAX_BODY_BYTES = 16 * 2**20
STOPPING = "the server is shutting down"
CLIENT_GONE = 499        # the status logged for a request whose client left before its response (nginx's)
# How long a thread that wants the GIL waits before asking its holder to drop it (Python's default: 5 ms). The
# engine's step releases the GIL in every torch op and kernel; when it returns while the HTTP thread runs, it
# waits up to this long. A server sets 0.2 ms (`serve`): on this 2-core CPU, A B A B, the tiny model's server
# served 4-8% more output tok/s than at 5 ms (docs/performance.md).
SWITCH_INTERVAL_S = 0.0002
try:
    VERSION = importlib.metadata.version("pagedbench")
except importlib.metadata.PackageNotFoundError:
    VERSION = "0+unknown"
@dataclass(slots=True)
class Event:
    """What the engine thread tells a request's response: a token (of row `row`, with its `TokenLogprobs` where
    the request computes them), the end, a rejection, an error."""

    kind: str                # "token" | "finished" | "rejected" | "error"
    token_id: int = -1
    message: str = ""
    row: int = 0             # which of the request's parallel samples (its choice before any best_of ranking)
    logprob: object = None   # pagedbench.engines.real.logprobs.TokenLogprobs, or None


class Stream:
    """One request's side of the hand-off: its event loop and queue, and its times for the histograms."""

    __slots__ = ("loop", "queue", "arrival", "last")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        self.arrival = time.perf_counter()
        self.last: float | None = None

    def put(self, event: Event) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, event)


def _deliver(events: list[tuple[Stream, Event]]) -> None:
    """On the event loop: a step's events, each onto its stream's queue, in the order the engine made them."""
    for stream, event in events:
        stream.queue.put_nowait(event)


class EngineService:
    """One engine (`backend.scheduler` on `backend.executor`) on its own thread, taking requests from the event
    loop. `tokenizer`: a `pagedbench.workloads.tokenizer` spec for text prompts and the text of generated tokens;
    `max_seq_len`: the context a request must fit in (and its default max_tokens); `keep_record`: `.record`
    collects every sequence and iteration row as run_engine's RunRecord does (read it after `stop()`)."""

    def __init__(self, backend: Backend, model_name: str, engine_label: str, tokenizer: str = "cl100k_base",
                 max_seq_len: int | None = None, keep_record: bool = False,
                 served_model_names: list[str] | tuple[str, ...] | None = None):
        self._serve_as(model_name, engine_label, tokenizer, max_seq_len, served_model_names)
        self.backend = backend
        self.vocab_size: int | None = getattr(backend.executor, "vocab_size", None)   # the model's, on the real backend
        # Each step's log-probabilities by request id, where the executor computes them (the real one does).
        self._logprobs: dict | None = getattr(backend.executor, "token_logprobs", None)
        self.inbox = Inbox(backend.executor.now)
        self.metrics = Metrics(backend.scheduler.kv.capacity, self.model_id, engine_label,
                               getattr(backend.scheduler.kv, "block_size", None))
        self.record = RunRecord(capacity_slots=backend.scheduler.kv.capacity) if keep_record else None
        self._aborted: list[int] = []
        self._engine: threading.Thread | None = None     # the engine's own thread, when it has one

    def _serve_as(self, model_name: str, engine_label: str, tokenizer: str, max_seq_len: int | None,
                  served_model_names: list[str] | tuple[str, ...] | None) -> None:
        """What the server's side holds, wherever the engine runs: names, tokenizer, streams and their state."""
        self.engine_label = engine_label
        # The names a request may ask for (vLLM's --served-model-name); the first is the one responses carry.
        self.model_names = tuple(served_model_names or (f"pagedbench-{engine_label}-{model_name}",))
        self.model_id = self.model_names[0]
        self.max_seq_len = max_seq_len
        self.text = TokenText(tokenizer)
        self.server_header = f"pagedbench/{VERSION} {engine_label}"
        self.created = int(time.time())
        self.engine_error: str | None = None
        self._streams: dict[int, Stream] = {}
        # A step's events, handed to the event loop at once after the step (`_flush`): one wake-up of the loop a
        # step, not one a token (each a write to its self-pipe and a turn of the loop, which holds the GIL
        # while the engine's next step wants it).
        self._outbox: list[tuple[Stream, Event]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stopping = False
        self._started = self._done = False

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self, thread: bool = True) -> None:
        """Warm the executor up and start its clock; then the engine loop on a thread of its own, or (`thread`
        False) on the caller's, which calls `run()` next. A server runs it on the main thread: torch's
        intra-op threads serve parallel regions started from the main thread well, and from another thread
        badly (on this 2-core CPU the tiny model's decode ran at 0.57x its main-thread speed from a second
        thread; at 0.9x with one torch thread)."""
        self.backend.executor.warmup()
        self.backend.executor.start_clock()
        self._started = True
        if thread:
            self._engine = threading.Thread(target=self.run, name="pagedbench-engine", daemon=True)
            self._engine.start()

    def stop(self, reason: str = STOPPING) -> None:
        """Take no new request, end every open stream with `reason`, stop the engine thread."""
        self._end_streams(reason)
        self._stop.set()
        self.inbox.wake()
        if self._engine is not None and self._engine is not threading.current_thread():
            self._engine.join()

    def request_stop(self) -> None:
        """`stop()` without its lock or its join, safe in a signal handler: no new request is taken, the engine
        loop returns before its next step, and `run()` ends every open stream."""
        self._stopping = True
        self._stop.set()
        self.inbox.wake()

    def wait(self, timeout: float | None = None) -> None:
        """Until the engine loop has ended (an error, or `stop()`)."""
        if self._engine is not None:
            self._engine.join(timeout)

    @property
    def healthy(self) -> bool:
        return self._started and not self._done and not self._stopping and self.engine_error is None

    def unavailable(self) -> str:
        return self.engine_error or STOPPING

    # -- the engine thread --------------------------------------------------------------------------------

    def run(self) -> None:
        """The engine loop, until `stop()` or an error (on the thread `start` chose)."""
        try:
            serve_loop(self.inbox, self.backend.scheduler, self.backend.executor, self._stop, self._on_tokens,
                       self._on_done, record=self.record, aborts=self._take_aborts, on_step=self._on_step,
                       on_flush=self._flush)
        except Exception as err:   # every waiting request hears of it; /health turns 503
            self.engine_error = f"{type(err).__name__}: {err}"
            log.exception("the engine thread stopped")
        finally:
            self._flush()
            self._end_streams(self.unavailable(), done=True)

    def _end_streams(self, reason: str, done: bool = False) -> None:
        """Take no new request (`done`: the engine has ended, /health says so) and end every open stream with
        `reason`. Both services' `stop()` and the ends of their engine loops."""
        with self._lock:
            self._stopping = True
            self._done = self._done or done
            streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream.put(Event("error", message=reason))

    def _take_aborts(self) -> list[int]:
        with self._lock:
            taken, self._aborted = self._aborted, []
        return taken

    def _on_step(self, row: IterationRow | None, generated: int) -> None:
        if row is not None:
            self.metrics.step(row, generated)
        self.metrics.state(self.backend.scheduler)

    def _on_tokens(self, seq: Sequence, token_ids: list[int]) -> None:
        logprobs = self._logprobs.pop(seq.id, None) if self._logprobs else None
        if seq.id in self._streams:         # else aborted, yet run on (static batching runs every member)
            self._tokens(seq.id, token_ids, logprobs, phases_of(seq) if seq.status == Status.FINISHED else None)

    def _tokens(self, request_id: int, token_ids: list[int], logprobs: list | None, phases: tuple | None) -> None:
        """A request's new tokens (one per row), their log-probabilities or None, and `phases_of` its sequence
        when these are its last: its events queued for the next `_flush`, its histograms observed."""
        # A request that produced its last token is counted before its client can see that token, so a
        # scrape after a client's [DONE] counts it (the engine's step has already set the status).
        stream = self._streams.get(request_id)
        if stream is None:
            return             # aborted (counted then), yet run on: static batching runs every member
        if phases is not None:
            self.metrics.finished("length")
            self.metrics.request_phases(*phases)
        now = time.perf_counter()
        if stream.last is None:
            self.metrics.ttft.observe(now - stream.arrival)
        else:
            self.metrics.itl.observe(now - stream.last)
            self.metrics.tpot.observe(now - stream.last)
        if phases is not None:
            self.metrics.e2e.observe(now - stream.arrival)
        stream.last = now
        for row, token in enumerate(token_ids):    # one per row of a group of parallel samples
            self._outbox.append((stream, Event("token", token, row=row, logprob=logprobs[row] if logprobs else None)))

    def _flush(self) -> None:
        """Hand the events of the step (or of the arrivals) just done to their event loops, one call each."""
        if not self._outbox:
            return
        events, self._outbox = self._outbox, []
        loops: dict[asyncio.AbstractEventLoop, list[tuple[Stream, Event]]] = {}
        for stream, event in events:
            loops.setdefault(stream.loop, []).append((stream, event))
        for loop, some in loops.items():
            loop.call_soon_threadsafe(_deliver, some)

    def _forget(self, request_id: int) -> None:
        if self.samples:
            self.backend.executor.request_sampling.pop(request_id, None)
        if self._logprobs is not None:
            self._logprobs.pop(request_id, None)

    def _on_done(self, seq: Sequence) -> None:
        self._forget(seq.id)
        self._finish(seq.id, seq.status == Status.REJECTED, seq.rejected_reason or "")

    def _finish(self, request_id: int, rejected: bool, reason: str) -> None:
        """A request that finished (after its last tokens) or was rejected: its stream's last event."""
        with self._lock:
            stream = self._streams.pop(request_id, None)
        if stream is not None:
            self._outbox.append((stream, Event("rejected" if rejected else "finished", message=reason)))

    # -- what the event loop calls -----------------------------------------------------------------------

    @property
    def samples(self) -> bool:
        """Whether the engine draws each request with its own sampling (the real executor does)."""
        return hasattr(self.backend.executor, "request_sampling")

    def submit(self, parsed: ParsedRequest, prompt_ids: list[int] | None = None) -> tuple[int, Stream]:
        """Queue a request for the engine (`prompt_ids`: one prompt of a list; default the parsed one); its id and
        the stream its events arrive on. Its own sampling goes to the executor first."""
        request = self.inbox.new_request(parsed.prompt_ids if prompt_ids is None else prompt_ids, parsed.max_tokens,
                                         parsed.width)
        if self.samples:
            self.backend.executor.request_sampling[request.id] = parsed.sampling
        stream = Stream(asyncio.get_running_loop())
        with self._lock:
            if not self.healthy:
                stream.queue.put_nowait(Event("error", message=self.unavailable()))
                return request.id, stream
            self._streams[request.id] = stream
        self.inbox.put(request)
        return request.id, stream

    def abort(self, request_id: int, reason: str = "abort") -> None:
        """The client went away (or, `reason` "stop", its output met a stop): the engine drops the request and
        frees its memory before its next step."""
        with self._lock:
            if self._streams.pop(request_id, None) is None:
                return             # already finished
            self._aborted.append(request_id)
        self._forget(request_id)
        self.metrics.finished(reason)
        self.inbox.wake()

    def models(self) -> dict:
        return {"object": "list", "data": [{
            "id": name, "object": "model", "created": self.created, "owned_by": "pagedbench",
            "root": self.model_id, "parent": None, "max_model_len": self.max_seq_len, "permission": [],
            "engine": self.engine_label} for name in self.model_names]}


async def disconnected(request: Request) -> None:
    """Returns once the client has gone away (the body is read already: what the server receives next is
    the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def ready_events(stream: Stream) -> list[Event]:
    """The next event and every other one already queued (the tokens a response writes at once)."""
    events = [await stream.queue.get()]
    while not stream.queue.empty():
        events.append(stream.queue.get_nowait())
    return events


class Guard:
    """The API key on /v1/ and our Server header on every response, as plain ASGI middleware: a streamed body
    passes through untouched (starlette's BaseHTTPMiddleware, which this replaced, ran every chunk of every
    stream through a memory stream and a task of its own, on the thread the engine shares the GIL with)."""

    def __init__(self, app, keys: KeyCheck, server_header: str, refuse):
        self.app, self.keys, self.refuse = app, keys, refuse
        self.server = server_header.encode("latin-1")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.keys.enabled and scope["path"].startswith("/v1/"):
            given = next((v.decode("latin-1") for k, v in scope["headers"] if k.lower() == b"authorization"), None)
            if not self.keys.allows(given):
                return await self.refuse()(scope, receive, send)

        async def send_as_ours(message):
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != b"server"]
                message = {**message, "headers": [*headers, (b"server", self.server)]}
            await send(message)
        await self.app(scope, receive, send_as_ours)


def build_app(service: EngineService, api_key: str | list[str] | tuple[str, ...] | None = None,
              environ: dict | None = None):
    """The FastAPI app over `service` (started and stopped with the app's lifespan). `api_key`: one key or
    several, with $VLLM_API_KEY (read from `environ`, default the process's) one more (engines/serving/auth.py)."""
    keys = KeyCheck(api_keys(api_key, environ))
    @asynccontextmanager
    async def lifespan(app):
        if not service._started:
            service.start()
        yield
        await asyncio.to_thread(service.stop)

    app = FastAPI(title="pagedbench", version=VERSION, lifespan=lifespan, docs_url=None, redoc_url=None)

    def error(status: int, message: str, code: str, kind: str = "invalid_request_error",
              param: str | None = None) -> JSONResponse:
        return JSONResponse(error_body(message, code, kind, param), status_code=status,
                            headers={"Server": service.server_header})

    app.add_middleware(Guard, keys=keys, server_header=service.server_header,
                       refuse=lambda: error(401, "a valid API key is required (Authorization: Bearer KEY)",
                                            "invalid_api_key", "authentication_error"))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 404:
            return error(404, f"no route {request.method} {request.url.path}", "not_found", "not_found_error")
        if exc.status_code == 405:
            return error(405, f"{request.method} is not allowed on {request.url.path}", "method_not_allowed")
        return error(exc.status_code, str(exc.detail), "http_error")

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        return error(400, str(exc), "invalid_request")

    async def body_of(request: Request) -> bytes:
        """The request's body (chunked or not), refused above MAX_BODY_BYTES."""
        data = bytearray()
        async for part in request.stream():
            data += part
            if len(data) > MAX_BODY_BYTES:
                raise BadRequest(f"the body must be at most {MAX_BODY_BYTES} bytes")
        return bytes(data)

    async def generate(request: Request, chat: bool):
        if not service.healthy:
            return error(503, service.unavailable(), "unavailable", "server_error")
        try:
            parsed = parse_body(await body_of(request), chat, service.text, service.max_seq_len, service.vocab_size)
        except BadRequest as err:
            return error(400, str(err), err.code, param=err.param)
        if parsed.model is not None and parsed.model not in service.model_names:   # vLLM's answer, word for word
            return error(404, f"The model `{parsed.model}` does not exist.", "model_not_found", "NotFoundError",
                         param="model")
        if not parsed.sampling.greedy and not service.samples:
            return error(400, "this backend samples greedily only: send temperature 0", "unsupported_parameter",
                         param="temperature")
        if parsed.sampling.logprobs is not None and not service.samples:   # no logits to take them from
            param = "logprobs" if parsed.logprobs is not None else "best_of"
            return error(400, f"{param}: this backend has no model logits, so no log-probabilities (to rank "
                              f"best_of samples by, or to report)", "unsupported_logprobs", param=param)
        reply = Reply(parsed, service.model_id, service.text)
        if len(parsed.batch) > 1:             # a list of prompts: each its own request, answered together
            return await batch(request, parsed, reply)
        request_id, stream = service.submit(parsed)
        # Until its response exists, a client that goes away is only seen by watching for the disconnect.
        if parsed.stream:
            first = await unless_gone(request, request_id, ready_events(stream))
            if first is None:
                return Response(status_code=CLIENT_GONE)
            if first[0].kind != "token":       # a rejection or an error before any token is a status
                return failure(first[0])
            return StreamingResponse(sse(parsed, reply, stream, request_id, first), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        response = await unless_gone(request, request_id, whole(parsed, reply, stream, request_id))
        return Response(status_code=CLIENT_GONE) if response is None else response

    async def unless_gone(request: Request, request_ids: int | list[int], work):
        """`work`'s result; None when the client went away first (its requests, one id or several, are then
        aborted)."""
        task, gone = asyncio.ensure_future(work), asyncio.ensure_future(disconnected(request))
        try:
            await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not task.done():
                task.cancel()
                for request_id in ([request_ids] if isinstance(request_ids, int) else request_ids):
                    service.abort(request_id)
        return task.result() if not task.cancelled() else None

    def failure(event: Event) -> JSONResponse:
        if event.kind == "rejected":
            return error(400, f"the engine rejected the request: {event.message}", "request_rejected")
        return error(503, event.message, "engine_error", "server_error")

    def echo(parsed: ParsedRequest, prompt_ids: list[int]) -> str:
        return service.text.decode(prompt_ids) if parsed.echo else ""

    def outputs(parsed: ParsedRequest) -> list[ChoiceOutput]:
        """A `ChoiceOutput` per row of the request (its width: max(n, best_of); n when it streams)."""
        return [ChoiceOutput(service.text.decoder(), parsed.max_tokens, parsed.stop, parsed.stop_token_ids)
                for _ in range(parsed.width)]

    async def collect(parsed: ParsedRequest, stream: Stream, request_id: int):
        """A request's tokens to their end, a `ChoiceOutput` per row, or the event that failed it."""
        outs = outputs(parsed)
        while True:
            for event in await ready_events(stream):
                if event.kind == "finished":
                    for out in outs:
                        out.flush()
                    return outs
                if event.kind != "token":
                    return event
                out = outs[event.row]
                if out.stopped:            # a row past its stop: the others run on
                    continue
                out.add(event.token_id, event.logprob)
                if out.stopped and all(o.stopped for o in outs):
                    service.abort(request_id, "stop")
                    return outs

    def choices_of(parsed: ParsedRequest, reply: Reply, outs: list[ChoiceOutput], prompt_ids: list[int],
                   first: int) -> list[dict]:
        """The n choices of one prompt's samples (the best n of best_of), indexed from `first`."""
        prefix = echo(parsed, prompt_ids)
        return [reply.choice(o.ids, prefix + o.text, first + i, o.reason, reply.logprobs(o.logprobs))
                for i, o in enumerate(best(outs, parsed.n))]

    async def whole(parsed: ParsedRequest, reply: Reply, stream: Stream, request_id: int) -> JSONResponse:
        outs = await collect(parsed, stream, request_id)
        if isinstance(outs, Event):
            return failure(outs)
        choices = choices_of(parsed, reply, outs, parsed.prompt_ids, 0)
        return JSONResponse(reply.whole_of(choices, len(parsed.prompt_ids), completion_tokens(parsed, outs)))

    def completion_tokens(parsed: ParsedRequest, outs: list[ChoiceOutput]) -> int:
        """The usage's completion tokens: those of the choices returned (of best_of samples, the n kept)."""
        return sum(len(o.ids) for o in best(outs, parsed.n))

    async def batch(request: Request, parsed: ParsedRequest, reply: Reply) -> Response:
        """Every prompt of a list as its own request, answered in one response (prompt p's choice c is p * n + c)."""
        submitted = [service.submit(parsed, ids) for ids in parsed.batch]

        async def all_of():
            return await asyncio.gather(*(collect(parsed, stream, rid) for rid, stream in submitted))
        results = await unless_gone(request, [rid for rid, _ in submitted], all_of())
        if results is None:
            return Response(status_code=CLIENT_GONE)
        failed = next((r for r in results if isinstance(r, Event)), None)
        if failed is not None:
            for rid, _ in submitted:
                service.abort(rid)
            return failure(failed)
        choices = [c for p, (outs, prompt) in enumerate(zip(results, parsed.batch))
                   for c in choices_of(parsed, reply, outs, prompt, p * parsed.n)]
        return JSONResponse(reply.whole_of(choices, sum(map(len, parsed.batch)),
                                           sum(completion_tokens(parsed, outs) for outs in results)))

    async def sse(parsed: ParsedRequest, reply: Reply, stream: Stream, request_id: int,
                  first: list[Event]) -> AsyncIterator[str]:
        """The stream of one prompt's n choices (best_of > n does not stream): chunks per choice index, each
        choice's finish, the usage of them all, [DONE]."""
        outs = outputs(parsed)                 # as many as n: best_of > n does not stream
        offsets = [0] * parsed.n               # each choice's text_offset (completions' logprobs)
        events, done, prompt = first, False, echo(parsed, parsed.prompt_ids)

        def data(body: dict) -> str:
            return f"data: {json.dumps(body)}\n\n"

        def usage_and_done() -> str:
            usage = data(reply.usage_chunk(sum(len(o.ids) for o in outs))) if parsed.include_usage else ""
            return usage + "data: [DONE]\n\n"
        try:
            while True:
                out = []
                for event in events:
                    if event.kind == "token":
                        i, choice = event.row, outs[event.row]
                        if choice.stopped:           # past its stop: the other choices run on
                            continue
                        if choice.seen == 0 and parsed.chat:
                            out.append(data(reply.role_chunk(i)))
                        had = len(choice.logprobs)
                        text = choice.add(event.token_id, event.logprob)
                        if choice.seen == 1:
                            text = prompt + text
                        logprobs = reply.logprobs(choice.logprobs[had:], offsets[i])
                        if logprobs is not None and not parsed.chat and logprobs["tokens"]:
                            offsets[i] = logprobs["text_offset"][-1] + len(logprobs["tokens"][-1])
                        if choice.stopped:           # this choice ends here: finish "stop"
                            out.append(data(reply.stop_chunk(text, choice.reason, i, logprobs)))
                            if all(o.stopped for o in outs):     # every choice stopped: the engine frees it
                                service.abort(request_id, "stop")
                                out.append(usage_and_done())
                                done = True
                                break
                            continue
                        out.append(data(reply.chunk(event.token_id, text, choice.seen == parsed.max_tokens, i,
                                                    logprobs)))
                    elif event.kind == "finished":     # the end (after the last token's chunks)
                        for i, choice in enumerate(outs):
                            if not choice.stopped and choice.seen < parsed.max_tokens:   # ended short
                                out.append(data(reply.closing_chunk(choice.flush(), i)))
                        out.append(usage_and_done())
                        done = True
                        break
                    else:                              # an error or a rejection
                        body = error_body(event.message or STOPPING, "engine_error", "server_error")
                        out.append(f"data: {json.dumps(body)}\n\ndata: [DONE]\n\n")
                        done = True
                        break
                if out:
                    yield "".join(out)
                if done:
                    return
                events = await ready_events(stream)
        finally:
            if not done:          # the client went away (the task was cancelled): free the request's memory
                service.abort(request_id)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await generate(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await generate(request, chat=True)

    @app.get("/v1/models")
    async def models():
        return service.models()

    @app.get("/health")
    async def health():
        if service.healthy:
            return Response(status_code=200)
        return error(503, service.unavailable(), "unavailable", "server_error")

    @app.api_route("/ping", methods=["GET", "POST"])
    async def ping():
        return await health()

    @app.get("/version")
    async def version():
        return {"version": VERSION}

    @app.post("/tokenize")
    async def tokenize(request: Request):
        try:
            body = json.loads(await body_of(request) or b"{}")
            if not isinstance(body, dict):
                raise BadRequest("the body must be a JSON object")
            if "messages" in body:
                ids = parse_body(json.dumps({**body, "max_tokens": 1}).encode(), True, service.text, None).prompt_ids
            elif isinstance(body.get("prompt"), str):
                ids = service.text.encode(body["prompt"])
            else:
                raise BadRequest("tokenize needs a prompt (a string) or messages")
        except ValueError as err:
            return error(400, str(err), getattr(err, "code", "invalid_request"))
        return {"count": len(ids), "max_model_len": service.max_seq_len, "tokens": ids, "token_strs": None}

    @app.post("/detokenize")
    async def detokenize(request: Request):
        try:
            body = json.loads(await body_of(request) or b"{}")
            tokens = body.get("tokens") if isinstance(body, dict) else None
            if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                       for t in tokens):
                raise BadRequest("detokenize needs tokens: a list of token ids (ints >= 0)")
        except ValueError as err:
            return error(400, str(err), getattr(err, "code", "invalid_request"))
        return {"prompt": service.text.decode(tokens)}

    @app.get("/metrics")
    async def metrics():
        data, kind = service.metrics.text()
        return Response(data, media_type=kind)

    return app


def uvicorn_config(app):
    """uvicorn's settings for the app: our Server header only, no access log, ten seconds to drain on exit."""
    import uvicorn

    return uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=10, access_log=False,
                          server_header=False)


def serve(app, service: EngineService, host: str, port: int, on_bound=None) -> None:
    """Run `app` under uvicorn on host:port, on a thread of its own, and `service`'s engine loop on this (the
    main) thread, until SIGTERM or SIGINT; those end every open stream with a reason (`EngineService.stop`),
    then stop the server. An engine that stops on an error stops the server too. `on_bound(url)` once the
    socket is bound. `service` is started here (`start(thread=False)`)."""
    import signal
    import socket

    import uvicorn

    sock = socket.create_server((host, port), backlog=2048)
    bound = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(app))
    web = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="pagedbench-http", daemon=True)

    def on_signal(sig, frame) -> None:
        # Flags only: the handler runs on the engine's thread, maybe inside a callback that holds the service's
        # lock. The loop sees the stop before its next step and run()'s `finally` ends the open streams.
        service.request_stop()
        server.should_exit = True

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        service.start(thread=False)
        web.start()
        while not server.started:
            if not web.is_alive():
                raise OSError(f"the server did not start on {host}:{bound}")
            time.sleep(0.01)
        if on_bound is not None:
            on_bound(f"http://{host}:{bound}")
        service.run()
    finally:
        server.should_exit = True
        if web.is_alive():
            web.join(15)
        sys.setswitchinterval(interval)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
