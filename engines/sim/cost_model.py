"""How long one iteration takes on the simulated backend: a roofline per layer.

The same function times every engine, and it sees only the batch: how many
new tokens each prefill sequence brings and how long each decode sequence's
context is. No engine can make its iterations cheaper except by batching.

Per device of the tensor-parallel group (every FLOP and weight byte of a
sharded matrix divides by tp), each term is max(FLOPs / F, bytes / B), with
F = peak_flops * flops_efficiency and B = memory_bandwidth * bandwidth_efficiency.
With T = sum(prefill_lens) + len(decode_context_lens) tokens and one sampled
row per sequence:

- linear layers (QKV, out proj, MLP), all layers: FLOPs 2 * T * linear params;
  bytes = the weights once + every GEMM's input and output activations.
- element-wise (norms, residual adds, the MLP activation, LLaMA's rotary
  embedding, the embedding lookup, the final norm): bytes only, not overlapped.
- prefill attention over the prompt itself, causal: a sequence of L tokens has
  L * (L + 1) / 2 query-key pairs, each 4 * head_dim FLOPs per query head
  (QK^T and PV, 2 FLOPs per multiply-add): 2 * heads * head_dim * L * (L + 1).
  Bytes: Q, K, V read, O written, K and V written to the cache. A prefill
  after C cached tokens (a shared prefix) computes only its L new tokens,
  each also attending over the C cached ones: L * C more pairs, and the
  cached K and V read once.
- decode attention: one query token over `ctx` context tokens (its own
  included): FLOPs 4 * ctx * heads * head_dim; bytes: the K and V of every
  context token, 2 * ctx * kv_heads * head_dim * dtype_bytes, plus its Q, O and
  its new K and V. Prefill and decode attention are separate kernels, so
  separate rooflines.
- tp > 1: two all-reduces per layer (after attention and after the MLP) and
  one after the vocab-parallel embedding, each of T * hidden * dtype_bytes,
  costing a ring's 2 * (tp - 1) / tp of that over the interconnect; and the
  gather of each device's slice of the logits.
- LM head for the sampled rows: FLOPs 2 * rows * hidden * vocab; bytes: its
  weight (vocab * hidden) plus its inputs and logits.
- hw.iteration_overhead_s, once per iteration.
- the paged layout (`block_size` given): decode attention reads each block at
  hw.paged_block_cost_tokens context tokens' cost on top of its tokens, the
  paged kernel's measured penalty; the contiguous layout has none.

A fitted preset (hw.fitted, written by `python -m pagedbench.studies.fit`) replaces
the roofline with the linear terms measured on one model (`LinearCostModel`);
`pagedbench.engines.sim.build.build_cost_model` picks the one the preset asks for.

An empty batch raises ValueError: an engine with nothing to run should move
its clock to the next arrival, not run a free iteration.
"""
from __future__ import annotations

from collections.abc import Sequence

from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.engines.specs.model import ModelSpec


def blocks_read(decode_context_lens: Sequence[int], block_size: int) -> int:
    """Blocks the paged decode rows read: each row's context rounded up to whole blocks."""
    up = block_size - 1
    shift = block_size.bit_length() - 1            # block sizes are powers of two
    return sum((n + up) >> shift for n in decode_context_lens)


