"""The sim's fast-forward over quiet decode steps is the same run as the step-by-step path.

On many random small traces (every engine, block sizes, parallel samples and beams, recompute and swap,
shared prefixes, tight and loose budgets, arrivals at once and spread, the roofline and the fitted cost
model, stopping at the last arrival), both paths must give equal tables, cell for cell, and equal
summaries; and the fast path must skip batches where it can (it is not the step-by-step path renamed).
"""
from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from pagedbench.engines.config import SchedulerLimits
from pagedbench.engines.registry import engine_config
from pagedbench.engines.loop import run_engine
from pagedbench.engines.sim.build import SimBackendConfig, build_sim
from pagedbench.engines.specs.presets import load_hardware, load_model
from pagedbench.results.record.frames import iterations_frame, requests_frame
from pagedbench.workloads.request import Request

ENGINES = [{"name": "static"}, {"name": "orca", "reservation": "max"}, {"name": "orca", "reservation": "pow2"},
           {"name": "orca", "reservation": "oracle", "allocator": "first_fit"}, {"name": "paged", "block_size": 1},
           {"name": "paged", "block_size": 4}, {"name": "paged", "block_size": 16, "preemption": "swap"},
           {"name": "paged", "block_size": 8, "preemption": "recompute"}]


def random_trace(rng: random.Random, width: int, beam: bool) -> list[Request]:
    requests, t = [], 0.0
    spread = rng.choice([0.0, 0.05, 0.5])
    for i in range(rng.randint(1, 14)):
        t += rng.expovariate(1 / spread) if spread else 0.0
        prompt = rng.randint(1, 90)
        prefix = rng.random() < 0.3 and prompt > 20
        requests.append(Request(i, t, tuple(range(prompt)), rng.randint(1, 120),
                                n=1 if beam else width, beam_width=width if beam else 1,
                                prefix_id=rng.randint(0, 1) if prefix else None, prefix_len=16 if prefix else 0))
    return requests


def serve(requests, engine, slots, hardware, fast, stop):
    model = load_model("tiny" if hardware == "cpu-tiny" else "opt-13b")   # a fitted preset times its own model
    limits = SchedulerLimits(max_num_seqs=16, max_num_batched_tokens=256, max_seq_len=256)
    setup = build_sim(SimBackendConfig(kv_budget_slots=slots, fast_forward=fast), model, load_hardware(hardware),
                      engine_config(dict(engine), swap_space=64), limits)
    calls = 0
    execute = setup.executor.execute

    def counted(batch):
        nonlocal calls
        calls += 1
        return execute(batch)

    setup.executor.execute = counted
    record = run_engine(requests, setup.scheduler, setup.executor, progress=False, stop_at_last_arrival=stop)
    return iterations_frame(record), requests_frame(record), calls


@pytest.mark.parametrize("seed", range(60))
def test_fast_forward_gives_the_step_by_step_run(seed):
    rng = random.Random(seed)
    engine = ENGINES[seed % len(ENGINES)]
    width, beam = rng.choice([(1, False), (1, False), (2, False), (3, True)])
    if engine["name"] == "paged" and engine.get("preemption") == "recompute":
        width, beam = 1, False
    requests = random_trace(rng, width, beam)
    slots = rng.choice([300, 600, 1200, 4000])
    hardware = rng.choice(["a100-40gb", "cpu-tiny"])   # the roofline and the fitted cost model
    stop = rng.random() < 0.2 and requests[-1].arrival_s > 0
    step_by_step = serve(requests, engine, slots, hardware, False, stop)
    fast = serve(requests, engine, slots, hardware, True, stop)
    pd.testing.assert_frame_equal(fast[0], step_by_step[0], check_exact=True)
    pd.testing.assert_frame_equal(fast[1], step_by_step[1], check_exact=True)
    assert fast[2] <= step_by_step[2] == len(step_by_step[0])


def test_the_fast_path_skips_the_batches_of_quiet_steps():
    """A lone long request on a loose budget: after its prefill and one decode step, every step is quiet
    until the one it finishes in; orca and paged run them without batches, static cannot (its batch keeps
    finished requests as padding), and the tables stay equal."""
    requests = [Request(0, 0.0, tuple(range(10)), 100)]
    for engine, batches in (({"name": "orca"}, 3), ({"name": "paged", "block_size": 4}, 3),
                            ({"name": "static"}, 100)):
        slow = serve(requests, engine, 4000, "a100-40gb", False, False)
        fast = serve(requests, engine, 4000, "a100-40gb", True, False)
        pd.testing.assert_frame_equal(fast[0], slow[0], check_exact=True)
        assert (slow[2], fast[2]) == (100, batches), engine   # a prefill and 99 decode steps


def test_a_step_short_of_a_block_ends_the_quiet_stretch_where_the_step_by_step_run_preempts():
    # Two requests of 17 blocks each fill a 24-block pool as they grow: the later is preempted (recomputed).
    requests = [Request(0, 0.0, tuple(range(8)), 60), Request(1, 0.0, tuple(range(8)), 60)]
    engine = {"name": "paged", "block_size": 4, "watermark": 0.0, "preemption": "recompute"}
    slow = serve(requests, engine, 96, "a100-40gb", False, False)
    fast = serve(requests, engine, 96, "a100-40gb", True, False)
    assert slow[0]["preempted"].sum() > 0
    pd.testing.assert_frame_equal(fast[0], slow[0], check_exact=True)
    pd.testing.assert_frame_equal(fast[1], slow[1], check_exact=True)
    assert fast[2] < slow[2]


