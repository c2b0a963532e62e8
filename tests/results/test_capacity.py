"""The capacity search: bracket and bisection on synthetic latency curves with a known knee, ratios over
seeds, and the Hydra sweeper end to end (basic launcher; joblib and submitit's local executor when slow)."""
import json
import math
import subprocess
import sys

import pandas as pd
import pytest

from pagedbench.results.sweeps.capacity import (Criterion, RateSearch, capacity_summary, main, ratio_summary, ratio_table,
                                     write_tables)
from pagedbench.paths import ROOT



def hockey_stick(knee):
    """Latency flat at 0.05 s/token up to the knee, then blowing up: the criterion 0.2 is crossed at ~knee."""
    return lambda rate: 0.05 if rate <= knee else 0.05 + 10 * (rate - knee)


def search(curve, criterion=Criterion("latency", threshold=0.2), **kwargs):
    s = RateSearch(**kwargs)
    rates = []
    while (rate := s.next_rate()) is not None:
        rates.append(rate)
        s.record(rate, criterion.met({"steady_norm_latency_s_mean": curve(rate)}))
        assert len(rates) < 60
    return s, rates


@pytest.mark.parametrize("knee", [0.037, 0.31, 1.0, 2.53, 4.56, 71.3])
@pytest.mark.parametrize("start", [0.5, 1.0, 8.0])
def test_search_finds_a_known_knee_to_the_stated_precision(knee, start):
    true = knee + 0.015   # where 0.05 + 10 (r - knee) reaches 0.2
    s, rates = search(hockey_stick(knee), start=start, precision=0.02)
    result = s.result()
    assert result["bound"] == "=" and result["done"]
    assert result["capacity"] <= true <= result["upper"]
    assert (result["upper"] - result["capacity"]) / result["capacity"] <= 0.02 + 1e-3
    assert result["probes"] == len(rates) == len(set(rates))


def test_search_reports_bounds_when_the_range_never_brackets():
    always_fine, _ = search(lambda r: 0.05, start=1.0, max_rate=16.0)
    assert always_fine.result() == {"capacity": 16.0, "bound": ">=", "upper": None, "probes": 5, "done": True}
    never, _ = search(lambda r: 5.0, start=1.0, min_rate=0.25)
    assert never.result()["bound"] == "<" and never.result()["capacity"] == 0.25


def test_a_curve_that_dips_back_under_counts_where_it_first_fails():
    bumpy = lambda r: 0.05 if r < 2 or 5 < r < 7 else 1.0    # noqa: E731
    s, _ = search(bumpy, start=1.0)
    assert s.result()["capacity"] < 2 <= s.result()["upper"]


def test_criteria_judge_missing_figures_as_failed():
    lat, good = Criterion("latency", threshold=0.2), Criterion("goodput", attainment=0.9)
    assert lat.met({"steady_norm_latency_s_mean": 0.2}) and not lat.met({"steady_norm_latency_s_mean": math.nan})
    assert good.met({"steady_slo_attainment": 0.95}) and not good.met({"steady_slo_attainment": 0.5})
    assert not good.met({})
    with pytest.raises(ValueError):
        Criterion("latency")
    with pytest.raises(ValueError):
        Criterion("goodput", attainment=1.5)
    with pytest.raises(ValueError):
        RateSearch(start=0.0)


def test_ratios_are_per_seed_then_mean_and_spread():
    rows = []
    for seed, (paged, orca) in enumerate([(5.0, 2.5), (4.4, 2.0), (4.8, 2.4)]):
        rows += [dict(engine="paged", block_size=16, workload="sharegpt", model="opt-13b", seed=seed,
                      criterion="latency", capacity=paged, bound="="),
                 dict(engine="orca-oracle", block_size=None, workload="sharegpt", model="opt-13b", seed=seed,
                      criterion="latency", capacity=orca, bound="=")]
    ratios = ratio_table(pd.DataFrame(rows))
    assert ratios["ratio"].tolist() == pytest.approx([2.0, 2.2, 2.0])
    summary = ratio_summary(ratios).iloc[0]
    assert summary["mean"] == pytest.approx(6.2 / 3) and summary["min"] == 2.0 and summary["max"] == 2.2
    assert summary["seeds"] == 3 and summary["exact"]


