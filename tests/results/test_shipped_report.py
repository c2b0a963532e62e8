"""The shipped report describes this code: every step of its build has records, all made by HEAD's
result-affecting code. An engine fix that moves a number lands with its re-run (`make report`), or this test
names each section it leaves stale and the command that rebuilds it."""
from paths import REPORT
from results.record.result_code import result_code
from results.report import current


def test_the_shipped_report_was_made_by_this_code():
    text = REPORT.read_text()
    behind = current.stale_sections(text, result_code()) + current.missing_steps(text)
    assert not behind, (f"{REPORT.name} does not describe this code (result code {result_code()}); rebuild it with "
                        "`make report`, or each part with its command:\n" + "\n".join(str(s) for s in behind))


def test_the_readmes_results_come_from_the_same_code():
    from paths import README
    from results.report.headline import block_code

    assert block_code(README.read_text()) == result_code(), (
        "README.md's results block was not written from this code's records: `make report` rewrites it")
