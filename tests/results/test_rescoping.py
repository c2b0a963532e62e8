"""A commit's result code read from git's history, and records judged in a scope defined after they were made.

A record names the result code of the scope it ran under and the commit it ran at. When a step's scope is
narrower than the one its records name (a scope added, or the step moved to a narrower one), the staleness check
reads that commit's tree from git's history: the records are current when that tree has the code they name
(they came from it, not from an uncommitted edit) and this checkout's code in the step's scope now."""
import subprocess

import pytest

from pagedbench.results.record.result_code import NotInHistory, digests, digests_at
from pagedbench.results.report import current

PATHS = ("engines",)


def git(repo, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def commit(repo, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path):
    git(tmp_path, "init", "-q")
    return tmp_path


def test_a_commits_hash_from_history_is_its_checkouts_hash(repo):
    first = commit(repo, {"engines/kv/paged.py": "a = 1\n", "engines/real/backend.py": "b = 2\n",
                          "engines/sched.py": "c = 3\n", "README.md": "not in the scope\n"}, "first")
    at_first = digests(repo, PATHS)
    assert digests_at(first, repo, PATHS) == digests_at(first[:12], repo, PATHS) == at_first
    second = commit(repo, {"engines/real/backend.py": "b = 20\n"}, "a real-backend fix")
    assert digests_at(second, repo, PATHS) == digests(repo, PATHS)
    assert digests_at(second, repo, PATHS)["all"] != at_first["all"]
    assert digests_at(second, repo, PATHS)["sim"] == at_first["sim"]      # engines/real is outside the sim's scope
    (repo / "engines" / "kv" / "paged.py").write_text("a = 10\n")          # uncommitted: the tree on disk only
    assert digests(repo, PATHS) != digests_at("HEAD", repo, PATHS) == digests_at(second, repo, PATHS)
    with pytest.raises(NotInHistory, match="not in the git history"):
        digests_at("0" * 40, repo, PATHS)


def test_records_are_judged_in_the_steps_scope_at_the_commit_that_made_them(repo):
    """Records made under the whole code (scope all) of a sim step stay current after a real-backend fix once
    the step's scope is the sim's; an engine fix, a tree other than the one that made them, or a commit the
    clone lacks leaves them stale."""
    first = commit(repo, {"engines/kv/paged.py": "a = 1\n", "engines/real/backend.py": "b = 2\n"}, "first")
    made = digests(repo, PATHS)["all"]
    commit(repo, {"engines/real/backend.py": "b = 20\n"}, "a real-backend fix")
    now = digests(repo, PATHS)
    at = lambda c: digests_at(c, repo, PATHS)       # noqa: E731
    assert now["all"] != made
    assert current.current_at([made], [first[:12]], "all", "sim", now, at)
    assert not current.current_at([made], [first[:12]], "all", "all", now, at)     # the step runs the real backend
    assert not current.current_at(["0" * 12], [first[:12]], "all", "sim", now, at)  # not what that tree made
    assert not current.current_at([made], ["0" * 12], "all", "sim", now, at)        # a commit the clone lacks
    assert not current.current_at([made], [], "all", "sim", now, at)               # no commit named
    assert not current.current_at([made, "1" * 12], [first[:12]], "all", "sim", now, at)   # two codes
    assert current.current_at([now["sim"]], [], "sim", "sim", now, at)             # this code: no history read
    commit(repo, {"engines/kv/paged.py": "a = 10\n"}, "an engine fix")
    assert not current.current_at([made], [first[:12]], "all", "sim", digests(repo, PATHS), at)


def test_a_row_naming_two_commits_is_stale_when_one_tree_lacks_its_code(repo):
    """Every commit a row names must have made its code: one whose tree holds other code (an engine edit between
    the two) leaves the row stale, whichever of the two it is."""
    first = commit(repo, {"engines/kv/paged.py": "a = 1\n", "engines/real/backend.py": "b = 2\n"}, "first")
    made = digests(repo, PATHS)["all"]
    other = commit(repo, {"engines/kv/paged.py": "a = 2\n"}, "an engine edit")
    commit(repo, {"engines/kv/paged.py": "a = 1\n"}, "the edit undone")
    now = digests(repo, PATHS)
    assert now["all"] == made
    at = lambda c: digests_at(c, repo, PATHS)       # noqa: E731
    assert current.current_at([made], [first[:12]], "all", "sim", {**now, "all": "f" * 12}, at)
    for commits in ([first[:12], other[:12]], [other[:12], first[:12]]):
        assert not current.current_at([made], commits, "all", "sim", {**now, "all": "f" * 12}, at)


def test_a_report_row_at_an_older_commit_is_read_through_its_tree(repo):
    first = commit(repo, {"engines/kv/paged.py": "a = 1\n", "engines/real/backend.py": "b = 2\n"}, "first")
    made = digests(repo, PATHS)["all"]
    commit(repo, {"engines/real/backend.py": "b = 20\n"}, "a real-backend fix")
    text = ("# R\n\n## Records behind this report\n\n| step | section | runs | result code | commits | this code | "
            f"scope |\n|---|---|---|---|---|---|---|\n| beam_persistence | Parallel sampling | - | {made} | "
            f"{first[:12]} | yes | all |\n| peers | Real peers | - | {made} | {first[:12]} | yes | all |\n")
    stale = current.stale_sections(text, digests(repo, PATHS), at=lambda c: digests_at(c, repo, PATHS))
    assert [s.step for s in stale] == ["peers"]      # the sim step's scope leaves the real backend out
