"""How fast the simulated backend serves ShareGPT (OPT-13B, A100-40GB): 1,000 requests per engine, and one
one-hour trace at about paged's capacity (~18,000 requests), trace to summary.

    make bench PYTEST_ARGS="-k sim_speed -s"
    make bench PYTEST_ARGS="-k one_hour -s"       # the one-hour run alone (the README's speed figure)
    make bench PYTEST_ARGS="-k whole_process -s"  # the same trace as a whole `python run.py` process

The figure of merit is wall time per run (each run after a warm-up run, several rounds: pytest-benchmark's
min, median and spread) and simulated iterations per wall second (in the benchmark's extra_info). Each run
must finish every request. Target for the one-hour run: at most 10 s on a 2-core machine. The whole-process
run also records its peak memory (the run.py process's own maximum resident set, in extra_info as peak_mib):
what a run of a capacity search costs, its saved tables and vllm_result.json included.
"""
import json
import sys

import pytest

from pagedbench.engines.config import PagedEngineConfig, SchedulerLimits
from pagedbench.engines.registry import engine_config
from pagedbench.engines.loop import run_engine
from pagedbench.engines.sim.build import SimBackendConfig, build_sim
from pagedbench.engines.specs.presets import load_hardware, load_model
from pagedbench.measure import measure
from pagedbench.paths import ROOT
from pagedbench.results.record.frames import iterations_frame, requests_frame
from pagedbench.results.record.summary import summarize
from pagedbench.workloads import WorkloadConfig, build_workload

ENGINES = [dict(name="static"), dict(name="orca", reservation="max"), dict(name="orca", reservation="pow2"),
           dict(name="orca", reservation="oracle"), dict(name="paged", block_size=16)]
NUM_REQUESTS = 1000
ROUNDS, WARMUP_ROUNDS = 5, 1                    # 1,000 requests: 0.1-1 s a run
ONE_HOUR_ROUNDS, ONE_HOUR_WARMUP_ROUNDS = 3, 1  # about 4 s a run
ONE_HOUR_RUN = ["backend=sim", "engine=paged", "workload=sharegpt", "workload.arrival=poisson",
                "workload.request_rate=5", "workload.duration_s=3600", "progress=false", "rerun=true"]


@pytest.fixture(scope="module")
def setting():
    model, hardware = load_model("opt-13b"), load_hardware("a100-40gb")
    limits = SchedulerLimits(max_seq_len=model.max_seq_len)
    requests = build_workload(WorkloadConfig(name="sharegpt", num_requests=NUM_REQUESTS))
    return requests, limits, (model, hardware)


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: engine_config(e).label)
def test_sim_speed_1000_sharegpt_requests(benchmark, setting, engine):
    requests, limits, (model, hardware) = setting
    config = engine_config(engine)
    benchmark.group = f"sim: {NUM_REQUESTS} ShareGPT requests at t = 0"

    def serve():
        setup = build_sim(SimBackendConfig(), model, hardware, config, limits)
        return run_engine(requests, setup.scheduler, setup.executor, progress=False)

    record = benchmark.pedantic(serve, rounds=ROUNDS, warmup_rounds=WARMUP_ROUNDS, iterations=1)
    assert len(record.sequences) == NUM_REQUESTS and all(s.done for s in record.sequences)
    benchmark.extra_info["iterations"] = len(record.iterations)
    benchmark.extra_info["iterations_per_wall_s"] = round(len(record.iterations) / record.wall_s)


def test_sim_speed_one_hour_sharegpt_at_paged_capacity(benchmark, setting):
    """Build the trace, serve it, tabulate and summarise it: one run of a capacity search."""
    _, limits, (model, hardware) = setting
    workload = WorkloadConfig(name="sharegpt", arrival="poisson", request_rate=5.0, duration_s=3600.0)
    benchmark.group = "sim: one-hour ShareGPT trace at 5 req/s, trace to summary"

    def one_run():
        requests = build_workload(workload)
        setup = build_sim(SimBackendConfig(), model, hardware, PagedEngineConfig(), limits)
        record = run_engine(requests, setup.scheduler, setup.executor, progress=False)
        return record, summarize(iterations_frame(record), requests_frame(record))

    record, summary = benchmark.pedantic(one_run, rounds=ONE_HOUR_ROUNDS, warmup_rounds=ONE_HOUR_WARMUP_ROUNDS,
                                         iterations=1)
    assert summary["num_finished"] == summary["num_requests"] > 15_000
    benchmark.extra_info["requests"] = summary["num_requests"]
    benchmark.extra_info["iterations"] = len(record.iterations)
    if benchmark.enabled:
        stats = benchmark.stats.stats
        print(f"\none-hour ShareGPT trace at 5 req/s, paged: {summary['num_requests']} requests, "
              f"{len(record.iterations)} iterations, median {stats.median:.1f} s of {stats.rounds} runs "
              f"({stats.min:.1f}-{stats.max:.1f} s; target <= 10 s)")


def run_process(args: list[str], log) -> tuple[int, float]:
    """`python run.py ARGS` as a child process: its exit code and its own peak memory in MiB (`pagedbench.measure`:
    started from a small process, so that this one's size, the in-process runs before it included, does not
    count)."""
    m = measure([sys.executable, str(ROOT / "run.py"), *args], stdout=log)
    return m.returncode, m.peak_mib


def test_sim_speed_one_hour_whole_process(benchmark, tmp_path):
    """The one-hour trace above as a user runs it (`python run.py backend=sim engine=paged workload.arrival=poisson
    workload.request_rate=5 workload.duration_s=3600`): start-up, the run, its tables, summary and
    vllm_result.json written; wall time per process and its peak memory."""
    run_dir = tmp_path / "run"
    benchmark.group = "sim: one-hour ShareGPT trace at 5 req/s, a whole run.py process"
    peaks = []

    def one_process():
        with open(tmp_path / "run.log", "a") as log:
            code, peak = run_process([*ONE_HOUR_RUN, f"hydra.run.dir={run_dir}"], log)
        assert code == 0, (tmp_path / "run.log").read_text()[-2000:]
        peaks.append(peak)

    benchmark.pedantic(one_process, rounds=ONE_HOUR_ROUNDS, warmup_rounds=ONE_HOUR_WARMUP_ROUNDS, iterations=1)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["num_finished"] == summary["num_requests"] > 15_000
    assert (run_dir / "vllm_result.json").is_file()
    benchmark.extra_info["peak_mib"] = round(max(peaks))
    benchmark.extra_info["peak_mib_min"] = round(min(peaks))
    if benchmark.enabled:
        stats = benchmark.stats.stats
        print(f"\none-hour ShareGPT trace at 5 req/s, paged, whole process: median {stats.median:.1f} s of "
              f"{stats.rounds} runs ({stats.min:.1f}-{stats.max:.1f} s), peak memory {min(peaks):.0f}-{max(peaks):.0f} "
              f"MiB")
