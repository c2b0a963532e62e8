"""Fixtures for the workload tests: a private cache directory and the data files."""
from __future__ import annotations

from pathlib import Path
import json

import pytest

from pagedbench.paths import TEST_DATA

DATA_DIR = TEST_DATA


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch) -> Path:
    """Every test caches under its own tmp dir, never in the home cache."""
    path = tmp_path / "cache"
    monkeypatch.setenv("PAGEDBENCH_CACHE_DIR", str(path))
    return path


@pytest.fixture
def data_dir() -> Path:
    return DATA_DIR


@pytest.fixture
def write_sharegpt(tmp_path):
    """Writes a ShareGPT file whose pairs have the given token counts under
    cl100k_base ("a a a" is one token per word) and returns its path."""

    def write(lengths: list[tuple[int, int]], name: str = "sharegpt.json") -> Path:
        records = [
            {"id": f"c{i}", "conversations": [
                {"from": "human", "value": words(p)},
                {"from": "gpt", "value": words(o)},
            ]}
            for i, (p, o) in enumerate(lengths)
        ]
        path = tmp_path / name
        path.write_text(json.dumps(records, indent=1))
        return path

    return write


def words(n: int) -> str:
    return "a" + " a" * (n - 1)
