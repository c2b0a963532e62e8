"""Our engine in a process of its own, the server's event loop in another: vLLM's split of its API server and
its engine core.

    build = functools.partial(build_real, backend_config, model_spec, engine_config, limits)   # must pickle
    service = EngineProcess(build, "tiny", "paged", tokenizer="cl100k_base", max_seq_len=2048)
    app = build_app(service)          # as for an EngineService
    serve(app, service, "127.0.0.1", 8000)

In one process (`EngineService`) the engine's Python and the event loop's take turns on one interpreter lock,
so every chunk the server writes delays the engine's next step. `EngineProcess` builds the backend in a child
process (spawned; `build()` runs there, so it must pickle: a module-level builder and its dataclasses), which
warms the executor up, runs `online_loop.serve_loop` on its main thread and sends everything a step produced
(its tokens, log-probabilities, ends and rejections, and its metrics' counts and scheduler state) as one
message on a pipe. The server's process keeps what a client sees: the streams, the tokenizer, the latency
histograms and /metrics; requests, aborts and the stop go the other way on a second pipe, read by a thread of
the child's. A reader thread of the server's process turns each message into the same events and metrics an
`EngineService` makes on its engine thread (its `_tokens` and `_done`), so the app and `serve` take either
service. The child ignores SIGINT and SIGTERM (the server's process stops it), and stops when its pipe closes,
so it never outlives the server. A service in a child keeps no run record (`keep_record` is the in-process
service's).
"""
from __future__ import annotations

from collections.abc import Callable
import itertools
import logging
import multiprocessing
from multiprocessing.connection import Connection
import signal
import threading
import time
import traceback

from pagedbench.engines.protocols import Backend
from pagedbench.engines.sequence import Sequence, Status
from pagedbench.engines.serving.asgi_server import STOPPING, EngineService, Stream, Event
from pagedbench.engines.serving.metrics import Metrics, phases_of, state_of, step_of
from pagedbench.engines.serving.online_loop import Inbox, serve_loop
from pagedbench.workloads.request import Request

log = logging.getLogger("pagedbench")
READY_TIMEOUT_S = 600.0       # building and warming a model up in the child, at most
STOP_TIMEOUT_S = 30.0         # the child's last step and exit after a stop, before it is terminated
# The kinds of message. The child's: READY (once), STEP (after each step and each batch of arrivals), ERROR (the
# engine failed; the child exits). The server's: ADD, ABORT, STOP.
READY, STEP, ERROR, ADD, ABORT, STOP = "ready", "step", "error", "add", "abort", "stop"
TOKENS, DONE = 0, 1           # a STEP's events: a request's new tokens, its end
COUNTS, STATE = 0, 1          # a STEP's metric updates: `Metrics.step_counts`, `Metrics.set_state`


class EngineFailed(RuntimeError):
    """The engine's process could not start (its builder or warm-up raised, or it exited)."""


