"""Paged and contiguous decode attention kernels against their torch references."""
import pytest
import torch

from pagedbench.kernels import reference
from tests.kernels.kv_cases import TOLERANCE, arena_cache, case_id, covering, decode_inputs, paged_cache

HEADS = [(4, 4), (4, 2), (4, 1)]   # (num_heads, num_kv_heads): MHA, GQA, MQA
DTYPES = [torch.float32, torch.float16]
# Every combination of values of any three axes appears in some case (a full product would be 2,160).
PAGED_CASES = covering(3, block_size=[1, 8, 16, 32, 128], heads=HEADS, head_dim=[64, 80, 128], longest=[1, 17, 1025],
                       batch=[1, 3], dtype=DTYPES, num_splits=[1, 3])
CONTIGUOUS_CASES = covering(3, heads=HEADS, head_dim=[64, 80, 128], longest=[1, 17, 1025], batch=[1, 3], dtype=DTYPES,
                            num_splits=[1, 3])


@pytest.fixture(scope="module")
def triton_decode():
    from pagedbench.kernels import triton_decode_attention
    return triton_decode_attention


def _inputs(case, device):
    num_heads, num_kv_heads = case["heads"]
    return decode_inputs(case["batch"], case["longest"], num_heads, num_kv_heads, case["head_dim"], case["dtype"], device)


@pytest.mark.parametrize("case", PAGED_CASES, ids=case_id)
def test_paged_decode_matches_reference(triton_decode, device, case):
    x = _inputs(case, device)
    k_cache, v_cache, block_tables = paged_cache(x, case["block_size"])
    args = (x.query, k_cache, v_cache, block_tables, x.context_lens, x.scale)
    out = triton_decode.paged_decode_attention(*args, num_splits=case["num_splits"])
    assert out.dtype == x.query.dtype and out.shape == x.query.shape
    torch.testing.assert_close(out, reference.paged_decode_attention(*args), **TOLERANCE[case["dtype"]])


@pytest.mark.parametrize("case", CONTIGUOUS_CASES, ids=case_id)
def test_contiguous_decode_matches_reference(triton_decode, device, case):
    x = _inputs(case, device)
    k_cache, v_cache, seq_starts = arena_cache(x)
    args = (x.query, k_cache, v_cache, seq_starts, x.context_lens, x.scale)
    out = triton_decode.contiguous_decode_attention(*args, num_splits=case["num_splits"])
    assert out.dtype == x.query.dtype and out.shape == x.query.shape
    torch.testing.assert_close(out, reference.contiguous_decode_attention(*args), **TOLERANCE[case["dtype"]])


@pytest.mark.parametrize("num_splits", [1, 2, 5, 0])
@pytest.mark.parametrize("block_size", [16, 256])
def test_split_k_partitions_agree(triton_decode, device, block_size, num_splits):
    """Real partitions (not only empty ones): 700 positions cut into 2 or 5 tile-aligned parts, or chosen."""
    x = decode_inputs(1, 700, 4, 1, 64, torch.float32, device)
    paged = paged_cache(x, block_size)
    arena = arena_cache(x)
    want = reference.paged_decode_attention(x.query, *paged, x.context_lens, x.scale)
    got_paged = triton_decode.paged_decode_attention(x.query, *paged, x.context_lens, x.scale, num_splits)
    got_contiguous = triton_decode.contiguous_decode_attention(x.query, *arena, x.context_lens, x.scale, num_splits)
    torch.testing.assert_close(got_paged, want, **TOLERANCE[torch.float32])
    torch.testing.assert_close(got_contiguous, want, **TOLERANCE[torch.float32])


def test_choose_num_splits(triton_decode):
    choose = triton_decode.choose_num_splits
    assert choose(num_seqs=64, num_kv_heads=8, max_context_len=8192, num_sms=132) == 1   # GPU already full
    assert choose(num_seqs=1, num_kv_heads=1, max_context_len=256, num_sms=132) == 1     # too short to split
    assert choose(num_seqs=1, num_kv_heads=8, max_context_len=2048, num_sms=132) == 2048 // 256
    assert choose(num_seqs=1, num_kv_heads=1, max_context_len=100_000, num_sms=132) == triton_decode.MAX_SPLITS


def test_query_may_be_a_strided_slice(triton_decode, device):
    """The query may be a view into a fused QKV tensor: rows strided, head_dim dense."""
    x = decode_inputs(3, 17, 4, 2, 64, torch.float32, device)
    qkv = torch.randn(3, 4 + 2 + 2, 64, device=device)
    qkv[:, :4] = x.query
    paged = paged_cache(x, 8)
    got = triton_decode.paged_decode_attention(qkv[:, :4], *paged, x.context_lens, x.scale)
    torch.testing.assert_close(got, reference.paged_decode_attention(x.query, *paged, x.context_lens, x.scale))


