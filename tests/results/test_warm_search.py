"""A warm rate search (results/sweeps/rate_search.py) ends where the cold one does, in fewer runs.

On a curve monotone in the rate (met up to a knee, failed past it) a search
started from a hint must report the cold search's capacity, bound and upper
end exactly, whatever the hint; with the hint in the final bracket it takes
two runs. On a curve that is not monotone it must still end, with both ends
of its bracket measured and judged as it reports them. Without a hint the
search must probe exactly what the search before the warm start did (a copy
of that code below).
"""
from __future__ import annotations

import random

import pytest

from hydra_plugins.pagedbench_capacity.capacity_sweeper import warm_neighbours
from pagedbench.results.sweeps.rate_search import RateSearch

SETTINGS = dict(start=1.0, growth=2.0, min_rate=0.01, max_rate=1000.0)


def drive(passes, **kwargs) -> tuple[RateSearch, list[float]]:
    """A search run to its end with `passes(rate) -> bool`, and the rates it measured, in order."""
    s = RateSearch(**kwargs)
    probed = []
    while rates := s.next_rates():
        for rate in rates:
            probed.append(rate)
            s.record(rate, passes(rate))
        assert len(probed) < 200, probed
    return s, probed


def cold_before_warm_starts(passes, start, growth, precision, min_rate, max_rate) -> tuple[list[float], tuple]:
    """The search as it was before warm starts: the rates it probed and (capacity, bound, upper)."""
    outcomes: dict[float, bool] = {}

    def snap(rate):
        return min(max(float(f"{rate:.4g}"), min_rate), max_rate)

    def bracket():
        failed = [r for r, ok in outcomes.items() if not ok]
        hi = min(failed) if failed else None
        passed = [r for r, ok in outcomes.items() if ok and (hi is None or r < hi)]
        return (max(passed) if passed else None), hi

    probed = []
    while True:
        lo, hi = bracket()
        if lo is None and hi is None:
            rate = start
        elif hi is None:
            rate = min(lo * growth, max_rate)
        elif lo is None:
            rate = max(hi / growth, min_rate)
        elif (hi - lo) / lo <= precision:
            break
        else:
            rate = (lo + hi) / 2
        rate = snap(rate)
        if rate in outcomes:
            break
        probed.append(rate)
        outcomes[rate] = passes(rate)
    lo, hi = bracket()
    found = (hi, "<", hi) if lo is None else (lo, ">=", None) if hi is None else (lo, "=", hi)
    return probed, found


def found(s: RateSearch) -> tuple:
    r = s.result()
    return r["capacity"], r["bound"], r["upper"]


def knees(n: int, seed: int):
    rng = random.Random(seed)
    for _ in range(n):
        knee = 10 ** rng.uniform(-2.5, 3.5)   # past either end of [min_rate, max_rate] now and then
        precision = rng.choice([0.5, 0.1, 0.05, 0.02, 0.01, 0.003])
        yield rng, knee, precision


def test_without_a_hint_the_search_probes_what_it_did_before_warm_starts():
    for rng, knee, precision in knees(3000, 1):
        noise = {}

        def passes(rate):   # monotone for half the curves, bumpy near the knee for the rest
            if rate not in noise:
                noise[rate] = rate <= knee * (rng.uniform(0.9, 1.1) if knee > 1 else 1.0)
            return noise[rate]

        s, probed = drive(passes, precision=precision, **SETTINGS)
        before, before_found = cold_before_warm_starts(lambda rate: noise[rate] if rate in noise else passes(rate),
                                                       precision=precision, **SETTINGS)
        assert probed == before and found(s) == before_found, (knee, precision)
        assert s.result()["done"] and s.result()["probes"] == len(probed)


@pytest.mark.parametrize("seed", range(4))
def test_on_a_monotone_curve_a_warm_search_ends_on_the_cold_searchs_bracket(seed):
    for rng, knee, precision in knees(1500, 10 + seed):
        hint = knee * rng.uniform(0.7, 1.3) if rng.random() < 0.8 else 10 ** rng.uniform(-2.5, 3.5)
        cold, cold_probed = drive(lambda rate: rate <= knee, precision=precision, **SETTINGS)
        warm, warm_probed = drive(lambda rate: rate <= knee, precision=precision, hint=hint, **SETTINGS)
        assert found(warm) == found(cold), (knee, hint, precision, cold_probed, warm_probed)
        assert warm.result()["done"] and len(set(warm_probed)) == len(warm_probed)
        capacity, _, upper = found(warm)
        for end in (capacity, upper):   # the ends it reports are runs, so the run at the capacity can be read
            assert end is None or end in warm.outcomes