class EngineProcess(EngineService):
    """An `EngineService` whose engine runs in a child process (the module's docstring). `build()`, called in
    the child, returns the `Backend`; `ready_timeout_s`: how long `start` waits for it to be built and warmed
    up. A ValueError of the builder's is raised again by `start` as a ValueError (a bad setting), any other
    failure as `EngineFailed`."""

    def __init__(self, build: Callable[[], Backend], model_name: str, engine_label: str,
                 tokenizer: str = "cl100k_base", max_seq_len: int | None = None,
                 served_model_names: list[str] | tuple[str, ...] | None = None,
                 ready_timeout_s: float = READY_TIMEOUT_S):
        self._serve_as(model_name, engine_label, tokenizer, max_seq_len, served_model_names)
        self.build, self.ready_timeout_s = build, ready_timeout_s
        self.backend = None
        self.record = None
        self.vocab_size: int | None = None
        self.metrics: Metrics | None = None       # made once the child says its KV capacity
        self.described: list[str] = []            # the backend's and the KV manager's descriptions, from the child
        self._samples = False
        self._ids = itertools.count()
        self._process: multiprocessing.process.BaseProcess | None = None
        self._requests: Connection | None = None  # ours to send on
        self._replies: Connection | None = None   # ours to receive on
        self._send_lock = threading.Lock()
        self._reader: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self, thread: bool = True) -> None:
        """Spawn the child, wait until its engine is built and warmed up, and start reading its messages.
        `thread` is the in-process service's choice; here the engine always runs in the child."""
        ctx = multiprocessing.get_context("spawn")
        replies, child_replies = ctx.Pipe(duplex=False)
        child_requests, requests = ctx.Pipe(duplex=False)
        self._process = ctx.Process(target=engine_main, args=(self.build, child_requests, child_replies),
                                    name="pagedbench-engine", daemon=True)
        self._process.start()
        child_requests.close()
        child_replies.close()
        self._requests, self._replies = requests, replies
        deadline = time.monotonic() + self.ready_timeout_s
        try:
            while not replies.poll(0.1):
                if not self._process.is_alive():
                    raise EngineFailed(f"the engine process exited with status {self._process.exitcode} "
                                       f"before it was ready")
                if time.monotonic() > deadline:
                    raise EngineFailed(f"the engine process was not ready within {self.ready_timeout_s:g} s")
            message = replies.recv()
        except EOFError:
            message = (ERROR, "EngineFailed", "the engine process exited before it was ready")
        except BaseException:
            self._end_process()
            raise
        if message[0] != READY:
            self._end_process()
            _, kind, text = message
            if kind == "ValueError":
                raise ValueError(text)
            raise EngineFailed(f"the engine process failed to start: {kind}: {text}")
        info = message[1]
        self.vocab_size, self._samples, self.described = info["vocab_size"], info["samples"], info["described"]
        self.metrics = Metrics(info["capacity"], self.model_id, self.engine_label, info["block_size"])
        self._started = True
        self._reader = threading.Thread(target=self._read, name="pagedbench-engine-reader", daemon=True)
        self._reader.start()

    def stop(self, reason: str = STOPPING) -> None:
        """Take no new request, end every open stream with `reason`, stop the child and wait for it."""
        self._end_streams(reason)
        self._stop.set()
        self._end_process()

    def request_stop(self) -> None:
        """Flags only (safe in a signal handler): no new request is taken, and `run()` stops the child."""
        self._stopping = True
        self._stop.set()

    def wait(self, timeout: float | None = None) -> None:
        if self._reader is not None:
            self._reader.join(timeout)

    def run(self) -> None:
        """Until `request_stop()` or `stop()`, or the child's end (an error); then stop the child (the streams
        still open end with the reason, as the in-process service's `run`)."""
        while not self._stop.wait(0.1):
            if self._reader is None or not self._reader.is_alive():
                break
        self._end_process()

    def _end_process(self) -> None:
        if self._process is None:
            return
        self._send((STOP,))
        self._process.join(STOP_TIMEOUT_S)
        if self._process.is_alive():
            log.warning("the engine process did not stop within %g s: terminated", STOP_TIMEOUT_S)
            self._process.terminate()
            self._process.join(5)
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(5)

    def _send(self, message: tuple) -> None:
        with self._send_lock:
            try:
                self._requests.send(message)
            except (OSError, ValueError):      # the child is gone: its reader says why
                pass

    # -- the reader thread ---------------------------------------------------------------------------------

    def _read(self) -> None:
        """Each of the child's messages as the in-process engine thread's callbacks, until the child ends."""
        try:
            while True:
                try:
                    message = self._replies.recv()
                except (EOFError, OSError):
                    if not self._stop.is_set() and self.engine_error is None:
                        self._process.join(1)
                        self.engine_error = f"the engine process exited (status {self._process.exitcode})"
                        log.error("%s", self.engine_error)
                    return
                if message[0] == STEP:
                    self._apply(message[1], message[2])
                    self._flush()
                elif message[0] == ERROR:
                    self.engine_error = f"{message[1]}: {message[2]}"
                    log.error("the engine stopped: %s", self.engine_error)
        finally:
            self._flush()
            self._end_streams(self.unavailable(), done=True)

    def _apply(self, updates: list[tuple], events: list[tuple]) -> None:
        for kind, values in updates:
            if kind == COUNTS:
                self.metrics.step_counts(*values)
            else:
                self.metrics.set_state(*values)
        for event in events:
            if event[0] == TOKENS:
                self._tokens(*event[1:])
            else:
                self._finish(*event[1:])

    # -- what the event loop calls -----------------------------------------------------------------------

    @property
    def samples(self) -> bool:
        return self._samples

    def submit(self, parsed, prompt_ids: list[int] | None = None) -> tuple[int, Stream]:
        import asyncio

        stream = Stream(asyncio.get_running_loop())
        with self._lock:
            request_id = next(self._ids)
            if not self.healthy:
                stream.queue.put_nowait(Event("error", message=self.unavailable()))
                return request_id, stream
            self._streams[request_id] = stream
        prompt = parsed.prompt_ids if prompt_ids is None else prompt_ids
        self._send((ADD, request_id, list(prompt), parsed.max_tokens, parsed.width,
                    parsed.sampling if self._samples else None))
        return request_id, stream

    def abort(self, request_id: int, reason: str = "abort") -> None:
        with self._lock:
            if self._streams.pop(request_id, None) is None:
                return             # already finished
        self._send((ABORT, request_id))
        self.metrics.finished(reason)


