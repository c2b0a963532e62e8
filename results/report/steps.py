"""The runs behind the report as a list of steps (docs/report/steps.yaml), where each step's records live, and its stamp.

A step is one command that makes the records one part of the report reads: an experiment's sweep
(`python run.py -m experiment=NAME`), a study (`python -m studies.NAME --out FOLDER`). Its records go to
one folder under a records' root (outputs/ for the report, outputs/report-quick/ for the quick one): a
`run.py` step's to ROOT/experiments/NAME, any other's to ROOT/NAME. When a step finishes, the runner
(`pagedbench.results.report.build`) writes the step's stamp, step.json, into that folder: the command, the
result-affecting code it ran at (in the step's scope, `code`: sim for the sim's steps, whose records no
file of the real backend, the server or the kernels can change), the commit, how long it took. A step feeds
its `section`, and any other it lists in `also` (sections that read its records too). The report reads the stamps to say which
code made each section, and the staleness check compares them with this checkout's result code.
"""
from __future__ import annotations

from dataclasses import dataclass
import functools
import json
from pathlib import Path
import shlex

import yaml

from pagedbench.paths import REPORT_SOURCES
from pagedbench.results.record.result_code import SCOPES
from pagedbench.results.record.store import atomic_write

STEPS_FILE = REPORT_SOURCES / "steps.yaml"
STAMP = "step.json"
OUT = "{out}"   # where a step's command names its folder
EXPERIMENTS_DIR = "experiments"


@dataclass(frozen=True, slots=True)
class Step:
    """One command of the report's build: its name, the section it feeds, whether it is timed, its arguments
    (full and quick)."""

    name: str
    section: str
    command: tuple[str, ...]
    quick: tuple[str, ...] = ()
    quick_command: tuple[str, ...] | None = None
    timed: bool = False
    title: str = ""
    code: str = "all"   # the result scope its records depend on (results/record/result_code.py SCOPES)
    also: tuple[str, ...] = ()   # other sections that read its records (the start of each one's `## ` heading)

    def feeds(self, heading: str) -> bool:
        """Whether the section under `heading` (its "## " line) reads this step's records."""
        return any(heading.startswith("## " + section) for section in (self.section, *self.also))

    @property
    def is_sweep(self) -> bool:
        """A Hydra multirun of run.py: its records are run folders, reused by their fingerprint."""
        return "run.py" in self.command

    def folder(self, root: Path) -> Path:
        return Path(root) / EXPERIMENTS_DIR / self.name if self.is_sweep else Path(root) / self.name

    def argv(self, root: Path, quick: bool = False, python: str = "python") -> list[str]:
        """The command as run: `python` replaced, {out} filled in, the quick arguments added, and for a sweep
        its folder (hydra.sweep.dir)."""
        out = self.folder(root)
        base = list(self.quick_command) if quick and self.quick_command else [*self.command, *(self.quick if quick
                                                                                                 else ())]
        argv = [python if a == "python" else a.replace(OUT, str(out)) for a in base]
        if self.is_sweep:
            argv.append(f"hydra.sweep.dir={out}")
        return argv

    def typed(self, out: str | None = None) -> str:
        """The command as a reader types it: `out` in place of {out}, or without the `--out {out}` pair when
        `out` is None (a study then writes to its own default folder; a sweep goes to its experiment's)."""
        args = list(self.command)
        if out is None and OUT in args:
            at = args.index(OUT)
            del args[at - 1:at + 1]
        return shlex.join(a.replace(OUT, out or "") for a in args)

    def shown(self, root: Path = Path("outputs"), quick: bool = False) -> str:
        """The command as a reader types it in the repository's root."""
        return shlex.join(self.argv(root, quick))


@functools.cache
def _load(path: Path) -> tuple[Step, ...]:
    return tuple(_parse(path))


def load_steps(path: Path = STEPS_FILE) -> list[Step]:
    """The steps of `path` (docs/report/steps.yaml), in order (read once)."""
    return list(_load(Path(path)))


def _parse(path: Path) -> list[Step]:
    """The steps of steps.yaml, in order; ValueError naming the step on a malformed entry or a repeated name."""
    raw = yaml.safe_load(Path(path).read_text())
    steps, seen = [], set()
    for i, entry in enumerate(raw.get("steps") or []):
        try:
            step = Step(name=str(entry["name"]), section=str(entry["section"]),
                        command=tuple(str(a) for a in entry["command"]),
                        quick=tuple(str(a) for a in entry.get("quick") or ()),
                        quick_command=(tuple(str(a) for a in entry["quick_command"])
                                       if entry.get("quick_command") else None),
                        timed=bool(entry.get("timed", False)), title=str(entry.get("title") or entry["name"]),
                        code=str(entry.get("code", "all")),
                        also=tuple(str(a) for a in entry.get("also") or ()))
        except (KeyError, TypeError) as err:
            raise ValueError(f"{path}: step {i + 1} lacks {err} (each step needs name, section and command)") from None
        if step.code not in SCOPES:
            raise ValueError(f"{path}: step {step.name} has code {step.code!r}; the scopes are {', '.join(SCOPES)}")
        if step.name in seen:
            raise ValueError(f"{path}: two steps are named {step.name}")
        seen.add(step.name)
        steps.append(step)
    return steps


def step(name: str) -> Step:
    """The step called `name`; KeyError naming the steps there are."""
    for s in load_steps():
        if s.name == name:
            return s
    raise KeyError(f"no step {name} in {STEPS_FILE}")


def read_stamp(folder: Path) -> dict | None:
    """The stamp of the step whose records are in `folder`, or None (never run by the build, or unreadable)."""
    path = Path(folder) / STAMP
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_stamp(folder: Path, stamp: dict) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    atomic_write(Path(folder) / STAMP, lambda tmp: Path(tmp).write_text(json.dumps(stamp, indent=2) + "\n"))

