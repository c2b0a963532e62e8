"""The report's Kernels section renders what a kept GPU check holds, and says so where none is kept."""
from __future__ import annotations

import json
import shutil

import pandas as pd

from pagedbench.results.report.kernels import GPU_RUNS, SHOWN_BLOCK, kernels


def test_the_kept_gpu_check_is_shown_with_every_case_of_its_benchmark():
    text = kernels()
    bench = pd.read_csv(GPU_RUNS / "kernels" / "kernel_bench.csv", dtype={"num_stages": str})
    at = bench[(bench["num_stages"] == "default") & (bench["block_size"] == SHOWN_BLOCK)]
    peak = json.loads(next((GPU_RUNS / "kernels").glob("*.json")).read_text())["peak_gbps"]
    for r in at.itertuples():
        assert f"| {r.batch} | {r.context_len:,} | {r.contiguous_mean_us:.1f} | {r.paged_mean_us:.1f} |" in text
        sdpa_gbps = r.kv_bytes / (r.sdpa_mean_us * 1e-6) / 1e9   # shares of the datasheet, not of a copy
        assert f"| {100 * r.paged_gbps / peak:.0f}% | {100 * sdpa_gbps / peak:.0f}% |" in text
    assert "No GPU check is kept" not in text
    assert "| paged | 2 |" in text   # the replay's table


def test_the_section_follows_its_records(tmp_path):
    folder = tmp_path / "gpu"
    shutil.copytree(GPU_RUNS, folder)
    path = folder / "kernels" / "kernel_bench.csv"
    bench = pd.read_csv(path, dtype={"num_stages": str})
    first = (bench["num_stages"] == "default") & (bench["block_size"] == SHOWN_BLOCK)
    row = bench[first].index[0]
    bench.loc[row, "paged_mean_us"] = 12345.6
    bench.loc[row, "paged_over_contiguous"] = 12345.6 / bench.loc[row, "contiguous_mean_us"]
    bench.to_csv(path, index=False)
    text = kernels(folder)
    assert "| 12345.6 |" in text or "| 1.23e+04 |" in text
    assert f"{bench.loc[row, 'paged_over_contiguous']:.3f}" in text


def test_rows_of_later_knobs_away_from_their_defaults_stay_out_of_the_tables(tmp_path):
    """A sweep of warps and block-table loads adds rows beside the default ones; the kernel table and the
    pipelining ranges read the defaults only (records older than those knobs have neither column)."""
    folder = tmp_path / "gpu"
    shutil.copytree(GPU_RUNS, folder)
    path = folder / "kernels" / "kernel_bench.csv"
    bench = pd.read_csv(path, dtype={"num_stages": str})
    before = kernels(folder)
    tuned = bench.assign(num_warps="8", table_loads="block", paged_mean_us=98765.4, paged_over_contiguous=54.321)
    pd.concat([bench.assign(num_warps="default", table_loads="position"), tuned]).to_csv(path, index=False)
    after = kernels(folder)
    assert "98765.4" not in after and "9.88e+04" not in after and "54.321" not in after
    assert after == before
    # the same rows named as the defaults do come in
    pd.concat([bench.assign(num_warps="default", table_loads="position"),
               tuned.assign(num_warps="default", table_loads="position")]).to_csv(path, index=False)
    assert "54.321" in kernels(folder)


def test_without_a_kept_gpu_check_the_section_says_so(tmp_path):
    text = kernels(tmp_path / "none")
    assert "No GPU check is kept with this report." in text
    assert "## Kernels (Figure 18a)" in text
