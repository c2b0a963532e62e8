"""The capacity search at the ends of its range, and the bound of a ratio of two bounded capacities.

A search that never fails must stop at `max_rate` itself, not at the last
power of `growth` below it nor past it, and say the capacity is a lower
bound there; one that always fails must stop at `min_rate`. Growth factors
and limits are chosen so that repeated multiplication does not land on the
limit by chance.

A ratio p / b of two capacities, each exact ("="), a lower bound (">=":
the true value is at least the figure) or an upper bound ("<": the true
value is under it), is itself a bound, read off which way each figure may
move the ratio: p higher moves it up, b higher moves it down. The table
below is written from that, pair by pair.
"""
from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest

from pagedbench.results.sweeps.capacity import Criterion, RateSearch, bound_reason, combined_bound, ratio_summary, ratio_table
from pagedbench.results.sweeps.sustainable import ratio_bound, ratios


def run_search(passes, **kwargs) -> tuple[RateSearch, list[float]]:
    """Drive a search with `passes(rate) -> bool` to its end; the rates it probed, in order."""
    s = RateSearch(**kwargs)
    probed = []
    while (rate := s.next_rate()) is not None:
        probed.append(rate)
        s.record(rate, passes(rate))
        assert len(probed) < 100, probed
    return s, probed


# -- the range's ends --------------------------------------------------------------------------------------


@pytest.mark.parametrize("start, growth, max_rate", [(1.0, 2.0, 10.0), (1.0, 3.0, 20.0), (0.7, 2.0, 5.0),
                                                     (2.0, 1.5, 9.0), (1.0, 2.0, 1.0), (3.0, 4.0, 100.0),
                                                     (1.0, 2.0, 16.0)])
def test_a_search_that_never_fails_stops_exactly_at_max_rate_and_says_so(start, growth, max_rate):
    s, probed = run_search(lambda rate: True, start=start, growth=growth, max_rate=max_rate)
    assert max(probed) <= max_rate, f"probed {probed} past max_rate {max_rate}"
    assert probed[-1] == max_rate, f"stopped at {probed[-1]}, below max_rate {max_rate}: {probed}"
    assert probed == sorted(probed) and len(set(probed)) == len(probed)
    result = s.result()
    assert result["capacity"] == max_rate and result["bound"] == ">=" and result["upper"] is None
    assert result["done"] and result["probes"] == len(probed)
    assert bound_reason(result["bound"], result["done"]) == "max_rate"


@pytest.mark.parametrize("start, growth, min_rate", [(1.0, 2.0, 0.3), (1.0, 3.0, 0.05), (5.0, 2.0, 0.7),
                                                     (1.0, 2.0, 1.0), (2.0, 1.5, 0.25)])
def test_a_search_that_always_fails_stops_exactly_at_min_rate_and_says_so(start, growth, min_rate):
    s, probed = run_search(lambda rate: False, start=start, growth=growth, min_rate=min_rate)
    assert min(probed) >= min_rate, f"probed {probed} below min_rate {min_rate}"
    assert probed[-1] == min_rate, probed
    result = s.result()
    assert result["capacity"] == min_rate and result["bound"] == "<" and result["upper"] == min_rate
    assert result["done"] and bound_reason(result["bound"], result["done"]) == "min_rate"


@pytest.mark.parametrize("knee", [9.3, 9.99, 6.0, 0.31, 0.26])
def test_a_knee_near_either_end_is_bracketed_inside_the_range(knee):
    """A knee between the last power of growth and a limit: found exactly, every probe inside the range."""
    s, probed = run_search(lambda rate: rate <= knee, start=1.0, growth=2.0, min_rate=0.25, max_rate=10.0,
                           precision=0.01)
    assert all(0.25 <= r <= 10.0 for r in probed), probed
    result = s.result()
    assert result["bound"] == "=" and result["done"]
    assert result["capacity"] <= knee < result["upper"]
    assert (result["upper"] - result["capacity"]) / result["capacity"] <= 0.01 + 1e-3


def test_a_criterion_met_at_max_rate_after_a_bumpy_start_is_still_only_a_lower_bound():
    s, probed = run_search(lambda rate: True, start=1.0, growth=2.5, max_rate=12.0)
    assert probed == [1.0, 2.5, 6.25, 12.0]
    assert s.result()["capacity"] == 12.0 and s.result()["bound"] == ">="


