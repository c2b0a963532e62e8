"""The server's Prometheus metrics: vLLM's names and labels, so vLLM's Grafana dashboard fills, and our KV split.

Every `vllm:` series carries the labels `model_name` (the first served name) and `engine` (our engine's label), as
vLLM's own do; the dashboard filters on `model_name`. What they count:

- the scheduler now: `vllm:num_requests_running`, `_waiting`, `_swapped`; `vllm:kv_cache_usage_perc` (and its older
  name `vllm:gpu_cache_usage_perc`, which vLLM's dashboard still reads); `vllm:cache_config_info` (the KV budget);
- per iteration: `vllm:num_preemptions_total`, `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`,
  `vllm:iteration_tokens_total` (a histogram of the tokens each iteration computed);
- per token: `vllm:time_to_first_token_seconds`, `vllm:inter_token_latency_seconds` and
  `vllm:time_per_output_token_seconds` (the same gaps, under vLLM's newer and older names);
- per finished request: `vllm:e2e_request_latency_seconds`, `vllm:request_queue_time_seconds` (arrival to
  admission), `vllm:request_prefill_time_seconds` (admission to first token), `vllm:request_decode_time_seconds`
  (first token to last), `vllm:request_inference_time_seconds` (admission to last),
  `vllm:request_time_per_output_token_seconds`, `vllm:request_prompt_tokens`, `vllm:request_generation_tokens`,
  `vllm:request_max_num_generation_tokens`, and `vllm:request_success_total` by `finished_reason`.

Ours beside them: `pagedbench:kv_cache_slots` by `category` (token states, reservation, internal and external
fragmentation, free: the paper's split). The request phases are read on the executor's clock (the sequence's
admission, first-token and finish times), the token gaps on the server's.
"""
from __future__ import annotations

from pagedbench.engines.protocols import Scheduler
from pagedbench.engines.run_record import IterationRow
from pagedbench.engines.sequence import Sequence
from pagedbench.engines.engine import memory_fields

# Histogram buckets in seconds: a CPU's tokens take tens of ms to seconds, a GPU's ms.
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                   20.0, 40.0, 80.0, 160.0)
# Request and iteration sizes in tokens: 1, 2, 5, 10, 20, 50, ... as vLLM builds its buckets, to 2^17.
TOKEN_BUCKETS = tuple(m * 10 ** e for e in range(6) for m in (1, 2, 5) if m * 10 ** e <= 131072)
KV_CATEGORIES = ("token_states", "reservation", "internal_fragmentation", "external_fragmentation", "free")
LABELS = ("model_name", "engine")


