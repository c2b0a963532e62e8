"""Rejecting, on arrival, a request that no engine state could ever serve: one rule for every engine."""
from __future__ import annotations

from collections import deque

from pagedbench.engines.config import SchedulerLimits
from pagedbench.engines.protocols import KVManager
from pagedbench.engines.sequence import Sequence, Status


def rejection_reason(seq: Sequence, kv: KVManager, limits: SchedulerLimits) -> str | None:
    """Why `seq` can never run, or None.

    No prefill rule is needed: `SchedulerLimits` refuses a token budget below
    `max_seq_len`, so any request within `max_seq_len` (even recomputed with
    all but its last output token) fits one prefill iteration.
    """
    reason = kv.rejection(seq)
    if reason is None and seq.final_len > limits.max_seq_len:
        reason = f"prompt + output = {seq.final_len} exceeds max_seq_len {limits.max_seq_len}"
    if reason is None and seq.width > limits.max_num_seqs:
        reason = f"runs {seq.width} sequences; max_num_seqs is {limits.max_num_seqs}"
    return reason


def queue_or_reject(seq: Sequence, waiting: deque[Sequence], kv: KVManager, limits: SchedulerLimits,
                    now: float) -> bool:
    """Append an arrived request to `waiting`; or, if it can never run, mark it rejected. True if queued."""
    reason = rejection_reason(seq, kv, limits)
    if reason is not None:
        seq.status, seq.rejected_reason, seq.finish_s = Status.REJECTED, reason, now
        return False
    waiting.append(seq)
    return True
