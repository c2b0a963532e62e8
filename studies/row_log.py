"""Rows written as they are measured: each appended to a CSV and flushed at once, so a study cut short (a
device command's time limit, a crash) leaves every row it measured on disk; the final tables come after."""
from __future__ import annotations

import csv
from pathlib import Path


class RowLog:
    """`with RowLog(path) as log: log.append(row)`; the header is the first row's keys. `path` None: no file."""

    def __init__(self, path: Path | None):
        self.path = Path(path) if path is not None else None
        self._file = None
        self._writer = None

    def __enter__(self) -> "RowLog":
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w", newline="")
        return self

    def append(self, row: dict) -> None:
        if self._file is None:
            return
        if self._writer is None:
            self._writer = csv.DictWriter(self._file, fieldnames=list(row))
            self._writer.writeheader()
        self._writer.writerow(row)
        self._file.flush()

    def __exit__(self, *exc) -> None:
        if self._file is not None:
            self._file.close()
