"""The sweep aggregate: finished runs only, failures apart, atomic and reproducible outputs."""
from pathlib import Path
import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from pagedbench.results.report.aggregate import main, write_aggregate
from pagedbench.results.sweeps.collect import collect, collect_failures
from pagedbench.paths import ROOT



def summary(engine: str, rate: float | None, block_size: int | None = None, latency: float = 0.05) -> dict:
    """A summary.json as run.py writes it, with made-up numbers."""
    return {
        "engine": engine, "block_size": block_size, "workload": "sharegpt", "model": "opt-13b",
        "backend": "sim", "hardware": "a100-40gb", "tp": 1, "kv_budget_slots": 15449,
        "arrival": "offline" if rate is None else "poisson", "request_rate": rate, "workload_seed": 0,
        "experiment": None, "num_requests": 100, "num_finished": 100, "num_rejected": 0,
        "requests_per_s": 1.5, "output_tokens_per_s": 300.0, "total_tokens_per_s": 700.0,
        "mean_batch_size": 12.5, "max_batch_size": 20,
        "mem_token_states": 0.4, "mem_reservation": 0.2, "mem_internal_fragmentation": 0.1,
        "mem_external_fragmentation": 0.2, "mem_free": 0.1,
        "mem_waiting_token_states": 0.5, "mem_waiting_reservation": 0.2, "mem_waiting_internal_fragmentation": 0.1,
        "mem_waiting_external_fragmentation": 0.2, "mem_waiting_free": 0.0,
        "norm_latency_s_mean": latency, "norm_latency_s_p50": latency, "norm_latency_s_p99": 2 * latency,
    }


def make_run(sweep: Path, rel: str, overrides: list[str], summary_: dict | None = None,
             error: str | None = None) -> Path:
    run_dir = sweep / rel
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (run_dir / ".hydra" / "config.yaml").write_text("engine: {}\n")
    if error is not None:
        (run_dir / "error.json").write_text(json.dumps({"error": error}))
    if summary_ is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary_))
    return run_dir


@pytest.fixture
def sweep(tmp_path) -> Path:
    """Three finished runs at different depths, one failed run, one run cut off before its summary."""
    s = tmp_path / "sweep"
    make_run(s, "engine=paged,workload.request_rate=2", ["engine=paged", "workload.request_rate=2"],
             summary("paged", 2.0, 16, latency=0.04))
    make_run(s, "engine=orca_max,workload.request_rate=2", ["engine=orca_max", "workload.request_rate=2"],
             summary("orca-max", 2.0, latency=0.9))
    make_run(s, "older/run/engine=paged,workload.request_rate=4", ["engine=paged", "workload.request_rate=4"],
             summary("paged", 4.0, 16, latency=0.06))
    make_run(s, "engine=static,workload.request_rate=2", ["engine=static", "workload.request_rate=2"],
             error="model opt-13b does not fit")
    half = make_run(s, "engine=orca_pow2,workload.request_rate=2", ["engine=orca_pow2", "workload.request_rate=2"])
    (half / "iterations.parquet").write_bytes(b"not finished")
    return s


def test_collect_keeps_finished_runs_only(sweep):
    df = collect(sweep)
    assert sorted(df["run_dir"]) == ["engine=orca_max,workload.request_rate=2",
                                     "engine=paged,workload.request_rate=2",
                                     "older/run/engine=paged,workload.request_rate=4"]
    assert "static" not in set(df["engine"]) and "orca-pow2" not in set(df["engine"])
    assert list(df["engine"]) == ["orca-max", "paged", "paged"]   # paper order, then rate
    assert list(df["request_rate"]) == [2.0, 2.0, 4.0]
    paged = df[df["run_dir"] == "engine=paged,workload.request_rate=2"].iloc[0]
    assert paged["overrides"] == "engine=paged workload.request_rate=2"
    assert paged["mem_token_states"] == pytest.approx(0.4)
    assert list(df.columns[-2:]) == ["run_dir", "overrides"]


