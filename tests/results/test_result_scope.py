"""The sim's result scope: the code a run of the simulated backend can execute, so that the report's sim steps
stay current when only the real backend, the server, the kernels, the HTTP client or another study changes.

The scope is RESULT_PATHS less SIM_UNUSED (results/record/result_code.py). Leaving a file out is only right
when no sim run can execute it, so each file left out is checked here against what sim runs import: run.py's
runs of the sim backend over the settings the report's sim steps use (imports recorded as they happen), and
the studies the sim steps run (every import they name, at any depth: a superset of what they can run, but for
run.py, whose sim runs the first test audits: the studies run run.py's `run` on sim configs)."""
import ast
import json
from pathlib import Path
import subprocess
import sys

import pytest

from paths import ROOT
from results.record.result_code import RESULT_PATHS, SIM_UNUSED, digest, files, result_code, scope_codes
from results.report.steps import load_steps

AUDIT = """
import atexit, json, runpy, sys
out = sys.argv[1]
sys.argv = ["run.py", *sys.argv[2:]]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(
    m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)))))
runpy.run_path("run.py", run_name="__main__")
"""
SIM_SETTINGS = [
    ["engine=paged", "workload=sharegpt", "engine.preemption=swap", "sampling=beam4", "swap_space=64"],
    ["engine=orca_max", "workload=alpaca", "sampling=n4"],
    ["engine=static", "workload=chat"],
    ["engine=paged", "model=llama-13b", "workload=translation", "workload.num_shots=1"],
    ["engine=paged", "hardware=cpu-tiny", "model=tiny", "stop_at_last_arrival=true", "workload.arrival=poisson",
     "workload.request_rate=1"],
]


def left_out(path: Path) -> bool:
    name = path.resolve().relative_to(ROOT).as_posix()
    return any(name == p or name.startswith(p.rstrip("/") + "/") for p in SIM_UNUSED)


def in_tree(path: str) -> bool:
    return Path(path).resolve().is_relative_to(ROOT) and ".venv" not in Path(path).parts


@pytest.mark.slow
@pytest.mark.parametrize("setting", SIM_SETTINGS, ids=lambda s: s[0] + "," + s[1])
def test_a_sim_run_imports_nothing_the_sim_scope_leaves_out(setting, tmp_path):
    out = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", AUDIT, str(out), "backend=sim", "workload.num_requests=12",
                           "progress=false", f"hydra.run.dir={tmp_path / 'run'}", *setting],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = [Path(f) for f in json.loads(out.read_text()) if in_tree(f)]
    assert any(p.name == "run.py" for p in imported)
    assert [str(p) for p in imported if left_out(p)] == []


def module_file(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def import_closure(start: Path, stop: tuple[Path, ...] = (ROOT / "run.py",)) -> set[Path]:
    """Every file of the tree that `start` imports, at any depth, at the top or inside a function (with the
    packages' __init__ files): all it could run; a file of `stop` is listed but not followed."""
    seen, todo = set(), [start]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        if path in stop:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                parts = name.split(".")
                for i in range(1, len(parts) + 1):
                    found = module_file(".".join(parts[:i]))
                    if found is not None:
                        todo.append(found)
    return seen


def sim_steps():
    return [s for s in load_steps() if s.code == "sim"]


def test_the_sim_steps_are_the_untimed_ones_but_the_beam_check_which_runs_the_real_backend():
    steps = load_steps()
    assert {s.name for s in steps if s.code == "sim"} == {s.name for s in steps if not s.timed} - {"beam_check"}
    assert all(s.code == "all" for s in steps if s.timed)


@pytest.mark.parametrize("step", [s for s in load_steps() if s.code == "sim" and not s.is_sweep],
                         ids=lambda s: s.name)
def test_a_sim_study_can_import_nothing_the_sim_scope_leaves_out(step):
    module = step.command[step.command.index("-m") + 1]
    closure = import_closure(module_file(module))
    assert [str(p.relative_to(ROOT)) for p in closure if left_out(p)] == []


def test_run_py_is_what_sim_studies_run_and_the_scope_keeps_it():
    assert not left_out(ROOT / "run.py") and not left_out(ROOT / "studies" / "sensitivity.py")


def test_the_scope_leaves_out_only_files_that_exist_under_the_result_paths():
    every = files()
    for p in SIM_UNUSED:
        assert any(n == p or n.startswith(p + "/") for n in every), f"{p} names no file: a stale entry"
    sim = files(scope="sim")
    assert set(sim) < set(every) and not any(left_out(ROOT / n) for n in sim)


def test_a_change_the_sim_scope_leaves_out_keeps_the_sim_code_and_moves_the_whole(tmp_path):
    copy = tmp_path / "tree"
    for name in files():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes((ROOT / name).read_bytes())
    before = scope_codes(copy)
    (copy / "engines" / "serving" / "asgi_server.py").write_text("# edited\n")
    after = scope_codes(copy)
    assert after["sim"] == before["sim"] and after["all"] != before["all"]
    (copy / "engines" / "sim" / "cost_model.py").write_text("# edited\n")
    assert scope_codes(copy)["sim"] != before["sim"]


def test_the_scope_is_chosen_by_argument_or_by_the_build_s_environment(monkeypatch):
    monkeypatch.delenv("PAGEDBENCH_RESULT_SCOPE", raising=False)
    assert result_code() == result_code("all") == digest()
    assert result_code("sim") == digest(scope="sim") != result_code()
    monkeypatch.setenv("PAGEDBENCH_RESULT_SCOPE", "sim")
    assert result_code() == result_code("sim")
    monkeypatch.setenv("PAGEDBENCH_RESULT_SCOPE", "gpu")
    with pytest.raises(ValueError, match="PAGEDBENCH_RESULT_SCOPE"):
        result_code()
