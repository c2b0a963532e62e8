"""Writing one run's folder: tables, vLLM-schema result and summary, each written atomically.

A file appears under its final name only once it is complete (written to a
temporary name in the same folder, then renamed). `summary.json` is written
last, so a folder with a summary holds a finished run; a failed run leaves
`error.json` instead. Beside the summary, `vllm_result.json` holds the run
in the schema of vLLM's benchmark_serving.py `--save-result`
(results/record/vllm_result.py). Each table carries the run's metadata
block (its provenance) as parquet file metadata under the key `pagedbench`.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
import tempfile

import pandas as pd

from pagedbench.results.record.vllm_result import VLLM_RESULT, vllm_result, write as vllm_json

SUMMARY = "summary.json"
ERROR = "error.json"
REFUSED = "refused.json"      # why a run was refused this folder (another run is there, or being written)
TABLES = ("iterations.parquet", "requests.parquet")
METADATA_KEY = b"pagedbench"


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


def write_parquet(df: pd.DataFrame, path: Path, metadata: dict | None = None) -> None:
    """`df` as parquet; `metadata`, if given, as JSON in the file's schema metadata (`read_parquet_metadata`)."""
    if metadata is None:
        atomic_write(Path(path), lambda tmp: df.to_parquet(tmp, index=False))
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           METADATA_KEY: json.dumps(_clean(metadata)).encode()})
    atomic_write(Path(path), lambda tmp: pq.write_table(table, tmp))


def read_parquet_metadata(path: Path) -> dict | None:
    """The metadata block a run's table carries, or None."""
    import pyarrow.parquet as pq

    raw = (pq.read_schema(path).metadata or {}).get(METADATA_KEY)
    return json.loads(raw) if raw else None


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


def write_vllm_result(result: dict, path: Path) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            vllm_json(result, f)
            f.write("\n")
    atomic_write(path, write)


def save_tables(run_dir: Path, iterations: pd.DataFrame, requests: pd.DataFrame, metadata: dict | None = None) -> None:
    for name, df in zip(TABLES, (iterations, requests)):
        write_parquet(df, Path(run_dir) / name, metadata)


def save_run(run_dir: Path, iterations: pd.DataFrame, requests: pd.DataFrame, summary: dict,
             vllm_detailed: bool = False) -> None:
    """Both tables (with the summary's metadata block), the vLLM-schema result (its per-request lists only if
    `vllm_detailed`), then the summary: the folder then holds a finished run."""
    save_tables(run_dir, iterations, requests, summary.get("metadata"))
    write_vllm_result(vllm_result(requests, summary, vllm_detailed), Path(run_dir) / VLLM_RESULT)
    write_json(summary, Path(run_dir) / SUMMARY)


def clear_run(run_dir: Path) -> None:
    """Remove what an earlier run left in `run_dir` (summary, error, tables), before a new run starts there."""
    for name in (SUMMARY, ERROR, REFUSED, VLLM_RESULT, *TABLES):
        (Path(run_dir) / name).unlink(missing_ok=True)


def read_summary(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / SUMMARY).read_text())


def is_complete(run_dir: Path) -> bool:
    return (Path(run_dir) / SUMMARY).is_file()
