"""scripts/host_step_bench.py: the executor's host time per decode step, eager and static-shape, runs and prints a
row per engine and row count (its figures are timings: docs/performance.md, not asserted here)."""
import pytest

from tests.scripts import load_script

bench = load_script("host_step_bench")


@pytest.mark.parametrize("static", [False, True], ids=["eager", "static"])
def test_each_engine_and_row_count_gets_a_row(static, capsys):
    bench.main(["--rows", "1", "3", "--steps", "3", "--repeat", "2"] + (["--static"] if static else []))
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [(r[0], r[1]) for r in rows] == [("paged", "1"), ("paged", "3"), ("orca_oracle", "1"), ("orca_oracle", "3")]
    assert all(0 < float(r[2]) <= float(r[3]) <= float(r[4]) for r in rows)


def test_parts_split_each_eager_step():
    parts: dict = {}
    seconds = bench.decode_steps("paged", 2, 3, 2, parts=parts)
    assert sorted(parts) == sorted(bench.PARTS) and all(len(v) == 2 for v in parts.values())
    split = bench.part_split(seconds, parts)
    assert list(split) == list(bench.SPLIT) and all(v > 0 for v in split.values())
    assert split["arrays"] + split["tensors"] < 1e6 * max(seconds)


def test_parts_print_a_second_table(capsys):
    bench.main(["--rows", "2", "--steps", "3", "--repeat", "2", "--engines", "orca_oracle", "--parts"])
    out = capsys.readouterr().out.split("\n\n")
    assert len(out) == 2
    header, row = out[1].strip().splitlines()
    assert header.split()[:7] == ["engine", "rows", *bench.SPLIT]
    assert row.split()[:2] == ["orca_oracle", "2"] and all(float(v) > 0 for v in row.split()[2:])


@pytest.mark.parametrize("argv", [["--rows", "0"], ["--parts", "--static"]])
def test_bad_arguments_are_refused(argv):
    with pytest.raises(SystemExit):
        bench.main(argv)
