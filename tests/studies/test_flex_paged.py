"""flex_attention's paged decode (studies/flex_paged.py), the kernel benchmark's second outside reference, against
the torch reference on the kernels' test cases (eager on a CPU)."""
import warnings

import pytest
import torch

from pagedbench.kernels import reference
from pagedbench.studies.flex_paged import flex_paged_decode_attention, paged_block_mask
from tests.kernels.kv_cases import TOLERANCE, case_id, covering, decode_inputs, paged_cache

CASES = covering(2, block_size=[1, 8, 16], heads=[(4, 4), (4, 2), (4, 1)], head_dim=[8, 64], longest=[1, 17, 300],
                 batch=[1, 3], dtype=[torch.float32, torch.float16])


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():   # flex_attention warns that it runs uncompiled (eager) here
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_flex_paged_decode_matches_reference(case):
    num_heads, num_kv_heads = case["heads"]
    x = decode_inputs(case["batch"], case["longest"], num_heads, num_kv_heads, case["head_dim"], case["dtype"],
                      torch.device("cpu"))
    k_cache, v_cache, tables = paged_cache(x, case["block_size"])
    args = (x.query, k_cache, v_cache, tables, x.context_lens, x.scale)
    out = flex_paged_decode_attention(*args)
    assert out.shape == x.query.shape and out.dtype == x.query.dtype
    torch.testing.assert_close(out, reference.paged_decode_attention(*args), **TOLERANCE[case["dtype"]])
    mask = paged_block_mask(tables, x.context_lens, k_cache.shape[0], k_cache.shape[1])   # a mask built beforehand
    torch.testing.assert_close(flex_paged_decode_attention(*args, block_mask=mask), out, atol=0, rtol=0)


def test_bad_tables_are_refused():
    x = decode_inputs(2, 9, 4, 4, 8, torch.float32, torch.device("cpu"))
    k_cache, v_cache, tables = paged_cache(x, 4)
    with pytest.raises(IndexError, match="outside"):
        paged_block_mask(torch.where(tables >= 0, tables + 100, tables), x.context_lens, k_cache.shape[0], 4)
    with pytest.raises(ValueError, match="longer than its block table"):
        paged_block_mask(tables[:, :1], x.context_lens, k_cache.shape[0], 4)
    with pytest.raises(ValueError, match="context lengths"):
        paged_block_mask(tables[:1], x.context_lens, k_cache.shape[0], 4)


def test_the_kernel_benchmark_times_flex_beside_the_paged_kernel(tmp_path, monkeypatch):
    import csv

    from pagedbench.studies import kernel_bench
    assert kernel_bench.main(["--out", str(tmp_path / "ok"), "--batches", "2", "--context-lens", "20",
                              "--block-sizes", "8", "--flex"]) == 0
    row, = csv.DictReader(open(tmp_path / "ok" / "kernel_bench.csv"))
    assert float(row["flex_mean_us"]) > 0 and row["flex_error"] == ""
    assert float(row["paged_over_flex"]) == pytest.approx(float(row["paged_mean_us"]) / float(row["flex_mean_us"]))

    def broken(*args, **kwargs):
        raise RuntimeError("no flex here")
    monkeypatch.setattr(kernel_bench, "flex_paged_decode_attention", broken)
    assert kernel_bench.main(["--out", str(tmp_path / "failed"), "--batches", "2", "--context-lens", "20",
                              "--block-sizes", "8", "--flex"]) == 0     # the sweep goes on, the error recorded
    row, = csv.DictReader(open(tmp_path / "failed" / "kernel_bench.csv"))
    assert row["flex_mean_us"] == "" and "no flex here" in row["flex_error"] and float(row["paged_mean_us"]) > 0
