"""The persistent block-table mirror: each step's array equals the KV manager's lists, though it writes only what
changed; checked alone and at every decode step of paged runs that grow, copy on write, fork beams, swap and
share prefixes."""
import numpy as np
import pytest

from pagedbench.engines.real.tables import TableMirror
from pagedbench.workloads.request import Request
from tests.real.conftest import ENGINES, SPECS, make_model, requests, serve


def check(mirror, tables, rewrite=False):
    out = mirror.gather(tables, rewrite)
    assert out.dtype == np.int32 and out.shape == (len(tables), max(1, max(map(len, tables))))
    for row, table in zip(out, tables):
        assert row[:len(table)].tolist() == table
    return out


def test_a_growing_table_writes_only_its_new_blocks():
    mirror = TableMirror(rows=2, width=2)
    a, b = [3, 4], [7]
    check(mirror, [a, b])
    assert mirror.writes == 3
    for step in range(10):
        a.append(10 + step)
        check(mirror, [a, b])
    assert mirror.writes == 13          # one block a step; b never again
    assert mirror.array.shape[1] >= len(a)


def test_a_new_list_or_a_step_with_moves_rewrites_the_row():
    mirror = TableMirror(rows=4, width=4)
    a = [1, 2, 3]
    check(mirror, [a])
    a[-1] = 9                           # a copy-on-write: same list, same length, announced by the step's moves
    stale = mirror.gather([a])
    assert stale[0, 2] == 3             # unannounced, the mirror cannot see it: the contract it relies on
    check(mirror, [a], rewrite=True)
    check(mirror, [[4, 4]])             # another list (a fork, a swap in): a row of its own
    check(mirror, [[4, 4, 6, 8, 1, 2, 3, 4, 5]])
    del a[1:]                           # shorter in place (never done by the manager): rewritten whole
    a[0] = 6
    check(mirror, [a])
    a += [7, 7]
    check(mirror, [a])


def test_a_list_twice_in_one_step_is_one_row():
    mirror = TableMirror(rows=1, width=1)
    a = [1, 2]
    out = check(mirror, [a, [5], a])
    assert len(mirror.entries) == 2 and out[0].tolist() == out[2].tolist()
    a.append(3)
    check(mirror, [a, a])


@pytest.mark.parametrize("seed", range(6))
def test_random_steps_of_the_same_lists_and_of_others_read_the_lists(seed):
    """Runs of calls over the very same lists (the usual decode step, which reuses the last call's rows) mixed
    with new lists, other orders, lists twice, announced copies and shrinking in place."""
    rng = np.random.default_rng(seed)
    mirror = TableMirror(rows=2, width=2)
    lists = [[int(b) for b in rng.integers(0, 99, rng.integers(1, 5))] for _ in range(6)]
    step = lists[:3]
    for _ in range(300):
        op = rng.integers(0, 10)
        rewrite = False
        if op < 5:                                  # the same lists again, some of them grown by a block
            for table in step:
                if rng.random() < 0.3:
                    table.append(int(rng.integers(0, 99)))
        elif op == 5:                               # another set and order, perhaps a list twice
            step = [lists[i] for i in rng.integers(0, len(lists), rng.integers(1, 6))]
        elif op == 6:                               # a new list (a fork, a swap in)
            lists[rng.integers(0, len(lists))] = [int(b) for b in rng.integers(0, 99, rng.integers(1, 9))]
            step = [lists[i] for i in rng.permutation(len(lists))[:4]]
        elif op == 7:                               # a copy on write, announced as the step's moves
            table = step[rng.integers(0, len(step))]
            table[-1] = int(rng.integers(100, 199))
            rewrite = True
        elif op == 8:                               # shorter in place (never done by the manager)
            table = step[rng.integers(0, len(step))]
            if len(table) > 1:                      # (the same length, changed in place, would go unseen)
                del table[len(table) // 2:]
                table[0] = int(rng.integers(200, 299))
        check(mirror, step, rewrite)


def test_rows_of_finished_requests_are_reclaimed_and_the_array_grows_when_it_must():
    mirror = TableMirror(rows=2, width=2)
    kept = [0]
    for step in range(50):              # a new pair of lists every step, beside one kept: old rows are reused
        check(mirror, [[step], kept, [step + 1, step + 2]])
    assert mirror.array.shape[0] <= 8 and len(mirror.entries) <= 2 * 3 + 64
    assert mirror.gather([kept])[0, 0] == 0 and mirror.writes == 50 * 3 + 1
    tables = [[i, r, i + r] for i in range(5) for r in range(3)]     # 15 lists at once: the array doubles
    check(mirror, tables)
    assert mirror.array.shape[0] >= 15
    check(mirror, [[]])                 # an empty table: a [1, 1] array
    assert mirror.gather([]).shape == (0, 1)


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

    def gather(self, tables, rewrite=False):
        out = original(self, tables, rewrite)
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

