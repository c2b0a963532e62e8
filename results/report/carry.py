"""Carry the report's records across a change that moves no result: seeded reruns, equal to the bit, then a stamp.

    python -m pagedbench.results.report.carry                  # make report-carry: every stale step of docs/REPORT.md
    python -m pagedbench.results.report.carry --steps capacity --samples 4 --seed 1

A rename or a move changes the result-affecting code's hash, so every record goes stale though no number can
have moved, and a rebuild costs two hours. For each stale step of the report's records table, this reruns a
seeded sample of the step's runs twice, once in a worktree of the commit that made its records and once in this
checkout, and compares them:
- a sweep step (`run.py -m`): at least `--samples` runs of its grid (Hydra's composition of its experiment and
  overrides), at least one per engine it runs; a capacity search's run at a rate drawn from the first rates the
  search tries (0.5, 1, 2 req/s); each run's summary key by key and both tables cell by cell, to the bit (but
  the machine's keys: wall_s, iterations_per_wall_s, metadata);
- a study step: its quick command (its own seeded sample), every JSON, CSV and parquet file it writes;
- a timed step (the CPU's clock in its figures): its runs at the step's quick size, and a second run in this
  checkout says which keys the clock feeds: those that differ between two runs of the same code, those that
  move when a run's own tables are summarized again on warped clocks (a time-weighted figure two runs can
  agree on), and the figures that compare times with a bound (within the SLO, tokens in one second: two runs
  can agree on them by chance); every other key must be equal to the bit.
Both sides run with the same libraries (vLLM's environment, .venv-vllm, is linked into the worktree; `--site`: a
folder put first on PYTHONPATH, for a commit that needs an older library than this environment's). When every
sample of a step is equal, the step's row of the records table is stamped "carried": the code that made its
records stays named (and its commits, whose trees have it), and a last column says to which code it was carried
and by how many equal reruns. Any difference fails the
command, naming the step, the run and the key; that step stays stale, current again only through a rebuild
(`python -m pagedbench.results.report.build --steps NAME`). The staleness check (results/report/current.py)
reads a row carried to this checkout's code in its scope as current.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
import itertools
import os
from pathlib import Path
import random
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd

from pagedbench.paths import CONF, REPORT, ROOT
from pagedbench.results.record.compare import TABLES, diff_folders, diff_runs, keys_of, same, varying_keys
from pagedbench.results.record.result_code import scope_codes
from pagedbench.results.record.summary import summarize
from pagedbench.results.report.current import RECORDS_HEADING, carried_cell, records_rows, split, stale_sections
from pagedbench.results.report.steps import STEPS_FILE, Step, load_steps

SEARCH_RATES = (0.5, 1.0, 2.0)   # the capacity search's first rates (it brackets from 1 req/s by doubling/halving)
CARRIED = "carried"              # the "this code" cell of a carried row
MIN_SAMPLES = 3                  # runs per sweep step, at least (the floor)
# What the clock feeds though two runs of the same code can agree on it by chance, as it compares times with a
# fixed bound: the share and the rate of requests within a latency SLO, and the most tokens in one second of
# the clock (vLLM's peak output rate). Two quick runs on a quiet machine meet the SLO with every request and
# give every token in one second; a loaded one met it with none. Left out of a timed step's comparison.
BOUNDED = ("slo_attainment", "goodput", "max_output_tokens_per_s")
# The bends of the warped clocks a timed run's tables are summarized on (clock_fed): three large ones, and four
# tiny ones that move the weights by 1e-8 to 1e-4, for a time-weighted mean of a constant series, which the clock
# moves only in its last bits (the rounding of the weights' sums), so the large bends may leave it as it is.
WARPS = (0.5, 1.0, 3.0, 1e-8, 1e-7, 1e-6, 1e-4)


@dataclass(frozen=True, slots=True)
class Sample:
    """One rerun of a step: its name and its arguments after `python` (run.py's, or the study's `-m ...`)."""

    name: str
    args: tuple[str, ...]
    run: bool   # a run.py run (one run folder), else a study (an output folder)


def sweep_grid(step: Step) -> tuple[list[str], dict[str, list[str]], bool]:
    """A sweep step's fixed arguments, its swept keys (key -> choices: its experiment's sweeper params and the
    command's comma lists) and whether it searches capacities."""
    from hydra import compose, initialize_config_dir

    args = [a for a in step.command if a not in ("python", "run.py", "-m")]
    swept = {a.split("=", 1)[0]: a.split("=", 1)[1].split(",") for a in args if "=" in a and "," in a}
    fixed = [a for a in args if not ("=" in a and "," in a)]
    chosen = [a for a in fixed if a.startswith(("experiment=", "hydra/sweeper="))]
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=chosen, return_hydra_config=True)
    params = cfg.hydra.sweeper.get("params") or {}
    grid = {str(k): [c.strip() for c in str(v).split(",")] for k, v in params.items()}
    grid.update(swept)
    return fixed, grid, "Capacity" in str(cfg.hydra.sweeper.get("_target_", ""))


