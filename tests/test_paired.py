"""scripts/paired.py: a command on this checkout against the same command on another commit, A B A B."""
import subprocess
import sys

import pytest

from pagedbench.paths import ROOT
from tests.scripts import load_script

paired = load_script("paired")
Measure = paired.Measure


def test_the_report_gives_each_sides_spread_and_the_ratio_pair_by_pair():
    pairs = [(Measure(2.0, 1.5, 100.0), Measure(4.0, 3.0, 200.0)),
             (Measure(3.0, 2.0, 110.0), Measure(3.0, 2.0, 190.0)),
             (Measure(1.0, 1.0, 120.0), Measure(4.0, 2.0, 210.0))]
    lines = paired.report(pairs).splitlines()
    assert lines[0] == "3 pairs, min / median / max"
    assert "A wall s     1.00 / 2.00 / 3.00" in lines
    assert "B peak MiB   190 / 200 / 210" in lines
    # pair by pair (0.5, 1.0, 0.25), not the ratio of the medians (2.0 / 4.0)
    assert "A/B wall      0.250 / 0.500 / 1.000" in lines
    assert "A/B cpu       0.500 / 0.500 / 1.000" in lines


def worktrees() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True).stdout


def paired_on_head(tmp_path, rounds: int, *command: str) -> int:
    """scripts/paired.py against HEAD, no warm-up, its log in tmp_path; its exit code. No worktree is left."""
    before = worktrees()
    code = paired.main(["--base", "HEAD", "--rounds", str(rounds), "--warmup", "0", "--log", str(tmp_path / "log"),
                        "--", *command])
    assert worktrees() == before
    return code


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_it_runs_both_trees_and_removes_its_worktree(tmp_path, capsys):
    code = paired_on_head(tmp_path, 2, "python", "-c",
                          "import os, pathlib; pathlib.Path('{tmp}', 'cwd').write_text(os.getcwd())")
    assert code == 0
    out = capsys.readouterr().out
    assert out.startswith("2 pairs") and "A/B wall" in out
    log = (tmp_path / "log").read_text()
    assert log.count(f"$ (cd {ROOT} && ") == 2 and log.count("/base && ") == 2   # A here, B in the worktree


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs a git checkout")
@pytest.mark.parametrize("command, says", [(("python", "-c", "import sys; print('broken'); sys.exit(3)"), "exit 3"),
                                           (("no-such-program-here",), "cannot start 'no-such-program-here'")])
def test_a_failed_run_fails_the_call_and_leaves_no_worktree(tmp_path, capsys, command, says):
    assert paired_on_head(tmp_path, 1, *command) == 1
    assert says in capsys.readouterr().err


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_an_unknown_base_is_one_line_before_any_run(tmp_path, capsys):
    before = worktrees()
    with pytest.raises(SystemExit) as exit:
        paired.main(["--base", "no-such-commit", "--log", str(tmp_path / "log"), "--", "python", "-c", "pass"])
    assert exit.value.code == 2
    assert "--base no-such-commit: no such commit" in capsys.readouterr().err
    assert worktrees() == before and not (tmp_path / "log").exists()


def test_no_command_is_an_error():
    with pytest.raises(SystemExit):
        paired.main(["--base", "HEAD"])
