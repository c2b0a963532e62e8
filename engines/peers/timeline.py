"""What a peer measured for one request, as the `Sequence` our tables and summary read.

Times are seconds on the replay's clock: 0 is the moment the replay started, so
a request's `arrival_s` is its trace arrival. `sent_s` (recorded as
`admitted_s`) is when the request left the client (later than its arrival when
a concurrency bound made it wait); `token_times_s` holds the time each streamed
token (or chunk) arrived. A request that failed (refused connection, error
response, timeout, a stream cut short) ends FAILED with its reason, never
FINISHED: the summary counts it and leaves it out of every latency.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from pagedbench.engines.sequence import Sequence, Status
from pagedbench.workloads.request import Request


@dataclass(slots=True)
class Measured:
    """One request as a peer saw it. `output_tokens`: tokens the peer reports it generated (the server's
    usage count, else one per streamed chunk); None before the request ended."""

    request: Request
    sent_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)
    output_tokens: int | None = None
    prompt_tokens: int | None = None     # as the peer counted them (its own tokenizer), when it says
    error: str | None = None


def to_sequence(m: Measured) -> Sequence:
    """The request's Sequence: FINISHED with its token times, or FAILED with `error`.

    A finished request's output length is the count the peer reports: when a
    server stopped early (EOS it could not be told to ignore) the request
    records the tokens it really produced, so TPOT and throughput stay true.
    """
    request = m.request
    if m.error is None and m.output_tokens is not None and m.output_tokens != request.output_len:
        request = replace(request, output_len=m.output_tokens)
    seq = Sequence(request)
    seq.admitted_s = m.sent_s
    if m.error is not None or not m.token_times_s:
        seq.status = Status.FAILED
        seq.rejected_reason = m.error or "no token came back"
        seq.finish_s = m.token_times_s[-1] if m.token_times_s else None
        seq.token_times_s = list(m.token_times_s)
        return seq
    seq.status = Status.FINISHED
    seq.token_times_s = list(m.token_times_s)
    seq.generated = request.output_len
    seq.finish_s = m.token_times_s[-1]
    return seq