def samples(step: Step, count: int, seed: int) -> list[Sample]:
    """The seeded sample of `step`'s runs: at least `count`, at least one per engine of a sweep."""
    rng = random.Random(f"{seed}:{step.name}")
    if not step.is_sweep:
        command = list(step.quick_command) if step.quick_command else [*step.command, *step.quick]
        return [Sample(f"{step.name}-quick", tuple(a for a in command[1:]), run=False)]
    fixed, grid, searches = sweep_grid(step)
    keys = sorted(grid)
    combos = [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]
    rng.shuffle(combos)
    chosen = []
    for engine in dict.fromkeys(c.get("engine") for c in combos):
        chosen.append(next(c for c in combos if c.get("engine") == engine))
    for combo in combos:
        if len(chosen) >= count:
            break
        if combo not in chosen:
            chosen.append(combo)
    while len(chosen) < count:   # a grid smaller than the sample: the same runs on other seeded traces
        chosen.append({**rng.choice(combos), "workload.seed": str(rng.randrange(1000))})
    out = []
    for i, combo in enumerate(chosen):
        extra = [f"{k}={v}" for k, v in combo.items()]
        if searches:
            extra.append(f"workload.request_rate={rng.choice(SEARCH_RATES)}")
        if step.timed:
            extra += list(step.quick)
        out.append(Sample(f"{step.name}-{i}", ("run.py", *fixed, *extra, "progress=false"), run=True))
    return out


SHARED = (".venv-vllm",)   # environments a study finds in its checkout (peers: vLLM's), not in git


def share_environments(tree: Path) -> None:
    """The records' worktree gets this checkout's environments that git does not hold (linked), so that both
    sides run the same rows: without vLLM's, the peers study skips its vLLM rows on that side alone."""
    for name in SHARED:
        if (ROOT / name).is_dir() and not (tree / name).exists():
            (tree / name).symlink_to(ROOT / name, target_is_directory=True)


def tree_step(tree: Path, name: str) -> Step:
    """The step called `name` as `tree`'s own steps.yaml has it (a commit's module names are its own)."""
    found = [s for s in load_steps(tree / STEPS_FILE.relative_to(ROOT)) if s.name == name]
    if not found:
        raise ValueError(f"{tree}: its steps.yaml has no step {name}")
    return found[0]


def rerun(tree: Path, sample: Sample, out: Path, env: dict, log: Path) -> subprocess.Popen:
    """Start one sample in `tree`, writing into `out` (a run folder, or a study's --out)."""
    args = list(sample.args)
    if sample.run:
        args.append(f"hydra.run.dir={out}")
    else:
        args = [a.replace("{out}", str(out)) for a in args]
    log.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, *args], cwd=tree, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)


def wait_all(started: list[tuple[subprocess.Popen, Path]]) -> list[str]:
    failed = []
    for proc, log in started:
        if proc.wait() != 0:
            failed.append(f"exit {proc.returncode}, see {log}")
    return failed


