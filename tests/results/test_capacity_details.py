"""The capacity search's checks, stopping rule and tables, detail by detail.

Each test pins one behaviour a one-line slip would change: which settings
are refused, when the bisection stops (a bracket of exactly `precision`
stops it), how seeds and curves are named, the exact text the capacity
command prints, and the order and columns of the summary tables.
"""
from __future__ import annotations

import pandas as pd
import pytest

from pagedbench.results.sweeps import capacity as cap
from pagedbench.results.sweeps.capacity import Criterion, RateSearch
from tests.results.test_capacity_search_edges import run_search


def row(engine, capacity, *, seed=0, bound="=", block_size=None, **extra) -> dict:
    return dict(engine=engine, block_size=block_size, workload="sharegpt", model="opt-13b", criterion="latency",
                seed=seed, capacity=capacity, bound=bound, done=True, **extra)


# -- settings refused and accepted --------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [dict(name="latency", threshold=0), dict(name="latency", threshold=-0.1),
                                    dict(name="goodput", attainment=0), dict(name="goodput", attainment=1.01)])
def test_criteria_refuse_a_limit_outside_their_range(kwargs):
    with pytest.raises(ValueError):
        Criterion(**kwargs)


def test_a_goodput_of_every_request_is_a_valid_criterion():
    assert Criterion("goodput", attainment=1.0).label == "goodput>=100%"


def test_criteria_from_a_sweep_config_take_their_three_keys_and_refuse_others():
    assert Criterion.from_dict({"name": "latency", "threshold": 0.2}) == Criterion("latency", threshold=0.2)
    assert Criterion.from_dict({"name": "goodput", "attainment": 0.9}).attainment == 0.9
    assert Criterion.from_dict({"name": "latency", "threshold": 0.2, "attainment": None}).threshold == 0.2
    with pytest.raises(ValueError, match=r"unknown criterion key\(s\) \['slo'\]"):
        Criterion.from_dict({"name": "goodput", "attainment": 0.9, "slo": 1})


@pytest.mark.parametrize("kwargs", [dict(min_rate=0.0, start=1.0), dict(growth=1.0), dict(precision=0.0),
                                    dict(precision=1.0), dict(precision=1.5)])
def test_rate_searches_refuse_settings_that_cannot_bracket(kwargs):
    with pytest.raises(ValueError):
        RateSearch(**kwargs)


# -- when the bisection stops -------------------------------------------------------------------------------


def test_bisection_stops_once_the_bracket_is_within_precision():
    # 1 met, 2 failed: (2 - 1) / 1 = 1 > 0.25; 1.5 met: 0.33 > 0.25; 1.75 failed: 0.167 <= 0.25, done.
    s, probed = run_search(lambda r: r <= 1.6, precision=0.25)
    assert probed == [1.0, 2.0, 1.5, 1.75]
    assert s.result() == {"capacity": 1.5, "bound": "=", "upper": 1.75, "probes": 4, "done": True}


def test_a_bracket_of_exactly_the_precision_is_close_enough():
    # 1 met, 2 failed, 1.5 failed: (1.5 - 1) / 1 = 0.5, exactly the precision: done.
    s, probed = run_search(lambda r: r <= 1.2, precision=0.5)
    assert probed == [1.0, 2.0, 1.5]
    assert s.result()["capacity"] == 1.0 and s.result()["upper"] == 1.5


def test_a_bound_without_a_done_flag_is_read_as_ended():
    assert cap.bound_reason(">=") == "max_rate" and cap.bound_reason("<") == "min_rate"
    assert cap.bound_reason(">=", done=False) == "unfinished"
    named = cap.name_bounds(pd.DataFrame([row("paged", 8.0, bound=">=")]).drop(columns="done"))
    assert named["bound_reason"].tolist() == ["max_rate"] and named["capacity_is_bound"].tolist() == [True]


# -- words ----------------------------------------------------------------------------------------------------


def test_bounds_in_words():
    assert cap.bound_text("=") == "exact"
    assert cap.bound_text(">=") == "lower bound" and cap.bound_text("<") == "upper bound"
    assert cap.bound_text(">=", "max_rate (seed 1)") == "lower bound: max_rate (seed 1)"


@pytest.mark.parametrize("seed, text", [(2, "2"), (2.0, "2"), (float("nan"), "nan"), ("a", "a"), (None, "None")])
def test_seeds_are_written_as_integers_when_they_are_numbers(seed, text):
    assert cap._seed(seed) == text


def test_curve_labels_name_a_preemption_policy_only_when_it_is_not_the_default():
    base = dict(engine="paged", block_size=16.0, workload="sharegpt", model="opt-13b", seed=1.0,
                criterion="latency<=0.2s/tok")
    assert cap.curve_label({**base, "preemption": "auto"}) == "paged block 16 sharegpt opt-13b seed 1 latency<=0.2s/tok"
    assert cap.curve_label({**base, "preemption": "swap"}) == (
        "paged block 16 preempt by swap sharegpt opt-13b seed 1 latency<=0.2s/tok")
    assert cap.curve_label({"engine": "static", "block_size": float("nan"), "seed": 0}) == "static seed 0"


def test_the_bound_warning_lists_every_bounded_curve():
    table = pd.DataFrame([row("paged", 8.0, bound=">="), row("orca-max", 0.5, bound="<"), row("static", 1.0)])
    assert cap.bound_warning(table) == (
        "the capacity of 2 of 3 curves is only a bound: "
        "paged sharegpt opt-13b seed 0 latency: lower bound 8 req/s (max_rate); "
        "orca-max sharegpt opt-13b seed 0 latency: upper bound 0.5 req/s (min_rate)")


