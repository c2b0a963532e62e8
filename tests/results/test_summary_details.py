"""The summary's details, each against a small hand-made input: the exact bounds `measure:` accepts, bounds of
an SLO that hold with equality, requests that do not finish, what a helper returns when it has nothing to
average, tables recorded before a column existed, groups whose rows outnumber their sequences, and rates over
spans shorter than a second."""
import math
import warnings

import numpy as np
import pandas as pd
import pytest

from pagedbench.engines.config import PagedEngineConfig
from pagedbench.results.record.summary import (PERCENTILES, SLO, SLO_BOUNDS, MeasureConfig, RunSetting, TokenGaps,
                                    build_summary, distribution, latency, memory_saving, output_tokens,
                                    request_latencies, slo_met, summarize)
from tests.results.test_metrics_timelines import ITERATIONS, REQS, TIMELINES, WARMUP, iterations_of, requests_of
from tests.results.test_summary_edges import SHORT, SHORT_ITS
from tests.results.test_summary_keys import SETTING, workload

LATENCY_METRICS = ("norm_latency_s", "ttft_s", "tpot_s", "itl_s", "e2e_latency_s")


# ---- what `measure:` accepts ----

@pytest.mark.parametrize("bound", SLO_BOUNDS)
def test_an_slo_bound_of_true_is_refused_not_read_as_one_second(bound):
    with pytest.raises(ValueError, match=f"slo.{bound}"):
        SLO(**{bound: True})


@pytest.mark.parametrize("w", [0, 0.0, 0.5, 0.999])
def test_a_warmup_fraction_in_zero_to_one_is_accepted(w):
    assert MeasureConfig(warmup_fraction=w).warmup_fraction == w


@pytest.mark.parametrize("w", [1, 1.0, 1.5, -0.1, True, False, "0.1"])
def test_a_warmup_fraction_outside_zero_to_one_or_not_a_number_is_refused(w):
    with pytest.raises(ValueError, match="warmup_fraction"):
        MeasureConfig(warmup_fraction=w)


@pytest.mark.parametrize("ps", [(0, 100), (0.5, 99.9), (100,), (0,)])
def test_percentiles_from_zero_to_a_hundred_inclusive_are_accepted(ps):
    assert MeasureConfig(percentiles=ps).percentiles == ps


@pytest.mark.parametrize("ps", [(-1,), (100.5,), (50, True)])
def test_percentiles_outside_zero_to_a_hundred_are_refused(ps):
    with pytest.raises(ValueError, match="percentiles"):
        MeasureConfig(percentiles=ps)


def test_an_unknown_measure_key_is_named_in_the_error():
    with pytest.raises(ValueError, match=r"unknown measure key\(s\) \['warmup'\]"):
        MeasureConfig.from_dict({"warmup": 0.1})


# ---- distributions and the helpers behind the whole-run figures ----

def test_a_distribution_is_computed_in_float64_whatever_the_input():
    # 2^24 + 1 is not a float32: averaged in float32 the half would be lost.
    d = distribution(np.array([2.0 ** 24, 1.0], dtype=np.float32), "x", (50,))
    assert d == {"x_mean": 8388608.5, "x_p50": 8388608.5}


def test_a_distribution_of_nothing_is_nan_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # numpy warns on the mean of an empty array
        d = distribution([math.nan], "x", (50, 99))
    assert list(d) == ["x_mean", "x_p50", "x_p99"] and all(math.isnan(v) for v in d.values())


def test_the_latency_keys_without_a_prefix():
    lat = request_latencies(REQS, TokenGaps.of_table(REQS))
    out = latency(lat, np.array([0.25, 0.75]))
    expected = {f"{m}_{stat}" for m in LATENCY_METRICS for stat in ["mean", *(f"p{p}" for p in PERCENTILES)]}
    assert set(out) == expected
    assert out["itl_s_mean"] == 0.5


