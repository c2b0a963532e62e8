"""An OpenAI-compatible HTTP server over one of our engines (stdlib `http.server`, no web framework).

    server = OpenAIServer(backend, "tiny", "paged", "cl100k_base", "127.0.0.1", 0, max_seq_len=2048)
    server.start()            # warm the executor up, start its clock and the engine thread, bind
    server.serve_forever()    # until server.shutdown() from another thread

GET /v1/models, GET /health, POST /v1/completions and /v1/chat/completions.
Our engines generate exactly `max_tokens` (required; EOS is never sampled
as a stop, so `ignore_eos` is implied), so every response ends with
finish_reason "length". Streamed (`"stream": true`), each token is one
server-sent event whose `choices` is non-empty, the last one carrying the
finish_reason; with `stream_options.include_usage` a usage event with
`"choices": []` follows, then `data: [DONE]`. A client counts tokens by
counting events with choices (a token's text may be "": part of a UTF-8
character, or an id the tokenizer cannot decode). `return_token_ids: true`
adds each token's id (`token_ids`) to its choice. A request's `temperature`
is accepted and ignored: sampling is the backend's. Requests run on one
engine thread (`online_loop.serve_loop`); HTTP threads only wait on their
request's queue of events, and a client that goes away leaves its request
to run to the end, unread.
"""
from __future__ import annotations

import importlib.metadata
import json
import logging
import queue
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple

from engines.run_record import RunRecord
from engines.protocols import Backend
from engines.sequence import Sequence, Status
from engines.serving.online_loop import Inbox, serve_loop
from engines.serving.openai_api import BadRequest, ParsedRequest, Reply, error_body, parse_body
from engines.serving.token_text import TokenText

log = logging.getLogger("pagedbench")
MAX_BODY_BYTES = 16 * 2**20
try:
    VERSION = importlib.metadata.version("pagedbench")
except importlib.metadata.PackageNotFoundError:
    VERSION = "0+unknown"


class StreamEvent(NamedTuple):
    """What the engine thread tells a request's HTTP thread: a token, the end, a rejection, an error."""

    kind: str                # "token" | "finished" | "rejected" | "error"
    token_id: int = -1
    message: str = ""