def check_step(step: Step, base: Path, work: Path, count: int, seed: int, env: dict) -> tuple[int, list[str]]:
    """Rerun `step`'s sample at the base tree and here; (equal reruns, problems naming the run and the key). A timed
    step's (or a study's) clock-fed keys are the union, over its samples, of the keys two runs here disagree on."""
    problems, clock, ran = [], set(), []
    for sample in samples(step, count, seed):
        old_sample = sample if sample.run else samples(tree_step(base, step.name), count, seed)[0]
        old, new, again = (work / step.name / side / sample.name for side in ("base", "here", "again"))
        done = old.parent / f"{sample.name}.done"   # the base's rerun, kept in --work: the base tree never changes
        runs = [] if done.is_file() else [(rerun(base, old_sample, old, env, old.parent / f"{sample.name}.log"),
                                           old.parent)]
        for side in (new, again):
            shutil.rmtree(side, ignore_errors=True)
        runs.append((rerun(ROOT, sample, new, env, new.parent / f"{sample.name}.log"), new.parent))
        failed = wait_all(runs)
        if runs[0][1] == old.parent and runs[0][0].returncode == 0:
            done.write_text(" ".join(old_sample.args) + "\n")
        if not failed and (step.timed or not sample.run):   # what the clock feeds: keys two runs here disagree on
            failed = wait_all([(rerun(ROOT, sample, again, env, again.parent / f"{sample.name}.log"), again.parent)])
            if not failed:
                clock |= varying_keys(new, again) | (bounded(new) | clock_fed(new) if step.timed else set())
        if failed:
            problems += [f"{step.name} {sample.name}: a rerun failed ({f})" for f in failed]
            continue
        ran.append((sample, old, new))
    equal = 0
    for sample, old, new in ran:
        found = diff_run_folders(old, new, frozenset(clock)) if sample.run else diff_folders(old, new,
                                                                                           ignore=frozenset(clock))
        problems += [f"{step.name} {sample.name} ({' '.join(sample.args)}): {p}" for p in found]
        equal += not found
        print(f"  {sample.name}: {'equal' if not found else f'{len(found)} differences'}"
              f"{f' (clock: {len(clock)} keys left out)' if clock else ''}", flush=True)
    return equal, problems


def warp(t, top: float, bend: float):
    """A monotone but not linear clock: t + bend t^2 / (2 top), its slope from 1 to 1 + bend over [0, top]."""
    return t + bend * t * t / (2 * top)


