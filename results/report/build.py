"""Rebuild the report in one command: run every step of docs/report/steps.yaml that this code has no records of, then render.

    python -m pagedbench.results.report.build                 # make report: outputs/ -> docs/REPORT.md
    python -m pagedbench.results.report.build --quick         # make report-quick: outputs/report-quick/ -> its REPORT.md
    python -m pagedbench.results.report.build --jobs 2        # the sim sweeps' parallel processes (default: one per core)
    python -m pagedbench.results.report.build --launcher slurm   # the sim sweeps on a SLURM cluster (conf/hydra/launcher)
    python -m pagedbench.results.report.build --parallel 2    # two untimed steps at once (each sweep with its own processes)
    python -m pagedbench.results.report.build --list          # the steps, their commands and whether their records are current
    python -m pagedbench.results.report.build --steps capacity,chat   # only these steps, then render
    python -m pagedbench.results.report.build --update        # make report-update: only what this code changed since the report
    python -m pagedbench.results.report.build --update --list # what an update would run, and what it would keep

Each step's records go to one folder under the records' root (`pagedbench.results.report.steps`). A step is skipped
when its folder's stamp says it finished with the same command at this checkout's result-affecting code in
the step's scope (`python -m pagedbench.results.record.result_code --scope sim` for a sim step, whose runs are made
with PAGEDBENCH_RESULT_SCOPE=sim; the whole code for the others); a folder made by another command or other
code is moved aside to ROOT/stale/ first (nothing is deleted), so every record the report reads was made by
this code; a step fails if its scope's code changes while it runs, and the build stops before a step whose
scope's code changed since the build began (an edit would leave records of two codes). A change outside
the sim's scope (the server, the real backend) thus leaves the sim's records current, and the sim steps can
be rebuilt while such a change is being made. The untimed
steps (the sim's sweeps and studies) run first, `--parallel` of them at once (default one: a search's rounds
leave cores idle while their slowest run ends, which another step can fill), then the timed ones (the real
backend on this CPU, the peers, the swap benchmark) one at a time, nothing else of the build running beside
them. A failed step is
reported with the end of its log and the build goes on: the report then holds the sections that have
records and lists the rest, and the shipped report is not replaced. The time of every step and section is
printed at the end, and kept in ROOT/build.json. Writing the shipped report also rewrites the README's
results block from the same records (`pagedbench.results.report.headline`).

`--update` (`make report-update`) rebuilds only what the checkout changed since the report it writes over
(docs/REPORT.md, or the quick build's): a section of that report is kept, with its figures and its records'
rows, when every step that feeds it (steps.yaml `section` and `also`) is current there (`pagedbench.results.report.current`:
made by this code in the step's scope, read at the commits that made them where the code differs), and its
steps are not run; every other section is made again, and so are all the steps that feed it. The README's
results block is a section of its own (the headline steps). So a fix to the real backend reruns the timed steps
and leaves the sim's sections as they are, on a clean clone too. `--update --steps NAME` makes NAME's sections
again though they are current (the report records each step's code, not its command: a step whose command
changed in steps.yaml is named so), with every step that feeds them.
"""
from __future__ import annotations

import argparse
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import datetime, timezone
import json
import os
from pathlib import Path
import shutil
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING

from pagedbench.paths import OUTPUTS, REPORT, ROOT
from pagedbench.results.record import provenance
from pagedbench.results.record.result_code import SCOPE_ENV, digest, narrower, scope_codes
from pagedbench.results.record.store import atomic_write
from pagedbench.results.report.section import shown
from pagedbench.results.report.steps import Step, load_steps, read_stamp, step as named_step, write_stamp

if TYPE_CHECKING:
    from pagedbench.results.report.write import Earlier

FULL_ROOT = OUTPUTS
QUICK_ROOT = OUTPUTS / "report-quick"
LOG = "step.log"
TAIL_LINES = 20


