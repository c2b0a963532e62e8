"""The staleness check's parts one by one, each case one that a one-line change to it would get wrong: which
files a walked tree hashes, the paths a digest covers, the scopes' names, how a records table is read (its
first one, up to the next section; a six-column row of an older report), a cell's list, a carried cell, and a
stale row's code, scope and section."""
import pytest

from pagedbench.paths import ROOT
from pagedbench.results.record.result_code import digest, digests, files, narrower
from pagedbench.results.report import current
from pagedbench.results.report.steps import Step
from tests.results.test_result_code import _copy

CODES = {"all": "a" * 12, "sim": "b" * 12, "nosearch": "c" * 12, "sim_nosearch": "d" * 12}
HEADER = "| step | section | runs | result code | commits | this code | scope |\n|---|---|---|---|---|---|---|\n"


def test_a_walked_tree_leaves_out_compiled_files_wherever_they_lie(tmp_path):
    root = _copy(tmp_path)
    before = digest(root)
    (root / "engines" / "stray.pyc").write_bytes(b"\x00compiled")
    (root / "engines" / "__pycache__").mkdir(exist_ok=True)
    (root / "engines" / "__pycache__" / "notes.txt").write_text("cache")
    assert digest(root) == before and "engines/stray.pyc" not in files(root)


def test_a_digest_covers_the_paths_it_is_given():
    engines_only = digest(ROOT, ("engines",))
    assert engines_only != digest(ROOT)
    assert digests(ROOT, ("engines",))["all"] == engines_only
    assert all(n.startswith("engines/") for n in files(ROOT, ("engines",)))


def test_the_narrower_scopes_are_named_in_order_without_the_whole_code():
    assert narrower(CODES) == f"{'b' * 12} in scope sim, {'c' * 12} in scope nosearch, {'d' * 12} in scope sim_nosearch"
    assert narrower({"all": "x"}) == ""


def test_a_stale_step_says_whether_it_has_records():
    assert str(current.Stale("chat", "Chatbot", None, "cmd")) == 'section "Chatbot" (step chat, no records): `cmd`'
    assert str(current.Stale("chat", "Chatbot", "abc", "cmd")) == \
        'section "Chatbot" (step chat, made by result code abc): `cmd`'


def report(table: str, after: str = "## After\n\nend\n") -> str:
    return f"# R\n\n{current.RECORDS_HEADING}\n\nwhich code\n\n{table}\n{after}"


def test_the_records_table_is_the_first_one_up_to_the_next_section():
    row = "| chat | Chatbot | 1 | 0123456789ab | 170b0a3f04d9 | yes | sim |\n"
    other = "| a | b | c | d | e | f | g |\n"
    text = report(HEADER + row, f"## After\n\n{other}\n## Last\n\n{other}")
    assert current.records_rows(text) == [["chat", "Chatbot", "1", "0123456789ab", "170b0a3f04d9", "yes", "sim"]]
    twice = text + f"\n{current.RECORDS_HEADING}\n\n{HEADER}{other}"
    assert [r[0] for r in current.records_rows(twice)] == ["chat"]


def test_a_six_column_row_of_an_older_report_is_read_at_the_whole_code():
    old = "| step | section | runs | result code | commits | this code |\n|---|---|---|---|---|---|\n"
    text = report(old + f"| chat | Chatbot | 1 | {'a' * 12} | 170b0a3f04d9 | yes |\n"
                        f"| prefix | Shared prefix | 1 | {'9' * 12} | 170b0a3f04d9 | yes |\n| short | row |\n")
    assert [r[0] for r in current.records_rows(text)] == ["chat", "prefix"]
    # made at the whole code "a...": current; prefix made at another code, read at the whole code in the tree
    trees = {"170b0a3f04d9": {"all": "9" * 12, "sim": CODES["sim"], "nosearch": "c" * 12, "sim_nosearch": "d" * 12}}
    assert [s.step for s in current.stale_sections(text, CODES, at=trees.__getitem__)] == []
    trees["170b0a3f04d9"]["all"] = "8" * 12
    assert [s.step for s in current.stale_sections(text, CODES, at=trees.__getitem__)] == ["prefix"]


