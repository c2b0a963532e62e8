"""The native CPU kernels (kernels/cpu_attention.c through kernels/cpu_native.py) against the torch references."""
import subprocess
import sys

import pytest
import torch

from pagedbench.kernels import cpu_native, reference
from pagedbench.kernels.ops import load_ops, resolve
from tests.kernels.kv_cases import TOLERANCE, arena_cache, case_id, covering, decode_inputs, paged_cache

HEADS = [(4, 4), (4, 2), (4, 1), (6, 3)]   # MHA, GQA, MQA, and a group of 2 over 3 KV heads
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
PAGED_CASES = covering(3, block_size=[1, 8, 16, 32], heads=HEADS, head_dim=[8, 64, 80], longest=[1, 17, 1025],
                       batch=[1, 3], dtype=DTYPES)
CONTIGUOUS_CASES = covering(3, heads=HEADS, head_dim=[8, 64, 80], longest=[1, 17, 1025], batch=[1, 3], dtype=DTYPES)

pytestmark = pytest.mark.skipif(not cpu_native.available()[0], reason=f"no native CPU kernels here: "
                                                                       f"{cpu_native.available()[1]}")


def _inputs(case):
    num_heads, num_kv_heads = case["heads"]
    return decode_inputs(case["batch"], case["longest"], num_heads, num_kv_heads, case["head_dim"], case["dtype"],
                         torch.device("cpu"))


@pytest.mark.parametrize("case", PAGED_CASES, ids=case_id)
def test_paged_decode_matches_reference(case):
    x = _inputs(case)
    k_cache, v_cache, block_tables = paged_cache(x, case["block_size"])
    args = (x.query, k_cache, v_cache, block_tables, x.context_lens, x.scale)
    out = cpu_native.paged_decode_attention(*args)
    assert out.dtype == x.query.dtype and out.shape == x.query.shape
    torch.testing.assert_close(out, reference.paged_decode_attention(*args), **TOLERANCE[case["dtype"]])


@pytest.mark.parametrize("case", CONTIGUOUS_CASES, ids=case_id)
def test_contiguous_decode_matches_reference(case):
    x = _inputs(case)
    k_cache, v_cache, seq_starts = arena_cache(x)
    args = (x.query, k_cache, v_cache, seq_starts, x.context_lens, x.scale)
    out = cpu_native.contiguous_decode_attention(*args)
    assert out.dtype == x.query.dtype and out.shape == x.query.shape
    torch.testing.assert_close(out, reference.contiguous_decode_attention(*args), **TOLERANCE[case["dtype"]])


def test_fp32_agrees_to_rounding():
    """fp32 on one thread: the same sums in another order, so far tighter than the shared tolerance."""
    x = decode_inputs(4, 700, 8, 2, 64, torch.float32, torch.device("cpu"))
    paged = paged_cache(x, 16)
    got = cpu_native.paged_decode_attention(x.query, *paged, x.context_lens, x.scale)
    torch.testing.assert_close(got, reference.paged_decode_attention(x.query, *paged, x.context_lens, x.scale),
                               atol=2e-6, rtol=1e-5)


def test_rows_of_a_larger_table_and_a_strided_table():
    """The executor's tables can be a slice of a wider buffer: rows beyond num_seqs and columns beyond a
    sequence's blocks are never read."""
    x = decode_inputs(3, 40, 4, 4, 64, torch.float32, torch.device("cpu"))
    k_cache, v_cache, tables = paged_cache(x, 16)
    wide = torch.full((5, tables.shape[1] + 4), -1, dtype=torch.int32)
    wide[:3, :tables.shape[1]] = tables
    want = reference.paged_decode_attention(x.query, k_cache, v_cache, tables, x.context_lens, x.scale)
    torch.testing.assert_close(cpu_native.paged_decode_attention(x.query, k_cache, v_cache, wide, x.context_lens,
                                                                 x.scale), want)
    torch.testing.assert_close(cpu_native.paged_decode_attention(x.query, k_cache, v_cache, wide[:, :tables.shape[1]],
                                                                 x.context_lens, x.scale), want)
    torch.testing.assert_close(cpu_native.paged_decode_attention(x.query, k_cache, v_cache, tables.long(),
                                                                 x.context_lens.long(), x.scale), want)