def bounded_table():
    """paged never failed up to max_rate on seed 0, static failed already at min_rate, orca-max's search
    stopped before bracketing (max_rounds), orca-pow2's run failed; the rest exact."""
    rows = []
    cases = {("paged", 0): (1000.0, ">=", True, None), ("static", 0): (0.01, "<", True, None),
             ("orca-max", 0): (8.0, ">=", False, None), ("orca-pow2", 0): (1.0, "<", False, "run at 1 failed")}
    for seed in (0, 1):
        for engine in ("static", "orca-max", "orca-pow2", "orca-oracle", "paged"):
            capacity, bound, done, error = cases.get((engine, seed), (2.0 if engine != "paged" else 4.0, "=", True,
                                                                      None))
            rows.append(dict(engine=engine, block_size=16 if engine == "paged" else None, workload="sharegpt",
                             model="opt-13b", seed=seed, criterion="latency<=0.2s/tok", capacity=capacity,
                             bound=bound, upper=None, probes=8, done=done, error=error))
    return pd.DataFrame(rows)


def test_a_capacity_that_is_only_a_bound_is_named_in_the_tables_written(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="pagedbench"):
        write_tables(bounded_table(), tmp_path)
    table = pd.read_csv(tmp_path / "capacity.csv", keep_default_na=False)
    why = {(r.engine, r.seed): (r.capacity_is_bound, r.bound_reason) for r in table.itertuples()}
    assert why[("paged", 0)] == (True, "max_rate") and why[("static", 0)] == (True, "min_rate")
    assert why[("orca-max", 0)] == (True, "unfinished") and why[("orca-pow2", 0)] == (True, "run failed")
    assert why[("paged", 1)] == (False, "") and sum(b for b, _ in why.values()) == 4
    assert list(table.columns[table.columns.get_loc("bound"):][:3]) == ["bound", "capacity_is_bound", "bound_reason"]
    ratios = pd.read_csv(tmp_path / "capacity_ratios.csv", keep_default_na=False).set_index(["baseline", "seed"])
    assert ratios.loc[("orca-oracle", 0), "bound"] == ">=" and ratios.loc[("orca-oracle", 0), "ratio_is_bound"]
    assert ratios.loc[("orca-oracle", 0), "bound_reason"] == "paged max_rate"
    assert ratios.loc[("static", 0), "bound"] == ">=" and ratios.loc[("orca-oracle", 1), "bound"] == "="
    # One warning line per write, naming the searches that ended on a bound (an unfinished one is still open).
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "the capacity of 3 of 10 curves is only a bound" in warnings[0]
    assert "paged block 16 sharegpt opt-13b seed 0 latency<=0.2s/tok: lower bound 1000 req/s (max_rate)" in warnings[0]
    assert "static sharegpt opt-13b seed 0 latency<=0.2s/tok: upper bound 0.01 req/s (min_rate)" in warnings[0]


def test_summaries_say_which_bound_a_mean_over_seeds_is():
    caps = capacity_summary(bounded_table()).set_index("engine")
    assert caps.loc["paged", "bound"] == ">=" and caps.loc["paged", "bound_reason"] == "max_rate (seed 0)"
    assert caps.loc["static", "bound"] == "<" and caps.loc["orca-oracle", "bound"] == "="
    assert not caps.loc["paged", "exact"] and caps.loc["orca-oracle", "exact"]
    ratios = ratio_summary(ratio_table(bounded_table())).set_index("baseline")
    assert ratios.loc["orca-oracle", "bound"] == ">=" and ratios.loc["static", "bound"] == ">="
    assert ratios.loc["orca-max", "bound"] == "?"              # paged at least, orca-max at least: either way


def test_the_capacity_command_names_bounds_in_words_and_warns_once(tmp_path, capsys):
    write_tables(bounded_table(), tmp_path)
    assert main([str(tmp_path)]) == 0
    captured = capsys.readouterr()
    lines = {line.split()[0] + " " + line.split()[3]: line for line in captured.out.splitlines()
             if line.startswith("sharegpt")}
    assert "lower bound: max_rate (seed 0)" in lines["sharegpt paged"]
    assert "upper bound: min_rate (seed 0)" in lines["sharegpt static"]
    assert "lower bound: unfinished (seed 0)" in lines["sharegpt orca-max"]
    assert lines["sharegpt orca-oracle"].rstrip().endswith("exact") and "*" not in captured.out
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "the capacity of 4 of 10 curves is only a bound" in warnings[0]
    assert "orca-max sharegpt opt-13b seed 0 latency<=0.2s/tok: lower bound 8 req/s (unfinished)" in warnings[0]


