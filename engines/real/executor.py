"""The wall-clock executor: each iteration is one forward pass of a real model over a packed ragged batch."""
from __future__ import annotations

from itertools import chain
from operator import attrgetter, gt, is_
import time

import numpy as np
import torch

from pagedbench.engines.batch import Batch
from pagedbench.engines.protocols import KVManager
from pagedbench.engines.real.context import IterationContext, set_context
from pagedbench.engines.real.graphs import DecodeGraphs
from pagedbench.engines.real.kv_cache import KVCache
from pagedbench.engines.real.logprobs import TokenLogprobs, token_logprobs
from pagedbench.engines.real.sampling import Sampling, sample
from pagedbench.engines.real.swap import swap_blocks
from pagedbench.engines.real.tables import TableMirror
from pagedbench.engines.real.vocab import check_choice, fit_prompt
from pagedbench.engines.sequence import Sequence

PAD_TOKEN = 0
_START, _SIZE = attrgetter("start"), attrgetter("requested")   # a contiguous region's first slot and size
_ID = attrgetter("id")
NUMPY = {torch.int32: np.int32, torch.int64: np.int64}   # the tensors' dtypes, as numpy builds them
NUMPY_FLOATS = (torch.float32, torch.float16, torch.float64)   # logits numpy can take the argmax of


def greedy(logits: torch.Tensor) -> list[int]:
    """Each row's argmax of [..., rows, vocab] logits, the leading dimensions flattened into the rows. On a CPU
    through numpy: torch's CPU argmax over a vocabulary of 50,272 took 1.6 ms for 32 rows on one thread (torch
    2.13), numpy's 0.13 ms. Both take the first of equal maxima, and a NaN as the maximum
    (tests/real/test_greedy.py)."""
    if logits.is_cpu and logits.dtype in NUMPY_FLOATS:
        array = logits.numpy()
        return array.reshape(-1, array.shape[-1]).argmax(-1).tolist()
    return logits.reshape(-1, logits.shape[-1]).argmax(dim=-1).tolist()


