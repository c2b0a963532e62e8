"""Prefix prefill (new tokens over a cached context, then causally over themselves): the torch reference
against a dense computation that never reads the block tables, and the Triton kernel against the reference;
the same kernel without a context (plain varlen prefill, every engine's) against its reference."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

from pagedbench.kernels import reference
from pagedbench.kernels.ops import load_ops
from tests.kernels.kv_cases import TOLERANCE, DecodeInputs, case_id, covering, paged_cache

# (context_lens, new tokens) per sequence. The kernel tiles new tokens and context by 64 (32 past head_dim 128).
LAYOUTS = {
    "mixed": ((13, 0, 70), (5, 1, 67)),        # unaligned contexts, a context of 0 between, two query tiles
    "no_context": ((0, 0), (9, 3)),            # plain causal prefill
    "one_new": ((33,), (1,)),                  # a decode step written as a prefill
    "long_context": ((130, 16), (3, 16)),      # three context tiles; a context that fills whole blocks
    "empty_new": ((5, 20, 0), (0, 7, 2)),      # a sequence with no new tokens
}
HEADS = [(4, 4), (4, 2), (4, 1)]   # (num_heads, num_kv_heads): MHA, GQA, MQA
DTYPES = [torch.float32, torch.float16]
# Every combination of values of any two axes appears in some case (a full product would be 180).
CASES = covering(2, block_size=[1, 8, 16], heads=HEADS, head_dim=[64, 80], layout=list(LAYOUTS), dtype=DTYPES)


@dataclass
class PrefixInputs:
    query: torch.Tensor                 # [num_tokens, num_heads, head_dim] new tokens, packed
    key: torch.Tensor                   # [num_tokens, num_kv_heads, head_dim]
    value: torch.Tensor                 # [num_tokens, num_kv_heads, head_dim]
    context_keys: list[torch.Tensor]    # per sequence [context_len, num_kv_heads, head_dim], as written to the cache
    context_values: list[torch.Tensor]
    k_cache: torch.Tensor               # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor
    block_tables: torch.Tensor          # [num_seqs, max_blocks_per_seq] int32, shuffled blocks, padded with -1
    context_lens: torch.Tensor          # [num_seqs] int32
    cu_seqlens: torch.Tensor            # [num_seqs + 1] int32

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.query.shape[-1])

    def args(self) -> tuple:
        return (self.query, self.key, self.value, self.k_cache, self.v_cache, self.block_tables, self.context_lens,
                self.cu_seqlens, self.scale)


def prefix_inputs(context_lens, new_lens, num_heads, num_kv_heads, head_dim, block_size, dtype, device):
    """Random new tokens, and random contexts scattered over randomly ordered blocks of a garbage-filled cache."""
    like = dict(dtype=dtype, device=device)
    num_tokens = sum(new_lens)
    query = torch.randn(num_tokens, num_heads, head_dim).to(**like)
    key = torch.randn(num_tokens, num_kv_heads, head_dim).to(**like)
    value = torch.randn(num_tokens, num_kv_heads, head_dim).to(**like)
    context = DecodeInputs(torch.empty(0, **like),   # paged_cache reads only the query's dtype and device
                           [torch.randn(n, num_kv_heads, head_dim).to(**like) for n in context_lens],
                           [torch.randn(n, num_kv_heads, head_dim).to(**like) for n in context_lens],
                           torch.tensor(context_lens, dtype=torch.int32, device=device))
    k_cache, v_cache, block_tables = paged_cache(context, block_size)
    cu_seqlens = torch.tensor([0, *itertools.accumulate(new_lens)], dtype=torch.int32, device=device)
    return PrefixInputs(query, key, value, context.keys, context.values, k_cache, v_cache, block_tables,
                        context.context_lens, cu_seqlens)


def case_inputs(case, device) -> PrefixInputs:
    num_heads, num_kv_heads = case["heads"]
    context_lens, new_lens = LAYOUTS[case["layout"]]
    return prefix_inputs(context_lens, new_lens, num_heads, num_kv_heads, case["head_dim"], case["block_size"],
                         case["dtype"], device)


def dense_attention(x: PrefixInputs) -> torch.Tensor:   # [num_tokens, num_heads, head_dim]
    """Each sequence's full K/V (its context as written, not read back through the block table, then its new
    tokens) and float64 SDPA with the causal mask shifted by the context length."""
    group = x.query.shape[1] // x.key.shape[1]
    out = torch.zeros(x.query.shape, dtype=torch.float64, device=x.query.device)
    bounds = x.cu_seqlens.tolist()
    for start, end, k_context, v_context in zip(bounds[:-1], bounds[1:], x.context_keys, x.context_values):
        if start == end:
            continue
        k = torch.cat([k_context, x.key[start:end]]).double().transpose(0, 1).repeat_interleave(group, dim=0)
        v = torch.cat([v_context, x.value[start:end]]).double().transpose(0, 1).repeat_interleave(group, dim=0)
        q = x.query[start:end].double().transpose(0, 1)                    # [H, N, D]
        query_pos = len(k_context) + torch.arange(end - start, device=q.device)
        key_pos = torch.arange(k.shape[1], device=q.device)
        visible = key_pos[None, :] <= query_pos[:, None]                    # [N, C + N]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=x.scale)
        out[start:end] = o.transpose(0, 1)
    return out.to(x.query.dtype)


@pytest.fixture(scope="module")
def triton_prefix():
    from pagedbench.kernels import triton_prefix_prefill
    return triton_prefix_prefill


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_reference_matches_dense_attention(device, case):
    x = case_inputs(case, device)
    out = reference.prefix_prefill_attention(*x.args())
    assert out.dtype == x.query.dtype and out.shape == x.query.shape
    torch.testing.assert_close(out, dense_attention(x), **TOLERANCE[case["dtype"]])


@pytest.mark.parametrize("heads", HEADS)
def test_reference_without_context_is_prefill(device, heads):
    x = prefix_inputs((0, 0, 0), (7, 1, 12), *heads, 64, 8, torch.float32, device)
    torch.testing.assert_close(reference.prefix_prefill_attention(*x.args()),
                               reference.prefill_attention(x.query, x.key, x.value, x.cu_seqlens, x.scale))


@pytest.mark.parametrize("block_size", [1, 8, 16])
def test_reference_one_new_token_is_decode_over_context_and_itself(device, block_size):
    x = prefix_inputs((13, 0, 40), (1, 1, 1), 4, 2, 64, block_size, torch.float32, device)
    whole = DecodeInputs(x.query,
                         [torch.cat([k, x.key[s:s + 1]]) for s, k in enumerate(x.context_keys)],
                         [torch.cat([v, x.value[s:s + 1]]) for s, v in enumerate(x.context_values)],
                         x.context_lens + 1)
    want = reference.paged_decode_attention(x.query, *paged_cache(whole, block_size), whole.context_lens, x.scale)
    torch.testing.assert_close(reference.prefix_prefill_attention(*x.args()), want)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_triton_matches_reference(triton_prefix, device, case):
    x = case_inputs(case, device)
    out = triton_prefix.prefix_prefill_attention(*x.args())
    assert out.dtype == x.query.dtype and out.shape == x.query.shape
    torch.testing.assert_close(out, reference.prefix_prefill_attention(*x.args()), **TOLERANCE[case["dtype"]])


def test_triton_query_key_value_may_be_strided_slices(triton_prefix, device):
    """Q, K and V may be views into one fused QKV tensor: rows strided, head_dim dense."""
    x = prefix_inputs((13, 0), (5, 9), 4, 2, 64, 8, torch.float32, device)
    qkv = torch.cat([x.query, x.key, x.value], dim=1)                       # [num_tokens, 4 + 2 + 2, head_dim]
    got = triton_prefix.prefix_prefill_attention(qkv[:, :4], qkv[:, 4:6], qkv[:, 6:], *x.args()[3:])
    torch.testing.assert_close(got, reference.prefix_prefill_attention(*x.args()), **TOLERANCE[torch.float32])


def test_triton_launcher_rejects_bad_inputs(triton_prefix, device):
    x = prefix_inputs((13, 4), (5, 3), 4, 2, 64, 8, torch.float32, device)
    q, k, v, k_cache, v_cache, block_tables, context_lens, cu_seqlens, scale = x.args()
    call = triton_prefix.prefix_prefill_attention
    with pytest.raises(ValueError, match="cache's dtype"):
        call(q, k.half(), v.half(), k_cache, v_cache, block_tables, context_lens, cu_seqlens, scale)
    with pytest.raises(TypeError, match="block_tables"):
        call(q, k, v, k_cache, v_cache, block_tables.long(), context_lens, cu_seqlens, scale)
    with pytest.raises(TypeError, match="cu_seqlens"):
        call(q, k, v, k_cache, v_cache, block_tables, context_lens, cu_seqlens.long(), scale)
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        call(q[:, :3], k, v, k_cache, v_cache, block_tables, context_lens, cu_seqlens, scale)
    with pytest.raises(ValueError, match="power of two"):
        call(q, k, v, k_cache[:, :6].contiguous(), v_cache[:, :6].contiguous(), block_tables, context_lens,
             cu_seqlens, scale)
    with pytest.raises(ValueError, match="context_lens"):
        call(q, k, v, k_cache, v_cache, block_tables, context_lens[:1], cu_seqlens, scale)


def test_triton_empty_batch_returns_an_empty_output(triton_prefix, device):
    x = prefix_inputs((13,), (5,), 4, 2, 64, 8, torch.float32, device)
    q, k, v, k_cache, v_cache, block_tables, context_lens, _, scale = x.args()
    no_tokens = torch.zeros(2, dtype=torch.int32, device=device)
    assert triton_prefix.prefix_prefill_attention(q[:0], k[:0], v[:0], k_cache, v_cache, block_tables, context_lens,
                                                  no_tokens, scale).shape == (0, 4, 64)
    assert triton_prefix.prefix_prefill_attention(q[:0], k[:0], v[:0], k_cache, v_cache, block_tables[:0],
                                                  context_lens[:0], no_tokens[:1], scale).shape == (0, 4, 64)


# bf16 is checked compiled on a GPU (tests/kernels/test_gpu_native.py): the interpreter computes it wrong.
PLAIN = covering(2, heads=HEADS, head_dim=[64, 80], lens=[(5, 1, 67), (9, 3), (1,), (0, 7, 130)], dtype=DTYPES)


@pytest.mark.parametrize("case", PLAIN, ids=case_id)
def test_triton_plain_prefill_matches_reference(triton_prefix, device, case):
    """Unaligned lengths, several query tiles, an empty sequence; with and without the caller's max_seqlen."""
    x = prefix_inputs((0,) * len(case["lens"]), case["lens"], *case["heads"], case["head_dim"], 1, case["dtype"],
                      device)
    want = reference.prefill_attention(x.query, x.key, x.value, x.cu_seqlens, x.scale)
    for max_seqlen in (None, max(case["lens"])):
        got = triton_prefix.prefill_attention(x.query, x.key, x.value, x.cu_seqlens, x.scale, max_seqlen)
        assert got.dtype == x.query.dtype and got.shape == x.query.shape
        torch.testing.assert_close(got, want, **TOLERANCE[case["dtype"]])


