"""The reproduction report: our figures beside the paper's, regenerated from run folders alone.

    make report                                       # every step's runs, then docs/REPORT.md (pagedbench.results.report.build)
    python run.py -m experiment=memory_waste          # one experiment's runs by hand
    python -m pagedbench.results.report                          # -> outputs/report/REPORT.md and its figures/
    python -m pagedbench.results.report --out docs/REPORT.md     # the shipped report: only from a complete set of runs

Reads the records that the build's steps (docs/report/steps.yaml) write under outputs/: experiments/NAME (one
sweep per experiment, the real CPU runs in experiments/real_cpu), and the studies' folders (swap_bench, peers,
replay, sensitivity, beam_persistence, beam_check). The report holds the parts that have runs; a part without
runs is not invented nor written as a placeholder: it is listed on stdout and
under "Not in this report" at the end, with the command that makes its runs.
Figures go to figures/ beside the report. Nothing is written when no part has
runs, nor over the shipped docs/REPORT.md while any part lacks them (unless
--force). The prose around the sections is docs/report/templates/write_*.md.j2.
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path
import shutil
import sys
import tempfile

from pagedbench.engines.specs.presets import available, load_hardware
from pagedbench.paths import EXPERIMENTS, OUTPUTS, REPORT
from pagedbench.results.report.paper import reference
from pagedbench.results.report.section import NotRun, Section, shown
from pagedbench.results.report.steps import Step, load_steps, read_stamp
from pagedbench.results.report.beams import section_beam_check
from pagedbench.results.report.sensitivity import section_sensitivity
from pagedbench.results.report.sharing import section_chat, section_prefix, section_real_sharing, section_sampling
from pagedbench.results.report.swapping import section_swap
from pagedbench.results.record.store import atomic_write
from pagedbench.results.record import provenance
from pagedbench.results.record.result_code import digests_at, scope_codes
from pagedbench.results.report.current import (RECORDS_HEADING, carried_to, current_at, records_rows, split,
                                               stale_sections)
from pagedbench.results.sweeps.collect import code_versions, collect, mixed_code_note
from pagedbench.results.report.paper_sections import (section_batch, section_blocks, section_capacity, section_memory,
                                           section_method, section_table1)
from pagedbench.results.report.read import load, load_capacity
from pagedbench.results.report.reads import Reads, declared, steps_of
from pagedbench.results.report.template import render
from pagedbench.results.report.backend_sections import section_real, section_validation
from pagedbench.results.report.peers import section_peers
from pagedbench.results.report.kernels import kernels


OUT = OUTPUTS / "report" / "REPORT.md"   # where the report goes unless told: never over the shipped one


def title() -> str:
    """The report's title and what it is."""
    return render("write_title.md.j2")


@dataclass(slots=True)
class Report:
    """The report before it is written: its text, whether any part has runs, the parts that have none, warnings,
    the folders it read (for the message when there is nothing to write) and the steps each section read."""

    text: str
    has_runs: bool
    not_run: list[NotRun] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    read: list[Path] = field(default_factory=list)
    reads: dict[str, set[str]] = field(default_factory=dict)   # a section's "## " line -> the steps it read


def not_in_report(not_run: list[NotRun]) -> str:
    return render("write_not_in_report.md.j2", not_run=not_run)


def code_notes(experiments: Path) -> list[str]:
    """One line for each experiment whose runs come from more than one code version."""
    if not experiments.is_dir():
        return []
    notes = (f"{folder.name}: {mixed_code_note(collect(folder))}"
             for folder in sorted(p for p in experiments.iterdir() if p.is_dir()))
    return [n for n in notes if not n.endswith(": None")]


def made_by() -> str:
    """The report's first line after its title: the commit that rendered it and its result-affecting code."""
    code = provenance.code()
    commit = code["git_commit"][:12] if code["git_commit"] else code["code_version"]
    return render("write_made_by.md.j2", commit=commit, dirty=code["git_dirty"], codes=scope_codes())


