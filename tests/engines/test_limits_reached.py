"""The scheduler limits are reached when demand allows, never exceeded, and the admission watermark holds back
exactly its blocks.

A limit test that asserts only "never more than max_num_seqs" passes for a
scheduler that stops one short, or that ignores the limit on a trace that
never tests it. Here each limit is met exactly: enough short requests wait
and memory is plentiful, so the batch must fill to `max_num_seqs` rows, or
to exactly `max_num_batched_tokens` prompt tokens; and a request that fits
the pool only by eating into the watermark must wait, then join once the
watermark is left free.
"""
from __future__ import annotations

import pytest

from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import PagedEngineConfig, SchedulerLimits
from pagedbench.engines.registry import engine_config
from pagedbench.engines.kv.paged import PagedKV
from pagedbench.engines.loop import run_engine
from pagedbench.engines.sequence import Sequence
from tests.engines.conftest import UnitExecutor, make_request
from tests.engines.test_schedulers import random_trace
from pagedbench.workloads.request import Request

ENGINES = [dict(name="static"), dict(name="orca", reservation="max"), dict(name="orca", reservation="pow2"),
           dict(name="orca", reservation="oracle", allocator="first_fit"),
           dict(name="paged", block_size=4, watermark=0.0)]
ITERATION_ENGINES = ENGINES[1:]
PLENTY = 1 << 16   # token slots: memory never limits these runs


class Executor(UnitExecutor):
    name = "unit"


def serve(engine: dict, requests: list[Request], capacity: int, **limits):
    """`requests` served to the end by `engine` over `capacity` slots, with the unit-cost executor."""
    limits.setdefault("max_seq_len", 64)
    scheduler = build_scheduler(engine_config(engine), SchedulerLimits(**limits), capacity)
    return run_engine(requests, scheduler, Executor(), progress=False)


def engine_id(engine: dict) -> str:
    return "-".join(map(str, engine.values()))


# -- max_num_seqs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES, ids=engine_id)
@pytest.mark.parametrize("max_num_seqs", [1, 3, 5])
def test_the_first_batch_has_exactly_max_num_seqs_rows_when_more_requests_wait(engine, max_num_seqs):
    reqs = [make_request(i, 4, 3 + i % 4) for i in range(4 * max_num_seqs + 1)]
    record = serve(engine, reqs, PLENTY, max_num_seqs=max_num_seqs)
    first = record.iterations[0]
    assert first.prefill_seqs == first.batch_rows == max_num_seqs
    assert first.admission_blocked_by == "max_num_seqs"
    assert max(r.batch_rows for r in record.iterations) == max_num_seqs
    assert max(r.decode_rows for r in record.iterations) == max_num_seqs
    assert all(s.generated == s.output_len for s in record.sequences)


@pytest.mark.parametrize("engine", ITERATION_ENGINES, ids=engine_id)
def test_every_decode_step_runs_max_num_seqs_rows_while_requests_wait(engine):
    """Iteration-level scheduling refills the batch at once: a decode step while requests are waiting (all
    arrived at 0) means admission stopped at the row cap, so the step holds exactly max_num_seqs rows."""
    reqs = [make_request(i, 1 + i % 7, 1 + (5 * i) % 9) for i in range(40)]
    record = serve(engine, reqs, PLENTY, max_num_seqs=4)
    waiting_before = 40
    decodes_with_waiting = 0
    for row in record.iterations:
        assert row.batch_rows <= 4 and row.decode_rows <= 4
        if row.decode_seqs and waiting_before:
            decodes_with_waiting += 1
            assert row.decode_rows == 4, f"a decode step of {row.decode_rows} rows while {waiting_before} waited"
        waiting_before = row.num_waiting
    assert decodes_with_waiting > 5


