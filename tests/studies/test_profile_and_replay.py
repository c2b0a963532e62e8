"""The calibration loop end to end on this CPU: profile the real backend, fit a preset, replay a trace."""
import json
import shutil

import pandas as pd
import pytest

from pagedbench.studies.profile import main as profile_main
from pagedbench.studies.fit import fit, write_preset
from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.paths import CONF
from pagedbench.studies.replay import main as replay_main
from pagedbench.workloads import WorkloadConfig, build_workload
from pagedbench.workloads.trace_file import write_trace


@pytest.mark.slow
def test_profile_writes_a_table_the_fit_reads(tmp_path):
    out = tmp_path / "profile.parquet"
    assert profile_main(["--model", "tiny", "--quick", "--repeats", "2", "--warmup", "1", "--out", str(out)]) == 0
    df = pd.read_parquet(out)
    env = json.loads(out.with_suffix(".json").read_text())
    assert set(df["kind"]) == {"prefill", "decode"} and set(df["layout"]) == {"contiguous", "paged"}
    assert (df["time_s"] > 0).all() and (df["time_min_s"] <= df["time_s"]).all()
    assert env["model"] == "tiny" and env["torch_threads"] >= 1 and env["torch"]
    (tmp_path / "hardware").mkdir()
    shutil.copy(CONF / "hardware" / "cpu.yaml", tmp_path / "hardware" / "cpu.yaml")
    coef, residuals = fit(df)
    preset = write_preset(coef, residuals, env, out, "cpu", "cpu-profiled", conf_dir=tmp_path)
    import yaml
    assert HardwareSpec.from_dict(yaml.safe_load(preset.read_text())).fitted["model"] == "tiny"


@pytest.mark.slow
def test_replay_runs_both_backends_on_the_same_schedule(tmp_path, capsys):
    trace = write_trace(build_workload(WorkloadConfig(
        name="synthetic", num_requests=8, prompt_dist={"kind": "uniform", "low": 4, "high": 40},
        output_dist={"kind": "uniform", "low": 2, "high": 12})), tmp_path / "t.jsonl")
    out = tmp_path / "replay"
    assert replay_main([str(trace), "--hardware", "cpu", "--engines", "orca_max,paged", "--out", str(out),
                        "limits.max_num_seqs=4"]) == 0
    table = pd.read_csv(out / "replay.csv")
    assert list(table["engine"]) == ["orca-max", "paged"] and table["same_schedule"].all()
    assert (table["iteration_mape_pct"] >= 0).all()
    for engine in ("orca_max", "paged"):   # both backends served the same memory; the real one twice
        sim = json.loads((out / engine / "sim" / "summary.json").read_text())
        for k in (1, 2):
            real = json.loads((out / engine / f"real_{k}" / "summary.json").read_text())
            assert sim["kv_budget_slots"] == real["kv_budget_slots"]
            assert sim["num_finished"] == real["num_finished"] == 8
    assert "per-iteration MAPE" in capsys.readouterr().out