class Metrics:
    """The server's metrics, in a registry of their own (one per service), labelled with `model_name` and
    `engine`."""

    def __init__(self, capacity_slots: int, model_name: str = "", engine: str = "", block_size: int | None = None):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = r = CollectorRegistry()
        self.capacity = capacity_slots
        names = {"model_name": model_name, "engine": engine}

        def gauge(name, doc):
            return Gauge(name, doc, LABELS, registry=r).labels(**names)

        def counter(name, doc):
            return Counter(name, doc, LABELS, registry=r).labels(**names)

        def histogram(name, doc, buckets=LATENCY_BUCKETS):
            return Histogram(name, doc, LABELS, buckets=buckets, registry=r).labels(**names)

        self.running = gauge("vllm:num_requests_running", "Requests in the engine's running batch.")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be admitted.")
        self.swapped = gauge("vllm:num_requests_swapped", "Requests swapped out to host memory.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV cache usage: 1 is full (slots not free / all).")
        self.gpu_usage = gauge("vllm:gpu_cache_usage_perc", "KV cache usage, under vLLM's older name.")
        info = Gauge("vllm:cache_config_info", "The KV cache's configuration (the value is 1).",
                     [*LABELS, "block_size", "num_slots"], registry=r)
        info.labels(**names, block_size=str(block_size or ""), num_slots=str(capacity_slots)).set(1)
        self._split = Gauge("pagedbench:kv_cache_slots", "KV cache token slots by category (the paper's split).",
                            [*LABELS, "category"], registry=r)
        self.kv_split = {c: self._split.labels(**names, category=c) for c in KV_CATEGORIES}
        self.preemptions = counter("vllm:num_preemptions", "Preemptions (recompute or swap).")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens prefilled.")
        self.generation_tokens = counter("vllm:generation_tokens", "Tokens generated.")
        self.iteration_tokens = histogram("vllm:iteration_tokens_total", "Tokens computed by each iteration.",
                                          TOKEN_BUCKETS)
        self._finished = Counter("vllm:request_success", "Requests finished.", [*LABELS, "finished_reason"],
                                 registry=r)
        self._names = names
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Arrival to first token.")
        self.itl = histogram("vllm:inter_token_latency_seconds", "Between two tokens of a request.")
        self.tpot = histogram("vllm:time_per_output_token_seconds", "Between two tokens of a request (the older "
                              "name of vllm:inter_token_latency_seconds).")
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "Arrival to last token.")
        self.queue = histogram("vllm:request_queue_time_seconds", "Arrival to admission (waiting in the queue).")
        self.prefill = histogram("vllm:request_prefill_time_seconds", "Admission to first token.")
        self.decode = histogram("vllm:request_decode_time_seconds", "First token to last.")
        self.inference = histogram("vllm:request_inference_time_seconds", "Admission to last token.")
        self.request_tpot = histogram("vllm:request_time_per_output_token_seconds",
                                      "Mean time per output token after the first, per request.")
        self.request_prompt = histogram("vllm:request_prompt_tokens", "Prompt tokens per request.", TOKEN_BUCKETS)
        self.request_generation = histogram("vllm:request_generation_tokens", "Generated tokens per request.",
                                            TOKEN_BUCKETS)
        self.request_max_generation = histogram("vllm:request_max_num_generation_tokens",
                                                "The most tokens generated by a sequence of the request.",
                                                TOKEN_BUCKETS)
        for category, child in self.kv_split.items():
            child.set(capacity_slots if category == "free" else 0)

    def finished(self, reason: str) -> None:
        self._finished.labels(**self._names, finished_reason=reason).inc()

    def state(self, scheduler: Scheduler) -> None:
        """The scheduler's requests and KV split as they are now (on the engine thread, between steps)."""
        self.set_state(*state_of(scheduler))

    def set_state(self, running: int, waiting: int, swapped: int, memory: dict[str, int]) -> None:
        """`state` from its values (`state_of`), as an engine in another process sends them."""
        self.running.set(running)
        self.waiting.set(waiting)
        self.swapped.set(swapped)
        usage = 1 - memory["free"] / self.capacity if self.capacity else 0.0
        self.kv_usage.set(usage)
        self.gpu_usage.set(usage)
        for category, child in self.kv_split.items():
            child.set(memory[category])

    def step(self, row: IterationRow, generated: int) -> None:
        """After an iteration (on the engine thread): its preemptions and tokens."""
        self.step_counts(row.preempted, row.prefill_tokens, row.decode_rows, generated)

    def step_counts(self, preempted: int, prefill_tokens: int, decode_rows: int, generated: int) -> None:
        """`step` from its values (`step_of`)."""
        if preempted:
            self.preemptions.inc(preempted)
        if prefill_tokens:
            self.prompt_tokens.inc(prefill_tokens)
        self.generation_tokens.inc(generated)
        self.iteration_tokens.observe(prefill_tokens + decode_rows)

    def request_done(self, seq: Sequence) -> None:
        """A request that produced its last token: its phases (the executor's clock) and sizes."""
        self.request_phases(*phases_of(seq))

    def request_phases(self, arrival: float, admitted: float | None, first: float | None, end: float | None,
                       generated: int, prompt_len: int) -> None:
        """`request_done` from its values (`phases_of`)."""
        if admitted is not None:
            self.queue.observe(max(0.0, admitted - arrival))
            if end is not None:
                self.inference.observe(max(0.0, end - admitted))
            if first is not None:
                self.prefill.observe(max(0.0, first - admitted))
        if first is not None and end is not None:
            self.decode.observe(max(0.0, end - first))
            if generated > 1:
                self.request_tpot.observe(max(0.0, end - first) / (generated - 1))
        self.request_prompt.observe(prompt_len)
        self.request_generation.observe(generated)
        self.request_max_generation.observe(generated)

    def text(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def state_of(scheduler: Scheduler) -> tuple[int, int, int, dict[str, int]]:
    """What `Metrics.set_state` takes: requests running, waiting and swapped, and the memory fields."""
    return len(scheduler.held()), len(scheduler.waiting), len(scheduler.swapped), memory_fields(scheduler)


def step_of(row: IterationRow, generated: int) -> tuple[int, int, int, int]:
    """What `Metrics.step_counts` takes."""
    return row.preempted, row.prefill_tokens, row.decode_rows, generated


def phases_of(seq: Sequence) -> tuple[float, float | None, float | None, float | None, int, int]:
    """What `Metrics.request_phases` takes: arrival, admission, first token and end (the executor's clock), the
    tokens generated per row and the prompt's length."""
    return seq.request.arrival_s, seq.admitted_s, seq.first_token_s, seq.finish_s, seq.generated, seq.prompt_len
