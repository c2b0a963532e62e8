"""vllm_result.json: vLLM's benchmark_serving.py `--save-result` schema, filled from a run's tables and summary."""
import io
import json
import math

import numpy as np
import pandas as pd
import pytest

from engines.config import engine_config
from results.record.store import SUMMARY, read_summary, save_run
from results.record.summary import SLO, RunSetting, build_summary
from results.record.vllm_result import DETAILED, UNFINISHED, VLLM_RESULT, to_json, vllm_result
from tests.results.test_metrics_timelines import ITERATIONS, REQS, TIMELINES, WARMUP, finished, per_request, values
from workloads.config import WorkloadConfig

# The keys of vLLM's benchmark_serving.py result file (`--save-result --save-detailed`, metrics ttft, tpot,
# itl and e2el, `--metric-percentiles 50,90,95,99`), written out as the reference schema.
VLLM_KEYS = {
    "date", "backend", "model_id", "tokenizer_id", "num_prompts", "request_rate", "burstiness",
    "max_concurrency", "duration", "completed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput:", "output_throughput", "total_token_throughput", "input_lens",
    "output_lens", "ttfts", "itls", "generated_texts", "errors",
    "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms", "p90_ttft_ms", "p95_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p50_tpot_ms", "p90_tpot_ms", "p95_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p50_itl_ms", "p90_itl_ms", "p95_itl_ms", "p99_itl_ms",
    "mean_e2el_ms", "median_e2el_ms", "std_e2el_ms", "p50_e2el_ms", "p90_e2el_ms", "p95_e2el_ms", "p99_e2el_ms",
}
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


def test_the_keys_are_vllms_and_the_metadata():
    result = written()
    assert set(result) == VLLM_KEYS | METADATA
    assert list(result)[:5] == ["date", "backend", "model_id", "tokenizer_id", "num_prompts"]


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
    for ours, theirs in (("requests_per_s", "request_throughput"), ("goodput_requests_per_s", "request_goodput:"),
                         ("output_tokens_per_s", "output_throughput"),
                         ("total_tokens_per_s", "total_token_throughput")):
        assert result[theirs] == pytest.approx(summary[ours]), theirs


def test_per_request_lists_have_one_entry_per_request_and_fail_the_unfinished():
    result = written()
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        assert len(result[key]) == len(TIMELINES), key
    for i, r in enumerate(TIMELINES):
        assert result["input_lens"][i] == 8 + i
        if r in finished(TIMELINES):
            m = per_request(r)
            assert result["ttfts"][i] == pytest.approx(m["ttft"])     # seconds, as vLLM's
            assert result["itls"][i] == pytest.approx(m["itls"])
            assert result["output_lens"][i] == r["output_len"] * r.get("width", 1)
            assert result["errors"][i] == ""
        else:
            assert (result["ttfts"][i], result["itls"][i], result["output_lens"][i]) == (0.0, [], 0)
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
    assert written(summary=summary_of(slo=SLO(ttft_s=None, tpot_s=None)))["request_goodput:"] is None
    assert written()["request_goodput:"] is not None


def test_a_table_without_token_times_has_empty_itls_and_null_itl_figures():
    reqs = REQS.drop(columns="token_times_s")
    result = written(reqs, summary_of(reqs))
    assert result["itls"] == [[]] * len(TIMELINES)
    assert result["mean_itl_ms"] is None and result["p99_itl_ms"] is None
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
    # Without the detail (the default, as vLLM without --save-detailed): every key but the per-request lists.
    save_run(tmp_path, ITERATIONS, REQS, summary)
    brief = json.loads((tmp_path / VLLM_RESULT).read_text())
    assert set(brief) == set(expected) - set(DETAILED) and brief["completed"] == 6
    assert brief["mean_ttft_ms"] == on_disk["mean_ttft_ms"]
    assert (tmp_path / SUMMARY).is_file() and on_disk["completed"] == 6
    # The requests table keeps every request's token times.
    back = pd.read_parquet(tmp_path / "requests.parquet")
    assert [list(t) for t in back["token_times_s"]] == [r["tokens"] for r in TIMELINES]
