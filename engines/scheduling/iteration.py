"""Iteration-level scheduling (Orca, vLLM): requests join and leave the batch at every iteration.

Each iteration is either a prefill of newly admitted requests (preferred
whenever one can be admitted) or a decode step of every running request.
A request is a group of `width` sequences (parallel samples, beams), always
scheduled together. Admission is FCFS: the head of the queue is admitted
while the KV manager can hold it, the token budget allows, and the running
sequences stay within `max_num_seqs`.

When a running group needs memory the manager cannot give (paged), the most
recently admitted group is preempted (`preemption`):

- `recompute`: its memory is freed and it goes back to the front of the
  queue, keeping its output; its next prefill recomputes it;
- `swap`: its blocks move to the host pool (vLLM's swap space) and it waits
  in the swapped queue; swapped groups come back, oldest first, before any
  new request is admitted (with nothing running, see `_unstick`);
- `auto` (vLLM's rule): recompute a group of one sequence, swap a group of
  several.

A group of several sequences is never recomputed (as in vLLM): it is
swapped, and a run whose host pool cannot hold it stops with an error.
"""
from __future__ import annotations

from collections import deque

from pagedbench.engines.scheduling.admission import queue_or_reject
from pagedbench.engines.scheduling.forks import apply_forks
from pagedbench.engines.batch import Batch
from pagedbench.engines.config import PREEMPTION, SchedulerLimits
from pagedbench.engines.kv.memory_split import MemorySplit
from pagedbench.engines.protocols import KVManager
from pagedbench.engines.sequence import Sequence, Status


