"""The online engine loop: requests arrive from other threads while the engine runs.

`pagedbench.engines.loop.run_engine` serves a fixed, arrival-sorted trace. A server
does not know its requests in advance: HTTP threads put them in an `Inbox`
(stamped with the executor's clock as their arrival), and `serve_loop`, on
the one engine thread that owns the scheduler and the executor, takes them
as they come, and steps the same `pagedbench.engines.engine.Engine` as run_engine
(the same `IterationRow` when a `RunRecord` is kept). After each step, `on_tokens` gets
every advancing sequence's new token ids (one per row of a request for n samples) and `on_done` every sequence that
finished or was rejected (its `status` says which). With nothing to run the
loop idles on the inbox, so a new request starts at once.
"""
from __future__ import annotations

from collections.abc import Callable
import itertools
import queue
import threading
import time

from pagedbench.engines.engine import Engine
from pagedbench.engines.protocols import Executor, Scheduler
from pagedbench.engines.run_record import IterationRow, RunRecord
from pagedbench.engines.sequence import Sequence
from pagedbench.workloads.request import Request

IDLE_WAIT_S = 0.05      # how long an idle engine waits on the inbox before it checks for a stop
ABORTED = "aborted: the client went away"


class Inbox:
    """Requests submitted by any thread, taken in arrival order by the engine thread.

    Two steps, so a caller can get ready for a request's tokens before the
    engine can see it: `new_request` stamps an id and the arrival time (the
    executor's clock), `put` hands it over.
    """

    def __init__(self, clock: Callable[[], float]):
        self._clock = clock
        self._queue: queue.SimpleQueue[Request | None] = queue.SimpleQueue()
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def new_request(self, prompt_token_ids: list[int], output_len: int, n: int = 1) -> Request:
        """A request stamped now; `n` > 1: n parallel samples of the prompt, run as one group of n rows."""
        with self._lock:
            return Request(next(self._ids), self._clock(), tuple(prompt_token_ids), output_len, n=n)

    def put(self, request: Request) -> None:
        self._queue.put(request)

    def wake(self) -> None:
        """Wake an engine thread waiting on an empty inbox (to see a stop)."""
        self._queue.put(None)

    def take(self, timeout: float) -> list[Request]:
        """Every request submitted so far, by (arrival, id); waits up to `timeout` s for one (0: no wait)."""
        taken = []
        try:
            taken.append(self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait())
            while True:
                taken.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        return sorted((r for r in taken if r is not None), key=lambda r: (r.arrival_s, r.id))


def serve_loop(inbox: Inbox, scheduler: Scheduler, executor: Executor, stop_event: threading.Event,
               on_tokens: Callable[[Sequence, list[int]], None],
               on_done: Callable[[Sequence], None] | None = None,
               record: RunRecord | None = None, idle_wait_s: float = IDLE_WAIT_S,
               aborts: Callable[[], list[int]] | None = None,
               on_step: Callable[[IterationRow | None, int], None] | None = None,
               on_flush: Callable[[], None] | None = None) -> None:
    """Serve what arrives in `inbox` until `stop_event` is set (requests still running are left as they are).

    `on_tokens(seq, token_ids)`: after each iteration, for every advancing
    sequence, the token ids it just produced (its new token on the real
    backend, one per row in row order for a group of n samples; [] on the
    sim, which makes no tokens). `on_done(seq)`: a
    sequence that finished this iteration (after its last `on_tokens`) or
    was rejected on arrival (`seq.rejected_reason` says why). `aborts()`,
    before each step: the ids of requests to drop (their clients went away);
    the scheduler frees each one's memory (`Scheduler.abort`: a swapped-out
    group's host blocks too), and no callback follows.
    `on_step(row, tokens)`: after each iteration, before its tokens are
    handed out, its row and the tokens it produced (a server's metrics);
    `on_step(None, 0)` after requests were dropped. `on_flush()`: after the
    arrivals were taken and after each iteration's callbacks (a server hands
    what they produced to its event loop at once). `record`, when given,
    gets every sequence and one `IterationRow` per iteration, as
    run_engine's; None keeps nothing (a long-lived server's memory stays
    flat). The callbacks run on this thread: they must be quick and must
    not raise.
    """
    engine = Engine(scheduler, executor)
    live: dict[int, Sequence] = {}        # request id -> its sequence, until it finishes or is dropped
    dropping: set[int] = set()            # aborted requests the scheduler could not drop yet
    wall_start = time.perf_counter()
    while not stop_event.is_set():
        # The aborts before the inbox: a request is put before its abort can be asked for, so every id taken
        # here names a request taken now or before (none is missed as "not arrived yet").
        aborted = aborts() if aborts is not None else []
        arrivals = inbox.take(0 if engine.has_work() or aborted else idle_wait_s)
        now = executor.now()
        for request in arrivals:
            seq, queued = engine.add(request, now)
            if record is not None:
                record.sequences.append(seq)
            if queued:
                live[seq.id] = seq
            elif on_done is not None:
                on_done(seq)
        dropping.update(aborted)
        if dropping:
            for request_id in list(dropping):
                seq = live.get(request_id)
                if seq is None or scheduler.abort(seq, ABORTED):
                    dropping.discard(request_id)
                    live.pop(request_id, None)
            if on_step is not None:
                on_step(None, 0)          # the memory the dropped requests freed
        if on_flush is not None:
            on_flush()
        if not engine.has_work():
            continue
        out = engine.step(now)
        if out is None:
            raise RuntimeError("the scheduler holds requests but scheduled nothing")
        if record is not None:
            record.iterations.append(out.row)
        if on_step is not None:         # first: what a client has seen is already counted
            on_step(out.row, out.row.batch_rows)
        for seq in out.advanced:
            on_tokens(seq, seq.output_token_ids[-1:] if seq.width == 1 else [r[-1] for r in seq.row_token_ids if r])
        for seq in out.finished:
            live.pop(seq.id, None)
            if on_done is not None:
                on_done(seq)
        if on_flush is not None:
            on_flush()
    if record is not None:
        record.end_s = executor.now()
        record.wall_s = time.perf_counter() - wall_start
