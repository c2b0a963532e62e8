"""The real backend's per-iteration overhead outside the model forward, as a fraction of the run's wall time.

    make bench PYTEST_ARGS="-k real_overhead -s"

Overhead is everything the loop does besides the forward pass and sampling:
scheduling, the KV managers' bookkeeping, block tables and slot mappings,
building the input tensors, and the memory accounting. pytest-benchmark times
the whole run (config to run folder: the tiny model built, 24 requests served,
the tables written), ROUNDS runs after WARMUP_ROUNDS; the overhead fraction of
the last run is in extra_info. Each run must finish every request; no time is
asserted.
"""
from hydra import compose, initialize_config_dir
import pytest

from tests.test_run import ROOT
from pagedbench import run as entry

NUM_REQUESTS = 24
ROUNDS, WARMUP_ROUNDS = 3, 1   # about 4 s a run


@pytest.mark.parametrize("engine", ["orca_max", "paged"])
def test_real_overhead_fraction(benchmark, engine, tmp_path):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=[
            f"engine={engine}", "backend=real", "model=tiny", "workload=synthetic",
            f"workload.num_requests={NUM_REQUESTS}", "workload.prompt_dist.low=32", "workload.prompt_dist.high=256",
            "workload.output_dist.mean=48", "progress=false"])
    benchmark.group = f"real backend: tiny model, {NUM_REQUESTS} synthetic requests"
    summary = benchmark.pedantic(entry.run, args=(cfg, tmp_path), rounds=ROUNDS, warmup_rounds=WARMUP_ROUNDS,
                                 iterations=1)
    overhead = 1 - summary["forward_s"] / summary["wall_s"]
    benchmark.extra_info.update(overhead_fraction=round(overhead, 4), iterations=summary["num_iterations"],
                                wall_s=round(summary["wall_s"], 3), forward_s=round(summary["forward_s"], 3))
    print(f"\n{engine}: {summary['num_iterations']} iterations, overhead outside the forward "
          f"{100 * overhead:.1f}% of {summary['wall_s']:.2f}s")
    assert summary["num_finished"] == summary["num_requests"] == NUM_REQUESTS
    assert 0 < summary["forward_s"] < summary["wall_s"]
