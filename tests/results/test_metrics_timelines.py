"""Every summary metric against hand-made request timelines and an independent derivation.

The expected values are worked out here with plain loops over the timelines (no summary.py helper), so a
slip in summary.py (a TPOT over output_len, an unweighted mean, a warm-up that starts at t = 0, a steady
throughput counted by arrival, one percentile reported for another) makes a test here fail.
"""
import math

import pandas as pd
import pytest

from pagedbench.engines.run_record import RunRecord
from pagedbench.engines.sequence import Sequence, record_tokens
from pagedbench.results.record.frames import requests_frame
from pagedbench.results.record.summary import SLO, MeasureConfig, summarize
from pagedbench.workloads.request import Request

# Arrivals start at 10 s, not 0, so a warm-up measured from t = 0 is a different window. Token times are the
# end times of the iterations that gave the request a token; a finished request finishes at its last one.
# Dyadic times keep the arithmetic exact.
TIMELINES = [
    dict(arrival=10.0, tokens=[10.5, 10.75, 11.0, 11.625], output_len=4),    # ITL 0.25 0.25 0.625
    dict(arrival=12.0, tokens=[14.5, 14.625], output_len=2),                 # one ITL; TPOT 0.125
    dict(arrival=20.0, tokens=[20.25], output_len=1),                        # one token: no TPOT, no ITL
    dict(arrival=30.0, tokens=[30.125, 30.25, 30.375, 30.5, 31.5, 31.625], output_len=6),   # one 1 s stall
    dict(arrival=40.0, tokens=[40.25, 40.375, 40.5], output_len=3, width=2),  # a group: one time per step
    dict(arrival=50.0, tokens=[], output_len=5, status="rejected", reason="prompt too long"),
    dict(arrival=60.0, tokens=[61.0, 61.25, 65.0], output_len=3),           # finishes in the drain
    dict(arrival=55.0, tokens=[58.0, 58.5], output_len=10, status="running"),   # cut off: not finished
]
WARMUP = 0.2    # window: 10 + 0.2 x (60 - 10) = 20 s to the last arrival, 60 s


def requests_of(timelines) -> pd.DataFrame:
    rows = []
    for i, r in enumerate(timelines):
        status, toks = r.get("status", "finished"), r["tokens"]
        rows.append(dict(id=i, arrival_s=r["arrival"], admitted_s=r["arrival"] if toks else math.nan,
                         first_token_s=toks[0] if toks else math.nan,
                         finish_s=toks[-1] if status == "finished" else math.nan, prompt_len=8 + i,
                         output_len=r["output_len"], width=r.get("width", 1), preemptions=0, swaps=0,
                         status=status, rejected_reason=r.get("reason"), token_times_s=list(toks)))
    df = pd.DataFrame(rows)
    df["rejected_reason"] = df["rejected_reason"].astype("string")
    return df


def iterations_of(rows, capacity=100) -> pd.DataFrame:
    """rows: (start, duration, decode seqs, batch size, unshared slots, allocated slots)."""
    out = [dict(start_s=start, duration_s=dur, prefill_seqs=0 if decode else batch, prefill_tokens=0,
                decode_seqs=decode, decode_rows=decode, batch_size=batch, batch_rows=batch, num_held=batch,
                num_waiting=0, preempted=0, unshared_slots=unshared, allocated_slots=allocated,
                token_states=allocated, reservation=0, internal_fragmentation=0, external_fragmentation=0,
                free=capacity - allocated)
           for start, dur, decode, batch, unshared, allocated in rows]
    df = pd.DataFrame(out)
    df.insert(0, "iteration", range(len(df)))
    df["capacity_slots"] = capacity
    return df


# Iterations inside and outside the window [20, 60); durations differ so that weighting by them matters.
ITERATIONS = iterations_of([(10.0, 2.0, 1, 1, 40, 40), (20.0, 1.0, 4, 4, 100, 20), (21.0, 9.0, 2, 2, 100, 100),
                            (30.0, 1.0, 0, 3, 60, 60), (40.0, 5.0, 5, 5, 80, 40), (60.0, 5.0, 1, 1, 10, 10)])


# ---- the independent derivation: plain loops over TIMELINES ----

def finished(timelines):
    return [r for r in timelines if r.get("status", "finished") == "finished"]


