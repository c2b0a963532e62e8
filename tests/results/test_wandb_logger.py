"""wandb logging: offline runs record config, series, table and summary; `none` and failures cost nothing.

wandb 0.31 writes an offline run as one `run-ID.wandb` file (no
`wandb-summary.json` or `config.yaml` until it is synced), so the tests read
that file back: a LevelDB-style log of `wandb_internal_pb2.Record` protobufs.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pandas as pd
import pytest

from pagedbench.engines.kv.memory_split import CATEGORIES
from pagedbench.results.record.wandb_backfill import iteration_series, log_to_wandb
from pagedbench.results.record.wandb_logger import LoggerConfig, WandbRun, run_name, sweep_group
from pagedbench.paths import ROOT

BLOCK = 32 * 1024          # the log is cut into 32 KiB blocks
HEADER = struct.Struct("<IHB")   # per chunk: checksum, length, type (1 full, 2 first, 3 middle, 4 last)
WANDB_CFG = {"name": "wandb", "mode": "offline", "project": "pagedbench-test", "tags": ["unit"]}


def read_records(path: Path):
    """Every Record in an offline run's `.wandb` file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    if len(data) < 7:   # not even the header yet
        return
    assert data[:4] == b":W&B", "not a wandb run log"
    pos, chunks = 7, []   # the file header (ident, magic, version) fills the first 7 bytes
    while pos + HEADER.size <= len(data):
        if BLOCK - pos % BLOCK < HEADER.size:   # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = HEADER.unpack_from(data, pos)
        if kind == 0:   # zero padding up to the end of the block
            pos += BLOCK - pos % BLOCK
            continue
        pos += HEADER.size
        if pos + length > len(data):   # still being written
            return
        chunks.append(data[pos:pos + length])
        pos += length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(chunks))
            chunks = []
            yield record


def finished_records(folder: Path, timeout_s: float = 10.0) -> list:
    """The records of the run in `folder` once its `exit` record is on disk.

    `run.finish()` returns before wandb-core has necessarily flushed the file
    (it does by process exit), so wait for the last record, checking every 50 ms.
    """
    [path] = folder.glob("run-*.wandb")
    deadline = time.monotonic() + timeout_s
    while True:
        records = list(read_records(path))
        if records and records[-1].WhichOneof("record_type") == "exit":
            return records
        assert time.monotonic() < deadline, f"{path} has no exit record after {timeout_s} s"
        time.sleep(0.05)


def fake_run(n_iterations: int = 10, n_requests: int = 6):
    """Small iterations / requests frames shaped like run.py's, and a summary."""
    i = np.arange(n_iterations)
    capacity = 100
    token_states = 10 + i
    iterations = pd.DataFrame({
        "iteration": i, "start_s": 0.5 * i, "duration_s": np.full(n_iterations, 0.5),
        "prefill_seqs": (i == 0).astype(int), "prefill_tokens": np.where(i == 0, 40, 0),
        "decode_seqs": np.where(i == 0, 0, 4), "decode_rows": np.where(i == 0, 0, 4),
        "batch_size": np.where(i == 0, 1, 4), "num_held": np.full(n_iterations, 4),
        "num_waiting": np.maximum(0, 3 - i), "preempted": (i % 4 == 3).astype(int),
        "token_states": token_states, "reservation": np.full(n_iterations, 20),
        "internal_fragmentation": np.full(n_iterations, 5), "external_fragmentation": np.zeros(n_iterations, int),
        "free": capacity - token_states - 25, "capacity_slots": np.full(n_iterations, capacity),
    })
    requests = pd.DataFrame({
        "id": np.arange(n_requests), "arrival_s": np.zeros(n_requests),
        "admitted_s": [0.0] * (n_requests - 1) + [np.nan], "first_token_s": [0.5] * (n_requests - 1) + [np.nan],
        "finish_s": [4.5] * (n_requests - 1) + [np.nan], "prompt_len": np.full(n_requests, 10),
        "output_len": np.full(n_requests, 8), "preemptions": np.zeros(n_requests, int),
        "status": ["finished"] * (n_requests - 1) + ["rejected"],
        "rejected_reason": pd.array([None] * (n_requests - 1) + ["longer than max_seq_len"], dtype="string"),
    })
    summary = {"engine": "paged", "block_size": 16, "workload": "sharegpt", "model": "opt-13b",
               "arrival": "offline", "request_rate": float("inf"), "experiment": None,
               "requests_per_s": 1.25, "output_tokens_per_s": 10.0, "mean_batch_size": np.float64(3.7),
               "num_preemptions": np.int64(2), "ttft_s_p99": float("nan")}
    return iterations, requests, summary