def step_records(root: Path, steps: list[Step] | None = None) -> list[dict]:
    """One entry per step of the build whose folder exists under the records' root `root`: its section, how many
    runs it holds (a sweep's finished runs; else None), the result codes and commits that made them (the
    stamp's, and a sweep's runs'), the scope they were made in, and whether they are current for this checkout
    in the step's scope (`pagedbench.results.report.current.current_at`)."""
    here, entries = scope_codes(), []
    for step in steps if steps is not None else load_steps():
        folder = step.folder(root)
        if not folder.is_dir():
            continue
        stamp = read_stamp(folder)
        made_scope = (stamp or {}).get("result_scope") or step.code     # the scope its runs recorded their code in
        codes = {stamp["result_code"]} if stamp and stamp.get("result_code") else set()
        commits = {str(stamp["git_commit"])[:12]} if stamp and stamp.get("git_commit") else set()
        runs = None
        if step.is_sweep:
            df = collect(folder)
            runs = len(df)
            codes |= set(code_versions(df)) if runs else set()
            commits |= {str(c)[:12] for c in df.get("git_commit", []) if isinstance(c, str)}
        entries.append({"step": step.name, "section": step.section, "runs": runs, "codes": sorted(codes),
                        "commits": sorted(commits), "stamped": bool(stamp and stamp.get("ok")),
                        "current": bool(stamp and stamp.get("ok")) and current_at(
                            sorted(codes), sorted(c for c in commits if c), made_scope, step.code, here),
                        "scope": made_scope, "carried": None,   # records on disk: made, not carried
                        "command": f"python -m pagedbench.results.report.build --steps {step.name}"})
    return entries


def records_table(root: Path, steps: list[Step] | None = None, entries: list[dict] | None = None) -> str:
    """The report's last section: each step's records, the code that made them and whether it is this
    checkout's (`entries`: `step_records(root, steps)`, when already read); "" when no step has records."""
    entries = step_records(root, steps) if entries is None else entries
    if not entries:
        return ""
    return render("write_records.md.j2", entries=entries, codes=scope_codes())


def provenance_line(heading: str, entries: list[dict], steps: list[Step] | None = None) -> str:
    """The line a section ends with: the steps behind it (those that feed it, docs/report/steps.yaml `section`
    and `also`) and the code and commits that made their records."""
    feeds = {s.name for s in (steps if steps is not None else load_steps()) if s.feeds(heading)}
    mine = [e for e in entries if e["step"] in feeds]
    if not mine:
        return ""
    return ("_Records: " + "; ".join(f"`{e['step']}` at result code {', '.join(e['codes']) or 'unknown'}"
                                     f" (commit {', '.join(e['commits']) or 'unknown'})" for e in mine) + "._\n")

EXTRA_HEADINGS = ("## Code versions", "## Not in this report", RECORDS_HEADING)   # the report's own, not sections


def sections_of(text: str) -> dict[str, str]:
    """The report `text`'s sections by their "## " line: each one's text up to the next (its own figures and
    provenance line included), without the report's lists (code versions, not in this report, records)."""
    blocks = ("\n" + text).split("\n## ")[1:]
    found = {}
    for block in blocks:
        heading = "## " + block.split("\n", 1)[0]
        if not heading.startswith(EXTRA_HEADINGS):
            found[heading] = "## " + block
    return found


class Earlier:
    """An earlier report (its text, and the folder its figures/ are in) and what of it is still current for this
    checkout (result codes `codes`, scope -> code): the steps of its records table that are not stale
    (`pagedbench.results.report.current.stale_sections`, which reads the commits that made them from git's history)."""

    def __init__(self, text: str, folder: Path, codes: dict[str, str] | None = None,
                 steps: list[Step] | None = None, at=None) -> None:
        steps = steps if steps is not None else load_steps()
        codes = codes if codes is not None else scope_codes()
        self.text, self.folder = text, Path(folder)
        try:
            rows = records_rows(text)
            stale = {s.step for s in stale_sections(text, codes, steps, at or digests_at)}
        except ValueError:        # no records table: nothing of it can be shown current
            rows, stale = [], set()
        self.rows = {row[0]: row for row in rows if row[0] not in stale}
        self.sections = sections_of(text)

    def current(self) -> set[str]:
        """The steps whose records in the earlier report are current for this checkout."""
        return set(self.rows)

    def keeps(self, name: str, steps: list[Step]) -> str | None:
        """The earlier report's section whose heading starts with `name` (as steps.yaml names sections), when it
        has one and every step that feeds it is current there (the caller keeps it only where the records here
        lack some part of it); else None."""
        heading = self.heading(name)
        feeds = declared("## " + name, steps)
        if heading is None or not feeds or not feeds <= self.current():
            return None
        return self.sections[heading]

    def heading(self, name: str) -> str | None:
        """The "## " line of the earlier report's section that `name` (the start of a heading) names, or None."""
        found = [h for h in self.sections if h.startswith("## " + name)]
        return found[0] if len(found) == 1 else None

    def entry(self, name: str) -> dict:
        """The records-table entry of step `name` (current), as `step_records` makes one, from its row."""
        step, section, runs, made, commits, _this, *rest = self.rows[name]
        carried = rest[1] if len(rest) > 1 and carried_to(rest[1]) is not None else None
        return {"step": step, "section": section, "runs": None if runs == "-" else int(runs), "codes": split(made),
                "commits": split(commits), "stamped": True, "current": True, "scope": rest[0] if rest else "all",
                "command": f"python -m pagedbench.results.report.build --steps {step}", "carried": carried}

    def copy_figures(self, text: str, figures: Path) -> None:
        """The figures `text` (a kept section) shows, from the earlier report's figures/ into `figures`."""
        for name in re.findall(r"\]\(figures/([^)]+)\)", text):
            source = self.folder / "figures" / name
            if source.is_file():
                shutil.copyfile(source, Path(figures) / name)


