"""The kernel benchmark's tuning knobs: one row per combination, each knob recorded, flex timed once per case."""
from __future__ import annotations

import csv
import itertools

import pytest

from pagedbench.studies import kernel_bench


def test_one_row_per_combination_of_knobs_and_flex_timed_once_per_case(tmp_path, monkeypatch):
    flex_cases = []
    timed = kernel_bench.flex_columns

    def counted(batch, context_len, block_size, *args):
        flex_cases.append((batch, context_len, block_size))
        return timed(batch, context_len, block_size, *args)
    monkeypatch.setattr(kernel_bench, "flex_columns", counted)
    assert kernel_bench.main(["--out", str(tmp_path), "--batches", "2", "--context-lens", "20", "--block-sizes", "8",
                              "16", "--num-stages", "0", "2", "--num-warps", "0", "8", "--table-loads", "position",
                              "block", "--flex"]) == 0
    rows = list(csv.DictReader(open(tmp_path / "kernel_bench.csv")))
    got = sorted((r["num_stages"], r["num_warps"], r["block_size"], r["table_loads"]) for r in rows)
    want = sorted(itertools.product(["default", "2"], ["default", "8"], ["8", "16"], ["position", "block"]))
    assert got == want
    assert sorted(flex_cases) == [(2, 20, 8), (2, 20, 16)]   # flex has none of the kernel's knobs
    for r in rows:
        assert float(r["paged_over_flex"]) == pytest.approx(float(r["paged_mean_us"]) / float(r["flex_mean_us"]))


def test_an_unknown_table_load_mode_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        kernel_bench.main(["--out", str(tmp_path), "--table-loads", "tile"])
    assert exit_.value.code == 2 and "invalid choice: 'tile'" in capsys.readouterr().err


def test_a_warp_count_the_kernel_cannot_take_is_refused_before_any_timing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(kernel_bench, "copy_ceiling_gbps", lambda: pytest.fail("timed before checking"))
    with pytest.raises(SystemExit) as exit_:
        kernel_bench.main(["--out", str(tmp_path), "--num-warps", "0", "3"])
    assert exit_.value.code == 2 and "power of two from 1 to 32" in capsys.readouterr().err