@pytest.fixture
def wandb_home(tmp_path, monkeypatch):
    """wandb's caches, staging, settings and service logs under tmp_path, not the user's home."""
    for var in ("WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / var.lower()))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    return tmp_path


def test_series_keep_every_iteration_when_few():
    iterations, _, _ = fake_run()
    series = iteration_series(iterations, max_points=100)
    assert series["step"].tolist() == list(range(10))
    assert series["clock_s"].tolist() == iterations["start_s"].tolist()
    expected = (iterations["prefill_tokens"] + iterations["decode_seqs"]) / iterations["duration_s"]
    np.testing.assert_allclose(series["tokens_per_s"], expected)
    np.testing.assert_allclose(series["mem_token_states"], iterations["token_states"] / 100)
    np.testing.assert_allclose(series[[f"mem_{c}" for c in CATEGORIES]].sum(axis=1), 1.0)


def test_series_downsample_into_buckets_that_lose_nothing():
    iterations, _, _ = fake_run(n_iterations=10)
    iterations.loc[1, "duration_s"] = 1.5   # a long iteration weighs more in its bucket
    series = iteration_series(iterations, max_points=4)
    assert series["step"].tolist() == [0, 2, 5, 7]
    assert series["preempted"].sum() == iterations["preempted"].sum()
    # bucket 0 is iterations 0-1: 40 + 4 tokens in 0.5 + 1.5 s; batch 1 for 0.5 s, 4 for 1.5 s
    assert series["tokens_per_s"].iloc[0] == pytest.approx(44 / 2.0)
    assert series["batch_size"].iloc[0] == pytest.approx((1 * 0.5 + 4 * 1.5) / 2.0)
    assert len(iteration_series(iterations.iloc[:0], max_points=4)) == 0


def test_run_name_says_engine_workload_and_rate():
    assert run_name({"engine": "paged", "block_size": 16, "workload": "sharegpt", "arrival": "poisson",
                     "request_rate": 2.0}) == "paged-bs16-sharegpt-rate2"
    assert run_name({"engine": "orca-pow2", "block_size": None, "workload": "sharegpt", "arrival": "offline",
                     "request_rate": 1.0}) == "orca-pow2-sharegpt"


def test_sweep_group_names_the_sweep_not_its_time_of_day():
    assert sweep_group("outputs/multirun/2026-01-31/12-00-00") == "2026-01-31_12-00-00"
    assert sweep_group(Path("/abs/outputs/experiments/throughput")) == "experiments_throughput"


def test_offline_run_records_config_series_table_and_summary(wandb_home, tmp_path):
    iterations, requests, summary = fake_run(n_iterations=10)
    run_dir = tmp_path / "run"
    config = {"engine": {"name": "paged", "block_size": 16},
              "workload": {"name": "sharegpt", "request_rate": float("inf")},
              "logger": dict(WANDB_CFG, max_iteration_points=4)}
    folder = log_to_wandb(config["logger"], config, run_dir, iterations, requests, summary,
                          group="2026-01-01_12-00-00")

    assert folder is not None and folder.parent == run_dir / "wandb" and folder.name.startswith("offline-run-")
    records = finished_records(folder)

    def by_kind(kind: str) -> list:
        return [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]


    [run] = by_kind("run")
    assert (run.project, run.run_group, run.display_name) == ("pagedbench-test", "2026-01-01_12-00-00",
                                                              "paged-bs16-sharegpt")
    assert list(run.tags) == ["unit"]
    logged_config = {u.key: json.loads(u.value_json) for u in run.config.update}
    assert logged_config["engine"] == {"name": "paged", "block_size": 16}
    assert logged_config["workload"]["request_rate"] == "inf"   # strict JSON has no infinity

    history = [{".".join(i.nested_key) or i.key: json.loads(i.value_json) for i in h.item}
               for h in by_kind("history")]
    series_rows = [h for h in history if "clock_s" in h]
    assert [h["_step"] for h in series_rows] == [0, 2, 5, 7]   # 10 iterations, 4 points
    assert [h["clock_s"] for h in series_rows] == [0.0, 1.0, 2.5, 3.5]
    expected_keys = {"iteration/batch_size", "iteration/tokens_per_s", "iteration/num_waiting",
                     "iteration/preempted", *(f"iteration/mem_{c}" for c in CATEGORIES)}
    assert all(expected_keys <= h.keys() for h in series_rows)
    assert sum(h["iteration/preempted"] for h in series_rows) == iterations["preempted"].sum()
    assert any(k.startswith("requests") for h in history for k in h)

    metrics = {m.glob_name or m.name: m for m in by_kind("metric")}
    assert metrics["iteration/*"].step_metric == "clock_s"

    final = {}
    for s in by_kind("summary"):
        for u in s.update:
            final[".".join(u.nested_key) or u.key] = json.loads(u.value_json)
    for key in ("engine", "workload", "requests_per_s", "output_tokens_per_s"):
        assert final[key] == summary[key]
    assert final["mean_batch_size"] == pytest.approx(3.7) and final["num_preemptions"] == 2
    assert final["ttft_s_p99"] is None and final["experiment"] is None   # NaN is stored as null
    assert final["request_rate"] == "inf"
    assert not any(k.startswith("iteration/") for k in final)   # the series leave no last values behind

    [table_file] = (folder / "files" / "media" / "table").glob("requests_*.table.json")
    table = json.loads(table_file.read_text())
    assert table["columns"] == list(requests.columns)
    assert len(table["data"]) == len(requests)
    assert table["data"][-1][-2:] == ["rejected", "longer than max_seq_len"]
    assert table["data"][0][-1] is None and table["data"][-1][2] is None


def test_figures_are_logged_as_images(wandb_home, tmp_path):
    from PIL import Image

    plot = tmp_path / "throughput_vs_rate.png"
    Image.new("RGB", (8, 6), "white").save(plot)
    run = WandbRun.start(WANDB_CFG, {"sweep": "rates"}, tmp_path / "sweep", name="sweep-plots", group="sweep")
    run.log_figures([plot])
    run.finish()
    keys = {".".join(i.nested_key) or i.key for r in finished_records(run.folder)
            if r.WhichOneof("record_type") == "history" for i in r.history.item}
    assert "figures/throughput_vs_rate._type" in keys
    assert list((run.folder / "files" / "media" / "images" / "figures").glob("throughput_vs_rate_*.png"))


@pytest.mark.parametrize("logger", [{"name": "none"}, dict(WANDB_CFG, mode="disabled")])
def test_no_logger_writes_nothing_and_never_imports_wandb(logger, tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import pandas as pd
        from pagedbench.results.record.wandb_backfill import log_to_wandb
        empty = pd.DataFrame()
        assert log_to_wandb({logger!r}, {{}}, Path({str(tmp_path)!r}), empty, empty, {{}}) is None
        print("wandb imported" if "wandb" in sys.modules else "wandb not imported")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "wandb not imported"
    assert list(tmp_path.iterdir()) == []


def test_wandb_failure_is_one_warning_and_keeps_going(wandb_home, tmp_path, monkeypatch, caplog):
    import wandb

    def broken_init(*args, **kwargs):
        raise RuntimeError("cannot reach the service\nsecond line")

    monkeypatch.setattr(wandb, "init", broken_init)
    iterations, requests, summary = fake_run()
    with caplog.at_level(logging.WARNING, logger="pagedbench"):
        assert log_to_wandb(WANDB_CFG, {}, tmp_path, iterations, requests, summary) is None
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    message = record.getMessage()
    assert "wandb logging failed" in message and "cannot reach the service" in message
    assert "\n" not in message


def test_failure_midway_closes_the_wandb_run_as_failed(wandb_home, tmp_path, monkeypatch, caplog):
    import wandb

    def broken_table(*args, **kwargs):
        raise TypeError("bad column")

    monkeypatch.setattr(wandb, "Table", broken_table)
    iterations, requests, summary = fake_run()
    with caplog.at_level(logging.WARNING, logger="pagedbench"):
        assert log_to_wandb(WANDB_CFG, {}, tmp_path, iterations, requests, summary) is None
    assert "wandb logging failed" in caplog.text and "TypeError: bad column" in caplog.text
    [folder] = (tmp_path / "wandb").glob("offline-run-*")
    assert finished_records(folder)[-1].exit.exit_code == 1


def test_bad_logger_config_is_one_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="pagedbench"):
        assert log_to_wandb(dict(WANDB_CFG, mode="ofline"), {}, Path("unused"), None, None, {}) is None
    assert "logger.mode='ofline' is not one of ['offline', 'online', 'disabled']" in caplog.text
    with pytest.raises(ValueError, match="max_iteration_points must be a positive integer"):
        LoggerConfig.from_dict(dict(WANDB_CFG, max_iteration_points=0))


def test_series_chart_sharing_and_swapping_when_recorded():
    iterations, _, _ = fake_run(8)
    iterations = iterations.assign(batch_rows=np.where(iterations["iteration"] == 0, 2, 8),
                                   unshared_slots=100, allocated_slots=np.where(iterations["iteration"] < 4, 60, 80),
                                   swapped_out=(iterations["iteration"] == 5).astype(int),
                                   num_swapped=(iterations["iteration"] >= 5).astype(int))
    s = iteration_series(iterations, max_points=2)        # two buckets of four iterations
    np.testing.assert_allclose(s["memory_saving"], [0.4, 0.2])
    np.testing.assert_allclose(s["swapped_out"], [0, 1])
    np.testing.assert_allclose(s["num_swapped"], [0, 0.75])
    # every row of a request decodes a token: 40 prefill + 3 x 8 rows, then 4 x 8, over 2 s each
    np.testing.assert_allclose(s["tokens_per_s"], [(40 + 24) / 2, 32 / 2])
    assert "memory_saving" not in iteration_series(fake_run(8)[0], max_points=2)


@pytest.mark.slow
def test_a_logged_run_carries_its_metadata_in_the_wandb_config(wandb_home, tmp_path):
    from hydra import compose, initialize_config_dir

    from pagedbench import run as entry

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=[
            "backend=sim", "workload=synthetic", "workload.num_requests=10", "progress=false", "logger=wandb",
            "logger.mode=offline", "logger.project=pagedbench-test"])
    summary = entry.run(cfg, tmp_path)
    [folder] = (tmp_path / "wandb").glob("offline-run-*")
    [run] = [r.run for r in finished_records(folder) if r.WhichOneof("record_type") == "run"]
    logged = {u.key: json.loads(u.value_json) for u in run.config.update}
    assert logged["metadata"]["code_version"] == summary["metadata"]["code_version"]
    assert logged["metadata"]["host"]["cpu_count"] == summary["metadata"]["host"]["cpu_count"]
    assert "config" not in logged["metadata"]      # the config itself is wandb's config already