@pytest.mark.parametrize("limit", ["max_rate", "min_rate"])
def test_a_limit_with_more_digits_than_the_rates_is_never_passed(limit):
    """Rates are rounded to 4 significant digits; a limit with more digits must still bound every probe
    (7.77777 rounds up to 7.778, 0.123444 down to 0.1234)."""
    if limit == "max_rate":
        s, probed = run_search(lambda rate: True, start=1.0, growth=2.0, max_rate=7.77777)
        assert max(probed) <= 7.77777, probed
        assert s.result()["capacity"] <= 7.77777
    else:
        s, probed = run_search(lambda rate: False, start=1.0, growth=2.0, min_rate=0.123444)
        assert min(probed) >= 0.123444, probed
        assert s.result()["capacity"] >= 0.123444


# -- ratio bounds ------------------------------------------------------------------------------------------


# Which way the true capacity may lie from its figure: "=" nowhere, ">=" higher, "<" lower.
# numerator, denominator -> the ratio's bound, read off by hand:
RATIO_BOUNDS = {
    ("=", "="): "=",     # both exact
    (">=", "="): ">=",   # p may be higher: the ratio may be higher
    ("<", "="): "<=",    # p may be lower: the ratio may be lower
    ("=", ">="): "<=",   # b may be higher: the ratio may be lower
    ("=", "<"): ">=",    # b may be lower: the ratio may be higher
    (">=", "<"): ">=",   # p higher, b lower: both raise the ratio
    ("<", ">="): "<=",   # p lower, b higher: both lower it
    (">=", ">="): "?",   # p higher raises it, b higher lowers it: either way
    ("<", "<"): "?",     # p lower lowers it, b lower raises it: either way
}


def test_the_table_covers_every_pair_of_capacity_bounds():
    assert set(RATIO_BOUNDS) == set(itertools.product(["=", ">=", "<"], repeat=2))


@pytest.mark.parametrize("numerator, denominator", list(RATIO_BOUNDS))
def test_ratio_bound_of_every_pair(numerator, denominator):
    assert ratio_bound(numerator, denominator) == RATIO_BOUNDS[numerator, denominator]


def capacity_rows(paged_bound: str, orca_bound: str, seed: int = 0) -> list[dict]:
    common = dict(workload="sharegpt", model="opt-13b", seed=seed, criterion="latency<=0.2s/tok", upper=None,
                  probes=6, done=True, error=None)
    return [dict(engine="paged", block_size=16, capacity=6.0, bound=paged_bound, **common),
            dict(engine="orca-oracle", block_size=None, capacity=2.0, bound=orca_bound, **common)]


@pytest.mark.parametrize("numerator, denominator", list(RATIO_BOUNDS))
def test_capacity_ratio_tables_carry_the_ratio_bound_of_every_pair(numerator, denominator):
    table = ratio_table(pd.DataFrame(capacity_rows(numerator, denominator)))
    row = table.iloc[0]
    assert len(table) == 1 and row["ratio"] == pytest.approx(3.0)
    want = RATIO_BOUNDS[numerator, denominator]
    assert row["bound"] == want and row["ratio_is_bound"] == (want != "=")
    reasons = {"=": "", ">=": "max_rate", "<": "min_rate"}
    named = [f"{engine} {reasons[b]}" for engine, b in (("paged", numerator), ("orca-oracle", denominator))
             if b != "="]
    assert row["bound_reason"] == ", ".join(named)


@pytest.mark.parametrize("numerator, denominator", list(RATIO_BOUNDS))
def test_sustainable_rate_ratios_carry_the_ratio_bound_of_every_pair(numerator, denominator):
    rates = pd.DataFrame([
        dict(workload="w", model="m", engine="paged", block_size=16, sustainable_rate=6.0, bound=numerator,
             num_rates=3, min_rate=1.0, max_rate=8.0, threshold=1.0),
        dict(workload="w", model="m", engine="orca-oracle", block_size=math.nan, sustainable_rate=2.0,
             bound=denominator, num_rates=3, min_rate=1.0, max_rate=8.0, threshold=1.0)])
    table = ratios(rates)
    assert len(table) == 1 and table.iloc[0]["ratio"] == pytest.approx(3.0)
    assert table.iloc[0]["bound"] == RATIO_BOUNDS[numerator, denominator]