def stamped_command(step: Step, root: Path, quick: bool) -> list[str]:
    """The command as its stamp records it: its arguments after the interpreter."""
    return step.argv(root, quick)[1:]


def is_current(step: Step, root: Path, quick: bool, code: str) -> bool:
    """Whether `step`'s folder holds its finished records from this command at result code `code` (the step's
    scope's), or at another scope's code that the commit which made them shows is still `code` in the step's
    scope (`pagedbench.results.report.current.current_at`: a step moved to a narrower scope keeps its records)."""
    from pagedbench.results.report.current import current_at

    stamp = read_stamp(step.folder(root))
    if not (stamp and stamp.get("ok") and stamp.get("command") == stamped_command(step, root, quick)):
        return False
    if stamp.get("result_code") == code:
        return True
    made_scope, commit = stamp.get("result_scope") or "all", str(stamp.get("git_commit") or "")[:12]
    return bool(commit) and current_at([stamp.get("result_code")], [commit], made_scope, step.code,
                                       {**scope_codes(), step.code: code})


def foreign_codes(folder: Path, code: str) -> set[str]:
    """The result codes other than `code` recorded in `folder`: its stamp's and its run folders' (run.json)."""
    found = set()
    stamp = read_stamp(folder)
    if stamp and stamp.get("result_code"):
        found.add(stamp["result_code"])
    for record in Path(folder).rglob("run.json"):
        try:
            found.add(json.loads(record.read_text()).get("result_code") or "none")
        except (OSError, ValueError):
            found.add("unreadable")
    return found - {code}


def set_aside(step: Step, root: Path, quick: bool, code: str) -> Path | None:
    """Move `step`'s folder to ROOT/stale/ when it holds records of other code or of another command; the
    place it went, or None when it stayed (absent, empty, or current records a rerun completes)."""
    folder = step.folder(root)
    if not folder.is_dir() or is_current(step, root, quick, code):
        return None
    stamp = read_stamp(folder)
    other_command = stamp is not None and stamp.get("command") != stamped_command(step, root, quick)
    if not foreign_codes(folder, code) and not other_command:
        return None
    target = Path(root) / "stale" / f"{step.name}-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(folder), str(target))
    return target


def sweep_args(step: Step, jobs: int | None, launcher: str | None) -> list[str]:
    """The launcher settings a sim sweep gets from the build's options (a timed step keeps its own: one run at a
    time)."""
    if not step.is_sweep or step.timed:
        return []
    return ([f"hydra/launcher={launcher}"] if launcher else []) + ([f"hydra.launcher.n_jobs={jobs}"] if jobs else [])


