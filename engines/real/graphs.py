"""A decode step with static shapes: persistent input buffers, row buckets, the argmax on the device, and on a GPU
each bucket's forward captured once as a CUDA graph and replayed.

The eager executor builds a decode step's tensors from host arrays of the step's own size and reads the whole
logits back. `DecodeGraphs` instead keeps one set of device buffers at the largest bucket (token ids, positions,
slot mapping, context lengths, and the block tables or region starts), pads a step's rows up to the next bucket
(1, 2, 4, ... `max_rows`) with rows that write nowhere (slot -1) and attend over one position, runs the model and
an argmax into a persistent token buffer, and copies back only the tokens. The inputs are staged in two persistent
host arrays (the int64 inputs; the context lengths then the block tables, int32), filled by numpy slice
assignments, and each goes to the device in one copy: two copies in and one back a step (on a CPU the staged
arrays are the buffers themselves, and nothing is copied). Each bucket's views and context are made once. On a GPU
(`capture=True`) each bucket's forward and argmax is recorded as a CUDA graph at warm-up and replayed, so a step
costs one launch instead of a few per layer; on a CPU the same bucketed step runs eagerly (what the CPU tests
check against the eager executor). Only greedy steps of single rows take this path; sampling, parallel samples,
beams and prefills run eagerly (`RealExecutor.execute`).
"""
from __future__ import annotations

import numpy as np
import torch

from pagedbench.engines.real.context import IterationContext, set_context


def buckets(max_rows: int) -> list[int]:
    """1, 2, 4, ... up to the first power of two >= max_rows."""
    out = [1]
    while out[-1] < max_rows:
        out.append(out[-1] * 2)
    return out


class DecodeGraphs:
    """Static decode buffers over `cache`, one row bucket per power of two up to `max_rows`."""

    def __init__(self, model: torch.nn.Module, cache, ops, device: torch.device, paged: bool, max_rows: int,
                 max_blocks: int, capture: bool):
        self.model, self.cache, self.ops, self.device, self.paged = model, cache, ops, device, paged
        self.sizes = buckets(max_rows)
        self.capture = capture and device.type == "cuda"
        rows = self.sizes[-1]
        self.max_blocks = max_blocks if paged else 0
        on_cpu = device.type == "cpu"
        # The staged inputs: int64 rows of ids, positions, slots (and region starts); int32 lengths, then tables.
        host64 = torch.zeros((3 if paged else 4, rows), dtype=torch.int64, pin_memory=not on_cpu)
        # The lengths' run is padded to 16 int32s, so that the tables start 64-byte aligned whatever the bucket.
        self._lens_run = -(-rows // 16) * 16
        host32 = torch.zeros(self._lens_run + rows * self.max_blocks, dtype=torch.int32, pin_memory=not on_cpu)
        self._host64, self._host32 = host64, host32
        self._stage64, self._stage32 = host64.numpy(), host32.numpy()
        self._tables_stage = self._stage32[self._lens_run:].reshape(rows, self.max_blocks)
        self._buf64 = host64 if on_cpu else host64.to(device)
        self._buf32 = host32 if on_cpu else host32.to(device)
        self.ids, self.pos, self.slots = self._buf64[0], self._buf64[1], self._buf64[2]
        self.starts = None if paged else self._buf64[3]
        self.lens = self._buf32[:rows]
        self.tables = self._buf32[self._lens_run:].view(rows, self.max_blocks) if paged else None
        self._stage64[2] = -1           # every row a padding row until a step fills it
        self._stage32[:rows] = 1
        self._upload(rows)
        self.tokens = torch.zeros(rows, dtype=torch.int64, device=device)
        self._inference = torch.inference_mode()
        # Per bucket: the model's [1, size] input views and the attention context over the buffers' first rows.
        self._views = {size: (self.ids[None, :size], self.pos[None, :size], self.tokens[:size],
                              IterationContext(self.cache.k, self.cache.v, self.ops, self.paged, False,
                                               self.slots[:size], context_lens=self.lens[:size],
                                               block_tables=None if self.tables is None else self.tables[:size],
                                               seq_starts=None if self.starts is None else self.starts[:size]))
                       for size in self.sizes}
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.steps = 0                 # decode steps served by this path
        self.padded_rows = 0           # rows computed past the steps' own (bucket padding)

    def bucket(self, rows: int) -> int | None:
        """The smallest bucket holding `rows`, or None past the largest."""
        return next((b for b in self.sizes if b >= rows), None)

    def _upload(self, size: int) -> None:
        """The staged inputs of a step of `size` rows to the device: the int64 rows whole, and the lengths with
        the first `size` rows of the tables (one contiguous run). Nothing on a CPU, where they are the buffers."""
        if self._buf64 is self._host64:
            return
        self._buf64.copy_(self._host64, non_blocking=True)
        end = self._lens_run + size * self.max_blocks
        self._buf32[:end].copy_(self._host32[:end], non_blocking=True)

    def _forward(self, size: int) -> None:
        """The bucket's forward over the buffers, its argmax written into `tokens`."""
        ids, pos, tokens, ctx = self._views[size]
        with self._inference:
            set_context(ctx)
            try:
                out = self.model(input_ids=ids, position_ids=pos, use_cache=False, logits_to_keep=0)
            finally:
                set_context(None)
            torch.argmax(out.logits[0], dim=-1, out=tokens)

    def capture_all(self) -> None:
        """On a GPU: every bucket's step recorded as a graph (largest first, sharing one memory pool), after
        warm-up runs on a side stream as CUDA graphs require. The buffers hold padding rows meanwhile: slot -1
        writes nothing."""
        if not self.capture:
            return
        self.slots.fill_(-1)
        self.lens.fill_(1)
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for size in self.sizes:
                for _ in range(2):
                    self._forward(size)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        pool = None
        for size in reversed(self.sizes):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._forward(size)
            pool = graph.pool()
            self.graphs[size] = graph
        torch.cuda.synchronize(self.device)

    def run(self, ids: np.ndarray, pos: np.ndarray, slots: np.ndarray, lens: np.ndarray,
            tables: np.ndarray | None, starts: np.ndarray | None) -> list[int]:
        """One decode step of len(ids) rows (at most the largest bucket): each row's greedy next token."""
        rows = len(ids)
        size = self.bucket(rows)
        stage = self._stage64
        stage[0, :rows] = ids
        stage[1, :rows] = pos
        stage[2, :rows] = slots
        lens32 = self._stage32
        lens32[:rows] = lens
        if tables is not None:
            width = min(tables.shape[1], self.max_blocks)
            self._tables_stage[:rows, :width] = tables[:, :width]
        else:
            stage[3, :rows] = starts
        if size > rows:
            # Padding rows: token 0 at position 0, stored nowhere, attending over one position of block 0 / slot 0.
            stage[:, rows:size] = 0
            stage[2, rows:size] = -1
            lens32[rows:size] = 1
            if tables is not None:
                self._tables_stage[rows:size] = 0
        self._upload(size)
        graph = self.graphs.get(size)
        if graph is not None:
            graph.replay()
        else:
            self._forward(size)
        self.steps += 1
        self.padded_rows += size - rows
        return self.tokens[:rows].tolist()   # the step's one copy back to the host
