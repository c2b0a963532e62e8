"""vllm_result.json: vLLM's benchmark_serving.py `--save-result` schema, filled from a run's tables and summary."""
import io
import json
import math

import numpy as np
import pandas as pd
import pytest

from pagedbench.engines.registry import engine_config
from pagedbench.results.record.store import SUMMARY, read_summary, save_run
from pagedbench.results.record.summary import SLO, RunSetting, TokenGaps, build_summary
import pagedbench.results.record.vllm_result as vllm_result_module
from pagedbench.results.record.vllm_result import (DETAILED, UNFINISHED, VLLM_RESULT, finished_gaps, peaks, to_json,
                                        token_times, vllm_result)
from tests.results.test_metrics_timelines import (ITERATIONS, REQS, TIMELINES, WARMUP, finished, per_request,
                                                  requests_of, values)
from pagedbench.workloads.config import WorkloadConfig

# The keys of current vLLM's result file (vllm/benchmarks/serve.py, `vllm bench serve --save-result
# --save-detailed --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,95,99`, no
# --max-concurrency), in the order it writes them: the setting, the totals (BenchmarkMetrics), the per-request
# lists, the peaks, then each metric's statistics.
VLLM_KEYS = [
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency",
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "request_goodput", "output_throughput", "total_token_throughput",
    "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times", "generated_texts",
    "errors", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    *(f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el")
      for stat in ("mean", "median", "std", "p50", "p90", "p95", "p99")),
]
# What vLLM leaves out without --save-detailed.
VLLM_DETAILED = {"input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors"}
OLD_GOODPUT = "request_goodput:"    # the older benchmark_serving.py's key, kept as an alias
METADATA = {"engine", "block_size", "workload", "seed", "code_version"}     # as vLLM's --metadata KEY=VALUE
OURS = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": "itl_s", "e2el": "e2e_latency_s"}
TEST_METADATA = {"code_version": "abc123def456", "date": "2026-01-02T03:04:05+00:00",
                 "config": {"workload": {"tokenizer": "cl100k_base"}}}


def summary_of(requests=REQS, percentiles=(50, 90, 95, 99), slo=SLO(), arrival="poisson", rate=2.0) -> dict:
    setting = RunSetting(engine_config({"name": "paged", "block_size": 16}),
                         WorkloadConfig.from_dict({"name": "synthetic", "arrival": arrival, "request_rate": rate,
                                                   "seed": 3}),
                         "opt-13b", "sim", {}, 2, {"count": 8, "distinct_pairs": 8}, None, False)
    summary = build_summary(setting, ITERATIONS, requests, 1.0, WARMUP, slo, {}, percentiles)
    return {**summary, "metadata": TEST_METADATA}


def written(requests=REQS, summary=None) -> dict:
    """The file's content, through its JSON text."""
    return json.loads(to_json(vllm_result(requests, summary or summary_of(requests))))


def test_the_keys_are_vllms_in_its_order_with_the_metadata_and_the_old_goodput_key():
    result = written()
    assert set(result) == set(VLLM_KEYS) | METADATA | {OLD_GOODPUT}
    assert [k for k in result if k in VLLM_KEYS] == VLLM_KEYS
    keys = list(result)
    assert keys.index(OLD_GOODPUT) == keys.index("request_goodput") + 1
    assert set(DETAILED) == VLLM_DETAILED


def test_statistics_in_ms_are_the_summarys_seconds_times_1000():
    summary, result = summary_of(), written()
    for metric, ours in OURS.items():
        assert result[f"mean_{metric}_ms"] == pytest.approx(summary[f"{ours}_mean"] * 1000)
        assert result[f"median_{metric}_ms"] == pytest.approx(summary[f"{ours}_p50"] * 1000)
        for p in (50, 90, 95, 99):
            assert result[f"p{p}_{metric}_ms"] == pytest.approx(summary[f"{ours}_p{p}"] * 1000), (metric, p)
    # std (not in the summary): the population standard deviation, as numpy's default, by hand here.
    for metric, ours in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2el", "e2e")):
        xs = values(TIMELINES, ours)
        mean = sum(xs) / len(xs)
        assert result[f"std_{metric}_ms"] == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
                                                           * 1000)