def test_no_sequences_gives_an_empty_output():
    k_cache = torch.randn(4, 16, 2, 8)
    out = cpu_native.paged_decode_attention(torch.empty(0, 2, 8), k_cache, k_cache, torch.empty(0, 1, dtype=torch.int32),
                                            torch.empty(0, dtype=torch.int32), 0.5)
    assert out.shape == (0, 2, 8)


def test_a_block_outside_the_cache_is_an_error_not_a_read():
    x = decode_inputs(2, 20, 4, 4, 8, torch.float32, torch.device("cpu"))
    k_cache, v_cache, tables = paged_cache(x, 16)
    tables[0, 1] = k_cache.shape[0]      # the longest sequence (20 tokens) reads its second block
    with pytest.raises(IndexError, match="block"):
        cpu_native.paged_decode_attention(x.query, k_cache, v_cache, tables, x.context_lens, x.scale)
    tables[0, 1] = -1
    with pytest.raises(IndexError, match="block"):
        cpu_native.paged_decode_attention(x.query, k_cache, v_cache, tables, x.context_lens, x.scale)


def test_a_region_past_the_arena_is_an_error():
    x = decode_inputs(1, 20, 4, 4, 8, torch.float32, torch.device("cpu"))
    k_cache, v_cache, starts = arena_cache(x)
    with pytest.raises(IndexError, match="outside"):
        cpu_native.contiguous_decode_attention(x.query, k_cache, v_cache, starts + k_cache.shape[0] - 10,
                                               x.context_lens, x.scale)


def test_a_context_longer_than_its_table_is_refused():
    x = decode_inputs(1, 20, 4, 4, 8, torch.float32, torch.device("cpu"))
    k_cache, v_cache, tables = paged_cache(x, 16)
    with pytest.raises(ValueError, match="longer than its block table"):
        cpu_native.paged_decode_attention(x.query, k_cache, v_cache, tables, x.context_lens + 20, x.scale)


def test_mismatched_dtypes_and_shapes_are_refused():
    x = decode_inputs(1, 20, 4, 4, 8, torch.float32, torch.device("cpu"))
    k_cache, v_cache, tables = paged_cache(x, 16)
    with pytest.raises(TypeError, match="query"):
        cpu_native.paged_decode_attention(x.query.half(), k_cache, v_cache, tables, x.context_lens, x.scale)
    with pytest.raises(ValueError, match="does not fit"):
        cpu_native.paged_decode_attention(x.query[:, :, :4].contiguous(), k_cache, v_cache, tables, x.context_lens,
                                          x.scale)
    with pytest.raises(ValueError, match="contiguous"):
        cpu_native.paged_decode_attention(x.query.transpose(1, 2).contiguous().transpose(1, 2), k_cache, v_cache,
                                          tables, x.context_lens, x.scale)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("paged", [True, False])
def test_write_kv_matches_reference(dtype, paged):
    shape = (6, 4, 2, 8) if paged else (24, 2, 8)
    caches = [torch.randn(shape).to(dtype) for _ in range(2)]
    caches += [c.clone() for c in caches]
    key, value = torch.randn(5, 2, 8).to(dtype), torch.randn(5, 2, 8).to(dtype)
    slots = torch.tensor([3, -1, 23, 0, 7])
    reference.write_kv(key, value, caches[0], caches[1], slots)
    cpu_native.write_kv(key, value, caches[2], caches[3], slots)
    assert torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])