class OpenAIServer:
    """One engine (`backend.scheduler` on `backend.executor`) behind the OpenAI API, on `host:port`
    (port 0: a free one, readable as `.port` after `start()`). `tokenizer`: a `workloads.tokenizer`
    spec for text prompts and for the text of generated tokens; `max_seq_len`: prompt + max_tokens
    above it gets a 400 (None: left to the engine, which rejects it with a 400 too). `keep_record`:
    `.record` collects every sequence and iteration row as run_engine's RunRecord does (it grows for as
    long as the server runs; read it after `shutdown()`)."""

    def __init__(self, backend: Backend, model_name: str, engine_label: str, tokenizer: str = "cl100k_base",
                 host: str = "127.0.0.1", port: int = 8000, max_seq_len: int | None = None,
                 keep_record: bool = False):
        if not 0 <= port <= 65535:
            raise ValueError(f"serve.port must be in [0, 65535], got {port}")
        self.backend, self.engine_label, self.host, self.port = backend, engine_label, host, port
        self.model_id = f"pagedbench-{engine_label}-{model_name}"
        self.max_seq_len = max_seq_len
        self.text = TokenText(tokenizer)
        self.server_header = f"pagedbench/{VERSION} {engine_label}"
        self.created = int(time.time())
        self.inbox = Inbox(backend.executor.now)
        self.engine_error: str | None = None
        self.record = RunRecord(capacity_slots=backend.scheduler.kv.capacity) if keep_record else None
        self._streams: dict[int, queue.SimpleQueue[StreamEvent]] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._engine: threading.Thread | None = None
        self._httpd: _HTTPServer | None = None
        self._serving = self._stopped = self._engine_done = False

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> None:
        """Warm the executor up, start its clock, start the engine thread and bind the socket."""
        self.backend.executor.warmup()
        self.backend.executor.start_clock()
        self._httpd = _HTTPServer((self.host, self.port), _Handler)
        self._httpd.app = self
        self.port = self._httpd.server_address[1]
        self._engine = threading.Thread(target=self._run_engine, name="pagedbench-engine", daemon=True)
        self._engine.start()

    def serve_forever(self) -> None:
        with self._lock:
            if self._stopped or self._httpd is None:
                return
            self._serving = True
        self._httpd.serve_forever(poll_interval=0.1)

    def shutdown(self) -> None:
        """Stop taking requests, stop the engine (requests still running get an error), close the socket."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            serving = self._serving
        if serving:
            self._httpd.shutdown()
        self._stop.set()
        self.inbox.wake()
        if self._engine is not None:
            self._engine.join()
        if self._httpd is not None:
            self._httpd.server_close()

    @property
    def healthy(self) -> bool:
        return self._engine is not None and not self._engine_done and not self._stop.is_set()

    # -- the engine thread and its callbacks ----------------------------------------------------------

    def _run_engine(self) -> None:
        try:
            serve_loop(self.inbox, self.backend.scheduler, self.backend.executor, self._stop,
                       self._on_tokens, self._on_done, record=self.record)
        except Exception as err:   # every waiting request hears of it; /health turns 503
            self.engine_error = f"{type(err).__name__}: {err}"
            log.exception("the engine thread stopped")
        finally:
            message = self.engine_error or "the server is shutting down"
            with self._lock:   # no request is registered after this (`healthy` turns False with it)
                streams, self._streams, self._engine_done = self._streams, {}, True
            for events in streams.values():
                events.put(StreamEvent("error", message=message))

    def _on_tokens(self, seq: Sequence, token_ids: list[int]) -> None:
        events = self._streams.get(seq.id)
        if events is not None:
            for token in token_ids:
                events.put(StreamEvent("token", token))

    def _on_done(self, seq: Sequence) -> None:
        with self._lock:
            events = self._streams.pop(seq.id, None)
        if events is not None:
            rejected = seq.status == Status.REJECTED
            events.put(StreamEvent("rejected" if rejected else "finished", message=seq.rejected_reason or ""))

    # -- what HTTP threads call -----------------------------------------------------------------------

    def submit(self, parsed: ParsedRequest) -> tuple[int, queue.SimpleQueue[StreamEvent]]:
        """Queue a request for the engine; its id and the queue its events arrive on."""
        request = self.inbox.new_request(parsed.prompt_ids, parsed.max_tokens)
        events: queue.SimpleQueue[StreamEvent] = queue.SimpleQueue()
        with self._lock:
            if not self.healthy:
                events.put(StreamEvent("error", message=self.engine_error or "the server is shutting down"))
                return request.id, events
            self._streams[request.id] = events
        self.inbox.put(request)
        return request.id, events

    def discard(self, request_id: int) -> None:
        """The client went away: its request runs on, its tokens are dropped."""
        with self._lock:
            self._streams.pop(request_id, None)

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model_id, "object": "model", "created": self.created,
                                            "owned_by": "pagedbench", "engine": self.engine_label,
                                            "max_model_len": self.max_seq_len}]}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True        # a handler stuck on a dead client never holds the process up
    request_queue_size = 1024    # listen backlog (socketserver's default, 5, resets a burst of arrivals)
    app: OpenAIServer

    def handle_error(self, request, client_address) -> None:
        """A client that went away is routine (debug); anything else is logged with its traceback."""
        if isinstance(sys.exc_info()[1], OSError):
            log.debug("client %s went away", client_address)
        else:
            log.exception("error serving %s", client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def version_string(self) -> str:
        return self.server.app.server_header

    def log_message(self, format: str, *args) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _event(self, body: dict | str) -> None:
        """One server-sent event, as one HTTP chunk."""
        data = f"data: {body if isinstance(body, str) else json.dumps(body)}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def do_GET(self) -> None:
        app = self.server.app
        if self.path == "/v1/models":
            self._json(200, app.models())
        elif self.path == "/health":
            if app.healthy:
                self._json(200, {"status": "ok", "engine": app.engine_label})
            else:
                self._json(503, error_body(app.engine_error or "the server is shutting down", "unavailable",
                                           "server_error"))
        else:
            self._json(404, error_body(f"no route GET {self.path}", "not_found", "not_found_error"))

    def do_POST(self) -> None:
        chat = self.path == "/v1/chat/completions"
        if not chat and self.path != "/v1/completions":
            self._json(404, error_body(f"no route POST {self.path}", "not_found", "not_found_error"))
            return
        app = self.server.app
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 <= length <= MAX_BODY_BYTES:
                self.close_connection = True
                raise BadRequest(f"the body must be 0 to {MAX_BODY_BYTES} bytes, got {length}")
            parsed = parse_body(self.rfile.read(length), chat, app.text, app.max_seq_len)
        except ValueError as err:   # BadRequest, or a Content-Length that is not a number
            self._json(400, error_body(str(err), getattr(err, "code", "invalid_request")))
            return
        request_id, events = app.submit(parsed)
        try:
            self._respond(parsed, events, Reply(parsed, app.model_id))
        except OSError:            # the client went away: drop the rest of its tokens, keep serving
            app.discard(request_id)
            self.close_connection = True

    def _respond(self, parsed: ParsedRequest, events: queue.SimpleQueue[StreamEvent], reply: Reply) -> None:
        """Wait for each token; stream it (headers once the first token came) or gather the whole text."""
        pieces = self.server.app.text.decoder()
        ids, texts = [], []
        while len(ids) < parsed.max_tokens:
            event = events.get()
            if event.kind != "token":
                self._fail(event, streaming=bool(ids) and parsed.stream)
                return
            ids.append(event.token_id)
            last = len(ids) == parsed.max_tokens
            texts.append(pieces.add(event.token_id, final=last))
            if parsed.stream:
                if len(ids) == 1:
                    self._start_stream()
                self._event(reply.chunk(ids[-1], texts[-1], first=len(ids) == 1, last=last))
        if not parsed.stream:
            self._json(200, reply.whole(ids, "".join(texts)))
            return
        if parsed.include_usage:
            self._event(reply.usage_chunk(len(ids)))
        self._end_stream()

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _end_stream(self) -> None:
        self._event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")

    def _fail(self, event: StreamEvent, streaming: bool) -> None:
        """A rejection (400) or an engine error (503) before the stream started; an error event after."""
        if event.kind == "rejected":
            status, body = 400, error_body(f"the engine rejected the request: {event.message}", "request_rejected")
        else:
            status, body = 503, error_body(event.message, "engine_error", "server_error")
        if not streaming:
            self._json(status, body)
            return
        self._event(body)
        self._end_stream()
