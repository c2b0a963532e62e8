"""The hash of the code and data a result depends on, so that records outlive commits that change nothing else.

A run's numbers follow from its config and from these files: the engines, the workloads, the kernels, the
config groups and presets (conf/), the packaged traces and profiles, the summary that turns a run's rows into
its figures, the capacity search that picks the rates, run.py that drives a run and the studies (studies/)
whose tables the report reads. A commit that changes only the report's prose, a
test or the README leaves this hash as it was, so a record made before it still describes the code after it;
a commit that changes any of them makes every record before it stale.

    python -m results.record.result_code          # prints the hash of this checkout, and what it covers

The hash is over each file's path and bytes as they are on disk (uncommitted changes included: a dirty tree
has its own hash), in a git checkout the files git tracks or would track under these paths, elsewhere every
file under them but caches.
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path
import subprocess
import sys

from paths import ROOT

RESULT_PATHS = ("engines", "workloads", "kernels", "conf", "hydra_plugins", "data/traces", "data/profiles",
                "results/record/summary.py", "results/sweeps/capacity.py", "results/sweeps/sustainable.py",
                "run.py", "studies")
LENGTH = 12      # hex digits shown and stored: 48 bits, plenty to tell a few hundred code states apart
SKIPPED_PARTS = ("__pycache__",)


def _git_files(root: Path, paths: tuple[str, ...]) -> list[str] | None:
    """The files git tracks, or would track (untracked but not ignored), under `paths`; None outside git."""
    try:
        done = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths],
                              cwd=root, capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return sorted({name for name in done.stdout.decode().split("\0") if name})


def _walked_files(root: Path, paths: tuple[str, ...]) -> list[str]:
    names = []
    for path in paths:
        top = root / path
        found = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        names += [p.relative_to(root).as_posix() for p in found
                  if not any(part in SKIPPED_PARTS for part in p.parts) and p.suffix != ".pyc"]
    return sorted(set(names))


def files(root: Path = ROOT, paths: tuple[str, ...] = RESULT_PATHS) -> list[str]:
    """The files the hash covers, relative to `root`, sorted (a deleted but still tracked file is left out)."""
    root = Path(root)
    names = _git_files(root, paths)
    if names is None:
        names = _walked_files(root, paths)
    return [n for n in names if (root / n).is_file()]


def digest(root: Path = ROOT, paths: tuple[str, ...] = RESULT_PATHS) -> str:
    """The hash of `files(root, paths)`: each one's path and bytes, in order."""
    h = hashlib.sha256()
    for name in files(root, paths):
        data = (Path(root) / name).read_bytes()
        h.update(name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()[:LENGTH]


@functools.cache
def result_code() -> str:
    """This checkout's hash, read once per process."""
    return digest()


def main() -> int:
    names = files()
    print(result_code(), flush=True)
    print(f"over {len(names)} files under {', '.join(RESULT_PATHS)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