def per_request(r) -> dict:
    toks, n = r["tokens"], r["output_len"]
    return dict(ttft=toks[0] - r["arrival"],
                tpot=(toks[-1] - toks[0]) / (n - 1) if n > 1 else None,
                itls=[b - a for a, b in zip(toks, toks[1:])],
                e2e=toks[-1] - r["arrival"],
                norm=(toks[-1] - r["arrival"]) / n)


def values(timelines, metric) -> list[float]:
    out = []
    for r in finished(timelines):
        m = per_request(r)
        if metric == "itl":
            out += m["itls"]
        elif m[metric] is not None:
            out.append(m[metric])
    return out


def percentile(xs, p):
    """Linear interpolation between the closest ranks (numpy's default), by hand."""
    xs = sorted(xs)
    rank = (len(xs) - 1) * p / 100
    lo, hi = math.floor(rank), math.ceil(rank)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def meets(r, bounds) -> bool:
    if r.get("status", "finished") != "finished":
        return False
    m = per_request(r)
    checks = {"ttft_s": m["ttft"], "tpot_s": m["tpot"] if m["tpot"] is not None else 0.0,
              "itl_s": max(m["itls"]) if m["itls"] else 0.0, "e2e_latency_s": m["e2e"]}
    return all(checks[k] <= v for k, v in bounds.items() if v is not None)


KEYS = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": "itl_s", "e2e": "e2e_latency_s", "norm": "norm_latency_s"}
REQS = requests_of(TIMELINES)


def window_arrivals(timelines):
    first = min(r["arrival"] for r in timelines)
    last = max(r["arrival"] for r in timelines)
    start = first + WARMUP * (last - first)
    return start, last, [r for r in timelines if start <= r["arrival"] <= last]


@pytest.mark.parametrize("percentiles", [(50, 90, 95, 99), (10, 99.9), (99, 90)])
@pytest.mark.parametrize("metric", list(KEYS))
def test_whole_run_distributions(metric, percentiles):
    s = summarize(ITERATIONS, REQS, WARMUP, SLO(), percentiles)
    xs = values(TIMELINES, metric)
    key = KEYS[metric]
    assert s[f"{key}_mean"] == pytest.approx(sum(xs) / len(xs))
    for p in percentiles:
        label = str(int(p)) if int(p) == p else str(p)     # p99, p99.9: as vLLM names them
        assert s[f"{key}_p{label}"] == pytest.approx(percentile(xs, p)), (key, p)


def test_tpot_is_over_the_gaps_after_the_first_token_and_itl_pools_every_gap():
    s = summarize(ITERATIONS, REQS, WARMUP)
    # The first request: 3 gaps after its first token, (11.625 - 10.5) / 3; a one-token output has no TPOT.
    tpots = [1.125 / 3, 0.125, 1.5 / 5, 0.25 / 2, 4.0 / 2]
    assert s["tpot_s_mean"] == pytest.approx(sum(tpots) / 5)
    # ITL pools the 11 gaps of the finished requests (not the cut-off one's), so a long output weighs more.
    itls = [0.25, 0.25, 0.625, 0.125, 0.125, 0.125, 0.125, 1.0, 0.125, 0.125, 0.125, 0.25, 3.75]
    assert len(values(TIMELINES, "itl")) == 13 and s["itl_s_mean"] == pytest.approx(sum(itls) / 13)
    assert s["itl_s_mean"] != pytest.approx(s["tpot_s_mean"])


@pytest.mark.parametrize("bounds", [
    dict(ttft_s=0.4, tpot_s=None), dict(ttft_s=None, tpot_s=0.2), dict(ttft_s=None, tpot_s=0.12),
    dict(ttft_s=None, tpot_s=None, itl_s=0.5), dict(ttft_s=None, tpot_s=None, e2e_latency_s=1.5),
    dict(ttft_s=1.0, tpot_s=0.5, itl_s=0.7, e2e_latency_s=2.0), dict(ttft_s=None, tpot_s=None),
], ids=["ttft", "tpot", "tpot-tight", "itl", "e2e", "all", "none"])
def test_slo_attainment_and_goodput_for_each_bound(bounds):
    s = summarize(ITERATIONS, REQS, WARMUP, SLO(**bounds))
    met = [r for r in TIMELINES if meets(r, bounds)]
    makespan = max(r["tokens"][-1] for r in finished(TIMELINES)) - min(r["arrival"] for r in TIMELINES)
    assert s["slo_attainment"] == pytest.approx(len(met) / len(TIMELINES))
    assert s["goodput_requests_per_s"] == pytest.approx(len(met) / makespan)
    start, end, arrived = window_arrivals(TIMELINES)
    met_in = [r for r in arrived if meets(r, bounds)]
    assert s["steady_slo_attainment"] == pytest.approx(len(met_in) / len(arrived))
    assert s["steady_goodput_requests_per_s"] == pytest.approx(len(met_in) / (end - start))


