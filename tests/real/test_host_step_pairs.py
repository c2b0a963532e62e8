"""scripts/host_step_pairs.py: commits timed in worktrees of their own, interleaved and pinned, a row per engine and
row count with each column and the ratios (its figures are timings: docs/performance.md, not asserted here)."""
import os

import pytest

from tests.scripts import load_script

pairs = load_script("host_step_pairs")


def test_two_commits_and_a_static_column_get_a_row_each(capsys):
    pairs.main(["HEAD", "HEAD~0", "--static", "HEAD", "--engines", "orca_oracle", "--rows", "2", "--rounds", "1",
                "--steps", "3", "--repeat", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["engine", "rows"] and "HEAD / HEAD static" in lines[0] and "HEAD / HEAD~0" in lines[0]
    row = lines[1].split()
    assert row[:2] == ["orca_oracle", "2"] and len(lines) == 2
    assert all(float(row[i]) > 0 for i in (2, 4, 6))       # three columns: median [min-max]
    assert row[8].count(".") == 1 and row[10].count(".") == 1   # two ratios: median (min-max)


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        pairs.main(["HEAD", "--rounds", "0"])
    with pytest.raises(SystemExit):
        pairs.main(["HEAD", "HEAD"])
    with pytest.raises(SystemExit):
        pairs.main(["HEAD", "--static", "no-such-commit"])
    with pytest.raises(SystemExit):
        pairs.main(["HEAD", "--cpu", str(max(os.sched_getaffinity(0)) + 64)])
