"""The profiler's memory on the CPU with the tiny model: one KV cache at a time, sized for the largest
shape (refused before running when it cannot fit), and every row on disk as soon as it is measured."""
import csv
import weakref

import pytest

import pagedbench.engines.real.build
from pagedbench.studies import profile
from pagedbench.studies.profile import Shape, by_layout, grid, kv_slots_range, slots_needed

# Layouts interleaved on purpose: the profiler must still build each once.
SHAPES = [Shape("prefill", "contiguous", 0, (8, 8)), Shape("decode", "paged", 16, (20, 40)),
          Shape("decode", "contiguous", 0, (30,)), Shape("decode", "paged", 1, (9, 17)),
          Shape("decode", "paged", 16, (33,))]
ARGS = ["--model", "tiny", "--warmup", "0", "--repeats", "1"]


def test_the_grid_samples_small_decode_batches_at_several_contexts():
    shapes = grid(2048)
    assert shapes == by_layout(shapes)
    decode = [s for s in shapes if s.kind == "decode" and s.layout == "contiguous" and len(set(s.lengths)) == 1]
    for batch in (1, 2, 4, 8):
        assert len({s.lengths[0] for s in decode if len(s.lengths) == batch}) >= 3, batch
    assert max(len(s.lengths) for s in decode) >= 32
    assert len(grid(2048, quick=True)) <= 30


def test_the_kv_cache_holds_the_largest_shape_and_a_margin():
    need, planned = kv_slots_range(SHAPES)
    assert need == 32 + 48 and planned == need + 32   # paged 16, contexts 20 and 40: 2 + 3 blocks; 2 more
    assert slots_needed(Shape("decode", "contiguous", 0, (30,))) == 31
    assert slots_needed(Shape("prefill", "paged", 16, (16,))) == 32   # the produced token starts a block


def test_the_profiler_builds_one_layout_at_a_time(tmp_path, monkeypatch):
    caches, live_at_build = [], []
    allocate = pagedbench.engines.real.build.allocate_kv

    def counting_allocate(*args, **kwargs):
        live_at_build.append(sum(ref() is not None for ref in caches))
        cache = allocate(*args, **kwargs)
        caches.append(weakref.ref(cache.k[0]))
        return cache
    monkeypatch.setattr(pagedbench.engines.real.build, "allocate_kv", counting_allocate)
    monkeypatch.setattr(profile, "grid", lambda max_len, quick=False: list(SHAPES))
    out = tmp_path / "p.parquet"
    assert profile.main(ARGS + ["--out", str(out)]) == 0
    assert live_at_build == [0, 0, 0]      # contiguous, paged 16, paged 1: each built once, the previous freed


def test_rows_reach_the_csv_as_they_are_measured(tmp_path, monkeypatch):
    time = profile.Profiler.time
    calls = []

    def timer_that_dies(self, shape, warmup, repeats):
        calls.append(shape)
        if len(calls) > 3:
            raise RuntimeError("timed out")
        return time(self, shape, warmup, repeats)
    monkeypatch.setattr(profile.Profiler, "time", timer_that_dies)
    monkeypatch.setattr(profile, "grid", lambda max_len, quick=False: list(SHAPES))
    out = tmp_path / "p.parquet"
    with pytest.raises(RuntimeError):
        profile.main(ARGS + ["--out", str(out)])
    rows = list(csv.DictReader(profile.rows_path(out).open()))
    assert len(rows) == 3 and not out.exists()
    assert [r["kind"] for r in rows] == ["prefill", "decode", "decode"] and all(float(r["time_s"]) > 0 for r in rows)


def test_a_grid_that_cannot_fit_is_refused_before_it_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(profile, "free_bytes", lambda device: 1 << 20)
    monkeypatch.setattr(profile, "grid", lambda max_len, quick=False: list(SHAPES))
    out = tmp_path / "p.parquet"
    assert profile.main(ARGS + ["--out", str(out)]) == 2
    assert "the largest shape needs 80 KV slots" in capsys.readouterr().err
    assert not profile.rows_path(out).exists()