def test_totals_and_throughputs_count_finished_requests_over_the_makespan():
    summary, result = summary_of(), written()
    done = finished(TIMELINES)
    assert result["completed"] == summary["num_finished"] == len(done) == 6
    assert result["num_prompts"] == len(TIMELINES)
    assert result["duration"] == summary["makespan_s"] == 55.0
    assert result["total_input_tokens"] == sum(8 + i for i, r in enumerate(TIMELINES) if r in done)
    assert result["total_output_tokens"] == sum(r["output_len"] * r.get("width", 1) for r in done)
    assert result["request_throughput"] == pytest.approx(6 / 55.0)
    assert result["failed"] == len(TIMELINES) - 6
    assert result["request_goodput"] == result[OLD_GOODPUT]
    for ours, theirs in (("requests_per_s", "request_throughput"), ("goodput_requests_per_s", "request_goodput"),
                         ("output_tokens_per_s", "output_throughput"),
                         ("total_tokens_per_s", "total_token_throughput")):
        assert result[theirs] == pytest.approx(summary[ours]), theirs


def test_per_request_lists_have_one_entry_per_request_and_fail_the_unfinished():
    result = written()
    for key in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
                "generated_texts", "errors"):
        assert len(result[key]) == len(TIMELINES), key
    for i, r in enumerate(TIMELINES):
        assert result["input_lens"][i] == 8 + i
        if r in finished(TIMELINES):
            m = per_request(r)
            assert result["ttfts"][i] == pytest.approx(m["ttft"])     # seconds, as vLLM's
            assert result["itls"][i] == pytest.approx(m["itls"])
            assert result["output_lens"][i] == r["output_len"] * r.get("width", 1)
            assert result["latencies"][i] == pytest.approx(m["e2e"])
            assert result["errors"][i] == ""
        else:
            assert (result["ttfts"][i], result["itls"][i], result["output_lens"][i]) == (0.0, [], 0)
            assert result["latencies"][i] == 0.0
        # No client of ours: each request starts at its arrival and waits in no client queue.
        assert (result["start_times"][i], result["queue_times"][i]) == (r["arrival"], 0.0)
    assert result["errors"][5] == "prompt too long" and result["errors"][7] == UNFINISHED
    assert result["generated_texts"] == [""] * len(TIMELINES)
    assert sum(len(x) for x in result["itls"]) == len(values(TIMELINES, "itl")) == 13


def test_setting_and_metadata_come_from_the_summary():
    result = written()
    assert (result["backend"], result["model_id"], result["tokenizer_id"]) == ("sim", "opt-13b", "cl100k_base")
    assert (result["engine"], result["block_size"], result["workload"], result["seed"]) == ("paged", 16,
                                                                                           "synthetic", 3)
    assert result["code_version"] == "abc123def456" and result["date"] == "20260102-030405"
    assert (result["request_rate"], result["burstiness"], result["max_concurrency"]) == (2.0, 1.0, None)
    assert result["endpoint_type"] == result["backend"] == "sim" and result["label"] == "paged"
    assert result["rtfx"] == 0.0
    offline = summary_of(arrival="offline", rate=None)
    assert written(summary=offline)["request_rate"] == "inf"       # no rate, as vLLM writes it


def test_chosen_percentiles_are_named_as_vllm_names_them():
    result = written(summary=summary_of(percentiles=(25, 99.9)))
    named = {k for k in result if k.startswith("p") and k.endswith("_ttft_ms")}
    assert named == {"p25_ttft_ms", "p99.9_ttft_ms"}
    xs = sorted(values(TIMELINES, "ttft"))
    rank = (len(xs) - 1) * 0.25
    assert result["p25_ttft_ms"] == pytest.approx((xs[1] + (xs[2] - xs[1]) * (rank - 1)) * 1000)


