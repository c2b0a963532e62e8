"""KV memory for the contiguous engines: one region per sequence, sized by a reservation policy at admission.

A request of several rows (parallel samples, beams) reserves one region per
row, all at admission, as the paper's baselines did: nothing is shared, so a
row's whole history lives in its own region. Rows are the group's beams in
rank order; which region holds which row is a per-group mapping, since a
beam step reorders the beams but never moves a region.

A beam step hands histories to new rows by copying (`fork`), as few and as
short as one region per row allows. A parent that survives keeps its region
for its first child: nothing moves. Every further child takes the region of
an old row no new row descends from (a dead beam), which already holds the
history that dead row shared with the child's parent, so only the positions
after their lineages split are copied. Per group the manager keeps, for every
pair of rows, how many leading positions their histories share. The prompt,
prefilled into row 0's region, reaches the others the same way. The copies
are queued for the next iteration's executor (`drain_into`).
"""
from __future__ import annotations

from operator import itemgetter

from pagedbench.engines.kv.arena import ContiguousArena, Region
from pagedbench.engines.kv.memory_split import MemorySplit, split_totals
from pagedbench.engines.kv.reservation import Reservation
from pagedbench.engines.sequence import Sequence


class ContiguousKV:
    def __init__(self, capacity: int, reservation: Reservation, max_seq_len: int, allocator: str = "buddy"):
        self.capacity = capacity
        self.reservation = reservation
        self.max_seq_len = max_seq_len
        self.arena = ContiguousArena(capacity, allocator)
        # Sums over held regions of min(requested, final length), requested and taken slots.
        self._will_fill = self._requested = self._taken = 0
        self._copies: list[tuple[int, int, int]] = []   # (source start, destination start, tokens)
        # Per held group: the region holding each row's history, and for every pair of rows the number of
        # leading cached positions their histories share.
        self._region_of: dict[int, list[Region]] = {}
        self._shared: dict[int, list[list[int]]] = {}
        self._fits: dict[tuple[int, int], bool] = {}    # (region size, rows) -> fits an empty arena

    paged = False        # one contiguous region per row, no block tables
    host_blocks = 0      # no host pool: a region never grows, so nothing is ever preempted or swapped

    def describe(self) -> str:
        return (f"contiguous arena of {self.capacity:,} slots, {self.arena.allocator_name} allocator, "
                f"reservation={self.reservation.value}")

    def region_size(self, seq: Sequence) -> int:
        return self.reservation.slots(seq.prompt_len, seq.output_len, self.max_seq_len)

    def rejection(self, seq: Sequence) -> str | None:
        """Why `seq` could never be admitted, or None."""
        size = self.region_size(seq)
        need = self.arena.taken_size(size)
        if need > self.arena.max_region:
            return (f"needs a contiguous region of {need} slots; the largest the arena "
                    f"of {self.capacity} slots can hold is {self.arena.max_region}")
        if seq.width > 1:
            key = (size, seq.width)
            if key not in self._fits:
                empty = ContiguousArena(self.capacity, self.arena.allocator_name)
                self._fits[key] = all(empty.allocate(row, size) is not None for row in range(seq.width))
            if not self._fits[key]:
                return f"needs {seq.width} regions of {need} slots; an empty arena of {self.capacity} cannot hold them"
        return None

    @staticmethod
    def _key(seq: Sequence, index: int):
        """The arena owner of the group's index-th region, allocated for row `index` at admission (a beam step
        may hand it to another row: `_region_of` says which region each row reads)."""
        return seq.id if index == 0 else (seq.id, index)

    def try_admit(self, seq: Sequence) -> bool:
        size = self.region_size(seq)
        regions = []
        for row in range(seq.width):
            region = self.arena.allocate(self._key(seq, row), size)
            if region is None:
                for back in range(row):
                    self.arena.free(self._key(seq, back))
                return False
            regions.append(region)
        for region in regions:
            self._will_fill += min(region.requested, seq.final_len)
            self._requested += region.requested
            self._taken += region.taken
        self._region_of[seq.id] = regions
        self._shared[seq.id] = [[0] * seq.width for _ in range(seq.width)]
        return True

    def prefilled(self, seq: Sequence) -> None:
        """Nothing to do after a prefill: no prefix is cached across requests."""

    def share_prompt(self, seq: Sequence) -> None:
        """After a group's prefill into row 0's region: copy the prompt into every other row's region.
        Only row 0's region is known to hold anything, so no two rows share a position yet."""
        self._shared[seq.id] = [[0] * seq.width for _ in range(seq.width)]
        self.fork(seq, [0] * seq.width)

    def fork(self, seq: Sequence, parents: list[int]) -> None:
        """After a step of a group: new row i continues old row parents[i], whose region holds that row's
        cached positions (all but the token each row just produced).

        The first child of each parent keeps the parent's region: nothing to copy. Every other child takes
        the region of a dead old row (one no new row continues), the dead row sharing the most with the
        parent, and gets a copy of the parent's positions from where their lineages split to `cached`:
        the region already holds the shared prefix. So width - len(set(parents)) regions are written (after
        a beam step a dead row always misses at least the last cached position), and since no destination
        is a source the copies may run in any order.
        """
        width = seq.width
        if len(parents) != width:
            raise ValueError(f"request {seq.id}: {len(parents)} parents for {width} rows")
        if width == 1:
            return
        cached = seq.prompt_len + seq.generated - 1
        old_region_of, old_shared = self._region_of[seq.id], self._shared[seq.id]
        region_of = old_region_of[:]            # a placeholder: every row's entry is set below
        children: dict[int, list[int]] = {}     # old row -> the new rows continuing it, the first keeping its region
        for row, parent in enumerate(parents):
            kids = children.get(parent)
            if kids is None:
                children[parent] = [row]
                region_of[row] = old_region_of[parent]
            else:
                kids.append(row)
        if len(children) < width:
            dead = [old for old in range(width) if old not in children]
            for parent, kids in children.items():
                shared = old_shared[parent]
                for row in kids[1:]:
                    old = max(dead, key=shared.__getitem__) if len(dead) > 1 else dead[0]
                    dead.remove(old)
                    region_of[row] = old_region_of[old]
                    common = shared[old]
                    if common < cached:
                        self._copies.append((old_region_of[parent].start + common, old_region_of[old].start + common,
                                             cached - common))
        self._region_of[seq.id] = region_of
        # Two children of one parent share every cached position; children of two parents, what those shared.
        # Siblings' rows of the matrix are one list, so no row is ever changed in place.
        gather = itemgetter(*parents)
        rows = {}
        for parent, kids in children.items():
            row = rows[parent] = list(gather(old_shared[parent]))
            for kid in kids:
                row[kid] = cached
        self._shared[seq.id] = [rows[parent] for parent in parents]

    def drain_into(self, batch) -> None:
        """Hand the region copies queued since the last call to `batch`."""
        if self._copies:
            batch.region_copies, batch.copy_tokens = self._copies, sum(c[2] for c in self._copies)
            self._copies = []

    def cached_tokens(self, seq: Sequence) -> int:
        """Nothing is cached across requests: every prompt is prefilled whole."""
        return 0

    def usage(self) -> tuple[int, int]:
        """(slots needed without sharing, slots allocated): equal, nothing is shared."""
        return self._taken, self._taken

    def grow(self, seq: Sequence) -> bool:
        """Make room for the token the next iteration produces; the region was sized at admission."""
        return self.grow_all([seq]) == 1

    def grow_all(self, seqs: list[Sequence], start: int = 0) -> int:
        """`grow` each of seqs[start:]; the index of the first whose region is full, or len(seqs)."""
        regions = self.arena.regions
        for i in range(start, len(seqs)):
            seq = seqs[i]
            if seq.prompt_len + seq.generated >= regions[seq.id].requested:
                return i
        return len(seqs)

    def growths(self, seqs: list[Sequence]) -> tuple[list[int], int]:
        """([steps before each single-row group's region is full], 0): a region never grows, so no step may
        pass it."""
        regions = self.arena.regions
        return [regions[s.id].requested - s.prompt_len - s.generated for s in seqs], 0

    available_blocks = 0   # a region takes nothing as it fills

    def append_block(self, seq: Sequence) -> None:
        raise RuntimeError("a contiguous region never takes a block")

    def free(self, seq: Sequence) -> None:
        del self._region_of[seq.id], self._shared[seq.id]
        for index in range(seq.width):
            key = self._key(seq, index)
            region = self.arena.regions[key]
            self._will_fill -= min(region.requested, seq.final_len)
            self._requested -= region.requested
            self._taken -= region.taken
            self.arena.free(key)

    def slots(self, seq: Sequence, start: int, end: int, row: int = 0) -> list[int]:
        """Arena slots of positions start..end-1 of a row of `seq`: the region now holding that row's
        history (see `fork`), which is contiguous."""
        region = self._region_of[seq.id][row]
        if end > region.requested:
            raise IndexError(f"positions up to {end} overflow the {region.requested}-slot region of request {seq.id}")
        return list(range(region.start + start, region.start + end))

    def holds(self, seq: Sequence) -> bool:
        return seq.id in self.arena.regions

    def can_swap_out(self, seq: Sequence) -> bool:
        """Never: there is no host pool (nothing is preempted)."""
        return False

    def can_swap_in(self, seq: Sequence, watermark: bool = True) -> bool:
        return False

    def swap_out(self, seq: Sequence) -> int:
        raise RuntimeError("a contiguous KV manager has no host pool to swap to")

    def swap_in(self, seq: Sequence) -> int:
        raise RuntimeError("a contiguous KV manager has no host pool to swap from")

    def spill_kept(self, seq: Sequence) -> int:
        """Nothing: no group is ever swapped out."""
        return 0

    def drop_swapped(self, seq: Sequence) -> None:
        raise RuntimeError("a contiguous KV manager never swaps a group out")

    def split(self, held, next_waiting: Sequence | None, stored: int | None = None) -> MemorySplit:
        """The split with `held` the sequences holding regions; `stored`, if the caller keeps it, their tokens."""
        if stored is None:
            stored = sum(s.width * (s.prompt_len + s.generated) for s in held)
        need = self.region_size(next_waiting) if next_waiting is not None else 0
        return split_totals(self.capacity, stored, self._will_fill, self._requested, self._taken,
                            self.arena.free_slots(), self.arena.unusable_free(need))
