"""The peers study's table (means, spreads, paired HTTP overheads) and its report section, on made-up runs."""
import json

import pytest

from pagedbench.results.report.peers import section_peers
from pagedbench.studies.peers import ROWS, markdown, slug, table


def runs(tok_s):
    return [{"output_tokens_per_s": t, "ttft_s_mean": 0.1, "tpot_s_mean": 0.01, "e2e_latency_s_mean": 1.0,
             "wall_s": 10.0, "num_finished": 4} for t in tok_s]


def test_the_overhead_pairs_each_round_not_the_means():
    results = {"paged (in process)": runs([100.0, 200.0]), "paged (HTTP)": runs([50.0, 200.0])}
    rows, overhead = table(results, 2)
    paged = next(r for r in rows if r["row"] == "paged (in process)")
    assert paged["output_tokens_per_s"] == 150.0
    assert (paged["output_tokens_per_s_min"], paged["output_tokens_per_s_max"]) == (100.0, 200.0)
    (o,) = overhead
    # Paired: (0.5 + 1.0) / 2 = 0.75, not the ratio of the means (125 / 150 = 0.83).
    assert o["engine"] == "paged" and o["http_over_in_process"] == pytest.approx(0.75)
    assert (o["min"], o["max"], o["pairs"]) == (0.5, 1.0, 2)
    assert "| paged | 0.75 (0.50-1.00), 2 pairs |" in markdown(rows, overhead, "cmd")


def test_every_engine_has_an_in_process_and_an_http_row_with_distinct_folders():
    names = {r.name for r in ROWS}
    for engine in ("static", "orca-max", "paged", "transformers-cb"):
        assert {f"{engine} (in process)", f"{engine} (HTTP)"} <= names
    assert len({slug(r) for r in ROWS}) == len(ROWS)


def test_the_report_section_reads_the_table_or_names_the_command(tmp_path):
    missing = section_peers(tmp_path)
    assert not missing.has_runs and "pagedbench.studies.peers" in missing.not_run[0].command
    rows, overhead = table({"paged (in process)": runs([100.0]), "paged (HTTP)": runs([90.0])}, 1)
    (tmp_path / "peers.json").write_text(json.dumps({"command": "python -m pagedbench.studies.peers --out x", "requests": 4,
                                                     "max_output_len": 128, "rate": None, "rounds": 1, "rows": rows, "overhead": overhead}))
    section = section_peers(tmp_path)
    assert section.has_runs and "| paged (HTTP) | 90.0 (90.0-90.0) |" in section.text
    assert "4 ShareGPT requests all at t = 0, outputs capped at 128 tokens" in section.text
    assert "| paged | 0.90 (0.90-0.90) | 1 |" in section.text


def test_the_section_pairs_our_server_against_transformers_serve_by_round_and_shows_the_kept_before(tmp_path,
                                                                                                   monkeypatch):
    import pagedbench.results.report.peers as peers

    results = {"paged (HTTP)": runs([120.0, 80.0]), "transformers-cb (HTTP)": runs([100.0, 100.0])}
    rows, overhead = table(results, 2)
    (tmp_path / "peers.json").write_text(json.dumps({"command": "c", "requests": 4, "max_output_len": 0,
                                                     "rate": None, "rounds": 2, "rows": rows, "overhead": overhead,
                                                     "runs": results}))
    old = tmp_path / "old"
    old.mkdir()
    before_rows, before_overhead = table({"paged (in process)": runs([100.0]), "paged (HTTP)": runs([40.0])}, 1)
    (old / "peers.json").write_text(json.dumps({"rounds": 1, "rows": before_rows, "overhead": before_overhead}))
    monkeypatch.setattr(peers, "BEFORE", old / "peers.json")
    monkeypatch.setattr(peers, "ROOT", tmp_path)
    text = section_peers(tmp_path).text
    # Paired by round: (1.2 + 0.8) / 2 = 1.00, each round's ratio its own.
    assert "paired by round: 1.00x (0.80-1.20, 2 rounds; ours 120, 80, theirs 100, 100)" in text
    assert "Before: the same study (1 rounds) with the server this one replaced, kept in `old`" in text
    assert "| paged | 0.40 (0.40-0.40) | 1 |" in text
    monkeypatch.setattr(peers, "BEFORE", tmp_path / "none.json")
    assert "Before:" not in section_peers(tmp_path).text


