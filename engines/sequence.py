"""A request's life inside an engine: waiting, running, finished or rejected."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from workloads.request import Request


class Status(str, Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    REJECTED = "rejected"


@dataclass(slots=True, eq=False)
class Sequence:
    request: Request
    status: Status = Status.WAITING
    generated: int = 0                  # output tokens produced so far (kept across a recompute)
    first_token_s: float | None = None
    finish_s: float | None = None
    admitted_s: float | None = None     # first admission
    preemptions: int = 0
    rejected_reason: str | None = None
    output_token_ids: list[int] = field(default_factory=list)   # filled by the real backend only
    # Read every iteration by the schedulers and KV managers: copied out of the request once.
    id: int = field(init=False)
    prompt_len: int = field(init=False)
    output_len: int = field(init=False)
    final_len: int = field(init=False)  # prompt + output tokens when the request finishes

    def __post_init__(self) -> None:
        self.id = self.request.id
        self.prompt_len = len(self.request.prompt_token_ids)
        self.output_len = self.request.output_len
        self.final_len = self.prompt_len + self.output_len

    @property
    def length(self) -> int:
        """Tokens the sequence holds in KV slots: prompt plus every generated token."""
        return self.prompt_len + self.generated

    @property
    def done(self) -> bool:
        return self.generated >= self.output_len

    def record_token(self, now: float) -> bool:
        """One new output token, produced by the iteration that ended at `now`; True if that was the last."""
        return bool(record_tokens([self], now))


def record_tokens(seqs: list[Sequence], now: float) -> list[Sequence]:
    """One new output token for each of `seqs` (one iteration's advancing sequences), produced by the
    iteration that ended at `now`; the sequences it finished. The loop's hottest line: one call per
    iteration, not one per sequence."""
    finished = []
    for seq in seqs:
        seq.generated += 1
        if seq.first_token_s is None:
            seq.first_token_s = now
        if seq.generated >= seq.output_len:
            seq.finish_s = now
            finished.append(seq)
    return finished
