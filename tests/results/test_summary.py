"""Summary metrics: the steady window's boundaries, one duration weighting, window latency and SLOs."""
import math

import pandas as pd
import pytest

from pagedbench.engines.kv.memory_split import CATEGORIES
from pagedbench.results.record.summary import SLO, slo_met, steady_window, summarize


def requests_table(rows):
    """rows: (arrival, admitted, first token, finish, prompt, output, status)."""
    df = pd.DataFrame(rows, columns=["arrival_s", "admitted_s", "first_token_s", "finish_s", "prompt_len",
                                     "output_len", "status"])
    df.insert(0, "id", range(len(df)))
    df["preemptions"] = 0
    df["rejected_reason"] = pd.Series([None] * len(df), dtype="string")
    return df


def iterations_table(rows, capacity=100):
    """rows: (start, duration, decode seqs, batch size, token states)."""
    out = []
    for start, duration, decode, batch, tokens in rows:
        out.append(dict(start_s=start, duration_s=duration, prefill_seqs=0 if decode else batch,
                        prefill_tokens=0 if decode else 10, decode_seqs=decode, decode_rows=decode,
                        batch_size=batch, num_held=batch, num_waiting=0, preempted=0, token_states=tokens,
                        reservation=0, internal_fragmentation=0, external_fragmentation=0,
                        free=capacity - tokens))
    df = pd.DataFrame(out)
    df.insert(0, "iteration", range(len(df)))
    df["capacity_slots"] = capacity
    return df


def test_window_runs_from_the_warmup_to_the_last_arrival():
    reqs = requests_table([(0.0, 0.0, 1, 2, 5, 2, "finished"), (100.0, 100, 101, 150, 5, 2, "finished")])
    assert steady_window(reqs, 0.1) == (10.0, 100.0)
    assert steady_window(reqs, 0.0) == (0.0, 100.0)
    with pytest.raises(ValueError):
        steady_window(reqs, 1.0)


def test_offline_window_ends_when_the_queue_empties():
    reqs = requests_table([(0.0, 0.0, 1, 9, 5, 2, "finished"), (0.0, 40.0, 41, 80, 5, 2, "finished"),
                           (0.0, None, None, 0.0, 5, 2, "rejected")])
    assert steady_window(reqs, 0.25) == (10.0, 40.0)


def test_steady_figures_leave_out_the_warmup_and_the_drain():
    # Arrivals over [0, 100]; warm-up 10 s. Iterations: a small batch in the warm-up, a batch of 10 in the
    # window, then a drain of batch 1 after the last arrival that lasts long.
    its = iterations_table([(0.0, 10.0, 2, 2, 20), (10.0, 30.0, 10, 10, 90), (40.0, 60.0, 8, 8, 60),
                            (100.0, 500.0, 1, 1, 5)])
    reqs = requests_table([(0.0, 0.0, 1.0, 5.0, 5, 5, "finished"), (50.0, 50.0, 51.0, 70.0, 5, 5, "finished"),
                           (100.0, 100.0, 101.0, 600.0, 5, 5, "finished")])
    s = summarize(its, reqs, warmup_fraction=0.1, slo=SLO(ttft_s=2.0, tpot_s=10.0))
    # One weighting, by duration, for the batch and the memory split alike.
    assert s["steady_mean_batch_size"] == pytest.approx((10 * 30 + 8 * 60) / 90)
    assert s["steady_mem_token_states"] == pytest.approx((90 * 30 + 60 * 60) / 90 / 100)
    assert s["mean_batch_size"] == pytest.approx((2 * 10 + 10 * 30 + 8 * 60 + 1 * 500) / 600)
    assert sum(s[f"steady_mem_{c}"] for c in CATEGORIES) == pytest.approx(1.0)
    # Throughput over the window's 90 s: tokens of its iterations, requests finishing inside it.
    assert s["steady_output_tokens_per_s"] == pytest.approx(18 / 90)
    assert s["steady_requests_per_s"] == pytest.approx(1 / 90)
    # Latency over the requests arriving in [10, 100]: the second and third, not the first.
    assert s["steady_num_requests"] == 2
    assert s["steady_norm_latency_s_mean"] == pytest.approx((20 / 5 + 500 / 5) / 2)
    assert s["steady_ttft_s_mean"] == pytest.approx(1.0)
    assert s["drain_s"] == pytest.approx(500.0)
    # SLO: TPOT 19/4 = 4.75 s meets 10 s; 499/4 does not.
    assert s["steady_slo_attainment"] == pytest.approx(0.5)
    assert s["steady_goodput_requests_per_s"] == pytest.approx(1 / 90)


def test_slo_counts_unfinished_requests_as_missed_and_needs_both_limits():
    reqs = requests_table([(0.0, 0.0, 0.5, 1.0, 5, 6, "finished"),   # TTFT 0.5, TPOT 0.1
                           (0.0, 0.0, 2.0, 2.5, 5, 6, "finished"),   # TTFT 2.0: missed
                           (0.0, 0.0, 0.5, 9.0, 5, 6, "finished"),   # TPOT 1.7: missed
                           (0.0, 0.0, 0.5, 0.5, 5, 1, "finished"),   # one token: no TPOT
                           (0.0, None, None, 0.0, 5, 6, "rejected")])
    assert slo_met(reqs, SLO(ttft_s=1.0, tpot_s=0.2)).tolist() == [True, False, False, True, False]
    with pytest.raises(ValueError):
        SLO(ttft_s=0)


def test_an_empty_window_gives_nan_not_an_error():
    its = iterations_table([(0.0, 1.0, 1, 1, 10)])
    reqs = requests_table([(0.0, 0.0, 1.0, 1.0, 5, 1, "finished")])
    s = summarize(its, reqs)
    assert s["window_s"] == 0 and math.isnan(s["steady_mean_batch_size"]) and math.isnan(s["steady_mem_free"])