class RealExecutor:
    """Runs iterations on `model`, reading and writing `cache` through the KV manager's layout.

    A prompt token id outside the model's vocabulary stops the run with an
    error naming the request (`out_of_vocab="error"`), or is folded into it
    (id mod vocab size) with `out_of_vocab="wrap"`: throughput depends on
    lengths, not on what the tokens say. The summary names the choice and
    counts the requests it folded (`requests_wrapped`).
    Sampling is greedy by default; `temperature > 0` samples with a seeded
    generator. Output lengths come from the trace: EOS is ignored. A request
    of several rows samples each parallel sample with its own seeded noise
    (with the request's own sampling when the server set one: a row per
    choice of a request for n), or keeps the `width` best beams by summed
    log-probability (setting `Sequence.parents`, which the KV manager
    applies after the iteration). A request whose own sampling asks for
    log-probabilities gets them in `token_logprobs` after each step; no
    other request pays for them.
    KV data the manager moved (copies, swaps) moves before the forward pass,
    inside the iteration's time. With `cuda_graphs`, greedy decode steps of
    single rows run through static buffers and row buckets up to `max_rows`
    (engines/real/graphs.py), captured as CUDA graphs on a GPU and run
    eagerly on a CPU; every other step runs as without.
    """

    name = "real"
    fast_forward = False   # every iteration runs the model

    def __init__(self, model: torch.nn.Module, kv: KVManager, cache: KVCache, ops, device: torch.device,
                 temperature: float = 0.0, seed: int = 0, keep_logits: bool = False, host: KVCache | None = None,
                 out_of_vocab: str = "wrap", cuda_graphs: bool = False, max_rows: int = 256):
        check_choice(out_of_vocab, "backend.out_of_vocab")
        self.model, self.kv, self.cache, self.ops, self.device = model, kv, cache, ops, device
        self.host = host              # the host pool's blocks (paged swapping), or None
        self.seed = seed
        self.paged = kv.paged
        self._on_cpu = device.type == "cpu"
        self._on_cuda = device.type == "cuda"
        self._inference = torch.inference_mode()
        self.vocab_size = model.config.vocab_size
        self.out_of_vocab = out_of_vocab
        self.wrapped: set[int] = set()     # requests whose prompt held ids outside the vocabulary (wrap)
        self._checked: set[int] = set()    # requests whose prompt was checked
        self.temperature = temperature
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.keep_logits = keep_logits
        self.last_logits: torch.Tensor | None = None
        self.forward_s = 0.0          # time inside the model forward and sampling, summed
        self._t0 = time.perf_counter()
        # A request's own sampling (the server sets it by request id, before the request reaches the engine):
        # its rows are drawn with it instead of the backend's temperature.
        self.request_sampling: dict[int, Sampling] = {}
        # The log-probabilities of each step's tokens for the requests whose sampling asks (`Sampling.logprobs`), by
        # request id, one per row; the server takes them after each step (engines/real/logprobs.py).
        self.token_logprobs: dict[int, list[TokenLogprobs]] = {}
        self._mirror = TableMirror()   # the paged decode steps' block tables, kept between steps
        # The contiguous decode step's regions as last read (`_region_starts`): the Region objects, their starts and
        # sizes. A step reading the very same regions in the same order reuses them.
        self._regions_read: tuple[list, np.ndarray, list[int]] = ([], np.zeros(0, np.int64), [])
        self.graphs = None
        if cuda_graphs:
            max_blocks = -(-model.config.max_position_embeddings // kv.block_size) if self.paged else 0
            self.graphs = DecodeGraphs(model, cache, ops, device, self.paged, max_rows, max_blocks, capture=True)

    def start_clock(self) -> None:
        self._t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self._t0

    def wait_until(self, t: float) -> None:
        delay = t - self.now()
        if delay > 0:
            time.sleep(delay)

    def _sync(self) -> None:
        if self._on_cuda:
            torch.cuda.synchronize(self.device)

    def _tensor(self, values, dtype) -> torch.Tensor:
        """A list (or numpy array) as a tensor on the device. Through numpy: torch.tensor(list) took 54 ns an
        element here, numpy a third of that, and a step builds thousands (its block tables)."""
        return self._from(np.asarray(values, dtype=NUMPY[dtype]))

    def _from(self, array: np.ndarray) -> torch.Tensor:
        """A numpy array already of the tensor's dtype, on the device (on a CPU, sharing its memory)."""
        return torch.from_numpy(array) if self._on_cpu else torch.from_numpy(array).to(self.device)

    @staticmethod
    def _table_array(tables: list[list[int]]) -> np.ndarray:
        """Block tables as one [rows, longest] int32 array, short tables padded with block 0 (never read)."""
        width = max(map(len, tables))
        flat = list(chain.from_iterable(t if len(t) == width else t + [0] * (width - len(t)) for t in tables))
        return np.array(flat, dtype=np.int32).reshape(len(tables), width)

    def _tables(self, tables: list[list[int]]) -> torch.Tensor:
        return self._tensor(self._table_array(tables), torch.int32)

    def check_prompt(self, seq: Sequence) -> None:
        """Refuse (error) or note (wrap) a prompt with ids outside the vocabulary, once per request."""
        if seq.id in self._checked:
            return
        self._checked.add(seq.id)
        if fit_prompt(seq.request.id, seq.request.prompt_token_ids, self.vocab_size, self.out_of_vocab,
                      "backend.out_of_vocab") is not None:
            self.wrapped.add(seq.request.id)

    def _prefill_context(self, batch: Batch):
        ids, pos, slots, last, cu = [], [], [], [], [0]
        cached = batch.prefill_cached or [0] * len(batch.prefill)
        for seq in batch.prefill:
            self.check_prompt(seq)
        for seq, padded, skip in zip(batch.prefill, batch.prefill_lens, cached):
            tokens = list(seq.request.prompt_token_ids) + seq.output_token_ids
            real = len(tokens)                        # == seq.length
            ids += tokens[skip:] + [PAD_TOKEN] * (padded - real)   # static batching pads to the batch's longest
            pos += range(skip, padded)
            slots += self.kv.slots(seq, skip, padded)
            last.append(cu[-1] + real - skip - 1)
            cu.append(cu[-1] + padded - skip)
        ctx = IterationContext(self.cache.k, self.cache.v, self.ops, self.paged, True,
                               self._tensor(slots, torch.int64), cu_seqlens=self._tensor(cu, torch.int32),
                               max_seqlen=max(b - a for a, b in zip(cu, cu[1:])))
        if any(cached):
            # New tokens after a cached shared prefix attend over it through the block table.
            ctx.block_tables = self._tables([self.kv.table(s) for s in batch.prefill])
            ctx.context_lens = self._tensor(cached, torch.int32)
        return ids, pos, last, ctx

    def _decode_arrays(self, batch: Batch):
        """One row per decode row, then the padding rows: the last token fed at its position, the slot it is
        stored in, the context each row reads, and the rows' block tables (paged) or region starts (contiguous).
        The slots are computed from the tables or starts in numpy, not asked of the KV manager position by
        position; the tables come from the persistent mirror, which writes only the blocks lists took since the
        last step (engines/real/tables.py), and a single row's region is read from the manager's record of its
        regions (`_region_starts`)."""
        decode = batch.decode
        if not batch.padding and len(batch.decode_context_lens) == len(decode):
            # The usual step: single rows (one context each), no padding; the scheduler's contexts are the rows'.
            lens = np.array(batch.decode_context_lens, dtype=np.int32)
            pos = np.subtract(lens, 1, dtype=np.int64)
            ids = [seq.output_token_ids[-1] for seq in decode]
            if self.paged:
                tables = self._mirror.gather(list(map(self.kv.table, decode)), rewrite=bool(batch.moves))
                return np.asarray(ids, dtype=np.int64), pos, lens, self._block_slots(tables, pos), tables, None
            starts = self._region_starts(decode, pos, batch.decode_context_lens)
            return np.asarray(ids, dtype=np.int64), pos, lens, starts + pos, None, starts
        rows = [(seq, row) for seq in decode for row in range(seq.width)]
        padding = [(seq, row) for seq in batch.padding for row in range(seq.width)]
        ids = [(seq.row_token_ids[row] if row else seq.output_token_ids)[-1] for seq, row in rows]
        ids += [PAD_TOKEN] * len(padding)
        everyone = rows + padding
        # The last generated token is fed at position length - 1; a padding row (finished, kept in the batch)
        # is computed at its last position over one token fewer, and stores nothing.
        pos = np.array([seq.prompt_len + seq.generated for seq, _ in everyone], dtype=np.int64) - 1
        lens = np.add(pos, 1, dtype=np.int32)
        lens[len(rows):] -= 1
        if self.paged:
            table = self.kv.table
            tables = self._mirror.gather([table(seq, row) for seq, row in everyone], rewrite=bool(batch.moves))
            slots = self._block_slots(tables, pos)
            starts = None
        else:
            tables = None
            # Asked once per row, at its new position: the manager checks that the row's region holds it.
            at = self.kv.slots
            starts = np.array([at(seq, p, p + 1, row)[0] for (seq, row), p in zip(rows, pos.tolist())] +
                              [at(seq, 0, 1, row)[0] for seq, row in padding], dtype=np.int64)
            starts[:len(rows)] -= pos[:len(rows)]
            slots = starts + pos
        slots[len(rows):] = -1
        return np.asarray(ids, dtype=np.int64), pos, lens, slots, tables, starts

    def _block_slots(self, tables: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """The cache slot of each row's position, through the row's block table (row i of `tables`)."""
        bs = self.kv.block_size
        block, offset = np.divmod(pos, bs)
        slots = np.multiply(tables[np.arange(len(pos)), block], bs, dtype=np.int64)
        slots += offset
        return slots

    def _region_starts(self, decode: list[Sequence], pos: np.ndarray, lens: list[int]) -> np.ndarray:
        """The region start of each single-row sequence of a contiguous decode step, read from the KV manager's
        own record of its regions (`kv.arena.regions`, by request id: a single row reads the region admitted for
        it, which no beam step hands on) rather than asked position by position. Read every step, so a region
        placed again (a readmission, or a caller that admits without a prefill) is always the one read. Each step
        checks every row's context (`lens`, the scheduler's list: position + 1) against its region's size; a
        position past it (or a sequence the manager does not hold) is asked of the manager, which raises its own
        error."""
        try:
            held = list(map(self.kv.arena.regions.__getitem__, map(_ID, decode)))
        except KeyError:
            held = None
        if held is not None:
            last = self._regions_read
            if len(last[0]) == len(held) and all(map(is_, held, last[0])):
                starts, sizes = last[1], last[2]    # the same (frozen) regions as the last step's, in its order
            else:
                starts = np.fromiter(map(_START, held), dtype=np.int64, count=len(held))
                sizes = list(map(_SIZE, held))
                self._regions_read = (held, starts, sizes)
            if not any(map(gt, lens, sizes)):
                return starts
        for seq, p in zip(decode, pos.tolist()):
            self.kv.slots(seq, p, p + 1)            # raises for the row the manager refuses
        raise RuntimeError("a decode row's position is outside its region, though the KV manager holds it")

    def _decode_context(self, batch: Batch):
        ids, pos, lens, slots, tables, starts = self._decode_arrays(batch)
        # The arrays come in the tensors' dtypes: int64 ids, positions, slots and starts; int32 lengths and tables.
        ctx = IterationContext(self.cache.k, self.cache.v, self.ops, self.paged, False,
                               self._from(slots), context_lens=self._from(lens),
                               block_tables=None if tables is None else self._from(tables),
                               seq_starts=None if starts is None else self._from(starts))
        return ids, pos, None, ctx

    def _static(self, batch: Batch) -> bool:
        """Whether `batch` runs through the static decode path: a greedy decode step of single rows that fits
        the largest bucket, its logits not kept."""
        own = self.request_sampling
        return (self.graphs is not None and not batch.is_prefill and self.temperature <= 0 and not self.keep_logits
                and all(seq.width == 1 for seq in batch.decode) and all(seq.width == 1 for seq in batch.padding)
                and not (own and any(seq.id in own and not own[seq.id].argmax_only for seq in batch.decode))
                and self.graphs.bucket(len(batch.decode) + len(batch.padding)) is not None)

    def _move_kv(self, batch: Batch) -> None:
        """The KV data the manager moved for this iteration, before its forward pass."""
        run: list[tuple[int, int]] = []
        for i, (kind, src, dst) in enumerate(batch.moves):   # in order, each run of one kind at once
            run.append((src, dst))
            if i + 1 < len(batch.moves) and batch.moves[i + 1][0] == kind:
                continue
            if kind == "out":
                swap_blocks(self.cache.k, self.cache.v, self.host.k, self.host.v, run)
            elif kind == "in":
                swap_blocks(self.host.k, self.host.v, self.cache.k, self.cache.v, run)
            else:
                a = self._tensor([p[0] for p in run], torch.int64)
                b = self._tensor([p[1] for p in run], torch.int64)
                for k, v in zip(self.cache.k, self.cache.v):
                    self.ops.copy_blocks(k, v, a, b)
            run = []
        if batch.region_copies:
            src = self._tensor([i for a, _, n in batch.region_copies for i in range(a, a + n)], torch.int64)
            dst = self._tensor([i for _, b, n in batch.region_copies for i in range(b, b + n)], torch.int64)
            for k, v in zip(self.cache.k, self.cache.v):
                k[dst] = k[src]      # the sources are read whole before any destination is written
                v[dst] = v[src]

    def forward(self, ids: list[int], pos, last: list[int] | None, ctx: IterationContext) -> torch.Tensor:
        """Logits [1, rows, vocab] at the `last` positions of one packed forward pass (None: at every position, one
        per row of a decode step), as the model returns them: not indexed here, which spares the usual decode step a
        torch call. Prompt ids were checked (`check_prompt`) before they came here: with `wrap` they are folded into
        the vocabulary here, on the device."""
        with self._inference:         # one inference-mode guard, entered each step (not built anew each call)
            input_ids = self._from(np.asarray(ids, dtype=np.int64)[None])
            if self.wrapped:
                input_ids.remainder_(self.vocab_size)
            position_ids = self._from(np.asarray(pos, dtype=np.int64)[None])
            set_context(ctx)
            try:
                out = self.model(input_ids=input_ids, position_ids=position_ids, use_cache=False,
                                 logits_to_keep=0 if last is None else self._tensor(last, torch.int64))
            finally:
                set_context(None)
            return out.logits

    def _sample(self, logits: torch.Tensor) -> list[int]:
        if self.temperature <= 0:
            return greedy(logits)
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        return torch.multinomial(probs, 1, generator=self.generator)[:, 0].tolist()

    def _sample_row(self, logits: torch.Tensor, seq: Sequence, row: int) -> int:
        """One parallel sample, drawn with noise seeded by (seed, request, row, step): the same token for the
        same logits whatever else shares the batch, so every engine draws the same samples."""
        g = torch.Generator(device="cpu").manual_seed(hash((self.seed, seq.id, row, seq.generated)) & (2**63 - 1))
        u = torch.rand(logits.shape[-1], generator=g).clamp_(min=1e-20)
        gumbel = -torch.log(-torch.log(u)).to(logits.device)
        return int(torch.argmax(logits.float() / self.temperature + gumbel))

    def _beam_step(self, logits: torch.Tensor, seq: Sequence) -> None:
        """The best `width` continuations of the beams by summed log-probability; sets `seq.parents`."""
        width = seq.width
        logprobs = torch.log_softmax(logits.float(), dim=-1)           # [rows, vocab]
        if logprobs.shape[0] == 1:                                     # after the prompt: one row
            scores = logprobs[0]
        else:
            scores = (logprobs + torch.tensor(seq.beam_logprobs, device=logprobs.device)[:, None]).flatten()
        best, index = torch.topk(scores, width)
        vocab = logprobs.shape[-1]
        parents = (index // vocab).tolist() if logprobs.shape[0] > 1 else [0] * width
        tokens = (index % vocab).tolist()
        seq.set_rows([seq.row_token_ids[p] + [t] for p, t in zip(parents, tokens)])
        seq.beam_logprobs = best.tolist()
        seq.parents = parents

    def _emit(self, batch: Batch, logits: torch.Tensor) -> None:
        """Turn the logits of the advancing rows ([1, rows, vocab], as the forward pass returns them) into each
        row's next token (and, for a request whose own sampling asks, the tokens' log-probabilities)."""
        if (not batch.prefill and not self.request_sampling and self.temperature <= 0
                and len(batch.decode) == logits.shape[1]):
            # The usual decode step: greedy single rows, one logits row each, no request with its own sampling.
            for seq, token in zip(batch.decode, greedy(logits)):
                seq.output_token_ids.append(token)
            return
        logits = logits[0]
        groups, start = [], 0
        for seq in batch.prefill:
            groups.append((seq, start, 1))
            start += 1
        for seq in batch.decode:
            groups.append((seq, start, seq.width))
            start += seq.width
        own = self.request_sampling
        asks: list[tuple[Sequence, int, int, int]] = []   # (group, row, its logits' row, top count) wanting logprobs
        single = [g for g in groups if g[0].width == 1]
        if single:
            firsts = [first for _, first, _ in single]
            # A step of single rows only (the usual decode step) samples every row of the logits as they are.
            tokens = self._sample(logits if len(firsts) == logits.shape[0] else logits[firsts])
            for (seq, first, _), token in zip(single, tokens):
                s = own.get(seq.id) if own else None
                if s is not None:
                    if not s.greedy:
                        token = sample(logits[first], s, seq.id, 0, seq.generated, self.seed)
                    if s.logprobs is not None:
                        asks.append((seq, 0, first, s.logprobs))
                seq.output_token_ids.append(token)
        for seq, first, rows in groups:
            if seq.width == 1:
                continue
            if seq.beam:
                self._beam_step(logits[first:first + rows], seq)
                continue
            s = own.get(seq.id) if own else None
            for row in range(seq.width):
                at = first if rows == 1 else first + row   # after the prompt every sample draws from its one row
                if s is None:
                    token = self._sample_row(logits[at], seq, row)
                else:
                    token = sample(logits[at], s, seq.id, row, seq.generated, self.seed)
                    if s.logprobs is not None:
                        asks.append((seq, row, at, s.logprobs))
                seq.row_token_ids[row].append(token)
        if asks:
            self._logprobs(logits, asks)

    def _logprobs(self, logits: torch.Tensor, asks: list[tuple[Sequence, int, int, int]]) -> None:
        """The chosen tokens' log-probabilities for the rows that ask, kept by request id for the server."""
        found = token_logprobs(logits, [at for _, _, at, _ in asks],
                               [seq.row_token_ids[row][-1] for seq, row, _, _ in asks], [k for *_, k in asks])
        for (seq, row, _, _), entry in zip(asks, found):
            if row == 0:
                self.token_logprobs[seq.id] = [entry]
            else:
                self.token_logprobs[seq.id].append(entry)

    def execute(self, batch: Batch) -> float:
        started = time.perf_counter()
        if batch.moves or batch.region_copies:
            self._move_kv(batch)
        if self._static(batch):
            ids, pos, lens, slots, tables, starts = self._decode_arrays(batch)
            forward_start = time.perf_counter()
            tokens = self.graphs.run(ids, pos, slots, lens, tables, starts)   # .tolist() waits for the device
            for seq, token in zip(batch.decode, tokens):
                seq.output_token_ids.append(token)
            ended = time.perf_counter()
            self.forward_s += ended - forward_start
            return ended - started
        ids, pos, last, ctx = self._prefill_context(batch) if batch.is_prefill else self._decode_context(batch)
        forward_start = time.perf_counter()
        logits = self.forward(ids, pos, last, ctx)
        self._emit(batch, logits)                     # .tolist() waits for the device
        self._sync()
        ended = time.perf_counter()
        self.forward_s += ended - forward_start
        if self.keep_logits:
            self.last_logits = logits[0].float().cpu()
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
        if self.graphs is not None:
            self.graphs.capture_all()
        self.forward_s = 0.0
