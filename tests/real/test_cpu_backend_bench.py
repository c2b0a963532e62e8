"""scripts/cpu_backend_bench.py argmax: torch's argmax against the executor's greedy, a row per row count (its
figures are timings: docs/performance.md, not asserted here)."""
from tests.scripts import load_script

bench = load_script("cpu_backend_bench")


def test_argmax_prints_a_row_per_row_count(capsys):
    bench.main(["argmax", "--repeat", "2"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [r[0] for r in rows] == ["1", "32", "128"]
    assert all(0 < float(r[1]) <= float(r[2]) and 0 < float(r[3]) <= float(r[4]) for r in rows)