def test_vllm_and_the_rows_beside_it_run_only_with_its_environment(tmp_path):
    from pagedbench.studies.peers import BESIDE_VLLM, Setup, chosen_rows

    rows, notes = chosen_rows(None, Setup())
    assert not set(BESIDE_VLLM) & set(rows) and len(notes) == 3 and all("make vllm-env" in n for n in notes)
    with pytest.raises(SystemExit, match="make vllm-env"):
        chosen_rows(["vllm (HTTP)"], Setup())
    rows, _ = chosen_rows(["paged-32 (HTTP)"], Setup())          # named: ours at 32 runs without vLLM
    assert [(r.name, r.block) for r in rows] == [("paged-32 (HTTP)", 32)]
    exe = tmp_path / "vllm"
    rows, notes = chosen_rows(None, Setup(vllm=exe))
    assert rows == ROWS and notes == []
    rows, notes = chosen_rows(None, Setup(model="tiny", vllm=exe))
    assert {r.name for r in rows} == {r.name for r in ROWS if r.engine != "transformers"}
    assert [n.split(":")[0] for n in notes] == ["transformers-cb (in process)", "transformers-cb (HTTP)"]


def test_vllm_is_served_like_for_like_and_threads_are_given_to_every_row(tmp_path):
    from pagedbench.studies.peers import KV_MIB, Row, Setup, engine_args, server_cmd, thread_env

    setup = Setup(model="tiny", threads=1, vllm=tmp_path / "vllm")
    cmd = server_cmd(Row("vllm (HTTP)", "vllm", True, block=32), tmp_path / "model", 8123, tmp_path, setup)
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    assert cmd[:3] == [str(tmp_path / "vllm"), "serve", str(tmp_path / "model")]
    assert flags["--block-size"] == "32" and flags["--kv-cache-memory-bytes"] == str(KV_MIB * 2**20)
    assert flags["--dtype"] == "float32" and flags["--port"] == "8123" and flags["--max-model-len"] == "2048"
    for flag in ("--no-enable-prefix-caching", "--no-enable-chunked-prefill", "--enforce-eager"):
        assert flag in cmd
    ours = server_cmd(Row("paged-32 (HTTP)", "paged", True, block=32), tmp_path / "model", 8123, tmp_path, setup)
    assert "engine.block_size=32" in ours and "model=tiny" in ours
    assert engine_args(Row("paged (HTTP)", "paged", True), Setup(block=8)) == ["engine=paged", "engine.block_size=8"]
    assert engine_args(Row("static (HTTP)", "static", True), setup) == ["engine=static"]
    assert engine_args(Row("paged (HTTP)", "paged", True), Setup()) == ["engine=paged"]
    assert thread_env(None) == {}
    assert thread_env(1) == {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "0"}
    assert thread_env(2)["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"


VLLM_METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
# HELP vllm:other_total x
# TYPE vllm:other_total counter
vllm:other_total 1.0
"""


def test_a_schedule_is_read_from_metrics_and_summed_over_the_samples_that_ran():
    from pagedbench.studies.peers import metric_values, schedule_figures

    assert metric_values(VLLM_METRICS) == {"running": 5.0, "waiting": 4.0, "kv_usage": 0.5, "preemptions": 7.0}
    samples = [{"running": 0.0, "waiting": 9.0, "kv_usage": 0.0, "preemptions": 0.0},
               {"running": 4.0, "waiting": 2.0, "kv_usage": 0.6, "preemptions": 1.0},
               {"running": 2.0, "waiting": 0.0, "kv_usage": 0.9, "preemptions": 3.0},
               {"running": 0.0, "waiting": 0.0, "kv_usage": 0.1, "preemptions": 3.0}]
    assert schedule_figures(samples) == {"running_mean": 3.0, "running_max": 4.0, "waiting_mean": 1.0,
                                         "kv_usage_max": 0.9, "preemptions": 3.0, "samples": 4}
    assert schedule_figures([])["running_mean"] is None


def test_an_in_process_schedule_is_weighted_by_iteration_time(tmp_path):
    import pandas as pd

    from pagedbench.studies.peers import record_schedule

    assert record_schedule(tmp_path) is None
    pd.DataFrame({"duration_s": [1.0, 3.0, 1.0], "num_held": [2, 4, 0], "num_waiting": [4, 0, 0],
                  "free": [50, 25, 100], "capacity_slots": [100] * 3, "preempted": [0, 2, 1]}
                 ).to_parquet(tmp_path / "iterations.parquet")
    assert record_schedule(tmp_path) == {"running_mean": 3.5, "running_max": 4.0, "waiting_mean": 1.0,
                                         "kv_usage_max": 0.75, "preemptions": 3.0, "samples": 3}


def test_greedy_agreement_counts_tokens_up_to_each_first_difference():
    from pagedbench.studies.peers import agreement

    ours = [[1, 2, 3], [4, 5, 6], None, [7, 8]]
    theirs = [[1, 2, 3], [4, 9, 6], [1], [7, 8, 9]]
    assert agreement(ours, theirs) == {"prompts": 3, "prompts_equal": 1, "tokens_equal_before_a_difference": 6,
                                       "tokens": 8}


def test_the_table_pairs_our_server_with_vllm_and_shows_the_schedule():
    from pagedbench.studies.peers import schedule_rows, versus_vllm

    def with_schedule(tok_s, running):
        return [{**r, "schedule": {"running_mean": m, "running_max": 8.0, "waiting_mean": 1.0, "kv_usage_max": 0.5,
                                   "preemptions": 2.0, "samples": 10}} for r, m in zip(runs(tok_s), running)]

    results = {"paged-32 (HTTP)": with_schedule([50.0, 90.0], [4.0, 6.0]),
               "vllm (HTTP)": with_schedule([100.0, 100.0], [8.0, 8.0])}
    vs = versus_vllm(results)
    assert vs == {"ours_over_vllm": pytest.approx(0.7), "min": 0.5, "max": 0.9, "pairs": 2}
    schedule = schedule_rows(results)
    assert [(e["row"], e["source"], e["running_mean"], e["running_mean_min"]) for e in schedule] == \
        [("vllm (HTTP)", "/metrics", 8.0, 8.0), ("paged-32 (HTTP)", "/metrics", 5.0, 4.0)]
    rows, overhead = table(results, 2)
    text = markdown(rows, overhead, "cmd", schedule, vs, None, {"model": "tiny", "kv_mib": 64, "block_size": 16,
                                                                 "threads": 1, "max_num_seqs": 256,
                                                                 "max_num_batched_tokens": 2048})
    assert "Our paged server / vLLM, output tok/s paired by round: 0.70 (0.50-0.90), 2 pairs." in text
    assert "| paged-32 (HTTP) | /metrics | 5.0 (4.0-6.0) | 8 | 1.0 | 0.50 | 2 | 2 |" in text
    assert "Model tiny, KV 64 MiB, block size 16 (32 for vLLM and the rows beside it), model threads 1," in text


def test_the_section_shows_vllm_the_greedy_check_and_the_schedule(tmp_path):
    from pagedbench.studies.peers import schedule_rows, versus_vllm

    def with_schedule(tok_s):
        return [{**r, "schedule": {"running_mean": 6.0, "running_max": 9.0, "waiting_mean": 2.0, "kv_usage_max": 1.0,
                                   "preemptions": 3.0, "samples": 10}} for r in runs(tok_s)]

    results = {"paged-32 (HTTP)": with_schedule([60.0]), "vllm (HTTP)": with_schedule([100.0])}
    rows, overhead = table(results, 1)
    (tmp_path / "peers.json").write_text(json.dumps({
        "command": "c", "requests": 4, "max_output_len": 0, "rate": None, "rounds": 1, "rows": rows,
        "overhead": overhead, "runs": results, "schedule": schedule_rows(results), "versus_vllm": versus_vllm(results),
        "greedy": {"prompts": 8, "prompts_equal": 7, "tokens_equal_before_a_difference": 120, "tokens": 128},
        "not_run": ["transformers-cb (HTTP): not run, transformers' continuous batching cannot run tiny"],
        "setting": {"model": "tiny", "block_size": 16, "vllm_block_size": 32, "threads": 1, "kv_mib": 64,
                    "max_num_seqs": 256, "max_num_batched_tokens": 2048}}))
    text = section_peers(tmp_path).text
    assert "the tiny model" in text and "Block size 16 (our paged engine and transformers' pages; 32 for vLLM" in text
    assert "model threads: 1" in text and "- transformers-cb (HTTP): not run" in text
    assert "against vLLM behind `vllm serve`, output tok/s paired by round: 0.60x (0.60-0.60, 1 rounds)" in text
    assert "7 of 8 equal throughout; 120 of 128 tokens equal" in text
    assert "| vllm (HTTP) | /metrics | 6.0 | 9 | 2.0 | 1.00 | 3 | 1 |" in text


def test_the_sim_row_times_the_tiny_opt_on_its_fitted_preset_and_others_on_the_roofline():
    from pagedbench.engines.specs.presets import load_hardware
    from pagedbench.studies.peers import sim_hardware

    assert sim_hardware("tiny") == "cpu-tiny" and sim_hardware("tiny-llama") == "cpu"
    assert load_hardware("cpu-tiny").fitted["model"] == "tiny" and not getattr(load_hardware("cpu"), "fitted", None)
