"""pagedbench.studies.replay's calibration protocol on this CPU with the tiny model and a six-request trace: profile
before, every engine twice on the real backend (interleaved, one loaded model), profile after, fit in
memory with the measured scheduler_s, sim once per engine, noise-floor columns; and the GPU script's form
(`--hardware NAME`: no profile)."""
import json

import numpy as np
import pandas as pd
import pytest
import yaml

import pagedbench.studies.calibration as calibration
import pagedbench.studies.replay as study
import pagedbench.studies.replay_runs as replay_runs
from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.engines.specs.presets import load_hardware
from pagedbench.paths import CONF
from pagedbench.results.report.replay_table import METRICS, format_table, misses
from pagedbench.results.report.backend_sections import section_validation
from pagedbench.studies.calibration import host_gaps, scheduler_seconds
from pagedbench.studies.profile import grid
from pagedbench.workloads import WorkloadConfig, build_workload
from pagedbench.workloads.trace_file import write_trace

ENGINES = ("static", "orca_max", "paged")


def conf_files_naming(name: str) -> set:
    """Files under conf/ that hold `name` (other sessions may write there meanwhile: only ours count)."""
    return {p for p in CONF.rglob("*") if p.is_file() and name in p.read_text(errors="replace")}


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return write_trace(build_workload(WorkloadConfig(
        name="synthetic", num_requests=6, prompt_dist={"kind": "uniform", "low": 8, "high": 32},
        output_dist={"kind": "uniform", "low": 2, "high": 8})), tmp_path_factory.mktemp("trace") / "t.jsonl")


@pytest.fixture(scope="module")
def calibrated(trace, tmp_path_factory):
    """One replay that profiles (a few shapes of the quick grid, one pass each side), with spies on the model
    loads and the real backends built."""
    out = tmp_path_factory.mktemp("replay")
    loads, builds = [], []
    real_load, real_build = replay_runs.load_real_model, replay_runs.build_real
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(calibration, "grid", lambda max_len, quick: grid(max_len, quick)[::3])   # 8 of 24 shapes
        mp.setattr(replay_runs, "load_real_model", lambda *a: loads.append(real_load(*a)) or loads[-1])
        mp.setattr(replay_runs, "build_real",
                   lambda *a, loaded: builds.append(loaded) or real_build(*a, loaded=loaded))
        before = conf_files_naming("cpu-tiny-replay")
        code = study.main([str(trace), "--out", str(out), "--profile-passes", "1", "--profile-warmup", "0",
                           "--profile-repeats", "1", "--profile-grid", "quick", "limits.max_num_seqs=4"])
        after = conf_files_naming("cpu-tiny-replay")
    return {"code": code, "out": out, "loads": loads, "builds": builds, "conf": (before, after)}


@pytest.mark.slow
def test_protocol_profiles_around_interleaved_real_runs_then_sims(calibrated):
    assert calibrated["code"] == 0
    steps = json.loads((calibrated["out"] / "protocol.json").read_text())["steps"]
    order = [(s["step"], s.get("phase") or s.get("engine"), s.get("repeat")) for s in steps]
    assert order == ([("profile", "before", None)] + [("real", e, k) for k in (1, 2) for e in ENGINES]
                     + [("profile", "after", None)] + [("sim", e, None) for e in ENGINES])
    profile = pd.read_parquet(calibrated["out"] / "profile.parquet")
    assert sorted(set(profile["phase"])) == ["after", "before"] and (profile["time_s"] > 0).all()
    # One model for the six real runs, shared through build_real(..., loaded=).
    assert len(calibrated["loads"]) == 1 and len(calibrated["builds"]) == 6
    assert all(b is calibrated["loads"][0] for b in calibrated["builds"])


@pytest.mark.slow
def test_the_fit_is_held_in_memory_with_the_measured_scheduler_time(calibrated):
    before, after = calibrated["conf"]
    assert before == after == set()   # the fitted preset was written nowhere under conf/
    out = calibrated["out"]
    hw = HardwareSpec.from_dict(yaml.safe_load((out / "preset.yaml").read_text()))
    assert hw.name == "cpu-tiny-replay" and hw.fitted["model"] == "tiny"
    assert hw.memory_bytes == load_hardware("cpu").memory_bytes   # the base preset's numbers
    frames = [pd.read_parquet(out / e / f"real_{k}" / "iterations.parquet") for e in ENGINES for k in (1, 2)]
    gaps = np.concatenate([host_gaps(f) for f in frames])
    assert hw.fitted["scheduler_s"] == pytest.approx(float(np.median(gaps)), rel=1e-5) and hw.fitted["scheduler_s"] > 0
    for engine in ENGINES:   # the sim ran on it: each iteration starts scheduler_s after the last one ended
        sim = json.loads((out / engine / "sim" / "summary.json").read_text())
        assert sim["hardware"] == hw.name
        assert host_gaps(pd.read_parquet(out / engine / "sim" / "iterations.parquet")) == \
            pytest.approx(hw.fitted["scheduler_s"], rel=1e-4)


