"""Request-level batching (FasterTransformer with a dynamic batcher in front, as the paper built it).

When no batch is running, up to B earliest-arrived requests form one batch;
B is however many regions of `max_seq_len` slots the KV budget holds (and at
most `max_num_seqs` sequences). A request of several sequences (samples,
beams) takes one region per sequence, and each of its sequences is a row. Prompts are padded to the batch's longest for the
prefill, whose cost covers the padding. The batch runs until its last
request finishes: a finished request stays in it as padding (its row is
still computed and its region still held), and no request joins mid-batch.

Decode attention follows FasterTransformer's per-sequence lengths: each live
row attends over its own true context (prompt + tokens generated so far,
never the padding), and a finished row kept as padding over the context it
holds, its final length minus one. Both backends charge and compute exactly
these contexts, which always fit the request's `max_seq_len` region.
"""
from __future__ import annotations

from collections import deque

from pagedbench.engines.scheduling.admission import queue_or_reject
from pagedbench.engines.scheduling.forks import apply_forks
from pagedbench.engines.batch import Batch
from pagedbench.engines.config import SchedulerLimits
from pagedbench.engines.kv.memory_split import MemorySplit
from pagedbench.engines.protocols import KVManager
from pagedbench.engines.sequence import Sequence, Status


class StaticScheduler:
    swapped = ()   # never preempts
    def __init__(self, kv: KVManager, limits: SchedulerLimits):
        self.kv = kv   # a ContiguousKV with the MAX reservation
        self.limits = limits
        self.waiting: deque[Sequence] = deque()
        self.batch: list[Sequence] = []
        self._padded_prompt = 0
        self._prefilled = 0      # members of the batch whose (padded) prompt has been processed

    def add(self, seq: Sequence, now: float) -> bool:
        """Queue an arrived request; False (and the sequence rejected) if it can never run."""
        return queue_or_reject(seq, self.waiting, self.kv, self.limits, now)

    def has_work(self) -> bool:
        return bool(self.waiting or self.batch)

    def schedule(self, now: float) -> Batch | None:
        if self.batch:
            blocked_by = "batch_running" if self.waiting else ""   # nobody joins until the batch ends
        else:
            blocked_by = self._form_batch(now)
            if not self.batch:
                return None
        batch = self._prefill_chunk() if self._prefilled < len(self.batch) else self._decode()
        batch.admission_blocked_by = blocked_by
        return batch

    def _decode(self) -> Batch:
        live = [s for s in self.batch if not s.done]
        padding = [s for s in self.batch if s.done]
        contexts = []
        for s in live:
            contexts += [s.length] * s.width
        for s in padding:
            contexts += [s.length - 1] * s.width
        batch = Batch(decode=live, decode_context_lens=contexts, padding=padding)
        self.kv.drain_into(batch)
        return batch

    def _form_batch(self, now: float) -> str:
        """Admit the earliest waiting requests while they fit; the limit that stopped the head of the queue
        ("memory", "max_num_seqs"; "" when every waiting request joined). The batch is empty if none fit."""
        rows, blocked_by = 0, ""
        while self.waiting:
            seq = self.waiting[0]
            if rows + seq.width > self.limits.max_num_seqs:
                blocked_by = "max_num_seqs"
                break
            if not self.kv.try_admit(seq):
                blocked_by = "memory"
                break
            self.waiting.popleft()
            seq.status, seq.admitted_s = Status.RUNNING, now
            self.batch.append(seq)
            rows += seq.width
        if self.batch:
            self._padded_prompt = max(s.prompt_len for s in self.batch)
            self._prefilled = 0
        return blocked_by

    def _prefill_chunk(self) -> Batch:
        per_chunk = max(1, self.limits.max_num_batched_tokens // self._padded_prompt)
        chunk = self.batch[self._prefilled:self._prefilled + per_chunk]
        self._prefilled += len(chunk)
        batch = Batch(prefill=chunk, prefill_lens=[self._padded_prompt] * len(chunk))
        self.kv.drain_into(batch)
        return batch

    def _end_batch(self) -> None:
        for seq in self.batch:
            self.kv.free(seq)
        self.batch = []

    def after_iteration(self, batch: Batch) -> None:
        apply_forks(self.kv, batch)

    def held(self) -> list[Sequence]:
        return self.batch

    def memory_split(self) -> MemorySplit:
        return self.kv.split(self.batch, self.waiting[0] if self.waiting else None)

    def quiet(self) -> None:
        """No fast-forward: a static batch's finished requests stay in it as padding rows."""
        return None

    def quiet_step(self) -> None:
        raise RuntimeError("a static batch has no quiet decode steps")

    def abort(self, seq: Sequence, reason: str) -> bool:
        """Drop a request between steps (a server's client went away): a waiting one leaves the queue; one in
        the running batch runs on as static batching runs every member, its region freed with the batch."""
        if seq in self.waiting:
            self.waiting.remove(seq)
            seq.status = Status.FAILED
            seq.rejected_reason = reason
        return True

    def release_finished(self, finished: list[Sequence]) -> list[Sequence]:
        """Mark the requests that finished this iteration; their regions stay held until the whole batch ends."""
        for seq in finished:
            seq.status = Status.FINISHED
        if all(s.done for s in self.batch):
            self._end_batch()
        return finished