# -- tables ---------------------------------------------------------------------------------------------------


def test_the_printed_capacity_table_reads_exactly():
    table = pd.DataFrame([row("paged", 4.5, seed=0, block_size=16), row("paged", 4.62, seed=1, block_size=16),
                          row("static", 1.0, seed=0), row("static", 2.0, seed=1, bound=">=")])
    lines = cap.format_capacity(table).splitlines()
    assert lines[0].split() == ["workload", "model", "criterion", "engine", "block_size", "seeds", "req/s",
                                "mean", "(min-max)", "bound"]
    assert lines[1].split() == ["sharegpt", "opt-13b", "latency", "static", "-", "2", "1.5", "(1-2)", "lower",
                                "bound:", "max_rate", "(seed", "1)"]
    assert lines[2].split() == ["sharegpt", "opt-13b", "latency", "paged", "16", "2", "4.56", "(4.5-4.62)", "exact"]


def test_the_printed_ratio_table_reads_exactly():
    table = pd.DataFrame([row("paged", 4.0, block_size=16), row("static", 1.0), row("orca-max", 2.0)])
    lines = cap.format_ratios(cap.ratio_table(table)).splitlines()
    assert lines[0].split() == ["workload", "model", "criterion", "block_size", "baseline", "seeds", "paged", "/",
                                "baseline", "bound"]
    assert lines[1].split() == ["sharegpt", "opt-13b", "latency", "16", "orca-max", "1", "2.00x", "(2.00x-2.00x)",
                                "exact"]
    assert lines[2].split()[4:7] == ["static", "1", "4.00x"]


def test_summaries_have_their_columns_even_with_no_capacity_at_all():
    table = pd.DataFrame([row("paged", float("nan")), row("static", float("nan"))])
    out = cap.capacity_summary(table)
    assert len(out) == 0
    assert list(out.columns) == ["workload", "model", "criterion", "engine", "block_size", "mean", "min", "max",
                                 "seeds", "exact", "bound", "bound_reason"]


def test_ratio_summaries_have_no_column_but_their_own():
    table = pd.DataFrame([row("paged", 4.0, block_size=16), row("static", 1.0)])
    out = cap.ratio_summary(cap.ratio_table(table))
    assert list(out.columns) == ["workload", "model", "criterion", "block_size", "baseline", "mean", "min", "max",
                                 "seeds", "exact", "bound", "bound_reason"]


def test_an_old_ratio_table_without_reasons_names_its_bounds_plainly():
    ratios = pd.DataFrame([dict(workload="sharegpt", model="opt-13b", criterion="latency", seed=3, block_size=16,
                                baseline="static", ratio=4.0, bound=">=")])
    assert cap.ratio_summary(ratios)["bound_reason"].tolist() == ["bound (seed 3)"]


def test_a_ratio_table_keeps_the_reasons_it_has():
    table = pd.DataFrame([row("paged", 8.0, block_size=16, bound=">="), row("static", 1.0)])
    out = cap.ratio_summary(cap.ratio_table(table))
    assert out["bound_reason"].tolist() == ["paged max_rate (seed 0)"]


def test_capacity_summaries_order_engines_as_the_paper_does_not_by_name():
    table = pd.DataFrame([row("paged", 4.0, block_size=16), row("static", 1.0), row("orca-max", 2.0),
                          row("orca-oracle", 3.0)])
    assert cap.capacity_summary(table)["engine"].tolist() == ["static", "orca-max", "orca-oracle", "paged"]


def test_tables_keep_the_search_order_of_block_sizes_and_seeds():
    """Within one engine, curves stay in the order the search ran them (block 32 before 16 here); ratios are
    listed per seed in the order the seeds came."""
    table = pd.DataFrame([row("paged", 4.0, seed=1, block_size=32), row("paged", 5.0, seed=1, block_size=16),
                          row("static", 1.0, seed=1), row("paged", 6.0, seed=0, block_size=32),
                          row("paged", 7.0, seed=0, block_size=16), row("static", 2.0, seed=0)])
    assert cap.capacity_summary(table)["block_size"].tolist()[1:] == [32, 16]
    ratios = cap.ratio_table(table)
    assert list(zip(ratios["seed"], ratios["block_size"])) == [(1, 32), (1, 16), (0, 32), (0, 16)]
    assert cap.ratio_summary(ratios)["block_size"].tolist() == [32, 16]


def test_a_curve_without_a_block_size_keeps_its_own_row():
    table = pd.DataFrame([row("static", 1.0, block_size=float("nan")), row("static", 3.0, seed=1, block_size=8)])
    out = cap.capacity_summary(table)
    assert len(out) == 2 and out["mean"].tolist() == [1.0, 3.0]


def test_the_capacity_command_counts_unfinished_searches(tmp_path, capsys):
    pd.DataFrame([row("paged", 4.0, block_size=16), row("orca-max", 2.0),
                  {**row("static", 1.0, bound=">="), "done": False}]).to_csv(tmp_path / cap.CAPACITY_CSV, index=False)
    assert cap.main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{tmp_path}: 3 searches, 1 unfinished"


def test_large_capacities_are_printed_to_three_significant_digits_in_lower_case():
    table = pd.DataFrame([row("paged", 12345.0, block_size=16)])
    assert "1.23e+04 (1.23e+04-1.23e+04)" in cap.format_capacity(table)
