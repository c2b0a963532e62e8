"""What a report section is: its text, whether runs stand behind it, the parts that had none, and warnings.

Every `section_*` function of `write` and `sharing` returns a `Section`. A
part whose runs are missing is not written as a placeholder: it is a
`NotRun` (what the part is, the command that makes its runs, the folder they
are read from), which `write` lists on stdout and at the end of the report.
Text that needs no runs (presets, the method, the paper's numbers) may be
written with `has_runs` False; it never counts as results.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pagedbench.paths import ROOT
from pagedbench.results.report.steps import step


def shown(path: Path) -> str:
    """A path as a reader types it: relative to the repository when it is inside it."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


@dataclass(frozen=True, slots=True)
class NotRun:
    """A part of the report with no runs: its title, the command that makes them, where they are read from."""

    part: str
    command: str
    where: Path

    def __str__(self) -> str:
        return f"{self.part}. Not run: `{self.command}` has no results under {shown(self.where)}"


def experiment_not_run(part: str, name: str, experiments: Path) -> NotRun:
    """The part of an experiment of `conf/experiment/` (`python run.py -m experiment=NAME`) that has no runs."""
    return NotRun(part, f"python run.py -m experiment={name}", Path(experiments) / name)


def step_command(name: str, root: Path) -> str:
    """The command of the build's step `name` (docs/report/steps.yaml) as a reader types it in the repository's
    root, its records going under the records' root `root` (shown relative to the repository when inside it)."""
    return step(name).shown(Path(shown(root)))


def typed_command(name: str, out: Path | str | None = None) -> str:
    """The command of the build's step `name` as a reader types it, writing to `out` (shown relative to the
    repository), or to its own default folder when `out` is None (`Step.typed`)."""
    return step(name).typed(None if out is None else shown(Path(out)))


def step_missing(name: str, folder: Path) -> NotRun:
    """The part that the build's step `name` makes, when `folder`, where the report reads its records, has none:
    the step's title, its command writing to that folder, the folder."""
    return NotRun(step(name).title, typed_command(name, folder), folder)


def step_not_run(name: str, root: Path) -> NotRun:
    """The part that the build's step `name` (docs/report/steps.yaml) makes, when it has no records under the
    records' root `root`: the step's title, its command, its folder."""
    s = step(name)
    return NotRun(s.title, step_command(name, root), s.folder(root))


@dataclass(slots=True)
class Section:
    """One section: its text ("" when it has nothing to show), whether any of it comes from runs, the parts of it
    that had no runs, and warnings (one line each) for whoever writes the report."""

    text: str = ""
    has_runs: bool = False
    not_run: list[NotRun] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
