"""How fast the simulated backend serves 1,000 ShareGPT requests (OPT-13B, A100-40GB), per engine.

    make bench PYTEST_ARGS="-k sim_speed"

The figure of merit is wall time per run and simulated iterations per wall
second (in the benchmark's extra_info); no time is asserted.
"""
import pytest

from engines.kv.budget import kv_budget
from engines.build import build_scheduler
from engines.config import EngineConfig, SchedulerLimits
from engines.sim.cost_model import CostModel
from engines.loop import run_engine
from engines.specs.presets import load_hardware, load_model
from engines.sim.executor import SimExecutor
from workloads import WorkloadConfig, build_workload

ENGINES = [dict(name="static"), dict(name="orca", reservation="max"), dict(name="orca", reservation="pow2"),
           dict(name="orca", reservation="oracle"), dict(name="paged", block_size=16)]


@pytest.fixture(scope="module")
def setting():
    model, hardware = load_model("opt-13b"), load_hardware("a100-40gb")
    limits = SchedulerLimits(max_seq_len=model.max_seq_len)
    budget = kv_budget(model, hardware, 0.9, limits.max_num_batched_tokens, limits.max_num_seqs)
    requests = build_workload(WorkloadConfig(name="sharegpt", num_requests=1000))
    return requests, limits, budget.num_slots, CostModel(model, hardware)


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: EngineConfig(**e).label)
def test_sim_speed_1000_sharegpt_requests(benchmark, setting, engine):
    requests, limits, slots, cost_model = setting
    config = EngineConfig(**engine)

    def serve():
        return run_engine(requests, build_scheduler(config, limits, slots), SimExecutor(cost_model), progress=False)

    record = benchmark.pedantic(serve, rounds=1, iterations=1)
    assert all(s.done for s in record.sequences)
    benchmark.extra_info["iterations"] = len(record.iterations)
    benchmark.extra_info["iterations_per_wall_s"] = round(len(record.iterations) / record.wall_s)