def test_goodput_is_null_when_the_slo_bounds_nothing():
    unbounded = written(summary=summary_of(slo=SLO(ttft_s=None, tpot_s=None)))
    assert unbounded["request_goodput"] is None and unbounded[OLD_GOODPUT] is None
    assert written()["request_goodput"] is not None


def test_a_table_without_token_times_has_empty_itls_and_null_itl_figures():
    reqs = REQS.drop(columns="token_times_s")
    result = written(reqs, summary_of(reqs))
    assert result["itls"] == [[]] * len(TIMELINES)
    assert result["mean_itl_ms"] is None and result["p99_itl_ms"] is None
    assert result["max_output_tokens_per_s"] is None and result["max_concurrent_requests"] is None
    assert result["mean_ttft_ms"] == pytest.approx(written()["mean_ttft_ms"])


def test_itls_written_as_text_read_back_as_the_same_floats():
    reqs = REQS.copy()
    rng = np.random.default_rng(0)
    reqs["token_times_s"] = [list(np.cumsum(rng.exponential(0.05, len(t)) + 1e-9) + a) if t else []
                             for t, a in zip(REQS["token_times_s"], REQS["arrival_s"])]
    result = vllm_result(reqs, summary_of(reqs))
    back = json.loads(to_json(result))["itls"]
    assert back == result["itls"].tolist()                  # exactly: the shortest digits that read back the same
    assert back[0] == np.diff(reqs["token_times_s"][0]).tolist()
    for chunk in (1, 3):                                    # written a few requests at a time: the same text
        out = io.StringIO()
        result["itls"].write(out, chunk=chunk)
        assert json.loads(out.getvalue()) == back


def test_every_saved_run_has_the_file_and_it_round_trips(tmp_path):
    summary = summary_of()
    save_run(tmp_path, ITERATIONS, REQS, summary, vllm_detailed=True)
    on_disk = json.loads((tmp_path / VLLM_RESULT).read_text())
    expected = vllm_result(REQS, read_summary(tmp_path))
    assert on_disk == {**expected, "itls": expected["itls"].tolist()}
    # Without the detail (the default, as vLLM without --save-detailed): every key but most per-request lists.
    save_run(tmp_path, ITERATIONS, REQS, summary)
    brief = json.loads((tmp_path / VLLM_RESULT).read_text())
    assert set(brief) == set(expected) - VLLM_DETAILED and brief["completed"] == 6
    assert len(brief["latencies"]) == len(brief["queue_times"]) == len(TIMELINES)
    assert brief["mean_ttft_ms"] == on_disk["mean_ttft_ms"]
    assert (tmp_path / SUMMARY).is_file() and on_disk["completed"] == 6
    # The requests table keeps every request's token times.
    back = pd.read_parquet(tmp_path / "requests.parquet")
    assert [list(t) for t in back["token_times_s"]] == [r["tokens"] for r in TIMELINES]


def vllm_peaks(timelines, start=lambda r: r["arrival"]):
    """vLLM's calculate_metrics, by hand: tokens in one-second buckets from the first start (each token at start
    + TTFT + the ITLs before it, a group's step counting each of its rows), and the most requests in flight."""
    done = finished(timelines)
    first = min(start(r) for r in done)
    buckets = math.ceil(max(r["tokens"][-1] for r in done) - first) + 1
    per_s = [0] * buckets
    for r in done:
        t = start(r) + (r["tokens"][0] - start(r))
        times = [t]
        for gap in per_request(r)["itls"]:
            t += gap
            times.append(t)
        for t in times:
            per_s[int(t - first)] += r.get("width", 1)
    events = sorted([(start(r), 1) for r in done] + [(r["tokens"][-1], -1) for r in done])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return max(per_s), peak