def test_a_requests_table_recorded_before_the_width_column_counts_one_row_per_request():
    reqs = requests_of(SHORT).drop(columns=["width"])
    assert output_tokens(reqs) == 2 + 2 + 2
    assert output_tokens(requests_of(SHORT).assign(width=[1, 3, 2])) == 2 + 6 + 4
    # Makespan 10.0 to 10.7 s.
    assert summarize(SHORT_ITS, reqs, 0.2)["output_tokens_per_s"] == pytest.approx(6 / 0.7)


def test_memory_saving_over_less_than_one_slot_second():
    # 2 unshared slots, 1 allocated, for a quarter of a second: 0.5 and 0.25 slot-seconds, half saved.
    assert memory_saving(iterations_of([(10.0, 0.25, 1, 1, 2, 1)])) == pytest.approx(0.5)


def test_memory_saving_is_nan_when_no_slot_was_needed():
    assert math.isnan(memory_saving(iterations_of([(10.0, 1.0, 1, 1, 0, 0), (11.0, 2.0, 1, 1, 0, 0)])))


def test_each_requests_largest_itl_is_a_float_and_nan_without_a_gap():
    largest = TokenGaps.of_table(REQS).largest()
    assert largest.dtype == np.float64
    # The one-token request (2) and the rejected one (5) have no gap; the cut-off one (7) has 58.0 -> 58.5.
    np.testing.assert_array_equal(largest, [0.625, 0.125, math.nan, 1.0, 0.125, math.nan, 3.75, 0.5])


@pytest.mark.parametrize("seed", range(6))
def test_the_pooled_gaps_are_each_requests_consecutive_differences_in_table_order(seed):
    """`TokenGaps.of_table` against its definition, on tables with requests of no, one and many token times
    (first and last included): the same floats, in order, each with its request's row."""
    rng = np.random.default_rng(seed)
    lengths = rng.choice([0, 0, 1, 2, 5, 40], size=int(rng.integers(1, 30)))
    times = [np.cumsum(rng.exponential(0.1, n)).tolist() for n in lengths]
    table = pd.DataFrame({"token_times_s": times})
    gaps = TokenGaps.of_table(table)
    want = [(b - a, row) for row, ts in enumerate(times) for a, b in zip(ts, ts[1:])]
    assert gaps.itl_s.tolist() == [g for g, _ in want] and gaps.owner.tolist() == [r for _, r in want]
    assert gaps.owner.dtype == np.int32 and gaps.num_requests == len(times)


@pytest.mark.parametrize("nan", [False, True])
def test_a_distribution_partitioned_in_place_is_the_distribution_of_a_copy(nan):
    """`scratch`: the same figures to the bit (the mean taken before the values are reordered)."""
    values = np.random.default_rng(1).lognormal(size=10_001)
    if nan:
        values[::7] = math.nan
    ps = (0, 1, 50, 90, 99, 99.9, 100)
    want = distribution(values.copy(), "x", ps)
    mine = values.copy()
    assert distribution(mine, "x", ps, scratch=True) == want
    assert nan or not np.array_equal(mine, values)          # reordered in place when it holds no NaN
    kept = values.copy()
    distribution(kept, "x", ps)
    np.testing.assert_array_equal(kept, values)            # without `scratch`, left as it was


def test_a_one_token_output_has_no_tpot_even_when_it_finishes_after_its_token():
    # A peer's stream can send two chunks for one token: the finish is the last chunk, after the first token.
    reqs = requests_of([dict(arrival=0.0, tokens=[0.5, 0.75], output_len=1),
                        dict(arrival=0.0, tokens=[0.5, 0.75], output_len=2)])
    lat = request_latencies(reqs)
    assert math.isnan(lat["tpot_s"][0]) and lat["tpot_s"][1] == 0.25
    # A one-token output counts as TPOT 0, so it meets any TPOT bound.
    assert slo_met(reqs, SLO(ttft_s=None, tpot_s=0.1)).tolist() == [True, False]


# ---- the SLO ----

# arrival 0, tokens at 0.5, 0.75, 1.0: TTFT 0.5, TPOT 0.25, largest ITL 0.25, end-to-end 1.0, all exact.
ON_THE_BOUND = [dict(arrival=0.0, tokens=[0.5, 0.75, 1.0], output_len=3)]
OWN = {"ttft_s": 0.5, "tpot_s": 0.25, "itl_s": 0.25, "e2e_latency_s": 1.0}


