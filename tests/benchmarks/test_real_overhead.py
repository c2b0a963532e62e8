"""The real backend's per-iteration overhead outside the model forward, as a fraction of the run's wall time.

    make bench PYTEST_ARGS="-k real_overhead -s"

Overhead is everything the loop does besides the forward pass and sampling:
scheduling, the KV managers' bookkeeping, block tables and slot mappings,
building the input tensors, and the memory accounting. No time is asserted.
"""
from hydra import compose, initialize_config_dir
import pytest

from tests.test_run import ROOT
import run as entry


@pytest.mark.parametrize("engine", ["orca_max", "paged"])
def test_real_overhead_fraction(benchmark, engine, tmp_path):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=[
            f"engine={engine}", "backend=real", "model=tiny", "workload=synthetic", "workload.num_requests=24",
            "workload.prompt_dist.low=32", "workload.prompt_dist.high=256", "workload.output_dist.mean=48",
            "progress=false"])
    summary = benchmark.pedantic(entry.run, args=(cfg, tmp_path), rounds=1, iterations=1)
    overhead = 1 - summary["forward_s"] / summary["wall_s"]
    benchmark.extra_info.update(overhead_fraction=round(overhead, 4), iterations=summary["num_iterations"],
                                wall_s=round(summary["wall_s"], 3), forward_s=round(summary["forward_s"], 3))
    print(f"\n{engine}: {summary['num_iterations']} iterations, overhead outside the forward "
          f"{100 * overhead:.1f}% of {summary['wall_s']:.2f}s")
    assert 0 < summary["forward_s"] < summary["wall_s"]
