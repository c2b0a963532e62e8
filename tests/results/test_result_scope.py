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

from pagedbench.paths import ROOT, module_file
from pagedbench.results.record.result_code import (NOT_RESULTS, RESULT_PATHS, SCOPES, SEARCH_ONLY, SIM_UNUSED, digest,
                                                   files, result_code, scope_codes)
from pagedbench.results.report.steps import load_steps

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
    assert outside_result_paths(imported) == []


def outside_result_paths(imported: list[Path], paths: tuple[str, ...] = RESULT_PATHS) -> list[str]:
    """The files of `imported` that neither lie under `paths` (the result-affecting paths) nor are listed in
    NOT_RESULTS."""
    covered = set(files(paths=paths))
    names = [p.resolve().relative_to(ROOT).as_posix() for p in imported]
    return sorted(n for n in names if n not in covered and n not in NOT_RESULTS)


def test_the_check_of_a_run_s_imports_names_a_file_left_out_of_the_result_paths():
    """frames.py builds every run's tables: taken out of the result-affecting paths, the check names it."""
    frames = ROOT / "results" / "record" / "frames.py"
    assert outside_result_paths([frames]) == []
    kept = tuple(p for p in RESULT_PATHS if p != "results/record/frames.py")
    assert outside_result_paths([frames], kept) == ["results/record/frames.py"]


def test_every_exclusion_names_a_file_outside_the_result_paths():
    covered = set(files())
    for name in NOT_RESULTS:
        assert (ROOT / name).is_file(), f"{name} names no file: a stale entry"
        assert name not in covered, f"{name} is under RESULT_PATHS and excluded too"


def import_closure(start: Path, stop: tuple[Path, ...] = (ROOT / "run.py", ROOT / "pagedbench" / "run.py")) -> set[Path]:
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
    return [s for s in load_steps() if s.code.startswith("sim")]


def test_the_sim_steps_are_the_untimed_ones_but_the_beam_check_which_runs_the_real_backend():
    steps = load_steps()
    assert {s.name for s in sim_steps()} == {s.name for s in steps if not s.timed} - {"beam_check"}
    assert all(s.code in ("all", "nosearch") for s in steps if s.timed)


@pytest.mark.parametrize("step", [s for s in sim_steps() if not s.is_sweep], ids=lambda s: s.name)
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


# --- the search's scope: what only a capacity search runs (SEARCH_ONLY), left out of the nosearch scopes.

TRACE = """
import atexit, json, runpy, sys
out = sys.argv[1]
sys.argv = ["run.py", *sys.argv[2:]]
ran = set()
def profile(frame, event, arg):   # a function called; not a module's or a class's body run as it is imported
    code, caller = frame.f_code, frame.f_back
    body = code.co_name == "<module>" or (caller is not None and caller.f_code.co_name == "<module>"
                                          and caller.f_code.co_filename == code.co_filename)
    if event == "call" and not body:
        ran.add(code.co_filename)
sys.setprofile(profile)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(ran))))
runpy.run_path("run.py", run_name="__main__")
"""


def searches(step) -> bool:
    """Whether the step runs a capacity search: its sweep's config selects the capacity sweeper (Hydra's own
    composition of its experiment and overrides), or its study can import the search."""
    if not step.is_sweep:
        module = step.command[step.command.index("-m") + 1]
        return ROOT / "results" / "sweeps" / "capacity.py" in import_closure(module_file(module))
    from hydra import compose, initialize_config_dir

    chosen = [a for a in step.command if a.startswith(("experiment=", "hydra/sweeper="))]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=chosen, return_hydra_config=True)
    return "Capacity" in str(cfg.hydra.sweeper.get("_target_", ""))


def searched_files(ran: list[str]) -> list[str]:
    names = [Path(f).resolve() for f in ran if in_tree(f)]
    return sorted(str(p.relative_to(ROOT)) for p in names
                  if any(p.relative_to(ROOT).as_posix() == s or p.relative_to(ROOT).as_posix().startswith(s + "/")
                         for s in SEARCH_ONLY))


def test_a_step_runs_a_search_exactly_when_its_scope_keeps_the_search():
    steps = load_steps()
    assert SCOPES["sim_nosearch"] == SIM_UNUSED + SEARCH_ONLY and SCOPES["nosearch"] == SEARCH_ONLY
    for step in steps:
        assert searches(step) == (step.code in ("all", "sim")), (step.name, step.code)
    assert any(searches(s) for s in steps) and not all(searches(s) for s in steps)
    # nothing run.py can import names the search (Hydra imports the plugin, which the trace below covers)
    closure = import_closure(ROOT / "run.py", stop=())
    assert searched_files([str(p) for p in closure]) == []


def test_the_search_scope_leaves_out_files_that_exist():
    every = files()
    for p in SEARCH_ONLY:
        assert any(n == p or n.startswith(p + "/") for n in every), f"{p} names no file: a stale entry"
    assert set(files(scope="sim_nosearch")) == set(files(scope="sim")) & set(files(scope="nosearch"))


@pytest.mark.slow
@pytest.mark.parametrize("setting", [
    ["-m", "experiment=swap", "workload.duration_s=20", "swap_point=b16,b64"],   # four of its 18 runs
    ["backend=real", "model=tiny", "workload.num_requests=2", "workload.max_output_len=4", "engine=paged"],
], ids=["sim-fixed-rates", "real"])
def test_a_run_at_fixed_rates_runs_no_code_of_the_search(setting, tmp_path):
    """Hydra imports its sweeper plugins in every process (so these files are imported), but a run at fixed rates
    calls none of their functions: a change to them cannot change its records."""
    out = tmp_path / "ran.json"
    done = subprocess.run([sys.executable, "-c", TRACE, str(out), *setting, "progress=false",
                           f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                           "hydra/launcher=basic"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    ran = json.loads(out.read_text())
    assert any(Path(f).name == "run.py" for f in ran)
    assert searched_files(ran) == []


@pytest.mark.slow
def test_the_trace_sees_a_search_run_the_search(tmp_path):
    out = tmp_path / "ran.json"
    done = subprocess.run([sys.executable, "-c", TRACE, str(out), "-m", "experiment=capacity", "progress=false",
                           "engine=paged", "workload=sharegpt", "workload.seed=0", "workload.duration_s=20",
                           "hydra.sweeper.precision=0.5", "hydra/launcher=basic",
                           f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "results/sweeps/capacity.py" in searched_files(json.loads(out.read_text()))
