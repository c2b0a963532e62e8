"""Trace files: written from any workload, read back, replayed exactly or drawn from as a pool."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from pagedbench.workloads import WorkloadConfig, build_workload
from pagedbench.workloads.trace_file import read_trace, write_trace
from pagedbench.workloads.write_trace import main
from pagedbench.paths import ROOT



def lengths(trace):
    return [(r.arrival_s, r.prompt_len, r.output_len) for r in trace]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
@pytest.mark.parametrize("with_tokens", [False, True])
def test_a_written_trace_replays_exactly(tmp_path, suffix, with_tokens):
    original = build_workload(WorkloadConfig(name="synthetic", arrival="gamma", request_rate=4.0, burstiness=0.5,
                                             duration_s=20.0, seed=3))
    path = write_trace(original, tmp_path / f"t{suffix}", with_tokens=with_tokens)
    replayed = build_workload(WorkloadConfig(name="trace", path=str(path), arrival="trace"))
    assert [r.arrival_s for r in replayed] == pytest.approx([r.arrival_s for r in original])
    assert [(r.prompt_len, r.output_len) for r in replayed] == [(r.prompt_len, r.output_len) for r in original]
    assert [r.id for r in replayed] == list(range(len(original)))
    if with_tokens:
        assert [r.prompt_token_ids for r in replayed] == [r.prompt_token_ids for r in original]
    assert replayed == build_workload(WorkloadConfig(name="trace", path=str(path), arrival="trace"))  # seeded ids


def test_replay_orders_rows_by_arrival_when_asked(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"prompt_len": 3, "output_len": 2, "arrival_s": 5.0}, {"prompt_len": 4, "output_len": 1, "arrival_s": 1.0},
        {"prompt_len": 5, "output_len": 7, "arrival_s": 5.0}]))
    with pytest.raises(ValueError, match="line 2: arrival_s 1 is earlier than line 1's 5"):
        build_workload(WorkloadConfig(name="trace", path=str(path), arrival="trace"))
    trace = build_workload(WorkloadConfig(name="trace", path=str(path), arrival="trace", sort_arrivals=True))
    assert lengths(trace) == [(1.0, 4, 1), (5.0, 3, 2), (5.0, 5, 7)]
    assert [r.id for r in trace] == [1, 0, 2]   # each row keeps its place in the file as its id


def test_a_trace_file_is_also_a_pool_of_pairs(tmp_path):
    rows = pd.DataFrame({"prompt_len": [10, 20, 30], "output_len": [5, 6, 7]})
    rows.to_parquet(tmp_path / "pool.parquet")
    trace = build_workload(WorkloadConfig(name="trace", path=str(tmp_path / "pool.parquet"), arrival="poisson",
                                          request_rate=2.0, duration_s=30.0))
    assert len(trace) > 20 and {(r.prompt_len, r.output_len) for r in trace} == {(10, 5), (20, 6), (30, 7)}


@pytest.mark.parametrize("rows, message", [
    ([{"prompt_len": 3}], "needs a 'output_len' column"),
    ([{"prompt_len": 0, "output_len": 2}], "prompt_len must be a positive integer"),
    ([{"prompt_len": 2.5, "output_len": 2}], "prompt_len must be a positive integer"),
    ([{"prompt_len": 2, "output_len": 2, "arrival_s": -1}], "arrival_s must be"),
    ([{"prompt_len": 2, "output_len": 2, "colour": "red"}], "unknown column"),
    ([{"prompt_len": 2, "output_len": 2, "prompt_token_ids": [1, 2, 3]}], "has 3 ids but prompt_len is 2"),
])
def test_bad_trace_files_are_refused_with_the_reason(tmp_path, rows, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ValueError, match=message):
        read_trace(path)


def test_replay_needs_arrival_times_and_a_path(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"prompt_len": 3, "output_len": 2}))
    with pytest.raises(ValueError, match="lacks"):
        build_workload(WorkloadConfig(name="trace", path=str(path), arrival="trace"))
    with pytest.raises(ValueError, match="set workload.path"):
        WorkloadConfig(name="trace", arrival="trace")
    with pytest.raises(ValueError, match="arrival='trace' takes arrival times from a trace file"):
        WorkloadConfig(name="synthetic", arrival="trace")
    with pytest.raises(ValueError, match="a trace file ends in"):
        read_trace(tmp_path / "t.csv")


def test_write_command(tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    assert main([str(out), "synthetic", "num_requests=12", "arrival=poisson", "request_rate=2"]) == 0
    assert "wrote 12 requests of synthetic" in capsys.readouterr().out
    assert len(read_trace(out)) == 12
    assert main([str(tmp_path / "s.csv"), "synthetic"]) == 2
    assert main([str(out), "nosuch"]) == 2


@pytest.mark.slow
def test_a_trace_file_runs_on_both_backends(tmp_path):
    path = tmp_path / "t.jsonl"
    trace = build_workload(WorkloadConfig(name="synthetic", num_requests=6, arrival="poisson", request_rate=50.0,
                                          prompt_dist={"kind": "uniform", "low": 4, "high": 20},
                                          output_dist={"kind": "uniform", "low": 2, "high": 6}))
    write_trace(trace, path)
    for backend in ("sim", "real"):
        out = tmp_path / backend
        done = subprocess.run([sys.executable, "run.py", f"backend={backend}", "workload=trace",
                               f"workload.path={path}", f"hydra.run.dir={out}", "progress=false"],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["num_finished"] == 6 and summary["workload"] == "trace"
