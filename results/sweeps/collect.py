"""Reading a sweep: its run folders, finished runs as one table, failures apart.

A run folder is any folder under SWEEP_DIR (at any depth) holding a
`summary.json`, an `error.json` or a `.hydra/` folder. A folder with a
summary is a finished run (the summary is written last): it becomes one row
of the table, with the summary's keys as columns plus `run_dir` (relative to
SWEEP_DIR) and `overrides` (the run's Hydra overrides, as one shell-quoted
command line). Every other run folder is a failure: its `error.json`
message, or "unfinished" when it has neither file. Failures are listed apart
and never enter the table; so is a finished folder that refused a later run
(`refused.json`: it held another config's or code's run), beside its row.
A summary's metadata block becomes four columns, `code_version`,
`git_commit`, `git_dirty` and `result_code`: `code_versions` tells whether a
table mixes runs of different result-affecting code (runs of two commits with
one `result_code` are the same runs). `request_rate` is NaN for an offline trace (all
requests at t = 0).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
import shlex

import pandas as pd
import yaml

from pagedbench.engines import registry
from pagedbench.results.record.store import ERROR, REFUSED, SUMMARY

OVERRIDES = Path(".hydra") / "overrides.yaml"
PROVENANCE = ("code_version", "git_commit", "git_dirty", "result_code")   # from each summary's metadata block


def run_dirs(sweep_dir: Path) -> list[Path]:
    """Every run folder under `sweep_dir` (itself included), in path order; hidden folders are not entered."""
    found = []
    for here, dirs, files in os.walk(sweep_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if SUMMARY in files or ERROR in files or os.path.isdir(os.path.join(here, ".hydra")):
            found.append(Path(here))
    return found


def read_overrides(run_dir: Path) -> str:
    path = run_dir / OVERRIDES
    if not path.is_file():
        return ""
    items = yaml.safe_load(path.read_text()) or []
    return shlex.join(str(item) for item in items)


def read_error(run_dir: Path, name: str = ERROR) -> str:
    path = run_dir / name
    if not path.is_file():
        return f"unfinished: no {SUMMARY} and no {ERROR}"
    try:
        return str(json.loads(path.read_text()).get("error", "no message"))
    except (json.JSONDecodeError, AttributeError) as err:
        return f"unreadable {name}: {err}"


def _scan(sweep_dir: Path) -> tuple[list[dict], list[dict]]:
    """(finished rows, failure rows) of every run folder under `sweep_dir`."""
    sweep_dir = Path(sweep_dir)
    finished, failed = [], []
    for run_dir in run_dirs(sweep_dir):
        rel = run_dir.relative_to(sweep_dir).as_posix()
        summary_path = run_dir / SUMMARY
        if summary_path.is_file():
            try:
                summary = json.loads(summary_path.read_text())
            except json.JSONDecodeError as err:
                failed.append({"run_dir": rel, "error": f"unreadable {SUMMARY}: {err}",
                               "overrides": read_overrides(run_dir)})
                continue
            meta = summary.pop("metadata", None) or {}
            finished.append({**summary, **{k: meta.get(k) for k in PROVENANCE}, "run_dir": rel,
                             "overrides": read_overrides(run_dir)})
            if (run_dir / REFUSED).is_file():
                failed.append({"run_dir": rel, "error": "refused: " + read_error(run_dir, REFUSED),
                               "overrides": read_overrides(run_dir)})
        else:
            failed.append({"run_dir": rel, "error": read_error(run_dir), "overrides": read_overrides(run_dir)})
    return finished, failed


def _tidy(column: pd.Series) -> pd.Series:
    """Integer columns with nulls (block_size) as nullable Int64; mixed-type columns as text."""
    values = [v for v in column if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return column
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return column.astype("Int64")
    if len({type(v) for v in values}) > 1 and not all(isinstance(v, (int, float)) for v in values):
        return column.map(lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
    return column


def sort_runs(df: pd.DataFrame) -> pd.DataFrame:
    """Rows by workload, model, engine (paper order), block size, request rate (offline last), folder."""
    keys = pd.DataFrame({
        "workload": df["workload"].astype(str) if "workload" in df else "",
        "model": df["model"].astype(str) if "model" in df else "",
        "engine_rank": df["engine"].map(registry.rank) if "engine" in df else 0,
        "engine": df["engine"].astype(str) if "engine" in df else "",
        "block": pd.to_numeric(df["block_size"], errors="coerce").fillna(-1) if "block_size" in df else 0,
        "rate": pd.to_numeric(df["request_rate"], errors="coerce").fillna(math.inf)
        if "request_rate" in df else 0,
        "run_dir": df["run_dir"],
    }, index=df.index)
    order = keys.sort_values(list(keys.columns), kind="mergesort").index
    return df.loc[order].reset_index(drop=True)


def collect(sweep_dir: str | Path) -> pd.DataFrame:
    """One row per finished run under `sweep_dir`: summary keys, `run_dir`, `overrides`."""
    finished, _ = _scan(Path(sweep_dir))
    if not finished:
        return pd.DataFrame(columns=["run_dir", "overrides"])
    columns = list(dict.fromkeys(k for row in finished for k in row if k not in ("run_dir", "overrides")))
    df = pd.DataFrame([[row.get(c) for c in columns] for row in finished], columns=columns, dtype=object)
    df = df.apply(_tidy).infer_objects()
    where = pd.DataFrame({"run_dir": [row["run_dir"] for row in finished],
                          "overrides": [row["overrides"] for row in finished]}, index=df.index)
    return sort_runs(pd.concat([df, where], axis=1))   # one block: a wide frame grown a column at a time fragments


def code_versions(df: pd.DataFrame) -> list[str]:
    """The distinct result codes of a sweep table's runs (runs from before the result code was recorded:
    "unknown")."""
    if not len(df):
        return []
    if "result_code" not in df:
        return ["unknown"]
    return sorted({str(v) if isinstance(v, str) else "unknown" for v in df["result_code"]})


def mixed_code_note(df: pd.DataFrame) -> str | None:
    """One line when the table's runs come from more than one version of the result-affecting code, else None."""
    versions = code_versions(df)
    if len(versions) <= 1:
        return None
    counts = (df["result_code"] if "result_code" in df else pd.Series([None] * len(df))).fillna("unknown").value_counts()
    return (f"runs from {len(versions)} versions of the result-affecting code are mixed in this table: "
            + ", ".join(f"{v} ({counts.get(v, 0)} runs)" for v in versions))


def collect_failures(sweep_dir: str | Path) -> pd.DataFrame:
    """One row per run folder without a finished run: `run_dir`, `error`, `overrides`."""
    _, failed = _scan(Path(sweep_dir))
    return pd.DataFrame(failed, columns=["run_dir", "error", "overrides"])


def check_sweep_dir(sweep_dir: Path) -> str | None:
    """One line saying why `sweep_dir` cannot be aggregated, or None."""
    if not sweep_dir.exists():
        return f"{sweep_dir}: no such folder"
    if not sweep_dir.is_dir():
        return f"{sweep_dir}: not a folder"
    if not any((d / SUMMARY).is_file() for d in run_dirs(sweep_dir)):
        return f"{sweep_dir}: no finished run (no {SUMMARY} under it)"
    return None