@pytest.mark.parametrize("engine", ENGINES, ids=engine_id)
def test_groups_fill_max_num_seqs_rows_exactly_when_their_widths_add_up_to_it(engine):
    # Widths 2 + 3 + 1 = 6 rows; the group of 4 that follows must wait.
    widths = [2, 3, 1, 4, 2, 1]
    reqs = [Request(i, 0.0, tuple(range(5)), 4, n=w) for i, w in enumerate(widths)]
    record = serve(engine, reqs, PLENTY, max_num_seqs=6)
    first = record.iterations[0]
    assert (first.prefill_seqs, first.batch_rows) == (3, 6)
    assert first.admission_blocked_by == "max_num_seqs"
    assert max(r.batch_rows for r in record.iterations) == 6
    assert max(r.decode_rows for r in record.iterations) == 6


def test_a_swapped_group_comes_back_only_within_max_num_seqs():
    """Groups of 2 rows on a pool too small for all of them: some are swapped out and come back, and no decode
    step (swap-ins included) runs more than max_num_seqs rows, while some runs exactly that many."""
    reqs = [Request(i, 0.0, tuple(range(6)), 24, n=2) for i in range(6)]
    engine = PagedEngineConfig(block_size=4, watermark=0.0, preemption="swap", swap_space=1e-5)
    scheduler = build_scheduler(engine, SchedulerLimits(max_seq_len=64, max_num_seqs=4), 4 * 20,
                                bytes_per_slot=1)
    record = run_engine(reqs, scheduler, Executor(), progress=False)
    assert sum(r.swapped_in for r in record.iterations) > 0
    assert all(r.decode_rows <= 4 and r.batch_rows <= 4 for r in record.iterations)
    assert any(r.decode_rows == 4 for r in record.iterations)
    assert all(s.generated == s.output_len for s in record.sequences)


@pytest.mark.parametrize("max_num_seqs, back", [(6, 2), (5, 1), (4, 1), (3, 0)])
def test_swapped_groups_come_back_up_to_exactly_max_num_seqs_rows(max_num_seqs, back):
    """Three groups of 2 rows run; two are preempted to the host pool (the scheduler's own preemption), one
    keeps running. The next step brings swapped groups back, oldest first, while their rows fit the cap."""
    from pagedbench.engines.scheduling.iteration import IterationScheduler

    kv = PagedKV(64 * 4, block_size=4, watermark=0.0, num_cpu_blocks=64)
    sched = IterationScheduler(kv, SchedulerLimits(max_seq_len=64, max_num_seqs=6), "swap")
    groups = [Sequence(Request(i, 0.0, tuple(range(6)), 20, n=2)) for i in range(3)]
    for s in groups:
        sched.add(s, 0.0)
    batch = sched.schedule(0.0)
    assert batch.prefill == groups and batch.num_rows == 6
    for s in batch.advancing():
        s.generated += 1
    sched.after_iteration(batch)
    # The cap under test applies from the step that brings the swapped groups back.
    sched.limits = SchedulerLimits(max_seq_len=64, max_num_seqs=max_num_seqs)
    for s in (groups[1], groups[0]):
        assert sched._preempt(s)                     # swapped out
    assert list(sched.swapped) == [groups[0], groups[1]]
    batch = sched.schedule(0.0)
    assert batch.swapped_in == back
    assert batch.num_rows == 2 + 2 * back <= max_num_seqs
    assert list(sched.swapped) == [groups[0], groups[1]][back:]


# -- max_num_batched_tokens ------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ITERATION_ENGINES, ids=engine_id)
def test_a_prefill_takes_exactly_the_token_budget_when_the_prompts_add_up_to_it(engine):
    # 30 + 34 = 64: the budget exactly; the third prompt (10) must wait for the next prefill.
    reqs = [make_request(0, 30, 3), make_request(1, 34, 3), make_request(2, 10, 3), make_request(3, 54, 3)]
    record = serve(engine, reqs, PLENTY, max_num_batched_tokens=64)
    first = record.iterations[0]
    assert (first.prefill_seqs, first.prefill_tokens) == (2, 64)
    assert first.admission_blocked_by == "token_budget"
    prefills = [r.prefill_tokens for r in record.iterations if r.prefill_seqs]
    assert prefills == [64, 64]          # then 10 + 54, the budget again
    assert all(r.prefill_tokens <= 64 for r in record.iterations)


