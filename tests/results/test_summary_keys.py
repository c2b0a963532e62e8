"""Every key of a summary.json that is a count, a setting or a ratio of the run's cost, checked one by one
against hand-made tables; and what a peer's summary (no iteration rows) holds in their place."""
import math

import pandas as pd
import pytest

from pagedbench.engines.config import ContiguousEngineConfig, PagedEngineConfig
from pagedbench.results.record.summary import SLO, RunSetting, build_summary, summarize
from tests.results.test_metrics_timelines import ITERATIONS, REQS, TIMELINES, WARMUP, requests_of
from pagedbench.workloads.config import WorkloadConfig

SETTING = dict(model="opt-13b", backend="sim", backend_fields={"hardware": "a100-40gb"}, width=2,
               trace={"count": 7, "distinct_pairs": 5}, experiment="exp", stop_at_last_arrival=True)


def workload():
    return WorkloadConfig.from_dict({"name": "synthetic", "arrival": "gamma", "request_rate": 3.0,
                                     "burstiness": 0.5, "duration_s": 60.0, "seed": 4})


def costly_iterations() -> pd.DataFrame:
    """ITERATIONS with preemptions, swaps, copies, waiting requests and distinct batch sizes."""
    its = ITERATIONS.copy()
    its["preempted"] = [0, 2, 0, 1, 0, 0]
    its["swapped_out"] = [0, 1, 0, 1, 0, 0]
    its["swapped_in"] = [0, 0, 1, 0, 1, 0]
    its["swap_blocks"] = [0, 3, 4, 0, 5, 0]
    its["copy_tokens"] = [7, 0, 0, 11, 0, 0]
    its["num_waiting"] = [0, 1, 0, 2, 0, 0]   # waiting during iterations of 1 s and 1 s
    its["admission_blocked_by"] = ["", "memory", "", "max_num_seqs", "", ""]
    return its


def test_the_setting_keys_are_the_settings():
    s = build_summary(RunSetting(PagedEngineConfig(block_size=32, preemption="swap"), workload(), **SETTING),
                      costly_iterations(), REQS, wall_s=4.0, warmup_fraction=WARMUP, slo=SLO(), after_run={"x": 1})
    expected = {"engine": "paged", "block_size": 32, "preemption": "swap", "width": 2, "workload": "synthetic",
                "model": "opt-13b", "backend": "sim", "hardware": "a100-40gb", "arrival": "gamma",
                "request_rate": 3.0, "burstiness": 0.5, "workload_seed": 4, "duration_s": 60.0, "trace_draws": 7,
                "trace_distinct_pairs": 5, "experiment": "exp", "stopped_at_last_arrival": True, "wall_s": 4.0,
                "iterations_per_wall_s": 6 / 4.0, "x": 1, "slo_ttft_s": 1.0, "slo_tpot_s": 0.1,
                "slo_itl_s": None, "slo_e2e_latency_s": None}
    assert {k: s[k] for k in expected} == expected


@pytest.mark.parametrize("engine", [ContiguousEngineConfig("orca", reservation="pow2"), ContiguousEngineConfig("static")])
def test_contiguous_engines_have_no_block_size_or_preemption(engine):
    s = build_summary(RunSetting(engine, workload(), **SETTING), costly_iterations(), REQS, 4.0, WARMUP, SLO(), {})
    assert (s["engine"], s["block_size"], s["preemption"]) == (engine.label, None, None)


def test_a_peers_setting_names_the_peer_and_no_block_size():
    s = build_summary(RunSetting(PagedEngineConfig(), workload(), **SETTING, peer="http (m)"),
                      costly_iterations(), REQS, 4.0, WARMUP, SLO(), {})
    assert (s["engine"], s["block_size"], s["preemption"]) == ("http (m)", None, None)


def test_an_instant_run_has_no_iteration_rate():
    s = build_summary(RunSetting(PagedEngineConfig(), workload(), **SETTING), costly_iterations(), REQS,
                      wall_s=0.0, warmup_fraction=WARMUP, slo=SLO(), after_run={})
    assert s["iterations_per_wall_s"] is None


def test_the_counts_of_the_iterations():
    s = summarize(costly_iterations(), REQS, WARMUP)
    assert (s["num_iterations"], s["num_preemptions"], s["kv_capacity_slots"], s["max_batch_size"]) == (6, 3, 100, 5)
    assert (s["num_swap_outs"], s["num_swapped_blocks"], s["num_copied_tokens"]) == (2, 12, 18)
    assert (s["num_requests"], s["num_finished"], s["num_rejected"], s["num_failed"]) == (8, 6, 1, 0)
    # Requests waited during 2 of the run's 23 busy seconds; the split while waiting is over those two.
    assert s["waiting_time_fraction"] == pytest.approx(2 / 23)
    assert s["mem_waiting_token_states"] == pytest.approx((20 * 1 + 60 * 1) / 2 / 100)
    assert s["mem_waiting_free"] == pytest.approx((80 * 1 + 40 * 1) / 2 / 100)
    assert s["mem_token_states"] == pytest.approx((40 * 2 + 20 + 100 * 9 + 60 + 40 * 5 + 10 * 5) / 23 / 100)


def test_attainment_and_drain():
    s = summarize(costly_iterations(), REQS, WARMUP)
    # Met with the default SLO (TTFT <= 1 s, TPOT <= 0.1 s): request 2 alone of the eight (its one token has
    # no TPOT); the others' TPOTs are 0.375, 0.125, 0.3, 0.125 and 2 s, or their TTFT 2.5 s.
    assert s["slo_attainment"] == pytest.approx(1 / 8)
    assert s["drain_s"] == pytest.approx(65.0 - 60.0)   # last finish - the window's end (the last arrival)
    assert s["makespan_s"] == pytest.approx(65.0 - 10.0)


def test_failed_requests_are_counted_apart_from_rejected_ones():
    timelines = [*TIMELINES, dict(arrival=61.0, tokens=[61.5], output_len=4, status="failed", reason="HTTP 500")]
    s = summarize(ITERATIONS, requests_of(timelines), WARMUP)
    assert (s["num_requests"], s["num_finished"], s["num_rejected"], s["num_failed"]) == (9, 6, 1, 1)


def test_a_peers_run_without_iteration_rows():
    empty = ITERATIONS.iloc[0:0]
    s = summarize(empty, REQS, WARMUP)
    assert (s["num_iterations"], s["num_preemptions"], s["kv_capacity_slots"]) == (0, 0, 0)
    assert s["max_batch_size"] is None
    for key in ("mean_batch_size", "memory_saving", "mem_token_states", "mem_waiting_free", "waiting_time_fraction"):
        assert math.isnan(s[key]), key
    # Steady output tokens from the token times in the window [20, 60), every row of a group counted:
    # request 2 (1 token at 20.25), request 3 (6), request 4 (3 steps x 2 rows); request 7 was cut off at 58.0
    # and 58.5 (2).
    assert s["window_start_s"] == 20.0 and s["window_end_s"] == 60.0
    assert s["steady_output_tokens_per_s"] == pytest.approx((1 + 6 + 3 * 2 + 2) / 40.0)
    # Whole-run throughput and latencies do not need iteration rows.
    assert s["output_tokens_per_s"] == summarize(ITERATIONS, REQS, WARMUP)["output_tokens_per_s"]
