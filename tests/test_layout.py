"""The tree's layout holds: data apart from code, imports pointing one way, one argument parser per command."""
import ast
import importlib
from pathlib import Path

import pytest

from pagedbench.paths import CONF, DATA, DOCS, ROOT

LIBRARY = ("engines", "kernels", "workloads", "results", "hydra_plugins")
CODE_SUFFIXES = (".py", ".c")    # .c: the native CPU kernels (kernels/cpu_attention.c)
COMMANDS = ["pagedbench.workloads.stats", "pagedbench.workloads.write_trace", "pagedbench.results.sweeps.capacity", "pagedbench.results.sweeps.sustainable",
            "pagedbench.results.report.aggregate", "pagedbench.results.report.write", "pagedbench.studies.profile", "pagedbench.studies.fit", "pagedbench.studies.replay",
            "pagedbench.studies.beam_check", "pagedbench.studies.swap_cost", "pagedbench.studies.swap_bench", "pagedbench.studies.kernel_bench",
            "pagedbench.studies.hf_generate", "pagedbench.studies.beam_persistence", "pagedbench.studies.sensitivity", "pagedbench.studies.quiet_steps",
            "pagedbench.results.record.wandb_backfill"]


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
            if p.is_file() and p.suffix not in CODE_SUFFIXES and "__pycache__" not in p.parts]
    assert not data, f"data files inside a code folder: {data}"


@pytest.mark.parametrize("folder", [DATA, DOCS, CONF])
def test_data_folders_hold_no_python(folder):
    assert not list(folder.rglob("*.py")), f"{folder} holds Python"


@pytest.mark.parametrize("package", LIBRARY)
def test_no_library_package_imports_a_study_or_the_entry_point(package):
    bad = {str(p.relative_to(ROOT)): sorted(m for m in imported_modules(p)
                                            if m.split(".")[0] in ("run", "serve", "tests")
                                            or m.startswith(("pagedbench.studies", "pagedbench.run", "pagedbench.serve",
                                                             "pagedbench.cli")))
           for p in python_files(package)}
    assert not {k: v for k, v in bad.items() if v}


@pytest.mark.parametrize("lower, upper", [("workloads", "pagedbench.engines"), ("workloads", "pagedbench.results"),
                                          ("engines", "pagedbench.results"), ("kernels", "pagedbench.engines"),
                                          ("results/record", "pagedbench.results.sweeps"), ("results/record", "pagedbench.results.report"),
                                          ("results/sweeps", "pagedbench.results.report")])
def test_imports_point_down_the_pipeline(lower, upper):
    bad = {str(p.relative_to(ROOT)): sorted(m for m in imported_modules(p) if m == upper or m.startswith(upper + "."))
           for p in python_files(lower)}
    assert not {k: v for k, v in bad.items() if v}


def test_the_repository_root_is_computed_in_one_place():
    """Only pagedbench/__init__.py (which maps the folders) and pagedbench/paths.py read their own location;
    everything else imports its folders from there."""
    sources = [p for folder in LIBRARY + ("studies", "tests", "pagedbench") for p in python_files(folder)]
    uses = [str(p.relative_to(ROOT)) for p in sources + [ROOT / "run.py", ROOT / "serve.py"]
            if any(isinstance(n, ast.Name) and n.id == "__file__" for n in ast.walk(ast.parse(p.read_text())))]
    assert sorted(uses) == ["pagedbench/__init__.py", "pagedbench/paths.py"]


def test_no_module_imports_a_script():
    """run.py and serve.py are shims over pagedbench.run and pagedbench.serve: nothing imports them."""
    sources = [p for folder in LIBRARY + ("studies", "tests", "pagedbench", "scripts") for p in python_files(folder)]
    bad = {str(p.relative_to(ROOT)): sorted(m for m in imported_modules(p) if m in ("run", "serve", "paths"))
           for p in sources}
    assert not {k: v for k, v in bad.items() if v}


