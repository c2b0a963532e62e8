"""copy_blocks against the reference."""
import pytest
import torch

from pagedbench.kernels import reference


@pytest.mark.parametrize("shape", [(10, 16, 4, 80), (10, 1, 2, 64), (6, 256, 2, 128)], ids=["b16", "b1", "b256"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_copy_blocks_matches_reference(device, shape, dtype):
    from pagedbench.kernels.triton_copy_blocks import copy_blocks
    k_cache = torch.randn(shape).to(dtype=dtype, device=device)
    v_cache = torch.randn(shape).to(dtype=dtype, device=device)
    src = torch.tensor([0, 3, 2], device=device)
    dst = torch.tensor([5, 1, 4], device=device)
    got = (k_cache.clone(), v_cache.clone())
    copy_blocks(*got, src, dst)
    reference.copy_blocks(k_cache, v_cache, src, dst)
    assert torch.equal(got[0], k_cache) and torch.equal(got[1], v_cache)
    assert torch.equal(got[0][5], got[0][0]) and torch.equal(got[1][4], got[1][2])


def test_copy_blocks_with_no_pairs_is_a_no_op(device):
    from pagedbench.kernels.triton_copy_blocks import copy_blocks
    k_cache = torch.randn(4, 8, 2, 64, device=device)
    before = k_cache.clone()
    empty = torch.empty(0, dtype=torch.int64, device=device)
    copy_blocks(k_cache, k_cache.clone(), empty, empty)
    assert torch.equal(k_cache, before)