def test_write_kv_refuses_a_slot_past_the_cache_and_converts_another_dtype():
    k_cache, v_cache = torch.zeros(4, 2, 8), torch.zeros(4, 2, 8)
    with pytest.raises(IndexError, match="outside"):
        cpu_native.write_kv(torch.ones(1, 2, 8), torch.ones(1, 2, 8), k_cache, v_cache, torch.tensor([4]))
    cpu_native.write_kv(torch.ones(1, 2, 8).half(), torch.ones(1, 2, 8).half(), k_cache, v_cache, torch.tensor([2]))
    assert k_cache[2].eq(1).all() and v_cache[2].eq(1).all() and k_cache[:2].eq(0).all()


def test_the_cpu_set_and_what_auto_picks():
    ops = load_ops("cpu")
    assert ops.name == "cpu"
    assert ops.paged_decode_attention is cpu_native.paged_decode_attention
    assert ops.prefill_attention is cpu_native.prefill_attention
    assert ops.prefix_prefill_attention is reference.prefix_prefill_attention
    assert resolve("auto", "cpu") == "cpu" and resolve("auto", "cuda") == "triton" and resolve("torch", "cpu") == "torch"


@pytest.mark.parametrize("cc, why", [("no-such-cc", "was not found"), ("false", "compiling cpu_attention.c failed")])
def test_without_a_working_compiler_auto_falls_back_to_the_references(tmp_path, cc, why):
    """No C compiler (or one that fails) and no library built: "auto" runs the references, "cpu" says why."""
    code = ("import pagedbench.kernels.ops as o, pagedbench.kernels.cpu_native as n\n"
            "assert o.load_ops('auto', 'cpu').name == 'torch'\n"
            "try:\n    o.load_ops('cpu')\nexcept n.NativeUnavailable as e:\n    print(e)\n")
    env = {"PATH": "/usr/bin:/bin", "CC": cc, "PAGEDBENCH_KERNEL_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert why in done.stdout


# (100, 33) and (193, 0, 96): sequences of one, two and three query tiles, the last one short or whole.
PREFILL_CASES = covering(2, heads=HEADS, head_dim=[8, 64, 80], lens=[(1,), (17, 0, 5), (100, 33), (193, 0, 96)],
                         dtype=DTYPES)


@pytest.mark.parametrize("case", PREFILL_CASES, ids=case_id)
def test_prefill_matches_reference(case):
    """Packed sequences, an empty one among them, causal over their own tokens."""
    num_heads, num_kv_heads = case["heads"]
    total, dim = sum(case["lens"]), case["head_dim"]
    q = torch.randn(total, num_heads, dim).to(case["dtype"])
    k, v = (torch.randn(total, num_kv_heads, dim).to(case["dtype"]) for _ in range(2))
    cu = torch.tensor([0, *torch.tensor(case["lens"]).cumsum(0).tolist()], dtype=torch.int32)
    out = cpu_native.prefill_attention(q, k, v, cu, dim ** -0.5, max(case["lens"]))
    assert out.dtype == q.dtype and out.shape == q.shape
    torch.testing.assert_close(out, reference.prefill_attention(q, k, v, cu, dim ** -0.5), **TOLERANCE[case["dtype"]])


@pytest.mark.parametrize("length, changed", [(6, 4), (2 * cpu_native.PREFILL_TILE + 9, cpu_native.PREFILL_TILE + 3)])
def test_prefill_is_causal(length, changed):
    """A later token's K and V never reach an earlier token's output, within a query tile and across tiles."""
    q, k, v = (torch.randn(length, 2, 8) for _ in range(3))
    cu = torch.tensor([0, length], dtype=torch.int32)
    before = cpu_native.prefill_attention(q, k, v, cu, 0.3)
    k[changed:], v[changed:] = torch.randn(length - changed, 2, 8), torch.randn(length - changed, 2, 8)
    after = cpu_native.prefill_attention(q, k, v, cu, 0.3)
    assert torch.equal(before[:changed], after[:changed]) and not torch.equal(before[changed:], after[changed:])