def warped(iterations: pd.DataFrame, requests: pd.DataFrame, bend: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A run's tables read on a warped clock: every time in seconds (a `*_s` column; a duration from its start)."""
    top = max([float(np.nanmax(np.asarray(v, dtype="float64"))) for v in (
        iterations["start_s"] + iterations["duration_s"], requests["finish_s"]) if len(v)] + [1.0])
    iterations, requests = iterations.copy(), requests.copy()
    end = warp(iterations["start_s"] + iterations["duration_s"], top, bend)
    iterations["start_s"] = warp(iterations["start_s"], top, bend)
    iterations["duration_s"] = end - iterations["start_s"]
    for column in [c for c in requests.columns if c.endswith("_s")]:
        if requests[column].dtype == object:
            requests[column] = [None if v is None else warp(np.asarray(v, dtype="float64"), top, bend)
                                for v in requests[column]]
        else:
            requests[column] = warp(requests[column], top, bend)
    return iterations, requests


def clock_fed(folder: Path) -> set[str]:
    """The summary keys of each run under `folder` that the clock feeds: what moves when the run's own tables
    are read on warped clocks (WARPS) and summarized again. Found without waiting for the machine's clock to
    move them, so a time-weighted figure that two runs happened to agree on is found too."""
    out = set()
    for path in sorted(Path(folder).rglob("summary.json")):
        run = path.parent
        if not all((run / table).is_file() for table in TABLES):
            continue
        iterations, requests = (pd.read_parquet(run / table) for table in TABLES)
        plain = summarize(iterations, requests)
        name = path.relative_to(folder).as_posix()
        for bend in WARPS:
            moved = summarize(*warped(iterations, requests, bend))
            out.update(f"{name}:{k}" for k in set(plain) | set(moved) if not same(plain.get(k), moved.get(k)))
    return out


def bounded(folder: Path) -> set[str]:
    """The "FILE:KEY" entries of `folder` that compare times with a bound (BOUNDED), fed by a timed run's clock."""
    return {k for k in keys_of(folder) if any(f in k.partition(":")[2] for f in BOUNDED)}


def diff_run_folders(old: Path, new: Path, ignore: frozenset) -> list[str]:
    """A timed run's summary and tables, without the keys and columns the clock feeds."""
    left = frozenset(k.split(":", 1)[1] for k in ignore if k.split(":", 1)[0] in ("summary.json", *TABLES))
    return diff_runs(old, new, ignore=left)


def stamp_rows(text: str, carried: dict[str, tuple[str, int]]) -> str:
    """`text` (a report) with each row of `carried` (step -> (code carried to, equal reruns)) stamped."""
    head, _, rest = text.partition(RECORDS_HEADING)
    table, sep, tail = rest.partition("\n## ")
    lines = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| step |"):
            line = "| step | section | runs | result code | commits | this code | scope | carried |"
        elif line.startswith("|---"):
            line = "|---|---|---|---|---|---|---|---|"
        elif line.startswith("| ") and len(cells) >= 7:
            cells = cells[:8] + [""] * (8 - len(cells))
            if cells[0] in carried:
                code, n = carried[cells[0]]
                cells[5], cells[7] = CARRIED, carried_cell(code, n)
            line = "| " + " | ".join(cells[:7] + ([cells[7]] if cells[7] else ["-"])) + " |"
        lines.append(line)
    return head + RECORDS_HEADING + "\n".join(lines) + ("\n" if table.endswith("\n") else "") + sep + tail


def base_commit(row: list[str]) -> str:
    commits = split(row[4])
    if len(commits) != 1:
        raise ValueError(f"step {row[0]}: its records name {len(commits)} commits ({row[4]}); carry reads one")
    return commits[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.results.report.carry",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=REPORT)
    parser.add_argument("--steps", nargs="+", help="only these stale steps (default: every stale one)")
    parser.add_argument("--samples", type=int, default=MIN_SAMPLES,
                        help="runs per sweep step, at least (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--site", type=Path, help="a folder put first on PYTHONPATH on both sides")
    parser.add_argument("--work", type=Path, help="where the reruns go (default: a temporary folder, removed); "
                        "kept, a later carry into it reruns only this checkout's side (the base's stay valid)")
    parser.add_argument("--dry-run", action="store_true", help="list the samples, run nothing")
    args = parser.parse_args(argv)
    if args.samples < MIN_SAMPLES:
        parser.error(f"--samples must be at least {MIN_SAMPLES}")
    text = args.report.read_text()
    codes = scope_codes()
    steps = {s.name: s for s in load_steps()}
    rows = {r[0]: r for r in records_rows(text)}
    stale = [s.step for s in stale_sections(text, codes)]
    chosen = [s for s in stale if not args.steps or s in args.steps]
    unknown = sorted(set(args.steps or ()) - set(steps))
    if unknown:
        parser.error(f"no such step: {', '.join(unknown)}")
    if not chosen:
        print(f"{args.report}: no stale step to carry (result code {codes['all']})")
        return 0
    for name in chosen:
        for sample in samples(steps[name], args.samples, args.seed):
            print(f"{name}: {sample.name}: python {' '.join(sample.args)}")
    if args.dry_run:
        return 0
    env = {**os.environ, "PYTHONUNBUFFERED": "true"}
    if args.site:
        env["PYTHONPATH"] = os.pathsep.join([str(args.site.resolve()), *filter(None, [env.get("PYTHONPATH")])])
    work = args.work or Path(tempfile.mkdtemp(prefix="carry-"))
    worktrees: dict[str, Path] = {}
    carried, failures = {}, []
    try:
        for name in chosen:
            step, row = steps[name], rows[name]
            commit = base_commit(row)
            if commit not in worktrees:
                worktrees[commit] = work / f"tree-{commit}-{os.getpid()}"
                subprocess.run(["git", "worktree", "add", "--detach", "-q", str(worktrees[commit]), commit],
                               cwd=ROOT, check=True)
                share_environments(worktrees[commit])
            env["PAGEDBENCH_RESULT_SCOPE"] = step.code
            began = time.monotonic()
            print(f"{name}: rerunning its sample at {commit} and here", flush=True)
            equal, problems = check_step(step, worktrees[commit], work / "runs", args.samples, args.seed, env)
            print(f"{name}: {equal} equal reruns, {len(problems)} differences ({time.monotonic() - began:.0f} s)",
                  flush=True)
            if problems:
                failures += problems
            else:
                carried[name] = (codes[step.code], equal)
    finally:
        for tree in worktrees.values():
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    if carried:
        args.report.write_text(stamp_rows(args.report.read_text(), carried))
        print(f"{args.report}: {len(carried)} steps carried to result code {codes['all']}: {', '.join(carried)}")
    for p in failures:
        print(f"differs: {p}", file=sys.stderr)
    if failures:
        print(f"error: {len(failures)} differences; those steps stay stale (rebuild each with "
              f"`python -m pagedbench.results.report.build --steps NAME`)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