def test_the_bounds_split_the_requests():
    # Each single bound leaves some finished requests in and some out, so a wrong TPOT (over output_len) or
    # ITL (the mean gap, not the largest) would move a request across it.
    met = lambda b: [i for i, r in enumerate(TIMELINES) if meets(r, b)]
    assert met(dict(tpot_s=0.12)) == [2]                # 0.125 each, but over output_len: 0.0625 and 0.083
    assert met(dict(itl_s=0.5)) == [1, 2, 4]            # the 1st and 4th have one long gap each
    assert met(dict(e2e_latency_s=1.5)) == [2, 4]
    assert met(dict(ttft_s=0.4)) == [2, 3, 4]
    assert SLO() == SLO(ttft_s=1.0, tpot_s=0.1, itl_s=None, e2e_latency_s=None)


def test_whole_run_throughput_is_finished_requests_over_first_arrival_to_last_finish():
    s = summarize(ITERATIONS, REQS, WARMUP)
    done = finished(TIMELINES)
    makespan = 65.0 - 10.0
    assert s["makespan_s"] == makespan
    assert s["requests_per_s"] == pytest.approx(len(done) / makespan)
    out_tokens = sum(r["output_len"] * r.get("width", 1) for r in done)     # every row of a group
    assert s["output_tokens_per_s"] == pytest.approx(out_tokens / makespan)
    prompt_tokens = sum(8 + i for i, r in enumerate(TIMELINES) if r in done)
    assert s["total_tokens_per_s"] == pytest.approx((out_tokens + prompt_tokens) / makespan)
    assert (s["num_requests"], s["num_finished"], s["num_rejected"]) == (8, 6, 1)


def test_the_warmup_is_a_share_of_the_span_from_the_first_arrival():
    s = summarize(ITERATIONS, REQS, WARMUP)
    start, end, arrived = window_arrivals(TIMELINES)
    assert (start, end) == (20.0, 60.0)
    assert (s["window_start_s"], s["window_end_s"], s["window_s"]) == (20.0, 60.0, 40.0)
    assert s["steady_num_requests"] == len(arrived) == 6      # the rejected and the cut-off one too


def test_steady_throughput_counts_the_requests_that_finish_in_the_window():
    s = summarize(ITERATIONS, REQS, WARMUP)
    start, end, arrived = window_arrivals(TIMELINES)
    finishing = [r for r in finished(TIMELINES) if start <= r["tokens"][-1] < end]
    assert len(finishing) == 3 and len([r for r in arrived if r in finished(TIMELINES)]) == 4
    assert s["steady_requests_per_s"] == pytest.approx(len(finishing) / (end - start))
    # Output tokens: every row the window's iterations ran (iterations starting in [20, 60)).
    rows = sum(b for st, b in zip(ITERATIONS["start_s"], ITERATIONS["batch_rows"]) if start <= st < end)
    assert s["steady_output_tokens_per_s"] == pytest.approx(rows / (end - start))


@pytest.mark.parametrize("metric", list(KEYS))
def test_steady_latency_is_over_the_requests_arriving_in_the_window(metric):
    s = summarize(ITERATIONS, REQS, WARMUP, percentiles=(50, 90, 99))
    _, _, arrived = window_arrivals(TIMELINES)
    xs = values(arrived, metric)
    key = KEYS[metric]
    assert s[f"steady_{key}_mean"] == pytest.approx(sum(xs) / len(xs))
    for p in (50, 90, 99):
        assert s[f"steady_{key}_p{p}"] == pytest.approx(percentile(xs, p)), (key, p)