# A mean over seeds: exact only if every seed is; one kind of bound among the seeds is that bound; two kinds
# that pull opposite ways leave it open.
MEAN_BOUNDS = [(["=", "="], "="), (["=", ">="], ">="), ([">=", ">="], ">="), (["<", "="], "<"),
               (["=", "<="], "<="), ([">=", "<"], "?"), ([">=", "<="], "?"), (["?", "="], "?"),
               (["=", "=", "="], "="), (["=", ">=", "<="], "?")]


@pytest.mark.parametrize("bounds, want", MEAN_BOUNDS)
def test_combined_bound_over_seeds(bounds, want):
    assert combined_bound(bounds) == want


@pytest.mark.parametrize("seed_bounds, want", [
    ([("=", "="), ("=", "=")], "="),
    ([(">=", "="), ("=", "=")], ">="),       # one seed's ratio at least: the mean is at least
    ([(">=", "="), ("=", "<")], ">="),       # both seeds' ratios at least
    ([("=", ">="), ("=", "=")], "<="),
    ([(">=", "="), ("=", ">=")], "?"),       # one seed's at least, another's at most
    ([(">=", ">="), ("=", "=")], "?"),
])
def test_ratio_summaries_combine_each_seeds_ratio_bound(seed_bounds, want):
    rows = []
    for seed, (paged, orca) in enumerate(seed_bounds):
        rows += capacity_rows(paged, orca, seed)
    summary = ratio_summary(ratio_table(pd.DataFrame(rows))).iloc[0]
    assert summary["bound"] == want and summary["exact"] == (want == "=")


def test_criteria_judge_the_threshold_itself_as_met():
    assert Criterion("latency", threshold=0.2).met({"steady_norm_latency_s_mean": 0.2})
    assert not Criterion("latency", threshold=0.2).met({"steady_norm_latency_s_mean": 0.2000001})
    assert Criterion("goodput", attainment=0.9).met({"steady_slo_attainment": 0.9})
    assert not Criterion("goodput", attainment=0.9).met({"steady_slo_attainment": 0.8999})


def test_ratio_summary_orders_baselines_nearest_first_and_keeps_an_index_of_its_own():
    """Within a workload, ratios over orca-oracle, orca-pow2, orca-max, static (the baselines nearest paged
    first), an unknown baseline last; a table written without bound reasons gets empty ones."""
    rows = []
    for workload in ("sharegpt", "alpaca"):
        for base, ratio in (("static", 4.0), ("zeta", 9.0), ("orca-oracle", 1.5), ("orca-max", 3.0),
                            ("orca-pow2", 2.0)):
            rows.append(dict(workload=workload, model="opt-13b", criterion="latency", seed=0, block_size=16,
                             baseline=base, ratio=ratio, bound="="))
    ratios = pd.DataFrame(rows).iloc[::-1].set_index(pd.Index(range(100, 110)))   # shuffled, foreign index
    out = ratio_summary(ratios)
    assert list(out.index) == list(range(10))
    assert list(out["workload"]) == ["alpaca"] * 5 + ["sharegpt"] * 5
    assert list(out["baseline"][:5]) == ["orca-oracle", "orca-pow2", "orca-max", "static", "zeta"]
    assert list(out["mean"][:5]) == [1.5, 2.0, 3.0, 4.0, 9.0]
    assert (out["bound_reason"] == "").all() and out["exact"].all()


def test_reasons_name_each_bound_with_its_seeds_in_words():
    from pagedbench.results.sweeps.capacity import _reasons_by_seed

    group = pd.DataFrame({"seed": [0, 1, 2, 3], "bound": [">=", "=", ">=", "<="],
                          "bound_reason": ["max_rate", "", "max_rate", None]})
    assert _reasons_by_seed(group) == "max_rate (seeds 0, 2); bound (seed 3)"
    assert _reasons_by_seed(group.iloc[[0]]) == "max_rate (seed 0)"
    assert _reasons_by_seed(group.iloc[[1]]) == ""


