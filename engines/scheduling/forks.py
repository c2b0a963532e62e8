"""After an iteration: what it decided about a group's KV, applied the same way by every scheduler."""
from __future__ import annotations

from pagedbench.engines.batch import Batch
from pagedbench.engines.protocols import KVManager


def apply_forks(kv: KVManager, batch: Batch) -> None:
    """A prefilled shared prefix joins the cache (paged); a group's rows descend from its prompt after
    its prefill, and from the beams the step chose (`Sequence.parents`, set by the executor) after a beam
    step. The KV manager shares (paged) or copies (contiguous) accordingly."""
    for seq in batch.prefill:
        kv.prefilled(seq)
        if seq.width > 1:
            kv.share_prompt(seq)   # every row (sample or beam) continues the one prompt
            seq.parents = None
    for seq in () if batch.single_rows else batch.decode:
        if seq.parents is not None:
            kv.fork(seq, seq.parents)
            seq.parents = None
