"""The hash of the code and data a result depends on, so that records outlive commits that change nothing else.

A run's numbers follow from its config and from these files: the engines, the workloads, the kernels, the
config groups and presets (conf/), the packaged traces and profiles, the summary that turns a run's rows into
its figures, the capacity search that picks the rates, run.py that drives a run and the studies (studies/)
whose tables the report reads. A commit that changes only the report's prose, a
test or the README leaves this hash as it was, so a record made before it still describes the code after it;
a commit that changes any of them makes every record before it stale.

    python -m pagedbench.results.record.result_code          # prints the hash of this checkout, and what it covers
    python -m pagedbench.results.record.result_code --scope sim   # the hash of what a run of the simulated backend runs

A scope narrows the hash to what one kind of run can execute. `sim` leaves out the files no run of the
simulated backend imports (`SIM_UNUSED`: the real backend, the server, the kernels, the HTTP and
transformers peers, the studies the report's sim steps do not run; tests/results/test_result_scope.py
checks each against what sim runs import), so that a change to the server leaves the sim's records
current. `nosearch` leaves out the capacity search (`SEARCH_ONLY`), which a run at fixed rates never runs,
and `sim_nosearch` both, so that a change to the search leaves the records of the steps that do not search
current. A run records the code of the scope it ran under: `all` unless the environment variable
PAGEDBENCH_RESULT_SCOPE names another (the report's build sets it for its sim steps, docs/report/steps.yaml
`code: sim`). A record at the `all` code of this checkout is current in every scope.

The hash is over each file's path and bytes as they are on disk (uncommitted changes included: a dirty tree
has its own hash), in a git checkout the files git tracks or would track under these paths, elsewhere every
file under them but caches.

`digests_at(commit)` computes the same hashes from a commit's tree in git's history (no checkout), so a scope
defined, or narrowed, after some records were made still applies to them: records made at a commit whose tree
has the code the records name are current in a scope when that commit's hash in the scope is this checkout's
(`pagedbench.results.report.current`).

    python -m pagedbench.results.record.result_code --at 4552d99   # a commit's hash in every scope
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import os
from pathlib import Path
import subprocess
import sys

from pagedbench.paths import ROOT

RESULT_PATHS = ("engines", "workloads", "kernels", "conf", "hydra_plugins", "data/traces", "data/profiles",
                "results/record/summary.py", "results/record/frames.py", "results/sweeps/capacity.py",
                "results/sweeps/rate_search.py", "results/sweeps/sustainable.py", "run.py",
                "pagedbench/paths.py", "pagedbench/run.py", "studies")
# What a run imports from the tree that cannot change its results, each for its reason: every other file a run
# imports lies under RESULT_PATHS (tests/results/test_result_scope.py traces runs' imports against both lists).
NOT_RESULTS = {
    "pagedbench/__init__.py": "maps the import names onto the folders (which files run, not what they compute)",
    "results/record/console.py": "prints a summary to the terminal",
    "results/record/identity.py": "a run folder's fingerprint and lock: whether to run, not what a run gives",
    "results/record/provenance.py": "the record's metadata (commit, versions, machine), not compared",
    "results/record/result_code.py": "the hash of this code, recorded beside a run's results (provenance), not compared",
    "results/record/store.py": "writes the tables and summary as they are built (atomic renames)",
    "results/record/wandb_backfill.py": "logs a finished run's folder to wandb",
    "results/record/wandb_logger.py": "logs a run live to wandb",
    "results/record/wandb_series.py": "the live wandb series of a run",
    "results/record/vllm_result.py": "vllm_result.json, a copy of the summary's figures in vLLM's schema",
    "results/record/__init__.py": "a docstring",
    "results/sweeps/sweep_dir.py": "where a sweep writes, and which of its runs failed",
    "results/sweeps/collect.py": "reads run folders once they ran (a sweep's aggregate, a failed run's message)",
    "results/report/callback.py": "a sweep's aggregate table, written after its runs",
    "results/report/__init__.py": "a docstring",
    "results/sweeps/__init__.py": "a docstring",
    "results/__init__.py": "a docstring",
}
# Under RESULT_PATHS, what no run of the simulated backend imports (a folder or a file).
SIM_UNUSED = ("engines/real", "engines/serving", "kernels", "engines/peers/http_client.py",
              "engines/peers/http_config.py", "engines/peers/server_process.py", "engines/peers/sse.py",
              "engines/peers/transformers_cb.py", "engines/peers/transformers_config.py", "studies/beam_check.py",
              "studies/calibration.py", "studies/claim.py", "studies/claim_steps.py", "studies/fit.py",
              "studies/flex_paged.py", "studies/hf_generate.py", "studies/kernel_bench.py", "studies/memory_plan.py",
              "studies/peers.py", "studies/profile.py", "studies/quiet_steps.py", "studies/replay.py",
              "studies/replay_compare.py", "studies/replay_runs.py", "studies/row_log.py", "studies/swap_bench.py",
              "studies/swap_cost.py")
# Under RESULT_PATHS, what only a capacity search runs: the search, Hydra's sweeper plugin that drives it and the
# sweeper's config. Hydra imports its plugins in every run.py process, so a run at fixed rates imports these
# files but runs none of their code (tests/results/test_result_scope.py traces such runs).
SEARCH_ONLY = ("results/sweeps/capacity.py", "results/sweeps/rate_search.py", "hydra_plugins",
               "conf/hydra/sweeper/capacity.yaml")
# scope -> what it leaves out of RESULT_PATHS: all; sim (a run of the simulated backend); nosearch (runs at fixed
# rates, no capacity search); sim_nosearch (both)
SCOPES = {"all": (), "sim": SIM_UNUSED, "nosearch": SEARCH_ONLY, "sim_nosearch": SIM_UNUSED + SEARCH_ONLY}
SCOPE_ENV = "PAGEDBENCH_RESULT_SCOPE"
LENGTH = 12      # hex digits shown and stored: 48 bits, plenty to tell a few hundred code states apart
SKIPPED_PARTS = ("__pycache__",)


def _git_files(root: Path, paths: tuple[str, ...]) -> list[str] | None:
    """The files git tracks, or would track (untracked but not ignored), under `paths`; None outside git, and in
    a folder that is not its work tree's top (a copy inside a checkout, such as mutation testing's, which the
    checkout's git ignores: its files are walked)."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, timeout=20)
        if top.returncode != 0 or Path(top.stdout.decode().strip()).resolve() != Path(root).resolve():
            return None
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


