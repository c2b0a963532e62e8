"""The contiguous engines' region starts, read from the KV manager's record of its regions each step: a sequence
readmitted into another region (a recompute, or a caller that admits and decodes without a prefill, as the
profiler does) reads and writes its new one, and a position past a region stops the step."""
import numpy as np
import pytest

from pagedbench.engines.batch import Batch
from pagedbench.engines.sequence import Sequence
from pagedbench.workloads.request import Request
from tests.real.conftest import ENGINES, SPECS, make_engine, make_model, requests


def admit(kv, seqs):
    for seq in seqs:
        assert kv.try_admit(seq)


def prefill_then_decode(executor, seqs, steps):
    """A prefill of `seqs`, then `steps` decode steps; each step's slots checked against the manager's."""
    executor.execute(Batch(prefill=seqs, prefill_lens=[s.length for s in seqs]))
    for seq in seqs:
        seq.generated += 1
    for _ in range(steps):
        batch = Batch(decode=seqs, decode_context_lens=[s.length for s in seqs])
        _, pos, _, slots, _, _ = executor._decode_arrays(batch)
        assert slots.tolist() == [executor.kv.slots(s, p, p + 1)[0] for s, p in zip(seqs, pos.tolist())]
        executor.execute(batch)
        for seq in seqs:
            seq.generated += 1


def test_a_readmitted_sequence_writes_its_new_region():
    model, spec = make_model("opt"), SPECS["opt"]
    scheduler, _, executor = make_engine(model, spec, ENGINES["orca"], capacity=256)
    kv = scheduler.kv
    a, b = (Sequence(r) for r in requests([(10, 20), (12, 20)], seed=3))
    admit(kv, [a, b])
    prefill_then_decode(executor, [a, b], 3)
    before = kv.slots(a, 0, 1)[0]
    kv.free(a)                                 # a recompute: a's region goes, another takes its place, a comes back
    c = Sequence(Request(9, 0.0, (1,) * 10, 20))
    admit(kv, [c, a])
    assert kv.slots(a, 0, 1)[0] != before
    prefill_then_decode(executor, [a], 3)
    prefill_then_decode(executor, [c], 1)
    batch = Batch(decode=[b, a], decode_context_lens=[b.length, a.length])
    _, pos, _, slots, _, _ = executor._decode_arrays(batch)
    assert slots.tolist() == [kv.slots(s, p, p + 1)[0] for s, p in zip([b, a], pos.tolist())]


def test_a_position_past_its_region_stops_the_step():
    model, spec = make_model("opt"), SPECS["opt"]
    scheduler, _, executor = make_engine(model, spec, ENGINES["orca"], capacity=256)
    (a,) = (Sequence(r) for r in requests([(10, 4)], seed=3))
    admit(scheduler.kv, [a])
    prefill_then_decode(executor, [a], 2)
    size = scheduler.kv.region_size(a)
    with pytest.raises(IndexError, match="overflow"):
        executor._decode_arrays(Batch(decode=[a], decode_context_lens=[size + 1]))
    assert np.asarray(executor._decode_arrays(Batch(decode=[a], decode_context_lens=[size]))[3]).shape == (1,)


def test_an_id_admitted_again_without_a_prefill_reads_its_new_region():
    """As the profiler does: the same request id admitted, decoded, freed and admitted again with another size,
    decoding with no prefill between."""
    model, spec = make_model("opt"), SPECS["opt"]
    scheduler, _, executor = make_engine(model, spec, ENGINES["orca"], capacity=512)
    kv = scheduler.kv
    for prompt, filler in [(8, 0), (40, 30), (8, 5)]:
        other = Sequence(Request(100 + prompt, 0.0, (1,) * 4, filler + 1))
        admit(kv, [other])                      # shifts where the next region is placed
        seq = Sequence(Request(0, 0.0, (1,) * prompt, 3))
        admit(kv, [seq])
        seq.generated, seq.output_token_ids = 1, [1]
        batch = Batch(decode=[seq], decode_context_lens=[seq.length])
        _, pos, _, slots, _, _ = executor._decode_arrays(batch)
        assert slots.tolist() == [kv.slots(seq, int(pos[0]), int(pos[0]) + 1)[0]]
        executor.execute(batch)
        kv.free(seq)
        kv.free(other)
