"""Whether a report describes this code: the sections whose records another result-affecting code made.

    python -m pagedbench.results.report.current                  # checks docs/REPORT.md against this checkout; exit 1 if stale
    python -m pagedbench.results.report.current REPORT.md        # another report

The report ends with "Records behind this report": one row per step of the build, the result code that made
its records and whether it was the code that rendered it. A report is current when every row's code is this
checkout's in the row's step's scope (`python -m pagedbench.results.record.result_code [--scope sim]`; a row at this
checkout's whole code is current in any scope) and every step of the build has a row; otherwise each
stale or missing row names its section and the command that rebuilds it.

A row carried to this checkout's code in the step's scope by equal reruns (its last column, "to CODE by N equal
reruns", written by `python -m pagedbench.results.report.carry` only when every rerun was equal to the bit) is
current: its records were made by the code it names, at the commits it names, and a seeded sample of them came
out the same at this code.

A row whose code is not this checkout's is still current when the commits that made its records say so: each
commit's tree, read from git's history (`pagedbench.results.record.result_code.digests_at`), has the row's code in the
row's scope (so that tree made them, not an uncommitted edit) and this checkout's code in the step's scope
now (so nothing the step can run changed since). A scope defined or narrowed after the records were made thus
applies to them; a clone without those commits (a shallow one) reads such rows as stale. An engine fix thus lands with its re-run, or this check (a test of the suite) says
which parts of the shipped report it leaves behind.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
import sys

from pagedbench.paths import REPORT
from pagedbench.results.record.result_code import NotInHistory, SCOPES, digests_at, narrower, scope_codes
from pagedbench.results.report.steps import Step, load_steps

RECORDS_HEADING = "## Records behind this report"
CARRIED_WORDS = ("to", "CODE", "by", "N", "equal", "reruns")   # a carried cell: "to CODE by N equal reruns"


@dataclass(frozen=True, slots=True)
class Stale:
    """A step of the report whose records were not made by the code checked against."""

    step: str
    section: str
    codes: str | None   # None: the report lists no records of the step
    command: str

    def __str__(self) -> str:
        made = "no records" if self.codes is None else f"made by result code {self.codes}"
        return f"section \"{self.section}\" (step {self.step}, {made}): `{self.command}`"


def records_rows(text: str) -> list[list[str]]:
    """The cells of each row of the report's records table; ValueError when the report has none."""
    if RECORDS_HEADING not in text:
        raise ValueError(f"the report has no \"{RECORDS_HEADING[3:]}\" section, so no record of the code that made "
                         "it: rebuild it with `make report`")
    table = text.split(RECORDS_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| step |")]
    return [r for r in rows if len(r) >= 6]


def split(cell: str) -> list[str]:
    """A table cell's comma-separated list ("-" and "unknown" hold none)."""
    return [c.strip() for c in cell.split(",") if c.strip() and c.strip() not in ("-", "unknown")]


def current_at(made: list[str], commits: list[str], made_scope: str, scope: str, codes: dict[str, str],
               at=digests_at) -> bool:
    """Whether records of result code `made` (in `made_scope`) made at `commits` are current in `scope` for a
    checkout of `codes` (scope -> code): at once when `made` is this code in `scope` or in the whole code; else
    when every commit's tree (`at(commit)`: its hash in every scope) has `made` in `made_scope` and `codes`'s
    code in `scope`."""
    if made in ([codes.get(scope)], [codes.get("all")]):
        return True
    if len(made) != 1 or not commits or made_scope not in SCOPES:
        return False
    try:
        trees = [at(commit) for commit in commits]
    except NotInHistory:
        return False
    return all(tree[made_scope] == made[0] and tree[scope] == codes.get(scope) for tree in trees)


def carried_cell(code: str, reruns: int) -> str:
    """The "carried" cell `carried_to` reads: "to CODE by N equal reruns"."""
    return f"to {code} by {reruns} equal reruns"


def carried_to(cell: str) -> str | None:
    """The code a row's "carried" cell says its records were carried to ("to CODE by N equal reruns"), or None
    (`pagedbench.results.report.carry` writes it only when every rerun of its sample was equal to the bit)."""
    words = cell.split()
    if (len(words) == len(CARRIED_WORDS) and tuple(words[0::2]) == CARRIED_WORDS[0::2] and words[3].isdigit()
            and int(words[3]) >= 1 and words[5] == CARRIED_WORDS[5]):
        return words[1]
    return None


def stale_sections(text: str, codes: dict[str, str], steps: list[Step] | None = None, at=digests_at) -> list[Stale]:
    """Every step of the report `text` whose records are not current (`current_at`) in its step's scope
    (docs/report/steps.yaml `code`; a step the file no longer has: all) for a checkout of `codes` (scope ->
    code, `scope_codes()`); `at`: a commit's hash in every scope."""
    scope = {s.name: s.code for s in (steps if steps is not None else load_steps())}
    stale = []
    for step, section, _runs, made, commits, _this, *rest in records_rows(text):
        made_scope = rest[0] if rest else "all"
        if carried_to(rest[1] if len(rest) > 1 else "") in (codes.get(scope.get(step, "all")), codes.get("all")):
            continue   # carried by equal reruns to this checkout's code in the step's scope
        if not current_at(split(made), split(commits), made_scope, scope.get(step, "all"), codes, at):
            stale.append(Stale(step, section, made, f"python -m pagedbench.results.report.build --steps {step}"))
    return stale


def missing_steps(text: str, steps: list[Step] | None = None) -> list[Stale]:
    """Every step of the build (docs/report/steps.yaml) that the report `text`'s records table does not list: a
    part of the report rendered without its records (it says so where the section would be)."""
    listed = {row[0] for row in records_rows(text)}
    return [Stale(s.name, s.section, None, f"python -m pagedbench.results.report.build --steps {s.name}")
            for s in (steps if steps is not None else load_steps()) if s.name not in listed]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.results.report.current", description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", type=Path, default=REPORT)
    args = parser.parse_args(argv)
    codes = scope_codes()
    try:
        text = args.report.read_text()
        stale, missing = stale_sections(text, codes), missing_steps(text)
    except (OSError, ValueError) as err:
        print(f"error: {args.report}: {err}", file=sys.stderr)
        return 2
    for s in stale:
        print(f"stale: {s}")
    for s in missing:
        print(f"no records: {s}")
    verdict = "current" if not stale and not missing else f"{len(stale)} steps stale, {len(missing)} without records"
    print(f"{args.report}: {verdict} at result code {codes['all']} ({narrower(codes)})")
    return 1 if stale or missing else 0


if __name__ == "__main__":
    sys.exit(main())