@pytest.mark.parametrize("engine", ITERATION_ENGINES, ids=engine_id)
def test_equal_prompts_fill_the_token_budget_exactly(engine):
    reqs = [make_request(i, 16, 2) for i in range(10)]
    record = serve(engine, reqs, PLENTY, max_num_batched_tokens=64)
    prefills = [(r.prefill_seqs, r.prefill_tokens) for r in record.iterations if r.prefill_seqs]
    assert prefills[:2] == [(4, 64), (4, 64)]
    assert sum(n for n, _ in prefills) == 10


@pytest.mark.parametrize("prompt, per_chunk", [(16, 4), (20, 3), (62, 1), (33, 1)])
def test_static_prefills_in_chunks_of_as_many_padded_prompts_as_the_budget_holds(prompt, per_chunk):
    reqs = [make_request(i, prompt - i % 2, 2) for i in range(8)]   # padded to `prompt`
    record = serve(dict(name="static"), reqs, PLENTY, max_num_batched_tokens=64)
    chunks = [(r.prefill_seqs, r.prefill_tokens) for r in record.iterations if r.prefill_seqs]
    assert chunks[0] == (per_chunk, per_chunk * prompt)
    assert all(t <= 64 for _, t in chunks) and sum(n for n, _ in chunks) == 8


@pytest.mark.parametrize("engine", ENGINES, ids=engine_id)
def test_random_traces_reach_both_limits_and_never_pass_them(engine):
    """Every request waits from the start, so prefills take them in id order. A prefill the token budget
    stopped leaves out a request whose prompt would have passed the budget: nothing fitted was left out."""
    reqs = random_trace(80, 4, max_prompt=40, max_output=12)
    record = serve(engine, reqs, PLENTY, max_num_seqs=8, max_num_batched_tokens=64)
    assert max(r.batch_rows for r in record.iterations) == 8
    assert max(r.decode_rows for r in record.iterations) == 8
    assert max(r.prefill_tokens for r in record.iterations) <= 64
    blocked = {r.admission_blocked_by for r in record.iterations}
    assert "max_num_seqs" in blocked
    if engine["name"] == "static":
        return
    assert "token_budget" in blocked
    queue = sorted(reqs, key=lambda r: r.id)
    for row in record.iterations:
        if not row.prefill_seqs:
            continue
        admitted, queue = queue[:row.prefill_seqs], queue[row.prefill_seqs:]
        assert row.prefill_tokens == sum(r.prompt_len for r in admitted) <= 64
        if row.admission_blocked_by == "token_budget":
            assert row.prefill_tokens + queue[0].prompt_len > 64, (
                f"a prefill of {row.prefill_tokens} tokens left out a prompt of {queue[0].prompt_len}")
    assert not queue


# -- the admission watermark -------------------------------------------------------------------------------


def test_the_watermark_is_the_configured_fraction_of_blocks():
    assert PagedKV(100 * 4, 4, watermark=0.05).watermark_blocks == 5
    assert PagedKV(100 * 4, 4, watermark=0.0).watermark_blocks == 0
    assert PagedKV(30 * 4, 4, watermark=0.1).watermark_blocks == 3


def seq(i, prompt, output=8):
    return Sequence(make_request(i, prompt, output))