def test_capacity_summary_keeps_block_sizes_and_preemption_policies_apart():
    from pagedbench.results.sweeps.capacity import capacity_summary

    rows = [dict(engine="paged", block_size=bs, preemption=p, workload="sharegpt", model="opt-13b",
                 criterion="latency", seed=0, capacity=c, bound="=")
            for bs, p, c in ((16, "swap", 4.0), (16, "recompute", 3.0), (32, "swap", 2.0))]
    rows.append(dict(engine="orca-max", block_size=None, preemption=None, workload="sharegpt", model="opt-13b",
                     criterion="latency", seed=0, capacity=1.0, bound="="))
    out = capacity_summary(pd.DataFrame(rows).iloc[::-1].set_index(pd.Index([7, 8, 9, 10])))
    assert list(out.index) == [0, 1, 2, 3]
    assert list(out["engine"]) == ["orca-max", "paged", "paged", "paged"]   # engine order, stable within paged
    assert sorted(zip(out["block_size"][1:], out["preemption"][1:], out["mean"][1:])) == [
        (16, "recompute", 3.0), (16, "swap", 4.0), (32, "swap", 2.0)]


def test_the_formatted_tables_write_block_sizes_as_integers_and_a_dash_for_none():
    from pagedbench.results.sweeps.capacity import format_capacity

    rows = [dict(engine="paged", block_size=16.0, workload="sharegpt", model="opt-13b", criterion="latency", seed=0,
                 capacity=4.0, bound="="),
            dict(engine="orca-max", block_size=float("nan"), workload="sharegpt", model="opt-13b",
                 criterion="latency", seed=0, capacity=1.0, bound="=")]
    text = format_capacity(pd.DataFrame(rows))
    assert " 16 " in text and " - " in text and "16.0" not in text and "nan" not in text


def test_write_tables_writes_three_tables_without_an_index_column(tmp_path):
    from pagedbench.results.sweeps.capacity import CAPACITY_CSV, RATIOS_CSV, write_tables

    rows = [dict(engine=e, block_size=16 if e == "paged" else None, workload="sharegpt", model="opt-13b",
                 criterion="latency", seed=0, capacity=c, bound="=", done=True) for e, c in (("paged", 4.0),
                                                                                             ("orca-max", 2.0))]
    paths = write_tables(pd.DataFrame(rows), tmp_path)
    assert [p.name for p in paths] == [CAPACITY_CSV, "capacity.parquet", RATIOS_CSV]
    capacity = pd.read_csv(tmp_path / CAPACITY_CSV)
    assert list(capacity.columns)[0] == "engine" and len(capacity) == 2
    assert pd.read_parquet(tmp_path / "capacity.parquet")["capacity"].tolist() == [4.0, 2.0]
    ratios = pd.read_csv(tmp_path / RATIOS_CSV)
    assert list(ratios.columns)[0] == "workload" and ratios["ratio"].tolist() == [2.0]


def test_write_tables_warns_once_naming_the_capacity_file_when_a_capacity_is_a_bound(tmp_path, caplog):
    from pagedbench.results.sweeps.capacity import CAPACITY_CSV, write_tables

    rows = [dict(engine="paged", block_size=16, workload="sharegpt", model="opt-13b", criterion="latency", seed=0,
                 capacity=8.0, bound=">=", done=True),
            dict(engine="orca-max", block_size=None, workload="sharegpt", model="opt-13b", criterion="latency",
                 seed=0, capacity=2.0, bound="=", done=True)]
    with caplog.at_level("WARNING", logger="pagedbench"):
        write_tables(pd.DataFrame(rows), tmp_path)
    (record,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert record.getMessage().startswith(f"{tmp_path / CAPACITY_CSV}: ")


def test_a_key_given_again_on_the_command_line_replaces_the_experiments_list():
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra_plugins.pagedbench_capacity.capacity_sweeper import expand_grid

    parse = OverridesParser.create().parse_overrides
    grid = expand_grid(parse(["engine=orca,paged", "workload.seed=0,1,2", "workload.seed=0"]))
    assert grid == [["engine=orca", "workload.seed=0"], ["engine=paged", "workload.seed=0"]]
    assert len(expand_grid(parse(["engine=orca,paged", "workload.seed=0,1,2"]))) == 6
    assert expand_grid(parse(["workload.seed=0", "workload.seed=1,2"])) == [["workload.seed=1"], ["workload.seed=2"]]