def _outside(name: str, left_out: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + "/") for p in left_out)


def files(root: Path = ROOT, paths: tuple[str, ...] = RESULT_PATHS, scope: str = "all") -> list[str]:
    """The files the hash covers, relative to `root`, sorted (a deleted but still tracked file is left out); in
    `scope`, without what it leaves out."""
    root = Path(root)
    names = _git_files(root, paths)
    if names is None:
        names = _walked_files(root, paths)
    left_out = SCOPES[scope]
    return [n for n in names if (root / n).is_file() and not _outside(n, left_out)]


def digests(root: Path = ROOT, paths: tuple[str, ...] = RESULT_PATHS) -> dict[str, str]:
    """The hash of `root` in every scope ({"all": ..., "sim": ...}): each file of `files(root, paths)` is read
    once and its path and bytes go, in order, into the hash of every scope that keeps it."""
    return _hash_entries((name, (Path(root) / name).read_bytes()) for name in files(root, paths))


def digest(root: Path = ROOT, paths: tuple[str, ...] = RESULT_PATHS, scope: str = "all") -> str:
    """The hash of `files(root, paths, scope)`: each one's path and bytes, in order."""
    return digests(root, paths)[scope]


class NotInHistory(LookupError):
    """A commit this clone's git history does not hold (a shallow clone, or another repository's)."""


def _hash_entries(entries) -> dict[str, str]:
    """The hash in every scope of (path, bytes) pairs sorted by path (what `digests` and `digests_at` feed)."""
    hashes = {scope: hashlib.sha256() for scope in SCOPES}
    for name, data in entries:
        entry = name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data
        for scope, h in hashes.items():
            if not _outside(name, SCOPES[scope]):
                h.update(entry)
    return {scope: h.hexdigest()[:LENGTH] for scope, h in hashes.items()}