def run_step(step: Step, root: Path, quick: bool, code: str, jobs: int | None = None,
             launcher: str | None = None) -> dict:
    """Run one step into its folder, its output in step.log there; its stamp, written whether it failed or not."""
    folder = step.folder(root)
    folder.mkdir(parents=True, exist_ok=True)
    argv = step.argv(root, quick, sys.executable)
    extra = sweep_args(step, jobs, launcher)
    # PYTHONUNBUFFERED: any non-empty value writes the log as it goes; the scope: the code its runs record.
    env = {**os.environ, "PYTHONUNBUFFERED": "true", SCOPE_ENV: step.code}
    start = time.perf_counter()
    with open(folder / LOG, "w") as log:
        log.write(f"$ {' '.join(argv + extra)}\n")
        log.flush()
        done = subprocess.run(argv + extra, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    wall = time.perf_counter() - start
    ok = done.returncode == 0 and not failed_runs(folder, step)
    code_info = provenance.code()
    stamp = {"step": step.name, "section": step.section, "command": stamped_command(step, root, quick),
             "launcher": extra, "ok": ok,
             "returncode": done.returncode, "result_code": code, "result_scope": step.code,
             "git_commit": code_info["git_commit"],
             "code_version": code_info["code_version"], "quick": quick, "timed": step.timed, "wall_s": round(wall, 1),
             "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    write_stamp(folder, stamp)
    return stamp


def failed_runs(folder: Path, step: Step) -> list[Path]:
    """A sweep's run folders that ended in error.json (a sweep's process exits 0 when some of its runs fail)."""
    return sorted(Path(folder).rglob("error.json")) if step.is_sweep else []


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def order(steps: list[Step]) -> list[Step]:
    """Untimed steps first, then the timed ones, each in the file's order."""
    return [s for s in steps if not s.timed] + [s for s in steps if s.timed]


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def times_table(stamps: list[dict]) -> str:
    """Per step and per section: wall time and whether it ran, was reused or failed."""
    lines = [f"{'step':<24} {'section':<46} {'status':<8} {'time':>9}"]
    for s in stamps:
        lines.append(f"{s['step']:<24} {s['section'][:46]:<46} {s['status']:<8} {minutes(s.get('wall_s', 0)):>9}")
    sections: dict[str, float] = {}
    for s in stamps:
        sections[s["section"]] = sections.get(s["section"], 0.0) + (s.get("wall_s", 0) if s["status"] == "ran" else 0)
    lines.append("")
    lines += [f"{'section':<46} {'time this build':>16}"] + [f"{k[:46]:<46} {minutes(v):>16}" for k, v in sections.items()]
    return "\n".join(lines)


def needed(earlier: Earlier, steps: list[Step], force: frozenset[str] = frozenset()) -> set[str]:
    """The steps an update must run: those not current in the `earlier` report, those in `force` (named with
    --steps: a changed command, a measurement to make again), and every step that feeds a part (a section, or the
    README's results block) that one of them feeds, until no part is half made from records run again; and all
    the steps of a section the earlier report lacks."""
    from pagedbench.results.report.headline import HEADLINE_STEPS

    names = {s.name for s in steps}
    sections = {x for step in steps for x in (step.section, *step.also)}
    feeding = {x: {step.name for step in steps if x in (step.section, *step.also)} for x in sections}
    need = (names - earlier.current()) | (names & force)
    for section, part in feeding.items():
        if earlier.heading(section) is None:
            need |= part
    parts = [*feeding.values(), set(HEADLINE_STEPS) & names]
    grown = True
    while grown:
        grown = False
        for part in parts:
            if part & need and not part <= need:
                need |= part
                grown = True
    return need


def render(root: Path, out: Path, complete_or_fail: bool = False, earlier: Earlier | None = None) -> int:
    """The report from the records under `root` (as `python -m pagedbench.results.report` renders it, from this build's
    folders), with the sections of `earlier` it keeps (`--update`). With `complete_or_fail` (the quick build)
    every part must have records, every section must come from this checkout's result code, and no section may
    read a step steps.yaml does not give it, else 1; 2 when nothing could be written."""
    from pagedbench.results.report.current import stale_sections
    from pagedbench.results.report.headline import HEADLINE_STEPS
    from pagedbench.results.report.reads import undeclared
    from pagedbench.results.report.write import compose, publish

    experiments = root / "experiments"
    with tempfile.TemporaryDirectory() as figures:
        report = compose(experiments, experiments / "real_cpu", Path(figures), root / "replay", root / "swap_bench",
                         root / "peers", earlier=earlier)
        if publish(report, Path(figures), out) is None:
            return 2
    if Path(out).resolve() == REPORT.resolve():
        from pagedbench.results.report.headline import after_shipped_report
        absent = [name for name in HEADLINE_STEPS if not named_step(name).folder(root).is_dir()]
        if earlier is not None and absent:
            print(f"the README's results block is kept: its steps ({', '.join(absent)} among them) are current in the "
                  "earlier report and were not run")
        else:
            after_shipped_report(root)
    misread = undeclared(report.reads, load_steps())
    for line in misread:
        print(f"{'error' if complete_or_fail else 'warning'}: {line}", file=sys.stderr)
    if not complete_or_fail:
        return 0
    stale = stale_sections(report.text, scope_codes())
    for s in stale:
        print(f"error: stale records: {s}", file=sys.stderr)
    if report.not_run:
        print(f"error: {len(report.not_run)} parts of the quick report have no records (listed above)", file=sys.stderr)
    return 1 if stale or report.not_run or misread else 0


def run_steps(chosen: list[Step], root: Path, quick: bool, codes: dict[str, str], jobs: int | None,
              launcher: str | None, parallel: int = 1) -> tuple[list[dict], list[str]]:
    """Run `chosen` (untimed steps first, then timed: `order`), reusing current records: up to `parallel` untimed
    steps at once, each timed one alone; the stamps (with a status: ran, reused, failed) in `chosen`'s order, and
    the names of the steps that failed. No step starts once the code of its scope differs from `codes` (an edit
    while building: records of two codes), and the build then stops there."""
    stamps: dict[int, dict] = {}
    failed: list[str] = []
    left = list(enumerate(chosen, 1))
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        running: dict[Future, tuple[int, Step, str]] = {}
        while left or running:
            while left and len(running) < (1 if left[0][1].timed else parallel) \
                    and not (left[0][1].timed and running):
                i, step = left[0]
                label = f"[{i}/{len(chosen)}] {step.name}"
                code, now = codes[step.code], digest(scope=step.code)
                if now != code:   # an edit under engines/, conf/, ... while building: records would mix two codes
                    print(f"error: the result-affecting code ({step.code}) changed during the build ({code} -> "
                          f"{now}); the steps left ({', '.join(s.name for _, s in left)}) were not run: run the "
                          f"build again", file=sys.stderr)
                    failed.append(step.name)
                    left = []
                    break
                left.pop(0)
                if is_current(step, root, quick, code):
                    stamps[i] = {**read_stamp(step.folder(root)), "status": "reused"}
                    print(f"{label}: current records reused ({shown(step.folder(root))})", flush=True)
                    continue
                moved = set_aside(step, root, quick, code)
                if moved:
                    print(f"{label}: records of other code or another command moved to {shown(moved)}", flush=True)
                print(f"{label}: {step.shown(root, quick)}", flush=True)
                running[pool.submit(run_step, step, root, quick, code, jobs, launcher)] = (i, step, code)
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                i, step, code = running.pop(future)
                stamp = future.result()
                if stamp["ok"] and digest(scope=step.code) != code:   # changed while it ran: runs of either code
                    stamp = {**stamp, "ok": False, "error": "the result-affecting code changed while the step ran"}
                    write_stamp(step.folder(root), stamp)
                stamps[i] = {**stamp, "status": "ran" if stamp["ok"] else "failed"}
                print(f"[{i}/{len(chosen)}] {step.name}: {'done' if stamp['ok'] else 'FAILED'} in "
                      f"{minutes(stamp['wall_s'])}", flush=True)
                if not stamp["ok"]:
                    failed.append(step.name)
                    print(tail(step.folder(root) / LOG), file=sys.stderr)
    return [stamps[i] for i in sorted(stamps)], failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.results.report.build", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"the quick build: each step's quick arguments, records under {shown(QUICK_ROOT)}")
    parser.add_argument("--root", type=Path, help="the records' root (default outputs/, or outputs/report-quick/)")
    parser.add_argument("--out", type=Path, help=f"the report (default {shown(REPORT)}; quick: ROOT/REPORT.md)")
    parser.add_argument("--jobs", type=int, help="parallel processes of each sim sweep (default: one per core)")
    parser.add_argument("--parallel", type=int, default=1,
                        help="untimed steps run at once (default: one at a time); the timed ones always run alone, "
                             "after them")
    parser.add_argument("--launcher", help="the sim sweeps' Hydra launcher (conf/hydra/launcher: local, slurm; "
                                           "basic: in the sweep's own process, the quick build's default)")
    parser.add_argument("--steps", help="comma-separated step names to run (default: all); the report is rendered "
                                        "from whatever records are current; with --update: made again though "
                                        "current, with the other steps of their sections")
    parser.add_argument("--list", action="store_true", help="list the steps and whether their records are current "
                                                            "(with --update: whether an update runs or keeps them)")
    parser.add_argument("--render-only", action="store_true", help="run nothing: render from the records there are")
    parser.add_argument("--update", action="store_true",
                        help="only what this code changed: keep each section of the report written over whose steps "
                             "are all current there (read at the commits that made them), and skip those steps")
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be a positive count of processes, got {args.jobs}")
    if args.parallel < 1:
        parser.error(f"--parallel must be a positive count of steps, got {args.parallel}")
    root = Path(shown(args.root or (QUICK_ROOT if args.quick else FULL_ROOT)))   # relative where inside the tree
    out = args.out or (root / "REPORT.md" if args.quick or args.root else REPORT)
    try:
        steps = load_steps()
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.steps:
        names = [n.strip() for n in args.steps.split(",") if n.strip()]
        unknown = sorted(set(names) - {s.name for s in steps})
        if unknown:
            print(f"error: unknown steps {', '.join(unknown)}; the steps are {', '.join(s.name for s in steps)}",
                  file=sys.stderr)
            return 2
    codes = scope_codes()
    chosen = [s for s in order(steps) if not args.steps or s.name in names]
    earlier, need = None, None
    if args.update:
        from pagedbench.results.report.write import Earlier

        if not Path(out).is_file():
            print(f"error: --update keeps sections of the report it writes over, and {shown(out)} does not exist: "
                  "run the whole build", file=sys.stderr)
            return 2
        earlier = Earlier(Path(out).read_text(), Path(out).parent, codes, steps)
        need = needed(earlier, steps, frozenset(names) if args.steps else frozenset())
        chosen = [s for s in order(steps) if s.name in need]   # a named step brings the steps of its sections
    if args.list:    # with --update: whether the update keeps the step's sections or runs it
        for step in steps:
            if need is not None:
                state = "to run" if step.name in need else "kept"
            else:
                state = "current" if is_current(step, root, args.quick, codes[step.code]) else "to run"
            kind = f"{'timed' if step.timed else 'untimed'}, {step.code}"
            print(f"{step.name:<24} {kind:<19} {state:<8} {step.shown(root, args.quick)}")
        return 0
    if need is not None:
        kept = [s.name for s in order(steps) if s.name not in need]
        for step in steps:    # records here of a kept step, made by other code, would be read: set them aside
            moved = None if step.name in need else set_aside(step, root, args.quick, codes[step.code])
            if moved:
                print(f"{step.name}: records of other code or another command moved to {shown(moved)}")
        print(f"update of {shown(out)}: {len(kept)} steps current there, their sections kept"
              + (f" ({', '.join(kept)})" if kept else "") + f"; {len(chosen)} to make again", flush=True)
    print(f"result-affecting code {codes['all']} ({narrower(codes)}); records under {shown(root)}; "
          f"{len(chosen)} steps"
          + (" (quick)" if args.quick else ""), flush=True)
    launcher = args.launcher or ("basic" if args.quick and not args.jobs else None)   # tiny runs: no process pool
    results, failed = run_steps([] if args.render_only else chosen, root, args.quick, codes, args.jobs, launcher,
                                args.parallel)
    if results:
        print("\n" + times_table(results))
        atomic_write(root / "build.json", lambda tmp: Path(tmp).write_text(json.dumps(
            {"result_code": codes["all"], "result_codes": codes, "quick": args.quick, "steps": results},
            indent=2) + "\n"))
    if failed:
        print(f"failed steps: {', '.join(failed)} (each one's log: its folder's {LOG})", file=sys.stderr)
    start = time.perf_counter()
    status = render(root, out, complete_or_fail=args.quick, earlier=earlier)
    print(f"rendered in {minutes(time.perf_counter() - start)}")
    return 1 if failed else status


if __name__ == "__main__":
    sys.exit(main())
