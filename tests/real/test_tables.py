"""The persistent block-table mirror: each step's array equals the KV manager's lists, though it writes only what
changed; checked alone and at every decode step of paged runs that grow, copy on write, fork beams, swap and
share prefixes."""
import numpy as np
import pytest

from pagedbench.engines.real.tables import TableMirror
from pagedbench.workloads.request import Request
from tests.real.conftest import ENGINES, SPECS, make_model, requests, serve


def check(mirror, keys, tables, rewrite=False):
    out = mirror.gather(keys, tables, rewrite)
    assert out.dtype == np.int32 and out.shape == (len(keys), max(1, max(map(len, tables))))
    for row, table in zip(out, tables):
        assert row[:len(table)].tolist() == table
    return out


def test_a_growing_table_writes_only_its_new_blocks():
    mirror = TableMirror(rows=2, width=2)
    a, b = [3, 4], [7]
    check(mirror, [(1, 0), (2, 0)], [a, b])
    assert mirror.writes == 3
    for step in range(10):
        a.append(10 + step)
        check(mirror, [(1, 0), (2, 0)], [a, b])
    assert mirror.writes == 13          # one block a step; b never again
    assert mirror.array.shape[1] >= len(a)


def test_a_new_list_or_a_step_with_moves_rewrites_the_row():
    mirror = TableMirror(rows=4, width=4)
    a = [1, 2, 3]
    check(mirror, [(5, 0)], [a])
    a[-1] = 9                           # a copy-on-write: same list, same length, announced by the step's moves
    stale = mirror.gather([(5, 0)], [a])
    assert stale[0, 2] == 3             # unannounced, the mirror cannot see it: the contract it relies on
    check(mirror, [(5, 0)], [a], rewrite=True)
    check(mirror, [(5, 0)], [[4, 4]])   # another list (a fork, a swap in): rewritten, shorter included
    check(mirror, [(5, 0)], [[4, 4, 6, 8, 1, 2, 3, 4, 5]])


def test_rows_of_finished_requests_are_reclaimed_and_the_array_grows_when_it_must():
    mirror = TableMirror(rows=2, width=2)
    for step in range(50):              # a new pair of requests every step: the old ones' rows are reused
        check(mirror, [(2 * step, 0), (2 * step + 1, 0)], [[step], [step + 1, step + 2]])
    assert mirror.array.shape[0] <= 8
    keys = [(i, r) for i in range(5) for r in range(3)]     # 15 rows at once: the array doubles
    check(mirror, keys, [[i, r, i + r] for i, r in keys])
    assert mirror.array.shape[0] >= 15
    check(mirror, [(0, 0)], [[]])       # an empty table: a [1, 1] array


GROUPS = [(6, 12), (9, 10), (5, 14), (7, 9)]
SINGLE = [(6, 20), (7, 18), (5, 22), (8, 16)]


@pytest.mark.parametrize("tags, lengths, capacity", [(dict(beam_width=3), GROUPS, 60), (dict(n=4), GROUPS, 96),
                                                     (dict(), SINGLE, 48)], ids=["beams", "samples", "single"])
def test_every_paged_step_reads_the_managers_tables(tags, lengths, capacity):
    """Beams fork and swap, parallel samples copy on write and swap, single rows grow and are preempted: at
    every decode step each row of the mirror's array starts with that row's table in the KV manager. (Beams
    fork every step, each fork a new list: their rows are rewritten nearly every step.)"""
    model, spec = make_model("llama"), SPECS["llama"]
    base = requests(lengths, seed=2)
    reqs = [Request(r.id, 0.0, r.prompt_token_ids, r.output_len, **tags) for r in base]
    engine = dict(ENGINES["paged"], preemption="swap")
    executors, steps = [], []
    original = TableMirror.gather

    def gather(self, keys, tables, rewrite=False):
        out = original(self, keys, tables, rewrite)
        for row, table in zip(out, tables):
            assert row[:len(table)].tolist() == table
        steps.append((sum(map(len, tables)), rewrite))
        return out
    TableMirror.gather = gather
    try:
        record, _, _ = serve(model, spec, engine, reqs, capacity=capacity, temperature=1.0 if "n" in tags else 0.0,
                             executors=executors)
    finally:
        TableMirror.gather = original
    assert all(s.generated == s.output_len for s in record.sequences)
    assert len(steps) > 20
    assert sum(s.swaps for s in record.sequences) > 0
    if tags:
        assert any(rewrite for _, rewrite in steps)             # copies or swaps moved blocks on some step
    else:                                                       # single rows write only their new blocks
        assert executors[0]._mirror.writes < sum(n for n, _ in steps) / 2

