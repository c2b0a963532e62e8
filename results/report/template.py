"""The report's prose: Jinja2 templates under docs/report/templates/, filled with the values a section computes.

Code computes tables, figures and a dict of named values per section; the sentences around them, the
headings and the commands shown live in the templates, so no result or paper number is written in a Python
string (tests/results/test_report_numbers.py checks it). The filters format a value as the report does:
`num` (a number with a format spec, "n/a" when missing), `pct` (a share as a percentage), `x` (a ratio).

    render("memory.md.j2", rows=..., paper=paper())
"""
from __future__ import annotations

import functools
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from pagedbench.paths import REPORT_SOURCES
from pagedbench.results.report.markdown import num, pct, table

TEMPLATES = REPORT_SOURCES / "templates"


@functools.cache
def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined, keep_trailing_newline=True,
                      trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters["num"] = num
    env.filters["pct"] = pct
    env.filters["x"] = lambda value, spec=".2f": num(value, spec) + "x" if num(value, spec) != "n/a" else "n/a"
    env.globals["table"] = table
    return env


def render(name: str, **values) -> str:
    """The template `name` (a file under templates/) filled with `values`; a name it uses and is not given raises
    (StrictUndefined), so a section never prints an empty hole."""
    return environment().get_template(name).render(**values)
