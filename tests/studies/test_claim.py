"""pagedbench.studies.claim, the paper's experiment in one command: the queue, the paper's budget, the per-step
record and its device-time sample, the checks before anything loads, and the whole protocol on this CPU with
the tiny model (two engines, a second and a half each)."""
import math
import tarfile

import numpy as np
import pandas as pd
import pytest
import torch

import pagedbench.studies.claim as claim
from pagedbench.engines.batch import Batch
from pagedbench.paths import ROOT
from pagedbench.studies.claim_steps import StepRecorder, kernel_seconds, step_features
from pagedbench.studies.profile import Shape, features
from pagedbench.workloads import Request

TRACE = ROOT / "data" / "traces" / "sharegpt_64_seed2.jsonl"


def test_the_paper_budget_lets_orca_max_batch_exactly_seven_opt_13b_requests():
    slots = claim.paper_slots("opt-13b")
    assert slots // 2048 == 7
    assert 12_000 < slots * 819_200 / 2**20 < 12_100   # MiB in fp16


def test_the_queue_waits_at_zero_but_its_last_request_arrives_when_serving_ends():
    requests = [Request(id=i, arrival_s=float(i), prompt_token_ids=(1,) * 10, output_len=5) for i in range(4)]
    queue = claim.claim_queue(requests, 7.5)
    assert [r.arrival_s for r in queue] == [0.0, 0.0, 0.0, 7.5]
    assert [r.id for r in queue] == [0, 1, 2, 3]


def test_the_fit_base_is_the_gpus_own_preset():
    assert claim.fit_base("NVIDIA H100 80GB HBM3") == "h100-80gb"
    assert claim.fit_base("NVIDIA H200") == "h200"
    assert claim.fit_base("cpu") == "cpu"


@pytest.mark.parametrize("block_size", [None, 16])
def test_a_decode_steps_features_are_the_profiles_features_of_the_same_shape(block_size):
    lens = [5, 17, 33]
    batch = Batch(decode=[object()] * 3, decode_context_lens=lens)
    layout = "paged" if block_size else "contiguous"
    want = features(Shape("decode", layout, block_size or 0, tuple(lens)))
    assert step_features(batch, block_size) == want


def test_a_prefill_steps_features_count_only_the_tokens_it_computes():
    batch = Batch(prefill=[object(), object()], prefill_lens=[12, 30], prefill_cached=[4, 0])
    got = step_features(batch, 16)
    assert got == features(Shape("prefill", "paged", 16, (8, 30))) | {"layout": "paged", "block_size": 16}
    assert got["tokens"] == 38 and got["decode_blocks"] == 0


class FakeExecutor:
    name = "fake"

    def __init__(self):
        self.clock = 0.0

    def now(self):
        return self.clock

    def execute(self, batch):
        self.clock += 1.0
        torch.ones(64, 64) @ torch.ones(64, 64)
        return 0.25


def test_the_recorder_passes_calls_through_records_each_step_and_profiles_a_sample_once():
    inner = FakeExecutor()
    recorder = StepRecorder(inner, 16, torch.device("cpu"), profile_from_s=2.0, profile_steps=3,
                            activity=torch.profiler.ProfilerActivity.CPU)
    batch = Batch(decode=[object()], decode_context_lens=[9])
    for _ in range(8):
        assert recorder.execute(batch) == 0.25
    recorder.finish()
    assert recorder.name == "fake" and recorder.now() == 8.0
    table = recorder.table("paged")
    assert len(table) == 8 and (table["time_s"] == 0.25).all() and (table["host_s"] > 0).all()
    assert set(table["engine"]) == {"paged"}
    share = recorder.device_share()
    assert share["profiled_steps"] == 3   # from the step that starts at clock 2.0, three steps, once
    assert share["step_wall_ms"] > 0 and share["step_device_ms"] == 0.0   # CPU ops have no device time


