"""The wall-clock executor: each iteration is one forward pass of a real model over a packed ragged batch."""
from __future__ import annotations

import time

import torch

from engines.batch import Batch
from engines.real.context import IterationContext, set_context
from engines.real.kv_cache import KVCache

PAD_TOKEN = 0


class RealExecutor:
    """Runs iterations on `model`, reading and writing `cache` through the KV manager's layout.

    Token ids outside the model's vocabulary are folded into it (id mod
    vocab size): throughput depends on lengths, not on what the tokens say.
    Sampling is greedy by default; `temperature > 0` samples with a seeded
    generator. Output lengths come from the trace: EOS is ignored.
    """

    name = "real"

    def __init__(self, model: torch.nn.Module, kv, cache: KVCache, ops, device: torch.device,
                 temperature: float = 0.0, seed: int = 0, keep_logits: bool = False):
        self.model, self.kv, self.cache, self.ops, self.device = model, kv, cache, ops, device
        self.paged = hasattr(kv, "block_tables")
        self.vocab_size = model.config.vocab_size
        self.temperature = temperature
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.keep_logits = keep_logits
        self.last_logits: torch.Tensor | None = None
        self.forward_s = 0.0          # time inside the model forward and sampling, summed
        self._t0 = time.perf_counter()

    def start_clock(self) -> None:
        self._t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self._t0

    def wait_until(self, t: float) -> None:
        delay = t - self.now()
        if delay > 0:
            time.sleep(delay)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _tensor(self, values, dtype) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype, device=self.device)

    def _prefill_context(self, batch: Batch):
        ids, pos, slots, last, cu = [], [], [], [], [0]
        for seq, padded in zip(batch.prefill, batch.prefill_lens):
            tokens = list(seq.request.prompt_token_ids) + seq.output_token_ids
            real = len(tokens)                        # == seq.length
            ids += tokens + [PAD_TOKEN] * (padded - real)   # static batching pads to the batch's longest
            pos += range(padded)
            slots += self.kv.slots(seq, 0, padded)
            last.append(cu[-1] + real - 1)
            cu.append(cu[-1] + padded)
        ctx = IterationContext(self.cache.k, self.cache.v, self.ops, self.paged, True,
                               self._tensor(slots, torch.int64), cu_seqlens=self._tensor(cu, torch.int32))
        return ids, pos, last, ctx

    def _decode_context(self, batch: Batch):
        ids, pos, slots, lens, tables, starts = [], [], [], [], [], []
        for seq in batch.decode:
            n = seq.length                            # the last generated token is fed at position n - 1
            ids.append(seq.output_token_ids[-1])
            pos.append(n - 1)
            slots += self.kv.slots(seq, n - 1, n)
            lens.append(n)
        for seq in batch.padding:                     # finished rows kept as padding: computed, not stored
            ids.append(PAD_TOKEN)
            pos.append(seq.length - 1)
            slots.append(-1)
            lens.append(seq.length - 1)
        rows = batch.decode + batch.padding
        if self.paged:
            width = max(len(self.kv.block_tables[s.id]) for s in rows)
            tables = [t + [0] * (width - len(t)) for t in (self.kv.block_tables[s.id] for s in rows)]
        else:
            starts = [self.kv.slots(s, 0, 1)[0] for s in rows]     # first slot of each region
        ctx = IterationContext(self.cache.k, self.cache.v, self.ops, self.paged, False,
                               self._tensor(slots, torch.int64), context_lens=self._tensor(lens, torch.int32),
                               block_tables=self._tensor(tables, torch.int32) if self.paged else None,
                               seq_starts=None if self.paged else self._tensor(starts, torch.int64))
        return ids, pos, list(range(len(rows))), ctx

    @torch.inference_mode()
    def forward(self, ids: list[int], pos: list[int], last: list[int], ctx: IterationContext) -> torch.Tensor:
        """Logits at the `last` positions of one packed forward pass."""
        input_ids = self._tensor([t % self.vocab_size for t in ids], torch.int64)[None]
        position_ids = self._tensor(pos, torch.int64)[None]
        set_context(ctx)
        try:
            out = self.model(input_ids=input_ids, position_ids=position_ids, use_cache=False,
                             logits_to_keep=self._tensor(last, torch.int64))
        finally:
            set_context(None)
        return out.logits[0]

    def _sample(self, logits: torch.Tensor) -> list[int]:
        if self.temperature <= 0:
            return logits.argmax(dim=-1).tolist()
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        return torch.multinomial(probs, 1, generator=self.generator)[:, 0].tolist()

    def execute(self, batch: Batch) -> float:
        started = time.perf_counter()
        ids, pos, last, ctx = self._prefill_context(batch) if batch.is_prefill else self._decode_context(batch)
        forward_start = time.perf_counter()
        logits = self.forward(ids, pos, last, ctx)
        tokens = self._sample(logits)                 # .tolist() waits for the device
        self._sync()
        ended = time.perf_counter()
        self.forward_s += ended - forward_start
        if self.keep_logits:
            self.last_logits = logits.float().cpu()
        for seq, token in zip(batch.advancing(), tokens):
            seq.output_token_ids.append(token)
        return ended - started

    def warmup(self) -> None:
        """One small prefill and one decode through the model and kernels, writing nothing, before timing."""
        ctx = IterationContext(self.cache.k, self.cache.v, self.ops, self.paged, True,
                               self._tensor([-1] * 8, torch.int64), cu_seqlens=self._tensor([0, 8], torch.int32))
        self.forward(list(range(8)), list(range(8)), [7], ctx)
        ctx = IterationContext(self.cache.k, self.cache.v, self.ops, self.paged, False,
                               self._tensor([-1], torch.int64), context_lens=self._tensor([1], torch.int32),
                               block_tables=self._tensor([[0]], torch.int32) if self.paged else None,
                               seq_starts=None if self.paged else self._tensor([0], torch.int64))
        self.forward([1], [0], [0], ctx)
        self._sync()
        self.forward_s = 0.0