def test_peak_tokens_per_second_and_peak_concurrency_as_vllm_counts_them():
    result = written()
    tokens, requests = vllm_peaks(TIMELINES)
    assert (result["max_output_tokens_per_s"], result["max_concurrent_requests"]) == (tokens, requests)
    assert tokens == 6 and requests == 1          # the group's three steps of two rows at 40 s; one at a time
    # Overlapping requests: a second copy of the first request, 0.5 s later, is in flight with it.
    both = TIMELINES[:1] + [dict(arrival=10.5, tokens=[10.625, 10.75, 11.0, 11.5], output_len=4)]
    reqs = requests_of(both)
    result = written(reqs, summary_of(reqs))
    assert (result["max_output_tokens_per_s"], result["max_concurrent_requests"]) == vllm_peaks(both) == (4, 2)


def http_run(cap, rate=2.0, queued=0.5):
    """REQS as a run against an HTTP server whose client held each request back `queued` s after its arrival."""
    reqs = REQS.copy()
    sent = reqs["arrival_s"] + queued
    reqs["admitted_s"] = sent.where(reqs["admitted_s"].notna())
    summary = summary_of(reqs, rate=rate) if rate else summary_of(reqs, arrival="offline", rate=None)
    summary = {**summary, "backend": "http", "served_model": "org/served-13b",
               "metadata": {**TEST_METADATA, "config": {**TEST_METADATA["config"],
                                                        "backend": {"name": "http", "max_concurrency": cap}}}}
    return reqs, summary


def test_an_http_run_counts_from_the_send_and_reports_the_client_queue_apart():
    reqs, summary = http_run(cap=2)
    result = written(reqs, summary)
    plain = written()
    assert result["max_concurrency"] == 2 and result["endpoint_type"] == "http"
    assert result["model_id"] == "org/served-13b"       # what the server was asked for, not the config's model
    for i, r in enumerate(TIMELINES):
        if r in finished(TIMELINES):
            assert result["ttfts"][i] == pytest.approx(plain["ttfts"][i] - 0.5)
            assert result["latencies"][i] == pytest.approx(plain["latencies"][i] - 0.5)
            assert result["start_times"][i] == r["arrival"] + 0.5 and result["queue_times"][i] == 0.5
    never_sent = 5                                  # rejected before it was sent: it starts at its arrival
    assert (result["start_times"][never_sent], result["queue_times"][never_sent]) == (50.0, 0.0)
    assert result["mean_ttft_ms"] == pytest.approx(plain["mean_ttft_ms"] - 500)
    assert result["mean_tpot_ms"] == pytest.approx(plain["mean_tpot_ms"])          # TPOT and ITLs: no shift
    assert result["mean_itl_ms"] == pytest.approx(plain["mean_itl_ms"])
    assert result["mean_client_queue_time_ms"] == pytest.approx(500)
    assert result["mean_e2el_including_client_queue_ms"] == pytest.approx(plain["mean_e2el_ms"])
    # No cap: no client-queue statistics (vLLM adds them only with --max-concurrency); at rate inf, no e2el
    # including the queue.
    assert "mean_client_queue_time_ms" not in written(*http_run(cap=None))
    offline = written(*http_run(cap=2, rate=None))
    assert "p99_client_queue_time_ms" in offline and "mean_e2el_including_client_queue_ms" not in offline


def test_a_failed_request_names_its_error():
    reqs = REQS.copy()
    reqs.loc[5, "status"] = "failed"
    reqs.loc[5, "rejected_reason"] = "HTTP 503: stopping"
    assert written(reqs)["errors"][5] == "HTTP 503: stopping"