# Block 8 and 16: a tile of 64 positions spans 8 or 4 blocks (one vector load of their entries); 64 and 128: the
# tile lies inside one block (one scalar load); 1: one entry per position either way. Lengths end mid-block and
# mid-tile; num_splits 3 starts parts past position 0.
@pytest.mark.parametrize("block_size", [1, 8, 16, 64, 128])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("num_splits", [1, 3])
def test_knob_table_loads_per_block_read_the_same_slots(triton_decode, device, block_size, dtype, num_splits):
    x = decode_inputs(3, 333, 4, 2, 80, dtype, device)
    paged = paged_cache(x, block_size)
    want = reference.paged_decode_attention(x.query, *paged, x.context_lens, x.scale)
    got = triton_decode.paged_decode_attention(x.query, *paged, x.context_lens, x.scale, num_splits,
                                               table_loads="block")
    torch.testing.assert_close(got, want, **TOLERANCE[dtype])
    # and to the bit what the default (one table load per position) gives
    torch.testing.assert_close(got, triton_decode.paged_decode_attention(x.query, *paged, x.context_lens, x.scale,
                                                                         num_splits), atol=0, rtol=0)


@pytest.mark.parametrize("num_warps", [1, 2, 8])
def test_knob_num_warps_changes_speed_not_results(triton_decode, device, num_warps):
    """num_warps is a tuning knob of both kernels and of the references' signature."""
    x = decode_inputs(2, 150, 4, 1, 64, torch.float32, device)
    paged, arena = paged_cache(x, 16), arena_cache(x)
    want = reference.paged_decode_attention(x.query, *paged, x.context_lens, x.scale, num_warps=num_warps,
                                            table_loads="block")
    got_paged = triton_decode.paged_decode_attention(x.query, *paged, x.context_lens, x.scale, num_warps=num_warps,
                                                     table_loads="block")
    got_contiguous = triton_decode.contiguous_decode_attention(x.query, *arena, x.context_lens, x.scale,
                                                               num_warps=num_warps)
    torch.testing.assert_close(got_paged, want, **TOLERANCE[torch.float32])
    torch.testing.assert_close(got_contiguous, want, **TOLERANCE[torch.float32])


def test_launcher_rejects_bad_inputs(triton_decode, device):
    x = decode_inputs(2, 17, 4, 2, 64, torch.float32, device)
    k_cache, v_cache, block_tables = paged_cache(x, 8)
    call = triton_decode.paged_decode_attention
    with pytest.raises(TypeError, match="block_tables"):
        call(x.query, k_cache, v_cache, block_tables.long(), x.context_lens, x.scale)
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        call(x.query[:, :3], k_cache, v_cache, block_tables, x.context_lens, x.scale)
    with pytest.raises(ValueError, match="power of two"):
        call(x.query, k_cache[:, :6].contiguous(), v_cache[:, :6].contiguous(), block_tables, x.context_lens, x.scale)
    with pytest.raises(ValueError, match="must match"):
        call(x.query, k_cache, v_cache.half(), block_tables, x.context_lens, x.scale)
    with pytest.raises(ValueError, match="4 dims"):
        call(x.query, k_cache.flatten(0, 1), v_cache.flatten(0, 1), block_tables, x.context_lens, x.scale)
    with pytest.raises(ValueError, match="num_warps"):
        call(x.query, k_cache, v_cache, block_tables, x.context_lens, x.scale, num_warps=3)
    with pytest.raises(ValueError, match="table_loads"):
        call(x.query, k_cache, v_cache, block_tables, x.context_lens, x.scale, table_loads="tile")


def test_empty_batch_returns_an_empty_output(triton_decode, device):
    x = decode_inputs(1, 17, 4, 2, 64, torch.float32, device)
    k_cache, v_cache, block_tables = paged_cache(x, 8)
    out = triton_decode.paged_decode_attention(x.query[:0], k_cache, v_cache, block_tables[:0], x.context_lens[:0],
                                               x.scale)
    assert out.shape == (0, 4, 64)


@pytest.mark.parametrize("num_stages", [1, 2, 4])
def test_knob_pipelining_stages_change_speed_not_results(triton_decode, device, num_stages):
    """num_stages (Triton's load pipelining) is a tuning knob of both kernels and of the references' signature."""
    x = decode_inputs(2, 300, 4, 2, 64, torch.float32, device)
    paged, arena = paged_cache(x, 16), arena_cache(x)
    want = reference.paged_decode_attention(x.query, *paged, x.context_lens, x.scale, num_stages=num_stages)
    got_paged = triton_decode.paged_decode_attention(x.query, *paged, x.context_lens, x.scale, num_stages=num_stages)
    got_contiguous = triton_decode.contiguous_decode_attention(x.query, *arena, x.context_lens, x.scale,
                                                               num_stages=num_stages)
    torch.testing.assert_close(got_paged, want, **TOLERANCE[torch.float32])
    torch.testing.assert_close(got_contiguous, want, **TOLERANCE[torch.float32])
