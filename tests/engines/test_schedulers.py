"""The three engines' schedulers on small traces, with a unit-cost executor."""
import random

from hypothesis import given, settings, strategies as st
import pytest

from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import ContiguousEngineConfig, SchedulerLimits
from pagedbench.engines.registry import engine_config
from pagedbench.engines.run_record import ITERATION_COLUMNS
from pagedbench.engines.loop import run_engine
from pagedbench.engines.sequence import Status
from tests.engines.conftest import UnitExecutor, make_request

VARIANTS = [dict(name="static"), dict(name="orca", reservation="max"), dict(name="orca", reservation="pow2"),
            dict(name="orca", reservation="oracle"), dict(name="paged", block_size=4, watermark=0.0)]
MEM = slice(ITERATION_COLUMNS.index("token_states"), None)


def serve(engine, requests, capacity, stop_at_last_arrival=False, **limits):
    limits.setdefault("max_seq_len", 64)
    scheduler = build_scheduler(engine_config(engine), SchedulerLimits(**limits), capacity)
    return run_engine(requests, scheduler, UnitExecutor(), progress=False, stop_at_last_arrival=stop_at_last_arrival)


def random_trace(n, seed, max_prompt=30, max_output=30, rate=None):
    rng = random.Random(seed)
    t = 0.0
    out = []
    for i in range(n):
        if rate:
            t += rng.expovariate(rate)
        out.append(make_request(i, rng.randint(1, max_prompt), rng.randint(1, max_output), t))
    return out


@pytest.mark.parametrize("engine", VARIANTS, ids=lambda e: "-".join(map(str, e.values())))
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), capacity=st.integers(64, 400), rate=st.sampled_from([None, 0.5, 5.0]))
def test_every_request_gets_its_tokens_and_the_split_sums_to_capacity(engine, seed, capacity, rate):
    record = serve(engine, random_trace(25, seed, rate=rate), capacity)
    for s in record.sequences:
        assert s.status is Status.FINISHED
        assert s.generated == s.request.output_len
        assert s.request.arrival_s <= s.first_token_s <= s.finish_s
    for row in record.iterations:
        assert sum(row[MEM]) == capacity


def test_static_batches_the_most_max_seq_len_regions_that_fit_and_pads():
    reqs = [make_request(i, 2 + i, 3 if i else 9) for i in range(10)]
    record = serve(dict(name="static"), reqs, capacity=200, max_seq_len=64)   # 3 regions of 64
    first_decode = next(r for r in record.iterations if r[ITERATION_COLUMNS.index("decode_seqs")])
    cols = {c: first_decode[i] for i, c in enumerate(ITERATION_COLUMNS)}
    assert cols["decode_rows"] == 3
    # Request 0 generates 9 tokens, 1 and 2 only 3: they stay in the batch as padding rows.
    rows = [dict(zip(ITERATION_COLUMNS, r)) for r in record.iterations if r[4]]
    batch1 = rows[:8]
    assert [r["decode_rows"] for r in batch1] == [3] * 8
    assert [r["decode_seqs"] for r in batch1] == [3, 3, 1, 1, 1, 1, 1, 1]
    # Nobody joins mid-batch: request 3 is admitted only after request 0 finished.
    seqs = {s.id: s for s in record.sequences}
    assert seqs[3].admitted_s >= seqs[0].finish_s


def test_orca_admits_fcfs_while_a_region_fits():
    reqs = [make_request(0, 10, 10), make_request(1, 50, 10), make_request(2, 1, 1)]
    record = serve(dict(name="orca", reservation="oracle", allocator="first_fit"), reqs, capacity=70)
    seqs = {s.id: s for s in record.sequences}
    # Request 1 needs 60 slots while 0 holds 20 of 70: it waits, and 2 waits behind it (FCFS).
    assert seqs[1].admitted_s >= seqs[0].finish_s
    assert seqs[2].admitted_s >= seqs[1].admitted_s


def test_paged_preempts_the_latest_admitted_and_recomputes():
    reqs = [make_request(i, 4, 20) for i in range(4)]
    record = serve(dict(name="paged", block_size=4, watermark=0.0), reqs, capacity=48)   # 12 blocks
    seqs = {s.id: s for s in record.sequences}
    assert sum(r[ITERATION_COLUMNS.index("preempted")] for r in record.iterations) > 0
    assert seqs[3].preemptions >= 1 and seqs[0].preemptions == 0
    assert all(s.generated == 20 for s in seqs.values())
    recompute = [r[ITERATION_COLUMNS.index("prefill_tokens")] for r in record.iterations if r[2]][1:]
    assert any(t > 4 for t in recompute)    # a recompute prefills the prompt and the output so far


