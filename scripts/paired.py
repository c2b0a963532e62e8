"""Time one command on this checkout against the same command on another commit, whole process, A B A B.

    python scripts/paired.py --base 5ae9204 -- python run.py backend=sim engine=paged \\
        workload.arrival=poisson workload.request_rate=5 workload.duration_s=3600 rerun=true
    python scripts/paired.py --base d64e166 --rounds 2 --warmup 0 -- python run.py -m hydra/sweeper=capacity \\
        hydra/launcher=local backend=sim engine=paged,orca_max workload=sharegpt workload.arrival=poisson \\
        workload.duration_s=3600 workload.seed=0 hydra.sweep.dir={tmp}

A is the command run in this checkout, B the same command in a detached worktree of BASE (made in a temporary
folder and removed after): relative paths such as run.py resolve in each tree, and `python` is this
interpreter in both (an editable install's modules are found after the script's own folder, so each side runs
its own tree's code). `{tmp}` in an argument is replaced by a fresh empty folder for each run (a sweep folder
that must not hold an earlier run's results). Each pair runs A then B, after `--warmup` pairs not counted; this
machine's speed drifts over minutes, so the ratio is taken pair by pair. Printed for each side: wall, user +
system CPU seconds and peak memory (the command's own maximum resident set, read by `pagedbench.measure`, which
starts it from a small process so that this one's size does not count), as min / median / max; then A / B of
each pair. What the commands print goes to `--log` (default: outputs/paired.log, appended). Exit 1 when a run
fails (its exit code and the log's tail are shown).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
import statistics
import subprocess
import sys
import tempfile

from pagedbench.measure import measure

ROOT = Path(__file__).resolve().parent.parent
TMP = "{tmp}"


@dataclass(frozen=True)
class Measure:
    wall_s: float
    cpu_s: float
    peak_mib: float


def run_once(argv: list[str], cwd: Path, log, scratch: Path) -> Measure:
    """One whole process of `argv` in `cwd`: its wall time, CPU time and peak memory; raises on a failed run."""
    args = [arg.replace(TMP, tempfile.mkdtemp(dir=scratch)) if TMP in arg else arg for arg in argv]
    if args[0] == "python":
        args[0] = sys.executable
    log.write(f"$ (cd {cwd} && {' '.join(args)})\n")
    log.flush()
    try:
        m = measure(args, cwd=cwd, stdout=log)
    except OSError as e:
        raise RuntimeError(f"cannot start {args[0]!r} in {cwd}: {e.strerror}") from None
    if m.returncode != 0:
        raise RuntimeError(f"exit {m.returncode} in {cwd}: {' '.join(args)}")
    return Measure(m.wall_s, m.cpu_s, m.peak_mib)


def spread(values: list[float], digits: int = 2) -> str:
    """min / median / max, as the figures beside every timing in the README are quoted."""
    return f"{min(values):.{digits}f} / {statistics.median(values):.{digits}f} / {max(values):.{digits}f}"


def report(pairs: list[tuple[Measure, Measure]]) -> str:
    """Each side's figures and the pair-by-pair ratios, as text."""
    lines = [f"{len(pairs)} pairs, min / median / max"]
    for side, index in (("A", 0), ("B", 1)):
        runs = [pair[index] for pair in pairs]
        lines.append(f"{side} wall s     {spread([m.wall_s for m in runs])}")
        lines.append(f"{side} cpu s      {spread([m.cpu_s for m in runs])}")
        lines.append(f"{side} peak MiB   {spread([m.peak_mib for m in runs], 0)}")
    lines.append(f"A/B wall      {spread([a.wall_s / b.wall_s for a, b in pairs], 3)}")
    lines.append(f"A/B cpu       {spread([a.cpu_s / b.cpu_s for a, b in pairs], 3)}")
    return "\n".join(lines)


def worktree(base: str, into: Path) -> Path:
    """A detached worktree of `base` under `into`."""
    path = into / "base"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(path), base], check=True)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the commit B runs (A runs this checkout as it is)")
    parser.add_argument("--rounds", type=int, default=5, help="pairs counted (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="pairs run first and not counted (default 1)")
    parser.add_argument("--log", type=Path, help="where the commands' output goes")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command, run in both trees")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: give it after --")
    if args.rounds < 1 or args.warmup < 0:
        parser.error("--rounds must be at least 1 and --warmup at least 0")
    known = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{args.base}^{{commit}}"],
                           capture_output=True)
    if known.returncode != 0:
        parser.error(f"--base {args.base}: no such commit in {ROOT}")
    with tempfile.TemporaryDirectory(prefix="paired-") as scratch:
        scratch = Path(scratch)
        base = worktree(args.base, scratch)
        log_path = args.log or ROOT / "outputs" / "paired.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        print(f"A: {ROOT} as it is; B: {args.base} in {base}; log: {log_path}", file=sys.stderr)
        pairs = []
        try:
            with open(log_path, "a") as log:
                for i in range(args.warmup + args.rounds):
                    pair = (run_once(command, ROOT, log, scratch), run_once(command, base, log, scratch))
                    counted = i >= args.warmup
                    print(f"{'pair' if counted else 'warm-up'} {i + 1}: A {pair[0].wall_s:.2f} s, "
                          f"B {pair[1].wall_s:.2f} s", file=sys.stderr)
                    if counted:
                        pairs.append(pair)
        except RuntimeError as e:
            tail = Path(log_path).read_text()[-2000:]
            print(f"error: {e}\n{tail}", file=sys.stderr)
            return 1
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
        print(report(pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
