"""The sharing sections of the report: read from capacity tables and aggregates, the paper beside ours; parts
without runs are named by their step of the build, not written as placeholders; capacities that are only bounds
say so; the criteria, the paper's numbers and the row caps quoted come from the config, paper.yaml and the records."""
import json

import pandas as pd

from pagedbench.results.report import sharing as rs, tables
from pagedbench.results.report.criteria import criteria
from pagedbench.results.report.paper import reference
from pagedbench.results.report.section import step_command
from pagedbench.results.report.swapping import section_swap


def not_run(section):
    """The commands a section names for its parts without runs."""
    return [part.command for part in section.not_run]


def capacity_rows(workloads, caps, saving, bounds=None):
    rows = []
    for workload, by_engine in zip(workloads, caps):
        for engine, cap in by_engine.items():
            for criterion in ("latency<=0.2s/tok", "goodput>=90%"):
                rows.append({"engine": engine, "workload": workload, "criterion": criterion, "capacity": cap,
                             "bound": (bounds or {}).get((workload, engine), "="), "seed": 0, "done": True,
                             "memory_saving_at_capacity": saving if engine == "paged" else 0.0,
                             "batch_size_at_capacity": 10.0})
    return pd.DataFrame(rows)


def test_sampling_section_sets_ratios_and_the_papers_saving_beside_ours(tmp_path):
    cap = capacity_rows(["alpaca_synthetic_n2", "alpaca_synthetic_n4"],
                        [{"orca-max": 1.0, "orca-pow2": 2.0, "orca-oracle": 4.0, "paged": 6.0},
                         {"orca-max": 0.5, "orca-pow2": 1.0, "orca-oracle": 2.0, "paged": 5.0}], 0.0853)
    (tmp_path / "sampling").mkdir()
    cap.to_csv(tmp_path / "sampling" / "capacity.csv", index=False)
    section = rs.section_sampling(tmp_path)
    text = section.text
    assert "| n2 | 1 | 2 | 4 | 6 | 6.00x | 3.00x | 1.50x | 8.5 | n/a | 6.09 |" in text
    assert "| n4 | 0.5 | 1 | 2 | 5 | 10.00x | 5.00x | 2.50x | 8.5 | n/a | 8.53 |" in text
    # Missing parts are named with their commands, not written as placeholders.
    assert "python run.py -m experiment=beam" in not_run(section)
    assert "python run.py -m experiment=saving" in not_run(section)
    assert section.has_runs and "Not run" not in text and "**Beam search**" not in text
    assert section.warnings == []                                    # every capacity exact: nothing to warn of
    # The goodput criterion as the config states it, the paper's claims as paper.yaml does.
    c = criteria()
    assert (f"Under the goodput criterion ({100 * c.attainment:g}% of requests within TTFT <= {c.ttft_s:g} s and "
            f"TPOT <= {c.tpot_s:g} s), paged / oracle: n2 1.50x, n4 2.50x.") in text
    paper = reference()
    assert (f"beam search {min(v for k, v in paper['figure14_15_saving_alpaca'].items() if k.startswith('beam')):.1f}"
            in text)
    assert f"grows from {paper['figure14_15_gain_basic_sampling']:.1f}x (basic sampling)" in text
    assert f"to {paper['sensitivity_claims']['15']:.1f}x (beam width 6)" in text


def write_summaries(folder, rows: list[dict]) -> list:
    """One finished run folder under `folder` per row: its summary.json holds the row."""
    runs = []
    for i, row in enumerate(rows):
        run = folder / f"run{i}"
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps(row))
        runs.append(run)
    return runs


def write_runs(folder, row_cap, kv_slots):
    """Two finished runs under `folder`, each with its run record's config (the row cap it ran with)."""
    for run in write_summaries(folder, [{"kv_budget_slots": kv_slots}] * 2):
        (run / "run.json").write_text(json.dumps({"config": {"limits": {"max_num_seqs": row_cap}}}))