def test_no_sample_is_profiled_on_a_cpu_by_default_and_a_short_run_ends_its_profile():
    recorder = StepRecorder(FakeExecutor(), None, torch.device("cpu"), profile_from_s=0.0)
    recorder.execute(Batch(decode=[object()], decode_context_lens=[3]))
    assert recorder.activity is None and math.isnan(recorder.device_share()["step_device_ms"])
    cut = StepRecorder(FakeExecutor(), None, torch.device("cpu"), profile_from_s=0.0, profile_steps=50,
                       activity=torch.profiler.ProfilerActivity.CPU)
    cut.execute(Batch(decode=[object()], decode_context_lens=[3]))
    cut.finish()
    assert cut.device_share()["profiled_steps"] == 1


def test_kernel_seconds_reads_a_finished_profile():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(8) + 1
    assert kernel_seconds(prof) == 0.0


@pytest.mark.parametrize("args, expected", [
    (dict(engines=["paged", "vllm"]), "unknown engine 'vllm'"),
    (dict(requests=1), "at least 2 requests"),
    (dict(serve_s=0.0), "--serve-s 0.0"),
    (dict(slots=1000), "1000 KV slots hold no 2048-token request"),
    (dict(model="opt-7b"), "opt-7b"),
    (dict(trace=ROOT / "no-such.jsonl"), "no such file"),
    (dict(extra=["limits.max_num_seqs=oops"]), "config:"),
])
def test_bad_input_is_named_before_anything_loads(args, expected):
    given = dict(model="tiny", engines=["paged"], requests=10, serve_s=1.0, slots=14400, extra=[]) | args
    found = claim.problems(given["model"], given["engines"], given["requests"], given["serve_s"], given["slots"],
                           given["extra"], given.get("trace"))
    assert any(expected in problem for problem in found), found


def test_the_cli_refuses_bad_input_with_exit_2(capsys):
    assert claim.main(["--model", "tiny", "--engines", "paged,nope", "--kv-slots", "14400"]) == 2
    assert "error: unknown engine 'nope'" in capsys.readouterr().err


# Seconds each engine serves, and the trace's first requests it serves: the paged engine prefills every waiting
# prompt before its first decode, which for all 64 took about 1 s on a quiet 2-core machine, and a busy one
# (a second test process beside it) finished none of them in 3 s. 16 take a quarter of that.
SERVE_S = 3.0
REQUESTS = 16


@pytest.mark.slow
def test_the_whole_protocol_on_this_cpu(tmp_path, capsys):
    out = tmp_path / "claim"
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(TRACE.read_text().splitlines(keepends=True)[:REQUESTS]))
    assert claim.main(["--model", "tiny", "--engines", "orca_max,paged", "--trace", str(trace), "--serve-s",
                       str(SERVE_S), "--kv-slots", "14400", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "paged / orca_max:" in printed
    table = pd.read_csv(out / "claim.csv")
    assert list(table["engine"]) == ["orca_max", "paged"]
    assert (table["kv_budget_slots"] == 14400).all() and (table["requests"] == REQUESTS).all()
    assert not table["cuda_graphs"].any() and (table["graphs_note"] == "no GPU").all()   # auto, on a CPU
    for side in ("real", "sim"):
        assert (table[f"{side}_output_tokens_per_s"] > 0).all()
        split = table[[f"{side}_kv_{k}" for k in ("token_states", "reservation", "internal_fragmentation",
                                                  "external_fragmentation", "free")]].sum(axis=1)
        assert np.allclose(split, 1.0, atol=1e-6)
    assert table.set_index("engine").at["orca_max", "real_mean_decode_batch"] <= 7
    for engine in ("orca_max", "paged"):
        steps = pd.read_parquet(out / engine / "steps.parquet")
        iterations = pd.read_parquet(out / engine / "real" / "iterations.parquet")
        assert len(steps) == len(iterations) and steps["time_s"].tolist() == iterations["duration_s"].tolist()
        last = iterations["start_s"].iloc[-1]
        assert last <= SERVE_S + iterations["duration_s"].max()   # no iteration starts after the serving time
        assert (out / engine / "sim" / "summary.json").is_file()
    assert "fitted" in (out / "preset.yaml").read_text()
    with tarfile.open(out / "claim.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"claim.csv", "preset.yaml", "paged/steps.parquet", "paged/real/summary.json"} <= names