def test_admission_leaves_exactly_the_watermark_free():
    """20 blocks of 4, watermark 2 blocks. A request needing as many blocks as are free waits; one needing
    the free blocks less the watermark is admitted; after the first is freed the waiting one fits."""
    kv = PagedKV(20 * 4, 4, watermark=0.1)
    assert kv.watermark_blocks == 2
    first = seq(0, 40)                     # 10 prompt blocks + 1 for the token it produces
    assert kv.try_admit(first) and kv.pool.num_free == 9
    fits_without = seq(1, 28)              # 7 + 1 = 8 blocks: 9 free, but only 7 above the watermark
    assert not kv.try_admit(fits_without)
    assert kv.pool.num_free == 9 and not kv.holds(fits_without)
    just_fits = seq(2, 24)                 # 6 + 1 = 7 blocks: leaves exactly the 2 of the watermark
    assert kv.try_admit(just_fits) and kv.pool.num_free == 2
    kv.free(first)
    assert kv.try_admit(fits_without) and kv.pool.num_free == 2 + 11 - 8

    plain = PagedKV(20 * 4, 4, watermark=0.0)
    assert plain.try_admit(seq(0, 40)) and plain.try_admit(seq(1, 28)) and plain.pool.num_free == 1


def test_a_request_that_fits_only_without_the_watermark_waits_for_it_in_the_scheduler():
    reqs = [make_request(0, 40, 3), make_request(1, 28, 3)]
    # 20 blocks of 4. Without a watermark both are prefilled at once.
    plain = serve(dict(name="paged", block_size=4, watermark=0.0), reqs, 20 * 4)
    assert plain.iterations[0].prefill_seqs == 2
    held = serve(dict(name="paged", block_size=4, watermark=0.1), reqs, 20 * 4)
    first = held.iterations[0]
    assert first.prefill_seqs == 1 and first.admission_blocked_by == "memory"
    seqs = {s.id: s for s in held.sequences}
    # Request 0 grows into its 12th block while it decodes; request 1 needs 8 of the remaining 8 plus the
    # watermark's 2, so it is admitted only once request 0 has finished and freed its blocks.
    assert seqs[1].admitted_s >= seqs[0].finish_s
    assert all(s.generated == s.output_len for s in held.sequences)


def test_a_request_needing_the_whole_pool_but_the_watermark_is_admitted_into_an_empty_pool():
    kv = PagedKV(20 * 4, 4, watermark=0.1)
    assert kv.rejection(seq(0, 68, 4)) is None        # 18 blocks: the pool less the watermark
    assert kv.try_admit(seq(0, 68, 4)) and kv.pool.num_free == 20 - 18
    assert kv.rejection(seq(1, 72, 4)) is not None    # 19 blocks + 2 > 20: it could never be admitted
    assert PagedKV(20 * 4, 4, watermark=0.0).rejection(seq(1, 72, 4)) is None


def test_swap_in_keeps_the_watermark_free_while_groups_run():
    """can_swap_in asks for the group's blocks, what its next step takes, and the watermark."""
    kv = PagedKV(20 * 4, 4, watermark=0.1, num_cpu_blocks=32)
    group = Sequence(Request(0, 0.0, tuple(range(10)), 20, n=2))
    assert kv.try_admit(group)
    kv.prefilled(group)
    group.generated = 1
    kv.share_prompt(group)
    moved = kv.swap_out(group)
    assert moved == 3                                 # the shared 3 blocks of the prompt
    blocker = seq(1, 36)                              # 9 + 1 blocks
    assert kv.try_admit(blocker) and kv.pool.num_free == 10
    # Needs its 3 blocks and 1 copy (both rows write their 11th token into the shared block 2, which has room
    # for the 12th: one row copies it, the other keeps it): 4, and 2 more for the watermark: 6 <= 10.
    assert kv.can_swap_in(group)
    for i in range(4):                                # four one-block requests: 6 free, 4 + 2 still fit
        assert kv.try_admit(seq(2 + i, 1))
    assert kv.pool.num_free == 6 and kv.can_swap_in(group)
    other = seq(6, 1)                                 # another: 5 free, 4 + 2 do not
    assert kv.try_admit(other)
    assert not kv.can_swap_in(group) and kv.can_swap_in(group, watermark=False)
