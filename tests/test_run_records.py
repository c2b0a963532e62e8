"""Run records you can trust: a folder holds the run its config says, no run is lost, every failure says so
and exits non-zero, every result says what made it."""
import json
import os
from pathlib import Path
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from pagedbench.paths import ROOT
from pagedbench.results.record.result_code import result_code
from pagedbench.results.record.identity import LOCK, RUN_RECORD, RunIdentity, check_reuse, folder_lock, FolderRefused
from pagedbench.results.record.store import ERROR, REFUSED, SUMMARY, read_parquet_metadata
from pagedbench.results.sweeps.collect import collect, collect_failures, mixed_code_note

SMALL = ["backend=sim", "workload=synthetic", "workload.num_requests=20", "workload.prompt_dist.low=16",
         "workload.prompt_dist.high=128", "progress=false"]


def run_py(*args, cwd=ROOT, timeout=300):
    """run.py's exit status and everything it printed (Hydra logs to stdout, errors go to stderr too)."""
    done = subprocess.run([sys.executable, str(ROOT / "run.py"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    done.out = done.stdout + done.stderr
    return done


def summary(folder: Path) -> dict:
    return json.loads((folder / SUMMARY).read_text())


@pytest.mark.slow
def test_a_finished_folder_is_reused_only_for_the_same_config(tmp_path):
    folder = tmp_path / "run"
    assert run_py(*SMALL, "engine=static", f"hydra.run.dir={folder}").returncode == 0
    first = summary(folder)

    other = run_py(*SMALL, "engine=paged", f"hydra.run.dir={folder}")
    assert other.returncode == 2
    assert "engine.name: 'static' -> 'paged'" in other.out and "rerun=true" in other.out
    assert summary(folder) == first                                   # the static run is left as it was
    assert yaml.safe_load((folder / ".hydra" / "config.yaml").read_text())["engine"]["name"] == "static"
    assert "engine=static" in (folder / ".hydra" / "overrides.yaml").read_text()
    assert "engine.name" in json.loads((folder / REFUSED).read_text())["error"]

    same = run_py(*SMALL, "engine=static", f"hydra.run.dir={folder}")
    assert same.returncode == 0 and "skipping" in same.out
    assert summary(folder) == first

    again = run_py(*SMALL, "engine=paged", "rerun=true", f"hydra.run.dir={folder}")
    assert again.returncode == 0 and summary(folder)["engine"] == "paged"
    assert not (folder / REFUSED).exists()


def test_another_result_code_is_named_and_refused(tmp_path):
    config = {"engine": {"name": "paged"}, "progress": None, "logger": {"name": "none"}}
    ours = RunIdentity(config, "bbb", code_version="c2")
    (tmp_path / SUMMARY).write_text("{}")
    (tmp_path / RUN_RECORD).write_text(json.dumps({"fingerprint": "x", "result_code": "aaa", "code_version": "c1",
                                                   "config": {**config, "progress": True}}))
    with pytest.raises(FolderRefused, match=r"result_code: 'aaa' -> 'bbb'"):
        check_reuse(tmp_path, ours, rerun=False)
    # another commit with the same result code is the same run: only the result code is in the fingerprint
    assert RunIdentity(config, "bbb", code_version="c1").fingerprint == ours.fingerprint
    assert check_reuse(tmp_path, ours, rerun=True) is None
    # progress and logger do not change a result: they are not part of the fingerprint
    assert RunIdentity({**config, "progress": True}, "v").fingerprint == RunIdentity(config, "v").fingerprint
    assert RunIdentity({**config, "engine": {"name": "static"}}, "v").fingerprint != RunIdentity(config, "v").fingerprint


def test_a_finished_run_without_a_record_is_not_reused(tmp_path):
    (tmp_path / SUMMARY).write_text("{}")
    with pytest.raises(FolderRefused, match="no run.json"):
        check_reuse(tmp_path, RunIdentity({}, "v"), rerun=False)


def test_a_live_lock_refuses_a_second_writer_and_a_dead_ones_lock_is_taken_over(tmp_path):
    with folder_lock(tmp_path):
        with pytest.raises(FolderRefused, match=f"being written by process {os.getpid()}"):
            with folder_lock(tmp_path):
                pass
    assert not (tmp_path / LOCK).exists()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / LOCK).write_text(json.dumps({"pid": dead.pid, "host": os.uname().nodename}))
    with folder_lock(tmp_path):
        assert json.loads((tmp_path / LOCK).read_text())["pid"] == os.getpid()


@pytest.mark.slow
def test_runs_started_together_get_folders_of_their_own(tmp_path):
    procs = [subprocess.Popen([sys.executable, str(ROOT / "run.py"), *SMALL, f"workload.seed={seed}"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for seed in range(3)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0]
    summaries = sorted(tmp_path.glob("outputs/runs/*/*/summary.json"))
    assert len(summaries) == 3
    assert sorted(json.loads(s.read_text())["workload_seed"] for s in summaries) == [0, 1, 2]


@pytest.mark.slow
def test_every_record_says_what_made_it(tmp_path):
    assert run_py(*SMALL, "engine.allocator=first_fit", "engine=orca_oracle", f"hydra.run.dir={tmp_path}").returncode == 0
    meta = summary(tmp_path)["metadata"]
    assert meta["schema_version"] >= 2 and meta["git_commit"] and isinstance(meta["git_dirty"], bool)
    assert meta["code_version"].startswith(meta["git_commit"][:12])
    assert meta["host"]["cpu_count"] == os.cpu_count() and meta["libraries"]["torch"]
    assert meta["config"]["engine"]["allocator"] == "first_fit"
    assert meta["config"]["limits"]["max_num_seqs"] == 256 and "gpu_memory_utilization" in meta["config"]
    assert "run.py" in " ".join(meta["command"])
    for table in ("iterations.parquet", "requests.parquet"):
        assert read_parquet_metadata(tmp_path / table) == meta
    record = json.loads((tmp_path / RUN_RECORD).read_text())
    assert record["code_version"] == meta["code_version"] and record["config"]["engine"]["allocator"] == "first_fit"
    assert record["result_code"] == meta["result_code"] == result_code()


@pytest.mark.slow
@pytest.mark.parametrize("args, status, message, worked", [
    ([*SMALL, "engine=static", "backend.kv_budget_slots=100"], 1, "no request finished: all 20 requests were rejected",
     True),
    ([*SMALL, "stop_at_last_arrival=true"], 2, "offline trace", False),
    ([*SMALL, "measure.warmup_fraction=1.5"], 2, "measure.warmup_fraction must be in [0, 1)", False),
    (["backend=sim", "sampling=n4", "workload=alpaca", "workload.num_requests=200", "swap_space=0.001",
      "progress=false"], 1, "raise swap_space", False),   # dies mid-run: no tables, error.json says why
])
def test_a_failed_run_exits_non_zero_and_says_why_in_error_json(tmp_path, args, status, message, worked):
    done = run_py(*args, f"hydra.run.dir={tmp_path}")
    assert done.returncode == status, done.out[-2000:]
    assert message in done.out
    error = json.loads((tmp_path / ERROR).read_text())
    assert message in error["error"]
    assert not (tmp_path / SUMMARY).exists()
    assert (tmp_path / "iterations.parquet").exists() == worked   # a config error stops before any work


@pytest.mark.slow
def test_a_multirun_with_a_failed_run_finishes_the_others_and_exits_non_zero(tmp_path):
    done = run_py("-m", *SMALL, "engine=static", "backend.kv_budget_slots=100,100000", f"hydra.sweep.dir={tmp_path}")
    assert done.returncode == 1
    assert "1 run(s) of the sweep" in done.out and "failures.csv" in done.out
    assert len(collect(tmp_path)) == 1 and len(collect_failures(tmp_path)) == 1
    assert "all 20 requests were rejected" in pd.read_csv(tmp_path / "failures.csv")["error"].iloc[0]


@pytest.mark.slow
def test_a_capacity_search_records_each_failed_runs_own_error(tmp_path):
    done = run_py("-m", "hydra/sweeper=capacity", "backend=sim", "workload=synthetic", "progress=false",
                  "engine=static", "backend.kv_budget_slots=100", "workload.arrival=poisson", "workload.duration_s=20",
                  f"hydra.sweep.dir={tmp_path}")
    assert done.returncode == 1
    errors = pd.read_csv(tmp_path / "capacity.csv")["error"]
    assert errors.str.contains("requests were rejected").all()


def test_a_sweep_table_names_its_code_versions_and_says_when_they_are_mixed(tmp_path):
    # three commits, two versions of the result-affecting code: commits c1 and c2 made the same runs
    for i, (commit, result) in enumerate([("c1", "aaa"), ("c2", "aaa"), ("c3", "bbb")]):
        folder = tmp_path / f"r{i}"
        folder.mkdir()
        (folder / SUMMARY).write_text(json.dumps({"engine": "paged", "metadata": {
            "code_version": commit, "git_commit": commit, "result_code": result}}))
    df = collect(tmp_path)
    assert sorted(df["code_version"]) == ["c1", "c2", "c3"] and "metadata" not in df
    assert sorted(df["result_code"]) == ["aaa", "aaa", "bbb"]
    assert mixed_code_note(df) == ("runs from 2 versions of the result-affecting code are mixed in this table: "
                                   "aaa (2 runs), bbb (1 runs)")
    assert mixed_code_note(df[df["result_code"] == "aaa"]) is None
    # runs recorded before the result code was: one "unknown" version, not mixed with itself
    old = collect(tmp_path).drop(columns="result_code")
    assert mixed_code_note(old) is None


def test_the_report_names_experiments_that_mix_code_versions(tmp_path):
    from pagedbench.results.report.write import code_notes

    for name, versions in (("memory_waste", ["aaa", "bbb"]), ("batch_size", ["aaa", "aaa"])):
        for i, version in enumerate(versions):
            folder = tmp_path / name / f"r{i}"
            folder.mkdir(parents=True)
            (folder / SUMMARY).write_text(json.dumps({"engine": "paged", "metadata": {"result_code": version}}))
    assert code_notes(tmp_path) == ["memory_waste: runs from 2 versions of the result-affecting code are mixed in "
                                    "this table: aaa (1 runs), bbb (1 runs)"]
