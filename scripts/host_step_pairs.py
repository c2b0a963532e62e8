"""Host time per decode step of several commits, interleaved and pinned to one core.

    python scripts/host_step_pairs.py 86c7d60 HEAD                       # five rounds, 1 / 32 / 128 rows
    python scripts/host_step_pairs.py 86c7d60 HEAD --static HEAD --rounds 3
    python scripts/host_step_pairs.py HEAD~1 HEAD --engines paged --rows 32 --repeat 3

Each commit is checked out in a detached worktree (in a temporary folder, removed after), this checkout's
scripts/host_step_bench.py is copied into it, and every (engine, rows, commit) runs in a process of its own with
`PYTHONPATH` set to its worktree, pinned to one core (`--cpu`, default the last): unpinned, a process on this
machine now and then ran every part of the step about twice as slowly. A round runs each (engine, rows) for every
commit in turn; `--static C` adds commit C's static-shape step (`host_step_bench.py --static`) as one more column.
Printed per (engine, rows): each column's median over rounds of its processes' median block, in µs a step,
[min-max over rounds]; then the first column over each other column, round by round, as median (min-max).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pagedbench.paths import ROOT

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paired import worktree  # noqa: E402  (a sibling script)

BENCH = Path(__file__).resolve().parent / "host_step_bench.py"


def one(tree: Path, engine: str, rows: int, static: bool, steps: int, repeat: int, cpu: int) -> float:
    """The median µs a step of one (engine, rows) in a fresh process over `tree`'s code, pinned to `cpu`."""
    cmd = [sys.executable, str(tree / "scripts" / "host_step_bench.py"), "--engines", engine, "--rows", str(rows),
           "--steps", str(steps), "--repeat", str(repeat)] + (["--static"] if static else [])
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tree, env=env,
                         preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    if out.returncode:
        raise RuntimeError(f"{' '.join(cmd)} (in {tree}) failed:\n{out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1].split()[3])


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commits", nargs="+", help="commits whose eager decode step is timed (the first is the base)")
    parser.add_argument("--static", nargs="*", default=[], metavar="COMMIT", help="commits whose static-shape step is timed too")
    parser.add_argument("--engines", nargs="+", default=["paged", "orca_oracle"], choices=["paged", "orca_oracle"])
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 32, 128])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)), help="the core every run is pinned to")
    args = parser.parse_args(argv)
    if min(args.rows) < 1 or min(args.rounds, args.steps, args.repeat) < 1:
        parser.error("--rows, --rounds, --steps and --repeat must be >= 1")
    if len(set(args.commits)) < len(args.commits) or len(set(args.static)) < len(args.static):
        parser.error("a commit is named twice in one list")
    if args.cpu not in os.sched_getaffinity(0):
        parser.error(f"--cpu {args.cpu} is not one of this process's cores {sorted(os.sched_getaffinity(0))}")
    for commit in dict.fromkeys(args.commits + args.static):   # before any worktree or timing
        if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
                          capture_output=True).returncode:
            parser.error(f"{commit!r} is not a commit of this repository")
    columns = [(c, False) for c in args.commits] + [(c, True) for c in args.static]
    with tempfile.TemporaryDirectory(prefix="host_step_pairs-") as scratch:
        trees = {}
        try:
            for i, commit in enumerate(dict.fromkeys(c for c, _ in columns)):
                trees[commit] = worktree(commit, Path(scratch) / str(i))
                shutil.copy(BENCH, trees[commit] / "scripts" / "host_step_bench.py")
            times: dict[tuple[str, int], dict[tuple[str, bool], list[float]]] = {}
            for r in range(args.rounds):
                for engine in args.engines:
                    for rows in args.rows:
                        for commit, static in columns:
                            us = one(trees[commit], engine, rows, static, args.steps, args.repeat, args.cpu)
                            times.setdefault((engine, rows), {}).setdefault((commit, static), []).append(us)
                print(f"round {r + 1} of {args.rounds} done", file=sys.stderr, flush=True)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    names = [f"{c}{' static' if s else ''}" for c, s in columns]
    print("engine       rows  " + "  ".join(f"{n:>22}" for n in names) + "  " +
          "  ".join(f"{names[0]} / {n}" for n in names[1:]))
    for (engine, rows), by in times.items():
        cols = [by[c] for c in columns]
        ratios = []
        for col in cols[1:]:
            each = [a / b for a, b in zip(cols[0], col)]
            ratios.append(f"{statistics.median(each):.2f} ({min(each):.2f}-{max(each):.2f})")
        print(f"{engine:<12} {rows:>5}  " + "  ".join(f"{spread(c):>22}" for c in cols) + "  " + "  ".join(ratios))


if __name__ == "__main__":
    main()
