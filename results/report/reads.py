"""Which of the build's steps a section of the report reads: every file it opens and every folder it lists, as
they happen, mapped to the step whose folder holds them.

The report keeps a section made by earlier records when none of the steps it reads changed (`make
report-update`), so what a section reads must be known exactly. docs/report/steps.yaml says it (`section`,
and `also` for another section that reads a step's records); this module measures it, through Python's audit
events ("open", "os.scandir", "os.listdir", and READ_EVENT, which the report's parquet reads raise since
pyarrow opens files outside Python), so the quick build can fail when a section reads a step the file does
not give it (`undeclared`).

    with Reads() as reads:
        section = section_capacity(...)
    steps_of(reads.paths, root, steps)     # -> {"capacity"}
"""
from __future__ import annotations

import os
from pathlib import Path
import sys

from pagedbench.results.report.steps import Step

READ_EVENT = "pagedbench.report.read"
EVENTS = frozenset({"open", "os.scandir", "os.listdir", READ_EVENT})
_active: list[set[str]] = []      # the paths of each open `Reads`, innermost last
_installed = False


def _hook(event: str, args: tuple) -> None:
    if not _active or event not in EVENTS or not args:
        return
    path = args[0]
    if isinstance(path, (str, bytes, os.PathLike)):
        _active[-1].add(os.path.abspath(os.fsdecode(path)))


class Reads:
    """A context in which every path the process opens or lists is noted in `paths` (absolute); nested, the
    innermost notes them."""

    def __init__(self) -> None:
        self.paths: set[str] = set()

    def __enter__(self) -> "Reads":
        global _installed
        if not _installed:       # an audit hook stays for the process's life: installed once, idle outside a Reads
            sys.addaudithook(_hook)
            _installed = True
        _active.append(self.paths)
        return self

    def __exit__(self, *exc) -> None:
        _active.remove(self.paths)


def steps_of(paths: set[str], root: Path, steps: list[Step]) -> set[str]:
    """The names of the steps whose folder under the records' root `root` holds (or is) one of `paths`."""
    folders = {s.name: os.path.abspath(s.folder(root)) for s in steps}
    return {name for name, folder in folders.items()
            for p in paths if p == folder or p.startswith(folder + os.sep)}


def declared(heading: str, steps: list[Step]) -> set[str]:
    """The steps docs/report/steps.yaml says the section under `heading` (its "## " line) reads."""
    return {s.name for s in steps if s.feeds(heading)}


def undeclared(reads: dict[str, set[str]], steps: list[Step]) -> list[str]:
    """One line per section (heading -> the steps it read) that read a step steps.yaml does not give it."""
    return [f"section \"{heading[3:]}\" reads step {name}, which docs/report/steps.yaml does not say it feeds "
            f"(add the section's heading to the step's `also`)"
            for heading, read in reads.items() for name in sorted(read - declared(heading, steps))]
