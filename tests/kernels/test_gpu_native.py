"""The kernels compiled for a CUDA device (no interpreter), on a wider grid than the CPU suite runs:
every power-of-two block size to 256, head_dim 96, bf16, long contexts, the split heuristic, both block-table
load modes, model-sized batches, slots past 2^31 elements (int64 offsets), and prefix prefill over long shared
prefixes."""
import pytest
import torch

from pagedbench.kernels import reference
from tests.kernels.kv_cases import TOLERANCE, arena_cache, case_id, covering, decode_inputs, paged_cache
from tests.kernels.test_prefix_prefill import prefix_inputs

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

CASES = covering(2, block_size=[1, 2, 4, 8, 16, 32, 64, 128, 256], heads=[(8, 8), (32, 8), (8, 1), (12, 12)],
                 head_dim=[64, 80, 96, 128], longest=[1, 17, 1025, 4097], batch=[1, 7, 32],
                 dtype=[torch.float32, torch.float16, torch.bfloat16], num_splits=[1, 0, 4],
                 table_loads=["position", "block"])
# (context_lens, new tokens) per sequence
PREFIX_LAYOUTS = {
    "shared_prefix": ((1024,) * 4, (200, 1, 77, 513)),             # one long cached prompt, varied suffixes
    "mixed": ((0, 4097, 17, 300), (129, 64, 1000, 1)),             # no context, a long one, long new runs
    "batch": (tuple(range(0, 32 * 37, 37)), tuple(range(1, 32 * 5, 5))),   # 32 sequences, unaligned
}
PREFIX_CASES = covering(2, block_size=[1, 16, 32, 256], heads=[(8, 8), (32, 8), (8, 1)], head_dim=[64, 80, 96, 128],
                        layout=list(PREFIX_LAYOUTS), dtype=[torch.float32, torch.float16, torch.bfloat16])


@pytest.fixture(scope="module")
def triton_decode():
    from pagedbench.kernels import triton_decode_attention
    from pagedbench.kernels.triton_launch import is_interpreted
    assert not is_interpreted(triton_decode_attention._decode_kernel), "TRITON_INTERPRET is set on a GPU machine"
    return triton_decode_attention


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_native_decode_matches_reference(triton_decode, case):
    num_heads, num_kv_heads = case["heads"]
    x = decode_inputs(case["batch"], case["longest"], num_heads, num_kv_heads, case["head_dim"], case["dtype"], "cuda")
    tolerance = TOLERANCE[case["dtype"]]
    paged = paged_cache(x, case["block_size"])
    got = triton_decode.paged_decode_attention(x.query, *paged, x.context_lens, x.scale, case["num_splits"],
                                               table_loads=case["table_loads"])
    torch.testing.assert_close(got, reference.paged_decode_attention(x.query, *paged, x.context_lens, x.scale),
                               **tolerance)
    arena = arena_cache(x)
    got = triton_decode.contiguous_decode_attention(x.query, *arena, x.context_lens, x.scale, case["num_splits"])
    torch.testing.assert_close(got, reference.contiguous_decode_attention(x.query, *arena, x.context_lens, x.scale),
                               **tolerance)


def test_native_write_and_decode_past_2_pow_31_elements(triton_decode):
    """A 4.3 GB fp16 cache: the last slots sit past element 2^31, so 32-bit offsets would wrap."""
    from pagedbench.kernels.triton_write_kv import write_kv
    num_kv_heads, head_dim, block_size = 8, 128, 16
    num_blocks = 2**31 // (block_size * num_kv_heads * head_dim) + 4
    needed = 2 * num_blocks * block_size * num_kv_heads * head_dim * 2
    if torch.cuda.mem_get_info()[0] < needed + 2**30:
        pytest.skip(f"needs {needed / 2**30:.1f} GiB free on the device")
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.zeros(shape, dtype=torch.float16, device="cuda")
    v_cache = torch.zeros_like(k_cache)
    x = decode_inputs(1, 40, 32, num_kv_heads, head_dim, torch.float16, "cuda")
    blocks = [num_blocks - 1, num_blocks - 3, 0]
    slots = torch.cat([torch.arange(16) + b * block_size for b in blocks])[:40].cuda()
    write_kv(x.keys[0], x.values[0], k_cache, v_cache, slots)
    assert torch.equal(k_cache.view(-1, num_kv_heads, head_dim)[slots], x.keys[0])
    block_tables = torch.tensor([blocks], dtype=torch.int32, device="cuda")
    want = reference.contiguous_decode_attention(x.query, x.keys[0], x.values[0],
                                                 torch.zeros(1, dtype=torch.int64, device="cuda"),
                                                 x.context_lens, x.scale)
    for loads in ("position", "block"):
        got = triton_decode.paged_decode_attention(x.query, k_cache, v_cache, block_tables, x.context_lens, x.scale,
                                                   table_loads=loads)
        torch.testing.assert_close(got, want, **TOLERANCE[torch.float16])


@pytest.mark.parametrize("case", PREFIX_CASES, ids=case_id)
def test_native_prefix_prefill_matches_reference(case):
    from pagedbench.kernels import triton_prefix_prefill
    from pagedbench.kernels.triton_launch import is_interpreted
    assert not is_interpreted(triton_prefix_prefill._prefix_prefill_kernel), "TRITON_INTERPRET is set on a GPU machine"
    num_heads, num_kv_heads = case["heads"]
    context_lens, new_lens = PREFIX_LAYOUTS[case["layout"]]
    x = prefix_inputs(context_lens, new_lens, num_heads, num_kv_heads, case["head_dim"], case["block_size"],
                      case["dtype"], "cuda")
    got = triton_prefix_prefill.prefix_prefill_attention(*x.args())
    torch.testing.assert_close(got, reference.prefix_prefill_attention(*x.args()), **TOLERANCE[case["dtype"]])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("heads", [(8, 8), (32, 8)])
def test_native_plain_prefill_matches_reference(dtype, heads):
    from pagedbench.kernels import triton_prefix_prefill
    x = prefix_inputs((0,) * 5, (2048, 1, 129, 700, 63), *heads, 128, 16, dtype, "cuda")
    want = reference.prefill_attention(x.query, x.key, x.value, x.cu_seqlens, x.scale)
    got = triton_prefix_prefill.prefill_attention(x.query, x.key, x.value, x.cu_seqlens, x.scale, 2048)
    torch.testing.assert_close(got, want, **TOLERANCE[dtype])