def test_backend_fast_forward_must_be_a_bool():
    with pytest.raises(ValueError, match="backend.fast_forward must be true or false"):
        SimBackendConfig(fast_forward="yes")


@pytest.mark.parametrize("engine", [{"name": "orca", "reservation": "pow2"}, {"name": "paged", "block_size": 8}])
def test_the_fast_path_runs_every_quiet_step_but_the_first_of_each_stretch_without_a_batch(engine):
    """pagedbench.studies.quiet_steps counts what the fast path can skip; on one-row requests with no swapping it skips
    exactly that: every quiet step but the one that opens each stretch."""
    from pagedbench.studies.quiet_steps import quiet_mask, stretches

    rng = random.Random(7)
    requests = [r for r in random_trace(rng, 1, False) if r.prefix_id is None] or [Request(0, 0.0, (1, 2), 50)]
    iterations, reqs, _ = serve(requests, engine, 1200, "a100-40gb", False, False)
    _, _, batches = serve(requests, engine, 1200, "a100-40gb", True, False)
    quiet = quiet_mask(iterations, reqs)
    assert quiet.sum() > len(stretches(quiet)) > 0
    assert batches == len(iterations) - (quiet.sum() - len(stretches(quiet)))


def test_quiet_stretches_are_the_runs_of_quiet_steps():
    from pagedbench.studies.quiet_steps import stretches

    assert stretches(np.array([True, True, False, True, False, False, True])).tolist() == [2, 1, 1]
    assert stretches(np.array([False, False])).tolist() == []


def test_each_manager_says_when_a_single_row_group_takes_its_next_block():
    from pagedbench.engines.kv.contiguous import ContiguousKV
    from pagedbench.engines.kv.paged import PagedKV
    from pagedbench.engines.kv.reservation import Reservation
    from pagedbench.engines.sequence import Sequence

    seq = Sequence(Request(0, 0.0, tuple(range(10)), 30))
    paged = PagedKV(64, 4, watermark=0.0)
    assert paged.try_admit(seq)                      # 10 prompt tokens + the first produced: 3 blocks
    seq.generated = 1
    assert paged.growths([seq]) == ([1], 4) and paged.available_blocks == 13
    paged.append_block(seq)
    assert len(paged.table(seq)) == 4 and paged.available_blocks == 12
    region = ContiguousKV(400, Reservation.POW2, 64, "first_fit")
    assert region.try_admit(seq)                     # 10 + next_pow2(30) = 42 slots
    assert region.growths([seq]) == ([42 - 11], 0) and region.available_blocks == 0
    with pytest.raises(RuntimeError, match="never takes a block"):
        region.append_block(seq)


def test_a_finished_request_ends_the_quiet_stretch_in_the_scheduler():
    from pagedbench.engines.build import build_scheduler
    from pagedbench.engines.config import PagedEngineConfig
    from pagedbench.engines.sequence import Sequence
    from tests.engines.conftest import UnitExecutor

    scheduler = build_scheduler(PagedEngineConfig(), SchedulerLimits(max_seq_len=64), 640)
    seqs = [Sequence(Request(i, 0.0, tuple(range(4)), 3 + i)) for i in range(2)]
    for s in seqs:
        scheduler.add(s, 0.0)
    from pagedbench.engines.engine import Engine
    engine = Engine(scheduler, UnitExecutor())
    assert engine.step(0.0).batch.prefill and scheduler.quiet() is None
    out = engine.step(1.0)
    assert not out.finished and scheduler.quiet() == (seqs, "")
    out = engine.step(2.0)
    assert out.finished == [seqs[0]] and scheduler.quiet() is None


def _cost_models():
    from pagedbench.engines.sim.build import build_cost_model
    from pagedbench.engines.specs.hardware import HardwareSpec

    # A device of little compute and much bandwidth: decode attention compute-bound, to time both branches.
    slow_compute = HardwareSpec(name="slow-compute", memory_bytes=2**36, peak_flops=1e9, memory_bandwidth=1e14,
                                flops_efficiency=1.0, bandwidth_efficiency=1.0, interconnect_bandwidth=1e9,
                                iteration_overhead_s=1e-3)
    settings = [("opt-13b", load_hardware("a100-40gb")), ("opt-66b", load_hardware("a100-40gb")),   # tp 4
                ("llama-13b", load_hardware("h200")), ("tiny", load_hardware("cpu-tiny")),   # fitted
                ("opt-13b", slow_compute)]
    return [build_cost_model(load_model(m), hw, bs) for m, hw in settings for bs in (None, 1, 16)]


COST_MODELS = _cost_models()


@pytest.mark.parametrize("index", range(len(COST_MODELS)))
def test_decode_time_is_iteration_time_of_the_decode_batch_to_the_bit(index):
    from pagedbench.engines.sim.cost_model import blocks_read

    cost, rng = COST_MODELS[index], random.Random(index)
    for _ in range(50):
        contexts = [rng.randint(1, 2048) for _ in range(rng.randint(1, 64))]
        blocks = blocks_read(contexts, cost.block_size) if cost.block_size else 0
        assert cost.decode_time(len(contexts), sum(contexts), blocks) == cost.iteration_time([], contexts)
    with pytest.raises(ValueError, match="decode_time of an empty batch"):
        cost.decode_time(0, 0, 0)


def test_both_kinds_of_cost_model_are_checked():
    from pagedbench.engines.sim.linear_cost import LinearCostModel

    kinds = {type(c).__name__ for c in COST_MODELS}
    assert kinds == {"CostModel", LinearCostModel.__name__}
