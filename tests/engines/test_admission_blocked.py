"""Which limit kept the head of the waiting queue out of each batch: memory, the row cap or the token budget."""
import math

import pytest

from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import PagedEngineConfig, SchedulerLimits
from pagedbench.engines.loop import run_engine
from pagedbench.results.record.frames import iterations_frame, requests_frame
from pagedbench.results.record.summary import summarize
from tests.engines.conftest import UnitExecutor, make_request
from tests.engines.test_schedulers import serve

PAGED = dict(name="paged", block_size=4, watermark=0.0)


def reasons(record):
    """The recorded reason of every iteration in which a request still waited afterwards."""
    return [r.admission_blocked_by for r in record.iterations if r.num_waiting > 0]


def fractions(record):
    s = summarize(iterations_frame(record), requests_frame(record), warmup_fraction=0.0)
    return {k: s[f"admission_blocked_by_{k}"] for k in ("memory", "max_num_seqs", "token_budget")}


def test_paged_admission_blocked_by_memory():
    # 12 blocks; each request needs 5 (its prompt and first token): two fit, the rest wait for memory.
    reqs = [make_request(i, 16, 8) for i in range(8)]
    record = serve(PAGED, reqs, capacity=48)
    assert record.iterations[0].admission_blocked_by == "memory"
    assert record.iterations[0].prefill_seqs == 2
    assert set(reasons(record)) <= {"memory"}
    f = fractions(record)
    assert f["memory"] > 0 and f["max_num_seqs"] == 0 and f["token_budget"] == 0


@pytest.mark.parametrize("engine", [PAGED, dict(name="orca", reservation="oracle"), dict(name="static")],
                         ids=["paged", "orca", "static"])
def test_admission_blocked_by_max_num_seqs(engine):
    reqs = [make_request(i, 4, 4) for i in range(6)]
    record = serve(engine, reqs, capacity=4096, max_num_seqs=2)
    assert record.iterations[0].admission_blocked_by == "max_num_seqs"
    assert record.iterations[0].prefill_seqs == 2
    f = fractions(record)
    assert f["max_num_seqs"] > 0 and f["memory"] == 0 and f["token_budget"] == 0


def test_admission_blocked_by_token_budget():
    # Budget 64 tokens: one 40-token prompt per prefill; the next waits for the budget, not for memory or rows.
    reqs = [make_request(i, 40, 4) for i in range(4)]
    record = serve(PAGED, reqs, capacity=4096, max_num_batched_tokens=64)
    assert record.iterations[0].admission_blocked_by == "token_budget"
    assert record.iterations[0].prefill_seqs == 1
    assert set(reasons(record)) == {"token_budget"}
    f = fractions(record)
    assert f["token_budget"] == 1.0 and f["memory"] == 0 and f["max_num_seqs"] == 0


def test_nothing_blocked_when_everything_is_admitted():
    record = serve(PAGED, [make_request(i, 4, 4) for i in range(3)], capacity=4096)
    assert all(r.admission_blocked_by == "" for r in record.iterations)
    assert all(math.isnan(v) for v in fractions(record).values())   # no iteration had a waiting request


def test_static_batch_blocks_by_memory_then_waits_for_its_batch():
    # 200 slots hold 3 regions of max_seq_len 64: the batch forms with 3, the fourth waits for memory,
    # then for the running batch, which counts as no limit.
    reqs = [make_request(i, 4, 6) for i in range(5)]
    record = serve(dict(name="static"), reqs, capacity=200)
    assert record.iterations[0].admission_blocked_by == "memory"
    assert set(reasons(record)) == {"memory", "batch_running"}
    f = fractions(record)
    assert 0 < f["memory"] < 1 and f["max_num_seqs"] == 0 and f["token_budget"] == 0


def test_swapped_groups_come_back_before_new_requests():
    # Decode runs out of blocks and swaps the latest group out; while it is on the host, a waiting request
    # is held back for it (vLLM's rule), a reason that counts in none of the limits.
    reqs = [make_request(i, 4, 24) for i in range(3)] + [make_request(3, 4, 4, arrival_s=15.0)]
    scheduler = build_scheduler(PagedEngineConfig(**PAGED, preemption="swap", swap_space=1e-6), SchedulerLimits(max_seq_len=64), 48,
                                bytes_per_slot=1)
    record = run_engine(reqs, scheduler, UnitExecutor(), progress=False)
    assert sum(r.swapped_out for r in record.iterations) > 0
    assert "swapped_first" in reasons(record)