def test_triton_plain_prefill_is_prefix_prefill_without_a_context(triton_prefix, device):
    x = prefix_inputs((0, 0), (12, 70), 4, 2, 64, 8, torch.float16, device)
    torch.testing.assert_close(triton_prefix.prefill_attention(x.query, x.key, x.value, x.cu_seqlens, x.scale),
                               triton_prefix.prefix_prefill_attention(*x.args()), atol=0, rtol=0)


def test_triton_plain_prefill_takes_strided_views_and_refuses_bad_inputs(triton_prefix, device):
    x = prefix_inputs((0, 0), (5, 9), 4, 2, 64, 8, torch.float32, device)
    qkv = torch.cat([x.query, x.key, x.value], dim=1)
    call = triton_prefix.prefill_attention
    torch.testing.assert_close(call(qkv[:, :4], qkv[:, 4:6], qkv[:, 6:], x.cu_seqlens, x.scale),
                               reference.prefill_attention(x.query, x.key, x.value, x.cu_seqlens, x.scale),
                               **TOLERANCE[torch.float32])
    with pytest.raises(ValueError, match="share a dtype"):
        call(x.query, x.key, x.value.half(), x.cu_seqlens, x.scale)
    with pytest.raises(TypeError, match="cu_seqlens"):
        call(x.query, x.key, x.value, x.cu_seqlens.long(), x.scale)
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        call(x.query[:, :3], x.key, x.value, x.cu_seqlens, x.scale)
    with pytest.raises(ValueError, match="key and value must have shape"):
        call(x.query, x.key[:-1], x.value[:-1], x.cu_seqlens, x.scale)
    none = torch.zeros(1, dtype=torch.int32, device=device)
    assert call(x.query[:0], x.key[:0], x.value[:0], none, x.scale).shape == (0, 4, 64)


def test_ops_register_prefix_prefill():
    assert load_ops("torch").prefix_prefill_attention is reference.prefix_prefill_attention
    assert load_ops("triton").prefix_prefill_attention.__module__ == "pagedbench.kernels.triton_prefix_prefill"
