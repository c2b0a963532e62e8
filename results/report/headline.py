"""The README's results at a glance, written by the build from the same records as the report.

The README used to carry tables typed in from an earlier report, which a rerun left behind. Now the block
between README_START and README_END is rendered (docs/report/templates/readme_results.md.j2) from the
records the shipped report was made from, stamped with the result codes of those records (this checkout's
when none has records yet), whenever `make report` writes docs/REPORT.md (after `python -m pagedbench.results.report --out docs/REPORT.md`,
run `python -m pagedbench.results.report.headline`).

    python -m pagedbench.results.report.headline            # rewrite the README's block from outputs/ (the build does this)
"""
from __future__ import annotations

import argparse
from pathlib import Path
import re
import sys

from pagedbench.paths import OUTPUTS, README
from pagedbench.results.record.result_code import result_code
from pagedbench.results.report.paper import reference
from pagedbench.results.report.read import load, load_capacity
from pagedbench.results.report.section import step_command
from pagedbench.results.report.setup import trace_setup
from pagedbench.results.report.steps import step
from pagedbench.results.report.tables import (CAPACITY_HEADER, MEMORY_HEADER, ORACLE_RATIO, SAVING, capacity_rows,
                                              capacity_tables, memory_rows)
from pagedbench.results.report.template import render
from pagedbench.results.report.write import step_records

README_START = "<!-- results: written by `make report` from the report's records; do not edit here -->"
README_END = "<!-- /results -->"
CODE = re.compile(r"result-affecting code `([^`]+)`")
SHARING_STEPS = ("sampling", "beam", "prefix", "chat")
HEADLINE_STEPS = ("memory_waste", "capacity", *SHARING_STEPS)


def headline(root: Path = OUTPUTS) -> str:
    """The README's results block from the records under `root`: Figure 2's split, Figure 12's capacities and
    Figures 14-17's ratios, each with the command that made it; a part without records says so."""
    experiments = root / "experiments"
    memory, capacity = load(experiments, "memory_waste"), load_capacity(experiments)
    entries = [e for e in step_records(root) if e["step"] in HEADLINE_STEPS]
    codes = sorted({c for e in entries for c in e["codes"]}) or [result_code()]
    return render("readme_results.md.j2", code=", ".join(codes), start=README_START, end=README_END,
                  memory=None if memory is None else {"header": MEMORY_HEADER, "rows": memory_rows(memory),
                                                      "command": step_command("memory_waste", root),
                                                      "setup": trace_setup(memory)},
                  capacity=None if capacity is None else {"header": CAPACITY_HEADER,
                                                          "tables": capacity_tables(capacity),
                                                          "command": step_command("capacity", root),
                                                          "setup": trace_setup(load(experiments, "capacity"))},
                  sharing=sharing_rows(root), paper=reference())


def sharing_rows(root: Path) -> list[list[str]]:
    """Figures 14-17 at a glance: per setting of each sharing step that has records, paged's capacity over
    Orca (Oracle)'s (mean (min-max) over seeds) and its memory saving at capacity, with the step's command."""
    rows = []
    for name in SHARING_STEPS:
        cap = load_capacity(root / "experiments", name)
        if cap is None:
            continue
        for r in capacity_rows(cap, "latency"):
            rows.append([step(name).title, f"`{step_command(name, root)}`", r[0], r[ORACLE_RATIO], r[SAVING]])
    return rows


def replace_block(text: str, block: str) -> str:
    """`text` with its results block (README_START to README_END, both included) replaced by `block`;
    ValueError when `text` has no such block."""
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"no results block ({README_START} ... {README_END})")
    return text[:start] + block.strip() + text[end + len(README_END):]


def block_code(text: str) -> str | None:
    """The result code the results block of `text` says made it, or None without a block or a code."""
    start, end = text.find(README_START), text.find(README_END)
    found = CODE.search(text[start:end]) if 0 <= start < end else None
    return found.group(1) if found else None


def update_readme(root: Path = OUTPUTS, readme: Path = README) -> Path:
    """Rewrite `readme`'s results block from the records under `root`."""
    readme.write_text(replace_block(readme.read_text(), headline(root)))
    return readme


def after_shipped_report(root: Path, readme: Path = README) -> None:
    """What follows writing the shipped report from the records under `root`: the README's block rewritten from
    them, or a warning saying why it was not (the report stays written)."""
    try:
        print(f"wrote the results block of {update_readme(root, readme)}")
    except (OSError, ValueError) as err:
        print(f"warning: {readme}: {err}: its results block was not rewritten", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.results.report.headline", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=OUTPUTS, help="the records' root (default outputs/)")
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)
    try:
        print(f"wrote the results block of {update_readme(args.root, args.readme)}")
    except (OSError, ValueError) as err:
        print(f"error: {args.readme}: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
