"""The report's build: its steps, their folders and stamps, what is reused and what is moved aside, and the
check that a shipped report describes this code."""
from __future__ import annotations

import json
from pathlib import Path
import shutil
import sys
import threading

import pytest

from pagedbench.paths import ROOT, module_file
from pagedbench.results.record.result_code import RESULT_PATHS, digest, files, result_code, scope_codes
from pagedbench.results.report import build, current, write
from pagedbench.results.report.steps import Step, load_steps, read_stamp, write_stamp


def test_every_step_of_the_registry_is_well_formed_and_feeds_a_section_of_the_report():
    steps = load_steps()
    assert len({s.name for s in steps}) == len(steps)
    headings = [line for line in Path(ROOT / "docs" / "REPORT.md").read_text().splitlines() if line.startswith("## ")]
    for step in steps:
        assert any(h.startswith("## " + step.section) for h in headings), step
        module = step.command[2] if step.command[1] == "-m" else step.command[1]
        assert (ROOT / module).is_file() or module_file(module) is not None, step
    sweeps = [s for s in steps if s.is_sweep]
    assert {"capacity", "memory_waste", "real_cpu"} <= {s.name for s in sweeps}
    # every experiment of conf/experiment is a step (or the step of its _seqcap variant)
    experiments = {p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml")}
    assert experiments <= {s.name for s in steps}


def test_a_steps_command_fills_in_its_folder_and_the_quick_arguments(tmp_path):
    sweep = Step("capacity", "Figure 12", ("python", "run.py", "-m", "experiment=capacity"), ("workload.seed=0",))
    assert sweep.folder(tmp_path) == tmp_path / "experiments" / "capacity"
    assert sweep.argv(tmp_path, python="PY") == ["PY", "run.py", "-m", "experiment=capacity",
                                                  f"hydra.sweep.dir={tmp_path / 'experiments' / 'capacity'}"]
    assert "workload.seed=0" in sweep.argv(tmp_path, quick=True)
    study = Step("replay", "The sim", ("python", "-m", "pagedbench.studies.replay", "T", "--out", "{out}"),
                 quick_command=("python", "-m", "pagedbench.studies.replay", "small", "--out", "{out}"))
    assert study.folder(tmp_path) == tmp_path / "replay"
    assert study.argv(tmp_path) == ["python", "-m", "pagedbench.studies.replay", "T", "--out", str(tmp_path / "replay")]
    assert study.argv(tmp_path, quick=True)[3] == "small"


def test_a_malformed_registry_is_refused_with_the_step_named(tmp_path):
    bad = tmp_path / "steps.yaml"
    bad.write_text("steps:\n  - name: a\n    command: [python, x]\n")
    with pytest.raises(ValueError, match="step 1 lacks 'section'"):
        load_steps(bad)
    bad.write_text("steps:\n  - {name: a, section: s, command: [x]}\n  - {name: a, section: s, command: [y]}\n")
    with pytest.raises(ValueError, match="two steps are named a"):
        load_steps(bad)


def fake_step(tmp_path: Path) -> Step:
    """A study step whose command writes one file and succeeds, or fails when FAIL is in its folder."""
    script = tmp_path / "study.py"
    script.write_text("import sys, pathlib\nout = pathlib.Path(sys.argv[2])\nout.mkdir(parents=True, exist_ok=True)\n"
                      "(out / 'table.csv').write_text('x\\n1\\n')\nprint('made it')\n"
                      "sys.exit(1 if (out / 'FAIL').exists() else 0)\n")
    return Step("study", "Figure 2", ("python", str(script), "--out", "{out}"), quick=("--small",))


def test_a_step_runs_once_and_is_reused_while_the_code_and_command_are_the_same(tmp_path):
    step, code = fake_step(tmp_path), result_code()
    assert not build.is_current(step, tmp_path, False, code)
    stamp = build.run_step(step, tmp_path, False, code)
    assert stamp["ok"] and stamp["result_code"] == code and stamp["wall_s"] >= 0
    assert "made it" in (step.folder(tmp_path) / build.LOG).read_text()
    assert read_stamp(step.folder(tmp_path))["command"] == step.argv(tmp_path, python=sys.executable)[1:]
    assert build.is_current(step, tmp_path, False, code)
    assert not build.is_current(step, tmp_path, False, "0" * 12)     # other code: not current
    assert not build.is_current(step, tmp_path, True, code)          # the quick command differs


def test_a_failed_step_is_stamped_as_failed_and_not_reused(tmp_path):
    step, code = fake_step(tmp_path), result_code()
    step.folder(tmp_path).mkdir(parents=True)
    (step.folder(tmp_path) / "FAIL").write_text("")
    stamp = build.run_step(step, tmp_path, False, code)
    assert not stamp["ok"] and stamp["returncode"] == 1
    assert not build.is_current(step, tmp_path, False, code)


def test_records_of_other_code_are_moved_aside_never_deleted(tmp_path):
    step, code = fake_step(tmp_path), result_code()
    build.run_step(step, tmp_path, False, "0123456789ab")
    assert build.set_aside(step, tmp_path, False, "0123456789ab") is None       # its own code: stays
    moved = build.set_aside(step, tmp_path, False, code)
    assert moved is not None and moved.parent == tmp_path / "stale" and (moved / "table.csv").is_file()
    assert not step.folder(tmp_path).exists()
    # a sweep's run folder of other code is found through its run.json, with or without a stamp
    sweep = Step("sweep", "Figure 2", ("python", "run.py", "-m", "experiment=x"))
    run = sweep.folder(tmp_path) / "engine=paged"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"result_code": "0123456789ab"}))
    assert build.foreign_codes(sweep.folder(tmp_path), code) == {"0123456789ab"}
    assert build.set_aside(sweep, tmp_path, False, code) is not None


