"""Markdown pieces every report section writes: a table, a number, a percentage ("n/a" when missing)."""
from __future__ import annotations

import pandas as pd


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def num(x, spec: str = ".3g") -> str:
    return "n/a" if x is None or pd.isna(x) else format(x, spec)


def pct(x) -> str:
    """A share (0.25) as a percentage with one decimal ("25.0")."""
    return "n/a" if x is None or pd.isna(x) else f"{100 * x:.1f}"
