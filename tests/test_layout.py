"""The tree's layout holds: data apart from code, imports pointing one way, one argument parser per command."""
import ast
import importlib
from pathlib import Path

import pytest

from paths import CONF, DATA, DOCS, ROOT

LIBRARY = ("engines", "kernels", "workloads", "results", "hydra_plugins")
COMMANDS = ["workloads.stats", "workloads.write_trace", "results.sweeps.capacity", "results.sweeps.sustainable",
            "results.report.aggregate", "results.report.write", "studies.profile", "studies.fit", "studies.replay",
            "studies.beam_check", "studies.swap_cost", "studies.swap_bench", "studies.kernel_bench",
            "studies.hf_generate", "studies.beam_persistence", "studies.sensitivity", "studies.quiet_steps",
            "results.record.wandb_backfill"]


def python_files(folder: str) -> list[Path]:
    return [p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts]


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize("folder", LIBRARY + ("studies",))
def test_code_folders_hold_no_data_files(folder):
    data = [p.relative_to(ROOT) for p in (ROOT / folder).rglob("*")
            if p.is_file() and p.suffix != ".py" and "__pycache__" not in p.parts]
    assert not data, f"data files inside a code folder: {data}"


@pytest.mark.parametrize("folder", [DATA, DOCS, CONF])
def test_data_folders_hold_no_python(folder):
    assert not list(folder.rglob("*.py")), f"{folder} holds Python"


@pytest.mark.parametrize("package", LIBRARY)
def test_no_library_package_imports_a_study_or_the_entry_point(package):
    bad = {str(p.relative_to(ROOT)): sorted(m for m in imported_modules(p)
                                            if m.split(".")[0] in ("studies", "run", "tests"))
           for p in python_files(package)}
    assert not {k: v for k, v in bad.items() if v}


@pytest.mark.parametrize("lower, upper", [("workloads", "engines"), ("workloads", "results"),
                                          ("engines", "results"), ("kernels", "engines"),
                                          ("results/record", "results.sweeps"), ("results/record", "results.report"),
                                          ("results/sweeps", "results.report")])
def test_imports_point_down_the_pipeline(lower, upper):
    bad = {str(p.relative_to(ROOT)): sorted(m for m in imported_modules(p) if m == upper or m.startswith(upper + "."))
           for p in python_files(lower)}
    assert not {k: v for k, v in bad.items() if v}


def test_the_repository_root_is_computed_in_one_place():
    """Only paths.py reads its own location; everything else imports its folders from there."""
    sources = [p for folder in LIBRARY + ("studies", "tests") for p in python_files(folder)] + [ROOT / "run.py"]
    uses = [str(p.relative_to(ROOT)) for p in sources
            if any(isinstance(n, ast.Name) and n.id == "__file__" for n in ast.walk(ast.parse(p.read_text())))]
    assert uses == []
    assert any(isinstance(n, ast.Name) and n.id == "__file__" for n in ast.walk(ast.parse((ROOT / "paths.py").read_text())))


@pytest.mark.parametrize("module", COMMANDS)
def test_every_command_parses_its_arguments_with_argparse_and_has_help(module, capsys):
    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m ") and "-h, --help" in out


def test_the_gpu_checks_step_limits_fit_one_device_command():
    """One device command runs 600 s at most: the GPU run's step limits add up to 540 s or less."""
    import re

    script = (ROOT / "scripts" / "gpu_check.sh").read_text()
    limits = {}
    for name, limit in re.findall(r"^step (\w+) (\S+) ", script, flags=re.M):
        default = re.fullmatch(r'"\$\{\w+:-(\d+)\}"', limit)
        limits[name] = int(default.group(1) if default else limit)
    assert {"kernel_tests", "kernel_bench", "profile", "fit", "swap_bench", "replay"} <= set(limits)
    assert sum(limits.values()) <= 540, limits
    order = list(limits)
    assert order.index("kernel_tests") < order.index("kernel_bench") < order.index("profile") < order.index("replay")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_circle_type_only_or_not():
    """No module of the library reaches itself through its imports (those under TYPE_CHECKING too): a circle
    means a concept is in the wrong room."""
    files = [p for package in LIBRARY for p in python_files(package)]
    modules = {module_name(p): p for p in files}
    graph = {name: {m for m in imported_modules(path) if m in modules and m != name}
             for name, path in modules.items()}
    state: dict[str, int] = {}   # 1: on the path being walked, 2: done
    circles = []

    def walk(name: str, path: list[str]) -> None:
        state[name] = 1
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                circles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                walk(nxt, path + [nxt])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])
    assert not circles, f"import circles: {[' -> '.join(c) for c in circles]}"
