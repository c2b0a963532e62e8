"""The summary at its edges: a window shorter than a second, an empty window, times on the window's bounds,
tables recorded before a column existed, runs with no request, and an offline trace nobody was admitted in."""
import math

import pytest

from pagedbench.results.record.summary import steady_window, summarize
from tests.results.test_metrics_timelines import iterations_of, requests_of

# Arrivals 10.0 to 10.5 s: a window of 0.4 s after a warm-up of 0.2.
SHORT = [dict(arrival=10.0, tokens=[10.1, 10.2], output_len=2),
         dict(arrival=10.25, tokens=[10.3, 10.35], output_len=2),
         dict(arrival=10.5, tokens=[10.6, 10.7], output_len=2)]
SHORT_ITS = iterations_of([(10.0, 0.25, 1, 1, 10, 10), (10.25, 0.25, 2, 2, 20, 10), (10.5, 0.25, 1, 1, 10, 10)])
NO_ITERATIONS = SHORT_ITS.iloc[0:0]      # a peer's run


def test_a_window_shorter_than_a_second_still_has_its_figures():
    s = summarize(SHORT_ITS, requests_of(SHORT), 0.2)
    assert (s["window_start_s"], s["window_end_s"]) == pytest.approx((10.1, 10.5))
    # Finished in [10.1, 10.5): the first (10.2) and second (10.35); iterations starting in it: the second
    # (2 rows).
    assert s["steady_requests_per_s"] == pytest.approx(2 / 0.4)
    assert s["steady_output_tokens_per_s"] == pytest.approx(2 / 0.4)
    assert s["steady_memory_saving"] == pytest.approx(0.5)
    assert s["steady_mean_batch_size"] == pytest.approx(2.0)
    assert s["steady_mem_token_states"] == pytest.approx(0.1)
    # The run was busy for 0.75 s, the makespan 0.7 s: rates over spans under a second.
    assert s["requests_per_s"] == pytest.approx(3 / 0.7)
    its = SHORT_ITS.assign(num_waiting=[1, 0, 0])
    assert summarize(its, requests_of(SHORT), 0.2)["waiting_time_fraction"] == pytest.approx(0.25 / 0.75)


def test_an_empty_window_has_no_steady_figures():
    # Everything arrives at t = 10 and is admitted at once: the window [10, 10] is empty.
    same = [dict(arrival=10.0, tokens=[10.5, 11.0], output_len=2), dict(arrival=10.0, tokens=[10.5], output_len=1)]
    s = summarize(iterations_of([(10.0, 0.5, 2, 2, 10, 10), (10.5, 0.5, 1, 1, 5, 5)]), requests_of(same), 0.1)
    assert s["window_s"] == 0.0
    for key in ("steady_requests_per_s", "steady_output_tokens_per_s", "steady_memory_saving",
                "steady_mean_batch_size", "steady_mem_token_states", "steady_goodput_requests_per_s"):
        assert isinstance(s[key], float) and math.isnan(s[key]), key


def test_times_on_the_windows_bounds():
    # Window [20, 60): a finish at exactly 20 counts, one at exactly 60 does not.
    timelines = [dict(arrival=10.0, tokens=[15.0, 20.0], output_len=2),
                 dict(arrival=30.0, tokens=[59.0, 60.0], output_len=2),
                 dict(arrival=60.0, tokens=[61.0], output_len=1)]
    s = summarize(iterations_of([(10.0, 1.0, 1, 1, 10, 10)]), requests_of(timelines), 0.2)
    assert (s["window_start_s"], s["window_end_s"]) == (20.0, 60.0)
    assert s["steady_requests_per_s"] == pytest.approx(1 / 40)
    # A peer's tokens (no iteration rows) in [20, 60): 20.0 and 59.0, not 15.0, 60.0 or 61.0.
    peer = summarize(NO_ITERATIONS, requests_of(timelines), 0.2)
    assert peer["steady_output_tokens_per_s"] == pytest.approx(2 / 40)


def test_an_iterations_table_recorded_before_batch_rows_counts_batch_size():
    its = SHORT_ITS.drop(columns=["batch_rows"])
    assert summarize(its, requests_of(SHORT), 0.2)["steady_output_tokens_per_s"] == pytest.approx(2 / 0.4)


def test_a_run_of_no_request():
    s = summarize(NO_ITERATIONS, requests_of(SHORT).iloc[0:0], 0.1)
    assert (s["num_requests"], s["num_finished"], s["makespan_s"]) == (0, 0, 0.0)
    for key in ("requests_per_s", "slo_attainment", "drain_s", "goodput_requests_per_s"):
        assert math.isnan(s[key]), key
    assert steady_window(requests_of(SHORT).iloc[0:0]) == (0.0, 0.0)


def test_an_offline_trace_nobody_was_admitted_in_has_an_empty_window_at_its_arrival():
    rejected = [dict(arrival=5.0, tokens=[], output_len=3, status="rejected", reason="too long")] * 2
    assert steady_window(requests_of(rejected)) == (5.0, 5.0)
    s = summarize(NO_ITERATIONS, requests_of(rejected), 0.1)
    assert s["num_rejected"] == 2 and s["slo_attainment"] == 0.0 and math.isnan(s["drain_s"])
    assert s["makespan_s"] == 0.0
