"""Iteration-level scheduling (Orca, vLLM): requests join and leave the batch at every iteration.

Each iteration is either a prefill of newly admitted requests (preferred
whenever one can be admitted) or a decode step of every running sequence.
Admission is FCFS: the head of the queue is admitted while the KV manager
can hold it, the token budget allows, and fewer than `max_num_seqs` run.
When a running sequence needs memory the manager cannot give (paged), the
most recently admitted sequence is preempted by recomputation: its memory
is freed and it goes back to the front of the queue, keeping its output.
"""
from __future__ import annotations

from collections import deque

from engines.scheduling.admission import queue_or_reject
from engines.batch import Batch
from engines.config import SchedulerLimits
from engines.kv.memory_split import MemorySplit
from engines.sequence import Sequence, Status


class IterationScheduler:
    def __init__(self, kv, limits: SchedulerLimits):
        self.kv = kv
        self.limits = limits
        self.waiting: deque[Sequence] = deque()
        self.running: dict[int, Sequence] = {}   # by id, in admission order (a dict keeps insertion order)
        # Tokens the running sequences hold once the last scheduled iteration has run: what the memory
        # split reads after each iteration, kept up to date here instead of summed over every sequence.
        self._stored = 0

    def add(self, seq: Sequence, now: float) -> bool:
        """Queue an arrived request; False (and the sequence rejected) if it can never run."""
        return queue_or_reject(seq, self.waiting, self.kv, self.limits, now)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self, now: float) -> Batch | None:
        batch = self._admit(now)
        if batch is None:
            batch = self._decode()
        if batch is not None:
            self._stored += batch.num_seqs   # each advancing sequence stores the token it produces
        return batch

    def _admit(self, now: float) -> Batch | None:
        admitted, lens, tokens = [], [], 0
        while self.waiting and len(self.running) + len(admitted) < self.limits.max_num_seqs:
            seq = self.waiting[0]
            if tokens + seq.length > self.limits.max_num_batched_tokens:
                break
            if not self.kv.try_admit(seq):
                break
            self.waiting.popleft()
            seq.status = Status.RUNNING
            if seq.admitted_s is None:
                seq.admitted_s = now
            admitted.append(seq)
            lens.append(seq.length)
            tokens += seq.length
        if not admitted:
            return None
        for seq in admitted:
            self.running[seq.id] = seq
        self._stored += tokens
        return Batch(prefill=admitted, prefill_lens=lens)

    def _decode(self) -> Batch | None:
        if not self.running:
            return None
        preempted = 0
        seqs = list(self.running.values())
        i = self.kv.grow_all(seqs)
        while i < len(seqs):
            # seqs[i] needs a block and none is free: preempt the latest admitted (maybe seqs[i] itself).
            self._preempt(seqs.pop())
            preempted += 1
            i = self.kv.grow_all(seqs, i)
        if not seqs:
            # Cannot happen: add() rejects a request that would not fit an empty pool.
            raise RuntimeError(f"every running sequence was preempted ({preempted}); KV manager: {self.kv.describe()}")
        return Batch(decode=seqs, decode_context_lens=[s.prompt_len + s.generated for s in seqs],
                     preempted=preempted)

    def _preempt(self, seq: Sequence) -> None:
        del self.running[seq.id]
        self._stored -= seq.length
        self.kv.free(seq)
        seq.status = Status.WAITING
        seq.preemptions += 1
        self.waiting.appendleft(seq)

    def held(self):
        """The running sequences, in admission order (a live view)."""
        return self.running.values()

    def memory_split(self) -> MemorySplit:
        return self.kv.split(self.running.values(), self.waiting[0] if self.waiting else None, self._stored)

    def release_finished(self, finished: list[Sequence]) -> list[Sequence]:
        """Free the sequences that produced their last token this iteration; returns them."""
        for seq in finished:
            seq.status = Status.FINISHED
            del self.running[seq.id]
            self._stored -= seq.length
            self.kv.free(seq)
        return finished
