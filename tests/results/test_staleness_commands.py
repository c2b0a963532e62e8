"""The staleness check's two commands, run in process: `python -m pagedbench.results.record.result_code` (this
checkout's code in a scope, or a commit's in every scope) and `python -m pagedbench.results.report.current` (is
a report this code's: each stale step and each step without records named, exit 1)."""
import pytest

from pagedbench.results.record import result_code
from pagedbench.results.record.result_code import (RESULT_PATHS, SCOPES, NotInHistory, digests_at, files, narrower,
                                                   scope_codes)
from pagedbench.results.report import current
from pagedbench.results.report.steps import load_steps

STEPS = load_steps()


@pytest.mark.parametrize("scope", sorted(SCOPES))
def test_the_code_of_a_scope_is_printed_with_the_files_it_covers(scope, capsys):
    assert result_code.main(["--scope", scope]) == 0
    out, err = capsys.readouterr()
    assert out == result_code.result_code(scope) + "\n"
    assert err.startswith(f"over {len(files(scope=scope))} files under {', '.join(RESULT_PATHS)}")
    less = f", less {len(SCOPES[scope])} paths the scope leaves out" if SCOPES[scope] else ""
    assert err == f"over {len(files(scope=scope))} files under {', '.join(RESULT_PATHS)}{less}\n"


def test_the_default_scope_is_the_whole_code(capsys):
    assert result_code.main([]) == 0
    assert capsys.readouterr().out == result_code.result_code("all") + "\n"


def test_a_commits_code_is_printed_in_every_scope_and_an_unknown_commit_exits_2(capsys):
    try:
        codes = digests_at("HEAD")
    except NotInHistory as err:
        pytest.skip(str(err))
    assert result_code.main(["--at", "HEAD"]) == 0
    assert capsys.readouterr().out == "".join(f"{code}  {scope}\n" for scope, code in codes.items())
    assert result_code.main(["--at", "0" * 40]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ")


def records(codes: dict[str, str], skip: str = "", other: str = "") -> str:
    """A report whose records table lists every step carried to `codes` in its scope; `skip` left out, `other`
    carried to another code."""
    rows = "".join(f"| {s.name} | {s.section} | 1 | {'a' * 12} | {'b' * 12} | carried | {s.code} | to "
                   f"{'e' * 12 if s.name == other else codes[s.code]} by 3 equal reruns |\n"
                   for s in STEPS if s.name != skip)
    return (f"# R\n\n{current.RECORDS_HEADING}\n\nwhich code\n\n| step | section | runs | result code | commits | "
            f"this code | scope | carried |\n|---|---|---|---|---|---|---|---|\n{rows}")


def test_a_report_whose_every_step_is_current_exits_0(tmp_path, capsys):
    codes = scope_codes()
    report = tmp_path / "R.md"
    report.write_text(records(codes))
    assert current.main([str(report)]) == 0
    assert capsys.readouterr().out == f"{report}: current at result code {codes['all']} ({narrower(codes)})\n"


def test_a_stale_step_and_a_step_without_records_are_each_named_and_exit_1(tmp_path, capsys):
    codes = scope_codes()
    first, second = STEPS[0], STEPS[1]
    report = tmp_path / "R.md"
    report.write_text(records(codes, other=first.name))
    assert current.main([str(report)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"stale: ") and first.name in lines[0] and len(lines) == 2
    assert lines[1] == f"{report}: 1 steps stale, 0 without records at result code {codes['all']} ({narrower(codes)})"
    report.write_text(records(codes, skip=second.name))
    assert current.main([str(report)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("no records: ") and second.name in lines[0] and len(lines) == 2
    assert lines[1].startswith(f"{report}: 0 steps stale, 1 without records at result code")


def test_a_report_that_cannot_be_read_exits_2(tmp_path, capsys):
    assert current.main([str(tmp_path / "none.md")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'none.md'}: ")
    (tmp_path / "bare.md").write_text("# R\n\n## Method\n")
    assert current.main([str(tmp_path / "bare.md")]) == 2
