"""Two records of one run compared key by key and cell by cell: a summary, its tables, a study's output files.

Keys that depend on the machine rather than the run (`wall_s`, `iterations_per_wall_s`, `metadata`) are left
out, as are those that name the code that made a record rather than what it made (`code_version`, `git_commit`,
`git_dirty`, `result_code`: the provenance a sweep's aggregate and vllm_result.json carry), and so is anything named in `ignore` (a timed run's clock-fed keys, found by rerunning it). Equal means
equal to the bit unless a relative tolerance is given. Used by scripts/summary_diff.py (two trees' run folders)
and by the report's carry (results/report/carry.py).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

MACHINE_KEYS = frozenset({"wall_s", "iterations_per_wall_s", "metadata", "code_version", "git_commit", "git_dirty",
                          "result_code"})
TABLES = ("iterations.parquet", "requests.parquet")
COMPARED_SUFFIXES = (".json", ".csv", ".parquet")
NOT_COMPARED = frozenset({"run.json", "step.json", "error.json"})   # the record's identity and stamps, not results


def same(a, b, rel: float = 0.0) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return True
        return a == b or (rel > 0 and math.isclose(a, b, rel_tol=rel, abs_tol=0.0))
    return a == b


def same_cell(u, v) -> bool:
    """Cells equal to the bit: arrays element by element (their repr elides the middle), NA equal to NA."""
    if isinstance(u, np.ndarray) or isinstance(v, np.ndarray):
        return isinstance(u, np.ndarray) and isinstance(v, np.ndarray) and np.array_equal(u, v, equal_nan=True)
    return repr(u) == repr(v)


def diff_summaries(a: dict, b: dict, rel: float = 0.0, ignore: frozenset = frozenset()) -> list[str]:
    keys = (set(a) | set(b)) - MACHINE_KEYS - ignore
    return [f"{k}: {a.get(k, '<missing>')!r} -> {b.get(k, '<missing>')!r}" for k in sorted(keys)
            if not same(a.get(k), b.get(k), rel)]


def diff_table(a: pd.DataFrame, b: pd.DataFrame, rel: float = 0.0, ignore: frozenset = frozenset()) -> list[str]:
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return [f"shape or columns differ: {a.shape} {list(a.columns)} -> {b.shape} {list(b.columns)}"]
    out = []
    for column in a.columns:
        if column in ignore or column in MACHINE_KEYS:
            continue
        x, y = a[column], b[column]
        if x.dtype.kind == "f" and rel > 0:
            equal = (((x - y).abs() <= rel * y.abs()) | (x.isna() & y.isna())).reset_index(drop=True)
        else:
            equal = pd.Series([same_cell(u, v) for u, v in zip(x.tolist(), y.tolist())], dtype=bool)
        if not equal.all():
            first = int((~equal).to_numpy().argmax())
            out.append(f"{column}: {int((~equal).sum())} rows differ, first row {first}: {x.iloc[first]!r} -> "
                       f"{y.iloc[first]!r}")
    return out


def diff_runs(a: Path, b: Path, rel: float = 0.0, ignore: frozenset = frozenset()) -> list[str]:
    """Two run folders: the summary key by key, both tables cell by cell (a missing summary is a difference)."""
    if not (Path(b) / "summary.json").is_file():
        return [f"no summary.json in {b}"]
    problems = diff_summaries(json.loads((Path(a) / "summary.json").read_text()),
                              json.loads((Path(b) / "summary.json").read_text()), rel, ignore)
    for table in TABLES:
        problems += [f"{table} {p}" for p in diff_table(pd.read_parquet(Path(a) / table),
                                                        pd.read_parquet(Path(b) / table), rel, ignore)]
    return problems


def _read(path: Path):
    if path.suffix == ".json":
        return json.loads(path.read_text())
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)


def _flat(value, prefix: str = "") -> dict:
    """A JSON value as {dotted key: leaf}."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): value}


def compared_files(folder: Path) -> list[str]:
    """The result files under `folder` (JSON, CSV, parquet; not a run's identity or a step's stamp), relative."""
    folder = Path(folder)
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and p.suffix in COMPARED_SUFFIXES and p.name not in NOT_COMPARED
                  and ".hydra" not in p.parts and "wandb" not in p.parts)


def diff_folders(a: Path, b: Path, rel: float = 0.0, ignore: frozenset = frozenset()) -> list[str]:
    """Every result file of two output folders: the same files, JSON key by key (nested keys dotted), tables
    cell by cell; `ignore` holds "FILE:KEY" entries (a key or column of one file) left out."""
    a, b = Path(a), Path(b)
    names_a, names_b = compared_files(a), compared_files(b)
    problems = [f"{n}: only in {a}" for n in sorted(set(names_a) - set(names_b))]
    problems += [f"{n}: only in {b}" for n in sorted(set(names_b) - set(names_a))]
    for name in sorted(set(names_a) & set(names_b)):
        left = {k.split(":", 1)[1] for k in ignore if k.startswith(name + ":")}
        x, y = _read(a / name), _read(b / name)
        if isinstance(x, pd.DataFrame):
            found = diff_table(x, y, rel, frozenset(left)) if isinstance(y, pd.DataFrame) else ["not a table"]
        else:
            fx, fy = _flat(x), _flat(y)
            found = [f"{k}: {fx.get(k, '<missing>')!r} -> {fy.get(k, '<missing>')!r}"
                     for k in sorted((set(fx) | set(fy)) - left - MACHINE_KEYS)
                     if k.split(".")[0] not in MACHINE_KEYS and not same(fx.get(k), fy.get(k), rel)]
        problems += [f"{name} {p}" for p in found]
    return problems


def keys_of(folder: Path) -> frozenset:
    """Every "FILE:KEY" entry of `folder`'s result files: JSON keys (nested keys dotted) and table columns."""
    out = set()
    for name in compared_files(folder):
        value = _read(Path(folder) / name)
        keys = value.columns if isinstance(value, pd.DataFrame) else _flat(value)
        out.update(f"{name}:{k}" for k in keys)
    return frozenset(out)


def varying_keys(a: Path, b: Path) -> frozenset:
    """The "FILE:KEY" entries of two runs of the same code that differ: what the clock feeds (a timed run's
    latencies, throughputs, durations), left out when a third run is compared with them."""
    out = set()
    for problem in diff_folders(a, b):
        name, _, rest = problem.partition(" ")
        key = rest.split(":", 1)[0]
        if key and not rest.startswith(("shape", "only in", "not a table")):
            out.add(f"{name}:{key}")
    return frozenset(out)
