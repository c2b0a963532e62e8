"""What trace to build: dataset, length filters, sampling and arrivals."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from pagedbench.workloads.chat import HISTORIES
from pagedbench.workloads.length_dist import LengthDist
from pagedbench.workloads.trace_size import DEFAULT_MAX_TRACE_REQUESTS, expected_size, too_large

NAMES = ("sharegpt", "alpaca", "synthetic", "trace", "translation", "chat")
GENERATED = ("synthetic", "translation")   # read no file
ARRIVALS = ("offline", "poisson", "gamma", "trace")


@dataclass(slots=True)
class WorkloadConfig:
    """One trace, fully determined by these fields.

    Dataset traces (sharegpt, alpaca) keep the pairs that pass vLLM's
    benchmark filters: prompt and completion each >= `min_len` tokens,
    prompt <= `max_prompt_len`, prompt + completion <= `max_total_len`.
    Synthetic traces draw exactly `num_requests` lengths from `prompt_dist`
    and `output_dist` and are not filtered: the distributions are the spec.

    `request_rate` is in requests per second; `inf` (or None in a dict)
    means no rate, which only `arrival="offline"` accepts. `burstiness` is
    the gamma shape b (b = 1 is Poisson, b < 1 burstier, b > 1 smoother).

    `duration_s` (Poisson or gamma arrivals only) makes a fixed-duration
    trace, as the paper's: requests arrive over [0, duration_s), so their
    number follows from rate x duration and `num_requests` is not used. With
    it unset, the trace has exactly `num_requests` requests.

    Every request samples `n` parallel outputs, or runs beam search with
    `beam_width` beams (the paper's Figures 14-15); at most one of the two
    is above 1. `max_output_len`, when set, cuts every output to at most
    that many tokens (a cap, not a filter; None: no cap).

    The translation workload (Figure 16, workloads/translation.py) is
    generated, then filtered as a dataset's pairs: each prompt starts with
    a `num_shots`-shot prefix (none for 0), one of `num_prefixes` distinct
    prefixes, shared by every request that picked the same one.

    The chat workload (Figure 17, workloads/chat.py) takes every assistant
    reply in ShareGPT's conversations, with the whole conversation before it
    as the prompt. Prompts are cut to their last `max_prompt_len` tokens
    instead of being filtered out (the paper's rule), outputs to
    `max_output_len`; `min_len` and `max_total_len` still filter.
    `chat_history` says what "the conversation" is: "conversation" (the
    default, the paper's rule) is the whole conversation so far, the parts
    the ShareGPT file split it into joined again; "record" is only the
    turns of the reply's own file record (the trace before that rule).

    A replayed trace file (`arrival="trace"`) must list its rows in arrival
    order; `sort_arrivals` sorts them instead (ties keep file order).

    `max_trace_requests` caps the trace's expected length (`num_requests`,
    or request_rate x duration_s, known before anything is built; a replayed
    file's rows once read): a longer trace is refused with its size and a
    rough memory estimate (workloads/trace_size.py). The default admits the
    longest search in conf/ (1000 req/s for 3600 s: 3.6M requests, ~1.4 GB).
    """

    name: str
    num_requests: int = 1000
    duration_s: float | None = None
    seed: int = 0
    path: str | None = None
    tokenizer: str = "cl100k_base"
    min_len: int = 4
    max_prompt_len: int = 1024
    max_total_len: int = 2048
    arrival: str = "offline"
    request_rate: float = math.inf
    burstiness: float = 1.0
    prompt_dist: LengthDist = field(default_factory=lambda: LengthDist(kind="fixed", value=512))
    output_dist: LengthDist = field(default_factory=lambda: LengthDist(kind="fixed", value=128))
    max_output_len: int | None = None
    n: int = 1
    beam_width: int = 1
    num_shots: int = 0
    num_prefixes: int = 1
    chat_history: str = "conversation"
    sort_arrivals: bool = False
    max_trace_requests: int = DEFAULT_MAX_TRACE_REQUESTS

    def __post_init__(self) -> None:
        if self.name not in NAMES:
            raise ValueError(f"workload name must be one of {list(NAMES)}, got {self.name!r}")
        _check_int("num_requests", self.num_requests, minimum=1)
        _check_int("seed", self.seed, minimum=0)
        if self.path is not None and (not isinstance(self.path, str) or not self.path):
            raise ValueError(f"path must be a non-empty string or None, got {self.path!r}")
        if self.name in GENERATED and self.path is not None:
            raise ValueError(f"the {self.name} workload reads no file, but path={self.path!r} was given")
        if self.name == "trace" and self.path is None:
            raise ValueError("workload=trace replays a trace file: set workload.path=FILE.jsonl or FILE.parquet")
        if not isinstance(self.tokenizer, str) or self.tokenizer in ("", "hf:"):
            raise ValueError(
                f"tokenizer must be an encoding name like 'cl100k_base' or 'hf:/local/dir', got {self.tokenizer!r}"
            )
        _check_int("min_len", self.min_len, minimum=1)
        _check_int("max_prompt_len", self.max_prompt_len, minimum=self.min_len)
        _check_int("max_total_len", self.max_total_len, minimum=2 * self.min_len)
        if self.max_output_len is not None:
            _check_int("max_output_len", self.max_output_len, minimum=self.min_len)
        self._check_sampling()
        self._check_prefixes()
        if self.chat_history not in HISTORIES:
            raise ValueError(f"chat_history must be one of {list(HISTORIES)}, got {self.chat_history!r}")
        if self.name != "chat" and self.chat_history != HISTORIES[0]:
            raise ValueError(f"chat_history={self.chat_history!r} only applies to workload=chat, not {self.name!r}")
        self._check_arrivals()
        for name in ("prompt_dist", "output_dist"):
            value = getattr(self, name)
            if isinstance(value, dict):
                setattr(self, name, LengthDist.from_dict(value))
            elif not isinstance(value, LengthDist):
                raise ValueError(f"{name} must be a LengthDist or a dict, got {type(value).__name__}")
        self._check_size()

    def _check_sampling(self) -> None:
        _check_int("n", self.n, minimum=1)
        _check_int("beam_width", self.beam_width, minimum=1)
        if self.n > 1 and self.beam_width > 1:
            raise ValueError(f"a request is either parallel sampling (n > 1) or beam search (beam_width > 1), "
                             f"not both; got n={self.n} beam_width={self.beam_width}")

    def _check_prefixes(self) -> None:
        _check_int("num_shots", self.num_shots, minimum=0)
        _check_int("num_prefixes", self.num_prefixes, minimum=1)
        if self.name != "translation" and self.num_shots != 0:
            raise ValueError(f"num_shots={self.num_shots} only applies to workload=translation, not {self.name!r}")
        if self.num_prefixes != 1 and (self.name != "translation" or self.num_shots == 0):
            raise ValueError(f"num_prefixes={self.num_prefixes} needs shared prefixes to choose from: "
                             "workload=translation with num_shots >= 1")

    def _check_arrivals(self) -> None:
        if self.arrival not in ARRIVALS:
            raise ValueError(f"arrival must be one of {list(ARRIVALS)}, got {self.arrival!r}")
        if self.request_rate is None:
            self.request_rate = math.inf
        if isinstance(self.request_rate, bool) or not isinstance(self.request_rate, (int, float)):
            raise ValueError(f"request_rate must be a number, got {self.request_rate!r}")
        self.request_rate = float(self.request_rate)
        if isinstance(self.burstiness, bool) or not isinstance(self.burstiness, (int, float)):
            raise ValueError(f"burstiness must be a number, got {self.burstiness!r}")
        self.burstiness = float(self.burstiness)
        if not (math.isfinite(self.burstiness) and self.burstiness > 0):
            raise ValueError(f"burstiness must be finite and > 0, got {self.burstiness}")
        if self.arrival == "trace":
            if self.name != "trace":
                raise ValueError(f"arrival='trace' takes arrival times from a trace file (workload=trace), "
                                 f"not from {self.name!r}")
            if self.request_rate != math.inf or self.duration_s is not None:
                raise ValueError("arrival='trace' replays the file's own arrival times: leave request_rate at "
                                 "inf and duration_s unset")
        elif self.arrival == "offline":
            if self.request_rate != math.inf:
                raise ValueError(
                    f"arrival='offline' sends every request at t=0, so request_rate={self.request_rate} "
                    "would be ignored; use arrival=poisson or gamma, or leave request_rate at inf"
                )
        elif not (math.isfinite(self.request_rate) and self.request_rate > 0):
            raise ValueError(
                f"arrival={self.arrival!r} needs a finite request_rate > 0 (req/s), got {self.request_rate}"
            )
        if self.duration_s is not None:
            if isinstance(self.duration_s, bool) or not isinstance(self.duration_s, (int, float)) \
                    or not (math.isfinite(self.duration_s) and self.duration_s > 0):
                raise ValueError(f"duration_s must be a finite number of seconds > 0, got {self.duration_s!r}")
            if self.arrival == "offline":
                raise ValueError("duration_s needs arrivals over time (arrival=poisson or gamma); an offline "
                                 "trace sends num_requests requests at t=0")
            self.duration_s = float(self.duration_s)
        if self.arrival != "gamma" and self.burstiness != 1.0:
            raise ValueError(
                f"burstiness={self.burstiness} only applies to arrival='gamma', got arrival={self.arrival!r}"
            )
        if not isinstance(self.sort_arrivals, bool):
            raise ValueError(f"sort_arrivals must be true or false, got {self.sort_arrivals!r}")
        if self.sort_arrivals and self.arrival != "trace":
            raise ValueError("sort_arrivals=true sorts a replayed file's rows (arrival=trace); "
                             f"arrival={self.arrival!r} makes its own arrival times")

    def _check_size(self) -> None:
        if isinstance(self.max_trace_requests, float) and self.max_trace_requests.is_integer():
            self.max_trace_requests = int(self.max_trace_requests)   # 5e6 on a command line
        _check_int("max_trace_requests", self.max_trace_requests, minimum=1)
        size = expected_size(self)
        if size is not None and size.requests > self.max_trace_requests:
            fix = "lower num_requests" if self.duration_s is None else "lower duration_s or request_rate"
            raise too_large(size, self.max_trace_requests, self.label, fix)

    @property
    def label(self) -> str:
        """The trace's name in logs, stats and summaries: "alpaca_synthetic" when alpaca has no file, with
        what changes its requests appended: "_n4" (parallel samples), "_beam4", "_5shot" (a prefix),
        "_record" (chat histories within one file record)."""
        label = "alpaca_synthetic" if self.name == "alpaca" and self.path is None else self.name
        if self.n > 1:
            label += f"_n{self.n}"
        if self.beam_width > 1:
            label += f"_beam{self.beam_width}"
        if self.name == "translation" and self.num_shots:
            label += f"_{self.num_shots}shot"
        if self.name == "chat" and self.chat_history != HISTORIES[0]:
            label += f"_{self.chat_history}"
        return label

    @classmethod
    def from_dict(cls, d: dict) -> WorkloadConfig:
        """Build from a plain dict, e.g. `OmegaConf.to_container(cfg.workload, resolve=True)`.

        `request_rate` may be `.inf` or None (both mean no rate); nested
        `prompt_dist` / `output_dist` dicts become LengthDist.
        """
        valid = [f.name for f in fields(cls)]
        for key in d:
            if key not in valid:
                raise ValueError(f"unknown workload key {key!r}; valid keys: {valid}")
        if "name" not in d:
            raise ValueError(f"workload config needs a 'name', one of {list(NAMES)}")
        kwargs = dict(d)
        for key in ("prompt_dist", "output_dist"):
            if isinstance(kwargs.get(key), dict):
                kwargs[key] = LengthDist.from_dict(kwargs[key])
        return cls(**kwargs)


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