@pytest.mark.parametrize("bound", SLO_BOUNDS)
def test_each_bound_holds_with_equality_and_fails_just_below(bound):
    only = {b: None for b in SLO_BOUNDS}
    reqs = requests_of(ON_THE_BOUND)
    assert slo_met(reqs, SLO(**{**only, bound: OWN[bound]})).tolist() == [True]
    assert slo_met(reqs, SLO(**{**only, bound: OWN[bound] - 0.125})).tolist() == [False]


@pytest.mark.parametrize("status", ["running", "failed"])
def test_a_request_that_did_not_finish_misses_the_slo_however_fast_its_first_token(status):
    # The same tokens (TTFT 0.25 s, a gap of 0.0625 s), once cut off before its 4 tokens, once finished.
    reqs = requests_of([dict(arrival=0.0, tokens=[0.25, 0.3125], output_len=4, status=status),
                        dict(arrival=0.0, tokens=[0.25, 0.3125], output_len=2)])
    assert slo_met(reqs, SLO()).tolist() == [False, True]


def test_slo_met_on_its_own_bounds_the_largest_itl_from_the_token_times():
    # ITL <= 0.5 s: requests 1, 2 and 4 (see test_metrics_timelines); the cut-off one (7) never finished.
    met = slo_met(REQS, SLO(ttft_s=None, tpot_s=None, itl_s=0.5))
    assert met.tolist() == [False, True, True, False, True, False, False, False]


# ---- the steady window and the setting ----

def test_steady_output_tokens_count_every_row_of_a_group():
    # Window [10.1, 10.5): the iteration at 10.25 ran 2 sequences in 5 rows (a group of 4 and one of 1).
    its = SHORT_ITS.assign(batch_rows=[2, 5, 2])
    s = summarize(its, requests_of(SHORT), 0.2)
    assert s["steady_output_tokens_per_s"] == pytest.approx(5 / 0.4)
    assert s["steady_mean_batch_size"] == pytest.approx(2.0)      # sequences, not rows


def test_steady_latencies_report_the_runs_percentiles():
    s = summarize(ITERATIONS, REQS, WARMUP, SLO(), (10, 99.9))
    steady = {k for k in s if k.startswith("steady_") and k.rsplit("_", 1)[0][len("steady_"):] in LATENCY_METRICS}
    assert steady == {f"steady_{m}_{stat}" for m in LATENCY_METRICS for stat in ("mean", "p10", "p99.9")}
    # TTFTs of the finished requests arriving in [20, 60]: 0.25, 0.125, 0.25, 1.0.
    ttfts = sorted(r["tokens"][0] - r["arrival"] for r in TIMELINES[2:5] + TIMELINES[6:7])
    assert ttfts == [0.125, 0.25, 0.25, 1.0]
    assert s["steady_ttft_s_p10"] == pytest.approx(0.125 + 0.3 * (0.25 - 0.125))


def test_a_run_shorter_than_a_second_of_wall_time_has_its_iteration_rate():
    s = build_summary(RunSetting(PagedEngineConfig(), workload(), **SETTING), ITERATIONS, REQS,
                      wall_s=0.5, warmup_fraction=WARMUP, slo=SLO(), after_run={})
    assert s["iterations_per_wall_s"] == 6 / 0.5


def test_slo_met_judges_by_the_latencies_it_is_given():
    """`lat` saves computing the latencies twice: when given, it is what the bounds are checked against."""
    from pagedbench.results.record.summary import TokenGaps, request_latencies

    lat = request_latencies(REQS, TokenGaps.of_table(REQS))
    slo = SLO(ttft_s=None, tpot_s=None, itl_s=0.5)
    assert slo_met(REQS, slo, lat).tolist() == slo_met(REQS, slo).tolist()
    assert not slo_met(REQS, slo, lat.assign(max_itl_s=0.75)).any()
    assert slo_met(REQS, slo, lat.assign(max_itl_s=0.25)).tolist() == (REQS["status"] == "finished").tolist()
