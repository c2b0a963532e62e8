"""pagedbench.studies.replay checks its arguments before any run: each problem one "error:" line on stderr, exit 2."""
import json

import pytest

import pagedbench.studies.replay as study
import pagedbench.studies.replay_runs as replay_runs
from pagedbench.paths import TRACES

TRACE = TRACES / "sharegpt_64_seed2.jsonl"


@pytest.fixture
def runs(monkeypatch):
    """The runs the study starts: none really; the first real backend it builds stops it (exit 1). A
    profile would start before it: that fails the test."""
    started = []

    def build_real(backend, model, engine, limits, loaded=None):
        started.append((engine.label, model.name, limits.max_num_seqs, backend.kv_budget_mib))
        raise RuntimeError("stopped before running (test)")

    def no_profile(*args, **kwargs):
        raise AssertionError("profiled although --hardware was given")

    monkeypatch.setattr(replay_runs, "load_real_model", lambda backend, spec: None)
    monkeypatch.setattr(replay_runs, "build_real", build_real)
    monkeypatch.setattr(study, "profile_phase", no_profile)
    return started


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("args, message", [
    (["--hardware", "nohw"], "error: --hardware nohw: unknown hardware preset 'nohw'; available: ["),
    (["--hardware", "cpu", "--model", "nomodel"], "error: --model nomodel: unknown model preset 'nomodel'"),
    (["--hardware", "cpu", "--engines", "paged,pagd"], "error: --engines: 'pagd' is not an engine config"),
    (["--hardware", "cpu", "limits.max_num_seqs"], "error: override 'limits.max_num_seqs' is not KEY=VALUE"),
    (["--hardware", "cpu", "--real", "=2400"], "error: --real '=2400' is not KEY=VALUE"),
    (["--hardware", "cpu", "limits.max_num_sqs=8"], "error: Could not override 'limits.max_num_sqs'."),
    (["--hardware", "cpu", "--real", "limits.max_num_seqs=0"],
     "error: static (real), orca_max (real), paged (real): limits.max_num_seqs must be a positive integer, got 0"),
])
def test_a_bad_argument_is_one_error_line_before_any_run(runs, capsys, args, message):
    assert study.main([str(TRACE), *args]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(message) and all(line.startswith("error: ") for line in err)
    assert runs == []


def test_a_bad_trace_file_is_named_with_its_line(runs, capsys, tmp_path):
    assert study.main([str(tmp_path / "none.jsonl"), "--hardware", "cpu"]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'none.jsonl'}: no such trace file\n"
    bad = write(tmp_path / "bad.jsonl", [{"prompt_len": 5, "output_len": 2}, {"prompt_len": 5, "output_len": 0}])
    assert study.main([str(bad), "--hardware", "cpu"]) == 2
    assert capsys.readouterr().err == f"error: {bad} line 2: output_len must be a positive integer, got 0\n"
    unsorted = write(tmp_path / "unsorted.jsonl", [{"prompt_len": 5, "output_len": 2, "arrival_s": t} for t in (1, 0)])
    assert study.main([str(unsorted), "--hardware", "cpu", "--engines", "paged"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {unsorted.resolve()} line 2: arrival_s 0 is earlier than line 1's 1")
    assert runs == []


def test_every_problem_found_is_reported(runs, capsys):
    assert study.main([str(TRACE), "--hardware", "nohw", "--model", "nomodel", "--engines", "x", "limits"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[1].split()[0] for line in err] == ["--hardware", "--model", "--engines", "override"]
    assert runs == []


def test_good_arguments_reach_the_first_real_run(runs, capsys, tmp_path):
    assert study.main([str(TRACE), "--hardware", "cpu", "--engines", "paged", "--out", str(tmp_path),
                       "limits.max_num_seqs=4", "--real", "backend.kv_budget_mib=8"]) == 1
    assert runs == [("paged", "tiny", 4, 8)]
    assert capsys.readouterr().err.splitlines()[-1] == "error: stopped before running (test)"