class CostModel:
    # The roofline's per-iteration overhead (hw.iteration_overhead_s) already stands for the host's
    # scheduling: no separate time between iterations (a fitted model may measure one).
    scheduler_s = 0.0
    __slots__ = ("model", "hw", "block_size", "_block_tokens", "_overhead_s",
                 "_linear_flop_s", "_linear_weight_s", "_linear_io_s", "_elementwise_s",
                 "_prefill_pair_s", "_prefill_io_s", "_ctx_flop_s", "_ctx_byte_s", "_decode_io_s",
                 "_all_reduce_s", "_lm_flop_s", "_lm_weight_s", "_lm_io_s", "_gather_s")

    def __init__(self, model: ModelSpec, hw: HardwareSpec, block_size: int | None = None):
        self.model, self.hw, self.block_size = model, hw, block_size
        self._block_tokens = float(hw.paged_block_cost_tokens) if block_size else 0.0
        # All constants below are seconds per unit on one device, summed over all layers.
        L, tp, dt = model.num_layers, model.tp, model.dtype_bytes
        h, ffn, vocab = model.hidden_size, model.ffn_size, model.vocab_size
        q_size = model.num_heads * model.head_dim                    # == h
        kv_size = model.num_kv_heads * model.head_dim
        per_flop = 1.0 / hw.effective_flops
        per_byte = 1.0 / hw.effective_bandwidth
        self._overhead_s = float(hw.iteration_overhead_s)

        # Linear layers. Column-parallel GEMMs (QKV, MLP up) read the full hidden
        # input and write a 1/tp slice; row-parallel ones (out proj, MLP down)
        # read a slice and write full-width partial sums.
        linear_params = model.linear_params_per_layer / tp
        gemm_io = 4 * h + (model.qkv_size + q_size + model.mlp_up_size + ffn) / tp
        self._linear_flop_s = L * 2 * linear_params * per_flop
        self._linear_weight_s = L * linear_params * dt * per_byte
        self._linear_io_s = L * gemm_io * dt * per_byte

        # Element-wise traffic per token: two norms (read + write h each), two
        # residual adds (read 2h, write h each), the MLP activation (ReLU reads
        # and writes ffn; SiLU-and-multiply reads 2 ffn, writes ffn), LLaMA's
        # rotary embedding (reads and writes Q and K); then once per token the
        # embedding lookup (read rows, write h) and the final norm.
        if model.arch == "opt":
            activation, rotary, embedding = 2 * ffn / tp, 0.0, 3 * h   # token + position rows
        else:
            activation, rotary, embedding = 3 * ffn / tp, 2 * (q_size + kv_size) / tp, 2 * h
        per_layer = 4 * h + 6 * h + activation + rotary
        self._elementwise_s = (L * per_layer + embedding + 2 * h) * dt * per_byte

        # Attention, per unit of sum(L * (L + 1)) for prefill, per context token for decode.
        self._prefill_pair_s = L * 2 * q_size / tp * per_flop
        self._prefill_io_s = L * (2 * q_size + 4 * kv_size) / tp * dt * per_byte
        self._ctx_flop_s = L * 4 * q_size / tp * per_flop
        self._ctx_byte_s = L * 2 * kv_size / tp * dt * per_byte
        self._decode_io_s = L * (2 * q_size + 2 * kv_size) / tp * dt * per_byte

        # Tensor parallelism: ring all-reduces of T * h activations, and the logits gather.
        if tp > 1:
            ring = 2 * (tp - 1) / tp
            self._all_reduce_s = (2 * L + 1) * ring * h * dt / hw.interconnect_bandwidth
            self._gather_s = (tp - 1) / tp * vocab * dt / hw.interconnect_bandwidth
        else:
            self._all_reduce_s = self._gather_s = 0.0

        # LM head (vocab-parallel), per sampled row.
        self._lm_flop_s = 2 * h * vocab / tp * per_flop
        self._lm_weight_s = vocab * h / tp * dt * per_byte
        self._lm_io_s = (h + vocab / tp) * dt * per_byte

    def iteration_time(self, prefill_lens: Sequence[int], decode_context_lens: Sequence[int],
                       prefill_cached: Sequence[int] = ()) -> float:
        """Seconds one iteration takes on the whole tensor-parallel group.

        prefill_lens: the new tokens of each prefill sequence (its prompt, attended
        causally over itself). decode_context_lens: for each decode sequence, the
        context its one query token attends over, the new token included. All
        lengths are positive ints. prefill_cached: per prefill sequence, tokens
        already cached before its new ones (empty: none).
        """
        if prefill_cached:
            return sum(self.breakdown(prefill_lens, decode_context_lens, prefill_cached).values())
        n_prefill = len(prefill_lens)
        n_decode = len(decode_context_lens)
        rows = n_prefill + n_decode
        if rows == 0:
            raise ValueError("iteration_time of an empty batch: an idle engine should advance "
                             "its clock to the next arrival instead")
        t = self._overhead_s
        tokens = n_decode
        if n_prefill:
            pairs = 0
            for n in prefill_lens:
                tokens += n
                pairs += n * (n + 1)
            compute, memory = pairs * self._prefill_pair_s, (tokens - n_decode) * self._prefill_io_s
            t += compute if compute > memory else memory
        if n_decode:
            ctx = sum(decode_context_lens)
            if self._block_tokens:
                ctx += self._block_tokens * blocks_read(decode_context_lens, self.block_size)
            compute = ctx * self._ctx_flop_s
            memory = ctx * self._ctx_byte_s + n_decode * self._decode_io_s
            t += compute if compute > memory else memory
        compute = tokens * self._linear_flop_s
        memory = self._linear_weight_s + tokens * self._linear_io_s
        t += compute if compute > memory else memory
        compute = rows * self._lm_flop_s
        memory = self._lm_weight_s + rows * self._lm_io_s
        t += compute if compute > memory else memory
        return t + tokens * (self._elementwise_s + self._all_reduce_s) + rows * self._gather_s

    def decode_time(self, rows: int, context: int, blocks: int) -> float:
        """iteration_time of a decode-only batch of `rows` rows whose contexts sum to `context` tokens and
        span `blocks` blocks (`blocks_read`; unused by the contiguous layout): the same terms, in the same
        order, as iteration_time, so a run of such iterations can be timed without building its batches
        (tests/engines/test_fast_forward.py holds the two paths' tables equal to the bit)."""
        if rows == 0:
            raise ValueError("decode_time of an empty batch")
        t = self._overhead_s
        ctx = context
        if self._block_tokens:
            ctx += self._block_tokens * blocks
        compute = ctx * self._ctx_flop_s
        memory = ctx * self._ctx_byte_s + rows * self._decode_io_s
        t += compute if compute > memory else memory
        compute = rows * self._linear_flop_s
        memory = self._linear_weight_s + rows * self._linear_io_s
        t += compute if compute > memory else memory
        compute = rows * self._lm_flop_s
        memory = self._lm_weight_s + rows * self._lm_io_s
        t += compute if compute > memory else memory
        return t + rows * (self._elementwise_s + self._all_reduce_s) + rows * self._gather_s

    def breakdown(self, prefill_lens: Sequence[int], decode_context_lens: Sequence[int],
                  prefill_cached: Sequence[int] = ()) -> dict[str, float]:
        """iteration_time split into its terms (seconds); the values sum to it. For reports and tests."""
        if not len(prefill_lens) + len(decode_context_lens):
            raise ValueError("breakdown of an empty batch")
        rows = len(prefill_lens) + len(decode_context_lens)
        tokens = sum(prefill_lens) + len(decode_context_lens)
        pairs = sum(n * (n + 1) for n in prefill_lens)
        cached = 0
        if prefill_cached:
            pairs += sum(2 * n * c for n, c in zip(prefill_lens, prefill_cached))
            cached = sum(prefill_cached)
        ctx = sum(decode_context_lens)
        if self._block_tokens:
            ctx += self._block_tokens * blocks_read(decode_context_lens, self.block_size)
        prefill = max(pairs * self._prefill_pair_s, sum(prefill_lens) * self._prefill_io_s
                      + cached * self._ctx_byte_s)
        decode = max(ctx * self._ctx_flop_s, ctx * self._ctx_byte_s + len(decode_context_lens) * self._decode_io_s)
        return {
            "linear": max(tokens * self._linear_flop_s, self._linear_weight_s + tokens * self._linear_io_s),
            "elementwise": tokens * self._elementwise_s,
            "attention_prefill": prefill,
            "attention_decode": decode,
            "lm_head": max(rows * self._lm_flop_s, self._lm_weight_s + rows * self._lm_io_s),
            "communication": tokens * self._all_reduce_s + rows * self._gather_s,
            "overhead": self._overhead_s,
        }

    @property
    def weight_read_s(self) -> float:
        """Time to stream every matrix weight once: the floor of any iteration but its overhead."""
        return self._linear_weight_s + self._lm_weight_s

    @property
    def linear_ridge_tokens(self) -> float:
        """Tokens per iteration above which the linear layers are compute-bound, not weight-bound."""
        slope = self._linear_flop_s - self._linear_io_s
        return self._linear_weight_s / slope if slope > 0 else float("inf")

    def describe(self) -> str:
        m, hw = self.model, self.hw
        return (f"sim cost model: {m.name} on {m.tp}x {hw.name}: {hw.effective_flops / 1e12:.1f} TFLOP/s and "
                f"{hw.effective_bandwidth / 1e9:.0f} GB/s effective per device; weights read "
                f"{self.weight_read_s * 1e3:.2f} ms/iteration; linear layers compute-bound above "
                f"~{self.linear_ridge_tokens:.0f} tokens; overhead {self._overhead_s * 1e3:.1f} ms/iteration")
