"""Hand-built layouts where each KV category has a known value, for each engine's manager."""
import pytest

from pagedbench.engines.kv.contiguous import ContiguousKV
from pagedbench.engines.kv.paged import PagedKV
from pagedbench.engines.kv.memory_split import Holding, MemorySplit, split_memory
from pagedbench.engines.kv.reservation import Reservation
from pagedbench.engines.sequence import Sequence
from tests.engines.conftest import make_request
from pagedbench.engines.registry import engine_config


def seq(i, prompt, output, generated):
    s = Sequence(make_request(i, prompt, output))
    s.generated = generated
    return s


def test_split_of_holdings_by_hand():
    # stored 5 of final 8 in a region of 16 rounded to 16: 5 tokens, 3 reserved, 8 internal.
    # stored 4 of final 10 in a region of 11 rounded to 16: 4, 6, 1 internal, 5 rounding.
    split = split_memory(64, [Holding(5, 8, 16, 16), Holding(4, 10, 11, 16)], free_slots=32, unusable_free=8)
    assert split == MemorySplit(token_states=9, reservation=9, internal_fragmentation=9,
                                external_fragmentation=5 + 8, free=24)
    assert split.capacity == 64


@pytest.mark.parametrize("holding", [
    Holding(stored=6, final=8, requested=5, taken=5),    # more stored than requested, alone
    Holding(stored=2, final=8, requested=6, taken=5),    # more requested than taken, alone
    Holding(stored=9, final=8, requested=10, taken=10),  # more stored than the final length, alone
])
def test_each_inconsistency_of_a_holding_is_refused_on_its_own(holding):
    with pytest.raises(ValueError, match="inconsistent holding"):
        split_memory(20, [holding], 5, 0)


def test_split_rejects_inconsistent_holdings():
    with pytest.raises(ValueError):
        split_memory(10, [Holding(6, 8, 5, 5)], 5, 0)
    with pytest.raises(ValueError):
        split_memory(10, [Holding(2, 8, 8, 8)], 5, 0)   # 8 taken + 5 free > 10


def test_orca_max_layout():
    kv = ContiguousKV(64, Reservation.MAX, max_seq_len=16, allocator="buddy")
    a = seq(0, 3, 5, 2)            # L=5, F=8, R=16
    assert kv.try_admit(a)
    split = kv.split([a], None)
    assert split == MemorySplit(5, 3, 8, 0, 48)


def test_orca_pow2_rounding_counts_as_external():
    kv = ContiguousKV(64, Reservation.POW2, max_seq_len=64, allocator="buddy")
    a = seq(0, 3, 5, 0)            # R = 3 + 8 = 11, taken 16
    assert kv.try_admit(a)
    assert kv.split([a], None) == MemorySplit(3, 5, 3, 5, 48)


def test_orca_oracle_has_no_internal_fragmentation():
    kv = ContiguousKV(64, Reservation.ORACLE, max_seq_len=64, allocator="first_fit")
    a = seq(0, 3, 5, 4)
    assert kv.try_admit(a)
    assert kv.split([a], None) == MemorySplit(7, 1, 0, 0, 56)


def test_external_fragmentation_is_holes_too_small_for_the_next_request():
    kv = ContiguousKV(40, Reservation.ORACLE, max_seq_len=64, allocator="first_fit")
    seqs = [seq(i, 5, 5, 0) for i in range(4)]          # four regions of 10 fill the arena
    for s in seqs:
        assert kv.try_admit(s)
    kv.free(seqs[0])
    kv.free(seqs[2])                                      # holes of 10 at 0 and at 20
    held = [seqs[1], seqs[3]]
    big, small = seq(8, 8, 8, 0), seq(9, 2, 3, 0)        # need 16 (fits no hole) / 5 (fits)
    assert kv.split(held, big) == MemorySplit(10, 10, 0, 20, 0)
    assert kv.split(held, small) == MemorySplit(10, 10, 0, 0, 20)
    assert not kv.try_admit(big)


