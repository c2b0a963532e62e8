"""The online loop's inbox and its callbacks, on the sim (no model): arrival order, waking, the rows and token
counts `on_step` hears, a rejection's `on_done`, and the record's end."""
from __future__ import annotations

import threading
import time

from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import PagedEngineConfig, SchedulerLimits
from pagedbench.engines.run_record import RunRecord
from pagedbench.engines.sequence import Status
from pagedbench.engines.serving.online_loop import ABORTED, IDLE_WAIT_S, Inbox, serve_loop
from tests.engines.conftest import UnitExecutor

LIMITS = SchedulerLimits(max_num_seqs=4, max_num_batched_tokens=256, max_seq_len=64)
ENGINE = PagedEngineConfig(block_size=8, watermark=0.0, swap_space=0)


def test_new_requests_take_increasing_ids_and_the_clock_s_time():
    times = iter([3.0, 1.0, 2.0])
    inbox = Inbox(lambda: next(times))
    made = [inbox.new_request([1, 2], 5) for _ in range(3)]
    assert [(r.id, r.arrival_s, r.prompt_token_ids, r.output_len) for r in made] == \
        [(0, 3.0, (1, 2), 5), (1, 1.0, (1, 2), 5), (2, 2.0, (1, 2), 5)]
    for request in made:
        inbox.put(request)
    inbox.wake()
    assert [r.id for r in inbox.take(0)] == [1, 2, 0]       # by arrival; the wake-up is no request
    assert inbox.take(0) == []


def test_take_waits_for_a_request_up_to_its_timeout():
    inbox = Inbox(lambda: 0.0)
    started = time.monotonic()
    assert inbox.take(0.2) == [] and time.monotonic() - started >= 0.2
    request = inbox.new_request([1], 1)
    threading.Timer(0.1, inbox.put, args=(request,)).start()
    started = time.monotonic()
    assert inbox.take(5) == [request] and time.monotonic() - started < 4
    started = time.monotonic()
    assert inbox.take(0) == [] and time.monotonic() - started < 0.1
    assert 0 < IDLE_WAIT_S <= 0.1


def test_on_step_hears_every_row_and_the_drops_and_on_done_a_rejection():
    executor, scheduler = UnitExecutor(), build_scheduler(ENGINE, LIMITS, 160, 1)
    inbox, stop = Inbox(executor.now), threading.Event()
    kept = inbox.new_request(list(range(10)), 3)
    too_long = inbox.new_request(list(range(70)), 3)     # past max_seq_len: rejected on arrival
    dropped = inbox.new_request(list(range(10)), 40)
    for request in (kept, too_long, dropped):
        inbox.put(request)
    steps, done, tokens, asked = [], [], [], []

    def aborts() -> list[int]:
        if len(steps) == 2 and not asked:       # after two iterations, the long request's client leaves
            asked.append(dropped.id)
            return [dropped.id]
        return []

    def on_done(seq):
        done.append((seq.id, seq.status, seq.rejected_reason))
        if seq.id == kept.id:
            threading.Timer(0.3, stop.set).start()

    threading.Timer(20, stop.set).start()       # a hang fails below instead of blocking the suite
    record = RunRecord(capacity_slots=scheduler.kv.capacity)
    started = time.perf_counter()
    serve_loop(inbox, scheduler, executor, stop, lambda seq, ids: tokens.append((seq.id, ids)), on_done,
               record=record, aborts=aborts, on_step=lambda row, n: steps.append((row, n)))
    rows = [row for row, _ in steps if row is not None]
    assert rows == record.iterations and [n for row, n in steps if row is not None] == [r.batch_rows for r in rows]
    assert [(row, n) for row, n in steps if row is None] == [(None, 0)]
    assert steps.index((None, 0)) == 2
    assert [(i, s) for i, s, _ in done] == [(too_long.id, Status.REJECTED), (kept.id, Status.FINISHED)]
    assert done[0][2] and not done[1][2]
    by_id = {s.id: s for s in record.sequences}
    assert by_id[dropped.id].status == Status.FAILED and by_id[dropped.id].rejected_reason == ABORTED
    assert [ids for i, ids in tokens if i == kept.id] == [[]] * 3          # the sim makes no tokens
    assert record.end_s == executor.now() and 0.3 <= record.wall_s <= time.perf_counter() - started
    assert scheduler.kv.usage()[1] == 0


class RecordingInbox(Inbox):
    """The inbox, noting how long the loop was willing to wait at each take."""

    def __init__(self, clock):
        super().__init__(clock)
        self.waits: list[float] = []

    def take(self, timeout: float):
        self.waits.append(timeout)
        return super().take(timeout)


def test_the_loop_waits_on_the_inbox_only_when_idle_and_ignores_aborts_of_unknown_ids():
    executor, scheduler = UnitExecutor(), build_scheduler(ENGINE, LIMITS, 160, 1)
    inbox, stop = RecordingInbox(executor.now), threading.Event()
    inbox.put(inbox.new_request(list(range(10)), 4))
    asked = []

    def aborts() -> list[int]:
        if not asked:
            asked.append(999)            # no such request: nothing to drop, the loop goes on
            return [999]
        return []

    threading.Timer(20, stop.set).start()
    record = RunRecord(capacity_slots=scheduler.kv.capacity)
    serve_loop(inbox, scheduler, executor, stop, lambda seq, ids: None, lambda seq: stop.set(), record=record,
               aborts=aborts, idle_wait_s=0.01)
    assert [s.status for s in record.sequences] == [Status.FINISHED]
    assert inbox.waits[0] == 0                      # an abort to see to: no wait
    assert inbox.waits[1:] == [0] * (len(inbox.waits) - 1) and len(inbox.waits) == len(record.iterations)