class IterationScheduler:
    def __init__(self, kv: KVManager, limits: SchedulerLimits, preemption: str = "auto"):
        if preemption not in PREEMPTION:
            raise ValueError(f"preemption={preemption!r} is not one of {list(PREEMPTION)}")
        self.kv = kv
        self.limits = limits
        self.preemption = preemption
        self.waiting: deque[Sequence] = deque()
        self.swapped: deque[Sequence] = deque()
        self.running: dict[int, Sequence] = {}   # by id, in admission order (a dict keeps insertion order)
        self._rows = 0   # sequences (rows) of the running groups
        # Tokens the running rows hold once the last scheduled iteration has run: what the memory split
        # reads after each iteration, kept up to date here instead of summed over every sequence.
        self._stored = 0
        # The last batch was a quiet decode (every running group, each one row, nothing preempted, copied or
        # swapped; none swapped out) and nothing finished: the next steps repeat it until an event.
        self._quiet: str | None = None   # the head of the queue's limit then; None: not quiet

    def add(self, seq: Sequence, now: float) -> bool:
        """Queue an arrived request; False (and the sequence rejected) if it can never run."""
        return queue_or_reject(seq, self.waiting, self.kv, self.limits, now)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def schedule(self, now: float) -> Batch | None:
        # New requests wait while any swapped group does: those come back first (in the decode step).
        if self.swapped:
            batch, blocked_by = None, "swapped_first" if self.waiting else ""
        else:
            batch, blocked_by = self._admit(now)
        if batch is None:
            batch = self._decode()
        self._quiet = None
        if batch is not None:
            batch.admission_blocked_by = blocked_by
            rows = batch.num_rows
            self._stored += rows             # each advancing row stores the token it produces
            self.kv.drain_into(batch)
            if (not batch.prefill and not batch.preempted and not batch.swapped_in and not self.swapped
                    and not batch.moves and len(batch.decode) == rows):
                self._quiet = blocked_by
        return batch

    def quiet(self) -> tuple[list[Sequence], str] | None:
        """After a quiet decode (see `_quiet`): the running groups and the limit the head of the queue met,
        which hold through the following decode steps until a request arrives or finishes or memory runs
        out (memory only shrinks while nothing finishes); None otherwise."""
        if self._quiet is None:
            return None
        return list(self.running.values()), self._quiet

    def quiet_step(self) -> None:
        """One more decode step of every running group, run by the engine without a batch."""
        self._stored += self._rows

    def _swap_in(self, seqs: list[Sequence]) -> int:
        """After the running groups are readied for the step: bring swapped groups back, oldest first, while
        the pool (with room for their step) and the sequence limit allow; they join `seqs`, readied. With nothing
        running, a head that does not fit gives way as `_unstick` says."""
        back = 0
        while self.swapped:
            seq = self.swapped[0]
            if self._rows + seq.width > self.limits.max_num_seqs:
                break
            if not self.kv.can_swap_in(seq):
                if seqs:
                    break
                seq = self._unstick()
                if seq is None:
                    break
            self.swapped.remove(seq)
            self.kv.swap_in(seq)
            if self.kv.grow_all([seq]) != 1:
                raise RuntimeError(f"request {seq.id}: no room for its step right after swapping it in")
            seq.status = Status.RUNNING
            self._hold(seq)
            seqs.append(seq)
            back += 1
        return back

    def _unstick(self) -> Sequence | None:
        """Nothing runs and the oldest swapped group does not fit above the watermark: the watermark has nothing
        to protect, and the prefix blocks later swapped groups keep on the device may take its room. The first
        swapped group that fits without the watermark; failing that, the oldest, once later groups' kept blocks
        have moved to the host (None if they cannot)."""
        for seq in self.swapped:
            if self.kv.can_swap_in(seq, watermark=False):
                return seq
        oldest = self.swapped[0]
        for seq in list(self.swapped)[1:]:
            self.kv.spill_kept(seq)
            if self.kv.can_swap_in(oldest, watermark=False):
                return oldest
        return None

    def _hold(self, seq: Sequence) -> None:
        self.running[seq.id] = seq
        self._rows += seq.width
        self._stored += seq.width * seq.length

    def _unhold(self, seq: Sequence) -> None:
        del self.running[seq.id]
        self._rows -= seq.width
        self._stored -= seq.width * seq.length

    def _admit(self, now: float) -> tuple[Batch | None, str]:
        """A prefill of the waiting groups admitted FCFS (None if none), and the limit that stopped the head
        of the queue ("memory", "max_num_seqs", "token_budget"; "" when every waiting group was admitted)."""
        admitted, lens, cached, tokens, rows = [], [], [], 0, self._rows
        blocked_by = ""
        while self.waiting:
            seq = self.waiting[0]
            if rows + seq.width > self.limits.max_num_seqs:
                blocked_by = "max_num_seqs"
                break
            if tokens + seq.length > self.limits.max_num_batched_tokens:
                blocked_by = "token_budget"
                break
            if not self.kv.try_admit(seq):
                blocked_by = "memory"
                break
            self.waiting.popleft()
            seq.status = Status.RUNNING
            if seq.admitted_s is None:
                seq.admitted_s = now
            admitted.append(seq)
            lens.append(seq.length)
            cached.append(self.kv.cached_tokens(seq))
            tokens += seq.length - cached[-1]
            rows += seq.width
        if not admitted:
            return None, blocked_by
        for seq in admitted:
            self._hold(seq)
        return Batch(prefill=admitted, prefill_lens=lens, prefill_cached=cached if any(cached) else []), blocked_by

    def _decode(self) -> Batch | None:
        if not self.running and not self.swapped:
            return None
        preempted = swapped = 0
        seqs = list(self.running.values())
        i = self.kv.grow_all(seqs)
        while i < len(seqs):
            # seqs[i] needs a block and none is free: preempt the latest admitted (maybe seqs[i] itself).
            swapped += self._preempt(seqs.pop())
            preempted += 1
            i = self.kv.grow_all(seqs, i)
        # As vLLM: swapped groups come back only in a step that preempted nothing, or in one that preempted
        # every running group (a swapped group's kept prefix blocks can leave a lone sequence short of room).
        swapped_in = self._swap_in(seqs) if self.swapped and (not preempted or not seqs) else 0
        if not seqs:
            return None
        single = self._rows == len(seqs)     # every group one row (the common case): one context each
        if single:
            contexts = [s.prompt_len + s.generated for s in seqs]
        else:
            contexts = []
            for s in seqs:
                contexts += [s.prompt_len + s.generated] * s.width
        return Batch(decode=seqs, decode_context_lens=contexts, preempted=preempted, swapped_out=swapped,
                     swapped_in=swapped_in, single_rows=single)

    def _preempt(self, seq: Sequence) -> bool:
        """Preempt `seq` by the configured rule; True if it was swapped out, False if recomputed."""
        swap = self.preemption == "swap" or (self.preemption == "auto" and seq.width > 1)
        if swap and not self.kv.can_swap_out(seq):
            if seq.width > 1:
                raise RuntimeError(
                    f"request {seq.id} ({seq.width} sequences) must be swapped out but the host pool cannot "
                    f"hold it ({self.kv.describe()}); raise swap_space")
            swap = False   # one sequence: recompute it instead
        self._unhold(seq)
        seq.preemptions += 1
        if swap:
            self.kv.swap_out(seq)
            seq.status = Status.SWAPPED
            seq.swaps += 1
            self.swapped.appendleft(seq)
        else:
            self.kv.free(seq)
            seq.status = Status.WAITING
            self.waiting.appendleft(seq)
        return swap

    def after_iteration(self, batch: Batch) -> None:
        apply_forks(self.kv, batch)

    def held(self):
        """The running groups, in admission order (a live view)."""
        return self.running.values()

    def memory_split(self) -> MemorySplit:
        return self.kv.split(self.running.values(), self.waiting[0] if self.waiting else None, self._stored)

    def abort(self, seq: Sequence, reason: str) -> bool:
        """Drop a request between steps (a server's client went away): a running group's memory is freed, a
        waiting one leaves the queue, a swapped-out one's host blocks are freed. True: nothing holds it now."""
        if seq.id in self.running:
            self._unhold(seq)
            self.kv.free(seq)
            self._quiet = None
        elif seq in self.waiting:
            self.waiting.remove(seq)
        elif seq in self.swapped:
            self.swapped.remove(seq)
            self.kv.drop_swapped(seq)
        else:
            return True              # finished, or rejected: nothing holds it
        seq.status = Status.FAILED
        seq.rejected_reason = reason
        return True

    def release_finished(self, finished: list[Sequence]) -> list[Sequence]:
        """Free the sequences that produced their last token this iteration; returns them."""
        if finished:
            self._quiet = None
        for seq in finished:
            seq.status = Status.FINISHED
            self._unhold(seq)
            self.kv.free(seq)
        return finished
