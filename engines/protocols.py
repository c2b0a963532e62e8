"""The seams between an engine's parts: what a scheduler asks of a KV manager, what the
engine loop asks of a scheduler and of an executor, and what a backend's builder hands
the caller.

    Engine.step --(Scheduler)--> scheduler --(KVManager)--> KV manager
         \\--(Executor)--> executor (sim: a cost model's virtual clock; real: a model on the wall clock)

A `Runner` is what run.py serves a trace with: one of our engines (a Backend
driven by `pagedbench.engines.loop.run_engine`) or a peer; both hand back a `ServedRun`.

Each part is typed against these, never probed with `hasattr`: a capability a part
may lack is a field every implementation sets (`KVManager.paged`,
`KVManager.host_blocks`) or a method that says no (`can_swap_out`).
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sized
from typing import Protocol

from pagedbench.engines.batch import Batch
from pagedbench.engines.kv.memory_split import MemorySplit
from pagedbench.engines.run_record import IterationRow, ServedRun
from pagedbench.engines.sequence import Sequence
from pagedbench.workloads.request import Request


class KVManager(Protocol):
    """KV memory of one engine, in token slots: what a group may take, where its tokens live, how much is used."""

    capacity: int        # token slots of the device budget
    paged: bool          # True: block tables (`table`); False: one contiguous region per row
    host_blocks: int     # blocks of the host pool that swapped groups move to (0: none; contiguous: 0)

    def describe(self) -> str: ...
    def rejection(self, seq: Sequence) -> str | None: ...               # why it can never fit, or None
    def try_admit(self, seq: Sequence) -> bool: ...                     # take its memory now, or False
    def cached_tokens(self, seq: Sequence) -> int: ...                  # prompt tokens a shared prefix holds
    def prefilled(self, seq: Sequence) -> None: ...
    def share_prompt(self, seq: Sequence) -> None: ...
    def fork(self, seq: Sequence, parents: list[int]) -> None: ...      # a beam step's new lineage
    def grow_all(self, seqs: list[Sequence], start: int = 0) -> int: ...   # first index that cannot grow
    def free(self, seq: Sequence) -> None: ...
    def drain_into(self, batch: Batch) -> None: ...                     # copies / swaps the batch must run
    def slots(self, seq: Sequence, start: int, end: int, row: int = 0) -> list[int]: ...
    def holds(self, seq: Sequence) -> bool: ...
    def usage(self) -> tuple[int, int]: ...                             # (slots without sharing, allocated)
    def split(self, held: Iterable[Sequence], next_waiting: Sequence | None,
              stored: int | None = None) -> MemorySplit: ...
    def can_swap_out(self, seq: Sequence) -> bool: ...
    def swap_out(self, seq: Sequence) -> int: ...
    def can_swap_in(self, seq: Sequence, watermark: bool = True) -> bool: ...
    def swap_in(self, seq: Sequence) -> int: ...
    def spill_kept(self, seq: Sequence) -> int: ...                     # a swapped group's kept blocks to host
    def drop_swapped(self, seq: Sequence) -> None: ...                  # forget a swapped group (dropped)
    # Single-row groups' growth over quiet decode steps (Engine.fast_forward): the step offsets at which each
    # takes a block, ([j0 of each], period); period 0: none, and no step at or past its j0.
    def growths(self, seqs: list[Sequence]) -> tuple[list[int], int]: ...
    @property
    def available_blocks(self) -> int: ...                              # what decode steps can take
    def append_block(self, seq: Sequence) -> None: ...


class PagedKVManager(KVManager, Protocol):
    """A KV manager with block tables (`paged` is True)."""

    def table(self, seq: Sequence, row: int = 0) -> list[int]: ...


class Scheduler(Protocol):
    """Decides each iteration's batch over a KV manager; the engine loop drives it."""

    kv: KVManager
    waiting: Sized       # queued requests
    swapped: Sized       # preempted groups whose blocks are on the host

    def add(self, seq: Sequence, now: float) -> bool: ...              # False: rejected, it can never run
    def has_work(self) -> bool: ...
    def schedule(self, now: float) -> Batch | None: ...
    def after_iteration(self, batch: Batch) -> None: ...
    def held(self) -> Collection[Sequence]: ...                         # groups holding KV memory
    def memory_split(self) -> MemorySplit: ...
    def release_finished(self, finished: list[Sequence]) -> list[Sequence]: ...
    def quiet(self) -> tuple[list[Sequence], str] | None: ...           # running groups, head's limit; or None
    def quiet_step(self) -> None: ...                                   # one quiet decode of them all
    def abort(self, seq: Sequence, reason: str) -> bool: ...            # drop it (a server's client left);
                                                                        # False: not now


class Executor(Protocol):
    """Runs iterations and owns the clock the loop reads."""

    name: str
    fast_forward: bool   # True: it can run quiet decode steps without their batches (`quiet_decodes`)

    def warmup(self) -> None: ...                                       # before the clock starts
    def start_clock(self) -> None: ...                                  # t = 0 is now
    def now(self) -> float: ...
    def execute(self, batch: Batch) -> float: ...                       # the iteration's duration, seconds
    def wait_until(self, t: float) -> None: ...                         # idle until the clock reads t
    def quiet_decodes(self, context_lens: list[int], steps: int,
                      may_start: Callable[[float], bool]) -> list[tuple[float, float, float]]: ...


class Backend(Protocol):
    """What a backend's builder returns: a scheduler, the executor that runs it, and what to record."""

    scheduler: Scheduler
    executor: Executor

    @property
    def where(self) -> str: ...                                         # the device or hardware, in words

    def describe(self) -> str: ...
    def summary_fields(self) -> dict: ...                               # the backend's keys in the summary
    def after_run_fields(self, busy_s: float) -> dict: ...              # keys known once the run has ended


class Runner(Protocol):
    """Requests in, run record out: one of our engines (a Backend stepped by the trace driver) or a peer."""

    live: bool           # iterations are reported as they run (`on_iteration` is called): a live logger helps
    capacity: int        # KV token slots (0: a peer's are unknown)

    def describe(self) -> str: ...
    def serve(self, requests: list[Request], progress: bool | None, stop_at_last_arrival: bool,
              on_iteration: Callable[[IterationRow], None] | None) -> ServedRun: ...