def test_beam_rows_name_the_limit_that_binds_paged(tmp_path):
    experiments = tmp_path / "experiments"
    cap = capacity_rows(["alpaca_synthetic_beam4"], [{"orca-oracle": 2.0, "paged": 5.0}], 0.6)
    paged = cap["engine"] == "paged"
    cap = cap.assign(blocked_by_memory_at_capacity=0.0, blocked_by_max_num_seqs_at_capacity=0.0,
                     blocked_by_token_budget_at_capacity=0.0, mem_free_at_capacity=0.0)
    cap.loc[paged, "blocked_by_max_num_seqs_at_capacity"] = 0.9
    cap.loc[paged, "blocked_by_memory_at_capacity"] = 0.1
    cap.loc[paged, "mem_free_at_capacity"] = 0.45
    (experiments / "beam").mkdir(parents=True)
    cap.to_csv(experiments / "beam" / "capacity.csv", index=False)
    text = rs.section_sampling(experiments).text
    assert "| beam4 | n/a | n/a | 2 | 5 | n/a | n/a | 2.50x | 60.0 | row cap 90%, KV 45.0% free | 53.1 |" in text
    section = rs.section_sampling(experiments)
    raised = step_command("beam_seqcap", tmp_path)
    assert raised == ("python run.py -m experiment=beam limits.max_num_seqs=1024 experiment_name=beam_seqcap "
                      f"hydra.sweep.dir={experiments / 'beam_seqcap'}")
    missing = {part.part: part for part in section.not_run}
    assert missing["Beam search with the row cap raised (Figures 14-15)"].command == raised   # named by its step
    assert missing["Beam search with the row cap raised (Figures 14-15)"].where == experiments / "beam_seqcap"
    (experiments / "beam_seqcap").mkdir()
    seqcap = cap.assign(capacity=cap["capacity"].where(~paged, 8.0))
    seqcap.loc[paged, "blocked_by_max_num_seqs_at_capacity"] = 0.0   # now memory binds
    seqcap.to_csv(experiments / "beam_seqcap" / "capacity.csv", index=False)
    section = rs.section_sampling(experiments)
    assert raised not in not_run(section)
    assert "| beam4 | n/a | n/a | 2 | 8 | n/a | n/a | 4.00x | 60.0 | memory 10%, KV 45.0% free |" in section.text
    # Without run records the raised cap is the step's; with them, both caps are the records' own.
    assert "With the row cap raised to 1024 sequences (`python run.py -m experiment=beam " in section.text
    write_runs(experiments / "beam", 256, 15449)
    write_runs(experiments / "beam_seqcap", 512, 15072)
    text = rs.section_sampling(experiments).text
    assert "With the row cap raised from 256 to 512 sequences" in text
    assert "so the KV budget goes from 15,449 to 15,072 slots" in text
    none = cap.assign(blocked_by_max_num_seqs_at_capacity=0.0, blocked_by_memory_at_capacity=0.0)
    assert tables.binding_limit(none[none["engine"] == "paged"]) == "none (no queue)"


def test_prefix_and_chat_sections(tmp_path):
    experiments = tmp_path / "experiments"
    (experiments / "prefix").mkdir(parents=True)
    capacity_rows(["translation_1shot", "translation_5shot"],
                  [{"orca-oracle": 2.0, "paged": 3.0}, {"orca-oracle": 1.0, "paged": 3.5}], 0.1).to_csv(
        experiments / "prefix" / "capacity.csv", index=False)
    text = rs.section_prefix(experiments).text
    assert "| 1shot | n/a | n/a | 2 | 3 | n/a | n/a | 1.50x | 10.0 | n/a | 1.67x |" in text
    assert "| 5shot | n/a | n/a | 1 | 3.5 | n/a | n/a | 3.50x | 10.0 | n/a | 3.58x |" in text
    assert "generated from stated statistics" in text
    assert f"Capacity (req/s) at mean normalized latency <= {criteria().latency_s_per_token:g} s/token:" in text
    chat = rs.section_chat(experiments)
    assert [(p.part, p.command) for p in chat.not_run] == [("Chatbot (Figure 17)", step_command("chat", tmp_path))]
    assert chat.text == "" and not chat.has_runs
    (experiments / "chat").mkdir()
    capacity_rows(["sharegpt_chat"], [{"orca-oracle": 1.0, "paged": 2.0}], 0.0).to_csv(
        experiments / "chat" / "capacity.csv", index=False)
    text = rs.section_chat(experiments).text
    assert f"vLLM sustains {reference()['sensitivity_claims']['17']:g}x the request rate" in text
    assert "| latency | n/a | n/a | 1 | 2 | n/a | n/a | 2.00x |" in text


def test_swap_section_reads_the_sweep_and_the_benchmark(tmp_path):
    rows = [{"block_size": bs, "preemption": p, "steady_norm_latency_s_mean": lat, "num_preemptions": 10,
             "request_rate": rate}
            for bs, p, lat, rate in [(16, "swap", 0.1, 3.85), (16, "recompute", 0.12, 3.85), (1, "swap", 0.5, 1.9),
                                     (1, "recompute", 0.12, 1.9)]]
    write_summaries(tmp_path / "swap", rows)
    section = section_swap(tmp_path, tmp_path / "no_bench")
    text = section.text
    # Each block size at its own rate, the previous revision's latencies (4 req/s, serial swaps) beside.
    assert "| 1 | 1.9 | 0.500 | 10 | 0.120 | 10 | 62.417 / 30.939 |" in text
    assert "| 16 | 3.85 | 0.100 | 10 | 0.120 | 10 | 0.077 / 0.073 |" in text
    assert "Figure 19a on the sim" in text and "max(C + T/L, T + C/L)" in text
    assert section.has_runs
    assert [p.where for p in section.not_run] == [tmp_path / "no_bench", tmp_path / "swap_capacity"]
    # Capacity per block size and policy.
    (tmp_path / "swap_capacity").mkdir()
    cap = pd.DataFrame([{"engine": "paged", "block_size": bs, "preemption": p, "seed": seed,
                         "criterion": "latency<=0.2s/tok", "capacity": c, "bound": "=", "done": True}
                        for bs, p, seed, c in [(1, "swap", 0, 2.0), (1, "swap", 1, 2.4), (1, "recompute", 0, 2.5),
                                               (1, "recompute", 1, 2.5), (16, "swap", 0, 4.5), (16, "swap", 1, 4.5),
                                               (16, "recompute", 0, 4.0), (16, "recompute", 1, 4.5)]])
    cap.to_csv(tmp_path / "swap_capacity" / "capacity.csv", index=False)
    text = section_swap(tmp_path, tmp_path / "no_bench").text
    assert "| 1 | 2.2 (2-2.4) | 2.5 (2.5-2.5) | 0.88x (0.80-0.96) |" in text
    assert "| 16 | 4.5 (4.5-4.5) | 4.25 (4-4.5) | 1.06x (1.00-1.12) |" in text