def compose(experiments: Path, real_cpu: Path, figures: Path, replay_dir: Path | None = None,
            swap_bench: Path = OUTPUTS / "swap_bench", peers: Path = OUTPUTS / "peers",
            earlier: Earlier | None = None) -> Report:
    """Every section that has runs (its figures drawn into `figures`), then the list of those that have none;
    what each section read, by step (`Report.reads`, measured as it is made: `pagedbench.results.report.reads`). With
    `earlier`, a section that lacks records here is taken from that report when it can be (`Earlier.keeps`),
    its figures copied into `figures`."""
    replay_dir = replay_dir if replay_dir is not None else experiments.parent / "replay"
    # (a step that feeds the section, whose `section` in steps.yaml starts its heading, or None; how it is made)
    parts = [
        (None, lambda: Section(title() + "\n" + made_by())),
        ("capacity_1000_requests",
         lambda: section_method(load_capacity(experiments), load_capacity(experiments, "capacity_1000_requests"),
                                experiments / "capacity_1000_requests", load(experiments, "capacity"))),
        (None, section_table1),
        ("memory_waste",
         lambda: section_memory(load(experiments, "memory_waste"), figures, experiments / "memory_waste")),
        ("capacity",
         lambda: section_capacity(load_capacity(experiments), load(experiments, "capacity"), figures, experiments)),
        ("batch_size", lambda: section_batch(load(experiments, "batch_size"), figures, experiments)),
        ("block_size", lambda: section_blocks(load(experiments, "block_size"), figures, experiments)),
        ("sampling", lambda: section_sampling(experiments, figures)),
        ("beam_check", lambda: section_beam_check(experiments.parent / "beam_check" / "beam_check.csv")),
        ("prefix", lambda: section_prefix(experiments, figures)),
        ("chat", lambda: section_chat(experiments, figures)),
        ("swap_capacity", lambda: section_swap(experiments, swap_bench, figures)),
        ("sensitivity", lambda: section_sensitivity(experiments.parent / "sensitivity")),
        ("real_cpu",
         lambda: section_real(real_cpu, experiments / "static_reference", experiments.parent / "hf_generate")),
        ("peers", lambda: section_peers(peers)),
        ("sampling_real", lambda: section_real_sharing(experiments)),
        ("replay", lambda: section_validation(replay_dir)),
        (None, lambda: Section(kernels())),
    ]
    steps, sections, names, reads = load_steps(), [], [], {}
    section_of = {s.name: s.section for s in steps}
    for fed_by, part in parts:
        name = None if fed_by is None else section_of[fed_by]
        with Reads() as read:
            section = part()
        heading = section.text.split("\n", 1)[0]
        if section.text and name is not None and not heading.startswith("## " + name):
            raise ValueError(f"a section made as \"{name}\" is headed {heading!r}: its heading must start with "
                             f"\"## {name}\", as docs/report/steps.yaml names it")
        sections.append(section)
        names.append(name)
        if name is not None:
            reads["## " + name] = steps_of(read.paths, experiments.parent, steps)
    entries = step_records(experiments.parent, steps)
    kept_at = set()
    if earlier is not None:
        on_disk = {e["step"] for e in entries}
        for i, (section, name) in enumerate(zip(sections, names)):
            kept = earlier.keeps(name, steps) if name is not None else None
            if kept is not None and (section.not_run or not section.has_runs):
                sections[i] = Section(kept.rstrip("\n") + "\n", has_runs=True)
                kept_at.add(i)
                earlier.copy_figures(kept, figures)
                entries += [earlier.entry(step) for step in sorted(declared("## " + name, steps) - on_disk)
                            if step not in {e["step"] for e in entries}]
        order = {s.name: i for i, s in enumerate(steps)}
        entries.sort(key=lambda e: order.get(e["step"], len(order)))
    not_run = [part for s in sections for part in s.not_run]
    mixed = code_notes(experiments)
    for i, s in enumerate(sections):
        line = provenance_line(s.text.split("\n", 1)[0], entries, steps) if s.has_runs and i not in kept_at else ""
        if line:
            s.text = s.text.rstrip("\n") + "\n\n" + line
    records = records_table(experiments.parent, entries=entries)
    text = ("\n".join(s.text for s in sections if s.text)
            + ("\n" + render("write_code_versions.md.j2", notes=mixed) if mixed else "")
            + ("\n" + not_in_report(not_run) if not_run else "")
            + ("\n" + records if records else ""))
    return Report(text, any(s.has_runs for s in sections), not_run,
                  [w for s in sections for w in s.warnings] + mixed, [experiments, real_cpu, swap_bench, peers, replay_dir],
                  reads)