def test_a_row_is_read_in_the_scope_it_names():
    """Records made at code S in scope sim, by a commit whose tree is S in the whole code but X in sim, read by a
    checkout whose sim code is X: stale (S names the sim scope's code, which that tree does not have)."""
    made, other = "5" * 12, "6" * 12
    text = report(HEADER + f"| chat | Chatbot | 1 | {made} | 170b0a3f04d9 | yes | sim |\n")
    tree = {"all": made, "sim": other, "nosearch": "7" * 12, "sim_nosearch": "8" * 12}
    [stale] = current.stale_sections(text, {**CODES, "sim": other}, at=lambda commit: tree)
    assert (stale.step, stale.section, stale.codes) == ("chat", "Chatbot", made)
    assert current.stale_sections(text, {**CODES, "sim": made}, at=lambda commit: tree) == []


@pytest.mark.parametrize("cell, listed", [("a, b", ["a", "b"]), ("a,,b", ["a", "b"]), ("-", []), ("unknown", []),
                                          (" , ", []), ("a, -, unknown", ["a"]), ("abc", ["abc"])])
def test_a_cell_lists_its_comma_separated_values(cell, listed):
    assert current.split(cell) == listed


@pytest.mark.parametrize("cell, code", [("to abc by 1 equal reruns", "abc"), ("to abc by 12 equal reruns", "abc"),
                                        ("to abc by 0 equal reruns", None), ("to abc by 3 equal", None),
                                        ("to abc by 3 equal reruns more", None), ("to abc by 3 equal runs", None),
                                        ("to abc at 3 equal reruns", None), ("to abc by 3 same reruns", None)])
def test_a_carried_cell_is_read_only_in_its_own_words(cell, code):
    assert current.carried_to(cell) == code
    assert current.carried_to(current.carried_cell("abc", 3)) == "abc"     # what the carry writes, read back


def test_the_steps_given_decide_a_rows_scope():
    """memory_waste is a sim_nosearch step in steps.yaml; given as a step of the whole code, a row carried to this
    code's sim_nosearch hash is no longer current."""
    text = report(HEADER.replace("scope |\n|---", "scope | carried |\n|---").replace("|---|\n", "|---|---|\n", 1)
                  + f"| memory_waste | Figure 2 | 5 | {'0' * 12} | 170b0a3f04d9 | carried | sim_nosearch | "
                    f"to {CODES['sim_nosearch']} by 3 equal reruns |\n")
    never = lambda commit: {s: "f" * 12 for s in CODES}   # noqa: E731
    assert current.stale_sections(text, CODES, at=never) == []
    whole = [Step("memory_waste", "Figure 2", ("python", "run.py"), code="all")]
    assert [s.step for s in current.stale_sections(text, CODES, whole, at=never)] == ["memory_waste"]


def test_a_row_of_a_step_the_build_no_longer_has_is_read_at_the_whole_code():
    text = report(HEADER + f"| gone | Old | 1 | {'0' * 12} | 170b0a3f04d9 | yes | sim |\n"
                           f"| kept | Old | 1 | {CODES['all']} | 170b0a3f04d9 | yes | sim |\n")
    never = lambda commit: {s: "f" * 12 for s in CODES}   # noqa: E731
    assert [s.step for s in current.stale_sections(text, CODES, [], at=never)] == ["gone"]


def test_a_step_the_build_no_longer_has_is_current_where_its_commits_tree_has_this_whole_code():
    made = "0" * 12
    text = report(HEADER + f"| gone | Old | 1 | {made} | 170b0a3f04d9 | yes | sim |\n")
    tree = {"all": CODES["all"], "sim": made, "nosearch": "7" * 12, "sim_nosearch": "8" * 12}
    assert current.stale_sections(text, CODES, [], at=lambda commit: tree) == []
    assert [s.step for s in current.stale_sections(text, CODES, [], at=lambda commit: {**tree, "all": "9" * 12})] \
        == ["gone"]
