"""A request's life inside an engine: waiting, running, swapped, finished or rejected.

One `Sequence` is one request and all the sequences it runs (vLLM's
sequence group): `width` rows, the `n` parallel samples or the beams of a
beam search, admitted, scheduled, preempted and finished together. Output
lengths come from the trace, so every row of a group has the same length at
every step; the rows differ in their tokens (real backend) and, for beam
search, in which earlier row each descends from (`fork`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from pagedbench.workloads.request import Request


class Status(str, Enum):
    WAITING = "waiting"
    RUNNING = "running"
    SWAPPED = "swapped"     # preempted with its KV blocks moved to the CPU pool
    FINISHED = "finished"
    REJECTED = "rejected"
    FAILED = "failed"       # a peer's request that errored (refused, error response, timeout, cut stream)


@dataclass(slots=True, eq=False)
class Sequence:
    request: Request
    status: Status = Status.WAITING
    generated: int = 0                  # output tokens produced so far (kept across a recompute)
    finish_s: float | None = None
    admitted_s: float | None = None     # first admission
    # End time of each iteration that gave the request a token: one per step, shared by a group's rows.
    token_times_s: list[float] = field(default_factory=list)
    preemptions: int = 0                # by recompute or swap
    swaps: int = 0                      # preemptions by swapping out
    rejected_reason: str | None = None
    output_token_ids: list[int] = field(default_factory=list)   # row 0's tokens; filled by the real backend only
    # Every row's tokens (row 0's list is `output_token_ids`), and each beam's summed log-probability.
    row_token_ids: list[list[int]] = field(init=False)
    beam_logprobs: list[float] = field(init=False)
    # Set by the executor for a beam search: the row each new row descends from, applied by the KV manager.
    parents: list[int] | None = None
    # Read every iteration by the schedulers and KV managers: copied out of the request once.
    id: int = field(init=False)
    prompt_len: int = field(init=False)
    output_len: int = field(init=False)
    final_len: int = field(init=False)  # prompt + output tokens when the request finishes
    width: int = field(init=False)      # rows: n parallel samples or the beam width
    beam: bool = field(init=False)      # beam search (rows are re-chosen every step)
    prefix_id: int | None = field(init=False)
    prefix_len: int = field(init=False) # leading prompt tokens shared with every request of prefix_id

    def __post_init__(self) -> None:
        self.id = self.request.id
        self.prompt_len = len(self.request.prompt_token_ids)
        self.output_len = self.request.output_len
        self.final_len = self.prompt_len + self.output_len
        r = self.request
        self.width = r.width
        self.beam = r.beam_width > 1
        self.prefix_id = r.prefix_id
        self.prefix_len = r.prefix_len
        self.row_token_ids = [self.output_token_ids] + [[] for _ in range(self.width - 1)]
        self.beam_logprobs = [0.0] * self.width if self.beam else []

    def set_rows(self, rows: list[list[int]]) -> None:
        """Replace every row's tokens (a beam step); row 0's list becomes `output_token_ids`."""
        self.row_token_ids = rows
        self.output_token_ids = rows[0]

    @property
    def length(self) -> int:
        """Tokens the sequence holds in KV slots: prompt plus every generated token."""
        return self.prompt_len + self.generated

    @property
    def first_token_s(self) -> float | None:
        """When its first output token came (None before it did)."""
        return self.token_times_s[0] if self.token_times_s else None

    @property
    def done(self) -> bool:
        return self.generated >= self.output_len

    def record_token(self, now: float) -> bool:
        """One new output token, produced by the iteration that ended at `now`; True if that was the last."""
        return bool(record_tokens([self], now))


def record_tokens(seqs: list[Sequence], now: float) -> list[Sequence]:
    """One new output token for each of `seqs` (one iteration's advancing sequences), produced by the
    iteration that ended at `now`; the sequences it finished. The loop's hottest line: one call per
    iteration, not one per sequence. A group (`width` rows) steps its rows together: one time per step."""
    finished = []
    for seq in seqs:
        seq.generated += 1
        seq.token_times_s.append(now)
        if seq.generated >= seq.output_len:
            seq.finish_s = now
            finished.append(seq)
    return finished
