"""The server's Prometheus metrics without a server: every series' name, type and help as /metrics writes them,
their values before any request, and what `state` and `step` set from a scheduler and an iteration row."""
from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import PagedEngineConfig, SchedulerLimits
from pagedbench.engines.engine import Engine, memory_fields
from pagedbench.engines.serving.asgi_server import KV_CATEGORIES, LATENCY_BUCKETS, Metrics
from tests.engines.conftest import UnitExecutor, make_request

LIMITS = SchedulerLimits(max_num_seqs=4, max_num_batched_tokens=256, max_seq_len=128)

SERIES = {   # name: (type, help), as /metrics writes them
    "vllm:num_requests_running": ("gauge", "Requests in the engine's running batch."),
    "vllm:num_requests_waiting": ("gauge", "Requests waiting to be admitted."),
    "vllm:num_requests_swapped": ("gauge", "Requests swapped out to host memory."),
    "vllm:kv_cache_usage_perc": ("gauge", "KV cache usage: 1 is full (slots not free / all)."),
    "pagedbench:kv_cache_slots": ("gauge", "KV cache token slots by category (the paper's split)."),
    "vllm:num_preemptions": ("counter", "Preemptions (recompute or swap)."),
    "vllm:prompt_tokens": ("counter", "Prompt tokens prefilled."),
    "vllm:generation_tokens": ("counter", "Tokens generated."),
    "vllm:request_success": ("counter", "Requests finished."),
    "vllm:time_to_first_token_seconds": ("histogram", "Arrival to first token."),
    "vllm:inter_token_latency_seconds": ("histogram", "Between two tokens of a request."),
    "vllm:e2e_request_latency_seconds": ("histogram", "Arrival to last token."),
}


def samples(metrics: Metrics) -> dict[tuple, float]:
    data, kind = metrics.text()
    assert kind.startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(data.decode()) for s in family.samples}


def test_every_series_has_its_name_type_and_help():
    data, _ = Metrics(100).text()
    families = {f.name: (f.type, f.documentation) for f in text_string_to_metric_families(data.decode())
                if not f.name.endswith("_created")}     # prometheus_client's creation time of each counter
    assert families == SERIES


def test_before_any_request_the_kv_is_all_free_and_the_counts_zero():
    values = samples(Metrics(100))
    assert values[("pagedbench:kv_cache_slots", (("category", "free"),))] == 100
    for category in KV_CATEGORIES[:-1]:
        assert values[("pagedbench:kv_cache_slots", (("category", category),))] == 0
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_swapped",
                 "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total"):
        assert values[(name, ())] == 0
    for histogram in ("time_to_first_token", "inter_token_latency", "e2e_request_latency"):
        buckets = [le for (name, labels) in values if name == f"vllm:{histogram}_seconds_bucket"
                   for key, le in labels]
        assert buckets == [*(str(b) for b in LATENCY_BUCKETS), "+Inf"], histogram


@pytest.fixture
def midway():
    """A paged scheduler after a few steps of five requests, four at most running: some wait."""
    scheduler = build_scheduler(PagedEngineConfig(block_size=8, watermark=0.0, swap_space=0), LIMITS, 160, 1)
    engine = Engine(scheduler, UnitExecutor())
    for i in range(5):
        engine.add(make_request(i, 10 + i, 20), 0.0)
    rows = [engine.step(0.0).row for _ in range(3)]
    return scheduler, rows


def test_state_reads_the_scheduler_s_requests_and_kv_split(midway):
    scheduler, _ = midway
    metrics = Metrics(scheduler.kv.capacity)
    metrics.state(scheduler)
    values, memory = samples(metrics), memory_fields(scheduler)
    assert values[("vllm:num_requests_running", ())] == len(scheduler.held()) == 4
    assert values[("vllm:num_requests_waiting", ())] == len(scheduler.waiting) == 1
    assert values[("vllm:num_requests_swapped", ())] == len(scheduler.swapped) == 0
    assert 0 < memory["free"] < scheduler.kv.capacity
    assert values[("vllm:kv_cache_usage_perc", ())] == pytest.approx(1 - memory["free"] / scheduler.kv.capacity)
    for category in KV_CATEGORIES:
        assert values[("pagedbench:kv_cache_slots", (("category", category),))] == memory[category]
    empty = Metrics(0)
    empty.state(scheduler)
    assert samples(empty)[("vllm:kv_cache_usage_perc", ())] == 0


def test_step_counts_an_iteration_s_preemptions_and_tokens(midway):
    _, (prefill, decode, _) = midway
    metrics = Metrics(160)
    metrics.step(prefill._replace(preempted=2), 4)
    metrics.step(decode._replace(preempted=0), 3)
    values = samples(metrics)
    assert prefill.prefill_tokens == 10 + 11 + 12 + 13 and decode.prefill_tokens == 0
    assert values[("vllm:num_preemptions_total", ())] == 2
    assert values[("vllm:prompt_tokens_total", ())] == prefill.prefill_tokens
    assert values[("vllm:generation_tokens_total", ())] == 7


def test_uvicorn_runs_quietly_with_our_server_header_only_and_ten_seconds_to_drain():
    from pagedbench.engines.serving.asgi_server import uvicorn_config

    app = object()
    config = uvicorn_config(app)
    assert config.app is app and config.log_level == "warning" and config.timeout_graceful_shutdown == 10
    assert config.access_log is False and config.server_header is False
