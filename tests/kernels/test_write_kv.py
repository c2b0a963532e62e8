"""write_kv against the reference, and the round trip: write paged, gather through the block table."""
import pytest
import torch

from pagedbench.kernels import reference
from tests.kernels.kv_cases import TOLERANCE, decode_inputs, paged_slots


@pytest.fixture(scope="module")
def triton_write_kv():
    from pagedbench.kernels.triton_write_kv import write_kv
    return write_kv


def _caches(shape, dtype, device):
    k_cache = torch.full(shape, 7.0, dtype=dtype, device=device)   # a sentinel no random value equals
    return k_cache, k_cache.clone()


@pytest.mark.parametrize("cache_shape", [(6, 16, 2, 80), (30, 1, 4, 64), (40, 4, 128)], ids=["paged16", "paged1", "arena"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_write_kv_matches_reference_and_skips_negative_slots(triton_write_kv, device, cache_shape, dtype):
    num_kv_heads, head_dim = cache_shape[-2:]
    num_slots = torch.Size(cache_shape[:-2]).numel()
    slots = torch.randperm(num_slots)[:25]
    slots[[0, 3, 4, 24]] = -1
    key = torch.randn(25, num_kv_heads, head_dim, device=device)      # fp32 tokens cast into the cache dtype
    value = torch.randn(25, num_kv_heads, head_dim, device=device)
    got, want = _caches(cache_shape, dtype, device), _caches(cache_shape, dtype, device)
    triton_write_kv(key, value, *got, slots.to(device))
    reference.write_kv(key, value, *want, slots.to(device))
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    untouched = num_slots - 21
    for cache in got:   # the skipped tokens wrote nothing: exactly the 21 kept slots changed
        assert (cache.view(num_slots, -1) == 7.0).all(dim=1).sum() == untouched


def test_write_kv_accepts_a_strided_key(triton_write_kv, device):
    """key and value may be views into a fused QKV projection."""
    qkv = torch.randn(9, 4 + 2 + 2, 64, device=device)
    key, value = qkv[:, 4:6], qkv[:, 6:8]
    slots = torch.arange(9, device=device) * 3
    got, want = _caches((32, 1, 2, 64), torch.float32, device), _caches((32, 1, 2, 64), torch.float32, device)
    triton_write_kv(key, value, *got, slots)
    reference.write_kv(key, value, *want, slots)
    torch.testing.assert_close(got, want, atol=0, rtol=0)


@pytest.mark.parametrize("block_size,longest,batch", [(1, 17, 3), (16, 1025, 2), (32, 1, 3), (128, 17, 1), (8, 40, 3)])
def test_paged_write_then_gather_equals_contiguous_copy(triton_write_kv, device, block_size, longest, batch):
    """Tokens written into a paged cache and read back through the block table equal the same tokens
    written into a contiguous arena, and both equal what was written; decode agrees on both."""
    from pagedbench.kernels.triton_decode_attention import contiguous_decode_attention, paged_decode_attention
    x = decode_inputs(batch, longest, 4, 2, 64, torch.float16, device)
    lens = [len(k) for k in x.keys]
    blocks_per_seq = [-(-n // block_size) for n in lens]
    order = torch.randperm(sum(blocks_per_seq) + 2).tolist()
    tables = [[order.pop() for _ in range(n)] for n in blocks_per_seq]
    starts = [sum(lens[:i]) + 3 * i for i in range(batch)]
    # one batched write of every token, with padding tokens (slot -1) between sequences
    pad = torch.zeros(1, 2, 64, dtype=torch.float16, device=device)
    keys = torch.cat([t for k in x.keys for t in (k, pad)])
    values = torch.cat([t for v in x.values for t in (v, pad)])
    minus_one = torch.tensor([-1])
    paged_map = torch.cat([t for s in range(batch) for t in (paged_slots(tables[s], block_size, lens[s]), minus_one)])
    arena_map = torch.cat([t for s in range(batch) for t in (starts[s] + torch.arange(lens[s]), minus_one)])

    k_paged = torch.zeros(len(order) + sum(blocks_per_seq), block_size, 2, 64, dtype=torch.float16, device=device)
    v_paged = torch.zeros_like(k_paged)
    k_arena = torch.zeros(starts[-1] + lens[-1], 2, 64, dtype=torch.float16, device=device)
    v_arena = torch.zeros_like(k_arena)
    triton_write_kv(keys, values, k_paged, v_paged, paged_map.to(device))
    triton_write_kv(keys, values, k_arena, v_arena, arena_map.to(device))

    for s in range(batch):
        gathered = k_paged.view(-1, 2, 64)[paged_slots(tables[s], block_size, lens[s]).to(device)]
        contiguous = k_arena[starts[s]:starts[s] + lens[s]]
        assert torch.equal(gathered, contiguous) and torch.equal(contiguous, x.keys[s])
        gathered_v = v_paged.view(-1, 2, 64)[paged_slots(tables[s], block_size, lens[s]).to(device)]
        assert torch.equal(gathered_v, x.values[s])

    block_tables = torch.tensor([t + [0] * (max(blocks_per_seq) - len(t)) for t in tables], dtype=torch.int32)
    seq_starts = torch.tensor(starts, dtype=torch.int64, device=device)
    paged_out = paged_decode_attention(x.query, k_paged, v_paged, block_tables.to(device), x.context_lens, x.scale)
    arena_out = contiguous_decode_attention(x.query, k_arena, v_arena, seq_starts, x.context_lens, x.scale)
    want = reference.contiguous_decode_attention(x.query, k_arena, v_arena, seq_starts, x.context_lens, x.scale)
    torch.testing.assert_close(paged_out, want, **TOLERANCE[torch.float16])
    torch.testing.assert_close(arena_out, want, **TOLERANCE[torch.float16])


def test_write_kv_rejects_bad_inputs(triton_write_kv, device):
    k_cache, v_cache = _caches((4, 8, 2, 64), torch.float32, device)
    key = torch.randn(3, 2, 64, device=device)
    with pytest.raises(TypeError, match="slot_mapping"):
        triton_write_kv(key, key, k_cache, v_cache, torch.arange(3, dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="key must have shape"):
        triton_write_kv(key[:, :1], key[:, :1], k_cache, v_cache, torch.arange(3, device=device))
    with pytest.raises(ValueError, match="contiguous"):
        triton_write_kv(key, key, k_cache.transpose(1, 2), v_cache.transpose(1, 2), torch.arange(3, device=device))