def test_the_wheel_maps_every_package_under_one_name():
    """pyproject.toml's packages: pagedbench and its subpackages, and Hydra's plugin folder; each folder with an
    __init__.py (and each config group) is listed, so a wheel installs the whole tree under `pagedbench`."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    tops = {name.split(".")[0] for name in setup["packages"]}
    assert tops == {"pagedbench", "hydra_plugins"}
    assert {k: v for k, v in setup["package-dir"].items() if k.startswith("pagedbench.")} == {
        f"pagedbench.{name}": name for name in ("engines", "kernels", "workloads", "results", "studies", "conf")}
    for folder in ("engines", "kernels", "workloads", "results", "studies"):
        for init in (ROOT / folder).rglob("__init__.py"):
            name = "pagedbench." + ".".join(init.parent.relative_to(ROOT).parts)
            assert name in setup["packages"], name


@pytest.mark.parametrize("module", COMMANDS)
def test_every_command_parses_its_arguments_with_argparse_and_has_help(module, capsys):
    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m ") and "-h, --help" in out


def step_limits(script_name: str) -> dict[str, int]:
    """A device script's steps and their time limits (a variable's default where the limit is one)."""
    import re

    script = (ROOT / "scripts" / script_name).read_text()
    limits = {}
    for name, limit in re.findall(r"^step (\w+) (\S+) ", script, flags=re.M):
        default = re.fullmatch(r'"\$\{\w+:-(\d+)\}"', limit)
        limits[name] = int(default.group(1) if default else limit)
    return limits


def test_the_gpu_checks_step_limits_fit_one_device_command():
    """One device command runs 600 s at most: the GPU run's step limits add up to 540 s or less."""
    limits = step_limits("gpu_check.sh")
    assert {"kernel_tests", "kernel_bench", "profile", "fit", "swap_bench", "replay"} <= set(limits)
    assert sum(limits.values()) <= 540, limits
    order = list(limits)
    assert order.index("kernel_tests") < order.index("kernel_bench") < order.index("profile") < order.index("replay")


def test_the_paper_experiment_fits_nine_minutes_install_included():
    limits = step_limits("gpu_claim.sh")
    assert {"wheels", "imports", "device", "trace", "claim"} <= set(limits)
    assert sum(limits.values()) <= 540, limits


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


def docstring_nodes(tree: ast.AST) -> set[int]:
    """The ids of a module's, classes' and functions' docstring constants."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def test_no_code_spells_an_engine_label():
    """An engine is spelled once, by its registry name (`orca_max`); its label (`orca-max`, what records hold) is
    derived by engines/registry.py. No string in the code (docstrings aside) spells a hyphenated label."""
    from pagedbench.engines import registry

    labels = [e.label for e in registry.ENGINES if e.label != e.name]
    assert labels == ["orca-max", "orca-pow2", "orca-oracle"]
    bad = []
    for folder in ("engines", "results", "studies", "workloads", "hydra_plugins", "pagedbench"):
        for path in python_files(folder):
            tree = ast.parse(path.read_text())
            docs = docstring_nodes(tree)
            bad += [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                    if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                    and any(label in node.value for label in labels)]
    assert not bad, "engine labels spelled in code (use engines/registry.py):\n" + "\n".join(bad)


REPORT = "pagedbench.results.report"


def report_imports(path: Path) -> set[str]:
    """The modules of the report's package (their short names) that a file imports, at the top or inside a
    function, `from pagedbench.results.report import sharing` included."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == REPORT:
            names.update(f"{REPORT}.{a.name}" for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return {n.removeprefix(REPORT + ".") for n in names if n.startswith(REPORT + ".")}


def section_modules() -> set[str]:
    """The report's section modules, read from the one list of its sections (`parts` in write.compose): the
    module each part's maker is imported from; and headline, the README's results block."""
    tree = ast.parse((ROOT / "results" / "report" / "write.py").read_text())
    source = {a.asname or a.name: node.module.removeprefix(REPORT + ".") for node in tree.body
              if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(REPORT + ".") for a in node.names}
    compose = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "compose")
    parts = next(n.value for n in ast.walk(compose) if isinstance(n, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "parts" for t in n.targets))
    makers = []
    for part in parts.elts:
        maker = part.elts[1]
        maker = maker.body if isinstance(maker, ast.Lambda) else maker
        if isinstance(maker, ast.Call) and isinstance(maker.func, ast.Name) and maker.func.id == "Section":
            maker = maker.args[0]   # Section(kernels()): the text's maker
        maker = maker.func if isinstance(maker, ast.Call) else maker
        if isinstance(maker, ast.Name) and maker.id in source:
            makers.append(source[maker.id])
    return {*makers, "headline"}


def test_report_sections_are_siblings():
    """A section module imports shared helpers (tables, bounds, markdown, read, ...) and reads its own records,
    never another section: what two sections show is computed once in a helper."""
    sections = section_modules()
    assert {"paper_sections", "sharing", "swapping", "beams", "backend_sections", "peers", "sensitivity",
            "kernels", "headline"} <= sections
    folder = ROOT / "results" / "report"
    borrowed = {name: sorted(report_imports(folder / f"{name}.py") & (sections - {name})) for name in sections}
    assert not {k: v for k, v in borrowed.items() if v}, f"sections importing other sections: {borrowed}"