@functools.cache
def _digests_at(root: Path, commit: str, paths: tuple[str, ...]) -> dict[str, str]:
    def git(*args: str, stdin: bytes | None = None) -> bytes:
        done = subprocess.run(["git", *args], cwd=root, input=stdin, capture_output=True, timeout=120)
        if done.returncode != 0:
            raise NotInHistory(f"commit {commit} is not in the git history of {root} "
                               f"({done.stderr.decode(errors='replace').strip() or 'git failed'})")
        return done.stdout

    full = git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}").decode().strip()
    blobs = []      # (path, object id) of each file under `paths`, as `git ls-files` lists them: by path
    for line in git("ls-tree", "-r", "-z", "--full-tree", full, "--", *paths).split(b"\0"):
        if not line:
            continue
        meta, name = line.split(b"\t", 1)
        mode, kind, oid = meta.split()
        if kind == b"blob" and mode != b"120000":   # a symlink's target is not its bytes on disk: not a file
            blobs.append((name.decode(), oid.decode()))
    blobs.sort()
    out = git("cat-file", "--batch", stdin="".join(f"{oid}\n" for _, oid in blobs).encode())
    entries, at = [], 0
    for name, oid in blobs:
        end = out.index(b"\n", at)
        header = out[at:end].split()
        size = int(header[2])
        entries.append((name, out[end + 1:end + 1 + size]))
        at = end + 1 + size + 1
    return _hash_entries(entries)


def digests_at(commit: str, root: Path = ROOT, paths: tuple[str, ...] = RESULT_PATHS) -> dict[str, str]:
    """The hash in every scope of the files under `paths` in `commit`'s tree, read from git's history, as
    `digests` would compute it on a clean checkout of that commit; NotInHistory when the clone lacks it."""
    return dict(_digests_at(Path(root), str(commit), tuple(paths)))


@functools.cache
def _codes() -> dict[str, str]:
    return digests()


def scope_codes(root: Path = ROOT) -> dict[str, str]:
    """The hash of `root` in every scope: {"all": ..., "sim": ...} (this checkout's read once per process)."""
    return dict(_codes()) if Path(root) == ROOT else digests(root)


def narrower(codes: dict[str, str]) -> str:
    """The codes of the scopes narrower than the whole, as a reader reads them: "3e89806aa0d6 in scope sim, ..."."""
    return ", ".join(f"{code} in scope {scope}" for scope, code in codes.items() if scope != "all")


def scope_of_environment() -> str:
    """The scope PAGEDBENCH_RESULT_SCOPE names ("all" when unset)."""
    scope = os.environ.get(SCOPE_ENV) or "all"
    if scope not in SCOPES:
        raise ValueError(f"{SCOPE_ENV}={scope!r}: the scopes are {', '.join(SCOPES)}")
    return scope


def result_code(scope: str | None = None) -> str:
    """This checkout's hash in `scope` (default: the environment's, `scope_of_environment`), read once per
    process."""
    scope = scope_of_environment() if scope is None else scope
    if scope not in SCOPES:
        raise ValueError(f"unknown result scope {scope!r}: the scopes are {', '.join(SCOPES)}")
    return _codes()[scope]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedbench.results.record.result_code",
                                     description="The hash of the code and data results depend on.")
    parser.add_argument("--scope", choices=list(SCOPES), default="all",
                        help="all: every file below; sim: without what no sim run imports; nosearch: without the "
                             "capacity search; sim_nosearch: without both")
    parser.add_argument("--at", metavar="COMMIT", help="the hash of a commit's tree in git's history, in every scope")
    args = parser.parse_args(argv)
    if args.at:
        try:
            codes = digests_at(args.at)
        except NotInHistory as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        for scope, code in codes.items():
            print(f"{code}  {scope}")
        return 0
    names = files(scope=args.scope)
    print(result_code(args.scope), flush=True)
    left_out = f", less {len(SCOPES[args.scope])} paths the scope leaves out" if SCOPES[args.scope] else ""
    print(f"over {len(names)} files under {', '.join(RESULT_PATHS)}{left_out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
