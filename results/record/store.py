"""Writing one run's folder: tables and summary, each written atomically.

A file appears under its final name only once it is complete (written to a
temporary name in the same folder, then renamed). `summary.json` is written
last, so a folder with a summary holds a finished run.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
import tempfile

import pandas as pd

SUMMARY = "summary.json"


def atomic_write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)   # mkstemp makes files private; results are for everyone who reads the folder
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_parquet(df: pd.DataFrame, path: Path) -> None:
    atomic_write(Path(path), lambda tmp: df.to_parquet(tmp, index=False))


def _clean(value):
    """JSON has no NaN: write null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value


def write_json(obj: dict, path: Path) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(_clean(obj), f, indent=2, sort_keys=False, allow_nan=False)
            f.write("\n")
    atomic_write(Path(path), write)


def save_run(run_dir: Path, iterations: pd.DataFrame, requests: pd.DataFrame, summary: dict) -> None:
    run_dir = Path(run_dir)
    write_parquet(iterations, run_dir / "iterations.parquet")
    write_parquet(requests, run_dir / "requests.parquet")
    write_json(summary, run_dir / SUMMARY)


def read_summary(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / SUMMARY).read_text())


def is_complete(run_dir: Path) -> bool:
    return (Path(run_dir) / SUMMARY).is_file()