def test_the_build_runs_only_the_steps_named_and_renders_what_it_has(tmp_path, capsys):
    assert build.main(["--root", str(tmp_path), "--steps", "nonsense"]) == 2
    assert "unknown steps nonsense" in capsys.readouterr().err
    assert build.main(["--root", str(tmp_path), "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(s.name in listed for s in load_steps()) and "to run" in listed
    assert build.main(["--root", str(tmp_path), "--render-only"]) == 2      # nothing has records: nothing written
    assert "no part of the report has runs" in capsys.readouterr().err


def report_with_records(tmp_path: Path, code: str, name: str = "beam_persistence") -> str:
    """A rendered report over one stamped step (a sim step by default) made at result code `code`."""
    step = next(s for s in load_steps() if s.name == name)
    folder = step.folder(tmp_path)
    folder.mkdir(parents=True)
    write_stamp(folder, {"ok": True, "result_code": code, "git_commit": "c" * 40})
    return f"# R\n\n## {step.section}\n\ntext\n\n" + write.records_table(tmp_path)


def test_a_report_made_by_this_code_is_current_and_one_made_by_other_code_names_its_sections(tmp_path):
    codes = scope_codes()
    here = codes["sim_nosearch"]      # beam_persistence runs the sim and no search: its runs record that scope
    text = report_with_records(tmp_path, here)
    assert ("| beam_persistence | Parallel sampling | - | " + here in text
            and text.rstrip().endswith("| yes | sim_nosearch |"))
    assert current.stale_sections(text, codes) == []
    assert current.stale_sections(report_with_records(tmp_path / "whole", codes["all"]), codes) == []
    stale = current.stale_sections(text, {"all": "0" * 12, "sim": "1" * 12, "sim_nosearch": "2" * 12})
    assert [(s.step, s.section) for s in stale] == [("beam_persistence", "Parallel sampling")]
    assert "python -m pagedbench.results.report.build --steps beam_persistence" in str(stale[0])
    with pytest.raises(ValueError, match="no \"Records behind this report\" section"):
        current.stale_sections("# R\n\n## Method\n", codes)
    listed = {"beam_persistence"}
    missing = current.missing_steps(text)
    assert {s.step for s in missing} == {s.name for s in load_steps()} - listed
    assert {(s.step, s.section) for s in missing} == {(s.name, s.section) for s in load_steps() if s.name not in listed}
    assert all(str(s).endswith(f"`python -m pagedbench.results.report.build --steps {s.step}`") for s in missing)
    assert current.missing_steps(text, [s for s in load_steps() if s.name in listed]) == []


def test_an_engine_edit_makes_the_report_stale(tmp_path):
    """A copy of the result-affecting files has this checkout's code until an engine file changes; the report
    made by the unchanged code is then stale in every section."""
    copy = tmp_path / "copy"
    for name in files(ROOT):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, copy / name)
    here = scope_codes(copy)
    assert here == scope_codes() and here["all"] == digest(copy, RESULT_PATHS) == result_code()
    text = report_with_records(tmp_path / "records", here["sim_nosearch"])
    assert current.stale_sections(text, scope_codes(copy)) == []
    engine = copy / "engines" / "kv" / "paged.py"
    engine.write_text(engine.read_text() + "\n# an engine fix\n")
    edited = scope_codes(copy)
    assert edited["sim"] != here["sim"] and edited["all"] != here["all"]
    assert [s.section for s in current.stale_sections(text, edited)] == ["Parallel sampling"]


def test_a_server_edit_leaves_the_sim_steps_current_and_makes_the_timed_ones_stale(tmp_path):
    """The server is outside the sim's scope: the sim's records stay this code's, the peers' do not."""
    copy = tmp_path / "copy"
    for name in files(ROOT):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, copy / name)
    here = scope_codes(copy)
    sim = report_with_records(tmp_path / "sim", here["sim_nosearch"])
    peers = report_with_records(tmp_path / "peers", here["all"], name="peers")
    assert current.stale_sections(sim, here) == current.stale_sections(peers, here) == []
    server = copy / "engines" / "serving" / "asgi_server.py"
    server.write_text(server.read_text() + "\n# a server fix\n")
    edited = scope_codes(copy)
    assert edited["sim"] == here["sim"] and edited["all"] != here["all"]
    assert current.stale_sections(sim, edited) == []
    assert [s.step for s in current.stale_sections(peers, edited)] == ["peers"]


