"""How big a trace will be, known from its config before anything is built: the requests it is expected to
hold and a rough estimate of the memory they take.

`WorkloadConfig` refuses a trace past its `max_trace_requests` in one line that gives this estimate, so
a slip such as `duration_s=1e9` fails at once instead of in numpy's allocator, and `build_workload`
says how big a large trace is and shows a progress bar while it builds (on a terminal only).

The estimate is of the built list of `Request`s (measured on this code: about 400-500 bytes a request, plus
4 a prompt token for prompts no other request shares: an int32 of the pool's array, which its `TokenIds`
views), not of the run that serves it, which keeps a record per request as well. Requests drawn from a dataset share the prompts of its pool, which the file
bounds; only generated workloads (synthetic, translation) make a prompt per request.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
import math
from typing import Protocol, TypeVar

from tqdm import tqdm

from pagedbench.workloads.length_dist import LengthDist
from pagedbench.workloads.translation import FRAMING_TOKENS, SOURCE_MEAN, prefix_len_for_shots

DEFAULT_MAX_TRACE_REQUESTS = 4_000_000   # above the longest search of conf/: 1000 req/s for 3600 s (3.6M)
BYTES_PER_REQUEST = 400           # a Request, its arrival time, its place in the list, its prompt's view
BYTES_PER_PROMPT_TOKEN = 4        # a token of a prompt the request holds alone: an int32 in the pool's array
PROGRESS_MIN_REQUESTS = 100_000   # a trace this long takes a second or more to build: worth a bar
LARGEST_COUNT = 10**18            # what a count past any memory is shown as (rate x duration can overflow)

T = TypeVar("T")


class TraceShape(Protocol):
    """What a trace's size is read from: the fields of `pagedbench.workloads.config.WorkloadConfig` it depends on (typed
    here, below the config, so the config can check a size without the two importing each other)."""

    name: str
    arrival: str
    num_requests: int
    request_rate: float
    duration_s: float | None
    prompt_dist: LengthDist
    num_shots: int
    max_prompt_len: int


@dataclass(slots=True, frozen=True)
class TraceSize:
    """A trace's expected number of requests, where that number comes from, and its memory, roughly."""

    requests: int   # expected: num_requests, or request_rate x duration_s (a Poisson count varies about it)
    source: str     # "num_requests", or "request_rate 5 req/s x duration_s 1e+06 s"
    bytes: int      # rough memory of the built list of Requests

    def __post_init__(self) -> None:
        if self.requests < 0 or self.bytes < 0:
            raise ValueError(f"a trace size is >= 0, got {self.requests} requests and {self.bytes} bytes")

    def describe(self) -> str:
        """"about 5,000,000 requests (request_rate 5 req/s x duration_s 1e+06 s), ~2.0 GB"."""
        return f"about {self.requests:,} requests ({self.source}), ~{format_bytes(self.bytes)}"


def expected_size(cfg: TraceShape) -> TraceSize | None:
    """The size of the trace `cfg` builds; None for a replayed file (arrival=trace): its rows say."""
    if cfg.arrival == "trace":
        return None
    if cfg.duration_s is None:
        requests, source = cfg.num_requests, "num_requests"
    else:
        requests = math.ceil(min(cfg.request_rate * cfg.duration_s, LARGEST_COUNT))
        source = f"request_rate {cfg.request_rate:g} req/s x duration_s {cfg.duration_s:g} s"
    return rows_size(requests, source, own_prompt_tokens(cfg))


def rows_size(requests: int, source: str, prompt_tokens: float = 0.0) -> TraceSize:
    """The size of `requests` requests, each holding `prompt_tokens` prompt tokens of its own."""
    per_request = BYTES_PER_REQUEST + BYTES_PER_PROMPT_TOKEN * prompt_tokens
    return TraceSize(requests, source, int(min(requests * per_request, LARGEST_COUNT)))


def own_prompt_tokens(cfg: TraceShape) -> float:
    """The mean prompt tokens a request holds alone: its whole prompt in a generated workload, none in a
    dataset's (its prompt is one of the pool's, shared with every other draw of that pair)."""
    if cfg.name == "synthetic":
        return mean_length(cfg.prompt_dist)
    if cfg.name == "translation":
        return min(prefix_len_for_shots(cfg.num_shots) + SOURCE_MEAN + FRAMING_TOKENS, cfg.max_prompt_len)
    return 0.0


def mean_length(dist: LengthDist) -> float:
    if dist.kind == "fixed":
        return float(dist.value)
    if dist.kind == "uniform":
        return (dist.low + dist.high) / 2
    return float(dist.mean)


def too_large(size: TraceSize, limit: int, label: str, fix: str) -> ValueError:
    """The one-line error for a trace past `max_trace_requests`; `fix` says what would make it smaller."""
    return ValueError(f"{label}: {size.describe()} is past max_trace_requests={limit:,}; {fix}, or raise "
                      f"workload.max_trace_requests (the count must fit in memory)")


def format_bytes(n: int) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n / 1e3:.1f} kB"


def is_large(requests: int) -> bool:
    """Whether a trace of this many requests takes long enough to build to be announced, with a bar."""
    return requests >= PROGRESS_MIN_REQUESTS


def progress(items: Iterable[T], total: int, desc: str) -> Iterator[T]:
    """`items`, with a progress bar on a terminal when there are enough to take a while (as the engine
    loop's, `disable=None`); a plain pass through them otherwise."""
    return iter(tqdm(items, total=total, unit="req", desc=desc, leave=False,
                     disable=None if is_large(total) else True))
