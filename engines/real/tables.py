"""The paged engine's block tables as one persistent array, updated in place as rows take blocks.

A decode step needs every row's block table as one [rows, width] int32 array. Building it from the KV manager's
lists each step costs Python per block (a row of 1,000 tokens holds 63 blocks of 16), though a step changes few
of them: a row takes a new block once every `block_size` steps. `TableMirror` keeps each table list in a row of
one array and, each step, writes only the blocks a list took since the last: the step's array is then one gather
of its rows.

A row of the array mirrors one list object, found by the list's identity (the mirror holds the list, so its
identity cannot be reused while mirrored). What it relies on, from `engines/kv/block_tables.py`: a table list
changes in place only by growing at its end (a new block) or by a copy-on-write of the block it writes into, which
is always announced as a "copy" move of the step (`Batch.moves`); every other change (a beam fork, a swap in, a
readmission) puts a new list, which takes a row of its own. So a list is rewritten whole when the step moves blocks
(or when it got shorter), and otherwise gets its new tail only. The per-row work of a step is identity lookups,
lengths and one comparison of the lengths with those the rows hold; Python writes only the lists that took a block.
A step whose lists are the very ones of the last step, in the same order (the usual decode step), checks that with
one pass of identity tests and reuses the last step's rows and lengths: no lookup, and no numpy call but the gather.
"""
from __future__ import annotations

from operator import is_

import numpy as np


class TableMirror:
    """Block-table lists mirrored as rows of a growable int32 array."""

    def __init__(self, rows: int = 64, width: int = 64):
        self.array = np.zeros((rows, width), dtype=np.int32)
        self.entries: dict[int, int] = {}                 # id(list) -> its array row
        self.held: list[list[int] | None] = [None] * rows  # array row -> the list it mirrors (held: see above)
        self.written = np.zeros(rows, dtype=np.int64)     # array row -> blocks of its list written
        self.free = list(range(rows - 1, -1, -1))
        self.writes = 0              # blocks written into the array, for tests and benchmarks
        # The last call's lists (a copy of its list of them) and their rows: a call with the very same lists in the
        # same order reuses the rows.
        self._last: list[list[int]] = []
        self._last_found: list[int] = []
        self._last_index = np.zeros(0, dtype=np.intp)
        self._last_lens: list[int] = []               # the last call's list lengths (all written by its end)

    def _reclaim(self, keep: set[int]) -> None:
        """Free every row but `keep` (the rows the step reads): rows of finished requests, of replaced lists."""
        for key, row in [(key, row) for key, row in self.entries.items() if row not in keep]:
            del self.entries[key]
            self.held[row] = None
            self.free.append(row)

    def _take_row(self, table: list[int], keep: set[int]) -> int:
        """An array row for a list not mirrored yet: a free one, one reclaimed from lists the step does not read
        (`keep`: the rows it does), or one of a doubled array."""
        if not self.free:
            self._reclaim(keep)
        if not self.free:
            old = self.array.shape[0]
            self.array = np.concatenate([self.array, np.zeros_like(self.array)])
            self.written = np.concatenate([self.written, np.zeros_like(self.written)])
            self.held += [None] * old
            self.free = list(range(2 * old - 1, old - 1, -1))
        row = self.free.pop()
        self.entries[id(table)] = row
        self.held[row] = table
        self.written[row] = 0
        return row

    def _rows(self, tables: list[list[int]]) -> tuple[list[int], np.ndarray]:
        """The array row of each list, mirroring the lists not mirrored yet: as a list and as an index array."""
        found = list(map(self.entries.get, map(id, tables)))
        if None in found:
            keep = set(found)
            for i, row in enumerate(found):
                if row is None:                   # (a list twice in one step is mirrored once)
                    row = self.entries.get(id(tables[i]))
                    found[i] = row = self._take_row(tables[i], keep) if row is None else row
                    keep.add(row)
        return found, np.array(found, dtype=np.intp)

    def gather(self, tables: list[list[int]], rewrite: bool = False) -> np.ndarray:
        """The [len(tables), longest] array of the tables (a short row's tail holds stale block ids, which its
        context length keeps from being read). `rewrite`: write every list whole (a step that moved blocks)."""
        lens_list = list(map(len, tables))
        width = max(lens_list, default=0)
        last = self._last
        if not rewrite and len(tables) == len(last) and all(map(is_, tables, last)):
            # The very lists of the last call, in its order (the usual decode step): their rows are unchanged, and
            # a list only grows between two such calls (see above), so the lists whose length moved took blocks.
            found, index = self._last_found, self._last_index
            written = self._last_lens
        else:
            found, index = self._rows(tables)
            if rewrite:
                self.written[index] = 0
            written = self.written[index].tolist()
            self._last, self._last_found, self._last_index = list(tables), found, index
        changed = [i for i, n, m in zip(range(len(tables)), lens_list, written) if n != m]
        self._last_lens = lens_list
        if changed:
            if width > self.array.shape[1]:
                grown = np.zeros((self.array.shape[0], max(width, 2 * self.array.shape[1])), dtype=np.int32)
                grown[:, :self.array.shape[1]] = self.array
                self.array = grown
            array, done = self.array, self.written
            for i in changed:
                table, row, n, had = tables[i], found[i], lens_list[i], written[i]
                start = had if n > had else 0     # grown: its tail; shorter: whole
                array[row, start:n] = table[start:] if start else table
                done[row] = n
                self.writes += n - start
        if len(self.entries) > 2 * len(tables) + 64:     # lists of finished requests: reclaimed now and then
            self._reclaim(set(found))
        return self.array[index, :max(width, 1)]