def test_the_section_says_which_records_made_it(tmp_path):
    text = report_with_records(tmp_path, "0123456789ab")
    entries = write.step_records(tmp_path)
    line = write.provenance_line("## Parallel sampling and beam search (Figures 14-15)", entries)
    assert "`beam_persistence` at result code 0123456789ab (commit cccccccccccc)" in line
    assert write.provenance_line("## Method", entries) == ""
    assert "no: `python -m pagedbench.results.report.build --steps beam_persistence`" in text


def test_the_quick_build_fails_while_a_part_has_no_records_or_a_section_is_stale(tmp_path, capsys):
    """A report with one part's records renders (the others listed as not run); the quick build's render says
    that is not enough, and so it does when the records are of other code."""
    folder = next(s for s in load_steps() if s.name == "beam_persistence").folder(tmp_path)
    folder.mkdir(parents=True)
    (folder / "persistence.csv").write_text("rate,width,persistence,saving\n4,2,0,41.3\n4,2,0.95,34.7\n")
    write_stamp(folder, {"ok": True, "result_code": result_code(), "git_commit": "c" * 40})
    out = tmp_path / "REPORT.md"
    assert build.render(tmp_path, out) == 0 and "**Beam persistence**" in out.read_text()
    assert build.render(tmp_path, out, complete_or_fail=True) == 1
    assert "parts of the quick report have no records" in capsys.readouterr().err
    write_stamp(folder, {"ok": True, "result_code": "0123456789ab", "git_commit": "c" * 40})
    assert build.render(tmp_path, out, complete_or_fail=True) == 1
    assert "stale records: section \"Parallel sampling\" (step beam_persistence" in capsys.readouterr().err


def test_the_build_stops_when_the_result_affecting_code_changes_under_it(tmp_path, monkeypatch, capsys):
    """An edit under engines/ while the build runs would leave records of two codes: no step runs after it."""
    monkeypatch.setattr(build, "digest", lambda scope="all": "0123456789ab")
    monkeypatch.setattr(build, "run_step", lambda *a, **k: pytest.fail("a step ran on changed code"))
    assert build.main(["--root", str(tmp_path), "--steps", "beam_persistence,beam_check"]) == 1
    err = capsys.readouterr().err
    assert ("the result-affecting code (sim_nosearch) changed during the build" in err
            and "beam_persistence, beam_check" in err)


