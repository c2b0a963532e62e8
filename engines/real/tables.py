"""The paged engine's block tables as one persistent array, updated in place as rows take blocks.

A decode step needs every row's block table as one [rows, width] int32 array. Building it from the KV manager's
lists each step costs Python per block (a row of 1,000 tokens holds 63 blocks of 16), though a step changes few
of them: a row takes a new block once every `block_size` steps. `TableMirror` keeps each row's table in a row of
one array and, each step, writes only the blocks a row took since the last: the step's array is then one gather
of its rows.

What it relies on, from `engines/kv/block_tables.py`: a row's table list changes in place only by growing at its
end (a new block) or by a copy-on-write of the block it writes into, which is always announced as a "copy" move
of the step (`Batch.moves`); every other change (a beam fork, a swap in, a readmission) puts a new list. So a
row is rewritten whole when its list is another object than the one mirrored or when the step moves blocks, and
otherwise gets its new tail only.
"""
from __future__ import annotations

import numpy as np


class TableMirror:
    """Rows of block tables, keyed by (request id, row), in a growable int32 array."""

    def __init__(self, rows: int = 64, width: int = 64):
        self.array = np.zeros((rows, width), dtype=np.int32)
        # key -> [array row, the mirrored list (held, so its identity cannot be reused), blocks written, step seen]
        self.entries: dict[tuple[int, int], list] = {}
        self.free = list(range(rows - 1, -1, -1))
        self.step = 0
        self.writes = 0              # blocks written into the array, for tests and benchmarks

    def _grow_rows(self) -> None:
        """Reclaim the rows of entries not seen last step; double the array when that frees nothing."""
        stale = [key for key, entry in self.entries.items() if entry[3] < self.step - 1]
        for key in stale:
            self.free.append(self.entries.pop(key)[0])
        if self.free:
            return
        old = self.array.shape[0]
        self.array = np.concatenate([self.array, np.zeros_like(self.array)])
        self.free = list(range(2 * old - 1, old - 1, -1))

    def _widen(self, width: int) -> None:
        new = max(width, 2 * self.array.shape[1])
        grown = np.zeros((self.array.shape[0], new), dtype=np.int32)
        grown[:, :self.array.shape[1]] = self.array
        self.array = grown

    def gather(self, keys: list[tuple[int, int]], tables: list[list[int]], rewrite: bool = False) -> np.ndarray:
        """The [len(keys), longest] array of the rows' tables (a short row's tail holds stale block ids, which
        its context length keeps from being read). `rewrite`: write every row whole (a step that moved blocks)."""
        self.step += 1
        step, entries = self.step, self.entries
        index = []
        width = 0
        for key, table in zip(keys, tables):
            n = len(table)
            if n > width:
                width = n
            entry = entries.get(key)
            if entry is None:
                if not self.free:
                    self._grow_rows()
                entry = entries[key] = [self.free.pop(), table, 0, step]
                start = 0
            elif entry[1] is not table or rewrite or n < entry[2]:
                entry[1] = table
                start = 0
            else:
                start = entry[2]
            entry[3] = step
            if start < n:
                if n > self.array.shape[1]:
                    self._widen(n)
                self.array[entry[0], start:n] = table[start:] if start else table
                self.writes += n - start
                entry[2] = n
            index.append(entry[0])
        if len(entries) > 2 * len(keys) + 64:     # rows of finished requests: reclaimed now and then
            for key in [key for key, entry in entries.items() if entry[3] < step]:
                self.free.append(entries.pop(key)[0])
        return self.array[index, :max(width, 1)]
