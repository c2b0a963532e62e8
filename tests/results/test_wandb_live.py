"""Live wandb logging: the engine loop's per-iteration hook, the live series' points and budget, an offline run.

The offline runs are read back from their `run-*.wandb` files (`finished_records`, as the wandb logger's
tests do): wandb 0.31 writes nothing else until a run is synced.
"""
from __future__ import annotations

import json
import logging

from hydra import compose, initialize_config_dir
import numpy as np
import pandas as pd
import pytest

from pagedbench.engines.kv.memory_split import CATEGORIES
from pagedbench.engines.run_record import IterationRow
import pagedbench.engines.loop as engine_loop
from pagedbench.engines.loop import run_engine
from pagedbench.results.record.frames import iterations_frame
from pagedbench.results.record.wandb_logger import LiveRun, LoggerConfig, WandbRun, run_name
from pagedbench.results.record.wandb_series import CLOCK, LiveSeries, series_points, series_row
from pagedbench import run as entry
from pagedbench.paths import ROOT
from tests.results.test_wandb_logger import finished_records

SIM = ["backend=sim", "workload=synthetic", "model=opt-13b", "hardware=a100-40gb", "progress=false",
       "gpu_memory_utilization=0.73"]
LIVE_KEYS = {"iteration/batch_size", "iteration/num_waiting", "iteration/rows_per_s", "iteration/tokens_per_s",
             "iteration/preempted", "iteration/swapped_out", "iteration/swapped_in", "iteration/num_swapped",
             "iteration/memory_saving", *(f"iteration/mem_{c}" for c in CATEGORIES)}


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """wandb offline, its default folder, caches and settings under tmp_path."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-default"))
    for var in ("WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / var.lower()))
    return tmp_path


def config(overrides):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return compose(config_name="config", overrides=[*SIM, *overrides])


def sim_record(num_requests=60):
    rc = entry.RunConfig.parse(config([f"workload.num_requests={num_requests}"]))
    backend = rc.build_backend(0.73)
    backend.executor.start_clock()
    seen = []
    record = run_engine(entry.build_workload(rc.workload), backend.scheduler, backend.executor, progress=False,
                        on_iteration=seen.append)
    return record, seen


def by_kind(records, kind):
    return [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]


def history(records) -> list[dict]:
    return [{".".join(i.nested_key) or i.key: json.loads(i.value_json) for i in h.item}
            for h in by_kind(records, "history")]


def row(i: int, rows: int) -> IterationRow:
    """A decode iteration of `rows` rows, 10 ms long, starting at 10 ms x i."""
    return IterationRow(start_s=0.01 * i, duration_s=0.01, prefill_seqs=0, prefill_tokens=0, decode_seqs=rows,
                        decode_rows=rows, batch_size=rows, num_held=rows, num_waiting=i % 3, preempted=int(i % 7 == 0),
                        batch_rows=rows, copy_tokens=0, swapped_out=0, swapped_in=0, swap_blocks=0, num_swapped=0,
                        admission_blocked_by="", unshared_slots=100, allocated_slots=90, token_states=50,
                        reservation=10, internal_fragmentation=5, external_fragmentation=5, free=30)


def test_the_engine_loop_hands_every_iteration_to_its_callback_as_it_is_recorded():
    record, seen = sim_record()
    assert len(seen) > 10 and seen == record.iterations


@pytest.mark.parametrize("pace, most", [("steady", 1.01), ("falling", 1.4)])
def test_a_100k_iteration_run_logs_about_2000_points_live(pace, most):
    n = 100_000
    rows = np.full(n, 8) if pace == "steady" else np.where(np.arange(n) < n // 10, 200, 2)   # a long tail
    steps = []
    series = LiveSeries(lambda point, step: steps.append(step), capacity=100, expected_rows=int(rows.sum()),
                        max_points=2000)
    for i, r in enumerate(rows.tolist()):
        series(row(i, r))
    series.flush()
    assert 1800 <= len(steps) <= most * 2000
    assert steps[0] == 0 and all(a < b for a, b in zip(steps, steps[1:]))


def test_a_live_point_is_the_finished_series_point_of_the_same_iterations():
    record, _ = sim_record()
    logged = []
    series = LiveSeries(lambda point, step: logged.append((step, point)), record.capacity_slots,
                        expected_rows=sum(r.batch_rows for r in record.iterations), max_points=7)
    for r in record.iterations:
        series(r)
    series.flush()
    frame = iterations_frame(record)
    starts = np.array([step for step, _ in logged])
    points = series_points(frame, starts, frame["capacity_slots"].to_numpy())
    assert 5 <= len(logged) <= 12
    for k, (step, live) in enumerate(logged):
        assert live == pytest.approx(series_row({name: values[k] for name, values in points.items()}))
    assert sum(p["iteration/preempted"] for _, p in logged) == frame["preempted"].sum()


class FakeRun:
    """What LiveRun calls on a wandb run: log, define_metric, summary, finish."""

    def __init__(self, fail_after: int | None = None):
        self.logged, self.metrics, self.summary, self.exit_code = [], [], {}, None
        self.fail_after = fail_after

    def log(self, data, step=None):
        if self.fail_after is not None and len(self.logged) >= self.fail_after:
            raise ConnectionError("wandb-core went away\nmore")
        self.logged.append((step, data))

    def define_metric(self, name, **kwargs):
        self.metrics.append((name, kwargs))

    def finish(self, exit_code=0):
        self.exit_code = exit_code


def test_live_run_defines_the_clock_axis_then_logs_series_table_and_summary(tmp_path):
    fake = FakeRun()

    class Tables:
        @staticmethod
        def Table(columns, data, allow_mixed_types):
            return {"columns": columns, "rows": len(data)}

    live = LiveRun(WandbRun(fake, Tables, LoggerConfig(name="wandb"), "offline"), tmp_path, 100, expected_rows=80)
    for i in range(10):
        live.series(row(i, 8))
    requests = pd.DataFrame({"id": [0, 1], "token_times_s": [np.array([0.1]), np.array([0.2, 0.3])]})
    live.end(requests, {"requests_per_s": 1.5})
    assert fake.metrics == [(CLOCK, {"summary": "none"}), ("iteration/*", {"step_metric": CLOCK, "summary": "none"})]
    points = [data for _, data in fake.logged if CLOCK in data]
    assert points and all(LIVE_KEYS - {"iteration/tokens_per_s"} <= p.keys() for p in points)
    assert fake.logged[-1][1] == {"requests": {"columns": ["id"], "rows": 2}}   # per-token columns stay on disk
    assert fake.summary == {"requests_per_s": 1.5} and fake.exit_code == 0


def test_a_wandb_error_mid_run_is_one_warning_and_the_run_goes_on(tmp_path, caplog):
    fake = FakeRun(fail_after=2)
    live = LiveRun(WandbRun(fake, None, LoggerConfig(name="wandb"), "offline"), tmp_path, 100, expected_rows=400)
    with caplog.at_level(logging.WARNING, logger="pagedbench"):
        for i in range(50):
            live.series(row(i, 8))
        live.end(pd.DataFrame({"id": [0]}), {})
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "ConnectionError: wandb-core went away" in warning and "\n" not in warning
    assert len(fake.logged) == 2 and fake.exit_code == 1 and fake.summary == {}


@pytest.mark.slow
def test_a_run_with_logger_wandb_logs_its_series_live_against_the_clock(offline, monkeypatch):
    points_when_loop_ended = []
    real_run_engine = engine_loop.run_engine

    def watched(*args, on_iteration=None, **kwargs):
        record = real_run_engine(*args, on_iteration=on_iteration, **kwargs)
        points_when_loop_ended.append(on_iteration.points)
        return record

    monkeypatch.setattr(engine_loop, "run_engine", watched)   # what run.py's EngineRunner drives
    run_dir = offline / "run"
    summary = entry.run(config(["workload.num_requests=100", "logger=wandb", "logger.project=pagedbench-test",
                                "logger.max_iteration_points=20"]), run_dir)
    [folder] = (run_dir / "wandb").glob("offline-run-*")
    records = finished_records(folder)
    assert points_when_loop_ended[0] > 0   # logged while the engine loop ran, not after it

    [run] = by_kind(records, "run")
    assert (run.display_name, run.job_type, run.run_group) == (run_name(summary), "run", "")
    metrics = {m.glob_name or m.name: m for m in by_kind(records, "metric")}
    assert metrics["iteration/*"].step_metric == CLOCK and CLOCK in metrics

    iterations = pd.read_parquet(run_dir / "iterations.parquet")
    rows = [h for h in history(records) if CLOCK in h]
    assert 10 <= len(rows) <= 30 < len(iterations)   # about max_iteration_points
    assert all(LIVE_KEYS <= h.keys() for h in rows)
    clocks, steps = [h[CLOCK] for h in rows], [h["_step"] for h in rows]
    assert clocks == sorted(clocks) and steps == sorted(set(steps)) and steps[0] == 0
    assert clocks[0] == iterations["start_s"].iloc[0] and clocks[-1] <= iterations["start_s"].iloc[-1]
    assert sum(h["iteration/preempted"] for h in rows) == iterations["preempted"].sum()
    assert any(k.startswith("requests") for h in history(records) for k in h)
    final = {(".".join(u.nested_key) or u.key): json.loads(u.value_json)
             for s in by_kind(records, "summary") for u in s.update}
    assert final["requests_per_s"] == pytest.approx(summary["requests_per_s"])
    assert records[-1].exit.exit_code == 0


@pytest.mark.slow
def test_a_run_that_fails_closes_its_live_wandb_run_as_failed(offline):
    run_dir = offline / "run"
    with pytest.raises(entry.RunFailed, match="no request finished"):
        entry.run(config(["workload.num_requests=10", "limits.max_seq_len=8", "logger=wandb",
                          "logger.project=pagedbench-test"]), run_dir)
    [folder] = (run_dir / "wandb").glob("offline-run-*")
    assert finished_records(folder)[-1].exit.exit_code == 1
