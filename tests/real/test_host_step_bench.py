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


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        bench.main(["--rows", "0"])