@pytest.mark.slow
def test_the_table_has_the_noise_floor(calibrated):
    table = pd.read_csv(calibrated["out"] / "replay.csv")
    assert list(table["engine"]) == ["static", "orca-max", "paged"]
    assert table["same_schedule"].all() and (table["repeats"] == 2).all()
    noise = ["real_iteration_mape_pct"] + [f"{key}_real_spread_pct" for key, _ in METRICS]
    assert np.isfinite(table[noise].to_numpy()).all() and (table[noise].to_numpy() >= 0).all()
    assert (table["real_iteration_mape_pct"] > 0).all()   # two wall-clock runs never time alike
    for r in table.to_dict("records"):   # the real figure is the repeats' mean, its spread their range
        e = {"static": "static", "orca-max": "orca_max", "paged": "paged"}[r["engine"]]
        reps = [json.loads((calibrated["out"] / e / f"real_{k}" / "summary.json").read_text()) for k in (1, 2)]
        makespans = [s["makespan_s"] for s in reps]
        assert r["real_makespan_s"] == pytest.approx(np.mean(makespans))
        assert r["makespan_s_real_spread_pct"] == pytest.approx(100 * abs(np.diff(makespans)[0]) / np.mean(makespans))
    text = format_table(table)
    assert "real vs real" in text and "spread" in text


@pytest.mark.slow
def test_the_gpu_script_form_replays_a_named_preset_without_profiling(trace, tmp_path):
    out = tmp_path / "replay"
    assert study.main([str(trace), "--model", "tiny", "--hardware", "cpu-tiny", "--engines", ",".join(ENGINES),
                       "--out", str(out), "--real", "backend.kv_budget_mib=16"]) == 0
    steps = json.loads((out / "protocol.json").read_text())["steps"]
    assert [s["step"] for s in steps] == ["real"] * 6 + ["sim"] * 3
    assert not (out / "profile.parquet").exists()
    used = yaml.safe_load((out / "preset.yaml").read_text())
    named = load_hardware("cpu-tiny").fitted
    assert {k: v for k, v in used["fitted"].items() if k != "scheduler_s"} == \
        {k: v for k, v in named.items() if k != "scheduler_s"}
    assert used["fitted"]["scheduler_s"] > 0
    table = pd.read_csv(out / "replay.csv")
    assert (table["hardware"] == "cpu-tiny").all() and (table["kv_budget_slots"] == 2048).all()


def test_scheduler_time_is_one_median_over_every_engine():
    def run(starts, durations):
        return pd.DataFrame({"start_s": starts, "duration_s": durations})
    a = run([0.0, 1.5, 3.0], [1.0, 1.0, 1.0])     # gaps 0.5, 0.5
    b = run([0.0, 1.1, 2.2, 3.3], [1.0] * 4)      # gaps 0.1, 0.1, 0.1
    assert list(host_gaps(a)) == pytest.approx([0.5, 0.5])
    assert scheduler_seconds([a, b]) == pytest.approx(0.1)
    assert scheduler_seconds([run([0.0], [1.0])]) == 0.0


@pytest.mark.parametrize("args, message", [
    (["--hardware", "cpu", "--profile-passes", "2"], "error: --hardware cpu replays that preset as it is"),
    (["--repeats", "1"], "error: --repeats 1: the real-vs-real spread needs at least 2 runs per engine"),
    (["--profile-repeats", "0"], "error: --profile-repeats must be an integer >= 1, got 0"),
    (["--base", "nohw"], "error: --base nohw: unknown hardware preset 'nohw'"),
    (["--hardware", "cpu-tiny", "--model", "opt-125m"], "error: --hardware cpu-tiny was fitted for model 'tiny'"),
])
def test_protocol_arguments_are_checked_before_anything_runs(trace, capsys, monkeypatch, args, message):
    monkeypatch.setattr(study, "replay", lambda *a, **k: pytest.fail("ran despite a bad argument"))
    assert study.main([str(trace), *args]) == 2
    assert capsys.readouterr().err.startswith(message)


@pytest.mark.slow
def test_the_report_shows_the_protocol_beside_the_noise_floor(calibrated):
    text = section_validation(calibrated["out"]).text
    assert "Targets: per-iteration MAPE <= 8%" in text and "real vs real" in text
    assert "the profile ran 1 pass(es) of the quick grid before and 1 after the real runs" in text
    assert all(f"- {e}: " in text for e in ("static", "orca-max", "paged"))


def test_a_run_level_error_is_held_to_the_spread_or_five_percent():
    row = {"same_schedule": True, "iteration_mape_pct": 7.9}
    for key, _ in METRICS:
        row.update({f"{key}_error_pct": 4.0, f"{key}_real_spread_pct": 1.0})
    assert misses(row) == []
    row.update({"iteration_mape_pct": 8.5, "makespan_s_error_pct": -9.0, "makespan_s_real_spread_pct": 10.0,
                "ttft_s_mean_error_pct": 6.0})
    assert misses(row) == ["per-iteration MAPE 8.5% > 8%", "TTFT mean (s) +6.0% (bound 5.0%)"]
