"""Fixed-duration traces and seeded resampling of the pair pool."""
from collections import Counter

import numpy as np
import pytest

from pagedbench.workloads import WorkloadConfig, build_workload, trace_stats
from pagedbench.workloads.arrivals import arrival_times, arrival_times_within
from pagedbench.workloads.build import draw_order


@pytest.fixture
def sharegpt_path(write_sharegpt):
    return str(write_sharegpt([(4 + (7 * i) % 90, 4 + (13 * i) % 70) for i in range(30)]))


def test_arrivals_within_a_duration_follow_the_rate():
    rng = np.random.default_rng(3)
    times = arrival_times_within(2000.0, "poisson", 5.0, 1.0, rng)
    assert times[0] == 0.0 and all(a <= b for a, b in zip(times, times[1:]))
    assert max(times) < 2000.0
    # 10,000 expected; Poisson's standard deviation is 100.
    assert abs(len(times) - 10_000) < 400


def test_arrivals_within_a_duration_extend_the_fixed_count_process():
    # The same stream: the first arrivals of a duration trace are the fixed-count trace's arrivals.
    within = arrival_times_within(100.0, "gamma", 3.0, 0.5, np.random.default_rng(7))
    counted = arrival_times(len(within), "gamma", 3.0, 0.5, np.random.default_rng(7))
    assert within[:20] == pytest.approx(counted[:20])


def test_draw_order_uses_every_pair_before_repeating_one():
    pool = np.arange(100, 110)
    order = draw_order(pool, 35, np.random.default_rng(0))
    assert len(order) == 35
    for start in (0, 10, 20):
        assert sorted(order[start:start + 10].tolist()) == pool.tolist()   # each round is a permutation
    assert Counter(order.tolist()).most_common(1)[0][1] == 4                 # 3 whole rounds + 5 draws
    assert order[:10].tolist() != order[10:20].tolist()                      # a fresh permutation each round
    assert order[:10].tolist() == np.random.default_rng(0).permutation(pool).tolist()


def test_a_duration_trace_resamples_the_pool_and_says_so(sharegpt_path):
    cfg = WorkloadConfig(name="sharegpt", path=sharegpt_path, arrival="poisson", request_rate=2.0,
                         duration_s=60.0, seed=4)
    trace = build_workload(cfg)
    assert 80 < len(trace) < 170 and max(r.arrival_s for r in trace) < 60.0
    stats = trace_stats(trace)
    assert stats["count"] == len(trace)
    assert stats["distinct_pairs"] == 30                      # the whole pool of 30 pairs, reused
    assert [r.id for r in trace] == list(range(len(trace)))
    assert build_workload(cfg) == trace                       # seeded: the same trace again
    other = build_workload(WorkloadConfig(name="sharegpt", path=sharegpt_path, arrival="poisson",
                                          request_rate=2.0, duration_s=60.0, seed=5))
    assert [r.pair_index for r in other] != [r.pair_index for r in trace]


def test_the_first_draws_do_not_depend_on_the_trace_length(sharegpt_path):
    short = build_workload(WorkloadConfig(name="sharegpt", path=sharegpt_path, num_requests=20))
    long = build_workload(WorkloadConfig(name="sharegpt", path=sharegpt_path, arrival="poisson",
                                         request_rate=3.0, duration_s=40.0))
    assert [r.pair_index for r in long[:20]] == [r.pair_index for r in short]


def test_a_count_above_the_pool_is_drawn_again_from_it(sharegpt_path):
    trace = build_workload(WorkloadConfig(name="sharegpt", path=sharegpt_path, num_requests=75))
    assert len(trace) == 75 and trace_stats(trace)["distinct_pairs"] == 30


def test_synthetic_duration_traces_draw_one_pair_per_arrival():
    trace = build_workload(WorkloadConfig(name="synthetic", arrival="poisson", request_rate=4.0, duration_s=30.0))
    assert trace_stats(trace)["distinct_pairs"] == len(trace)


@pytest.mark.parametrize("kwargs, message", [
    (dict(duration_s=60.0), "needs arrivals over time"),
    (dict(arrival="poisson", request_rate=1.0, duration_s=0), "duration_s must be"),
    (dict(arrival="poisson", request_rate=1.0, duration_s=float("inf")), "duration_s must be"),
    (dict(arrival="poisson", request_rate=1.0, duration_s="1h"), "duration_s must be"),
])
def test_bad_durations_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WorkloadConfig(name="synthetic", **kwargs)