# -- the child ---------------------------------------------------------------------------------------------


class _Core:
    """The child's side: the engine loop on its main thread, the server's messages read on another."""

    def __init__(self, backend: Backend, replies: Connection):
        self.backend, self.executor, self.replies = backend, backend.executor, replies
        self.inbox = Inbox(self.executor.now)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.aborted: list[int] = []
        self.events: list[tuple] = []
        self.updates: list[tuple] = []
        self.logprobs: dict | None = getattr(self.executor, "token_logprobs", None)
        self.sampling: dict | None = getattr(self.executor, "request_sampling", None)

    def take(self, requests: Connection) -> None:
        """The reader thread: requests into the inbox, aborts for the next step, until STOP or the pipe closes."""
        try:
            while True:
                message = requests.recv()
                if message[0] == ADD:
                    _, request_id, prompt, max_tokens, width, sampling = message
                    if sampling is not None and self.sampling is not None:
                        self.sampling[request_id] = sampling
                    self.inbox.put(Request(request_id, self.executor.now(), tuple(prompt), max_tokens, n=width))
                elif message[0] == ABORT:
                    with self.lock:
                        self.aborted.append(message[1])
                    self.inbox.wake()
                else:
                    break
        except (EOFError, OSError):
            pass
        self.stop.set()
        self.inbox.wake()

    def run(self) -> None:
        serve_loop(self.inbox, self.backend.scheduler, self.executor, self.stop, self.on_tokens, self.on_done,
                   aborts=self.take_aborts, on_step=self.on_step, on_flush=self.flush)

    def forget(self, request_id: int) -> None:
        if self.sampling is not None:
            self.sampling.pop(request_id, None)
        if self.logprobs is not None:
            self.logprobs.pop(request_id, None)

    def take_aborts(self) -> list[int]:
        with self.lock:
            taken, self.aborted = self.aborted, []
        for request_id in taken:
            self.forget(request_id)
        return taken

    def on_step(self, row, generated: int) -> None:
        if row is not None:
            self.updates.append((COUNTS, step_of(row, generated)))
        self.updates.append((STATE, state_of(self.backend.scheduler)))

    def on_tokens(self, seq: Sequence, token_ids: list[int]) -> None:
        logprobs = self.logprobs.pop(seq.id, None) if self.logprobs else None
        finished = seq.status == Status.FINISHED
        self.events.append((TOKENS, seq.id, token_ids, logprobs, phases_of(seq) if finished else None))

    def on_done(self, seq: Sequence) -> None:
        self.forget(seq.id)
        self.events.append((DONE, seq.id, seq.status == Status.REJECTED, seq.rejected_reason or ""))

    def flush(self) -> None:
        if self.events or self.updates:
            message = (STEP, self.updates, self.events)
            self.updates, self.events = [], []
            self.replies.send(message)


def engine_main(build: Callable[[], Backend], requests: Connection, replies: Connection) -> None:
    """The child process: build and warm up the backend, say READY (or ERROR), serve until STOP."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)       # the server's process stops us (or closes our pipe)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        backend = build()
        backend.executor.warmup()
        backend.executor.start_clock()
        kv = backend.scheduler.kv
        info = {"vocab_size": getattr(backend.executor, "vocab_size", None),
                "samples": hasattr(backend.executor, "request_sampling"),
                "capacity": kv.capacity, "block_size": getattr(kv, "block_size", None),
                "described": [backend.describe(), kv.describe()]}
    except Exception as err:
        replies.send((ERROR, type(err).__name__, str(err)))
        return
    replies.send((READY, info))
    core = _Core(backend, replies)
    threading.Thread(target=core.take, args=(requests,), name="pagedbench-requests", daemon=True).start()
    try:
        core.run()
    except Exception as err:
        traceback.print_exc()
        try:
            core.flush()
            replies.send((ERROR, type(err).__name__, str(err)))
        except OSError:
            pass
