"""Rejecting, on arrival, a request that no engine state could ever serve."""
from __future__ import annotations

from engines.config import SchedulerLimits
from engines.sequence import Sequence, Status


def rejection_reason(seq: Sequence, kv, limits: SchedulerLimits, longest_prefill: int) -> str | None:
    """Why `seq` can never run, or None. `longest_prefill` is the most tokens one of its prefills may hold."""
    reason = kv.rejection(seq)
    if reason is None and seq.final_len > limits.max_seq_len:
        reason = f"prompt + output = {seq.final_len} exceeds max_seq_len {limits.max_seq_len}"
    if reason is None and longest_prefill > limits.max_num_batched_tokens:
        reason = (f"a prefill of up to {longest_prefill} tokens exceeds "
                  f"max_num_batched_tokens {limits.max_num_batched_tokens}")
    return reason


def queue_or_reject(seq: Sequence, waiting, kv, limits: SchedulerLimits, longest_prefill: int, now: float) -> bool:
    """Append an arrived request to `waiting`; or, if it can never run, mark it rejected. True if queued."""
    reason = rejection_reason(seq, kv, limits, longest_prefill)
    if reason is not None:
        seq.status, seq.rejected_reason, seq.finish_s = Status.REJECTED, reason, now
        return False
    waiting.append(seq)
    return True
