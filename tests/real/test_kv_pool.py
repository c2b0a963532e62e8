"""One KV byte pool per layer: every engine's layout is a view of the same bytes for the same budget."""
import pytest
import torch

from pagedbench.engines.real.kv_cache import allocate_kv, bytes_per_slot


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_every_layout_views_pools_of_the_same_bytes(dtype):
    layers, heads, dim, slots = 3, 2, 8, 100   # 100 slots: block 16 leaves a remainder of 4 slots unused
    caches = {bs: allocate_kv(layers, heads, dim, slots, bs, dtype, torch.device("cpu")) for bs in (None, 1, 16)}
    want = layers * slots * bytes_per_slot(1, heads, dim, dtype)
    assert {c.nbytes for c in caches.values()} == {want}
    for bs, cache in caches.items():
        assert len(cache.pools) == len(cache.k) == len(cache.v) == layers
        for pool, k, v in zip(cache.pools, cache.k, cache.v):
            assert pool.dtype == torch.uint8 and not pool.any()
            assert k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr() == pool.data_ptr()
            assert k.data_ptr() == pool.data_ptr()                                       # K first
            assert v.data_ptr() == pool.data_ptr() + slots * heads * dim * dtype.itemsize   # then V
            assert k.dtype == v.dtype == dtype and k.is_contiguous() and v.is_contiguous()
    assert caches[None].k[0].shape == (100, heads, dim) and caches[None].num_slots == 100
    assert caches[16].k[0].shape == (6, 16, heads, dim) and caches[16].num_slots == 96


def test_a_write_through_one_layout_is_read_through_the_other():
    contiguous = allocate_kv(1, 2, 4, 64, None, torch.float32, torch.device("cpu"))
    paged = allocate_kv(1, 2, 4, 64, 16, torch.float32, torch.device("cpu"))
    paged.pools[0].copy_(contiguous.pools[0])
    contiguous.v[0][37] = 5.0
    paged.pools[0].copy_(contiguous.pools[0])
    assert (paged.v[0][2, 5] == 5.0).all() and (paged.k[0] == 0).all()   # slot 37 = block 2, offset 5
