"""What a run produces before it becomes tables: one `IterationRow` per iteration and the `RunRecord`.

Built by `pagedbench.engines.engine.Engine.step` (our engines) or by a peer's replay
(sequences only: a peer's iterations cannot be read); read by
`pagedbench.results.record.frames`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from pagedbench.engines.sequence import Sequence


class IterationRow(NamedTuple):
    """One iteration as the run records it: what ran, what waited, what moved, and the KV split after it.

    Memory fields are token slots of the KV budget; `unshared_slots` are the slots the held groups would
    need without sharing, `allocated_slots` those they hold. Built by keyword, read by name; a tuple, so a
    run of many iterations stays cheap to record and turns into a table at once.
    """

    start_s: float
    duration_s: float
    prefill_seqs: int          # groups prefilled
    prefill_tokens: int        # prompt tokens computed (a static batch's padding included)
    decode_seqs: int           # groups decoded
    decode_rows: int           # rows decoded (a group of width w is w rows)
    batch_size: int            # groups in the batch
    num_held: int              # groups holding KV memory after the iteration
    num_waiting: int
    preempted: int             # groups preempted to make room for this iteration
    batch_rows: int
    copy_tokens: int           # tokens copied on the device (copy-on-write, contiguous forks)
    swapped_out: int           # groups
    swapped_in: int            # groups
    swap_blocks: int           # blocks moved either way
    num_swapped: int           # groups on the host after the iteration
    admission_blocked_by: str  # why the head of the queue was not admitted (Batch.admission_blocked_by); "" if none
    unshared_slots: int
    allocated_slots: int
    token_states: int
    reservation: int
    internal_fragmentation: int
    external_fragmentation: int
    free: int


ITERATION_COLUMNS = IterationRow._fields


@dataclass(slots=True)
class RunRecord:
    """Everything a run produced, before it is turned into tables."""

    capacity_slots: int
    iterations: list[IterationRow] = field(default_factory=list)
    sequences: list[Sequence] = field(default_factory=list)
    end_s: float = 0.0
    wall_s: float = 0.0


@dataclass(slots=True)
class ServedRun:
    """A trace served, by one of our engines or by a peer: the record, and what the summary says of who
    served it. Both kinds of runner hand this back (`pagedbench.engines.protocols.Runner`), so a run is summarised,
    judged and saved by one path."""

    record: RunRecord
    label: str                   # the summary's engine: our engine's label, or the peer's
    where: str                   # the model and device or hardware, in words ("" for an endpoint)
    fields: dict                 # the summary's backend keys, known before the run
    after_run: dict = field(default_factory=dict)      # backend keys known once it has ended
    failures: list[str] = field(default_factory=list)  # each failed request's reason (peers; ours reject)
    peer: bool = False           # served by an engine not ours (no iterations, one sequence per request)