def test_collect_types_integer_columns_with_nulls_and_offline_rates(tmp_path):
    make_run(tmp_path, "a", ["engine=paged"], summary("paged", None, 16))
    make_run(tmp_path, "b", ["engine=static"], summary("static", None))
    df = collect(tmp_path)
    assert str(df["block_size"].dtype) == "Int64"
    assert df.loc[df["engine"] == "paged", "block_size"].iloc[0] == 16
    assert df.loc[df["engine"] == "static", "block_size"].isna().all()
    assert df["request_rate"].isna().all()   # offline: all requests at t = 0


def test_failures_listed_apart(sweep):
    failures = collect_failures(sweep)
    by_dir = dict(zip(failures["run_dir"], failures["error"]))
    assert by_dir == {"engine=orca_pow2,workload.request_rate=2": "unfinished: no summary.json and no error.json",
                      "engine=static,workload.request_rate=2": "model opt-13b does not fit"}
    assert "engine=static workload.request_rate=2" in set(failures["overrides"])


def test_unreadable_summary_is_a_failure(sweep):
    make_run(sweep, "torn", ["engine=paged"], None)
    (sweep / "torn" / "summary.json").write_text('{"engine": "pa')
    assert "torn" not in set(collect(sweep)["run_dir"])
    assert collect_failures(sweep).set_index("run_dir").loc["torn", "error"].startswith("unreadable summary.json")


def test_write_aggregate_writes_tables_and_figures(sweep):
    path = write_aggregate(sweep)
    assert path == sweep / "aggregate.parquet"
    table = pd.read_parquet(path)
    pd.testing.assert_frame_equal(table, collect(sweep))
    csv = pd.read_csv(sweep / "aggregate.csv")
    assert len(csv) == 3 and list(csv.columns) == list(table.columns)
    assert len(pd.read_csv(sweep / "failures.csv")) == 2
    figures = sorted(p.name for p in (sweep / "figures").glob("*.png"))
    assert "memory_waste.png" in figures and "latency_vs_rate.png" in figures
    assert not list(sweep.rglob("*.tmp"))


def test_rerun_regenerates_identical_tables(sweep):
    write_aggregate(sweep)
    first = {name: (sweep / name).read_bytes() for name in ("aggregate.parquet", "aggregate.csv", "failures.csv")}
    write_aggregate(sweep)
    for name, data in first.items():
        assert (sweep / name).read_bytes() == data, name


def test_rerun_follows_the_run_folders(sweep):
    write_aggregate(sweep)
    assert (sweep / "figures" / "latency_vs_rate.png").exists()
    # The rate-4 run goes, the failed runs are fixed: one rate left, no failures.
    for rel in ("older", "engine=static,workload.request_rate=2", "engine=orca_pow2,workload.request_rate=2"):
        for p in sorted((sweep / rel).rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        (sweep / rel).rmdir()
    write_aggregate(sweep)
    assert len(pd.read_parquet(sweep / "aggregate.parquet")) == 2
    assert not (sweep / "failures.csv").exists()
    assert not (sweep / "figures" / "latency_vs_rate.png").exists()   # one rate: no curve
    assert (sweep / "figures" / "memory_waste.png").exists()


def test_command_prints_table_and_paths(sweep, capsys):
    assert main([str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "3 finished runs, 2 failed" in out
    assert "orca-max" in out and "failed: engine=static,workload.request_rate=2: model opt-13b does not fit" in out
    assert str(sweep / "aggregate.parquet") in out and str(sweep / "figures" / "memory_waste.png") in out


@pytest.mark.parametrize("case", ["missing", "no finished run"])
def test_command_exits_2_with_one_line(case, tmp_path, sweep, capsys):
    bad = tmp_path / "nowhere"
    if case == "no finished run":
        make_run(bad, "x", ["engine=paged"], error="boom")
    assert main([str(sweep), str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err
    assert not (sweep / "aggregate.parquet").exists()   # nothing written when an argument is bad


def test_module_entry_point(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pagedbench.results.report.aggregate", str(tmp_path / "nowhere")],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "no such folder" in done.stderr and "Traceback" not in done.stderr
