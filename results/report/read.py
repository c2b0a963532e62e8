"""What the report's sections read from an experiment's folder: its runs, its capacity table, its aggregate."""
from __future__ import annotations

from pathlib import Path
import sys

import pandas as pd

from pagedbench.results.sweeps.capacity import CAPACITY_CSV
from pagedbench.results.sweeps.collect import collect


def load(experiments: Path, name: str) -> pd.DataFrame | None:
    """Every run of outputs/experiments/NAME (summaries and config keys), or None without runs."""
    folder = experiments / name
    if not folder.is_dir():
        return None
    df = collect(folder)
    return df if len(df) else None


def load_capacity(experiments: Path, name: str = "capacity") -> pd.DataFrame | None:
    path = experiments / name / CAPACITY_CSV
    return pd.read_csv(path) if path.is_file() else None


def load_aggregate(experiments: Path, name: str) -> pd.DataFrame | None:
    """A sweep's runs as one table, or None without runs: the table its aggregate.parquet holds, gathered again
    from the run folders (`collect`), since that file is written when the sweep ends by the code of that day,
    which the result code does not cover."""
    return load(experiments, name)


def read_parquet(path: Path, **kwargs) -> pd.DataFrame:
    """`pd.read_parquet`, announced as a read of the report (`pagedbench.results.report.reads`: pyarrow opens the file
    outside Python, where no audit event sees it)."""
    from pagedbench.results.report.reads import READ_EVENT

    sys.audit(READ_EVENT, str(path))
    return pd.read_parquet(path, **kwargs)