def test_a_step_during_which_the_code_changed_is_not_current(tmp_path, monkeypatch, capsys):
    step, code = fake_step(tmp_path), result_code()
    codes = iter([code, "0123456789ab", "0123456789ab"])   # before the step, after it, before the next
    monkeypatch.setattr(build, "digest", lambda scope="all": next(codes))
    monkeypatch.setattr(build, "load_steps", lambda: [step, Step("other", "Figure 2", ("python", "x.py"))])
    assert build.main(["--root", str(tmp_path)]) == 1
    stamp = read_stamp(step.folder(tmp_path))
    assert not stamp["ok"] and "changed while the step ran" in stamp["error"]
    assert not build.is_current(step, tmp_path, False, code)
    assert "steps left (other) were not run" in capsys.readouterr().err


def test_a_change_outside_the_sim_scope_stops_only_the_steps_of_the_whole_code(tmp_path, monkeypatch, capsys):
    """The server edited mid-build: the sim's steps (their scope unchanged) go on, the others do not run."""
    here = scope_codes()
    monkeypatch.setattr(build, "digest", lambda scope="all": here[scope] if scope.startswith("sim") else "0123456789ab")
    ran = []

    def run_step(step, root, quick, code, *args):
        ran.append((step.name, code))
        return {"step": step.name, "section": step.section, "ok": True, "wall_s": 0.0, "result_code": code}

    monkeypatch.setattr(build, "run_step", run_step)
    assert build.main(["--root", str(tmp_path), "--steps", "beam_persistence,beam_check"]) == 1
    assert ran == [("beam_persistence", here["sim_nosearch"])]
    assert "the result-affecting code (nosearch) changed during the build" in capsys.readouterr().err


def test_a_sim_step_runs_with_the_scope_in_its_environment_and_stamps_it(tmp_path):
    script = tmp_path / "study.py"
    script.write_text("import os, sys, pathlib\nout = pathlib.Path(sys.argv[2])\nout.mkdir(parents=True, exist_ok=True)\n"
                      "print('scope', os.environ.get('PAGEDBENCH_RESULT_SCOPE'))\n")
    step = Step("study", "Figure 2", ("python", str(script), "--out", "{out}"), code="sim")
    stamp = build.run_step(step, tmp_path, False, scope_codes()["sim"])
    assert stamp["ok"] and stamp["result_scope"] == "sim" and stamp["result_code"] == scope_codes()["sim"]
    assert "scope sim" in (step.folder(tmp_path) / build.LOG).read_text()


def test_parallel_untimed_steps_run_together_and_each_timed_step_runs_alone(tmp_path, monkeypatch, capsys):
    steps = [Step(name, "Figure 2", ("python", f"{name}.py"), timed=name.startswith("timed")) for name in
             ("a", "b", "c", "timed1", "timed2")]
    monkeypatch.setattr(build, "load_steps", lambda: steps)
    together = threading.Barrier(2, timeout=20)   # a and b must be running at the same time
    active, seen, lock = [], {}, threading.Lock()

    def run_step(step, root, quick, code, *args):
        with lock:
            active.append(step.name)
            seen[step.name] = sorted(active)
        if step.name in ("a", "b"):
            together.wait()
        with lock:
            active.remove(step.name)
        return {"step": step.name, "section": step.section, "ok": step.name != "c", "wall_s": 0.0,
                "result_code": code}

    monkeypatch.setattr(build, "run_step", run_step)
    monkeypatch.setattr(build, "render", lambda *args, **kwargs: 0)
    assert build.main(["--root", str(tmp_path), "--parallel", "2"]) == 1                     # c failed
    assert seen["timed1"] == ["timed1"] and seen["timed2"] == ["timed2"]
    assert set(seen) == {"a", "b", "c", "timed1", "timed2"}
    out, err = capsys.readouterr()
    table = out[out.index("step "):]
    assert [line.split()[0] for line in table.splitlines()[1:6]] == ["a", "b", "c", "timed1", "timed2"]
    assert "failed steps: c" in err
    with pytest.raises(SystemExit):
        build.main(["--parallel", "0"])
    assert "--parallel must be a positive count of steps" in capsys.readouterr().err
