"""A decode step with static shapes: persistent input buffers, row buckets, the argmax on the device, and on a GPU
each bucket's forward captured once as a CUDA graph and replayed.

The eager executor builds a decode step's tensors from host arrays of the step's own size and reads the whole
logits back. `DecodeGraphs` instead keeps one set of device buffers at the largest bucket (token ids, positions,
slot mapping, context lengths, and the block tables or region starts), pads a step's rows up to the next bucket
(1, 2, 4, ... `max_rows`) with rows that write nowhere (slot -1) and attend over one position, runs the model and
an argmax into a persistent token buffer, and copies back only the tokens: one host copy a step. On a GPU
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
        on = dict(device=device)
        self.ids = torch.zeros(rows, dtype=torch.int64, **on)
        self.pos = torch.zeros(rows, dtype=torch.int64, **on)
        self.slots = torch.full((rows,), -1, dtype=torch.int64, **on)
        self.lens = torch.ones(rows, dtype=torch.int32, **on)
        self.tables = torch.zeros((rows, max_blocks), dtype=torch.int32, **on) if paged else None
        self.starts = None if paged else torch.zeros(rows, dtype=torch.int64, **on)
        self.tokens = torch.zeros(rows, dtype=torch.int64, **on)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.steps = 0                 # decode steps served by this path
        self.padded_rows = 0           # rows computed past the steps' own (bucket padding)

    def bucket(self, rows: int) -> int | None:
        """The smallest bucket holding `rows`, or None past the largest."""
        return next((b for b in self.sizes if b >= rows), None)

    def _context(self, size: int) -> IterationContext:
        return IterationContext(self.cache.k, self.cache.v, self.ops, self.paged, False, self.slots[:size],
                                context_lens=self.lens[:size],
                                block_tables=None if self.tables is None else self.tables[:size],
                                seq_starts=None if self.starts is None else self.starts[:size])

    @torch.inference_mode()
    def _forward(self, size: int) -> None:
        """The bucket's forward over the buffers, its argmax written into `tokens`."""
        set_context(self._context(size))
        try:
            out = self.model(input_ids=self.ids[None, :size], position_ids=self.pos[None, :size], use_cache=False,
                             logits_to_keep=0)
        finally:
            set_context(None)
        torch.argmax(out.logits[0], dim=-1, out=self.tokens[:size])

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
        pad = size - rows
        # Padding rows: token 0 at position 0, stored nowhere, attending over one position of block 0 / slot 0.
        self.ids[:size].copy_(torch.from_numpy(np.concatenate([ids, np.zeros(pad, np.int64)])), non_blocking=True)
        self.pos[:size].copy_(torch.from_numpy(np.concatenate([pos, np.zeros(pad, np.int64)])), non_blocking=True)
        self.slots[:size].copy_(torch.from_numpy(np.concatenate([slots, np.full(pad, -1, np.int64)])),
                                non_blocking=True)
        self.lens[:size].copy_(torch.from_numpy(np.concatenate([lens.astype(np.int32), np.ones(pad, np.int32)])),
                               non_blocking=True)
        if self.tables is not None:
            width = min(tables.shape[1], self.tables.shape[1])
            self.tables[:rows, :width].copy_(torch.from_numpy(tables[:, :width]), non_blocking=True)
            self.tables[rows:size].zero_()
        else:
            self.starts[:size].copy_(torch.from_numpy(np.concatenate([starts, np.zeros(pad, np.int64)])),
                                     non_blocking=True)
        graph = self.graphs.get(size)
        if graph is not None:
            graph.replay()
        else:
            self._forward(size)
        self.steps += 1
        self.padded_rows += pad
        return self.tokens[:rows].tolist()   # the step's one copy back to the host
