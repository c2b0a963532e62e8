"""`make report-update`: a section of the report written over is kept when every step that feeds it is current
there, its steps not run; every other section is made again from records, with every step that feeds it.

What a section reads is measured as it is made (results/report/reads.py) and must be what
docs/report/steps.yaml says feeds it; the shipped report, current for this checkout, is kept whole by an update
with no records at all (a clean clone), and a change outside the sim's scope leaves only the sections that read
the timed steps to make again."""
import json
from pathlib import Path
import re

import pandas as pd
import pytest

from pagedbench.paths import DOCS, REPORT
from pagedbench.results.record.result_code import digests_at, scope_codes
from pagedbench.results.report import build, current, write
from pagedbench.results.report.headline import HEADLINE_STEPS
from pagedbench.results.report.read import read_parquet
from pagedbench.results.report.reads import Reads, declared, steps_of, undeclared
from pagedbench.results.report.steps import Step, load_steps

STEPS = load_steps()


def test_what_a_section_reads_is_measured_by_step(tmp_path):
    sweep = next(s for s in STEPS if s.name == "capacity").folder(tmp_path)
    study = next(s for s in STEPS if s.name == "peers").folder(tmp_path)
    (sweep / "run0").mkdir(parents=True)
    (sweep / "run0" / "summary.json").write_text(json.dumps({"x": 1}))
    study.mkdir(parents=True)
    pd.DataFrame({"a": [1]}).to_parquet(study / "t.parquet")
    (tmp_path / "elsewhere.txt").write_text("x")
    with Reads() as outer:
        list(sweep.iterdir())
        with Reads() as inner:
            read_parquet(study / "t.parquet")          # pyarrow opens it outside Python: announced
        (tmp_path / "elsewhere.txt").read_text()
    assert steps_of(outer.paths, tmp_path, STEPS) == {"capacity"}
    assert steps_of(inner.paths, tmp_path, STEPS) == {"peers"}
    with Reads() as after:
        json.loads((sweep / "run0" / "summary.json").read_text())
    assert steps_of(after.paths, tmp_path, STEPS) == {"capacity"}


def test_a_section_reading_a_step_steps_yaml_does_not_give_it_is_named():
    method = "## Method"
    assert declared(method, STEPS) == {"capacity", "capacity_1000_requests"}      # capacity's `also`
    assert undeclared({method: {"capacity", "capacity_1000_requests"}}, STEPS) == []
    [line] = undeclared({method: {"capacity", "chat"}}, STEPS)
    assert "\"Method\" reads step chat" in line and "`also`" in line
    step = Step("x", "Figure 12", ("python", "run.py"), also=("Method", "Chatbot"))
    assert step.feeds("## Chatbot (Figure 17)") and step.feeds("## Figure 12: capacity") and not step.feeds("## Fig")


def lacking_steps(earlier: write.Earlier) -> set[str]:
    """The steps that feed a section the earlier report does not have (one this code makes, rendered since)."""
    absent = {n for n in {x for s in STEPS for x in (s.section, *s.also)} if earlier.heading(n) is None}
    return {s.name for s in STEPS if {s.section, *s.also} & absent}


@pytest.mark.shipped
def test_an_update_on_a_clean_clone_keeps_every_section_of_the_current_shipped_report(tmp_path):
    """No records at all, and the shipped report current: every section it has is kept as it is, with its figures
    and its steps' rows; only a section it lacks (one this code makes that it was not rendered with) needs its
    steps run, and is the only part not in the result."""
    text = REPORT.read_text()
    earlier = write.Earlier(text, DOCS)
    assert earlier.current() == {s.name for s in STEPS}
    lacking = lacking_steps(earlier)
    assert build.needed(earlier, STEPS) == lacking
    figures = tmp_path / "figures"
    figures.mkdir()
    root = tmp_path / "records"
    report = write.compose(root / "experiments", root / "experiments" / "real_cpu", figures, root / "replay",
                           root / "swap_bench", root / "peers", earlier=earlier)
    assert {p.part for p in report.not_run} == {s.title for s in STEPS if s.name in lacking}
    shipped, made = write.sections_of(text), write.sections_of(report.text)
    assert {h: t for h, t in made.items() if h in shipped} == shipped
    assert sorted(p.name for p in figures.iterdir()) == sorted(
        {n for t in shipped.values() for n in re.findall(r"\]\(figures/([^)]+)\)", t)})
    assert current.stale_sections(report.text, scope_codes()) == []
    assert {s.step for s in current.missing_steps(report.text)} == lacking     # the shipped rows are carried
    rows = {r[0]: r for r in current.records_rows(report.text)}
    assert rows == {r[0]: r for r in current.records_rows(text) if r[0] not in lacking}


def update_after(*moved: str) -> tuple[write.Earlier, set[str], set[str]]:
    """The shipped report read by a checkout whose code moved in the scopes `moved` only (the others as now):
    it, the steps that are stale there (exactly those of the moved scopes) and the steps an update runs (those
    and more)."""
    codes = {**scope_codes(), **{scope: "f" * 12 for scope in moved}}
    earlier = write.Earlier(REPORT.read_text(), DOCS, codes, STEPS, digests_at)
    stale = {s.name for s in STEPS if s.code in moved}
    assert {s.name for s in STEPS} - earlier.current() == stale
    need = build.needed(earlier, STEPS)
    assert stale <= need
    return earlier, stale, need