def test_static_layout_reserves_max_seq_len():
    kv = ContiguousKV(100, Reservation.MAX, max_seq_len=32, allocator="buddy")  # roots 64, 32, 4
    a, b, c = seq(0, 4, 4, 4), seq(1, 10, 6, 1), seq(2, 1, 1, 0)
    assert kv.try_admit(a) and kv.try_admit(b) and kv.try_admit(c)
    assert not kv.try_admit(seq(3, 1, 1, 0))                   # only the 4-slot root is left
    split = kv.split([a, b, c], seq(3, 1, 1, 0))
    # tokens 8 + 11 + 1; reserved 0 + 5 + 1; internal 24 + 16 + 30; the 4 free slots can't hold 32.
    assert split == MemorySplit(20, 6, 70, 4, 0)


def test_paged_waste_is_only_the_last_block_tail():
    kv = PagedKV(64, block_size=4, watermark=0.0)      # 16 blocks
    a = seq(0, 5, 4, 2)     # L=7, F=9: admitted for L+1 = 8 -> 2 blocks; 1 slot will be filled
    b = seq(1, 5, 1, 1)     # L=F=6: 2 blocks, 2 slots never filled
    assert kv.try_admit(a) and kv.try_admit(b)
    split = kv.split([a, b], seq(2, 60, 1, 0))
    assert split == MemorySplit(13, 1, 2, 0, 48)        # free blocks are never external


def test_paged_grows_one_block_at_a_time():
    kv = PagedKV(16, block_size=4, watermark=0.0)
    a = seq(0, 3, 10, 0)
    assert kv.try_admit(a)                    # 3 prompt + 1 new token = 1 block
    assert len(kv.table(a)) == 1
    a.generated = 1                           # L = 4: the next token needs a second block
    assert kv.grow(a) and len(kv.table(a)) == 2
    assert kv.grow(a) and len(kv.table(a)) == 2


def _holdings(kv, held):
    """What each held sequence holds, read from the manager's own tables: the per-sequence definition."""
    if isinstance(kv, PagedKV):
        return [Holding(s.length, s.final_len, len(kv.table(s)) * kv.block_size,
                        len(kv.table(s)) * kv.block_size) for s in held]
    regions = kv.arena.regions
    return [Holding(s.length, s.final_len, regions[s.id].requested, regions[s.id].taken) for s in held]


@pytest.mark.parametrize("engine", [dict(name="static"), dict(name="orca", reservation="pow2"),
                                    dict(name="orca", reservation="oracle", allocator="first_fit"),
                                    dict(name="paged", block_size=4, watermark=0.0)],
                         ids=lambda e: "-".join(map(str, e.values())))
@pytest.mark.parametrize("seed", range(4))
def test_managers_running_sums_equal_the_split_of_every_holding(engine, seed):
    """The managers keep sums up to date as they allocate; they must equal the sum over holdings."""
    from pagedbench.engines.build import build_scheduler
    from pagedbench.engines.config import SchedulerLimits
    from pagedbench.engines.loop import run_engine
    from tests.engines.conftest import UnitExecutor
    from tests.engines.test_schedulers import random_trace

    scheduler = build_scheduler(engine_config(engine), SchedulerLimits(max_seq_len=64), 300)
    fast = scheduler.memory_split
    checked = []

    def checked_split():
        split = fast()
        held, kv = scheduler.held(), scheduler.kv
        need = kv.region_size(scheduler.waiting[0]) if scheduler.waiting and hasattr(kv, "arena") else 0
        free = kv.pool.num_free * kv.block_size if isinstance(kv, PagedKV) else kv.arena.free_slots()
        unusable = 0 if isinstance(kv, PagedKV) else kv.arena.unusable_free(need)
        assert split == split_memory(kv.capacity, _holdings(kv, held), free, unusable)
        checked.append(split)
        return split

    scheduler.memory_split = checked_split
    run_engine(random_trace(40, seed, rate=2.0), scheduler, UnitExecutor(), progress=False)
    assert len(checked) > 40