@pytest.mark.parametrize("engine", VARIANTS, ids=lambda e: e["name"] + e.get("reservation", ""))
def test_a_request_that_can_never_fit_is_rejected_with_a_reason(engine):
    reqs = [make_request(0, 5, 5), make_request(1, 40, 20), make_request(2, 5, 5)]
    record = serve(engine, reqs, capacity=40, max_seq_len=64)
    seqs = {s.id: s for s in record.sequences}
    assert seqs[1].status is Status.REJECTED and seqs[1].rejected_reason
    if engine["name"] == "paged" or engine.get("reservation") in ("pow2", "oracle"):
        assert seqs[0].status is seqs[2].status is Status.FINISHED
    else:   # reserving max_seq_len = 64 slots per request: nothing fits a budget of 40
        assert all(s.status is Status.REJECTED for s in seqs.values())


def test_too_long_for_max_seq_len_is_rejected():
    record = serve(dict(name="paged"), [make_request(0, 60, 10)], capacity=4096, max_seq_len=64)
    assert "max_seq_len" in record.sequences[0].rejected_reason


def test_max_num_seqs_and_token_budget_bound_every_iteration():
    record = serve(dict(name="paged", block_size=4), random_trace(60, 1), capacity=10_000,
                   max_num_seqs=5, max_num_batched_tokens=64)
    for row in record.iterations:
        r = dict(zip(ITERATION_COLUMNS, row))
        assert r["batch_size"] <= 5 and r["prefill_tokens"] <= 64


def test_paged_batches_more_than_orca_max_on_the_same_trace():
    reqs = random_trace(80, 3, max_prompt=20, max_output=40)
    batch = {}
    for engine in (dict(name="orca", reservation="max"), dict(name="paged", block_size=4)):
        record = serve(engine, reqs, capacity=512, max_seq_len=64)
        decode = [dict(zip(ITERATION_COLUMNS, r))["batch_size"] for r in record.iterations if r[4]]
        batch[engine["name"]] = sum(decode) / len(decode)
    assert batch["paged"] > 2 * batch["orca"]


def test_a_token_budget_below_max_seq_len_is_refused_for_every_engine():
    # Otherwise a recomputing engine rejects long requests that the others serve: different traces.
    with pytest.raises(ValueError, match="max_num_batched_tokens=32 is below limits.max_seq_len=64"):
        SchedulerLimits(max_num_batched_tokens=32, max_seq_len=64)


def test_max_seq_len_above_the_model_maximum_is_refused():
    limits = SchedulerLimits(max_num_batched_tokens=4096, max_seq_len=4096)
    with pytest.raises(ValueError, match="exceeds opt-13b's maximum of 2048"):
        limits.check_model(2048, "opt-13b")
    SchedulerLimits(max_seq_len=2048).check_model(2048, "opt-13b")


def test_static_decode_rows_attend_over_true_lengths_within_their_regions():
    reqs = [make_request(0, 5, 12), make_request(1, 30, 3), make_request(2, 17, 6)]
    limits = SchedulerLimits(max_seq_len=64)
    scheduler = build_scheduler(ContiguousEngineConfig(name="static"), limits, 3 * 64)
    contexts = []

    class Recording(UnitExecutor):
        def execute(self, batch):
            if not batch.is_prefill:
                rows = batch.decode + batch.padding
                assert batch.decode_context_lens == [s.length for s in batch.decode] + \
                    [s.length - 1 for s in batch.padding]
                contexts.extend(zip(rows, batch.decode_context_lens))
            return super().execute(batch)

    run_engine(reqs, scheduler, Recording(), progress=False)
    assert contexts and all(ctx <= seq.final_len <= limits.max_seq_len for seq, ctx in contexts)
    # The longest request (prompt 5, 12 outputs) ends at its own length, not at padded prompt (30) + steps.
    assert max(ctx for seq, ctx in contexts if seq.id == 0) == 5 + 12 - 1


def test_record_tokens_sets_first_token_and_finish_times():
    from pagedbench.engines.sequence import Sequence, record_tokens
    seqs = [Sequence(make_request(i, 3, 1 + i)) for i in range(3)]   # 1, 2 and 3 output tokens
    finished = [[s.id for s in record_tokens([s for s in seqs if not s.done], now)] for now in (1.0, 2.0, 3.0)]
    assert finished == [[0], [1], [2]]
    assert [(s.generated, s.first_token_s, s.finish_s) for s in seqs] == [(1, 1.0, 1.0), (2, 1.0, 2.0),
                                                                         (3, 1.0, 3.0)]
    assert Sequence(make_request(9, 3, 2)).record_token(5.0) is False


def test_stopping_at_the_last_arrival_leaves_the_overload_unfinished():
    reqs = random_trace(60, 5, rate=50.0)           # far more than one request per unit-time iteration
    last = max(r.arrival_s for r in reqs)
    full = serve(dict(name="paged", block_size=4), reqs, capacity=200)
    cut = serve(dict(name="paged", block_size=4), reqs, capacity=200, stop_at_last_arrival=True)
    assert all(s.status is Status.FINISHED for s in full.sequences)
    assert any(s.status is not Status.FINISHED for s in cut.sequences)
    assert len(cut.sequences) == len(reqs)          # every request arrived before the stop
    starts = [row[ITERATION_COLUMNS.index("start_s")] for row in cut.iterations]
    assert starts[-1] <= last < cut.end_s
