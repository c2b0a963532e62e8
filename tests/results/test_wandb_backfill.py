"""Backfill: finished run folders and sweeps logged to wandb afterwards, as live runs and the sweep's end log them.

Offline runs are read back from their `run-*.wandb` files (`finished_records`).
"""
from __future__ import annotations

import json
import subprocess
import sys

from hydra import compose, initialize_config_dir
import pandas as pd
import pytest

from pagedbench.results.record import wandb_backfill
from pagedbench.results.record.wandb_backfill import latency_table, main, run_group
from pagedbench.results.record.wandb_logger import run_name, sweep_group
from pagedbench.results.record.wandb_series import CLOCK
from pagedbench import run as entry
from pagedbench.paths import ROOT
from tests.results.test_wandb_live import SIM, by_kind, history, offline  # noqa: F401  (a fixture)
from tests.results.test_wandb_logger import finished_records

RATES = ["workload.arrival=poisson", "workload.num_requests=30"]


def sim_run(run_dir, overrides):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=[*SIM, *overrides])
    return entry.run(cfg, run_dir)


def wandb_runs(folder):
    return sorted((folder / "wandb").glob("offline-run-*"))


def logged(folder) -> dict:
    """What an offline wandb run holds: run record, metric names, history keys, config and summary keys."""
    records = finished_records(folder)
    [run] = by_kind(records, "run")
    rows = history(records)
    return {"run": run, "records": records, "rows": rows,
            "metrics": {(m.glob_name or m.name): m.step_metric for m in by_kind(records, "metric")},
            "series_keys": set().union(*(h.keys() for h in rows if CLOCK in h)) - {"_step", "_runtime", "_timestamp"},
            "keys": {k for h in rows for k in h},
            "config": {u.key for u in run.config.update},
            "summary": {(".".join(u.nested_key) or u.key) for s in by_kind(records, "summary") for u in s.update}}


def test_the_sweep_file_names_are_those_the_aggregate_and_the_capacity_search_write():
    from pagedbench.results.report.aggregate import AGGREGATE_PARQUET, FIGURES
    from pagedbench.results.sweeps.capacity import CAPACITY_CSV, RATIOS_CSV

    assert wandb_backfill.AGGREGATE == AGGREGATE_PARQUET and wandb_backfill.FIGURES == FIGURES
    assert wandb_backfill.CAPACITY_TABLES == {"capacity": CAPACITY_CSV, "capacity_ratios": RATIOS_CSV}