def test_the_one_hour_check_sets_both_trace_lengths_side_by_side(tmp_path):
    for name, paged in (("sampling", 6.0), ("sampling_1h", 5.0)):
        (tmp_path / name).mkdir()
        capacity_rows(["alpaca_synthetic_n2"], [{"orca-oracle": 4.0, "paged": paged}], 0.05).to_csv(
            tmp_path / name / "capacity.csv", index=False)
    text = rs.trace_length_check(tmp_path)
    assert "| n2 | 1.50x | 1.25x |" in text and "workload.duration_s=3600" in text
    assert "hydra.sweep.dir=outputs/experiments/sampling_1h`" in text and ", seed 0, " in text
    assert rs.trace_length_check(tmp_path / "nothing") == ""


def test_a_capacity_that_is_only_a_bound_is_named_one(tmp_path):
    """paged never failed up to max_rate on n2 (>=): its capacity and ratios say "lower bound"; Orca (Max) failed
    already at min_rate on n4 (<): "upper bound", and paged over it is a lower bound. One warning names them."""
    (tmp_path / "sampling").mkdir()
    capacity_rows(["alpaca_synthetic_n2", "alpaca_synthetic_n4"],
                  [{"orca-max": 1.0, "orca-pow2": 2.0, "orca-oracle": 4.0, "paged": 1000.0},
                   {"orca-max": 0.01, "orca-pow2": 1.0, "orca-oracle": 2.0, "paged": 5.0}], 0.0853,
                  bounds={("alpaca_synthetic_n2", "paged"): ">=", ("alpaca_synthetic_n4", "orca-max"): "<"}).to_csv(
        tmp_path / "sampling" / "capacity.csv", index=False)
    section = rs.section_sampling(tmp_path)
    assert ("| n2 | 1 | 2 | 4 | 1e+03, lower bound | 1000.00x, lower bound | 500.00x, lower bound "
            "| 250.00x, lower bound | 8.5 | n/a | 6.09 |") in section.text
    assert "| n4 | 0.01, upper bound | 1 | 2 | 5 | 500.00x, lower bound | 5.00x | 2.50x | 8.5 | n/a | 8.53 |" in section.text
    assert " *" not in section.text
    assert len(section.warnings) == 1
    warning = section.warnings[0]
    assert "sampling/capacity.csv" in warning and "4 of 16 curves is only a bound" in warning
    assert "paged alpaca_synthetic_n2 seed 0 latency<=0.2s/tok: lower bound 1000 req/s (max_rate)" in warning
    assert "orca-max alpaca_synthetic_n4 seed 0 goodput>=90%: upper bound 0.01 req/s (min_rate)" in warning


def test_the_binding_limit_names_the_preemptions_behind_a_small_share():
    runs = pd.DataFrame([{"blocked_by_memory_at_capacity": 0.07, "blocked_by_max_num_seqs_at_capacity": 0.0,
                          "blocked_by_token_budget_at_capacity": 0.0, "mem_free_at_capacity": 0.024,
                          "preemptions_at_capacity": p} for p in (1000, 1500)])
    assert tables.binding_limit(runs) == "memory 7%, KV 2.4% free, 1,250 preemptions"


def test_a_sweeps_table_is_gathered_from_its_runs_not_from_the_file_written_when_it_ended(tmp_path):
    """aggregate.parquet is written when a sweep ends, by that day's code: the report gathers the runs again."""
    from pagedbench.results.report.read import load_aggregate

    write_summaries(tmp_path / "swap", [{"block_size": 16, "request_rate": 2.0},
                                        {"block_size": 1, "request_rate": 1.0}])
    pd.DataFrame([{"block_size": 99, "request_rate": 9.0}]).to_parquet(tmp_path / "swap" / "aggregate.parquet")
    table = load_aggregate(tmp_path, "swap")
    assert sorted(table["block_size"]) == [1, 16] and set(table["run_dir"]) == {"run0", "run1"}
    assert load_aggregate(tmp_path, "absent") is None