def pooled_token_times(first_s, gaps):
    """Each token's time from the table's `TokenGaps` kept on finished requests, the whole-array way
    (vllm_result's before the lean path): the pooled running sum of the gaps, less the requests' before."""
    itl, owner = gaps.itl_s, gaps.owner
    if not itl.size:
        return first_s[np.isfinite(first_s)]
    within = np.cumsum(itl)
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    before = np.where(starts > 0, within[np.maximum(starts - 1, 0)], 0.0)
    within -= np.repeat(before, np.diff(np.r_[starts, len(owner)]))
    return np.concatenate([first_s[np.isfinite(first_s)], first_s[owner] + within])


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("chunk", [1, 3, 4096])
def test_finished_gaps_and_token_times_are_the_tables_gaps_of_finished_requests(seed, chunk, monkeypatch):
    """The lean path (no whole-table arrays) gives, to the bit, the table's `TokenGaps` kept where the request
    finished and the token times the pooled arrays give; each token at its request's first time plus its gaps
    so far: random tables with empty, one-time and unfinished requests, the offsets applied `chunk` requests
    at a time (one, a few, all)."""
    monkeypatch.setattr(vllm_result_module, "CHUNK_REQUESTS", chunk)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    lengths = rng.choice([0, 1, 2, 5, 40], size=n)
    times = [list(np.cumsum(rng.exponential(0.05, k)) + rng.uniform(0, 3)) for k in lengths]
    reqs = pd.DataFrame({"token_times_s": times})
    finished = (rng.random(n) < 0.7) & (lengths > 0)      # a finished request produced a token
    itl_s, counts = finished_gaps(reqs, finished)
    gaps = TokenGaps.of_table(reqs)
    kept = finished[gaps.owner]
    assert itl_s.tobytes() == gaps.itl_s[kept].tobytes()
    assert counts.tolist() == [max(k - 1, 0) if f else 0 for k, f in zip(lengths, finished)]
    first = np.array([t[0] if f else math.nan for t, f in zip(times, finished)])
    got = token_times(first, itl_s, counts)
    want = pooled_token_times(first, TokenGaps(gaps.itl_s[kept], gaps.owner[kept], n))
    assert got.tobytes() == want.tobytes()
    each = [t[0] for t, f in zip(times, finished) if f]
    each += [t[0] + g for t, f in zip(times, finished) if f for g in np.cumsum(np.diff(t))]
    assert np.allclose(got, each, rtol=0, atol=1e-9)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("weighted", [False, True])
def test_the_peaks_bucketed_a_slice_at_a_time_are_the_peaks_of_the_whole(seed, weighted, monkeypatch):
    rng = np.random.default_rng(seed)
    start = rng.uniform(0, 20, 40)
    end = start + rng.uniform(0, 5, 40)
    times = rng.uniform(-1, 30, 500)           # some before the first start and past the last bucket
    weights = rng.integers(1, 5, 500).astype("float64") if weighted else None
    whole = peaks(start, end, times, weights)
    monkeypatch.setattr(vllm_result_module, "CHUNK_TOKENS", 7)
    assert peaks(start, end, times, weights) == whole
    bucket = (times - start.min()).astype(np.int64)       # truncated, as vLLM's int() of a time since the start
    inside = (bucket >= 0) & (bucket <= int(np.ceil(end.max() - start.min())))
    per_s = np.bincount(bucket[inside], weights=None if weights is None else weights[inside])
    assert whole[0] == float(per_s.max())


def test_a_result_file_reads_back_as_the_summary_s_figures(tmp_path):
    from pagedbench.results.record.vllm_result import read_vllm_result

    summary = summary_of()
    path = tmp_path / "r.json"
    path.write_text(to_json(vllm_result(REQS, summary)))
    figures = read_vllm_result(path)
    assert figures["num_finished"] == summary["num_finished"]
    assert figures["output_tokens_per_s"] == summary["output_tokens_per_s"]
    assert figures["requests_per_s"] == summary["requests_per_s"] and figures["makespan_s"] == summary["makespan_s"]
    for key in ("ttft_s_mean", "tpot_s_mean", "e2e_latency_s_mean"):
        assert figures[key] == pytest.approx(summary[key])
    path.write_text(json.dumps({"completed": 3, "output_throughput": 9.5, "mean_ttft_ms": 250.0}))
    assert read_vllm_result(path) == {"num_finished": 3, "num_failed": None, "makespan_s": None,
                                      "requests_per_s": None, "output_tokens_per_s": 9.5, "total_output_tokens": None,
                                      "ttft_s_mean": 0.25, "tpot_s_mean": None, "itl_s_mean": None,
                                      "e2e_latency_s_mean": None}
    path.write_text(json.dumps({"completed": "3"}))
    with pytest.raises(ValueError, match="not a result in vLLM's schema"):
        read_vllm_result(path)