def test_exact_capacities_print_no_warning(tmp_path, capsys):
    exact = bounded_table().assign(bound="=", done=True, error=None)
    write_tables(exact, tmp_path)
    assert main([str(tmp_path)]) == 0
    assert "warning" not in capsys.readouterr().err


def sweep(tmp_path, *extra, launcher="basic", engines="orca_oracle,paged", seeds="0,1"):
    cmd = [sys.executable, "run.py", "-m", "hydra/sweeper=capacity", f"hydra/launcher={launcher}", "backend=sim",
           f"engine={engines}", "workload=synthetic", "workload.arrival=poisson",
           "workload.duration_s=60", f"workload.seed={seeds}", "hydra.sweeper.precision=0.1",
           "hydra.sweeper.start_rate=2", f"hydra.sweep.dir={tmp_path}", *extra]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_capacity_sweep_end_to_end_and_resumes_from_finished_runs(tmp_path):
    first = sweep(tmp_path)
    table = pd.read_csv(tmp_path / "capacity.csv")
    assert len(table) == 2 * 2 * 2                              # 2 engines x 2 seeds x 2 criteria
    assert table["done"].all() and (table["bound"] == "=").all()
    assert set(table["engine"]) == {"orca-oracle", "paged"} and set(table["seed"]) == {0, 1}
    for row in table.itertuples():                              # each capacity is a measured rate that met it
        assert (row.upper - row.capacity) / row.capacity <= 0.1 + 1e-3
    runs = sorted(p.parent for p in tmp_path.rglob("summary.json"))
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        assert summary["duration_s"] == 60 and summary["trace_draws"] == summary["num_requests"]
    ratios = pd.read_csv(tmp_path / "capacity_ratios.csv")
    assert len(ratios) == 2 * 2 and (ratios["ratio"] > 1).all()
    assert "capacity round" in first.stderr + first.stdout
    # Interrupted (here: finished) searches resume from their run folders: nothing is run again.
    mtimes = {r: (r / "summary.json").stat().st_mtime_ns for r in runs}
    again = sweep(tmp_path)
    assert "skipping" in again.stderr + again.stdout
    assert {r: (r / "summary.json").stat().st_mtime_ns for r in runs} == mtimes
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "capacity.csv"), table)
    assert main([str(tmp_path)]) == 0


def test_capacity_command_needs_a_search_folder(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no capacity.csv" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["local", "submitit_local"])
def test_capacity_sweep_through_parallel_launchers(tmp_path, launcher):
    """joblib (this machine's launcher) and submitit's local executor (the SLURM launcher's code path); one
    seed (the two criteria's searches run side by side)."""
    extra = ["hydra.launcher.timeout_min=10"] if launcher == "submitit_local" else []
    sweep(tmp_path, *extra, launcher=launcher, engines="paged", seeds="0")
    table = pd.read_csv(tmp_path / "capacity.csv")
    assert table["done"].all() and len(table) == 2 and set(table["seed"]) == {0}   # 1 seed x 2 criteria


def test_a_warm_started_sweep_finds_the_cold_sweeps_capacities_in_fewer_runs(tmp_path):
    """Seed 1 starts from seed 0's capacity: the same bracket on these curves (monotone where probed; at 2% precision
    a one-minute trace's curve is not, and the warm search may end on another bracket), fewer runs."""
    sweep(tmp_path / "warm")
    sweep(tmp_path / "cold", "hydra.sweeper.warm_start=null")
    warm, cold = (pd.read_csv(tmp_path / name / "capacity.csv") for name in ("warm", "cold"))
    same = ["engine", "seed", "criterion", "capacity", "bound", "upper", "done"]
    pd.testing.assert_frame_equal(warm[same], cold[same])
    assert warm["hint"].notna().sum() == 4 and cold["hint"].isna().all()   # seed 1's: 2 engines x 2 criteria
    at_seed1 = warm["seed"] == 1
    assert (warm["probes"][at_seed1] <= cold["probes"][at_seed1]).all()
    assert warm["probes"][at_seed1].sum() < cold["probes"][at_seed1].sum()
    runs = {name: len(list((tmp_path / name).rglob("summary.json"))) for name in ("warm", "cold")}
    assert runs["warm"] < runs["cold"], runs
