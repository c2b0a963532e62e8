"""End-to-end runs on the simulated backend: every engine, the run folder, the summary."""
import json
import subprocess
import sys

from hydra import compose, initialize_config_dir
import pandas as pd
import pytest

from pagedbench.results.record.store import is_complete
from pagedbench import run as entry
from pagedbench.paths import ROOT

ENGINES = ["static", "orca_max", "orca_pow2", "orca_oracle", "paged"]
SMALL = ["backend=sim", "workload=synthetic", "workload.num_requests=100", "workload.prompt_dist.low=16",
         "workload.prompt_dist.high=256", "model=opt-13b", "hardware=a100-40gb", "progress=false",
         "gpu_memory_utilization=0.73"]   # about 6,500 slots: three max_seq_len regions


def run_config(overrides, tmp_path):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    return entry.run(cfg, tmp_path)


@pytest.mark.parametrize("engine", ENGINES)
def test_each_engine_runs_a_small_sim_trace(engine, tmp_path):
    summary = run_config([f"engine={engine}", *SMALL], tmp_path)
    assert is_complete(tmp_path)
    iterations = pd.read_parquet(tmp_path / "iterations.parquet")
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    assert len(requests) == 100 and (requests["status"] == "finished").all()
    mem = iterations[["token_states", "reservation", "internal_fragmentation", "external_fragmentation", "free"]]
    assert (mem.sum(axis=1) == iterations["capacity_slots"]).all()
    assert summary["num_finished"] == 100
    shares = [summary[f"mem_{c}"] for c in ("token_states", "reservation", "internal_fragmentation",
                                            "external_fragmentation", "free")]
    assert sum(shares) == pytest.approx(1.0)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["engine"] == engine.replace("_", "-")
    assert on_disk["output_tokens_per_s"] == pytest.approx(summary["output_tokens_per_s"])


def test_paged_beats_orca_max_and_static_on_the_same_trace(tmp_path):
    out = {e: run_config([f"engine={e}", *SMALL], tmp_path / e) for e in ("static", "orca_max", "paged")}
    assert out["paged"]["mean_batch_size"] > 2 * out["orca_max"]["mean_batch_size"]
    assert out["paged"]["requests_per_s"] > out["orca_max"]["requests_per_s"] > out["static"]["requests_per_s"]
    # While requests wait (memory binds), paged fills its KV budget with tokens; orca-max cannot.
    assert out["paged"]["mem_waiting_token_states"] > 0.85
    assert out["orca_max"]["mem_waiting_token_states"] < 0.4


def test_runs_are_reproducible(tmp_path):
    a = run_config(["engine=paged", *SMALL], tmp_path / "a")
    b = run_config(["engine=paged", *SMALL], tmp_path / "b")
    for key in ("requests_per_s", "mean_batch_size", "mem_token_states", "num_iterations"):
        assert a[key] == b[key]


@pytest.mark.slow
def test_multirun_of_three_engines_from_the_command_line(tmp_path):
    args = [sys.executable, str(ROOT / "run.py"), "-m", "engine=static,orca,paged", *SMALL,
            f"hydra.sweep.dir={tmp_path}"]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summaries = sorted(tmp_path.glob("*/summary.json"))
    assert len(summaries) == 3
    assert {json.loads(p.read_text())["engine"] for p in summaries} == {"static", "orca-max", "paged"}
    assert "KV token states %" in proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["static", "orca_max", "paged"])
def test_real_backend_smoke_run_on_cpu(engine, tmp_path):
    summary = run_config([f"engine={engine}", "backend=real", "model=tiny", "workload=synthetic",
                          "workload.num_requests=12", "workload.prompt_dist.low=8", "workload.prompt_dist.high=64",
                          "workload.output_dist.mean=16", "backend.kv_budget_mib=40", "progress=false"], tmp_path)
    assert summary["num_finished"] == 12
    assert summary["backend"] == "real" and summary["device"] == "cpu" and summary["kernels"] in ("cpu", "torch")
    assert 0 < summary["forward_fraction_of_iterations"] <= 1
    # What wall-clock figures depend on: torch's threads and how loaded the machine was.
    assert summary["torch_threads"] >= 1 and summary["cpu_count"] >= 1
    assert summary["load_avg_1m_start"] >= 0 and summary["load_avg_1m_end"] >= 0
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    assert (requests["finish_s"] >= requests["first_token_s"]).all()


@pytest.mark.slow
def test_joblib_sweep_writes_every_run_and_rerunning_skips_them(tmp_path):
    args = [sys.executable, str(ROOT / "run.py"), "-m", "hydra/launcher=local", "hydra.launcher.n_jobs=2",
            "engine=orca_max,paged", "workload.request_rate=2,8", "workload.arrival=poisson", *SMALL,
            f"hydra.sweep.dir={tmp_path}"]
    first = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    summaries = sorted(tmp_path.glob("*/summary.json"))
    assert len(summaries) == 4
    rates = {(json.loads(p.read_text())["engine"], json.loads(p.read_text())["request_rate"]) for p in summaries}
    assert rates == {("orca-max", 2.0), ("orca-max", 8.0), ("paged", 2.0), ("paged", 8.0)}
    stamps = {p: p.stat().st_mtime_ns for p in summaries}
    again = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert again.returncode == 0
    assert "skipping" in again.stdout + again.stderr
    assert {p: p.stat().st_mtime_ns for p in summaries} == stamps


@pytest.mark.slow
def test_logger_wandb_writes_an_offline_run_into_the_run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    run_config(["engine=paged", "logger=wandb", *SMALL], tmp_path / "run")
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