def refusal(report: Report, out: Path, force: bool = False) -> str | None:
    """Why `report` may not be written to `out`, or None: it has no runs at all, or it lacks some and `out` is the
    shipped report (unless `force`)."""
    if not report.has_runs:
        read = ", ".join(dict.fromkeys(shown(p) for p in report.read))
        return (f"no part of the report has runs (read {read}); "
                "run an experiment first, e.g. python run.py -m experiment=memory_waste; nothing written")
    if report.not_run and not force and Path(out).resolve() == REPORT.resolve():
        return (f"{len(report.not_run)} parts of the report have no runs (listed above), and {shown(out)} is the "
                "shipped report, which holds them: write elsewhere (--out), or replace it anyway with --force; "
                "nothing written")
    return None


def write_report(report: Report, figures: Path, out: Path, force: bool = False) -> Path:
    """`report` to `out` and the figures drawn into `figures` to figures/ beside it, each atomically; raises
    ValueError (nothing written) when `refusal` says why not."""
    problem = refusal(report, out, force)
    if problem:
        raise ValueError(problem)
    for figure in sorted(Path(figures).glob("*.png")):
        atomic_write(out.parent / "figures" / figure.name, lambda tmp, src=figure: shutil.copyfile(src, tmp))
    atomic_write(out, lambda tmp: Path(tmp).write_text(report.text))
    return out


def publish(report: Report, figures: Path, out: Path, force: bool = False) -> Path | None:
    """`write_report`, saying so: the parts left out, then an error line and None when it may not be written,
    else the warnings and where it went (with the figures drawn into `figures`)."""
    for part in report.not_run:
        print(f"not in the report: {part}")
    try:
        out = write_report(report, figures, out, force)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return None
    drawn = len(list(Path(figures).glob("*.png")))
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"wrote {out}" + (f" and {drawn} figure{'s' if drawn > 1 else ''} in {out.parent / 'figures'}" if drawn else ""))
    return out


def build_report(experiments: Path, real_cpu: Path, out: Path, replay_dir: Path | None = None,
                 force: bool = False, swap_bench: Path = OUTPUTS / "swap_bench",
                 peers: Path = OUTPUTS / "peers") -> Path:
    """Compose the report and write it to `out` (see `write_report`)."""
    with tempfile.TemporaryDirectory() as figures:
        report = compose(experiments, real_cpu, Path(figures), replay_dir, swap_bench, peers)
        return write_report(report, Path(figures), out, force)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.results.report", description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=Path, default=EXPERIMENTS)
    parser.add_argument("--real-cpu", type=Path, default=EXPERIMENTS / "real_cpu",
                        help="the real-backend CPU runs (their summary.json)")
    parser.add_argument("--swap-bench", type=Path, default=OUTPUTS / "swap_bench",
                        help="a folder of python -m pagedbench.studies.swap_bench (its swap_bench.csv)")
    parser.add_argument("--peers", type=Path, default=OUTPUTS / "peers",
                        help="a folder of python -m pagedbench.studies.peers (its peers.json)")
    parser.add_argument("--out", type=Path, default=OUT,
                        help=f"the report's file; figures go to figures/ beside it (default {shown(OUT)}; "
                             f"{shown(REPORT)}, the shipped report, only from a complete set of runs)")
    parser.add_argument("--replay", type=Path, default=OUTPUTS / "replay",
                        help="a folder of python -m pagedbench.studies.replay (its replay.csv)")
    parser.add_argument("--force", action="store_true",
                        help=f"write {shown(REPORT)} even though some parts have no runs (they drop out of it)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as figures:
        report = compose(args.experiments, args.real_cpu, Path(figures), args.replay, args.swap_bench, args.peers)
        return 0 if publish(report, Path(figures), args.out, args.force) is not None else 2


if __name__ == "__main__":
    sys.exit(main())