def test_memory_saving_and_batch_size_are_weighted_by_iteration_duration():
    s = summarize(ITERATIONS, REQS, WARMUP)
    its = list(ITERATIONS.itertuples())
    weighted = 1 - sum(i.allocated_slots * i.duration_s for i in its) / sum(i.unshared_slots * i.duration_s
                                                                              for i in its)
    # Unweighted, as a ratio of sums or a mean of ratios: both differ from the weighted figure here.
    of_sums = 1 - sum(i.allocated_slots for i in its) / sum(i.unshared_slots for i in its)
    of_ratios = sum(1 - i.allocated_slots / i.unshared_slots for i in its) / len(its)
    assert min(abs(weighted - of_sums), abs(weighted - of_ratios)) > 0.03
    assert s["memory_saving"] == pytest.approx(weighted)
    steady = [i for i in its if 20.0 <= i.start_s < 60.0]
    assert s["steady_memory_saving"] == pytest.approx(
        1 - sum(i.allocated_slots * i.duration_s for i in steady) / sum(i.unshared_slots * i.duration_s
                                                                          for i in steady))
    # Batch size over decode iterations only (the third has none), weighted by duration.
    decode = [i for i in its if i.decode_seqs > 0]
    mean = sum(i.batch_size * i.duration_s for i in decode) / sum(i.duration_s for i in decode)
    assert abs(mean - sum(i.batch_size for i in decode) / len(decode)) > 0.1
    assert s["mean_batch_size"] == pytest.approx(mean)
    steady_decode = [i for i in decode if 20.0 <= i.start_s < 60.0]
    assert s["steady_mean_batch_size"] == pytest.approx(
        sum(i.batch_size * i.duration_s for i in steady_decode) / sum(i.duration_s for i in steady_decode))


def test_a_table_without_token_times_has_no_itl_and_refuses_an_itl_bound():
    reqs = REQS.drop(columns="token_times_s")
    s = summarize(ITERATIONS, reqs, WARMUP)
    assert math.isnan(s["itl_s_mean"]) and math.isnan(s["steady_itl_s_p99"])
    assert s["ttft_s_mean"] == summarize(ITERATIONS, REQS, WARMUP)["ttft_s_mean"]
    with pytest.raises(ValueError, match="token_times_s"):
        summarize(ITERATIONS, reqs, WARMUP, SLO(itl_s=0.5))


def test_measure_config_checks_percentiles_and_bounds():
    m = MeasureConfig.from_dict({"percentiles": [50, 99.9], "slo": {"itl_s": 0.2, "tpot_s": None}})
    assert m.percentiles == (50, 99.9) and m.slo == SLO(ttft_s=1.0, tpot_s=None, itl_s=0.2)
    assert MeasureConfig().percentiles == (50, 90, 95, 99)
    for bad in ([], [50, 50], [101], ["p99"], [True]):
        with pytest.raises(ValueError, match="percentiles"):
            MeasureConfig.from_dict({"percentiles": bad})
    with pytest.raises(ValueError, match="e2e_latency_s"):
        MeasureConfig.from_dict({"slo": {"e2e_latency_s": 0}})
    with pytest.raises(ValueError, match="valid keys"):
        MeasureConfig.from_dict({"slo": {"e2el": 1.0}})


def test_the_requests_table_keeps_one_time_per_step_and_a_group_steps_its_rows_together():
    single = Sequence(Request(0, 0.0, (1, 2, 3), output_len=3))
    group = Sequence(Request(1, 0.5, (1, 2, 3), output_len=2, n=4))     # 4 rows, one time per step
    assert [s.id for s in record_tokens([single, group], 1.0)] == []
    assert [s.id for s in record_tokens([single, group], 1.5)] == [1]
    assert [s.id for s in record_tokens([single], 2.25)] == [0]
    df = requests_frame(RunRecord(capacity_slots=10, sequences=[group, single]))
    assert df["token_times_s"].tolist() == [[1.0, 1.5, 2.25], [1.0, 1.5]]
    assert df["first_token_s"].tolist() == [1.0, 1.0] and df["finish_s"].tolist() == [2.25, 1.5]
    assert df["width"].tolist() == [1, 4]