@pytest.mark.parametrize("off, most", [(0.02, 0.35), (0.05, 0.5), (0.1, 0.75)])
def test_a_hint_near_the_capacity_saves_most_runs(off, most):
    """Hints within `off` (relative) of the knee, at 2% precision: the warm searches' runs, all told, at most
    `most` of the cold searches'."""
    cold_runs = warm_runs = 0
    for rng, knee, _ in knees(1000, 5):
        knee = 10 ** rng.uniform(-1, 2.5)
        cold, cold_probed = drive(lambda rate: rate <= knee, precision=0.02, **SETTINGS)
        warm, warm_probed = drive(lambda rate: rate <= knee, precision=0.02, hint=knee * (1 + rng.uniform(-off, off)),
                                  **SETTINGS)
        assert found(warm) == found(cold)
        cold_runs, warm_runs = cold_runs + len(cold_probed), warm_runs + len(warm_probed)
    assert warm_runs <= most * cold_runs, (warm_runs, cold_runs)


def test_a_hint_inside_the_final_bracket_takes_two_runs_at_its_ends():
    for rng, knee, precision in knees(1000, 3):
        cold, probed = drive(lambda rate: rate <= knee, precision=precision, **SETTINGS)
        capacity, bound, upper = found(cold)
        if bound != "=":
            continue
        hint = rng.uniform(capacity, upper)
        warm, warm_probed = drive(lambda rate: rate <= knee, precision=precision, hint=hint, **SETTINGS)
        assert sorted(warm_probed) == [capacity, upper] and found(warm) == found(cold)


def test_on_a_bumpy_curve_a_warm_search_ends_with_both_ends_of_its_bracket_measured():
    for rng, knee, precision in knees(2000, 4):
        noise = {}

        def passes(rate):
            if rate not in noise:
                noise[rate] = rate <= knee * rng.uniform(0.8, 1.2)
            return noise[rate]

        warm, probed = drive(passes, precision=precision, hint=knee * rng.uniform(0.8, 1.2), **SETTINGS)
        capacity, bound, upper = found(warm)
        assert warm.result()["done"]
        if bound in ("=", ">="):
            assert warm.outcomes[capacity] is True
        if upper is not None:
            assert warm.outcomes[upper] is False
        if bound == "=":   # "<": the capacity is under upper, the lowest rate tried
            assert capacity < upper
            assert (upper - capacity) / capacity <= precision + 1e-3 or RateSearch.round((capacity + upper) / 2) \
                in (capacity, upper)


def test_guesses_zero_is_the_cold_search_and_a_bad_count_is_refused():
    knee = 7.3
    cold, cold_probed = drive(lambda rate: rate <= knee, **SETTINGS)
    warm, warm_probed = drive(lambda rate: rate <= knee, hint=7.0, guesses=0, **SETTINGS)
    assert warm_probed == cold_probed
    for bad in (-1, 1.5, "2"):
        with pytest.raises(ValueError, match="guesses must be an integer >= 0"):
            RateSearch(guesses=bad)
    with pytest.raises(ValueError, match="hint must be a rate > 0"):
        RateSearch(hint=0.0)


def test_each_curve_starts_from_the_curve_at_the_first_seed_with_all_else_the_same():
    curves = [[f"engine={e}", f"workload={w}", f"workload.seed={s}"] for e in ("orca_max", "paged")
              for w in ("sharegpt", "alpaca") for s in (0, 1, 2)]
    neighbours = warm_neighbours(curves, "workload.seed")
    assert len(neighbours) == 8
    for c, n in neighbours.items():
        assert curves[n][:2] == curves[c][:2] and curves[n][2] == "workload.seed=0" != curves[c][2] and n < c
    assert warm_neighbours(curves, None) == {} and warm_neighbours(curves, "block_size") == {}
    one_seed = [c[:2] + ["workload.seed=3"] for c in curves[::3]]
    assert warm_neighbours(one_seed, "workload.seed") == {}