def test_the_command_has_help_and_refuses_a_folder_without_a_finished_run(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("usage: python -m pagedbench.results.record.wandb_backfill")
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2
    assert "no finished run" in capsys.readouterr().err
    assert main([str(tmp_path / "missing")]) == 2


def test_latency_table_has_a_line_per_engine_and_seed():
    aggregate = pd.DataFrame({
        "engine": ["paged", "paged", "paged", "paged", "orca-max", "paged"],
        "block_size": pd.array([16, 16, 16, 16, None, 16], dtype="Int64"),
        "workload": ["sharegpt"] * 6, "model": ["opt-13b"] * 6, "workload_seed": [0, 0, 1, 1, 0, 0],
        "request_rate": [1.0, 2.0, 1.0, 2.0, 1.0, float("nan")],   # the last is offline: no curve
        "norm_latency_s_mean": [0.1, 0.3, 0.12, 0.35, 0.5, 0.9], "steady_norm_latency_s_mean": [0.2] + [None] * 5,
    })
    table = latency_table(aggregate)
    assert table["line"].tolist() == ["orca-max | sharegpt | seed 0"] + ["paged bs16 | sharegpt | seed 0"] * 2 \
        + ["paged bs16 | sharegpt | seed 1"] * 2
    assert table["seed"].tolist() == [0, 0, 0, 1, 1] and table["request_rate"].tolist() == [1, 1, 2, 1, 2]
    assert table["norm_latency_s"].tolist() == [0.5, 0.2, 0.3, 0.12, 0.35]   # the steady window's where recorded
    assert latency_table(aggregate.iloc[[5]]).empty   # offline runs only: no curve


@pytest.mark.slow
def test_backfill_logs_a_finished_run_as_its_live_run_did(offline, capsys):
    run_dir = offline / "run"
    summary = sim_run(run_dir, ["workload.num_requests=60", "logger=wandb", "logger.project=pagedbench"])
    [live] = wandb_runs(run_dir)
    assert main([str(run_dir)]) == 0 and wandb_runs(run_dir) == [live]   # logged already: skipped
    assert "0 wandb run(s) written" in capsys.readouterr().out
    assert main([str(run_dir), "--again"]) == 0
    [later] = [f for f in wandb_runs(run_dir) if f != live]
    a, b = logged(live), logged(later)
    assert a["run"].display_name == b["run"].display_name == run_name(summary)
    assert a["run"].run_group == b["run"].run_group == ""   # a single run has no group
    assert a["metrics"] == b["metrics"] and a["metrics"]["iteration/*"] == CLOCK
    assert a["series_keys"] == b["series_keys"] and "iteration/rows_per_s" in a["series_keys"]
    assert a["config"] == b["config"] and "metadata" in b["config"] and "engine" in b["config"]
    assert a["summary"] == b["summary"] and "requests_per_s" in b["summary"]
    assert b["records"][-1].exit.exit_code == 0


@pytest.mark.slow
def test_backfill_of_a_sweep_logs_its_runs_then_a_sweep_run_with_its_tables_and_figures(offline):
    from pagedbench.results.report.aggregate import write_aggregate

    sweep = offline / "experiments" / "rates"
    runs = {f"seed{seed}_rate{rate}": [f"workload.seed={seed}", f"workload.request_rate={rate}"]
            for seed in (0, 1) for rate in (4, 16)}
    runs["bs8_rate4"] = ["engine.block_size=8", "workload.request_rate=4"]
    for name, overrides in runs.items():
        sim_run(sweep / name, [*RATES, *overrides])
    (sweep / "multirun.yaml").write_text("{}\n")   # Hydra's mark of a sweep folder
    write_aggregate(sweep)
    pd.DataFrame({"engine": ["paged"], "capacity": [6.5], "bound": ["="]}).to_csv(sweep / "capacity.csv", index=False)
    pd.DataFrame({"baseline": ["orca-max"], "ratio": [2.5]}).to_csv(sweep / "capacity_ratios.csv", index=False)

    assert main([str(sweep)]) == 0
    group = sweep_group(sweep)
    assert group == "experiments_rates" and run_group(sweep / "bs8_rate4") == group
    for name in runs:
        [folder] = wandb_runs(sweep / name)
        run = logged(folder)["run"]
        assert (run.run_group, run.job_type) == (group, "run")
    [folder] = wandb_runs(sweep)
    sweep_run = logged(folder)
    assert (sweep_run["run"].run_group, sweep_run["run"].job_type) == (group, "sweep")
    keys = {k.split(".")[0] for k in sweep_run["keys"]}
    assert {"sweep/aggregate", "sweep/latency_vs_rate", "sweep/block_size", "sweep/capacity",
            "sweep/capacity_ratios", "sweep/latency_vs_rate_chart_table", "figures/latency_vs_rate",
            "figures/block_size"} <= keys
    media = folder / "files" / "media"
    [curves] = [p for p in (media / "table" / "sweep").glob("latency_vs_rate_*.table.json") if "chart" not in p.name]
    curves = json.loads(curves.read_text())
    rows = [dict(zip(curves["columns"], r)) for r in curves["data"]]
    assert {r["line"] for r in rows} == {"paged bs16 | synthetic | seed 0", "paged bs16 | synthetic | seed 1",
                                         "paged bs8 | synthetic | seed 0"}
    assert sorted((r["seed"], r["request_rate"]) for r in rows if "bs16" in r["line"]) == [(0, 4), (0, 16), (1, 4),
                                                                                            (1, 16)]
    [sizes] = (media / "table" / "sweep").glob("block_size_*.table.json")
    assert {r[json.loads(sizes.read_text())["columns"].index("block_size")]
            for r in json.loads(sizes.read_text())["data"]} == {8, 16}
    assert list((media / "images" / "figures").glob("latency_vs_rate_*.png"))


@pytest.mark.slow
def test_a_sweep_logs_its_sweep_run_at_the_end_and_a_rerun_logs_the_runs_it_skips(offline):
    sweep = offline / "sweep"
    args = [sys.executable, str(ROOT / "run.py"), "-m", "engine=orca_max,paged", *SIM, *RATES,
            "workload.request_rate=4", f"hydra.sweep.dir={sweep}"]
    first = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    run_dirs = sorted(p.parent for p in sweep.glob("*/summary.json"))
    assert len(run_dirs) == 2 and not any(wandb_runs(d) for d in run_dirs) and not wandb_runs(sweep)

    # Only `logger` itself stays out of a run's folder name (`logger.project=...` would name another folder).
    again = subprocess.run([*args, "logger=wandb"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "skipping" in again.stdout + again.stderr, again.stdout[-3000:]
    group = sweep_group(sweep)
    for run_dir in run_dirs:
        [folder] = wandb_runs(run_dir)   # the finished run, logged where it was skipped
        assert logged(folder)["run"].run_group == group
    [folder] = wandb_runs(sweep)
    sweep_run = logged(folder)
    assert (sweep_run["run"].run_group, sweep_run["run"].job_type) == (group, "sweep")
    assert "sweep/aggregate" in {k.split(".")[0] for k in sweep_run["keys"]}
