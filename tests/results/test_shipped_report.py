"""The shipped report describes this code: every step of its build has records, all made by HEAD's
result-affecting code in the step's scope (the sim's steps: what a sim run imports; the others: all of it). An
engine fix that moves a number lands with its re-run (`make report`), or this test names each section it leaves
stale and the command that rebuilds it."""
import pytest

from pagedbench.paths import REPORT
from pagedbench.results.record.result_code import scope_codes
from pagedbench.results.report import current


@pytest.mark.shipped
def test_the_shipped_report_was_made_by_this_code():
    text, codes = REPORT.read_text(), scope_codes()
    behind = current.stale_sections(text, codes) + current.missing_steps(text)
    assert not behind, (f"{REPORT.name} does not describe this code (result code {codes['all']}, "
                        f"{codes['sim']} in the sim's scope); rebuild it with `make report`, or each part with "
                        "its command:\n" + "\n".join(str(s) for s in behind))


def test_the_readmes_results_come_from_the_same_code():
    """The block quotes the headline steps (Figures 2, 12, 14-17): each code it names is the code of a row of the
    shipped report for one of those steps, and those rows are current (the first test)."""
    from pagedbench.paths import README
    from pagedbench.results.report.headline import HEADLINE_STEPS, block_code

    made = block_code(README.read_text())
    rows = [r for r in current.records_rows(REPORT.read_text()) if r[0] in HEADLINE_STEPS]
    assert made is not None and set(made.split(", ")) <= {c for r in rows for c in current.split(r[3])}, (
        "README.md's results block was not written from the records of the shipped report: `make report` rewrites it")


def test_each_row_of_the_shipped_report_names_commits_whose_trees_have_its_code():
    """The commits a row of "Records behind this report" names are the trees that made its records: each one's
    hash in the row's scope, read from git's history, is the row's code (what lets a narrower scope, defined
    later, judge them); a clone without that history skips this."""
    from pagedbench.results.record.result_code import NotInHistory, digests_at

    rows = current.records_rows(REPORT.read_text())
    assert rows
    for step, _section, _runs, made, commits, _this, scope, *_ in rows:
        for commit in current.split(commits):
            try:
                tree = digests_at(commit)
            except NotInHistory as err:
                pytest.skip(str(err))
            assert current.split(made) == [tree[scope]], f"step {step}: commit {commit} has code {tree[scope]}"
