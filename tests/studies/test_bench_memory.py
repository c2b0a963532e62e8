"""kernel_bench and swap_bench on the CPU: rows on disk as they are measured, cases that do not fit skipped."""
import csv
import json

import pytest

from pagedbench.studies import kernel_bench, swap_bench
from pagedbench.studies.memory_plan import FREE_FRACTION, WORKSPACE_BYTES


def test_kernel_bench_rows_reach_the_csv_as_they_are_measured(tmp_path, monkeypatch):
    time_us, calls = kernel_bench.time_us, []

    def timer_that_dies(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:   # contiguous, sdpa, paged 8, paged 16, then paged 32 dies
            raise RuntimeError("timed out")
        return time_us(*args, **kwargs)
    monkeypatch.setattr(kernel_bench, "time_us", timer_that_dies)
    with pytest.raises(RuntimeError):
        kernel_bench.main(["--out", str(tmp_path), "--batches", "2", "--context-lens", "17",
                           "--block-sizes", "8", "16", "32"])
    rows = list(csv.DictReader((tmp_path / "kernel_bench.rows.csv").open()))
    assert [int(r["block_size"]) for r in rows] == [8, 16] and not (tmp_path / "kernel_bench.csv").exists()


def test_kernel_bench_skips_a_case_whose_inputs_do_not_fit(tmp_path, monkeypatch, capsys):
    budget = 100 << 20
    monkeypatch.setattr(kernel_bench, "free_bytes", lambda: int((budget + WORKSPACE_BYTES) / FREE_FRACTION) + 1)
    big = 200_000   # 2 x 200,000 tokens x 4 heads x 64 x 4 bytes x 2 (K, V): 819 MB for one copy
    assert kernel_bench.main(["--out", str(tmp_path), "--batches", "2", "--context-lens", "17", str(big),
                              "--block-sizes", "8"]) == 0
    meta = json.loads((tmp_path / "kernel_bench.json").read_text())
    assert [r["context_len"] for r in meta["rows"]] == [17]
    assert len(meta["skipped"]) == 1 and f"context {big}: skipped" in capsys.readouterr().out


def test_swap_bench_rows_reach_the_csv_as_they_are_measured(tmp_path, monkeypatch):
    median_s, calls = swap_bench._median_s, []

    def timer_that_dies(*args, **kwargs):
        calls.append(1)
        if len(calls) == 6:   # the recompute, two rows of (out, in), then the third row dies
            raise RuntimeError("timed out")
        return median_s(*args, **kwargs)
    monkeypatch.setattr(swap_bench, "_median_s", timer_that_dies)
    rows_csv = tmp_path / "swap_bench.rows.csv"
    with pytest.raises(RuntimeError):
        swap_bench.measure("tiny", tokens=64, repeats=1, block_sizes=(16, 256), rows_csv=rows_csv)
    rows = list(csv.DictReader(rows_csv.open()))
    assert [(int(r["tokens"]), int(r["block_size"])) for r in rows] == [(64, 16), (64, 256)]
