"""A run folder's identity and its owner: what run it holds, and which process may write it.

Every run writes `run.json` first: the fingerprint of everything that determines its result (the
resolved config, minus the keys that only change how it is shown: `progress`, `rerun`, `logger`, and the
hash of the code and data results depend on, `result_code`), with the commit (`code_version`), the config
and Hydra's own record of the call. A commit that leaves `result_code` as it was (a change to the report,
the tests, the docs) keeps every finished run reusable. A folder that holds
a finished run (`summary.json`) is reused only when both match; otherwise the run is refused with one line
naming the keys that differ, and the folder is left as it was (Hydra's `.hydra/` files, which Hydra
rewrites before any of our code runs, are put back). `rerun=true` replaces the folder's run instead.

`.lock` holds the pid and host of the process writing the folder: a second process stops with one line;
a lock whose process is gone (same host, dead pid) is taken over.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
import hashlib
import json
import logging
import math
import os
from pathlib import Path
import platform

from pagedbench.results.record.store import REFUSED, SUMMARY, atomic_write, write_json

log = logging.getLogger("pagedbench")

RUN_RECORD = "run.json"
LOCK = ".lock"
HYDRA_FILES = ("config.yaml", "overrides.yaml")
NOT_RESULT_KEYS = ("progress", "rerun", "logger")
SHOWN_DIFFERENCES = 6


class FolderRefused(Exception):
    """The run may not use this folder: it holds another run, or another process is writing it."""


def result_config(config: dict) -> dict:
    """The part of the resolved config that determines a run's result."""
    return {k: v for k, v in config.items() if k not in NOT_RESULT_KEYS}


def canonical(value):
    """`value` as JSON keeps it: a non-finite float as its name ("inf", "nan"), so it survives run.json."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


@dataclass(frozen=True, slots=True)
class RunIdentity:
    config: dict          # the resolved config, all of it
    result_code: str      # results/record/result_code.py
    overrides: tuple[str, ...] = ()
    code_version: str | None = None   # the commit, recorded beside the fingerprint but not part of it

    @property
    def keys(self) -> dict:
        """What the fingerprint covers, flat: every result-determining config key, and the result code."""
        return {**flatten(result_config(canonical(self.config))), "result_code": self.result_code}

    @property
    def fingerprint(self) -> str:
        text = json.dumps(self.keys, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def differences(self, record: dict) -> list[str]:
        """`key: theirs -> ours` for each key where `record` (a run.json) differs from this run."""
        theirs = {**flatten(result_config(record.get("config", {}))), "result_code": record.get("result_code")}
        ours = self.keys
        return [f"{k}: {theirs.get(k, '(absent)')!r} -> {ours.get(k, '(absent)')!r}"
                for k in sorted(set(theirs) | set(ours)) if theirs.get(k) != ours.get(k)]


def read_record(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / RUN_RECORD).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def write_record(run_dir: Path, identity: RunIdentity, metadata: dict) -> None:
    """run.json: the run's fingerprint, result code, code version and config, and Hydra's files as this call
    wrote them."""
    hydra = {name: (run_dir / ".hydra" / name).read_text() for name in HYDRA_FILES
             if (run_dir / ".hydra" / name).is_file()}
    write_json({"fingerprint": identity.fingerprint, "result_code": identity.result_code,
                "code_version": identity.code_version,
                "overrides": list(identity.overrides), "started": metadata.get("date"),
                "config": canonical(identity.config), "hydra_files": hydra}, run_dir / RUN_RECORD)


def restore_hydra_files(run_dir: Path) -> None:
    """Put back the `.hydra/` files of the run the folder holds (Hydra rewrote them for a refused call)."""
    record = read_record(run_dir) or {}
    for name, text in (record.get("hydra_files") or {}).items():
        atomic_write(run_dir / ".hydra" / name, lambda tmp, text=text: Path(tmp).write_text(text))


def refuse(run_dir: Path, message: str) -> FolderRefused:
    """Record why a run was refused this folder (a sweep lists it as a failure); the exception to raise."""
    restore_hydra_files(run_dir)
    write_json({"error": message}, run_dir / REFUSED)
    return FolderRefused(message)


def check_reuse(run_dir: Path, identity: RunIdentity, rerun: bool) -> dict | None:
    """The summary of the finished run in `run_dir` when it is this very run; None when the folder is free
    to run in (nothing finished there, or `rerun`). Raises FolderRefused when it holds another run."""
    run_dir = Path(run_dir)
    if not (run_dir / SUMMARY).is_file() or rerun:
        return None
    record = read_record(run_dir)
    if record is None:
        raise refuse(run_dir, f"{run_dir} holds a finished run with no {RUN_RECORD} (made before runs had a "
                              "fingerprint), so it cannot be matched to this config; rerun=true replaces it, "
                              "or choose another folder")
    if record.get("fingerprint") == identity.fingerprint:
        (run_dir / REFUSED).unlink(missing_ok=True)   # the folder holds what was asked: no refusal stands
        return json.loads((run_dir / SUMMARY).read_text())
    diffs = identity.differences(record)
    shown = "; ".join(diffs[:SHOWN_DIFFERENCES]) + (f"; and {len(diffs) - SHOWN_DIFFERENCES} more"
                                                     if len(diffs) > SHOWN_DIFFERENCES else "")
    raise refuse(run_dir, f"{run_dir} holds a finished run of another config or code ({shown}); "
                          "rerun=true replaces it, or choose another folder")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def folder_lock(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir/.lock` while the body runs; FolderRefused if a live process holds it."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK
    me = {"pid": os.getpid(), "host": platform.node()}
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                owner = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                owner = {}
            same_host = owner.get("host") == me["host"]
            if isinstance(owner.get("pid"), int) and (not same_host or _alive(owner["pid"])):
                raise refuse(run_dir, f"{run_dir} is being written by process {owner['pid']} on "
                                      f"{owner.get('host')} ({path}); wait for it, or choose another folder"
                                      + ("" if same_host else "; delete the lock if that process is gone"))
            log.warning("taking over %s: the process that held it (%s) is gone", path, owner.get("pid", "unknown"))
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        break
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