@pytest.mark.shipped
def test_a_change_outside_the_sims_scope_makes_again_only_what_reads_the_timed_steps():
    """With the whole code changed and the sim's not (a fix to the real backend, say), the timed steps and the
    real-backend studies are stale; an update runs them and every step of a part they share (the sections
    that read the beam check and the swap benchmark, and the README's block through those), and keeps the
    sections that read only sim steps."""
    earlier, all_scope, need = update_after("all", "nosearch")
    for name in {x for s in STEPS for x in (s.section, *s.also)}:
        feeds = declared("## " + name, STEPS)
        assert not feeds & need or feeds <= need, name        # a section is made whole, or kept whole
        assert (earlier.keeps(name, STEPS) is None) == bool(feeds & all_scope), name
    assert not set(HEADLINE_STEPS) & need
    sim = {s.name for s in STEPS if s.code.startswith("sim")}
    assert need - all_scope <= {"swap_capacity", "swap"}     # the swap section reads the swap benchmark
    assert {"capacity", "sampling", "beam", "batch_size", "chat"} <= sim - need


@pytest.mark.shipped
def test_a_step_named_to_an_update_is_made_again_with_its_sections_other_steps():
    """The report records a step's code, not its command: a step whose command changed is named (--steps), and
    the update makes it again, current though it is, with every other step of its section."""
    earlier = write.Earlier(REPORT.read_text(), DOCS)
    assert earlier.current() == {s.name for s in STEPS}
    assert build.needed(earlier, STEPS, frozenset({"real_cpu"})) == {"real_cpu", "static_reference", "hf_generate"}
    assert build.needed(earlier, STEPS, frozenset({"unknown"})) == set()


def test_an_update_needs_a_report_to_keep_from(tmp_path, capsys):
    assert build.main(["--root", str(tmp_path), "--out", str(tmp_path / "R.md"), "--update", "--render-only"]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.shipped
def test_a_section_the_earlier_report_lacks_is_made_again():
    text = REPORT.read_text()
    without = text.replace("## Figure 13: mean batch size", "## Mean batch size (renamed)")
    earlier = write.Earlier(without, DOCS)
    assert earlier.keeps("Figure 13", STEPS) is None and write.Earlier(text, DOCS).keeps("Figure 13", STEPS)
    assert "batch_size" in build.needed(earlier, STEPS)


@pytest.mark.shipped
def test_a_change_to_the_capacity_search_keeps_what_runs_at_fixed_rates():
    """With the search changed (the whole and the sim's code move, the nosearch scopes' do not), an update makes
    again the sections that read a search and what shares a part with them, and keeps the timed steps, the beam
    check and the block-size sweep."""
    earlier, searching, need = update_after("all", "sim")
    lacking = lacking_steps(earlier)     # the steps of a section the shipped report does not have yet
    assert need - searching - lacking == {"beam_persistence", "swap", "swap_bench", "memory_waste", "batch_size"}
    assert {"block_size", "beam_check", "real_cpu", "replay", "peers"} - lacking <= {s.name for s in STEPS} - need


def test_records_made_before_a_step_moved_to_a_narrower_scope_stay_current(tmp_path):
    """beam_persistence's records stamped under the sim's scope, at a commit whose tree has that code: with the
    step now in sim_nosearch they are current (read through that commit), listed as made in scope sim, and the
    build does not move them aside; at a commit the clone lacks they are not."""
    import subprocess

    from pagedbench.paths import ROOT
    from pagedbench.results.report.steps import write_stamp

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    here = scope_codes()
    if not head or digests_at(head) != here:
        pytest.skip("the result-affecting files differ from HEAD's (uncommitted edits)")
    step = next(s for s in STEPS if s.name == "beam_persistence")
    assert step.code == "sim_nosearch"
    folder = step.folder(tmp_path)
    folder.mkdir(parents=True)
    stamp = {"ok": True, "result_code": here["sim"], "result_scope": "sim", "git_commit": head,
             "command": build.stamped_command(step, tmp_path, False)}
    write_stamp(folder, stamp)
    assert build.is_current(step, tmp_path, False, here["sim_nosearch"])
    assert build.set_aside(step, tmp_path, False, here["sim_nosearch"]) is None and folder.is_dir()
    [entry] = write.step_records(tmp_path, [step])
    assert entry["current"] and entry["scope"] == "sim" and entry["codes"] == [here["sim"]]
    write_stamp(folder, {**stamp, "git_commit": "0" * 40})
    assert not build.is_current(step, tmp_path, False, here["sim_nosearch"])
    assert not write.step_records(tmp_path, [step])[0]["current"]


def test_the_list_says_what_an_update_would_run_and_keep(tmp_path, capsys):
    out = tmp_path / "REPORT.md"
    out.write_text(REPORT.read_text())
    assert build.main(["--root", str(tmp_path), "--out", str(out), "--update", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    need = build.needed(write.Earlier(REPORT.read_text(), DOCS), STEPS)
    assert [line.split()[0] for line in lines] == [s.name for s in STEPS]
    assert {line.split()[0] for line in lines if " to run " in line} == need
    assert all(" kept " in line for line in lines if line.split()[0] not in need)
