"""mutmut's command line under pagedbench's import names: `make mutation` and scripts/mutation_report.py run it.

    python scripts/mutate.py run "pagedbench.engines.kv.paged*"
    python scripts/mutate.py results --all true

engines/kv/paged.py is imported as `pagedbench.engines.kv.paged` (pyproject.toml's package-dir). mutmut names a
file's mutants by its path (`engines.kv.paged.x_...__mutmut_3`) and turns a mutant on only inside the module of
that name, so under the path's name no mutant would ever run (mutmut stops at its check that the tests reach
the mutated functions). This runs mutmut with each mapped folder's mutants named by the package it is imported
as: `pagedbench.engines.kv.paged.x_...__mutmut_3`. It imports nothing of pagedbench: mutmut's workers fork from
this process, and a pagedbench imported here would be the checkout's, not the mutated copy the tests must import.
"""
from __future__ import annotations

from pathlib import Path
import sys
import tomllib

ROOT = Path(__file__).resolve().parent.parent


def mapped_folders(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """{folder: package} for each top folder imported under another name (engines -> pagedbench.engines)."""
    package_dir = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-dir"]
    return {folder: package for package, folder in package_dir.items() if folder != package and "/" not in folder}


def renamer(original, folders: dict[str, str]):
    """mutmut's get_mutant_name with a mapped folder's module path replaced by its package's."""
    def get_mutant_name(relative_source_path: Path, mutant_method_name: str) -> str:
        name = original(relative_source_path, mutant_method_name)
        first, dot, rest = name.partition(".")
        return f"{folders[first]}.{rest}" if dot and first in folders else name
    return get_mutant_name


def main() -> None:
    import mutmut.__main__ as cli
    import mutmut.mutation.file_mutation as file_mutation
    import mutmut.utils.format_utils as format_utils

    named = renamer(format_utils.get_mutant_name, mapped_folders())
    for module in (cli, file_mutation, format_utils):
        module.get_mutant_name = named
    cli.cli(prog_name="mutmut")


if __name__ == "__main__":
    sys.exit(main())
