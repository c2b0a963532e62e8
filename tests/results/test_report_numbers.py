"""No result, paper figure or criterion is written into the report's Python: numbers come from records, the
config and data/reference/paper.yaml, and the prose with them lives in docs/report/templates/."""
from __future__ import annotations

import ast
from pathlib import Path
import re

import pytest

from pagedbench.paths import ROOT

REPORT_CODE = ROOT / "results" / "report"
# Strings with digits that are not prose: one token with a letter in it (a key or column name such as
# p99_ttft_s or orca-pow2, a preset name, a file name, a colour, a format string such as "{:.2f}x").
NOT_PROSE = (re.compile(r"\S*[A-Za-z#]\S*"),)


def strings_with_digits(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string constant in `source` that holds a digit, but docstrings, f-string format specs
    and the non-prose forms of NOT_PROSE."""
    tree = ast.parse(source)
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skipped.add(id(first.value))
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            skipped.update(id(n) for n in ast.walk(node.format_spec))
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
                and re.search(r"\d", node.value) and not any(p.fullmatch(node.value) for p in NOT_PROSE)):
            found.append((node.lineno, node.value))
    return found


def module_float_constants(source: str) -> list[tuple[int, str]]:
    """Module-level names bound to a float literal (a threshold or a rate belongs to the config)."""
    found = []
    for node in ast.parse(source).body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, float):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found.append((node.lineno, ", ".join(ast.unparse(t) for t in targets)))
    return found


@pytest.mark.parametrize("path", sorted(REPORT_CODE.glob("*.py")), ids=lambda p: p.name)
def test_no_number_is_written_in_the_reports_python(path):
    source = path.read_text()
    assert not strings_with_digits(source), f"{path.name}: move these into a template or read them from a record"
    assert not module_float_constants(source), f"{path.name}: read these from the config"


def test_the_scan_finds_what_it_forbids_and_passes_what_it_allows():
    source = ('"""Doc 12."""\nX = 0.2\ndef f(x):\n    """Doc 3."""\n    a = f"{x:.2f} and {x:,.0f}"\n'
              '    b = "paged saves 12.3% here"\n    c = ("p99_ttft_s", "orca-pow2", "a.png", "#1f77b4", ".3g", "{:.2f}x")\n'
              '    return f"ratio {x}x at 4.56 req/s"\n')
    assert sorted(text for _, text in strings_with_digits(source)) == ["paged saves 12.3% here", "x at 4.56 req/s"]
    assert [name for _, name in module_float_constants(source)] == ["X"]
